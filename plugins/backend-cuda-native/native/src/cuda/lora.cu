// Multi-LoRA kernels of the cuda device, Punica's SGMV/BGMV split: a shrink (x·A: K -> rank) and
// an expand (·B: rank -> N), each ONE launch for the whole batch of mixed adapters. The segment
// list (one run of tokens per adapter; a decode row is a one-token segment, the BGMV case) is
// staged to the device and bound to blockIdx.x, so rows of different adapters, ranks (1..128) and
// dtypes share a launch; blocks past a segment's rank or tokens exit at once.
//
//  - shrink: a block owns one segment, 8 rank rows (a warp each) and up to TOK tokens; the tokens'
//    x is staged in shared memory by K tiles, each warp streams its row of A with 16-byte loads.
//  - expand: a block owns one segment, 1024 output columns (8 per thread) and up to TOK tokens;
//    the tokens' low-rank values sit in shared memory and each thread streams Bt rows.
#include <algorithm>
#include <vector>

#include "cuda/cuda-device.h"
#include "cuda/dtype-cuda.cuh"

namespace loom {
namespace {

// One segment as the kernels see it (host LoraSegment plus where its expand writes).
struct LoraItem {
  int32_t tok_start, tok_count, rank, col;
  const void* w;
  DType dtype;
  float scale;
  float* y;
  int64_t ldy, N;
};

constexpr int kShrinkWarps = 8, kShrinkKTile = 512;


// One warp: acc[t] += Σ_{k in tile} A[r, k0+k] * xs[t][k], 8 elements per lane per step.
template <DType DT, int TOK>
__device__ __forceinline__ void shrink_tile_vec(const void* a, int64_t row_off, int kn, const float (*xs)[kShrinkKTile],
                                                int lane, float acc[TOK]) {
  for (int kk = lane * 8; kk < kn; kk += 256) {
    float wv[8];
    load8<DT>(a, row_off + kk, wv);
#pragma unroll
    for (int t = 0; t < TOK; t++) {
      float s = acc[t];
#pragma unroll
      for (int e = 0; e < 8; e++) s = fmaf(wv[e], xs[t][kk + e], s);
      acc[t] = s;
    }
  }
}

// Semantics (SGMV/BGMV shrink): for seg = blockIdx.x, t in its tokens [z*TOK, z*TOK+TOK),
//   r in [y*8, y*8+8) ∩ [0, rank): tmp[t*ldt + col + r] = Σ_k x[t*ldx+k] * A[r,k].
// VEC: every A is 16-byte aligned and K % 8 == 0 (checked by the host). grid (nsegs,
// ceil(max rank/8), ceil(max tokens/TOK)), block 256. x [T, ldx], A [rank, K], tmp [T, ldt]
template <int TOK, bool VEC>
__global__ void __launch_bounds__(kShrinkWarps * 32) lora_shrink_kernel(const float* x, int64_t ldx, int64_t K,
                                                                         const LoraItem* items, float* tmp,
                                                                         int64_t ldt) {
  __shared__ __align__(16) float xs[TOK][kShrinkKTile];
  const LoraItem it = items[blockIdx.x];
  const int r0 = blockIdx.y * kShrinkWarps, c0 = blockIdx.z * TOK;
  if (r0 >= it.rank || c0 >= it.tok_count) return;  // uniform per block: no barrier is skipped by half of it
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r = r0 + warp, tn = min(TOK, it.tok_count - c0);
  const int64_t t0 = int64_t(it.tok_start) + c0;
  float acc[TOK];
#pragma unroll
  for (int t = 0; t < TOK; t++) acc[t] = 0.0f;
  for (int64_t k0 = 0; k0 < K; k0 += kShrinkKTile) {
    const int kn = K - k0 < kShrinkKTile ? int(K - k0) : kShrinkKTile;
    __syncthreads();
    for (int i = threadIdx.x; i < TOK * kShrinkKTile; i += blockDim.x) {
      const int t = i / kShrinkKTile, k = i % kShrinkKTile;
      xs[t][k] = t < tn && k < kn ? x[(t0 + t) * ldx + k0 + k] : 0.0f;
    }
    __syncthreads();
    if (r >= it.rank) continue;
    const int64_t off = int64_t(r) * K + k0;
    if (VEC) {
      switch (it.dtype) {
        case DType::F32: shrink_tile_vec<DType::F32, TOK>(it.w, off, kn, xs, lane, acc); break;
        case DType::F16: shrink_tile_vec<DType::F16, TOK>(it.w, off, kn, xs, lane, acc); break;
        default: shrink_tile_vec<DType::BF16, TOK>(it.w, off, kn, xs, lane, acc);
      }
    } else {
      for (int k = lane; k < kn; k += 32) {
        const float wv = load_w(it.w, it.dtype, off + k);
#pragma unroll
        for (int t = 0; t < TOK; t++) acc[t] = fmaf(wv, xs[t][k], acc[t]);
      }
    }
  }
  if (r >= it.rank) return;
#pragma unroll
  for (int t = 0; t < TOK; t++) {
    const float v = warp_sum(acc[t]);
    if (lane == 0 && t < tn) tmp[(t0 + t) * ldt + it.col + r] = v;
  }
}

constexpr int kExpandThreads = 128, kExpandCols = kExpandThreads * 8, kMaxRank = 128;

// Semantics (SGMV/BGMV expand): for seg = blockIdx.x, t in its tokens [z*TOK, z*TOK+TOK),
//   n in [y*1024, y*1024+1024) ∩ [0, N_seg): y_seg[t*ldy+n] += scale * Σ_r tmp[t*ldt+col+r] * Bt[r,n].
// VEC: thread owns 8 adjacent columns (16-byte Bt loads; N % 8 == 0, aligned); else 8 columns
// 128 apart (coalesced scalar loads). grid (nsegs, ceil(max N/1024), ceil(max tokens/TOK)), block 128.
// tmp [T, ldt], Bt [rank, N], y [T, ldy]; segments of one launch write disjoint (token, y) pairs.
template <int TOK, bool VEC>
__global__ void __launch_bounds__(kExpandThreads) lora_expand_kernel(const float* tmp, int64_t ldt,
                                                                      const LoraItem* items) {
  __shared__ float vs[TOK][kMaxRank];
  const LoraItem it = items[blockIdx.x];
  const int64_t nb = int64_t(blockIdx.y) * kExpandCols;
  const int c0 = blockIdx.z * TOK;
  if (nb >= it.N || c0 >= it.tok_count) return;
  const int tn = min(TOK, it.tok_count - c0);
  const int64_t t0 = int64_t(it.tok_start) + c0;
  for (int i = threadIdx.x; i < TOK * kMaxRank; i += blockDim.x) {
    const int t = i / kMaxRank, r = i % kMaxRank;
    vs[t][r] = t < tn && r < it.rank ? tmp[(t0 + t) * ldt + it.col + r] : 0.0f;
  }
  __syncthreads();
  float acc[TOK][8];
#pragma unroll
  for (int t = 0; t < TOK; t++)
#pragma unroll
    for (int e = 0; e < 8; e++) acc[t][e] = 0.0f;
  const int64_t nv = nb + int64_t(threadIdx.x) * 8;  // VEC: first of 8 adjacent columns
  for (int r = 0; r < it.rank; r++) {
    float b[8];
    const int64_t row = int64_t(r) * it.N;
    if (VEC) {
      if (nv >= it.N) break;
      switch (it.dtype) {
        case DType::F32: load8<DType::F32>(it.w, row + nv, b); break;
        case DType::F16: load8<DType::F16>(it.w, row + nv, b); break;
        default: load8<DType::BF16>(it.w, row + nv, b);
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; e++) {
        const int64_t n = nb + threadIdx.x + int64_t(e) * kExpandThreads;
        b[e] = n < it.N ? load_w(it.w, it.dtype, row + n) : 0.0f;
      }
    }
#pragma unroll
    for (int t = 0; t < TOK; t++)
#pragma unroll
      for (int e = 0; e < 8; e++) acc[t][e] = fmaf(vs[t][r], b[e], acc[t][e]);
  }
  for (int t = 0; t < tn; t++) {
    float* out = it.y + (t0 + t) * it.ldy;
#pragma unroll
    for (int e = 0; e < 8; e++) {
      const int64_t n = VEC ? nv + e : nb + threadIdx.x + int64_t(e) * kExpandThreads;
      if (n < it.N) out[n] += it.scale * acc[t][e];
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

// Both halves go through these two launchers; lora_expand and lora_apply differ only in where
// each segment writes.
static void launch_shrink(CudaDevice* dev, const float* x, int64_t ldx, int64_t K, const LoraSegment* segs, int nsegs,
                          float* tmp, int64_t ldt) {
  std::vector<LoraItem> items(static_cast<size_t>(nsegs));
  int max_rank = 0, max_tok = 0;
  bool vec = K % 8 == 0;
  for (int i = 0; i < nsegs; i++) {
    const LoraSegment& s = segs[i];
    items[size_t(i)] = {s.tok_start, s.tok_count, s.rank, s.col, s.w, s.dtype, s.scale, nullptr, 0, 0};
    max_rank = std::max(max_rank, s.rank);
    max_tok = std::max(max_tok, s.tok_count);
    vec = vec && aligned16(s.w);
  }
  if (max_rank <= 0 || max_tok <= 0) return;
  const auto* d_items = static_cast<const LoraItem*>(dev->stage(items.data(), int64_t(items.size() * sizeof(LoraItem))));
  if (!d_items) return;
  const int tok = max_tok <= 1 ? 1 : max_tok <= 4 ? 4 : 8;
  const dim3 grid(unsigned(nsegs), unsigned((max_rank + kShrinkWarps - 1) / kShrinkWarps),
                  unsigned((max_tok + tok - 1) / tok));
  const int threads = kShrinkWarps * 32;
  cudaStream_t st = dev->stream();
#define LOOM_SHRINK(TOKN)                                                                           \
  (vec ? lora_shrink_kernel<TOKN, true><<<grid, threads, 0, st>>>(x, ldx, K, d_items, tmp, ldt)   \
       : lora_shrink_kernel<TOKN, false><<<grid, threads, 0, st>>>(x, ldx, K, d_items, tmp, ldt))
  if (tok == 1)
    LOOM_SHRINK(1);
  else if (tok == 4)
    LOOM_SHRINK(4);
  else
    LOOM_SHRINK(8);
#undef LOOM_SHRINK
  dev->check(cudaGetLastError(), "lora_shrink launch");
}

static void launch_expand(CudaDevice* dev, const float* tmp, int64_t ldt, std::vector<LoraItem>& items) {
  int max_tok = 0, max_rank = 0;
  int64_t max_n = 0;
  bool vec = true;
  for (const LoraItem& it : items) {
    max_tok = std::max(max_tok, it.tok_count);
    max_rank = std::max(max_rank, it.rank);
    max_n = std::max(max_n, it.N);
    vec = vec && it.N % 8 == 0 && aligned16(it.w);
  }
  if (items.empty() || max_tok <= 0 || max_rank <= 0 || max_n <= 0) return;
  const auto* d_items = static_cast<const LoraItem*>(dev->stage(items.data(), int64_t(items.size() * sizeof(LoraItem))));
  if (!d_items) return;
  const int tok = max_tok <= 1 ? 1 : max_tok <= 4 ? 4 : 8;
  const dim3 grid(unsigned(items.size()), unsigned((max_n + kExpandCols - 1) / kExpandCols),
                  unsigned((max_tok + tok - 1) / tok));
  cudaStream_t st = dev->stream();
#define LOOM_EXPAND(TOKN)                                                                         \
  (vec ? lora_expand_kernel<TOKN, true><<<grid, kExpandThreads, 0, st>>>(tmp, ldt, d_items)     \
       : lora_expand_kernel<TOKN, false><<<grid, kExpandThreads, 0, st>>>(tmp, ldt, d_items))
  if (tok == 1)
    LOOM_EXPAND(1);
  else if (tok == 4)
    LOOM_EXPAND(4);
  else
    LOOM_EXPAND(8);
#undef LOOM_EXPAND
  dev->check(cudaGetLastError(), "lora_expand launch");
}

void CudaDevice::lora_shrink(const float* x, int64_t ldx, int64_t K, const LoraSegment* segs, int nsegs, float* tmp,
                             int64_t ldt) {
  if (nsegs > 0) launch_shrink(this, x, ldx, K, segs, nsegs, tmp, ldt);
}

void CudaDevice::lora_expand(const float* tmp, int64_t ldt, int64_t N, const LoraSegment* segs, int nsegs, float* y,
                             int64_t ldy) {
  if (nsegs <= 0) return;
  std::vector<LoraItem> items(static_cast<size_t>(nsegs));
  for (int i = 0; i < nsegs; i++) {
    const LoraSegment& s = segs[i];
    items[size_t(i)] = {s.tok_start, s.tok_count, s.rank, s.col, s.w, s.dtype, s.scale, y, ldy, N};
  }
  launch_expand(this, tmp, ldt, items);
}

// Semantics: Device::lora_apply, in two launches: one shrink over every segment of every module
// (their columns differ), then one expand where each segment writes its module's output.
void CudaDevice::lora_apply(const float* x, int64_t ldx, int64_t K, const LoraSegment* shrink,
                            const LoraSegment* expand, const int* module, int nsegs, const LoraOutput* outs, float* tmp,
                            int64_t ldt) {
  if (nsegs <= 0) return;
  launch_shrink(this, x, ldx, K, shrink, nsegs, tmp, ldt);
  std::vector<LoraItem> items(static_cast<size_t>(nsegs));
  for (int i = 0; i < nsegs; i++) {
    const LoraSegment& s = expand[i];
    const LoraOutput& o = outs[module[i]];
    items[size_t(i)] = {s.tok_start, s.tok_count, s.rank, s.col, s.w, s.dtype, s.scale, o.y, o.ldy, o.N};
  }
  launch_expand(this, tmp, ldt, items);
}

}  // namespace loom
