// The reference Device::sample (sampler-ref.cc), a free function so the reference device's
// class in kernels-ref.cc stays one line away from it.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace loom {

// Device::sample on host memory, row by row (see kernels.h for the semantics and shapes).
void sample_reference(const float* x, int64_t ld, int64_t V, const SampleParams* params, int nrows, int max_top,
                      int32_t* token, float* logprob, int32_t* top_ids, float* top_logprobs, void* scratch);

}  // namespace loom
