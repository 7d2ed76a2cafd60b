// The cpu device's Device::sample: rows in parallel on the pool, each the JS sampler's port
// (reference/sampler-core.h), so tokens are the reference's bit for bit. What differs from the
// reference is only where the result does not depend on the order of f64 operations: a plain
// greedy row's argmax and every row's reported log-softmax normaliser use the vector row
// reductions (row-reduce.h; logprobs then match to ~1e-6, not bit for bit).
#pragma GCC optimize("fp-contract=off")  // the sampler's f64 arithmetic is JS's: never fused

#include <algorithm>

#include "cpu/cpu-device.h"
#include "cpu/row-reduce.h"
#include "reference/sampler-core.h"

namespace loom {

void CpuDevice::sample(const float* x, int64_t ld, int64_t V, const SampleParams* params, int nrows, int max_top,
                       int32_t* token, float* logprob, int32_t* top_ids, float* top_logprobs, void* scratch) {
  auto one_row = [&](int r) {
    const SampleParams& p = params[r];
    const sampler::RowScratch s =
        sampler::row_scratch(static_cast<uint8_t*>(scratch) + int64_t(r) * sample_row_scratch_bytes(V), V);
    const float* row = x + int64_t(p.row) * ld;
    const bool plain_greedy = sampler::is_greedy(p) && p.allowed == nullptr && !sampler::penalties_active(p);
    int32_t id;
    if (plain_greedy) {  // the JS argmax: first maximum, -1 when nothing beats -inf
      const float none = -std::numeric_limits<float>::infinity();
      const float m = row_max(row, V, none);
      id = m == none ? -1 : first_index_of(row, V, m);
    } else {
      sampler::prepare_work(row, V, p, s);
      id = sampler::choose(row, V, p, s);
    }
    const double log_norm = id < 0 ? 0.0 : row_log_sum_exp(row, V);
    sampler::report(row, V, id, log_norm, p, max_top, s, token + r, logprob + r, top_ids + int64_t(r) * max_top,
                    top_logprobs + int64_t(r) * max_top);
  };
  if (nrows <= 1 || pool_.size() == 1) {
    for (int r = 0; r < nrows; r++) one_row(r);
    return;
  }
  // One chunk per row: a sampled row costs far more than a greedy one, so threads claim rows.
  pool_.run([&](int c, int) { one_row(c); }, std::min(nrows, 4095));
  for (int r = 4095; r < nrows; r++) one_row(r);
}

}  // namespace loom
