// The cuda device: one GPU, one stream. Every op is one or a few kernel launches on that stream;
// nothing waits for the GPU except synchronize(), download's consumer and the pinned staging ring
// (below). Implementation split by op family: cuda-device.cu (memory, staging, probe),
// elementwise.cu, matmul.cu, lora.cu, vocab-ops.cu, attention.cu, sampler.cu. Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/attention-plan.h"
#include "cuda/kernel-launch.h"
#include "cuda/kernel-paths.h"
#include "cuda/lora-plan.h"
#include "cuda/param-list.h"
#include "kernels/kernels.h"
#include "runtime/status.h"

namespace loom {

// Whether this binary's code for the GPU of `stream` has wgmma: an sm_90a image, which a GPU of
// compute capability 9.0 runs in preference to sm_90 or compute_90 code (matmul.cu: one probe
// kernel, synchronized; false on any error).
bool cuda_wgmma_supported(cudaStream_t stream);

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, cudaStream_t stream, const cudaDeviceProp& prop, const CudaKernelPaths& paths);
  ~CudaDevice() override;
  const char* name() const override { return "cuda"; }

  void* alloc(int64_t bytes) override;
  void release(void* p) override;
  void upload(void* dst, const void* src, int64_t bytes) override;
  void download(void* dst, const void* src, int64_t bytes) override;
  void copy(void* dst, const void* src, int64_t bytes) override;
  void zero(void* dst, int64_t bytes) override;
  Status synchronize() override;
  bool reads_host_memory() const override { return false; }

  // f16 K/V: half the bytes of f32 with an 11-bit significand (bf16 has 8); K and V values stay
  // far inside f16's range (±65504).
  DType kv_dtype() const override { return DType::F16; }

  void matmul(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs, bool accumulate) override;
  void rmsnorm_matmul(const float* x, int64_t T, int64_t ldx, const float* norm_w, float eps, float* xn, bool keep_xn,
                      const MatmulJob* jobs, int njobs) override;
  void rmsnorm(const float* x, int64_t T, int64_t ldx, int64_t H, const float* w, float eps, float* y,
               int64_t ldy) override;
  // rmsnorm's rows into y (null: none) and, rounded to bf16, into yb [T, ldyb] (null: none): the
  // prefill GEMM's x straight from the norm (rmsnorm_matmul).
  void rmsnorm_rows(const float* x, int64_t T, int64_t ldx, int64_t H, const float* w, float eps, float* y,
                    int64_t ldy, uint16_t* yb, int64_t ldyb);
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
  void rope_kv_store(float* qkv, int64_t T, int64_t ldx, int q_heads, int kv_heads, int D, const float* cos,
                     const float* sin, const int32_t* slot, DType kv_dtype, void* kc, void* vc) override;
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

  // The first CUDA error since the last call (sticky: later errors are dropped), then Ok.
  Status take_status();
  cudaStream_t stream() const { return stream_; }
  int sm_count() const { return sm_count_; }
  // The optional kernel paths it takes (LOOM_CUDA_DISABLE at creation); the benchmark switches
  // them between timed rows, on the stepping thread, between steps.
  const CudaKernelPaths& kernel_paths() const { return paths_; }
  void set_kernel_paths(const CudaKernelPaths& paths) { paths_ = paths; }
  // The paths the projections may take: kernel_paths(), less `wgmma` where the binary has no
  // sm_90a image for this GPU.
  CudaKernelPaths matmul_paths() const {
    CudaKernelPaths p = paths_;
    p.wgmma = p.wgmma && wgmma_capable_;
    return p;
  }

  // Launches `kernel` on the stream (with programmatic dependent launch where the GPU has it and
  // the `pdl` path is on: kernel-launch.h); a failure is recorded as `what`'s. True when launched.
  template <typename... Params, typename... Args>
  bool launch(const char* what, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
    return check(launch_kernel(stream_, pdl_capable_ && paths_.pdl, kernel, grid, block, smem,
                               std::forward<Args>(args)...),
                 what);
  }

  // Host-side call descriptions (segments, jobs, rows) copied to the device for one launch:
  // returns the device address of `bytes` bytes that hold `src` by the time the next kernel on
  // the stream runs. Backed by a pinned ring (async copy) mirrored by a device ring; nullptr on
  // failure (recorded in the status).
  void* stage(const void* src, int64_t bytes);

  // A staged copy its caller may hand to several launches: the bytes it holds and where they are.
  struct StagedCopy {
    std::vector<uint8_t> bytes;
    uint8_t* device = nullptr;
    uint64_t written_end = 0;  // stage_written_ just after the copy was queued
  };
  // stage(src, bytes), or `last`'s device address without a copy when `last` holds the same bytes
  // and the ring has not come round to them since. Attention's plan is the same in every layer of
  // a step: one copy a step instead of one a layer (a copy is a stream operation of its own).
  void* stage_reusing(StagedCopy* last, const void* src, int64_t bytes);

  // A launch's per-block list (param-list.h: LoRA items, rows, sampling parameters) as its kernel
  // parameter: inline when the n elements fit, else staged (false: staging failed, recorded in
  // the status).
  template <class List, typename T>
  bool param_list(const T* items, size_t n, List* out) {
    if (fits_inline<List>(n)) {
      *out = inline_params<List>(items, n);
      return true;
    }
    const auto* staged = static_cast<const T*>(stage(items, int64_t(n * sizeof(T))));
    if (staged) *out = staged_params<List>(staged);
    return staged != nullptr;
  }

  // Record `err` (from a CUDA call named `what`) if it is the first failure; true when ok.
  bool check(cudaError_t err, const char* what);


 private:
  struct StagedRange {
    int64_t start, end;
    cudaEvent_t done;
  };
  // Device scratch sized by the call (attention's split partials, lora_apply's K-slice planes,
  // split-K partials, the prefill GEMM's bf16 x): grown on demand, freed with the device.
  struct GrowingBuffer {
    void* data = nullptr;
    int64_t bytes = 0;
  };
  // `buf`'s memory, grown to at least `bytes` first if smaller (the old memory released
  // stream-ordered: the kernels queued before it finish first); nullptr when the allocation fails
  // (the caller decides whether that is a fault).
  void* grow(GrowingBuffer* buf, int64_t bytes);
  // Whether `ev` has fired; a query error is recorded as the device's fault (the range is kept).
  bool event_done(cudaEvent_t ev);
  int ordinal_;
  cudaStream_t stream_;
  int sm_count_ = 0;
  bool pdl_capable_ = false;  // sm_90+: programmatic dependent launch
  bool wgmma_capable_ = false;  // this binary runs sm_90a code here (cuda_wgmma_supported)
  std::string gpu_name_;
  CudaKernelPaths paths_;
  // The first failure since the last synchronize. Guarded: an adapter-loading thread may
  // synchronize (and so take it) while the stepping thread records one.
  std::mutex status_mu_;
  Status status_;
  // Staging ring: host bytes [off, off+n) go to device bytes [off, off+n); a range is reused
  // once the event recorded after its copy has fired.
  static constexpr int64_t kStageBytes = int64_t(4) << 20;
  uint8_t* stage_host_ = nullptr;
  uint8_t* stage_dev_ = nullptr;
  int64_t stage_head_ = 0;
  // Ring bytes consumed since creation, the ends skipped at a wrap included: a range staged when
  // this was E (its size S) is intact while this stays at most E - S + kStageBytes.
  uint64_t stage_written_ = 0;
  std::deque<StagedRange> staged_;
  std::deque<cudaEvent_t> free_events_;
  // Attention's plan of the current call (host), and the split partials' scratch and arrival
  // counts (device, grown on demand, released with the device).
  std::vector<AttnWorkItem> attn_items_;
  std::vector<AttnSplitGroup> attn_groups_;
  std::vector<uint8_t> attn_staging_;  // rows, items and groups packed for one staged copy
  StagedCopy attn_staged_;             // the last call's staged plan (reused while unchanged)
  GrowingBuffer attn_partials_;
  GrowingBuffer attn_arrivals_;  // split groups' arrival counts (int per group and KV head), kept zero
  // lora_apply: the items of both launches when they do not fit inline (host, staged in one
  // copy) and the shrink's K-slice planes (device, grown on demand, released with the device).
  std::vector<LoraItem> lora_items_;
  GrowingBuffer lora_partials_;
  // Split-K matmul partials (device, grown on demand, released with the device).
  GrowingBuffer split_partials_;
  // The prefill GEMM's x rounded to bf16 (device, grown on demand, released with the device).
  GrowingBuffer prefill_x_;
  // matmul's x split into 16-bit halves for the tensor-core GEMM (launch_split_x).
  GrowingBuffer tc_x_;
};

// Threads per block for the simple one-dimensional kernels.
constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n, int per_block = kThreads) {
  return unsigned((n + per_block - 1) / per_block);
}

}  // namespace loom
