// Paged attention of the cuda device, flash-attention style: decode rows, prefill chunks (causal)
// and Medusa tree rows in one launch, GQA by KV head, K/V widened from the cache dtype (f32, f16,
// bf16). Semantics: Device::attention (kernels.h); the scalar reference is kernels-ref.cc.
//
// Work is cut on the host, where the rows are (AttnRow is host memory), into items: one query tile
// of one row (kQueries (token, head) queries of one KV head's group, query index token·G + head in
// group, so a decode row of Llama-3's 32/8 heads is one tile of 4 queries) over a slice of its
// visible keys. A block runs one item for one KV head (grid: items × Hkv):
//  - the tile's queries, pre-scaled, are staged in shared memory once;
//  - the visible keys stream through shared memory kKeys at a time (K rows padded to D+1 floats so
//    that lane j reading key j's dimension d hits bank (j + d) mod 32: no conflicts), widened once
//    per tile and read by every query of it: K/V bytes are read once per query tile instead of
//    once per query head;
//  - each warp owns kQueriesPerWarp queries: lane j scores key j, the warp keeps an online softmax
//    (running max, rescaled sum) and an output accumulator of D/32 dimensions per lane;
//  - masks per query: cache entries (c < cache_len) are visible to all; new entries by the row's
//    tree mask, else causally (j <= i).
// Decode is split over the KV sequence where one item per (row, head) would leave the GPU idle
// (few rows, long contexts): each split writes its (max, sum, unnormalised output) partial to
// scratch and a second kernel merges the splits of each query exactly as the online softmax would
// (out = Σ e^{m_s - M} acc_s / Σ e^{m_s - M} l_s).
//
// Tensor cores are not used here: attention is a small share of a step at the batch sizes and
// contexts Loom serves, and the performance issue measures whether it needs them.
#include <algorithm>

#include "cuda/cuda-device.h"
#include "cuda/dtype-cuda.cuh"

namespace loom {
namespace {

constexpr int kWarps = 4;                           // warps per block
constexpr int kQueries = 16;                        // queries per item (block)
constexpr int kQueriesPerWarp = kQueries / kWarps;  // warp w owns queries w, w + kWarps, ...
constexpr int kKeys = 32;                           // keys per shared-memory tile: one per lane
constexpr int kMaxDimsPerLane = 8;                  // head_dim up to 256
// Least keys per split of a long context: below it the merge costs more than the parallelism wins.
constexpr int kSplitKeys = 512;
// Blocks (items × KV heads) per SM the split aims for before it stops splitting.
constexpr int kBlocksPerSm = 2;

// Shared memory of a block for head_dim D: queries [kQueries, D], K [kKeys, D + 1], V [kKeys, D].
inline size_t smem_bytes(int D) {
  return size_t(kQueries * D + kKeys * (D + 1) + kKeys * D) * sizeof(float);
}

// Semantics: for the item's queries qq < nq (query qi = tile·kQueries + qq: token i = qi / G, head
// h = g·G + qi mod G, g = blockIdx.y) over the visible keys c in [key_begin, key_end):
//   s_c = scale · q[tok_start + i, h] · K[c, g];  m = max_c s_c, l = Σ_c e^{s_c - m},
//   acc = Σ_c e^{s_c - m} V[c, g]
// written as out[tok_start + i, h, :] = acc / l (0 where no key is visible) when item.partial < 0,
// else as the partial record (m, l, acc[D]) at ((item.partial + qq) · Hkv + g) · (D + 2).
// q [T, ldq] f32, kc, vc [S, Hkv·D] in C (paged: slot = block_table[c / bs]·bs + c mod bs),
// rows [nrows] and items [nitems] staged, out [T, Hq·D], partials scratch.
template <typename C>
__global__ void __launch_bounds__(kWarps * 32)
    flash_attention_kernel(const float* q, int64_t ldq, const C* kc, const C* vc, const AttnRow* rows,
                           const CudaDevice::AttnItem* items, AttnShape s, float* out, float* partials) {
  extern __shared__ float smem[];
  const CudaDevice::AttnItem item = items[blockIdx.x];
  const AttnRow row = rows[item.row];
  const int g = blockIdx.y, D = s.head_dim, G = s.num_heads / s.num_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int q0 = item.tile * kQueries, nq = min(kQueries, row.n * G - q0);
  const int64_t E = int64_t(s.num_kv_heads) * D;
  float* qs = smem;                  // [kQueries, D]
  float* ks = qs + kQueries * D;     // [kKeys, D + 1]
  float* vs = ks + kKeys * (D + 1);  // [kKeys, D]

  for (int idx = threadIdx.x; idx < kQueries * D; idx += blockDim.x) {
    const int qq = idx / D, d = idx % D;
    float v = 0.0f;
    if (qq < nq) {
      const int qi = q0 + qq, h = g * G + qi % G;
      v = q[(int64_t(row.tok_start) + qi / G) * ldq + int64_t(h) * D + d] * s.scale;
    }
    qs[idx] = v;
  }

  float m[kQueriesPerWarp], l[kQueriesPerWarp], acc[kQueriesPerWarp][kMaxDimsPerLane];
#pragma unroll
  for (int k = 0; k < kQueriesPerWarp; k++) {
    m[k] = -INFINITY;
    l[k] = 0.0f;
#pragma unroll
    for (int jj = 0; jj < kMaxDimsPerLane; jj++) acc[k][jj] = 0.0f;
  }

  for (int k0 = item.key_begin; k0 < item.key_end; k0 += kKeys) {
    __syncthreads();  // the last tile is consumed (and, the first time, the queries are staged)
    for (int idx = threadIdx.x; idx < kKeys * D; idx += blockDim.x) {
      const int j = idx / D, d = idx % D, c = k0 + j;
      float kv = 0.0f, vv = 0.0f;
      if (c < item.key_end) {
        const int64_t slot = int64_t(row.block_table[c / s.block_size]) * s.block_size + c % s.block_size;
        const int64_t at = slot * E + int64_t(g) * D + d;
        kv = widen<C>(kc[at]);
        vv = widen<C>(vc[at]);
      }
      ks[j * (D + 1) + d] = kv;
      vs[j * D + d] = vv;
    }
    __syncthreads();
    const int c = k0 + lane;  // this lane's key
#pragma unroll
    for (int k = 0; k < kQueriesPerWarp; k++) {
      const int qq = warp + kWarps * k;
      if (qq < nq) {  // uniform across the warp
        const int i = (q0 + qq) / G;
        bool visible = c < item.key_end;
        if (visible && c >= row.cache_len) {
          const int j = c - row.cache_len;
          visible = row.tree_mask ? row.tree_mask[int64_t(i) * row.n + j] != 0 : j <= i;
        }
        float score = -INFINITY;
        if (visible) {
          const float* qv = qs + qq * D;
          const float* kr = ks + lane * (D + 1);
          float dot = 0.0f;
          for (int d = 0; d < D; d++) dot = fmaf(qv[d], kr[d], dot);
          score = dot;
        }
        const float tile_max = warp_max(score);
        if (tile_max != -INFINITY) {  // else no key of this tile is visible to the query
          const float m_new = fmaxf(m[k], tile_max);
          const float corr = expf(m[k] - m_new);  // 0 while m[k] is still -inf
          const float p = visible ? expf(score - m_new) : 0.0f;
          l[k] = l[k] * corr + warp_sum(p);
#pragma unroll
          for (int jj = 0; jj < kMaxDimsPerLane; jj++) acc[k][jj] *= corr;
          for (int j = 0; j < kKeys; j++) {
            const float pj = __shfl_sync(0xffffffffu, p, j);
            const float* vr = vs + j * D;
#pragma unroll
            for (int jj = 0; jj < kMaxDimsPerLane; jj++) {
              const int d = lane + 32 * jj;
              if (d < D) acc[k][jj] = fmaf(pj, vr[d], acc[k][jj]);
            }
          }
          m[k] = m_new;
        }
      }
    }
  }

#pragma unroll
  for (int k = 0; k < kQueriesPerWarp; k++) {
    const int qq = warp + kWarps * k;
    if (qq >= nq) continue;
    if (item.partial < 0) {
      const int qi = q0 + qq, h = g * G + qi % G;
      float* o = out + (int64_t(row.tok_start) + qi / G) * s.num_heads * D + int64_t(h) * D;
#pragma unroll
      for (int jj = 0; jj < kMaxDimsPerLane; jj++) {
        const int d = lane + 32 * jj;
        if (d < D) o[d] = l[k] > 0.0f ? acc[k][jj] / l[k] : 0.0f;
      }
    } else {
      float* rec = partials + (int64_t(item.partial + qq) * s.num_kv_heads + g) * (D + 2);
      if (lane == 0) {
        rec[0] = m[k];
        rec[1] = l[k];
      }
#pragma unroll
      for (int jj = 0; jj < kMaxDimsPerLane; jj++) {
        const int d = lane + 32 * jj;
        if (d < D) rec[2 + d] = acc[k][jj];
      }
    }
  }
}

// Semantics: for each split group (grid.x) and KV head g (grid.y), each of the tile's queries qq:
//   M = max_s m_s, out = Σ_s e^{m_s - M} acc_s / Σ_s e^{m_s - M} l_s (0 where no split saw a key),
// the partial records of split s at ((group.partial + s·kQueries + qq) · Hkv + g) · (D + 2).
__global__ void __launch_bounds__(kWarps * 32)
    merge_splits_kernel(const AttnRow* rows, const CudaDevice::AttnSplitGroup* groups, AttnShape s,
                        const float* partials, float* out) {
  const CudaDevice::AttnSplitGroup grp = groups[blockIdx.x];
  const AttnRow row = rows[grp.row];
  const int g = blockIdx.y, D = s.head_dim, G = s.num_heads / s.num_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int q0 = grp.tile * kQueries, nq = min(kQueries, row.n * G - q0);
  for (int qq = warp; qq < nq; qq += kWarps) {
    auto record = [&](int split) {
      return partials + (int64_t(grp.partial + split * kQueries + qq) * s.num_kv_heads + g) * (D + 2);
    };
    float M = -INFINITY;
    for (int sp = 0; sp < grp.nsplit; sp++) M = fmaxf(M, record(sp)[0]);
    float L = 0.0f, acc[kMaxDimsPerLane] = {};
    if (M != -INFINITY) {
      for (int sp = 0; sp < grp.nsplit; sp++) {
        const float* rec = record(sp);
        const float w = rec[0] == -INFINITY ? 0.0f : expf(rec[0] - M);
        L += w * rec[1];
#pragma unroll
        for (int jj = 0; jj < kMaxDimsPerLane; jj++) {
          const int d = lane + 32 * jj;
          if (d < D) acc[jj] = fmaf(w, rec[2 + d], acc[jj]);
        }
      }
    }
    const int qi = q0 + qq, h = g * G + qi % G;
    float* o = out + (int64_t(row.tok_start) + qi / G) * s.num_heads * D + int64_t(h) * D;
#pragma unroll
    for (int jj = 0; jj < kMaxDimsPerLane; jj++) {
      const int d = lane + 32 * jj;
      if (d < D) o[d] = L > 0.0f ? acc[jj] / L : 0.0f;
    }
  }
}

template <typename C>
void launch_flash(const dim3& grid, size_t smem, cudaStream_t stream, const float* q, int64_t ldq, const void* kc,
                  const void* vc, const AttnRow* rows, const CudaDevice::AttnItem* items, const AttnShape& shape,
                  float* out, float* partials) {
  // Above the default 48 KB (head_dim > 128) a kernel must opt in to more dynamic shared memory.
  if (smem > 48 * 1024) cudaFuncSetAttribute(flash_attention_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  flash_attention_kernel<C><<<grid, kWarps * 32, smem, stream>>>(q, ldq, static_cast<const C*>(kc),
                                                                  static_cast<const C*>(vc), rows, items, shape, out,
                                                                  partials);
}

}  // namespace

// Items in row order, a row's tiles in order, a tile's splits in order; a tile whose keys are split
// gets a group naming its kQueries partial records per split.
void CudaDevice::plan_attention(const AttnRow* rows, int nrows, const AttnShape& shape) {
  attn_items_.clear();
  attn_groups_.clear();
  attn_partial_records_ = 0;
  const int G = shape.num_heads / shape.num_kv_heads;
  int64_t tiles = 0;
  for (int r = 0; r < nrows; r++) tiles += (int64_t(rows[r].n) * G + kQueries - 1) / kQueries;
  if (tiles == 0) return;
  // Splits per tile that would bring the grid to kBlocksPerSm blocks per SM (1: no split).
  const int64_t blocks = tiles * shape.num_kv_heads;
  const int64_t want = std::max<int64_t>(1, (int64_t(kBlocksPerSm) * sm_count_ + blocks - 1) / blocks);
  for (int r = 0; r < nrows; r++) {
    const AttnRow& row = rows[r];
    const int nqueries = row.n * G;
    for (int t = 0; t * kQueries < nqueries; t++) {
      // Keys the tile's queries can see: every cache entry, then the new ones up to its last token
      // (causal) or all of them (a tree mask, which may name any of the row's tokens).
      const int last_token = (std::min(nqueries, (t + 1) * kQueries) - 1) / G;
      const int key_end = row.cache_len + (row.tree_mask ? row.n : last_token + 1);
      int64_t nsplit = std::min<int64_t>(want, (key_end + kSplitKeys - 1) / kSplitKeys);
      if (nsplit <= 1) {
        attn_items_.push_back({r, t, 0, key_end, -1});
        continue;
      }
      // Whole kKeys tiles per split; rounding may leave fewer splits than asked for.
      const int chunk = int(((key_end + nsplit - 1) / nsplit + kKeys - 1) / kKeys * kKeys);
      nsplit = (key_end + chunk - 1) / chunk;
      const int first = int(attn_partial_records_);
      attn_groups_.push_back({r, t, first, int(nsplit)});
      for (int sp = 0; sp < int(nsplit); sp++)
        attn_items_.push_back({r, t, sp * chunk, std::min(key_end, (sp + 1) * chunk), first + sp * kQueries});
      attn_partial_records_ += nsplit * kQueries;
    }
  }
}

void CudaDevice::attention(const float* q, int64_t ldq, const void* kc, const void* vc, const AttnRow* rows, int nrows,
                           const AttnShape& shape, float* out) {
  if (nrows <= 0) return;
  if (shape.head_dim > 32 * kMaxDimsPerLane || shape.num_kv_heads <= 0 || shape.num_heads % shape.num_kv_heads) {
    check(cudaErrorInvalidValue, "attention (head_dim above 256 or heads not a multiple of kv heads)");
    return;
  }
  plan_attention(rows, nrows, shape);
  if (attn_items_.empty()) return;
  float* partials = nullptr;
  if (!attn_groups_.empty()) {
    const int64_t floats = attn_partial_records_ * shape.num_kv_heads * (shape.head_dim + 2);
    if (floats > attn_partials_floats_) {
      release(attn_partials_);  // stream-ordered: the kernels queued before it finish first
      attn_partials_ = static_cast<float*>(alloc(floats * int64_t(sizeof(float))));
      attn_partials_floats_ = attn_partials_ ? floats : 0;
      if (!attn_partials_) {
        check(cudaErrorMemoryAllocation, "attention split scratch");
        return;
      }
    }
    partials = attn_partials_;
  }
  const auto* d_rows = static_cast<const AttnRow*>(stage(rows, int64_t(nrows) * int64_t(sizeof(AttnRow))));
  const auto* d_items = static_cast<const AttnItem*>(
      stage(attn_items_.data(), int64_t(attn_items_.size()) * int64_t(sizeof(AttnItem))));
  if (!d_rows || !d_items) return;
  const dim3 grid(unsigned(attn_items_.size()), unsigned(shape.num_kv_heads));
  const size_t smem = smem_bytes(shape.head_dim);
  switch (shape.kv_dtype) {
    case DType::F32:
      launch_flash<float>(grid, smem, stream_, q, ldq, kc, vc, d_rows, d_items, shape, out, partials);
      break;
    case DType::F16:
      launch_flash<__half>(grid, smem, stream_, q, ldq, kc, vc, d_rows, d_items, shape, out, partials);
      break;
    default:
      launch_flash<__nv_bfloat16>(grid, smem, stream_, q, ldq, kc, vc, d_rows, d_items, shape, out, partials);
  }
  check(cudaGetLastError(), "attention launch");
  if (attn_groups_.empty()) return;
  const auto* d_groups = static_cast<const AttnSplitGroup*>(
      stage(attn_groups_.data(), int64_t(attn_groups_.size()) * int64_t(sizeof(AttnSplitGroup))));
  if (!d_groups) return;
  merge_splits_kernel<<<dim3(unsigned(attn_groups_.size()), unsigned(shape.num_kv_heads)), kWarps * 32, 0, stream_>>>(
      d_rows, d_groups, shape, partials, out);
  check(cudaGetLastError(), "attention merge launch");
}

}  // namespace loom
