// Multi-LoRA kernels for the cpu device (Punica's SGMV/BGMV split, on a CPU).
//
// Adapter weights are stored in the model's dtype (f32, or bf16/f16 for 16-bit models: half the
// bytes, which is what the many-distinct-adapters case is bound by) and widened to f32 in
// registers; accumulation is f32.
//
// shrink: tmp = x · Aᵀ per segment. A prefill segment streams its A rows once for all of its
//   tokens (SGMV); decode rows are one-token segments that each gather their own A (BGMV: eight
//   rows of it at a time against the token's x). Work
//   items are (segment, token chunk) so both a single long prefill and 32 distinct decode rows
//   spread over the threads.
// expand: y += scale · tmp · Bt, with B stored transposed so each rank column is a contiguous
//   row. Many segments (distinct decode rows): threads split the segments and each segment
//   streams its Bt once, eight rank rows at a time into one read-modify-write of y. Few segments
//   (prefill, one shared adapter): threads split the output features so both cores work.
#include "cpu/intrinsics.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cpu/cpu-device.h"
#include "cpu/simd-config.h"
#include "cpu/tile-reduce.h"

namespace loom {
namespace {
constexpr int kShrinkChunk = 24;
// Decode rows (one token against its own adapter): rows of A dotted at once in the shrink, and
// rank rows of Bt per pass over y in the expand. Both 8 rather than the matmul tile's 3 rows and
// the earlier 4: 8 independent chains keep the FMA pipes busy (3 were FMA-latency bound), and y
// is read and written half as often. Cache-hot distinct-adapter LoRA time at batch 32 went
// from ~4.9 to ~4.2 ms (f32) and ~3.9 to ~3.3 ms (bf16) a step.
constexpr int kShrinkGroup = 8;
constexpr int kExpandGroup = 8;  // tokens per shrink work item (a multiple of the 8-token kernel)
// lora_apply: runs up to this many tokens (decode rows of one adapter, short prompts) are applied
// in pieces, shrink and expand on one thread; longer ones (prefill) by the two-op path.
constexpr int64_t kPieceRunTokens = 64;

// Prefetch `bytes` from p into L1: the weights the next work item will stream, issued while the
// current item computes. Decode rows with distinct adapters are 1-token items that each read
// their own 18-98 KB of A or Bt; without this every item starts with a full DRAM latency and
// the hardware prefetcher never ramps up (measured ~13 GB/s effective for 32 distinct rows).
inline void prefetch_bytes(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(c + o, _MM_HINT_T0);
}

// A vector of f32 lanes and loads of adapter weights widened to it, per storage dtype.
#if LOOM_AVX512
using VecF = __m512;
constexpr int kLanes = 16;
inline VecF vset1(float a) { return _mm512_set1_ps(a); }
inline VecF vloadf(const float* p) { return _mm512_loadu_ps(p); }
inline void vstoref(float* p, VecF v) { _mm512_storeu_ps(p, v); }
inline VecF vfma(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }
template <DType DT>
inline VecF vloadw(const void* p, int64_t i) {
  if constexpr (DT == DType::F32) return _mm512_loadu_ps(static_cast<const float*>(p) + i);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i));
  if constexpr (DT == DType::BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}
// vloadw of the lanes in m only (the rest 0): a row's K % 16 tail.
template <DType DT>
inline VecF vloadw_masked(const void* p, int64_t i, __mmask16 m) {
  if constexpr (DT == DType::F32) return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + i);
  const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i);
  if constexpr (DT == DType::BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}
#else
using VecF = __m256;
constexpr int kLanes = 8;
inline VecF vset1(float a) { return _mm256_set1_ps(a); }
inline VecF vloadf(const float* p) { return _mm256_loadu_ps(p); }
inline void vstoref(float* p, VecF v) { _mm256_storeu_ps(p, v); }
inline VecF vfma(VecF a, VecF b, VecF c) { return _mm256_fmadd_ps(a, b, c); }
template <DType DT>
inline VecF vloadw(const void* p, int64_t i) {
  if constexpr (DT == DType::F32) return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
  if constexpr (DT == DType::BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}
#endif

template <DType DT>
inline float loadw1(const void* p, int64_t i) {
  if constexpr (DT == DType::F32) return static_cast<const float*>(p)[i];
  if constexpr (DT == DType::BF16) return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
}

// The rows left after the full groups of 8 (shrink and expand of a decode row): calls
// f(std::integral_constant<int, n>) for n = 1..7, so the kernel gets the row count as a template
// argument (its accumulators stay in registers); n = 0 calls nothing.
static_assert(kShrinkGroup == 8 && kExpandGroup == 8, "with_group_tail covers tails of 1..7 rows");
template <typename F>
inline void with_group_tail(int n, F&& f) {
  switch (n) {
    case 7: f(std::integral_constant<int, 7>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 1: f(std::integral_constant<int, 1>{}); break;
    default: break;
  }
}

// Semantics: for n < N: y[n] += Σ_{i<NR} c[i] * Bt[r0 + i, n]   (NR = 1..kExpandGroup rank rows at
// once, so y is read and written once per group instead of once per row).
template <DType DT, int NR>
inline void axpy_rows(const float* c, const void* bt, int64_t r0, int64_t N, float* y) {
  VecF cv[NR];
  for (int i = 0; i < NR; i++) cv[i] = vset1(c[i]);
  int64_t n = 0;
  for (; n + kLanes <= N; n += kLanes) {
    VecF acc = vloadf(y + n);
#pragma GCC unroll 8
    for (int i = 0; i < NR; i++) acc = vfma(cv[i], vloadw<DT>(bt, (r0 + i) * N + n), acc);
    vstoref(y + n, acc);
  }
  // Fused, as the vector lanes are: a column's sum is the same bits whichever lane or tail
  // computes it (expand_columns splits N at other places).
  for (; n < N; n++)
    for (int i = 0; i < NR; i++) y[n] = std::fma(c[i], loadw1<DT>(bt, (r0 + i) * N + n), y[n]);
}

// One token's expand by one segment, rank rows in groups of kExpandGroup. c: the token's R
// low-rank activations already multiplied by the segment's scale.
template <DType DT>
// `pf` (or null): a Bt of pf_rank rows of N in dtype DT to prefetch, a group of rows per group of
// this one, so the next adapter's bytes arrive while this one computes instead of in one burst
// of hundreds of prefetches that fills the miss buffers.
void expand_token(const float* c, const void* bt, int rank, int64_t N, float* y, const void* pf = nullptr,
                  int pf_rank = 0) {
  const int64_t row_bytes = N * dtype_size(DT);
  int r = 0;
  for (; r + kExpandGroup <= rank; r += kExpandGroup) {
    if (pf && r < pf_rank)
      prefetch_bytes(static_cast<const char*>(pf) + r * row_bytes, std::min(kExpandGroup, pf_rank - r) * row_bytes);
    axpy_rows<DT, kExpandGroup>(c + r, bt, r, N, y);
  }
  // Rows of pf beyond this rank's groups (a larger next rank): the rest at once.
  if (pf && r < pf_rank) prefetch_bytes(static_cast<const char*>(pf) + r * row_bytes, (pf_rank - r) * row_bytes);
  with_group_tail(rank - r, [&](auto nr) { axpy_rows<DT, decltype(nr)::value>(c + r, bt, r, N, y); });
}

// Expand of output features [n0, n1) of one token: 2 vectors of outputs in registers while every
// rank row is accumulated, then one store. Bt rows are read at stride N (the few-segment path,
// where each thread owns a column range and the Bt slice stays in cache across tokens). The sum
// is expand_token's, in its order (y, then + (scale·c_r)·Bt[r] for r = 0, 1, ..., fused), so a
// token's output is the same bits on either path.
template <DType DT>
void expand_columns(const float* c, float scale, const void* bt, int rank, int64_t N, int64_t n0, int64_t n1,
                    float* y) {
  float cs[128];  // scale · the token's low-rank activations, as expand_token gets them
  for (int r = 0; r < rank; r++) cs[r] = scale * c[r];
  int64_t n = n0;
  for (; n + 2 * kLanes <= n1; n += 2 * kLanes) {
    VecF a0 = vloadf(y + n), a1 = vloadf(y + n + kLanes);
    for (int r = 0; r < rank; r++) {
      const VecF cr = vset1(cs[r]);
      a0 = vfma(cr, vloadw<DT>(bt, int64_t(r) * N + n), a0);
      a1 = vfma(cr, vloadw<DT>(bt, int64_t(r) * N + n + kLanes), a1);
    }
    vstoref(y + n, a0);
    vstoref(y + n + kLanes, a1);
  }
  for (; n < n1; n++) {
    float acc = y[n];
    for (int r = 0; r < rank; r++) acc = std::fma(cs[r], loadw1<DT>(bt, int64_t(r) * N + n), acc);
    y[n] = acc;
  }
}

template <DType DT>
void expand_segments(const float* tmp, int64_t ldt, int64_t N, const LoraSegment* segs, int64_t s0, int64_t s1,
                     float* y, int64_t ldy) {
  for (int64_t s = s0; s < s1; s++) {
    const LoraSegment& seg = segs[s];
    // The next segment's Bt, if it is another adapter: prefetched a rank row per rank row of this
    // one, so it arrives while this segment computes.
    const LoraSegment* next = s + 1 < s1 && segs[s + 1].w != seg.w ? &segs[s + 1] : nullptr;
    for (int64_t t = seg.tok_start; t < seg.tok_start + seg.tok_count; t++) {
      float c[128];  // scale · the token's low-rank activations
      for (int r = 0; r < seg.rank; r++) c[r] = seg.scale * tmp[t * ldt + seg.col + r];
      const bool pf = next && t == seg.tok_start;
      expand_token<DT>(c, seg.w, seg.rank, N, y + t * ldy, pf ? next->w : nullptr, pf ? next->rank : 0);
    }
  }
}
// Semantics: for i < NR: out[i] = Σ_k x[k] * A[r0 + i, k]   (one token, NR rows of A at once: NR
// independent accumulator chains, so the loop is bound by loads rather than FMA latency).
//
// Each out[i] is the same bits as the matmul micro-kernel's (dot_rows, which the multi-token
// shrink uses): with AVX-512 lanes accumulate k ≡ lane (mod 16), the K % 16 tail is a masked FMA
// into the same lanes, and the lanes are summed in hsum4's order; with AVX2 lanes accumulate
// k ≡ lane (mod 8), are summed in hsum4's order, and the K % 8 tail is added after, in order. So
// a token's LoRA output does not depend on whether its run was shrunk one token at a time or in a
// tile (that choice follows the batch: see lora_apply), and a Medusa tree row matches the decode
// row it replaces.
template <DType DT, int NR>
inline void shrink_rows(const float* x, const void* a, int64_t K, int64_t r0, float* out) {
  VecF acc[NR];
  for (int i = 0; i < NR; i++) acc[i] = vset1(0.0f);
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    const VecF xv = vloadf(x + k);
#pragma GCC unroll 8
    for (int i = 0; i < NR; i++) acc[i] = vfma(vloadw<DT>(a, (r0 + i) * K + k), xv, acc[i]);
  }
#if LOOM_AVX512
  if (k < K) {
    const __mmask16 m = __mmask16((1u << (K - k)) - 1);
    const VecF xv = _mm512_maskz_loadu_ps(m, x + k);
#pragma GCC unroll 8
    for (int i = 0; i < NR; i++) acc[i] = vfma(vloadw_masked<DT>(a, (r0 + i) * K + k, m), xv, acc[i]);
  }
  const VecF z = vset1(0.0f);
  for (int i = 0; i < NR; i += 4)
    hsum_upto4(acc[i], i + 1 < NR ? acc[i + 1] : z, i + 2 < NR ? acc[i + 2] : z, i + 3 < NR ? acc[i + 3] : z,
               std::min(4, NR - i), out + i);
#else
  for (int i = 0; i < NR; i++) {
    float v = hsum1(acc[i]);  // the matmul tile's order (tile-reduce.h)
    for (int64_t kk = k; kk < K; kk++) v = add_product(v, x[kk], loadw1<DT>(a, (r0 + i) * K + kk));
    out[i] = v;
  }
#endif
}

// One token's shrink by one segment: tmp[col + r] = Σ_k x[k] * A[r, k] for r < R, kShrinkGroup
// rows at a time; `next` (or null) is the A the caller dots next, prefetched group by group.
template <DType DT>
void shrink_token(const float* x, int64_t K, const LoraSegment& seg, const LoraSegment* next, float* tmp) {
  const int64_t row_bytes = K * dtype_size(DT);
  int r = 0;
  for (; r + kShrinkGroup <= seg.rank; r += kShrinkGroup) {
    if (next && r < next->rank)
      prefetch_bytes(static_cast<const char*>(next->w) + r * row_bytes, int64_t(std::min(kShrinkGroup, next->rank - r)) * row_bytes);
    shrink_rows<DT, kShrinkGroup>(x, seg.w, K, r, tmp + seg.col + r);
  }
  if (next && r < next->rank) prefetch_bytes(static_cast<const char*>(next->w) + r * row_bytes, int64_t(next->rank - r) * row_bytes);
  float* o = tmp + seg.col + r;
  with_group_tail(seg.rank - r, [&](auto nr) { shrink_rows<DT, decltype(nr)::value>(x, seg.w, K, r, o); });
}

// Semantics: for first <= t < last, r < R: tmp[t*ldt + col + r] = Σ_k x[t*ldx + k] * A[r, k]
// (one segment's tokens [first, last)), kRows rows of A against up to kMaxTokens tokens at a
// time; `next` (or null) is the A the caller dots next, prefetched row block by row block.
void shrink_tokens(const float* x, int64_t ldx, int64_t K, const LoraSegment& seg, int64_t first, int64_t last,
                   const LoraSegment* next, float* tmp, int64_t ldt) {
  const int64_t row_bytes = K * dtype_size(seg.dtype);
  for (int r0 = 0; r0 < seg.rank; r0 += kRows) {
    const int nr = std::min(kRows, seg.rank - r0);
    // Rows r0.. of the next A, spread over this A's blocks so they arrive just in time.
    if (next && r0 < next->rank)
      prefetch_bytes(static_cast<const char*>(next->w) + r0 * row_bytes, int64_t(std::min(nr, next->rank - r0)) * row_bytes);
    const void* w[kRows];
    for (int i = 0; i < kRows; i++) w[i] = static_cast<const char*>(seg.w) + int64_t(r0 + std::min(i, nr - 1)) * row_bytes;
    for (int64_t t = first; t < last; t += kMaxTokens) {
      const int tn = int(std::min<int64_t>(kMaxTokens, last - t));
      const float* xs[kMaxTokens];
      for (int i = 0; i < kMaxTokens; i++) xs[i] = x + std::min<int64_t>(t + i, last - 1) * ldx;
      float out[kMaxTokens][kRows];
      dot_rows(seg.dtype, w, xs, tn, K, out);
      for (int r = 0; r < tn; r++)
        for (int i = 0; i < nr; i++) tmp[(t + r) * ldt + seg.col + r0 + i] = out[r][i];
    }
  }
}
}  // namespace

// Semantics: for seg, t in seg, r < R_seg: tmp[t*ldt + col_seg + r] = Σ_k x[t*ldx + k] * A_seg[r, k]
// x [T, ldx], A_seg [R_seg, K] (in dtype_seg), tmp [T, ldt]. Each work item dots kRows rows of its
// A against up to kMaxTokens tokens at a time (the matmul micro-kernel, which widens 16-bit rows
// in registers), so a prefill segment reads its A once per kShrinkChunk tokens and a decode row
// reads it once.
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
      shrink_tokens(x, ldx, K, seg, first, last, next, tmp, ldt);
    }
  });
}

// Semantics: see Device::lora_apply. Runs are maximal stretches of segments covering the same
// tokens (one adapter's rows: the engine puts them side by side). Decode-sized runs: threads split
// pieces of runs, and each piece's shrink (all modules of the group) and expand follow each other
// on one thread, so a group costs one pool region instead of one shrink plus one expand per module
// (11 regions a layer became 4), and the piece's low-rank activations never leave L1. A run is
// cut into pieces of a few tokens only when there are too few runs to keep every thread busy
// (one adapter shared by a whole batch): each piece reads the adapter once for all its tokens.
// Prefill-sized runs: the two-op path, which splits the work inside a run.
void CpuDevice::lora_apply(const float* x, int64_t ldx, int64_t K, const LoraSegment* shrink,
                           const LoraSegment* expand, const int* module, int nsegs, const LoraOutput* outs, float* tmp,
                           int64_t ldt) {
  if (nsegs == 0) return;
  int64_t nruns = 0, tokens = 0, longest = 0;
  for (int s = 0; s < nsegs; s++) {
    if (s > 0 && shrink[s].tok_start == shrink[s - 1].tok_start) continue;
    nruns++;
    tokens += shrink[s].tok_count;
    longest = std::max<int64_t>(longest, shrink[s].tok_count);
  }
  if (longest > kPieceRunTokens) {
    lora_shrink(x, ldx, K, shrink, nsegs, tmp, ldt);
    int nmod = 0;
    for (int s = 0; s < nsegs; s++) nmod = std::max(nmod, module[s] + 1);
    for (int m = 0; m < nmod; m++) {
      module_segs_.clear();
      for (int s = 0; s < nsegs; s++)
        if (module[s] == m) module_segs_.push_back(expand[s]);
      if (!module_segs_.empty())
        lora_expand(tmp, ldt, outs[m].N, module_segs_.data(), int(module_segs_.size()), outs[m].y, outs[m].ldy);
    }
    return;
  }
  // Pieces: (first segment of the run, first token, last token), 3 int64 each. Tokens per piece:
  // up to kShrinkChunk when runs are plenty, else few enough for two pieces per thread.
  const int64_t want = int64_t(pool_.size()) * 2;
  const int64_t per_piece = nruns >= want ? kShrinkChunk : std::max<int64_t>(1, (tokens + want - 1) / want);
  items_.clear();
  for (int s = 0; s < nsegs; s++) {
    if (s > 0 && shrink[s].tok_start == shrink[s - 1].tok_start) continue;
    const int64_t end = shrink[s].tok_start + shrink[s].tok_count;
    for (int64_t t = shrink[s].tok_start; t < end; t += per_piece) {
      items_.push_back(s);
      items_.push_back(t);
      items_.push_back(std::min(end, t + per_piece));
    }
  }
  const int64_t npieces = int64_t(items_.size()) / 3;
  const int64_t* pieces = items_.data();
  pool_.run([&](int chunk, int nchunks) {
    int64_t p0, p1;
    split_range(npieces, nchunks, chunk, 1, &p0, &p1);
    for (int64_t p = p0; p < p1; p++) {
      const int64_t s0 = pieces[3 * p], first = pieces[3 * p + 1], last = pieces[3 * p + 2];
      int64_t s1 = s0 + 1;
      while (s1 < nsegs && shrink[s1].tok_start == shrink[s0].tok_start) s1++;
      // The next piece's run, when it is another run: its first A and Bt are prefetched as this
      // one computes (the next piece of the same run reads what this one just read).
      const int64_t ns0 = p + 1 < p1 && pieces[3 * (p + 1)] != s0 ? pieces[3 * (p + 1)] : -1;
      for (int64_t s = s0; s < s1; s++) {
        const LoraSegment* next = s + 1 < s1 ? &shrink[s + 1] : ns0 >= 0 ? &shrink[ns0] : nullptr;
        const LoraSegment& sg = shrink[s];
        if (last - first == 1 && (!next || next->dtype == sg.dtype)) {
          // One token against its A (a decode row, or a one-token piece).
          const float* xt = x + first * ldx;
          float* tt = tmp + first * ldt;
          switch (sg.dtype) {
            case DType::F32: shrink_token<DType::F32>(xt, K, sg, next, tt); break;
            case DType::BF16: shrink_token<DType::BF16>(xt, K, sg, next, tt); break;
            case DType::F16: shrink_token<DType::F16>(xt, K, sg, next, tt); break;
            case DType::Q8: break;  // adapters stay in their dtype, never int8
          }
        } else {
          shrink_tokens(x, ldx, K, sg, first, last, next, tmp, ldt);
        }
      }
      for (int64_t s = s0; s < s1; s++) {
        const LoraOutput& o = outs[module[s]];
        // The Bt this thread expands next (this run's next module, or the next run's first),
        // prefetched as this one is applied (same dtype: the model's).
        const int64_t ns = s + 1 < s1 ? s + 1 : ns0;
        const LoraSegment& e = expand[s];
        const bool pf = ns >= 0 && expand[ns].w != e.w && expand[ns].dtype == e.dtype;
        // The next Bt is one contiguous run of rank * N_next weights: count it in rows of this
        // Bt's width, which is what expand_token steps through.
        const void* pw = pf ? expand[ns].w : nullptr;
        const int pr = pf ? int((expand[ns].rank * outs[module[ns]].N + o.N - 1) / o.N) : 0;
        for (int64_t t = first; t < last; t++) {
          float c[128];  // scale · the token's low-rank activations
          for (int i = 0; i < e.rank; i++) c[i] = e.scale * tmp[t * ldt + e.col + i];
          const bool lead = t == first;
          switch (e.dtype) {
            case DType::F32: expand_token<DType::F32>(c, e.w, e.rank, o.N, o.y + t * o.ldy, lead ? pw : nullptr, pr); break;
            case DType::BF16: expand_token<DType::BF16>(c, e.w, e.rank, o.N, o.y + t * o.ldy, lead ? pw : nullptr, pr); break;
            case DType::F16: expand_token<DType::F16>(c, e.w, e.rank, o.N, o.y + t * o.ldy, lead ? pw : nullptr, pr); break;
            case DType::Q8: break;  // adapters stay in their dtype, never int8
          }
        }
      }
    }
  });
}

// Semantics: for seg, t in seg, n < N: y[t*ldy + n] += scale_seg * Σ_r tmp[t*ldt + col_seg + r] * Bt_seg[r, n]
// tmp [T, ldt], Bt_seg [R_seg, N] (in dtype_seg), y [T, ldy]. Segments of one call cover
// disjoint tokens, so splitting by segment never has two threads writing one y row.
void CpuDevice::lora_expand(const float* tmp, int64_t ldt, int64_t N, const LoraSegment* segs, int nsegs, float* y,
                            int64_t ldy) {
  if (nsegs == 0) return;
  if (nsegs >= pool_.size() * ThreadPool::kChunksPerThread) {
    pool_.run([&](int chunk, int nchunks) {
      int64_t s0, s1;
      split_range(nsegs, nchunks, chunk, 1, &s0, &s1);
      // Runs of one storage dtype (in the model every segment has the model's dtype).
      for (int64_t a = s0, b; a < s1; a = b) {
        for (b = a + 1; b < s1 && segs[b].dtype == segs[a].dtype;) b++;
        switch (segs[a].dtype) {
          case DType::F32: expand_segments<DType::F32>(tmp, ldt, N, segs, a, b, y, ldy); break;
          case DType::BF16: expand_segments<DType::BF16>(tmp, ldt, N, segs, a, b, y, ldy); break;
          case DType::F16: expand_segments<DType::F16>(tmp, ldt, N, segs, a, b, y, ldy); break;
          case DType::Q8: break;  // adapters stay in their dtype, never int8
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
        switch (seg.dtype) {
          case DType::F32: expand_columns<DType::F32>(c, seg.scale, seg.w, seg.rank, N, n0, n1, yt); break;
          case DType::BF16: expand_columns<DType::BF16>(c, seg.scale, seg.w, seg.rank, N, n0, n1, yt); break;
          case DType::F16: expand_columns<DType::F16>(c, seg.scale, seg.w, seg.rank, N, n0, n1, yt); break;
          case DType::Q8: break;  // adapters stay in their dtype, never int8
        }
      }
    }
  });
}

}  // namespace loom
