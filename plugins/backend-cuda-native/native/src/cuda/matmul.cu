// Dense projections of the cuda device: y[t, n] (+)= bias[n] + Σ_k x[t, k] * W[n, k], x f32
// activations, W in its stored dtype. Seven kernels, chosen per job by shape:
//
//  - prefill GEMM (bf16 weights, T >= 64 with tiles for at least half the SMs: a prompt's
//    compute-bound step): x rounded to bf16 once per call, then 128x128 tiles of mma.sync fed by
//    ldmatrix from a 4-stage cp.async pipeline (prefill-gemm-kernels.cuh has the design).
//  - wgmma GEMMs (the same jobs on sm_90a, where their 128x256 tiles fill half the SMs): the same
//    bf16 x, two warpgroups' wgmma.m64n256k16 reading 128B-swizzled stages that a producer warp
//    fills by TMA box loads, or (`tma` off, no tensor map) every thread by cp.async
//    (wgmma-gemm-kernels.cuh has the design).
//  - skinny GEMM (5 <= T <= 32, bf16/f16 weights): a decode batch on tensor cores with the weights
//    as the MMA's M side and 8 tokens per fragment as its N side, weight fragments loaded straight
//    from global memory and x (split into 16-bit halves as below) through L1; no shared memory,
//    no barriers (skinny-gemm-kernels.cuh has the design).
//  - gemv (T < 16 where the skinny GEMM does not take it, any dtype): memory-bound; each warp
//    streams 2-4 weight rows with 16-byte loads, 8 of them in flight per lane before the first
//    FMA, and dots them with up to 8 tokens of x read through L1 (no shared-memory staging, no
//    barriers), so every weight byte is read once per 8 tokens and the weight stream never waits
//    on the block. The jobs of one call (q/k/v, gate/up) share one launch when all take this path,
//    and rmsnorm_matmul's norm folds into it at 1-4 tokens (GemvNorm).
//  - tensor-core GEMM (T > 32, or from 16 with the skinny GEMM off; bf16/f16 weights, K % 8 == 0):
//    mma.sync m16n8k16 with f32 accumulation on 64x64 tiles, K in steps of 32, weights and x double-buffered with cp.async.
//    x is f32, so it is split once per call (split_x_kernel) into a 16-bit high part and a 16-bit
//    remainder (x = hi + lo, exact to ~2^-17 relative) and both are multiplied by W: rounding x to
//    one bf16 would cost ~3 significant digits against the f32 reference, while two MMAs keep the
//    error at f32-accumulation level for twice the tensor work (a bandwidth-bound step has that
//    to spare).
//    When a step's few rows give fewer tiles than SMs, K is split over the grid's z and the
//    slices' partials are added in order by a second kernel (split-k.h, as the skinny GEMM does).
//  - SIMT tiles (f32 weights with T >= 16, or shapes the vector paths cannot take).
// The kernels and the choice between them: matmul-kernels.cuh.
#include "cuda/cuda-device.h"
#include "cuda/dtype-cuda.cuh"
#include "cuda/matmul-kernels.cuh"

#include <algorithm>

namespace loom {

namespace {
// How the kernels of matmul-kernels.cuh launch on `dev` (the form its launch_* helpers call).
auto matmul_launcher(CudaDevice* dev) {
  return [dev](auto kernel, unsigned gx, unsigned gy, unsigned gz, int threads, size_t smem, auto... args) {
    // Above the default 48 KB a kernel must opt in to more dynamic shared memory (the prefill GEMM).
    if (smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    dev->launch("matmul launch", kernel, dim3(gx, gy, gz), threads, smem, args...);
  };
}

// Writes 1 where this binary's code for the GPU has wgmma (an sm_90a image), else 0: a GPU of
// compute capability 9.0 runs sm_90 or compute_90 code without the sm_90a features, where
// gemm_wgmma_kernel is empty. One thread.
__global__ void wgmma_supported_kernel(int* out) {
  wait_for_prior_kernels();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *out = 1;
#else
  *out = 0;
#endif
}
}  // namespace

// Semantics: cuda-device.h. wgmma_supported_kernel writes 1 from an sm_90a image; errors here are
// not faults (the projections keep the mma.sync GEMM).
bool cuda_wgmma_supported(cudaStream_t stream) {
  int* flag = nullptr;
  if (cudaMalloc(&flag, sizeof(int)) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  int got = 0;
  cudaError_t err = cudaMemsetAsync(flag, 0, sizeof(int), stream);
  if (err == cudaSuccess) err = launch_kernel(stream, false, wgmma_supported_kernel, dim3(1), dim3(1), 0, flag);
  if (err == cudaSuccess) err = cudaMemcpyAsync(&got, flag, sizeof(int), cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) (void)cudaGetLastError();
  cudaFree(flag);
  return err == cudaSuccess && got == 1;
}

void CudaDevice::matmul(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs, bool accumulate) {
  if (T <= 0) return;
  auto launch = matmul_launcher(this);
  const CudaKernelPaths paths = matmul_paths();
  if (gemv_fusable(jobs, njobs, T, sm_count_, paths)) {
    launch_gemv(x, T, ldx, jobs, njobs, accumulate, no_gemv_norm(), launch);
    return;
  }
  // Split-K's workspace, the prefill GEMM's bf16 x and the tensor-core GEMM's split x: grown on
  // demand (stream-ordered release, as attention's partials), and shared by the jobs, which run
  // one after another on the stream. A failed allocation leaves the jobs unsplit, on the
  // tensor-core GEMM, or on the SIMT tiles.
  int64_t need = 0;
  for (int i = 0; i < njobs; i++) need = std::max(need, tc_split_floats(jobs[i], T, sm_count_, paths));
  auto* part = static_cast<float*>(grow(&split_partials_, need * int64_t(sizeof(float))));
  const int64_t cols = prefill_x_cols(jobs, njobs, T, sm_count_, paths);
  auto* xb = static_cast<uint16_t*>(grow(&prefill_x_, cols * T * int64_t(sizeof(uint16_t))));
  const TcX tcx = tc_x_cols(jobs, njobs, T, sm_count_, cols > 0 && xb != nullptr, paths);
  auto* xs = static_cast<uint16_t*>(grow(&tc_x_, 2 * tcx.cols * T * int64_t(sizeof(uint16_t))));
  const MatmulScratch scratch{part,    part ? split_partials_.bytes / int64_t(sizeof(float)) : 0,
                              cols > 0 ? xb : nullptr, cols,
                              tcx.cols > 0 ? xs : nullptr, tcx.cols, tcx.dtype};
  if (scratch.xb != nullptr) launch_round_x(x, T, ldx, cols, xb, cols, launch);
  if (scratch.xs != nullptr) launch_split_x(x, T, ldx, tcx.cols, tcx.dtype, xs, tcx.cols, launch);
  for (int i = 0; i < njobs; i++) {
    launch_matmul_job(x, T, ldx, jobs[i], accumulate, sm_count_, paths, scratch, launch);
  }
}

// Semantics: Device::rmsnorm_matmul. At 1-4 tokens on the GEMV, one launch that folds the norm
// into its read of x (GemvNorm) and writes the normed rows only when they are kept; for a prompt
// whose jobs all take the prefill GEMM, the norm writes that GEMM's bf16 x (norm_rounds_prefill_x);
// else the two ops.
void CudaDevice::rmsnorm_matmul(const float* x, int64_t T, int64_t ldx, const float* norm_w, float eps, float* xn,
                                bool keep_xn, const MatmulJob* jobs, int njobs) {
  if (T <= 0 || njobs <= 0) return;
  const CudaKernelPaths paths = matmul_paths();
  auto launch = matmul_launcher(this);
  if (launch_rmsnorm_gemv(x, T, ldx, norm_w, eps, xn, keep_xn, jobs, njobs, sm_count_, paths, launch)) return;
  if (norm_rounds_prefill_x(jobs, njobs, T, sm_count_, paths)) {
    const int64_t H = jobs[0].w.cols;
    auto* xb = static_cast<uint16_t*>(grow(&prefill_x_, T * H * int64_t(sizeof(uint16_t))));
    if (xb != nullptr) {  // else the two ops, which need no more than matmul's own buffers
      rmsnorm_rows(x, T, ldx, H, norm_w, eps, keep_xn ? xn : nullptr, H, xb, H);
      // Prefill jobs read only xb (and no split-K workspace or split x): x is not read.
      const MatmulScratch scratch{nullptr, 0, xb, H, nullptr, 0, DType::BF16};
      for (int i = 0; i < njobs; i++) launch_matmul_job(xn, T, H, jobs[i], false, sm_count_, paths, scratch, launch);
      return;
    }
  }
  Device::rmsnorm_matmul(x, T, ldx, norm_w, eps, xn, keep_xn, jobs, njobs);
}

}  // namespace loom
