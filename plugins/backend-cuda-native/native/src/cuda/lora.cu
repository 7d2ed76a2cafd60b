// Multi-LoRA ops of the cuda device: Punica's SGMV/BGMV shrink and expand, one launch each for a
// whole batch of mixed adapters (the kernels, their plans and design: lora-kernels.cuh).
#include "cuda/cuda-device.h"
#include "cuda/lora-kernels.cuh"

namespace loom {

// The launches of both halves, each with its items inline or staged (lora-plan.h: LoraItemList).
static void launch_shrink(CudaDevice* dev, const float* x, int64_t ldx, int64_t K, const LoraItemList& items,
                          const LoraLaunch& p, float* tmp, int64_t ldt, int64_t plane) {
  const dim3 grid(p.grid_x, p.grid_y, p.grid_z);
  dispatch_lora_shrink(p, [&](auto kernel) {
    dev->launch("lora_shrink launch", kernel, grid, kShrinkWarps * 32, 0, x, ldx, K, items, tmp, ldt, p.rgroups,
                p.kslice, plane);
  });
}

static void launch_expand(CudaDevice* dev, const float* tmp, int64_t ldt, const LoraItemList& items,
                          const LoraLaunch& p, int ksplit, int64_t plane, float* tmp_out) {
  const dim3 grid(p.grid_x, p.grid_y, p.grid_z);
  dispatch_lora_expand(p, [&](auto kernel) {
    dev->launch("lora_expand launch", kernel, grid, kExpandThreads, 0, tmp, ldt, items, ksplit, plane, tmp_out);
  });
}

void CudaDevice::lora_shrink(const float* x, int64_t ldx, int64_t K, const LoraSegment* segs, int nsegs, float* tmp,
                             int64_t ldt) {
  LoraLaunch p;
  LoraItemList items;
  if (nsegs <= 0 || !plan_lora_shrink(K, segs, nsegs, false, &p)) return;
  if (!param_list(p.items.data(), p.items.size(), &items)) return;
  launch_shrink(this, x, ldx, K, items, p, tmp, ldt, 0);
}

void CudaDevice::lora_expand(const float* tmp, int64_t ldt, int64_t N, const LoraSegment* segs, int nsegs, float* y,
                             int64_t ldy) {
  if (nsegs <= 0) return;
  LoraLaunch p;
  lora_expand_items(segs, nsegs, y, ldy, N, &p);
  LoraItemList items;
  if (!plan_lora_expand(&p) || !param_list(p.items.data(), p.items.size(), &items)) return;
  launch_expand(this, tmp, ldt, items, p, 1, 0, nullptr);
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
  // Both launches have nsegs items: both inline, or both staged in one copy.
  LoraItemList shrink_items, expand_items;
  if (fits_inline<LoraItemList>(size_t(nsegs))) {
    shrink_items = inline_params<LoraItemList>(sp.items.data(), sp.items.size());
    expand_items = inline_params<LoraItemList>(ep.items.data(), ep.items.size());
  } else {
    lora_items_.assign(sp.items.begin(), sp.items.end());
    lora_items_.insert(lora_items_.end(), ep.items.begin(), ep.items.end());
    const auto* d_items =
        static_cast<const LoraItem*>(stage(lora_items_.data(), int64_t(lora_items_.size() * sizeof(LoraItem))));
    if (!d_items) return;
    shrink_items = staged_params<LoraItemList>(d_items);
    expand_items = staged_params<LoraItemList>(d_items + nsegs);
  }
  launch_shrink(this, x, ldx, K, shrink_items, sp, planes, ldt, plane);
  launch_expand(this, planes, ldt, expand_items, ep, sp.ksplit, plane, sp.ksplit > 1 ? tmp : nullptr);
}

}  // namespace loom
