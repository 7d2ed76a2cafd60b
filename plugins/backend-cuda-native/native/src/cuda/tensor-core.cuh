// The tensor-core building blocks the GEMMs share (matmul-kernels.cuh, prefill-gemm-kernels.cuh):
// mma.sync m16n8k16 with f32 accumulation, ldmatrix, cp.async and the 16-bit roundings of x. Each
// has an emulated form for the test program's SIMT emulator (cuda/simt-compat.cuh), written from
// the PTX ISA's definitions, so a kernel built on them is checked on machines without a GPU.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda/dtype-cuda.cuh"
#include "cuda/simt-compat.cuh"
#include "kernels/dtype.h"
#include "kernels/kernels.h"

namespace loom {
// Internal linkage: the test program links the emulated build beside the real one.
namespace {

#if defined(LOOM_SIMT_EMULATION)
// x split into a 16-bit high part and the 16-bit remainder, with kernels/dtype.h's roundings.
template <DType DT>
inline void split_x(float v, uint16_t* hi, uint16_t* lo) {
  if constexpr (DT == DType::BF16) {
    *hi = f32_to_bf16(v);
    *lo = f32_to_bf16(v - bf16_to_f32(*hi));
  } else {
    *hi = f32_to_f16(v);
    *lo = f32_to_f16(v - f16_to_f32(*hi));
  }
}
// x rounded to bf16 (to nearest even), as bits.
inline uint16_t round_bf16(float v) { return f32_to_bf16(v); }

template <DType DT>
inline float mma_element(uint32_t reg, int high) {
  const uint16_t h = uint16_t(high ? reg >> 16 : reg & 0xffffu);
  return DT == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// mma.sync as the warp-collective product it is: every lane's fragments are gathered and this
// lane's four outputs computed from the elements they need, placed by the PTX ISA's fragment
// layout for .m16n8k16 .f16/.bf16 (groupID g = lane >> 2, threadID_in_group t = lane % 4):
//   A [16, 16]: element (row, k) is half k % 2 of register (row >= 8) + 2 (k >= 8) of lane
//     (row % 8) * 4 + (k % 8) / 2;
//   B [16, 8]: element (k, col) is half k % 2 of register (k >= 8) of lane col * 4 + (k % 8) / 2;
//   C/D: c[i] is row g (+ 8 for i >= 2), col 2t + (i & 1).
// Products are summed in k order onto c with fmaf.
template <DType DT>
inline void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  struct Fragments {
    uint32_t a[4], b[2];
  };
  const Fragments mine{{a[0], a[1], a[2], a[3]}, {b0, b1}};
  Fragments all[32];
  simt::warp_exchange(&mine, sizeof(Fragments), all);
  const int lane = simt::current().linear % 32, g = lane >> 2, tig = lane & 3;
  for (int i = 0; i < 4; i++) {
    const int row = i < 2 ? g : g + 8, col = tig * 2 + (i & 1);
    float s = c[i];
    for (int k = 0; k < 16; k++) {
      const int from = (k % 8) / 2;
      const float av = mma_element<DT>(all[g * 4 + from].a[(row >= 8) + 2 * (k >= 8)], k & 1);
      const float bv = mma_element<DT>(all[col * 4 + from].b[k >= 8], k & 1);
      s = fmaf(av, bv, s);
    }
    c[i] = s;
  }
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16: lane l names row l % 8 of matrix l / 8 (16 bytes at
// `row`); register i of lane l receives the 32 bits at byte 4 (l % 4) of row l / 4 of matrix i.
inline void ldmatrix_x4(uint32_t r[4], const void* row) {
  const uint64_t mine = uint64_t(reinterpret_cast<uintptr_t>(row));
  uint64_t all[32];
  simt::warp_exchange(&mine, sizeof(mine), all);
  const int lane = simt::current().linear % 32;
  for (int i = 0; i < 4; i++)
    std::memcpy(&r[i], reinterpret_cast<const uint8_t*>(uintptr_t(all[i * 8 + lane / 4])) + 4 * (lane % 4), 4);
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: as ldmatrix_x4, but register i of lane l
// receives column l / 4 of matrix i at rows 2 (l % 4) (low half) and 2 (l % 4) + 1 (high half).
inline void ldmatrix_x4_trans(uint32_t r[4], const void* row) {
  const uint64_t mine = uint64_t(reinterpret_cast<uintptr_t>(row));
  uint64_t all[32];
  simt::warp_exchange(&mine, sizeof(mine), all);
  const int lane = simt::current().linear % 32;
  for (int i = 0; i < 4; i++) {
    uint16_t lo, hi;
    std::memcpy(&lo, reinterpret_cast<const uint8_t*>(uintptr_t(all[i * 8 + 2 * (lane % 4)])) + 2 * (lane / 4), 2);
    std::memcpy(&hi, reinterpret_cast<const uint8_t*>(uintptr_t(all[i * 8 + 2 * (lane % 4) + 1])) + 2 * (lane / 4), 2);
    r[i] = uint32_t(lo) | uint32_t(hi) << 16;
  }
}

// cp.async as the PTX ISA defines it for the issuing thread: a copy lands no earlier than its
// group's commit and no later than a cp.async.wait_group that leaves at most N newer groups
// pending. Emulated at the latest moment allowed (the wait), so a kernel that reads a stage
// before waiting for it, or refills a stage another thread still reads, reads stale data here as
// it might on a GPU. The source is read at issue (kernels copy inputs, which do not change).
// Whether the running thread is in another block than `*seen` says (recording it): the emulated
// async state kept per block (copy queues, pending reads, wgmma queues, mbarriers) then belongs
// to the previous block and is dropped.
inline bool entered_new_block(simt::dim3* seen) {
  const simt::dim3& b = simt::current().block_idx;
  if (seen->x == b.x && seen->y == b.y && seen->z == b.z) return false;
  *seen = b;
  return true;
}
struct PendingCopy {
  void* dst;
  uint8_t bytes[16];
};
// One thread's asynchronous operations of a kind (cp.async copies, wgmmas) in PTX's groups: those
// issued since the last commit, then the committed groups, oldest first.
template <typename Op>
struct AsyncGroups {
  simt::dim3 block{~0u, ~0u, ~0u};  // whose operations these are
  std::vector<std::vector<Op>> committed;
  std::vector<Op> open;

  // *.commit_group: the open operations become the newest group.
  void commit() {
    committed.push_back(std::move(open));
    open.clear();
  }
  // *.wait_group N: complete(op) for every operation of the oldest groups, in issue order, until
  // at most N groups are pending.
  template <int N, typename Complete>
  void wait(Complete&& complete) {
    while (committed.size() > size_t(N)) {
      for (const Op& op : committed.front()) complete(op);
      committed.erase(committed.begin());
    }
  }
};
// The running thread's groups of `Op`; a previous block's leftovers (a kernel that never waited)
// are dropped.
template <typename Op>
inline AsyncGroups<Op>& thread_async_groups() {
  static std::vector<AsyncGroups<Op>> per_thread(1024);
  AsyncGroups<Op>& q = per_thread[size_t(simt::current().linear)];
  if (entered_new_block(&q.block)) {
    q.committed.clear();
    q.open.clear();
  }
  return q;
}
// Shared memory that asynchronous reads still to be waited for (cuda/wgmma.cuh's emulated wgmma)
// will read, as counts per 16-byte chunk from the block's dynamic shared memory rounded down to
// 1024 bytes (the emulated shared window: emulated_shared_origin). A cp.async into such a chunk
// is a write-after-read race on a GPU, where the copy may land before the read: a stage refilled
// before wgmma.wait_group has retired the instructions reading it. The emulation stops there.
inline uint8_t* emulated_shared_origin() {
  return reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(::simt::dynamic_shared_bytes()) & ~uintptr_t(1023));
}
struct AsyncReads {
  simt::dim3 block{~0u, ~0u, ~0u};
  std::vector<int> pending;  // per 16-byte chunk of the shared window
};
inline std::vector<int>& async_reads_pending() {
  static AsyncReads reads;
  if (entered_new_block(&reads.block)) reads.pending.clear();
  return reads.pending;
}
// Adds `delta` to the pending reads of the 16-byte chunk at shared-window offset `offset`.
inline void note_async_read(uint32_t offset, int delta) {
  std::vector<int>& p = async_reads_pending();
  if (p.size() <= offset / 16) p.resize(offset / 16 + 1, 0);
  p[offset / 16] += delta;
}
// Stops the emulation when an asynchronous write (`what`) of `bytes` at shared-window offset
// `offset` would land on a chunk with pending reads.
inline void require_no_pending_reads(uint32_t offset, uint32_t bytes, const char* what) {
  const std::vector<int>& reads = async_reads_pending();
  for (uint32_t o = offset; o < offset + bytes; o += 16)
    if (o / 16 < reads.size() && reads[o / 16] > 0) {
      std::fprintf(stderr,
                   "emulated %s: writes shared memory that a wgmma not yet waited for reads (a stage refilled "
                   "before its readers were retired)\n",
                   what);
      std::abort();
    }
}
inline void cp_async16(void* smem, const void* gmem, int src_bytes) {
  require_no_pending_reads(uint32_t(static_cast<uint8_t*>(smem) - emulated_shared_origin()), 16, "cp.async");
  PendingCopy c{smem, {}};
  if (src_bytes == 16) std::memcpy(c.bytes, gmem, 16);
  thread_async_groups<PendingCopy>().open.push_back(c);
}
inline void cp_async_commit() { thread_async_groups<PendingCopy>().commit(); }
template <int N>
inline void cp_async_wait() {
  thread_async_groups<PendingCopy>().wait<N>([](const PendingCopy& c) { std::memcpy(c.dst, c.bytes, 16); });
}
#else
template <DType DT>
__device__ __forceinline__ void split_x(float v, uint16_t* hi, uint16_t* lo) {
  if constexpr (DT == DType::BF16) {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    const __nv_bfloat16 l = __float2bfloat16_rn(v - __bfloat162float(h));
    *hi = __bfloat16_as_ushort(h);
    *lo = __bfloat16_as_ushort(l);
  } else {
    const __half h = __float2half_rn(v);
    const __half l = __float2half_rn(v - __half2float(h));
    *hi = __half_as_ushort(h);
    *lo = __half_as_ushort(l);
  }
}
__device__ __forceinline__ uint16_t round_bf16(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

template <DType DT>
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  if constexpr (DT == DType::BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Four 8x8 16-bit matrices from shared memory: lane l passes row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* row) {
  const unsigned s = unsigned(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s)
               : "memory");
}

// The same, transposed: register i of lane l holds column l / 4 of matrix i, rows 2 (l % 4) and
// 2 (l % 4) + 1 (an MMA's B fragment from a row-major [k, n] tile).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* row) {
  const unsigned s = unsigned(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s)
               : "memory");
}

// 16 bytes global -> shared without registers; src_bytes 0 fills zeros (rows or k past the end).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes) : "memory");
}
// "memory": the compiler must not move shared-memory accesses across these (today a __syncthreads
// beside each also stops it, but that is the kernel's layout, not these helpers' contract).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
#endif

}  // namespace
}  // namespace loom
