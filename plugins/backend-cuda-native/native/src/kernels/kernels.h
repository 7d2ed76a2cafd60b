// The kernel interface the model graph is written against. A device (cpu today, cuda next)
// implements every op; the model in native/src/model/ calls nothing else, so a new device plugs
// into the same graph. native/src/reference/ holds the plain scalar version of each op: it is the
// ground truth the optimized CPU kernels are tested against (selftest/) and the one a future CUDA
// kernel will be tested against.
//
// Conventions: activations are f32, row-major, with an explicit leading dimension (`ld*`, in
// elements) so ops can read and write column slices of wider buffers. Weights are a WeightView
// in their stored dtype. Shapes in comments use the names below:
//   T tokens in the step, K input features, N output features, H hidden size, D head dim,
//   Hq query heads, Hkv key/value heads, R LoRA rank, S KV slots (blocks * block size).
//
// Memory: every data pointer an op takes is device memory (see Device below). Descriptor arrays
// passed as `const X* items, int n` (MatmulJob, LoraSegment, LoraOutput, AttnRow, LeafRow,
// CacheRegion) and the structs passed by reference are host memory, read during the call only;
// the pointers inside them (weights, block tables, tree masks, outputs) are device memory.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"
#include "runtime/status.h"

namespace loom {

// A row-major [rows, cols] weight matrix in its stored dtype (usually an mmapped safetensors slice).
struct WeightView {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0;  // N, output features
  int64_t cols = 0;  // K, input features
};

// One projection sharing the op's input: y[t, n] (+)= bias[n] + dot(x[t, :], w[n, :]).
struct MatmulJob {
  WeightView w;                 // [N, K]
  const float* bias = nullptr;  // [N] or null
  float* y = nullptr;           // [T, ldy], columns [0, N) written
  int64_t ldy = 0;
};

// A run of consecutive tokens that use one adapter (SGMV segment; a decode row is a segment of
// one token, which is the BGMV case). `col` is where this module's rank columns start in the
// shared low-rank scratch, so several modules (q, k, v) can be shrunk in one call.
struct LoraSegment {
  int32_t tok_start = 0;        // first token of the run
  int32_t tok_count = 0;        // tokens in the run
  const void* w = nullptr;      // shrink: A [R, K]; expand: B transposed, Bt [R, N]; in `dtype`
  DType dtype = DType::F32;     // adapter storage: f32, or bf16/f16 for 16-bit models (compute is f32)
  int32_t rank = 0;             // R (1..128)
  int32_t col = 0;              // first scratch column of this module
  float scale = 1.0f;           // expand only: alpha / r (already resolved)
};

// Bytes a later op will read (a cache hint: see Device::prefetch_in_next_matmul).
struct CacheRegion {
  const void* p = nullptr;
  int64_t bytes = 0;
};

// Where one LoRA module's expand writes (lora_apply): y [T, ldy], N output features.
struct LoraOutput {
  float* y = nullptr;
  int64_t ldy = 0;
  int64_t N = 0;
};

// One sequence's share of an attention op. Its tokens are rows [tok_start, tok_start + n) of q
// and out; their K/V were already stored at cache indices [cache_len, cache_len + n).
// The same description serves kv_slots (where each new token's K/V goes).
struct AttnRow {
  int32_t tok_start = 0;
  int32_t n = 0;                         // new tokens this step
  int32_t cache_len = 0;                 // committed entries before this step
  const int32_t* block_table = nullptr;  // device: [ceil((cache_len + n) / block_size)] block ids
  const uint8_t* tree_mask = nullptr;    // device: [n, n] 0/1, or null for causal
};

struct AttnShape {
  int32_t num_heads = 0;     // Hq
  int32_t num_kv_heads = 0;  // Hkv (GQA: Hq / Hkv query heads share one KV head)
  int32_t head_dim = 0;      // D
  int32_t block_size = 0;    // KV slots per block
  float scale = 1.0f;        // 1 / sqrt(D)
  // Element type of the K/V caches (Device::kv_dtype): stored values are rounded to it (round to
  // nearest even) by kv_store and widened to f32 when attention reads them.
  DType kv_dtype = DType::F32;
};

// One step row's share of the tree walk (Device::tree_walk).
struct LeafRow {
  int32_t tok_start = 0;               // first token of the row in the step
  int32_t n = 0;                       // tokens of the row; 0: the row does not walk (leaf -1)
  int32_t logit_start = 0;             // index of the row's first logits row (its argmax entry)
  const uint8_t* tree_mask = nullptr;  // device: [n, n] 0/1, or null for a causal row (a chain)
};

// One token of a row's penalty history (SampleParams::penalties): every listed token is in the
// prompt or the output (the repetition penalty's set); `count` is its occurrences in the output
// (the frequency and presence penalties' counts; 0 for a prompt-only token).
struct PenaltyToken {
  int32_t id = 0;  // token id; ids outside [0, V) are skipped; ids are distinct within a row
  int32_t count = 0;
};

// How one logits row is sampled (Device::sample): a request's SamplingParams
// (core/src/contracts/sampling.ts) and its sampling state as plain numbers. The f64 fields are JS
// numbers, kept in f64 so the arithmetic is the JS sampler's.
struct SampleParams {
  int32_t row = 0;                  // the logits row: x[row * ld, + V)
  double temperature = 0;           // 0: greedy
  int32_t top_k = 0;                // 0: off; 1: greedy
  double top_p = 1;                 // 1: off
  double typical_p = 1;             // 1: off
  double repetition_penalty = 1;    // 1: off
  double frequency_penalty = 0;     // 0: off
  double presence_penalty = 0;      // 0: off
  uint64_t seed = 0;                // the request's stream: xoshiro128** seeded by SplitMix64(seed) (rng.ts)
  uint64_t draws = 0;               // nextFloat calls the stream made before this step (one per sampled token)
  const PenaltyToken* penalties = nullptr;  // device [n_penalties] (read only when a penalty is on)
  int32_t n_penalties = 0;
  // Device [ceil(V/32)]: token v is allowed when bit v%32 of word v/32 is set; null: every token.
  const uint32_t* allowed = nullptr;
  // A terminated grammar whose only legal moves are the allowed (eos) tokens: an allowed token the
  // model scored -inf becomes 0, so it stays choosable (grammar-mask.ts).
  bool allowed_lift = false;
  int32_t top_logprobs = 0;  // raw top logprobs to report, 0..max_top
};

// Scratch of one row of Device::sample: the working logits (f32), candidate ids (i32), an order
// key and probabilities (f64), each [V], and the cuda kernel's scratch (terms by position, f64
// [V], chunk sums, f64 [ceil(V / 256)], two id lists, i32 [V] each), rounded up to 256 bytes
// (reference/sampler-core.h carves it).
inline int64_t sample_row_scratch_bytes(int64_t V) {
  return (V * (4 + 4 + 8 + 8 + 8 + 4 + 4) + (V + 255) / 256 * 8 + 255) / 256 * 256;
}

// The op set. Every entry: a "Semantics:" pseudo-loop and the argument shapes.
//
// A device owns its memory. Every pointer an op reads or writes points into memory the device
// handed out (alloc) or weights it made resident, unless the argument says "host": for the cpu
// device that is ordinary host memory, for cuda it is GPU memory that only the device's ops and
// its upload/download/copy may touch. Ops and transfers run in the order they are issued (one
// stream); a device may run them asynchronously, and `synchronize` waits for all of them.
class Device {
 public:
  virtual ~Device() = default;
  virtual const char* name() const = 0;

  // ---- Memory ----

  // `bytes` of device memory, aligned to 256 bytes, contents undefined; nullptr when out of memory.
  virtual void* alloc(int64_t bytes) = 0;
  // Return memory from `alloc` (nullptr: nothing). Waits for queued ops that may still use it.
  virtual void release(void* p) = 0;
  // Host → device. `src` (host) must stay valid and unchanged until the next `synchronize`.
  virtual void upload(void* dst, const void* src, int64_t bytes) = 0;
  // Device → host. `dst` (host) holds the bytes once `synchronize` returns.
  virtual void download(void* dst, const void* src, int64_t bytes) = 0;
  // Device → device (the ranges must not overlap).
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;
  // Semantics: for i<bytes: dst[i] = 0
  virtual void zero(void* dst, int64_t bytes) = 0;
  // Wait until every op and transfer issued so far has finished. Returns the first failure of any
  // of them since the last call (a device fault, such as a CUDA error: ops return nothing, so this
  // is where a step learns its results cannot be trusted); Ok on a device that cannot fail so.
  virtual Status synchronize() = 0;
  // True when ops may read host memory directly (the cpu device): weights mapped from a file are
  // then used in place, never copied. False (cuda): the model uploads them at load.
  // A device that reads host memory also lets ops write it: the model then has the step's
  // results written straight into the caller's arrays instead of downloading them.
  virtual bool reads_host_memory() const = 0;
  // The element type the device keeps its KV caches in (AttnShape::kv_dtype): f32 on the cpu
  // (fastest there), bf16/f16 on a GPU. The reference implements all three.
  virtual DType kv_dtype() const { return DType::F32; }
  // Threads: one thread steps the model (issuing ops and transfers) while an adapter-loading
  // thread may call alloc, upload, release and synchronize at the same time, and copy from memory
  // that steps only read (the base weights) into memory no step uses yet.

  // ---- Ops ----

  // Semantics: for j<njobs, t<T, n<N_j: y_j[t*ldy_j+n] = (accumulate ? y_j[..] : 0) + bias_j[n]
  //            + Σ_k x[t*ldx+k] * W_j[n,k]
  // x [T, ldx] (K = W_j.cols, equal for all jobs); each weight row is streamed once for all T.
  // W_j must not be written by an op issued before this one (only upload and copy fill weights):
  // a device may start reading it before those ops finish (the cuda device does, on sm_90+).
  virtual void matmul(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs,
                      bool accumulate) = 0;

  // Semantics: for t<T: r = 1/sqrt(Σ_i x[t,i]^2 / H + eps); y[t,i] = x[t,i] * r * w[i]
  // x [T, ldx], w [H], y [T, ldy]
  virtual void rmsnorm(const float* x, int64_t T, int64_t ldx, int64_t H, const float* w, float eps,
                       float* y, int64_t ldy) = 0;

  // A block's RMSNorm and the projections that read it, in one call, so a device can fold the
  // norm into the projections' read of x (the cuda GEMV at 1-4 tokens: one launch and one pass
  // over the activations fewer).
  // Semantics: rmsnorm(x, T, ldx, H, norm_w, eps, xn, H); then matmul(xn, T, H, jobs, njobs, false),
  //   where H = K of every job. keep_xn: xn holds the normed rows afterwards (a LoRA pass reads
  //   them); false: xn is scratch, undefined afterwards. xn may be x itself (normed in place).
  // x [T, ldx], norm_w [H], xn [T, H]; the projections as matmul's.
  // A device without a fused kernel runs exactly that.
  virtual void rmsnorm_matmul(const float* x, int64_t T, int64_t ldx, const float* norm_w, float eps, float* xn,
                              bool keep_xn, const MatmulJob* jobs, int njobs) {
    const int64_t H = njobs > 0 ? jobs[0].w.cols : 0;
    rmsnorm(x, T, ldx, H, norm_w, eps, xn, H);
    matmul(xn, T, H, jobs, njobs, false);
  }

  // RoPE angle tables of a step, computed once and read by every layer's rope.
  // Semantics: for t<T, i<half: a = f64(positions[t]) * inv_freq[i] (in double: positions can
  //   be large); cos[t*half+i] = f32(cos(a)); sin[t*half+i] = f32(sin(a))
  // positions [T] int32 (>= 0), inv_freq [half] f64 (scaling applied), cos, sin [T, half] f32
  virtual void rope_tables(const int32_t* positions, int64_t T, const double* inv_freq, int64_t half, float* cos,
                           float* sin) = 0;

  // Semantics (HF rotate_half): for t<T, h<heads, i<D/2: a = x[t,h,i], b = x[t,h,i+D/2];
  //   x[t,h,i] = a*cos[t,i] - b*sin[t,i]; x[t,h,i+D/2] = b*cos[t,i] + a*sin[t,i]
  // x [T, ldx] holding heads*D values per token from column 0; cos, sin [T, D/2] (rope_tables)
  virtual void rope(float* x, int64_t T, int64_t ldx, int heads, int D, const float* cos,
                    const float* sin) = 0;

  // Semantics: for i<n, c<H: dst[i*H + c] = src[idx[i]*ld + c]
  // src [*, ld], idx [n] row indices (already range-checked; may repeat), dst [n, H] (no overlap)
  virtual void gather_rows(const float* src, int64_t ld, const int32_t* idx, int64_t n, int64_t H,
                           float* dst) = 0;

  // Semantics: for t<T, i<H: y[t*H+i] = table[ids[t], i]
  // ids [T] (already range-checked), table [V, H], y [T, H]
  virtual void embedding(const int32_t* ids, int64_t T, const WeightView& table, float* y) = 0;

  // Semantics: for i<n: y[i] = gate[i] / (1 + exp(-gate[i])) * up[i]
  virtual void silu_mul(const float* gate, const float* up, int64_t n, float* y) = 0;

  // Semantics: for i<n: y[i] += t[i] / (1 + exp(-t[i]))   (Medusa residual block)
  virtual void silu_residual(const float* t, int64_t n, float* y) = 0;

  // Each new token's cache slot, from its row's block table.
  // Semantics: for r<nrows, i<rows[r].n: c = rows[r].cache_len + i;
  //   slot[rows[r].tok_start + i] = rows[r].block_table[c / block_size] * block_size + c % block_size
  // rows [nrows] (host descriptors; tree_mask unused), slot [T] int32
  virtual void kv_slots(const AttnRow* rows, int nrows, int block_size, int32_t* slot) = 0;

  // Cache indices of one sequence to slots (the kv-copy lists of a step).
  // Semantics: for i<n: slot[i] = block_table[idx[i] / block_size] * block_size + idx[i] % block_size
  // block_table [ceil((max idx + 1) / block_size)], idx [n] (>= 0, checked), slot [n] int32
  virtual void paged_slots(const int32_t* block_table, const int32_t* idx, int64_t n, int block_size,
                           int32_t* slot) = 0;

  // Semantics: for t<T, e<E: kc[slot[t]*E + e] = kv(k[t*ldk + e]); vc likewise from v   (E = Hkv*D)
  //   where kv() rounds f32 to kv_dtype (round to nearest even; identity for f32)
  // k, v [T, ldk] f32, slot [T], kc, vc [S, E] in kv_dtype
  virtual void kv_store(const float* k, const float* v, int64_t T, int64_t ldk, const int32_t* slot,
                        int64_t E, DType kv_dtype, void* kc, void* vc) = 0;

  // A layer's RoPE and cache write in one call, so a device can do both in one pass: q and k
  // rotated in place, then the rotated k and v stored in their slots. qkv rows hold
  // q [q_heads*D] | k [kv_heads*D] | v [kv_heads*D] from column 0.
  // Semantics: rope(qkv, T, ldx, q_heads + kv_heads, D, cos, sin); then
  //   kv_store(qkv + q_heads*D, qkv + (q_heads + kv_heads)*D, T, ldx, slot, kv_heads*D, kv_dtype, kc, vc)
  // A device without a fused kernel runs exactly that.
  virtual void rope_kv_store(float* qkv, int64_t T, int64_t ldx, int q_heads, int kv_heads, int D, const float* cos,
                             const float* sin, const int32_t* slot, DType kv_dtype, void* kc, void* vc) {
    rope(qkv, T, ldx, q_heads + kv_heads, D, cos, sin);
    const int64_t E = int64_t(kv_heads) * D;
    kv_store(qkv + int64_t(q_heads) * D, qkv + int64_t(q_heads) * D + E, T, ldx, slot, E, kv_dtype, kc, vc);
  }

  // Semantics: for i<n: kc[to[i], :] = kc[from[i], :]; vc likewise (in order: a later copy sees
  // an earlier one's result; all layers' caches are separate calls).
  // from, to [n] slots, kc, vc [S, E] in kv_dtype
  virtual void kv_copy(const int32_t* from, const int32_t* to, int64_t n, int64_t E, DType kv_dtype, void* kc,
                       void* vc) = 0;

  // Semantics: for each row, token i, head h (g = h / (Hq/Hkv)), visible cache indices c
  //   (c < cache_len, or c = cache_len + j with tree_mask[i,j] / j <= i when causal):
  //   s_c = scale * dot(q[t,h,:], K[slot(c), g, :]); p = softmax(s); out[t,h,:] = Σ_c p_c V[slot(c), g, :]
  //   where slot(c) = block_table[c / block_size] * block_size + c % block_size, and K, V are
  //   the caches widened from shape.kv_dtype to f32.
  // q [T, ldq] (Hq*D from column 0), kc, vc [S, Hkv*D] in shape.kv_dtype, out [T, Hq*D]
  virtual void attention(const float* q, int64_t ldq, const void* kc, const void* vc, const AttnRow* rows,
                         int nrows, const AttnShape& shape, float* out) = 0;

  // A hint, no effect on any result: the next matmul may pull these bytes into cache while it
  // computes (the LoRA weights its projection's lora_apply reads next), so a compute-bound
  // matmul hides their DRAM traffic. The regions must stay valid until that matmul returns.
  virtual void prefetch_in_next_matmul(const CacheRegion* regions, int n) {
    (void)regions;
    (void)n;
  }

  // Semantics (SGMV/BGMV shrink): for seg, t in seg, r<R_seg:
  //   tmp[t*ldt + col_seg + r] = Σ_k x[t*ldx+k] * f32(A_seg[r,k])
  // x [T, ldx], A_seg [R_seg, K] in dtype_seg, tmp [T, ldt]
  virtual void lora_shrink(const float* x, int64_t ldx, int64_t K, const LoraSegment* segs, int nsegs, float* tmp,
                           int64_t ldt) = 0;

  // Semantics (SGMV/BGMV expand): for seg, t in seg, n<N:
  //   y[t*ldy+n] += scale_seg * Σ_r tmp[t*ldt + col_seg + r] * f32(Bt_seg[r,n])
  // tmp [T, ldt], Bt_seg [R_seg, N] in dtype_seg (B stored transposed so the update is a row axpy), y [T, ldy]
  virtual void lora_expand(const float* tmp, int64_t ldt, int64_t N, const LoraSegment* segs, int nsegs, float* y,
                           int64_t ldy) = 0;

  // Both halves in one op, for the modules of one group sharing input x (q|k|v, gate|up, o,
  // down). Semantics: lora_shrink(x, ldx, K, shrink, nsegs, tmp, ldt); then for i < nsegs:
  //   lora_expand(tmp, ldt, outs[module[i]].N, &expand[i], 1, outs[module[i]].y, outs[module[i]].ldy)
  // shrink[i] (A) and expand[i] (Bt) describe the same tokens, rank and columns; the segments of
  // one adapter run are consecutive. A device may run each run's shrink and expand back to back
  // on one thread (no barrier between the halves: a run's tokens need only its own shrink).
  // The default runs the two ops.
  virtual void lora_apply(const float* x, int64_t ldx, int64_t K, const LoraSegment* shrink,
                          const LoraSegment* expand, const int* module, int nsegs, const LoraOutput* outs,
                          float* tmp, int64_t ldt) {
    lora_shrink(x, ldx, K, shrink, nsegs, tmp, ldt);
    for (int i = 0; i < nsegs; i++)
      lora_expand(tmp, ldt, outs[module[i]].N, &expand[i], 1, outs[module[i]].y, outs[module[i]].ldy);
  }

  // Semantics: for t<T: out[t] = log Σ_{i<V} exp(x[t*ld+i])   (a logits row's log-softmax
  // normaliser, so logprob(i) = x[t*ld+i] - out[t]; -inf for a row of -inf, NaN if a NaN is in it)
  virtual void log_sum_exp(const float* x, int64_t T, int64_t ld, int64_t V, double* out) = 0;

  // The engine's greedy choice per logits row: the first maximum, NaN never chosen.
  // Semantics: for t<T: m = max over i<V of the non-NaN x[t*ld+i] (-inf if there are none);
  //   out[t] = (m > -inf) ? the smallest i with x[t*ld+i] == m : -1
  // x [T, ld], out [T] int32
  virtual void argmax(const float* x, int64_t T, int64_t ld, int64_t V, int32_t* out) = 0;

  // Where the sample-and-match walk of each verification row's tree stops: from node 0, move to
  // the first child whose token is the current node's chosen token (`argmax`: the token sampled
  // at each node, or the logits' argmax for a greedy walk), until none carries it.
  // Semantics: for r<nrows: R = rows[r]; if R.n == 0: leaf[r] = -1, else
  //   node = 0; loop { next = the smallest c in (node, R.n) with tokens[R.tok_start + c] ==
  //     argmax[R.logit_start + node] and parent(c) == node; if none: break; node = next };
  //   leaf[r] = node; where parent(c) = the largest j < c with R.tree_mask[c*R.n + j] != 0 (-1 if
  //   none), or c - 1 when R.tree_mask is null.
  // tokens [T], argmax [Σ logits rows] (each node's chosen token), rows [nrows] (host), leaf [nrows] int32
  virtual void tree_walk(const int32_t* tokens, const int32_t* argmax, const LeafRow* rows, int nrows,
                           int32_t* leaf) = 0;

  // Semantics: for t<T, j<K: i = the index of row t's j-th largest value, i<V, ties to the lower
  // index, NaN never chosen; out[t*K + j] = ids ? ids[i] : i, or -1 where the row has fewer than
  // j+1 non-NaN values. ids [V] (device, or null): what each column stands for, as when a row's
  // columns are a vocabulary subset (Medusa heads over a draft vocabulary) and out are token ids.
  virtual void top_k(const float* x, int64_t T, int64_t ld, int64_t V, int K, const int32_t* ids, int32_t* out) = 0;

  // The engine's token sampler (core/src/engine/sampler/token-sampler.ts) on logits rows: the same
  // token for the same logits, parameters, seed and draws, bit for bit (JS numbers are f64, Math.exp
  // and Math.log are fdlibm's; reference/sampler-core.h is the port), alone or in any batch.
  // Semantics: for r<nrows: p = params[r]; z = x[p.row*ld + i<V] (raw logits); w = z;
  //   for (id, c) in p.penalties: w[id] = f32(w[id] < 0 ? w[id]*rep : w[id]/rep) (rep != 1);
  //     if c > 0 and (freq or presence): w[id] = f32(w[id] - c*freq - presence)
  //   if p.allowed: w[i] = -inf where bit i is clear (allowed_lift: an allowed -inf becomes 0)
  //   greedy (temperature 0 or top_k 1): id = the first maximum of w, -1 if none > -inf
  //   else: ids = {i: w[i] > -inf} in id order; top-k (k-th value's ties kept); w /= temperature;
  //     top-p; typical-p (each keeps the shortest most-likely/most-typical prefix reaching its
  //     mass, in the JS selection's order); prob = softmax over ids (f64); u = nextFloat of the
  //     stream after p.draws draws; id = the first ids[j] with u < Σ_{i<=j} prob (-1: no ids)
  //   token[r] = id; logprob[r] = z[id] - log Σ_i exp z[i] (the raw log-softmax: before
  //   penalties, mask, temperature and warpers); for j<max_top: (top_ids, top_logprobs)[r*max_top+j]
  //   = the j-th of z by (value desc, id asc) with its raw logprob for j < p.top_logprobs and
  //   non-NaN values remain, else (-1, 0). A row with token -1 reports logprob 0 and no tops.
  //   A row draws (its next `draws` is one more) exactly when it is not greedy and token >= 0.
  // x [*, ld], params [nrows] (host), token [nrows] i32, logprob [nrows] f32,
  // top_ids [nrows, max_top] i32, top_logprobs [nrows, max_top] f32,
  // scratch [nrows * sample_row_scratch_bytes(V)] bytes (device, contents undefined)
  virtual void sample(const float* x, int64_t ld, int64_t V, const SampleParams* params, int nrows, int max_top,
                      int32_t* token, float* logprob, int32_t* top_ids, float* top_logprobs, void* scratch) = 0;
};

// The scalar reference device: plain loops, one thread, no intrinsics. Slow on purpose.
Device* reference_device();

}  // namespace loom
