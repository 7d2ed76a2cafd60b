// LlamaModel: load, adapter slots, validation and the forward pass.
#include "model/llama-model.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

namespace loom {

struct LlamaModel::Layer {
  WeightView q, k, v, o, gate, up, down;   // [out, in] each, stored dtype, device-resident
  DeviceBuffer<float> in_norm, post_norm;  // [H]
  DeviceBuffer<float> bq, bk, bv;          // Qwen2 biases [out] (empty otherwise)
};

// One module's A and Bt in the model's dtype: f32 models keep f32 adapters (LoRA rows then match
// merged weights to f32 rounding); 16-bit models store them in the same 16-bit dtype, halving
// the bytes a step with many distinct adapters streams (compute stays f32).
struct LoraModuleSlot {
  int32_t rank = 0;  // 0: the adapter does not touch this module
  float scale = 0.0f;
  DType dtype = DType::F32;
  DeviceBuffer<uint8_t> a, bt;  // A [rank, in], Bt [rank, out] (B transposed), in `dtype`
};

namespace {
uint16_t to_half(DType dt, float v) { return dt == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v); }

// A host array into a fresh device buffer; the host bytes must stay valid until the caller's
// synchronize.
template <typename T>
Status upload_new(Device* dev, const T* src, int64_t count, const char* what, DeviceBuffer<T>* out) {
  LOOM_RETURN_IF_ERROR(out->allocate(dev, count, what));
  dev->upload(out->data(), src, out->bytes());
  return Status::Ok();
}
}  // namespace

struct MedusaHeadSlot {
  std::vector<DeviceBuffer<float>> w;  // numLayers × [H, H]
  std::vector<DeviceBuffer<float>> b;  // numLayers × [H]
  DeviceBuffer<float> lm_head;         // [DV, H] (the draft vocabulary's rows) or empty (base lm_head)
};

struct LlamaModel::Slot {
  enum Kind : int { kFree = 0, kLora = 1, kMedusa = 2 };
  std::atomic<int> kind{kFree};
  std::vector<std::array<LoraModuleSlot, kNumLoraModules>> lora;  // [layers]
  std::vector<MedusaHeadSlot> medusa;
  int medusa_layers = 0;
  // The heads' draft vocabulary: DV ascending token ids (0: the whole vocabulary, no ids) and,
  // for heads sharing the base LM head, its DV rows in its dtype, [DV, row bytes].
  int64_t draft_vocab = 0;
  DeviceBuffer<int32_t> draft_ids;
  DeviceBuffer<uint8_t> draft_lm_head;
};

namespace {

Status invalid(const std::string& msg) { return Status::Error("native_error", msg); }
}  // namespace

LlamaModel::LlamaModel(Device* device, ModelConfig config, RuntimeOptions options)
    : dev_(device), host_io_(device->reads_host_memory()), cfg_(config), opt_(options) {}

LlamaModel::~LlamaModel() = default;

// Map the safetensors files, bind every tensor the graph needs (checking its shape against the
// config) and make it device-resident, precompute RoPE frequencies, then allocate the KV cache
// and the scratch arenas once. On a device that reads host memory the mapped weights are used
// in place (zero copies); otherwise each is uploaded in its stored dtype.
Status LlamaModel::load(const std::vector<std::string>& files, std::vector<TensorDesc> tensors) {
  LOOM_RETURN_IF_ERROR(weights_.open(files, std::move(tensors)));
  const int64_t H = cfg_.hidden, I = cfg_.intermediate, D = cfg_.head_dim;
  const int64_t QD = cfg_.heads * D, KD = cfg_.kv_heads * D;
  std::vector<std::vector<float>> staging;  // host copies of the 1-D tensors until synchronize
  LOOM_RETURN_IF_ERROR(weights_.matrix("model.embed_tokens.weight", cfg_.vocab, H, &embed_));
  LOOM_RETURN_IF_ERROR(make_resident(&embed_, "model.embed_tokens.weight"));
  if (cfg_.tie_embeddings || !weights_.has("lm_head.weight")) {
    lm_head_ = embed_;
  } else {
    LOOM_RETURN_IF_ERROR(weights_.matrix("lm_head.weight", cfg_.vocab, H, &lm_head_));
    if (opt_.weights_int8) LOOM_RETURN_IF_ERROR(weights_.to_q8(&lm_head_, "lm_head.weight"));
    LOOM_RETURN_IF_ERROR(make_resident(&lm_head_, "lm_head.weight"));
  }
  // Tied: the LM head gets its own int8 copy (the decode step's largest matrix at vocab 49k).
  if (opt_.weights_int8 && lm_head_.dtype != DType::Q8)
    LOOM_RETURN_IF_ERROR(weights_.to_q8(&lm_head_, "model.embed_tokens.weight"));
  LOOM_RETURN_IF_ERROR(device_vector("model.norm.weight", H, &final_norm_, &staging));
  layers_.resize(size_t(cfg_.layers));
  for (int64_t l = 0; l < cfg_.layers; l++) {
    Layer& L = layers_[size_t(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::pair<const char*, WeightView*> mats[] = {
        {"self_attn.q_proj.weight", &L.q}, {"self_attn.k_proj.weight", &L.k}, {"self_attn.v_proj.weight", &L.v},
        {"self_attn.o_proj.weight", &L.o}, {"mlp.gate_proj.weight", &L.gate}, {"mlp.up_proj.weight", &L.up},
        {"mlp.down_proj.weight", &L.down}};
    const int64_t shapes[][2] = {{QD, H}, {KD, H}, {KD, H}, {H, QD}, {I, H}, {I, H}, {H, I}};
    for (size_t m = 0; m < 7; m++) {
      LOOM_RETURN_IF_ERROR(weights_.matrix(p + mats[m].first, shapes[m][0], shapes[m][1], mats[m].second));
      if (opt_.weights_int8) LOOM_RETURN_IF_ERROR(weights_.to_q8(mats[m].second, p + mats[m].first));
      LOOM_RETURN_IF_ERROR(make_resident(mats[m].second, p + mats[m].first));
    }
    LOOM_RETURN_IF_ERROR(device_vector(p + "input_layernorm.weight", H, &L.in_norm, &staging));
    LOOM_RETURN_IF_ERROR(device_vector(p + "post_attention_layernorm.weight", H, &L.post_norm, &staging));
    if (cfg_.attention_bias) {
      LOOM_RETURN_IF_ERROR(device_vector(p + "self_attn.q_proj.bias", QD, &L.bq, &staging));
      LOOM_RETURN_IF_ERROR(device_vector(p + "self_attn.k_proj.bias", KD, &L.bk, &staging));
      LOOM_RETURN_IF_ERROR(device_vector(p + "self_attn.v_proj.bias", KD, &L.bv, &staging));
    }
  }

  // RoPE inverse frequencies, with HF's llama3 / linear scaling applied (computed in double).
  std::vector<double> inv_freq(size_t(D / 2));
  for (int64_t i = 0; i < D / 2; i++) {
    double f = 1.0 / std::pow(cfg_.rope_theta, double(2 * i) / double(D));
    if (cfg_.rope_scaling == RopeScaling::Linear) {
      f /= cfg_.rope_factor;
    } else if (cfg_.rope_scaling == RopeScaling::Llama3) {
      const double low_wavelen = cfg_.rope_original_max / cfg_.rope_low_freq;
      const double high_wavelen = cfg_.rope_original_max / cfg_.rope_high_freq;
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen > low_wavelen) {
        f = f / cfg_.rope_factor;
      } else if (!(wavelen < high_wavelen)) {  // medium band: interpolate
        const double smooth = (cfg_.rope_original_max / wavelen - cfg_.rope_low_freq) /
                              (cfg_.rope_high_freq - cfg_.rope_low_freq);
        f = (1.0 - smooth) * f / cfg_.rope_factor + smooth * f;
      }
    }
    inv_freq[size_t(i)] = f;
  }

  LOOM_RETURN_IF_ERROR(upload_new(dev_, inv_freq.data(), D / 2, "RoPE frequencies", &inv_freq_));

  // KV cache: per layer, K and V of S = blocks × block_size slots, each [Hkv * D] in the
  // device's KV dtype, zeroed. Scratch: every per-token buffer of the forward pass, sized for
  // max_batch_tokens.
  kv_dtype_ = dev_->kv_dtype();
  const int64_t S = int64_t(opt_.kv_blocks) * opt_.kv_block_size;
  const int64_t T = opt_.max_batch_tokens;
  kcache_.resize(size_t(cfg_.layers));
  vcache_.resize(size_t(cfg_.layers));
  Status st = Status::Ok();
  for (int64_t l = 0; l < cfg_.layers && st.ok(); l++) {
    st = kcache_[size_t(l)].allocate(dev_, S * KD * dtype_size(kv_dtype_), "the KV cache");
    if (st.ok()) st = vcache_[size_t(l)].allocate(dev_, S * KD * dtype_size(kv_dtype_), "the KV cache");
    if (st.ok()) kcache_[size_t(l)].zero(), vcache_[size_t(l)].zero();
  }
  const std::pair<DeviceBuffer<float>*, int64_t> arenas[] = {
      {&x_, T * H}, {&xn_, T * std::max(H, QD)}, {&qkv_, T * (QD + 2 * KD)}, {&attn_, T * QD}, {&gate_, T * I},
      {&up_, T * I}, {&act_, T * I}, {&lora_tmp_, T * 3 * std::max(1, opt_.max_lora_rank)},
      {&cos_, T * (D / 2)}, {&sin_, T * (D / 2)}, {&head_x_, T * H}};
  for (const auto& a : arenas)
    if (st.ok()) st = a.first->allocate(dev_, a.second, "scratch");
  if (st.ok()) st = kv_slots_.allocate(dev_, T, "scratch");
  if (!st.ok())
    return Status::Error("model_invalid", "not enough " + std::string(dev_->name()) + " memory for the KV cache (" +
                                              std::to_string(opt_.kv_blocks) + " blocks) and scratch for " +
                                              std::to_string(opt_.max_batch_tokens) +
                                              " tokens; lower kv_cache_tokens or max_batch_tokens (" + st.message + ")");
  try {
    attn_rows_.reserve(size_t(T));
    leaf_rows_.reserve(size_t(T));
    row_plans_.reserve(size_t(T));
    segs_.reserve(size_t(T) * 6 + 16);
    seg_module_.reserve(size_t(T) * 3 + 8);
    expand_segs_.reserve(size_t(T) * 3 + 8);
  } catch (const std::bad_alloc&) {
    return Status::Error("model_invalid", "out of host memory for the step plans of " + std::to_string(T) + " tokens");
  }
  slots_.clear();
  for (int s = 0; s < opt_.adapter_slots; s++) slots_.push_back(std::make_unique<Slot>());
  // The uploads above read `staging` and the mapped files.
  return dev_->synchronize();
}

Status LlamaModel::make_resident(WeightView* w, const std::string& name) {
  if (host_io_) return Status::Ok();
  DeviceBuffer<uint8_t> buf;
  const int64_t bytes = weight_bytes(w->dtype, w->rows, w->cols);
  LOOM_RETURN_IF_ERROR(buf.allocate(dev_, bytes, name.c_str()));
  dev_->upload(buf.data(), w->data, bytes);
  w->data = buf.data();
  resident_.push_back(std::move(buf));
  return Status::Ok();
}

Status LlamaModel::device_vector(const std::string& name, int64_t n, DeviceBuffer<float>* out,
                                 std::vector<std::vector<float>>* staging) {
  staging->emplace_back();
  LOOM_RETURN_IF_ERROR(weights_.vector_f32(name, n, &staging->back()));
  return upload_new(dev_, staging->back().data(), n, name.c_str(), out);
}

// Copy a LoRA adapter into a free slot: A as given ([r, in]) for the shrink, B transposed to
// [r, out] so the expand is a row update (see lora-cpu.cc), converted to the model's dtype here
// on the loading worker thread (never on the JS thread), then uploaded into the slot's device
// buffers. The base weights are never touched; the slot becomes visible to steps only once
// fully written (kind is stored last, after the uploads have landed).
Status LlamaModel::load_lora(int slot, const std::vector<LoraModuleInput>& modules) {
  if (slot < 0 || slot >= int(slots_.size())) return invalid("adapter slot " + std::to_string(slot) + " out of range");
  Slot& s = *slots_[size_t(slot)];
  if (s.kind.load() != Slot::kFree) return invalid("adapter slot " + std::to_string(slot) + " is not free");
  const int64_t H = cfg_.hidden, I = cfg_.intermediate, QD = cfg_.heads * cfg_.head_dim,
                KD = cfg_.kv_heads * cfg_.head_dim;
  // in/out features of each module, in LoraModule order.
  const int64_t in_f[kNumLoraModules] = {H, H, H, QD, H, H, I};
  const int64_t out_f[kNumLoraModules] = {QD, KD, KD, H, I, I, H};
  const DType dt = dtype();
  const int64_t esize = dtype_size(dt);
  Status st = Status::Ok();
  try {
    s.lora.clear();
    s.lora.resize(size_t(cfg_.layers));
    std::vector<std::vector<uint8_t>> staging;  // each module's A and Bt in `dt` until the synchronize
    staging.reserve(modules.size() * 2);
    for (const auto& m : modules) {
      if (m.layer < 0 || m.layer >= cfg_.layers || m.module < 0 || m.module >= kNumLoraModules || m.rank < 1 ||
          m.rank > opt_.max_lora_rank) {
        st = invalid("LoRA module (layer " + std::to_string(m.layer) + ", module " + std::to_string(m.module) +
                     ", rank " + std::to_string(m.rank) + ") is out of range");
        break;
      }
      LoraModuleSlot& dst = s.lora[size_t(m.layer)][size_t(m.module)];
      const int64_t in = in_f[m.module], out = out_f[m.module];
      dst.rank = m.rank;
      dst.scale = m.scale;
      dst.dtype = dt;
      std::vector<uint8_t>& a = staging.emplace_back(size_t(m.rank * in * esize));
      std::vector<uint8_t>& bt = staging.emplace_back(size_t(m.rank * out * esize));
      if (dt == DType::F32) {
        std::memcpy(a.data(), m.a, a.size());
        float* b32 = reinterpret_cast<float*>(bt.data());
        for (int64_t o = 0; o < out; o++)
          for (int64_t r = 0; r < m.rank; r++) b32[r * out + o] = m.b[o * m.rank + r];
      } else {
        uint16_t* a16 = reinterpret_cast<uint16_t*>(a.data());
        uint16_t* b16 = reinterpret_cast<uint16_t*>(bt.data());
        for (int64_t i = 0; i < m.rank * in; i++) a16[i] = to_half(dt, m.a[i]);
        for (int64_t o = 0; o < out; o++)
          for (int64_t r = 0; r < m.rank; r++) b16[r * out + o] = to_half(dt, m.b[o * m.rank + r]);
      }
      st = upload_new(dev_, a.data(), int64_t(a.size()), "LoRA weights", &dst.a);
      if (st.ok()) st = upload_new(dev_, bt.data(), int64_t(bt.size()), "LoRA weights", &dst.bt);
      if (!st.ok()) break;
    }
    const Status synced = dev_->synchronize();  // the uploads read `staging`
    if (st.ok()) st = synced;
  } catch (const std::bad_alloc&) {
    (void)dev_->synchronize();
    st = Status::Error("adapter_load_failed", "out of memory copying LoRA weights");
  }
  if (!st.ok()) {
    s.lora.clear();
    if (st.code == "model_invalid") st.code = "adapter_load_failed";  // out of device memory
    return st;
  }
  s.kind.store(Slot::kLora);
  return Status::Ok();
}

// Upload Medusa heads into a free slot (f32, owned by the slot); version 2 heads have no lm_head
// and reuse the base model's at step time. With a draft vocabulary the slot holds only its rows
// of the LM heads: own heads' rows gathered on the host before the upload, the base LM head's
// copied on the device (runs of consecutive ids as one copy; the base rows are read-only, so
// this loading thread may copy them while a step runs).
Status LlamaModel::load_medusa(int slot, int num_layers, const std::vector<MedusaHeadInput>& heads,
                               const std::vector<int32_t>& draft_vocab) {
  if (slot < 0 || slot >= int(slots_.size())) return invalid("adapter slot " + std::to_string(slot) + " out of range");
  Slot& s = *slots_[size_t(slot)];
  if (s.kind.load() != Slot::kFree) return invalid("adapter slot " + std::to_string(slot) + " is not free");
  const int64_t H = cfg_.hidden, V = cfg_.vocab, DV = int64_t(draft_vocab.size());
  for (int64_t i = 0; i < DV; i++) {
    const int32_t id = draft_vocab[size_t(i)];
    if (id < 0 || id >= V || (i > 0 && id <= draft_vocab[size_t(i - 1)]))
      return Status::Error("adapter_invalid", "draft vocabulary entry " + std::to_string(i) + " is " +
                                                  std::to_string(id) + "; expected ascending token ids below " +
                                                  std::to_string(V));
  }
  Status st = Status::Ok();
  std::vector<float> gathered;  // an own LM head's draft rows, [DV, H]
  try {
    s.medusa.clear();
    s.medusa.resize(heads.size());
    s.medusa_layers = num_layers;
    s.draft_vocab = DV;
    bool shared_lm = false;
    for (size_t h = 0; h < heads.size() && st.ok(); h++) {
      MedusaHeadSlot& dst = s.medusa[h];
      dst.w.resize(size_t(num_layers));
      dst.b.resize(size_t(num_layers));
      for (int l = 0; l < num_layers && st.ok(); l++) {
        st = upload_new(dev_, heads[h].weights[size_t(l)], H * H, "Medusa weights", &dst.w[size_t(l)]);
        if (st.ok()) st = upload_new(dev_, heads[h].biases[size_t(l)], H, "Medusa weights", &dst.b[size_t(l)]);
      }
      shared_lm = shared_lm || !heads[h].lm_head;
      if (!st.ok() || !heads[h].lm_head) continue;
      if (DV == 0) {
        st = upload_new(dev_, heads[h].lm_head, V * H, "Medusa weights", &dst.lm_head);
        continue;
      }
      // The upload reads `gathered` asynchronously: synchronize before it is refilled.
      if (!gathered.empty()) st = dev_->synchronize();
      gathered.resize(size_t(DV * H));
      for (int64_t i = 0; i < DV && st.ok(); i++)
        std::memcpy(&gathered[size_t(i * H)], heads[h].lm_head + int64_t(draft_vocab[size_t(i)]) * H, size_t(H) * 4);
      if (st.ok()) st = upload_new(dev_, gathered.data(), DV * H, "Medusa weights", &dst.lm_head);
    }
    if (st.ok() && DV > 0) st = upload_new(dev_, draft_vocab.data(), DV, "Medusa draft vocabulary", &s.draft_ids);
    if (st.ok() && DV > 0 && shared_lm) {
      const int64_t row = weight_row_bytes(lm_head_.dtype, H);
      st = s.draft_lm_head.allocate(dev_, DV * row, "Medusa draft LM head");
      const auto* src = static_cast<const uint8_t*>(lm_head_.data);
      for (int64_t i = 0, j; i < DV && st.ok(); i = j) {
        for (j = i + 1; j < DV && draft_vocab[size_t(j)] == draft_vocab[size_t(j - 1)] + 1;) j++;
        dev_->copy(s.draft_lm_head.data() + i * row, src + int64_t(draft_vocab[size_t(i)]) * row, (j - i) * row);
      }
    }
  } catch (const std::bad_alloc&) {
    st = Status::Error("adapter_load_failed", "out of memory copying Medusa weights");
  }
  const Status synced = dev_->synchronize();  // the uploads read the caller's arrays
  if (st.ok()) st = synced;
  if (!st.ok()) {
    s.medusa.clear();
    s.draft_vocab = 0;
    s.draft_ids.reset();
    s.draft_lm_head.reset();
    if (st.code == "model_invalid") st.code = "adapter_load_failed";
    return st;
  }
  s.kind.store(Slot::kMedusa);
  return Status::Ok();
}

// Free a slot. The engine guarantees no queued or running row references it, so its memory can
// go immediately (release waits for queued ops that may still read it); swapping with empty
// vectors returns the host memory rather than keeping capacity.
Status LlamaModel::unload(int slot) {
  if (slot < 0 || slot >= int(slots_.size())) return invalid("adapter slot " + std::to_string(slot) + " out of range");
  Slot& s = *slots_[size_t(slot)];
  s.kind.store(Slot::kFree);
  std::vector<std::array<LoraModuleSlot, kNumLoraModules>>().swap(s.lora);
  std::vector<MedusaHeadSlot>().swap(s.medusa);
  s.draft_vocab = 0;
  s.draft_ids.reset();
  s.draft_lm_head.reset();
  return Status::Ok();
}

int LlamaModel::medusa_heads(int slot) const {
  if (slot < 0 || slot >= int(slots_.size()) || slots_[size_t(slot)]->kind.load() != Slot::kMedusa) return 0;
  return int(slots_[size_t(slot)]->medusa.size());
}

// Everything the forward pass indexes with is checked here, before any kernel runs: token ids,
// block ids, cache coverage of each block table, adapter slot kinds, sampling and scoring and the
// output buffer sizes. A failure names the row and the value, and the cache is left untouched.
Status LlamaModel::validate(const StepInput& in) const {
  if (in.num_tokens > opt_.max_batch_tokens)
    return invalid("step has " + std::to_string(in.num_tokens) + " tokens; max_batch_tokens is " +
                   std::to_string(opt_.max_batch_tokens));
  const int64_t bs = opt_.kv_block_size;
  int64_t next = 0, sampled = 0, scored = 0, drafts = 0;
  for (size_t r = 0; r < in.rows.size(); r++) {
    const StepRowDesc& row = in.rows[r];
    const std::string where = "row " + std::to_string(r) + ": ";
    if (row.n < 1 || row.tok_start != next) return invalid(where + "empty row or bad token layout");
    next += row.n;
    if (row.cache_len < 0) return invalid(where + "cacheLen is negative");
    const int64_t need = (int64_t(row.cache_len) + row.n + bs - 1) / bs;
    if (need > row.num_blocks)
      return invalid(where + "blockTable has " + std::to_string(row.num_blocks) + " blocks; cache indices up to " +
                     std::to_string(row.cache_len + row.n) + " need " + std::to_string(need));
    for (int64_t b = 0; b < need; b++)
      if (row.block_table[b] < 0 || row.block_table[b] >= opt_.kv_blocks)
        return invalid(where + "block id " + std::to_string(row.block_table[b]) + " outside [0, " +
                       std::to_string(opt_.kv_blocks) + ")");
    for (int i = 0; i < row.n; i++) {
      const int32_t tok = in.tokens[row.tok_start + i], pos = in.positions[row.tok_start + i];
      if (tok < 0 || tok >= cfg_.vocab)
        return invalid(where + "token " + std::to_string(tok) + " outside the vocabulary of " + std::to_string(cfg_.vocab));
      if (pos < 0) return invalid(where + "negative position");
    }
    if (row.lora_slot != -1 &&
        (row.lora_slot < 0 || row.lora_slot >= int(slots_.size()) ||
         slots_[size_t(row.lora_slot)]->kind.load() != Slot::kLora))
      return invalid(where + "loraSlot " + std::to_string(row.lora_slot) + " holds no LoRA adapter");
    if (row.score_count != 0 && row.score_count != row.n)
      return invalid(where + "scoreTargets must be empty or one per token");
    for (int i = 0; i < row.score_count; i++) {
      const int32_t target = row.score_targets[i];
      if (target < -1 || target >= cfg_.vocab) return invalid(where + "score target " + std::to_string(target) + " outside the vocabulary");
      if (target >= 0) scored++;
      if (target >= 0 && row.sampling && (row.tree_mask || i == row.n - 1))
        return invalid(where + "a sampled position is never scored");
    }
    if (row.sampling) {
      const SampleParams& p = row.sampling->base;
      if (p.top_logprobs < 0 || p.top_logprobs > in.max_top)
        return invalid(where + "topLogprobs " + std::to_string(p.top_logprobs) + " outside [0, " + std::to_string(in.max_top) + "]");
      if (row.sampling->n_penalties < 0) return invalid(where + "negative penalty count");
      sampled += row.tree_mask ? row.n : 1;
    }
    if (row.medusa_slot != -1) {
      const int heads = medusa_heads(row.medusa_slot);
      if (heads == 0) return invalid(where + "medusaSlot " + std::to_string(row.medusa_slot) + " holds no Medusa heads");
      if (row.medusa_heads < 1 || row.medusa_heads > heads)
        return invalid(where + "medusaHeads " + std::to_string(row.medusa_heads) + " outside [1, " +
                       std::to_string(heads) + "], the heads of slot " + std::to_string(row.medusa_slot));
      if (!row.sampling) return invalid(where + "Medusa heads run where a row samples; this row samples nothing");
      drafts += row.medusa_heads;
    }
  }
  if (next != in.num_tokens) return invalid("rows cover " + std::to_string(next) + " of " + std::to_string(in.num_tokens) + " tokens");
  if (in.max_top < 0 || in.max_top > 4096) return invalid("topLogprobs must be in [0, 4096]");
  if (in.draft_top_k < 1 || in.draft_top_k > 1024) return invalid("draftTopK must be in [1, 1024]");
  auto sized = [](const char* what, int64_t got, int64_t want) {
    return got == want ? Status::Ok()
                       : invalid(std::string(what) + " has " + std::to_string(got) + " entries; the step needs " + std::to_string(want));
  };
  LOOM_RETURN_IF_ERROR(sized("tokens out", in.tokens_len, sampled));
  LOOM_RETURN_IF_ERROR(sized("topIds", in.top_len, sampled * in.max_top));
  LOOM_RETURN_IF_ERROR(sized("scores", in.scores_len, scored));
  LOOM_RETURN_IF_ERROR(sized("walkEnds", in.walk_ends_len, int64_t(in.rows.size())));
  LOOM_RETURN_IF_ERROR(sized("draftIds", in.draft_ids_len, drafts * in.draft_top_k));
  for (const auto& c : in.copies)
    for (int i = 0; i < c.count; i++)
      for (int32_t e : {c.from[i], c.to[i]}) {
        if (e < 0 || e / bs >= c.num_blocks) return invalid("kvCopies entry " + std::to_string(e) + " is outside its blockTable");
        const int32_t b = c.block_table[e / bs];
        if (b < 0 || b >= opt_.kv_blocks) return invalid("kvCopies block id " + std::to_string(b) + " is out of range");
      }
  return Status::Ok();
}

// Consecutive rows with one adapter become one run (one SGMV segment), so an adapter shared by
// neighbouring rows is read once per module; rows without an adapter are skipped.
void LlamaModel::plan_lora_runs(const StepInput& in) {
  lora_runs_.clear();
  for (const auto& row : in.rows) {
    if (row.lora_slot < 0) continue;
    if (!lora_runs_.empty() && lora_runs_.back().slot == row.lora_slot &&
        lora_runs_.back().tok_start + lora_runs_.back().tok_count == row.tok_start) {
      lora_runs_.back().tok_count += row.n;
      continue;
    }
    lora_runs_.push_back({row.tok_start, row.n, row.lora_slot});
  }
}

// Plan the LoRA segments of projections `modules` of one layer (every LoRA run's A and Bt per
// module) and hand their bytes to the device as a prefetch hint for the base matmul that runs
// before lora_pass: at large batches that matmul is compute-bound and can pull them into cache.
void LlamaModel::lora_plan(int layer, const int* modules, int nmod) {
  segs_.clear();
  expand_segs_.clear();
  seg_module_.clear();
  lora_regions_.clear();
  for (const LoraRun& run : lora_runs_) {
    const auto& mods = slots_[size_t(run.slot)]->lora[size_t(layer)];
    int32_t col = 0;  // this run's modules sit side by side in the scratch columns
    for (int m = 0; m < nmod; m++) {
      const LoraModuleSlot& ms = mods[size_t(modules[m])];
      if (ms.rank == 0) continue;
      segs_.push_back({run.tok_start, run.tok_count, ms.a.data(), ms.dtype, ms.rank, col, ms.scale});
      expand_segs_.push_back({run.tok_start, run.tok_count, ms.bt.data(), ms.dtype, ms.rank, col, ms.scale});
      seg_module_.push_back(m);
      col += ms.rank;
      lora_regions_.push_back({ms.a.data(), ms.a.bytes()});
      lora_regions_.push_back({ms.bt.data(), ms.bt.bytes()});
    }
  }
  if (!lora_regions_.empty()) dev_->prefetch_in_next_matmul(lora_regions_.data(), int(lora_regions_.size()));
}

// Apply the segments lora_plan planned for nmod modules (sharing input x [T, ldx] of K
// features): one shrink for all modules together into the low-rank scratch [T, ldt], then one
// expand per module into ys[m] [T, lds[m]] of ns[m] features.
void LlamaModel::lora_pass(int nmod, const float* x, int64_t ldx, int64_t K, float* const* ys, const int64_t* lds,
                           const int64_t* ns) {
  // The scratch has room for three modules' ranks per token (q|k|v is the widest group).
  const int64_t ldt = 3 * int64_t(std::max(1, opt_.max_lora_rank));
  if (segs_.empty()) return;  // no LoRA row in this step: the base projection is the answer
  const auto started = std::chrono::steady_clock::now();
  LoraOutput outs[3];
  for (int m = 0; m < nmod; m++) outs[m] = {ys[m], lds[m], ns[m]};
  dev_->lora_apply(x, ldx, K, segs_.data(), expand_segs_.data(), seg_module_.data(), int(segs_.size()), outs,
                   lora_tmp_.data(), ldt);
  prof_lora_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count();
}

// One forward pass over every row of the step (prefill chunks, decode rows, Medusa candidates
// together): validate, apply KV moves, then per layer attention and MLP blocks with their LoRA
// passes, then logits only for the requested positions and Medusa heads on their rows.
// Semantics of each op: kernels/kernels.h. Nothing here allocates once the arenas are warm.
Status LlamaModel::step(const StepInput& in) {
  const auto started = std::chrono::steady_clock::now();
  const Status st = forward(in);
  prof_step_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count();
  prof_steps_++;
  return st;
}

StepProfile LlamaModel::take_profile() {
  return {prof_steps_.exchange(0), prof_step_ns_.exchange(0), prof_lora_ns_.exchange(0)};
}

namespace {
// Grow-only device buffers: allocate (at least doubling) only when a step needs more.
template <typename T>
Status grow(Device* dev, DeviceBuffer<T>* buf, int64_t n, const char* what) {
  if (buf->size() >= n) return Status::Ok();
  return buf->allocate(dev, std::max(n, buf->size() * 2), what);
}
}  // namespace

template <typename T>
Status LlamaModel::output(T* host, int64_t n, DeviceBuffer<T>* buf, const char* what, T** out) {
  if (host_io_) {
    *out = host;
    return Status::Ok();
  }
  LOOM_RETURN_IF_ERROR(grow(dev_, buf, n, what));
  *out = buf->data();
  return Status::Ok();
}

template <typename T>
void LlamaModel::finish_output(T* host, int64_t n, const DeviceBuffer<T>& buf) {
  if (!host_io_ && host != nullptr && n > 0) dev_->download(host, buf.data(), n * int64_t(sizeof(T)));
}

// The step's host inputs, packed into one int32 array and uploaded once: tokens [T], positions
// [T], then per row its block table (the blocks its cache indices reach), its tree mask (bytes,
// padded to whole int32s), its penalty pairs (per sampled position of a verification row with
// penalties: the row's pairs plus the path's tokens), its grammar masks, its heads' replication
// [heads] and the token its heads read; then the absolute token rows of the logits [S + C] (sampled
// positions, then scored ones), the scored targets' flat logits indices [C], and per kv copy its
// block table, from and to. Offsets go to row_plans_ / copy_plans_; sample_params_ point into the
// uploaded buffer, so a device sampler reads penalties and masks from its own memory.
Status LlamaModel::upload_step(const StepInput& in) {
  const int64_t T = in.num_tokens, bs = opt_.kv_block_size, W = (cfg_.vocab + 31) / 32;
  // Each sampled position's penalty list: where it starts in the buffer and its length.
  struct PenaltyPlan {
    int64_t offset, count;
  };
  std::vector<PenaltyPlan> penalty_plans;
  std::vector<int64_t> allowed_offsets;  // per row: its masks' offset, -1 none
  int64_t n = 2 * T, nsample = 0, nscore = 0;
  row_plans_.assign(in.rows.size(), RowPlan{});
  allowed_offsets.assign(in.rows.size(), -1);
  // Penalty lists of verification nodes: the row's pairs, then each path token counted once more.
  std::vector<PenaltyToken> merged;
  std::vector<int64_t> merged_start;
  for (size_t r = 0; r < in.rows.size(); r++) {
    const StepRowDesc& row = in.rows[r];
    RowPlan& plan = row_plans_[r];
    plan.block_table = n;
    n += (int64_t(row.cache_len) + row.n + bs - 1) / bs;
    if (row.tree_mask) {
      plan.tree_mask = n;
      n += (int64_t(row.n) * row.n + 3) / 4;
    }
    plan.sampled = nsample;
    plan.scored = nscore;
    for (int i = 0; i < row.score_count; i++) nscore += row.score_targets[i] >= 0;
    if (!row.sampling) continue;
    const RowSampleDesc& rs = *row.sampling;
    const int P = row.tree_mask ? row.n : 1;
    nsample += P;
    const SampleParams& b = rs.base;
    const bool penalised = b.repetition_penalty != 1 || b.frequency_penalty != 0 || b.presence_penalty != 0;
    if (!penalised || !row.tree_mask) {
      // One list for every position: the row's own.
      for (int p = 0; p < P; p++) penalty_plans.push_back({n, rs.n_penalties});
      n += 2 * int64_t(rs.n_penalties);
    } else {
      for (int p = 0; p < P; p++) {
        merged_start.push_back(int64_t(merged.size()));
        const size_t first = merged.size();
        merged.insert(merged.end(), rs.penalties, rs.penalties + rs.n_penalties);
        // The path from the root's child down to p: p and its ancestors but the root.
        for (int j = p; j > 0; j--) {
          if (j != p && !row.tree_mask[int64_t(p) * row.n + j]) continue;
          const int32_t id = in.tokens[row.tok_start + j];
          size_t k = first;
          while (k < merged.size() && merged[k].id != id) k++;
          if (k == merged.size()) merged.push_back({id, 0});
          merged[k].count++;
        }
        const int64_t count = int64_t(merged.size() - first);
        penalty_plans.push_back({n, count});
        n += 2 * count;
      }
    }
    if (rs.allowed) {
      allowed_offsets[r] = n;
      n += P * W;
    }
  }
  for (size_t r = 0; r < in.rows.size(); r++) {
    const StepRowDesc& row = in.rows[r];
    if (row.medusa_slot < 0) continue;
    row_plans_[r].replicate = n;
    n += row.medusa_heads;
    row_plans_[r].head_index = n++;
  }
  step_sampled_ = nsample;
  step_scored_ = nscore;
  step_logit_rows_ = n;
  n += nsample + nscore;
  step_score_index_ = n;
  n += nscore;
  copy_plans_.assign(in.copies.size(), CopyPlan{});
  for (size_t c = 0; c < in.copies.size(); c++) {
    copy_plans_[c] = {n, n + in.copies[c].num_blocks, n + in.copies[c].num_blocks + in.copies[c].count};
    n += in.copies[c].num_blocks + 2 * int64_t(in.copies[c].count);
  }
  try {
    host_step_.resize(size_t(n));
    sample_params_.resize(size_t(nsample));
  } catch (const std::bad_alloc&) {
    return invalid("out of host memory packing a step of " + std::to_string(n) + " input values");
  }
  LOOM_RETURN_IF_ERROR(grow(dev_, &step_buf_, std::max<int64_t>(n, 1), "the step buffer"));
  int32_t* h = host_step_.data();
  const int32_t* d = step_buf_.data();  // the same offsets in device memory
  step_tokens_ = 0;
  step_positions_ = T;
  std::memcpy(h, in.tokens, size_t(T) * 4);
  std::memcpy(h + T, in.positions, size_t(T) * 4);
  int32_t* sample_rows = h + step_logit_rows_;
  int32_t* score_rows = sample_rows + nsample;
  int32_t* score_index = h + step_score_index_;
  size_t pp = 0, mi = 0;
  for (size_t r = 0; r < in.rows.size(); r++) {
    const StepRowDesc& row = in.rows[r];
    const RowPlan& plan = row_plans_[r];
    std::memcpy(h + plan.block_table, row.block_table, size_t((int64_t(row.cache_len) + row.n + bs - 1) / bs) * 4);
    if (plan.tree_mask >= 0) std::memcpy(h + plan.tree_mask, row.tree_mask, size_t(row.n) * size_t(row.n));
    for (int i = 0, c = 0; i < row.score_count; i++) {
      if (row.score_targets[i] < 0) continue;
      // The target's flat index within its chunk of score rows (see score_chunk_rows): int32 offsets.
      const int64_t scored = plan.scored + c++;
      *score_rows++ = row.tok_start + i;
      *score_index++ = int32_t((scored % score_chunk_rows()) * cfg_.vocab + row.score_targets[i]);
    }
    if (plan.replicate >= 0) {
      const int64_t NH = row.medusa_heads;
      for (int64_t k = 0; k < NH; k++) h[plan.replicate + k] = 0;
      h[plan.head_index] = row.n - 1;
    }
    if (!row.sampling) continue;
    const RowSampleDesc& rs = *row.sampling;
    const int P = row.tree_mask ? row.n : 1;
    const bool draws = rs.base.temperature > 0 && rs.base.top_k != 1;
    const bool merged_row = !merged_start.empty() && row.tree_mask &&
                            (rs.base.repetition_penalty != 1 || rs.base.frequency_penalty != 0 || rs.base.presence_penalty != 0);
    if (allowed_offsets[r] >= 0) std::memcpy(h + allowed_offsets[r], rs.allowed, size_t(P * W) * 4);
    for (int p = 0; p < P; p++) {
      const int position = row.tree_mask ? p : row.n - 1;
      int depth = 0;
      if (row.tree_mask)
        for (int j = 0; j < p; j++) depth += row.tree_mask[int64_t(p) * row.n + j] != 0;
      const PenaltyPlan& pen = penalty_plans[pp++];
      const PenaltyToken* src = merged_row ? merged.data() + merged_start[mi++] : rs.penalties;
      if (!merged_row && p > 0) {
        // The row's one list is already in place (written for p = 0).
      } else {
        std::memcpy(h + pen.offset, src, size_t(pen.count) * 8);
      }
      SampleParams sp = rs.base;
      sp.row = int32_t(plan.sampled + p);
      sp.draws = rs.base.draws + (draws ? uint64_t(depth) : 0);
      sp.penalties = reinterpret_cast<const PenaltyToken*>(d + pen.offset);
      sp.n_penalties = int32_t(pen.count);
      sp.allowed = allowed_offsets[r] >= 0 ? reinterpret_cast<const uint32_t*>(d + allowed_offsets[r] + p * W) : nullptr;
      sp.allowed_lift = sp.allowed && rs.terminated && rs.terminated[p] != 0;
      sample_params_[size_t(plan.sampled + p)] = sp;
      sample_rows[plan.sampled + p] = row.tok_start + position;
    }
  }
  for (size_t c = 0; c < in.copies.size(); c++) {
    const KvCopyDesc& copy = in.copies[c];
    std::memcpy(h + copy_plans_[c].block_table, copy.block_table, size_t(copy.num_blocks) * 4);
    std::memcpy(h + copy_plans_[c].from, copy.from, size_t(copy.count) * 4);
    std::memcpy(h + copy_plans_[c].to, copy.to, size_t(copy.count) * 4);
  }
  dev_->upload(step_buf_.data(), h, n * 4);
  return Status::Ok();
}

// On a device that reads host memory (the cpu), sampling is arithmetic on the host's cores, and
// a sampled (not greedy) position costs a warper chain over the vocabulary, while a verification
// row's walk visits only a few of its nodes (the accepted path and one more). So sampled
// verification rows are walked lazily: rounds of one batched Device::sample over the nodes the
// walks stand at, then each walk moves to the child carrying its node's token. The first round
// also takes every other position (causal rows; greedy verification rows' every node: an argmax is
// cheap). The tokens are the ones sampling every node would give (each node's parameters, draws,
// penalties and mask are its own); nodes no walk reaches are left unsampled (-2), which the step
// contract allows. A device with its own memory samples every node at once instead: one launch,
// no round trips.
Status LlamaModel::sample_walking(const StepInput& in, const float* logits, int32_t* sampled, float* logprobs,
                                  int32_t* top_ids, float* top_lp) {
  const int64_t V = cfg_.vocab, S = step_sampled_, K = in.max_top;
  std::fill(sampled, sampled + S, -2);
  std::fill(logprobs, logprobs + S, 0.0f);
  std::fill(top_ids, top_ids + S * K, -1);
  std::fill(top_lp, top_lp + S * K, 0.0f);
  walk_at_.assign(in.rows.size(), -1);
  round_positions_.clear();
  for (size_t r = 0; r < in.rows.size(); r++) {
    const StepRowDesc& row = in.rows[r];
    if (!row.sampling) continue;
    const SampleParams& p = row.sampling->base;
    const bool draws = p.temperature > 0 && p.top_k != 1;
    if (row.tree_mask && draws) {
      walk_at_[r] = 0;  // walked lazily from the root
      round_positions_.push_back(row_plans_[r].sampled);
    } else {
      for (int i = 0; i < (row.tree_mask ? row.n : 1); i++) round_positions_.push_back(row_plans_[r].sampled + i);
    }
  }
  while (!round_positions_.empty()) {
    const int64_t n = int64_t(round_positions_.size());
    round_params_.resize(size_t(n));
    round_tokens_.resize(size_t(n));
    round_logprobs_.resize(size_t(n));
    round_top_ids_.resize(size_t(n * K));
    round_top_lp_.resize(size_t(n * K));
    for (int64_t i = 0; i < n; i++) round_params_[size_t(i)] = sample_params_[size_t(round_positions_[size_t(i)])];
    LOOM_RETURN_IF_ERROR(
        grow(dev_, &sample_scratch_, std::min(n, kSampleChunk) * sample_row_scratch_bytes(V), "the samplers' scratch"));
    for (int64_t c = 0; c < n; c += kSampleChunk) {
      const int64_t m = std::min(kSampleChunk, n - c);
      dev_->sample(logits, V, V, round_params_.data() + c, int(m), int(K), round_tokens_.data() + c,
                   round_logprobs_.data() + c, round_top_ids_.data() + c * K, round_top_lp_.data() + c * K,
                   sample_scratch_.data());
    }
    for (int64_t i = 0; i < n; i++) {
      const int64_t at = round_positions_[size_t(i)];
      sampled[at] = round_tokens_[size_t(i)];
      logprobs[at] = round_logprobs_[size_t(i)];
      std::copy_n(round_top_ids_.data() + i * K, K, top_ids + at * K);
      std::copy_n(round_top_lp_.data() + i * K, K, top_lp + at * K);
    }
    // Each walk moves to the first child (the nearest-ancestor relation of the mask) carrying its
    // node's token, or ends.
    round_positions_.clear();
    for (size_t r = 0; r < in.rows.size(); r++) {
      const int32_t node = walk_at_[r];
      if (node < 0) continue;
      const StepRowDesc& row = in.rows[r];
      const int32_t chosen = sampled[row_plans_[r].sampled + node];
      int32_t next = -1;
      for (int32_t c = node + 1; c < row.n && next < 0; c++) {
        const uint8_t* m = row.tree_mask + int64_t(c) * row.n;
        if (!m[node] || in.tokens[row.tok_start + c] != chosen) continue;
        bool child = true;  // node is c's nearest ancestor: nothing between them is one
        for (int32_t j = node + 1; j < c && child; j++) child = !m[j];
        if (child) next = c;
      }
      walk_at_[r] = next;
      if (next >= 0) round_positions_.push_back(row_plans_[r].sampled + next);
    }
  }
  return Status::Ok();
}

Status LlamaModel::forward(const StepInput& in) {
  LOOM_RETURN_IF_ERROR(validate(in));  // on the host inputs, before anything reaches the device
  LOOM_RETURN_IF_ERROR(upload_step(in));
  const int64_t T = in.num_tokens, H = cfg_.hidden, I = cfg_.intermediate, D = cfg_.head_dim;
  const int64_t QD = cfg_.heads * D, KD = cfg_.kv_heads * D, W = QD + 2 * KD, V = cfg_.vocab;
  const int bs = opt_.kv_block_size;
  const int32_t* tokens = step_ints(step_tokens_);  // device copies of the step's inputs

  // Cache moves first (Medusa compaction), in every layer: cache indices to slots on the device.
  int64_t ncopy = 0;
  for (const auto& c : in.copies) ncopy += c.count;
  if (ncopy > 0) {
    LOOM_RETURN_IF_ERROR(grow(dev_, &copy_slots_, 2 * ncopy, "the kv-copy slots"));
    int32_t* from = copy_slots_.data();
    for (size_t c = 0; c < in.copies.size(); c++) {
      const int32_t count = in.copies[c].count;
      const CopyPlan& plan = copy_plans_[c];
      int32_t* to = from + count;
      dev_->paged_slots(step_ints(plan.block_table), step_ints(plan.from), count, bs, from);
      dev_->paged_slots(step_ints(plan.block_table), step_ints(plan.to), count, bs, to);
      for (int64_t l = 0; l < cfg_.layers; l++)
        dev_->kv_copy(from, to, count, KD, kv_dtype_, kcache_[size_t(l)].data(), vcache_[size_t(l)].data());
      from = to + count;
    }
  }
  if (T == 0) return dev_->synchronize();

  // Per-token cache slots and the step's RoPE tables, on the device, once for every layer.
  attn_rows_.clear();
  for (size_t r = 0; r < in.rows.size(); r++) {
    const StepRowDesc& row = in.rows[r];
    const RowPlan& plan = row_plans_[r];
    const uint8_t* mask =
        plan.tree_mask >= 0 ? reinterpret_cast<const uint8_t*>(step_ints(plan.tree_mask)) : nullptr;
    attn_rows_.push_back({row.tok_start, row.n, row.cache_len, step_ints(plan.block_table), mask});
  }
  dev_->kv_slots(attn_rows_.data(), int(attn_rows_.size()), bs, kv_slots_.data());
  dev_->rope_tables(step_ints(step_positions_), T, inv_freq_.data(), D / 2, cos_.data(), sin_.data());
  plan_lora_runs(in);  // adapter runs are the same in every layer: compute them once
  const AttnShape shape{int32_t(cfg_.heads), int32_t(cfg_.kv_heads), int32_t(D), int32_t(bs),
                        float(1.0 / std::sqrt(double(D))), kv_dtype_};

  // Activations live in arenas sized at load for max_batch_tokens; nothing below allocates.
  float* x = x_.data();      // [T, H] residual stream
  float* xn = xn_.data();    // [T, H] normed input of a block
  float* qkv = qkv_.data();  // [T, QD + 2 KD]: q | k | v
  // x = embed[tokens]                                          // [T, H]
  dev_->embedding(tokens, T, embed_, x);

  for (int64_t l = 0; l < cfg_.layers; l++) {
    const Layer& L = layers_[size_t(l)];
    // ---- Attention block ----
    // xn = RMSNorm(x) · w_in                                  // [T, H]
    // q | k | v = xn · [Wq; Wk; Wv]ᵀ (+ Qwen2 biases), one pass over the three weights so the
    // thread pool splits their rows together.                // [T, QD + 2 KD]
    // One call, so a device can fold the norm into the projection; xn is kept for the LoRA pass.
    const MatmulJob qkv_jobs[3] = {{L.q, L.bq.data(), qkv, W}, {L.k, L.bk.data(), qkv + QD, W},
                                   {L.v, L.bv.data(), qkv + QD + KD, W}};  // data() is null without biases
    const int qkv_mods[3] = {kQ, kK, kV};
    lora_plan(int(l), qkv_mods, 3);
    dev_->rmsnorm_matmul(x, T, H, L.in_norm.data(), cfg_.rms_eps, xn, !segs_.empty(), qkv_jobs, 3);
    // LoRA on q, k, v: one shrink of xn for the three modules, then one expand per module.
    {
      float* ys[3] = {qkv, qkv + QD, qkv + QD + KD};
      const int64_t lds[3] = {W, W, W}, ns[3] = {QD, KD, KD};
      lora_pass(3, xn, H, H, ys, lds, ns);
    }
    // RoPE on q and k in place (v is not rotated); rows are tokens, heads are D-wide slices. Then
    // the new tokens' K and V go into their cache slots, so attention reads committed history and
    // this step's tokens the same way (through the block table). One call: a device fuses them.
    void* kc = kcache_[size_t(l)].data();
    void* vc = vcache_[size_t(l)].data();
    dev_->rope_kv_store(qkv, T, W, int(cfg_.heads), int(cfg_.kv_heads), int(D), cos_.data(), sin_.data(),
                        kv_slots_.data(), kv_dtype_, kc, vc);
    // attn = softmax(q kᵀ / sqrt(D)) v per row, causal or tree-masked among new tokens  // [T, QD]
    dev_->attention(qkv, W, kc, vc, attn_rows_.data(), int(attn_rows_.size()), shape, attn_.data());
    // Residual add fused into the projection: the matmul accumulates straight into x.  // [T, H]
    const MatmulJob o_job{L.o, nullptr, x, H};
    const int o_mods[1] = {kO};
    lora_plan(int(l), o_mods, 1);
    dev_->matmul(attn_.data(), T, QD, &o_job, 1, true);  // x += o_proj(attn)
    {
      float* ys[1] = {x};
      const int64_t lds[1] = {H}, ns[1] = {H};
      lora_pass(1, attn_.data(), QD, QD, ys, lds, ns);
    }
    // ---- MLP block (SwiGLU) ----
    // xn = RMSNorm(x) · w_post                                // [T, H]
    // gate, up = xn · Wgateᵀ, xn · Wupᵀ in one pass (the norm in the same call, as above)  // [T, I] each
    const MatmulJob gu_jobs[2] = {{L.gate, nullptr, gate_.data(), I}, {L.up, nullptr, up_.data(), I}};
    const int gu_mods[2] = {kGate, kUp};
    lora_plan(int(l), gu_mods, 2);
    dev_->rmsnorm_matmul(x, T, H, L.post_norm.data(), cfg_.rms_eps, xn, !segs_.empty(), gu_jobs, 2);
    {
      float* ys[2] = {gate_.data(), up_.data()};
      const int64_t lds[2] = {I, I}, ns[2] = {I, I};
      lora_pass(2, xn, H, H, ys, lds, ns);
    }
    // act = SiLU(gate) ⊙ up                                  // [T, I]
    dev_->silu_mul(gate_.data(), up_.data(), T * I, act_.data());
    // x += act · Wdownᵀ (+ LoRA)                              // [T, H]
    const MatmulJob down_job{L.down, nullptr, x, H};
    const int down_mods[1] = {kDown};
    lora_plan(int(l), down_mods, 1);
    dev_->matmul(act_.data(), T, I, &down_job, 1, true);  // x += down_proj(act)
    {
      float* ys[1] = {x};
      const int64_t lds[1] = {H}, ns[1] = {H};
      lora_pass(1, act_.data(), I, I, ys, lds, ns);
    }
  }

  // LM head on the sampled positions, then the scored ones: gather, final norm, project.
  // [S + C, H] -> [S + C, V]
  const int64_t S = step_sampled_, C = step_scored_, nlog = S + C, R = int64_t(in.rows.size());
  float* head_x = head_x_.data();
  LOOM_RETURN_IF_ERROR(grow(dev_, &logits_, std::max<int64_t>(nlog * V, 1), "logits"));
  float* logits = logits_.data();
  if (nlog > 0) {
    dev_->gather_rows(x, H, step_ints(step_logit_rows_), nlog, H, head_x);
    const MatmulJob head{lm_head_, nullptr, logits, V};
    dev_->rmsnorm_matmul(head_x, nlog, H, final_norm_.data(), cfg_.rms_eps, head_x, false, &head, 1);
    if (in.debug_logits) dev_->download(in.debug_logits, logits, nlog * V * 4);
  }

  // Sampling where the logits are (Device::sample, the engine's TokenSampler bit for bit), in
  // chunks so the samplers' scratch stays bounded whatever the batch.
  int32_t* sampled = nullptr;
  float *logprobs = nullptr, *top_lp = nullptr;
  int32_t* top_ids = nullptr;
  LOOM_RETURN_IF_ERROR(output(in.tokens_out, std::max<int64_t>(S, 1), &sampled_, "sampled tokens", &sampled));
  LOOM_RETURN_IF_ERROR(output(in.logprobs_out, std::max<int64_t>(S, 1), &logprobs_, "logprobs", &logprobs));
  LOOM_RETURN_IF_ERROR(output(in.top_ids, std::max<int64_t>(in.top_len, 1), &top_ids_, "top ids", &top_ids));
  LOOM_RETURN_IF_ERROR(output(in.top_logprobs, std::max<int64_t>(in.top_len, 1), &top_logprobs_, "top logprobs", &top_lp));
  if (S > 0 && host_io_) {
    LOOM_RETURN_IF_ERROR(sample_walking(in, logits, sampled, logprobs, top_ids, top_lp));
  } else if (S > 0) {
    const int64_t row_bytes = sample_row_scratch_bytes(V);
    LOOM_RETURN_IF_ERROR(grow(dev_, &sample_scratch_, std::min(S, kSampleChunk) * row_bytes, "the samplers' scratch"));
    for (int64_t c = 0; c < S; c += kSampleChunk) {
      const int64_t m = std::min(kSampleChunk, S - c);
      dev_->sample(logits, V, V, sample_params_.data() + c, int(m), in.max_top, sampled + c, logprobs + c,
                   top_ids + c * in.max_top, top_lp + c * in.max_top, sample_scratch_.data());
    }
  }

  // Prompt logprobs: each scored row's log Σ exp and its target's logit (scores = logit - norm,
  // formed on the host once both are back).
  if (C > 0) {
    LOOM_RETURN_IF_ERROR(grow(dev_, &score_norms_, C, "prompt logprobs"));
    LOOM_RETURN_IF_ERROR(grow(dev_, &score_logits_, C, "prompt logprobs"));
    dev_->log_sum_exp(logits + S * V, C, V, V, score_norms_.data());
    // Gather each target's logit as a width-1 row of its chunk of score rows (int32 indices).
    for (int64_t c = 0; c < C; c += score_chunk_rows()) {
      const int64_t m = std::min(score_chunk_rows(), C - c);
      dev_->gather_rows(logits + (S + c) * V, 1, step_ints(step_score_index_ + c), m, 1, score_logits_.data() + c);
    }
  }

  // The sample-and-match walk of each verification row (LeafRow n = 0: the row does not walk,
  // leaf -1): from the root, to the first child carrying the node's sampled token.
  int32_t* leaves = nullptr;
  LOOM_RETURN_IF_ERROR(output(in.walk_ends, std::max<int64_t>(R, 1), &leaves_, "walk ends", &leaves));
  leaf_rows_.clear();
  for (size_t r = 0; r < in.rows.size(); r++) {
    const StepRowDesc& row = in.rows[r];
    const bool walks = row.tree_mask != nullptr && row.sampling != nullptr;
    leaf_rows_.push_back({row.tok_start, walks ? row.n : 0, int32_t(row_plans_[r].sampled), attn_rows_[r].tree_mask});
  }
  if (R > 0) dev_->tree_walk(tokens, sampled, leaf_rows_.data(), int(R), leaves);

  // Medusa heads where each row's sampling ends (a verification row's walk end, a causal row's
  // last token), on the final-normed hidden state: x_h = x + SiLU(W_h x + b_h) per block, then an
  // LM head, then each head's best ids. A row's heads run together, as few ops as the shapes
  // allow: the first blocks of all heads are one matmul (same input), each residual one op over
  // [NH, H], and heads that reuse the base LM head (version 2) one LM-head matmul over all NH
  // rows. Later blocks and own LM heads (version 1) go head by head.
  int32_t* draft_ids = nullptr;
  LOOM_RETURN_IF_ERROR(output(in.draft_ids, std::max<int64_t>(in.draft_ids_len, 1), &draft_ids_, "draft ids", &draft_ids));
  int32_t* draft_out = draft_ids;
  for (size_t r = 0; r < in.rows.size(); r++) {
    const auto& row = in.rows[r];
    if (row.medusa_slot < 0) continue;
    const Slot& s = *slots_[size_t(row.medusa_slot)];
    const int64_t NH = row.medusa_heads;  // the slot's first NH heads: what the next tree's depth uses
    float* hidden = head_x;  // [1, H]
    const int32_t* at = leaf_rows_[r].n > 0 ? leaves + r : step_ints(row_plans_[r].head_index);
    dev_->gather_rows(x + int64_t(row.tok_start) * H, H, at, 1, H, hidden);
    dev_->rmsnorm(hidden, 1, H, H, final_norm_.data(), cfg_.rms_eps, hidden, H);
    LOOM_RETURN_IF_ERROR(grow(dev_, &medusa_x_, NH * H, "Medusa activations"));
    LOOM_RETURN_IF_ERROR(grow(dev_, &medusa_t_, NH * H, "Medusa activations"));
    LOOM_RETURN_IF_ERROR(grow(dev_, &medusa_logits_, NH * V, "Medusa logits"));
    float* xh = medusa_x_.data();  // [NH, H]: head h at h·H
    float* t = medusa_t_.data();   // [NH, H]: W x + b of the current block
    float* out = medusa_logits_.data();  // [NH, V]
    dev_->gather_rows(hidden, H, step_ints(row_plans_[r].replicate), NH, H, xh);
    for (int b = 0; b < s.medusa_layers; b++) {
      medusa_jobs_.clear();
      for (int64_t h = 0; h < NH; h++) {
        const MedusaHeadSlot& hs = s.medusa[size_t(h)];
        medusa_jobs_.push_back({{hs.w[size_t(b)].data(), DType::F32, H, H}, hs.b[size_t(b)].data(), t + h * H, NH * H});
      }
      if (b == 0) {
        dev_->matmul(hidden, 1, H, medusa_jobs_.data(), int(NH), false);  // every head reads x
      } else {
        for (int64_t h = 0; h < NH; h++) dev_->matmul(xh + h * H, 1, NH * H, &medusa_jobs_[size_t(h)], 1, false);
      }
      dev_->silu_residual(t, NH * H, xh);
    }
    // The heads' logits cover the slot's draft vocabulary (DV columns, each standing for the id
    // draft_ids holds), or the whole vocabulary.
    const int64_t DV = s.draft_vocab > 0 ? s.draft_vocab : V;
    const WeightView base_lm = s.draft_vocab > 0 ? WeightView{s.draft_lm_head.data(), lm_head_.dtype, DV, H} : lm_head_;
    bool shared_lm = true;
    for (int64_t h = 0; h < NH; h++) shared_lm = shared_lm && s.medusa[size_t(h)].lm_head.empty();
    if (shared_lm) {
      const MatmulJob job{base_lm, nullptr, out, DV};  // rows h in order: out [NH, DV]
      dev_->matmul(xh, NH, H, &job, 1, false);
    } else {
      for (int64_t h = 0; h < NH; h++) {
        const MedusaHeadSlot& hs = s.medusa[size_t(h)];
        const WeightView lm = hs.lm_head.empty() ? base_lm : WeightView{hs.lm_head.data(), DType::F32, DV, H};
        const MatmulJob job{lm, nullptr, out + h * DV, DV};
        dev_->matmul(xh + h * H, 1, H, &job, 1, false);
      }
    }
    // Each head's K best ids, what the engine's draft takes.  [NH, K]
    dev_->top_k(out, NH, DV, DV, in.draft_top_k, s.draft_vocab > 0 ? s.draft_ids.data() : nullptr, draft_out);
    if (in.debug_medusa_logits)
      for (int64_t h = 0; h < NH; h++)
        dev_->download(in.debug_medusa_logits + ((draft_out - draft_ids) / in.draft_top_k + h) * V, out + h * DV, DV * 4);
    draft_out += NH * in.draft_top_k;
  }

  // Results to the caller's arrays (nothing to move on a device that wrote them in place), then
  // one wait for everything issued.
  finish_output(in.tokens_out, S, sampled_);
  finish_output(in.logprobs_out, S, logprobs_);
  finish_output(in.top_ids, in.top_len, top_ids_);
  finish_output(in.top_logprobs, in.top_len, top_logprobs_);
  finish_output(in.walk_ends, R, leaves_);
  finish_output(in.draft_ids, in.draft_ids_len, draft_ids_);
  if (C > 0) {
    host_score_norms_.resize(size_t(C));
    host_score_logits_.resize(size_t(C));
    dev_->download(host_score_norms_.data(), score_norms_.data(), C * 8);
    dev_->download(host_score_logits_.data(), score_logits_.data(), C * 4);
  }
  LOOM_RETURN_IF_ERROR(dev_->synchronize());
  for (int64_t c = 0; c < C; c++) in.scores[c] = float(double(host_score_logits_[size_t(c)]) - host_score_norms_[size_t(c)]);
  return Status::Ok();
}

}  // namespace loom
