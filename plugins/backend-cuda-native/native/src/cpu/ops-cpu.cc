// Element-wise, normalisation, cache and attention ops for the cpu device. These are small next
// to the matmuls at decode, so the rule is: run inline on the calling thread when the work is
// tiny (a pool region costs ~1 µs) and split over tokens or elements when it is not.
#include "cpu/intrinsics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <vector>

#include "cpu/cpu-device.h"
#include "cpu/row-reduce.h"
#include "cpu/vec-math.h"

namespace loom {
namespace {

constexpr int64_t kInlineElems = 16384;  // below this many elements an op runs on one thread

// Run f(begin, end) over [0, total) split across the pool, or inline when small.
template <typename Pool, typename F>
void for_range(Pool& pool, int64_t total, int64_t cost_per_item, F&& f) {
  if (total * cost_per_item < kInlineElems || pool.size() == 1) {
    f(int64_t(0), total);
    return;
  }
  pool.run([&](int tid, int nth) {
    int64_t b, e;
    split_range(total, nth, tid, 1, &b, &e);
    if (b < e) f(b, e);
  });
}

inline float dot_f32(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float s = hsum256(_mm256_add_ps(acc0, acc1));
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

}  // namespace

CpuDevice::CpuDevice(int threads) : pool_(threads) {}

// One row per token: sum of squares with a vectorised dot, then scale by r·w in one pass.
// Rows are independent, so large batches split by token across the pool.
void CpuDevice::rmsnorm(const float* x, int64_t T, int64_t ldx, int64_t H, const float* w, float eps, float* y,
                        int64_t ldy) {
  for_range(pool_, T, H, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) {
      const float* xt = x + t * ldx;
      float* yt = y + t * ldy;
      const float r = 1.0f / std::sqrt(dot_f32(xt, xt, H) / float(H) + eps);
      const __m256 rv = _mm256_set1_ps(r);
      int64_t i = 0;
      for (; i + 8 <= H; i += 8)
        _mm256_storeu_ps(yt + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xt + i), rv), _mm256_loadu_ps(w + i)));
      for (; i < H; i++) yt[i] = xt[i] * r * w[i];
    }
  });
}

// Angles in double (positions can be large), one sincos pair per (token, frequency); split by
// token across the pool for prefill-sized steps (a decode step's tables are a few dozen pairs).
void CpuDevice::rope_tables(const int32_t* positions, int64_t T, const double* inv_freq, int64_t half, float* cos,
                            float* sin) {
  for_range(pool_, T, half * 32, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) {
      const double p = double(positions[t]);
      float* c = cos + t * half;
      float* s = sin + t * half;
      for (int64_t i = 0; i < half; i++) {
        const double a = p * inv_freq[i];
        c[i] = float(std::cos(a));
        s[i] = float(std::sin(a));
      }
    }
  });
}

// Row copies; a few rows of H floats per step (logits rows, Medusa hidden states).
void CpuDevice::gather_rows(const float* src, int64_t ld, const int32_t* idx, int64_t n, int64_t H, float* dst) {
  for (int64_t i = 0; i < n; i++) std::memcpy(dst + i * H, src + int64_t(idx[i]) * ld, size_t(H) * 4);
}

// HF rotate_half: lane i pairs with lane i + D/2 of the same head, so both halves load as
// contiguous vectors and no shuffles are needed. cos/sin are per token, shared by all heads
// and all layers (computed once per step by the model).
void CpuDevice::rope(float* x, int64_t T, int64_t ldx, int heads, int D, const float* cos, const float* sin) {
  const int half = D / 2;
  for_range(pool_, T, int64_t(heads) * D, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) {
      const float* c = cos + t * half;
      const float* s = sin + t * half;
      for (int h = 0; h < heads; h++) {
        float* v = x + t * ldx + int64_t(h) * D;
        int i = 0;
        for (; i + 8 <= half; i += 8) {
          const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + i + half);
          const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
          _mm256_storeu_ps(v + i, _mm256_fmsub_ps(a, cv, _mm256_mul_ps(b, sv)));
          _mm256_storeu_ps(v + i + half, _mm256_fmadd_ps(b, cv, _mm256_mul_ps(a, sv)));
        }
        for (; i < half; i++) {
          const float a = v[i], b = v[i + half];
          v[i] = a * c[i] - b * s[i];
          v[i + half] = b * c[i] + a * s[i];
        }
      }
    }
  });
}

// A gather of T rows; f32 tables are a memcpy, 16-bit tables widen element by element
// (T rows of H values per step is negligible next to the matmuls).
void CpuDevice::embedding(const int32_t* ids, int64_t T, const WeightView& table, float* y) {
  const int64_t H = table.cols;
  for (int64_t t = 0; t < T; t++) {
    const int64_t row = int64_t(ids[t]) * H;
    if (table.dtype == DType::F32) {
      std::memcpy(y + t * H, static_cast<const float*>(table.data) + row, size_t(H) * 4);
    } else {
      const uint16_t* src = static_cast<const uint16_t*>(table.data) + row;
      for (int64_t i = 0; i < H; i++)
        y[t * H + i] = table.dtype == DType::BF16 ? bf16_to_f32(src[i]) : f16_to_f32(src[i]);
    }
  }
}

// Vectorised SiLU via exp256 (vec-math.h); the split unit is one 8-float vector.
void CpuDevice::silu_mul(const float* gate, const float* up, int64_t n, float* y) {
  for_range(pool_, (n + 7) / 8, 8, [&](int64_t b, int64_t e) {
    for (int64_t v = b; v < e; v++) {
      const int64_t i = v * 8;
      if (i + 8 <= n) {
        _mm256_storeu_ps(y + i, _mm256_mul_ps(silu256(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
      } else {
        for (int64_t j = i; j < n; j++) y[j] = gate[j] / (1.0f + std::exp(-gate[j])) * up[j];
      }
    }
  });
}

void CpuDevice::silu_residual(const float* t, int64_t n, float* y) {
  for_range(pool_, (n + 7) / 8, 8, [&](int64_t b, int64_t e) {
    for (int64_t v = b; v < e; v++) {
      const int64_t i = v * 8;
      if (i + 8 <= n) {
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), silu256(_mm256_loadu_ps(t + i))));
      } else {
        for (int64_t j = i; j < n; j++) y[j] += t[j] / (1.0f + std::exp(-t[j]));
      }
    }
  });
}

// Walks each row's cache indices block by block, so the division happens once per block.
void CpuDevice::kv_slots(const AttnRow* rows, int nrows, int block_size, int32_t* slot) {
  for (int r = 0; r < nrows; r++) {
    const AttnRow& row = rows[r];
    int32_t* out = slot + row.tok_start;
    int64_t c = row.cache_len;
    const int64_t end = c + row.n;
    while (c < end) {
      const int64_t block = c / block_size, stop = std::min(end, (block + 1) * block_size);
      const int64_t base = int64_t(row.block_table[block]) * block_size - block * block_size;
      for (; c < stop; c++) *out++ = int32_t(base + c);
    }
  }
}

void CpuDevice::paged_slots(const int32_t* block_table, const int32_t* idx, int64_t n, int block_size,
                            int32_t* slot) {
  for (int64_t i = 0; i < n; i++) {
    const int32_t q = idx[i] / block_size;
    slot[i] = block_table[q] * block_size + (idx[i] - q * block_size);
  }
}

// Each token's K and V rows ([Hkv·D] floats) land in the cache slot the block table assigned.
// Slots are distinct within a step, so order does not matter. The cpu keeps f32 caches (its
// kv_dtype); another dtype takes the reference's scalar path.
void CpuDevice::kv_store(const float* k, const float* v, int64_t T, int64_t ldk, const int32_t* slot, int64_t E,
                         DType dt, void* kcache, void* vcache) {
  if (dt != DType::F32) return reference_device()->kv_store(k, v, T, ldk, slot, E, dt, kcache, vcache);
  float* kc = static_cast<float*>(kcache);
  float* vc = static_cast<float*>(vcache);
  for (int64_t t = 0; t < T; t++) {
    std::memcpy(kc + int64_t(slot[t]) * E, k + t * ldk, size_t(E) * 4);
    std::memcpy(vc + int64_t(slot[t]) * E, v + t * ldk, size_t(E) * 4);
  }
}

void CpuDevice::kv_copy(const int32_t* from, const int32_t* to, int64_t n, int64_t E, DType dt, void* kcache,
                        void* vcache) {
  // Sequential on purpose: a later copy may read an entry an earlier one wrote.
  const int64_t row = E * dtype_size(dt);
  char* kc = static_cast<char*>(kcache);
  char* vc = static_cast<char*>(vcache);
  for (int64_t i = 0; i < n; i++) {
    if (from[i] == to[i]) continue;
    std::memmove(kc + int64_t(to[i]) * row, kc + int64_t(from[i]) * row, size_t(row));
    std::memmove(vc + int64_t(to[i]) * row, vc + int64_t(from[i]) * row, size_t(row));
  }
}

namespace {

// The cache rows of a paged sequence in order, from index 0: row c is slot c % bs of block
// table[c / bs], found without a division per row (two per key were much of attend_one's time).
struct PagedRows {
  const float* cache;
  const int32_t* table;
  int64_t stride;  // floats per cache entry (every KV head)
  int64_t offset;  // this KV head's first float within an entry
  int block_size;
  int block = 0, slot = 0;
  const float* next() {
    const float* p = cache + (int64_t(table[block]) * block_size + slot) * stride + offset;
    if (++slot == block_size) {
      slot = 0;
      block++;
    }
    return p;
  }
};

// The keys one query of a row sees, in position order: the cache [0, cache_len), then its row's
// new tokens — all up to itself for a causal row, its tree ancestors and itself for a tree row
// (`newk`: their indices among the row's tokens, increasing). Key c of that list is the key at
// position c, wherever the tree put it in the cache, so a tree node walks exactly the keys, in
// the same order, as the decode row of its token after the branch is accepted and compacted.
struct VisibleRows {
  PagedRows paged;      // sequential over the cache part, from the first key asked for
  const int32_t* newk;  // null: causal (new token j is key cache_len + j)
  int cache_len, c;
  const float* next() {
    if (newk == nullptr || c < cache_len) {
      c++;
      return paged.next();
    }
    const int64_t idx = cache_len + newk[c++ - cache_len];
    return paged.cache + (int64_t(paged.table[idx / paged.block_size]) * paged.block_size + idx % paged.block_size) *
                             paged.stride + paged.offset;
  }
};

// A row's cache positions are split into pieces of kKeyPiece keys at absolute positions
// [j·kKeyPiece, (j+1)·kKeyPiece). A (token, query head) whose visible keys fit one piece is
// computed in one pass and normalised in place; a longer one gets each piece's max m, Σ exp(s-m)
// and unnormalised Σ exp(s-m)·V, merged afterwards in piece order (merge_pieces). The pieces
// depend only on positions, never on the batch, the row's kind or which thread runs them, so a
// token's output is the same bits alone, in any batch, and as a plain decode row or a tree node
// (masked keys add exact zeros; a piece with every key masked is skipped). What pieces buy is
// parallelism: a batch-1 decode step has only Hq (token, head) pairs, and at long contexts each
// was one thread's whole scan (9 pairs on 2 threads: 5 against 4); its pieces are spread over
// the threads instead.
constexpr int kKeyPiece = 256;

// The sums of one piece of one (token, head) besides its Σ exp(s - max)·V [D].
using PieceSums = AttnPieceSums;

// Softmax numerators in place over a -inf-padded multiple of 8: s[c] = exp(s[c] - mx) for c < n8,
// and their sum, added in 8 lanes then across them (every attention path sums in this order, so a
// query's output is the same bits on each).
inline float exp_in_place_sum(float* s, int n8, float mx) {
  const __m256 mv = _mm256_set1_ps(mx);
  __m256 sumv = _mm256_setzero_ps();
  for (int c = 0; c < n8; c += 8) {
    const __m256 p = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + c), mv));
    _mm256_storeu_ps(s + c, p);
    sumv = _mm256_add_ps(sumv, p);
  }
  return hsum256(sumv);
}

// a += p · vr [8·NV]: one value row into a query's register accumulators (a zero weight, a key
// the softmax underflowed, adds nothing and is skipped).
template <int NV>
inline void add_weighted_row(__m256* a, float p, const float* vr) {
  if (p == 0.0f) return;
  const __m256 pv = _mm256_set1_ps(p);
#pragma GCC unroll 16
  for (int v = 0; v < NV; v++) a[v] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 8 * v), a[v]);
}

// Keys [c0, c1) of one (token, query head) for a head dim of NV 8-float vectors, the query and the
// accumulator in registers: scores (8 keys at a time, 8 independent dot chains, then one
// transposing reduction) over the query's visible keys c0..c1-1 (VisibleRows), softmax against
// this range's max, then Σ p_c V_c. `direct` (the whole visible range in one piece): o = the normalised
// output; else o = the unnormalised sum and *ps its max and sum. score: [c1 - c0 + 8] scratch.
template <int NV>
void attend_range(const float* qv, float scale, const float* kc, const float* vc, const AttnRow& row,
                  const int32_t* newk, int64_t E, int64_t g_off, int block_size, int c0, int c1, bool direct,
                  float* score, float* o, PieceSums* ps) {
  __m256 qr[NV];
  const __m256 sc = _mm256_set1_ps(scale);
#pragma GCC unroll 16
  for (int v = 0; v < NV; v++) qr[v] = _mm256_mul_ps(_mm256_loadu_ps(qv + 8 * v), sc);
  // Every sum below has the same shape whatever the range's end: keys in blocks of 8 from c0 (a
  // multiple of 8), the last block padded with -inf scores (its missing keys re-read the last
  // key, so nothing past the row's blocks is touched), softmax sums in 8 lanes with no scalar
  // tail. A key's score, its lane and the order of every addition are then the same for a decode
  // row and for a tree row whose masked keys run further: they differ only by exact zeros.
  const int len = c1 - c0, len8 = (len + 7) & ~7;
  VisibleRows keys{{kc, row.block_table, E, g_off, block_size, c0 / block_size, c0 % block_size}, newk, row.cache_len, c0};
  const float* kr = nullptr;
  for (int c = 0; c < len8; c += 8) {
    __m256 a[8];
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++) {
      if (c + u < len) kr = keys.next();
      a[u] = _mm256_mul_ps(qr[0], _mm256_loadu_ps(kr));
#pragma GCC unroll 16
      for (int v = 1; v < NV; v++) a[u] = _mm256_fmadd_ps(qr[v], _mm256_loadu_ps(kr + 8 * v), a[u]);
    }
    _mm256_storeu_ps(score + c, hsum8x8(a));
  }
  for (int c = len; c < len8; c++) score[c] = -INFINITY;
  const float mx = row_max(score, len8, -INFINITY);
  __m256 acc[NV];
#pragma GCC unroll 16
  for (int v = 0; v < NV; v++) acc[v] = _mm256_setzero_ps();
  if (mx == -INFINITY) {  // a piece of masked keys only: nothing to add
#pragma GCC unroll 16
    for (int v = 0; v < NV; v++) _mm256_storeu_ps(o + 8 * v, acc[v]);
    if (ps) *ps = {mx, 0.0f};
    return;
  }
  const float sum = exp_in_place_sum(score, len8, mx);
  VisibleRows values{{vc, row.block_table, E, g_off, block_size, c0 / block_size, c0 % block_size}, newk, row.cache_len, c0};
  for (int cc = 0; cc < len; cc++) {
    const float* vr = values.next();
    add_weighted_row<NV>(acc, score[cc], vr);
  }
  const __m256 inv = _mm256_set1_ps(direct ? (sum > 0 ? 1.0f / sum : 0.0f) : 1.0f);
#pragma GCC unroll 16
  for (int v = 0; v < NV; v++) _mm256_storeu_ps(o + 8 * v, direct ? _mm256_mul_ps(acc[v], inv) : acc[v]);
  if (ps) *ps = {mx, sum};
}

// Queries of one row that share a KV head and see all their keys in one piece (c0 = 0, direct):
// the tokens of a tree row or a prompt chunk and the query heads of a GQA group. attend_range's
// steps for each, the same bits (every query's scores, sums and Σ p·V are added in attend_range's
// order), but the keys every query sees, [0, shared), are found and read once per 8-key block
// for all of them rather than once per query: per (token, head) pair the paged walk and the reads
// of K and V from L2 cost several times the arithmetic at short contexts (~1.2 µs a pair at 100
// keys on the demo model, head dim 32). The keys past `shared` (each query's tail of the cache
// block and its own new tokens) go as attend_range does.
// qs: [nq, 8·NV] scaled queries; score: [nq, sstride]; acc: [nq, 8·NV] scratch.
constexpr int kMaxGroupQueries = 16;

// The scores of 8 keys for one scaled query (q [8·NV]), in attend_range's order: each key's dot in
// 8 lanes from its first vector, then one transposing reduction.
template <int NV>
inline __m256 scores8(const float* q, const float* const* kr) {
  __m256 a[8];
#pragma GCC unroll 8
  for (int u = 0; u < 8; u++) {
    a[u] = _mm256_mul_ps(_mm256_loadu_ps(q), _mm256_loadu_ps(kr[u]));
#pragma GCC unroll 16
    for (int v = 1; v < NV; v++)
      a[u] = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * v), _mm256_loadu_ps(kr[u] + 8 * v), a[u]);
  }
  return hsum8x8(a);
}

template <int NV>
void attend_group(const float* const* qv, float* const* out, const int32_t* const* newk, const int* len, int nq,
                  float scale, const float* kc, const float* vc, const AttnRow& row, int64_t E, int64_t g_off,
                  int block_size, float* qs, float* score, int64_t sstride, float* acc) {
  constexpr int D = 8 * NV;
  // Keys every query sees: a causal query sees keys 0.. in order up to itself; a tree node the
  // cache, then its ancestors.
  int shared = len[0];
  for (int q = 0; q < nq; q++) shared = std::min(shared, newk[q] ? std::min(row.cache_len, len[q]) : len[q]);
  const int shared8 = shared & ~7;
  const __m256 sc = _mm256_set1_ps(scale);
  for (int q = 0; q < nq; q++)
#pragma GCC unroll 16
    for (int v = 0; v < NV; v++)
      _mm256_storeu_ps(qs + q * D + 8 * v, _mm256_mul_ps(_mm256_loadu_ps(qv[q] + 8 * v), sc));
  // Scores of the shared blocks: 8 keys found once, dotted with every query.
  PagedRows kp{kc, row.block_table, E, g_off, block_size, 0, 0};
  for (int c = 0; c < shared8; c += 8) {
    const float* kr[8];
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++) kr[u] = kp.next();
    for (int q = 0; q < nq; q++) _mm256_storeu_ps(score + q * sstride + c, scores8<NV>(qs + q * D, kr));
  }
  // Each query's remaining blocks, then its softmax (attend_range's steps from key shared8 on).
  float sums[kMaxGroupQueries];
  bool live[kMaxGroupQueries];
  for (int q = 0; q < nq; q++) {
    const float* qq = qs + q * D;
    float* sq = score + q * sstride;
    const int n = len[q], n8 = (n + 7) & ~7;
    VisibleRows keys{{kc, row.block_table, E, g_off, block_size, shared8 / block_size, shared8 % block_size},
                     newk[q], row.cache_len, shared8};
    const float* kr[8] = {};
    for (int c = shared8; c < n8; c += 8) {
      // Past the query's last key, its last key again (as attend_range pads).
      for (int u = 0; u < 8; u++) kr[u] = u == 0 || c + u < n ? keys.next() : kr[u - 1];
      _mm256_storeu_ps(sq + c, scores8<NV>(qq, kr));
    }
    for (int c = n; c < n8; c++) sq[c] = -INFINITY;
    const float mx = row_max(sq, n8, -INFINITY);
    live[q] = mx != -INFINITY;
    sums[q] = 0.0f;
    std::fill(acc + q * D, acc + (q + 1) * D, 0.0f);
    if (!live[q]) continue;
    sums[q] = exp_in_place_sum(sq, n8, mx);
  }
  // Σ p V over the shared keys, 8 at a time: each query's accumulator in registers for the block.
  PagedRows vp{vc, row.block_table, E, g_off, block_size, 0, 0};
  for (int c = 0; c < shared; c += 8) {
    const int m = std::min(8, shared - c);
    const float* vr[8];
    for (int u = 0; u < m; u++) vr[u] = vp.next();
    for (int q = 0; q < nq; q++) {
      if (!live[q]) continue;
      const float* sq = score + q * sstride + c;
      float* aq = acc + q * D;
      __m256 a[NV];
#pragma GCC unroll 16
      for (int v = 0; v < NV; v++) a[v] = _mm256_loadu_ps(aq + 8 * v);
      for (int u = 0; u < m; u++) add_weighted_row<NV>(a, sq[u], vr[u]);
#pragma GCC unroll 16
      for (int v = 0; v < NV; v++) _mm256_storeu_ps(aq + 8 * v, a[v]);
    }
  }
  // Each query's own keys past them, then o = the normalised sum.
  for (int q = 0; q < nq; q++) {
    float* o = out[q];
    if (!live[q]) {
      std::fill(o, o + D, 0.0f);
      continue;
    }
    const float* sq = score + q * sstride;
    __m256 a[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; v++) a[v] = _mm256_loadu_ps(acc + q * D + 8 * v);
    VisibleRows values{{vc, row.block_table, E, g_off, block_size, shared / block_size, shared % block_size},
                       newk[q], row.cache_len, shared};
    for (int c = shared; c < len[q]; c++) {
      const float* vr = values.next();
      add_weighted_row<NV>(a, sq[c], vr);
    }
    const __m256 inv = _mm256_set1_ps(sums[q] > 0 ? 1.0f / sums[q] : 0.0f);
#pragma GCC unroll 16
    for (int v = 0; v < NV; v++) _mm256_storeu_ps(o + 8 * v, _mm256_mul_ps(a[v], inv));
  }
}

using AttendGroupFn = void (*)(const float* const*, float* const*, const int32_t* const*, const int*, int, float,
                               const float*, const float*, const AttnRow&, int64_t, int64_t, int, float*, float*,
                               int64_t, float*);

// attend_range for any head dim: the same steps with the query in an L1 buffer (qs [D]).
void attend_range_generic(const float* qv, float scale, const float* kc, const float* vc, const AttnRow& row,
                          const int32_t* newk, int64_t E, int64_t g_off, int block_size, int D, int c0, int c1,
                          bool direct, float* score, float* qs, float* o, PieceSums* ps) {
  for (int d = 0; d < D; d++) qs[d] = qv[d] * scale;
  const int len = c1 - c0;
  float mx = -INFINITY;
  VisibleRows keys{{kc, row.block_table, E, g_off, block_size, c0 / block_size, c0 % block_size}, newk, row.cache_len, c0};
  for (int c = c0; c < c1; c++) {
    const float v = dot_f32(qs, keys.next(), D);
    score[c - c0] = v;
    mx = std::max(mx, v);
  }
  std::fill(o, o + D, 0.0f);
  if (mx == -INFINITY) {
    if (ps) *ps = {mx, 0.0f};
    return;
  }
  // The sum in 8 lanes over a -inf-padded multiple of 8, as attend_range does (same reason).
  const int len8 = (len + 7) & ~7;
  for (int c = len; c < len8; c++) score[c] = -INFINITY;
  const float sum = exp_in_place_sum(score, len8, mx);
  VisibleRows values{{vc, row.block_table, E, g_off, block_size, c0 / block_size, c0 % block_size}, newk, row.cache_len, c0};
  for (int cc = 0; cc < len; cc++) {
    const float* vv = values.next();
    const float p = score[cc];
    if (p == 0.0f) continue;
    const __m256 pv = _mm256_set1_ps(p);
    int d = 0;
    for (; d + 8 <= D; d += 8) _mm256_storeu_ps(o + d, _mm256_fmadd_ps(pv, _mm256_loadu_ps(vv + d), _mm256_loadu_ps(o + d)));
    for (; d < D; d++) o[d] += p * vv[d];
  }
  if (direct) {
    const float inv = sum > 0 ? 1.0f / sum : 0.0f;
    for (int d = 0; d < D; d++) o[d] *= inv;
  }
  if (ps) *ps = {mx, sum};
}

using AttendFn = void (*)(const float*, float, const float*, const float*, const AttnRow&, const int32_t*, int64_t,
                          int64_t, int, int, int, bool, float*, float*, PieceSums*);

// The register-resident kernels for a head dim: one (token, head) over a key range, and a group of
// queries (attend_group); both null for other head dims (attend_range_generic, pair by pair).
struct AttendKernels {
  AttendFn range;
  AttendGroupFn group;
};

template <int NV>
constexpr AttendKernels attend_kernels() {
  return {attend_range<NV>, attend_group<NV>};
}

AttendKernels attend_kernels_for(int D) {
  switch (D) {
    case 32: return attend_kernels<4>();
    case 48: return attend_kernels<6>();
    case 64: return attend_kernels<8>();
    case 80: return attend_kernels<10>();
    case 96: return attend_kernels<12>();
    case 128: return attend_kernels<16>();
    default: return {nullptr, nullptr};
  }
}

// o [D] = the pieces' merge: with M the largest piece max, Σ_j e^{m_j - M} acc_j / Σ_j e^{m_j - M} s_j,
// in piece order (pieces of masked keys only, m = -inf, skipped). acc: [npieces, D].
void merge_pieces(const PieceSums* ps, const float* acc, int npieces, int D, float* o) {
  float M = -INFINITY;
  for (int j = 0; j < npieces; j++) M = std::max(M, ps[j].m);
  std::fill(o, o + D, 0.0f);
  if (M == -INFINITY) return;
  float S = 0.0f;
  for (int j = 0; j < npieces; j++) {
    if (ps[j].m == -INFINITY) continue;
    const float f = std::exp(ps[j].m - M);
    S += f * ps[j].s;
    for (int d = 0; d < D; d++) o[d] += f * acc[int64_t(j) * D + d];
  }
  const float inv = S > 0 ? 1.0f / S : 0.0f;
  for (int d = 0; d < D; d++) o[d] *= inv;
}

}  // namespace

// Paged attention per (token, query head) pair: scores over every visible cache index (K read
// through the block table), softmax with the max subtracted (masked entries become 0), the
// weighted sum of V rows. Pairs whose visible keys span several kKeyPiece pieces are computed
// piece by piece and merged (see kKeyPiece); the pieces are the same whoever computes them. When
// the step has few pairs with pieces (batch-1 decode at long contexts) the pieces themselves are
// the work items, spread over the threads; otherwise a pair is one item and its thread runs its
// pieces in turn. Head dims of 32-128 in steps of 16 keep the query and accumulator in registers.
// GQA: query head h reads KV head h / (Hq / Hkv). Scratch is per thread (or per call for spread
// pieces) and grows only when a longer context shows up.
void CpuDevice::attention(const float* q, int64_t ldq, const void* kcache, const void* vcache, const AttnRow* rows,
                          int nrows, const AttnShape& s, float* out) {
  if (s.kv_dtype != DType::F32) return reference_device()->attention(q, ldq, kcache, vcache, rows, nrows, s, out);
  const float* kc = static_cast<const float*>(kcache);
  const float* vc = static_cast<const float*>(vcache);
  const int D = s.head_dim, Hq = s.num_heads, group = s.num_heads / s.num_kv_heads;
  const int64_t E = int64_t(s.num_kv_heads) * D;
  const AttendKernels kernels = attend_kernels_for(D);
  const AttendFn fast = kernels.range;
  auto pieces_of = [](int len) { return (len + kKeyPiece - 1) / kKeyPiece; };
  // items_[k] = (row, token) of the k-th new token, in batch order; attn_len_[k] its visible keys
  // (a causal row's stop at the token itself: the rest of a prefill row is masked, and skipping
  // it saves half of a long prompt's work); a tree node's visible new tokens (VisibleRows) from
  // attn_newk_[attn_newk_at_[k]] (-1: causal). Count the pieces.
  items_.clear();
  attn_len_.clear();
  attn_newk_at_.clear();
  attn_newk_.clear();
  int64_t pieces = 0;
  for (int r = 0; r < nrows; r++)
    for (int i = 0; i < rows[r].n; i++) {
      const AttnRow& row = rows[r];
      items_.push_back(int64_t(r) << 32 | i);
      int len = row.cache_len + i + 1;
      attn_newk_at_.push_back(row.tree_mask ? int32_t(attn_newk_.size()) : -1);
      if (row.tree_mask) {
        for (int j = 0; j < row.n; j++)
          if (row.tree_mask[i * row.n + j] != 0) attn_newk_.push_back(j);
        len = row.cache_len + int(attn_newk_.size() - size_t(attn_newk_at_.back()));
      }
      attn_len_.push_back(len);
      pieces += pieces_of(len);
    }
  const int32_t* newk_base = attn_newk_.data();
  auto newk_of = [&](int64_t k) { return attn_newk_at_[size_t(k)] < 0 ? nullptr : newk_base + attn_newk_at_[size_t(k)]; };
  const int64_t pairs = int64_t(items_.size()) * Hq;
  const int64_t* items = items_.data();
  if (pairs == 0) return;
  pieces *= Hq;
  const int nth_pool = pool_.size();
  // Pieces as work items: when the pairs alone would leave threads idle or unbalanced.
  const bool spread = pieces > pairs && pairs < 8 * int64_t(nth_pool) && nth_pool > 1;

  // Keys [c0, c1) of token i of `row` for the query at qv (KV head g): attend_range for this head
  // dim, or the generic loop (qs: its [D] query buffer).
  auto attend_piece = [&](const float* qv, const AttnRow& row, const int32_t* newk, int g, int c0, int c1, bool direct,
                          float* score, float* qs, float* dst, PieceSums* ps) {
    if (fast)
      fast(qv, s.scale, kc, vc, row, newk, E, int64_t(g) * D, s.block_size, c0, c1, direct, score, dst, ps);
    else
      attend_range_generic(qv, s.scale, kc, vc, row, newk, E, int64_t(g) * D, s.block_size, D, c0, c1, direct, score,
                           qs, dst, ps);
  };

  // One pair, all its pieces, by the calling thread: direct when one piece, else via its own
  // scratch and merge_pieces.
  auto run_pair = [&](int64_t it, std::vector<float>& score, std::vector<float>& qs, std::vector<float>& acc,
                      std::vector<PieceSums>& sums) {
    const AttnRow& row = rows[items[it / Hq] >> 32];
    const int i = int(items[it / Hq] & 0xffffffff);
    const int h = int(it % Hq), g = h / group;
    const int len = attn_len_[size_t(it / Hq)], np = pieces_of(len);
    const int32_t* newk = newk_of(it / Hq);
    const float* qv = q + int64_t(row.tok_start + i) * ldq + int64_t(h) * D;
    float* o = out + int64_t(row.tok_start + i) * Hq * D + int64_t(h) * D;
    const int span = std::min(len, kKeyPiece);
    if (int64_t(score.size()) < span + 8) score.resize(size_t(span + 8));
    if (int64_t(qs.size()) < D) qs.resize(size_t(D));
    if (np > 1) {
      if (int64_t(acc.size()) < int64_t(np) * D) acc.resize(size_t(np) * D);
      if (int(sums.size()) < np) sums.resize(size_t(np));
    }
    for (int j = 0; j < np; j++) {
      const int c0 = j * kKeyPiece, c1 = std::min(len, c0 + kKeyPiece);
      float* dst = np == 1 ? o : acc.data() + int64_t(j) * D;
      PieceSums* ps = np == 1 ? nullptr : &sums[size_t(j)];
      attend_piece(qv, row, newk, g, c0, c1, np == 1, score.data(), qs.data(), dst, ps);
    }
    if (np > 1) merge_pieces(sums.data(), acc.data(), np, D, o);
  };

  if (!spread) {
    // Units: each row's tokens whose keys fit one piece, kMaxGroupQueries / group at a time, with
    // one KV head's query heads (attend_group); any other token, or every token without a group
    // kernel, pair by pair. Interleaved over the threads, they balance causal prefill, where later
    // tokens see more keys.
    const AttendGroupFn group_fn = group <= kMaxGroupQueries ? kernels.group : nullptr;
    attn_units_.clear();
    const int per_unit = kMaxGroupQueries / group;
    const int64_t nitems = int64_t(items_.size());
    for (int64_t k = 0; k < nitems;) {
      if (group_fn == nullptr || attn_len_[size_t(k)] > kKeyPiece) {
        for (int h = 0; h < Hq; h++) attn_units_.push_back({k, 1, h, false});
        k++;
        continue;
      }
      const int64_t r = items[k] >> 32;
      int nk = 1;
      while (nk < per_unit && k + nk < nitems && items[k + nk] >> 32 == r &&
             attn_len_[size_t(k + nk)] <= kKeyPiece)
        nk++;
      for (int g = 0; g < s.num_kv_heads; g++) attn_units_.push_back({k, nk, g, true});
      k += nk;
    }
    const AttnUnit* units = attn_units_.data();
    const int64_t nunits = int64_t(attn_units_.size());
    auto work = [&](int tid, int nth) {
      static thread_local std::vector<float> score, qs, acc, gscore, gqs, gacc;
      static thread_local std::vector<PieceSums> sums;
      for (int64_t u = tid; u < nunits; u += nth) {
        const AttnUnit& un = units[u];
        if (!un.group) {
          run_pair(un.k0 * Hq + un.head, score, qs, acc, sums);
          continue;
        }
        const AttnRow& row = rows[items[un.k0] >> 32];
        const float* qv[kMaxGroupQueries];
        float* o[kMaxGroupQueries];
        const int32_t* nk[kMaxGroupQueries];
        int lens[kMaxGroupQueries];
        int nq = 0, longest = 0;
        for (int64_t item = un.k0; item < un.k0 + un.nk; item++) {
          const int i = int(items[item] & 0xffffffff);
          for (int hh = 0; hh < group; hh++, nq++) {
            const int h = un.head * group + hh;
            qv[nq] = q + int64_t(row.tok_start + i) * ldq + int64_t(h) * D;
            o[nq] = out + int64_t(row.tok_start + i) * Hq * D + int64_t(h) * D;
            nk[nq] = newk_of(item);
            lens[nq] = attn_len_[size_t(item)];
            longest = std::max(longest, lens[nq]);
          }
        }
        const int64_t sstride = ((longest + 7) & ~7) + 8;
        if (int64_t(gscore.size()) < nq * sstride) gscore.resize(size_t(nq * sstride));
        if (int64_t(gqs.size()) < int64_t(nq) * D) gqs.resize(size_t(nq) * D);
        if (int64_t(gacc.size()) < int64_t(nq) * D) gacc.resize(size_t(nq) * D);
        group_fn(qv, o, nk, lens, nq, s.scale, kc, vc, row, E, int64_t(un.head) * D, s.block_size, gqs.data(),
                 gscore.data(), sstride, gacc.data());
      }
    };
    if (nunits < 2 || pairs < 4 || nth_pool == 1)
      work(0, 1);
    else
      pool_.run(work);
    return;
  }

  // Spread: work item u is piece j of (token, KV head) group gi, run for the group's query heads
  // in turn (the piece's K and V rows stay in L2 between them: they are read from memory once).
  // Results of pair (token, h = kvh·group + hh), piece j: attn_acc_ / attn_sums_ at
  // piece_start_[gi]·group + hh·np + j, so each pair's pieces are contiguous for merge_pieces.
  const int Hkv = s.num_kv_heads;
  const int64_t ngroups = int64_t(items_.size()) * Hkv;
  piece_start_.resize(size_t(ngroups + 1));
  piece_start_[0] = 0;
  for (int64_t gi = 0; gi < ngroups; gi++)
    piece_start_[size_t(gi + 1)] = piece_start_[size_t(gi)] + pieces_of(attn_len_[size_t(gi / Hkv)]);
  const int64_t units = piece_start_[size_t(ngroups)];
  if (int64_t(attn_acc_.size()) < units * group * D) attn_acc_.resize(size_t(units * group * D));
  if (int64_t(attn_sums_.size()) < units * group) attn_sums_.resize(size_t(units * group));
  const int64_t* starts = piece_start_.data();
  pool_.run([&](int tid, int nth) {
    static thread_local std::vector<float> score, qs;
    if (int64_t(score.size()) < kKeyPiece + 8) score.resize(size_t(kKeyPiece + 8));
    if (int64_t(qs.size()) < D) qs.resize(size_t(D));
    int64_t gi = 0;
    for (int64_t u = tid; u < units; u += nth) {
      while (starts[gi + 1] <= u) gi++;
      const AttnRow& row = rows[items[gi / Hkv] >> 32];
      const int i = int(items[gi / Hkv] & 0xffffffff);
      const int g = int(gi % Hkv);
      const int len = attn_len_[size_t(gi / Hkv)], np = int(starts[gi + 1] - starts[gi]), j = int(u - starts[gi]);
      const int32_t* newk = newk_of(gi / Hkv);
      const int c0 = j * kKeyPiece, c1 = std::min(len, c0 + kKeyPiece);
      for (int hh = 0; hh < group; hh++) {
        const int h = g * group + hh;
        const float* qv = q + int64_t(row.tok_start + i) * ldq + int64_t(h) * D;
        const int64_t at = starts[gi] * group + int64_t(hh) * np + j;
        const bool direct = np == 1;
        float* dst = direct ? out + int64_t(row.tok_start + i) * Hq * D + int64_t(h) * D : attn_acc_.data() + at * D;
        PieceSums* ps = direct ? nullptr : &attn_sums_[size_t(at)];
        attend_piece(qv, row, newk, g, c0, c1, direct, score.data(), qs.data(), dst, ps);
      }
    }
  });
  for (int64_t gi = 0; gi < ngroups; gi++) {
    const int np = int(starts[gi + 1] - starts[gi]);
    if (np == 1) continue;
    const AttnRow& row = rows[items[gi / Hkv] >> 32];
    const int i = int(items[gi / Hkv] & 0xffffffff);
    for (int hh = 0; hh < group; hh++) {
      const int64_t at = starts[gi] * group + int64_t(hh) * np;
      const int h = int(gi % Hkv) * group + hh;
      merge_pieces(attn_sums_.data() + at, attn_acc_.data() + at * D, np, D,
                   out + int64_t(row.tok_start + i) * Hq * D + int64_t(h) * D);
    }
  }
}

// First maximum per row (ties pick the lower index, like the reference and numpy): the row's
// maximum by vector max from -inf (NaN loses every comparison), then the first index holding
// it; -1 when nothing beats -inf.
void CpuDevice::argmax(const float* x, int64_t T, int64_t ld, int64_t V, int32_t* out) {
  const float none = -std::numeric_limits<float>::infinity();
  for_range(pool_, T, V, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) {
      const float* row = x + t * ld;
      const float m = row_max(row, V, none);
      out[t] = m == none ? -1 : first_index_of(row, V, m);
    }
  });
}

// The walk of the reference, with each node's parent found once per row (one backward scan of
// its mask row) instead of once per visited candidate. parents_ is kept across calls.
void CpuDevice::tree_walk(const int32_t* tokens, const int32_t* argmax, const LeafRow* rows, int nrows,
                            int32_t* leaf) {
  for (int r = 0; r < nrows; r++) {
    const LeafRow& row = rows[r];
    if (row.n == 0) {
      leaf[r] = -1;
      continue;
    }
    if (int64_t(parents_.size()) < row.n) parents_.resize(size_t(row.n));
    for (int32_t c = 0; c < row.n; c++) {
      int32_t p = c - 1;
      if (row.tree_mask) {
        const uint8_t* m = row.tree_mask + int64_t(c) * row.n;
        while (p >= 0 && !m[p]) p--;
      }
      parents_[size_t(c)] = p;
    }
    const int32_t* tok = tokens + row.tok_start;
    int32_t node = 0, c = 1;
    // Children of a node come after it, so the scan for the next node resumes past the current.
    while (c < row.n) {
      if (parents_[size_t(c)] == node && tok[c] == argmax[row.logit_start + node]) node = c;
      c++;
    }
    leaf[r] = node;
  }
}

// Per row: the maximum, then Σ exp(x - max) with the vector exp (relative error ~2e-7), summed
// in f32 over blocks of 256 values and across blocks in double, so a 150k vocabulary loses
// nothing to the running sum.
void CpuDevice::log_sum_exp(const float* x, int64_t T, int64_t ld, int64_t V, double* out) {
  for_range(pool_, T, 2 * V, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) {
      out[t] = row_log_sum_exp(x + t * ld, V);
    }
  });
}

// Per row: one pass keeping the K best in a sorted list; a value enters only if it beats the
// current K-th (strictly, so the earlier index of a tie stays ahead), which for K << V is almost
// every element's only work: one compare. Indices map through ids last.
void CpuDevice::top_k(const float* x, int64_t T, int64_t ld, int64_t V, int K, const int32_t* ids, int32_t* out) {
  const auto map = [ids](int32_t i) { return i < 0 || !ids ? i : ids[i]; };
  if (K == 1) {  // a chain's heads: the row maximum by vector max, then its first index
    for_range(pool_, T, V, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; t++) {
        const float* row = x + t * ld;
        out[t] = map(first_index_of(row, V, row_max(row, V, -std::numeric_limits<float>::infinity())));
      }
    });
    return;
  }
  for_range(pool_, T, V, [&](int64_t t0, int64_t t1) {
    std::vector<float> vals(size_t(std::max(K, 1)));
    for (int64_t t = t0; t < t1; t++) {
      const float* row = x + t * ld;
      int32_t* best = out + t * K;
      int filled = 0;
      // Insert row[i] into the sorted best K (ties keep the lower index first).
      auto offer = [&](int64_t i) {
        const float v = row[i];
        if (filled == K && !(v > vals[size_t(K - 1)])) return;
        if (std::isnan(v)) return;
        int j = filled < K ? filled++ : K - 1;
        for (; j > 0 && v > vals[size_t(j - 1)]; j--) {
          vals[size_t(j)] = vals[size_t(j - 1)];
          best[j] = best[j - 1];
        }
        vals[size_t(j)] = v;
        best[j] = int32_t(i);
      };
      int64_t i = 0;
      for (; i < V && filled < K; i++) offer(i);
      // Full: only values above the K-th best matter, and after the first few hundred a block of
      // 8 rarely holds one, so blocks are skipped by one compare (NaN compares false: skipped, as
      // offer skips it).
      for (; i + 8 <= V; i += 8) {
        const __m256 above = _mm256_cmp_ps(_mm256_loadu_ps(row + i), _mm256_set1_ps(vals[size_t(K - 1)]), _CMP_GT_OQ);
        if (_mm256_movemask_ps(above) == 0) continue;
        for (int64_t u = i; u < i + 8; u++) offer(u);
      }
      for (; i < V; i++) offer(i);
      for (int j = filled; j < K; j++) best[j] = -1;
      for (int j = 0; j < filled; j++) best[j] = map(best[j]);
    }
  });
}

}  // namespace loom
