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
  WeightView q, k, v, o, gate, up, down;  // [out, in] each, stored dtype
  std::vector<float> in_norm, post_norm;  // [H]
  std::vector<float> bq, bk, bv;          // Qwen2 biases [out] (empty otherwise)
};

// One module's A and Bt in the model's dtype: f32 models keep f32 adapters (LoRA rows then match
// merged weights to f32 rounding); 16-bit models store them in the same 16-bit dtype, halving
// the bytes a step with many distinct adapters streams (compute stays f32).
struct LoraModuleSlot {
  int32_t rank = 0;  // 0: the adapter does not touch this module
  float scale = 0.0f;
  DType dtype = DType::F32;
  std::vector<float> a, bt;        // f32: A [rank, in], Bt [rank, out] (B transposed)
  std::vector<uint16_t> a16, bt16;  // bf16/f16: the same layouts
  const void* a_data() const { return dtype == DType::F32 ? static_cast<const void*>(a.data()) : a16.data(); }
  const void* bt_data() const { return dtype == DType::F32 ? static_cast<const void*>(bt.data()) : bt16.data(); }
};

namespace {
uint16_t to_half(DType dt, float v) { return dt == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v); }
}  // namespace

struct MedusaHeadSlot {
  std::vector<std::vector<float>> w;  // numLayers × [H, H]
  std::vector<std::vector<float>> b;  // numLayers × [H]
  std::vector<float> lm_head;         // [V, H] or empty (use the base lm_head)
};

struct LlamaModel::Slot {
  enum Kind : int { kFree = 0, kLora = 1, kMedusa = 2 };
  std::atomic<int> kind{kFree};
  std::vector<std::array<LoraModuleSlot, kNumLoraModules>> lora;  // [layers]
  std::vector<MedusaHeadSlot> medusa;
  int medusa_layers = 0;
};

namespace {

Status invalid(const std::string& msg) { return Status::Error("native_error", msg); }
}  // namespace

LlamaModel::LlamaModel(Device* device, ModelConfig config, RuntimeOptions options)
    : dev_(device), cfg_(config), opt_(options) {}

LlamaModel::~LlamaModel() = default;

// Map the safetensors files, bind every tensor the graph needs (checking its shape against the
// config), precompute RoPE frequencies, then allocate the KV cache and the scratch arenas once.
Status LlamaModel::load(const std::vector<std::string>& files, std::vector<TensorDesc> tensors) {
  LOOM_RETURN_IF_ERROR(weights_.open(files, std::move(tensors)));
  const int64_t H = cfg_.hidden, I = cfg_.intermediate, D = cfg_.head_dim;
  const int64_t QD = cfg_.heads * D, KD = cfg_.kv_heads * D;
  LOOM_RETURN_IF_ERROR(weights_.matrix("model.embed_tokens.weight", cfg_.vocab, H, &embed_));
  if (cfg_.tie_embeddings || !weights_.has("lm_head.weight"))
    lm_head_ = embed_;
  else
    LOOM_RETURN_IF_ERROR(weights_.matrix("lm_head.weight", cfg_.vocab, H, &lm_head_));
  LOOM_RETURN_IF_ERROR(weights_.vector_f32("model.norm.weight", H, &final_norm_));
  layers_.resize(size_t(cfg_.layers));
  for (int64_t l = 0; l < cfg_.layers; l++) {
    Layer& L = layers_[size_t(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LOOM_RETURN_IF_ERROR(weights_.matrix(p + "self_attn.q_proj.weight", QD, H, &L.q));
    LOOM_RETURN_IF_ERROR(weights_.matrix(p + "self_attn.k_proj.weight", KD, H, &L.k));
    LOOM_RETURN_IF_ERROR(weights_.matrix(p + "self_attn.v_proj.weight", KD, H, &L.v));
    LOOM_RETURN_IF_ERROR(weights_.matrix(p + "self_attn.o_proj.weight", H, QD, &L.o));
    LOOM_RETURN_IF_ERROR(weights_.matrix(p + "mlp.gate_proj.weight", I, H, &L.gate));
    LOOM_RETURN_IF_ERROR(weights_.matrix(p + "mlp.up_proj.weight", I, H, &L.up));
    LOOM_RETURN_IF_ERROR(weights_.matrix(p + "mlp.down_proj.weight", H, I, &L.down));
    LOOM_RETURN_IF_ERROR(weights_.vector_f32(p + "input_layernorm.weight", H, &L.in_norm));
    LOOM_RETURN_IF_ERROR(weights_.vector_f32(p + "post_attention_layernorm.weight", H, &L.post_norm));
    if (cfg_.attention_bias) {
      LOOM_RETURN_IF_ERROR(weights_.vector_f32(p + "self_attn.q_proj.bias", QD, &L.bq));
      LOOM_RETURN_IF_ERROR(weights_.vector_f32(p + "self_attn.k_proj.bias", KD, &L.bk));
      LOOM_RETURN_IF_ERROR(weights_.vector_f32(p + "self_attn.v_proj.bias", KD, &L.bv));
    }
  }

  // RoPE inverse frequencies, with HF's llama3 / linear scaling applied (computed in double).
  inv_freq_.resize(size_t(D / 2));
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
    inv_freq_[size_t(i)] = f;
  }

  // KV cache: per layer, K and V of S = blocks × block_size slots, each [Hkv * D] f32. Scratch:
  // every per-token buffer of the forward pass, sized for max_batch_tokens.
  try {
    const size_t S = size_t(opt_.kv_blocks) * size_t(opt_.kv_block_size);
    kcache_.assign(size_t(cfg_.layers), std::vector<float>(S * size_t(KD)));
    vcache_.assign(size_t(cfg_.layers), std::vector<float>(S * size_t(KD)));
    const size_t T = size_t(opt_.max_batch_tokens);
    x_.resize(T * H);
    xn_.resize(T * std::max(H, QD));
    qkv_.resize(T * (QD + 2 * KD));
    attn_.resize(T * QD);
    gate_.resize(T * I);
    up_.resize(T * I);
    act_.resize(T * I);
    lora_tmp_.resize(T * 3 * size_t(std::max(1, opt_.max_lora_rank)));
    cos_.resize(T * D / 2);
    sin_.resize(T * D / 2);
    head_x_.resize(T * H);
    kv_slots_.resize(T);
    attn_rows_.reserve(T);
    segs_.reserve(T * 6 + 16);
    seg_module_.reserve(T * 3 + 8);
    expand_segs_.reserve(T * 3 + 8);
  } catch (const std::bad_alloc&) {
    return Status::Error("model_invalid", "not enough memory for the KV cache (" + std::to_string(opt_.kv_blocks) +
                                              " blocks) and scratch for " + std::to_string(opt_.max_batch_tokens) +
                                              " tokens; lower kv_cache_tokens or max_batch_tokens");
  }
  slots_.clear();
  for (int s = 0; s < opt_.adapter_slots; s++) slots_.push_back(std::make_unique<Slot>());
  return Status::Ok();
}

// Copy a LoRA adapter into a free slot: A as given ([r, in]) for the shrink, B transposed to
// [r, out] so the expand is a row update (see lora-cpu.cc). The base weights are never touched;
// the slot becomes visible to steps only once fully written (kind is stored last).
Status LlamaModel::load_lora(int slot, const std::vector<LoraModuleInput>& modules) {
  if (slot < 0 || slot >= int(slots_.size())) return invalid("adapter slot " + std::to_string(slot) + " out of range");
  Slot& s = *slots_[size_t(slot)];
  if (s.kind.load() != Slot::kFree) return invalid("adapter slot " + std::to_string(slot) + " is not free");
  const int64_t H = cfg_.hidden, I = cfg_.intermediate, QD = cfg_.heads * cfg_.head_dim,
                KD = cfg_.kv_heads * cfg_.head_dim;
  // in/out features of each module, in LoraModule order.
  const int64_t in_f[kNumLoraModules] = {H, H, H, QD, H, H, I};
  const int64_t out_f[kNumLoraModules] = {QD, KD, KD, H, I, I, H};
  try {
    s.lora.assign(size_t(cfg_.layers), {});
    for (const auto& m : modules) {
      if (m.layer < 0 || m.layer >= cfg_.layers || m.module < 0 || m.module >= kNumLoraModules || m.rank < 1 ||
          m.rank > opt_.max_lora_rank)
        return invalid("LoRA module (layer " + std::to_string(m.layer) + ", module " + std::to_string(m.module) +
                       ", rank " + std::to_string(m.rank) + ") is out of range");
      LoraModuleSlot& dst = s.lora[size_t(m.layer)][size_t(m.module)];
      const int64_t in = in_f[m.module], out = out_f[m.module];
      dst.rank = m.rank;
      dst.scale = m.scale;
      dst.dtype = dtype();
      if (dst.dtype == DType::F32) {
        dst.a.assign(m.a, m.a + m.rank * in);
        dst.bt.resize(size_t(m.rank * out));
        for (int64_t o = 0; o < out; o++)
          for (int64_t r = 0; r < m.rank; r++) dst.bt[size_t(r * out + o)] = m.b[o * m.rank + r];
      } else {  // converted here, on the loading worker thread, never on the JS thread
        dst.a16.resize(size_t(m.rank * in));
        for (int64_t i = 0; i < m.rank * in; i++) dst.a16[size_t(i)] = to_half(dst.dtype, m.a[i]);
        dst.bt16.resize(size_t(m.rank * out));
        for (int64_t o = 0; o < out; o++)
          for (int64_t r = 0; r < m.rank; r++) dst.bt16[size_t(r * out + o)] = to_half(dst.dtype, m.b[o * m.rank + r]);
      }
    }
  } catch (const std::bad_alloc&) {
    s.lora.clear();
    return Status::Error("adapter_load_failed", "out of memory copying LoRA weights");
  }
  s.kind.store(Slot::kLora);
  return Status::Ok();
}

// Copy Medusa heads into a free slot (f32, owned by the slot); version 2 heads have no lm_head
// and reuse the base model's at step time.
Status LlamaModel::load_medusa(int slot, int num_layers, const std::vector<MedusaHeadInput>& heads) {
  if (slot < 0 || slot >= int(slots_.size())) return invalid("adapter slot " + std::to_string(slot) + " out of range");
  Slot& s = *slots_[size_t(slot)];
  if (s.kind.load() != Slot::kFree) return invalid("adapter slot " + std::to_string(slot) + " is not free");
  const size_t H = size_t(cfg_.hidden);
  try {
    s.medusa.assign(heads.size(), {});
    s.medusa_layers = num_layers;
    for (size_t h = 0; h < heads.size(); h++) {
      for (int l = 0; l < num_layers; l++) {
        s.medusa[h].w.emplace_back(heads[h].weights[size_t(l)], heads[h].weights[size_t(l)] + H * H);
        s.medusa[h].b.emplace_back(heads[h].biases[size_t(l)], heads[h].biases[size_t(l)] + H);
      }
      if (heads[h].lm_head) s.medusa[h].lm_head.assign(heads[h].lm_head, heads[h].lm_head + size_t(cfg_.vocab) * H);
    }
  } catch (const std::bad_alloc&) {
    s.medusa.clear();
    return Status::Error("adapter_load_failed", "out of memory copying Medusa weights");
  }
  s.kind.store(Slot::kMedusa);
  return Status::Ok();
}

// Free a slot. The engine guarantees no queued or running row references it, so its memory can
// go immediately; swapping with empty vectors returns the memory rather than keeping capacity.
Status LlamaModel::unload(int slot) {
  if (slot < 0 || slot >= int(slots_.size())) return invalid("adapter slot " + std::to_string(slot) + " out of range");
  Slot& s = *slots_[size_t(slot)];
  s.kind.store(Slot::kFree);
  std::vector<std::array<LoraModuleSlot, kNumLoraModules>>().swap(s.lora);
  std::vector<MedusaHeadSlot>().swap(s.medusa);
  return Status::Ok();
}

int LlamaModel::medusa_heads(int slot) const {
  if (slot < 0 || slot >= int(slots_.size()) || slots_[size_t(slot)]->kind.load() != Slot::kMedusa) return 0;
  return int(slots_[size_t(slot)]->medusa.size());
}

// Everything the forward pass indexes with is checked here, before any kernel runs: token ids,
// block ids, cache coverage of each block table, adapter slot kinds, logit/Medusa indices and the
// output buffer sizes. A failure names the row and the value, and the cache is left untouched.
Status LlamaModel::validate(const StepInput& in) const {
  if (in.num_tokens > opt_.max_batch_tokens)
    return invalid("step has " + std::to_string(in.num_tokens) + " tokens; max_batch_tokens is " +
                   std::to_string(opt_.max_batch_tokens));
  const int64_t bs = opt_.kv_block_size;
  int64_t next = 0, logits = 0, medusa = 0;
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
    int prev = -1;
    for (int i = 0; i < row.logit_count; i++) {
      if (row.logit_idx[i] <= prev || row.logit_idx[i] >= row.n)
        return invalid(where + "logitIndices must be ascending and inside [0, " + std::to_string(row.n) + ")");
      prev = row.logit_idx[i];
    }
    logits += row.logit_count;
    if (row.medusa_leaf) {
      const int heads = medusa_heads(row.medusa_slot);
      if (heads == 0) return invalid(where + "medusaSlot " + std::to_string(row.medusa_slot) + " holds no Medusa heads");
      if (row.medusa_count != 0 || row.logit_count != row.n)
        return invalid(where + "a greedy-leaf row asks for no medusaIndices and for the logits of every token");
      if (!in.medusa_leaves || in.medusa_leaves_len != int64_t(in.rows.size()))
        return invalid("greedy-leaf rows need medusaLeaves with one entry per row");
      medusa += heads;
    } else if (row.medusa_count > 0) {
      const int heads = medusa_heads(row.medusa_slot);
      if (heads == 0) return invalid(where + "medusaSlot " + std::to_string(row.medusa_slot) + " holds no Medusa heads");
      for (int i = 0; i < row.medusa_count; i++)
        if (row.medusa_idx[i] < 0 || row.medusa_idx[i] >= row.n) return invalid(where + "medusaIndices out of range");
      medusa += int64_t(row.medusa_count) * heads;
    }
  }
  if (next != in.num_tokens) return invalid("rows cover " + std::to_string(next) + " of " + std::to_string(in.num_tokens) + " tokens");
  if (logits * cfg_.vocab != in.logits_len || medusa * cfg_.vocab != in.medusa_len)
    return invalid("output buffers do not match the requested logits");
  if (in.medusa_top_ids && (in.medusa_top_k < 1 || in.medusa_top_k > 1024 || in.medusa_top_ids_len != medusa * in.medusa_top_k))
    return invalid("medusaTopIds needs medusaTopK in [1, 1024] and " + std::to_string(medusa) + " x medusaTopK entries");
  if (in.argmax && in.argmax_len != logits)
    return invalid("argmax has " + std::to_string(in.argmax_len) + " entries for " + std::to_string(logits) +
                   " logits rows");
  if (in.log_norms && in.log_norms_len != logits)
    return invalid("logNorms has " + std::to_string(in.log_norms_len) + " entries for " + std::to_string(logits) +
                   " logits rows");
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
      segs_.push_back({run.tok_start, run.tok_count, ms.a_data(), ms.dtype, ms.rank, col, ms.scale});
      expand_segs_.push_back({run.tok_start, run.tok_count, ms.bt_data(), ms.dtype, ms.rank, col, ms.scale});
      seg_module_.push_back(m);
      col += ms.rank;
      const bool f32 = ms.dtype == DType::F32;
      lora_regions_.push_back({ms.a_data(), int64_t(f32 ? ms.a.size() * 4 : ms.a16.size() * 2)});
      lora_regions_.push_back({ms.bt_data(), int64_t(f32 ? ms.bt.size() * 4 : ms.bt16.size() * 2)});
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

// Where a greedy walk of a verification row's tree stops: from token 0, move to the child whose
// token is the current node's logits argmax (first maximum), until no child carries it. A node's
// parent is its nearest ancestor in the tree mask (the previous token when the row is causal, a
// chain). The engine's sample-and-match walk takes the same path for plain greedy rows, so the
// heads only need to run at this one node. logits: the row's [n, V]; argmax: their first maxima
// when the step already computed them (else null).
int32_t LlamaModel::greedy_leaf(const StepRowDesc& row, const int32_t* tokens, const float* logits,
                                const int32_t* argmax) {
  const int32_t n = row.n;
  const int64_t V = cfg_.vocab;
  if (!argmax) {  // the step was not asked for argmax: compute the row's own
    leaf_argmax_.resize(size_t(n));
    dev_->argmax(logits, n, V, V, leaf_argmax_.data());
    argmax = leaf_argmax_.data();
  }
  auto parent = [&](int32_t c) {
    if (!row.tree_mask) return c - 1;
    for (int32_t j = c - 1; j >= 0; j--)
      if (row.tree_mask[int64_t(c) * n + j]) return j;
    return -1;
  };
  int32_t node = 0;
  for (;;) {
    int32_t next = -1;
    for (int32_t c = node + 1; c < n && next < 0; c++)
      if (tokens[row.tok_start + c] == argmax[node] && parent(c) == node) next = c;
    if (next < 0) return node;
    node = next;
  }
}

Status LlamaModel::forward(const StepInput& in) {
  LOOM_RETURN_IF_ERROR(validate(in));
  const int64_t T = in.num_tokens, H = cfg_.hidden, I = cfg_.intermediate, D = cfg_.head_dim;
  const int64_t QD = cfg_.heads * D, KD = cfg_.kv_heads * D, W = QD + 2 * KD, V = cfg_.vocab;
  const int64_t bs = opt_.kv_block_size;

  // Cache moves first (Medusa compaction), in every layer.
  for (const auto& c : in.copies) {
    copy_from_.resize(size_t(c.count));
    copy_to_.resize(size_t(c.count));
    for (int i = 0; i < c.count; i++) {
      copy_from_[size_t(i)] = c.block_table[c.from[i] / bs] * int32_t(bs) + c.from[i] % int32_t(bs);
      copy_to_[size_t(i)] = c.block_table[c.to[i] / bs] * int32_t(bs) + c.to[i] % int32_t(bs);
    }
    for (int64_t l = 0; l < cfg_.layers; l++)
      dev_->kv_copy(copy_from_.data(), copy_to_.data(), c.count, KD, kcache_[size_t(l)].data(), vcache_[size_t(l)].data());
  }
  if (T == 0) return Status::Ok();

  // Per-token cache slots, attention rows, RoPE tables (angles in double: positions can be large).
  attn_rows_.clear();
  for (const auto& row : in.rows) {
    for (int i = 0; i < row.n; i++) {
      const int64_t c = int64_t(row.cache_len) + i;
      kv_slots_[size_t(row.tok_start + i)] = int32_t(row.block_table[c / bs] * bs + c % bs);
    }
    attn_rows_.push_back({row.tok_start, row.n, row.cache_len, row.block_table, row.tree_mask});
  }
  const int64_t half = D / 2;
  for (int64_t t = 0; t < T; t++)
    for (int64_t i = 0; i < half; i++) {
      const double angle = double(in.positions[t]) * inv_freq_[size_t(i)];
      cos_[size_t(t * half + i)] = float(std::cos(angle));
      sin_[size_t(t * half + i)] = float(std::sin(angle));
    }
  plan_lora_runs(in);  // adapter runs are the same in every layer: compute them once
  const AttnShape shape{int32_t(cfg_.heads), int32_t(cfg_.kv_heads), int32_t(D), int32_t(bs),
                        float(1.0 / std::sqrt(double(D)))};

  // Activations live in arenas sized at load for max_batch_tokens; nothing below allocates.
  float* x = x_.data();      // [T, H] residual stream
  float* xn = xn_.data();    // [T, H] normed input of a block
  float* qkv = qkv_.data();  // [T, QD + 2 KD]: q | k | v
  // x = embed[tokens]                                          // [T, H]
  dev_->embedding(in.tokens, T, embed_, x);

  for (int64_t l = 0; l < cfg_.layers; l++) {
    const Layer& L = layers_[size_t(l)];
    // ---- Attention block ----
    // xn = RMSNorm(x) · w_in                                  // [T, H]
    dev_->rmsnorm(x, T, H, H, L.in_norm.data(), cfg_.rms_eps, xn, H);
    // q | k | v = xn · [Wq; Wk; Wv]ᵀ (+ Qwen2 biases), one pass over the three weights so the
    // thread pool splits their rows together.                // [T, QD + 2 KD]
    const MatmulJob qkv_jobs[3] = {{L.q, L.bq.empty() ? nullptr : L.bq.data(), qkv, W},
                                   {L.k, L.bk.empty() ? nullptr : L.bk.data(), qkv + QD, W},
                                   {L.v, L.bv.empty() ? nullptr : L.bv.data(), qkv + QD + KD, W}};
    const int qkv_mods[3] = {kQ, kK, kV};
    lora_plan(int(l), qkv_mods, 3);
    dev_->matmul(xn, T, H, qkv_jobs, 3, false);
    // LoRA on q, k, v: one shrink of xn for the three modules, then one expand per module.
    {
      float* ys[3] = {qkv, qkv + QD, qkv + QD + KD};
      const int64_t lds[3] = {W, W, W}, ns[3] = {QD, KD, KD};
      lora_pass(3, xn, H, H, ys, lds, ns);
    }
    // RoPE on q and k in place (v is not rotated); rows are tokens, heads are D-wide slices.
    dev_->rope(qkv, T, W, int(cfg_.heads), int(D), cos_.data(), sin_.data());
    dev_->rope(qkv + QD, T, W, int(cfg_.kv_heads), int(D), cos_.data(), sin_.data());
    float* kc = kcache_[size_t(l)].data();
    float* vc = vcache_[size_t(l)].data();
    // The new tokens' K and V go into their cache slots first, so attention reads committed
    // history and this step's tokens the same way (through the block table).
    dev_->kv_store(qkv + QD, qkv + QD + KD, T, W, kv_slots_.data(), KD, kc, vc);
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
    dev_->rmsnorm(x, T, H, H, L.post_norm.data(), cfg_.rms_eps, xn, H);
    // gate, up = xn · Wgateᵀ, xn · Wupᵀ in one pass          // [T, I] each
    const MatmulJob gu_jobs[2] = {{L.gate, nullptr, gate_.data(), I}, {L.up, nullptr, up_.data(), I}};
    const int gu_mods[2] = {kGate, kUp};
    lora_plan(int(l), gu_mods, 2);
    dev_->matmul(xn, T, H, gu_jobs, 2, false);
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

  // LM head only on the requested rows: gather, final norm, project. [L, H] -> [L, V]
  int64_t nlog = 0;
  for (const auto& row : in.rows)
    for (int i = 0; i < row.logit_count; i++)
      std::memcpy(head_x_.data() + (nlog++) * H, x + int64_t(row.tok_start + row.logit_idx[i]) * H, size_t(H) * 4);
  if (nlog > 0) {
    dev_->rmsnorm(head_x_.data(), nlog, H, H, final_norm_.data(), cfg_.rms_eps, head_x_.data(), H);
    const MatmulJob head{lm_head_, nullptr, in.logits, V};
    dev_->matmul(head_x_.data(), nlog, H, &head, 1, false);
    // Each row's log-softmax normaliser, where it is cheap (vector exp) rather than in the engine.
    if (in.log_norms) dev_->log_sum_exp(in.logits, nlog, V, V, in.log_norms);
    if (in.argmax) {
      // The engine's greedy choice: the first maximum, NaN never chosen, -1 when nothing beats
      // -inf. The device's argmax agrees whenever the row's maximum is finite; otherwise rescan.
      dev_->argmax(in.logits, nlog, V, V, in.argmax);
      for (int64_t r = 0; r < nlog; r++) {
        const float* row = in.logits + r * V;
        const float best = row[in.argmax[r]];
        if (std::isfinite(best) || best == std::numeric_limits<float>::infinity()) continue;
        int32_t id = -1;
        float max = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < V; i++)
          if (row[i] > max) {
            max = row[i];
            id = int32_t(i);
          }
        in.argmax[r] = id;
      }
    }
  }

  // Medusa heads on the final-normed hidden states: x_h = x + SiLU(W_h x + b_h) per block, then
  // an LM head. A row's heads run together, as few ops as the shapes allow (on a small model a
  // head is a few µs of arithmetic and each op a pool region): the first blocks of all heads are
  // one matmul (same input), each residual one op over [M, NH, H], and heads that reuse the base
  // LM head (version 2) one LM-head matmul over all M·NH rows, which reads that matrix once and
  // writes the [M, NH, V] layout directly. Later blocks and own LM heads (version 1) go head by head.
  float* out = in.medusa_logits;
  int64_t logit_row = 0;  // the row's first logits row
  for (size_t r = 0; r < in.rows.size(); r++) {
    const auto& row = in.rows[r];
    const int64_t first_logit = logit_row;
    logit_row += row.logit_count;
    int32_t leaf = -1;
    if (row.medusa_leaf)
      leaf = greedy_leaf(row, in.tokens, in.logits + first_logit * V, in.argmax ? in.argmax + first_logit : nullptr);
    if (in.medusa_leaves) in.medusa_leaves[r] = leaf;
    if (row.medusa_count == 0 && !row.medusa_leaf) continue;
    const Slot& s = *slots_[size_t(row.medusa_slot)];
    const int64_t M = row.medusa_leaf ? 1 : row.medusa_count, NH = int64_t(s.medusa.size());
    float* hidden = head_x_.data();  // [M, H]
    for (int64_t i = 0; i < M; i++) {
      const int32_t at = row.medusa_leaf ? leaf : row.medusa_idx[i];
      std::memcpy(hidden + i * H, x + int64_t(row.tok_start + at) * H, size_t(H) * 4);
    }
    dev_->rmsnorm(hidden, M, H, H, final_norm_.data(), cfg_.rms_eps, hidden, H);
    if (medusa_x_.size() < size_t(M * NH * H)) {
      medusa_x_.resize(size_t(M * NH * H));
      medusa_t_.resize(size_t(M * NH * H));
    }
    float* xh = medusa_x_.data();  // [M, NH, H]: head h of row i at (i·NH + h)·H
    float* t = medusa_t_.data();   // [M, NH, H]: W x + b of the current block
    for (int64_t i = 0; i < M; i++)
      for (int64_t h = 0; h < NH; h++) std::memcpy(xh + (i * NH + h) * H, hidden + i * H, size_t(H) * 4);
    for (int b = 0; b < s.medusa_layers; b++) {
      medusa_jobs_.clear();
      for (int64_t h = 0; h < NH; h++) {
        const MedusaHeadSlot& hs = s.medusa[size_t(h)];
        medusa_jobs_.push_back({{hs.w[size_t(b)].data(), DType::F32, H, H}, hs.b[size_t(b)].data(), t + h * H, NH * H});
      }
      if (b == 0) {
        dev_->matmul(hidden, M, H, medusa_jobs_.data(), int(NH), false);  // every head reads x
      } else {
        for (int64_t h = 0; h < NH; h++) dev_->matmul(xh + h * H, M, NH * H, &medusa_jobs_[size_t(h)], 1, false);
      }
      dev_->silu_residual(t, M * NH * H, xh);
    }
    bool shared_lm = true;
    for (const MedusaHeadSlot& hs : s.medusa) shared_lm = shared_lm && hs.lm_head.empty();
    if (shared_lm) {
      const MatmulJob job{lm_head_, nullptr, out, V};  // rows (i, h) in order: out [M, NH, V]
      dev_->matmul(xh, M * NH, H, &job, 1, false);
    } else {
      for (int64_t h = 0; h < NH; h++) {
        const MedusaHeadSlot& hs = s.medusa[size_t(h)];
        const WeightView lm = hs.lm_head.empty() ? lm_head_ : WeightView{hs.lm_head.data(), DType::F32, V, H};
        const MatmulJob job{lm, nullptr, out + h * V, NH * V};
        dev_->matmul(xh + h * H, M, NH * H, &job, 1, false);
      }
    }
    out += M * NH * V;
  }
  // Each head row's K best ids, what the engine's drafts take, where the logits are.
  if (in.medusa_top_ids && in.medusa_top_ids_len > 0)
    dev_->top_k(in.medusa_logits, in.medusa_top_ids_len / in.medusa_top_k, V, V, in.medusa_top_k, in.medusa_top_ids);
  return Status::Ok();
}

}  // namespace loom
