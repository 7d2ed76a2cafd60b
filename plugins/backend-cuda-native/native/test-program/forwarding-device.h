// A Device that hands every call to another one (`inner_`), for the test program's wrappers to
// replace the calls they are about: the SIMT emulator's device (emulated-cuda.cc) runs some ops as
// the cuda device would, the benchmark's op timer (op-timing-device.h) times each op.
#pragma once

#include "kernels/kernels.h"

namespace loom_test {

using loom::AttnRow;
using loom::AttnShape;
using loom::CacheRegion;
using loom::Device;
using loom::DType;
using loom::LeafRow;
using loom::LoraOutput;
using loom::LoraSegment;
using loom::MatmulJob;
using loom::SampleParams;
using loom::Status;
using loom::WeightView;

// Every op goes to `inner_`; subclasses replace the ones they emulate.
class ForwardingDevice : public Device {
 public:
  explicit ForwardingDevice(Device* inner) : inner_(inner) {}
  const char* name() const override { return inner_->name(); }
  void* alloc(int64_t bytes) override { return inner_->alloc(bytes); }
  void release(void* p) override { inner_->release(p); }
  void upload(void* dst, const void* src, int64_t bytes) override { inner_->upload(dst, src, bytes); }
  void download(void* dst, const void* src, int64_t bytes) override { inner_->download(dst, src, bytes); }
  void copy(void* dst, const void* src, int64_t bytes) override { inner_->copy(dst, src, bytes); }
  void zero(void* dst, int64_t bytes) override { inner_->zero(dst, bytes); }
  Status synchronize() override { return inner_->synchronize(); }
  bool reads_host_memory() const override { return inner_->reads_host_memory(); }
  DType kv_dtype() const override { return inner_->kv_dtype(); }
  void matmul(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs, bool accumulate) override {
    inner_->matmul(x, T, ldx, jobs, njobs, accumulate);
  }
  void rmsnorm_matmul(const float* x, int64_t T, int64_t ldx, const float* norm_w, float eps, float* xn, bool keep_xn,
                      const MatmulJob* jobs, int njobs) override {
    inner_->rmsnorm_matmul(x, T, ldx, norm_w, eps, xn, keep_xn, jobs, njobs);
  }
  void rmsnorm(const float* x, int64_t T, int64_t ldx, int64_t H, const float* w, float eps, float* y,
               int64_t ldy) override {
    inner_->rmsnorm(x, T, ldx, H, w, eps, y, ldy);
  }
  void rope_tables(const int32_t* positions, int64_t T, const double* inv_freq, int64_t half, float* cos,
                   float* sin) override {
    inner_->rope_tables(positions, T, inv_freq, half, cos, sin);
  }
  void rope(float* x, int64_t T, int64_t ldx, int heads, int D, const float* cos, const float* sin) override {
    inner_->rope(x, T, ldx, heads, D, cos, sin);
  }
  void gather_rows(const float* src, int64_t ld, const int32_t* idx, int64_t n, int64_t H, float* dst) override {
    inner_->gather_rows(src, ld, idx, n, H, dst);
  }
  void embedding(const int32_t* ids, int64_t T, const WeightView& table, float* y) override {
    inner_->embedding(ids, T, table, y);
  }
  void silu_mul(const float* gate, const float* up, int64_t n, float* y) override { inner_->silu_mul(gate, up, n, y); }
  void silu_residual(const float* t, int64_t n, float* y) override { inner_->silu_residual(t, n, y); }
  void kv_slots(const AttnRow* rows, int nrows, int block_size, int32_t* slot) override {
    inner_->kv_slots(rows, nrows, block_size, slot);
  }
  void paged_slots(const int32_t* block_table, const int32_t* idx, int64_t n, int block_size, int32_t* slot) override {
    inner_->paged_slots(block_table, idx, n, block_size, slot);
  }
  void kv_store(const float* k, const float* v, int64_t T, int64_t ldk, const int32_t* slot, int64_t E, DType kv_dtype,
                void* kc, void* vc) override {
    inner_->kv_store(k, v, T, ldk, slot, E, kv_dtype, kc, vc);
  }
  void rope_kv_store(float* qkv, int64_t T, int64_t ldx, int q_heads, int kv_heads, int D, const float* cos,
                     const float* sin, const int32_t* slot, DType kv_dtype, void* kc, void* vc) override {
    inner_->rope_kv_store(qkv, T, ldx, q_heads, kv_heads, D, cos, sin, slot, kv_dtype, kc, vc);
  }
  void kv_copy(const int32_t* from, const int32_t* to, int64_t n, int64_t E, DType kv_dtype, void* kc,
               void* vc) override {
    inner_->kv_copy(from, to, n, E, kv_dtype, kc, vc);
  }
  void attention(const float* q, int64_t ldq, const void* kc, const void* vc, const AttnRow* rows, int nrows,
                 const AttnShape& shape, float* out) override {
    inner_->attention(q, ldq, kc, vc, rows, nrows, shape, out);
  }
  void prefetch_in_next_matmul(const CacheRegion* regions, int n) override { inner_->prefetch_in_next_matmul(regions, n); }
  void lora_shrink(const float* x, int64_t ldx, int64_t K, const LoraSegment* segs, int nsegs, float* tmp,
                   int64_t ldt) override {
    inner_->lora_shrink(x, ldx, K, segs, nsegs, tmp, ldt);
  }
  void lora_expand(const float* tmp, int64_t ldt, int64_t N, const LoraSegment* segs, int nsegs, float* y,
                   int64_t ldy) override {
    inner_->lora_expand(tmp, ldt, N, segs, nsegs, y, ldy);
  }
  void lora_apply(const float* x, int64_t ldx, int64_t K, const LoraSegment* shrink, const LoraSegment* expand,
                  const int* module, int nsegs, const LoraOutput* outs, float* tmp, int64_t ldt) override {
    inner_->lora_apply(x, ldx, K, shrink, expand, module, nsegs, outs, tmp, ldt);
  }
  void log_sum_exp(const float* x, int64_t T, int64_t ld, int64_t V, double* out) override {
    inner_->log_sum_exp(x, T, ld, V, out);
  }
  void argmax(const float* x, int64_t T, int64_t ld, int64_t V, int32_t* out) override {
    inner_->argmax(x, T, ld, V, out);
  }
  void tree_walk(const int32_t* tokens, const int32_t* argmax, const LeafRow* rows, int nrows, int32_t* leaf) override {
    inner_->tree_walk(tokens, argmax, rows, nrows, leaf);
  }
  void top_k(const float* x, int64_t T, int64_t ld, int64_t V, int K, const int32_t* ids, int32_t* out) override {
    inner_->top_k(x, T, ld, V, K, ids, out);
  }
  void sample(const float* x, int64_t ld, int64_t V, const SampleParams* params, int nrows, int max_top, int32_t* token,
              float* logprob, int32_t* top_ids, float* top_logprobs, void* scratch) override {
    inner_->sample(x, ld, V, params, nrows, max_top, token, logprob, top_ids, top_logprobs, scratch);
  }

 protected:
  Device* inner_;
};

}  // namespace loom_test
