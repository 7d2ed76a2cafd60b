// The sm_90a warpgroup MMA the wgmma GEMM is built on (wgmma-gemm-kernels.cuh): operand tiles in
// shared memory in the 128-byte-swizzled K-major layout, named by matrix descriptors, and f32
// accumulators in registers. Each helper has an emulated form for the test program's SIMT emulator
// (cuda/simt-compat.cuh), written from the PTX ISA's definitions, as tensor-core.cuh's are:
//
//   - The 128B-swizzled K-major layout: an operand tile of R rows x 64 16-bit columns (128 bytes a
//     row) in 1024-byte-aligned shared memory; row r's 16-byte chunk c (columns 8c..8c+7) at byte
//     r * 128 + ((c ^ (r % 8)) * 16). Eight rows (1024 bytes) are one swizzle atom, and atoms
//     follow each other, so the descriptor's stride byte offset is 1024.
//   - A matrix descriptor (64 bits): bits 0-13 the start address >> 4 (shared window), 16-29 the
//     leading byte offset >> 4 (unused by swizzled K-major layouts whose k16 slice fits the
//     128-byte row: 1 by convention), 32-45 the stride byte offset >> 4, 49-51 the base offset (0:
//     atoms 1024-aligned), 62-63 the swizzle (1: 128 bytes). The k16 slice at column 16 s starts
//     32 s bytes into the tile: the hardware swizzles the addresses it forms, so element (r, k) of
//     the slice is read at swizzle(start + (r / 8) * 1024 + (r % 8) * 128 + 2 k), where swizzle
//     XORs address bits 4-6 with bits 7-9.
//   - wgmma.mma_async m64nNk16 .f32.bf16.bf16 with A and B from descriptors: D[64, N] += A[64, 16]
//     * B[N, 16]^T. The 128 threads of the warpgroup hold D: thread t (warp w = t / 32, lane l)
//     has value v = v0 + 2 v1 + 4 v2 at row 16 w + l / 4 + 8 v1, column 8 v2 + 2 (l % 4) + v0
//     (CuTe's CLayout_64xN). Asynchronous: the accumulators are not to be touched, nor the operand
//     tiles overwritten, until wgmma.wait_group says the instruction's group is complete.
//   - fence.proxy.async: cp.async writes shared memory through the generic proxy and wgmma reads
//     it through the async proxy, so each thread fences its landed copies before the barrier that
//     hands them to the warpgroups.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda/simt-compat.cuh"
#include "cuda/tensor-core.cuh"
#include "kernels/dtype.h"

namespace loom {
// Internal linkage: the test program links the emulated build beside the real one.
namespace {

constexpr int kWgmmaN = 256;                // the N of the one instruction shape used here
constexpr int kWgmmaAccs = kWgmmaN / 2;     // f32 accumulators per thread: 64 x 256 / 128
constexpr uint32_t kSw128AtomBytes = 1024;  // eight 128-byte rows

// Byte offset of 16-byte chunk c (0-7) of row r in a 128B-swizzled K-major tile.
__device__ __forceinline__ uint32_t sw128_offset(int r, int c) {
  return uint32_t(r) * 128 + uint32_t((c ^ (r & 7)) << 4);
}

#if defined(LOOM_SIMT_EMULATION)
// The emulated shared window (tensor-core.cuh: emulated_shared_origin): offsets from the block's
// dynamic shared memory rounded down to 1024 bytes, so that the swizzle sees the address bits a
// GPU's shared window would.
inline uint32_t shared_address(const void* p) {
  return uint32_t(static_cast<const uint8_t*>(p) - emulated_shared_origin());
}
#else
__device__ __forceinline__ uint32_t shared_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
#endif

// The first 1024-byte-aligned byte (in the shared window) at or after `p`.
template <typename T>
__device__ __forceinline__ T* align_shared_1024(T* p) {
  const uint32_t a = shared_address(p);
  return reinterpret_cast<T*>(reinterpret_cast<uint8_t*>(p) + ((kSw128AtomBytes - (a & 1023)) & 1023));
}

// The descriptor of a 128B-swizzled K-major tile's k16 slice starting at `p` (the tile's start,
// 1024-byte aligned, + 32 bytes per slice).
__device__ __forceinline__ uint64_t sw128_descriptor(const void* p) {
  const uint64_t start = (shared_address(p) >> 4) & 0x3fff;
  const uint64_t leading = 1, stride = kSw128AtomBytes >> 4, swizzle_128b = 1;
  return start | leading << 16 | stride << 32 | swizzle_128b << 62;
}

#if defined(LOOM_SIMT_EMULATION)
// wgmma as the PTX ISA defines it for the issuing thread: its group completes no earlier than its
// commit and no later than a wgmma.wait_group that leaves at most N newer groups pending.
// Emulated at the latest moment allowed (the wait), reading the operand tiles then, so a kernel
// that refills a stage before waiting for the wgmmas reading it computes garbage here, as it
// might on a GPU; its accumulators change only then, too.
struct PendingWgmma {
  float* d;
  uint64_t a, b;
};
// Shared-window offset of element (r, k < 16) of the k16 slice a descriptor names: where the
// hardware reads it.
inline uint32_t sw128_element_offset(uint64_t desc, int r, int k) {
  uint32_t o = uint32_t(desc & 0x3fff) << 4;
  o += uint32_t(r / 8) * kSw128AtomBytes + uint32_t(r % 8) * 128 + uint32_t(2 * k);
  return o ^ (((o >> 7) & 7) << 4);
}
inline float sw128_element(uint64_t desc, int r, int k) {
  uint16_t h;
  std::memcpy(&h, emulated_shared_origin() + sw128_element_offset(desc, r, k), 2);
  return bf16_to_f32(h);
}
// Counts the 16-byte chunks an instruction's operands occupy (A: 64 rows, B: kWgmmaN rows, 32
// bytes each) as pending reads (tensor-core.cuh: note_async_read), `delta` +1 at issue and -1
// when waited for. Lane 0 of each warp speaks for its warp.
inline void note_wgmma_reads(const PendingWgmma& w, int delta) {
  if (::simt::current().linear % 32 != 0) return;
  for (int r = 0; r < 64; r++)
    for (int k = 0; k < 16; k += 8) note_async_read(sw128_element_offset(w.a, r, k), delta);
  for (int r = 0; r < kWgmmaN; r++)
    for (int k = 0; k < 16; k += 8) note_async_read(sw128_element_offset(w.b, r, k), delta);
}
// One instruction's share of this thread: its values of D, products summed in k order with fmaf.
inline void run_wgmma(const PendingWgmma& w) {
  const int t = ::simt::current().linear % 128, warp = t / 32, lane = t % 32;
  float a[2][16];
  for (int v1 = 0; v1 < 2; v1++)
    for (int k = 0; k < 16; k++) a[v1][k] = sw128_element(w.a, 16 * warp + lane / 4 + 8 * v1, k);
  for (int v2 = 0; v2 < kWgmmaN / 8; v2++)
    for (int v0 = 0; v0 < 2; v0++) {
      float b[16];
      for (int k = 0; k < 16; k++) b[k] = sw128_element(w.b, 8 * v2 + 2 * (lane % 4) + v0, k);
      for (int v1 = 0; v1 < 2; v1++) {
        float& d = w.d[v0 + 2 * v1 + 4 * v2];
        for (int k = 0; k < 16; k++) d = fmaf(a[v1][k], b[k], d);
      }
    }
}
inline void wgmma_fence() {}
inline void fence_proxy_async_shared() {}
// D (this thread's kWgmmaAccs values) += A[the warpgroup's 64 rows, k16] * B[256, k16]^T.
inline void wgmma_m64n256k16_bf16(float (&d)[kWgmmaAccs], uint64_t a, uint64_t b) {
  // The emulation reads only the layout sw128_descriptor makes.
  for (uint64_t desc : {a, b})
    if ((desc >> 62) != 1 || ((desc >> 32) & 0x3fff) != (kSw128AtomBytes >> 4) || ((desc >> 49) & 7) != 0) {
      std::fprintf(stderr, "emulated wgmma: only 128B-swizzled K-major descriptors with 1024-byte atoms\n");
      std::abort();
    }
  const PendingWgmma w{d, a, b};
  note_wgmma_reads(w, +1);
  thread_async_groups<PendingWgmma>().open.push_back(w);
}
inline void wgmma_commit() { thread_async_groups<PendingWgmma>().commit(); }
template <int N>
inline void wgmma_wait() {
  thread_async_groups<PendingWgmma>().wait<N>([](const PendingWgmma& w) {
    run_wgmma(w);
    note_wgmma_reads(w, -1);
  });
}
#else
// Orders this thread's register accesses before the wgmmas that follow (the accumulators were
// zeroed or read by ordinary instructions).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// D (this thread's kWgmmaAccs values) += A[the warpgroup's 64 rows, k16] * B[256, k16]^T, both
// operands from 128B-swizzled K-major descriptors (scale-d 1: accumulate; no negation, no
// transpose). sm_90a only: elsewhere it compiles to nothing, and the device never launches a
// kernel that calls it (matmul.cu: cuda_wgmma_supported).
__device__ __forceinline__ void wgmma_m64n256k16_bf16(float (&d)[kWgmmaAccs], uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(a), "l"(b), "r"(1));
#endif
}
#endif

}  // namespace
}  // namespace loom
