// The N-API boundary of the TensorRT-LLM backend: JS objects in, loom-trtllm.h calls out.
//
// It includes only our C ABI header, so the same file serves the fake and TensorRT-LLM. Threads:
//   - the JS thread converts and checks arguments, then calls enqueue/cancel/stats (all cheap);
//   - `create` loads the engine on a libuv worker (Napi::AsyncWorker) and settles a Promise;
//   - one poller thread per executor loops on loom_trtllm_await and hands each non-empty batch to the
//     JS callback through a Napi::ThreadSafeFunction; at shutdown it calls loom_trtllm_shutdown itself
//     (await and shutdown never overlap), drains the last responses and releases the function, whose
//     finalizer (JS thread) joins it, frees the executor and resolves shutdown's Promise.
// Errors are JS Errors with a Loom `code` (core/src/errors/registry.ts) and the ABI status name in
// `nativeStatus`; src/load-native.ts turns them into LoomErrors. C++ never throws across the boundary
// (NAPI_DISABLE_CPP_EXCEPTIONS; the C ABI returns statuses).
#include <napi.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loom-trtllm.h"

namespace {

constexpr int32_t kAwaitTimeoutMs = 20;  // bounds how long a shutdown request waits for the poller
constexpr size_t kErrSize = 2048;
constexpr double kMaxSafeInteger = 9007199254740991.0;  // 2^53 - 1

const char* status_name(loom_trtllm_status st) {
  switch (st) {
    case LOOM_TRTLLM_OK: return "ok";
    case LOOM_TRTLLM_INVALID_ARGUMENT: return "invalid_argument";
    case LOOM_TRTLLM_SHUT_DOWN: return "shut_down";
    case LOOM_TRTLLM_UNSUPPORTED: return "unsupported";
    case LOOM_TRTLLM_QUEUE_FULL: return "queue_full";
    case LOOM_TRTLLM_ENGINE_INVALID: return "engine_invalid";
    default: return "internal";
  }
}

// The Loom error code for each ABI status (load-native.ts fills in the code's params).
const char* status_code(loom_trtllm_status st) {
  switch (st) {
    case LOOM_TRTLLM_SHUT_DOWN: return "server_closing";
    case LOOM_TRTLLM_UNSUPPORTED: return "grammar_unsupported";
    case LOOM_TRTLLM_QUEUE_FULL: return "overloaded";
    case LOOM_TRTLLM_ENGINE_INVALID: return "model_invalid";
    default: return "native_error";
  }
}

Napi::Error make_error(Napi::Env env, loom_trtllm_status st, const std::string& message) {
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("code", Napi::String::New(env, status_code(st)));
  err.Set("nativeStatus", Napi::String::New(env, status_name(st)));
  return err;
}

// Schedule the JS exception and return undefined: nothing unwinds through C++ frames.
Napi::Value throw_error(Napi::Env env, loom_trtllm_status st, const std::string& message) {
  make_error(env, st, message).ThrowAsJavaScriptException();
  return env.Undefined();
}

// Argument conversion: each reader returns false after filling `why` with the field, the expectation
// and what was received.
struct Reader {
  Napi::Env env;
  std::string why;

  bool fail(const std::string& msg) {
    why = msg;
    return false;
  }

  // obj[key] as a number within [lo, hi] that is an integer when `integer`; absent → `*out` unchanged
  // unless `required`.
  bool number(const Napi::Object& obj, const char* field, bool required, bool integer, double lo, double hi,
              double* out) {
    Napi::Value v = obj.Get(field);
    if (v.IsUndefined()) return required ? fail(std::string(field) + ": required, got nothing") : true;
    if (!v.IsNumber()) return fail(std::string(field) + ": expected a number, got " + type_name(v));
    const double d = v.As<Napi::Number>().DoubleValue();
    if (!std::isfinite(d) || d < lo || d > hi || (integer && std::floor(d) != d))
      return fail(std::string(field) + ": expected " + (integer ? "an integer" : "a number") + " in [" +
                  fmt(lo) + ", " + fmt(hi) + "], got " + fmt(d));
    *out = d;
    return true;
  }

  bool boolean(const Napi::Object& obj, const char* field, bool* out) {
    Napi::Value v = obj.Get(field);
    if (v.IsUndefined()) return true;
    if (!v.IsBoolean()) return fail(std::string(field) + ": expected a boolean, got " + type_name(v));
    *out = v.As<Napi::Boolean>().Value();
    return true;
  }

  // A typed array of `type` whose element count is `expected` (< 0: any); `shape` describes it.
  template <typename T>
  bool typed(Napi::Value v, const std::string& field, napi_typedarray_type type, const char* type_label,
             int64_t expected, const std::string& shape, const T** data, size_t* len) {
    if (!v.IsTypedArray()) return fail(field + ": expected " + type_label + " " + shape + ", got " + type_name(v));
    Napi::TypedArray ta = v.As<Napi::TypedArray>();
    if (ta.TypedArrayType() != type)
      return fail(field + ": expected " + type_label + " " + shape + ", got " + array_name(ta.TypedArrayType()) + " [" +
                  std::to_string(ta.ElementLength()) + "]");
    if (expected >= 0 && int64_t(ta.ElementLength()) != expected)
      return fail(field + ": expected " + type_label + " " + shape + " (" + std::to_string(expected) +
                  " values), got [" + std::to_string(ta.ElementLength()) + "]");
    *data = reinterpret_cast<const T*>(static_cast<const uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset());
    *len = ta.ElementLength();
    return true;
  }

  // A `[rows, cols]` pair of positive integers.
  bool shape2(const Napi::Object& obj, const char* field, int64_t out[2]) {
    Napi::Value v = obj.Get(field);
    if (!v.IsArray() || v.As<Napi::Array>().Length() != 2)
      return fail(std::string(field) + ": expected [rows, cols], got " + type_name(v));
    Napi::Array a = v.As<Napi::Array>();
    for (uint32_t i = 0; i < 2; i++) {
      Napi::Value d = a.Get(i);
      const double x = d.IsNumber() ? d.As<Napi::Number>().DoubleValue() : -1;
      if (!(x >= 1 && x <= kMaxSafeInteger && std::floor(x) == x))
        return fail(std::string(field) + "[" + std::to_string(i) + "]: expected an integer >= 1");
      out[i] = int64_t(x);
    }
    return true;
  }

  // An array of Int32Array words, flattened into the ABI's tokens + lengths.
  bool words(const Napi::Object& obj, const char* field, std::vector<int32_t>* tokens, std::vector<int32_t>* lengths) {
    Napi::Value v = obj.Get(field);
    if (v.IsUndefined()) return true;
    if (!v.IsArray()) return fail(std::string(field) + ": expected an array of Int32Array, got " + type_name(v));
    Napi::Array a = v.As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); i++) {
      const int32_t* data = nullptr;
      size_t len = 0;
      if (!typed(a.Get(i), std::string(field) + "[" + std::to_string(i) + "]", napi_int32_array, "Int32Array", -1,
                 "[tokens]", &data, &len))
        return false;
      tokens->insert(tokens->end(), data, data + len);
      lengths->push_back(int32_t(len));
    }
    return true;
  }

  static std::string fmt(double d) {
    std::string s = std::to_string(d);
    if (std::floor(d) == d && std::fabs(d) < 1e15) s = std::to_string(int64_t(d));
    return s;
  }

  static std::string type_name(Napi::Value v) {
    if (v.IsUndefined()) return "undefined";
    if (v.IsNull()) return "null";
    if (v.IsTypedArray()) return array_name(v.As<Napi::TypedArray>().TypedArrayType());
    if (v.IsArray()) return "an array";
    if (v.IsBoolean()) return "a boolean";
    if (v.IsNumber()) return "a number";
    if (v.IsBigInt()) return "a bigint";
    if (v.IsString()) return "a string";
    return "an object";
  }

  static const char* array_name(napi_typedarray_type t) {
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
};

// A request converted from JS: the ABI struct plus the storage its pointers borrow (valid for the
// enqueue call; JS typed arrays cannot move while it runs on the JS thread).
struct ConvertedRequest {
  loom_trtllm_request req{};
  std::vector<int32_t> stop_tokens, stop_lengths, bad_tokens, bad_lengths;
  std::string schema;
};

bool convert_request(Reader& rd, const Napi::Object& o, ConvertedRequest* out) {
  loom_trtllm_request& r = out->req;
  size_t len = 0;
  // inputIds: [prompt tokens]
  if (!rd.typed(o.Get("inputIds"), "inputIds", napi_int32_array, "Int32Array", -1, "[tokens]", &r.input_ids, &len))
    return false;
  r.num_input_ids = len;
  double d = 0;
  if (!rd.number(o, "maxTokens", true, true, 1, 2147483647.0, &d)) return false;
  r.max_tokens = int32_t(d);
  bool streaming = false;
  if (!rd.boolean(o, "streaming", &streaming)) return false;
  r.streaming = streaming;

  Napi::Value sv = o.Get("sampling");
  if (!sv.IsObject()) return rd.fail("sampling: expected an object, got " + Reader::type_name(sv));
  Napi::Object s = sv.As<Napi::Object>();
  double top_k = 0, top_p = 0, temperature = 1, rep = 1, presence = 0, frequency = 0, min_tokens = 0;
  if (!rd.number(s, "topK", true, true, 0, 2147483647.0, &top_k) ||
      !rd.number(s, "topP", true, false, 0, 1, &top_p) ||
      !rd.number(s, "temperature", true, false, 0, 3.4e38, &temperature) ||
      !rd.number(s, "repetitionPenalty", true, false, 0, 3.4e38, &rep) ||
      !rd.number(s, "presencePenalty", true, false, -3.4e38, 3.4e38, &presence) ||
      !rd.number(s, "frequencyPenalty", true, false, -3.4e38, 3.4e38, &frequency) ||
      !rd.number(s, "minTokens", false, true, 0, 2147483647.0, &min_tokens))
    return false;
  r.top_k = int32_t(top_k);
  r.top_p = float(top_p);
  r.temperature = float(temperature);
  r.repetition_penalty = float(rep);
  r.presence_penalty = float(presence);
  r.frequency_penalty = float(frequency);
  r.min_tokens = int32_t(min_tokens);
  Napi::Value seed = s.Get("seed");
  if (!seed.IsUndefined()) {
    if (!seed.IsBigInt()) return rd.fail("sampling.seed: expected a bigint, got " + Reader::type_name(seed));
    bool lossless = false;
    const uint64_t v = seed.As<Napi::BigInt>().Uint64Value(&lossless);
    if (!lossless) return rd.fail("sampling.seed: expected a 64-bit unsigned bigint");
    r.has_seed = 1;
    r.seed = v;
  }

  double end_id = -1, pad_id = -1, client_id = 0;
  if (!rd.number(o, "endId", false, true, 0, 2147483647.0, &end_id) ||
      !rd.number(o, "padId", false, true, 0, 2147483647.0, &pad_id))
    return false;
  r.end_id = int32_t(end_id);
  r.pad_id = int32_t(pad_id);
  if (!rd.words(o, "stopWords", &out->stop_tokens, &out->stop_lengths) ||
      !rd.words(o, "badWords", &out->bad_tokens, &out->bad_lengths))
    return false;
  r.stop_words_tokens = out->stop_tokens.data();
  r.stop_words_lengths = out->stop_lengths.data();
  r.num_stop_words = out->stop_lengths.size();
  r.bad_words_tokens = out->bad_tokens.data();
  r.bad_words_lengths = out->bad_lengths.data();
  r.num_bad_words = out->bad_lengths.size();
  if (!o.Get("clientId").IsUndefined()) {
    if (!rd.number(o, "clientId", true, true, 0, kMaxSafeInteger, &client_id)) return false;
    r.has_client_id = 1;
    r.client_id = uint64_t(client_id);
  }
  bool log_probs = false;
  if (!rd.boolean(o, "returnLogProbs", &log_probs)) return false;
  r.return_log_probs = log_probs;

  Napi::Value lv = o.Get("lora");
  if (!lv.IsUndefined()) {
    if (!lv.IsObject()) return rd.fail("lora: expected an object, got " + Reader::type_name(lv));
    Napi::Object l = lv.As<Napi::Object>();
    double task = 0;
    if (!rd.number(l, "taskId", true, true, 0, kMaxSafeInteger, &task)) return false;
    r.has_lora = 1;
    r.lora_task_id = uint64_t(task);
    Napi::Value tv = l.Get("tensors");
    if (!tv.IsUndefined()) {
      if (!tv.IsObject()) return rd.fail("lora.tensors: expected an object, got " + Reader::type_name(tv));
      Napi::Object t = tv.As<Napi::Object>();
      Napi::Value dv = t.Get("dtype");
      const std::string dtype = dv.IsString() ? dv.As<Napi::String>().Utf8Value() : "";
      if (dtype == "float16") r.lora_weights_dtype = LOOM_TRTLLM_DTYPE_FLOAT16;
      else if (dtype == "bfloat16") r.lora_weights_dtype = LOOM_TRTLLM_DTYPE_BFLOAT16;
      else if (dtype == "float32") r.lora_weights_dtype = LOOM_TRTLLM_DTYPE_FLOAT32;
      else return rd.fail("lora.tensors.dtype: expected 'float16', 'bfloat16' or 'float32', got " + Reader::type_name(dv));
      if (!rd.shape2(t, "weightsShape", r.lora_weights_shape) || !rd.shape2(t, "configShape", r.lora_config_shape))
        return false;
      const int64_t* ws = r.lora_weights_shape;
      const int64_t* cs = r.lora_config_shape;
      const std::string wshape = "[" + std::to_string(ws[0]) + ", " + std::to_string(ws[1]) + "]";
      const std::string cshape = "[" + std::to_string(cs[0]) + ", " + std::to_string(cs[1]) + "]";
      // weights: [moduleLayers, maxRow] in the engine's dtype; 16-bit types travel as raw Uint16Array words.
      const bool wide = r.lora_weights_dtype == LOOM_TRTLLM_DTYPE_FLOAT32;
      size_t n = 0;
      if (wide) {
        const float* w = nullptr;
        if (!rd.typed(t.Get("weights"), "lora.tensors.weights", napi_float32_array, "Float32Array", ws[0] * ws[1],
                      "float32 " + wshape, &w, &n))
          return false;
        r.lora_weights = w;
        r.lora_weights_bytes = n * 4;
      } else {
        const uint16_t* w = nullptr;
        if (!rd.typed(t.Get("weights"), "lora.tensors.weights", napi_uint16_array, "Uint16Array", ws[0] * ws[1],
                      dtype + " " + wshape, &w, &n))
          return false;
        r.lora_weights = w;
        r.lora_weights_bytes = n * 2;
      }
      // config: int32 [moduleLayers, 3 | 4] rows of (module id, layer, rank[, is_dora])
      if (!rd.typed(t.Get("config"), "lora.tensors.config", napi_int32_array, "Int32Array", cs[0] * cs[1],
                    "int32 " + cshape, &r.lora_config, &n))
        return false;
    }
  }
  Napi::Value gv = o.Get("guidedJsonSchema");
  if (!gv.IsUndefined()) {
    if (!gv.IsString()) return rd.fail("guidedJsonSchema: expected a string, got " + Reader::type_name(gv));
    out->schema = gv.As<Napi::String>().Utf8Value();
    r.guided_json_schema = out->schema.c_str();
  }
  return true;
}

// Executor options converted from JS, with the storage their pointers borrow.
struct ConvertedOptions {
  loom_trtllm_executor_options opts{};
  std::string engine_dir;
  std::vector<int32_t> medusa_tokens, medusa_offsets, device_ids, guided_stop_ids;
  std::vector<std::string> guided_vocab;
  std::vector<const char*> guided_vocab_ptrs;
  std::string guided_tokenizer;
  std::string worker_path;
};

const char* comm_mode_name(loom_trtllm_comm_mode m) {
  switch (m) {
    case LOOM_TRTLLM_COMM_SINGLE: return "single";
    case LOOM_TRTLLM_COMM_LEADER: return "leader";
    case LOOM_TRTLLM_COMM_ORCHESTRATOR: return "orchestrator";
    default: return "auto";
  }
}

// parallelMode ('auto' | 'single' | 'leader' | 'orchestrator') and workerPath.
bool convert_parallel(Reader& rd, const Napi::Object& o, ConvertedOptions* out) {
  Napi::Value mv = o.Get("parallelMode");
  if (!mv.IsUndefined()) {
    const std::string m = mv.IsString() ? mv.As<Napi::String>().Utf8Value() : "";
    bool known = false;
    for (loom_trtllm_comm_mode c : {LOOM_TRTLLM_COMM_AUTO, LOOM_TRTLLM_COMM_SINGLE, LOOM_TRTLLM_COMM_LEADER,
                                    LOOM_TRTLLM_COMM_ORCHESTRATOR})
      if (m == comm_mode_name(c)) {
        out->opts.comm_mode = c;
        known = true;
      }
    if (!known)
      return rd.fail("parallelMode: expected 'auto', 'single', 'leader' or 'orchestrator', got " +
                     (mv.IsString() ? "'" + m + "'" : Reader::type_name(mv)));
  }
  Napi::Value wv = o.Get("workerPath");
  if (!wv.IsUndefined()) {
    if (!wv.IsString()) return rd.fail("workerPath: expected a string, got " + Reader::type_name(wv));
    out->worker_path = wv.As<Napi::String>().Utf8Value();
    out->opts.worker_path = out->worker_path.c_str();
  }
  return true;
}

// An array of integers in [0, 2^31) into `out`; `field` names it in the message.
bool int_array(Reader& rd, Napi::Value v, const std::string& field, std::vector<int32_t>* out) {
  if (!v.IsArray()) return rd.fail(field + ": expected an array of integers, got " + Reader::type_name(v));
  Napi::Array a = v.As<Napi::Array>();
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value e = a.Get(i);
    const double x = e.IsNumber() ? e.As<Napi::Number>().DoubleValue() : -1;
    if (!(x >= 0 && x <= 2147483647.0 && std::floor(x) == x))
      return rd.fail(field + "[" + std::to_string(i) + "]: expected an integer >= 0");
    out->push_back(int32_t(x));
  }
  return true;
}

bool convert_guided(Reader& rd, const Napi::Object& o, ConvertedOptions* out) {
  Napi::Value gv = o.Get("guidedDecoding");
  if (gv.IsUndefined()) return true;
  if (!gv.IsObject()) return rd.fail("guidedDecoding: expected an object, got " + Reader::type_name(gv));
  Napi::Object g = gv.As<Napi::Object>();
  Napi::Value vv = g.Get("encodedVocab");
  if (!vv.IsArray()) return rd.fail("guidedDecoding.encodedVocab: expected an array of strings, got " + Reader::type_name(vv));
  Napi::Array vocab = vv.As<Napi::Array>();
  out->guided_vocab.reserve(vocab.Length());
  for (uint32_t i = 0; i < vocab.Length(); i++) {
    Napi::Value e = vocab.Get(i);
    if (!e.IsString()) return rd.fail("guidedDecoding.encodedVocab[" + std::to_string(i) + "]: expected a string");
    out->guided_vocab.push_back(e.As<Napi::String>().Utf8Value());
  }
  for (const std::string& s : out->guided_vocab) out->guided_vocab_ptrs.push_back(s.c_str());
  Napi::Value tv = g.Get("tokenizerJson");
  if (!tv.IsUndefined()) {
    if (!tv.IsString()) return rd.fail("guidedDecoding.tokenizerJson: expected a string, got " + Reader::type_name(tv));
    out->guided_tokenizer = tv.As<Napi::String>().Utf8Value();
    out->opts.guided_tokenizer_json = out->guided_tokenizer.c_str();
  }
  Napi::Value sv = g.Get("stopTokenIds");
  if (!sv.IsUndefined() && !int_array(rd, sv, "guidedDecoding.stopTokenIds", &out->guided_stop_ids)) return false;
  out->opts.guided_vocab = out->guided_vocab_ptrs.data();
  out->opts.guided_vocab_size = out->guided_vocab_ptrs.size();
  out->opts.guided_stop_token_ids = out->guided_stop_ids.data();
  out->opts.num_guided_stop_token_ids = out->guided_stop_ids.size();
  return true;
}

bool convert_options(Reader& rd, const Napi::Object& o, ConvertedOptions* out) {
  loom_trtllm_executor_options& x = out->opts;
  Napi::Value dir = o.Get("engineDir");
  if (!dir.IsString()) return rd.fail("engineDir: expected a string, got " + Reader::type_name(dir));
  out->engine_dir = dir.As<Napi::String>().Utf8Value();
  x.engine_dir = out->engine_dir.c_str();
  struct IntField {
    const char* name;
    int32_t* dst;
  } ints[] = {{"maxBatchSize", &x.max_batch_size},
              {"maxNumTokens", &x.max_num_tokens},
              {"maxQueueSize", &x.max_queue_size},
              {"kvCacheMaxTokens", &x.kv_cache_max_tokens},
              {"loraCacheHostModuleLayers", &x.lora_cache_host_module_layers},
              {"loraCacheDeviceModuleLayers", &x.lora_cache_device_module_layers},
              {"tensorParallel", &x.tensor_parallel},
              {"pipelineParallel", &x.pipeline_parallel},
              {"iterStatsMaxIterations", &x.iter_stats_max_iterations}};
  for (const IntField& f : ints) {
    double d = 0;
    if (!rd.number(o, f.name, false, true, 0, 2147483647.0, &d)) return false;
    *f.dst = int32_t(d);
  }
  double d = 0;
  if (!rd.number(o, "kvCacheFreeGpuMemoryFraction", false, false, 0, 1, &d)) return false;
  x.kv_cache_free_gpu_memory_fraction = float(d);
  d = 0;
  if (!rd.number(o, "loraCacheDevicePercent", false, false, 0, 1, &d)) return false;
  x.lora_cache_device_percent = float(d);
  d = 0;
  if (!rd.number(o, "loraCacheHostBytes", false, true, 0, kMaxSafeInteger, &d)) return false;
  x.lora_cache_host_bytes = uint64_t(d);
  bool reuse = false, chunked = false;
  if (!rd.boolean(o, "enableKvCacheBlockReuse", &reuse) || !rd.boolean(o, "enableChunkedContext", &chunked))
    return false;
  x.enable_kv_cache_block_reuse = reuse;
  x.enable_chunked_context = chunked;

  Napi::Value mv = o.Get("medusaChoices");
  if (!mv.IsUndefined()) {
    if (!mv.IsArray()) return rd.fail("medusaChoices: expected an array of paths, got " + Reader::type_name(mv));
    Napi::Array paths = mv.As<Napi::Array>();
    out->medusa_offsets.push_back(0);
    for (uint32_t i = 0; i < paths.Length(); i++) {
      Napi::Value pv = paths.Get(i);
      if (!pv.IsArray()) return rd.fail("medusaChoices[" + std::to_string(i) + "]: expected an array of integers");
      Napi::Array p = pv.As<Napi::Array>();
      for (uint32_t j = 0; j < p.Length(); j++) {
        Napi::Value e = p.Get(j);
        const double v = e.IsNumber() ? e.As<Napi::Number>().DoubleValue() : -1;
        if (!(v >= 0 && v <= 2147483647.0 && std::floor(v) == v))
          return rd.fail("medusaChoices[" + std::to_string(i) + "][" + std::to_string(j) + "]: expected an integer >= 0");
        out->medusa_tokens.push_back(int32_t(v));
      }
      out->medusa_offsets.push_back(int32_t(out->medusa_tokens.size()));
    }
    x.medusa_choices = out->medusa_tokens.data();
    x.medusa_choice_offsets = out->medusa_offsets.data();
    x.medusa_num_choices = paths.Length();
  }
  Napi::Value dv = o.Get("deviceIds");
  if (!dv.IsUndefined()) {
    if (!int_array(rd, dv, "deviceIds", &out->device_ids)) return false;
    x.device_ids = out->device_ids.data();
    x.num_device_ids = out->device_ids.size();
  }
  if (!convert_guided(rd, o, out) || !convert_parallel(rd, o, out)) return false;
  Napi::Value fv = o.Get("fake");
  if (!fv.IsUndefined()) {
    if (!fv.IsObject()) return rd.fail("fake: expected an object, got " + Reader::type_name(fv));
    Napi::Object f = fv.As<Napi::Object>();
    double step = 0, per = 0, vocab = 0;
    if (!rd.number(f, "stepUs", false, true, 0, 60e6, &step) ||
        !rd.number(f, "tokensPerStep", false, true, 0, 1e6, &per) ||
        !rd.number(f, "vocabSize", false, true, 0, 2147483647.0, &vocab))
      return false;
    x.fake_step_us = int32_t(step);
    x.fake_tokens_per_step = int32_t(per);
    x.fake_vocab_size = int32_t(vocab);
  }
  return true;
}

const char* finish_name(loom_trtllm_finish_reason r) {
  switch (r) {
    case LOOM_TRTLLM_FINISH_END_ID: return "end_id";
    case LOOM_TRTLLM_FINISH_STOP_WORDS: return "stop_words";
    case LOOM_TRTLLM_FINISH_LENGTH: return "length";
    case LOOM_TRTLLM_FINISH_TIMED_OUT: return "timed_out";
    case LOOM_TRTLLM_FINISH_CANCELLED: return "cancelled";
    case LOOM_TRTLLM_FINISH_ERROR: return "error";
    default: return "not_finished";
  }
}

const char* error_kind_name(loom_trtllm_error_kind k) {
  switch (k) {
    case LOOM_TRTLLM_ERROR_LORA_NOT_CACHED: return "lora_not_cached";
    case LOOM_TRTLLM_ERROR_LORA_CACHE_FULL: return "lora_cache_full";
    case LOOM_TRTLLM_ERROR_INVALID_REQUEST: return "invalid_request";
    case LOOM_TRTLLM_ERROR_SHUT_DOWN: return "shut_down";
    default: return "internal";
  }
}

Napi::Object response_to_js(Napi::Env env, const loom_trtllm_response& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("requestId", Napi::Number::New(env, double(r.request_id)));
  if (r.has_client_id) o.Set("clientId", Napi::Number::New(env, double(r.client_id)));
  Napi::Int32Array tokens = Napi::Int32Array::New(env, r.num_tokens);
  if (r.num_tokens) std::memcpy(tokens.Data(), r.tokens, r.num_tokens * sizeof(int32_t));
  o.Set("tokens", tokens);
  if (r.log_probs) {
    Napi::Float32Array lp = Napi::Float32Array::New(env, r.num_tokens);
    if (r.num_tokens) std::memcpy(lp.Data(), r.log_probs, r.num_tokens * sizeof(float));
    o.Set("logProbs", lp);
  }
  o.Set("final", Napi::Boolean::New(env, r.is_final != 0));
  o.Set("finishReason", Napi::String::New(env, finish_name(r.finish_reason)));
  if (r.error_kind != LOOM_TRTLLM_ERROR_NONE) {
    o.Set("errorKind", Napi::String::New(env, error_kind_name(r.error_kind)));
    o.Set("error", Napi::String::New(env, r.error ? r.error : ""));
  }
  return o;
}

// What the poller thread and the JS object share. Fields marked (JS) are touched on the JS thread only.
struct ExecutorState {
  loom_trtllm_executor* ex = nullptr;
  std::thread poller;
  std::atomic<bool> stop_requested{false};
  Napi::ThreadSafeFunction tsfn;
  bool closed = false;              // (JS) shutdown requested: enqueue refuses
  bool finalized = false;           // (JS) poller joined, executor freed
  int64_t outstanding = 0;          // (JS) enqueued requests without their final response yet
  bool referenced = false;          // (JS) tsfn holds the event loop open
  std::unique_ptr<Napi::Promise::Deferred> shutdown_done;  // (JS) settles shutdown's promise
  Napi::ObjectReference shutdown_promise;                  // (JS) the same promise for every call
  Napi::Env env;

  explicit ExecutorState(Napi::Env e) : env(e) {}

  // The executor holds the event loop open exactly while work is outstanding or shutdown is running.
  void update_ref() {
    const bool want = !finalized && (outstanding > 0 || closed);
    if (want == referenced) return;
    if (want) tsfn.Ref(env);
    else tsfn.Unref(env);
    referenced = want;
  }

  // (JS) Join the poller and free the executor; idempotent (tsfn finalizer or env teardown).
  void finalize() {
    if (finalized) return;
    finalized = true;
    stop_requested = true;
    if (poller.joinable()) poller.join();
    loom_trtllm_destroy(ex);
    ex = nullptr;
  }
};

// A batch on its way from the poller to the JS thread.
struct Delivery {
  loom_trtllm_responses* batch;
};

void poll_loop(std::shared_ptr<ExecutorState> st) {
  bool shutdown_called = false;
  char err[kErrSize];
  for (;;) {
    if (st->stop_requested.load() && !shutdown_called) {
      loom_trtllm_shutdown(st->ex, err, sizeof err);
      shutdown_called = true;
    }
    loom_trtllm_responses* batch = nullptr;
    err[0] = '\0';
    const loom_trtllm_status s = loom_trtllm_await(st->ex, kAwaitTimeoutMs, &batch, err, sizeof err);
    if (batch && batch->count > 0) {
      auto* d = new Delivery{batch};
      // Runs on the JS thread. (At process teardown node-addon-api drops pending calls: the batch leaks
      // as the process exits.)
      const napi_status call = st->tsfn.BlockingCall(d, [st](Napi::Env env, Napi::Function cb, Delivery* d) {
        std::unique_ptr<Delivery> owned(d);
        const loom_trtllm_responses* b = owned->batch;
        Napi::Array arr = Napi::Array::New(env, b->count);
        for (size_t i = 0; i < b->count; i++) {
          arr.Set(uint32_t(i), response_to_js(env, b->items[i]));
          if (b->items[i].is_final) st->outstanding--;
        }
        loom_trtllm_responses_free(owned->batch);
        st->update_ref();
        cb.Call({arr});
      });
      if (call != napi_ok) {
        loom_trtllm_responses_free(batch);
        delete d;
      }
    } else if (batch) {
      loom_trtllm_responses_free(batch);
    }
    if (s == LOOM_TRTLLM_SHUT_DOWN) break;
    // Any other failure of await is the executor's; it is not retried in a tight loop.
    if (s != LOOM_TRTLLM_OK) std::this_thread::sleep_for(std::chrono::milliseconds(kAwaitTimeoutMs));
  }
  st->tsfn.Release();
}

class Executor : public Napi::ObjectWrap<Executor> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "TrtllmExecutor",
                       {InstanceMethod<&Executor::Enqueue>("enqueue"), InstanceMethod<&Executor::Cancel>("cancel"),
                        InstanceMethod<&Executor::Stats>("stats"), InstanceMethod<&Executor::Info>("info"),
                        InstanceMethod<&Executor::Shutdown>("shutdown")});
  }

  explicit Executor(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Executor>(info) {}

  // Called once by Create's completion, on the JS thread. The executor's info is copied now, so info()
  // still answers after shutdown has freed the handle.
  void Attach(std::shared_ptr<ExecutorState> st) {
    state_ = std::move(st);
    loom_trtllm_executor_info x{};
    if (loom_trtllm_info_get(state_->ex, &x, nullptr, 0) == LOOM_TRTLLM_OK) {
      mode_ = x.comm_mode;
      world_ = x.world_size;
      spawned_ = x.spawned_workers;
      has_worker_ = x.worker_path != nullptr;
      if (has_worker_) worker_path_ = x.worker_path;
      if (x.device_ids) device_ids_.assign(x.device_ids, x.device_ids + x.num_device_ids);
    }
  }

 private:
  std::shared_ptr<ExecutorState> state_;
  loom_trtllm_comm_mode mode_ = LOOM_TRTLLM_COMM_SINGLE;
  int32_t world_ = 1, spawned_ = 0;
  bool has_worker_ = false;
  std::string worker_path_;
  std::vector<int32_t> device_ids_;

  Napi::Value Info(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("parallelMode", Napi::String::New(env, comm_mode_name(mode_)));
    o.Set("worldSize", Napi::Number::New(env, world_));
    o.Set("spawnedWorkers", Napi::Number::New(env, spawned_));
    if (has_worker_) o.Set("workerPath", Napi::String::New(env, worker_path_));
    Napi::Array ids = Napi::Array::New(env, device_ids_.size());
    for (size_t i = 0; i < device_ids_.size(); i++) ids.Set(uint32_t(i), Napi::Number::New(env, device_ids_[i]));
    o.Set("deviceIds", ids);
    return o;
  }

  bool usable(Napi::Env env) {
    if (!state_) {
      throw_error(env, LOOM_TRTLLM_INTERNAL, "this executor object was not made by create()");
      return false;
    }
    if (state_->closed) {
      throw_error(env, LOOM_TRTLLM_SHUT_DOWN, "the executor was shut down; no new requests");
      return false;
    }
    return true;
  }

  Napi::Value Enqueue(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!usable(env)) return env.Undefined();
    if (info.Length() < 1 || !info[0].IsObject())
      return throw_error(env, LOOM_TRTLLM_INVALID_ARGUMENT, "enqueue(request): request must be an object");
    Reader rd{env, {}};
    ConvertedRequest cr;
    if (!convert_request(rd, info[0].As<Napi::Object>(), &cr)) return throw_error(env, LOOM_TRTLLM_INVALID_ARGUMENT, rd.why);
    uint64_t id = 0;
    char err[kErrSize] = {0};
    const loom_trtllm_status s = loom_trtllm_enqueue(state_->ex, &cr.req, &id, err, sizeof err);
    if (s != LOOM_TRTLLM_OK) return throw_error(env, s, err);
    state_->outstanding++;
    state_->update_ref();
    return Napi::Number::New(env, double(id));
  }

  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!state_ || state_->closed) return env.Undefined();  // shutdown ends every request anyway
    if (info.Length() < 1 || !info[0].IsNumber())
      return throw_error(env, LOOM_TRTLLM_INVALID_ARGUMENT, "cancel(requestId): requestId must be a number");
    const double id = info[0].As<Napi::Number>().DoubleValue();
    if (!(id >= 0 && id <= kMaxSafeInteger && std::floor(id) == id))
      return throw_error(env, LOOM_TRTLLM_INVALID_ARGUMENT, "cancel(requestId): requestId must be an integer >= 0");
    char err[kErrSize] = {0};
    const loom_trtllm_status s = loom_trtllm_cancel(state_->ex, uint64_t(id), err, sizeof err);
    if (s != LOOM_TRTLLM_OK) return throw_error(env, s, err);
    return env.Undefined();
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!state_ || state_->finalized || !state_->ex)
      return throw_error(env, LOOM_TRTLLM_SHUT_DOWN, "the executor was shut down");
    loom_trtllm_stats s{};
    char err[kErrSize] = {0};
    const loom_trtllm_status rc = loom_trtllm_stats_get(state_->ex, &s, err, sizeof err);
    if (rc != LOOM_TRTLLM_OK) return throw_error(env, rc, err);
    Napi::Object o = Napi::Object::New(env);
    o.Set("iteration", Napi::Number::New(env, double(s.iteration)));
    o.Set("activeRequests", Napi::Number::New(env, s.active_requests));
    o.Set("queuedRequests", Napi::Number::New(env, s.queued_requests));
    o.Set("maxActiveRequests", Napi::Number::New(env, s.max_active_requests));
    o.Set("kvBlocksMax", Napi::Number::New(env, double(s.kv_blocks_max)));
    o.Set("kvBlocksFree", Napi::Number::New(env, double(s.kv_blocks_free)));
    o.Set("kvBlocksUsed", Napi::Number::New(env, double(s.kv_blocks_used)));
    o.Set("kvTokensPerBlock", Napi::Number::New(env, s.kv_tokens_per_block));
    o.Set("iterationLatencyMs", Napi::Number::New(env, s.iteration_latency_ms));
    o.Set("loraTasksCached", Napi::Number::New(env, s.lora_tasks_cached));
    o.Set("loraCacheModuleLayersUsed", Napi::Number::New(env, double(s.lora_cache_module_layers_used)));
    o.Set("loraCacheModuleLayersTotal", Napi::Number::New(env, double(s.lora_cache_module_layers_total)));
    return o;
  }

  Napi::Value Shutdown(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!state_) return throw_error(env, LOOM_TRTLLM_INTERNAL, "this executor object was not made by create()");
    if (!state_->shutdown_done) {
      state_->shutdown_done = std::make_unique<Napi::Promise::Deferred>(env);
      state_->shutdown_promise = Napi::Persistent(state_->shutdown_done->Promise().As<Napi::Object>());
      if (state_->finalized) {
        state_->shutdown_done->Resolve(env.Undefined());
      } else {
        state_->closed = true;
        state_->update_ref();
        state_->stop_requested = true;  // the poller calls loom_trtllm_shutdown, drains, releases
      }
    }
    return state_->shutdown_promise.Value();
  }
};

void teardown_hook(void* arg) { static_cast<ExecutorState*>(arg)->finalize(); }

// Per-addon data: the class constructor, kept alive for Create's completion.
struct AddonData {
  Napi::FunctionReference executor_ctor;
};

// Loads the engine off the JS thread; on success builds the JS object, the tsfn and the poller.
class CreateWorker : public Napi::AsyncWorker {
 public:
  CreateWorker(Napi::Env env, std::unique_ptr<ConvertedOptions> opts, Napi::Function on_responses)
      : Napi::AsyncWorker(env, "loom-trtllm-create"), deferred_(env), opts_(std::move(opts)) {
    callback_.Reset(on_responses, 1);
  }
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    char err[kErrSize] = {0};
    status_ = loom_trtllm_create(&opts_->opts, &ex_, err, sizeof err);
    message_ = err;
  }

  void OnOK() override {
    Napi::Env env = Env();
    if (status_ != LOOM_TRTLLM_OK) {
      deferred_.Reject(make_error(env, status_, message_).Value());
      return;
    }
    auto st = std::make_shared<ExecutorState>(env);
    st->ex = ex_;
    ex_ = nullptr;
    // The finalizer runs on the JS thread after the poller released the function: join, free, resolve.
    st->tsfn = Napi::ThreadSafeFunction::New(env, callback_.Value(), "loom-trtllm-responses", 0, 1,
                                             [st](Napi::Env fenv) {
                                               napi_remove_env_cleanup_hook(fenv, teardown_hook, st.get());
                                               st->finalize();
                                               if (st->shutdown_done) st->shutdown_done->Resolve(fenv.Undefined());
                                             });
    st->tsfn.Unref(env);  // idle until the first enqueue
    AddonData* data = env.GetInstanceData<AddonData>();
    Napi::Object obj = data->executor_ctor.New({});
    Executor::Unwrap(obj)->Attach(st);
    st->poller = std::thread(poll_loop, st);
    // Teardown without shutdown (a worker thread ending, a forgotten idle executor): stop the poller
    // before the environment goes. The tsfn finalizer (which owns st) removes this hook first.
    napi_add_env_cleanup_hook(env, teardown_hook, st.get());
    deferred_.Resolve(obj);
  }

  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

  ~CreateWorker() override {
    if (ex_) loom_trtllm_destroy(ex_);
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::unique_ptr<ConvertedOptions> opts_;
  Napi::FunctionReference callback_;
  loom_trtllm_executor* ex_ = nullptr;
  loom_trtllm_status status_ = LOOM_TRTLLM_OK;
  std::string message_;
};

Napi::Value Create(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsObject() || !info[1].IsFunction())
    return throw_error(env, LOOM_TRTLLM_INVALID_ARGUMENT, "create(options, onResponses): expected an object and a function");
  Reader rd{env, {}};
  auto opts = std::make_unique<ConvertedOptions>();
  if (!convert_options(rd, info[0].As<Napi::Object>(), opts.get()))
    return throw_error(env, LOOM_TRTLLM_INVALID_ARGUMENT, rd.why);
  auto* w = new CreateWorker(env, std::move(opts), info[1].As<Napi::Function>());
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  data->executor_ctor = Napi::Persistent(Executor::Define(env));
  env.SetInstanceData(data);
  loom_trtllm_capabilities caps{};
  loom_trtllm_get_capabilities(&caps);
  Napi::Object c = Napi::Object::New(env);
  c.Set("impl", Napi::String::New(env, caps.impl));
  c.Set("version", Napi::String::New(env, caps.version));
  c.Set("abiVersion", Napi::Number::New(env, caps.abi_version));
  c.Set("guidedDecoding", Napi::Boolean::New(env, caps.guided_decoding != 0));
  c.Set("medusa", Napi::Boolean::New(env, caps.medusa != 0));
  if (caps.library_path) c.Set("libraryPath", Napi::String::New(env, caps.library_path));
  exports.Set("capabilities", c);
  exports.Set("create", Napi::Function::New(env, Create, "create"));
  return exports;
}

}  // namespace

NODE_API_MODULE(loom_trtllm, Init)
