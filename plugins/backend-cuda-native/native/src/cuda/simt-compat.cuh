// What lets a kernel header compile both with nvcc and, for the test program's SIMT emulator
// (native/test-program/simt/emulator.h), as plain C++ with LOOM_SIMT_EMULATION defined: the
// emulator supplies CUDA's built-ins (threadIdx, __syncthreads, __shfl_sync, ...) and this header
// the few spellings that differ. Kernels written this way are checked on machines without a GPU.
#pragma once

namespace loom {
// `shared_type<float[32]>` is float[32]: lets LOOM_SHARED take array types whole.
template <typename T>
using shared_type = T;
}  // namespace loom

#if defined(LOOM_SIMT_EMULATION)
#include "simt/emulator.h"
// Dynamic shared memory of the block (the launch's third parameter).
#define LOOM_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::simt::dynamic_shared_bytes())
// A statically sized shared variable, e.g. LOOM_SHARED(float[32], partial): one per block.
#define LOOM_SHARED(type, name)                                                                   \
  static const char name##_declaration = 0;                                                        \
  ::loom::shared_type<type>& name = *static_cast<::loom::shared_type<type>*>(::simt::block_static( \
      &name##_declaration, sizeof(::loom::shared_type<type>), alignof(::loom::shared_type<type>)))
// The same, 16-byte aligned (cp.async targets, float4 reads).
#define LOOM_SHARED_ALIGN16(type, name)                                                           \
  static const char name##_declaration = 0;                                                        \
  ::loom::shared_type<type>& name = *static_cast<::loom::shared_type<type>*>(                      \
      ::simt::block_static(&name##_declaration, sizeof(::loom::shared_type<type>), 16))
#else
#define LOOM_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#define LOOM_SHARED(type, name) __shared__ ::loom::shared_type<type> name
// nvcc aligns a shared array to its element type only: state 16 where 16-byte accesses need it.
#define LOOM_SHARED_ALIGN16(type, name) __shared__ __align__(16) ::loom::shared_type<type> name
#endif
