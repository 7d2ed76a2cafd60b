// The matmul for Q8 weights (kernels/dtype.h): int8 × int8 dot products, with AVX-512 VNNI or
// (where AVX-512 is missing) plain AVX2.
//
// As llama.cpp does for Q8_0, the step's activation rows are quantised once per call to int8 in
// blocks of 32 (scale dx = max|x| / 127, q = round_half_even(x / dx)), and each 32-weight block's
// integer dot product Σ qw·qx is scaled by dw·dx in f32. vpdpbusd multiplies unsigned by signed
// bytes, so the weights are read as qw + 128 (one xor with 0x80 per 64 bytes) and the activations
// as signed; the surplus 128·Σ qx of a block is known per token, so each accumulator starts at
// minus it (16 per lane, 8 lanes per block) and the integer sum comes out exact.
//
// One zmm load covers two blocks (64 weights of one row); a k-step per (row, token) is one
// vpdpbusd, one int→float conversion, one multiply for the two blocks' dw·dx and one FMA: 64
// multiply-adds in 4 vector ops, where widening the weights to f32 (matmul-cpu.cc's tile path,
// used where VNNI is missing) spends ~10 per 32 at batch 1 (measured in the README).
//
// With AVX2 (no vpdpbusd) a 32-weight block per (row, token) is vpsignb (the weights take the
// activations' signs, so the unsigned operand is |qx|, stored beside qx), vpmaddubsw (pairs into
// int16: at most 2·127·127, no saturation), vpmaddwd by ones (int32 lanes of 4 products, the
// lanes of vpdpbusd), one conversion and one FMA by dw·dx: 32 multiply-adds in 6 vector ops
// where widening the weights to f32 spends 16. That holds while a block meets few tokens; from
// kQ8WidenMinTokens tokens (prefill) the AVX2 build widens each block once into an L1 tile and
// reuses it for every token instead (matmul-cpu.cc; measured in cpu-device.h).
//
// Results differ from the f32 dot of x and the dequantised weights by the rounding of x to int8:
// per block at most max|x_b|/254 · Σ_b |w| (the self-test's bound); exact for x that int8 blocks
// represent.
#include "cpu/intrinsics.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/cpu-device.h"
#include "cpu/tile-reduce.h"
#include "cpu/matmul-bf16-amx.h"
#include "cpu/matmul-q8-amx.h"
#include "cpu/simd-config.h"

namespace loom {

#if LOOM_Q8_DOT

namespace {

#if LOOM_AVX512_VNNI

// One quantised activation row (token) in the scratch: q [K64] int8 (zero past K), then per
// block pair p: neg[p] [16] int32 (lanes 0-7: -16·Σ q of block 2p, lanes 8-15: of block 2p+1),
// then dxv[p] [16] f32 (lanes 0-7: dx of block 2p, lanes 8-15: dx of block 2p+1; 0 past K).
struct XqLayout {
  int64_t K, npairs, k64, stride;
  explicit XqLayout(int64_t k) : K(k), npairs((k / kQ8Block + 1) / 2), k64(npairs * 64), stride(k64 + npairs * 128) {}
  const int32_t* neg(const uint8_t* row) const { return reinterpret_cast<const int32_t*>(row + k64); }
  const float* dxv(const uint8_t* row) const { return reinterpret_cast<const float*>(row + k64 + npairs * 64); }
};

// Quantise one f32 row of K (a multiple of 32) into the layout above.
void quantize_row(const float* x, const XqLayout& L, uint8_t* out) {
  int8_t* q = reinterpret_cast<int8_t*>(out);
  int32_t* neg = reinterpret_cast<int32_t*>(out + L.k64);
  float* dxv = reinterpret_cast<float*>(out + L.k64 + L.npairs * 64);
  const int64_t nb = L.K / kQ8Block;
  for (int64_t b = 0; b < L.npairs * 2; b++) {
    if (b >= nb) {  // the empty half of the last pair
      std::fill(q + b * 32, q + b * 32 + 32, int8_t(0));
      std::fill(neg + b * 8, neg + b * 8 + 8, 0);
      std::fill(dxv + b * 8, dxv + b * 8 + 8, 0.0f);
      continue;
    }
    const __m512 v0 = _mm512_loadu_ps(x + b * 32), v1 = _mm512_loadu_ps(x + b * 32 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(d > 0 ? 1.0f / d : 0.0f);
    // cvtps_epi32 rounds half to even (the default MXCSR mode), as quantize_q8_rows does.
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32 + 16), _mm512_cvtsepi32_epi8(q1));
    const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(neg + b * 8), _mm256_set1_epi32(-16 * sum));
    _mm256_storeu_ps(dxv + b * 8, _mm256_set1_ps(d));
  }
}

// The micro-kernel. Semantics: for t < TN, r < kRows: out[t*kRows + r] =
//   Σ_b dw[r,b] · dx[t,b] · Σ_{k in b} qw[r,k] · qx[t,k]
// w: kRows Q8 rows (row length K), x: TN quantised rows (XqLayout). pf: bytes prefetched into
// L2, pf_step per block pair, from pf (a later block's rows; null: none).
template <int TN>
inline void dot_q8(const uint8_t* const* w, const uint8_t* const* x, const XqLayout& L, float* out, const char* pf,
                   int64_t pf_step) {
  __m512 acc[TN][kRows];
#pragma GCC unroll 8
  for (int t = 0; t < TN; t++) acc[t][0] = acc[t][1] = acc[t][2] = _mm512_setzero_ps();
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  // Two f16 scales (a 32-bit word) to 16 floats: lanes 0-7 the first, lanes 8-15 the second.
  const __m256i spread = _mm256_set_epi16(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const int64_t K = L.K;
  for (int64_t p = 0; p < L.npairs; p++) {
    const int64_t k = p * 64;
    const bool full = k + 64 <= K;  // else the last pair holds one block
    if (pf) {
      for (int64_t o = p * pf_step; o < (p + 1) * pf_step; o += 64) _mm_prefetch(pf + o, _MM_HINT_T1);
    }
#pragma GCC unroll 3
    for (int r = 0; r < kRows; r++) {
      __m512i wv = full ? _mm512_loadu_si512(w[r] + k) : _mm512_maskz_loadu_epi8(__mmask64(0xffffffffull), w[r] + k);
      wv = _mm512_xor_si512(wv, flip);
      uint32_t sc;
      if (full) {
        std::memcpy(&sc, w[r] + K + p * 4, 4);
      } else {
        uint16_t s16;
        std::memcpy(&s16, w[r] + K + p * 4, 2);
        sc = s16;
      }
      const __m512 dwv = _mm512_cvtph_ps(_mm256_permutexvar_epi16(spread, _mm256_set1_epi32(int(sc))));
      __asm__("" : "+v"(wv));
#pragma GCC unroll 8
      for (int t = 0; t < TN; t++) {
        const __m512i s = _mm512_dpbusd_epi32(_mm512_loadu_si512(L.neg(x[t]) + p * 16), wv,
                                              _mm512_loadu_si512(x[t] + k));
        const __m512 scale = _mm512_mul_ps(dwv, _mm512_loadu_ps(L.dxv(x[t]) + p * 16));
        acc[t][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc[t][r]);
      }
    }
  }
  reduce_tile<TN>(acc, out);
}

#else  // LOOM_AVX2_Q8_DOT

// One quantised activation row (token) in the scratch: q [K] int8, then |q| [K] (vpmaddubsw's
// unsigned operand), then dx [K / 32] f32. npairs: pairs of 32-blocks, the k-loop's prefetch step
// (as the VNNI layout's).
struct XqLayout {
  int64_t K, nb, npairs, stride;
  explicit XqLayout(int64_t k) : K(k), nb(k / kQ8Block), npairs((k / kQ8Block + 1) / 2), stride(2 * k + nb * 4) {}
  const uint8_t* abs_q(const uint8_t* row) const { return row + K; }
  const float* dx(const uint8_t* row) const { return reinterpret_cast<const float*>(row + 2 * K); }
};

// Quantise one f32 row of K (a multiple of 32) into the layout above: per block dx = max|x| / 127,
// q = round_half_even(x / dx) (the VNNI path's and quantize_q8_rows' rounding).
void quantize_row(const float* x, const XqLayout& L, uint8_t* out) {
  int8_t* q = reinterpret_cast<int8_t*>(out);
  uint8_t* aq = out + L.K;
  float* dx = reinterpret_cast<float*>(out + 2 * L.K);
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < L.nb; b++) {
    __m256 v[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
      v[i] = _mm256_loadu_ps(x + b * 32 + i * 8);
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign_bit, v[i]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float d = _mm_cvtss_f32(m4) / 127.0f;
    const __m256 id = _mm256_set1_ps(d > 0 ? 1.0f / d : 0.0f);
    __m256i qi[4];
    for (int i = 0; i < 4; i++) qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));  // half to even (MXCSR)
    // int32 → int8 with the 32 values back in order (the packs interleave 128-bit lanes).
    const __m256i q16 = _mm256_packs_epi32(qi[0], qi[1]), q16b = _mm256_packs_epi32(qi[2], qi[3]);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16, q16b), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * 32), q8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(aq + b * 32), _mm256_abs_epi8(q8));
    dx[b] = d;
  }
}

// The micro-kernel. Semantics: for t < TN, r < kRows: out[t*kRows + r] =
//   Σ_b dw[r,b] · dx[t,b] · Σ_{k in b} qw[r,k] · qx[t,k]
// w: kRows Q8 rows (row length K), x: TN quantised rows (XqLayout). pf: bytes prefetched into
// L2 pf_step per block pair from pf (a later block's rows; null: none).
template <int TN>
inline void dot_q8(const uint8_t* const* w, const uint8_t* const* x, const XqLayout& L, float* out, const char* pf,
                   int64_t pf_step) {
  __m256 acc[TN][kRows];
#pragma GCC unroll 4
  for (int t = 0; t < TN; t++) acc[t][0] = acc[t][1] = acc[t][2] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t K = L.K;
  for (int64_t b = 0; b < L.nb; b++) {
    if (pf && b % 2 == 0)
      for (int64_t o = b / 2 * pf_step; o < (b / 2 + 1) * pf_step; o += 64) _mm_prefetch(pf + o, _MM_HINT_T1);
    __m256i wv[kRows];
    float dw[kRows];
#pragma GCC unroll 3
    for (int r = 0; r < kRows; r++) {
      wv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[r] + b * 32));
      uint16_t h;
      std::memcpy(&h, w[r] + K + 2 * b, 2);
      dw[r] = _cvtsh_ss(h);
    }
#pragma GCC unroll 4
    for (int t = 0; t < TN; t++) {
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[t] + b * 32));
      const __m256i ax = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(L.abs_q(x[t]) + b * 32));
      const float dx = L.dx(x[t])[b];
#pragma GCC unroll 3
      for (int r = 0; r < kRows; r++) {
        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv[r], xq)), ones);
        acc[t][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw[r] * dx), acc[t][r]);
      }
    }
  }
  // Each accumulator's 8 lanes, in one order whatever TN: a token's outputs are its batch-1 bits.
#pragma GCC unroll 4
  for (int t = 0; t < TN; t++)
    for (int r = 0; r < kRows; r++) {
      const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc[t][r]), _mm256_extractf128_ps(acc[t][r], 1));
      const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
      out[t * kRows + r] = _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
    }
}

#endif  // LOOM_AVX512_VNNI

// dot_q8 for a run-time token count (up to kMaxTokens: 8 with AVX-512, 4 with AVX2).
void dot_q8_tn(int tn, const uint8_t* const* w, const uint8_t* const* x, const XqLayout& L, float* out,
               const char* pf, int64_t pf_step) {
  switch (tn) {
#if LOOM_AVX512
    case 8: dot_q8<8>(w, x, L, out, pf, pf_step); break;
    case 7: dot_q8<7>(w, x, L, out, pf, pf_step); break;
    case 6: dot_q8<6>(w, x, L, out, pf, pf_step); break;
    case 5: dot_q8<5>(w, x, L, out, pf, pf_step); break;
#endif
    case 4: dot_q8<4>(w, x, L, out, pf, pf_step); break;
    case 3: dot_q8<3>(w, x, L, out, pf, pf_step); break;
    case 2: dot_q8<2>(w, x, L, out, pf, pf_step); break;
    default: dot_q8<1>(w, x, L, out, pf, pf_step); break;
  }
}

// Row blocks prefetched ahead of the one being dotted (as matmul-cpu.cc's kPrefetchBlocks; 1, 4
// and 8 measured slower at batch 1). Into L2 (T1), not L1: a batch-1 step was ~2% faster, as the
// L1 fill buffers stay free for the demand loads of the block being dotted.
constexpr int64_t kQ8PrefetchBlocks = 2;
// From this many tokens (prefill chunks, batched decode from 16 rows, Medusa trees) Q8 rows in
// multiples of 16 go to AMX int8 tiles where the CPU has them (matmul-q8-amx.cc; same formula,
// exact integer sums, a different float summation order). Step times of the 135M bench model,
// AMX vs VNNI (two settings alternating in one process): 8 tokens 1.6x slower, 12 1.1x slower,
// 16 level to 1.1x faster, 20-24 1.1-1.3x faster, 32 1.6x faster; 64 was the first threshold,
// sized for prefill.
constexpr int64_t kQ8AmxMinTokens = 16;
// Up to this many activation values (tokens × K) the caller quantises x itself: a decode step's
// few rows take well under a microsecond, less than a pool region's hand-off and barrier.
constexpr int64_t kQ8InlineQuantizeElems = 16384;
// Up to this many tokens the step is DRAM-bound and each thread takes two contiguous runs of row
// blocks, not kChunksPerThread: longer sequential streams for the prefetchers. With the L2
// prefetch, int8 batch-1 steps of the demo-sized model were 5-7% faster (one process, steps
// alternating); 16 runs per thread measured 5-10% slower.
constexpr int64_t kQ8StreamingTokens = 4;
constexpr int kQ8StreamingChunksPerThread = 2;

}  // namespace

// Every job's weights are Q8 with the same K (the jobs share x). Threads split the row blocks of
// all jobs into contiguous runs, as the f32/16-bit matmul does; each block's rows are dotted
// against every token, 8 at a time, while they sit in L1.
void CpuDevice::matmul_q8(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs, bool accumulate) {
  const XqLayout L(jobs[0].w.cols);
#if LOOM_AMX_INT8
  const bool amx = T >= kQ8AmxMinTokens && amx_usable();
#else
  const bool amx = false;
#endif
  // Scratch: the VNNI layout of every token, then (AMX) the tiles' int8 blocks and scales.
  const int64_t nb = L.K / kQ8Block, ttiles = (T + 15) / 16;
  const int64_t vnni_bytes = (T * L.stride + 63) / 64 * 64, amx_bytes = amx ? ttiles * nb * (512 + 64) : 0;
  if (int64_t(xq_.size()) < vnni_bytes + amx_bytes + 64) xq_.resize(size_t(vnni_bytes + amx_bytes + 64));
  uint8_t* xq = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(xq_.data()) + 63) & ~uintptr_t(63));
  [[maybe_unused]] int8_t* xv = reinterpret_cast<int8_t*>(xq + vnni_bytes);
  [[maybe_unused]] float* dxs = reinterpret_cast<float*>(xq + vnni_bytes + ttiles * nb * 512);
  if (!amx && T * L.K <= kQ8InlineQuantizeElems) {
    for (int64_t t = 0; t < T; t++) quantize_row(x + t * ldx, L, xq + t * L.stride);
  } else {
    pool_.run([&](int chunk, int nchunks) {
      int64_t t0, t1;
      split_range(T, nchunks, chunk, 1, &t0, &t1);
      for (int64_t t = t0; t < t1; t++) quantize_row(x + t * ldx, L, xq + t * L.stride);
#if LOOM_AMX_INT8
      if (amx) {
        int64_t a0, a1;
        split_range(ttiles, nchunks, chunk, 1, &a0, &a1);
        for (int64_t tt = a0; tt < a1; tt++)
          amx_q8_pack_tokens(x + tt * 16 * ldx, std::min<int64_t>(16, T - tt * 16), ldx, L.K, xv + tt * nb * 512,
                             dxs + tt * nb * 16);
      }
#endif
    });
  }
  constexpr int64_t kAmxBlock = int64_t(1) << 39;  // flag bit of a work item: 32 rows on AMX tiles
  blocks_.clear();
  for (int j = 0; j < njobs; j++) {
    const int64_t N = jobs[j].w.rows, amx_rows = amx ? N / 16 * 16 : 0;
    for (int64_t n = 0; n < amx_rows; n += 32) blocks_.push_back(int64_t(j) << 40 | kAmxBlock | n);
    for (int64_t n = amx_rows; n < N; n += kRows) blocks_.push_back(int64_t(j) << 40 | n);
  }
  const int64_t nblocks = int64_t(blocks_.size());
  const int64_t* blocks = blocks_.data();
  const int64_t row_bytes = q8_row_bytes(L.K);
  pool_.run([&](int chunk, int nchunks) {
    int64_t b0, b1;
    split_range(nblocks, nchunks, chunk, 1, &b0, &b1);
    for (int64_t b = b0; b < b1; b++) {
      const MatmulJob& job = jobs[blocks[b] >> 40];
      if (blocks[b] & kAmxBlock) {
#if LOOM_AMX_INT8
        const int64_t n = blocks[b] & (kAmxBlock - 1);
        amx_q8_dot_rows(xv, dxs, T, job, n, std::min(n + 32, job.w.rows / 16 * 16), accumulate);
#endif
        continue;
      }
      const int64_t n0 = blocks[b] & ((int64_t(1) << 40) - 1);
      const int nrows = int(std::min<int64_t>(kRows, job.w.rows - n0));
      const uint8_t* base = static_cast<const uint8_t*>(job.w.data);
      const uint8_t* w[kRows];
      for (int i = 0; i < kRows; i++) w[i] = base + (n0 + std::min(i, nrows - 1)) * row_bytes;
      // The rows kQ8PrefetchBlocks blocks ahead, spread over the first token tile's k-loop.
      const char* pf = nullptr;
      int64_t pf_step = 0;
      if (b + kQ8PrefetchBlocks < b1 && !(blocks[b + kQ8PrefetchBlocks] & kAmxBlock)) {
        const MatmulJob& pj = jobs[blocks[b + kQ8PrefetchBlocks] >> 40];
        const int64_t pn = blocks[b + kQ8PrefetchBlocks] & ((int64_t(1) << 40) - 1);
        const int64_t bytes = std::min<int64_t>(kRows, pj.w.rows - pn) * row_bytes;
        pf = static_cast<const char*>(pj.w.data) + pn * row_bytes;
        pf_step = (bytes + L.npairs * 64 - 1) / (L.npairs * 64) * 64;
      }
      for (int64_t t = 0; t < T; t += kMaxTokens) {
        const int tn = int(std::min<int64_t>(kMaxTokens, T - t));
        const uint8_t* xs[kMaxTokens];
        for (int i = 0; i < kMaxTokens; i++) xs[i] = xq + std::min<int64_t>(t + i, T - 1) * L.stride;
        float out[kMaxTokens * kRows];  // [tn, kRows]
        dot_q8_tn(tn, w, xs, L, out, t == 0 ? pf : nullptr, pf_step);
        store_tile(out, tn, nrows, job, t, n0, accumulate);
      }
    }
  }, T <= kQ8StreamingTokens ? pool_.size() * kQ8StreamingChunksPerThread : 0);
}

#endif  // LOOM_Q8_DOT

}  // namespace loom
