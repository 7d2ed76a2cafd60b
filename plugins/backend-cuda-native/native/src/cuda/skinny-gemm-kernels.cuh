// The skinny GEMM of the cuda device: decode steps of kSkinnyMinTokens..kSkinnyMaxTokens tokens
// over 16-bit weights, on tensor cores with the weights as the MMA's M side and the tokens as its
// N side (m16n8k16: 8 tokens per fragment). matmul-kernels.cuh chooses it (MatmulPath::kSkinny)
// and matmul.cu describes the device's other kernels.
//
// Why a kernel of its own: a decode batch of 8-32 rows is bandwidth-bound (each weight is used
// by T tokens only), and on the H100 the two kernels that served it streamed the weights at 28-36%
// of HBM bandwidth (docs/performance.md): the GEMV at batch 8 multiplies each 16-byte weight chunk
// by 8 tokens of x read from L1 with FMAs, and the tensor-core GEMM's 64x64 tiles (tokens as M,
// weights as N) were issue-bound, half of each tile empty at batch 32. Here:
//   - no shared memory and no barriers: each warp owns 16 (or 32) weight rows and loads its A
//     fragments straight from global memory, 16 bytes per lane per row, streamed past L1
//     (ld_stream16), kSkUnroll<MT> k-steps of loads in flight before the first MMA;
//   - that works because an MMA sums over its 16 k-slots in any assignment of columns to slots,
//     as long as A and B use the same one: lane (g, t) loads columns 8t..8t+7 of a 32-column
//     k-step for rows g and g+8, and the k-step's two MMAs take slots {2t, 2t+1, 2t+8, 2t+9} as
//     columns {8t, 8t+1, 8t+2, 8t+3} (the first) and {8t+4, .., 8t+7} (the second). The B
//     fragment of lane (g, t) is then columns 8t..8t+7 of token g: one 16-byte load of x per
//     fragment, which the block's warps share through L1;
//   - x is the tensor-core GEMM's split x (split_x_kernel: x = hi + lo in the weights' dtype), so
//     every product runs twice, hi and lo, and the result keeps f32-accumulation accuracy;
//   - K is split over the grid's y when the row blocks alone would leave SMs idle (N = 1024 or
//     4096 at an 8B model's shapes), and the slices' partials are added in order by
//     splitk_reduce_kernel (deterministic).
// A header so that the test program's SIMT emulator runs the same kernel (cuda/simt-compat.cuh).
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda/grid-dependency.cuh"
#include "cuda/simt-compat.cuh"
#include "cuda/split-k.h"
#include "cuda/tensor-core.cuh"
#include "kernels/kernels.h"

namespace loom {

// The token counts the skinny GEMM takes: from where the GEMV's 8-token blocks start (5..8
// tokens share one) up to 32. Past that each warp reads x for its 32 rows through L1 at 4x the
// weights' bytes a k-step (64 tokens), and the tensor-core GEMM, which stages x in shared memory
// once per 64x64 tile, measured faster (not profiled yet): on an H200 (2026-11-28) a batch-64
// decode step took 22.8 ms on this kernel and 17.2 ms on the tensor-core GEMM, while at batch 32
// this kernel was 1.04x faster and at batch 8 1.72x (gpu/bench.sh's kernel-path rows).
constexpr int64_t kSkinnyMinTokens = 5, kSkinnyMaxTokens = 32;
constexpr int kSkWarps = 4;  // warps per block, each on its own rows
// 32-column k-steps whose weight loads a warp of MT row tiles issues together: 8 loads of 16
// bytes in flight per lane either way (4 KB a warp), what the GEMV keeps in flight at batch 1.
template <int MT>
constexpr int kSkUnroll = MT == 1 ? 4 : 2;

// Weight rows per warp: 16 (one A tile) for up to 16 tokens, 32 (two) beyond, where each x
// fragment loaded from L1 then serves two tiles (x's L1 traffic per weight byte halves).
inline int skinny_row_tiles(int64_t T) { return T <= 16 ? 1 : 2; }
inline int64_t skinny_rows_per_block(int64_t T) { return int64_t(kSkWarps) * 16 * skinny_row_tiles(T); }

// How split-K (split-k.h) cuts a job of T tokens and N outputs: over gridDim.y, whole once its
// row blocks are two per SM (a block holds 4 warps, fewer than a tensor-core GEMM tile's grid).
inline KSplit skinny_split(int64_t T, int64_t N, int64_t K, int sms) {
  const int64_t rows = skinny_rows_per_block(T);
  return split_k((N + rows - 1) / rows, K, sms, 2 * int64_t(sms));
}

// Internal linkage: the test program links this header's emulated build beside the real one.
namespace {

// 16 bytes as four 32-bit words (two 16-bit elements each, the lower address in the low half).
struct Words4 {
  uint32_t w[4];
};

#if defined(LOOM_SIMT_EMULATION)
inline Words4 sk_load_weights(const uint16_t* p) {
  Words4 v;
  std::memcpy(v.w, p, 16);
  return v;
}
inline Words4 sk_load_x(const uint16_t* p) { return sk_load_weights(p); }
#else
// Weights: read once per step, streamed past L1 (they would only evict x there).
__device__ __forceinline__ Words4 sk_load_weights(const uint16_t* p) {
  const uint4 v = ld_stream16(p);
  return {{v.x, v.y, v.z, v.w}};
}
// x: read by every warp of the block, so through L1.
__device__ __forceinline__ Words4 sk_load_x(const uint16_t* p) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  return {{v.x, v.y, v.z, v.w}};
}
#endif

// Semantics: for t < T, n < N in this warp's rows: y[t*ldy+n] = (acc ? y : 0) + bias[n]
//   + Σ_k x[t,k] * W[n,k] with x = hi + lo from split_x_kernel. NF = ceil(T / 8) token
//   fragments; MT = skinny_row_tiles(T) row tiles of 16 per warp. grid (ceil(N /
//   skinny_rows_per_block(T)), slices), block kSkWarps * 32.
// xs [2, T, ldxs] in DT (ldxs % 8 == 0, 16-byte aligned), W [N, K] in DT (K % 8 == 0, 16-byte
// aligned), bias [N] or null, y [T, ldy] f32. Rows past N load row N-1 and tokens past T load
// token T-1 (both dropped at the store); columns past the slice load zeros in W and x alike.
// Split-K (part != null): slice y sums k in [y*kchunk, (y+1)*kchunk) only and writes its partial
// to part[(y*T + t)*N + n] (no bias, no accumulate); splitk_reduce_kernel finishes y.
template <DType DT, int NF, int MT>
__global__ void __launch_bounds__(kSkWarps * 32) gemm_skinny_kernel(const uint16_t* xs, int64_t T, int64_t ldxs,
                                                                     const uint16_t* w, int64_t N, int64_t K,
                                                                     const float* bias, float* y, int64_t ldy,
                                                                     bool accumulate, int64_t kchunk, float* part) {
  wait_for_prior_kernels();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, tig = lane & 3;  // mma fragment coordinates
  const int64_t n0 = (int64_t(blockIdx.x) * kSkWarps + warp) * 16 * MT;
  if (n0 >= N) return;  // no barrier below: whole warps may leave
  const int64_t kb = int64_t(blockIdx.y) * kchunk, ke = K < kb + kchunk ? K : kb + kchunk;
  const uint16_t* xlo = xs + T * ldxs;
  // This lane's rows (g and g + 8 of each tile) and tokens (g of each fragment), clamped.
  const uint16_t* wrow[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int64_t n = n0 + 16 * mt + 8 * h + g;
      wrow[mt][h] = w + (n < N ? n : N - 1) * K;
    }
  int64_t xoff[NF];
#pragma unroll
  for (int f = 0; f < NF; f++) {
    const int64_t t = 8 * f + g;
    xoff[f] = (t < T ? t : T - 1) * ldxs;
  }

  float acc[MT][NF][4];
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int f = 0; f < NF; f++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[mt][f][e] = 0.0f;

  const Words4 zero{{0u, 0u, 0u, 0u}};
  constexpr int U = kSkUnroll<MT>;
  for (int64_t k0 = kb; k0 < ke; k0 += 32 * U) {  // warp-uniform: MMAs need every lane
    Words4 a[U][MT][2];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t k = k0 + 32 * u + 8 * tig;
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) a[u][mt][h] = k < ke ? sk_load_weights(wrow[mt][h] + k) : zero;
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (k0 + 32 * u >= ke) break;  // warp-uniform
      const int64_t k = k0 + 32 * u + 8 * tig;
      const bool in = k < ke;
#pragma unroll
      for (int f = 0; f < NF; f++) {
        const Words4 xh = in ? sk_load_x(xs + xoff[f] + k) : zero;
        const Words4 xl = in ? sk_load_x(xlo + xoff[f] + k) : zero;
#pragma unroll
        for (int m = 0; m < 2; m++) {  // columns 8t + 4m .. 8t + 4m + 3 of this lane
#pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            const uint32_t af[4] = {a[u][mt][0].w[2 * m], a[u][mt][1].w[2 * m], a[u][mt][0].w[2 * m + 1],
                                    a[u][mt][1].w[2 * m + 1]};
            mma16816<DT>(acc[mt][f], af, xh.w[2 * m], xh.w[2 * m + 1]);
            mma16816<DT>(acc[mt][f], af, xl.w[2 * m], xl.w[2 * m + 1]);
          }
        }
      }
    }
  }

  // c[e] of a fragment: weight row g (+ 8 for e >= 2) of its tile, token 2t + (e & 1) of its 8.
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int f = 0; f < NF; f++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int64_t n = n0 + 16 * mt + g + (e >= 2 ? 8 : 0), t = 8 * f + 2 * tig + (e & 1);
        if (n >= N || t >= T) continue;
        if (part != nullptr) {
          part[(int64_t(blockIdx.y) * T + t) * N + n] = acc[mt][f][e];
        } else {
          float* out = y + t * ldy + n;
          *out = (accumulate ? *out : 0.0f) + (bias ? bias[n] : 0.0f) + acc[mt][f][e];
        }
      }
}

// `run(kernel)` with the instance for `dt` and T tokens (NF = ceil(T / 8), MT = skinny_row_tiles).
static_assert(kSkinnyMaxTokens <= 32, "dispatch_skinny_dtype has instances up to 4 fragments");
template <DType DT, typename Run>
void dispatch_skinny_dtype(int64_t T, Run&& run) {
  switch ((T + 7) / 8) {
    case 1: run(gemm_skinny_kernel<DT, 1, 1>); break;
    case 2: run(gemm_skinny_kernel<DT, 2, 1>); break;
    case 3: run(gemm_skinny_kernel<DT, 3, 2>); break;
    default: run(gemm_skinny_kernel<DT, 4, 2>);  // up to kSkinnyMaxTokens = 32
  }
}
template <typename Run>
void dispatch_skinny(DType dt, int64_t T, Run&& run) {
  if (dt == DType::BF16)
    dispatch_skinny_dtype<DType::BF16>(T, run);
  else
    dispatch_skinny_dtype<DType::F16>(T, run);
}

}  // namespace
}  // namespace loom
