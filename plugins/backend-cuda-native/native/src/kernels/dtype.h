// Weight element types and their conversion to f32. Weights stay in their stored dtype in memory
// (the safetensors mmap) and kernels widen them on the fly; activations are always f32.
// Q8 is the one dtype no file holds: 8-bit weights quantised at load (runtime/quantize-q8.h) when
// the `weights: int8` option asks for them; only the matmul reads it.
#pragma once

#include <cstdint>
#include <cstring>

namespace loom {

enum class DType : int32_t { F32 = 0, F16 = 1, BF16 = 2, Q8 = 3 };

// Q8: blocks of kQ8Block consecutive weights along K, each int8 values q and one f16 scale d
// (weight = d * q, |q| <= 127), the idea of llama.cpp's Q8_0. The scale is f16 rather than f32 so
// a row costs exactly Q8_0's 34 bytes per 32 weights (batch-1 decode streams every byte; f32
// scales would add 6%), and d * q is exact in f32 (11 + 8 significant bits). A matrix [N, K]
// (K a multiple of kQ8Block) is N rows of q8_row_bytes(K) bytes: the row's K int8 values, then
// its K/kQ8Block f16 scales, so a row is one contiguous stream and a zmm load covers two blocks.
constexpr int64_t kQ8Block = 32;
inline int64_t q8_row_bytes(int64_t K) { return K + K / kQ8Block * 2; }

// Bytes per element (Q8: the int8 values only; rows of a matrix: weight_row_bytes).
inline int dtype_size(DType t) { return t == DType::F32 ? 4 : t == DType::Q8 ? 1 : 2; }
inline const char* dtype_name(DType t) {
  return t == DType::F32 ? "float32" : t == DType::F16 ? "float16" : t == DType::BF16 ? "bfloat16" : "int8";
}
// Bytes of one row of K weights stored in `t`, and of a [rows, K] matrix.
inline int64_t weight_row_bytes(DType t, int64_t K) { return t == DType::Q8 ? q8_row_bytes(K) : K * dtype_size(t); }
inline int64_t weight_bytes(DType t, int64_t rows, int64_t K) { return rows * weight_row_bytes(t, K); }

// bf16 is the top half of an f32: widen by a 16-bit shift.
inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round-to-nearest-even f32 -> bf16 (used by tests and the self-test to build bf16 weights).
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// IEEE half -> f32 without F16C, the scalar reference for the vectorised path.
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise the mantissa
      int e = -1;
      do {
        man <<= 1;
        e++;
      } while ((man & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// f32 -> IEEE half, round to nearest even; only the self-test uses it, so clarity beats speed.
inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t man = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (man ? 0x200u : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    man |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | static_cast<uint32_t>(exp) << 10 | man >> 13;
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++;
  return static_cast<uint16_t>(half);
}

// Element k of a Q8 row (`row` points at its first int8 value), dequantised: d * q, exact in f32.
inline float q8_load(const void* row, int64_t K, int64_t k) {
  const uint8_t* r = static_cast<const uint8_t*>(row);
  uint16_t d;
  std::memcpy(&d, r + K + k / kQ8Block * 2, 2);
  return f16_to_f32(d) * float(static_cast<int8_t>(r[k]));
}

// Element (n, k) of a [rows, K] weight matrix in any dtype, widened to f32 (scalar reference path).
inline float load_weight_at(const void* base, DType t, int64_t K, int64_t n, int64_t k);

// One element of a weight matrix, widened to f32 (scalar reference path; not Q8, whose elements
// need the row length: load_weight_at).
inline float load_weight(const void* base, DType t, int64_t index) {
  switch (t) {
    case DType::F32:
      return static_cast<const float*>(base)[index];
    case DType::F16:
      return f16_to_f32(static_cast<const uint16_t*>(base)[index]);
    default:
      return bf16_to_f32(static_cast<const uint16_t*>(base)[index]);
  }
}

inline float load_weight_at(const void* base, DType t, int64_t K, int64_t n, int64_t k) {
  if (t == DType::Q8) return q8_load(static_cast<const uint8_t*>(base) + n * q8_row_bytes(K), K, k);
  return load_weight(base, t, n * K + k);
}

}  // namespace loom
