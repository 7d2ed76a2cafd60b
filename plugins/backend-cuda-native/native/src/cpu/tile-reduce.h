// The matmul micro-kernels' tiles: horizontal reductions of their accumulators and the
// store of a reduced tile into a job's output (the f32 widening kernel, the bf16 dot kernel and
// the int8 VNNI kernel share them).
#pragma once

#include "cpu/intrinsics.h"
#include "cpu/cpu-device.h"
#include "cpu/simd-config.h"

namespace loom {

#if LOOM_AVX512

// Horizontal sums of 4 vectors: [Σa, Σb, Σc, Σd] in 13 shuffles/adds (pairs are folded within
// 128-bit lanes first, then the four lanes); _mm512_reduce_add_ps per accumulator costs twice that,
// a fifth of a short-K dot.
inline __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));  // a0+a2 b0+b2 a1+a3 b1+b3
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));  // per lane: a b c d
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(abcd), _mm512_extractf32x8_ps(abcd, 1));
  return _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
}

// out[i] = Σ lanes of the i-th of (a, b, c, d) for i < n (1..4), always in hsum4's order (the
// vectors past n are ignored: pass zeros). Every horizontal sum that must come out the same bits
// on another path (a tile of another size, the one-token LoRA shrink) goes through here.
inline void hsum_upto4(__m512 a, __m512 b, __m512 c, __m512 d, int n, float* out) {
  if (n == 4) return _mm_storeu_ps(out, hsum4(a, b, c, d));
  float s[4];
  _mm_storeu_ps(s, hsum4(a, b, c, d));
  for (int i = 0; i < n; i++) out[i] = s[i];
}

// Reduce TN × kRows accumulators into out [TN * kRows], 4 at a time in the flattened [t][i] order.
// The last 1-3 go through hsum4 too, beside zero vectors: each sum is then added up in hsum4's
// order whatever its place in the tile, so a token's outputs are the same bits in a tile of 1
// (alone) as in a tile of 8 (a batch, a tree row). _mm512_reduce_add_ps adds in another order, and
// using it for the leftovers made batch-1 results differ from batched ones by ~1e-7.
template <int TN>
inline void reduce_tile(const __m512 (&acc)[TN][kRows], float* out) {
  constexpr int n = TN * kRows;
  int j = 0;
#pragma GCC unroll 8
  for (; j + 4 <= n; j += 4)
    _mm_storeu_ps(out + j, hsum4(acc[j / kRows][j % kRows], acc[(j + 1) / kRows][(j + 1) % kRows],
                                 acc[(j + 2) / kRows][(j + 2) % kRows], acc[(j + 3) / kRows][(j + 3) % kRows]));
  if constexpr (n % 4 != 0) {
    const __m512 z = _mm512_setzero_ps();
    __m512 r[3] = {z, z, z};
#pragma GCC unroll 3
    for (int k = 0; k < n % 4; k++) r[k] = acc[(j + k) / kRows][(j + k) % kRows];
    hsum_upto4(r[0], r[1], r[2], z, n % 4, out + j);
  }
}

#else  // AVX2

// Sum each of 4 accumulators: returns [Σa, Σb, Σc, Σd] (pairs, then pairs of pairs within each
// 128-bit half, then the halves).
inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// Σ of a's 8 lanes in hsum4's order, for a sum that must be the bits of a matmul tile's (the
// one-token LoRA shrink).
inline float hsum1(__m256 a) {
  const __m256 p = _mm256_hadd_ps(a, a);  // a0+a1 a2+a3 . . | a4+a5 a6+a7 . .
  const __m256 q = _mm256_hadd_ps(p, p);  // (a0+a1)+(a2+a3) . . . | (a4+a5)+(a6+a7) . . .
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1)));
}

// sum + a·b with the product rounded first, never fused into one FMA: the scalar K % 8 tails of
// the kernels whose sums must agree (dot_block, dot_row_streaming, the one-token LoRA shrink) all
// add this way. Left to the compiler, `sum += a * b` was contracted into an FMA in one kernel and
// not in another (GCC 12, f32 rows with K % 8 != 0), so the same row came out different bits.
inline float add_product(float sum, float a, float b) {
  float p = a * b;
  __asm__("" : "+x"(p));  // p must exist as a rounded float: no contraction across this
  return sum + p;
}

#endif  // LOOM_AVX512

// Store a reduced tile: for r < tn, i < nrows: y[t0 + r, n0 + i] (+)= out[r * kRows + i] + bias[n0 + i].
inline void store_tile(const float* out, int tn, int nrows, const MatmulJob& job, int64_t t0, int64_t n0,
                       bool accumulate) {
  for (int r = 0; r < tn; r++) {
    float* y = job.y + (t0 + r) * job.ldy + n0;
    for (int i = 0; i < nrows; i++) {
      const float v = out[r * kRows + i] + (job.bias ? job.bias[n0 + i] : 0.0f);
      y[i] = accumulate ? y[i] + v : v;
    }
  }
}

}  // namespace loom
