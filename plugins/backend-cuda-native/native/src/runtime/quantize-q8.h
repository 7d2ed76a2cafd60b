// 8-bit weights made at load: rows of an f32/f16/bf16 matrix quantised to the Q8 format
// (kernels/dtype.h: blocks of 32 int8 values with one f16 scale each, the idea of llama.cpp's
// Q8_0), for the `weights: int8` option.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/kernels.h"
#include "runtime/status.h"

namespace loom {

// Semantics: for n<rows, each block b of kQ8Block weights w of row n (K a multiple of kQ8Block):
//   d = f16(max|w| / 127); q[i] = clamp(round_half_even(w[i] / d), -127, 127) (0 when d == 0);
//   dst row n = q[0..K) as int8, then the K/kQ8Block scales d as f16 (q8_row_bytes(K) bytes).
// The q are chosen for the stored (rounded) d, so every weight is within d/2 of d*q for blocks
// whose d is an f16 normal (max|w| >= 127 * 2^-14 ~ 0.0078), and within 127 * 2^-25 below that
// (subnormal scales). src [rows, K] in src_dtype (f32, f16 or bf16), dst [rows * q8_row_bytes(K)].
void quantize_q8_rows(const void* src, DType src_dtype, int64_t rows, int64_t K, uint8_t* dst);

// Why `w` cannot be quantised to Q8 (model_invalid naming `name`), or Ok: K must be a multiple of
// kQ8Block and the dtype f32, f16 or bf16.
Status check_q8_quantizable(const WeightView& w, const std::string& name);

}  // namespace loom
