// The one N-API boundary of the native runtime.
//
// Everything below returns or rejects with a JS Error carrying a Loom error `code` (from
// core/src/errors/registry.ts); C++ never throws across the boundary (node-addon-api is built
// with NAPI_DISABLE_CPP_EXCEPTIONS, and native code reports failure through loom::Status).
// Loading and stepping run on libuv's worker threads (Napi::AsyncWorker) and settle Promises;
// stepNow runs a step on the JS thread instead, for steps the caller knows to be short (handing a
// step to a worker and back costs two thread wake-ups, a large share of a tiny model's step);
// typed arrays are checked here, with their dtype and every dimension in the message, so the
// model code receives only plain pointers and checked lengths.
#include <napi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cpu/cpu-device.h"
#include "cpu/simd-config.h"
#include "cpu/read-bandwidth.h"
#include "device-factory.h"
#include "model/llama-model.h"

namespace {

using loom::Status;

// A JS Error whose `code` is the Status code; native-step-runner.ts maps it to a LoomError.
Napi::Error make_error(Napi::Env env, const Status& st) {
  Napi::Error err = Napi::Error::New(env, st.message);
  err.Set("code", Napi::String::New(env, st.code));
  return err;
}

// Synchronous failure path: schedule the JS exception and return undefined (with
// NAPI_DISABLE_CPP_EXCEPTIONS nothing unwinds through C++ frames).
Napi::Value throw_status(Napi::Env env, const Status& st) {
  make_error(env, st).ThrowAsJavaScriptException();
  return env.Undefined();
}

Status bad_arg(const std::string& msg) { return Status::Error("native_error", msg); }

// Int32 fields per row of step.rows (step-packer.ts ROW_FIELDS; the layout is Step's comment).
constexpr int64_t kRowFields = 13;

const char* typed_array_name(napi_typedarray_type t) {
  switch (t) {
    case napi_int8_array: return "Int8Array";
    case napi_uint8_array: return "Uint8Array";
    case napi_uint8_clamped_array: return "Uint8ClampedArray";
    case napi_int16_array: return "Int16Array";
    case napi_uint16_array: return "Uint16Array";
    case napi_int32_array: return "Int32Array";
    case napi_uint32_array: return "Uint32Array";
    case napi_float32_array: return "Float32Array";
    case napi_float64_array: return "Float64Array";
    default: return "a BigInt array";
  }
}

// Read obj[key] as a typed array of `type`; `expected` >= 0 checks the element count, and
// `shape` describes it for the message ("[T=5]", "[16, 576]").
template <typename T>
Status typed(const Napi::Object& obj, const char* key, napi_typedarray_type type, const char* what, int64_t expected,
             const std::string& shape, T** data, int64_t* len) {
  Napi::Value v = obj.Get(key);
  // Built only on the error paths: this runs for every array of every step.
  auto expect = [&] { return std::string(typed_array_name(type)) + " " + shape; };
  if (!v.IsTypedArray()) return bad_arg(std::string(what) + ": expected " + expect() + ", got a non-typed-array value");
  Napi::TypedArray ta = v.As<Napi::TypedArray>();
  if (ta.TypedArrayType() != type)
    return bad_arg(std::string(what) + ": expected " + expect() + ", got " + typed_array_name(ta.TypedArrayType()) +
                   " [" + std::to_string(ta.ElementLength()) + "]");
  if (expected >= 0 && int64_t(ta.ElementLength()) != expected)
    return bad_arg(std::string(what) + ": expected " + expect() + " (" + std::to_string(expected) + " values), got " +
                   typed_array_name(type) + " [" + std::to_string(ta.ElementLength()) + "]");
  *data = reinterpret_cast<T*>(static_cast<uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset());
  *len = int64_t(ta.ElementLength());
  return Status::Ok();
}

// obj[key] as a double; a missing or non-numeric field names the key.
Status number(const Napi::Object& obj, const char* key, double* out) {
  Napi::Value v = obj.Get(key);
  if (!v.IsNumber()) return bad_arg(std::string("field `") + key + "` must be a number");
  *out = v.As<Napi::Number>().DoubleValue();
  return Status::Ok();
}

template <typename T>
Status integer(const Napi::Object& obj, const char* key, T* out) {
  double d;
  LOOM_RETURN_IF_ERROR(number(obj, key, &d));
  *out = T(d);
  return Status::Ok();
}

// Run `work`, turning a C++ exception (an allocation that failed) into a Status: none may cross
// the N-API boundary.
Status guarded(const std::function<Status()>& work) {
  try {
    return work();
  } catch (const std::bad_alloc&) {
    return Status::Error("native_error", "out of memory");
  } catch (...) {
    return Status::Error("native_error", "unexpected C++ exception");
  }
}

// An AsyncWorker that runs `work` off the JS thread and settles a Promise with `result` or
// with the Status error. `keep` pins JS objects (typed arrays) for the duration.
class PromiseWorker : public Napi::AsyncWorker {
 public:
  PromiseWorker(Napi::Env env, std::function<Status()> work, std::function<Napi::Value(Napi::Env)> result,
                std::function<void()> done = nullptr)
      : Napi::AsyncWorker(env, "loom-native"),
        deferred_(Napi::Promise::Deferred::New(env)),
        work_(std::move(work)),
        result_(std::move(result)),
        done_(std::move(done)) {}

  void keep(Napi::Value v) { keep_.push_back(Napi::Persistent(v)); }
  Napi::Promise promise() { return deferred_.Promise(); }

  void Execute() override { status_ = guarded(work_); }
  void OnOK() override {
    Napi::Env env = Env();
    if (done_) done_();
    if (status_.ok())
      deferred_.Resolve(result_ ? result_(env) : env.Undefined());
    else
      deferred_.Reject(make_error(env, status_).Value());
  }
  void OnError(const Napi::Error& e) override {
    if (done_) done_();
    deferred_.Reject(e.Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::function<Status()> work_;
  std::function<Napi::Value(Napi::Env)> result_;
  std::function<void()> done_;
  std::vector<Napi::Reference<Napi::Value>> keep_;
  Status status_;
};

// One loaded model on one device. JS: new Runtime(); await load(desc); step(...); close().
class Runtime : public Napi::ObjectWrap<Runtime> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Runtime",
                       {InstanceMethod("load", &Runtime::Load), InstanceMethod("loadLora", &Runtime::LoadLora),
                        InstanceMethod("loadMedusa", &Runtime::LoadMedusa), InstanceMethod("unload", &Runtime::Unload),
                        InstanceMethod("step", &Runtime::Step), InstanceMethod("stepNow", &Runtime::StepNow),
                        InstanceMethod("profile", &Runtime::Profile),
                        InstanceMethod("close", &Runtime::Close)});
  }
  explicit Runtime(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Runtime>(info) {}

 private:
  std::unique_ptr<loom::Device> device_;
  std::unique_ptr<loom::LlamaModel> model_;
  bool loaded_ = false, closed_ = false;
  int inflight_ = 0;  // workers touching model_ (JS thread only)

  Status usable() const {
    if (closed_) return Status::Error("native_error", "the native runtime is closed");
    if (!loaded_) return Status::Error("backend_not_ready", "the model is not loaded");
    return Status::Ok();
  }

  // Queue a worker that uses the model; the model is freed by close() or, if close() came while
  // the worker ran, when the last worker finishes.
  Napi::Value queue(Napi::Env env, std::function<Status()> work, std::function<Napi::Value(Napi::Env)> result,
                    std::initializer_list<Napi::Value> keep) {
    inflight_++;
    auto* w = new PromiseWorker(env, std::move(work), std::move(result), [this] {
      inflight_--;
      if (closed_ && inflight_ == 0) release();
    });
    w->keep(Value());
    for (auto& v : keep) w->keep(v);
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
  }

  void release() {
    model_.reset();
    device_.reset();
  }

  // load(desc): desc = { config: {...}, options: {...}, files: string[], tensors: [{name, file,
  // offset, nbytes, dtype, shape}] } -> Promise<{ dtype, threads }>
  Napi::Value Load(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (closed_ || loaded_ || inflight_) return throw_status(env, bad_arg("load() may be called once, before close()"));
    if (!info[0].IsObject()) return throw_status(env, bad_arg("load(desc): desc must be an object"));
    Napi::Object desc = info[0].As<Napi::Object>();
    loom::ModelConfig cfg;
    loom::RuntimeOptions opt;
    std::vector<std::string> files;
    std::vector<loom::TensorDesc> tensors;
    double kv_cache_bytes = 0;
    Status st = parse_load(desc, &cfg, &opt, &kv_cache_bytes, &files, &tensors);
    if (!st.ok()) return throw_status(env, st);
    // desc.device: cpu | cuda | auto (auto: cuda when usable here, else cpu); cuda_unavailable
    // names the cause and the fix when cuda was asked for and cannot run.
    const std::string device_name = desc.Get("device").IsString() ? desc.Get("device").ToString().Utf8Value() : "cpu";
    st = loom::create_device(device_name, opt.threads, &device_);
    if (!st.ok()) return throw_status(env, st);
    if (opt.weights_int8 && std::string(device_->name()) != "cpu")
      return throw_status(env, Status::Error("model_invalid", std::string("weights: int8 is a cpu option for now; the ") +
                                                                   device_->name() + " device serves weights as stored "
                                                                   "(use weights: auto, or device: cpu)"));
    if (opt.kv_blocks == 0) {
      // K and V of every layer, Hkv * D values each per token, in the device's KV dtype.
      const double per_token =
          double(cfg.layers) * 2 * double(cfg.kv_heads * cfg.head_dim) * loom::dtype_size(device_->kv_dtype());
      const double tokens = std::floor(kv_cache_bytes / per_token);
      opt.kv_blocks = int32_t(std::max(1.0, std::min(std::ceil(tokens / opt.kv_block_size), 2147483647.0)));
    }
    model_ = std::make_unique<loom::LlamaModel>(device_.get(), cfg, opt);
    loom::LlamaModel* model = model_.get();
    return queue(
        env, [model, files, tensors]() mutable { return model->load(files, std::move(tensors)); },
        [this, model](Napi::Env e) {
          loaded_ = true;
          Napi::Object out = Napi::Object::New(e);
          out.Set("dtype", loom::dtype_name(model->dtype()));
          out.Set("device", device_->name());
          out.Set("kvBlocks", model->options().kv_blocks);
          const bool cpu = std::string(device_->name()) == "cpu";  // the addon is built without RTTI
          out.Set("threads", cpu ? static_cast<loom::CpuDevice*>(device_.get())->threads() : 0);
          return Napi::Value(out);
        },
        {});
  }

  // Read the load descriptor built by native-step-runner.ts: config numbers, runtime options,
  // file paths and the tensor table. Impossible dimensions fail as model_invalid here, before
  // any memory is mapped.
  static Status parse_load(const Napi::Object& desc, loom::ModelConfig* cfg, loom::RuntimeOptions* opt,
                           double* kv_cache_bytes, std::vector<std::string>* files,
                           std::vector<loom::TensorDesc>* tensors) {
    if (!desc.Get("config").IsObject() || !desc.Get("options").IsObject() || !desc.Get("files").IsArray() ||
        !desc.Get("tensors").IsArray())
      return bad_arg("load(desc) needs config, options, files[] and tensors[]");
    Napi::Object c = desc.Get("config").As<Napi::Object>();
    double eps, scaling;
    LOOM_RETURN_IF_ERROR(integer(c, "vocabSize", &cfg->vocab));
    LOOM_RETURN_IF_ERROR(integer(c, "hiddenSize", &cfg->hidden));
    LOOM_RETURN_IF_ERROR(integer(c, "intermediateSize", &cfg->intermediate));
    LOOM_RETURN_IF_ERROR(integer(c, "numLayers", &cfg->layers));
    LOOM_RETURN_IF_ERROR(integer(c, "numHeads", &cfg->heads));
    LOOM_RETURN_IF_ERROR(integer(c, "numKvHeads", &cfg->kv_heads));
    LOOM_RETURN_IF_ERROR(integer(c, "headDim", &cfg->head_dim));
    LOOM_RETURN_IF_ERROR(integer(c, "maxPositions", &cfg->max_positions));
    LOOM_RETURN_IF_ERROR(number(c, "rmsNormEps", &eps));
    LOOM_RETURN_IF_ERROR(number(c, "ropeTheta", &cfg->rope_theta));
    LOOM_RETURN_IF_ERROR(number(c, "ropeScaling", &scaling));
    LOOM_RETURN_IF_ERROR(number(c, "ropeFactor", &cfg->rope_factor));
    LOOM_RETURN_IF_ERROR(number(c, "ropeLowFreqFactor", &cfg->rope_low_freq));
    LOOM_RETURN_IF_ERROR(number(c, "ropeHighFreqFactor", &cfg->rope_high_freq));
    LOOM_RETURN_IF_ERROR(number(c, "ropeOriginalMaxPositions", &cfg->rope_original_max));
    cfg->rms_eps = float(eps);
    cfg->rope_scaling = loom::RopeScaling(int(scaling));
    cfg->tie_embeddings = c.Get("tieWordEmbeddings").ToBoolean();
    cfg->attention_bias = c.Get("attentionBias").ToBoolean();
    if (cfg->vocab < 1 || cfg->hidden < 1 || cfg->layers < 1 || cfg->heads < 1 || cfg->kv_heads < 1 ||
        cfg->heads % cfg->kv_heads != 0 || cfg->head_dim < 2 || cfg->head_dim % 2 != 0)
      return Status::Error("model_invalid", "config has impossible dimensions (heads " + std::to_string(cfg->heads) +
                                                ", kv heads " + std::to_string(cfg->kv_heads) + ", head dim " +
                                                std::to_string(cfg->head_dim) + ")");
    Napi::Object o = desc.Get("options").As<Napi::Object>();
    LOOM_RETURN_IF_ERROR(integer(o, "threads", &opt->threads));
    // kvBlocks, or 0 with kvCacheBytes: the budget becomes blocks once the device (and so the
    // KV element size: f32 on the cpu, f16 on cuda) is known.
    LOOM_RETURN_IF_ERROR(integer(o, "kvBlocks", &opt->kv_blocks));
    LOOM_RETURN_IF_ERROR(number(o, "kvCacheBytes", kv_cache_bytes));
    LOOM_RETURN_IF_ERROR(integer(o, "kvBlockSize", &opt->kv_block_size));
    LOOM_RETURN_IF_ERROR(integer(o, "maxBatchTokens", &opt->max_batch_tokens));
    LOOM_RETURN_IF_ERROR(integer(o, "adapterSlots", &opt->adapter_slots));
    LOOM_RETURN_IF_ERROR(integer(o, "maxLoraRank", &opt->max_lora_rank));
    // weights: "auto" (as stored; also when absent) or "int8" (quantised at load, cpu only).
    const Napi::Value weights = o.Get("weights");
    if (weights.IsString() && weights.ToString().Utf8Value() == "int8")
      opt->weights_int8 = true;
    else if (!weights.IsUndefined() && !(weights.IsString() && weights.ToString().Utf8Value() == "auto"))
      return bad_arg("options.weights must be 'auto' or 'int8'");
    if (opt->threads < 1 || opt->kv_blocks < 0 || (opt->kv_blocks == 0 && !(*kv_cache_bytes > 0)) ||
        opt->kv_block_size < 1 || opt->max_batch_tokens < 1 ||
        opt->adapter_slots < 0 || opt->max_lora_rank < 1 || opt->max_lora_rank > 128)
      return bad_arg("runtime options out of range");
    Napi::Array fa = desc.Get("files").As<Napi::Array>();
    for (uint32_t i = 0; i < fa.Length(); i++) files->push_back(fa.Get(i).ToString().Utf8Value());
    Napi::Array ta = desc.Get("tensors").As<Napi::Array>();
    for (uint32_t i = 0; i < ta.Length(); i++) {
      if (!ta.Get(i).IsObject()) return bad_arg("tensors[" + std::to_string(i) + "] must be an object");
      Napi::Object t = ta.Get(i).As<Napi::Object>();
      loom::TensorDesc d;
      int dtype;
      d.name = t.Get("name").ToString().Utf8Value();
      LOOM_RETURN_IF_ERROR(integer(t, "file", &d.file));
      LOOM_RETURN_IF_ERROR(integer(t, "offset", &d.offset));
      LOOM_RETURN_IF_ERROR(integer(t, "nbytes", &d.nbytes));
      LOOM_RETURN_IF_ERROR(integer(t, "dtype", &dtype));
      if (dtype < 0 || dtype > 2) return bad_arg("tensor " + d.name + " has an unknown dtype code");
      d.dtype = loom::DType(dtype);
      if (!t.Get("shape").IsArray()) return bad_arg("tensor " + d.name + " has no shape");
      Napi::Array sh = t.Get("shape").As<Napi::Array>();
      for (uint32_t k = 0; k < sh.Length(); k++) d.shape.push_back(int64_t(sh.Get(k).ToNumber().DoubleValue()));
      tensors->push_back(std::move(d));
    }
    return Status::Ok();
  }

  // loadLora(slot, modules[{layer, module, rank, scale, a, b}]) -> Promise<void>
  // Shapes are checked here against the model: A [rank, in] and B [out, rank] per module (q/k/v
  // and gate/up read hidden, o reads heads·D, down reads intermediate). The copy (and the
  // transpose of B) runs off the JS thread; the modules array is pinned until it is done.
  Napi::Value LoadLora(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Status st = usable();
    if (!st.ok()) return throw_status(env, st);
    if (!info[0].IsNumber() || !info[1].IsArray()) return throw_status(env, bad_arg("loadLora(slot, modules[])"));
    const int slot = info[0].As<Napi::Number>().Int32Value();
    Napi::Array arr = info[1].As<Napi::Array>();
    const loom::ModelConfig& c = model_->config();
    const int64_t QD = c.heads * c.head_dim, KD = c.kv_heads * c.head_dim;
    const int64_t in_f[loom::kNumLoraModules] = {c.hidden, c.hidden, c.hidden, QD, c.hidden, c.hidden, c.intermediate};
    const int64_t out_f[loom::kNumLoraModules] = {QD, KD, KD, c.hidden, c.intermediate, c.intermediate, c.hidden};
    static const char* names[loom::kNumLoraModules] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                       "gate_proj", "up_proj", "down_proj"};
    std::vector<loom::LoraModuleInput> mods;
    for (uint32_t i = 0; i < arr.Length(); i++) {
      if (!arr.Get(i).IsObject()) return throw_status(env, bad_arg("loadLora: modules[i] must be objects"));
      Napi::Object m = arr.Get(i).As<Napi::Object>();
      loom::LoraModuleInput in{};
      double scale;
      if (!(st = integer(m, "layer", &in.layer)).ok() || !(st = integer(m, "module", &in.module)).ok() ||
          !(st = integer(m, "rank", &in.rank)).ok() || !(st = number(m, "scale", &scale)).ok())
        return throw_status(env, st);
      in.scale = float(scale);
      if (in.layer < 0 || in.layer >= c.layers || in.module < 0 || in.module >= loom::kNumLoraModules || in.rank < 1 ||
          in.rank > model_->options().max_lora_rank)
        return throw_status(env, Status::Error("adapter_invalid", "LoRA layer " + std::to_string(in.layer) +
                                                                      " module #" + std::to_string(in.module) +
                                                                      " rank " + std::to_string(in.rank) +
                                                                      " is outside this runtime's limits (layers " +
                                                                      std::to_string(c.layers) + ", max rank " +
                                                                      std::to_string(model_->options().max_lora_rank) + ")"));
      const std::string what = "LoRA layer " + std::to_string(in.layer) + " " + names[in.module];
      const int64_t in_dim = in_f[in.module], out_dim = out_f[in.module];
      float* a;
      float* b;
      int64_t len;
      st = typed(m, "a", napi_float32_array, (what + " A").c_str(), in.rank * in_dim,
                 "[" + std::to_string(in.rank) + ", " + std::to_string(in_dim) + "]", &a, &len);
      if (st.ok())
        st = typed(m, "b", napi_float32_array, (what + " B").c_str(), out_dim * in.rank,
                   "[" + std::to_string(out_dim) + ", " + std::to_string(in.rank) + "]", &b, &len);
      if (!st.ok()) return throw_status(env, Status::Error("adapter_invalid", st.message));
      in.a = a;
      in.b = b;
      mods.push_back(in);
    }
    loom::LlamaModel* model = model_.get();
    return queue(env, [model, slot, mods] { return model->load_lora(slot, mods); }, nullptr, {info[1]});
  }

  // loadMedusa(slot, numLayers, heads[{weights: Float32Array[], biases: Float32Array[], lmHead?}],
  //            draftVocabulary?: Int32Array) -> Promise<void>
  Napi::Value LoadMedusa(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Status st = usable();
    if (!st.ok()) return throw_status(env, st);
    if (!info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsArray())
      return throw_status(env, bad_arg("loadMedusa(slot, numLayers, heads[])"));
    const int slot = info[0].As<Napi::Number>().Int32Value();
    const int layers = info[1].As<Napi::Number>().Int32Value();
    Napi::Array arr = info[2].As<Napi::Array>();
    const int64_t H = model_->config().hidden, V = model_->config().vocab;
    const std::string hs = std::to_string(H);
    std::vector<loom::MedusaHeadInput> heads;
    for (uint32_t h = 0; h < arr.Length(); h++) {
      Napi::Object o = arr.Get(h).As<Napi::Object>();
      if (!o.Get("weights").IsArray() || !o.Get("biases").IsArray() ||
          o.Get("weights").As<Napi::Array>().Length() != uint32_t(layers) ||
          o.Get("biases").As<Napi::Array>().Length() != uint32_t(layers))
        return throw_status(env, Status::Error("adapter_invalid", "Medusa head " + std::to_string(h) + " needs " +
                                                                      std::to_string(layers) + " weights and biases"));
      loom::MedusaHeadInput in;
      for (int l = 0; l < layers; l++) {
        Napi::Object holder = Napi::Object::New(env);
        holder.Set("w", o.Get("weights").As<Napi::Array>().Get(uint32_t(l)));
        holder.Set("b", o.Get("biases").As<Napi::Array>().Get(uint32_t(l)));
        const std::string what = "Medusa head " + std::to_string(h) + " block " + std::to_string(l);
        float* w;
        float* b;
        int64_t len;
        st = typed(holder, "w", napi_float32_array, (what + " weight").c_str(), H * H, "[" + hs + ", " + hs + "]", &w, &len);
        if (st.ok()) st = typed(holder, "b", napi_float32_array, (what + " bias").c_str(), H, "[" + hs + "]", &b, &len);
        if (!st.ok()) return throw_status(env, Status::Error("adapter_invalid", st.message));
        in.weights.push_back(w);
        in.biases.push_back(b);
      }
      if (!o.Get("lmHead").IsUndefined() && !o.Get("lmHead").IsNull()) {
        float* lm;
        int64_t len;
        st = typed(o, "lmHead", napi_float32_array, ("Medusa head " + std::to_string(h) + " lm_head").c_str(), V * H,
                   "[" + std::to_string(V) + ", " + hs + "]", &lm, &len);
        if (!st.ok()) return throw_status(env, Status::Error("adapter_invalid", st.message));
        in.lm_head = lm;
      }
      heads.push_back(std::move(in));
    }
    // Ascending ids below the vocabulary (load_medusa checks them; copied: the load runs later).
    // An empty list is refused here: load_medusa reads it as the whole vocabulary.
    std::vector<int32_t> draft;
    if (!info[3].IsUndefined() && !info[3].IsNull()) {
      Napi::Object holder = Napi::Object::New(env);
      holder.Set("v", info[3]);
      int32_t* ids;
      int64_t len;
      st = typed(holder, "v", napi_int32_array, "Medusa draft vocabulary", -1, "[ids]", &ids, &len);
      if (st.ok() && len < 1) st = bad_arg("Medusa draft vocabulary: expected at least one id (omit it for all)");
      if (!st.ok()) return throw_status(env, Status::Error("adapter_invalid", st.message));
      draft.assign(ids, ids + len);
    }
    loom::LlamaModel* model = model_.get();
    return queue(
        env, [model, slot, layers, heads, draft] { return model->load_medusa(slot, layers, heads, draft); }, nullptr,
        {info[2]});
  }

  // unload(slot): synchronous, it only frees host memory; the engine guarantees the slot is idle.
  Napi::Value Unload(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Status st = usable();
    if (st.ok()) st = info[0].IsNumber() ? model_->unload(info[0].As<Napi::Number>().Int32Value()) : bad_arg("unload(slot)");
    if (!st.ok()) return throw_status(env, st);
    return env.Undefined();
  }

  // step(p) -> Promise<void>; fills p's output arrays. Layout (all Int32Array unless said):
  //   tokens, positions [T]; rows [R, 13]: tokStart, n, cacheLen, loraSlot, medusaSlot, btOffset,
  //   btLen, maskOffset (-1: causal), scoreOffset, scoreCount (0 or n), sampling (index k into the
  //   sampling arrays, -1: none), allowedOffset (first position row of its masks in `allowed`, -1:
  //   none), medusaHeads (how many of the slot's first heads run; 0 without a slot); blockTables
  //   (concatenated), masks Uint8Array (concatenated [n, n]), scoreTargets (concatenated); per
  //   sampling k: sampleFloats Float64Array [K, 6] (temperature, top_p, typical_p, repetition,
  //   frequency, presence), sampleInts [K, 2] (top_k, top_logprobs), sampleSeeds BigUint64Array
  //   [K, 2] (seed, draws), penaltyStart [K + 1] and penalties [2 * penaltyStart[K]] ((id, count)
  //   pairs); allowed Uint32Array [positions, ceil(V/32)] and terminated Uint8Array [positions];
  //   copies [C, 5]: btOffset, btLen, fromOffset, toOffset, count into copyData; numbers maxTop and
  //   draftTopK. Outputs: sampledTokens [S], sampledLogprobs Float32Array [S], topIds [S, maxTop],
  //   topLogprobs Float32Array [S, maxTop], scores Float32Array [C], walkEnds [R], draftIds
  //   [Σ rows' medusaHeads, draftTopK].
  Napi::Value Step(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto in = std::make_shared<loom::StepInput>();
    const Status st = parse_step_arg(info, "step", in.get());
    if (!st.ok()) return throw_status(env, st);
    loom::LlamaModel* model = model_.get();
    return queue(env, [model, in] { return model->step(*in); }, nullptr, {info[0]});
  }

  // stepNow(p) -> undefined: the same step as step(p), run on the calling (JS) thread, which
  // blocks until it is done; throws what step(p) would reject with. For steps the caller knows
  // to be short. Steps never overlap (the engine's contract), so the device and its thread pool
  // have one caller either way; a worker still running an adapter load is told apart by the slot
  // states, as with step(p).
  Napi::Value StepNow(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    loom::StepInput in;
    Status st = parse_step_arg(info, "stepNow", &in);
    if (st.ok()) st = guarded([&] { return model_->step(in); });
    if (!st.ok()) return throw_status(env, st);
    return env.Undefined();
  }

  Status parse_step_arg(const Napi::CallbackInfo& info, const char* method, loom::StepInput* in) {
    LOOM_RETURN_IF_ERROR(usable());
    if (!info[0].IsObject()) return bad_arg(std::string(method) + "(packed): packed must be an object");
    return parse_step(info[0].As<Napi::Object>(), in);
  }

  // Turn the packed step into a StepInput of raw pointers. Every array's dtype is checked, and
  // every (offset, length) pair is checked against its array, so the model can index freely;
  // the semantic checks (token range, block ids, slots) happen in LlamaModel::validate.
  Status parse_step(const Napi::Object& p, loom::StepInput* in) {
    int32_t *tokens = nullptr, *positions = nullptr, *rows = nullptr, *bt = nullptr, *targets = nullptr,
            *copies = nullptr, *cdata = nullptr, *sints = nullptr, *pstart = nullptr, *pens = nullptr;
    uint8_t *masks = nullptr, *terminated = nullptr;
    double* sfloats = nullptr;
    uint64_t* seeds = nullptr;
    uint32_t* allowed = nullptr;
    int64_t T = 0, np = 0, nr = 0, nbt = 0, nmask = 0, ntarget = 0, nc = 0, ncd = 0, nk = 0, len = 0, npen = 0,
            nallowed = 0, nterm = 0;
    LOOM_RETURN_IF_ERROR(typed(p, "tokens", napi_int32_array, "step.tokens", -1, "[T]", &tokens, &T));
    LOOM_RETURN_IF_ERROR(typed(p, "positions", napi_int32_array, "step.positions", T, "[T=" + std::to_string(T) + "]",
                               &positions, &np));
    const std::string row_shape = "[R, " + std::to_string(kRowFields) + "]";
    LOOM_RETURN_IF_ERROR(typed(p, "rows", napi_int32_array, "step.rows", -1, row_shape, &rows, &nr));
    if (nr % kRowFields != 0)
      return bad_arg("step.rows: expected Int32Array " + row_shape + ", got [" + std::to_string(nr) + "]");
    LOOM_RETURN_IF_ERROR(typed(p, "blockTables", napi_int32_array, "step.blockTables", -1, "[Σ blocks]", &bt, &nbt));
    LOOM_RETURN_IF_ERROR(typed(p, "masks", napi_uint8_array, "step.masks", -1, "[Σ n*n]", &masks, &nmask));
    LOOM_RETURN_IF_ERROR(typed(p, "scoreTargets", napi_int32_array, "step.scoreTargets", -1, "[Σ n]", &targets, &ntarget));
    LOOM_RETURN_IF_ERROR(typed(p, "sampleInts", napi_int32_array, "step.sampleInts", -1, "[K, 2]", &sints, &nk));
    if (nk % 2 != 0) return bad_arg("step.sampleInts: expected Int32Array [K, 2], got [" + std::to_string(nk) + "]");
    const int64_t K = nk / 2;
    LOOM_RETURN_IF_ERROR(typed(p, "sampleFloats", napi_float64_array, "step.sampleFloats", K * 6, "[K, 6]", &sfloats, &len));
    LOOM_RETURN_IF_ERROR(typed(p, "sampleSeeds", napi_biguint64_array, "step.sampleSeeds", K * 2, "[K, 2]", &seeds, &len));
    LOOM_RETURN_IF_ERROR(typed(p, "penaltyStart", napi_int32_array, "step.penaltyStart", K + 1, "[K + 1]", &pstart, &len));
    LOOM_RETURN_IF_ERROR(typed(p, "penalties", napi_int32_array, "step.penalties", -1, "[2 * pairs]", &pens, &npen));
    if (pstart[0] != 0 || int64_t(pstart[K]) * 2 != npen) return bad_arg("step.penaltyStart and step.penalties disagree");
    for (int64_t k = 0; k < K; k++)
      if (pstart[k + 1] < pstart[k]) return bad_arg("step.penaltyStart must not decrease");
    LOOM_RETURN_IF_ERROR(typed(p, "allowed", napi_uint32_array, "step.allowed", -1, "[positions, ceil(V/32)]", &allowed, &nallowed));
    LOOM_RETURN_IF_ERROR(typed(p, "terminated", napi_uint8_array, "step.terminated", -1, "[positions]", &terminated, &nterm));
    LOOM_RETURN_IF_ERROR(typed(p, "copies", napi_int32_array, "step.copies", -1, "[C, 5]", &copies, &nc));
    if (nc % 5 != 0) return bad_arg("step.copies: expected Int32Array [C, 5], got [" + std::to_string(nc) + "]");
    LOOM_RETURN_IF_ERROR(typed(p, "copyData", napi_int32_array, "step.copyData", -1, "[Σ entries]", &cdata, &ncd));
    double max_top = 0, draft_k = 0;
    LOOM_RETURN_IF_ERROR(number(p, "maxTop", &max_top));
    LOOM_RETURN_IF_ERROR(number(p, "draftTopK", &draft_k));
    in->max_top = int32_t(max_top);
    in->draft_top_k = int32_t(draft_k);
    int64_t ntop_lp = 0;
    LOOM_RETURN_IF_ERROR(typed(p, "sampledTokens", napi_int32_array, "step.sampledTokens", -1, "[S]", &in->tokens_out, &in->tokens_len));
    LOOM_RETURN_IF_ERROR(typed(p, "sampledLogprobs", napi_float32_array, "step.sampledLogprobs", in->tokens_len, "[S]",
                               &in->logprobs_out, &len));
    LOOM_RETURN_IF_ERROR(typed(p, "topIds", napi_int32_array, "step.topIds", -1, "[S, maxTop]", &in->top_ids, &in->top_len));
    LOOM_RETURN_IF_ERROR(typed(p, "topLogprobs", napi_float32_array, "step.topLogprobs", in->top_len, "[S, maxTop]",
                               &in->top_logprobs, &ntop_lp));
    LOOM_RETURN_IF_ERROR(typed(p, "scores", napi_float32_array, "step.scores", -1, "[C]", &in->scores, &in->scores_len));
    LOOM_RETURN_IF_ERROR(typed(p, "walkEnds", napi_int32_array, "step.walkEnds", -1, "[R]", &in->walk_ends, &in->walk_ends_len));
    LOOM_RETURN_IF_ERROR(typed(p, "draftIds", napi_int32_array, "step.draftIds", -1, "[Σ heads, draftTopK]", &in->draft_ids,
                               &in->draft_ids_len));
    in->tokens = tokens;
    in->positions = positions;
    in->num_tokens = int32_t(T);
    const int64_t W = (model_->config().vocab + 31) / 32;
    // Every (offset, length) pair must lie inside its array: the model trusts these pointers.
    auto inside = [](int64_t off, int64_t len, int64_t size) { return off >= 0 && len >= 0 && off + len <= size; };
    in->samplings.reserve(size_t(K));
    std::vector<int64_t> sampling_of;
    for (int64_t r = 0; r < nr / kRowFields; r++) {
      const int32_t* f = rows + r * kRowFields;
      auto where = [r] { return "step.rows[" + std::to_string(r) + "]"; };  // error paths only
      loom::StepRowDesc d{};
      d.tok_start = f[0];
      d.n = f[1];
      d.cache_len = f[2];
      d.lora_slot = f[3];
      d.medusa_slot = f[4];
      d.medusa_heads = f[12];
      if (!inside(f[0], f[1], T)) return bad_arg(where() + ": tokens [" + std::to_string(f[0]) + ", +" + std::to_string(f[1]) + ") outside [0, " + std::to_string(T) + ")");
      if (!inside(f[5], f[6], nbt)) return bad_arg(where() + ": block table slice outside step.blockTables");
      d.block_table = bt + f[5];
      d.num_blocks = f[6];
      if (f[7] >= 0) {
        if (!inside(f[7], int64_t(f[1]) * f[1], nmask)) return bad_arg(where() + ": tree mask [n, n] outside step.masks");
        d.tree_mask = masks + f[7];
      }
      if (!inside(f[8], f[9], ntarget)) return bad_arg(where() + ": score targets outside step.scoreTargets");
      d.score_targets = targets + f[8];
      d.score_count = f[9];
      sampling_of.push_back(f[10]);
      if (f[10] >= 0) {
        const int64_t k = f[10];
        if (k >= K) return bad_arg(where() + ": sampling index outside the sampling arrays");
        const int64_t positions_n = d.tree_mask ? f[1] : 1;
        loom::RowSampleDesc s{};
        const double* fl = sfloats + k * 6;
        s.base.temperature = fl[0], s.base.top_p = fl[1], s.base.typical_p = fl[2];
        s.base.repetition_penalty = fl[3], s.base.frequency_penalty = fl[4], s.base.presence_penalty = fl[5];
        s.base.top_k = sints[k * 2], s.base.top_logprobs = sints[k * 2 + 1];
        s.base.seed = seeds[k * 2], s.base.draws = seeds[k * 2 + 1];
        s.penalties = reinterpret_cast<const loom::PenaltyToken*>(pens + 2 * int64_t(pstart[k]));
        s.n_penalties = pstart[k + 1] - pstart[k];
        if (f[11] >= 0) {
          if (!inside(int64_t(f[11]) * W, positions_n * W, nallowed) || !inside(f[11], positions_n, nterm))
            return bad_arg(where() + ": grammar masks outside step.allowed / step.terminated");
          s.allowed = allowed + int64_t(f[11]) * W;
          s.terminated = terminated + f[11];
        }
        in->samplings.push_back(s);
      }
      in->rows.push_back(d);
    }
    for (size_t r = 0, k = 0; r < in->rows.size(); r++)
      if (sampling_of[r] >= 0) in->rows[r].sampling = &in->samplings[k++];
    for (int64_t c = 0; c < nc / 5; c++) {
      const int32_t* f = copies + c * 5;
      if (!inside(f[0], f[1], ncd) || !inside(f[2], f[4], ncd) || !inside(f[3], f[4], ncd))
        return bad_arg("step.copies[" + std::to_string(c) + "] points outside step.copyData");
      in->copies.push_back({cdata + f[0], f[1], cdata + f[2], cdata + f[3], f[4]});
    }
    return Status::Ok();
  }

  // close(): idempotent. Frees the model, KV cache and thread pool now, or when the last
  // in-flight worker settles if a step or adapter load is still running.
  // profile() -> { steps, stepMs, loraMs } since the last call (then reset): where step time
  // went, for the bench. Counters are atomics, so reading them while a step runs is safe.
  Napi::Value Profile(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const Status st = usable();
    if (!st.ok()) return throw_status(env, st);
    const loom::StepProfile p = model_->take_profile();
    Napi::Object o = Napi::Object::New(env);
    o.Set("steps", Napi::Number::New(env, double(p.steps)));
    o.Set("stepMs", Napi::Number::New(env, double(p.step_ns) / 1e6));
    o.Set("loraMs", Napi::Number::New(env, double(p.lora_ns) / 1e6));
    return o;
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    if (!closed_) {
      closed_ = true;
      if (inflight_ == 0) release();
    }
    return info.Env().Undefined();
  }
};

// measureReadBandwidth(bytes, threads, repeats) -> Promise<number[]>: GB/s of each repetition of
// a multi-threaded sum over a `bytes` buffer (cpu/read-bandwidth.h). Used by bench/run.ts for the
// roofline; the buffer is allocated and freed off the JS thread.
Napi::Value MeasureReadBandwidth(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber())
    return throw_status(env, bad_arg("measureReadBandwidth(bytes, threads, repeats) takes three numbers"));
  const int64_t bytes = info[0].As<Napi::Number>().Int64Value();
  const int threads = info[1].As<Napi::Number>().Int32Value();
  const int repeats = info[2].As<Napi::Number>().Int32Value();
  if (bytes < (int64_t(1) << 20) || bytes > (int64_t(1) << 36) || threads < 1 || threads > 1024 || repeats < 1 ||
      repeats > 1000)
    return throw_status(env, bad_arg("measureReadBandwidth: bytes in [1 MiB, 64 GiB], threads in [1, 1024], "
                                     "repeats in [1, 1000]; got " + std::to_string(bytes) + ", " +
                                     std::to_string(threads) + ", " + std::to_string(repeats)));
  auto result = std::make_shared<std::vector<double>>();
  auto* w = new PromiseWorker(
      env,
      [result, bytes, threads, repeats] {
        *result = loom::measure_read_bandwidth(bytes, threads, repeats);
        if (result->empty())
          return Status::Error("native_error", "measureReadBandwidth: cannot allocate " + std::to_string(bytes) + " bytes");
        return Status::Ok();
      },
      [result](Napi::Env e) {
        Napi::Array a = Napi::Array::New(e, result->size());
        for (size_t i = 0; i < result->size(); i++) a.Set(uint32_t(i), (*result)[i]);
        return Napi::Value(a);
      });
  Napi::Promise p = w->promise();
  w->Queue();
  return p;
}

// TEST HOOK, not part of the runtime's API: sampleRows(device, input) -> Promise<{token, logprob,
// topIds, topLogprobs}> runs Device::sample of `reference`, `cpu` or `cuda` on host rows, so
// test/device-sampler.test.ts can hold the device samplers to the JS TokenSampler. Input (rows R,
// vocabulary V, W = ceil(V/32)): logits Float32Array [R, V]; floats Float64Array [R, 6]
// (temperature, top_p, typical_p, repetition, frequency, presence); ints Int32Array [R, 4] (top_k,
// top_logprobs, has_mask, allowed_lift); seeds BigUint64Array [R, 2] (seed, draws); penaltyStart
// Int32Array [R + 1] and penalties Int32Array [2 * penaltyStart[R]] ((id, count) pairs); allowed
// Uint32Array [R, W]; numbers vocabSize and maxTop.
Napi::Value SampleRows(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString() || !info[1].IsObject())
    return throw_status(env, bad_arg("sampleRows(device, input) takes a device name and an object"));
  const std::string device_name = info[0].As<Napi::String>().Utf8Value();
  const Napi::Object in = info[1].As<Napi::Object>();
  int64_t V = 0, max_top = 0, n = 0;
  Status st = integer(in, "vocabSize", &V);
  if (st.ok()) st = integer(in, "maxTop", &max_top);
  const float* logits = nullptr;
  if (st.ok()) st = typed(in, "logits", napi_float32_array, "logits", -1, "[R, V]", &logits, &n);
  if (st.ok() && (V <= 0 || n % V != 0 || max_top < 0 || max_top > 4096))
    st = bad_arg("sampleRows: logits must be [R, vocabSize] and maxTop in [0, 4096]");
  if (!st.ok()) return throw_status(env, st);
  const int64_t R = n / V, W = (V + 31) / 32;
  const double* floats = nullptr;
  const int32_t *ints = nullptr, *pstart = nullptr, *pens = nullptr;
  const uint64_t* seeds = nullptr;
  const uint32_t* allowed = nullptr;
  int64_t len = 0;
  st = typed(in, "floats", napi_float64_array, "floats", R * 6, "[R, 6]", &floats, &len);
  if (st.ok()) st = typed(in, "ints", napi_int32_array, "ints", R * 4, "[R, 4]", &ints, &len);
  if (st.ok()) st = typed(in, "seeds", napi_biguint64_array, "seeds", R * 2, "[R, 2]", &seeds, &len);
  if (st.ok()) st = typed(in, "penaltyStart", napi_int32_array, "penaltyStart", R + 1, "[R + 1]", &pstart, &len);
  if (st.ok()) st = typed(in, "penalties", napi_int32_array, "penalties", -1, "[2 * pairs]", &pens, &len);
  if (st.ok() && (pstart[0] != 0 || int64_t(pstart[R]) * 2 != len)) st = bad_arg("sampleRows: penaltyStart/penalties disagree");
  for (int64_t r = 0; st.ok() && r < R; r++)
    if (pstart[r + 1] < pstart[r]) st = bad_arg("sampleRows: penaltyStart must not decrease");
  if (st.ok()) st = typed(in, "allowed", napi_uint32_array, "allowed", R * W, "[R, ceil(V/32)]", &allowed, &len);
  if (!st.ok()) return throw_status(env, st);
  auto out = std::make_shared<std::vector<uint8_t>>();
  auto* w = new PromiseWorker(
      env,
      [=]() -> Status {
        std::unique_ptr<loom::Device> owned;
        loom::Device* dev = loom::reference_device();
        if (device_name != "reference") {
          LOOM_RETURN_IF_ERROR(loom::create_device(device_name, 2, &owned));
          dev = owned.get();
        }
        // Everything in device memory, as a step would have it.
        std::vector<void*> bufs;
        auto make = [&](int64_t bytes) {
          bufs.push_back(dev->alloc(std::max<int64_t>(bytes, 1)));
          return bufs.back();
        };
        auto put = [&](const void* src, int64_t bytes) {
          void* p = make(bytes);
          if (p && bytes > 0) dev->upload(p, src, bytes);
          return p;
        };
        const auto* d_logits = static_cast<const float*>(put(logits, R * V * 4));
        const auto* d_pens = static_cast<const loom::PenaltyToken*>(put(pens, int64_t(pstart[R]) * 8));
        const auto* d_allowed = static_cast<const uint32_t*>(put(allowed, R * W * 4));
        const int64_t out_bytes = R * (4 + 4) + R * max_top * (4 + 4);
        auto* d_out = static_cast<uint8_t*>(make(out_bytes));
        void* d_scratch = make(R * loom::sample_row_scratch_bytes(V));
        for (void* p : bufs)
          if (!p) return Status::Error("native_error", "sampleRows: device out of memory");
        std::vector<loom::SampleParams> params(static_cast<size_t>(R));
        for (int64_t r = 0; r < R; r++) {
          loom::SampleParams& p = params[size_t(r)];
          const double* f = floats + r * 6;
          const int32_t* i = ints + r * 4;
          p.row = int32_t(r);
          p.temperature = f[0], p.top_p = f[1], p.typical_p = f[2];
          p.repetition_penalty = f[3], p.frequency_penalty = f[4], p.presence_penalty = f[5];
          p.top_k = i[0], p.top_logprobs = i[1];
          p.allowed = i[2] ? d_allowed + r * W : nullptr;
          p.allowed_lift = i[3] != 0;
          p.seed = seeds[r * 2], p.draws = seeds[r * 2 + 1];
          p.penalties = d_pens + pstart[r];
          p.n_penalties = pstart[r + 1] - pstart[r];
        }
        auto* token = reinterpret_cast<int32_t*>(d_out);
        auto* logprob = reinterpret_cast<float*>(d_out + R * 4);
        auto* top_ids = reinterpret_cast<int32_t*>(d_out + R * 8);
        auto* top_lp = reinterpret_cast<float*>(d_out + R * 8 + R * max_top * 4);
        dev->sample(d_logits, V, V, params.data(), int(R), int(max_top), token, logprob, top_ids, top_lp, d_scratch);
        out->resize(size_t(out_bytes));
        dev->download(out->data(), d_out, out_bytes);
        const Status done = dev->synchronize();
        for (void* p : bufs) dev->release(p);
        return done;
      },
      [=](Napi::Env e) {
        Napi::Object o = Napi::Object::New(e);
        Napi::ArrayBuffer buf = Napi::ArrayBuffer::New(e, out->size());
        std::memcpy(buf.Data(), out->data(), out->size());
        o.Set("token", Napi::Int32Array::New(e, size_t(R), buf, 0));
        o.Set("logprob", Napi::Float32Array::New(e, size_t(R), buf, size_t(R * 4)));
        o.Set("topIds", Napi::Int32Array::New(e, size_t(R * max_top), buf, size_t(R * 8)));
        o.Set("topLogprobs", Napi::Float32Array::New(e, size_t(R * max_top), buf, size_t(R * 8 + R * max_top * 4)));
        return Napi::Value(o);
      });
  w->keep(in);
  Napi::Promise p = w->promise();
  w->Queue();
  return p;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("Runtime", Runtime::Define(env));
  exports.Set("measureReadBandwidth", Napi::Function::New(env, MeasureReadBandwidth));
  exports.Set("sampleRows", Napi::Function::New(env, SampleRows));  // TEST HOOK (test/device-sampler.test.ts)
  exports.Set("devices", Napi::String::New(env, loom::compiled_devices()));  // "cpu" or "cpu,cuda"
  // null, or why `device: cuda` cannot run here ({code, message}); probes the GPU once (device-factory.h).
  exports.Set("cudaStatus", Napi::Function::New(env, [](const Napi::CallbackInfo& info) -> Napi::Value {
    const Status st = loom::cuda_usable();
    if (st.ok()) return info.Env().Null();
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("code", st.code);
    o.Set("message", st.message);
    return o;
  }));
  exports.Set("isa", Napi::String::New(env, LOOM_AVX512 ? "avx512" : "avx2"));  // the cpu kernels' vector path
  return exports;
}

}  // namespace

NODE_API_MODULE(loom_native, Init)
