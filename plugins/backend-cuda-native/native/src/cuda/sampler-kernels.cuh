// Device::sample on the GPU: one block per row, every step block-parallel, and the token the JS
// sampler's port (reference/sampler-core.h) draws, bit for bit.
//
// The JS sampler is specified so that this needs no sequential walk over the vocabulary
// (core/src/engine/sampler/blocked-sum.ts):
// - candidates stay in id order (collectCandidates, order-preserving compactions), so every pass
//   over them runs in any order: the working copy, penalties and mask, the greedy argmax, top-k's
//   threshold (a radix select of the k-th largest value), temperature, the softmax's max, exps and
//   divisions, the warpers' keys, and the reported log-softmax and top logprobs;
// - the f64 sums that decide a token (the softmax's Σ, typical-p's entropy) are blocked: each
//   thread adds whole chunks of 256 terms in order, and only the chunk sums (~500 for a 128k
//   vocabulary) are added in sequence, by warp 0;
// - probability masses are exact integers (floor(p · 2^52)), so top-p's and typical-p's cut is a
//   radix select on (key, id) with histograms of mass in shared atomics, and the draw is a block
//   scan of the candidates' masses.
// Before this (a JS order reproduced step by step: every Σ added one term at a time, quickselect's
// Hoare partitions replayed exactly), an H100 took 2.45 ms for one 128k-token row at temperature
// 0.8, top-p 0.95, and 2.9 ms for 32 rows.
//
// The launch is in sampler.cu; a header so that the test program's SIMT emulator runs the same
// kernel (cuda/simt-compat.cuh).
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda/grid-dependency.cuh"
#include "cuda/param-list.cuh"
#include "cuda/row-pick.cuh"
#include "cuda/simt-compat.cuh"
#include "kernels/kernels.h"
#include "reference/sampler-core.h"

namespace loom {
// Internal linkage: the test program links this header's emulated build beside the real one.
namespace {

// 512 threads: the passes over a row are latency-bound with one block per row, and 512 ran ~30%
// faster than 256 on an H100.
constexpr int kSampleThreads = 512;
constexpr int kSampleWarps = kSampleThreads / 32;
// warp_walk's lookahead: each lane fetches this many terms per step of 32 * kWalkAhead.
constexpr int kWalkAhead = 8;
// Loads in flight per thread in compactions: groups of 32 items a warp.
constexpr int kGroupsAhead = 8;
// Loads in flight per thread in the other passes over a row or its candidates (for_row,
// for_candidates). One block per row has 16 warps on one SM, so a pass over a 128k-token row is
// ~250 loads a thread, and with one in flight at a time each pass is a chain of round trips to L2:
// on an H200 (2026-11-28) a greedy row's three passes took 144 µs of a 5.8 ms decode step and a
// sampled mix (temperature 0.8, top-p 0.95 over a random model's flat rows) 1.6 ms more, with 4
// loads in flight in for_candidates and one elsewhere.
constexpr int kBatch = 8;

// ---- block-wide building blocks (every thread of the block calls them) ----

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

// For v < V, use(v, load(v)): each thread its v = threadIdx.x + i * kSampleThreads in ascending
// order (as a plain strided loop), kBatch loads issued before the first use.
template <typename Load, typename Use>
__device__ void for_row(int64_t V, Load load, Use use) {
  for (int64_t v0 = threadIdx.x; v0 < V; v0 += int64_t(kBatch) * kSampleThreads) {
    decltype(load(0)) x[kBatch] = {};
#pragma unroll
    for (int u = 0; u < kBatch; u++)
      if (v0 + u * kSampleThreads < V) x[u] = load(v0 + u * kSampleThreads);
#pragma unroll
    for (int u = 0; u < kBatch; u++)
      if (v0 + u * kSampleThreads < V) use(v0 + u * kSampleThreads, x[u]);
  }
}

// The JS argmax of w[0, V): the first maximum, -1 when nothing beats -inf (NaN never wins).
__device__ int32_t block_argmax(const float* w, int64_t V, Pick* warps) {
  Pick p{-INFINITY, INT_MAX};
  for_row(
      V, [&](int64_t v) { return w[v]; },
      [&](int64_t v, float x) {
        if (x > -INFINITY && better(x, int(v), p)) p = {x, int(v)};
      });
  const Pick b = block_best(p, warps);
  return b.idx == INT_MAX ? -1 : b.idx;
}

__device__ __forceinline__ int shfl_xor(int v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ double shfl_xor(double v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }

// Every thread's `v` folded by `op` (associative and commutative); every thread gets the result.
// T needs a shfl_xor overload; `parts` is shared, one T per warp.
template <typename T, typename Op>
__device__ T block_fold(T v, Op op, T* parts) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
  __syncthreads();  // parts may still be read from a previous fold
  if ((threadIdx.x & 31) == 0) parts[threadIdx.x >> 5] = v;
  __syncthreads();
  T all = parts[0];
  for (int w = 1; w < kSampleWarps; w++) all = op(all, parts[w]);
  return all;
}

// A value and its position in the candidate order.
struct Ranked {
  double v;
  int at;  // INT_MAX: none
};

__device__ __forceinline__ Ranked shfl_xor(const Ranked& r, int o) { return {shfl_xor(r.v, o), shfl_xor(r.at, o)}; }

// The first maximum: a loop `if (x > max) max = x` keeps the earliest of equal values, so a +0
// found before a -0 stays +0 (no NaN among candidates). Every thread gets it.
__device__ double block_first_max(Ranked r) {
  LOOM_SHARED(Ranked[kSampleWarps], parts);
  const auto first = [](const Ranked& a, const Ranked& b) {
    return b.at != INT_MAX && (a.at == INT_MAX || b.v > a.v || (b.v == a.v && b.at < a.at)) ? b : a;
  };
  const Ranked best = block_fold(r, first, parts);
  return best.at == INT_MAX ? -INFINITY : best.v;
}

// For the candidates i < n (id = ids[i]), use(i, id, load(i, id)), kBatch a thread at a time with
// their loads first: one block per row has too few warps to hide a gather's latency otherwise.
template <typename Load, typename Use>
__device__ void for_candidates(const int32_t* ids, int n, Load load, Use use) {
  for (int i0 = threadIdx.x; i0 < n; i0 += kBatch * kSampleThreads) {
    int32_t id[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; u++) {
      const int i = i0 + u * kSampleThreads;
      id[u] = i < n ? ids[i] : 0;
    }
    decltype(load(0, 0)) x[kBatch] = {};
#pragma unroll
    for (int u = 0; u < kBatch; u++)
      if (i0 + u * kSampleThreads < n) x[u] = load(i0 + u * kSampleThreads, id[u]);
#pragma unroll
    for (int u = 0; u < kBatch; u++)
      if (i0 + u * kSampleThreads < n) use(i0 + u * kSampleThreads, id[u], x[u]);
  }
}

// Thread 0's `v`, for every thread (the results of warp 0's sequential walks).
template <typename T>
__device__ T from_thread0(T v) {
  LOOM_SHARED(T, slot);
  __syncthreads();  // the slot may still be read from a previous call
  if (threadIdx.x == 0) slot = v;
  __syncthreads();
  return slot;
}

__device__ __forceinline__ uint32_t warp_sum_u32(uint32_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Each warp's `mine` (the same on all its lanes) summed over the warps before it, in warp order;
// *total gets the sum over all warps.
__device__ uint64_t warp_offsets(uint64_t mine, uint64_t* total) {
  LOOM_SHARED(uint64_t[kSampleWarps], sums);
  const int warp = threadIdx.x >> 5;
  __syncthreads();  // sums may still be read from a previous call
  if ((threadIdx.x & 31) == 0) sums[warp] = mine;
  __syncthreads();
  uint64_t before = 0, all = 0;
  for (int w = 0; w < kSampleWarps; w++) {
    before += w < warp ? sums[w] : 0;
    all += sums[w];
  }
  *total = all;
  return before;
}

// The groups of 32 items of [0, n) that the calling warp owns: a contiguous run [*g0, *g1), so
// items keep their order across warps, walked 32 at a time (one item a lane: coalesced).
__device__ __forceinline__ void warp_groups(int64_t n, int64_t* g0, int64_t* g1) {
  const int64_t groups = (n + 31) / 32, per_warp = (groups + kSampleWarps - 1) / kSampleWarps;
  const int64_t at = int64_t(threadIdx.x >> 5) * per_warp;
  *g0 = at < groups ? at : groups;
  *g1 = at + per_warp < groups ? at + per_warp : groups;
}

__device__ __forceinline__ uint32_t lanes_below() { return (1u << (threadIdx.x & 31)) - 1u; }

// Order-preserving compaction of the items i < n with keep(i) into out[0, count) as item(i);
// returns the count. A warp counts its groups, the warps' offsets are one scan, and each group's
// ballot places its kept items.
template <typename Keep, typename Item>
__device__ int compact_items(int64_t n, Keep keep, Item item, int32_t* out) {
  int64_t g0, g1;
  warp_groups(n, &g0, &g1);
  const int lane = threadIdx.x & 31;
  auto kept = [&](int64_t g, bool* k) {  // kGroupsAhead groups' keep, their loads together
#pragma unroll
    for (int u = 0; u < kGroupsAhead; u++) {
      const int64_t i = (g + u) * 32 + lane;
      k[u] = g + u < g1 && i < n && keep(i);
    }
  };
  uint32_t c = 0;
  for (int64_t g = g0; g < g1; g += kGroupsAhead) {
    bool k[kGroupsAhead];
    kept(g, k);
#pragma unroll
    for (int u = 0; u < kGroupsAhead; u++) c += k[u] ? 1u : 0u;
  }
  uint64_t total;
  int64_t at = int64_t(warp_offsets(warp_sum_u32(c), &total));
  for (int64_t g = g0; g < g1; g += kGroupsAhead) {
    bool k[kGroupsAhead];
    kept(g, k);
#pragma unroll
    for (int u = 0; u < kGroupsAhead; u++) {
      const uint32_t m = __ballot_sync(0xffffffffu, k[u]);
      if (k[u]) out[at + __popc(m & lanes_below())] = item((g + u) * 32 + lane);
      at += __popc(m);
    }
  }
  __syncthreads();
  return int(total);
}

// Order-preserving compaction: ids = every v < V with keep(v), ascending; returns the count.
template <typename Keep>
__device__ int compact(int64_t V, int32_t* ids, Keep keep) {
  return compact_items(V, keep, [](int64_t v) { return int32_t(v); }, ids);
}

// The same in place over ids[0, n) (keep(i), by position), through `tmp` [n]: the kept ids
// first, in order. What it leaves past the count is undefined, and nothing reads it.
template <typename Keep>
__device__ int compact_ids(int32_t* ids, int n, Keep keep, int32_t* tmp) {
  const int kept = compact_items(n, keep, [&](int64_t i) { return ids[i]; }, tmp);
  for (int i = threadIdx.x; i < kept; i += kSampleThreads) ids[i] = tmp[i];
  __syncthreads();
  return kept;
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
    for_candidates(
        ids, n, [&](int, int32_t id) { return work[id]; },
        [&](int, int32_t, float w) {
          const uint32_t key = order_key(w);
          if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xff], 1);
        });
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

// ---- sums in the JS's order ----

// warp_walk's staging: 32 * kWalkAhead terms (one instance per block).
__device__ double* walk_stage() {
  LOOM_SHARED(double[32 * kWalkAhead], stage);
  return stage;
}

// Warp 0 only (all 32 lanes): *acc += value(i) for i = lo, lo + 1, ... < hi in order on every
// lane. The lanes fetch the terms, which do not depend on the walk, 32 * kWalkAhead at a time
// and one step ahead, into shared memory, so what stays sequential is one dependent f64 add per
// term.
template <typename Value>
__device__ void warp_walk(int lo, int hi, double* acc, Value value) {
  constexpr int kStep = 32 * kWalkAhead;
  double* stage = walk_stage();
  const int lane = threadIdx.x & 31;
  double next[kWalkAhead];
  auto fetch = [&](int base) {  // branch-free: past the end, a valid term is read and dropped
#pragma unroll
    for (int u = 0; u < kWalkAhead; u++) {
      const int i = base + u * 32 + lane;
      const double x = value(i < hi ? i : hi - 1);
      next[u] = i < hi ? x : 0.0;
    }
  };
  double a = *acc;
  if (lo < hi) fetch(lo);
  for (int base = lo; base < hi; base += kStep) {
    __syncwarp();  // every lane has read the previous step's terms
#pragma unroll
    for (int u = 0; u < kWalkAhead; u++) stage[u * 32 + lane] = next[u];
    __syncwarp();
    fetch(base + kStep);  // in flight during this step's adds
    const int count = hi - base < kStep ? hi - base : kStep;
    if (count == kStep) {
#pragma unroll
      for (int k = 0; k < kStep; k++) a += stage[k];
    } else {
      for (int k = 0; k < count; k++) a += stage[k];
    }
  }
  *acc = a;
}

// blockedSum (sampler::blocked_sum) of the terms staged by position, staged[i] for i < n: each
// thread adds whole chunks of kSumChunk terms in order (loads batched ahead of the adds), then
// warp 0 adds the chunk sums in order. Every thread gets the sum. chunks: ceil(n / kSumChunk).
__device__ double block_blocked_sum(const double* staged, int n, double* chunks) {
  constexpr int kChunk = sampler::kSumChunk, kAhead = 8;
  const int nc = (n + kChunk - 1) / kChunk;
  for (int c = threadIdx.x; c < nc; c += kSampleThreads) {
    const int c0 = c * kChunk, end = n < c0 + kChunk ? n : c0 + kChunk;
    double sum = 0;
    int i = c0;
    for (; i + kAhead <= end; i += kAhead) {
      double x[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; u++) x[u] = staged[i + u];
#pragma unroll
      for (int u = 0; u < kAhead; u++) sum += x[u];
    }
    for (; i < end; i++) sum += staged[i];
    chunks[c] = sum;
  }
  __syncthreads();
  double total = 0;
  if (threadIdx.x < 32) warp_walk(0, nc, &total, [&](int c) { return chunks[c]; });
  return from_thread0(total);
}

// ---- exact masses ----

// A probability in mass units (sampler::mass_units) as an integer: floor(p · 2^52) is exact in
// f64 and below 2^53, so the integer sums below are the JS's f64 sums in any order.
__device__ __forceinline__ uint64_t units(double p) { return uint64_t(sampler::mass_units(p)); }

// f64 bits mapped so that unsigned order is numeric order, with -0 taken as +0 (the JS compares
// them equal, and ties go to the smaller id).
__device__ __forceinline__ uint64_t order_key64(double d) {
  const uint64_t u = uint64_t(__double_as_longlong(d + 0.0));
  return (u >> 63) ? ~u : (u | (uint64_t(1) << 63));
}

// Digit `d` (0: most significant) of the (key, id) order's 96-bit composite, 8 bits a digit:
// digits 0-7 from the key, 8-11 from the id.
constexpr int kCompositeDigits = 12;
__device__ __forceinline__ int composite_digit(double key, int32_t id, int d) {
  return d < 8 ? int((order_key64(key) >> (56 - 8 * d)) & 0xff) : int((uint32_t(id) >> (24 - 8 * (d - 8))) & 0xff);
}

// massPrefix (sampler::mass_prefix) over ids[0, n) (ascending) with keys by position in
// s.stage: the kept count, the kept ids left in ascending order. The boundary — the first
// candidate in (key, id) order whose cumulative mass reaches `mass` — is found by a radix select
// on the composite: per digit, a histogram of the survivors' masses (exact, so shared atomics in
// any order are fine), the bucket where the mass before the survivors plus the buckets so far
// reaches the target, and the survivors in it compacted. Each thread adds runs of equal digits
// locally first: most candidates share the first digits (small probabilities), which would
// otherwise queue on one shared address.
__device__ int block_mass_prefix(const sampler::RowScratch& s, int n, double mass) {
  LOOM_SHARED(unsigned long long[256], hist);
  LOOM_SHARED(unsigned long long, picked_base);
  LOOM_SHARED(int, picked);
  const double target = mass * sampler::kMassScale;
  const int32_t* from = nullptr;  // survivors' positions (null: every position < count)
  int count = n;
  uint64_t base = 0;  // mass of the candidates before every survivor
  for (int d = 0; d < kCompositeDigits && count > 1; d++) {
    for (int b = threadIdx.x; b < 256; b += kSampleThreads) hist[b] = 0;
    __syncthreads();
    int run_digit = -1;
    uint64_t run_mass = 0;
    for (int j0 = threadIdx.x; j0 < count; j0 += kBatch * kSampleThreads) {
      // kBatch survivors' position, then id and key, then mass: three loads deep, kBatch wide.
      bool in[kBatch];
      int i[kBatch];
      int32_t id[kBatch];
      double key[kBatch];
      uint64_t mass_of[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; u++) {
        const int j = j0 + u * kSampleThreads;
        in[u] = j < count;
        i[u] = in[u] ? (from ? from[j] : j) : 0;
      }
#pragma unroll
      for (int u = 0; u < kBatch; u++) {
        id[u] = in[u] ? s.ids[i[u]] : 0;
        key[u] = in[u] ? s.stage[i[u]] : 0.0;
      }
#pragma unroll
      for (int u = 0; u < kBatch; u++) mass_of[u] = in[u] ? units(s.prob[id[u]]) : 0;
#pragma unroll
      for (int u = 0; u < kBatch; u++) {
        if (!in[u]) break;
        const int digit = composite_digit(key[u], id[u], d);
        if (digit != run_digit) {
          if (run_digit >= 0 && run_mass > 0) atomicAdd(&hist[run_digit], (unsigned long long)run_mass);
          run_digit = digit;
          run_mass = 0;
        }
        run_mass += mass_of[u];
      }
    }
    if (run_digit >= 0 && run_mass > 0) atomicAdd(&hist[run_digit], (unsigned long long)run_mass);
    __syncthreads();
    if (threadIdx.x == 0) {
      uint64_t cum = base;
      int b = 0;
      for (; b < 256; b++) {
        if (double(cum + hist[b]) >= target) break;
        cum += hist[b];
      }
      picked = b;  // 256: the survivors never reach the mass (only at digit 0: keep everything)
      picked_base = cum;
    }
    __syncthreads();
    const int digit = picked;
    base = picked_base;
    if (digit == 256) return n;
    int32_t* to = from == s.tmp ? s.tmp2 : s.tmp;
    const int32_t* src = from;
    count = compact_items(
        count,
        [&](int64_t j) {
          const int i = src ? src[j] : int(j);
          return composite_digit(s.stage[i], s.ids[i], d) == digit;
        },
        [&](int64_t j) { return src ? src[j] : int32_t(j); }, to);
    from = to;
  }
  const int at = from ? from[0] : 0;
  const double bkey = s.stage[at];
  const int32_t bid = s.ids[at];
  // Every candidate up to the boundary in (key, id) order, in id order (keys by position are
  // read before the ids move).
  const double* keys = s.stage;
  const int32_t* ids = s.ids;
  return compact_ids(
      s.ids, n, [&](int64_t i) { return keys[i] < bkey || (keys[i] == bkey && ids[i] <= bid); }, s.tmp);
}

// ---- the warpers by the block (sampler-core.h's: the same candidates, order and prob) ----

// softmaxOver (n >= 1): prob[id] = exp(values[id] - max) / Σ, the Σ blocked in ids order;
// returns max + log Σ. The exps are staged by position in s.stage.
__device__ double block_softmax(const sampler::RowScratch& s, int n, const float* values) {
  const int32_t* ids = s.ids;
  Ranked top{-INFINITY, INT_MAX};
  for_candidates(
      ids, n, [&](int, int32_t id) { return double(values[id]); },
      [&](int i, int32_t, double x) {
        if (top.at == INT_MAX || x > top.v) top = {x, i};  // i ascends within a thread
      });
  const double mx = block_first_max(top);
  for_candidates(
      ids, n, [&](int, int32_t id) { return double(values[id]); },
      [&](int i, int32_t, double x) { s.stage[i] = js::exp(x - mx); });
  __syncthreads();
  const double sum = block_blocked_sum(s.stage, n, s.chunks);
  for_candidates(
      ids, n, [&](int i, int32_t) { return s.stage[i]; }, [&](int, int32_t id, double e) { s.prob[id] = e / sum; });
  __syncthreads();
  return mx + js::log(sum);
}

// applyTemperature.
__device__ void block_temperature(float* work, const int32_t* ids, int n, double temperature) {
  if (temperature == 1) return;
  double shift = 0;
  if (temperature < 1e-20) {
    Ranked top{-INFINITY, INT_MAX};  // Math.max over candidates (no NaN): the first maximum
    for_candidates(
        ids, n, [&](int, int32_t id) { return double(work[id]); },
        [&](int i, int32_t, double x) {
          if (top.at == INT_MAX || x > top.v) top = {x, i};
        });
    const double mx = block_first_max(top);
    if (mx != INFINITY && mx != -INFINITY) shift = mx;
  }
  for_candidates(
      ids, n, [&](int, int32_t id) { return double(work[id]); },
      [&](int, int32_t id, double x) { work[id] = float((x - shift) / temperature); });
  __syncthreads();
}

// topP: keys -prob by position.
__device__ int block_top_p(const sampler::RowScratch& s, int n, double p) {
  if (p >= 1 || n <= 1) return n;
  block_softmax(s, n, s.work);
  for_candidates(
      s.ids, n, [&](int, int32_t id) { return s.prob[id]; }, [&](int i, int32_t, double p) { s.stage[i] = -p; });
  __syncthreads();
  return block_mass_prefix(s, n, p);
}

// typicalP: the entropy blocked in ids order (its terms in parallel, js_mul as the port), then
// keys |-log p - H| by position.
__device__ int block_typical_p(const sampler::RowScratch& s, int n, double mass) {
  if (mass >= 1 || n <= 1) return n;
  const double log_norm = block_softmax(s, n, s.work);
  for_candidates(
      s.ids, n, [&](int, int32_t id) { return s.prob[id]; },
      [&](int i, int32_t id, double p) { s.stage[i] = p > 0 ? js::js_mul(p, double(s.work[id]) - log_norm) : 0.0; });
  __syncthreads();
  const double entropy = -block_blocked_sum(s.stage, n, s.chunks);
  for_candidates(
      s.ids, n, [&](int, int32_t id) { return double(s.work[id]); },
      [&](int i, int32_t, double w) {
        const double d = log_norm - w - entropy;
        s.stage[i] = d < 0 ? -d : d;  // Math.abs
      });
  __syncthreads();
  return block_mass_prefix(s, n, mass);
}

// Inclusive prefix sum of `v` over the lanes of the calling warp.
__device__ __forceinline__ uint64_t warp_inclusive_scan(uint64_t v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint64_t got = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += got;
  }
  return v;
}

// The masses of ids[i .. i + kBatch) below i1 (0 past it), their loads issued together.
__device__ __forceinline__ void masses_ahead(const int32_t* ids, const double* prob, int i, int i1,
                                             uint64_t (&m)[kBatch]) {
#pragma unroll
  for (int u = 0; u < kBatch; u++) m[u] = i + u < i1 ? units(prob[ids[i + u]]) : 0;
}

// TokenSampler.draw (n >= 1): the inverse CDF over ids[0, n) in mass units. Each thread sums a
// contiguous segment, a block scan places the segments (integers: exact), and the thread whose
// segment holds u · total walks it.
__device__ int32_t block_draw(const int32_t* ids, int n, const double* prob, uint64_t seed, uint64_t draws) {
  LOOM_SHARED(int32_t, chosen);
  const int per = (n + kSampleThreads - 1) / kSampleThreads;
  const int i0 = int(threadIdx.x) * per < n ? int(threadIdx.x) * per : n;
  const int i1 = i0 + per < n ? i0 + per : n;
  uint64_t mine = 0;
  for (int i = i0; i < i1; i += kBatch) {
    uint64_t m[kBatch];
    masses_ahead(ids, prob, i, i1, m);
#pragma unroll
    for (int u = 0; u < kBatch; u++) mine += m[u];
  }
  const uint64_t lanes_incl = warp_inclusive_scan(mine);
  uint64_t total;
  const uint64_t warp_before = warp_offsets(__shfl_sync(0xffffffffu, lanes_incl, 31), &total);
  const uint64_t before = warp_before + lanes_incl - mine;
  double u = 0;
  if (threadIdx.x == 0) {
    sampler::Stream st = sampler::stream_at(seed, draws);
    u = sampler::next_float(&st);
    chosen = ids[n - 1];  // the JS's fallback: no cumulative mass passes u · total
  }
  const double target = js::js_mul(from_thread0(u), double(total));  // from_thread0 also orders `chosen`
  if (i0 < i1 && double(before) <= target && target < double(before + mine)) {
    uint64_t cumulative = before;
    bool found = false;
    for (int i = i0; i < i1 && !found; i += kBatch) {
      uint64_t m[kBatch];
      masses_ahead(ids, prob, i, i1, m);
#pragma unroll
      for (int u = 0; u < kBatch; u++) {
        if (found || i + u >= i1) break;
        cumulative += m[u];
        if (double(cumulative) > target) {
          chosen = ids[i + u];
          found = true;
        }
      }
    }
  }
  __syncthreads();
  return chosen;
}

// ---- the kernel ----

// A launch's rows' parameters (param-list.h): 16 rows inline (about 1.8 KB of parameters) cover a
// decode batch of 16, so the copy between the LM head and the sampler goes away at the batch
// sizes where one stream operation is a visible share of the step.
constexpr int kSampleInlineRows = 16;
using SampleParamList = ParamList<SampleParams, kSampleInlineRows>;

// Semantics: Device::sample (kernels.h) for row blockIdx.x. params [nrows],
// scratch [nrows, stride] bytes, outputs as in kernels.h.
__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(const float* x, int64_t ld, int64_t V, const __grid_constant__ SampleParamList params, int max_top,
                  int32_t* token, float* logprob, int32_t* top_ids, float* top_lp, uint8_t* scratch, int64_t stride) {
  wait_for_prior_kernels();
  LOOM_SHARED(Pick[kSampleThreads / 32], warps);
  LOOM_SHARED(int[256], hist);
  LOOM_SHARED(uint32_t[2], words);
  LOOM_SHARED(double[kSampleThreads], lanes);
  LOOM_SHARED(int32_t, chosen);
  const int r = blockIdx.x;
  const SampleParams p = list_item(params, r);
  const float* row = x + int64_t(p.row) * ld;
  const sampler::RowScratch s = sampler::row_scratch(scratch + int64_t(r) * stride, V);
  const bool penalised = sampler::penalties_active(p);
  const bool plain = p.allowed == nullptr && !penalised;

  // TokenSampler.sample up to the choice: the working copy (penalties, then the mask).
  if (!(plain && sampler::is_greedy(p))) {
    for_row(
        V, [&](int64_t v) { return row[v]; }, [&](int64_t v, float x) { s.work[v] = x; });
    __syncthreads();
    if (penalised)
      for (int i = threadIdx.x; i < p.n_penalties; i += blockDim.x) sampler::penalise(s.work, V, p.penalties[i], p);
    __syncthreads();
    if (p.allowed != nullptr)
      for_row(
          V, [&](int64_t v) { return s.work[v]; },
          [&](int64_t v, float x) { s.work[v] = sampler::masked(x, p.allowed, v, p.allowed_lift); });
    __syncthreads();
  }

  if (sampler::is_greedy(p)) {
    const int32_t id = block_argmax(plain ? row : s.work, V, warps);
    if (threadIdx.x == 0) chosen = id;
  } else {
    const float* work = s.work;
    int n = compact(V, s.ids, [&](int64_t v) { return work[v] > -INFINITY; });
    const int k = p.top_k;
    if (n > 0 && k > 0 && k < n) {
      // partitionAtLeast keeps the candidates at or above the k-th value in id order (the heap
      // or, for k > kHeapSelectMax, a selection by position: either way only the value matters).
      const float threshold = float(kth_largest(work, s.ids, n, k, hist, words));
      n = compact(V, s.ids, [&](int64_t v) { return work[v] > -INFINITY && work[v] >= threshold; });
    }
    // warp_after_top_k, then the draw.
    int32_t id = -1;
    if (n > 0) {
      block_temperature(s.work, s.ids, n, p.temperature);
      n = block_top_p(s, n, p.top_p);
      n = block_typical_p(s, n, p.typical_p);
      block_softmax(s, n, s.work);
      id = block_draw(s.ids, n, s.prob, p.seed, p.draws);
    }
    if (threadIdx.x == 0) chosen = id;
  }
  __syncthreads();
  const int32_t id = chosen;

  // The report: the raw log-softmax normaliser (f64 sums in tree order: within f32 rounding of
  // the JS value) and the top logprobs, one block pass each.
  Pick mp{-INFINITY, INT_MAX};
  bool nan = false;
  for_row(
      V, [&](int64_t v) { return row[v]; },
      [&](int64_t v, float x) {
        nan = nan || isnan(x);
        if (!isnan(x) && (mp.idx == INT_MAX || x > mp.v)) mp = {x, int(v)};
      });
  const int any_nan = __syncthreads_or(nan);
  const Pick mx = block_best(mp, warps);
  const double max = mx.idx == INT_MAX ? -INFINITY : double(mx.v);
  double part = 0;
  if (max > -INFINITY && !any_nan)
    for_row(
        V, [&](int64_t v) { return row[v]; }, [&](int64_t, float x) { part += exp(double(x) - max); });
  const double sum = block_sum(part, lanes);
  const double log_norm = max == -INFINITY ? max : any_nan ? double(NAN) : max + log(sum);  // logSumExpBelow
  const int count = id < 0 ? 0 : p.top_logprobs < max_top ? p.top_logprobs : max_top;
  Pick prev{INFINITY, -1};
  for (int j = 0; j < max_top; j++) {
    Pick b{0, INT_MAX};
    if (j < count && prev.idx != INT_MAX) {
      Pick q{-INFINITY, INT_MAX};
      for_row(
          V, [&](int64_t v) { return row[v]; },
          [&](int64_t v, float z) {
            if (isnan(z)) return;
            if (j > 0 && !(z < prev.v || (z == prev.v && int(v) > prev.idx))) return;
            if (better(z, int(v), q)) q = {z, int(v)};
          });
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
