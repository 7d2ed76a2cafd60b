// The tensor-core attention kernel of the cuda device: every row (decode, prompt chunks, Medusa
// trees) of a call over a 16-bit cache at head dims 64 and 128 (attention-plan.h's
// tc_attention_shape; the SIMT kernel of attention-kernels.cuh keeps the other shapes).
//
// Why: at a 2048-token prompt the SIMT kernel was 227 of 354 ms of an 8B prefill on an H100,
// bound by shared memory (every FMA of Q·Kᵀ and P·V read an operand from it), and at batch-64
// decode it streamed K/V at ~20% of HBM bandwidth, one widened 32-key tile at a time with no load
// in flight during the arithmetic (docs/performance.md). Here both products are mma.sync
// m16n8k16 with f32 accumulation, FlashAttention-2's layout:
//  - a block is kTcQueries (token, head) queries of one row and KV head (query index token·G +
//    head in group, as the SIMT kernel's tiles), 4 warps of 16 queries (the MMA's M side) over
//    the item's keys [key_begin, key_end); K/V tiles of kTcKeys keys stream through shared memory
//    raw (16-bit) in two cp.async stages, so the next tile's gather from the paged cache is in
//    flight during this tile's arithmetic. A warp whose 16 queries are all past the tile's (a
//    decode row has G queries) only helps load;
//  - S = Q·Kᵀ: Q's A fragments by ldmatrix from shared memory, K's B fragments by ldmatrix
//    (K rows are [key, d], the "col" operand as stored); the mask (causal or the row's tree) and
//    the online softmax (running max and rescaled sum per query row, reduced over the 4 lanes that
//    share a row) run on the accumulators in registers;
//  - O += P·V: P's A fragments are built from S's accumulators in registers (the C layout of two
//    n-fragments is the A layout of one k-step), V's B fragments by ldmatrix.trans;
//  - a split item (a long history cut over several blocks to fill the GPU) writes its (max, sum,
//    unnormalised output) records, and the block that completes its group merges them
//    (merge_if_last_split, shared with the SIMT kernel).
// Precision: q and p are f32 but an MMA's operands are 16-bit, so each is split into a high part
// and the remainder (x = hi + lo, both in the cache's dtype; tensor-core.cuh's split_x) and both
// parts are multiplied: Q·Kᵀ and P·V cost two MMAs each and the result stays at f32-accumulation
// level against the reference (K and V are exact: the cache holds 16-bit values), which the
// kernel self-test's 1e-5 bound holds it to. Rounding q and p once, as FlashAttention does, would
// cost ~3 significant digits; decode is bound by K/V bytes and prefill by the projections' GEMM
// either way.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/attention-kernels.cuh"
#include "cuda/attention-plan.h"
#include "cuda/grid-dependency.cuh"
#include "cuda/simt-compat.cuh"
#include "cuda/tensor-core.cuh"
#include "kernels/kernels.h"

namespace loom {

// Internal linkage: the test program links this header's emulated build beside the real one.
namespace {

// Two 16-bit values as one MMA operand register: `lo` in bits 0-15 (the lower k index).
__device__ __forceinline__ uint32_t pack16(uint16_t lo, uint16_t hi) { return uint32_t(lo) | uint32_t(hi) << 16; }

// Semantics: for the item's queries qq < nq (query qi = tile·kTcQueries + qq: token i = qi / G,
// head h = g·G + qi mod G, g = blockIdx.y) over the keys c in [key_begin, key_end) visible to
// token i (c < cache_len, else j = c - cache_len: tree_mask[i·n + j] != 0 when the row has a
// tree mask, else j <= i):
//   s_c = scale · q[tok_start + i, h] · K[c, g];  m = max_c s_c, l = Σ_c e^{s_c - m},
//   acc = Σ_c e^{s_c - m} V[c, g]
// written as out[tok_start + i, h, :] = acc / l (0 where no key is visible) when item.partial < 0,
// else as the partial record (m, l, acc[D]) at ((item.partial + qq) · Hkv + g) · (D + 2), and the
// block that completes the item's split group (groups[item.group]) merges its records into out.
// q [T, ldq] f32, kc, vc [S, Hkv·D] in C (f16 or bf16; paged: slot = block_table[c / bs]·bs +
// c mod bs), rows, items and groups staged (plan_attention; key_begin a multiple of kTcKeys), out
// [T, Hq·D], partials scratch, arrivals [groups, Hkv] zero (and left zero). grid (items, Hkv),
// block 4 warps, dynamic shared memory tc_attention_smem_bytes(D).
template <typename C, int D>
__global__ void __launch_bounds__(4 * 32)
    tc_attention_kernel(const float* q, int64_t ldq, const C* kc, const C* vc, const AttnRow* rows,
                        const AttnWorkItem* items, AttnShape s, float* out, float* partials,
                        const AttnSplitGroup* groups, int* arrivals) {
  // The call's plan (items, rows and the block tables they point to) comes from stream copies,
  // which no kernel writes (grid-dependency.cuh's rule), so its dependent loads are issued before
  // the wait: a batch-1 decode call is a chain of such round trips (19 µs a layer on an H200, at 2%
  // of DRAM and 4% of SM throughput: Nsight Compute, 2026-11-28).
  const AttnWorkItem item = items[blockIdx.x];
  const AttnRow row = rows[item.row];
  wait_for_prior_kernels();
  constexpr DType DT = CacheDType<C>::value;
  constexpr int kStride = D + kTcPad;   // halves per shared-memory row
  constexpr int kSteps = D / 16;        // k-steps of Q·Kᵀ
  constexpr int kKeyFrags = kTcKeys / 8;  // n-fragments of S (8 keys each)
  constexpr int kDimFrags = D / 8;        // n-fragments of O (8 dims each)
  constexpr int kChunks = D / 8;          // 16-byte chunks per K or V row
  static_assert(D % 16 == 0 && kTcQueries == 64 && kTcKeys % 16 == 0, "tile shape");
  LOOM_DYNAMIC_SHARED(float4, tc_smem);  // float4: 16-byte aligned, as cp.async and ldmatrix need
  uint16_t* q_hi = reinterpret_cast<uint16_t*>(tc_smem);  // [kTcQueries, kStride]
  uint16_t* q_lo = q_hi + kTcQueries * kStride;           // [kTcQueries, kStride]
  uint16_t* k_s = q_lo + kTcQueries * kStride;            // [2 stages, kTcKeys, kStride]
  uint16_t* v_s = k_s + 2 * kTcKeys * kStride;            // [2 stages, kTcKeys, kStride]

  const int g = blockIdx.y, G = s.num_heads / s.num_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int q0 = item.tile * kTcQueries, nq = min(kTcQueries, row.n * G - q0);
  const bool computes = warp * 16 < nq;  // warp-uniform: this warp has queries
  const int64_t E = int64_t(s.num_kv_heads) * D;

  // The query rows of the warps that compute, scaled and split into 16-bit halves; rows past the
  // tile's queries are zeros.
  // kQAhead loads a thread in flight before the first is split (a decode row's 16 rows are 16
  // elements a thread).
  constexpr int kQAhead = 8;
  const int qrows = min(kTcQueries, (nq + 15) / 16 * 16);
  for (int idx0 = threadIdx.x; idx0 < qrows * D; idx0 += kQAhead * blockDim.x) {
    float v[kQAhead];
#pragma unroll
    for (int u = 0; u < kQAhead; u++) {
      const int idx = idx0 + u * int(blockDim.x), qq = idx / D, d = idx % D;
      v[u] = idx < qrows * D && qq < nq ? tile_query(q, ldq, row, s, g, q0 + qq, d) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kQAhead; u++) {
      const int idx = idx0 + u * int(blockDim.x), qq = idx / D, d = idx % D;
      if (idx < qrows * D) split_x<DT>(v[u], &q_hi[qq * kStride + d], &q_lo[qq * kStride + d]);
    }
  }

  // K/V tile `tile` (keys key_begin + tile·kTcKeys ...) into stage `stage`: 16-byte cp.async
  // chunks, zeros for keys past the item's end (masked, and never NaN in a product).
  const int ntiles = (item.key_end - item.key_begin + kTcKeys - 1) / kTcKeys;
  auto load_tile = [&](int tile, int stage) {
    for (int idx = threadIdx.x; idx < kTcKeys * kChunks; idx += blockDim.x) {
      const int j = idx / kChunks, chunk = idx % kChunks, c = item.key_begin + tile * kTcKeys + j;
      int64_t at = 0;
      int bytes = 0;
      if (c < item.key_end) {
        at = (int64_t(row.block_table[c / s.block_size]) * s.block_size + c % s.block_size) * E + int64_t(g) * D +
             chunk * 8;
        bytes = 16;
      }
      const int dst = (stage * kTcKeys + j) * kStride + chunk * 8;
      cp_async16(&k_s[dst], kc + at, bytes);
      cp_async16(&v_s[dst], vc + at, bytes);
    }
    cp_async_commit();
  };
  if (ntiles > 0) load_tile(0, 0);

  // This lane's two query rows of the warp's 16 (the C layout: rows lane/4 and lane/4 + 8) and
  // the tokens they belong to, for the causal mask.
  const int r0 = warp * 16 + (lane >> 2), r1 = r0 + 8;
  const int tok0 = (q0 + r0) / G, tok1 = (q0 + r1) / G;
  // Whether key c is visible to token i (keys before key_end; the caller's tile mask).
  auto visible = [&](int c, int i) {
    if (c < row.cache_len) return true;
    const int j = c - row.cache_len;
    return row.tree_mask ? row.tree_mask[int64_t(i) * row.n + j] != 0 : j <= i;
  };
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // per row: running max, this lane's sum
  float o[kDimFrags][4];
#pragma unroll
  for (int j = 0; j < kDimFrags; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

  for (int tile = 0; tile < ntiles; tile++) {
    const int stage = tile & 1;
    if (tile + 1 < ntiles) {
      load_tile(tile + 1, stage ^ 1);  // its stage was last read in tile - 1, before that tile's end barrier
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // this tile's K/V (and, the first time, the query tile) are in shared memory
    if (computes) {  // warp-uniform; a warp without queries only loads
      const uint16_t* ks = k_s + stage * kTcKeys * kStride;
      const uint16_t* vs = v_s + stage * kTcKeys * kStride;

      // S [16 queries, kTcKeys keys] of this warp = Q·Kᵀ, hi and lo parts of Q.
      float sc[kKeyFrags][4];
#pragma unroll
      for (int j = 0; j < kKeyFrags; j++) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kSteps; kk++) {
        uint32_t ah[4], al[4];
        const int qrow = warp * 16 + (lane & 15), qcol = kk * 16 + (lane >> 4) * 8;
        ldmatrix_x4(ah, &q_hi[qrow * kStride + qcol]);
        ldmatrix_x4(al, &q_lo[qrow * kStride + qcol]);
#pragma unroll
        for (int p = 0; p < kKeyFrags / 2; p++) {
          // Keys 16p .. 16p + 15: b[0], b[1] of n-fragment 2p, b[2], b[3] of 2p + 1.
          uint32_t b[4];
          const int key = 16 * p + (lane & 7) + (lane >> 4) * 8, col = kk * 16 + ((lane >> 3) & 1) * 8;
          ldmatrix_x4(b, &ks[key * kStride + col]);
          mma16816<DT>(sc[2 * p], ah, b[0], b[1]);
          mma16816<DT>(sc[2 * p], al, b[0], b[1]);
          mma16816<DT>(sc[2 * p + 1], ah, b[2], b[3]);
          mma16816<DT>(sc[2 * p + 1], al, b[2], b[3]);
        }
      }

      // Mask, then the online softmax per row (sc[j][0..1]: row r0, [2..3]: row r1; key
      // tile·kTcKeys + 8j + 2(lane % 4) + (i & 1)).
      float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < kKeyFrags; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
          const int c = item.key_begin + tile * kTcKeys + 8 * j + 2 * (lane & 3) + (i & 1);
          const int tok = i < 2 ? tok0 : tok1, qq = i < 2 ? r0 : r1;
          sc[j][i] = c < item.key_end && qq < nq && visible(c, tok) ? sc[j][i] : -INFINITY;
          tmax[i >> 1] = fmaxf(tmax[i >> 1], sc[j][i]);
        }
      float corr[2];
#pragma unroll
      for (int r = 0; r < 2; r++) {
        tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
        tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
        const float m_new = fmaxf(m[r], tmax[r]);
        corr[r] = m_new == -INFINITY ? 1.0f : expf(m[r] - m_new);  // 0 while m is still -inf
        m[r] = m_new;
        l[r] *= corr[r];
      }
#pragma unroll
      for (int j = 0; j < kDimFrags; j++) {
        o[j][0] *= corr[0];
        o[j][1] *= corr[0];
        o[j][2] *= corr[1];
        o[j][3] *= corr[1];
      }
#pragma unroll
      for (int j = 0; j < kKeyFrags; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
          const float mr = m[i >> 1];
          const float p = sc[j][i] == -INFINITY ? 0.0f : expf(sc[j][i] - mr);
          sc[j][i] = p;
          l[i >> 1] += p;
        }

      // O += P·V: k-step kk covers keys 16kk .. 16kk + 15, whose P is S's n-fragments 2kk, 2kk + 1.
#pragma unroll
      for (int kk = 0; kk < kTcKeys / 16; kk++) {
        uint32_t ph[4], pl[4];
#pragma unroll
        for (int f = 0; f < 2; f++)
#pragma unroll
          for (int half = 0; half < 2; half++) {  // registers 2f + half: rows r0 (half 0) or r1 (half 1)
            uint16_t h0, l0, h1, l1;
            split_x<DT>(sc[2 * kk + f][2 * half], &h0, &l0);
            split_x<DT>(sc[2 * kk + f][2 * half + 1], &h1, &l1);
            ph[2 * f + half] = pack16(h0, h1);
            pl[2 * f + half] = pack16(l0, l1);
          }
#pragma unroll
        for (int p = 0; p < kDimFrags / 2; p++) {
          // Dims 16p .. 16p + 15: b[0], b[1] of n-fragment 2p, b[2], b[3] of 2p + 1.
          uint32_t b[4];
          const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, col = 16 * p + (lane >> 4) * 8;
          ldmatrix_x4_trans(b, &vs[key * kStride + col]);
          mma16816<DT>(o[2 * p], ph, b[0], b[1]);
          mma16816<DT>(o[2 * p], pl, b[0], b[1]);
          mma16816<DT>(o[2 * p + 1], ph, b[2], b[3]);
          mma16816<DT>(o[2 * p + 1], pl, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this stage before a later load_tile refills it
  }

  // Each row's sum is spread over the 4 lanes that hold its columns.
#pragma unroll
  for (int r = 0; r < 2; r++) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  if (computes) {  // warp-uniform
#pragma unroll
    for (int r = 0; r < 2; r++) {
      const int qq = r ? r1 : r0;
      if (qq >= nq) continue;
      float* dst;
      if (item.partial < 0) {
        const int qi = q0 + qq, h = g * G + qi % G;
        dst = out + (int64_t(row.tok_start) + qi / G) * s.num_heads * D + int64_t(h) * D;
      } else {
        float* rec = partials + (int64_t(item.partial + qq) * s.num_kv_heads + g) * (D + 2);
        if ((lane & 3) == 0) {
          rec[0] = m[r];
          rec[1] = l[r];
        }
        dst = rec + 2;
      }
      const bool normalise = item.partial < 0;
#pragma unroll
      for (int j = 0; j < kDimFrags; j++) {
        const int d = 8 * j + 2 * (lane & 3);
        const float a = o[j][2 * r], b = o[j][2 * r + 1];
        dst[d] = !normalise ? a : l[r] > 0.0f ? a / l[r] : 0.0f;
        dst[d + 1] = !normalise ? b : l[r] > 0.0f ? b / l[r] : 0.0f;
      }
    }
  }
  if (item.partial >= 0) merge_if_last_split(rows, groups, item.group, s, g, partials, out, arrivals);
}

}  // namespace
}  // namespace loom
