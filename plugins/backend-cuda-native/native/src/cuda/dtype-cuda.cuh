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
