// AMX int8 tiles for the Q8 prefill matmul (matmul-q8-amx.cc), used by matmul_q8.
#pragma once

#include <cstdint>

#include "cpu/simd-config.h"
#include "kernels/kernels.h"

namespace loom {

#if LOOM_AMX_INT8
// One tile of up to 16 tokens quantised for amx_q8_dot_rows. Semantics: for j < 16, block b:
//   dx[b*16 + j] = max|x_j,b| / 127 (0 for j >= T); q = round_half_even(x / dx) as int8;
//   xv[b*512 + g*64 + j*4 + e] = q[j][32b + 4g + e]
// x [T <= 16, ldx] f32, K a multiple of 32; xv [K/32 * 512] int8, dx [K/32 * 16] f32.
void amx_q8_pack_tokens(const float* x, int64_t T, int64_t ldx, int64_t K, int8_t* xv, float* dx);

// Semantics: for n in [n0, n1), t < T: y[t*ldy + n] = (accumulate ? y : 0) + bias[n] +
//   Σ_b dw[n,b] · dx[t,b] · Σ_{k in b} q[n,k] · qx[t,k], tokens as packed (tile tt at
//   xv + tt*K/32*512, dx + tt*K/32*16). n0, n1 multiples of 16; job.w is Q8.
void amx_q8_dot_rows(const int8_t* xv, const float* dx, int64_t T, const MatmulJob& job, int64_t n0, int64_t n1,
                     bool accumulate);
#endif

}  // namespace loom
