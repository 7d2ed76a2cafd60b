// The attention kernels of the cuda device and the host-side plan that cuts a call into their
// work (see attention.cu for the design). A header so that the test program can also build them
// for its SIMT emulator (cuda/simt-compat.cuh) and check them against the reference on machines
// without a GPU.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/attention-plan.h"
#include "cuda/dtype-cuda.cuh"
#include "cuda/grid-dependency.cuh"
#include "cuda/simt-compat.cuh"
#include "cuda/warp-reduce.cuh"
#include "kernels/kernels.h"

namespace loom {

// Internal linkage: the test program links this header's emulated build beside the real one.
namespace {

// The DType of a cache element type, for the raw 16-byte loads (dtype-cuda.cuh's Raw8).
template <typename C>
struct CacheDType;
template <>
struct CacheDType<float> {
  static constexpr DType value = DType::F32;
};
#if defined(LOOM_SIMT_EMULATION)
template <>
struct CacheDType<simt::f16> {
  static constexpr DType value = DType::F16;
};
template <>
struct CacheDType<simt::bf16> {
  static constexpr DType value = DType::BF16;
};
#else
template <>
struct CacheDType<__half> {
  static constexpr DType value = DType::F16;
};
template <>
struct CacheDType<__nv_bfloat16> {
  static constexpr DType value = DType::BF16;
};
#endif

// Stages the K/V tile of keys k0 .. k0 + kKeys (cache slots in `slots`, -1 past the item's keys:
// zeros) into shared memory, widened: ks [kKeys, D + 1], vs [kKeys, D]. Where head_dim is a
// multiple of 8 and the caches are 16-byte aligned (always, for the shapes Loom serves), each
// thread fetches 8-element chunks (consecutive threads: consecutive chunks of one key, so a key's
// row is one coalesced run), kLoadBatch chunks of K and of V raw before widening any: the tile
// costs about one memory latency instead of one per element. Else one element per load.
constexpr int kLoadBatch = 4;

template <typename C>
__device__ __forceinline__ void stage_kv_tile(const C* kc, const C* vc, const int* slots, int64_t E, int g, int D,
                                              bool vec, float* ks, float* vs) {
  constexpr DType DT = CacheDType<C>::value;
  if (vec) {
    const int cpk = D >> 3, total = kKeys * cpk;
    for (int base = threadIdx.x; base < total; base += kLoadBatch * blockDim.x) {
      Raw8<DT> kr[kLoadBatch], vr[kLoadBatch];
#pragma unroll
      for (int b = 0; b < kLoadBatch; b++) {
        const int idx = base + b * int(blockDim.x);
        const int slot = idx < total ? slots[idx / cpk] : -1;
        kr[b] = Raw8<DT>{};
        vr[b] = Raw8<DT>{};
        if (slot >= 0) {
          const int64_t at = int64_t(slot) * E + int64_t(g) * D + (idx % cpk) * 8;
          kr[b] = load_raw8<DT>(kc, at);
          vr[b] = load_raw8<DT>(vc, at);
        }
      }
#pragma unroll
      for (int b = 0; b < kLoadBatch; b++) {
        const int idx = base + b * int(blockDim.x);
        if (idx >= total) continue;
        const int j = idx / cpk, d0 = (idx % cpk) * 8;
        float kf[8], vf[8];
        widen_raw8<DT>(kr[b], kf);
        widen_raw8<DT>(vr[b], vf);
#pragma unroll
        for (int i = 0; i < 8; i++) {
          ks[j * (D + 1) + d0 + i] = kf[i];
          vs[j * D + d0 + i] = vf[i];
        }
      }
    }
    return;
  }
  for (int idx = threadIdx.x; idx < kKeys * D; idx += blockDim.x) {
    const int j = idx / D, d = idx % D, slot = slots[j];
    float kv = 0.0f, vv = 0.0f;
    if (slot >= 0) {
      const int64_t at = int64_t(slot) * E + int64_t(g) * D + d;
      kv = widen<C>(kc[at]);
      vv = widen<C>(vc[at]);
    }
    ks[j * (D + 1) + d] = kv;
    vs[j * D + d] = vv;
  }
}

// Element d of query qi of `row` for KV head g, scaled: scale · q[tok_start + qi / G, g·G + qi mod G, d]
// (a tile's query index: token-major, then the head within the KV head's group).
__device__ __forceinline__ float tile_query(const float* q, int64_t ldq, const AttnRow& row, const AttnShape& s, int g,
                                            int qi, int d) {
  const int G = s.num_heads / s.num_kv_heads, h = g * G + qi % G;
  return q[(int64_t(row.tok_start) + qi / G) * ldq + int64_t(h) * s.head_dim + d] * s.scale;
}

// Semantics: for split group `grp` and KV head g, each of the group's queries qq < nq:
//   M = max_s m_s, out = Σ_s e^{m_s - M} acc_s / Σ_s e^{m_s - M} l_s (0 where no split saw a key),
// split s's record of query qq at ((grp.partial + s·nq + qq) · Hkv + g) · (D + 2), for the tile's
// queries q0 + qq (either kernel's tiles). Run by the whole block that completes the group; the
// records were written by other blocks of this launch, so they are read with __ldcg (from L2,
// past this SM's L1, which is not coherent across SMs).
// Not inlined: a rare tail whose registers would otherwise crowd the kernels' main loops (inlined,
// the bf16 tensor-core kernel at D = 128 spilled 52 bytes).
__device__ __noinline__ void merge_split_records(const AttnRow& row, const AttnSplitGroup& grp, const AttnShape& s, int g,
                                    const float* partials, float* out) {
  const int D = s.head_dim, G = s.num_heads / s.num_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int q0 = grp.q0, nq = grp.nq;
  for (int qq = warp; qq < nq; qq += warps) {
    auto record = [&](int split) {
      return partials + (int64_t(grp.partial + split * nq + qq) * s.num_kv_heads + g) * (D + 2);
    };
    float M = -INFINITY;
    for (int sp = 0; sp < grp.nsplit; sp++) M = fmaxf(M, __ldcg(record(sp)));
    float L = 0.0f, acc[kMaxDimsPerLane] = {};
    if (M != -INFINITY) {
      for (int sp = 0; sp < grp.nsplit; sp++) {
        const float* rec = record(sp);
        const float m = __ldcg(rec);
        const float w = m == -INFINITY ? 0.0f : expf(m - M);
        L += w * __ldcg(rec + 1);
#pragma unroll
        for (int jj = 0; jj < kMaxDimsPerLane; jj++) {
          const int d = lane + 32 * jj;
          if (d < D) acc[jj] = fmaf(w, __ldcg(rec + 2 + d), acc[jj]);
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

// The end of a split item in either attention kernel, once its partial records are written:
// the block counts itself in at its group's (group, g) counter, and the block that completes the
// count merges every split's records into the output (merge_split_records), so the merge needs no
// launch of its own. Every thread of the block calls it. arrivals [groups, Hkv] are zero before
// the launch and left zero (the merging block resets its count) for the next call.
__device__ void merge_if_last_split(const AttnRow* rows, const AttnSplitGroup* groups, int group, const AttnShape& s,
                                    int g, const float* partials, float* out, int* arrivals) {
  LOOM_SHARED(int, last);
  __threadfence();  // this thread's records reach every SM before the block counts itself in
  __syncthreads();
  if (threadIdx.x == 0) {
    int* count = arrivals + int64_t(group) * s.num_kv_heads + g;
    last = atomicAdd(count, 1) == groups[group].nsplit - 1 ? 1 : 0;
    if (last) *count = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // the other splits' records, counted in before this block, are read after
  merge_split_records(rows[groups[group].row], groups[group], s, g, partials, out);
}

// Semantics: for the item's queries qq < nq (query qi = tile·kQueries + qq: token i = qi / G, head
// h = g·G + qi mod G, g = blockIdx.y) over the visible keys c in [key_begin, key_end):
//   s_c = scale · q[tok_start + i, h] · K[c, g];  m = max_c s_c, l = Σ_c e^{s_c - m},
//   acc = Σ_c e^{s_c - m} V[c, g]
// written as out[tok_start + i, h, :] = acc / l (0 where no key is visible) when item.partial < 0,
// else as the partial record (m, l, acc[D]) at ((item.partial + qq) · Hkv + g) · (D + 2), and the
// block that completes the item's split group (groups[item.group]) merges its records into out.
// q [T, ldq] f32, kc, vc [S, Hkv·D] in C (paged: slot = block_table[c / bs]·bs + c mod bs),
// rows [nrows], items [nitems] and groups staged, out [T, Hq·D], partials scratch, arrivals
// [groups, Hkv] zero (and left zero).
template <typename C>
__global__ void __launch_bounds__(kWarps * 32)
    flash_attention_kernel(const float* q, int64_t ldq, const C* kc, const C* vc, const AttnRow* rows,
                           const AttnWorkItem* items, AttnShape s, float* out, float* partials,
                           const AttnSplitGroup* groups, int* arrivals) {
  wait_for_prior_kernels();
  LOOM_DYNAMIC_SHARED(float, smem);
  const AttnWorkItem item = items[blockIdx.x];
  const AttnRow row = rows[item.row];
  const int g = blockIdx.y, D = s.head_dim, G = s.num_heads / s.num_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int q0 = item.tile * kQueries, nq = min(kQueries, row.n * G - q0);
  const int64_t E = int64_t(s.num_kv_heads) * D;
  const bool vec = D % 8 == 0 && ((reinterpret_cast<uintptr_t>(kc) | reinterpret_cast<uintptr_t>(vc)) & 15) == 0;
  float* qs = smem;                                     // [kQueries, D]
  float* ks = qs + kQueries * D;                        // [kKeys, D + 1]
  float* vs = ks + kKeys * (D + 1);                     // [kKeys, D]
  int* slot_s = reinterpret_cast<int*>(vs + kKeys * D);  // [2, kKeys]: this tile's cache slots, the next's
  // Cache slot of key c, -1 past the item's keys.
  auto slot_of = [&](int c) {
    return c < item.key_end ? row.block_table[c / s.block_size] * s.block_size + c % s.block_size : -1;
  };

  for (int idx = threadIdx.x; idx < kQueries * D; idx += blockDim.x) {
    const int qq = idx / D, d = idx % D;
    qs[idx] = qq < nq ? tile_query(q, ldq, row, s, g, q0 + qq, d) : 0.0f;
  }
  if (threadIdx.x < kKeys) slot_s[threadIdx.x] = slot_of(item.key_begin + int(threadIdx.x));

  float m[kQueriesPerWarp], l[kQueriesPerWarp], acc[kQueriesPerWarp][kMaxDimsPerLane];
#pragma unroll
  for (int k = 0; k < kQueriesPerWarp; k++) {
    m[k] = -INFINITY;
    l[k] = 0.0f;
#pragma unroll
    for (int jj = 0; jj < kMaxDimsPerLane; jj++) acc[k][jj] = 0.0f;
  }

  for (int k0 = item.key_begin, buf = 0; k0 < item.key_end; k0 += kKeys, buf ^= 1) {
    __syncthreads();  // the last tile is consumed (the first time: queries and slots are staged)
    stage_kv_tile<C>(kc, vc, slot_s + buf * kKeys, E, g, D, vec, ks, vs);
    __syncthreads();
    // The next tile's slots, into the other half (its last readers passed the barrier above); the
    // block-table read overlaps this tile's arithmetic.
    if (threadIdx.x < kKeys && k0 + kKeys < item.key_end)
      slot_s[(buf ^ 1) * kKeys + threadIdx.x] = slot_of(k0 + kKeys + int(threadIdx.x));
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
          // Four chains, summed in a fixed order (whatever the split): the FMAs overlap.
          float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
          int d = 0;
          for (; d + 4 <= D; d += 4) {
            d0 = fmaf(qv[d], kr[d], d0);
            d1 = fmaf(qv[d + 1], kr[d + 1], d1);
            d2 = fmaf(qv[d + 2], kr[d + 2], d2);
            d3 = fmaf(qv[d + 3], kr[d + 3], d3);
          }
          for (; d < D; d++) d0 = fmaf(qv[d], kr[d], d0);
          score = (d0 + d1) + (d2 + d3);
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
  if (item.partial >= 0) merge_if_last_split(rows, groups, item.group, s, g, partials, out, arrivals);
}

}  // namespace
}  // namespace loom
