#include "op-timing-device.h"

#include <algorithm>
#include <string>
#include <vector>

namespace loom_test {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

bool HostClockMarks::take(std::vector<double>* seconds, std::string*) {
  seconds->clear();
  for (size_t i = 1; i < marks_.size(); i++)
    seconds->push_back(std::chrono::duration<double>(marks_[i] - marks_[i - 1]).count());
  marks_.clear();
  return true;
}

void OpTimingDevice::start(QueueMarks* marks) {
  totals_.clear();
  marks_ = marks;
  marked_.clear();
  on_ = true;
}

bool OpTimingDevice::end_step(std::string* error) {
  if (marks_ == nullptr) return true;
  marks_->mark();
  std::vector<double> seconds;
  const bool ok = marks_->take(&seconds, error);
  if (ok && seconds.size() != marked_.size()) {
    *error = std::to_string(seconds.size()) + " intervals for " + std::to_string(marked_.size()) + " ops";
    marked_.clear();
    return false;
  }
  for (size_t i = 0; ok && i < seconds.size(); i++) {
    OpTotal& total = totals_[marked_[i]];
    total.seconds += seconds[i];
    total.calls++;
  }
  marked_.clear();
  return ok;
}

void OpTimingDevice::wait() {
  Status st = inner_->synchronize();
  if (!st.ok() && pending_.ok()) pending_ = std::move(st);
}

Status OpTimingDevice::synchronize() {
  wait();
  Status st = std::move(pending_);
  pending_ = Status::Ok();
  return st;
}

double OpTimingDevice::sync_overhead() {
  wait();
  std::vector<double> t;
  for (int i = 0; i < 20; i++) {
    const auto t0 = Clock::now();
    wait();
    t.push_back(since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <typename Op>
void OpTimingDevice::timed(const char* name, Op&& op) {
  if (!on_) return op();
  if (marks_ != nullptr) {
    marks_->mark();
    marked_.push_back(name);
    return op();
  }
  wait();  // what was queued before is not this op's
  const auto t0 = Clock::now();
  op();
  wait();
  OpTotal& total = totals_[name];
  total.seconds += since(t0);
  total.calls++;
}

void OpTimingDevice::upload(void* dst, const void* src, int64_t bytes) {
  timed("upload", [&] { inner_->upload(dst, src, bytes); });
}
void OpTimingDevice::download(void* dst, const void* src, int64_t bytes) {
  timed("download", [&] { inner_->download(dst, src, bytes); });
}
void OpTimingDevice::copy(void* dst, const void* src, int64_t bytes) {
  timed("copy", [&] { inner_->copy(dst, src, bytes); });
}
void OpTimingDevice::zero(void* dst, int64_t bytes) {
  timed("zero", [&] { inner_->zero(dst, bytes); });
}
namespace {
// By shape: "matmul 4096+1024+1024x4096" is one call's jobs' outputs and their K.
std::string matmul_name(const char* op, const MatmulJob* jobs, int njobs) {
  std::string name = std::string(op) + " ";
  for (int i = 0; i < njobs; i++) name += (i ? "+" : "") + std::to_string(jobs[i].w.rows);
  if (njobs > 0) name += "x" + std::to_string(jobs[0].w.cols);
  return name;
}
}  // namespace

void OpTimingDevice::matmul(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs,
                            bool accumulate) {
  if (!on_) return inner_->matmul(x, T, ldx, jobs, njobs, accumulate);  // no name to build for a step not timed
  // Marks keep the name until the step ends: one string per shape, for the whole run.
  timed(names_.insert(matmul_name("matmul", jobs, njobs)).first->c_str(),
        [&] { inner_->matmul(x, T, ldx, jobs, njobs, accumulate); });
}
// One entry whether the device fuses the norm or runs it as a launch of its own before the
// projection: the pair is what the call costs.
void OpTimingDevice::rmsnorm_matmul(const float* x, int64_t T, int64_t ldx, const float* norm_w, float eps, float* xn,
                                    bool keep_xn, const MatmulJob* jobs, int njobs) {
  if (!on_) return inner_->rmsnorm_matmul(x, T, ldx, norm_w, eps, xn, keep_xn, jobs, njobs);
  timed(names_.insert(matmul_name("rmsnorm+matmul", jobs, njobs)).first->c_str(),
        [&] { inner_->rmsnorm_matmul(x, T, ldx, norm_w, eps, xn, keep_xn, jobs, njobs); });
}
void OpTimingDevice::rmsnorm(const float* x, int64_t T, int64_t ldx, int64_t H, const float* w, float eps, float* y,
                             int64_t ldy) {
  timed("rmsnorm", [&] { inner_->rmsnorm(x, T, ldx, H, w, eps, y, ldy); });
}
void OpTimingDevice::rope_tables(const int32_t* positions, int64_t T, const double* inv_freq, int64_t half, float* cos,
                                 float* sin) {
  timed("rope_tables", [&] { inner_->rope_tables(positions, T, inv_freq, half, cos, sin); });
}
void OpTimingDevice::rope(float* x, int64_t T, int64_t ldx, int heads, int D, const float* cos, const float* sin) {
  timed("rope", [&] { inner_->rope(x, T, ldx, heads, D, cos, sin); });
}
void OpTimingDevice::gather_rows(const float* src, int64_t ld, const int32_t* idx, int64_t n, int64_t H, float* dst) {
  timed("gather_rows", [&] { inner_->gather_rows(src, ld, idx, n, H, dst); });
}
void OpTimingDevice::embedding(const int32_t* ids, int64_t T, const WeightView& table, float* y) {
  timed("embedding", [&] { inner_->embedding(ids, T, table, y); });
}
void OpTimingDevice::silu_mul(const float* gate, const float* up, int64_t n, float* y) {
  timed("silu_mul", [&] { inner_->silu_mul(gate, up, n, y); });
}
void OpTimingDevice::silu_residual(const float* t, int64_t n, float* y) {
  timed("silu_residual", [&] { inner_->silu_residual(t, n, y); });
}
void OpTimingDevice::kv_slots(const AttnRow* rows, int nrows, int block_size, int32_t* slot) {
  timed("kv_slots", [&] { inner_->kv_slots(rows, nrows, block_size, slot); });
}
void OpTimingDevice::paged_slots(const int32_t* block_table, const int32_t* idx, int64_t n, int block_size,
                                 int32_t* slot) {
  timed("paged_slots", [&] { inner_->paged_slots(block_table, idx, n, block_size, slot); });
}
void OpTimingDevice::kv_store(const float* k, const float* v, int64_t T, int64_t ldk, const int32_t* slot, int64_t E,
                              DType kv_dtype, void* kc, void* vc) {
  timed("kv_store", [&] { inner_->kv_store(k, v, T, ldk, slot, E, kv_dtype, kc, vc); });
}
void OpTimingDevice::rope_kv_store(float* qkv, int64_t T, int64_t ldx, int q_heads, int kv_heads, int D,
                                   const float* cos, const float* sin, const int32_t* slot, DType kv_dtype, void* kc,
                                   void* vc) {
  timed("rope_kv_store", [&] { inner_->rope_kv_store(qkv, T, ldx, q_heads, kv_heads, D, cos, sin, slot, kv_dtype, kc, vc); });
}
void OpTimingDevice::kv_copy(const int32_t* from, const int32_t* to, int64_t n, int64_t E, DType kv_dtype, void* kc,
                             void* vc) {
  timed("kv_copy", [&] { inner_->kv_copy(from, to, n, E, kv_dtype, kc, vc); });
}
void OpTimingDevice::attention(const float* q, int64_t ldq, const void* kc, const void* vc, const AttnRow* rows,
                               int nrows, const AttnShape& shape, float* out) {
  timed("attention", [&] { inner_->attention(q, ldq, kc, vc, rows, nrows, shape, out); });
}
void OpTimingDevice::lora_shrink(const float* x, int64_t ldx, int64_t K, const LoraSegment* segs, int nsegs,
                                 float* tmp, int64_t ldt) {
  timed("lora_shrink", [&] { inner_->lora_shrink(x, ldx, K, segs, nsegs, tmp, ldt); });
}
void OpTimingDevice::lora_expand(const float* tmp, int64_t ldt, int64_t N, const LoraSegment* segs, int nsegs,
                                 float* y, int64_t ldy) {
  timed("lora_expand", [&] { inner_->lora_expand(tmp, ldt, N, segs, nsegs, y, ldy); });
}
void OpTimingDevice::lora_apply(const float* x, int64_t ldx, int64_t K, const LoraSegment* shrink,
                                const LoraSegment* expand, const int* module, int nsegs, const LoraOutput* outs,
                                float* tmp, int64_t ldt) {
  timed("lora_apply", [&] { inner_->lora_apply(x, ldx, K, shrink, expand, module, nsegs, outs, tmp, ldt); });
}
void OpTimingDevice::log_sum_exp(const float* x, int64_t T, int64_t ld, int64_t V, double* out) {
  timed("log_sum_exp", [&] { inner_->log_sum_exp(x, T, ld, V, out); });
}
void OpTimingDevice::argmax(const float* x, int64_t T, int64_t ld, int64_t V, int32_t* out) {
  timed("argmax", [&] { inner_->argmax(x, T, ld, V, out); });
}
void OpTimingDevice::tree_walk(const int32_t* tokens, const int32_t* argmax, const LeafRow* rows, int nrows,
                               int32_t* leaf) {
  timed("tree_walk", [&] { inner_->tree_walk(tokens, argmax, rows, nrows, leaf); });
}
void OpTimingDevice::top_k(const float* x, int64_t T, int64_t ld, int64_t V, int K, const int32_t* ids, int32_t* out) {
  timed("top_k", [&] { inner_->top_k(x, T, ld, V, K, ids, out); });
}
void OpTimingDevice::sample(const float* x, int64_t ld, int64_t V, const SampleParams* params, int nrows, int max_top,
                            int32_t* token, float* logprob, int32_t* top_ids, float* top_logprobs, void* scratch) {
  timed("sample",
        [&] { inner_->sample(x, ld, V, params, nrows, max_top, token, logprob, top_ids, top_logprobs, scratch); });
}

}  // namespace loom_test
