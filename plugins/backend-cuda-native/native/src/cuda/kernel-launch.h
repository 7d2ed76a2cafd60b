// How the cuda device launches a kernel, the launches' half of programmatic dependent launch (the
// kernels' half, and why: grid-dependency.cuh). nvcc-compiled files only.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace loom {

// Launches `kernel` on `stream`, grid × block threads with `smem` bytes of dynamic shared memory.
// `overlap`: with programmatic stream serialization (sm_90+ only), so its blocks may start while
// the kernel before it finishes; the kernel must call wait_for_prior_kernels() first.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(cudaStream_t stream, bool overlap, void (*kernel)(Params...), dim3 grid, dim3 block,
                          size_t smem, Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = overlap ? &attr : nullptr;
  config.numAttrs = overlap ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace loom
