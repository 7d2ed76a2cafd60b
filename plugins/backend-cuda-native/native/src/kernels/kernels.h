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
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

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
struct AttnRow {
  int32_t tok_start = 0;
  int32_t n = 0;                         // new tokens this step
  int32_t cache_len = 0;                 // committed entries before this step
  const int32_t* block_table = nullptr;  // [ceil((cache_len + n) / block_size)] block ids
  const uint8_t* tree_mask = nullptr;    // [n, n] 0/1, or null for causal
};

struct AttnShape {
  int32_t num_heads = 0;     // Hq
  int32_t num_kv_heads = 0;  // Hkv (GQA: Hq / Hkv query heads share one KV head)
  int32_t head_dim = 0;      // D
  int32_t block_size = 0;    // KV slots per block
  float scale = 1.0f;        // 1 / sqrt(D)
};

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
  // Wait until every op and transfer issued so far has finished.
  virtual void synchronize() = 0;
  // True when ops may read host memory directly (the cpu device): weights mapped from a file are
  // then used in place, never copied. False (cuda): the model uploads them at load.
  virtual bool reads_host_memory() const = 0;

  // ---- Ops ----

  // Semantics: for j<njobs, t<T, n<N_j: y_j[t*ldy_j+n] = (accumulate ? y_j[..] : 0) + bias_j[n]
  //            + Σ_k x[t*ldx+k] * W_j[n,k]
  // x [T, ldx] (K = W_j.cols, equal for all jobs); each weight row is streamed once for all T.
  virtual void matmul(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs,
                      bool accumulate) = 0;

  // Semantics: for t<T: r = 1/sqrt(Σ_i x[t,i]^2 / H + eps); y[t,i] = x[t,i] * r * w[i]
  // x [T, ldx], w [H], y [T, ldy]
  virtual void rmsnorm(const float* x, int64_t T, int64_t ldx, int64_t H, const float* w, float eps,
                       float* y, int64_t ldy) = 0;

  // Semantics (HF rotate_half): for t<T, h<heads, i<D/2: a = x[t,h,i], b = x[t,h,i+D/2];
  //   x[t,h,i] = a*cos[t,i] - b*sin[t,i]; x[t,h,i+D/2] = b*cos[t,i] + a*sin[t,i]
  // x [T, ldx] holding heads*D values per token from column 0; cos, sin [T, D/2]
  virtual void rope(float* x, int64_t T, int64_t ldx, int heads, int D, const float* cos,
                    const float* sin) = 0;

  // Semantics: for t<T, i<H: y[t*H+i] = table[ids[t], i]
  // ids [T] (already range-checked), table [V, H], y [T, H]
  virtual void embedding(const int32_t* ids, int64_t T, const WeightView& table, float* y) = 0;

  // Semantics: for i<n: y[i] = gate[i] / (1 + exp(-gate[i])) * up[i]
  virtual void silu_mul(const float* gate, const float* up, int64_t n, float* y) = 0;

  // Semantics: for i<n: y[i] += t[i] / (1 + exp(-t[i]))   (Medusa residual block)
  virtual void silu_residual(const float* t, int64_t n, float* y) = 0;

  // Semantics: for t<T: kc[slot[t], :] = k[t, :]; vc[slot[t], :] = v[t, :]   (E = Hkv*D)
  // k, v [T, ldk], slot [T], kc, vc [S, E]
  virtual void kv_store(const float* k, const float* v, int64_t T, int64_t ldk, const int32_t* slot,
                        int64_t E, float* kc, float* vc) = 0;

  // Semantics: for i<n: kc[to[i], :] = kc[from[i], :]; vc likewise (in order, all layers' caches
  // are separate calls). from, to [n] slots, kc, vc [S, E]
  virtual void kv_copy(const int32_t* from, const int32_t* to, int64_t n, int64_t E, float* kc,
                       float* vc) = 0;

  // Semantics: for each row, token i, head h (g = h / (Hq/Hkv)), visible cache indices c
  //   (c < cache_len, or c = cache_len + j with tree_mask[i,j] / j <= i when causal):
  //   s_c = scale * dot(q[t,h,:], K[slot(c), g, :]); p = softmax(s); out[t,h,:] = Σ_c p_c V[slot(c), g, :]
  //   where slot(c) = block_table[c / block_size] * block_size + c % block_size.
  // q [T, ldq] (Hq*D from column 0), kc, vc [S, Hkv*D], out [T, Hq*D]
  virtual void attention(const float* q, int64_t ldq, const float* kc, const float* vc, const AttnRow* rows,
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

  // Semantics: for t<T: out[t] = argmax_i x[t*ld+i] (first maximum), i<V
  virtual void argmax(const float* x, int64_t T, int64_t ld, int64_t V, int32_t* out) = 0;

  // Semantics: for t<T, j<K: out[t*K + j] = the index of row t's j-th largest value, i<V, ties to
  // the lower index, NaN never chosen; -1 where the row has fewer than j+1 non-NaN values.
  virtual void top_k(const float* x, int64_t T, int64_t ld, int64_t V, int K, int32_t* out) = 0;
};

// The scalar reference device: plain loops, one thread, no intrinsics. Slow on purpose.
Device* reference_device();

}  // namespace loom
