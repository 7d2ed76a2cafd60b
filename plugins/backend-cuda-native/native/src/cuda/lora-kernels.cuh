// Multi-LoRA kernels of the cuda device, Punica's SGMV/BGMV split: a shrink (x·A: K -> rank) and
// an expand (·B: rank -> N), each ONE launch for the whole batch of mixed adapters. The segment
// list (one run of tokens per adapter; a decode row is a one-token segment, the BGMV case) travels
// in the launch's parameters when it is short, else staged to the device (lora-plan.h:
// LoraItemList), and is bound to blockIdx.x, so rows of different adapters, ranks (1..128) and
// dtypes share a launch; blocks past a segment's rank or tokens exit at once.
//
//  - shrink: a block owns one segment, 8 rank rows (a warp each), up to TOK tokens and one slice
//    of K; the tokens' x is staged in shared memory by K tiles, each warp streams its row of A with
//    16-byte loads. In lora_apply the slices are one K tile each (512): a decode row's shrink is
//    then K/512 times as many blocks (at batch 1, 6 blocks of 8 K tiles each became 48 of one, for
//    q|k|v of an 8B model), and each slice writes its partial sums to a plane of scratch, which the
//    expand adds in slice order: the same bits whatever the batch, since the slices depend on K only.
//  - expand: a block owns one segment, 1024 output columns (8 per thread) and up to TOK tokens;
//    the tokens' low-rank values (summed over the shrink's slices) sit in shared memory and each
//    thread streams Bt rows.
//
// The kernels and their launch plans (lora.cu launches them). A header so that the test program's
// SIMT emulator runs the same kernels with the same plans (cuda/simt-compat.cuh).
#pragma once

#include <cstdint>

#include "cuda/dtype-cuda.cuh"
#include "cuda/grid-dependency.cuh"
#include "cuda/lora-plan.h"
#include "cuda/param-list.cuh"
#include "cuda/simt-compat.cuh"
#include "cuda/warp-reduce.cuh"
#include "kernels/kernels.h"

namespace loom {

// Internal linkage: the test program links this header's emulated build beside the real one.
namespace {

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

// Semantics (SGMV/BGMV shrink): for seg = blockIdx.x, rank group y mod rgroups, K slice
// s = y / rgroups, t in its tokens [z*TOK, z*TOK+TOK), r in [group*8, group*8+8) ∩ [0, rank):
//   tmp[s*plane + t*ldt + col + r] = Σ_{k in [s*kslice, s*kslice+kslice) ∩ [0, K)} x[t*ldx+k] * A[r,k].
// VEC: every A is 16-byte aligned and K % 8 == 0 (checked by the host). grid (nsegs,
// rgroups * ceil(K/kslice), ceil(max tokens/TOK)), block 256; kslice a multiple of kShrinkKTile
// (or K). x [T, ldx], A [rank, K], tmp [ceil(K/kslice) planes of T, ldt]
template <int TOK, bool VEC>
__global__ void __launch_bounds__(kShrinkWarps * 32) lora_shrink_kernel(const float* x, int64_t ldx, int64_t K,
                                                                         const __grid_constant__ LoraItemList items,
                                                                         float* tmp,
                                                                         int64_t ldt, int rgroups, int64_t kslice,
                                                                         int64_t plane) {
  wait_for_prior_kernels();
  LOOM_SHARED(float[TOK][kShrinkKTile], xs);  // 16-byte aligned: float4 reads
  const LoraItem it = list_item(items, blockIdx.x);
  const int slice = int(blockIdx.y) / rgroups;
  const int r0 = (int(blockIdx.y) % rgroups) * kShrinkWarps, c0 = blockIdx.z * TOK;
  const int64_t k_begin = int64_t(slice) * kslice, k_end = K - k_begin < kslice ? K : k_begin + kslice;
  if (r0 >= it.rank || c0 >= it.tok_count) return;  // uniform per block: no barrier is skipped by half of it
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r = r0 + warp, tn = min(TOK, it.tok_count - c0);
  const int64_t t0 = int64_t(it.tok_start) + c0;
  float acc[TOK];
#pragma unroll
  for (int t = 0; t < TOK; t++) acc[t] = 0.0f;
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kShrinkKTile) {
    const int kn = k_end - k0 < kShrinkKTile ? int(k_end - k0) : kShrinkKTile;
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
    if (lane == 0 && t < tn) tmp[slice * plane + (t0 + t) * ldt + it.col + r] = v;
  }
}


// Semantics (SGMV/BGMV expand): for seg = blockIdx.x, t in its tokens [z*TOK, z*TOK+TOK),
//   v[t, r] = Σ_{s < ksplit, in order} tmp[s*plane + t*ldt + col + r]   (the shrink's K slices),
//   n in [y*1024, y*1024+1024) ∩ [0, N_seg): y_seg[t*ldy+n] += scale * Σ_r v[t, r] * Bt[r,n],
// and, where tmp_out is given, tmp_out[t*ldt + col + r] = v[t, r] (written by the y = 0 blocks).
// VEC: thread owns 8 adjacent columns (16-byte Bt loads; N % 8 == 0, aligned); else 8 columns
// 128 apart (coalesced scalar loads). grid (nsegs, ceil(max N/1024), ceil(max tokens/TOK)), block 128.
// tmp [ksplit planes of T, ldt], Bt [rank, N], y [T, ldy], tmp_out [T, ldt] or null; segments of
// one launch write disjoint (token, y) pairs.
template <int TOK, bool VEC>
__global__ void __launch_bounds__(kExpandThreads) lora_expand_kernel(const float* tmp, int64_t ldt,
                                                                      const __grid_constant__ LoraItemList items,
                                                                      int ksplit,
                                                                      int64_t plane, float* tmp_out) {
  wait_for_prior_kernels();
  LOOM_SHARED(float[TOK][kMaxRank], vs);
  const LoraItem it = list_item(items, blockIdx.x);
  const int64_t nb = int64_t(blockIdx.y) * kExpandCols;
  const int c0 = blockIdx.z * TOK;
  if (nb >= it.N || c0 >= it.tok_count) return;
  const int tn = min(TOK, it.tok_count - c0);
  const int64_t t0 = int64_t(it.tok_start) + c0;
  for (int i = threadIdx.x; i < TOK * kMaxRank; i += blockDim.x) {
    const int t = i / kMaxRank, r = i % kMaxRank;
    float v = 0.0f;
    if (t < tn && r < it.rank) {
      const int64_t at = (t0 + t) * ldt + it.col + r;
      for (int sl = 0; sl < ksplit; sl++) v += tmp[sl * plane + at];
      if (tmp_out && blockIdx.y == 0) tmp_out[at] = v;
    }
    vs[t][r] = v;
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

// `run(kernel)` launches the instance of the shrink kernel the plan chose (a function pointer).
template <typename Run>
void dispatch_lora_shrink(const LoraLaunch& p, Run&& run) {
  if (p.tok == 1)
    p.vec ? run(lora_shrink_kernel<1, true>) : run(lora_shrink_kernel<1, false>);
  else if (p.tok == 4)
    p.vec ? run(lora_shrink_kernel<4, true>) : run(lora_shrink_kernel<4, false>);
  else
    p.vec ? run(lora_shrink_kernel<8, true>) : run(lora_shrink_kernel<8, false>);
}

template <typename Run>
void dispatch_lora_expand(const LoraLaunch& p, Run&& run) {
  if (p.tok == 1)
    p.vec ? run(lora_expand_kernel<1, true>) : run(lora_expand_kernel<1, false>);
  else if (p.tok == 4)
    p.vec ? run(lora_expand_kernel<4, true>) : run(lora_expand_kernel<4, false>);
  else
    p.vec ? run(lora_expand_kernel<8, true>) : run(lora_expand_kernel<8, false>);
}

}  // namespace
}  // namespace loom
