// Where a model step's time goes, by device op: a Device wrapper for the benchmark (gpu-bench.cc)
// that, while timing is on, waits for the device before and after each op and adds the wall time
// between to the op's total. Off, it only forwards. Device-neutral (it waits with synchronize()),
// so the cpu device's bench test runs the same code as a GPU.
//
// The waits change what is timed: an op's time includes its launch and one synchronize round trip
// (`sync_overhead` measures an idle one), and nothing overlaps. So the breakdown says which ops a
// step spends its time in, not what the step costs: the step's own row does that.
//
// With QueueMarks (a device whose ops queue, the cuda device's stream) it waits for nothing: a mark
// goes into the queue before each op and at the step's end, and an op's time is the device's own
// from its mark to the next one. That is what the op costs inside a running step, the gap before
// the next op's work included (its launch latency, host work between launches), and the ops' sum
// is the step's time on the device.
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "forwarding-device.h"

namespace loom_test {

// Marks in a device's queue, timed by the device (CUDA events on the cuda device's stream:
// gpu-bench-cuda.cu).
class QueueMarks {
 public:
  virtual ~QueueMarks() = default;
  // Queues a mark after everything queued so far.
  virtual void mark() = 0;
  // Waits for the last mark, then gives the seconds between each mark and the next (one fewer
  // than the marks) and forgets them; false with `error` set when a mark failed.
  virtual bool take(std::vector<double>* seconds, std::string* error) = 0;
};

// Marks by the host's clock, for a device whose ops are done when their call returns (the cpu
// device): the same bookkeeping as a queue's marks, with no wait to leave out.
class HostClockMarks final : public QueueMarks {
 public:
  void mark() override { marks_.push_back(std::chrono::steady_clock::now()); }
  bool take(std::vector<double>* seconds, std::string* error) override;

 private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

class OpTimingDevice final : public ForwardingDevice {
 public:
  explicit OpTimingDevice(Device* inner) : ForwardingDevice(inner) {}

  struct OpTotal {
    double seconds = 0;
    int64_t calls = 0;
  };
  // Start timing with empty totals, by waits, or with `marks` by marks in the queue (see above);
  // stop.
  void start(QueueMarks* marks = nullptr);
  void stop() { on_ = false; }
  // After each timed step with marks: its ops' times into the totals (true without marks); false
  // with `error` set when the marks could not be read.
  bool end_step(std::string* error);
  // Each op's totals since start(), by name.
  const std::map<std::string, OpTotal>& totals() const { return totals_; }
  // The wall time of an idle synchronize() (median of 20): the round trip each timed op includes.
  double sync_overhead();

  // The first error a wait inside a timed op took from the device, else the device's own.
  Status synchronize() override;

  void upload(void* dst, const void* src, int64_t bytes) override;
  void download(void* dst, const void* src, int64_t bytes) override;
  void copy(void* dst, const void* src, int64_t bytes) override;
  void zero(void* dst, int64_t bytes) override;

  void matmul(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs, bool accumulate) override;
  void rmsnorm_matmul(const float* x, int64_t T, int64_t ldx, const float* norm_w, float eps, float* xn, bool keep_xn,
                      const MatmulJob* jobs, int njobs) override;
  void rmsnorm(const float* x, int64_t T, int64_t ldx, int64_t H, const float* w, float eps, float* y,
               int64_t ldy) override;
  void rope_tables(const int32_t* positions, int64_t T, const double* inv_freq, int64_t half, float* cos,
                   float* sin) override;
  void rope(float* x, int64_t T, int64_t ldx, int heads, int D, const float* cos, const float* sin) override;
  void gather_rows(const float* src, int64_t ld, const int32_t* idx, int64_t n, int64_t H, float* dst) override;
  void embedding(const int32_t* ids, int64_t T, const WeightView& table, float* y) override;
  void silu_mul(const float* gate, const float* up, int64_t n, float* y) override;
  void silu_residual(const float* t, int64_t n, float* y) override;
  void kv_slots(const AttnRow* rows, int nrows, int block_size, int32_t* slot) override;
  void paged_slots(const int32_t* block_table, const int32_t* idx, int64_t n, int block_size, int32_t* slot) override;
  void kv_store(const float* k, const float* v, int64_t T, int64_t ldk, const int32_t* slot, int64_t E, DType kv_dtype,
                void* kc, void* vc) override;
  void rope_kv_store(float* qkv, int64_t T, int64_t ldx, int q_heads, int kv_heads, int D, const float* cos,
                     const float* sin, const int32_t* slot, DType kv_dtype, void* kc, void* vc) override;
  void kv_copy(const int32_t* from, const int32_t* to, int64_t n, int64_t E, DType kv_dtype, void* kc,
               void* vc) override;
  void attention(const float* q, int64_t ldq, const void* kc, const void* vc, const AttnRow* rows, int nrows,
                 const AttnShape& shape, float* out) override;
  void lora_shrink(const float* x, int64_t ldx, int64_t K, const LoraSegment* segs, int nsegs, float* tmp,
                   int64_t ldt) override;
  void lora_expand(const float* tmp, int64_t ldt, int64_t N, const LoraSegment* segs, int nsegs, float* y,
                   int64_t ldy) override;
  void lora_apply(const float* x, int64_t ldx, int64_t K, const LoraSegment* shrink, const LoraSegment* expand,
                  const int* module, int nsegs, const LoraOutput* outs, float* tmp, int64_t ldt) override;
  void log_sum_exp(const float* x, int64_t T, int64_t ld, int64_t V, double* out) override;
  void argmax(const float* x, int64_t T, int64_t ld, int64_t V, int32_t* out) override;
  void tree_walk(const int32_t* tokens, const int32_t* argmax, const LeafRow* rows, int nrows, int32_t* leaf) override;
  void top_k(const float* x, int64_t T, int64_t ld, int64_t V, int K, const int32_t* ids, int32_t* out) override;
  void sample(const float* x, int64_t ld, int64_t V, const SampleParams* params, int nrows, int max_top, int32_t* token,
              float* logprob, int32_t* top_ids, float* top_logprobs, void* scratch) override;

 private:
  // Runs `op` (a call on inner_), timed under `name` while on.
  template <typename Op>
  void timed(const char* name, Op&& op);
  // inner_->synchronize(), keeping its first error for synchronize() to report.
  void wait();

  bool on_ = false;
  QueueMarks* marks_ = nullptr;
  std::vector<const char*> marked_;  // the op after each mark of the step so far (names outlive it)
  std::set<std::string> names_;      // matmul's names by shape, kept for marked_ (nodes do not move)
  Status pending_ = Status::Ok();
  std::map<std::string, OpTotal> totals_;
};

}  // namespace loom_test
