// The decoder graph shared by Llama, Mistral and Qwen2 (RMSNorm, RoPE, GQA attention over a
// paged KV cache, SwiGLU MLP, optional q/k/v biases), with per-row LoRA adapters and Medusa
// heads. It calls only the Device interface in kernels/kernels.h.
#pragma once

#include <atomic>
#include <utility>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"
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
};

// Order matches LORA_MODULES in core/src/contracts/step-runner.ts.
enum LoraModule : int { kQ = 0, kK, kV, kO, kGate, kUp, kDown, kNumLoraModules };

// One step's input, packed by native-step-runner.ts into flat typed arrays (see there for layout).
struct StepRowDesc {
  int32_t tok_start, n, cache_len, lora_slot, medusa_slot;
  const int32_t* block_table;
  int32_t num_blocks;
  const uint8_t* tree_mask;  // [n, n] or null
  const int32_t* logit_idx;  // [logit_count]
  int32_t logit_count;
  const int32_t* medusa_idx;  // [medusa_count]
  int32_t medusa_count;
  // Greedy leaf: the heads run at one node only, where a greedy walk of the tree stops (see
  // LlamaModel::greedy_leaf); medusa_count is 0 and logits cover every token of the row.
  bool medusa_leaf = false;
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
  float* logits = nullptr;         // [Σ logit_count, vocab]
  int64_t logits_len = 0;          // elements available in `logits`
  float* medusa_logits = nullptr;  // [Σ medusa_count * heads(slot), vocab]
  int64_t medusa_len = 0;
  double* log_norms = nullptr;  // [Σ logit_count] or null: each logits row's log Σ exp (log_sum_exp)
  int64_t log_norms_len = 0;
  int32_t* argmax = nullptr;  // [Σ logit_count] or null: each logits row's first maximum (-1: none > -inf)
  int64_t argmax_len = 0;
  int32_t medusa_top_k = 0;            // K of medusa_top_ids (0: none asked)
  int32_t* medusa_top_ids = nullptr;   // [Σ head rows, K]: each head row's K best ids (top_k)
  int64_t medusa_top_ids_len = 0;
  int32_t* medusa_leaves = nullptr;  // [rows]: the node greedy-leaf rows ran their heads at, -1 for others
  int64_t medusa_leaves_len = 0;
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
  Status load_medusa(int slot, int num_layers, const std::vector<MedusaHeadInput>& heads);
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
  Status validate(const StepInput& in) const;
  Status forward(const StepInput& in);
  int32_t greedy_leaf(const StepRowDesc& row, const int32_t* tokens, const float* logits, const int32_t* argmax);
  // Runs of consecutive rows sharing one LoRA slot, computed once per step.
  struct LoraRun {
    int32_t tok_start, tok_count, slot;
  };
  void plan_lora_runs(const StepInput& in);
  void lora_plan(int layer, const int* modules, int nmod);
  void lora_pass(int nmod, const float* x, int64_t ldx, int64_t K, float* const* ys, const int64_t* lds,
                 const int64_t* ns);

  Device* dev_;
  ModelConfig cfg_;
  RuntimeOptions opt_;
  MappedWeights weights_;
  WeightView embed_, lm_head_;
  std::vector<float> final_norm_;
  std::vector<Layer> layers_;
  std::vector<double> inv_freq_;  // [D/2] RoPE inverse frequencies after scaling
  std::vector<std::unique_ptr<Slot>> slots_;
  // KV cache: per layer K and V [blocks * block_size, Hkv * D] f32.
  std::vector<std::vector<float>> kcache_, vcache_;
  // Scratch arenas, sized from max_batch_tokens at load so a step never allocates.
  std::vector<float> x_, xn_, qkv_, attn_, gate_, up_, act_, lora_tmp_, cos_, sin_, head_x_;
  std::vector<float> medusa_x_, medusa_t_;  // [M, heads, H] (grown at the first Medusa step)
  std::vector<MatmulJob> medusa_jobs_;
  std::vector<int32_t> leaf_argmax_;  // greedy_leaf's per-node argmax
  std::vector<int32_t> kv_slots_, copy_from_, copy_to_;
  std::vector<AttnRow> attn_rows_;
  std::vector<LoraRun> lora_runs_;
  std::vector<LoraSegment> segs_;
  std::vector<LoraSegment> expand_segs_;  // per shrink segment: the same run and module's Bt
  std::vector<CacheRegion> lora_regions_;  // the planned segments' A and Bt bytes (a prefetch hint)
  std::vector<int> seg_module_;          // per shrink segment: index of its module in the group
  // Step timing for the bench (take_profile); written by the stepping worker, read by JS.
  std::atomic<int64_t> prof_steps_{0}, prof_step_ns_{0}, prof_lora_ns_{0};
};

}  // namespace loom
