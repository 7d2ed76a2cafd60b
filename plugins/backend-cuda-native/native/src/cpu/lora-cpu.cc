// Multi-LoRA kernels for the cpu device (Punica's SGMV/BGMV split, on a CPU).
//
// shrink: tmp = x · Aᵀ per segment. A prefill segment streams its A rows once for all of its
//   tokens (SGMV); decode rows are one-token segments that each gather their own A (BGMV). Work
//   items are (segment, token chunk) so both a single long prefill and 32 distinct decode rows
//   spread over the threads.
// expand: y += scale · tmp · Bt, with B stored transposed so each rank column is a contiguous
//   row update; threads split the output features, so every Bt row slice is read once per token
//   from cache.
#include <immintrin.h>

#include <algorithm>

#include "cpu/cpu-device.h"
#include "cpu/simd-config.h"

namespace loom {
namespace {
constexpr int kShrinkChunk = 24;  // tokens per shrink work item (a multiple of the 4-token kernel)

// Prefetch `bytes` from p into L1: the weights the next work item will stream, issued while the
// current item computes. Decode rows with distinct adapters are 1-token items that each read
// their own 36-98 KB of A or Bt; without this every item starts with a full DRAM latency and
// the hardware prefetcher never ramps up (measured ~13 GB/s effective for 32 distinct rows).
inline void prefetch_bytes(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(c + o, _MM_HINT_T0);
}

// Semantics: for n < N: y[n] += a * b[n]
inline void axpy(float a, const float* b, int64_t N, float* y) {
  int64_t n = 0;
#if LOOM_AVX512
  const __m512 av = _mm512_set1_ps(a);
  for (; n + 16 <= N; n += 16) _mm512_storeu_ps(y + n, _mm512_fmadd_ps(av, _mm512_loadu_ps(b + n), _mm512_loadu_ps(y + n)));
#else
  const __m256 av = _mm256_set1_ps(a);
  for (; n + 8 <= N; n += 8) _mm256_storeu_ps(y + n, _mm256_fmadd_ps(av, _mm256_loadu_ps(b + n), _mm256_loadu_ps(y + n)));
#endif
  for (; n < N; n++) y[n] += a * b[n];
}
}  // namespace

// Semantics: for seg, t in seg, r < R_seg: tmp[t*ldt + col_seg + r] = Σ_k x[t*ldx + k] * A_seg[r, k]
// x [T, ldx], A_seg [R_seg, K], tmp [T, ldt]. Each work item dots kRows rows of its A against up
// to kMaxTokens tokens at a time (the matmul micro-kernel), so a prefill segment reads its A
// once per kShrinkChunk tokens and a decode row reads it once.
void CpuDevice::lora_shrink(const float* x, int64_t ldx, int64_t K, const LoraSegment* segs, int nsegs, float* tmp,
                            int64_t ldt) {
  // Work items encoded as segment * 2^32 + first token offset inside the segment.
  items_.clear();
  for (int s = 0; s < nsegs; s++)
    for (int off = 0; off < segs[s].tok_count; off += kShrinkChunk) items_.push_back(int64_t(s) << 32 | off);
  const int64_t nitems = int64_t(items_.size());
  const int64_t* items = items_.data();
  if (nitems == 0) return;
  pool_.run([&](int tid, int nth) {
    int64_t i0, i1;
    split_range(nitems, nth, tid, 1, &i0, &i1);
    for (int64_t it = i0; it < i1; it++) {
      const LoraSegment& seg = segs[items[it] >> 32];
      const int64_t first = seg.tok_start + (items[it] & 0xffffffff);
      const int64_t last = std::min<int64_t>(first + kShrinkChunk, seg.tok_start + seg.tok_count);
      // The next item's adapter, if it differs (decode rows: the next row's A).
      const LoraSegment* next = it + 1 < i1 ? &segs[items[it + 1] >> 32] : nullptr;
      if (next && next->w == seg.w) next = nullptr;
      for (int r0 = 0; r0 < seg.rank; r0 += kRows) {
        const int nr = std::min(kRows, seg.rank - r0);
        // Rows r0.. of the next A, spread over this A's blocks so they arrive just in time.
        if (next && r0 < next->rank)
          prefetch_bytes(next->w + int64_t(r0) * K, int64_t(std::min(nr, next->rank - r0)) * K * 4);
        const float* w[kRows];
        for (int i = 0; i < kRows; i++) w[i] = seg.w + int64_t(r0 + std::min(i, nr - 1)) * K;
        for (int64_t t = first; t < last; t += kMaxTokens) {
          const int tn = int(std::min<int64_t>(kMaxTokens, last - t));
          const float* xs[kMaxTokens];
          for (int i = 0; i < kMaxTokens; i++) xs[i] = x + std::min<int64_t>(t + i, last - 1) * ldx;
          float out[kMaxTokens][kRows];
          dot_rows(w, xs, tn, K, out);
          for (int r = 0; r < tn; r++)
            for (int i = 0; i < nr; i++) tmp[(t + r) * ldt + seg.col + r0 + i] = out[r][i];
        }
      }
    }
  });
}

// Semantics: for seg, t in seg, n < N: y[t*ldy + n] += scale_seg * Σ_r tmp[t*ldt + col_seg + r] * Bt_seg[r, n]
// tmp [T, ldt], Bt_seg [R_seg, N], y [T, ldy]. Segments of one call cover disjoint tokens, so
// splitting by segment never has two threads writing one y row.
void CpuDevice::lora_expand(const float* tmp, int64_t ldt, int64_t N, const LoraSegment* segs, int nsegs, float* y,
                            int64_t ldy) {
  if (nsegs == 0) return;
  // Many segments (decode rows, distinct adapters): threads split the segments, and each token
  // streams its whole Bt [R, N] once, row by row (one sequential run), while the next segment's
  // Bt rows are prefetched. Few segments (a prefill, or one shared adapter): threads split the
  // output features instead so both cores work.
  if (nsegs >= pool_.size() * ThreadPool::kChunksPerThread) {
    pool_.run([&](int chunk, int nchunks) {
      int64_t s0, s1;
      split_range(nsegs, nchunks, chunk, 1, &s0, &s1);
      for (int64_t s = s0; s < s1; s++) {
        const LoraSegment& seg = segs[s];
        const LoraSegment* next = s + 1 < s1 && segs[s + 1].w != seg.w ? &segs[s + 1] : nullptr;
        for (int64_t t = seg.tok_start; t < seg.tok_start + seg.tok_count; t++) {
          const float* c = tmp + t * ldt + seg.col;  // [R] low-rank activations of token t
          for (int r = 0; r < seg.rank; r++) {
            if (next && t == seg.tok_start && r < next->rank) prefetch_bytes(next->w + int64_t(r) * N, N * 4);
            axpy(seg.scale * c[r], seg.w + int64_t(r) * N, N, y + t * ldy);
          }
        }
      }
    });
    return;
  }
  pool_.run([&](int chunk, int nchunks) {
    int64_t n0, n1;
    split_range(N, nchunks, chunk, 16, &n0, &n1);
    if (n0 >= n1) return;
    for (int s = 0; s < nsegs; s++) {
      const LoraSegment& seg = segs[s];
      for (int64_t t = seg.tok_start; t < seg.tok_start + seg.tok_count; t++) {
        const float* c = tmp + t * ldt + seg.col;  // [R] low-rank activations of token t
        float* yt = y + t * ldy;
        int64_t n = n0;
        // 16 outputs at a time in registers, accumulating every rank column.
        for (; n + 16 <= n1; n += 16) {
          __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
          for (int r = 0; r < seg.rank; r++) {
            const __m256 cr = _mm256_set1_ps(c[r]);
            const float* b = seg.w + int64_t(r) * N + n;
            a0 = _mm256_fmadd_ps(cr, _mm256_loadu_ps(b), a0);
            a1 = _mm256_fmadd_ps(cr, _mm256_loadu_ps(b + 8), a1);
          }
          const __m256 sc = _mm256_set1_ps(seg.scale);
          _mm256_storeu_ps(yt + n, _mm256_fmadd_ps(sc, a0, _mm256_loadu_ps(yt + n)));
          _mm256_storeu_ps(yt + n + 8, _mm256_fmadd_ps(sc, a1, _mm256_loadu_ps(yt + n + 8)));
        }
        for (; n < n1; n++) {
          float acc = 0;
          for (int r = 0; r < seg.rank; r++) acc += c[r] * seg.w[int64_t(r) * N + n];
          yt[n] += seg.scale * acc;
        }
      }
    }
  });
}

}  // namespace loom
