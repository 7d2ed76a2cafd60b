// The matmul for bf16 weights in steps of many tokens (a prompt's prefill: kBf16DotMinTokens or
// more) with AVX-512 BF16: vdpbf16ps multiplies pairs of bf16 and adds both products to an f32
// lane, 32 multiply-adds per instruction against 16 for an f32 FMA, and the weights are used as
// stored (no widening pass). Where the CPU also has AMX (and the kernel grants it), the rows in
// multiples of 16 go to AMX tiles instead (matmul-bf16-amx.cc: same arithmetic, ~15x the rate
// here) and only the rest stay on vdpbf16ps.
//
// The activations are rounded to bf16 (nearest even) once per call, into a scratch of [T, K32]
// (K rounded up to 32, zero-padded). The weights are exact bf16 already, so each product is
// x̃·w with |x̃ - x| <= 2^-9 |x|, and a result differs from the f32 dot of x and w by at most
// 2^-9 · Σ_k |x_k·w_k| plus f32 accumulation error (the self-test's bound). Smaller steps
// (decode, batched decode, Medusa trees) stay on the exact f32 path of matmul-cpu.cc.
//
// Cache blocking: threads split the row blocks (kRows rows) into contiguous runs; a run is
// taken a panel at a time (about kPanelBytes of weights, which stay in L2), and for each tile
// of kMaxTokens tokens (K32·16 bytes, in L1) every block of the panel is dotted in a 3 × 8
// register tile. Each weight byte comes from DRAM once per call whatever the prompt length.
#include "cpu/intrinsics.h"

#include <algorithm>

#include "cpu/cpu-device.h"
#include "cpu/tile-reduce.h"
#include "cpu/matmul-bf16-amx.h"
#include "cpu/simd-config.h"

namespace loom {

#if LOOM_AVX512_BF16

namespace {

constexpr int64_t kPanelBytes = 192 * 1024;

// x rows [T, ldx] f32 -> bf16 [T, K32], rounded to nearest even, zero past K.
void to_bf16_row(const float* x, int64_t K, int64_t K32, uint16_t* out) {
  for (int64_t k = 0; k < K32; k += 32) {
    const int64_t left = K - k;
    __m512 lo, hi;
    if (left >= 32) {
      lo = _mm512_loadu_ps(x + k);
      hi = _mm512_loadu_ps(x + k + 16);
    } else {
      const __mmask16 mlo = left >= 16 ? __mmask16(0xffff) : left > 0 ? __mmask16((1u << left) - 1) : __mmask16(0);
      const __mmask16 mhi = left > 16 ? __mmask16((1u << (left - 16)) - 1) : __mmask16(0);
      lo = _mm512_maskz_loadu_ps(mlo, x + k);
      hi = _mm512_maskz_loadu_ps(mhi, x + k + 16);
    }
    _mm512_storeu_si512(out + k, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
}

// The micro-kernel. Semantics: for t < TN, r < kRows: out[t*kRows + r] = Σ_{k<K} f32(w_r[k]) · f32(x_t[k])
// w: kRows bf16 rows of K, x: TN bf16 rows of K32 (zero past K). Accumulators: TN × kRows zmm.
template <int TN>
inline void dot_bf16(const uint16_t* const* w, const uint16_t* const* x, int64_t K, float* out) {
  const uint16_t* const w0p = w[0];
  const uint16_t* const w1p = w[1];
  const uint16_t* const w2p = w[2];
  __m512 acc[TN][kRows];
#pragma GCC unroll 8
  for (int t = 0; t < TN; t++) acc[t][0] = acc[t][1] = acc[t][2] = _mm512_setzero_ps();
  auto step = [&acc, x](__m512i w0, __m512i w1, __m512i w2, int64_t k) __attribute__((always_inline)) {
    __asm__("" : "+v"(w0), "+v"(w1), "+v"(w2));  // keep the weights in registers (see matmul-cpu.cc)
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) {
      __m512i xv = _mm512_loadu_si512(x[t] + k);
      __asm__("" : "+v"(xv));
      acc[t][0] = _mm512_dpbf16_ps(acc[t][0], (__m512bh)w0, (__m512bh)xv);
      acc[t][1] = _mm512_dpbf16_ps(acc[t][1], (__m512bh)w1, (__m512bh)xv);
      acc[t][2] = _mm512_dpbf16_ps(acc[t][2], (__m512bh)w2, (__m512bh)xv);
    }
  };
  int64_t k = 0;
  for (; k + 32 <= K; k += 32)
    step(_mm512_loadu_si512(w0p + k), _mm512_loadu_si512(w1p + k), _mm512_loadu_si512(w2p + k), k);
  if (k < K) {  // the K % 32 tail: weights past K read as 0 (x is zero there too)
    const __mmask32 m = __mmask32((uint64_t(1) << (K - k)) - 1);
    step(_mm512_maskz_loadu_epi16(m, w0p + k), _mm512_maskz_loadu_epi16(m, w1p + k),
         _mm512_maskz_loadu_epi16(m, w2p + k), k);
  }
  reduce_tile<TN>(acc, out);
}

void dot_bf16_tn(int tn, const uint16_t* const* w, const uint16_t* const* x, int64_t K, float* out) {
  switch (tn) {
    case 8: dot_bf16<8>(w, x, K, out); break;
    case 7: dot_bf16<7>(w, x, K, out); break;
    case 6: dot_bf16<6>(w, x, K, out); break;
    case 5: dot_bf16<5>(w, x, K, out); break;
    case 4: dot_bf16<4>(w, x, K, out); break;
    case 3: dot_bf16<3>(w, x, K, out); break;
    case 2: dot_bf16<2>(w, x, K, out); break;
    default: dot_bf16<1>(w, x, K, out); break;
  }
}

}  // namespace

// With AMX (K a multiple of 32 and the process granted tile state), each job's first N - N % 16
// rows go to amx_dot_rows in blocks of 32 (flagged kAmxBlock in the work list) and only the
// remaining rows to the vdpbf16ps kernel.
void CpuDevice::matmul_bf16_dot(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs,
                                bool accumulate) {
  const int64_t K = jobs[0].w.cols, K32 = (K + 31) / 32 * 32;
#if LOOM_AMX_BF16
  const bool amx = K % 32 == 0 && amx_usable();
#else
  const bool amx = false;
#endif
  const int64_t ttiles = (T + 15) / 16;
  const int64_t xb_elems = T * K32, xv_elems = amx ? ttiles * 16 * K : 0;
  if (int64_t(xq_.size()) < (xb_elems + xv_elems) * 2 + 128) xq_.resize(size_t((xb_elems + xv_elems) * 2 + 128));
  uint16_t* xb = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(xq_.data()) + 63) & ~uintptr_t(63));
  uint16_t* xv = xb + (xb_elems + 31) / 32 * 32;
  // Per 16-token tile: round its rows to bf16, then (AMX) interleave them into the B layout.
  pool_.run([&](int chunk, int nchunks) {
    int64_t a, b;
    split_range(ttiles, nchunks, chunk, 1, &a, &b);
    for (int64_t tt = a; tt < b; tt++) {
      const int64_t t1 = std::min(T, (tt + 1) * 16);
      for (int64_t t = tt * 16; t < t1; t++) to_bf16_row(x + t * ldx, K, K32, xb + t * K32);
#if LOOM_AMX_BF16
      if (amx) amx_pack_tokens(xb + tt * 16 * K32, t1 - tt * 16, K32, K, xv + tt * 16 * K);
#endif
    }
  });
  constexpr int64_t kAmxBlock = int64_t(1) << 39;  // flag bit of a work item: 32 rows on AMX tiles
  blocks_.clear();
  for (int j = 0; j < njobs; j++) {
    const int64_t N = jobs[j].w.rows, amx_rows = amx ? N / 16 * 16 : 0;
    for (int64_t n = 0; n < amx_rows; n += 32) blocks_.push_back(int64_t(j) << 40 | kAmxBlock | n);
    for (int64_t n = amx_rows; n < N; n += kRows) blocks_.push_back(int64_t(j) << 40 | n);
  }
  const int64_t nblocks = int64_t(blocks_.size());
  const int64_t* blocks = blocks_.data();
  const int64_t panel = std::max<int64_t>(1, kPanelBytes / (kRows * K * 2));
  pool_.run([&](int chunk, int nchunks) {
    int64_t b0, b1;
    split_range(nblocks, nchunks, chunk, 1, &b0, &b1);
#if LOOM_AMX_BF16
    // The AMX blocks of this chunk (they come first in each job's run).
    while (b0 < b1 && (blocks[b0] & kAmxBlock)) {
      const MatmulJob& job = jobs[blocks[b0] >> 40];
      const int64_t n = blocks[b0] & (kAmxBlock - 1);
      amx_dot_rows(xv, T, job, n, std::min(n + 32, job.w.rows / 16 * 16), accumulate);
      b0++;
    }
#endif
    // The rest: the vdpbf16ps kernel (AMX items after a dot item belong to a later job: none
    // in the model's calls, whose jobs all take the same path; run them here too).
    for (int64_t p0 = b0; p0 < b1; p0 += panel) {
      const int64_t p1 = std::min(b1, p0 + panel);
      for (int64_t t = 0; t < T; t += kMaxTokens) {
        const int tn = int(std::min<int64_t>(kMaxTokens, T - t));
        const uint16_t* xs[kMaxTokens];
        for (int i = 0; i < kMaxTokens; i++) xs[i] = xb + std::min<int64_t>(t + i, T - 1) * K32;
        for (int64_t b = p0; b < p1; b++) {
          const MatmulJob& job = jobs[blocks[b] >> 40];
          if (blocks[b] & kAmxBlock) {
#if LOOM_AMX_BF16
            if (t == 0) {
              const int64_t n = blocks[b] & (kAmxBlock - 1);
              amx_dot_rows(xv, T, job, n, std::min(n + 32, job.w.rows / 16 * 16), accumulate);
            }
#endif
            continue;
          }
          const int64_t n0 = blocks[b] & ((int64_t(1) << 40) - 1);
          const int nrows = int(std::min<int64_t>(kRows, job.w.rows - n0));
          const uint16_t* base = static_cast<const uint16_t*>(job.w.data);
          const uint16_t* w[kRows];
          for (int i = 0; i < kRows; i++) w[i] = base + (n0 + std::min(i, nrows - 1)) * K;
          float out[kMaxTokens * kRows];  // [tn, kRows]
          dot_bf16_tn(tn, w, xs, K, out);
          store_tile(out, tn, nrows, job, t, n0, accumulate);
        }
      }
    }
  });
}

#endif  // LOOM_AVX512_BF16

}  // namespace loom
