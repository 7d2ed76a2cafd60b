// Randomized comparison of a device's kernels against the scalar reference (kernels-ref.cc).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/kernels.h"

namespace loom {

struct SelfTestResult {
  bool ok = true;
  int cases = 0;
  int failures = 0;
  double worst_ratio = 0;  // max over cases of |x-ref| / (atol + rtol*|ref|); <= 1 passes
  std::string worst_case;  // the case with the largest ratio
  std::string report;      // one line per op family: worst error and its case
};

// Run every op on `device` and on the reference over a seeded grid of real-model shapes.
SelfTestResult run_kernel_self_test(Device* device, uint64_t seed);
// Only the attention cases (the test program's emulated cuda kernels: emulated-cuda.h).
SelfTestResult run_attention_self_test(Device* device, uint64_t seed);

}  // namespace loom
