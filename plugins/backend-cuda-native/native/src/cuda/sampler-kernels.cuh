// Device::sample on the GPU: one block per row, every step block-parallel, and the token the JS
// sampler's port (reference/sampler-core.h) draws, bit for bit.
//
// Steps whose result does not depend on the order of operations run over the row in any order:
// the working copy, penalties and mask, the greedy argmax, the candidate list (an order-preserving
// compaction, so candidates stay in id order as collectCandidates leaves them), top-k's threshold
// (a radix select of the k-th largest value: only the value matters when k <= 1024), temperature
// and its max, the softmax's max, exps and divisions, the warpers' keys, and the reported
// log-softmax and top logprobs.
//
// The rest decides the token through f64 rounding or through the candidates' order:
// - the f64 sums (the softmax's Σ, massPrefix's masses, typical-p's entropy, the draw's inverse
//   CDF) are added one by one in the JS's order by warp 0 (warp_walk): the lanes fetch 256 terms
//   ahead into shared memory, so the sequential part is one dependent f64 add per term, ~11.5
//   cycles on an H100 (8.2 is the add's latency): ~0.75 ms for a 128k-token softmax. This is
//   the part no parallel form can reproduce, and most of a row's time;
// - selectSmallest's quickselect leaves the candidates in an order that decides where the draw
//   lands, so the block does each Hoare partition itself, exactly (block_partition: the
//   sequential loop's swaps are a pairing of its scans' stops, found by prefix counts), in global
//   memory while the range is large, in shared memory below kSharedSelect elements, and thread 0
//   runs the sequential loop below kSerialSelect. The keys travel with the ids by position
//   (RowScratch::keys_at), so no pass gathers through ids. ~0.3 ms for a 128k-candidate select;
// - sortRange's order is a strict total order (key, then id), but it runs on <= 32 elements: one
//   thread sorts them in shared memory.
// Measured on an H100 at V = 128256, temperature 0.8, top-p 0.95 (trained-like logits, a few
// thousand tokens kept): 2.45 ms for one row alone, 2.9 ms for 32 rows (a block each, in
// parallel); the line-by-line port in one thread took ~165 ms a row.
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

// 512 threads: the passes over a row are latency-bound with one block per row, and 512 ran ~30%
// faster than 256 on an H100 (ptxas then caps registers at 128, with a few spills).
constexpr int kSampleThreads = 512;
constexpr int kSampleWarps = kSampleThreads / 32;
// A selection range of at most this many elements is partitioned in shared memory (16 bytes an
// element: ids, keys, positions)...
constexpr int kSharedSelect = 2048;
// ...and one of at most this many by thread 0 alone (a block round costs ~5 barriers).
constexpr int kSerialSelect = 32;
// warp_walk's lookahead: each lane fetches this many terms per step of 32 * kWalkAhead.
constexpr int kWalkAhead = 8;
// Loads in flight per thread (one block per row has few warps to hide latency with): groups of
// 32 keys a warp in a partition's first pass and in compactions, pairs a thread in its swaps.
constexpr int kGroupsAhead = 4;
constexpr int kSwapsAhead = 4;

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

// The JS argmax of w[0, V): the first maximum, -1 when nothing beats -inf (NaN never wins).
__device__ int32_t block_argmax(const float* w, int64_t V, Pick* warps) {
  Pick p{-INFINITY, INT_MAX};
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
    if (w[v] > -INFINITY && better(w[v], int(v), p)) p = {w[v], int(v)};
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

__device__ double block_min(double v) {
  LOOM_SHARED(double[kSampleWarps], parts);
  return block_fold(v, [](double a, double b) { return b < a ? b : a; }, parts);
}

// For the candidates i < n (id = ids[i]), use(i, id, load(i, id)), kBatch a thread at a time with
// their loads first: one block per row has too few warps to hide a gather's latency otherwise.
constexpr int kBatch = 4;
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

// The same in place over ids[0, n) (keep(id)), through `tmp` [n]: partitionAtLeast's kept
// prefix, in order. What it leaves past the count differs from the JS's, and nothing reads it.
template <typename Keep>
__device__ int compact_ids(int32_t* ids, int n, Keep keep, int32_t* tmp) {
  const int kept = compact_items(
      n, [&](int64_t i) { return keep(ids[i]); }, [&](int64_t i) { return ids[i]; }, tmp);
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

// ---- sums in the JS's order ----

// warp_walk's staging: 32 * kWalkAhead terms (one instance per block).
__device__ double* walk_stage() {
  LOOM_SHARED(double[32 * kWalkAhead], stage);
  return stage;
}

// Warp 0 only (all 32 lanes): *acc = fold(*acc, value(i)) for i = lo, lo + 1, ... < hi in order
// on every lane (fold: the JS loop's f64 op), until stop(i, acc before i, acc after i) holds;
// returns that i (*acc: after it), or hi. The lanes fetch the terms, which do not depend on the
// walk, 32 * kWalkAhead at a time and one step ahead, into shared memory. A whole step's folds
// then run as one straight chain (no branches: their stops are or-ed aside, and a step that hit
// one is replayed term by term from its start, which finds the same index and acc), so what stays
// sequential is one dependent f64 op per term.
template <typename Value, typename Fold, typename Stop>
__device__ int warp_walk(int lo, int hi, double* acc, Value value, Fold fold, Stop stop) {
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
    fetch(base + kStep);  // in flight during this step's folds
    const int count = hi - base < kStep ? hi - base : kStep;
    const double start = a;
    bool hit = false;
    if (count == kStep) {
#pragma unroll
      for (int k = 0; k < kStep; k++) {
        const double before = a;
        a = fold(a, stage[k]);
        hit = hit || stop(base + k, before, a);
      }
    }
    if (hit || count < kStep) {  // term by term: a stop's index, or the last step
      a = start;
      for (int k = 0; k < count; k++) {
        const double before = a;
        a = fold(a, stage[k]);
        if (stop(base + k, before, a)) {
          *acc = a;
          return base + k;
        }
      }
    }
  }
  *acc = a;
  return hi;
}

__device__ __forceinline__ double add(double a, double b) { return a + b; }
__device__ __forceinline__ bool never(int, double, double) { return false; }

// Σ value(i) for i in [lo, hi), added in order from 0 (the JS's loops); every thread gets it.
template <typename Value>
__device__ double block_ordered_sum(int lo, int hi, Value value) {
  double sum = 0;
  if (threadIdx.x < 32) warp_walk(lo, hi, &sum, value, add, never);
  return from_thread0(sum);
}

// massOf: Σ prob[ids[i]] over [lo, hi) in order.
__device__ double block_mass_of(const int32_t* ids, int lo, int hi, const double* prob) {
  return block_ordered_sum(lo, hi, [&](int i) { return prob[ids[i]]; });
}

// ---- selectSmallest by the block ----
//
// One round of select_smallest partitions [left, right] around the pivot P with two scans: i
// stops at "A stops", the positions with !(key < P), j at "B stops", !(key > P) (an element equal
// to P is both; so is a NaN). Number the A stops A[0] < A[1] < ... and the B stops B[0] > B[1] >
// ... as they are before the round. The loop's k-th swap exchanges A[k] and B[k], for exactly the
// k < m with A[k] < B[k] (a prefix of k: A rises, B falls): a swap leaves a B element at A[k] and
// an A element at B[k], so the next scans stop at min(A[k+1], B[k]) and max(B[k+1], A[k]), the
// untouched stops, while A[k+1] < B[k+1]. With a = A[m-1], b = B[m-1] (left - 1, right + 1 when
// m = 0), the scans end at i = min(A[m], b), j = max(B[m], a), except when A[m] == B[m] lies
// strictly between a and b: one element equal to the pivot met by both scans, which the loop
// swaps with itself, ending at i = A[m] + 1, j = A[m] - 1.
// A[r] < B[r] holds iff more than r B stops lie after A[r] (and B[r] > A[r] iff more than r A
// stops lie before B[r]), so prefix counts of the stops give every pair: each warp ballots its
// run of 32-position groups into two bit masks a group and counts them, a scan over the warps
// ranks them, a second pass over the masks alone writes the pairs' positions, and the pairs
// (disjoint: 2m <= len) swap in parallel. A brute-force check of this against the loop, on arrays
// with many ties and NaN keys, agreed on ~1.2M rounds.

// Where select_smallest's scans stopped after a round: the next range is [left, j] or [i, right].
struct Cut {
  int i, j;
};

// One lane's part of a round: its A stops that pair (A[r] < B[r]), the last of them, the first of
// its paired B stops, and its first unpaired A stop and last unpaired B stop.
struct Stops {
  int pairs;
  int last_pair_a;   // INT_MIN: none
  int first_pair_b;  // INT_MAX: none
  int next_a;        // INT_MAX: none
  int next_b;        // INT_MIN: none
};

__device__ __forceinline__ Stops shfl_xor(const Stops& s, int o) {
  return {shfl_xor(s.pairs, o), shfl_xor(s.last_pair_a, o), shfl_xor(s.first_pair_b, o), shfl_xor(s.next_a, o),
          shfl_xor(s.next_b, o)};
}

__device__ __forceinline__ Stops merge_stops(const Stops& x, const Stops& y) {
  return {x.pairs + y.pairs, max(x.last_pair_a, y.last_pair_a), min(x.first_pair_b, y.first_pair_b),
          min(x.next_a, y.next_a), max(x.next_b, y.next_b)};
}

// One round of select_smallest on [left, right] (right > left) of ids with their keys by
// position (`keys`, permuted alongside), by the whole block: leaves both arrays and returns the
// scans' stops as the sequential loop does. pos: scratch of right - left + 1 ints; masks: of
// 2 * ceil((right - left + 1) / 32) words.
__device__ Cut block_partition(int32_t* ids, double* keys, int left, int right, int32_t* pos, uint32_t* masks) {
  LOOM_SHARED(Stops[kSampleWarps], parts);
  const int mid = int((unsigned(left) + unsigned(right)) >> 1);
  const double pivot = sampler::median_of_three(keys[left], keys[mid], keys[right]);
  const int len = right - left + 1, half = len / 2, lane = threadIdx.x & 31;
  int64_t g0, g1;
  warp_groups(len, &g0, &g1);
  // Pass 1: each group's A and B stops as two bit masks (lane order is position order), and the
  // warp's counts, ranked by one scan over the warps (A count high, B count low).
  uint32_t a_count = 0, b_count = 0;
  double next[kGroupsAhead];
  auto fetch = [&](int64_t g) {  // the keys of groups g, g + 1, ... (loads in flight meanwhile)
#pragma unroll
    for (int u = 0; u < kGroupsAhead; u++) {
      const int64_t p = (g + u) * 32 + lane;
      next[u] = g + u < g1 && p < len ? keys[left + p] : 0.0;
    }
  };
  fetch(g0);
  for (int64_t g = g0; g < g1; g += kGroupsAhead) {
    double x[kGroupsAhead];
#pragma unroll
    for (int u = 0; u < kGroupsAhead; u++) x[u] = next[u];
    fetch(g + kGroupsAhead);
#pragma unroll
    for (int u = 0; u < kGroupsAhead; u++) {
      const bool in = g + u < g1 && (g + u) * 32 + lane < len;
      const uint32_t ma = __ballot_sync(0xffffffffu, in && !(x[u] < pivot));
      const uint32_t mb = __ballot_sync(0xffffffffu, in && !(x[u] > pivot));
      if (lane == 0 && g + u < g1) {
        masks[2 * (g + u)] = ma;
        masks[2 * (g + u) + 1] = mb;
      }
      a_count += __popc(ma);
      b_count += __popc(mb);
    }
  }
  uint64_t total;
  const uint64_t before = warp_offsets((uint64_t(a_count) << 32) | b_count, &total);  // publishes masks
  const int all_b = int(uint32_t(total));
  // Pass 2, from the masks alone: pair the stops. pos[r] = A[r], pos[half + r] = B[r], r < m.
  int a_run = int(before >> 32), b_run = int(uint32_t(before));
  const uint32_t below = lanes_below(), upto = below | (1u << lane);
  Stops s{0, INT_MIN, INT_MAX, INT_MAX, INT_MIN};
  for (int64_t gb = g0; gb < g1; gb += 32) {
    // The masks of 32 groups arrive in one load, a group a lane, and go round by shuffles.
    uint32_t mine_a = 0, mine_b = 0;
    if (gb + lane < g1) {
      mine_a = masks[2 * (gb + lane)];
      mine_b = masks[2 * (gb + lane) + 1];
    }
    const int groups = g1 - gb < 32 ? int(g1 - gb) : 32;
    for (int j = 0; j < groups; j++) {
      const uint32_t ma = __shfl_sync(0xffffffffu, mine_a, j), mb = __shfl_sync(0xffffffffu, mine_b, j);
      const int p = left + int(gb + j) * 32 + lane;
      const bool is_a = (ma >> lane) & 1u, is_b = (mb >> lane) & 1u;
      const int a_before = a_run + __popc(ma & below);
      const int b_after = all_b - (b_run + __popc(mb & upto));  // B stops after p: p's rank among them
      if (is_a) {
        if (b_after > a_before) {  // A[a_before] = p < B[a_before]
          s.pairs++;
          s.last_pair_a = p;
          pos[a_before] = p;
        } else if (s.next_a == INT_MAX) {
          s.next_a = p;
        }
      }
      if (is_b) {
        if (a_before > b_after) {  // A[b_after] < p = B[b_after]
          if (s.first_pair_b == INT_MAX) s.first_pair_b = p;
          pos[half + b_after] = p;
        } else {
          s.next_b = p;
        }
      }
      a_run += __popc(ma);
      b_run += __popc(mb);
    }
  }
  const Stops t = block_fold(s, merge_stops, parts);  // its barriers publish pos
  // The pairs are disjoint: they swap in parallel, kSwapsAhead a thread with their loads first.
  for (int k0 = threadIdx.x; k0 < t.pairs; k0 += kSwapsAhead * kSampleThreads) {
    int pa[kSwapsAhead], pb[kSwapsAhead];
    int32_t ia[kSwapsAhead] = {}, ib[kSwapsAhead] = {};
    double ka[kSwapsAhead] = {}, kb[kSwapsAhead] = {};
#pragma unroll
    for (int u = 0; u < kSwapsAhead; u++) {
      const int k = k0 + u * kSampleThreads;
      pa[u] = k < t.pairs ? pos[k] : -1;
      pb[u] = k < t.pairs ? pos[half + k] : -1;
    }
#pragma unroll
    for (int u = 0; u < kSwapsAhead; u++)
      if (pa[u] >= 0) {
        ia[u] = ids[pa[u]];
        ib[u] = ids[pb[u]];
        ka[u] = keys[pa[u]];
        kb[u] = keys[pb[u]];
      }
#pragma unroll
    for (int u = 0; u < kSwapsAhead; u++)
      if (pa[u] >= 0) {
        ids[pa[u]] = ib[u];
        keys[pa[u]] = kb[u];
        ids[pb[u]] = ia[u];
        keys[pb[u]] = ka[u];
      }
  }
  __syncthreads();
  const int a = t.pairs > 0 ? t.last_pair_a : left - 1, bb = t.pairs > 0 ? t.first_pair_b : right + 1;
  if (t.next_a == t.next_b && a < t.next_a && t.next_a < bb) return {t.next_a + 1, t.next_a - 1};
  return {min(t.next_a, bb), max(t.next_b, a)};
}

// select_smallest's loop from [left, right] on ids with keys by position: thread 0 finishing a
// small range in shared memory.
__device__ void serial_select(int32_t* ids, double* keys, int left, int right, int target) {
  while (right > left) {
    const int mid = int((unsigned(left) + unsigned(right)) >> 1);
    const double pivot = sampler::median_of_three(keys[left], keys[mid], keys[right]);
    int i = left, j = right;
    while (i <= j) {
      while (keys[i] < pivot) i++;
      while (keys[j] > pivot) j--;
      if (i <= j) {
        const int32_t id = ids[i];
        const double key = keys[i];
        ids[i] = ids[j];
        keys[i] = keys[j];
        ids[j] = id;
        keys[j] = key;
        i++;
        j--;
      }
    }
    if (target <= j)
      right = j;
    else if (target >= i)
      left = i;
    else
      return;
  }
}

// select_smallest's rounds from [left, right] (at most kSharedSelect elements) in shared memory.
// Positions shift by `left` there, which changes no midpoint: (l + r) / 2 shifts with them.
__device__ void shared_select(int32_t* ids, double* keys, int left, int right, int target) {
  LOOM_SHARED(int32_t[kSharedSelect], s_ids);
  LOOM_SHARED(double[kSharedSelect], s_keys);
  LOOM_SHARED(int32_t[kSharedSelect], s_pos);
  LOOM_SHARED(uint32_t[kSharedSelect / 16], s_masks);
  if (right <= left) return;
  const int len = right - left + 1;
  for (int p = threadIdx.x; p < len; p += kSampleThreads) {
    s_ids[p] = ids[left + p];
    s_keys[p] = keys[left + p];
  }
  __syncthreads();
  int l = 0, r = len - 1;
  const int t = target - left;
  bool open = true;
  while (open && r - l + 1 > kSerialSelect) {
    const Cut c = block_partition(s_ids, s_keys, l, r, s_pos, s_masks);
    if (t <= c.j)
      r = c.j;
    else if (t >= c.i)
      l = c.i;
    else
      open = false;
  }
  if (open && threadIdx.x == 0) serial_select(s_ids, s_keys, l, r, t);
  __syncthreads();
  for (int p = threadIdx.x; p < len; p += kSampleThreads) {
    ids[left + p] = s_ids[p];
    keys[left + p] = s_keys[p];
  }
  __syncthreads();
}

// selectSmallest by the block: the same permutation of ids[lo, hi) as sampler::select_smallest
// (its rounds, one by one, each done in parallel). keys[p] is key[ids[p]] on [lo, hi) and stays
// so. pos and masks: scratch (RowScratch's).
__device__ void block_select_smallest(int32_t* ids, double* keys, int lo, int hi, int k, int32_t* pos,
                                      uint32_t* masks) {
  if (k <= 0 || k >= hi - lo) return;
  const int target = lo + k - 1;
  int left = lo, right = hi - 1;
  while (right - left + 1 > kSharedSelect) {
    const Cut c = block_partition(ids, keys, left, right, pos, masks);
    if (target <= c.j)
      right = c.j;
    else if (target >= c.i)
      left = c.i;
    else
      return;
  }
  shared_select(ids, keys, left, right, target);
}

// sort_range for hi - lo <= kSortBelow (its insertion sort), by thread 0 on shared copies; keys
// by position, kept so.
__device__ void small_sort(int32_t* ids, double* keys, int lo, int hi) {
  LOOM_SHARED(int32_t[sampler::kSortBelow], v);
  LOOM_SHARED(double[sampler::kSortBelow], kv);
  const int n = hi - lo;
  if (int(threadIdx.x) < n) {
    v[threadIdx.x] = ids[lo + threadIdx.x];
    kv[threadIdx.x] = keys[lo + threadIdx.x];
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int i = 1; i < n; i++) {
      const int32_t x = v[i];
      const double kx = kv[i];
      int j = i;
      for (; j > 0 && (kx < kv[j - 1] || (kx == kv[j - 1] && x < v[j - 1])); j--) {  // key_before
        v[j] = v[j - 1];
        kv[j] = kv[j - 1];
      }
      v[j] = x;
      kv[j] = kx;
    }
  __syncthreads();
  if (int(threadIdx.x) < n) {
    ids[lo + threadIdx.x] = v[threadIdx.x];
    keys[lo + threadIdx.x] = kv[threadIdx.x];
  }
  __syncthreads();
}

// ---- the warpers by the block (sampler-core.h's: the same candidates, order and prob) ----
//
// They order candidates by s.keys_at, the key by position (key[ids[p]] of the port), which the
// selections keep aligned as they move ids: no gathers through ids, and s.key goes unused.

// crossing.
__device__ int block_crossing(const sampler::RowScratch& s, int lo, int hi, double mass, double cumulative) {
  while (hi - lo > sampler::kSortBelow) {
    const int mid = int((unsigned(lo) + unsigned(hi)) >> 1);
    block_select_smallest(s.ids, s.keys_at, lo, hi, mid - lo, s.pos, s.masks);
    const double half = block_mass_of(s.ids, lo, mid, s.prob);
    if (cumulative + half >= mass) {
      hi = mid;
    } else {
      cumulative += half;
      lo = mid;
    }
  }
  small_sort(s.ids, s.keys_at, lo, hi);
  int cut = hi;
  if (threadIdx.x < 32)
    cut = warp_walk(lo, hi, &cumulative, [&](int i) { return s.prob[s.ids[i]]; }, add,
                    [&](int i, double before, double) { return i > 0 && before >= mass; });
  return from_thread0(cut);
}

// massPrefix over ids[0, n) by s.keys_at.
__device__ int block_mass_prefix(const sampler::RowScratch& s, int n, double mass) {
  int lo = 0;
  double cumulative = 0;
  int chunk = 64;
  while (lo < n) {
    const int hi = n < lo + chunk ? n : lo + chunk;
    block_select_smallest(s.ids, s.keys_at, lo, n, hi - lo, s.pos, s.masks);
    const double chunk_mass = block_mass_of(s.ids, lo, hi, s.prob);
    if (cumulative + chunk_mass < mass && hi < n) {
      cumulative += chunk_mass;
      lo = hi;
      chunk *= 4;
      continue;
    }
    return block_crossing(s, lo, hi, mass, cumulative);
  }
  return n;
}

// softmaxOver (n >= 1): prob[id] = exp(values[id] - max) / Σ, the Σ in ids order; returns
// max + log Σ. The exps are staged by position in `staged` [n] for the ordered sum.
__device__ double block_softmax(const int32_t* ids, int n, const float* values, double* prob, double* staged) {
  Ranked top{-INFINITY, INT_MAX};
  for_candidates(
      ids, n, [&](int, int32_t id) { return double(values[id]); },
      [&](int i, int32_t, double x) {
        if (top.at == INT_MAX || x > top.v) top = {x, i};  // i ascends within a thread
      });
  const double mx = block_first_max(top);
  for_candidates(
      ids, n, [&](int, int32_t id) { return double(values[id]); },
      [&](int i, int32_t id, double x) {
        const double e = js::exp(x - mx);
        prob[id] = e;
        staged[i] = e;
      });
  __syncthreads();
  const double sum = block_ordered_sum(0, n, [&](int i) { return staged[i]; });
  for_candidates(
      ids, n, [&](int i, int32_t) { return staged[i]; }, [&](int, int32_t id, double e) { prob[id] = e / sum; });
  __syncthreads();
  return mx + js::log(sum);
}

// topK's keep for k > kHeapSelectMax: the k smallest -work by selectSmallest, their minimum
// work as the threshold, partitionAtLeast's kept prefix.
__device__ int block_top_k_keep(const sampler::RowScratch& s, int n, int k) {
  for_candidates(
      s.ids, n, [&](int, int32_t id) { return s.work[id]; },
      [&](int i, int32_t, float w) { s.keys_at[i] = -double(w); });
  __syncthreads();
  block_select_smallest(s.ids, s.keys_at, 0, n, k, s.pos, s.masks);
  double threshold = INFINITY;  // Math.min over the k (no NaN; ±0 compare equal below)
  for (int i = threadIdx.x; i < k; i += kSampleThreads) {
    const double x = s.work[s.ids[i]];
    threshold = x < threshold ? x : threshold;
  }
  threshold = block_min(threshold);
  const float* work = s.work;
  return compact_ids(s.ids, n, [&](int32_t id) { return double(work[id]) >= threshold; }, s.pos);
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

// topP.
__device__ int block_top_p(const sampler::RowScratch& s, int n, double p) {
  if (p >= 1 || n <= 1) return n;
  block_softmax(s.ids, n, s.work, s.prob, s.keys_at);
  for_candidates(
      s.ids, n, [&](int, int32_t id) { return s.prob[id]; }, [&](int i, int32_t, double p) { s.keys_at[i] = -p; });
  __syncthreads();
  return block_mass_prefix(s, n, p);
}

// typicalP: the entropy summed in ids order (its terms in parallel, js_mul as the port).
__device__ int block_typical_p(const sampler::RowScratch& s, int n, double mass) {
  if (mass >= 1 || n <= 1) return n;
  const double log_norm = block_softmax(s.ids, n, s.work, s.prob, s.keys_at);
  double entropy = 0;
  if (threadIdx.x < 32)
    warp_walk(
        0, n, &entropy,
        [&](int i) {
          const int32_t id = s.ids[i];
          const double p = s.prob[id];
          return p > 0 ? js::js_mul(p, double(s.work[id]) - log_norm) : 0.0;
        },
        [](double e, double term) { return e - term; },  // x - (+0) is x, bit for bit: the skipped terms
        never);
  entropy = from_thread0(entropy);
  for_candidates(
      s.ids, n, [&](int, int32_t id) { return double(s.work[id]); },
      [&](int i, int32_t, double w) {
        const double d = log_norm - w - entropy;
        s.keys_at[i] = d < 0 ? -d : d;  // Math.abs
      });
  __syncthreads();
  return block_mass_prefix(s, n, mass);
}

// TokenSampler.draw (n >= 1): the inverse CDF walked in order by warp 0.
__device__ int32_t block_draw(const int32_t* ids, int n, const double* prob, uint64_t seed, uint64_t draws) {
  int at = n;
  if (threadIdx.x < 32) {
    sampler::Stream st = sampler::stream_at(seed, draws);
    const double u = sampler::next_float(&st);
    double cumulative = 0;
    at = warp_walk(0, n, &cumulative, [&](int i) { return prob[ids[i]]; }, add,
                   [&](int, double, double after) { return u < after; });
  }
  at = from_thread0(at);
  return ids[at < n ? at : n - 1];
}

// ---- the kernel ----

// Semantics: Device::sample (kernels.h) for row blockIdx.x. params [nrows] (staged copy),
// scratch [nrows, stride] bytes, outputs as in kernels.h.
__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(const float* x, int64_t ld, int64_t V, const SampleParams* params, int max_top, int32_t* token,
                  float* logprob, int32_t* top_ids, float* top_lp, uint8_t* scratch, int64_t stride) {
  LOOM_SHARED(Pick[kSampleThreads / 32], warps);
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
    int n = compact(V, s.ids, [&](int64_t v) { return work[v] > -INFINITY; });
    const int k = p.top_k;
    if (n > 0 && k > 0 && k < n) {
      if (k <= sampler::kHeapSelectMax) {
        // partitionAtLeast keeps the candidates at or above the k-th value in id order.
        const float threshold = float(kth_largest(work, s.ids, n, k, hist, words));
        n = compact(V, s.ids, [&](int64_t v) { return work[v] > -INFINITY && work[v] >= threshold; });
      } else {
        n = block_top_k_keep(s, n, k);
      }
    }
    // warp_after_top_k, then the draw.
    int32_t id = -1;
    if (n > 0) {
      block_temperature(s.work, s.ids, n, p.temperature);
      n = block_top_p(s, n, p.top_p);
      n = block_typical_p(s, n, p.typical_p);
      block_softmax(s.ids, n, s.work, s.prob, s.keys_at);
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
