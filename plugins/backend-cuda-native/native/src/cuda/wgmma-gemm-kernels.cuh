// The wgmma GEMM: the prefill GEMM's job (prefill-gemm-kernels.cuh: a prompt's compute-bound
// projection, x rounded to bf16 once per call, bf16 weights, f32 out) on sm_90a's warpgroup MMA.
// On an H100, mma.sync is fed one warp's 16x8x16 fragments at a time from registers and tops out
// near half of the tensor cores' dense bf16 peak (about 250 TFLOP/s on the prefill projections of
// an 8B model, docs/performance.md); wgmma reads both operands from shared memory for a whole
// warpgroup at 64 x 256 x 16 per instruction and runs asynchronously beside the copies that feed it.
//
// First form (gemm_wgmma_kernel; cp.async-fed):
//   - a 128 (tokens) x 256 (outputs) tile per block of two warpgroups, each 64 x 256: per 16
//     columns of K one wgmma.m64n256k16 per warpgroup, 128 f32 accumulators per thread;
//   - K in steps of 64 columns (one 128-byte swizzled row per tile row: wgmma.cuh's layout), in 4
//     stages of 48 KB (192 KB of dynamic shared memory: one block per SM); every thread copies its
//     share of a stage with cp.async, 2 k-tiles ahead of the one being multiplied;
//   - one wgmma group in flight while the next k-tile's copies are waited for: a stage is refilled
//     only after every thread's wgmma.wait_group has retired the group that read it (the barrier
//     at the top of the loop orders the two);
//   - f32 accumulation, bias and accumulate applied in the store, as the prefill GEMM.
// Second form (gemm_wgmma_tma_kernel): the same tiles and wgmmas, fed by the TMA unit (cuda/tma.cuh)
// instead of the MMA warps' cp.async, with warp specialization:
//   - one producer warp (one thread of it) waits for a stage to be released, tells the stage's
//     "full" mbarrier how many bytes to expect and starts the x and W box loads, which complete on
//     that barrier: no copy instructions, address arithmetic or block barriers in the MMA warps;
//   - the two warpgroups wait for "full", issue their wgmmas, and once wgmma.wait_group has
//     retired the group before, arrive on that group's stage's "empty" mbarrier (one wgmma group
//     in flight, as above), which the producer waits for before refilling the stage;
//   - 288 threads, so each may have 224 registers with no register reallocation (setmaxnreg).
// matmul-kernels.cuh takes them for the prefill path's jobs whose 128x256 tiles fill half the SMs,
// on a device whose binary has sm_90a code (matmul.cu: cuda_wgmma_supported) and with the `wgmma`
// kernel path on (kernel-paths.h): the TMA form unless the `tma` path is off or the driver makes
// no tensor map. Other jobs keep the mma.sync prefill GEMM.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/grid-dependency.cuh"
#include "cuda/prefill-gemm-kernels.cuh"
#include "cuda/simt-compat.cuh"
#include "cuda/tensor-core.cuh"
#include "cuda/tma.cuh"
#include "cuda/wgmma.cuh"

namespace loom {

constexpr int kWgBM = 128, kWgBN = kWgmmaN, kWgBK = 64, kWgStages = 4;
constexpr int kWgThreads = 256;          // two warpgroups, 64 tokens each
constexpr int kWgAhead = kWgStages - 2;  // k-tiles copied ahead of the one multiplied (one more is in wgmma)
constexpr size_t kWgTileXBytes = size_t(kWgBM) * kWgBK * 2;                 // 16 KB
constexpr size_t kWgStageBytes = kWgTileXBytes + size_t(kWgBN) * kWgBK * 2;  // + 32 KB of W
// The stages, and room to start them at a 1024-byte boundary of the shared window.
constexpr size_t kWgSmemBytes = kWgStages * kWgStageBytes + kSw128AtomBytes;
static_assert(kWgBK * 2 == 128, "a k-tile row is one 128-byte swizzled row");
static_assert(kWgTileXBytes % kSw128AtomBytes == 0 && kWgStageBytes % kSw128AtomBytes == 0, "tiles stay 1024-aligned");

constexpr int kTmaThreads = 2 * 128 + 32;  // two MMA warpgroups, then the producer warp
constexpr int kTmaStages = 4;
// The stages, the full and empty mbarriers (8 bytes each), and the 1024-byte alignment's room.
constexpr size_t kTmaSmemBytes = kTmaStages * kWgStageBytes + 2 * kTmaStages * 8 + kSw128AtomBytes;
static_assert(kTmaBoxCols == kWgBK && kWgBM <= 256 && kWgBN <= 256, "one box load per tile and k-tile");

// Whether a prefill-path job of T tokens and N outputs takes the wgmma GEMM on a GPU of `sms` SMs:
// tiles for at least half the SMs, as prefill_gemm_fits asks of the 128x128 ones. (At 8B: a
// 2048-token prompt has 256 tiles on the 4096-output projections and 896 on gate and up, but 64 on
// the 1024-output k and v, which stay on the mma.sync GEMM.)
inline bool wgmma_gemm_fits(int64_t T, int64_t N, int sms) {
  const int64_t tiles = ((T + kWgBM - 1) / kWgBM) * ((N + kWgBN - 1) / kWgBN);
  return T >= kPrefillMinTokens && 2 * tiles >= sms;
}

// Internal linkage: the test program links the emulated build beside the real one.
namespace {

// Orders the compiler's uses of the accumulators after a wgmma.wait_group: to the compiler a
// wgmma's outputs exist when the instruction issues, so without this it could read them early.
__device__ __forceinline__ void wgmma_fence_accumulators(float (&d)[kWgmmaAccs]) {
#if !defined(LOOM_SIMT_EMULATION)
#pragma unroll
  for (int i = 0; i < kWgmmaAccs; i++) asm volatile("" : "+f"(d[i])::"memory");
#endif
}

// y (+)= bias + this thread's accumulators of a 128x256 tile at (m0, n0): thread t (0-127) of
// warpgroup wg holds rows 64 wg + 16 (t / 32) + (t % 32) / 4 (+ 8) and the column pairs
// 8 v2 + 2 (t % 4) (wgmma.cuh's accumulator layout). Rows past T and columns past N are skipped.
__device__ __forceinline__ void store_wgmma_tile(const float (&acc)[kWgmmaAccs], int wg, int t, int64_t m0,
                                                 int64_t n0, int64_t T, int64_t N, const float* bias, float* y,
                                                 int64_t ldy, bool accumulate) {
  const int warp = t >> 5, lane = t & 31;
#pragma unroll
  for (int v1 = 0; v1 < 2; v1++) {
    const int64_t row = m0 + wg * 64 + warp * 16 + (lane >> 2) + 8 * v1;
    if (row >= T) continue;
#pragma unroll
    for (int v2 = 0; v2 < kWgBN / 8; v2++)
#pragma unroll
      for (int v0 = 0; v0 < 2; v0++) {
        const int64_t n = n0 + 8 * v2 + 2 * (lane & 3) + v0;
        if (n >= N) continue;
        float* out = y + row * ldy + n;
        *out = (accumulate ? *out : 0.0f) + (bias ? bias[n] : 0.0f) + acc[v0 + 2 * v1 + 4 * v2];
      }
  }
}

// Both kernels take their grid with the token tiles along x, so the blocks resident at once share
// a few weight tiles: each weight tile comes from DRAM about once, while x (T x K bf16: 16 MB at
// 2048 x 4096) stays in L2. With the weight tiles along x instead, the blocks resident at once
// touched every weight tile of each token tile in turn, and a 2048-token prefill's gate and up
// projections (117 MB of weights each) read ~1.6 GB from DRAM per call: 67% of an H200's
// bandwidth, 528 µs at 455 TFLOP/s (Nsight Compute, 2026-11-28).
// Semantics (gemm_prefill_kernel's): for t < T, n < N in this block's 128x256 tile:
//   y[t*ldy+n] = (acc ? y : 0) + bias[n] + Σ_k xb[t*ldxb+k] * W[n,k], products in f32.
//   grid (ceil(T/128), ceil(N/256)), block 256, kWgSmemBytes of dynamic shared memory; sm_90a.
// xb [T, ldxb] bf16 (ldxb % 8 == 0, 16-byte aligned), W [N, K] bf16 (K % 8 == 0, 16-byte
// aligned), bias [N] or null, y [T, ldy] f32. Rows past T or N and columns past K load zeros.
__global__ void __launch_bounds__(kWgThreads, 1) gemm_wgmma_kernel(const uint16_t* xb, int64_t T, int64_t ldxb,
                                                                  const uint16_t* w, int64_t N, int64_t K,
                                                                  const float* bias, float* y, int64_t ldy,
                                                                  bool accumulate) {
  wait_for_prior_kernels();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(LOOM_SIMT_EMULATION)
  LOOM_DYNAMIC_SHARED(uint8_t, smem_raw);
  uint8_t* smem = align_shared_1024(smem_raw);  // [kWgStages][x tile | W tile], swizzled (sw128_offset)
  const int tid = threadIdx.x, wg = tid >> 7;
  const int64_t m0 = int64_t(blockIdx.x) * kWgBM, n0 = int64_t(blockIdx.y) * kWgBN;  // token tiles along x (above)
  const int nk = int((K + kWgBK - 1) / kWgBK);

  // `Rows` rows of a k-tile into `dst` (8 chunks of 8 halves a row, Rows / 32 chunks a thread):
  // rows r0 .. of src [limit rows, ld], columns k0 ..; zeros past `limit` or K.
  auto load_rows = [&](auto rows, uint8_t* dst, const uint16_t* src, int64_t ld, int64_t r0, int64_t limit,
                       int64_t k0) {
    constexpr int kChunks = decltype(rows)::value * 8 / kWgThreads;
#pragma unroll
    for (int j = 0; j < kChunks; j++) {
      const int c = tid + j * kWgThreads, row = c >> 3, chunk = c & 7;
      const int64_t k = k0 + chunk * 8, r = r0 + row;
      const bool ok = r < limit && k < K;
      cp_async16(dst + sw128_offset(row, chunk), ok ? static_cast<const void*>(src + r * ld + k) : src, ok ? 16 : 0);
    }
  };
  // One stage: x's 128 rows and W's 256.
  auto load = [&](int stage, int kt) {
    uint8_t* xs = smem + stage * kWgStageBytes;
    const int64_t k0 = int64_t(kt) * kWgBK;
    load_rows(std::integral_constant<int, kWgBM>(), xs, xb, ldxb, m0, T, k0);
    load_rows(std::integral_constant<int, kWgBN>(), xs + kWgTileXBytes, w, K, n0, N, k0);
  };

  float acc[kWgmmaAccs];
#pragma unroll
  for (int i = 0; i < kWgmmaAccs; i++) acc[i] = 0.0f;

  // Prologue: k-tiles 0 .. kWgAhead-1 in flight, one commit group each (empty past nk, so that
  // group i is always k-tile i and the wait below counts right).
#pragma unroll
  for (int s = 0; s < kWgAhead; s++) {
    if (s < nk) load(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < nk; kt++) {
    cp_async_wait<kWgAhead - 1>();  // k-tile kt (group kt) has landed for this thread's copies
    fence_proxy_async_shared();      // ... and is visible to the wgmmas
    __syncthreads();  // ... everyone's; and every thread has retired k-tile kt-2's wgmmas (below)
    const int next = kt + kWgAhead;
    if (next < nk) load(next % kWgStages, next);  // refills k-tile kt-2's stage
    cp_async_commit();
    const uint8_t* xs = smem + (kt % kWgStages) * kWgStageBytes + wg * 64 * 128;  // this warpgroup's 64 rows
    const uint8_t* ws = smem + (kt % kWgStages) * kWgStageBytes + kWgTileXBytes;
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < kWgBK / 16; s++)
      wgmma_m64n256k16_bf16(acc, sw128_descriptor(xs + 32 * s), sw128_descriptor(ws + 32 * s));
    wgmma_commit();
    wgmma_wait<1>();  // k-tile kt-1's group is complete: its stage may be refilled next iteration
  }
  wgmma_wait<0>();
  wgmma_fence_accumulators(acc);
  cp_async_wait<0>();  // only empty groups remain; nothing may land after the block exits

  store_wgmma_tile(acc, wg, tid & 127, m0, n0, T, N, bias, y, ldy, accumulate);
#elif defined(__CUDA_ARCH__)
  __trap();  // never launched without an sm_90a image (matmul.cu: cuda_wgmma_supported)
#endif
}


// Semantics: gemm_wgmma_kernel's, with x and W read through tensor maps (make_tensor_map_2d) of
// xb [T rows][K columns] (boxes of 128 rows) and W [N][K] (boxes of 256 rows).
//   grid (ceil(T/128), ceil(N/256)), block kTmaThreads, kTmaSmemBytes of dynamic shared memory;
//   sm_90a.
__global__ void __launch_bounds__(kTmaThreads, 1)
    gemm_wgmma_tma_kernel(const __grid_constant__ TensorMap2D xmap, const __grid_constant__ TensorMap2D wmap,
                          int64_t T, int64_t N, int64_t K, const float* bias, float* y, int64_t ldy,
                          bool accumulate) {
  wait_for_prior_kernels();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(LOOM_SIMT_EMULATION)
  LOOM_DYNAMIC_SHARED(uint8_t, smem_raw);
  uint8_t* smem = align_shared_1024(smem_raw);  // [kTmaStages][x tile | W tile], then the barriers
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kTmaStages * kWgStageBytes);  // [kTmaStages]
  uint64_t* empty = full + kTmaStages;                                                // [kTmaStages]
  const int tid = threadIdx.x;
  const int64_t m0 = int64_t(blockIdx.x) * kWgBM, n0 = int64_t(blockIdx.y) * kWgBN;  // token tiles fastest (above)
  const int nk = int((K + kWgBK - 1) / kWgBK);
  if (tid == 0) {
    for (int s = 0; s < kTmaStages; s++) {
      mbarrier_init(&full[s], 1);         // the producer's arrival, with the stage's bytes
      mbarrier_init(&empty[s], 2 * 128);  // every MMA thread, once its wgmmas on the stage retired
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (tid >= 2 * 128) {  // the producer warp: one thread issues, the rest have nothing to do
    if (tid == 2 * 128) {
      for (int kt = 0; kt < nk; kt++) {
        const int s = kt % kTmaStages;
        // Use u = kt / kTmaStages of stage s: wait for use u - 1's release (its phase u - 1).
        if (kt >= kTmaStages) mbarrier_wait(&empty[s], uint32_t((kt / kTmaStages - 1) & 1));
        uint8_t* xs = smem + s * kWgStageBytes;
        mbarrier_arrive_expect_tx(&full[s], uint32_t(kWgStageBytes));
        tma_load_2d(xs, &xmap, kt * kWgBK, int(m0), &full[s]);
        tma_load_2d(xs + kWgTileXBytes, &wmap, kt * kWgBK, int(n0), &full[s]);
      }
    }
    return;
  }

  const int wg = tid >> 7;
  float acc[kWgmmaAccs];
#pragma unroll
  for (int i = 0; i < kWgmmaAccs; i++) acc[i] = 0.0f;
  for (int kt = 0; kt < nk; kt++) {
    const int s = kt % kTmaStages;
    mbarrier_wait(&full[s], uint32_t((kt / kTmaStages) & 1));  // use kt / kTmaStages of stage s landed
    const uint8_t* xs = smem + s * kWgStageBytes + wg * 64 * 128;  // this warpgroup's 64 rows
    const uint8_t* ws = smem + s * kWgStageBytes + kWgTileXBytes;
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kWgBK / 16; k++)
      wgmma_m64n256k16_bf16(acc, sw128_descriptor(xs + 32 * k), sw128_descriptor(ws + 32 * k));
    wgmma_commit();
    wgmma_wait<1>();  // k-tile kt-1's group is complete: release its stage
    if (kt > 0) mbarrier_arrive(&empty[(kt - 1) % kTmaStages]);
  }
  wgmma_wait<0>();
  wgmma_fence_accumulators(acc);
  store_wgmma_tile(acc, wg, tid & 127, m0, n0, T, N, bias, y, ldy, accumulate);
#elif defined(__CUDA_ARCH__)
  __trap();  // never launched without an sm_90a image (matmul.cu: cuda_wgmma_supported)
#endif
}

}  // namespace
}  // namespace loom
