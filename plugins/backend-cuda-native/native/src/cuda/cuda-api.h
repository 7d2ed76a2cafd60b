// The cuda device as plain C++ sees it: no CUDA header is needed to include this file, so the
// device factory (device-factory.cc, compiled by the host compiler) can create a cuda device
// without knowing CUDA types. Defined in cuda-device.cu; linked only when the build found nvcc
// (LOOM_WITH_CUDA).
#pragma once

#include <memory>
#include <string>

#include "kernels/kernels.h"
#include "runtime/status.h"

namespace loom {

// Whether a cuda device can run here: a driver, a GPU, and a kernel image for it (probed by
// launching a tiny kernel). A failure is `cuda_unavailable` with the cause and the fix.
Status cuda_probe();

// Create the cuda device on GPU 0 (after a successful probe).
Status create_cuda_device(std::unique_ptr<Device>* out);

// "sm_80,sm_86,..." as compiled into this build.
const char* cuda_compiled_archs();

}  // namespace loom
