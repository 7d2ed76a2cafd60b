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

namespace loom {
namespace {
constexpr int kShrinkChunk = 24;  // tokens per shrink work item (a multiple of the 4-token kernel)
}

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
      for (int r0 = 0; r0 < seg.rank; r0 += kRows) {
        const int nr = std::min(kRows, seg.rank - r0);
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

void CpuDevice::lora_expand(const float* tmp, int64_t ldt, int64_t N, const LoraSegment* segs, int nsegs, float* y,
                            int64_t ldy) {
  if (nsegs == 0) return;
  pool_.run([&](int tid, int nth) {
    int64_t n0, n1;
    split_range(N, nth, tid, 8, &n0, &n1);
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
