// The cuda device's kernels checked on the SIMT emulator, without a GPU (emulated-cuda.cc).
#pragma once

#include <cstdint>

#include "selftest/kernel-self-test.h"

namespace loom_emulated {

// The self-test's cases for every kernel the emulated device covers, at `seed`.
loom::SelfTestResult run_emulated_cuda_check(uint64_t seed);

}  // namespace loom_emulated
