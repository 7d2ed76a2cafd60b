// The decoder graph shared by Llama, Mistral and Qwen2 (RMSNorm, RoPE, GQA attention over a
// paged KV cache, SwiGLU MLP, optional q/k/v biases), with per-row LoRA adapters and Medusa
// heads. It calls only the Device interface in kernels/kernels.h: every buffer the forward pass
// touches (weights, KV cache, scratch, adapter slots, the step's inputs) is the device's memory,
// and the host only validates, packs the step's inputs for one upload and issues ops.
#pragma once

#include <algorithm>
#include <atomic>
#include <climits>
#include <utility>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "runtime/device-buffer.h"
#include "runtime/status.h"
#include "runtime/weights.h"

namespace loom {

enum class RopeScaling : int32_t { None = 0, Linear = 1, Llama3 = 2 };

// Checked numbers from config.json (parsed and validated on the TypeScript side).
struct ModelConfig {
  int64_t vocab = 0, hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t max_positions = 0;
  float rms_eps = 1e-6f;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling = RopeScaling::None;
  double rope_factor = 1.0, rope_low_freq = 1.0, rope_high_freq = 4.0, rope_original_max = 8192.0;
  bool tie_embeddings = false;
  bool attention_bias = false;  // Qwen2: q/k/v carry biases
};

struct RuntimeOptions {
  int32_t threads = 1;
  int32_t kv_blocks = 0;        // blocks per layer
  int32_t kv_block_size = 16;   // token slots per block
  int32_t max_batch_tokens = 0; // scratch arenas are sized for this many tokens per step
  int32_t adapter_slots = 0;
  int32_t max_lora_rank = 0;
  // `weights: int8`: the seven projections of every layer and the LM head are quantised to Q8
  // at load (kernels/dtype.h); the embedding lookup keeps the stored table. cpu device only.
  bool weights_int8 = false;
};

// Order matches LORA_MODULES in core/src/contracts/step-runner.ts.
enum LoraModule : int { kQ = 0, kK, kV, kO, kGate, kUp, kDown, kNumLoraModules };

// How a row samples (core/src/contracts/step-runner.ts RowSampling), host memory. `base` holds
// the request's parameters, its draws before this step and its top_logprobs; the model sets `row`,
// `draws`, `penalties` and `allowed` per sampled position.
struct RowSampleDesc {
  SampleParams base;
  const PenaltyToken* penalties = nullptr;  // [n_penalties] distinct (id, output count) pairs
  int32_t n_penalties = 0;
  const uint32_t* allowed = nullptr;     // [positions, ceil(V/32)] or null (no constraint)
  const uint8_t* terminated = nullptr;   // [positions] with allowed: only the allowed (eos) tokens remain
};

// One step's input, packed by step-packer.ts into flat typed arrays (see binding.cc Step).
struct StepRowDesc {
  int32_t tok_start, n, cache_len, lora_slot, medusa_slot;
  int32_t medusa_heads;  // with medusa_slot >= 0: run the slot's first medusa_heads heads (1..its heads)
  const int32_t* block_table;
  int32_t num_blocks;
  const uint8_t* tree_mask;  // [n, n] or null: a verification row (sampled at every node) when set
  const RowSampleDesc* sampling = nullptr;  // null: the row samples nothing
  const int32_t* score_targets = nullptr;   // [score_count]: the token to score after each position, -1 none
  int32_t score_count = 0;                  // 0 or n
};

struct KvCopyDesc {
  const int32_t* block_table;
  int32_t num_blocks;
  const int32_t* from;
  const int32_t* to;
  int32_t count;
};

struct StepInput {
  const int32_t* tokens = nullptr;     // [T]
  const int32_t* positions = nullptr;  // [T]
  int32_t num_tokens = 0;
  std::vector<StepRowDesc> rows;
  std::vector<KvCopyDesc> copies;
  std::vector<RowSampleDesc> samplings;  // what rows' `sampling` point at
  int32_t max_top = 0;     // top logprobs per sampled position (StepBatch.topLogprobs)
  int32_t draft_top_k = 1;  // best ids per Medusa head (StepBatch.draftTopK)
  // Outputs (host): S sampled positions, C scored targets, R rows, M rows with heads.
  int32_t* tokens_out = nullptr;  // [S]
  float* logprobs_out = nullptr;  // [S]
  int32_t* top_ids = nullptr;     // [S, max_top]
  float* top_logprobs = nullptr;  // [S, max_top]
  float* scores = nullptr;        // [C]
  int32_t* walk_ends = nullptr;   // [R]
  int32_t* draft_ids = nullptr;   // [Σ heads of M rows, draft_top_k]
  int64_t tokens_len = 0, top_len = 0, scores_len = 0, walk_ends_len = 0, draft_ids_len = 0;
  // Inspection for the native check program (never set by the addon): when non-null, copies of the
  // step's logits [S + C, V] (sampled positions, then scored ones) and its heads' logits
  // [Σ heads of M rows, V] (rows in batch order; a slot with a draft vocabulary fills the first
  // |draft vocabulary| columns of each head's row, in its order), to compare devices value by value.
  float* debug_logits = nullptr;
  float* debug_medusa_logits = nullptr;
};

// One LoRA module of one layer: A [r, in] and B transposed [r, out], f32.
struct LoraModuleInput {
  int32_t layer, module, rank;
  float scale;
  const float* a;  // [rank, in]
  const float* b;  // [out, rank] (transposed when copied into the slot)
};

struct MedusaHeadInput {
  std::vector<const float*> weights;  // numLayers × [hidden, hidden]
  std::vector<const float*> biases;   // numLayers × [hidden]
  const float* lm_head = nullptr;     // [vocab, hidden] or null (version 2: base lm_head)
};

// Where step time went (for the bench; see LlamaModel::take_profile).
struct StepProfile {
  int64_t steps = 0, step_ns = 0, lora_ns = 0;
};

class LlamaModel {
 public:
  LlamaModel(Device* device, ModelConfig config, RuntimeOptions options);
  ~LlamaModel();

  // Map the weights, check every tensor's shape, allocate KV cache and scratch.
  Status load(const std::vector<std::string>& files, std::vector<TensorDesc> tensors);
  // Copy adapters into a free slot. The slot must be free.
  Status load_lora(int slot, const std::vector<LoraModuleInput>& modules);
  // draft_vocab: ascending token ids the heads draft from (FR-Spec's reduced LM head), or empty
  // for the whole vocabulary. The slot keeps those rows of the heads' LM head (the base one,
  // gathered on the device, or each head's own), so a head's logits cost |draft_vocab| rows, not
  // the vocabulary's; drafts are proposals only, verified against the full LM head.
  Status load_medusa(int slot, int num_layers, const std::vector<MedusaHeadInput>& heads,
                     const std::vector<int32_t>& draft_vocab);
  Status unload(int slot);
  // Validate and run one forward pass.
  Status step(const StepInput& in);
  // Steps, their wall time and the part spent in LoRA shrink/expand since the last call; resets.
  StepProfile take_profile();

  const ModelConfig& config() const { return cfg_; }
  const RuntimeOptions& options() const { return opt_; }
  DType dtype() const { return embed_.dtype; }
  // Heads of a loaded Medusa slot, or 0.
  int medusa_heads(int slot) const;

 private:
  struct Layer;
  struct Slot;
  // Where one step row's inputs sit in the step buffer (element offsets, -1: none) and where its
  // results go: its first sampled position (S order), first scored target (C order), its heads'
  // first output row, and the index of the token its heads read (a causal row's last).
  struct RowPlan {
    int64_t block_table = 0, tree_mask = -1, replicate = -1, head_index = -1;
    int64_t sampled = 0, scored = 0, draft = 0;
  };
  struct CopyPlan {
    int64_t block_table = 0, from = 0, to = 0;
  };
  Status validate(const StepInput& in) const;
  // Sample the step's positions a round at a time, following each verification row's walk (a
  // device that reads host memory; see the definition).
  Status sample_walking(const StepInput& in, const float* logits, int32_t* sampled, float* logprobs, int32_t* top_ids,
                        float* top_lp);
  // Rows per Device::sample call: bounds the samplers' scratch whatever the batch.
  static constexpr int64_t kSampleChunk = 32;
  Status forward(const StepInput& in);
  // Pack the step's host inputs into host_step_ and upload them into step_buf_ (one upload).
  Status upload_step(const StepInput& in);
  const int32_t* step_ints(int64_t offset) const { return step_buf_.data() + offset; }
  // Score rows per gather of prompt-logprob targets: a chunk's flat [rows, V] indices fit in int32.
  int64_t score_chunk_rows() const { return std::max<int64_t>(1, INT32_MAX / std::max<int64_t>(1, cfg_.vocab)); }
  // Make a mapped weight device-resident (a no-op on a device that reads host memory).
  Status make_resident(WeightView* w, const std::string& name);
  // A 1-D tensor widened to f32 into device memory; `staging` keeps the host copy until the
  // load's synchronize.
  Status device_vector(const std::string& name, int64_t n, DeviceBuffer<float>* out,
                       std::vector<std::vector<float>>* staging);
  // Where an op writes one of the step's results: the caller's host array on a device that
  // reads host memory, else `buf` (grown to n elements), downloaded by finish_output.
  template <typename T>
  Status output(T* host, int64_t n, DeviceBuffer<T>* buf, const char* what, T** out);
  template <typename T>
  void finish_output(T* host, int64_t n, const DeviceBuffer<T>& buf);
  // Runs of consecutive rows sharing one LoRA slot, computed once per step.
  struct LoraRun {
    int32_t tok_start, tok_count, slot;
  };
  void plan_lora_runs(const StepInput& in);
  void lora_plan(int layer, const int* modules, int nmod);
  void lora_pass(int nmod, const float* x, int64_t ldx, int64_t K, float* const* ys, const int64_t* lds,
                 const int64_t* ns);

  Device* dev_;
  bool host_io_ = false;  // dev_->reads_host_memory(): weights in place, results written in place
  ModelConfig cfg_;
  RuntimeOptions opt_;
  MappedWeights weights_;
  std::vector<DeviceBuffer<uint8_t>> resident_;  // uploaded weights (devices that do not read host memory)
  WeightView embed_, lm_head_;
  DeviceBuffer<float> final_norm_;
  std::vector<Layer> layers_;
  DeviceBuffer<double> inv_freq_;  // [D/2] RoPE inverse frequencies after scaling
  std::vector<std::unique_ptr<Slot>> slots_;
  // KV cache: per layer K and V [blocks * block_size, Hkv * D] in kv_dtype_.
  DType kv_dtype_ = DType::F32;
  std::vector<DeviceBuffer<uint8_t>> kcache_, vcache_;
  // Scratch arenas, sized from max_batch_tokens at load so a step never allocates.
  DeviceBuffer<float> x_, xn_, qkv_, attn_, gate_, up_, act_, lora_tmp_, cos_, sin_, head_x_;
  DeviceBuffer<int32_t> kv_slots_;  // [T]
  // Grown on demand (grow-only): the step's logits [S + C, V], Medusa [heads, H] activations and
  // [heads, V] logits of one row, the kv-copy slots, the samplers' scratch, and the results.
  DeviceBuffer<float> logits_, medusa_x_, medusa_t_, medusa_logits_, logprobs_, top_logprobs_, score_logits_;
  DeviceBuffer<int32_t> copy_slots_, sampled_, top_ids_, leaves_, draft_ids_;
  DeviceBuffer<double> score_norms_;
  DeviceBuffer<uint8_t> sample_scratch_;
  std::vector<float> host_score_logits_;
  std::vector<double> host_score_norms_;
  // The step's inputs: packed on the host (grow-only), uploaded once per step.
  std::vector<int32_t> host_step_;
  DeviceBuffer<int32_t> step_buf_;
  int64_t step_tokens_ = 0, step_positions_ = 0, step_logit_rows_ = 0, step_score_index_ = 0;
  int64_t step_sampled_ = 0, step_scored_ = 0;  // S and C of the step
  std::vector<SampleParams> sample_params_;     // [S], pointing into step_buf_
  // sample_walking's rounds: each walk's node (-1: done), the positions sampled this round and
  // their parameters and results (host memory: used only on a device that reads it).
  std::vector<int32_t> walk_at_;
  std::vector<int64_t> round_positions_;
  std::vector<SampleParams> round_params_;
  std::vector<int32_t> round_tokens_, round_top_ids_;
  std::vector<float> round_logprobs_, round_top_lp_;
  std::vector<RowPlan> row_plans_;
  std::vector<CopyPlan> copy_plans_;
  std::vector<MatmulJob> medusa_jobs_;
  std::vector<AttnRow> attn_rows_;
  std::vector<LeafRow> leaf_rows_;
  std::vector<LoraRun> lora_runs_;
  std::vector<LoraSegment> segs_;
  std::vector<LoraSegment> expand_segs_;  // per shrink segment: the same run and module's Bt
  std::vector<CacheRegion> lora_regions_;  // the planned segments' A and Bt bytes (a prefetch hint)
  std::vector<int> seg_module_;          // per shrink segment: index of its module in the group
  // Step timing for the bench (take_profile); written by the stepping worker, read by JS.
  std::atomic<int64_t> prof_steps_{0}, prof_step_ns_{0}, prof_lora_ns_{0};
};

}  // namespace loom
