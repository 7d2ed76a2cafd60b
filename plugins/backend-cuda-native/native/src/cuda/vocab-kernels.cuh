// Kernels of the cuda device's ops over logits rows ([T, V], V up to ~256k): argmax, the log-softmax normaliser, top-k, and the
// sample-and-match walk of verification rows over each node's chosen token. One block per row;
// the row is read with coalesced strided loads and reduced with warp shuffles, then across warps
// through shared memory. The launches are in vocab-ops.cu; a header so that the test program's
// SIMT emulator runs the same kernels (cuda/simt-compat.cuh).
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda/grid-dependency.cuh"
#include "cuda/param-list.cuh"
#include "cuda/row-pick.cuh"
#include "cuda/simt-compat.cuh"
#include "cuda/warp-reduce.cuh"
#include "kernels/kernels.h"

namespace loom {
// Internal linkage: the test program links this header's emulated build beside the real one.
namespace {

constexpr int kRowThreads = 512;

// Semantics: m = max of the non-NaN x[t, i<V]; out[t] = m > -inf ? first i with x == m : -1.
// One block per row t. x [T, ld], out [T]
__global__ void argmax_kernel(const float* x, int64_t ld, int64_t V, int32_t* out) {
  wait_for_prior_kernels();
  LOOM_SHARED(Pick[32], scratch);
  const float* row = x + int64_t(blockIdx.x) * ld;
  Pick p{-INFINITY, INT_MAX};
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    const float v = row[i];
    if (!isnan(v) && better(v, int(i), p)) p = {v, int(i)};
  }
  const Pick best = block_best(p, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = best.idx != INT_MAX && best.v > -INFINITY ? best.idx : -1;
}

// Semantics: for j<K: out[t*K + j] = the j-th pick in (value desc, index asc) order among the
// non-NaN x[t, i<V], -1 once none is left. K passes over the row, each taking the best element
// strictly after the previous pick in that order (so ties and duplicates are handled without a
// list of taken indices). One block per row t. x [T, ld], out [T, K]
__global__ void top_k_kernel(const float* x, int64_t ld, int64_t V, int K, const int32_t* ids, int32_t* out) {
  wait_for_prior_kernels();
  LOOM_SHARED(Pick[32], scratch);
  const float* row = x + int64_t(blockIdx.x) * ld;
  Pick prev{INFINITY, -1};
  bool have_prev = false;
  for (int j = 0; j < K; j++) {
    Pick p{-INFINITY, INT_MAX};
    if (prev.idx != INT_MAX) {
      for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
        const float v = row[i];
        if (isnan(v)) continue;
        if (have_prev && !(v < prev.v || (v == prev.v && int(i) > prev.idx))) continue;
        if (better(v, int(i), p)) p = {v, int(i)};
      }
    }
    const Pick best = prev.idx == INT_MAX ? prev : block_best(p, scratch);
    if (threadIdx.x == 0) out[int64_t(blockIdx.x) * K + j] = best.idx == INT_MAX ? -1 : ids ? ids[best.idx] : best.idx;
    prev = best;
    have_prev = true;
  }
}

// Semantics: out[t] = log Σ_{i<V} exp(x[t, i]); -inf for a row of -inf, NaN if a NaN is in it.
// Max first, then Σ exp(x - max) with each term in f32 and the sum in f64 (the reference sums in
// f64; f32 over 10^5 terms would drift past its 1e-6 tolerance). One block per row. x [T, ld], out [T]
__global__ void log_sum_exp_kernel(const float* x, int64_t ld, int64_t V, double* out) {
  wait_for_prior_kernels();
  LOOM_SHARED(float[32], smax);
  LOOM_SHARED(int[32], snan);
  LOOM_SHARED(double[32], ssum);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  const float* row = x + int64_t(blockIdx.x) * ld;
  float m = -INFINITY;
  int nan = 0;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    const float v = row[i];
    nan |= isnan(v);
    m = fmaxf(m, v);  // fmaxf ignores NaN
  }
  m = warp_max(m);
  nan = __any_sync(0xffffffffu, nan);
  if (lane == 0) {
    smax[warp] = m;
    snan[warp] = nan;
  }
  __syncthreads();
  m = smax[0];
  nan = snan[0];
  for (int w = 1; w < nwarps; w++) {
    m = fmaxf(m, smax[w]);
    nan |= snan[w];
  }
  if (nan || m == -INFINITY) {
    if (threadIdx.x == 0) out[blockIdx.x] = nan ? double(NAN) : double(-INFINITY);
    return;
  }
  double s = 0;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) s += double(expf(row[i] - m));
  s = warp_sum(s);
  if (lane == 0) ssum[warp] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int w = 0; w < nwarps; w++) total += ssum[w];
    out[blockIdx.x] = double(m) + log(total);
  }
}

// parent(c): the largest j < c with mask[c*n + j] != 0 (-1 if none); c - 1 for a chain (no mask).
__device__ int tree_parent(const uint8_t* mask, int n, int c) {
  if (!mask) return c - 1;
  for (int j = c - 1; j >= 0; j--)
    if (mask[c * n + j]) return j;
  return -1;
}

// A step's rows for tree_walk (param-list.h): 32 inline (768 bytes of parameters), so the copy
// between the tree's sampling and its walk goes away at batches up to 32.
constexpr int kLeafInlineRows = 32;
using LeafRowList = ParamList<LeafRow, kLeafInlineRows>;

// Semantics: see Device::tree_walk. One thread per row: trees are small (<= ~64 nodes) and the
// walk is sequential by nature. tokens [T], argmax [logits rows], rows [nrows] (inline or staged),
// leaf [nrows]
__global__ void tree_walk_kernel(const int32_t* tokens, const int32_t* argmax, const __grid_constant__ LeafRowList rows,
                                 int nrows, int32_t* leaf) {
  wait_for_prior_kernels();
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= nrows) return;
  const LeafRow row = list_item(rows, unsigned(r));
  if (row.n == 0) {
    leaf[r] = -1;
    return;
  }
  int node = 0;
  for (;;) {
    const int want = argmax[row.logit_start + node];
    int next = -1;
    for (int c = node + 1; c < row.n && next < 0; c++)
      if (tokens[row.tok_start + c] == want && tree_parent(row.tree_mask, row.n, c) == node) next = c;
    if (next < 0) break;
    node = next;
  }
  leaf[r] = node;
}

}  // namespace
}  // namespace loom
