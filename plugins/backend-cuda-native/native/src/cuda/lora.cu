// Multi-LoRA ops of the cuda device: Punica's SGMV/BGMV shrink and expand, one launch each for a
// whole batch of mixed adapters (the kernels, their plans and design: lora-kernels.cuh).
#include "cuda/cuda-device.h"
#include "cuda/lora-kernels.cuh"

namespace loom {

// Both halves go through these two launchers; lora_expand and lora_apply differ only in where
// each segment writes.
static void launch_shrink(CudaDevice* dev, const float* x, int64_t ldx, int64_t K, const LoraSegment* segs, int nsegs,
                          float* tmp, int64_t ldt) {
  LoraLaunch p;
  if (!plan_lora_shrink(K, segs, nsegs, &p)) return;
  const auto* d_items = static_cast<const LoraItem*>(dev->stage(p.items.data(), int64_t(p.items.size() * sizeof(LoraItem))));
  if (!d_items) return;
  const dim3 grid(p.grid_x, p.grid_y, p.grid_z);
  cudaStream_t st = dev->stream();
  dispatch_lora_shrink(p, [&](auto kernel) { kernel<<<grid, kShrinkWarps * 32, 0, st>>>(x, ldx, K, d_items, tmp, ldt); });
  dev->check(cudaGetLastError(), "lora_shrink launch");
}

static void launch_expand(CudaDevice* dev, const float* tmp, int64_t ldt, LoraLaunch& p) {
  if (!plan_lora_expand(&p)) return;
  const auto* d_items = static_cast<const LoraItem*>(dev->stage(p.items.data(), int64_t(p.items.size() * sizeof(LoraItem))));
  if (!d_items) return;
  const dim3 grid(p.grid_x, p.grid_y, p.grid_z);
  cudaStream_t st = dev->stream();
  dispatch_lora_expand(p, [&](auto kernel) { kernel<<<grid, kExpandThreads, 0, st>>>(tmp, ldt, d_items); });
  dev->check(cudaGetLastError(), "lora_expand launch");
}

void CudaDevice::lora_shrink(const float* x, int64_t ldx, int64_t K, const LoraSegment* segs, int nsegs, float* tmp,
                             int64_t ldt) {
  if (nsegs > 0) launch_shrink(this, x, ldx, K, segs, nsegs, tmp, ldt);
}

void CudaDevice::lora_expand(const float* tmp, int64_t ldt, int64_t N, const LoraSegment* segs, int nsegs, float* y,
                             int64_t ldy) {
  if (nsegs <= 0) return;
  LoraLaunch p;
  lora_expand_items(segs, nsegs, y, ldy, N, &p);
  launch_expand(this, tmp, ldt, p);
}

// Semantics: Device::lora_apply, in two launches: one shrink over every segment of every module
// (their columns differ), then one expand where each segment writes its module's output.
void CudaDevice::lora_apply(const float* x, int64_t ldx, int64_t K, const LoraSegment* shrink,
                            const LoraSegment* expand, const int* module, int nsegs, const LoraOutput* outs, float* tmp,
                            int64_t ldt) {
  if (nsegs <= 0) return;
  launch_shrink(this, x, ldx, K, shrink, nsegs, tmp, ldt);
  LoraLaunch p;
  lora_apply_items(expand, module, nsegs, outs, &p);
  launch_expand(this, tmp, ldt, p);
}

}  // namespace loom
