// The tensor-core attention kernel of the cuda device: a prompt's causal rows over 16-bit K/V
// caches (attention.cu launches it for the rows attention-plan.h's tc_attention_row picks; the
// SIMT kernel of attention-kernels.cuh keeps decode rows, short chunks and tree rows).
//
// Why: at a 2048-token prompt the SIMT kernel was 227 of 354 ms of an 8B prefill on an H100,
// bound by shared memory (every FMA of Q·Kᵀ and P·V read an operand from it; docs/performance.md).
// Here both products are mma.sync m16n8k16 with f32 accumulation, FlashAttention-2's layout:
//  - a block is kTcQueries (token, head) queries of one row and KV head (query index token·G +
//    head in group, as the SIMT kernel's tiles), 4 warps of 16 queries (the MMA's M side); K/V
//    tiles of kTcKeys keys stream through shared memory in two cp.async stages, so the next
//    tile's gather from the paged cache overlaps this tile's arithmetic;
//  - S = Q·Kᵀ: Q's A fragments by ldmatrix from shared memory, K's B fragments by ldmatrix
//    (K rows are [key, d], the "col" operand as stored); the causal mask and the online softmax
//    (running max and rescaled sum per query row, reduced over the 4 lanes that share a row) run
//    on the accumulators in registers;
//  - O += P·V: P's A fragments are built from S's accumulators in registers (the C layout of two
//    n-fragments is the A layout of one k-step), V's B fragments by ldmatrix.trans.
// Precision: q and p are f32 but an MMA's operands are 16-bit, so each is split into a high part
// and the remainder (x = hi + lo, both in the cache's dtype; tensor-core.cuh's split_x) and both
// parts are multiplied: Q·Kᵀ and P·V cost two MMAs each and the result stays at f32-accumulation
// level against the reference (K and V are exact: the cache holds 16-bit values), which the
// kernel self-test's 1e-5 bound holds it to. Rounding q and p once, as FlashAttention does, would
// cost ~3 significant digits; prefill is bound by the projections' GEMM either way.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/attention-kernels.cuh"
#include "cuda/attention-plan.h"
#include "cuda/simt-compat.cuh"
#include "cuda/tensor-core.cuh"
#include "kernels/kernels.h"

namespace loom {

// Internal linkage: the test program links this header's emulated build beside the real one.
namespace {

// Two 16-bit values as one MMA operand register: `lo` in bits 0-15 (the lower k index).
__device__ __forceinline__ uint32_t pack16(uint16_t lo, uint16_t hi) { return uint32_t(lo) | uint32_t(hi) << 16; }

// Semantics: for the item's queries qq < nq (query qi = tile·kTcQueries + qq: token i = qi / G,
// head h = g·G + qi mod G, g = blockIdx.y) over the keys c < item.key_end visible to token i
// (c < cache_len, or c - cache_len <= i: causal):
//   s_c = scale · q[tok_start + i, h] · K[c, g];  out[tok_start + i, h, :] = Σ_c e^{s_c} V[c, g] / Σ_c e^{s_c}
// q [T, ldq] f32, kc, vc [S, Hkv·D] in C (f16 or bf16; paged: slot = block_table[c / bs]·bs +
// c mod bs), rows and items staged (items from plan_attention's tc_items), out [T, Hq·D].
// grid (items, Hkv), block 4 warps, dynamic shared memory tc_attention_smem_bytes(D).
template <typename C, int D>
__global__ void __launch_bounds__(4 * 32)
    tc_attention_kernel(const float* q, int64_t ldq, const C* kc, const C* vc, const AttnRow* rows,
                        const AttnWorkItem* items, AttnShape s, float* out) {
  constexpr DType DT = CacheDType<C>::value;
  constexpr int kStride = D + kTcPad;   // halves per shared-memory row
  constexpr int kSteps = D / 16;        // k-steps of Q·Kᵀ
  constexpr int kKeyFrags = kTcKeys / 8;  // n-fragments of S (8 keys each)
  constexpr int kDimFrags = D / 8;        // n-fragments of O (8 dims each)
  constexpr int kChunks = D / 8;          // 16-byte chunks per K or V row
  static_assert(D % 16 == 0 && kTcQueries == 64 && kTcKeys % 16 == 0, "tile shape");
  LOOM_DYNAMIC_SHARED(float4, tc_smem);  // float4: 16-byte aligned, as cp.async and ldmatrix need
  uint16_t* q_hi = reinterpret_cast<uint16_t*>(tc_smem);                          // [kTcQueries, kStride]
  uint16_t* q_lo = q_hi + kTcQueries * kStride;   // [kTcQueries, kStride]
  uint16_t* k_s = q_lo + kTcQueries * kStride;    // [2 stages, kTcKeys, kStride]
  uint16_t* v_s = k_s + 2 * kTcKeys * kStride;    // [2 stages, kTcKeys, kStride]

  const AttnWorkItem item = items[blockIdx.x];
  const AttnRow row = rows[item.row];
  const int g = blockIdx.y, G = s.num_heads / s.num_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int q0 = item.tile * kTcQueries, nq = min(kTcQueries, row.n * G - q0);
  const int64_t E = int64_t(s.num_kv_heads) * D;

  // The query tile, scaled and split into 16-bit halves; queries past the row are zeros.
  for (int idx = threadIdx.x; idx < kTcQueries * D; idx += blockDim.x) {
    const int qq = idx / D, d = idx % D;
    const float v = qq < nq ? tile_query(q, ldq, row, s, g, q0 + qq, d) : 0.0f;
    split_x<DT>(v, &q_hi[qq * kStride + d], &q_lo[qq * kStride + d]);
  }

  // K/V tile `tile` (keys tile·kTcKeys ...) into stage `stage`: 16-byte cp.async chunks, zeros
  // for keys past the item's end (masked, and never NaN in a product).
  const int ntiles = (item.key_end + kTcKeys - 1) / kTcKeys;
  auto load_tile = [&](int tile, int stage) {
    for (int idx = threadIdx.x; idx < kTcKeys * kChunks; idx += blockDim.x) {
      const int j = idx / kChunks, chunk = idx % kChunks, c = tile * kTcKeys + j;
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
  load_tile(0, 0);

  // This lane's two query rows of the warp's 16 (the C layout: rows lane/4 and lane/4 + 8) and
  // the tokens they belong to, for the causal mask.
  const int r0 = warp * 16 + (lane >> 2), r1 = r0 + 8;
  const int tok0 = (q0 + r0) / G, tok1 = (q0 + r1) / G;
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
        const int c = tile * kTcKeys + 8 * j + 2 * (lane & 3) + (i & 1), tok = i < 2 ? tok0 : tok1;
        const bool visible = c < row.cache_len || c - row.cache_len <= tok;
        sc[j][i] = visible ? sc[j][i] : -INFINITY;
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
    __syncthreads();  // every warp is done with this stage before a later load_tile refills it
  }

  // Each row's sum is spread over the 4 lanes that hold its columns.
#pragma unroll
  for (int r = 0; r < 2; r++) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int qq = r ? r1 : r0;
    if (qq >= nq) continue;
    const int qi = q0 + qq, h = g * G + qi % G;
    float* dst = out + (int64_t(row.tok_start) + qi / G) * s.num_heads * D + int64_t(h) * D;
#pragma unroll
    for (int j = 0; j < kDimFrags; j++) {
      const int d = 8 * j + 2 * (lane & 3);
      dst[d] = l[r] > 0.0f ? o[j][2 * r] / l[r] : 0.0f;
      dst[d + 1] = l[r] > 0.0f ? o[j][2 * r + 1] / l[r] : 0.0f;
    }
  }
}

}  // namespace
}  // namespace loom
