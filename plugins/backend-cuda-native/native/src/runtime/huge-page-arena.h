// HugePageArena: host memory for large buffers a step streams end to end (the int8 copies of the
// weights), carved from anonymous mappings the kernel is asked to back with 2 MB pages.
//
// Why: a batch-1 decode step reads every weight byte once (~143 MB for a 135M-parameter model in
// int8), and with 4 KB pages that is a TLB miss every 4 KB of each stream. On the 2-core Xeon
// host of the bench, int8 batch-1 steps were 3-14% faster (median ~7%) with the copies in 2 MB
// pages, two runners alternating steps in one process; the mmapped f32/bf16 weights gained 1-2%
// from a resident copy, too little for a second copy of the model in memory, so they stay mapped.
//
// Chunks are reserved in 64 MB steps (or the request, 2 MB-rounded) and only touched pages cost
// memory. Where transparent huge pages are off (`never`) the madvise fails quietly and the arena
// is ordinary anonymous memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom {

class HugePageArena {
 public:
  HugePageArena() = default;
  ~HugePageArena();
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;

  // `bytes` (> 0) of writable memory at a 64-byte boundary, valid until the arena is destroyed;
  // nullptr when the host has no memory left for it.
  uint8_t* allocate(int64_t bytes);
  // Bytes reserved from the system so far (mapped, not necessarily touched).
  int64_t reserved_bytes() const;

  static constexpr size_t kPageBytes = size_t(2) << 20;
  static constexpr size_t kChunkBytes = size_t(64) << 20;

 private:
  struct Chunk {
    uint8_t* base;
    size_t size, used;
  };
  std::vector<Chunk> chunks_;
};

}  // namespace loom
