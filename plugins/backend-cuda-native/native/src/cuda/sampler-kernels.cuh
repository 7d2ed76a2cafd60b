// Device::sample on the GPU: one block per row. The steps whose result does not depend on the
// order of operations run in parallel over the row: the working copy, penalties and mask, the
// greedy argmax, the candidate list (an order-preserving compaction, so candidates stay in id
// order as collectCandidates leaves them), top-k's threshold (a radix select of the k-th largest
// value: only the value matters when k <= 1024) and the reported log-softmax and top logprobs.
// The steps whose f64 sums and selection order decide the token (temperature's max for tiny
// temperatures, top-k above 1024, top-p, typical-p, the softmax and the draw) run in thread 0
// with the JS sampler's port (reference/sampler-core.h), so the token is the reference's bit for
// bit. That serial part costs O(candidates): cheap after a top-k, ~1 ms for a whole 150k
// vocabulary (a parallel exact version is the next step).
//
// The launch is in sampler.cu; a header so that the test program's SIMT emulator runs the same
// kernel (cuda/simt-compat.cuh).
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda/row-pick.cuh"
#include "cuda/simt-compat.cuh"
#include "kernels/kernels.h"
#include "reference/sampler-core.h"

namespace loom {
// Internal linkage: the test program links this header's emulated build beside the real one.
namespace {

constexpr int kSampleThreads = 256;

// Block-wide f64 sum (every thread gets it). Tree order: used only for the reported logprobs.
__device__ double block_sum(double x, double* lanes) {
  __syncthreads();
  lanes[threadIdx.x] = x;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) lanes[threadIdx.x] += lanes[threadIdx.x + s];
    __syncthreads();
  }
  return lanes[0];
}

// The JS argmax of w[0, V): the first maximum, -1 when nothing beats -inf (NaN never wins).
__device__ int32_t block_argmax(const float* w, int64_t V, Pick* warps) {
  Pick p{-INFINITY, INT_MAX};
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
    if (w[v] > -INFINITY && better(w[v], int(v), p)) p = {w[v], int(v)};
  const Pick b = block_best(p, warps);
  return b.idx == INT_MAX ? -1 : b.idx;
}

// Order-preserving compaction: ids = every v < V with keep(v), ascending; returns the count.
// Each thread owns one contiguous range of v, so the ranges' offsets are one scan of the counts.
template <typename Keep>
__device__ int compact(int64_t V, int32_t* ids, Keep keep, int* counts) {
  const int64_t chunk = (V + blockDim.x - 1) / blockDim.x;
  const int64_t b = int64_t(threadIdx.x) * chunk, e = b + chunk < V ? b + chunk : V;
  int c = 0;
  for (int64_t v = b; v < e; v++) c += keep(v) ? 1 : 0;
  __syncthreads();
  counts[threadIdx.x] = c;
  __syncthreads();
  if (threadIdx.x == 0) {
    int total = 0;
    for (int t = 0; t < int(blockDim.x); t++) {
      const int n = counts[t];
      counts[t] = total;
      total += n;
    }
    counts[blockDim.x] = total;
  }
  __syncthreads();
  int at = counts[threadIdx.x];
  for (int64_t v = b; v < e; v++)
    if (keep(v)) ids[at++] = int32_t(v);
  __syncthreads();
  return counts[blockDim.x];
}

// f32 bits mapped so that unsigned order is numeric order (-0 just below +0).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// The k-th largest of work[ids[i<n]] (1 <= k <= n): a most-significant-digit radix select, 8
// bits per pass, with a shared histogram. Equal to kthLargestOf's value (ties counted).
__device__ double kth_largest(const float* work, const int32_t* ids, int n, int k, int* hist, uint32_t* shared) {
  uint32_t prefix = 0, mask = 0;
  int remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const uint32_t key = order_key(work[ids[i]]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xff], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int digit = 255;
      for (; digit > 0 && hist[digit] < remaining; digit--) remaining -= hist[digit];
      shared[0] = prefix | (uint32_t(digit) << shift);
      shared[1] = uint32_t(remaining);
    }
    __syncthreads();
    prefix = shared[0];
    remaining = int(shared[1]);
    mask |= 0xffu << shift;
    __syncthreads();
  }
  return double(key_value(prefix));
}

// Semantics: Device::sample (kernels.h) for row blockIdx.x. params [nrows] (staged copy),
// scratch [nrows, stride] bytes, outputs as in kernels.h.
__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(const float* x, int64_t ld, int64_t V, const SampleParams* params, int max_top, int32_t* token,
                  float* logprob, int32_t* top_ids, float* top_lp, uint8_t* scratch, int64_t stride) {
  LOOM_SHARED(Pick[kSampleThreads / 32], warps);
  LOOM_SHARED(int[kSampleThreads + 1], counts);
  LOOM_SHARED(int[256], hist);
  LOOM_SHARED(uint32_t[2], words);
  LOOM_SHARED(double[kSampleThreads], lanes);
  LOOM_SHARED(int32_t, chosen);
  const int r = blockIdx.x;
  const SampleParams p = params[r];
  const float* row = x + int64_t(p.row) * ld;
  const sampler::RowScratch s = sampler::row_scratch(scratch + int64_t(r) * stride, V);
  const bool penalised = sampler::penalties_active(p);
  const bool plain = p.allowed == nullptr && !penalised;

  // TokenSampler.sample up to the choice: the working copy (penalties, then the mask).
  if (!(plain && sampler::is_greedy(p))) {
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) s.work[v] = row[v];
    __syncthreads();
    if (penalised)
      for (int i = threadIdx.x; i < p.n_penalties; i += blockDim.x) sampler::penalise(s.work, V, p.penalties[i], p);
    __syncthreads();
    if (p.allowed != nullptr)
      for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
        s.work[v] = sampler::masked(s.work[v], p.allowed, v, p.allowed_lift);
    __syncthreads();
  }

  if (sampler::is_greedy(p)) {
    const int32_t id = block_argmax(plain ? row : s.work, V, warps);
    if (threadIdx.x == 0) chosen = id;
  } else {
    const float* work = s.work;
    int n = compact(V, s.ids, [&](int64_t v) { return work[v] > -INFINITY; }, counts);
    const int k = p.top_k;
    if (n > 0 && k > 0 && k < n) {
      if (k <= sampler::kHeapSelectMax) {
        // partitionAtLeast keeps the candidates at or above the k-th value in id order.
        const float threshold = float(kth_largest(work, s.ids, n, k, hist, words));
        n = compact(V, s.ids, [&](int64_t v) { return work[v] > -INFINITY && work[v] >= threshold; }, counts);
      } else {
        if (threadIdx.x == 0) counts[0] = sampler::top_k_keep(s, n, k, 0.0);
        __syncthreads();
        n = counts[0];
        __syncthreads();
      }
    }
    // Temperature in parallel when no max is needed (temperature.ts shifts only below 1e-20).
    if (n > 0 && p.temperature != 1 && p.temperature >= 1e-20)
      for (int i = threadIdx.x; i < n; i += blockDim.x)
        s.work[s.ids[i]] = float(double(s.work[s.ids[i]]) / p.temperature);
    __syncthreads();
    if (threadIdx.x == 0) {
      int32_t id = -1;
      if (n > 0) {
        if (p.temperature < 1e-20) sampler::apply_temperature(s.work, s.ids, n, p.temperature);
        SampleParams rest = p;
        rest.temperature = 1;  // applied above
        n = sampler::warp_after_top_k(s, n, rest);
        sampler::Stream st = sampler::stream_at(p.seed, p.draws);
        id = sampler::draw(s, n, sampler::next_float(&st));
      }
      chosen = id;
    }
  }
  __syncthreads();
  const int32_t id = chosen;

  // The report: the raw log-softmax normaliser (f64 sums in tree order: within f32 rounding of
  // the JS value) and the top logprobs, one block pass each.
  Pick mp{-INFINITY, INT_MAX};
  bool nan = false;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    nan = nan || isnan(row[v]);
    if (!isnan(row[v]) && (mp.idx == INT_MAX || row[v] > mp.v)) mp = {row[v], int(v)};
  }
  const int any_nan = __syncthreads_or(nan);
  const Pick mx = block_best(mp, warps);
  const double max = mx.idx == INT_MAX ? -INFINITY : double(mx.v);
  double part = 0;
  if (max > -INFINITY && !any_nan)
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) part += exp(double(row[v]) - max);
  const double sum = block_sum(part, lanes);
  const double log_norm = max == -INFINITY ? max : any_nan ? double(NAN) : max + log(sum);  // logSumExpBelow
  const int count = id < 0 ? 0 : p.top_logprobs < max_top ? p.top_logprobs : max_top;
  Pick prev{INFINITY, -1};
  for (int j = 0; j < max_top; j++) {
    Pick b{0, INT_MAX};
    if (j < count && prev.idx != INT_MAX) {
      Pick q{-INFINITY, INT_MAX};
      for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
        const float z = row[v];
        if (isnan(z)) continue;
        if (j > 0 && !(z < prev.v || (z == prev.v && int(v) > prev.idx))) continue;
        if (better(z, int(v), q)) q = {z, int(v)};
      }
      b = block_best(q, warps);
      prev = b;
    }
    if (threadIdx.x == 0) {
      const bool have = j < count && b.idx != INT_MAX;
      top_ids[int64_t(r) * max_top + j] = have ? b.idx : -1;
      top_lp[int64_t(r) * max_top + j] = have ? float(double(b.v) - log_norm) : 0.0f;
    }
  }
  if (threadIdx.x == 0) {
    token[r] = id;
    logprob[r] = id < 0 ? 0.0f : float(double(row[id]) - log_norm);
  }
}

}  // namespace
}  // namespace loom
