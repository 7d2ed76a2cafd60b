// Weights-stationary batched matmul for the cpu device.
//
// Decode is bound by weight bandwidth at small batches and by FMA throughput at large ones, so
// the kernel must do both well:
//   - every weight row is read from DRAM once per step no matter how many tokens are batched:
//     the threads split the output features (row blocks of all jobs) into contiguous chunks,
//     and each block of kRows rows is dotted against every token of the step while it sits in
//     L1;
//   - the dot products run in a register tile of kRows rows × up to kMaxTokens tokens (3 × 8
//     zmm accumulators with AVX-512), so a k-step issues 24 FMAs for 11 loads and the loop is
//     FMA-bound once the tiles are cache-resident;
//   - a step of few tokens (decode at batch 1-4; f32 up to 8) on the AVX2 build reads a block's
//     rows one after another against every token, a single stream per core (dot_row_streaming):
//     each byte meets few tokens, and one stream pulled more from DRAM than three side by side;
//   - with more tokens than one tile, super_blocks(K) blocks take turns against each x tile,
//     so the x of a 32-token step (73 KB at K = 576, more than L1) is pulled into L1 once per
//     super-block rather than once per block;
//   - 16-bit weights are widened to f32 in registers (bf16: zero-extend + 16-bit shift, f16:
//     vcvtph2ps) when the step has at most kFewTokens tokens (one register tile with AVX-512, up
//     to two with AVX2, the second reading the block from L1); with more tokens the block is
//     widened once into an L1 tile and every further pass reads f32.
//   - Q8 rows (8-bit weights): with AVX-512 this path serves them only where the CPU lacks VNNI
//     (matmul-q8-cpu.cc otherwise) and always widens them into the tile (d * q per 32-weight
//     block); with AVX2 it serves steps of kQ8WidenMinTokens or more (prefill: the widened
//     block is reused by every token; smaller steps take the int8 dot kernel), widened into
//     the tile.
// Accumulation is exact f32 FMA, so results match the f64 reference within f32 rounding. Large
// prefills tile the tokens as well so the activations stay in L2 while the weights stream
// through. Two dtypes leave this file for dot-product instructions where the CPU has them (see
// CpuDevice::matmul): Q8 (vpdpbusd) and bf16 steps of kBf16DotMinTokens or more (vdpbf16ps).
#include "cpu/intrinsics.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu/cpu-device.h"
#include "cpu/tile-reduce.h"
#include "cpu/simd-config.h"

namespace loom {
namespace {

// Tokens per pass over the weights (the x tile, tokens x K f32, stays in L2 while the weights stream
// through). Each pass re-reads the weights and re-widens 16-bit and Q8 rows into the L1 tile, so
// fewer, longer passes pay where L2 holds the tile: on the AVX2 EPYC (1 MB L2) 128 against 64 was
// level for f32 and 1.03-1.09x for Q8 prefill projections (135M bench model shapes, 128-512 tokens,
// 2 threads, both alternating in one process). The AVX-512 build keeps 64: 128 is unmeasured there.
constexpr int64_t kTokenTile = LOOM_AVX512 ? 64 : 128;
// Software prefetch distance in row blocks (~7 KB of f32 rows at K = 576). The hardware
// prefetcher alone left a batch-1 step at ~25 GB/s; prefetching two blocks ahead reached the
// probe's bandwidth (a Xeon with AVX-512, into L1: the distance is short enough not to evict the
// x tile). 4 and 6 blocks measured no better on the AVX2 EPYC below.
constexpr int64_t kPrefetchBlocks = 2;
// Where the spread prefetch of later weight rows goes. On the AVX2-only AMD EPYC (2026-11-27,
// 135M bench model, 2 threads, in one process against T0, median of paired rounds) prefetching
// into L2 made decode steps faster at every batch: f32 1.42x (B=1), 1.49x (B=4), 1.54x (B=8),
// 1.26x (B=16); bf16 1.68x, 1.33x, 1.21x (B=16: no change, its rows are widened into a tile and
// prefetched in a burst). Into L1 each line holds one of the core's few L1 miss buffers until it
// arrives; into L2 more lines are in flight, and the k-loop's own loads find them in L2 a block
// later. (matmul-q8-cpu.cc prefetches into L2 for the same reason.) The AVX-512 build keeps L1,
// as measured on the Xeon; it has not been measured on an AVX-512 AMD CPU.
constexpr bool kWeightPrefetchToL2 = !LOOM_AVX512;
constexpr int kWeightPrefetchHint = kWeightPrefetchToL2 ? _MM_HINT_T1 : _MM_HINT_T0;
// Up to this many tokens the later block is prefetched in one burst at the start of a block
// (the step is bandwidth-bound and the burst measured best); above it the prefetches are spread
// over the k-loop of the dot (dot_block's pf), which took batch-8 f32 steps from ~35 to ~25 ms
// here: a burst of 108 prefetches fills the miss buffers and stalls the FMAs behind it.
// On the AVX2 build spreading won at every token count (an AVX2-only AMD EPYC, 2026-11-27, 135M
// bench model, both ways alternating in one process: batch-1 steps f32 1.08x, bf16 1.29x faster).
#if LOOM_AVX512
constexpr int64_t kBurstPrefetchTokens = 2;
#else
constexpr int64_t kBurstPrefetchTokens = 0;
#endif
// From this many tokens a matmul is compute-bound here (FMA throughput, not DRAM), so it also
// pulls the bytes of prefetch_in_next_matmul (the LoRA A/Bt its projection applies next) into
// cache, spread evenly over its blocks and dot calls; below it the step is bandwidth-bound and
// those bytes would only compete with the weights.
constexpr int64_t kHintMinTokens = 16;
// Blocks dotted against one x tile in turn when a step has more than kMaxTokens tokens (see the
// block loop): super_blocks(K) of them, at most kSuperBlock. On the AVX-512 Xeon, batch-32 decode
// steps: 44.8 -> 36.6 ms (f32) and 40.2 -> 35.5 ms (bf16) with 2 instead of 1; 3 and 4 measured
// 37.5 and 38.4 ms (f32), so that build keeps 2. On the AVX2 EPYC, as many blocks as fit in
// kSuperBlockBytes of f32 rows (8 at K = 576, 4 at K = 1536): each x tile is read from L2 once
// per 24 or 12 rows instead of once per 6. Against 2, in one process alternating (135M bench model
// shapes, 2 threads): 1.02-1.09x at 16-256 tokens for f32, bf16 and Q8; 8 blocks at K = 1536
// (147 KB) measured 0.98-1.0x.
#if LOOM_AVX512
constexpr int64_t kSuperBlock = 2;
constexpr int64_t super_blocks(int64_t) { return kSuperBlock; }
#else
constexpr int64_t kSuperBlock = 8;
constexpr int64_t kSuperBlockBytes = 96 << 10;
constexpr int64_t super_blocks(int64_t K) {
  return std::max<int64_t>(2, std::min<int64_t>(kSuperBlock, kSuperBlockBytes / (kRows * 4 * K)));
}
#endif

#if LOOM_AVX512

// 16 weights of one row starting at element k, widened to f32. `load` reads all 16; `load_tail`
// reads only the lanes in `m` (the K % 16 tail) and zeroes the rest. The main loop must use
// plain loads: masked loads streaming from DRAM measured ~2x slower here (they seem not to
// train the hardware prefetcher).
struct LoadF32 {
  static constexpr int64_t kBytes = 4;
  static __m512 load(const void* w, int64_t k) { return _mm512_loadu_ps(static_cast<const float*>(w) + k); }
  static __m512 load_tail(const void* w, int64_t k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(w) + k);
  }
};
struct LoadBF16 {  // bf16 is the high half of an f32: zero-extend to 32 bits, shift left 16
  static constexpr int64_t kBytes = 2;
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 load(const void* w, int64_t k) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + k)));
  }
  static __m512 load_tail(const void* w, int64_t k, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(w) + k));
  }
};
struct LoadF16 {
  static constexpr int64_t kBytes = 2;
  static __m512 load(const void* w, int64_t k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + k)));
  }
  static __m512 load_tail(const void* w, int64_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(w) + k));
  }
};

// The micro-kernel. Semantics: for t < TN, i < kRows: out[t*kRows + i] = Σ_{k<K} W_i[k] * x_t[k]
// w: kRows row pointers in Ld's dtype, x: TN f32 rows. Accumulators: TN × kRows zmm.
// pf_off: the rows to prefetch into L1 as this block streams are each row's address + pf_off
// bytes (a later block of the same weight matrix: rows are contiguous), one line per row per
// k-step (f32), spread over the loop rather than issued as a burst that fills the miss buffers
// and stalls the FMAs; 0 prefetches the block's own rows (a no-op). An offset rather than three
// more pointers: the 8-token tile already needs 14 general registers, and spilled pointers
// cost more than the prefetch gains.
template <typename Ld, int TN, int Hint = _MM_HINT_T0>
inline void dot_block(const void* const* w, const float* const* x, int64_t K, float* out, int64_t pf_off) {
  // Every loop over t or i is fully unrolled so the accumulators and pointers live in registers:
  // an array indexed by a loop the compiler keeps rolled is spilled to the stack every k-step.
  const void* const w0p = w[0];
  const void* const w1p = w[1];
  const void* const w2p = w[2];
  const float* xp[TN];
  __m512 acc[TN][kRows];
#pragma GCC unroll 8
  for (int t = 0; t < TN; t++) {
    xp[t] = x[t];
    acc[t][0] = acc[t][1] = acc[t][2] = _mm512_setzero_ps();
  }
  // One k-step: 3 weight vectors, TN activation vectors, 3·TN FMAs. The weights and x are
  // forced into registers: GCC would otherwise fold the loads into the FMAs (TN loads per
  // weight, 3 per token) and the kernel would be load-port bound.
  auto fma_step = [&acc, &xp](__m512 w0, __m512 w1, __m512 w2, int64_t k, __mmask16 m, bool tail)
                      __attribute__((always_inline)) {
    __asm__("" : "+v"(w0), "+v"(w1), "+v"(w2));
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) {
      __m512 xv = tail ? _mm512_maskz_loadu_ps(m, xp[t] + k) : _mm512_loadu_ps(xp[t] + k);
      __asm__("" : "+v"(xv));
      acc[t][0] = _mm512_fmadd_ps(w0, xv, acc[t][0]);
      acc[t][1] = _mm512_fmadd_ps(w1, xv, acc[t][1]);
      acc[t][2] = _mm512_fmadd_ps(w2, xv, acc[t][2]);
    }
  };
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    _mm_prefetch(static_cast<const char*>(w0p) + pf_off + k * Ld::kBytes, _mm_hint(Hint));
    _mm_prefetch(static_cast<const char*>(w1p) + pf_off + k * Ld::kBytes, _mm_hint(Hint));
    _mm_prefetch(static_cast<const char*>(w2p) + pf_off + k * Ld::kBytes, _mm_hint(Hint));
    fma_step(Ld::load(w0p, k), Ld::load(w1p, k), Ld::load(w2p, k), k, 0xffff, false);
  }
  if (k < K) {
    const __mmask16 m = __mmask16((1u << (K - k)) - 1);
    fma_step(Ld::load_tail(w0p, k, m), Ld::load_tail(w1p, k, m), Ld::load_tail(w2p, k, m), k, m, true);
  }
  reduce_tile<TN>(acc, out);  // 4 at a time, in the flattened [t][i] order of `out`
}

// Dequantise one Q8 row of n weights (n a multiple of 32) to f32: d * q per block.
inline void widen_q8_row(const void* src, int64_t n, float* dst) {
  const int8_t* q = static_cast<const int8_t*>(src);
  const uint16_t* d = reinterpret_cast<const uint16_t*>(q + n);
  for (int64_t b = 0; b < n / kQ8Block; b++) {
    uint16_t h;
    std::memcpy(&h, d + b, 2);
    const __m512 s = _mm512_set1_ps(f16_to_f32(h));
    for (int64_t k = b * kQ8Block; k < (b + 1) * kQ8Block; k += 16)
      _mm512_storeu_ps(dst + k, _mm512_mul_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k))))));
  }
}

// Widen one weight row of n elements (16-bit, or a whole Q8 row) to f32 (for the multi-pass case).
inline void widen_row(const void* src, DType dt, int64_t n, float* dst) {
  if (dt == DType::Q8) return widen_q8_row(src, n, dst);
  int64_t k = 0;
  for (; k < n; k += 16) {
    if (n - k >= 16) {
      _mm512_storeu_ps(dst + k, dt == DType::BF16 ? LoadBF16::load(src, k) : LoadF16::load(src, k));
    } else {
      const __mmask16 m = __mmask16((1u << (n - k)) - 1);
      _mm512_mask_storeu_ps(dst + k, m, dt == DType::BF16 ? LoadBF16::load_tail(src, k, m) : LoadF16::load_tail(src, k, m));
    }
  }
}

constexpr bool kConvertInRegisters = true;

#else  // AVX2 + FMA + F16C

// 8 weights of one row from element k, widened to f32 in registers (the AVX-512 loaders at half
// the width), and one element for the K % 8 tail. Widening in registers matters most here: a
// block widened into an L1 tile first (the AVX2 path until 2026-11-27) was 3·K floats written and
// read again per block, 18 KB at K = 1536, which with x and the prefetched block overflowed a
// 32 KB L1 (the bench model's down projection streamed at ~15 GB/s against ~25 for the others).
struct LoadF32 {
  static constexpr int64_t kBytes = 4;
  static __m256 load(const void* w, int64_t k) { return _mm256_loadu_ps(static_cast<const float*>(w) + k); }
  static float at(const void* w, int64_t k) { return static_cast<const float*>(w)[k]; }
};
struct LoadBF16 {  // bf16 is the high half of an f32: zero-extend to 32 bits, shift left 16
  static constexpr int64_t kBytes = 2;
  static __m256 load(const void* w, int64_t k) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float at(const void* w, int64_t k) { return bf16_to_f32(static_cast<const uint16_t*>(w)[k]); }
};
struct LoadF16 {
  static constexpr int64_t kBytes = 2;
  static __m256 load(const void* w, int64_t k) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + k)));
  }
  static float at(const void* w, int64_t k) { return f16_to_f32(static_cast<const uint16_t*>(w)[k]); }
};
// Q8 rows (int8 values, then one f16 scale d per 32-block; K a multiple of 32, so no tail): the
// 8 values at k as d·q, the product widen_row forms, so both paths give the same bits.
struct LoadQ8 {
  static constexpr int64_t kBytes = 1;
  static __m256 load(const void* w, int64_t k, __m256 d) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(w) + k));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
  }
  // The scale of the 32-block holding element k of a row of K values, broadcast.
  static __m256 scale(const void* w, int64_t k, int64_t K) {
    uint16_t h;
    std::memcpy(&h, static_cast<const int8_t*>(w) + K + 2 * (k / kQ8Block), 2);
    return _mm256_set1_ps(f16_to_f32(h));
  }
};

// The AVX2 micro-kernel: kRows rows in Ld's dtype × TN tokens, 3·TN + 4 ymm registers (16 at
// TN = 4). Semantics: for t < TN, i < kRows: out[t*kRows + i] = Σ_{k<K} w_i[k] * x_t[k]
// pf_off: as the AVX-512 kernel's (a later block's rows at each row's address + pf_off bytes,
// one line per row per 64 bytes of the rows), 0 for none. Sums: per lane over k-steps of 8,
// hsum4, then the K % 8 tail in order, whatever Ld is: a 16-bit or Q8 row gives the bits of
// its widened f32 row.
template <typename Ld, int TN, int Hint = _MM_HINT_T0>
inline void dot_block(const void* const* w, const float* const* x, int64_t K, float* out, int64_t pf_off) {
  const void* const w0p = w[0];
  const void* const w1p = w[1];
  const void* const w2p = w[2];
  __m256 acc[TN][kRows];
#pragma GCC unroll 4
  for (int t = 0; t < TN; t++) acc[t][0] = acc[t][1] = acc[t][2] = _mm256_setzero_ps();
  auto fma_step = [&acc, x](__m256 w0, __m256 w1, __m256 w2, int64_t k) __attribute__((always_inline)) {
    __asm__("" : "+v"(w0), "+v"(w1), "+v"(w2));  // see the AVX-512 kernel: weights in registers
#pragma GCC unroll 4
    for (int t = 0; t < TN; t++) {
      __m256 xv = _mm256_loadu_ps(x[t] + k);
      __asm__("" : "+v"(xv));
      acc[t][0] = _mm256_fmadd_ps(w0, xv, acc[t][0]);
      acc[t][1] = _mm256_fmadd_ps(w1, xv, acc[t][1]);
      acc[t][2] = _mm256_fmadd_ps(w2, xv, acc[t][2]);
    }
  };
  auto prefetch = [w0p, w1p, w2p, pf_off](int64_t k) __attribute__((always_inline)) {
    _mm_prefetch(static_cast<const char*>(w0p) + pf_off + k * Ld::kBytes, _mm_hint(Hint));
    _mm_prefetch(static_cast<const char*>(w1p) + pf_off + k * Ld::kBytes, _mm_hint(Hint));
    _mm_prefetch(static_cast<const char*>(w2p) + pf_off + k * Ld::kBytes, _mm_hint(Hint));
  };
  int64_t k = 0;
  if constexpr (std::is_same_v<Ld, LoadQ8>) {
    for (; k < K; k += kQ8Block) {  // one 64-byte line of prefetch covers two 32-blocks
      if (pf_off != 0 && k % 64 == 0) prefetch(k);
      alignas(32) __m256 d[kRows] = {Ld::scale(w0p, k, K), Ld::scale(w1p, k, K), Ld::scale(w2p, k, K)};
#pragma GCC unroll 4
      for (int64_t kk = k; kk < k + kQ8Block; kk += 8)
        fma_step(Ld::load(w0p, kk, d[0]), Ld::load(w1p, kk, d[1]), Ld::load(w2p, kk, d[2]), kk);
    }
  } else {
    constexpr int64_t kPer64 = 64 / (8 * Ld::kBytes);  // k-steps per 64-byte line of a row
    // Two loops, not one testing pf_off every k-step: most dots of a prefill prefetch nothing
    // (only the first x tile of a block does), and the test, with its spilled operand, made the
    // loop 1.03-1.07x slower (f32 prefill projections, alternating in one process).
    if (pf_off != 0) {
      for (; k + 8 <= K; k += 8) {
        if ((k / 8) % kPer64 == 0) prefetch(k);
        fma_step(Ld::load(w0p, k), Ld::load(w1p, k), Ld::load(w2p, k), k);
      }
    } else {
      for (; k + 8 <= K; k += 8) fma_step(Ld::load(w0p, k), Ld::load(w1p, k), Ld::load(w2p, k), k);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < TN; t++) {
    float tmp[4];
    _mm_storeu_ps(tmp, hsum4(acc[t][0], acc[t][1], acc[t][2], acc[t][2]));
    for (int i = 0; i < kRows; i++) {
      out[t * kRows + i] = tmp[i];
      if constexpr (!std::is_same_v<Ld, LoadQ8>)
        for (int64_t kk = k; kk < K; kk++)  // K % 8 tail
          out[t * kRows + i] = add_product(out[t * kRows + i], Ld::at(w[i], kk), x[t][kk]);
    }
  }
}

// Widen n elements of a weight row to f32: bf16 by zero-extend + 16-bit shift, f16 with F16C, a
// whole Q8 row (n a multiple of 32) by sign-extending each int8 and scaling by its block's d.
inline void widen_row(const void* src, DType dt, int64_t n, float* dst) {
  if (dt == DType::Q8) {
    for (int64_t b = 0; b < n / kQ8Block; b++) {
      const __m256 d = LoadQ8::scale(src, b * kQ8Block, n);
      for (int64_t k = b * kQ8Block; k < (b + 1) * kQ8Block; k += 8) _mm256_storeu_ps(dst + k, LoadQ8::load(src, k, d));
    }
    return;
  }
  int64_t k = 0;
  if (dt == DType::BF16) {
    for (; k + 8 <= n; k += 8) _mm256_storeu_ps(dst + k, LoadBF16::load(src, k));
    for (; k < n; k++) dst[k] = LoadBF16::at(src, k);
  } else {
    for (; k + 8 <= n; k += 8) _mm256_storeu_ps(dst + k, LoadF16::load(src, k));
    for (; k < n; k++) dst[k] = LoadF16::at(src, k);
  }
}

constexpr bool kConvertInRegisters = true;

// One weight row against TN tokens, read as a single stream: out[t * kRows] = Σ_k w[k] * x_t[k]
// with the sums of dot_block's tile (one accumulator per token over k-steps of 8, hsum1 in
// hsum4's order, then the K % 8 tail in order), so a row gives the bits of its place in any tile.
// For steps of few tokens, where each weight byte meets few: on the AVX2 EPYC (2026-11-28, 60
// layers of a 1536 x 576 projection in 2 MB pages, 2 threads, alternating in one process) rows
// one at a time streamed faster than dot_block's three rows side by side (three streams 1-2 KB
// apart), at batch 1 bf16 1.07-1.32x and f32 1.04-1.06x (one thread, bf16: 10.0-10.3 against
// 7.2-8.0 GB/s; two rows side by side measured between); see kStreamMaxTokens16 for more tokens.
// At TN = 1 the one FMA chain caps a core at ~4.5 cycles per k-step (bf16 ~10 GB/s of weights per
// core at 2.9 GHz, measured from cache), above what a core of that host pulls from DRAM.
// pf_ahead: the line that many bytes past each 64 bytes of the row is prefetched into L2, a later
// row of the stream.
template <typename Ld, int TN>
void dot_row_streaming(const void* w, const float* const* x, int64_t K, int64_t pf_ahead, float* out) {
  constexpr int64_t kPer64 = 64 / (8 * Ld::kBytes);  // k-steps per 64-byte line of the row
  __m256 acc[TN];
#pragma GCC unroll 8
  for (int t = 0; t < TN; t++) acc[t] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    if ((k / 8) % kPer64 == 0) _mm_prefetch(static_cast<const char*>(w) + pf_ahead + k * Ld::kBytes, _MM_HINT_T1);
    __m256 wv = Ld::load(w, k);
    __asm__("" : "+v"(wv));  // widened once, in a register: not folded into each token's FMA
#pragma GCC unroll 8
    for (int t = 0; t < TN; t++) acc[t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[t] + k), acc[t]);
  }
#pragma GCC unroll 8
  for (int t = 0; t < TN; t++) {
    float sum = hsum1(acc[t]);
    for (int64_t kk = k; kk < K; kk++) sum = add_product(sum, Ld::at(w, kk), x[t][kk]);  // K % 8 tail
    out[t * kRows] = sum;
  }
}

// Up to this many tokens a step's 16-bit rows are read as single streams (dot_row_streaming); f32
// rows up to kFewTokens. Against the 3-row tiles on that EPYC (same harness, medians of 16 pairs):
// bf16 1.26x (2 tokens), 1.40x (3), 1.07-1.15x (4), 1.02x (6), 0.95x (8: widening a row for
// eight FMAs leaves the loop compute-bound); f32 1.14x (2), 1.07x (4), 1.06x (6), 1.13-1.17x (8).
constexpr int64_t kStreamMaxTokens16 = 4;
inline bool streams_rows(DType dt, int64_t T) {
  if (dt == DType::F32) return T <= kFewTokens;
  return dt != DType::Q8 && T <= kStreamMaxTokens16;
}

using StreamRowFn = void (*)(const void*, const float* const*, int64_t, int64_t, float*);
template <typename Ld>
StreamRowFn stream_row_for(int tn) {
  switch (tn) {
    case 8: return &dot_row_streaming<Ld, 8>;
    case 7: return &dot_row_streaming<Ld, 7>;
    case 6: return &dot_row_streaming<Ld, 6>;
    case 5: return &dot_row_streaming<Ld, 5>;
    case 4: return &dot_row_streaming<Ld, 4>;
    case 3: return &dot_row_streaming<Ld, 3>;
    case 2: return &dot_row_streaming<Ld, 2>;
    default: return &dot_row_streaming<Ld, 1>;
  }
}
// dot_row_streaming for a row dtype (f32, bf16 or f16) and 1..kFewTokens tokens.
inline StreamRowFn stream_row_for(DType dt, int tn) {
  if (dt == DType::F32) return stream_row_for<LoadF32>(tn);
  if (dt == DType::BF16) return stream_row_for<LoadBF16>(tn);
  return stream_row_for<LoadF16>(tn);
}

#endif

// Whether dot_block widens Q8 rows in registers (AVX2, where this file serves few-token Q8 steps
// only with LOOM_CPU_Q8=widen or LOOM_Q8_WIDEN, for measuring) or they are widened into the L1
// tile (AVX-512 without VNNI, and AVX2 steps of kQ8WidenMinTokens or more).
constexpr bool kQ8InRegisters = !LOOM_AVX512;
// Whether a pass of few tokens reads rows of `dt` where they are, widening in registers.
constexpr bool in_registers(DType dt) { return dt == DType::Q8 ? kQ8InRegisters : kConvertInRegisters; }

// The micro-kernel of one (weight dtype, token count, prefetch hint): the one dispatch from
// run-time shapes to dot_block instances, for dot_weights per call and for the few-token path of
// matmul_widen once per job.
using DotBlockFn = void (*)(const void* const*, const float* const*, int64_t, float*, int64_t);
template <typename Ld, int Hint>
DotBlockFn dot_block_for(int tn) {
  switch (tn) {
#if LOOM_AVX512
    case 8: return &dot_block<Ld, 8, Hint>;
    case 7: return &dot_block<Ld, 7, Hint>;
    case 6: return &dot_block<Ld, 6, Hint>;
    case 5: return &dot_block<Ld, 5, Hint>;
#endif
    case 4: return &dot_block<Ld, 4, Hint>;
    case 3: return &dot_block<Ld, 3, Hint>;
    case 2: return &dot_block<Ld, 2, Hint>;
    default: return &dot_block<Ld, 1, Hint>;
  }
}
template <int Hint = _MM_HINT_T0>
DotBlockFn dot_block_for(DType dt, int tn) {
  if (dt == DType::F32) return dot_block_for<LoadF32, Hint>(tn);
  if (dt == DType::BF16) return dot_block_for<LoadBF16, Hint>(tn);
#if !LOOM_AVX512
  if (dt == DType::Q8) return dot_block_for<LoadQ8, Hint>(tn);
#endif
  return dot_block_for<LoadF16, Hint>(tn);
}

// Dot kRows weight rows stored in `dt` against tn tokens; out [tn * kRows].
// pf_l2: the prefetches at pf_off go to L2 only (bytes a later op reads, not this matmul).
inline void dot_weights(DType dt, const void* const* w, const float* const* x, int tn, int64_t K, float* out,
                        int64_t pf_off, bool pf_l2 = false) {
  (pf_l2 ? dot_block_for<_MM_HINT_T1>(dt, tn) : dot_block_for<_MM_HINT_T0>(dt, tn))(w, x, K, out, pf_off);
}

}  // namespace

void dot_rows(DType dt, const void* const* w, const float* const* x, int tn, int64_t K,
              float out[kMaxTokens][kRows]) {
  dot_weights(dt, w, x, tn, K, &out[0][0], 0);
}

// Work list: blocks of up to kRows output rows of all jobs, in job order, so a chunk of the
// thread pool is a contiguous run of weight rows (long sequential streams for the hardware
// prefetcher). Rows past a job's end are clamped to its last row and their results dropped, so
// the micro-kernel never branches on N.
void CpuDevice::prefetch_in_next_matmul(const CacheRegion* regions, int n) {
  prefetch_.assign(regions, regions + n);
}

// The jobs of one call go to one path each (all share x and K): Q8 weights to the int8 dot kernel
// (on AVX2 only below kQ8WidenMinTokens tokens) and bf16 weights in steps of kBf16DotMinTokens or
// more to the vdpbf16ps kernel where the CPU has them, everything else to the generic kernel
// below. The model's calls are single-dtype, so this is one call in practice.
namespace {
// The dot-product paths' switches, read once from the environment (for measuring one path
// against the other on a host; the defaults are what measured best here).
// A token threshold from the environment variable `name`, else `fallback`; 0 (or less): never.
int64_t min_tokens_from_env(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr) return fallback;
  const long n = std::strtol(v, nullptr, 10);
  return n > 0 ? n : INT64_MAX;
}
struct DotPaths {
  int64_t bf16_min_tokens = min_tokens_from_env("LOOM_CPU_BF16_DOT_MIN_TOKENS", kBf16DotMinTokens);
  // AVX2 only: from this many tokens Q8 steps leave the int8 dot kernel for the widening path.
  int64_t q8_widen_min_tokens =
      min_tokens_from_env("LOOM_CPU_Q8_WIDEN_MIN_TOKENS", LOOM_AVX2_Q8_DOT ? kQ8WidenMinTokens : INT64_MAX);
  bool q8_vnni = true;  // LOOM_CPU_Q8=widen: the widening path instead
  DotPaths() {
    if (const char* v = std::getenv("LOOM_CPU_Q8")) q8_vnni = std::strcmp(v, "widen") != 0;
  }
};
const DotPaths& dot_paths() {
  static const DotPaths paths;
  return paths;
}
}  // namespace

void CpuDevice::matmul(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs, bool accumulate) {
  enum Path { kGeneric = 0, kQ8Dot = 1, kBf16Dot = 2 };
  const DotPaths& dp = dot_paths();
  auto path = [T, &dp](const MatmulJob& j) {
    if (LOOM_Q8_DOT && j.w.dtype == DType::Q8 && dp.q8_vnni && T < dp.q8_widen_min_tokens) return kQ8Dot;
    if (LOOM_AVX512_BF16 && j.w.dtype == DType::BF16 && T >= dp.bf16_min_tokens) return kBf16Dot;
    return kGeneric;
  };
  int npath[3] = {0, 0, 0};
  for (int j = 0; j < njobs; j++) npath[path(jobs[j])]++;
  if (T > 0 && njobs > 0 && npath[kGeneric] < njobs) {
    split_jobs_.clear();
    for (int p : {kQ8Dot, kBf16Dot, kGeneric})
      for (int j = 0; j < njobs; j++)
        if (path(jobs[j]) == p) split_jobs_.push_back(jobs[j]);
    const MatmulJob* sj = split_jobs_.data();
#if LOOM_Q8_DOT
    if (npath[kQ8Dot]) matmul_q8(x, T, ldx, sj, npath[kQ8Dot], accumulate);
#endif
#if LOOM_AVX512_BF16
    if (npath[kBf16Dot]) matmul_bf16_dot(x, T, ldx, sj + npath[kQ8Dot], npath[kBf16Dot], accumulate);
#endif
    sj += npath[kQ8Dot] + npath[kBf16Dot];
    // The generic path takes (and clears) the prefetch hint; with no generic job it is dropped.
    if (npath[kGeneric]) {
      matmul_widen(x, T, ldx, sj, npath[kGeneric], accumulate);
    } else {
      prefetch_.clear();
    }
    return;
  }
  matmul_widen(x, T, ldx, jobs, njobs, accumulate);
}

namespace {
// Every byte of the row block of `job` from row n0 into L1 at once: the prefetch of a later block
// when a step is bandwidth-bound (kBurstPrefetchTokens), and of a few-token chunk's first blocks.
inline void prefetch_block(const MatmulJob& job, int64_t n0) {
  const int64_t row_bytes = weight_row_bytes(job.w.dtype, job.w.cols);
  const char* p = static_cast<const char*>(job.w.data) + n0 * row_bytes;
  const int64_t bytes = std::min<int64_t>(kRows, job.w.rows - n0) * row_bytes;
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}
}  // namespace

void CpuDevice::matmul_widen(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs,
                             bool accumulate) {
  // The hint is for this call only.
  prefetch_end_.clear();
  int64_t hint_bytes = 0;
  if (T >= kHintMinTokens)
    for (const CacheRegion& r : prefetch_) prefetch_end_.push_back(hint_bytes += r.bytes);
  const CacheRegion* hint = prefetch_.data();
  const int64_t* hint_end = prefetch_end_.data();
  const int nhint = int(prefetch_end_.size());
  struct ClearHint {
    std::vector<CacheRegion>& v;
    ~ClearHint() { v.clear(); }
  } clear_hint{prefetch_};
  if (T <= 0 || njobs <= 0) return;
  // Blocks encoded as job * 2^40 + first row.
  blocks_.clear();
  for (int j = 0; j < njobs; j++)
    for (int64_t n = 0; n < jobs[j].w.rows; n += kRows) blocks_.push_back(int64_t(j) << 40 | n);
  const int64_t nblocks = int64_t(blocks_.size());
  const int64_t* blocks = blocks_.data();
  // Few tokens (decode, batched decode, Medusa trees): one pass over every block, the blocks of a
  // job walked with the job's kernel, row stride and outputs resolved once. At small K (the demo
  // model's 128: 8 k-steps per dot) the per-block bookkeeping of the general loop below was a
  // large share of a step. Same results as that loop; the kernels are its own (the tiles, or on
  // the AVX2 build the single-stream rows of streams_rows).
  //
  // One chunk per thread, not the pool's default four: each chunk costs a claim and a completion
  // on shared atomics and starts with blocks nothing prefetched, which at the demo model's sizes
  // (a 128-row projection is 43 blocks of 8 k-steps) was ~12% of a 5-token tree step (native
  // median 394 -> 343 us, 1-token 242 -> 238 us, paired in one process); the bench model's batch-1
  // and batch-8 decode steps measured the same either way. A worker that starts late still loses
  // its chunk to the caller, which claims whatever is unclaimed.
  bool few = T <= kFewTokens;
  for (int j = 0; j < njobs && few; j++) few = kQ8InRegisters || jobs[j].w.dtype != DType::Q8;
  if (few) {
    pool_.run([&](int chunk, int nchunks) {
      int64_t b0, b1;
      split_range(nblocks, nchunks, chunk, 1, &b0, &b1);
      // Token tiles of up to kMaxTokens: [0, tn0) and, on AVX2 above 4 tokens, [tn0, T).
      const int tn0 = int(std::min<int64_t>(T, kMaxTokens)), tn1 = int(T) - tn0;
      const float* xs[kFewTokens];
      for (int i = 0; i < kFewTokens; i++) xs[i] = x + std::min<int64_t>(i, T - 1) * ldx;
      constexpr int64_t kRowMask = (int64_t(1) << 40) - 1;
      // The loop below prefetches kPrefetchBlocks ahead: the chunk's own first blocks, at once.
      for (int64_t b = b0; b < std::min(b1, b0 + kPrefetchBlocks); b++)
        prefetch_block(jobs[blocks[b] >> 40], blocks[b] & kRowMask);
      for (int64_t b = b0; b < b1;) {
        const int j = int(blocks[b] >> 40);
        const MatmulJob& job = jobs[j];
        const DType dt = job.w.dtype;
        const int64_t K = job.w.cols, rows = job.w.rows, rb = weight_row_bytes(dt, K);
        const char* base = static_cast<const char*>(job.w.data);
        const DotBlockFn dot = dot_block_for<kWeightPrefetchHint>(dt, tn0);
        const DotBlockFn dot1 = tn1 > 0 ? dot_block_for(dt, tn1) : nullptr;
#if !LOOM_AVX512
        // Rows one at a time against every token (streams_rows): one stream per thread.
        const StreamRowFn stream_row = streams_rows(dt, T) ? stream_row_for(dt, int(T)) : nullptr;
#endif
        for (; b < b1 && int(blocks[b] >> 40) == j; b++) {
          const int64_t n0 = blocks[b] & kRowMask;
          const int nrows = int(std::min<int64_t>(kRows, rows - n0));
          const void* w[kRows];
          for (int i = 0; i < kRows; i++) w[i] = base + (n0 + std::min(i, nrows - 1)) * rb;
#if !LOOM_AVX512
          if (stream_row != nullptr) {
            // Prefetching kPrefetchBlocks blocks ahead of each row within the matrix (0: the
            // row's own line, a no-op, near its end).
            const int64_t ahead = n0 + (kPrefetchBlocks + 1) * kRows <= rows ? kPrefetchBlocks * kRows * rb : 0;
            float all[kFewTokens * kRows];  // [T, kRows]
            for (int i = 0; i < nrows; i++) stream_row(w[i], xs, K, ahead, all + i);
            store_tile(all, int(T), nrows, job, 0, n0, accumulate);
            continue;
          }
#endif
          // The block kPrefetchBlocks ahead: all at once when bandwidth-bound, else spread over
          // this dot's k-loop as an offset when it is rows of the same matrix.
          int64_t pf_off = 0;
          if (b + kPrefetchBlocks < b1) {
            const MatmulJob& pj = jobs[blocks[b + kPrefetchBlocks] >> 40];
            const int64_t pn = blocks[b + kPrefetchBlocks] & kRowMask;
            if (T <= kBurstPrefetchTokens) {
              prefetch_block(pj, pn);
            } else if (&pj == &job && pn + kRows <= rows) {
              pf_off = (pn - n0) * rb;
            }
          }
          float out[kMaxTokens * kRows];  // [tn, kRows]
          dot(w, xs, K, out, pf_off);
          store_tile(out, tn0, nrows, job, 0, n0, accumulate);
          if (tn1 > 0) {
            // The block's rows are in L1 now: the second tile reads them again from there.
            dot1(w, xs + kMaxTokens, K, out, 0);
            store_tile(out, tn1, nrows, job, kMaxTokens, n0, accumulate);
          }
        }
      }
    }, pool_.size());
    return;
  }

  pool_.run([&](int chunk, int nchunks) {
    int64_t b0, b1;
    split_range(nblocks, nchunks, chunk, 1, &b0, &b1);
    if (b0 >= b1) return;
    static thread_local std::vector<float> tile;  // widened weight rows [nsuper, kRows, K]
    // Hint bytes: this chunk owns [H·b0/nblocks, H·b1/nblocks) of their concatenation and pulls
    // them in step with its blocks (by block b, up to H·(b+1)/nblocks), inside the k-loops of
    // the first token tile's dots (a burst of ~100 prefetches stalls the FMAs behind it).
    int64_t hcur = nhint ? hint_bytes * b0 / nblocks : 0;
    int hreg = 0;
    while (hreg < nhint && hint_end[hreg] <= hcur) hreg++;
    // One block's rows as the dots read them (widened into the tile for several passes over
    // 16-bit weights) and the offset its first dot prefetches at.
    struct BlockPlan {
      const MatmulJob* job;
      int64_t n0;
      int nrows;
      DType dt;
      int64_t pf_off;
      const void* w[kRows];
    };
    for (int64_t t0 = 0; t0 < T; t0 += kTokenTile) {
      const int64_t t1 = std::min(T, t0 + kTokenTile);
      // More tokens than one register tile: each tile of kMaxTokens tokens is dotted against
      // super_blocks(K) blocks before the next tile, so an x tile is pulled into L1 once per
      // super-block instead of once per block (the x of 32 tokens does not fit L1).
      const int64_t nsuper = t1 - t0 > kMaxTokens ? super_blocks(jobs[0].w.cols) : 1;
      for (int64_t sb = b0; sb < b1; sb += nsuper) {
        const int64_t se = std::min(b1, sb + nsuper);
        BlockPlan plan[kSuperBlock];
        for (int64_t b = sb; b < se; b++) {
          BlockPlan& bp = plan[b - sb];
          const MatmulJob& job = jobs[blocks[b] >> 40];
          const int64_t n0 = blocks[b] & ((int64_t(1) << 40) - 1);
          const int64_t K = job.w.cols;
          const int nrows = int(std::min<int64_t>(kRows, job.w.rows - n0));
          DType dt = job.w.dtype;
          // The rows of a later block of this chunk, prefetched inside the first dot of this block
          // (same K: the jobs of one call share x), in every token tile: each re-reads the weights
          // (f32 prefill projections 1.03-1.09x against the first tile only on the AVX2 EPYC;
          // unmeasured with AVX-512). Without one, the block's own rows.
          int64_t pf_off = 0;
          if (b + kPrefetchBlocks < b1) {
            const MatmulJob& pj = jobs[blocks[b + kPrefetchBlocks] >> 40];
            const int64_t pn = blocks[b + kPrefetchBlocks] & ((int64_t(1) << 40) - 1);
            // 16-bit rows widened into the L1 tile are dotted from the tile: no offset to use.
            const bool widened = dt != DType::F32 && !(in_registers(dt) && t1 - t0 <= kMaxTokens);
            if (T <= kBurstPrefetchTokens || widened) {
              // Few tokens (bandwidth-bound): the whole later block at once, as the step starts.
              prefetch_block(pj, pn);
            } else if (&pj == &job && pn + kRows <= pj.w.rows) {
              // Same matrix (rows contiguous): an offset from this block's rows; across a job
              // boundary the hardware prefetcher is left to it.
              pf_off = (pn - n0) * weight_row_bytes(dt, K);
            }
          }
          if (dt == DType::F32 || (in_registers(dt) && t1 - t0 <= kMaxTokens)) {
            // One pass (or f32): read the weights where they are.
            const char* base = static_cast<const char*>(job.w.data);
            for (int i = 0; i < kRows; i++) bp.w[i] = base + (n0 + std::min(i, nrows - 1)) * weight_row_bytes(dt, K);
          } else {
            // Several passes over 16-bit weights (or any Q8 rows): widen once into the L1 tile.
            if (int64_t(tile.size()) < nsuper * kRows * K) tile.resize(size_t(nsuper * kRows * K));
            float* rows = tile.data() + (b - sb) * kRows * K;
            const char* base = static_cast<const char*>(job.w.data);
            for (int i = 0; i < nrows; i++) widen_row(base + (n0 + i) * weight_row_bytes(dt, K), dt, K, rows + i * K);
            for (int i = 0; i < kRows; i++) bp.w[i] = rows + std::min(i, nrows - 1) * K;
            dt = DType::F32;
          }
          bp.job = &job;
          bp.n0 = n0;
          bp.nrows = nrows;
          bp.dt = dt;
          bp.pf_off = pf_off;
        }
        // Dot the super-block's rows against the token tile, kMaxTokens tokens at a time.
        for (int64_t t = t0; t < t1; t += kMaxTokens) {
          const int tn = int(std::min<int64_t>(kMaxTokens, t1 - t));
          const float* xs[kMaxTokens];
          for (int i = 0; i < kMaxTokens; i++) xs[i] = x + std::min<int64_t>(t + i, t1 - 1) * ldx;
          for (int64_t b = sb; b < se; b++) {
            const BlockPlan& bp = plan[b - sb];
            const MatmulJob& job = *bp.job;
            const int64_t K = job.w.cols;
            // A dot call not prefetching the weights prefetches the next piece of the hint inside
            // its k-loop: three rows' worth of contiguous bytes at the rows' stride (the block's
            // rows must be contiguous), as an offset from the rows.
            int64_t dot_pf = t == t0 ? bp.pf_off : 0;
            // The weights' own prefetch goes where kWeightPrefetchHint says; a hint's, to L2.
            bool pf_l2 = kWeightPrefetchToL2;
            const int64_t hint_hi = nhint ? hint_bytes * (b + 1) / nblocks : 0;
            if (nhint && t0 == 0 && dot_pf == 0 && hcur < hint_hi && hreg < nhint && bp.nrows == kRows) {
              const int64_t start = hint_end[hreg] - hint[hreg].bytes;
              const char* target = static_cast<const char*>(hint[hreg].p) + (hcur - start);
              dot_pf = target - static_cast<const char*>(bp.w[0]);
              pf_l2 = true;
              hcur += kRows * K * dtype_size(bp.dt);
              if (hcur >= hint_end[hreg]) {
                hcur = hint_end[hreg];
                hreg++;
              }
            }
            float out[kMaxTokens * kRows];  // [tn, kRows]
            dot_weights(bp.dt, bp.w, xs, tn, K, out, dot_pf, pf_l2);
            store_tile(out, tn, bp.nrows, job, t, bp.n0, accumulate);
          }
        }
      }
    }
  });
}

}  // namespace loom
