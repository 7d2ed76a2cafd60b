// The cuda device's kernels checked on the SIMT emulator, without a GPU (emulated-cuda.cc).
#pragma once

#include <cstdint>
#include <memory>

#include "selftest/kernel-self-test.h"

namespace loom_emulated {

// The self-test's cases for every kernel the emulated device covers, at `seed`.
loom::SelfTestResult run_emulated_cuda_check(uint64_t seed);

// The emulated device itself (for part b: whole models on it, `--models small --device
// emulated-cuda`): the reference's memory used as device memory, the covered ops emulated.
std::unique_ptr<loom::Device> make_emulated_cuda_device();

}  // namespace loom_emulated
