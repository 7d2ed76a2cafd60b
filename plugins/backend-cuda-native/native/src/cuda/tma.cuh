// Tensor-memory-accelerator (TMA) tile loads and the mbarriers that count them, for the sm_90a
// GEMM (wgmma-gemm-kernels.cuh: gemm_wgmma_tma_kernel). Each helper has an emulated form for the
// test program's SIMT emulator (cuda/simt-compat.cuh), written from the PTX ISA's and the driver
// API's definitions, as tensor-core.cuh's and wgmma.cuh's are:
//
//   - A tensor map (host-made, 128 opaque bytes passed as a __grid_constant__ kernel parameter)
//     describes a 2-D bf16 tensor [dim1 rows][dim0 columns], rows `ld` elements apart, read in
//     boxes of box1 rows x 64 columns into shared memory with the 128-byte swizzle: the 16-byte
//     chunk at shared address a lands at a XOR ((a >> 7) & 7) << 4, so a 1024-byte-aligned box is
//     wgmma.cuh's 128B-swizzled K-major tile. Elements past dim0 or dim1 land as zeros.
//   - cp.async.bulk.tensor.2d ... mbarrier::complete_tx::bytes: one thread starts a box load;
//     when its bytes have landed they count against the mbarrier's expected transaction bytes.
//   - An mbarrier (8 bytes of shared memory) completes a phase when its expected arrivals have
//     arrived and its transaction count is back to 0, then starts the next phase. Waiting with
//     parity p returns once the phase of parity p has completed (the current phase's parity is
//     not p): a waiter counts its uses of a barrier and waits with the count's parity.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "cuda/simt-compat.cuh"
#include "cuda/tensor-core.cuh"
#include "cuda/wgmma.cuh"

#if !defined(LOOM_SIMT_EMULATION)
#include <cuda.h>
#include <cudaTypedefs.h>
#endif

namespace loom {
// Internal linkage: the test program links the emulated build beside the real one.
namespace {

constexpr int kTmaBoxCols = 64;  // 128 bytes of bf16: one swizzled row

#if defined(LOOM_SIMT_EMULATION)
// The emulated tensor map: what make_tensor_map_2d was given.
struct TensorMap2D {
  const uint16_t* base;
  int64_t dim0, dim1, ld;
  int box1;
};
#else
using TensorMap2D = CUtensorMap;
#endif

// Host: a tensor map of the bf16 tensor [dim1][dim0] at `base` (16-byte aligned), rows `ld`
// elements apart (ld % 8 == 0), for loads of box1 (<= 256) rows x 64 columns with the 128-byte
// swizzle and zeros out of bounds. False where the driver does not provide it (the caller keeps
// a kernel without TMA).
inline bool make_tensor_map_2d(TensorMap2D* map, const uint16_t* base, int64_t dim0, int64_t dim1, int64_t ld,
                               int box1) {
  // The driver's rules for this use (cuTensorMapEncodeTiled), checked on both builds so the
  // emulator refuses what a GPU would: a 16-byte-aligned base, dimensions in 1..2^32, a row
  // stride that is a multiple of 16 bytes, a box of at most 256 rows.
  const bool valid = (reinterpret_cast<uintptr_t>(base) & 15) == 0 && dim0 >= 1 && dim1 >= 1 &&
                     dim0 <= (int64_t(1) << 32) && dim1 <= (int64_t(1) << 32) && ld >= dim0 && ld % 8 == 0 &&
                     box1 >= 1 && box1 <= 256;
  if (!valid) return false;
#if defined(LOOM_SIMT_EMULATION)
  *map = TensorMap2D{base, dim0, dim1, ld, box1};
  return true;
#else
  // The driver's encoder, through the runtime (no link against libcuda): looked up once.
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {cuuint64_t(dim0), cuuint64_t(dim1)};
  const cuuint64_t row_stride[1] = {cuuint64_t(ld) * 2};
  const cuuint32_t box[2] = {cuuint32_t(kTmaBoxCols), cuuint32_t(box1)};
  const cuuint32_t element_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<uint16_t*>(base), dims, row_stride, box,
                element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
#endif
}

#if defined(LOOM_SIMT_EMULATION)
// An mbarrier and the box loads that will complete bytes on it. Loads land at the latest moment
// the PTX ISA allows: when a thread waits on the barrier (before its phase can complete), so a
// kernel that reads a stage without waiting for its barrier reads stale bytes here, as it might on
// a GPU. A box load into shared memory that a wgmma not yet waited for reads stops the emulation
// (tensor-core.cuh: the pending async reads), as a cp.async there does.
struct PendingBoxLoad {
  uint32_t dst;  // shared-window offset
  TensorMap2D map;
  int c0, c1;
};
struct EmulatedMbarrier {
  int count = 0, pending = 0;  // arrivals a phase expects; still to arrive in this one
  int64_t tx = 0;              // transaction bytes still to land in this phase
  uint32_t phase = 0;
  std::vector<PendingBoxLoad> loads;
};
struct EmulatedMbarriers {
  simt::dim3 block{~0u, ~0u, ~0u};
  std::unordered_map<uint32_t, EmulatedMbarrier> by_offset;
};
inline EmulatedMbarrier& emulated_mbarrier(const uint64_t* bar) {
  static EmulatedMbarriers all;
  if (entered_new_block(&all.block)) all.by_offset.clear();
  return all.by_offset[shared_address(bar)];
}
inline void mbarrier_complete_if_done(EmulatedMbarrier& b) {
  if (b.pending > 0 || b.tx > 0) return;
  b.phase++;
  b.pending = b.count;
}
inline void land_box_load(EmulatedMbarrier& b, const PendingBoxLoad& l) {
  const TensorMap2D& m = l.map;
  if (m.dim0 % 8 != 0 || l.c0 % 8 != 0) {
    std::fprintf(stderr, "emulated TMA: whole 16-byte chunks only (dim0 and the column a multiple of 8)\n");
    std::abort();
  }
  uint8_t* origin = emulated_shared_origin();
  for (int r = 0; r < m.box1; r++)
    for (int c = 0; c < kTmaBoxCols / 8; c++) {
      uint32_t a = l.dst + uint32_t(r) * 128 + uint32_t(c) * 16;
      a ^= ((a >> 7) & 7) << 4;
      const int64_t row = int64_t(l.c1) + r, col = int64_t(l.c0) + 8 * c;
      if (row < m.dim1 && col < m.dim0)
        std::memcpy(origin + a, m.base + row * m.ld + col, 16);
      else
        std::memset(origin + a, 0, 16);
    }
  b.tx -= int64_t(m.box1) * kTmaBoxCols * 2;
}

inline void mbarrier_init(uint64_t* bar, int count) {
  EmulatedMbarrier& b = emulated_mbarrier(bar);
  b = EmulatedMbarrier{};
  b.count = b.pending = count;
}
inline void mbarrier_init_fence() {}
inline void mbarrier_arrive(uint64_t* bar) {
  EmulatedMbarrier& b = emulated_mbarrier(bar);
  if (b.pending <= 0) {
    std::fprintf(stderr, "emulated mbarrier: more arrivals than the phase expects\n");
    std::abort();
  }
  b.pending--;
  mbarrier_complete_if_done(b);
}
inline void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  emulated_mbarrier(bar).tx += bytes;
  mbarrier_arrive(bar);
}
inline void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  for (long spins = 0;; spins++) {
    EmulatedMbarrier& b = emulated_mbarrier(bar);
    if (!b.loads.empty()) {
      std::vector<PendingBoxLoad> loads;
      loads.swap(b.loads);
      for (const PendingBoxLoad& l : loads) land_box_load(b, l);
      mbarrier_complete_if_done(b);
    }
    if ((b.phase & 1) != parity) return;
    if (spins > (1l << 22)) {
      std::fprintf(stderr, "emulated mbarrier: a wait that never completes (a deadlock of the pipeline's phases)\n");
      std::abort();
    }
    simt::yield();
  }
}
inline void tma_load_2d(void* dst, const TensorMap2D* map, int c0, int c1, uint64_t* bar) {
  const uint32_t off = shared_address(dst);
  require_no_pending_reads(off, uint32_t(map->box1) * 128, "TMA");
  emulated_mbarrier(bar).loads.push_back({off, *map, c0, c1});
}
#else
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the async proxy (the TMA unit) before first use.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.shared::cta.b64 state, [%0];\n"
      "}\n" ::"r"(shared_address(bar))
      : "memory");
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n"
      "}\n" ::"r"(shared_address(bar)),
      "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// Starts the load of the box at column c0, row c1 of `map`'s tensor into `dst` (1024-byte
// aligned); its bytes complete on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap2D* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(shared_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(shared_address(bar))
      : "memory");
}
#endif

}  // namespace
}  // namespace loom
