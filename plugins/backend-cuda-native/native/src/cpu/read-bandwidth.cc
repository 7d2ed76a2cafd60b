// Memory read bandwidth probe (see read-bandwidth.h). The reads use the same vector width, the
// same thread pool and the same software prefetch as the matmul kernels, so the number is what
// the kernels could reach, not a vendor peak: 4 independent accumulators hide the add latency,
// so the loop is load-bound. (Without the prefetch this machine's probe read ~25% lower than
// what the prefetching matmul then streamed, which put batch-1 decode above "100%".)
#include "cpu/read-bandwidth.h"

#include "cpu/intrinsics.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "runtime/huge-page-arena.h"
#include "runtime/thread-pool.h"

namespace loom {
namespace {

constexpr int64_t kPrefetchAhead = 8192 / 4;  // floats ahead (~ the matmul's two row blocks)

// Sum n floats (n a multiple of 64) from a 64-byte aligned pointer.
float sum_slice(const float* p, int64_t n) {
#if defined(__AVX512F__)
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < n; i += 64) {
    const char* ahead = reinterpret_cast<const char*>(p + i + kPrefetchAhead);  // may pass the end: harmless
    for (int l = 0; l < 256; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#else
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < n; i += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(p + i + kPrefetchAhead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + i + kPrefetchAhead) + 64, _MM_HINT_T0);
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
#endif
}

}  // namespace

// Own pool (not the model's): the probe runs before any model is loaded and must not disturb a
// runtime that is serving. Each repetition is one region over the whole buffer, timed from the
// caller; the pool's start-up is excluded because the touch pass runs first.
std::vector<double> measure_read_bandwidth(int64_t bytes, int threads, int repeats) {
  std::vector<double> out;
  // Whole 64-float units per thread, so every slice starts 256-byte aligned.
  const int64_t unit = 64;
  const int64_t n = (bytes / 4) / (unit * threads) * (unit * threads);
  if (n <= 0 || repeats <= 0) return out;
  // In 2 MB pages, as the int8 weights are: the probe is the roofline, the best the memory gives
  // (here ~10% above the same reads through 4 KB pages, 25.4-25.9 vs 22.7-24.2 GB/s best).
  HugePageArena arena;
  float* buf = reinterpret_cast<float*>(arena.allocate(n * 4));
  if (!buf) return out;
  ThreadPool pool(threads);
  // Touch every page in parallel first (first-touch places pages near the thread that reads them),
  // with small non-zero values so the sums stay finite.
  pool.run([&](int tid, int nth) {
    int64_t b, e;
    split_range(n, nth, tid, unit, &b, &e);
    for (int64_t i = b; i < e; i++) buf[i] = float(i & 7) * 0.125f;
  });
  // The sums go through a volatile so the reads cannot be optimized away.
  volatile float sink = 0;
  for (int r = 0; r < repeats; r++) {
    float sums[64] = {};
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int tid, int nth) {
      int64_t b, e;
      split_range(n, nth, tid, unit, &b, &e);
      sums[tid % 64] = sum_slice(buf + b, e - b);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (float x : sums) sink = sink + x;
    out.push_back(double(n) * 4 / s / 1e9);
  }
  return out;
}

}  // namespace loom
