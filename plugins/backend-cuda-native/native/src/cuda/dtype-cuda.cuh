// Weight loads for the cuda kernels: a stored element (f32, f16, bf16) widened to f32, and 16-byte
// vector loads of 8 (16-bit) or 4 (f32) elements. Same rounding as kernels/dtype.h (exact widening).
// With LOOM_SIMT_EMULATION (the test program's emulator, cuda/simt-compat.cuh) the same functions
// are plain scalar C++ over kernels/dtype.h's conversions, with simt::f16 / simt::bf16 as the 16-bit
// cache types: kernels call them the same way in both builds.
#pragma once

#include <cstdint>

#include "cuda/simt-compat.cuh"
#include "cuda/warp-reduce.cuh"
#include "kernels/dtype.h"

#if defined(LOOM_SIMT_EMULATION)

namespace loom {

inline float load_w(const void* base, DType t, int64_t i) { return load_weight(base, t, i); }

// 8 consecutive weight elements from `offset`, widened.
template <DType DT>
inline void load8(const void* w, int64_t offset, float out[8]) {
  for (int i = 0; i < 8; i++) out[i] = load_weight(w, DT, offset + i);
}

// The GEMV's two-phase weight read (matmul-kernels.cuh): 8 elements fetched raw, widened later,
// so that a lane can have many loads in flight before the first use. Emulated: widened at once.
template <DType DT>
struct Raw8 {
  float v[8];
};
template <DType DT>
inline Raw8<DT> load_raw8(const void* w, int64_t offset) {
  Raw8<DT> r;
  for (int i = 0; i < 8; i++) r.v[i] = load_weight(w, DT, offset + i);
  return r;
}
template <DType DT>
inline void widen_raw8(const Raw8<DT>& r, float out[8]) {
  for (int i = 0; i < 8; i++) out[i] = r.v[i];
}
// Read-only activation loads (x of a matmul): the L1-cached path on a GPU.
inline float4 ldg4(const float* p) { return {p[0], p[1], p[2], p[3]}; }
inline float ldg1(const float* p) { return *p; }
// 16-byte accesses of elementwise kernels (16-byte aligned; plain, not read-only: an output may
// be an input too).
inline float4 load4(const float* p) { return {p[0], p[1], p[2], p[3]}; }
inline void store4(float* p, const float4& v) { p[0] = v.x, p[1] = v.y, p[2] = v.z, p[3] = v.w; }
inline void store8(uint16_t* p, const uint16_t (&v)[8]) {
  for (int i = 0; i < 8; i++) p[i] = v[i];
}

template <typename C>
inline float widen(C v);
template <>
inline float widen<float>(float v) {
  return v;
}
template <>
inline float widen<simt::f16>(simt::f16 v) {
  return f16_to_f32(v.bits);
}
template <>
inline float widen<simt::bf16>(simt::bf16 v) {
  return bf16_to_f32(v.bits);
}

template <typename C>
inline C to_cache(float v);
template <>
inline float to_cache<float>(float v) {
  return v;
}
template <>
inline simt::f16 to_cache<simt::f16>(float v) {
  return {f32_to_f16(v)};
}
template <>
inline simt::bf16 to_cache<simt::bf16>(float v) {
  return {f32_to_bf16(v)};
}

}  // namespace loom

#else

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace loom {

__device__ __forceinline__ float load_w(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::F32:
      return static_cast<const float*>(base)[i];
    case DType::F16:
      return __half2float(static_cast<const __half*>(base)[i]);
    default:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  }
}

// Widen 8 consecutive 16-bit elements held in one 16-byte word.
template <DType T>
__device__ __forceinline__ void widen8(const uint4& v, float out[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    if constexpr (T == DType::BF16) {
      // bf16 -> f32 is a 16-bit shift, as in dtype.h.
      out[2 * i] = __uint_as_float(w[i] << 16);
      out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    } else {
      const __half2 h = *reinterpret_cast<const __half2*>(&w[i]);
      const float2 f = __half22float2(h);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
}

// 8 consecutive weight elements from `offset`, widened, in one or two 16-byte loads (the caller
// guarantees 16-byte alignment: offset % 8 == 0 and rows of K % 8 == 0 elements).
template <DType DT>
__device__ __forceinline__ void load8(const void* w, int64_t offset, float out[8]) {
  if constexpr (DT == DType::F32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(w) + offset);
    const float4 a = __ldg(p), b = __ldg(p + 1);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w) + offset));
    widen8<DT>(v, out);
  }
}

// 16 bytes of weights streamed past L1 (read once per step: they would only evict x there).
// Not volatile: the compiler may hoist and batch these loads, which is the point.
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// The GEMV's two-phase weight read (matmul-kernels.cuh): 8 elements fetched raw (one 16-byte
// word, two for f32), widened only when used, so a lane has many loads in flight at once.
template <DType DT>
struct Raw8 {
  uint4 a;
};
template <>
struct Raw8<DType::F32> {
  uint4 a, b;
};
template <DType DT>
__device__ __forceinline__ Raw8<DT> load_raw8(const void* w, int64_t offset) {
  Raw8<DT> r;
  if constexpr (DT == DType::F32) {
    const float* p = static_cast<const float*>(w) + offset;
    r.a = ld_stream16(p);
    r.b = ld_stream16(p + 4);
  } else {
    r.a = ld_stream16(static_cast<const uint16_t*>(w) + offset);
  }
  return r;
}
template <DType DT>
__device__ __forceinline__ void widen_raw8(const Raw8<DT>& r, float out[8]) {
  if constexpr (DT == DType::F32) {
    const uint32_t u[8] = {r.a.x, r.a.y, r.a.z, r.a.w, r.b.x, r.b.y, r.b.z, r.b.w};
#pragma unroll
    for (int i = 0; i < 8; i++) out[i] = __uint_as_float(u[i]);
  } else {
    widen8<DT>(r.a, out);
  }
}
// Read-only activation loads (x of a matmul): through the L1 / texture path.
__device__ __forceinline__ float4 ldg4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ float ldg1(const float* p) { return __ldg(p); }
// 16-byte accesses of elementwise kernels (16-byte aligned; plain, not read-only: an output may
// be an input too).
__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void store4(float* p, const float4& v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ void store8(uint16_t* p, const uint16_t (&v)[8]) {
  *reinterpret_cast<uint4*>(p) = make_uint4(v[0] | uint32_t(v[1]) << 16, v[2] | uint32_t(v[3]) << 16,
                                            v[4] | uint32_t(v[5]) << 16, v[6] | uint32_t(v[7]) << 16);
}

// A KV cache element (f32, f16, bf16) widened to f32.
template <typename C>
__device__ __forceinline__ float widen(C v);
template <>
__device__ __forceinline__ float widen<float>(float v) { return v; }
template <>
__device__ __forceinline__ float widen<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float widen<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

// f32 -> the cache's element type, round to nearest even (identity for f32).
template <typename C>
__device__ __forceinline__ C to_cache(float v);
template <>
__device__ __forceinline__ float to_cache<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half to_cache<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 to_cache<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

}  // namespace loom

#endif  // LOOM_SIMT_EMULATION
