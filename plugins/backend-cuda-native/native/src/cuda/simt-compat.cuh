// What lets a kernel header compile both with nvcc and, for the test program's SIMT emulator
// (native/test-program/simt/emulator.h), as plain C++ with LOOM_SIMT_EMULATION defined: the
// emulator supplies CUDA's built-ins (threadIdx, __syncthreads, __shfl_sync, ...) and this header
// the few spellings that differ. Kernels written this way are checked on machines without a GPU.
#pragma once

#if defined(LOOM_SIMT_EMULATION)
#include "simt/emulator.h"
// Dynamic shared memory of the block (the launch's third parameter).
#define LOOM_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::simt::dynamic_shared_bytes())
#else
#define LOOM_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif
