// The reference device's Device::sample: the JS sampler's port (sampler-core.h), one row after
// another, exactly as TokenSampler.sample runs it (its own log-sum-exp for the reported logprobs).
#pragma GCC optimize("fp-contract=off")  // JS never fuses a multiply into an add

#include "reference/sampler-ref.h"

#include "reference/sampler-core.h"

namespace loom {

void sample_reference(const float* x, int64_t ld, int64_t V, const SampleParams* params, int nrows, int max_top,
                      int32_t* token, float* logprob, int32_t* top_ids, float* top_logprobs, void* scratch) {
  for (int r = 0; r < nrows; r++) {
    const SampleParams& p = params[r];
    const sampler::RowScratch s =
        sampler::row_scratch(static_cast<uint8_t*>(scratch) + int64_t(r) * sample_row_scratch_bytes(V), V);
    const float* row = x + int64_t(p.row) * ld;
    sampler::prepare_work(row, V, p, s);
    const int32_t id = sampler::choose(row, V, p, s);
    const double log_norm = id < 0 ? 0.0 : sampler::log_sum_exp(row, V);
    sampler::report(row, V, id, log_norm, p, max_top, s, token + r, logprob + r, top_ids + int64_t(r) * max_top,
                    top_logprobs + int64_t(r) * max_top);
  }
}

}  // namespace loom
