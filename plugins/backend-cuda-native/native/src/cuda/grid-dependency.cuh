// Programmatic dependent launch, the kernels' half (the launches' half: kernel-launch.h).
//
// On sm_90+ the cuda device launches every kernel with programmatic stream serialization: the
// next kernel's blocks may be scheduled while the kernel before it is still running, instead of
// after it has drained and its writes have been flushed. A decode step is a few hundred launches,
// most of them a few microseconds long (rmsnorm, RoPE, attention at batch 1), and each such gap
// is time the HBM idles; with the overlap, the next projection's blocks are already resident and
// loading their weights when the small op before them ends.
//
// The price is a rule every kernel of this folder keeps: it calls wait_for_prior_kernels()
// before it reads anything an earlier op on the stream wrote, and before it writes anything an
// earlier op reads (so, in practice, first). The only work allowed before it is reading memory
// no kernel writes (a matmul's weights, an attention call's staged plan and the block tables it
// points to: only uploads and copies fill them, and those are stream copies, not kernels). Every kernel must reach the call, even one with nothing to do: a grid
// that completes without waiting could complete before its predecessor, and the kernel after it
// would then wait for the wrong grid. test/grid-dependency.test.ts checks the rule's letter.
#pragma once

#include "cuda/simt-compat.cuh"

namespace loom {

// Waits until the kernels queued before this one have finished and their writes are visible,
// then lets the kernel queued after this one start launching (its blocks run up to their own
// wait). Without programmatic launch (older GPUs, the `pdl` path off, the SIMT emulator, which
// runs kernels one at a time) the stream already orders them and this is nothing.
__device__ __forceinline__ void wait_for_prior_kernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace loom
