// The engine's token sampler (core/src/engine/sampler/*.ts) ported line by line, for the
// Device::sample op of every device: the reference runs it per row, the cpu device per row on
// its pool; the cuda kernel (cuda/sampler-kernels.cuh) runs block-parallel versions of these
// functions that leave the candidates, their order and their probabilities as they do, and calls
// the small pieces directly.
//
// Exactness is the point, so this mirrors the JS arithmetic, not just its mathematics:
// - JS numbers are f64: every sum, product and comparison the JS does in f64 is done in f64 here,
//   in the same order, and values the JS stores into a Float32Array are rounded to f32 here;
// - Math.exp / Math.log are fdlibm's (js-math.h), not the C library's;
// - no FMA contraction (JS never fuses): js_mul on the device, the pragma below on the host;
// - the sums that decide a token are defined so that order does not matter or is fixed
//   (blocked-sum.ts): the softmax's Σ and typical-p's entropy are blocked (kSumChunk terms a
//   chunk), and probability masses are exact integers (mass_units); candidates stay in id order;
//   selections order by (key, id), a strict total order. So the cuda kernel may find the same
//   sets and sums by any parallel route, and this port need not copy the JS's pivots.
// Each function names the TS function it mirrors.
#pragma once

#if !defined(__CUDACC__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/kernels.h"
#include "reference/js-math.h"

namespace loom {
namespace sampler {

// kth-largest.ts HEAP_SELECT_MAX; mass-prefix.ts SORT_BELOW; blocked-sum.ts SUM_CHUNK, MASS_SCALE.
constexpr int kHeapSelectMax = 1024;
constexpr int kSortBelow = 32;
constexpr int kSumChunk = 256;
constexpr double kMassScale = 4503599627370496.0;  // 2^52

LOOM_HD double inf() { return __builtin_huge_val(); }
LOOM_HD bool is_nan(double x) { return x != x; }

// ---- blocked-sum.ts ----

// massUnits: floor(p · 2^52), an exact integer (p in [0, 1]); sums of them are exact below 2^53.
LOOM_HD double mass_units(double p) { return floor(p * kMassScale); }

// blockedSum: chunks of kSumChunk terms, each added in order from 0, then the chunk sums in order.
template <typename Term>
LOOM_HD double blocked_sum(int n, Term term) {
  double total = 0;
  for (int c = 0; c < n; c += kSumChunk) {
    const int end = n < c + kSumChunk ? n : c + kSumChunk;
    double chunk = 0;
    for (int i = c; i < end; i++) chunk += term(i);
    total += chunk;
  }
  return total;
}

// ---- rng.ts ----

// xoshiro128** 1.0 state, seeded by two SplitMix64 outputs (Xoshiro128StarStar's constructor).
struct Stream {
  uint32_t s0, s1, s2, s3;
};

LOOM_HD uint64_t splitmix_next(uint64_t* state) {
  *state += 0x9e3779b97f4a7c15ull;
  uint64_t z = *state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

LOOM_HD uint32_t rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }

LOOM_HD uint32_t next_u32(Stream* s) {
  const uint32_t result = rotl(s->s1 * 5u, 7) * 9u;
  const uint32_t t = s->s1 << 9;
  s->s2 ^= s->s0;
  s->s3 ^= s->s1;
  s->s1 ^= s->s2;
  s->s0 ^= s->s3;
  s->s2 ^= t;
  s->s3 = rotl(s->s3, 11);
  return result;
}

// nextFloat: 53 random bits from two draws, (hi * 2^26 + lo) / 2^53 (exact in f64).
LOOM_HD double next_float(Stream* s) {
  const uint32_t hi = next_u32(s) >> 5;
  const uint32_t lo = next_u32(s) >> 6;
  return (double(hi) * 67108864.0 + double(lo)) / 9007199254740992.0;
}

// The stream of `seed` after `draws` nextFloat calls. O(draws): two steps per earlier draw.
LOOM_HD Stream stream_at(uint64_t seed, uint64_t draws) {
  uint64_t mix = seed;
  const uint64_t a = splitmix_next(&mix), b = splitmix_next(&mix);
  Stream s{uint32_t(a), uint32_t(a >> 32), uint32_t(b), uint32_t(b >> 32)};
  if ((s.s0 | s.s1 | s.s2 | s.s3) == 0) s.s0 = 1;  // the all-zero state is a fixed point
  for (uint64_t i = 0; i < 2 * draws; i++) next_u32(&s);
  return s;
}

// ---- select.ts ----

// The selections' order: ascending key, ties by ascending id. A strict total order for non-NaN
// keys, so any correct selection or sort gives the JS result.
LOOM_HD bool key_before(const double* key, int32_t a, int32_t b) {
  return key[a] < key[b] || (key[a] == key[b] && a < b);
}

// The id among three that is second in key_before's order.
LOOM_HD int32_t median_of_three(const double* key, int32_t a, int32_t b, int32_t c) {
  if (key_before(key, a, b)) return key_before(key, b, c) ? b : key_before(key, a, c) ? c : a;
  return key_before(key, a, c) ? a : key_before(key, b, c) ? c : b;
}

// selectSmallest: ids[lo, lo + k) get the k first ids in key_before's order (Hoare partition).
LOOM_HD void select_smallest(int32_t* ids, int lo, int hi, int k, const double* key) {
  if (k <= 0 || k >= hi - lo) return;
  const int target = lo + k - 1;
  int left = lo, right = hi - 1;
  while (right > left) {
    const int mid = int((unsigned(left) + unsigned(right)) >> 1);
    const int32_t pivot = median_of_three(key, ids[left], ids[mid], ids[right]);
    int i = left, j = right;
    while (i <= j) {
      while (key_before(key, ids[i], pivot)) i++;
      while (key_before(key, pivot, ids[j])) j--;
      if (i <= j) {
        const int32_t tmp = ids[i];
        ids[i] = ids[j];
        ids[j] = tmp;
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

// sortRange (key_before's order; heapsort needs no recursion or extra memory).
LOOM_HD void sift_down(int32_t* v, int at, int n, const double* key) {
  for (;;) {
    int child = 2 * at + 1;
    if (child >= n) return;
    if (child + 1 < n && key_before(key, v[child], v[child + 1])) child++;
    if (!key_before(key, v[at], v[child])) return;
    const int32_t t = v[at];
    v[at] = v[child];
    v[child] = t;
    at = child;
  }
}

LOOM_HD void sort_range(int32_t* ids, int lo, int hi, const double* key) {
  int32_t* v = ids + lo;
  const int n = hi - lo;
  if (n < 2) return;
  if (n <= kSortBelow) {  // insertion sort
    for (int i = 1; i < n; i++) {
      const int32_t x = v[i];
      int j = i;
      for (; j > 0 && key_before(key, x, v[j - 1]); j--) v[j] = v[j - 1];
      v[j] = x;
    }
    return;
  }
  for (int i = n / 2 - 1; i >= 0; i--) sift_down(v, i, n, key);
  for (int end = n - 1; end > 0; end--) {
    const int32_t t = v[0];
    v[0] = v[end];
    v[end] = t;
    sift_down(v, 0, end, key);
  }
}

// ids[0, n) in ascending order (the kept prefix's `.sort()`): std::sort on the host, heapsort
// (no recursion, no memory) on a device.
LOOM_HD void sort_ids(int32_t* v, int n) {
#if !defined(__CUDA_ARCH__)
  std::sort(v, v + n);
#else
  auto sift = [v](int at, int end) {
    for (;;) {
      int child = 2 * at + 1;
      if (child >= end) return;
      if (child + 1 < end && v[child] < v[child + 1]) child++;
      if (v[at] >= v[child]) return;
      const int32_t t = v[at];
      v[at] = v[child];
      v[child] = t;
      at = child;
    }
  };
  for (int i = n / 2 - 1; i >= 0; i--) sift(i, n);
  for (int end = n - 1; end > 0; end--) {
    const int32_t t = v[0];
    v[0] = v[end];
    v[end] = t;
    sift(0, end);
  }
#endif
}

// ---- kth-largest.ts ----

// kthLargestOf: the k-th largest of values[ids[i<n]] (NaN ignored; -inf when fewer than k), by
// a size-k min-heap in `heap`.
LOOM_HD double kth_largest_of(const float* values, const int32_t* ids, int n, int k, double* heap) {
  int size = 0;
  for (int i = 0; i < n; i++) {
    const double x = values[ids[i]];
    if (size < k) {
      if (is_nan(x)) continue;
      int at = size++;
      while (at > 0) {
        const int parent = (at - 1) >> 1;
        if (heap[parent] <= x) break;
        heap[at] = heap[parent];
        at = parent;
      }
      heap[at] = x;
    } else if (x > heap[0]) {
      int at = 0;
      for (;;) {
        const int left = 2 * at + 1;
        if (left >= k) break;
        const int right = left + 1;
        const int child = right < k && heap[right] < heap[left] ? right : left;
        if (heap[child] >= x) break;
        heap[at] = heap[child];
        at = child;
      }
      heap[at] = x;
    }
  }
  return size < k ? -inf() : heap[0];
}

// partitionAtLeast: ids with values >= threshold to the front, in their order; returns how many.
LOOM_HD int partition_at_least(const float* values, int32_t* ids, int n, double threshold) {
  int kept = 0;
  for (int i = 0; i < n; i++) {
    const int32_t id = ids[i];
    if (double(values[id]) >= threshold) {
      ids[i] = ids[kept];
      ids[kept++] = id;
    }
  }
  return kept;
}

// ---- softmax.ts ----

// softmaxOver: prob[id] = exp(values[id] - max) / Σ over ids[0, n), Σ blocked; returns
// max + log Σ.
LOOM_HD double softmax_over(const int32_t* ids, int n, const float* values, double* prob) {
  double max = -inf();
  for (int i = 0; i < n; i++) {
    const double x = values[ids[i]];
    if (x > max) max = x;
  }
  for (int i = 0; i < n; i++) prob[ids[i]] = js::exp(double(values[ids[i]]) - max);
  const double sum = blocked_sum(n, [&](int i) { return prob[ids[i]]; });
  for (int i = 0; i < n; i++) prob[ids[i]] /= sum;
  return max + js::log(sum);
}

// logSumExp over a raw row (the reported logprobs' normaliser), summed in id order.
LOOM_HD double log_sum_exp(const float* row, int64_t V) {
  double max = -inf();
  for (int64_t v = 0; v < V; v++)
    if (double(row[v]) > max) max = row[v];
  if (max == -inf() || is_nan(max)) return max;
  double sum = 0;
  for (int64_t v = 0; v < V; v++) sum += js::exp(double(row[v]) - max);
  return max + js::log(sum);
}

// ---- mass-prefix.ts ----

// massOf, in mass units.
LOOM_HD double mass_of(const int32_t* ids, int lo, int hi, const double* prob) {
  double sum = 0;
  for (int i = lo; i < hi; i++) sum += mass_units(prob[ids[i]]);
  return sum;
}

// crossing: the cut inside ids[lo, hi) given `cumulative` mass before lo (mass units).
LOOM_HD int crossing(int32_t* ids, int lo, int hi, const double* key, const double* prob, double mass,
                     double cumulative) {
  while (hi - lo > kSortBelow) {
    const int mid = int((unsigned(lo) + unsigned(hi)) >> 1);
    select_smallest(ids, lo, hi, mid - lo, key);
    const double half = mass_of(ids, lo, mid, prob);
    if (cumulative + half >= mass) {
      hi = mid;
    } else {
      cumulative += half;
      lo = mid;
    }
  }
  sort_range(ids, lo, hi, key);
  for (int i = lo; i < hi; i++) {
    if (i > 0 && cumulative >= mass) return i;
    cumulative += mass_units(prob[ids[i]]);
  }
  return hi;
}

// prefixLength: the shortest key_before-ordered prefix of ids[0, n) whose mass (units) reaches
// `mass`; leaves that prefix in ids[0, result).
LOOM_HD int prefix_length(int32_t* ids, int n, const double* key, const double* prob, double mass) {
  int lo = 0;
  double cumulative = 0;
  int chunk = 64;
  while (lo < n) {
    const int hi = n < lo + chunk ? n : lo + chunk;
    select_smallest(ids, lo, n, hi - lo, key);
    const double chunk_mass = mass_of(ids, lo, hi, prob);
    if (cumulative + chunk_mass < mass && hi < n) {
      cumulative += chunk_mass;
      lo = hi;
      chunk *= 4;
      continue;
    }
    return crossing(ids, lo, hi, key, prob, mass, cumulative);
  }
  return n;
}

// massPrefix: the prefix above for a probability `mass`, kept in ascending id order.
LOOM_HD int mass_prefix(int32_t* ids, int n, const double* key, const double* prob, double mass) {
  const int kept = prefix_length(ids, n, key, prob, mass * kMassScale);
  sort_ids(ids, kept);
  return kept;
}

// ---- the warpers ----

// A row's scratch (candidates.ts WarpScratch plus the working copy), each [V] unless said. The
// last four serve only the cuda kernel's block-parallel steps (sampler-kernels.cuh): terms and
// keys by candidate position (f64), blockedSum's chunk sums ([ceil(V / kSumChunk)]) and two id
// lists for compactions and the radix select's survivors; this port leaves them alone.
struct RowScratch {
  float* work;
  int32_t* ids;
  double* key;
  double* prob;
  double* stage;
  double* chunks;
  int32_t* tmp;
  int32_t* tmp2;
};

// Carve one row's scratch out of sample_row_scratch_bytes(V) bytes: the f64 arrays first (prob,
// key, stage, chunks), then the 4-byte ones (work, ids, tmp, tmp2), so each is aligned to its
// element size.
LOOM_HD RowScratch row_scratch(void* base, int64_t V) {
  double* prob = static_cast<double*>(base);
  double* key = prob + V;
  double* stage = key + V;
  double* chunks = stage + V;
  float* work = reinterpret_cast<float*>(chunks + (V + kSumChunk - 1) / kSumChunk);
  int32_t* ids = reinterpret_cast<int32_t*>(work + V);
  int32_t* tmp = ids + V;
  int32_t* tmp2 = tmp + V;
  return {work, ids, key, prob, stage, chunks, tmp, tmp2};
}

// collectCandidates: every id with work > -inf (NaN excluded), in id order.
LOOM_HD int collect_candidates(const float* work, int64_t V, int32_t* ids) {
  int n = 0;
  for (int64_t v = 0; v < V; v++)
    if (work[v] > -inf()) ids[n++] = int32_t(v);
  return n;
}

// argmax (candidates.ts): first maximum, -1 when nothing beats -inf.
LOOM_HD int32_t argmax(const float* work, int64_t n) {
  int32_t best = -1;
  double best_value = -inf();
  for (int64_t v = 0; v < n; v++) {
    const double x = work[v];
    if (x > best_value) {
      best_value = x;
      best = int32_t(v);
    }
  }
  return best;
}

// topK (top-k.ts): the k-th largest value by the heap, or above kHeapSelectMax by a selection
// of a copy by position (only the value matters, so std::nth_element gives the JS's), then
// partitionAtLeast, which keeps the candidates' id order.
LOOM_HD int top_k(const RowScratch& s, int n, int k) {
  if (k <= 0 || k >= n) return n;
  double threshold;
#if !defined(__CUDA_ARCH__)
  if (k > kHeapSelectMax) {
    for (int i = 0; i < n; i++) s.key[i] = s.work[s.ids[i]];
    std::nth_element(s.key, s.key + (k - 1), s.key + n, [](double a, double b) { return a > b; });
    threshold = s.key[k - 1];
  } else
#endif
    threshold = kth_largest_of(s.work, s.ids, n, k, s.key);
  return partition_at_least(s.work, s.ids, n, threshold);
}

// applyTemperature (temperature.ts).
LOOM_HD void apply_temperature(float* work, const int32_t* ids, int n, double temperature) {
  if (temperature == 1) return;
  double shift = 0;
  if (temperature < 1e-20) {
    double max = -inf();
    for (int i = 0; i < n; i++) {
      const double x = work[ids[i]];
      max = x > max || is_nan(x) ? x : max;  // Math.max
    }
    if (max != inf() && max != -inf() && !is_nan(max)) shift = max;
  }
  for (int i = 0; i < n; i++) work[ids[i]] = float((double(work[ids[i]]) - shift) / temperature);
}

// topP (top-p.ts).
LOOM_HD int top_p(const RowScratch& s, int n, double p) {
  if (p >= 1 || n <= 1) return n;
  softmax_over(s.ids, n, s.work, s.prob);
  for (int i = 0; i < n; i++) s.key[s.ids[i]] = -s.prob[s.ids[i]];
  return mass_prefix(s.ids, n, s.key, s.prob, p);
}

// typicalP (typical-p.ts).
LOOM_HD int typical_p(const RowScratch& s, int n, double mass) {
  if (mass >= 1 || n <= 1) return n;
  const double log_norm = softmax_over(s.ids, n, s.work, s.prob);
  const double entropy = -blocked_sum(n, [&](int i) {
    const int32_t id = s.ids[i];
    const double p = s.prob[id];
    return p > 0 ? js::js_mul(p, double(s.work[id]) - log_norm) : 0.0;
  });
  for (int i = 0; i < n; i++) {
    const int32_t id = s.ids[i];
    const double d = log_norm - double(s.work[id]) - entropy;
    s.key[id] = d < 0 ? -d : d;  // Math.abs
  }
  return mass_prefix(s.ids, n, s.key, s.prob, mass);
}

// warp (warp-chain.ts) after the candidates and top-k: temperature, top-p, typical-p, softmax.
// Returns the final candidate count; the distribution is s.prob over s.ids[0, n).
LOOM_HD int warp_after_top_k(const RowScratch& s, int n, const SampleParams& p) {
  apply_temperature(s.work, s.ids, n, p.temperature);
  n = top_p(s, n, p.top_p);
  n = typical_p(s, n, p.typical_p);
  softmax_over(s.ids, n, s.work, s.prob);
  return n;
}

// TokenSampler.draw: inverse CDF over the candidates in id order, in mass units.
LOOM_HD int32_t draw(const RowScratch& s, int n, double u) {
  double total = 0;
  for (int i = 0; i < n; i++) total += mass_units(s.prob[s.ids[i]]);
  const double target = js::js_mul(u, total);
  double cumulative = 0;
  for (int i = 0; i < n; i++) {
    cumulative += mass_units(s.prob[s.ids[i]]);
    if (cumulative > target) return s.ids[i];
  }
  return s.ids[n - 1];
}

// ---- penalties.ts, grammar-mask.ts ----

// penaltiesActive.
LOOM_HD bool penalties_active(const SampleParams& p) {
  return p.repetition_penalty != 1 || p.frequency_penalty != 0 || p.presence_penalty != 0;
}

// True when the row takes TokenSampler's greedy branch (no draw).
LOOM_HD bool is_greedy(const SampleParams& p) { return p.temperature == 0 || p.top_k == 1; }

// applyPenalties for one history entry (entries are independent: distinct ids).
LOOM_HD void penalise(float* work, int64_t V, const PenaltyToken& e, const SampleParams& p) {
  if (e.id < 0 || e.id >= V) return;
  if (p.repetition_penalty != 1) {
    const double x = work[e.id];
    work[e.id] = float(x < 0 ? js::js_mul(x, p.repetition_penalty) : x / p.repetition_penalty);
  }
  if ((p.frequency_penalty != 0 || p.presence_penalty != 0) && e.count > 0)
    work[e.id] = float(double(work[e.id]) - js::js_mul(double(e.count), p.frequency_penalty) - p.presence_penalty);
}

// applyConstraintMask for one token v (the mask as the allowed bitmask; see SampleParams).
LOOM_HD float masked(float w, const uint32_t* allowed, int64_t v, bool lift) {
  if (((allowed[v >> 5] >> (v & 31)) & 1u) == 0) return -inf();
  return lift && w == -inf() ? 0.0f : w;
}

// ---- top-logprobs.ts ----

// topLogprobs: the `count` best of a raw row, (value desc, id asc), written to out_ids / out_lp
// [max_top] ((-1, 0) past the end). Uses s.ids and s.key.
LOOM_HD void top_logprobs(const float* row, int64_t V, double log_norm, int count, const RowScratch& s,
                          int max_top, int32_t* out_ids, float* out_lp) {
  const int k = count < V ? count : int(V);
  int m = 0;
  if (k > 0) {
    for (int64_t v = 0; v < V; v++) s.ids[v] = int32_t(v);
    if (k <= kHeapSelectMax) {
      m = partition_at_least(row, s.ids, int(V), kth_largest_of(row, s.ids, int(V), k, s.key));
    } else {
      for (int64_t v = 0; v < V; v++) s.key[v] = is_nan(row[v]) ? inf() : -double(row[v]);
      select_smallest(s.ids, 0, int(V), k, s.key);
      m = k;
    }
    for (int i = 0; i < m; i++) s.key[s.ids[i]] = -double(row[s.ids[i]]);
    sort_range(s.ids, 0, m, s.key);
  }
  const int out = k < m ? k : m;
  for (int j = 0; j < max_top; j++) {
    out_ids[j] = j < out ? s.ids[j] : -1;
    out_lp[j] = j < out ? float(double(row[s.ids[j]]) - log_norm) : 0.0f;
  }
}

// ---- token-sampler.ts ----

// TokenSampler.sample for one row, after everything before the draw: `w` holds the working
// logits (penalties and mask applied) unless the row is plain greedy. Returns the token (-1:
// none). The cuda kernel runs its own parallel versions of the steps before warp_after_top_k.
LOOM_HD int32_t choose(const float* row, int64_t V, const SampleParams& p, const RowScratch& s) {
  const bool plain = p.allowed == nullptr && !penalties_active(p);
  if (is_greedy(p)) return argmax(plain ? row : s.work, V);
  int n = collect_candidates(s.work, V, s.ids);
  if (n == 0) return -1;
  n = top_k(s, n, p.top_k);
  n = warp_after_top_k(s, n, p);
  if (n == 0) return -1;
  Stream st = stream_at(p.seed, p.draws);
  return draw(s, n, next_float(&st));
}

// The working copy of a row (penalties, then the mask), where the JS makes one.
LOOM_HD void prepare_work(const float* row, int64_t V, const SampleParams& p, const RowScratch& s) {
  if (is_greedy(p) && p.allowed == nullptr && !penalties_active(p)) return;
  for (int64_t v = 0; v < V; v++) s.work[v] = row[v];
  if (penalties_active(p))
    for (int32_t i = 0; i < p.n_penalties; i++) penalise(s.work, V, p.penalties[i], p);
  if (p.allowed != nullptr)
    for (int64_t v = 0; v < V; v++) s.work[v] = masked(s.work[v], p.allowed, v, p.allowed_lift);
}

// The report of a chosen row (TokenSampler.report): the token, its raw logprob under `log_norm`
// (the raw row's log Σ exp) and the top logprobs; a row without a token reports (-1, 0) and no tops.
LOOM_HD void report(const float* row, int64_t V, int32_t id, double log_norm, const SampleParams& p, int max_top,
                    const RowScratch& s, int32_t* token, float* logprob, int32_t* top_ids, float* top_lp) {
  *token = id;
  const int count = id < 0 ? 0 : p.top_logprobs < max_top ? p.top_logprobs : max_top;
  *logprob = id < 0 ? 0.0f : float(double(row[id]) - log_norm);
  top_logprobs(row, V, log_norm, count, s, max_top, top_ids, top_lp);
}

}  // namespace sampler
}  // namespace loom

#if !defined(__CUDACC__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
