// Paged attention of the cuda device, flash-attention style: decode rows, prefill chunks (causal)
// and Medusa tree rows in one launch, GQA by KV head. Semantics: Device::attention (kernels.h); the
// scalar reference is kernels-ref.cc. Two kernels, one per call by its shape (attention-plan.h's
// attention_tiling):
//  - the tensor-core kernel (attention-tc-kernels.cuh) for 16-bit caches at head dims 64 and 128:
//    every call of the device at the models it serves (its caches are f16);
//  - the SIMT kernel (attention-kernels.cuh) for f32 caches and other head dims.
//
// Work is cut on the host, where the rows are (AttnRow is host memory), into items: one query tile
// of one row (the kernel's tile of (token, head) queries of one KV head's group, query index
// token·G + head in group, so a decode row of Llama-3's 32/8 heads is one tile of 4 queries) over
// a slice of its visible keys. A block runs one item for one KV head (grid: items × Hkv):
//  - the tile's queries, pre-scaled, are staged in shared memory once;
//  - the visible keys stream through shared memory a tile at a time, read by every query of the
//    tile: K/V bytes are read once per query tile instead of once per query head;
//  - an online softmax per query (running max, rescaled sum) and an output accumulator;
//  - masks per query: cache entries (c < cache_len) are visible to all; new entries by the row's
//    tree mask, else causally (j <= i).
// Keys are split over the KV sequence where one item per (row, head) would leave the GPU idle
// (few rows, long contexts): each split writes its (max, sum, unnormalised output) partial to
// scratch and counts itself in at its group's counter; the block that completes the count merges
// the splits of each query exactly as the online softmax would (out = Σ e^{m_s - M} acc_s /
// Σ e^{m_s - M} l_s), so the merge costs no launch of its own (a batch-1 step has one per layer).
#include <cstring>

#include "cuda/attention-kernels.cuh"
#include "cuda/attention-tc-kernels.cuh"
#include "cuda/cuda-device.h"

namespace loom {
namespace {

template <typename C>
void launch_flash(CudaDevice* dev, const dim3& grid, size_t smem, const float* q, int64_t ldq, const void* kc,
                  const void* vc, const AttnRow* rows, const AttnWorkItem* items, const AttnShape& shape,
                  float* out, float* partials, const AttnSplitGroup* groups, int* arrivals) {
  // Above the default 48 KB (head_dim > 128) a kernel must opt in to more dynamic shared memory.
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(flash_attention_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  dev->launch("attention launch", flash_attention_kernel<C>, grid, kWarps * 32, smem, q, ldq,
              static_cast<const C*>(kc), static_cast<const C*>(vc), rows, items, shape, out, partials, groups,
              arrivals);
}

template <typename C, int D>
void launch_tc(CudaDevice* dev, const dim3& grid, const float* q, int64_t ldq, const void* kc, const void* vc,
               const AttnRow* rows, const AttnWorkItem* items, const AttnShape& shape, float* out, float* partials,
               const AttnSplitGroup* groups, int* arrivals) {
  const size_t smem = tc_attention_smem_bytes(D);
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(tc_attention_kernel<C, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  dev->launch("attention launch", tc_attention_kernel<C, D>, grid, 4 * 32, smem, q, ldq, static_cast<const C*>(kc),
              static_cast<const C*>(vc), rows, items, shape, out, partials, groups, arrivals);
}

template <typename C>
void launch_tc(CudaDevice* dev, const dim3& grid, const float* q, int64_t ldq, const void* kc, const void* vc,
               const AttnRow* rows, const AttnWorkItem* items, const AttnShape& shape, float* out, float* partials,
               const AttnSplitGroup* groups, int* arrivals) {
  if (shape.head_dim == 64)
    launch_tc<C, 64>(dev, grid, q, ldq, kc, vc, rows, items, shape, out, partials, groups, arrivals);
  else
    launch_tc<C, 128>(dev, grid, q, ldq, kc, vc, rows, items, shape, out, partials, groups, arrivals);
}

}  // namespace

void CudaDevice::attention(const float* q, int64_t ldq, const void* kc, const void* vc, const AttnRow* rows, int nrows,
                           const AttnShape& shape, float* out) {
  if (nrows <= 0) return;
  if (shape.head_dim > 32 * kMaxDimsPerLane || shape.num_kv_heads <= 0 || shape.num_heads % shape.num_kv_heads) {
    check(cudaErrorInvalidValue, "attention (head_dim above 256 or heads not a multiple of kv heads)");
    return;
  }
  const AttnTiling tiling = attention_tiling(shape, kc, vc, paths_.tc_attention);
  const int64_t records = plan_attention(rows, nrows, shape, tiling, sm_count_, &attn_items_, &attn_groups_);
  if (attn_items_.empty()) return;
  float* partials = nullptr;
  int* arrivals = nullptr;
  if (!attn_groups_.empty()) {
    const int64_t floats = records * shape.num_kv_heads * (shape.head_dim + 2);
    partials = static_cast<float*>(grow(&attn_partials_, floats * int64_t(sizeof(float))));
    // One arrival count per (group, KV head); fresh memory is zeroed, and every call leaves the
    // counts it used at zero again.
    const int64_t had = attn_arrivals_.bytes;
    arrivals = static_cast<int*>(
        grow(&attn_arrivals_, int64_t(attn_groups_.size()) * shape.num_kv_heads * int64_t(sizeof(int))));
    if (arrivals && attn_arrivals_.bytes != had) zero(arrivals, attn_arrivals_.bytes);
    if (!partials || !arrivals) {
      check(cudaErrorMemoryAllocation, "attention split scratch");
      return;
    }
  }
  // Rows, items and split groups in one staged copy (each copy is a stream operation of its own,
  // a few microseconds beside a decode row's attention): [rows | items | groups], 8-byte aligned.
  // The layers of a step stage the same plan, so the copy is reused until the plan changes.
  auto align8 = [](size_t n) { return (n + 7) & ~size_t(7); };
  const size_t rows_bytes = size_t(nrows) * sizeof(AttnRow), items_at = align8(rows_bytes);
  const size_t items_bytes = attn_items_.size() * sizeof(AttnWorkItem), groups_at = align8(items_at + items_bytes);
  attn_staging_.resize(groups_at + attn_groups_.size() * sizeof(AttnSplitGroup));
  std::memcpy(attn_staging_.data(), rows, rows_bytes);
  std::memcpy(attn_staging_.data() + items_at, attn_items_.data(), items_bytes);
  if (!attn_groups_.empty())
    std::memcpy(attn_staging_.data() + groups_at, attn_groups_.data(), attn_groups_.size() * sizeof(AttnSplitGroup));
  auto* staged = static_cast<const uint8_t*>(stage_reusing(&attn_staged_, attn_staging_.data(), int64_t(attn_staging_.size())));
  if (!staged) return;
  const auto* d_rows = reinterpret_cast<const AttnRow*>(staged);
  const auto* d_items = reinterpret_cast<const AttnWorkItem*>(staged + items_at);
  const auto* d_groups = reinterpret_cast<const AttnSplitGroup*>(staged + groups_at);
  const dim3 grid(unsigned(attn_items_.size()), unsigned(shape.num_kv_heads));
  if (tiling.tensor_cores) {
    if (shape.kv_dtype == DType::F16)
      launch_tc<__half>(this, grid, q, ldq, kc, vc, d_rows, d_items, shape, out, partials, d_groups, arrivals);
    else
      launch_tc<__nv_bfloat16>(this, grid, q, ldq, kc, vc, d_rows, d_items, shape, out, partials, d_groups, arrivals);
  } else {
    const size_t smem = attention_smem_bytes(shape.head_dim);
    switch (shape.kv_dtype) {
      case DType::F32:
        launch_flash<float>(this, grid, smem, q, ldq, kc, vc, d_rows, d_items, shape, out, partials, d_groups,
                            arrivals);
        break;
      case DType::F16:
        launch_flash<__half>(this, grid, smem, q, ldq, kc, vc, d_rows, d_items, shape, out, partials, d_groups,
                             arrivals);
        break;
      default:
        launch_flash<__nv_bfloat16>(this, grid, smem, q, ldq, kc, vc, d_rows, d_items, shape, out, partials,
                                    d_groups, arrivals);
    }
  }
}

}  // namespace loom
