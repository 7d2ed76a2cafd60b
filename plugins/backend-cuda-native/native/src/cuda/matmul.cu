// Dense projections of the cuda device: y[t, n] (+)= bias[n] + Σ_k x[t, k] * W[n, k], x f32
// activations, W in its stored dtype. Three kernels, chosen per job by shape:
//
//  - gemv (T < 16, any dtype): memory-bound; each warp streams 4 weight rows with 16-byte loads
//    and dots them with up to 8 tokens of x staged in shared memory, so every weight byte is read
//    once per 8 tokens and x once per block.
//  - tensor-core GEMM (T >= 16, bf16/f16 weights, K % 8 == 0): mma.sync m16n8k16 with f32
//    accumulation on 64x64 tiles, K in steps of 32, weights double-buffered with cp.async while x
//    goes through registers (loaded one tile ahead). x is f32, so it is split into a 16-bit high
//    part and a 16-bit remainder (x = hi + lo, exact to ~2^-17 relative) and both are multiplied
//    by W: rounding x to one bf16 would cost ~3 significant digits against the f32 reference,
//    while two MMAs keep the error at f32-accumulation level for twice the tensor work (a
//    bandwidth-bound step has that to spare).
//  - SIMT tiles (f32 weights with T >= 16, or shapes the vector paths cannot take).
// The GEMV and SIMT kernels and the choice between the three: matmul-kernels.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/cuda-device.h"
#include "cuda/dtype-cuda.cuh"
#include "cuda/matmul-kernels.cuh"

namespace loom {
namespace {

// ---------------------------------------------------------------- tensor-core GEMM (T >= 16)

constexpr int kBM = 64, kBN = 64, kBK = 32, kPad = 8;  // tile; +8 halves per smem row: conflict-free fragments
constexpr int kGemmThreads = 128;                      // 4 warps, 2 (tokens) x 2 (outputs), 32x32 each

template <DType DT>
__device__ __forceinline__ void split_x(float v, uint16_t* hi, uint16_t* lo) {
  if constexpr (DT == DType::BF16) {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    const __nv_bfloat16 l = __float2bfloat16_rn(v - __bfloat162float(h));
    *hi = __bfloat16_as_ushort(h);
    *lo = __bfloat16_as_ushort(l);
  } else {
    const __half h = __float2half_rn(v);
    const __half l = __float2half_rn(v - __half2float(h));
    *hi = __half_as_ushort(h);
    *lo = __half_as_ushort(l);
  }
}

template <DType DT>
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  if constexpr (DT == DType::BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// 16 bytes global -> shared without registers; src_bytes 0 fills zeros (rows or k past the end).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Semantics: for t < T, n < N in this block's 64x64 tile: y[t*ldy+n] = (acc ? y : 0) + bias[n]
//   + Σ_k x[t*ldx+k] * W[n,k]. grid (ceil(N/64), ceil(T/64)), block 128.
// x [T, ldx] f32 (any ldx), W [N, K] in DT (K % 8 == 0, 16-byte aligned), bias [N] or null, y [T, ldy]
template <DType DT>
__global__ void __launch_bounds__(kGemmThreads) gemm_tc_kernel(const float* x, int64_t T, int64_t ldx,
                                                                const uint16_t* w, int64_t N, int64_t K,
                                                                const float* bias, float* y, int64_t ldy,
                                                                bool accumulate) {
  __shared__ __align__(16) uint16_t xh[2][kBM][kBK + kPad];
  __shared__ __align__(16) uint16_t xl[2][kBM][kBK + kPad];
  __shared__ __align__(16) uint16_t ws[2][kBN][kBK + kPad];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tig = lane & 3;  // mma fragment coordinates
  const int wm = warp >> 1, wn = warp & 1;  // this warp's 32x32 quarter of the tile
  const int64_t m0 = int64_t(blockIdx.y) * kBM, n0 = int64_t(blockIdx.x) * kBN;
  const int nk = int((K + kBK - 1) / kBK);

  // Weights: 64 rows x 4 chunks of 8 halves = 256 chunks, 2 per thread.
  auto load_w = [&](int stage, int64_t k0) {
#pragma unroll
    for (int j = 0; j < 2; j++) {
      const int c = tid + j * kGemmThreads, row = c >> 2, kc = (c & 3) * 8;
      const int64_t n = n0 + row, k = k0 + kc;
      const bool ok = n < N && k < K;
      cp_async16(&ws[stage][row][kc], ok ? static_cast<const void*>(w + n * K + k) : static_cast<const void*>(w),
                 ok ? 16 : 0);
    }
    cp_async_commit();
  };
  // x: 64 rows x 32 columns = 2048 floats, 16 per thread; warp-wide rows (coalesced 128 bytes).
  float xr[16];
  auto load_x = [&](int64_t k0) {
#pragma unroll
    for (int j = 0; j < 16; j++) {
      const int row = warp + 4 * j;
      const int64_t t = m0 + row, k = k0 + lane;
      xr[j] = t < T && k < K ? x[t * ldx + k] : 0.0f;
    }
  };
  auto store_x = [&](int stage) {
#pragma unroll
    for (int j = 0; j < 16; j++) split_x<DT>(xr[j], &xh[stage][warp + 4 * j][lane], &xl[stage][warp + 4 * j][lane]);
  };

  float acc[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

  load_w(0, 0);
  load_x(0);
  store_x(0);
  for (int kt = 0; kt < nk; kt++) {
    const int s = kt & 1;
    const bool more = kt + 1 < nk;
    if (more) {
      load_w(s ^ 1, int64_t(kt + 1) * kBK);
      load_x(int64_t(kt + 1) * kBK);
      cp_async_wait<1>();  // this stage's weights have landed (the next stage's may be in flight)
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
    // Stage s^1 was last read in the previous iteration, before this iteration's barrier.
    if (more) store_x(s ^ 1);
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
        if (t < T && n < N) {
          float* out = y + t * ldy + n;
          *out = (accumulate ? *out : 0.0f) + (bias ? bias[n] : 0.0f) + acc[mi][ni][e];
        }
      }
}

}  // namespace

void CudaDevice::matmul(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs, bool accumulate) {
  if (T <= 0) return;
  for (int i = 0; i < njobs; i++) {
    const MatmulJob& j = jobs[i];
    const int64_t N = j.w.rows, K = j.w.cols;
    if (N <= 0) continue;
    switch (matmul_path(j, T)) {
      case MatmulPath::kTensorCore: {
        const dim3 grid(unsigned((N + kBN - 1) / kBN), unsigned((T + kBM - 1) / kBM));
        const auto* w = static_cast<const uint16_t*>(j.w.data);
        if (j.w.dtype == DType::BF16)
          gemm_tc_kernel<DType::BF16><<<grid, kGemmThreads, 0, stream_>>>(x, T, ldx, w, N, K, j.bias, j.y, j.ldy,
                                                                          accumulate);
        else
          gemm_tc_kernel<DType::F16><<<grid, kGemmThreads, 0, stream_>>>(x, T, ldx, w, N, K, j.bias, j.y, j.ldy,
                                                                         accumulate);
        break;
      }
      case MatmulPath::kGemv:
        dispatch_gemv(j.w.dtype, T, [&](auto kernel, int tok) {
          const dim3 grid(gemv_grid_x(N), unsigned((T + tok - 1) / tok));
          kernel<<<grid, kGemvWarps * 32, 0, stream_>>>(x, T, ldx, j.w.data, N, K, j.bias, j.y, j.ldy, accumulate);
        });
        break;
      case MatmulPath::kSimt: {
        const dim3 grid(unsigned((N + kSimtTile - 1) / kSimtTile), unsigned((T + kSimtTile - 1) / kSimtTile));
        gemm_simt_kernel<<<grid, kSimtThreads, 0, stream_>>>(x, T, ldx, j.w.data, j.w.dtype, N, K, j.bias, j.y,
                                                             j.ldy, accumulate);
        break;
      }
    }
    if (!check(cudaGetLastError(), "matmul launch")) return;
  }
}

}  // namespace loom
