// Memory operations of a device whose memory is the host's (cpu, reference): plain aligned
// allocations and memcpy, nothing to wait for.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace loom {

// The Device memory semantics (kernels.h) on host memory; devices call these from their overrides.
struct HostMemory {
  static void* alloc(int64_t bytes) {
    if (bytes <= 0) bytes = 1;
    // aligned_alloc needs a size that is a multiple of the alignment.
    const size_t rounded = (size_t(bytes) + 255) & ~size_t(255);
    return std::aligned_alloc(256, rounded);
  }
  static void release(void* p) { std::free(p); }
  static void copy(void* dst, const void* src, int64_t bytes) {
    if (bytes > 0) std::memcpy(dst, src, size_t(bytes));
  }
  static void zero(void* dst, int64_t bytes) {
    if (bytes > 0) std::memset(dst, 0, size_t(bytes));
  }
};

}  // namespace loom
