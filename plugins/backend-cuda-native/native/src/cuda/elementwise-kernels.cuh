// Row-wise and element-wise ops of the cuda device: embedding, rmsnorm, SiLU·mul, the Medusa
// residual, RoPE, and the KV cache writes. Each is memory-bound: one pass over its data, with
// grid-stride loops so any size fits one launch.
//
// The kernels and their launch shapes; the launches are in elementwise.cu. A header so that the
// test program's SIMT emulator runs the same kernels (cuda/simt-compat.cuh).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/dtype-cuda.cuh"
#include "cuda/grid-dependency.cuh"
#include "cuda/param-list.cuh"
#include "cuda/simt-compat.cuh"
#include "cuda/tensor-core.cuh"
#include "cuda/warp-reduce.cuh"
#include "kernels/kernels.h"

namespace loom {

// Threads per block of the grid-stride kernels, and their grid for n elements (at most 65535
// blocks: the loops stride over the rest).
constexpr int kElementThreads = 256;
inline unsigned element_grid(int64_t n) {
  return unsigned(std::min<int64_t>((n + kElementThreads - 1) / kElementThreads, 65535));
}
// rope_kv_store: its grid's x for one token's work, (Hq + Hkv)·D/2 pairs then Hkv·D v values.
inline unsigned rope_kv_store_grid(int q_heads, int kv_heads, int D) {
  return element_grid(int64_t(q_heads + kv_heads) * (D / 2) + int64_t(kv_heads) * D);
}
// rmsnorm: one block per row, wider for wide rows.
inline unsigned rmsnorm_threads(int64_t H) { return H >= 1024 ? 512 : 128; }
// kv_copy: one block (copies are ordered), this wide.
constexpr int kKvCopyThreads = 512;
// rope, rope_tables and kv_slots: blocks of this many threads (one block per token or row).
constexpr int kRowOpThreads = 128;

// Internal linkage: the test program links this header's emulated build beside the real one.
namespace {

// One RoPE pair (HF rotate_half) in place: (a, b) = (v[i], v[i+half]) becomes
// (a·c - b·s, b·c + a·s). Shared by rope and rope_kv_store so that both round alike.
__device__ __forceinline__ void rotate_pair(float* v, int i, int half, float c, float s) {
  const float a = v[i], b = v[i + half];
  v[i] = a * c - b * s;
  v[i + half] = b * c + a * s;
}

// Semantics: y[t*H + i] = table[ids[t], i]. grid (ceil(H/256), T); ids [T], table [V, H], y [T, H]
__global__ void embedding_kernel(const int32_t* ids, const void* table, DType dt, int64_t H, float* y) {
  wait_for_prior_kernels();
  const int64_t t = blockIdx.y;
  const int64_t row = int64_t(ids[t]) * H;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < H; i += int64_t(gridDim.x) * blockDim.x)
    y[t * H + i] = load_w(table, dt, row + i);
}

// Semantics: r = 1/sqrt(Σ_i x[t,i]^2 / H + eps); v = x[t,i] * r * w[i]; y[t,i] = v (y not null)
// and yb[t,i] = bf16(v) rounded to nearest even (yb not null: the prefill GEMM's x, as
// round_x_bf16_kernel would round y, without y's pass through memory). One block per row t: each
// thread sums a strided share, warps reduce with shuffles, one warp combines the warps.
// x [T, ldx], w [H], y [T, ldy] (may be x), yb [T, ldyb]
__global__ void rmsnorm_kernel(const float* x, int64_t ldx, int64_t H, const float* w, float eps, float* y,
                               int64_t ldy, uint16_t* yb, int64_t ldyb) {
  wait_for_prior_kernels();
  LOOM_SHARED(float[32], partial);
  LOOM_SHARED(float, scale);
  const float* xr = x + int64_t(blockIdx.x) * ldx;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) ss += xr[i] * xr[i];
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
    v = warp_sum(v);
    // The reciprocal root in double: once per row, and it keeps the scale within one f32 rounding.
    if (threadIdx.x == 0) scale = float(1.0 / sqrt(double(v) / double(H) + double(eps)));
  }
  __syncthreads();
  const float r = scale;
  float* yr = y ? y + int64_t(blockIdx.x) * ldy : nullptr;
  uint16_t* ybr = yb ? yb + int64_t(blockIdx.x) * ldyb : nullptr;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    const float v = xr[i] * r * w[i];
    if (yr) yr[i] = v;
    if (ybr) ybr[i] = round_bf16(v);
  }
}

// SiLU(g) · u, as every path of silu_mul_kernel rounds it.
__device__ __forceinline__ float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// Semantics: y[i] = gate[i] / (1 + exp(-gate[i])) * up[i]. Any grid (grid-stride); 4 elements a
// thread at a time, 16-byte accesses, when n % 4 == 0 and the arrays are 16-byte aligned: one at a
// time, a 2048-token prefill's call streamed at ~49% of an H200's bandwidth (145 µs a layer;
// Nsight Compute, 2026-11-28).
__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t n, float* y) {
  wait_for_prior_kernels();
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  const uintptr_t bits = reinterpret_cast<uintptr_t>(gate) | reinterpret_cast<uintptr_t>(up) |
                         reinterpret_cast<uintptr_t>(y);
  if (n % 4 == 0 && (bits & 15) == 0) {
    for (int64_t i = first * 4; i < n; i += stride * 4) {
      const float4 g = load4(gate + i), u = load4(up + i);
      store4(y + i, float4{silu_times(g.x, u.x), silu_times(g.y, u.y), silu_times(g.z, u.z), silu_times(g.w, u.w)});
    }
    return;
  }
  for (int64_t i = first; i < n; i += stride) y[i] = silu_times(gate[i], up[i]);
}

// Semantics: y[i] += t[i] / (1 + exp(-t[i]))
__global__ void silu_residual_kernel(const float* t, int64_t n, float* y) {
  wait_for_prior_kernels();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = t[i];
    y[i] += v / (1.0f + expf(-v));
  }
}

// Semantics (HF rotate_half): for h, i < D/2: a = x[t,h,i], b = x[t,h,i+D/2];
//   x[t,h,i] = a*cos[t,i] - b*sin[t,i]; x[t,h,i+D/2] = b*cos[t,i] + a*sin[t,i]
// One block per token t; threads walk the heads*D/2 pairs. x [T, ldx], cos, sin [T, D/2]
__global__ void rope_kernel(float* x, int64_t ldx, int heads, int D, const float* cos, const float* sin) {
  wait_for_prior_kernels();
  const int64_t t = blockIdx.x;
  const int half = D / 2;
  for (int p = threadIdx.x; p < heads * half; p += blockDim.x) {
    const int h = p / half, i = p % half;
    rotate_pair(x + t * ldx + int64_t(h) * D, i, half, cos[t * half + i], sin[t * half + i]);
  }
}

// rope then kv_store (Device::rope_kv_store) in one pass: the same rotation as rope_kernel, and
// the rotated k written to its slot by the thread that rotated it, so nothing waits between them.
// Per token u < (Hq + Hkv)·D/2 rotates one pair (of q, or of k, then stored), and the next
// Hkv·D stores v. grid (ceil(((Hq + Hkv)·D/2 + Hkv·D) / 256), T)
// qkv [T, ldx]: q | k | v, cos, sin [T, D/2], slot [T], kc, vc [S, Hkv·D] in C
template <typename C>
__global__ void rope_kv_store_kernel(float* qkv, int64_t ldx, int q_heads, int kv_heads, int D, const float* cos,
                                     const float* sin, const int32_t* slot, C* kc, C* vc) {
  wait_for_prior_kernels();
  const int64_t t = blockIdx.y, E = int64_t(kv_heads) * D, dst = int64_t(slot[t]) * E;
  const int half = D / 2;
  const int64_t pairs = int64_t(q_heads + kv_heads) * half;
  float* row = qkv + t * ldx;
  for (int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < pairs + E; u += int64_t(gridDim.x) * blockDim.x) {
    if (u >= pairs) {  // v: stored as it is
      const int64_t e = u - pairs;
      vc[dst + e] = to_cache<C>(row[int64_t(q_heads + kv_heads) * D + e]);
      continue;
    }
    const int h = int(u / half), i = int(u % half);
    float* head = row + int64_t(h) * D;
    rotate_pair(head, i, half, cos[t * half + i], sin[t * half + i]);
    if (h >= q_heads) {  // k: its rotated pair goes to the cache too
      const int64_t at = dst + int64_t(h - q_heads) * D;
      kc[at + i] = to_cache<C>(head[i]);
      kc[at + i + half] = to_cache<C>(head[i + half]);
    }
  }
}

// Semantics: for i<half: a = f64(positions[t]) * inv_freq[i]; cos[t*half+i] = f32(cos(a));
//   sin[t*half+i] = f32(sin(a)). In double: positions reach 1e5+ and f32 angles would lose the phase.
// grid (ceil(half/128), T); positions [T], inv_freq [half] f64, cos, sin [T, half]
__global__ void rope_tables_kernel(const int32_t* positions, const double* inv_freq, int64_t half, float* cos_out,
                                   float* sin_out) {
  wait_for_prior_kernels();
  const int64_t t = blockIdx.y;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < half; i += int64_t(gridDim.x) * blockDim.x) {
    double s, c;
    sincos(double(positions[t]) * inv_freq[i], &s, &c);
    cos_out[t * half + i] = float(c);
    sin_out[t * half + i] = float(s);
  }
}

// Semantics: dst[i*H + c] = src[idx[i]*ld + c]. grid (ceil(H/256), n); src [*, ld], idx [n], dst [n, H]
__global__ void gather_rows_kernel(const float* src, int64_t ld, const int32_t* idx, int64_t H, float* dst) {
  wait_for_prior_kernels();
  const int64_t i = blockIdx.y, from = int64_t(idx[i]) * ld;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < H; c += int64_t(gridDim.x) * blockDim.x)
    dst[i * H + c] = src[from + c];
}

// A step's rows for kv_slots (param-list.h): 32 inline (1 KB of parameters), so the copy before
// the step's first layer goes away at decode batches up to 32.
constexpr int kKvSlotInlineRows = 32;
using KvSlotRowList = ParamList<AttnRow, kKvSlotInlineRows>;

// Semantics: for i < rows[r].n: c = cache_len + i; slot[tok_start + i] = block_table[c / bs] * bs + c % bs.
// One block per row r; rows [nrows] (inline or staged), slot [T]
__global__ void kv_slots_kernel(const __grid_constant__ KvSlotRowList rows, int block_size, int32_t* slot) {
  wait_for_prior_kernels();
  const AttnRow row = list_item(rows, blockIdx.x);
  for (int i = threadIdx.x; i < row.n; i += blockDim.x) {
    const int c = row.cache_len + i;
    slot[row.tok_start + i] = row.block_table[c / block_size] * block_size + c % block_size;
  }
}

// Semantics: slot[i] = block_table[idx[i] / bs] * bs + idx[i] % bs. idx, slot [n]
__global__ void paged_slots_kernel(const int32_t* block_table, const int32_t* idx, int64_t n, int block_size,
                                   int32_t* slot) {
  wait_for_prior_kernels();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    slot[i] = block_table[idx[i] / block_size] * block_size + idx[i] % block_size;
}

// Semantics: kc[slot[t]*E + e] = kv(k[t*ldk + e]); vc likewise from v. grid (ceil(E/256), T)
// k, v [T, ldk] f32, slot [T], kc, vc [S, E] in C
template <typename C>
__global__ void kv_store_kernel(const float* k, const float* v, int64_t ldk, const int32_t* slot, int64_t E, C* kc,
                                C* vc) {
  wait_for_prior_kernels();
  const int64_t t = blockIdx.y, dst = int64_t(slot[t]) * E;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < E; e += int64_t(gridDim.x) * blockDim.x) {
    kc[dst + e] = to_cache<C>(k[t * ldk + e]);
    vc[dst + e] = to_cache<C>(v[t * ldk + e]);
  }
}

// Semantics: for i<n in order: kc[to[i], :] = kc[from[i], :]; vc likewise. One block, a barrier
// between copies: a later copy may read what an earlier one wrote. Copies `row_bytes` per slot
// as 16-bit words (every cache dtype's rows are a whole number of them).
// from, to [n], kc, vc [S, row_bytes]
__global__ void kv_copy_kernel(const int32_t* from, const int32_t* to, int64_t n, int64_t row_words, uint16_t* kc,
                               uint16_t* vc) {
  wait_for_prior_kernels();
  for (int64_t i = 0; i < n; i++) {
    const int64_t src = int64_t(from[i]) * row_words, dst = int64_t(to[i]) * row_words;
    for (int64_t e = threadIdx.x; e < row_words; e += blockDim.x) {
      kc[dst + e] = kc[src + e];
      vc[dst + e] = vc[src + e];
    }
    __syncthreads();
  }
}

}  // namespace
}  // namespace loom
