// The SIMT kernels of the cuda device's dense projections (matmul.cu launches them, beside its
// tensor-core GEMM, which stays there: its PTX has no emulated form) and the choice of kernel per
// job. A header so that the test program's SIMT emulator runs the same kernels with the same
// choices (cuda/simt-compat.cuh).
#pragma once

#include <cstdint>

#include "cuda/dtype-cuda.cuh"
#include "cuda/simt-compat.cuh"
#include "cuda/warp-reduce.cuh"
#include "kernels/kernels.h"

namespace loom {

constexpr int kGemvWarps = 8;   // warps per block
constexpr int kGemvRows = 4;    // weight rows per warp
constexpr int kGemvKTile = 512; // x columns staged per pass
constexpr int kSimtTile = 64, kSimtK = 16;
constexpr int kSimtThreads = 256;

// Which kernel computes a job of T tokens: the tensor-core GEMM (T >= 16, 16-bit weights), the
// GEMV (T < 16) — both need whole 16-byte words per weight row — else the SIMT tiles.
enum class MatmulPath { kTensorCore, kGemv, kSimt };
inline MatmulPath matmul_path(const MatmulJob& j, int64_t T) {
  const bool vec = j.w.cols % 8 == 0 && (reinterpret_cast<uintptr_t>(j.w.data) & 15) == 0;
  if (vec && T >= 16 && j.w.dtype != DType::F32) return MatmulPath::kTensorCore;
  if (vec && T < 16) return MatmulPath::kGemv;
  return MatmulPath::kSimt;
}

// The GEMV's grid for N rows and T tokens, and its tokens per block (a template parameter).
inline int gemv_tokens_per_block(int64_t T) { return T <= 1 ? 1 : T <= 2 ? 2 : T <= 4 ? 4 : 8; }
inline unsigned gemv_grid_x(int64_t N) { return unsigned((N + kGemvWarps * kGemvRows - 1) / (kGemvWarps * kGemvRows)); }

// Internal linkage: the test program links this header's emulated build beside the real one.
namespace {

// ---------------------------------------------------------------- gemv (small T)



// Semantics: for t in this block's TOK tokens, n in its 32 rows: y[t*ldy+n] = (acc ? y : 0) + bias[n]
//   + Σ_k x[t*ldx+k] * W[n,k]. grid (ceil(N/32), ceil(T/TOK)), block 256.
// x [T, ldx] f32, W [N, K] in DT (K % 8 == 0, 16-byte aligned), bias [N] or null, y [T, ldy]
template <DType DT, int TOK>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_kernel(const float* x, int64_t T, int64_t ldx, const void* w,
                                                                int64_t N, int64_t K, const float* bias, float* y,
                                                                int64_t ldy, bool accumulate) {
  LOOM_SHARED(float[TOK][kGemvKTile], xs);  // 16-byte aligned: float4 reads
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t0 = int64_t(blockIdx.y) * TOK;
  const int tn = T - t0 < TOK ? int(T - t0) : TOK;
  const int64_t n0 = (int64_t(blockIdx.x) * kGemvWarps + warp) * kGemvRows;
  float acc[kGemvRows][TOK];
#pragma unroll
  for (int r = 0; r < kGemvRows; r++)
#pragma unroll
    for (int t = 0; t < TOK; t++) acc[r][t] = 0.0f;
  for (int64_t k0 = 0; k0 < K; k0 += kGemvKTile) {
    const int kn = K - k0 < kGemvKTile ? int(K - k0) : kGemvKTile;
    __syncthreads();  // the previous tile is no longer read
    for (int i = threadIdx.x; i < TOK * kGemvKTile; i += blockDim.x) {
      const int t = i / kGemvKTile, k = i % kGemvKTile;
      xs[t][k] = t < tn && k < kn ? x[(t0 + t) * ldx + k0 + k] : 0.0f;
    }
    __syncthreads();
    for (int kk = lane * 8; kk < kn; kk += 32 * 8) {
#pragma unroll
      for (int r = 0; r < kGemvRows; r++) {
        const int64_t n = n0 + r;
        if (n >= N) break;
        float wv[8];
        load8<DT>(w, n * K + k0 + kk, wv);
#pragma unroll
        for (int t = 0; t < TOK; t++) {
          const float4 xa = *reinterpret_cast<const float4*>(&xs[t][kk]);
          const float4 xb = *reinterpret_cast<const float4*>(&xs[t][kk + 4]);
          float s = acc[r][t];
          s = fmaf(wv[0], xa.x, s), s = fmaf(wv[1], xa.y, s), s = fmaf(wv[2], xa.z, s), s = fmaf(wv[3], xa.w, s);
          s = fmaf(wv[4], xb.x, s), s = fmaf(wv[5], xb.y, s), s = fmaf(wv[6], xb.z, s), s = fmaf(wv[7], xb.w, s);
          acc[r][t] = s;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kGemvRows; r++) {
    const int64_t n = n0 + r;
#pragma unroll
    for (int t = 0; t < TOK; t++) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0 && n < N && t < tn) {
        float* out = y + (t0 + t) * ldy + n;
        *out = (accumulate ? *out : 0.0f) + (bias ? bias[n] : 0.0f) + v;
      }
    }
  }
}

// ---------------------------------------------------------------- SIMT fallback


// Semantics: as gemm_tc_kernel, any dtype and shape, plain FMAs. Each of 256 threads owns a 4x4
// patch of the 64x64 tile; x and W tiles are stored k-major so a thread's 4 values are adjacent.
// grid (ceil(N/64), ceil(T/64)), block 256.
__global__ void __launch_bounds__(kSimtThreads) gemm_simt_kernel(const float* x, int64_t T, int64_t ldx, const void* w,
                                                         DType dt, int64_t N, int64_t K, const float* bias, float* y,
                                                         int64_t ldy, bool accumulate) {
  LOOM_SHARED(float[kSimtK][kSimtTile + 4], xs);
  LOOM_SHARED(float[kSimtK][kSimtTile + 4], wsm);
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t m0 = int64_t(blockIdx.y) * kSimtTile, n0 = int64_t(blockIdx.x) * kSimtTile;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kSimtK) {
    for (int i = tid; i < kSimtTile * kSimtK; i += 256) {
      const int r = i / kSimtK, k = i % kSimtK;
      const int64_t t = m0 + r, n = n0 + r, kk = k0 + k;
      xs[k][r] = t < T && kk < K ? x[t * ldx + kk] : 0.0f;
      wsm[k][r] = n < N && kk < K ? load_w(w, dt, n * K + kk) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kSimtK; k++) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; i++) a[i] = xs[k][ty * 4 + i], b[i] = wsm[k][tx * 4 + i];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int64_t t = m0 + ty * 4 + i, n = n0 + tx * 4 + j;
      if (t < T && n < N) {
        float* out = y + t * ldy + n;
        *out = (accumulate ? *out : 0.0f) + (bias ? bias[n] : 0.0f) + acc[i][j];
      }
    }
}

// `run(kernel, tok)` launches the GEMV instance for `dt` and the plan's tokens per block.
template <typename Run>
void dispatch_gemv(DType dt, int64_t T, Run&& run) {
  const int tok = gemv_tokens_per_block(T);
  auto pick = [&](auto k1, auto k2, auto k4, auto k8) {
    tok == 1 ? run(k1, 1) : tok == 2 ? run(k2, 2) : tok == 4 ? run(k4, 4) : run(k8, 8);
  };
  switch (dt) {
    case DType::F32:
      pick(gemv_kernel<DType::F32, 1>, gemv_kernel<DType::F32, 2>, gemv_kernel<DType::F32, 4>, gemv_kernel<DType::F32, 8>);
      break;
    case DType::F16:
      pick(gemv_kernel<DType::F16, 1>, gemv_kernel<DType::F16, 2>, gemv_kernel<DType::F16, 4>, gemv_kernel<DType::F16, 8>);
      break;
    default:
      pick(gemv_kernel<DType::BF16, 1>, gemv_kernel<DType::BF16, 2>, gemv_kernel<DType::BF16, 4>,
           gemv_kernel<DType::BF16, 8>);
  }
}

}  // namespace
}  // namespace loom
