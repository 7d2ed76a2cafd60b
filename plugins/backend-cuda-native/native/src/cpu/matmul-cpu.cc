// Weights-stationary batched matmul for the cpu device.
//
// Decode is bound by weight bandwidth, so every weight row must be read from DRAM once per step
// no matter how many tokens are batched: each thread owns a contiguous range of output features,
// widens kRows weight rows at a time to f32 into an L1-resident tile (bf16: 16-bit shift, f16: F16C),
// and dots that tile against every token of the step. Large prefills tile the tokens as well so
// the activations stay in L2 while the weights stream through.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "cpu/cpu-device.h"

namespace loom {
namespace {

constexpr int64_t kTokenTile = 64;  // tokens per pass over the weights (X tile ~ 64*K*4 bytes in L2)

// Sum each of 4 accumulators: returns [Σa, Σb, Σc, Σd].
inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// kRows weight rows × TN tokens: 3·TN accumulators + 3 weight registers + 1 activation register
// (16 ymm registers at TN = 4 on AVX2, 28 at TN = 8 with AVX-512VL); each k-step issues 3 + TN
// loads for 3·TN FMAs, so the kernel is FMA-bound once the tiles are cache-resident.
template <int TN>
inline void dot_rows_t(const float* const* w, const float* const* x, int64_t K, float out[kMaxTokens][kRows]) {
  __m256 acc[TN][kRows];
  for (int t = 0; t < TN; t++)
    for (int i = 0; i < kRows; i++) acc[t][i] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    const __m256 w0 = _mm256_loadu_ps(w[0] + k), w1 = _mm256_loadu_ps(w[1] + k), w2 = _mm256_loadu_ps(w[2] + k);
    for (int t = 0; t < TN; t++) {
      __m256 xv = _mm256_loadu_ps(x[t] + k);
      // Keep x in a register: without this GCC folds the load into all three FMAs, tripling the
      // loads per k-step and making the kernel load-port bound.
      __asm__("" : "+v"(xv));
      acc[t][0] = _mm256_fmadd_ps(w0, xv, acc[t][0]);
      acc[t][1] = _mm256_fmadd_ps(w1, xv, acc[t][1]);
      acc[t][2] = _mm256_fmadd_ps(w2, xv, acc[t][2]);
    }
  }
  for (int t = 0; t < TN; t++) {
    const __m128 s = hsum4(acc[t][0], acc[t][1], acc[t][2], acc[t][2]);
    float tmp[4];
    _mm_storeu_ps(tmp, s);
    for (int i = 0; i < kRows; i++) {
      out[t][i] = tmp[i];
      for (int64_t kk = k; kk < K; kk++) out[t][i] += w[i][kk] * x[t][kk];  // K % 8 tail
    }
  }
}

// Widen n elements of a weight row to f32. bf16 is the high half of an f32, so widening is a
// zero-extend and a 16-bit shift; f16 uses the F16C conversion instruction.

inline void widen_row(const void* src, DType dt, int64_t n, float* dst) {
  int64_t k = 0;
  if (dt == DType::BF16) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    for (; k + 8 <= n; k += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + k));
      __m256i wide = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
      _mm256_storeu_ps(dst + k, _mm256_castsi256_ps(wide));
    }
    for (; k < n; k++) dst[k] = bf16_to_f32(s[k]);
  } else {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    for (; k + 8 <= n; k += 8)
      _mm256_storeu_ps(dst + k, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + k))));
    for (; k < n; k++) dst[k] = f16_to_f32(s[k]);
  }
}

}  // namespace

void dot_rows(const float* const* w, const float* const* x, int tn, int64_t K, float out[kMaxTokens][kRows]) {
  switch (tn) {
#if defined(__AVX512VL__)
    case 8: dot_rows_t<8>(w, x, K, out); break;
    case 7: dot_rows_t<7>(w, x, K, out); break;
    case 6: dot_rows_t<6>(w, x, K, out); break;
    case 5: dot_rows_t<5>(w, x, K, out); break;
#endif
    case 4: dot_rows_t<4>(w, x, K, out); break;
    case 3: dot_rows_t<3>(w, x, K, out); break;
    case 2: dot_rows_t<2>(w, x, K, out); break;
    default: dot_rows_t<1>(w, x, K, out); break;
  }
}

// Threads split the weight-row blocks of all jobs into contiguous ranges (so each thread streams
// its rows sequentially and the hardware prefetcher sees long runs); every thread then walks the
// token tiles. Rows past a job's end are clamped to its last row and their results dropped, so
// the kernel never branches on N.
void CpuDevice::matmul(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs, bool accumulate) {
  if (T <= 0 || njobs <= 0) return;
  // Work list: blocks of up to kRows output rows, encoded as job * 2^40 + first row.
  blocks_.clear();
  for (int j = 0; j < njobs; j++)
    for (int64_t n = 0; n < jobs[j].w.rows; n += kRows) blocks_.push_back(int64_t(j) << 40 | n);
  const int64_t nblocks = int64_t(blocks_.size());
  const int64_t* blocks = blocks_.data();

  pool_.run([&](int tid, int nth) {
    int64_t b0, b1;
    split_range(nblocks, nth, tid, 1, &b0, &b1);
    if (b0 >= b1) return;
    static thread_local std::vector<float> tile;  // widened weight rows [kRows, K]
    for (int64_t t0 = 0; t0 < T; t0 += kTokenTile) {
      const int64_t t1 = std::min(T, t0 + kTokenTile);
      for (int64_t b = b0; b < b1; b++) {
        const MatmulJob& job = jobs[blocks[b] >> 40];
        const int64_t n0 = blocks[b] & ((int64_t(1) << 40) - 1);
        const int64_t K = job.w.cols;
        const int nrows = int(std::min<int64_t>(kRows, job.w.rows - n0));
        const float* w[kRows];
        if (job.w.dtype == DType::F32) {
          for (int i = 0; i < kRows; i++)
            w[i] = static_cast<const float*>(job.w.data) + (n0 + std::min(i, nrows - 1)) * K;
        } else {
          if (int64_t(tile.size()) < kRows * K) tile.resize(size_t(kRows * K));
          const char* base = static_cast<const char*>(job.w.data);
          for (int i = 0; i < nrows; i++) widen_row(base + (n0 + i) * K * 2, job.w.dtype, K, tile.data() + i * K);
          for (int i = 0; i < kRows; i++) w[i] = tile.data() + std::min(i, nrows - 1) * K;
        }
        // Dot the rows against the token tile, kMaxTokens tokens at a time.
        for (int64_t t = t0; t < t1; t += kMaxTokens) {
          const int tn = int(std::min<int64_t>(kMaxTokens, t1 - t));
          const float* xs[kMaxTokens];
          for (int i = 0; i < kMaxTokens; i++) xs[i] = x + std::min<int64_t>(t + i, t1 - 1) * ldx;
          float out[kMaxTokens][kRows];
          dot_rows(w, xs, tn, K, out);
          for (int r = 0; r < tn; r++) {
            float* y = job.y + (t + r) * job.ldy + n0;
            for (int i = 0; i < nrows; i++) {
              float v = out[r][i] + (job.bias ? job.bias[n0 + i] : 0.0f);
              y[i] = accumulate ? y[i] + v : v;
            }
          }
        }
      }
    }
  });
}

}  // namespace loom
