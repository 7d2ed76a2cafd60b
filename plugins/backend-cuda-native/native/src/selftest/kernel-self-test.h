// Randomized comparison of a device's kernels against the scalar reference (kernels-ref.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernels.h"

namespace loom {

struct SelfTestResult {
  bool ok = true;
  int cases = 0;
  int failures = 0;
  double worst_ratio = 0;  // max over cases of |x-ref| / (atol + rtol*|ref|); <= 1 passes
  std::string worst_case;  // the case with the largest ratio
  std::string report;      // one line per op family: worst error and its case
  // The families (run_self_test_families' names) with a failing case or the first device fault,
  // each once, in run order: what `--families` reruns to reproduce a failure.
  std::vector<std::string> failed_families;
};

// Run every op on `device` and on the reference over a seeded grid of real-model shapes. Each
// family draws its cases from its own stream of the seed, so a family's cases depend only on the
// seed and the family: run alone (run_self_test_families) it repeats the full run's cases.
SelfTestResult run_kernel_self_test(Device* device, uint64_t seed);
// Only the named test families, in the order given ("matmul", "matmul_q8", "q8_convert",
// "elementwise", "attention", "lora", "lora_apply", "cache", "step_ops", "tree_walk", "kv_dtypes",
// "sample"): the test program's emulated cuda kernels (emulated-cuda.h), and the GPU check's
// rerun of a failing family with kernel paths off. Unknown names fail.
SelfTestResult run_self_test_families(Device* device, uint64_t seed, const std::vector<std::string>& families);

}  // namespace loom
