// The kernels of the cuda device's dense projections (matmul.cu has the design and the launches):
// the GEMV, the tensor-core GEMM and the SIMT tiles, and the choice of kernel per job (the prefill
// GEMM and the skinny GEMM among them: prefill-gemm-kernels.cuh, skinny-gemm-kernels.cuh). A
// header so that the test program's SIMT emulator runs the same kernels with the same choices
// (cuda/simt-compat.cuh); the tensor-core helpers (mma.sync, ldmatrix, cp.async:
// tensor-core.cuh) have an emulated form.
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda/dtype-cuda.cuh"
#include "cuda/grid-dependency.cuh"
#include "cuda/kernel-paths.h"
#include "cuda/prefill-gemm-kernels.cuh"
#include "cuda/simt-compat.cuh"
#include "cuda/skinny-gemm-kernels.cuh"
#include "cuda/split-k.h"
#include "cuda/tensor-core.cuh"
#include "cuda/warp-reduce.cuh"
#include "cuda/wgmma-gemm-kernels.cuh"
#include "kernels/kernels.h"

namespace loom {

constexpr int kGemvWarps = 4;  // warps per block: small blocks, so even N = 1024 spreads over every SM
constexpr int kBM = 64, kBN = 64, kBK = 32, kPad = 8;  // tile; +8 halves per smem row: conflict-free fragments
constexpr int kGemmThreads = 128;                      // 4 warps, 2 (tokens) x 2 (outputs), 32x32 each
constexpr int kSimtTile = 64, kSimtK = 16;
constexpr int kSimtThreads = 256;

// Which kernel computes a job of T tokens on a GPU of `sms` SMs: the prefill GEMM (bf16 weights,
// a compute-bound step: prefill_gemm_fits, or wgmma_gemm_fits where the wgmma GEMM takes it:
// prefill_takes_wgmma), the skinny GEMM (16-bit weights, a decode batch of
// kSkinnyMinTokens..kSkinnyMaxTokens, unless `paths` turns it off), the tensor-core GEMM (T >= 16,
// 16-bit weights), the GEMV (T < 16) — all need whole 16-byte words per weight row — else the
// SIMT tiles.
enum class MatmulPath { kPrefill, kSkinny, kTensorCore, kGemv, kSimt };
inline MatmulPath matmul_path(const MatmulJob& j, int64_t T, int sms, const CudaKernelPaths& paths) {
  const bool vec = j.w.cols % 8 == 0 && (reinterpret_cast<uintptr_t>(j.w.data) & 15) == 0;
  if (vec && j.w.dtype == DType::BF16 &&
      (prefill_gemm_fits(T, j.w.rows, sms) || (paths.wgmma && wgmma_gemm_fits(T, j.w.rows, sms))))
    return MatmulPath::kPrefill;
  if (vec && paths.skinny_gemm && T >= kSkinnyMinTokens && T <= kSkinnyMaxTokens && j.w.dtype != DType::F32)
    return MatmulPath::kSkinny;
  if (vec && T >= 16 && j.w.dtype != DType::F32) return MatmulPath::kTensorCore;
  if (vec && T < 16) return MatmulPath::kGemv;
  return MatmulPath::kSimt;
}

// Which kernel a kPrefill job of T tokens and N outputs runs: the wgmma GEMM where its tiles fill
// the GPU and the `wgmma` path is on (the device turns it off without an sm_90a image), else the
// mma.sync prefill GEMM.
inline bool prefill_takes_wgmma(int64_t T, int64_t N, int sms, const CudaKernelPaths& paths) {
  return paths.wgmma && wgmma_gemm_fits(T, N, sms);
}

// How split-K (split-k.h) cuts a tensor-core job of T tokens: over gridDim.z, whole once its
// 64x64 tiles are as many as the SMs.
static_assert(kBK == kSplitKStep, "K slices are cut at the tensor-core GEMM's k-tile");
inline KSplit tc_split(int64_t T, int64_t N, int64_t K, int sms) {
  const int64_t tiles = ((N + kBN - 1) / kBN) * ((T + kBM - 1) / kBM);
  return split_k(tiles, K, sms, sms);
}
// Workspace floats job `j` needs at T tokens with `sms` SMs (0: not split), on the tensor-core or
// the skinny GEMM.
inline int64_t tc_split_floats(const MatmulJob& j, int64_t T, int sms, const CudaKernelPaths& paths) {
  const MatmulPath p = matmul_path(j, T, sms, paths);
  if (p != MatmulPath::kTensorCore && p != MatmulPath::kSkinny) return 0;
  const int slices = p == MatmulPath::kSkinny ? skinny_split(T, j.w.rows, j.w.cols, sms).slices
                                              : tc_split(T, j.w.rows, j.w.cols, sms).slices;
  return slices > 1 ? slices * T * j.w.rows : 0;
}

// The GEMV's shape per tokens-per-block TOK: ROWS weight rows per warp (x values loaded from L1
// are reused across them) and UNROLL 16-byte chunks per row in flight per lane before the first
// FMA. ROWS x UNROLL x 16 bytes per lane is what keeps enough loads in flight to stream HBM at
// batch 1 (8 loads: 4 KB per warp); more tokens need more rows per warp so that x's L1 traffic
// (TOK x 32 bytes per chunk) stays within a few times the weights' bytes.
template <int TOK>
struct GemvShape {
  static constexpr int kRows = TOK <= 2 ? 2 : 4;
  static constexpr int kUnroll = TOK <= 2 ? 4 : 2;
};
inline int gemv_tokens_per_block(int64_t T) { return T <= 1 ? 1 : T <= 2 ? 2 : T <= 4 ? 4 : 8; }
inline int gemv_rows_per_warp(int tok) { return tok <= 2 ? GemvShape<1>::kRows : GemvShape<4>::kRows; }
inline unsigned gemv_grid_x(int64_t N, int tok) {
  const int64_t rows = int64_t(kGemvWarps) * gemv_rows_per_warp(tok);
  return unsigned((N + rows - 1) / rows);
}

// Internal linkage: the test program links this header's emulated build beside the real one.
namespace {

// ---------------------------------------------------------------- gemv (small T)



// Up to four GEMV jobs over the same x and K in one launch (q/k/v, gate/up): each job's blocks
// follow the previous job's, so k and v (N = 1024 at 8B) no longer run alone on a few SMs.
constexpr int kGemvMaxJobs = 4;
struct GemvJobs {
  const void* w[kGemvMaxJobs];
  const float* bias[kGemvMaxJobs];
  float* y[kGemvMaxJobs];
  int64_t N[kGemvMaxJobs], ldy[kGemvMaxJobs];
  int64_t block_end[kGemvMaxJobs];  // cumulative gemv_grid_x of jobs 0..j
  int n;
};

// Columns a GEMV warp covers with one 16-byte chunk per lane (8 elements each).
constexpr int kGemvStep = 32 * 8;

// The RMSNorm a GEMV folds into its read of x (Device::rmsnorm_matmul): the projection of
// RMSNorm(x) · w is r_t · Σ_k W[n,k] · (x[t,k] · w[k]) with r_t = 1/sqrt(Σ_k x[t,k]² / K + eps), and
// every warp already reads all of x[t, 0..K) for its dot products, so it sums the squares on the
// way and scales its sums by r_t at the end: no pass over x before the projection, one launch
// fewer. Where a LoRA pass reads the normed rows, the launch's warps also write them once r_t is
// known, each a strided share of the columns. w null: no norm.
struct GemvNorm {
  const float* w;  // [K], 16-byte aligned
  float eps;
  float* xn;       // [T, ldxn]: the normed rows x · r_t · w, or null: not kept (must not be x)
  int64_t ldxn;
};
inline GemvNorm no_gemv_norm() { return {nullptr, 0.0f, nullptr, 0}; }

// One step of a GEMV warp's rows: raw[u][r] = the 16-byte chunk of W row min(n0 + r, N - 1) at
// column k0 + u * kGemvStep (k0 = lane * 8 + step * kGemvStep * UNROLL), for the columns below K.
template <DType DT, int ROWS, int UNROLL>
__device__ __forceinline__ void gemv_load_step(const void* w, int64_t N, int64_t K, int64_t n0, int64_t k0,
                                               Raw8<DT> (&raw)[UNROLL][ROWS]) {
#pragma unroll
  for (int u = 0; u < UNROLL; u++)
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
      const int64_t k = k0 + u * kGemvStep, n = n0 + r < N ? n0 + r : N - 1;
      if (k < K) raw[u][r] = load_raw8<DT>(w, n * K + k);
    }
}

// Semantics: for each job (W [N, K], bias, y, ldy), t in this block's TOK tokens, n in its warps'
//   rows: y[t*ldy+n] = (acc ? y : 0) + bias[n] + Σ_k x[t*ldx+k] * W[n,k];
//   NORM: y[t*ldy+n] = (acc ? y : 0) + bias[n] + r_t * Σ_k x[t*ldx+k] * norm.w[k] * W[n,k],
//   r_t = 1/sqrt(Σ_k x[t*ldx+k]^2 / K + norm.eps)  (GemvNorm), and where norm.xn is set,
//   norm.xn[t*ldxn+k] = x[t*ldx+k] * r_t * norm.w[k] for k < K.
//   grid (jobs.block_end[n-1], ceil(T/TOK)), block kGemvWarps*32.
// x [T, ldx] f32, W [N, K] in DT (K % 8 == 0, 16-byte aligned), bias [N] or null, y [T, ldy]
// Each warp owns ROWS consecutive rows and walks K in chunks of 8 elements per lane (256 per
// warp): all UNROLL x ROWS weight loads of a step are issued (raw, streamed past L1) before any is
// widened, and x is read straight from global memory (L1-resident: every warp of the SM reads the
// same TOK rows), so no barrier ever stalls the stream. Rows past N load row N-1 and are dropped.
template <DType DT, int TOK, bool NORM = false>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_kernel(const float* x, int64_t T, int64_t ldx, GemvJobs jobs,
                                                                int64_t K, bool accumulate, GemvNorm norm) {
  constexpr int ROWS = GemvShape<TOK>::kRows, UNROLL = GemvShape<TOK>::kUnroll, kStep = kGemvStep;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t0 = int64_t(blockIdx.y) * TOK;
  const int tn = T - t0 < TOK ? int(T - t0) : TOK;
  // This block's job: the blocks of job j are [block_end[j-1], block_end[j]).
  int j = 0;
  while (j + 1 < jobs.n && int64_t(blockIdx.x) >= jobs.block_end[j]) j++;
  const void* w = jobs.w[j];
  const int64_t N = jobs.N[j], ldy = jobs.ldy[j];
  const float* bias = jobs.bias[j];
  float* y = jobs.y[j];
  const int64_t first = j > 0 ? jobs.block_end[j - 1] : 0;
  const int64_t n0 = ((int64_t(blockIdx.x) - first) * kGemvWarps + warp) * ROWS;
  // The first step's weights are loaded before the wait: no kernel writes weights, and with
  // programmatic launch (grid-dependency.cuh) these loads run while the op before this one (an
  // rmsnorm, attention, silu_mul) is still finishing, instead of after it.
  const int64_t k_first = int64_t(lane) * 8, k_stride = int64_t(kStep) * UNROLL;
  Raw8<DT> first_raw[UNROLL][ROWS];
  // A warp past its job's rows leaves (no barrier below: whole warps may), unless the launch
  // writes the normed rows: then every warp needs r_t, and it runs the loop on row N-1's weights
  // (gemv_load_step's clamp) and drops its sums.
  const bool runs = n0 < N || (NORM && norm.xn != nullptr);
  if (runs) gemv_load_step<DT, ROWS, UNROLL>(w, N, K, n0, k_first, first_raw);
  wait_for_prior_kernels();
  if (!runs) return;
  // float4 reads of x need 16-byte aligned rows; otherwise scalar reads (same values).
  const bool x_vec = ldx % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  float acc[ROWS][TOK];
  float ss[TOK];  // NORM: this lane's Σ x² per token
#pragma unroll
  for (int t = 0; t < TOK; t++) {
    ss[t] = 0.0f;
#pragma unroll
    for (int r = 0; r < ROWS; r++) acc[r][t] = 0.0f;
  }
  // acc += one step's weights (raw, from column k0) times x (NORM: times x · norm.w).
  auto accumulate_step = [&](const Raw8<DT> (&raw)[UNROLL][ROWS], int64_t k0) {
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      const int64_t k = k0 + u * kStep;
      if (k >= K) break;
      float wv[ROWS][8];
#pragma unroll
      for (int r = 0; r < ROWS; r++) widen_raw8<DT>(raw[u][r], wv[r]);
      float nw[8];
      if constexpr (NORM) {
        const float4 a = ldg4(norm.w + k), b = ldg4(norm.w + k + 4);
        nw[0] = a.x, nw[1] = a.y, nw[2] = a.z, nw[3] = a.w, nw[4] = b.x, nw[5] = b.y, nw[6] = b.z, nw[7] = b.w;
      }
#pragma unroll
      for (int t = 0; t < TOK; t++) {
        if (t >= tn) break;
        const float* xt = x + (t0 + t) * ldx + k;
        float xv[8];
        if (x_vec) {
          const float4 a = ldg4(xt), b = ldg4(xt + 4);
          xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w, xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
        } else {
#pragma unroll
          for (int i = 0; i < 8; i++) xv[i] = ldg1(xt + i);
        }
        if constexpr (NORM) {
#pragma unroll
          for (int i = 0; i < 8; i++) {
            ss[t] = fmaf(xv[i], xv[i], ss[t]);
            xv[i] *= nw[i];
          }
        }
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
          float s = acc[r][t];
#pragma unroll
          for (int i = 0; i < 8; i++) s = fmaf(wv[r][i], xv[i], s);
          acc[r][t] = s;
        }
      }
    }
  };
  if (k_first < K) accumulate_step(first_raw, k_first);
  for (int64_t k0 = k_first + k_stride; k0 < K; k0 += k_stride) {
    Raw8<DT> raw[UNROLL][ROWS];
    gemv_load_step<DT, ROWS, UNROLL>(w, N, K, n0, k0, raw);
    accumulate_step(raw, k0);
  }
  // NORM: r_t from the whole row's Σ x² (the warp's lanes cover all of K), the reciprocal root in
  // double as rmsnorm_kernel takes it.
  float scale[TOK];
#pragma unroll
  for (int t = 0; t < TOK; t++)
    scale[t] = NORM ? float(1.0 / sqrt(double(warp_sum(ss[t])) / double(K) + double(norm.eps))) : 1.0f;
  if (NORM && norm.xn != nullptr) {  // this warp's share of the normed rows, as rmsnorm_kernel rounds them
    const int64_t lanes = int64_t(gridDim.x) * kGemvWarps * 32;
    for (int64_t k = (int64_t(blockIdx.x) * kGemvWarps + warp) * 32 + lane; k < K; k += lanes)
      for (int t = 0; t < tn; t++) norm.xn[(t0 + t) * norm.ldxn + k] = x[(t0 + t) * ldx + k] * scale[t] * norm.w[k];
  }
#pragma unroll
  for (int r = 0; r < ROWS; r++) {
    const int64_t n = n0 + r;
#pragma unroll
    for (int t = 0; t < TOK; t++) {
      const float v = warp_sum(acc[r][t]) * scale[t];
      if (lane == 0 && n < N && t < tn) {
        float* out = y + (t0 + t) * ldy + n;
        *out = (accumulate ? *out : 0.0f) + (bias ? bias[n] : 0.0f) + v;
      }
    }
  }
}

// ---------------------------------------------------------------- tensor-core GEMM (T >= 16)

// Semantics: xs[t*ldxs + k] = hi, xs[T*ldxs + t*ldxs + k] = lo, x[t*ldx+k] = hi + lo as DT's
// split_x rounds it (tensor-core.cuh), for t < T, k < K. grid (ceil(K / (256 kXCols)) up to 64,
// min(T, 65535)), block 256; rows beyond gridDim.y loop; kXCols columns a thread at a time, as
// round_x_bf16_kernel. The tensor-core GEMM's x, split once per call instead of once per block and
// k-tile (Nsight Compute found that GEMM issue-bound, its warps converting and storing x between
// barriers: docs/performance.md).
template <DType DT>
__global__ void __launch_bounds__(256) split_x_kernel(const float* x, int64_t T, int64_t ldx, int64_t K, uint16_t* xs,
                                                      int64_t ldxs) {
  wait_for_prior_kernels();
  const bool vec = x_cols_vec(x, ldx, xs, ldxs, K);  // then lo (T·ldxs further) is aligned too
  for (int64_t t = blockIdx.y; t < T; t += gridDim.y)
    for (int64_t k = (int64_t(blockIdx.x) * 256 + threadIdx.x) * kXCols; k < K;
         k += int64_t(gridDim.x) * 256 * kXCols) {
      const float* xr = x + t * ldx + k;
      uint16_t *hi = xs + t * ldxs + k, *lo = hi + T * ldxs;
      if (vec) {
        const float4 a = load4(xr), b = load4(xr + 4);
        const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        uint16_t h[8], l[8];
#pragma unroll
        for (int i = 0; i < 8; i++) split_x<DT>(v[i], &h[i], &l[i]);
        store8(hi, h);
        store8(lo, l);
      } else {
        for (int i = 0; i < kXCols && k + i < K; i++) split_x<DT>(xr[i], &hi[i], &lo[i]);
      }
    }
}

// Semantics: for t < T, n < N in this block's 64x64 tile: y[t*ldy+n] = (acc ? y : 0) + bias[n]
//   + Σ_k x[t,k] * W[n,k] with x = hi + lo from split_x_kernel. grid (ceil(N/64), ceil(T/64),
//   slices), block 128.
// xs [2, T, ldxs] in DT (ldxs % 8 == 0, 16-byte aligned), W [N, K] in DT (K % 8 == 0, 16-byte
// aligned), bias [N] or null, y [T, ldy] f32. Both operands stream global -> shared by cp.async,
// double-buffered, one barrier pair per 32-column k-tile.
// Split-K (part != null): slice z sums k in [z*kchunk, (z+1)*kchunk) only and writes its partial
// to part[(z*T + t)*N + n] (no bias, no accumulate); splitk_reduce_kernel finishes y.
template <DType DT>
__global__ void __launch_bounds__(kGemmThreads) gemm_tc_kernel(const uint16_t* xs, int64_t T, int64_t ldxs,
                                                                const uint16_t* w, int64_t N, int64_t K,
                                                                const float* bias, float* y, int64_t ldy,
                                                                bool accumulate, int64_t kchunk, float* part) {
  wait_for_prior_kernels();
  LOOM_SHARED_ALIGN16(uint16_t[2][kBM][kBK + kPad], xh);  // cp.async targets
  LOOM_SHARED_ALIGN16(uint16_t[2][kBM][kBK + kPad], xl);
  LOOM_SHARED_ALIGN16(uint16_t[2][kBN][kBK + kPad], ws);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tig = lane & 3;  // mma fragment coordinates
  const int wm = warp >> 1, wn = warp & 1;  // this warp's 32x32 quarter of the tile
  const int64_t m0 = int64_t(blockIdx.y) * kBM, n0 = int64_t(blockIdx.x) * kBN;
  const int64_t kb = int64_t(blockIdx.z) * kchunk, ke = K < kb + kchunk ? K : kb + kchunk;  // this slice's k
  const int nk = ke > kb ? int((ke - kb + kBK - 1) / kBK) : 0;
  const uint16_t* xlo = xs + T * ldxs;

  // One k-tile: W 64 rows x 4 chunks of 8 halves = 256 chunks, and as many of x's hi and lo
  // planes, 2 of each per thread; rows past N or T and columns past the slice load zeros.
  auto load_stage = [&](int stage, int64_t k0) {
#pragma unroll
    for (int j = 0; j < 2; j++) {
      const int c = tid + j * kGemmThreads, row = c >> 2, kc = (c & 3) * 8;
      const int64_t n = n0 + row, t = m0 + row, k = k0 + kc;
      const bool wok = n < N && k < ke, xok = t < T && k < ke;
      cp_async16(&ws[stage][row][kc], wok ? static_cast<const void*>(w + n * K + k) : static_cast<const void*>(w),
                 wok ? 16 : 0);
      cp_async16(&xh[stage][row][kc], xok ? static_cast<const void*>(xs + t * ldxs + k) : static_cast<const void*>(xs),
                 xok ? 16 : 0);
      cp_async16(&xl[stage][row][kc], xok ? static_cast<const void*>(xlo + t * ldxs + k) : static_cast<const void*>(xs),
                 xok ? 16 : 0);
    }
    cp_async_commit();
  };

  float acc[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

  if (nk > 0) load_stage(0, kb);
  for (int kt = 0; kt < nk; kt++) {
    const int s = kt & 1;
    if (kt + 1 < nk) {
      // Stage s^1 was last read in the previous iteration, before its closing barrier.
      load_stage(s ^ 1, kb + int64_t(kt + 1) * kBK);
      cp_async_wait<1>();  // this stage has landed (the next one may be in flight)
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t ah[2][4], al[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; mi++) {
        const int r = wm * 32 + mi * 16 + g, c = kk + tig * 2;
        ah[mi][0] = *reinterpret_cast<const uint32_t*>(&xh[s][r][c]);
        ah[mi][1] = *reinterpret_cast<const uint32_t*>(&xh[s][r + 8][c]);
        ah[mi][2] = *reinterpret_cast<const uint32_t*>(&xh[s][r][c + 8]);
        ah[mi][3] = *reinterpret_cast<const uint32_t*>(&xh[s][r + 8][c + 8]);
        al[mi][0] = *reinterpret_cast<const uint32_t*>(&xl[s][r][c]);
        al[mi][1] = *reinterpret_cast<const uint32_t*>(&xl[s][r + 8][c]);
        al[mi][2] = *reinterpret_cast<const uint32_t*>(&xl[s][r][c + 8]);
        al[mi][3] = *reinterpret_cast<const uint32_t*>(&xl[s][r + 8][c + 8]);
      }
#pragma unroll
      for (int ni = 0; ni < 4; ni++) {
        const int n = wn * 32 + ni * 8 + g, c = kk + tig * 2;
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&ws[s][n][c]);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&ws[s][n][c + 8]);
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
          mma16816<DT>(acc[mi][ni], ah[mi], b0, b1);
          mma16816<DT>(acc[mi][ni], al[mi], b0, b1);
        }
      }
    }
    __syncthreads();  // nobody reads stage s any more: the next iteration may refill it
  }

#pragma unroll
  for (int mi = 0; mi < 2; mi++)
#pragma unroll
    for (int ni = 0; ni < 4; ni++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int64_t t = m0 + wm * 32 + mi * 16 + g + (e >= 2 ? 8 : 0);
        const int64_t n = n0 + wn * 32 + ni * 8 + tig * 2 + (e & 1);
        if (t >= T || n >= N) continue;
        if (part != nullptr) {
          part[(int64_t(blockIdx.z) * T + t) * N + n] = acc[mi][ni][e];
        } else {
          float* out = y + t * ldy + n;
          *out = (accumulate ? *out : 0.0f) + (bias ? bias[n] : 0.0f) + acc[mi][ni][e];
        }
      }
}

// Semantics: y[t*ldy+n] = (acc ? y : 0) + bias[n] + Σ_{z < splits} part[(z*T + t)*N + n], z
// ascending. grid (ceil(T*N / 256)), block 256. part [splits, T, N] f32.
__global__ void __launch_bounds__(256) splitk_reduce_kernel(const float* part, int splits, int64_t T, int64_t N,
                                                            const float* bias, float* y, int64_t ldy,
                                                            bool accumulate) {
  wait_for_prior_kernels();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * N) return;
  const int64_t t = i / N, n = i % N;
  float s = 0.0f;
  for (int z = 0; z < splits; z++) s += part[int64_t(z) * T * N + i];
  float* out = y + t * ldy + n;
  *out = (accumulate ? *out : 0.0f) + (bias ? bias[n] : 0.0f) + s;
}

// ---------------------------------------------------------------- SIMT fallback


// Semantics: as gemm_tc_kernel, any dtype and shape, plain FMAs. Each of 256 threads owns a 4x4
// patch of the 64x64 tile; x and W tiles are stored k-major so a thread's 4 values are adjacent.
// grid (ceil(N/64), ceil(T/64)), block 256.
__global__ void __launch_bounds__(kSimtThreads) gemm_simt_kernel(const float* x, int64_t T, int64_t ldx, const void* w,
                                                         DType dt, int64_t N, int64_t K, const float* bias, float* y,
                                                         int64_t ldy, bool accumulate) {
  wait_for_prior_kernels();
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
void dispatch_gemv(DType dt, int64_t T, bool norm, Run&& run) {
  const int tok = gemv_tokens_per_block(T);
  if (norm) {  // gemv_norm_fusable: at most kGemvNormMaxTokens tokens
    auto pick = [&](auto k1, auto k2, auto k4) { tok == 1 ? run(k1, 1) : tok == 2 ? run(k2, 2) : run(k4, 4); };
    switch (dt) {
      case DType::F32:
        pick(gemv_kernel<DType::F32, 1, true>, gemv_kernel<DType::F32, 2, true>, gemv_kernel<DType::F32, 4, true>);
        break;
      case DType::F16:
        pick(gemv_kernel<DType::F16, 1, true>, gemv_kernel<DType::F16, 2, true>, gemv_kernel<DType::F16, 4, true>);
        break;
      default:
        pick(gemv_kernel<DType::BF16, 1, true>, gemv_kernel<DType::BF16, 2, true>, gemv_kernel<DType::BF16, 4, true>);
    }
    return;
  }
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

// One GEMV launch for jobs[0, n) (n <= kGemvMaxJobs; same dtype and K, all on the GEMV path),
// with `norm` folded into its read of x when norm.w is set (gemv_norm_fusable).
template <typename Launch>
void launch_gemv(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int n, bool accumulate,
                 GemvNorm norm, Launch&& launch) {
  const int tok = gemv_tokens_per_block(T);
  GemvJobs g{};
  g.n = n;
  int64_t blocks = 0;
  for (int i = 0; i < n; i++) {
    g.w[i] = jobs[i].w.data, g.bias[i] = jobs[i].bias, g.y[i] = jobs[i].y;
    g.N[i] = jobs[i].w.rows, g.ldy[i] = jobs[i].ldy;
    blocks += gemv_grid_x(jobs[i].w.rows, tok);
    g.block_end[i] = blocks;
  }
  dispatch_gemv(jobs[0].w.dtype, T, norm.w != nullptr, [&](auto kernel, int) {
    launch(kernel, unsigned(blocks), unsigned((T + tok - 1) / tok), 1u, kGemvWarps * 32, size_t(0), x, T, ldx, g,
           jobs[0].w.cols, accumulate, norm);
  });
}

// Whether rmsnorm_matmul's norm can fold into one GEMV launch of jobs[0, n): 1..kGemvMaxJobs
// jobs on the GEMV path with one dtype and K = the norm's width, at most kGemvNormMaxTokens tokens
// (the shapes of a decode step below the skinny GEMM), an aligned norm weight, and the path on;
// rows kept in place (xn = x) are not: other warps still read x while one writes xn.
constexpr int kGemvNormMaxTokens = 4;
inline bool gemv_norm_fusable(const MatmulJob* jobs, int n, int64_t T, int64_t H, const float* x, const float* norm_w,
                              const float* xn, bool keep_xn, int sms, const CudaKernelPaths& paths) {
  if (!paths.fused_norm || n < 1 || n > kGemvMaxJobs || T > kGemvNormMaxTokens) return false;
  if (keep_xn && xn == x) return false;
  if ((reinterpret_cast<uintptr_t>(norm_w) & 15) != 0) return false;
  for (int i = 0; i < n; i++)
    if (matmul_path(jobs[i], T, sms, paths) != MatmulPath::kGemv || jobs[i].w.rows <= 0 ||
        jobs[i].w.dtype != jobs[0].w.dtype || jobs[i].w.cols != H)
      return false;
  return true;
}

// rmsnorm_matmul's fused form: one GEMV launch with the norm folded in (writing the normed rows
// only when they are kept), when gemv_norm_fusable allows; false: nothing launched, the caller
// runs the two ops.
template <typename Launch>
bool launch_rmsnorm_gemv(const float* x, int64_t T, int64_t ldx, const float* norm_w, float eps, float* xn,
                         bool keep_xn, const MatmulJob* jobs, int n, int sms, const CudaKernelPaths& paths,
                         Launch&& launch) {
  const int64_t H = n > 0 ? jobs[0].w.cols : 0;
  if (!gemv_norm_fusable(jobs, n, T, H, x, norm_w, xn, keep_xn, sms, paths)) return false;
  launch_gemv(x, T, ldx, jobs, n, false, GemvNorm{norm_w, eps, keep_xn ? xn : nullptr, H}, launch);
  return true;
}

// Whether jobs[0, n) can share one GEMV launch: 2..kGemvMaxJobs jobs, all on the GEMV path, with
// one dtype and K, every one with rows.
inline bool gemv_fusable(const MatmulJob* jobs, int n, int64_t T, int sms, const CudaKernelPaths& paths) {
  if (n < 2 || n > kGemvMaxJobs) return false;
  for (int i = 0; i < n; i++)
    if (matmul_path(jobs[i], T, sms, paths) != MatmulPath::kGemv || jobs[i].w.rows <= 0 ||
        jobs[i].w.dtype != jobs[0].w.dtype || jobs[i].w.cols != jobs[0].w.cols)
      return false;
  return true;
}

// Whether rmsnorm_matmul's norm writes the prefill GEMM's bf16 x itself (rmsnorm_kernel's yb, the
// values launch_round_x would make of the normed rows): every job of the call takes the prefill
// path, over the same K, and the `fused_norm` path is on. Then the norm's f32 rows are written only
// when kept, and the separate rounding pass goes: on an H200 a 2048-token prompt's two norms a
// layer and their roundings took 30 + 42 µs each (Nsight Compute, 2026-11-28).
inline bool norm_rounds_prefill_x(const MatmulJob* jobs, int n, int64_t T, int sms, const CudaKernelPaths& paths) {
  if (!paths.fused_norm || n <= 0) return false;
  for (int i = 0; i < n; i++)
    if (jobs[i].w.rows <= 0 || jobs[i].w.cols != jobs[0].w.cols ||
        matmul_path(jobs[i], T, sms, paths) != MatmulPath::kPrefill)
      return false;
  return true;
}

// The columns of x the call's prefill jobs read (the widest K among them; 0: none takes that
// path): the caller rounds x [T, that] to bf16 once for all of them (launch_round_x).
inline int64_t prefill_x_cols(const MatmulJob* jobs, int n, int64_t T, int sms, const CudaKernelPaths& paths) {
  int64_t cols = 0;
  for (int i = 0; i < n; i++)
    if (jobs[i].w.rows > 0 && matmul_path(jobs[i], T, sms, paths) == MatmulPath::kPrefill && jobs[i].w.cols > cols)
      cols = jobs[i].w.cols;
  return cols;
}

// The columns of x and the dtype the call's tensor-core and skinny jobs read (the widest K among
// them, the first one's dtype; 0 columns: none takes those paths): the caller splits x [T, that]
// into 16-bit halves once for all of them (launch_split_x). Prefill jobs count only without
// `prefill_x` (the prefill GEMM's bf16 x, launch_round_x), when they fall back to the tensor-core
// GEMM: a prompt's call must not also write a split x nobody reads. Tensor-core jobs count only
// with CudaKernelPaths::tc_gemm (without it they take the SIMT tiles).
struct TcX {
  int64_t cols;
  DType dtype;
};
inline TcX tc_x_cols(const MatmulJob* jobs, int n, int64_t T, int sms, bool prefill_x, const CudaKernelPaths& paths) {
  TcX r{0, DType::BF16};
  for (int i = 0; i < n; i++) {
    const MatmulPath p = matmul_path(jobs[i], T, sms, paths);
    const bool tc = p == MatmulPath::kSkinny ||
                    (paths.tc_gemm && (p == MatmulPath::kTensorCore || (p == MatmulPath::kPrefill && !prefill_x)));
    if (jobs[i].w.rows <= 0 || !tc) continue;
    if (r.cols == 0) r.dtype = jobs[i].w.dtype;
    if (jobs[i].w.cols > r.cols) r.cols = jobs[i].w.cols;
  }
  return r;
}

// What a call's jobs share on the device: split-K's workspace `part` of `part_floats` floats (at
// least tc_split_floats(j, T, sms, paths) for a job to be split), x rounded to bf16 for the prefill
// GEMM, `xb` [T, ldxb] (null: prefill jobs run on the tensor-core GEMM instead), and x split into
// `xs_dtype` halves for the tensor-core and skinny GEMMs, `xs` [2, T, ldxs] (null, or another
// dtype than a job's: that job runs on the GEMV below 16 tokens, else on the SIMT tiles).
struct MatmulScratch {
  float* part;
  int64_t part_floats;
  const uint16_t* xb;
  int64_t ldxb;
  const uint16_t* xs;
  int64_t ldxs;
  DType xs_dtype;
};

// Splits x [T, K] into `dt` halves at xs [2, T, ldxs] (split_x_kernel) through `launch`.
template <typename Launch>
void launch_split_x(const float* x, int64_t T, int64_t ldx, int64_t K, DType dt, uint16_t* xs, int64_t ldxs,
                    Launch&& launch) {
  const int64_t gx = (K + 256 * kXCols - 1) / (256 * kXCols);
  const unsigned grid_x = unsigned(gx < 64 ? gx : 64), grid_y = unsigned(T < 65535 ? T : 65535);
  if (dt == DType::BF16)
    launch(split_x_kernel<DType::BF16>, grid_x, grid_y, 1u, 256, size_t(0), x, T, ldx, K, xs, ldxs);
  else
    launch(split_x_kernel<DType::F16>, grid_x, grid_y, 1u, 256, size_t(0), x, T, ldx, K, xs, ldxs);
}

// A job's K slices as launched: its plan where the call's workspace holds the partials (`part`
// set), else one slice of all K (`part` null: the GEMM writes y itself).
struct KSlices {
  int64_t chunk;
  unsigned count;
  float* part;
};
inline KSlices k_slices(const KSplit& plan, const MatmulScratch& scratch, int64_t T, int64_t N, int64_t K) {
  if (plan.slices > 1 && scratch.part != nullptr && scratch.part_floats >= plan.slices * T * N)
    return {plan.chunk, unsigned(plan.slices), scratch.part};
  return {K > 0 ? K : 1, 1u, nullptr};
}
// Adds a split job's slices onto y (nothing for an unsplit one).
template <typename Launch>
void launch_slices_reduce(const KSlices& s, int64_t T, const MatmulJob& j, bool accumulate, Launch&& launch) {
  if (s.part == nullptr) return;
  const int64_t N = j.w.rows;
  launch(splitk_reduce_kernel, unsigned((T * N + 255) / 256), 1u, 1u, 256, size_t(0),
         static_cast<const float*>(s.part), int(s.count), T, N, j.bias, j.y, j.ldy, accumulate);
}

// Launches the kernel(s) that compute job `j` (matmul_path's choice) through
// `launch(kernel, grid_x, grid_y, grid_z, threads, dynamic_smem_bytes, args...)`, which each build
// supplies: a launch on the device's stream, or the emulator's. `sms` and `paths` pick the path,
// and `sms` sizes split-K (tc_split, skinny_split); `scratch` is the call's (see MatmulScratch).
// Jobs without rows launch nothing. Returns the path taken.
template <typename Launch>
MatmulPath launch_matmul_job(const float* x, int64_t T, int64_t ldx, const MatmulJob& j, bool accumulate, int sms,
                             const CudaKernelPaths& paths, const MatmulScratch& scratch, Launch&& launch) {
  const int64_t N = j.w.rows, K = j.w.cols;
  MatmulPath path = matmul_path(j, T, sms, paths);
  if (path == MatmulPath::kPrefill && scratch.xb == nullptr) path = MatmulPath::kTensorCore;
  const bool xs_ok = scratch.xs != nullptr && scratch.xs_dtype == j.w.dtype && K <= scratch.ldxs;
  if (path == MatmulPath::kSkinny && !xs_ok) path = T < 16 ? MatmulPath::kGemv : MatmulPath::kTensorCore;
  if (path == MatmulPath::kTensorCore && !xs_ok) path = MatmulPath::kSimt;
  if (N <= 0) return path;
  switch (path) {
    case MatmulPath::kPrefill:
      if (prefill_takes_wgmma(T, N, sms, paths)) {
        const unsigned gx = unsigned((T + kWgBM - 1) / kWgBM), gy = unsigned((N + kWgBN - 1) / kWgBN);
        const auto* w = static_cast<const uint16_t*>(j.w.data);
        TensorMap2D xmap, wmap;
        if (paths.tma && make_tensor_map_2d(&xmap, scratch.xb, K, T, scratch.ldxb, kWgBM) &&
            make_tensor_map_2d(&wmap, w, K, N, K, kWgBN)) {
          launch(gemm_wgmma_tma_kernel, gx, gy, 1u, kTmaThreads, kTmaSmemBytes, xmap, wmap, T, N, K, j.bias, j.y,
                 j.ldy, accumulate);
        } else {
          launch(gemm_wgmma_kernel, gx, gy, 1u, kWgThreads, kWgSmemBytes, scratch.xb, T, scratch.ldxb, w, N, K,
                 j.bias, j.y, j.ldy, accumulate);
        }
        break;
      }
      launch(gemm_prefill_kernel, unsigned((T + kPfBM - 1) / kPfBM), unsigned((N + kPfBN - 1) / kPfBN), 1u,
             kPfThreads, kPfSmemBytes, scratch.xb, T, scratch.ldxb, static_cast<const uint16_t*>(j.w.data), N, K,
             j.bias, j.y, j.ldy, accumulate);
      break;
    case MatmulPath::kTensorCore: {
      const unsigned gx = unsigned((N + kBN - 1) / kBN), gy = unsigned((T + kBM - 1) / kBM);
      const auto* w = static_cast<const uint16_t*>(j.w.data);
      const KSlices s = k_slices(tc_split(T, N, K, sms), scratch, T, N, K);
      if (j.w.dtype == DType::BF16)
        launch(gemm_tc_kernel<DType::BF16>, gx, gy, s.count, kGemmThreads, size_t(0), scratch.xs, T, scratch.ldxs, w,
               N, K, j.bias, j.y, j.ldy, accumulate, s.chunk, s.part);
      else
        launch(gemm_tc_kernel<DType::F16>, gx, gy, s.count, kGemmThreads, size_t(0), scratch.xs, T, scratch.ldxs, w,
               N, K, j.bias, j.y, j.ldy, accumulate, s.chunk, s.part);
      launch_slices_reduce(s, T, j, accumulate, launch);
      break;
    }
    case MatmulPath::kSkinny: {
      const KSlices s = k_slices(skinny_split(T, N, K, sms), scratch, T, N, K);
      const int64_t rows = skinny_rows_per_block(T);
      const auto* w = static_cast<const uint16_t*>(j.w.data);
      dispatch_skinny(j.w.dtype, T, [&](auto kernel) {
        launch(kernel, unsigned((N + rows - 1) / rows), s.count, 1u, kSkWarps * 32, size_t(0), scratch.xs, T,
               scratch.ldxs, w, N, K, j.bias, j.y, j.ldy, accumulate, s.chunk, s.part);
      });
      launch_slices_reduce(s, T, j, accumulate, launch);
      break;
    }
    case MatmulPath::kGemv:
      launch_gemv(x, T, ldx, &j, 1, accumulate, no_gemv_norm(), launch);
      break;
    case MatmulPath::kSimt:
      launch(gemm_simt_kernel, unsigned((N + kSimtTile - 1) / kSimtTile), unsigned((T + kSimtTile - 1) / kSimtTile),
             1u, kSimtThreads, size_t(0), x, T, ldx, j.w.data, j.w.dtype, N, K, j.bias, j.y, j.ldy, accumulate);
      break;
  }
  return path;
}

}  // namespace
}  // namespace loom
