// Reductions over one logits row shared by the cpu ops (argmax, log_sum_exp, top_k) and the
// cpu sampler.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "cpu/intrinsics.h"
#include "cpu/vec-math.h"

namespace loom {

// The largest of init and row[0, V) by vector max: NaN values lose (maxps returns its second
// operand, the running maximum, when either is NaN), so the result is NaN only if init is.
inline float row_max(const float* row, int64_t V, float init) {
  __m256 mv = _mm256_set1_ps(init);
  int64_t i = 0;
  for (; i + 8 <= V; i += 8) mv = _mm256_max_ps(_mm256_loadu_ps(row + i), mv);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mv);
  float m = init;
  for (float l : lanes) m = l > m ? l : m;
  for (; i < V; i++) m = row[i] > m ? row[i] : m;
  return m;
}

// The first index holding m, or -1 (NaN equals nothing).
inline int32_t first_index_of(const float* row, int64_t V, float m) {
  for (int64_t j = 0; j < V; j++)
    if (row[j] == m) return int32_t(j);
  return -1;
}

// The row's log Σ exp(x): the maximum, then Σ exp(x - max) with the vector exp (relative error
// ~2e-7), summed in f32 over blocks of 256 values and across blocks in double, so a 150k
// vocabulary loses nothing to the running sum. NaN if a NaN is in the row, -inf for a row of -inf.
inline double row_log_sum_exp(const float* row, int64_t V) {
  float max = -std::numeric_limits<float>::infinity();
  bool nan = false;
  for (int64_t i = 0; i < V; i++) {
    nan = nan || std::isnan(row[i]);
    max = row[i] > max ? row[i] : max;
  }
  if (nan) return std::numeric_limits<double>::quiet_NaN();
  if (max == -std::numeric_limits<float>::infinity()) return -std::numeric_limits<double>::infinity();
  const __m256 m = _mm256_set1_ps(max);
  double sum = 0;
  int64_t i = 0;
  while (i + 8 <= V) {
    __m256 acc = _mm256_setzero_ps();
    const int64_t end = std::min(V, i + 256) & ~int64_t(7);
    for (; i < end; i += 8) acc = _mm256_add_ps(acc, exp256(_mm256_sub_ps(_mm256_loadu_ps(row + i), m)));
    sum += double(hsum256(acc));
  }
  for (; i < V; i++) sum += std::exp(double(row[i]) - double(max));
  return double(max) + std::log(sum);
}

}  // namespace loom
