// Paged attention of the cuda device: decode rows, prefill chunks (causal) and Medusa tree rows in
// one launch, GQA by head groups, K/V widened from the cache dtype (f32/f16/bf16).
//
// This is the first, plainly correct version: one warp per (token, query head) walks the visible
// cache entries with an online softmax (running max, rescaled sum), each lane holding D/32 of the
// head's dimensions. It reads K/V once per query head rather than once per KV head and does not
// split long contexts across blocks; the flash-style prefill tile and the split-KV decode are the
// performance issue's work, against this kernel as their reference on the GPU.
#include "cuda/cuda-device.h"
#include "cuda/dtype-cuda.cuh"

namespace loom {
namespace {

constexpr int kAttnWarps = 4, kMaxDimsPerLane = 8;  // head_dim up to 256


// Semantics: Device::attention. Row r = blockIdx.x; warp item w = blockIdx.y*4 + warp is
// (token i = w / Hq, head h = w % Hq), g = h / (Hq/Hkv); visible c: c < cache_len, or
// j = c - cache_len with tree_mask[i*n+j] (or j <= i). out[t,h,:] = Σ softmax(scale q·K) V.
// q [T, ldq], kc, vc [S, Hkv*D] in C, rows [nrows] staged, out [T, Hq*D]
template <typename C>
__global__ void __launch_bounds__(kAttnWarps * 32) attention_kernel(const float* q, int64_t ldq, const C* kc,
                                                                     const C* vc, const AttnRow* rows,
                                                                     AttnShape s, float* out) {
  const AttnRow row = rows[blockIdx.x];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int w = blockIdx.y * kAttnWarps + warp, i = w / s.num_heads, h = w % s.num_heads;
  if (i >= row.n) return;
  const int D = s.head_dim, g = h / (s.num_heads / s.num_kv_heads);
  const int64_t E = int64_t(s.num_kv_heads) * D, t = int64_t(row.tok_start) + i;
  float qv[kMaxDimsPerLane], acc[kMaxDimsPerLane];
#pragma unroll
  for (int j = 0; j < kMaxDimsPerLane; j++) {
    const int d = lane + 32 * j;
    qv[j] = d < D ? q[t * ldq + int64_t(h) * D + d] * s.scale : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int total = row.cache_len + row.n;
  for (int c = 0; c < total; c++) {
    const int j = c - row.cache_len;
    if (j >= 0 && !(row.tree_mask ? row.tree_mask[i * row.n + j] != 0 : j <= i)) continue;
    const int64_t slot = int64_t(row.block_table[c / s.block_size]) * s.block_size + c % s.block_size;
    const C* kp = kc + slot * E + int64_t(g) * D;
    const C* vp = vc + slot * E + int64_t(g) * D;
    float dot = 0.0f;
#pragma unroll
    for (int jj = 0; jj < kMaxDimsPerLane; jj++) {
      const int d = lane + 32 * jj;
      if (d < D) dot = fmaf(qv[jj], widen<C>(kp[d]), dot);
    }
    dot = warp_sum(dot);
    const float m_new = fmaxf(m, dot);
    const float corr = expf(m - m_new), p = expf(dot - m_new);  // expf(-inf) = 0 on the first entry
    l = l * corr + p;
#pragma unroll
    for (int jj = 0; jj < kMaxDimsPerLane; jj++) {
      const int d = lane + 32 * jj;
      acc[jj] = acc[jj] * corr + (d < D ? p * widen<C>(vp[d]) : 0.0f);
    }
    m = m_new;
  }
  float* o = out + t * int64_t(s.num_heads) * D + int64_t(h) * D;
#pragma unroll
  for (int jj = 0; jj < kMaxDimsPerLane; jj++) {
    const int d = lane + 32 * jj;
    if (d < D) o[d] = l > 0.0f ? acc[jj] / l : 0.0f;
  }
}

}  // namespace

void CudaDevice::attention(const float* q, int64_t ldq, const void* kc, const void* vc, const AttnRow* rows, int nrows,
                           const AttnShape& shape, float* out) {
  if (nrows <= 0) return;
  if (shape.head_dim > 32 * kMaxDimsPerLane || shape.num_kv_heads <= 0 || shape.num_heads % shape.num_kv_heads) {
    check(cudaErrorInvalidValue, "attention (head_dim above 256 or heads not a multiple of kv heads)");
    return;
  }
  int max_n = 0;
  for (int r = 0; r < nrows; r++) max_n = rows[r].n > max_n ? rows[r].n : max_n;
  if (max_n == 0) return;
  const void* d_rows = stage(rows, int64_t(nrows) * int64_t(sizeof(AttnRow)));
  if (!d_rows) return;
  const auto* dr = static_cast<const AttnRow*>(d_rows);
  const dim3 grid(unsigned(nrows), unsigned((int64_t(max_n) * shape.num_heads + kAttnWarps - 1) / kAttnWarps));
  switch (shape.kv_dtype) {
    case DType::F32:
      attention_kernel<float><<<grid, kAttnWarps * 32, 0, stream_>>>(q, ldq, static_cast<const float*>(kc),
                                                                     static_cast<const float*>(vc), dr, shape, out);
      break;
    case DType::F16:
      attention_kernel<__half><<<grid, kAttnWarps * 32, 0, stream_>>>(q, ldq, static_cast<const __half*>(kc),
                                                                      static_cast<const __half*>(vc), dr, shape, out);
      break;
    default:
      attention_kernel<__nv_bfloat16><<<grid, kAttnWarps * 32, 0, stream_>>>(
          q, ldq, static_cast<const __nv_bfloat16*>(kc), static_cast<const __nv_bfloat16*>(vc), dr, shape, out);
  }
  check(cudaGetLastError(), "attention launch");
}

}  // namespace loom
