// A SIMT emulator for checking cuda kernels on a machine without a GPU (the test program only).
//
// A kernel written against cuda/simt-compat.cuh compiles both with nvcc (the real thing) and,
// with LOOM_SIMT_EMULATION defined, as plain C++ that this emulator runs: every CUDA thread of a
// block is a fiber on the calling OS thread, and the scheduler switches fibers round-robin at each
// synchronisation point (__syncthreads, and every warp shuffle or ballot, which is a warp barrier
// after writing to an exchange buffer). Blocks run one after another, in grid order or reversed on
// every other launch. So kernels run with CUDA's semantics for what they are allowed to assume
// (block barriers, warp-synchronous shuffles with full masks, shared memory per block), not with
// its timing: a kernel that depends on lockstep execution without a sync, on the order of blocks,
// on inter-block concurrency or on atomics beyond counting fails here or is not expressible.
//
// Supported: threadIdx/blockIdx/blockDim/gridDim (x, y, z), shared memory (LOOM_SHARED and
// LOOM_DYNAMIC_SHARED of cuda/simt-compat.cuh), __syncthreads, __syncthreads_or and __syncwarp,
// __shfl_sync, __shfl_up_sync, __shfl_xor_sync and __any_sync with the full mask on 4- and 8-byte
// values, __ballot_sync with the full mask and __popc, atomicAdd on int and unsigned long long
// (fibers never interleave inside it), __threadfence and __ldcg, __float_as_uint / __uint_as_float, __double_as_longlong, float4,
// warp_exchange for warp-collective instructions (the kernels' emulated mma.sync), yield for
// spin-waits (the emulated mbarriers), the
// math of <cmath>, min/max, and 16-bit float types for K/V caches (simt::f16, simt::bf16). Fibers switch with a few instructions of x86-64 assembly (ucontext's
// swapcontext makes a syscall per switch, 50x slower on the kernels' millions of switches).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __grid_constant__

namespace simt {

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// The running CUDA thread's coordinates; `linear` is its index in the block (x fastest), whose
// remainder by 32 is its lane.
struct ThreadState {
  dim3 thread_idx, block_idx;
  int linear = 0;
};
namespace detail {
// The running fiber's coordinates, its warp's exchange buffer (two halves of 32 slots) and the
// half its last exchange used (set at every switch into a fiber; null outside kernels): read
// inline, they are on every shuffle's path.
extern const ThreadState* running;
extern uint64_t* running_exchange;
extern int* running_exchange_half;
extern const ThreadState host_state;
}  // namespace detail
inline const ThreadState& current() { return detail::running ? *detail::running : detail::host_state; }
const dim3& block_dim();
const dim3& grid_dim();
void* dynamic_shared_bytes();
// The block's instance of a statically sized __shared__ variable: `key` names the declaration
// (the address of a static local beside it), the first request in a block allocates it.
void* block_static(const void* key, size_t bytes, size_t align);

// Run `kernel` (a callable taking no arguments, e.g. a lambda calling the kernel function) on
// grid × block threads with `smem` bytes of dynamic shared memory per block.
void launch(dim3 grid, dim3 block, size_t smem, const std::function<void()>& kernel);

// Block barrier; warp barrier (all 32 lanes of the caller's warp); block barrier returning
// whether any thread's predicate was non-zero.
void sync_block();
// Lets the block's other threads run, with no barrier: one turn of a spin-wait (the emulated
// mbarrier waits of cuda/tma.cuh), whose condition only another thread can change.
void yield();
void sync_warp();
int sync_block_or(int predicate);
// The 32 slots (one a lane) of the running fiber's next warp exchange. A warp's exchanges
// alternate between two halves of its buffer, so one barrier per exchange suffices: a lane writes
// this half again only two exchanges later, after the next exchange's barrier, which no lane
// passes before every lane has arrived there, done reading this one. (Every lane of a warp makes
// the same exchanges in the same order, as full-mask shuffles require, so their halves agree.)
inline uint64_t* next_exchange() {
  *detail::running_exchange_half ^= 1;
  return detail::running_exchange + 32 * *detail::running_exchange_half;
}

// Every lane of the caller's warp contributes `bytes` (at most 64) from `mine`; each gets all 32
// contributions in `all` (lane order). For warp-collective instructions (mma.sync).
void warp_exchange(const void* mine, size_t bytes, void* all);

// std::bit_cast of C++20, for this C++17 build.
template <typename To, typename From>
To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast between types of one size");
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}

template <typename T>
T shuffle(T v, int src) {
  static_assert(sizeof(T) <= 8, "shuffles move 4- or 8-byte values");
  const int lane = current().linear % 32;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  uint64_t* slots = next_exchange();
  slots[lane] = bits;
  sync_warp();
  const uint64_t got = slots[src & 31];
  T out;
  std::memcpy(&out, &got, sizeof(T));
  return out;
}

// 16-bit float storage types (the kernels' dtype-cuda.cuh converts them as kernels/dtype.h does).
struct f16 {
  uint16_t bits;
};
struct bf16 {
  uint16_t bits;
};
}  // namespace simt

// CUDA's vector type the kernels read shared memory with.
struct float4 {
  float x, y, z, w;
};

#define threadIdx (::simt::current().thread_idx)
#define blockIdx (::simt::current().block_idx)
#define blockDim (::simt::block_dim())
#define gridDim (::simt::grid_dim())

inline void __syncthreads() { ::simt::sync_block(); }
inline void __syncwarp(unsigned /*full mask*/ = 0xffffffffu) { ::simt::sync_warp(); }
inline int __syncthreads_or(int predicate) { return ::simt::sync_block_or(predicate); }
inline int __any_sync(unsigned /*full mask*/, int predicate) {
  int any = 0;
  for (int o = 16; o > 0; o >>= 1) predicate |= ::simt::shuffle(predicate, (::simt::current().linear % 32) ^ o);
  any = predicate != 0;
  return any;
}
// Every lane's predicate as bit `lane` (one exchange).
inline unsigned __ballot_sync(unsigned /*full mask*/, int predicate) {
  uint64_t* slots = ::simt::next_exchange();
  slots[::simt::current().linear % 32] = predicate != 0 ? 1u : 0u;
  ::simt::sync_warp();
  unsigned bits = 0;
  for (int l = 0; l < 32; l++) bits |= unsigned(slots[l] & 1u) << l;
  return bits;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int atomicAdd(int* address, int value) {
  const int old = *address;
  *address = old + value;
  return old;
}
// Blocks run one after another, so every write of a finished block is visible to the next:
// fences are nothing, and an L2-only load is a load.
inline void __threadfence() {}
inline float __ldcg(const float* p) { return *p; }
inline unsigned long long atomicAdd(unsigned long long* address, unsigned long long value) {
  const unsigned long long old = *address;
  *address = old + value;
  return old;
}
inline unsigned __float_as_uint(float f) { return ::simt::bit_cast<unsigned>(f); }
inline long long __double_as_longlong(double d) { return ::simt::bit_cast<long long>(d); }
inline float __uint_as_float(unsigned u) { return ::simt::bit_cast<float>(u); }
template <typename T>
T __shfl_sync(unsigned /*full mask*/, T v, int src) {
  return ::simt::shuffle(v, src);
}
template <typename T>
T __shfl_up_sync(unsigned /*full mask*/, T v, unsigned delta) {
  const int lane = ::simt::current().linear % 32;
  return ::simt::shuffle(v, lane >= int(delta) ? lane - int(delta) : lane);
}
template <typename T>
T __shfl_xor_sync(unsigned /*full mask*/, T v, int lane_mask) {
  return ::simt::shuffle(v, (::simt::current().linear % 32) ^ lane_mask);
}
using std::isnan;
using std::max;
using std::min;
