// Multi-LoRA ops of the cuda device: Punica's SGMV/BGMV shrink and expand, one launch each for a
// whole batch of mixed adapters (the kernels, their plans and design: lora-kernels.cuh).
#include "cuda/cuda-device.h"
#include "cuda/lora-kernels.cuh"

namespace loom {

// The launches of both halves. The items of a call's launches are staged in one copy: each
// staged copy is a stream operation of its own, a few microseconds beside kernels this small.
static void launch_shrink(CudaDevice* dev, const float* x, int64_t ldx, int64_t K, const LoraItem* d_items,
                          const LoraLaunch& p, float* tmp, int64_t ldt, int64_t plane) {
  const dim3 grid(p.grid_x, p.grid_y, p.grid_z);
  dispatch_lora_shrink(p, [&](auto kernel) {
    dev->launch("lora_shrink launch", kernel, grid, kShrinkWarps * 32, 0, x, ldx, K, d_items, tmp, ldt, p.rgroups,
                p.kslice, plane);
  });
}

static void launch_expand(CudaDevice* dev, const float* tmp, int64_t ldt, const LoraItem* d_items, const LoraLaunch& p,
                          int ksplit, int64_t plane, float* tmp_out) {
  const dim3 grid(p.grid_x, p.grid_y, p.grid_z);
  dispatch_lora_expand(p, [&](auto kernel) {
    dev->launch("lora_expand launch", kernel, grid, kExpandThreads, 0, tmp, ldt, d_items, ksplit, plane, tmp_out);
  });
}

void CudaDevice::lora_shrink(const float* x, int64_t ldx, int64_t K, const LoraSegment* segs, int nsegs, float* tmp,
                             int64_t ldt) {
  LoraLaunch p;
  if (nsegs <= 0 || !plan_lora_shrink(K, segs, nsegs, false, &p)) return;
  const auto* d_items = static_cast<const LoraItem*>(stage(p.items.data(), int64_t(p.items.size() * sizeof(LoraItem))));
  if (d_items) launch_shrink(this, x, ldx, K, d_items, p, tmp, ldt, 0);
}

void CudaDevice::lora_expand(const float* tmp, int64_t ldt, int64_t N, const LoraSegment* segs, int nsegs, float* y,
                             int64_t ldy) {
  if (nsegs <= 0) return;
  LoraLaunch p;
  lora_expand_items(segs, nsegs, y, ldy, N, &p);
  if (!plan_lora_expand(&p)) return;
  const auto* d_items = static_cast<const LoraItem*>(stage(p.items.data(), int64_t(p.items.size() * sizeof(LoraItem))));
  if (d_items) launch_expand(this, tmp, ldt, d_items, p, 1, 0, nullptr);
}

// Semantics: Device::lora_apply, in two launches: one shrink over every segment of every module
// (their columns differ) in K slices of one tile, each slice's sums in a plane of device scratch;
// then one expand that adds the planes (and writes the sums to tmp) and where each segment writes
// its module's output.
void CudaDevice::lora_apply(const float* x, int64_t ldx, int64_t K, const LoraSegment* shrink,
                            const LoraSegment* expand, const int* module, int nsegs, const LoraOutput* outs, float* tmp,
                            int64_t ldt) {
  if (nsegs <= 0) return;
  LoraLaunch sp, ep;
  if (!plan_lora_shrink(K, shrink, nsegs, true, &sp)) return;
  lora_apply_items(expand, module, nsegs, outs, &ep);
  if (!plan_lora_expand(&ep)) return;
  float* planes = tmp;
  int64_t plane = 0;
  if (sp.ksplit > 1) {
    plane = sp.t_span * ldt;
    planes = static_cast<float*>(grow(&lora_partials_, plane * sp.ksplit * int64_t(sizeof(float))));
    if (!planes) {
      check(cudaErrorMemoryAllocation, "lora_apply slice scratch");
      return;
    }
  }
  lora_items_.assign(sp.items.begin(), sp.items.end());
  lora_items_.insert(lora_items_.end(), ep.items.begin(), ep.items.end());
  const auto* d_items =
      static_cast<const LoraItem*>(stage(lora_items_.data(), int64_t(lora_items_.size() * sizeof(LoraItem))));
  if (!d_items) return;
  launch_shrink(this, x, ldx, K, d_items, sp, planes, ldt, plane);
  launch_expand(this, planes, ldt, d_items + nsegs, ep, sp.ksplit, plane, sp.ksplit > 1 ? tmp : nullptr);
}

}  // namespace loom
