// The cpu device: AVX-512 kernels (AVX2 + FMA + F16C where the build machine lacks AVX-512) run
// across a persistent thread pool.
// Implementation is split by op family: matmul-cpu.cc, lora-cpu.cc, ops-cpu.cc, sampler-cpu.cc.
#pragma once

#include <memory>
#include <vector>

#include "kernels/host-memory.h"
#include "kernels/kernels.h"
#include "runtime/thread-pool.h"

namespace loom {

// One piece of one (token, head) of CpuDevice::attention: its max score and Σ exp(score - max).
struct AttnPieceSums {
  float m, s;
};

// One work item of CpuDevice::attention's pass over (token, head) pairs: the new tokens
// [k0, k0 + nk) of one row (indices into its token list) with every query head of KV head `head`
// (`group`: one attend_group call), or one pair, token k0 with query head `head`.
struct AttnUnit {
  int64_t k0;
  int32_t nk, head;
  bool group;
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int threads);
  const char* name() const override { return "cpu"; }
  int threads() const { return pool_.size(); }

  void* alloc(int64_t bytes) override { return HostMemory::alloc(bytes); }
  void release(void* p) override { HostMemory::release(p); }
  void upload(void* dst, const void* src, int64_t bytes) override { HostMemory::copy(dst, src, bytes); }
  void download(void* dst, const void* src, int64_t bytes) override { HostMemory::copy(dst, src, bytes); }
  void copy(void* dst, const void* src, int64_t bytes) override { HostMemory::copy(dst, src, bytes); }
  void zero(void* dst, int64_t bytes) override { HostMemory::zero(dst, bytes); }
  // Every op returns once its work is done (the pool joins before returning).
  Status synchronize() override { return Status::Ok(); }
  bool reads_host_memory() const override { return true; }

  void matmul(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs, bool accumulate) override;
  void rmsnorm(const float* x, int64_t T, int64_t ldx, int64_t H, const float* w, float eps, float* y,
               int64_t ldy) override;
  void rope_tables(const int32_t* positions, int64_t T, const double* inv_freq, int64_t half, float* cos,
                   float* sin) override;
  void rope(float* x, int64_t T, int64_t ldx, int heads, int D, const float* cos, const float* sin) override;
  void gather_rows(const float* src, int64_t ld, const int32_t* idx, int64_t n, int64_t H, float* dst) override;
  void embedding(const int32_t* ids, int64_t T, const WeightView& table, float* y) override;
  void silu_mul(const float* gate, const float* up, int64_t n, float* y) override;
  void silu_residual(const float* t, int64_t n, float* y) override;
  void kv_slots(const AttnRow* rows, int nrows, int block_size, int32_t* slot) override;
  void paged_slots(const int32_t* block_table, const int32_t* idx, int64_t n, int block_size, int32_t* slot) override;
  void kv_store(const float* k, const float* v, int64_t T, int64_t ldk, const int32_t* slot, int64_t E, DType kv_dtype,
                void* kc, void* vc) override;
  void kv_copy(const int32_t* from, const int32_t* to, int64_t n, int64_t E, DType kv_dtype, void* kc,
               void* vc) override;
  void attention(const float* q, int64_t ldq, const void* kc, const void* vc, const AttnRow* rows, int nrows,
                 const AttnShape& shape, float* out) override;
  void lora_shrink(const float* x, int64_t ldx, int64_t K, const LoraSegment* segs, int nsegs, float* tmp,
                   int64_t ldt) override;
  void lora_expand(const float* tmp, int64_t ldt, int64_t N, const LoraSegment* segs, int nsegs, float* y,
                   int64_t ldy) override;
  void lora_apply(const float* x, int64_t ldx, int64_t K, const LoraSegment* shrink, const LoraSegment* expand,
                  const int* module, int nsegs, const LoraOutput* outs, float* tmp, int64_t ldt) override;
  void argmax(const float* x, int64_t T, int64_t ld, int64_t V, int32_t* out) override;
  void tree_walk(const int32_t* tokens, const int32_t* argmax, const LeafRow* rows, int nrows,
                   int32_t* leaf) override;
  void log_sum_exp(const float* x, int64_t T, int64_t ld, int64_t V, double* out) override;
  void top_k(const float* x, int64_t T, int64_t ld, int64_t V, int K, const int32_t* ids, int32_t* out) override;
  void sample(const float* x, int64_t ld, int64_t V, const SampleParams* params, int nrows, int max_top, int32_t* token,
              float* logprob, int32_t* top_ids, float* top_logprobs, void* scratch) override;
  void prefetch_in_next_matmul(const CacheRegion* regions, int n) override;

 private:
  // matmul for Q8 weights with VNNI (matmul-q8-cpu.cc) and for bf16 weights in steps of at least
  // kBf16DotMinTokens tokens with vdpbf16ps (matmul-bf16-avx512.cc); all jobs of the call share
  // that dtype. Each exists only where simd-config.h enables it.
  void matmul_q8(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs, bool accumulate);
  void matmul_bf16_dot(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs, bool accumulate);
  // The generic path (matmul-cpu.cc): f32/f16/bf16 in registers or widened tiles, Q8 widened.
  void matmul_widen(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs, bool accumulate);

  ThreadPool pool_;
  std::vector<uint8_t> xq_;  // the step's activations converted for matmul_q8 / matmul_bf16_dot
  std::vector<MatmulJob> split_jobs_;  // matmul: jobs regrouped by path
  // Per-call work lists, kept across calls so the hot path does not allocate once warm.
  std::vector<int64_t> blocks_;
  std::vector<int64_t> items_;
  // attention, pieces spread over the threads: the first work item of each (token, KV head), and
  // each (work item, query head of the group)'s unnormalised Σ p·V [D] and its max and Σ exp.
  std::vector<int64_t> piece_start_;
  // attention: each new token's visible keys, and a tree node's visible new tokens (VisibleRows).
  std::vector<int32_t> attn_len_, attn_newk_at_, attn_newk_;
  std::vector<AttnUnit> attn_units_;
  std::vector<float> attn_acc_;
  std::vector<AttnPieceSums> attn_sums_;
  std::vector<LoraSegment> module_segs_;  // lora_apply's per-module expand lists
  std::vector<CacheRegion> prefetch_;     // prefetch_in_next_matmul's regions (cleared by matmul)
  std::vector<int64_t> prefetch_end_;     // their cumulative byte ends
  std::vector<int32_t> parents_;          // tree_walk's parent of each node of a row
};

// Register tile of the matmul micro-kernel: kRows weight rows × up to kMaxTokens tokens, all
// accumulators in registers. AVX-512 has 32 zmm registers: 3 × 8 accumulators + 3 weight
// vectors + 1 activation vector = 28, so a batch of 8 decode rows reads each weight element
// from memory exactly once and issues 24 FMAs per 11 loads. Plain AVX2 has 16 ymm registers
// and takes 3 × 4.
constexpr int kRows = 3;
#if defined(__AVX512F__) || defined(__AVX512VL__)
constexpr int kMaxTokens = 8;
#else
constexpr int kMaxTokens = 4;
#endif
// Steps of up to this many tokens take the matmul's few-token path: one pass over each weight
// block, in register tiles of up to kMaxTokens tokens (two on AVX2, the second reading the block
// from L1). On AVX2, 8-token steps in the general loop paid its per-block plan: against it, the
// two-tile path measured 1.08x (f32) and 1.32x (bf16) at batch 8 (135M bench model, paired).
constexpr int kFewTokens = 8;
static_assert(kFewTokens % kMaxTokens == 0 && kFewTokens <= 2 * kMaxTokens, "at most two register tiles");

// From this many tokens a matmul over bf16 weights computes with vdpbf16ps where the CPU has
// AVX-512 BF16 (matmul-bf16-avx512.cc): the activations are rounded to bf16 once per call, so
// such steps differ from the f32 path by that rounding (see there); smaller steps (decode,
// batched decode, Medusa verification trees) keep exact f32 products. Measured in the README
// (prefill section). LOOM_CPU_BF16_DOT_MIN_TOKENS overrides it (0: never), for measuring.
constexpr int64_t kBf16DotMinTokens = 64;

// From this many tokens a matmul over Q8 weights on the AVX2 build (no VNNI) widens the weights to
// f32 in the L1 tile and multiplies the exact f32 activations (matmul-cpu.cc) instead of running
// the int8 dot kernel (matmul-q8-cpu.cc): at many tokens a widened block is reused by every
// token, and 4 FMAs per 32 weights per token beat the integer kernel's 6 ops and scalar scale.
// Fewer tokens (decode, batched decode, Medusa trees) keep the int8 kernel, which reads the
// block once per 4 tokens with no widening. int8 prefill of the 135M bench model, one prompt,
// 2 threads, AVX2 EPYC, medians of 7 in processes alternating (ms, int8 kernel → widened):
// 16 tokens 41 → 44, 32 level (72-87), 48 108 → 95, 64 147 → 127, 128 297 → 256, 256 601 → 492.
// Like kBf16DotMinTokens, steps from here on differ from smaller ones (by the activations' int8
// rounding, which they no longer have). LOOM_CPU_Q8_WIDEN_MIN_TOKENS overrides it (0: never).
constexpr int64_t kQ8WidenMinTokens = 32;

// Shared by matmul-cpu.cc and lora-cpu.cc.
// Semantics: for t < tn, i < kRows: out[t][i] = Σ_{k<K} f32(w[i][k]) * x[t][k]
// w: kRows row pointers in `dt` (repeat a pointer for fewer rows), x: tn <= kMaxTokens f32 rows.
void dot_rows(DType dt, const void* const* w, const float* const* x, int tn, int64_t K,
              float out[kMaxTokens][kRows]);

}  // namespace loom
