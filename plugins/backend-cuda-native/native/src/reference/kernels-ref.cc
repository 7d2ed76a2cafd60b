// Scalar reference kernels: the ground truth for the optimized CPU kernels (selftest/) and, later,
// the CUDA kernels. Straight loops that mirror each op's "Semantics:" line in kernels/kernels.h;
// sums are accumulated in double so the reference is at least as accurate as what it checks.
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <vector>

#include "kernels/host-memory.h"
#include "kernels/kernels.h"
#include "reference/sampler-ref.h"

namespace loom {
namespace {

// A KV cache element of `dt` widened to f32, and an f32 rounded into one (kv_store's kv()).
float kv_load(const void* base, DType dt, int64_t i) { return load_weight(base, dt, i); }
void kv_put(void* base, DType dt, int64_t i, float v) {
  if (dt == DType::F32)
    static_cast<float*>(base)[i] = v;
  else
    static_cast<uint16_t*>(base)[i] = dt == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
}

class ReferenceDevice final : public Device {
 public:
  const char* name() const override { return "reference"; }

  void* alloc(int64_t bytes) override { return HostMemory::alloc(bytes); }
  void release(void* p) override { HostMemory::release(p); }
  void upload(void* dst, const void* src, int64_t bytes) override { HostMemory::copy(dst, src, bytes); }
  void download(void* dst, const void* src, int64_t bytes) override { HostMemory::copy(dst, src, bytes); }
  void copy(void* dst, const void* src, int64_t bytes) override { HostMemory::copy(dst, src, bytes); }
  void zero(void* dst, int64_t bytes) override { HostMemory::zero(dst, bytes); }
  Status synchronize() override { return Status::Ok(); }
  bool reads_host_memory() const override { return true; }

  void matmul(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs, bool accumulate) override {
    for (int j = 0; j < njobs; j++) {
      const MatmulJob& job = jobs[j];
      const int64_t K = job.w.cols;
      for (int64_t t = 0; t < T; t++) {
        for (int64_t n = 0; n < job.w.rows; n++) {
          double acc = 0;
          // Q8 weights enter as their dequantised values d * q (exact in f32), as every device sees them.
          for (int64_t k = 0; k < K; k++) acc += double(x[t * ldx + k]) * load_weight_at(job.w.data, job.w.dtype, K, n, k);
          if (job.bias) acc += job.bias[n];
          float* y = &job.y[t * job.ldy + n];
          *y = accumulate ? float(*y + acc) : float(acc);
        }
      }
    }
  }

  void rmsnorm(const float* x, int64_t T, int64_t ldx, int64_t H, const float* w, float eps, float* y,
               int64_t ldy) override {
    for (int64_t t = 0; t < T; t++) {
      double ss = 0;
      for (int64_t i = 0; i < H; i++) ss += double(x[t * ldx + i]) * x[t * ldx + i];
      double r = 1.0 / std::sqrt(ss / double(H) + eps);
      for (int64_t i = 0; i < H; i++) y[t * ldy + i] = float(x[t * ldx + i] * r * w[i]);
    }
  }

  void rope_tables(const int32_t* positions, int64_t T, const double* inv_freq, int64_t half, float* cos,
                   float* sin) override {
    for (int64_t t = 0; t < T; t++)
      for (int64_t i = 0; i < half; i++) {
        const double a = double(positions[t]) * inv_freq[i];
        cos[t * half + i] = float(std::cos(a));
        sin[t * half + i] = float(std::sin(a));
      }
  }

  void gather_rows(const float* src, int64_t ld, const int32_t* idx, int64_t n, int64_t H, float* dst) override {
    for (int64_t i = 0; i < n; i++)
      for (int64_t c = 0; c < H; c++) dst[i * H + c] = src[int64_t(idx[i]) * ld + c];
  }

  void kv_slots(const AttnRow* rows, int nrows, int block_size, int32_t* slot) override {
    for (int r = 0; r < nrows; r++)
      for (int i = 0; i < rows[r].n; i++) {
        const int64_t c = int64_t(rows[r].cache_len) + i;
        slot[rows[r].tok_start + i] = int32_t(rows[r].block_table[c / block_size] * block_size + c % block_size);
      }
  }

  void paged_slots(const int32_t* block_table, const int32_t* idx, int64_t n, int block_size,
                   int32_t* slot) override {
    for (int64_t i = 0; i < n; i++) slot[i] = block_table[idx[i] / block_size] * block_size + idx[i] % block_size;
  }

  void rope(float* x, int64_t T, int64_t ldx, int heads, int D, const float* cos, const float* sin) override {
    const int half = D / 2;
    for (int64_t t = 0; t < T; t++)
      for (int h = 0; h < heads; h++) {
        float* v = x + t * ldx + int64_t(h) * D;
        for (int i = 0; i < half; i++) {
          double a = v[i], b = v[i + half], c = cos[t * half + i], s = sin[t * half + i];
          v[i] = float(a * c - b * s);
          v[i + half] = float(b * c + a * s);
        }
      }
  }

  void embedding(const int32_t* ids, int64_t T, const WeightView& table, float* y) override {
    for (int64_t t = 0; t < T; t++)
      for (int64_t i = 0; i < table.cols; i++)
        y[t * table.cols + i] = load_weight_at(table.data, table.dtype, table.cols, ids[t], i);
  }

  void silu_mul(const float* gate, const float* up, int64_t n, float* y) override {
    for (int64_t i = 0; i < n; i++) y[i] = float(double(gate[i]) / (1.0 + std::exp(-double(gate[i]))) * up[i]);
  }

  void silu_residual(const float* t, int64_t n, float* y) override {
    for (int64_t i = 0; i < n; i++) y[i] = float(y[i] + double(t[i]) / (1.0 + std::exp(-double(t[i]))));
  }

  void kv_store(const float* k, const float* v, int64_t T, int64_t ldk, const int32_t* slot, int64_t E,
                DType dt, void* kc, void* vc) override {
    for (int64_t t = 0; t < T; t++)
      for (int64_t e = 0; e < E; e++) {
        kv_put(kc, dt, int64_t(slot[t]) * E + e, k[t * ldk + e]);
        kv_put(vc, dt, int64_t(slot[t]) * E + e, v[t * ldk + e]);
      }
  }

  // Element by element through f32: exact for every kv dtype (widening then rounding back is
  // the identity on representable values).
  void kv_copy(const int32_t* from, const int32_t* to, int64_t n, int64_t E, DType dt, void* kc,
               void* vc) override {
    for (int64_t i = 0; i < n; i++)
      for (int64_t e = 0; e < E; e++) {
        kv_put(kc, dt, int64_t(to[i]) * E + e, kv_load(kc, dt, int64_t(from[i]) * E + e));
        kv_put(vc, dt, int64_t(to[i]) * E + e, kv_load(vc, dt, int64_t(from[i]) * E + e));
      }
  }

  void attention(const float* q, int64_t ldq, const void* kc, const void* vc, const AttnRow* rows, int nrows,
                 const AttnShape& s, float* out) override {
    const int D = s.head_dim, group = s.num_heads / s.num_kv_heads;
    const int64_t E = int64_t(s.num_kv_heads) * D;
    for (int r = 0; r < nrows; r++) {
      const AttnRow& row = rows[r];
      const int total = row.cache_len + row.n;
      std::vector<double> score(total);
      std::vector<char> seen(total);
      for (int i = 0; i < row.n; i++)
        for (int h = 0; h < s.num_heads; h++) {
          const int g = h / group;
          const float* qv = q + int64_t(row.tok_start + i) * ldq + int64_t(h) * D;
          double mx = -INFINITY;
          for (int c = 0; c < total; c++) {
            const int j = c - row.cache_len;
            seen[c] = c < row.cache_len || (row.tree_mask ? row.tree_mask[i * row.n + j] != 0 : j <= i);
            if (!seen[c]) continue;
            const int64_t slot = int64_t(row.block_table[c / s.block_size]) * s.block_size + c % s.block_size;
            double dot = 0;
            for (int d = 0; d < D; d++) dot += double(qv[d]) * kv_load(kc, s.kv_dtype, slot * E + int64_t(g) * D + d);
            score[c] = dot * s.scale;
            if (score[c] > mx) mx = score[c];
          }
          double sum = 0;
          for (int c = 0; c < total; c++)
            if (seen[c]) sum += (score[c] = std::exp(score[c] - mx));
          float* o = out + int64_t(row.tok_start + i) * s.num_heads * D + int64_t(h) * D;
          for (int d = 0; d < D; d++) {
            double acc = 0;
            for (int c = 0; c < total; c++) {
              if (!seen[c]) continue;
              const int64_t slot = int64_t(row.block_table[c / s.block_size]) * s.block_size + c % s.block_size;
              acc += score[c] * kv_load(vc, s.kv_dtype, slot * E + int64_t(g) * D + d);
            }
            o[d] = sum > 0 ? float(acc / sum) : 0.0f;
          }
        }
    }
  }

  void lora_shrink(const float* x, int64_t ldx, int64_t K, const LoraSegment* segs, int nsegs, float* tmp,
                   int64_t ldt) override {
    for (int s = 0; s < nsegs; s++)
      for (int t = segs[s].tok_start; t < segs[s].tok_start + segs[s].tok_count; t++)
        for (int r = 0; r < segs[s].rank; r++) {
          double acc = 0;
          for (int64_t k = 0; k < K; k++) acc += double(x[t * ldx + k]) * load_weight(segs[s].w, segs[s].dtype, int64_t(r) * K + k);
          tmp[t * ldt + segs[s].col + r] = float(acc);
        }
  }

  void lora_expand(const float* tmp, int64_t ldt, int64_t N, const LoraSegment* segs, int nsegs, float* y,
                   int64_t ldy) override {
    for (int s = 0; s < nsegs; s++)
      for (int t = segs[s].tok_start; t < segs[s].tok_start + segs[s].tok_count; t++)
        for (int64_t n = 0; n < N; n++) {
          double acc = 0;
          for (int r = 0; r < segs[s].rank; r++)
            acc += double(tmp[t * ldt + segs[s].col + r]) * load_weight(segs[s].w, segs[s].dtype, int64_t(r) * N + n);
          y[t * ldy + n] = float(y[t * ldy + n] + segs[s].scale * acc);
        }
  }

  // A strict > scan from -inf: NaN never compares greater, ties keep the first index.
  void argmax(const float* x, int64_t T, int64_t ld, int64_t V, int32_t* out) override {
    for (int64_t t = 0; t < T; t++) {
      int32_t best = -1;
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < V; i++)
        if (x[t * ld + i] > max) {
          max = x[t * ld + i];
          best = int32_t(i);
        }
      out[t] = best;
    }
  }

  void tree_walk(const int32_t* tokens, const int32_t* argmax, const LeafRow* rows, int nrows,
                   int32_t* leaf) override {
    for (int r = 0; r < nrows; r++) {
      const LeafRow& R = rows[r];
      if (R.n == 0) {
        leaf[r] = -1;
        continue;
      }
      auto parent = [&](int32_t c) {
        if (!R.tree_mask) return c - 1;
        for (int32_t j = c - 1; j >= 0; j--)
          if (R.tree_mask[int64_t(c) * R.n + j]) return j;
        return -1;
      };
      int32_t node = 0;
      for (;;) {
        int32_t next = -1;
        for (int32_t c = node + 1; c < R.n && next < 0; c++)
          if (tokens[R.tok_start + c] == argmax[R.logit_start + node] && parent(c) == node) next = c;
        if (next < 0) break;
        node = next;
      }
      leaf[r] = node;
    }
  }

  void sample(const float* x, int64_t ld, int64_t V, const SampleParams* params, int nrows, int max_top,
              int32_t* token, float* logprob, int32_t* top_ids, float* top_logprobs, void* scratch) override {
    sample_reference(x, ld, V, params, nrows, max_top, token, logprob, top_ids, top_logprobs, scratch);
  }

  void top_k(const float* x, int64_t T, int64_t ld, int64_t V, int K, const int32_t* ids, int32_t* out) override {
    for (int64_t t = 0; t < T; t++) {
      std::vector<int32_t> idx;
      for (int64_t i = 0; i < V; i++)
        if (!std::isnan(x[t * ld + i])) idx.push_back(int32_t(i));
      std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return x[t * ld + a] > x[t * ld + b]; });
      for (int j = 0; j < K; j++) {
        const int32_t i = j < int(idx.size()) ? idx[size_t(j)] : -1;
        out[t * K + j] = i < 0 || !ids ? i : ids[i];
      }
    }
  }

  void log_sum_exp(const float* x, int64_t T, int64_t ld, int64_t V, double* out) override {
    for (int64_t t = 0; t < T; t++) {
      double max = -std::numeric_limits<double>::infinity();
      bool nan = false;
      for (int64_t i = 0; i < V; i++) {
        nan = nan || std::isnan(x[t * ld + i]);
        max = std::max(max, double(x[t * ld + i]));
      }
      if (nan || max == -std::numeric_limits<double>::infinity()) {
        out[t] = nan ? std::numeric_limits<double>::quiet_NaN() : max;
        continue;
      }
      double sum = 0;
      for (int64_t i = 0; i < V; i++) sum += std::exp(double(x[t * ld + i]) - max);
      out[t] = max + std::log(sum);
    }
  }
};

}  // namespace

Device* reference_device() {
  static ReferenceDevice device;
  return &device;
}

}  // namespace loom
