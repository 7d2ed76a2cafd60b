// The device side of param-list.h: a kernel's read of one element of its ParamList parameter.
#pragma once

#include "cuda/param-list.h"
#include "cuda/simt-compat.cuh"

namespace loom {

// Internal linkage: the test program links this header's emulated build beside the real one.
namespace {

// Element i of a launch's list, from its parameters or its staged copy. `list` is the kernel's
// `const __grid_constant__` parameter, so the inline element is read where it lies.
template <typename T, int N>
__device__ __forceinline__ const T& list_item(const ParamList<T, N>& list, unsigned i) {
  return list.staged ? list.staged[i] : list.inline_items[i];
}

}  // namespace
}  // namespace loom
