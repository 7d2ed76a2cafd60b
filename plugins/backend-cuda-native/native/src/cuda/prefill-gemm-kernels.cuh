// The prefill GEMM of the cuda device: compute-bound projections (a prompt's tokens, bf16 weights)
// on tensor cores with both operands in bf16. matmul-kernels.cuh chooses it (MatmulPath::kPrefill)
// and matmul.cu describes the device's three other kernels.
//
// Why a kernel of its own: the tensor-core GEMM that serves decode batches (gemm_tc_kernel) splits
// f32 x into two bf16 halves and so runs every product twice, on 64x64 tiles with x staged
// through registers: 45 TFLOP/s, 5% of an H100's dense bf16 peak, on a 2048-token prefill of an
// 8B model (docs/performance.md). A step of that size is compute-bound, not bandwidth-bound, so
// here x is rounded to bf16 once per call (round_x_bf16_kernel; the cpu device's vdpbf16ps and
// AMX paths round it the same way at the same step sizes: cpu/cpu-device.h), and the GEMM is the
// classic Ampere-style design:
//   - a 128 (tokens) x 128 (outputs) tile per block of 8 warps, each warp 64 x 32 (4 x 4 mma
//     tiles of m16n8k16: 16 MMAs per 6 ldmatrix.x4);
//   - both operands streamed global -> shared by cp.async in 4 stages of 32 columns (64 KB of
//     dynamic shared memory: 2 blocks per SM), one barrier per stage;
//   - fragments read by ldmatrix from rows whose four 16-byte chunks are XOR-swizzled by row
//     pairs, so the 8 rows an ldmatrix phase reads (64 bytes apart) fall in 8 distinct bank groups;
//   - f32 accumulation, bias and accumulate applied in the store.
// Shapes whose tiles would leave most SMs idle (few tokens or outputs) stay on gemm_tc_kernel,
// whose split K fills the GPU (see prefill_gemm_fits).
#pragma once

#include <cstdint>

#include "cuda/grid-dependency.cuh"
#include "cuda/simt-compat.cuh"
#include "cuda/tensor-core.cuh"
#include "kernels/kernels.h"

namespace loom {

constexpr int kPfBM = 128, kPfBN = 128, kPfBK = 32, kPfStages = 4;
constexpr int kPfThreads = 256;  // 8 warps: 2 (tokens) x 4 (outputs), 64 x 32 each
// Halves of one stage: the x tile [kPfBM][kPfBK] then the W tile [kPfBN][kPfBK].
constexpr int kPfStageHalves = (kPfBM + kPfBN) * kPfBK;
constexpr size_t kPfSmemBytes = size_t(kPfStages) * kPfStageHalves * sizeof(uint16_t);  // 64 KB
// The fewest tokens rounded to bf16 (the cpu device's threshold for its bf16 dot-product path).
constexpr int64_t kPrefillMinTokens = 64;

// Whether a bf16 job of T tokens and N outputs takes the prefill GEMM on a GPU of `sms` SMs: at
// least kPrefillMinTokens tokens and tiles for half the SMs (one block each), below which the
// split-K tensor-core GEMM keeps more of the GPU busy. (At 8B: a 2048-token prompt has 512 tiles
// on the 4096-output projections and 128 on the 1024-output k/v ones; a 64-row decode batch has
// 112 on gate/up and 32 on the others.)
inline bool prefill_gemm_fits(int64_t T, int64_t N, int sms) {
  const int64_t tiles = ((T + kPfBM - 1) / kPfBM) * ((N + kPfBN - 1) / kPfBN);
  return T >= kPrefillMinTokens && 2 * tiles >= sms;
}

// Internal linkage: the test program links the emulated build beside the real one.
namespace {

// Halves from a [rows][kPfBK] tile's start to 16-byte chunk c (0-3) of row r. Rows are 64 bytes,
// so unswizzled, rows r and r + 2 share banks and an ldmatrix phase (8 rows, one chunk column)
// would be 4-way conflicted; XOR-ing the chunk with (r / 2) % 4 spreads the 8 rows over all 32 banks.
__device__ __forceinline__ int pf_swizzle(int r, int c) { return r * kPfBK + ((c ^ ((r >> 1) & 3)) << 3); }

// Columns of x a thread of round_x_bf16_kernel and split_x_kernel converts at a time: with one,
// a 2048-token prefill's four roundings a layer streamed at ~20% of an H200's bandwidth (42-140 µs
// each, 8.5 ms of an 87 ms prefill; Nsight Compute, 2026-11-28).
constexpr int kXCols = 8;
// Whether rows of x [., ldx] f32 and of out [., ldo] 16-bit take kXCols-wide 16-byte accesses.
__device__ __forceinline__ bool x_cols_vec(const float* x, int64_t ldx, const uint16_t* out, int64_t ldo, int64_t K) {
  return K % kXCols == 0 && ldx % 4 == 0 && ldo % 8 == 0 &&
         ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;
}

// Semantics: xb[t*ldxb + k] = bf16(x[t*ldx + k]) (round to nearest even) for t < T, k < K.
// grid (ceil(K / (256 kXCols)) up to 64, min(T, 65535)), block 256; rows beyond gridDim.y loop.
// A thread takes kXCols columns at a time: two 16-byte loads and one 16-byte store where the rows
// allow (x_cols_vec), else one column after another.
__global__ void __launch_bounds__(256) round_x_bf16_kernel(const float* x, int64_t T, int64_t ldx, int64_t K,
                                                           uint16_t* xb, int64_t ldxb) {
  wait_for_prior_kernels();
  const bool vec = x_cols_vec(x, ldx, xb, ldxb, K);
  for (int64_t t = blockIdx.y; t < T; t += gridDim.y)
    for (int64_t k = (int64_t(blockIdx.x) * 256 + threadIdx.x) * kXCols; k < K;
         k += int64_t(gridDim.x) * 256 * kXCols) {
      const float* xr = x + t * ldx + k;
      uint16_t* out = xb + t * ldxb + k;
      if (vec) {
        const float4 a = load4(xr), b = load4(xr + 4);
        const uint16_t v[8] = {round_bf16(a.x), round_bf16(a.y), round_bf16(a.z), round_bf16(a.w),
                               round_bf16(b.x), round_bf16(b.y), round_bf16(b.z), round_bf16(b.w)};
        store8(out, v);
      } else {
        for (int i = 0; i < kXCols && k + i < K; i++) out[i] = round_bf16(xr[i]);
      }
    }
}

// Semantics: for t < T, n < N in this block's 128x128 tile:
//   y[t*ldy+n] = (acc ? y : 0) + bias[n] + Σ_k xb[t*ldxb+k] * W[n,k], products in f32.
//   grid (ceil(T/128), ceil(N/128)), block 256, kPfSmemBytes of dynamic shared memory.
// xb [T, ldxb] bf16 (ldxb % 8 == 0, 16-byte aligned), W [N, K] bf16 (K % 8 == 0, 16-byte
// aligned), bias [N] or null, y [T, ldy] f32. Rows past T or N and columns past K load zeros.
__global__ void __launch_bounds__(kPfThreads) gemm_prefill_kernel(const uint16_t* xb, int64_t T, int64_t ldxb,
                                                                  const uint16_t* w, int64_t N, int64_t K,
                                                                  const float* bias, float* y, int64_t ldy,
                                                                  bool accumulate) {
  wait_for_prior_kernels();
  LOOM_DYNAMIC_SHARED(uint16_t, smem);  // [kPfStages][x tile | W tile], swizzled (pf_swizzle)
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tig = lane & 3;  // mma fragment coordinates
  const int wm = warp >> 2, wn = warp & 3;  // this warp's 64 tokens x 32 outputs of the tile
  // Token tiles along x, as the wgmma GEMMs (wgmma-gemm-kernels.cuh says why).
  const int64_t m0 = int64_t(blockIdx.x) * kPfBM, n0 = int64_t(blockIdx.y) * kPfBN;
  const int nk = int((K + kPfBK - 1) / kPfBK);

  // One stage: x and W tiles of 128 rows x 4 chunks of 8 halves = 512 chunks each, 2 per thread.
  auto load = [&](int stage, int kt) {
    uint16_t* xs = smem + stage * kPfStageHalves;
    uint16_t* ws = xs + kPfBM * kPfBK;
    const int64_t k0 = int64_t(kt) * kPfBK;
#pragma unroll
    for (int j = 0; j < 2; j++) {
      const int c = tid + j * kPfThreads, row = c >> 2, chunk = c & 3;
      const int64_t k = k0 + chunk * 8, t = m0 + row, n = n0 + row;
      const bool x_ok = t < T && k < K, w_ok = n < N && k < K;
      cp_async16(xs + pf_swizzle(row, chunk), x_ok ? static_cast<const void*>(xb + t * ldxb + k) : xb, x_ok ? 16 : 0);
      cp_async16(ws + pf_swizzle(row, chunk), w_ok ? static_cast<const void*>(w + n * K + k) : w, w_ok ? 16 : 0);
    }
  };

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

  // Prologue: stages 0 .. kPfStages-2 in flight, one commit group each (empty past nk, so that
  // group i is always k-tile i and the wait below counts right).
#pragma unroll
  for (int s = 0; s < kPfStages - 1; s++) {
    if (s < nk) load(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < nk; kt++) {
    cp_async_wait<kPfStages - 2>();  // k-tile kt (group kt) has landed for this thread's copies
    __syncthreads();                 // ... and everyone's; everyone is done with k-tile kt-1's stage
    const int next = kt + kPfStages - 1;
    if (next < nk) load(next % kPfStages, next);  // refills k-tile kt-1's stage
    cp_async_commit();
    const uint16_t* xs = smem + (kt % kPfStages) * kPfStageHalves;
    const uint16_t* ws = xs + kPfBM * kPfBK;
#pragma unroll
    for (int kc = 0; kc < kPfBK / 8; kc += 2) {  // 16 columns: chunks kc, kc + 1
      uint32_t a[4][4], b[4][2];
      // A 16x16: matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) = a0..a3.
#pragma unroll
      for (int mi = 0; mi < 4; mi++)
        ldmatrix_x4(a[mi], xs + pf_swizzle(wm * 64 + mi * 16 + (lane & 15), kc + (lane >> 4)));
      // B for two n8 tiles: matrices (n 0-7, k 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15).
#pragma unroll
      for (int nj = 0; nj < 2; nj++) {
        uint32_t r[4];
        ldmatrix_x4(r, ws + pf_swizzle(wn * 32 + nj * 16 + (lane & 7) + ((lane >> 4) << 3), kc + ((lane >> 3) & 1)));
        b[2 * nj][0] = r[0], b[2 * nj][1] = r[1], b[2 * nj + 1][0] = r[2], b[2 * nj + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) mma16816<DType::BF16>(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
    }
  }
  cp_async_wait<0>();  // only empty groups remain; nothing may land after the block exits

#pragma unroll
  for (int mi = 0; mi < 4; mi++)
#pragma unroll
    for (int ni = 0; ni < 4; ni++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int64_t t = m0 + wm * 64 + mi * 16 + g + (e >= 2 ? 8 : 0);
        const int64_t n = n0 + wn * 32 + ni * 8 + tig * 2 + (e & 1);
        if (t >= T || n >= N) continue;
        float* out = y + t * ldy + n;
        *out = (accumulate ? *out : 0.0f) + (bias ? bias[n] : 0.0f) + acc[mi][ni][e];
      }
}

// Launches x's rounding into `xb` ([T, ldxb]) through `launch(kernel, gx, gy, gz, threads, smem,
// args...)` (see launch_matmul_job).
template <typename Launch>
void launch_round_x(const float* x, int64_t T, int64_t ldx, int64_t K, uint16_t* xb, int64_t ldxb, Launch&& launch) {
  const int64_t gx = (K + 256 * kXCols - 1) / (256 * kXCols);
  launch(round_x_bf16_kernel, unsigned(gx < 64 ? gx : 64), unsigned(T < 65535 ? T : 65535), 1u, 256, size_t(0), x, T,
         ldx, K, xb, ldxb);
}

}  // namespace
}  // namespace loom
