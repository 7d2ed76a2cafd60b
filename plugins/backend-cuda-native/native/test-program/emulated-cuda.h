// The cuda device's kernels checked on the SIMT emulator, without a GPU (emulated-cuda.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/kernel-paths.h"
#include "selftest/kernel-self-test.h"

namespace loom_emulated {

// The self-test's cases for every kernel the emulated device covers (or only `families` of them,
// when given), at `seed`, taking the cuda device's optional kernel paths that `paths` leaves on
// (LOOM_CUDA_DISABLE, as the cuda device).
loom::SelfTestResult run_emulated_cuda_check(uint64_t seed, const loom::CudaKernelPaths& paths,
                                             const std::vector<std::string>& families = {});

// The emulated device itself (for part b: whole models on it, `--models small --device
// emulated-cuda`): the reference's memory used as device memory, the covered ops emulated.
std::unique_ptr<loom::Device> make_emulated_cuda_device(const loom::CudaKernelPaths& paths);

}  // namespace loom_emulated
