// HugePageArena: 2 MB-aligned anonymous chunks with MADV_HUGEPAGE, bump-allocated; see the header.
#include "runtime/huge-page-arena.h"

#include <sys/mman.h>

#include <cstdint>

namespace loom {

namespace {
constexpr size_t kAlign = 64;  // whole cache lines for the kernels' streams

// A fresh mapping of `size` bytes (a multiple of kPageBytes) starting on a 2 MB boundary: map
// one page more, then unmap the unaligned head and the tail beyond.
uint8_t* map_aligned(size_t size) {
  const size_t page = HugePageArena::kPageBytes;
  void* raw = mmap(nullptr, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + page - 1) & ~uintptr_t(page - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const size_t tail = (start + size + page) - (aligned + size);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + size), tail);
  uint8_t* p = reinterpret_cast<uint8_t*>(aligned);
  madvise(p, size, MADV_HUGEPAGE);  // advice only: EINVAL where THP is compiled out or off
  return p;
}
}  // namespace

HugePageArena::~HugePageArena() {
  for (const Chunk& c : chunks_) munmap(c.base, c.size);
}

uint8_t* HugePageArena::allocate(int64_t bytes) {
  if (bytes <= 0) bytes = 1;
  const size_t need = (size_t(bytes) + kAlign - 1) & ~(kAlign - 1);
  if (!chunks_.empty()) {
    Chunk& c = chunks_.back();
    if (c.size - c.used >= need) {
      uint8_t* p = c.base + c.used;
      c.used += need;
      return p;
    }
  }
  // A new chunk; the unused tail of the previous one stays untouched (no memory behind it).
  const size_t size = need > kChunkBytes ? (need + kPageBytes - 1) & ~(kPageBytes - 1) : kChunkBytes;
  uint8_t* base = map_aligned(size);
  if (base == nullptr) return nullptr;
  chunks_.push_back({base, size, need});
  return base;
}

int64_t HugePageArena::reserved_bytes() const {
  int64_t total = 0;
  for (const Chunk& c : chunks_) total += int64_t(c.size);
  return total;
}

}  // namespace loom
