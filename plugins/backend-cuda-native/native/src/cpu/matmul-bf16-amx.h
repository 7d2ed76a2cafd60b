// AMX tiles for the bf16 prefill matmul (matmul-bf16-amx.cc), used by matmul_bf16_dot.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"
#include "cpu/simd-config.h"

namespace loom {

#if LOOM_AMX_BF16
// Whether this process may use AMX tile data (asked of the kernel once; false where it refuses).
bool amx_usable();

// The thread's tile configuration for the span of one kernel call: loads `config` (64 bytes, a
// ldtilecfg operand) and, on exit, puts back the configuration the thread had, or releases the
// tiles when it had none. Our kernels run on threads other code uses too (libuv's pool runs the
// addon's steps and other addons' work, e.g. llama.cpp's ggml, which configures its tiles once
// per thread and then relies on them): releasing or replacing that configuration behind its back
// makes its next tile instruction fault (SIGILL).
class ScopedTileConfig {
 public:
  explicit ScopedTileConfig(const void* config);
  ~ScopedTileConfig();
  ScopedTileConfig(const ScopedTileConfig&) = delete;
  ScopedTileConfig& operator=(const ScopedTileConfig&) = delete;

 private:
  alignas(64) uint8_t saved_[64];
};

// Write a pass's 2 x 2 tiles of f32 results into the job's output, transposed. Semantics: for
// a < 4 (a & 1: the second token tile, only with two_tok; a & 2: the second 16 weight rows,
// only with two_rows), i, j < 16, token t = 16·(tt + a%2) + j < T, row r = n + 16·(a/2) + i:
//   y[t*ldy + r] = (accumulate ? y : 0) + bias[r] + c[a][i][j]
void amx_store_tiles(const float (&c)[4][16][16], bool two_tok, bool two_rows, int64_t n, int64_t tt, int64_t T,
                     const MatmulJob& job, bool accumulate);

// Semantics: for each tile tt of 16 tokens, k-pair p < K/2, j < 16:
//   xv[((tt*K/2 + p)*16 + j)*2 + e] = xb[(16tt + j)*K32 + 2p + e] (0 for tokens >= T)
// xb [T, K32] bf16 (rows from matmul_bf16_dot), xv [ceil(T/16) * 16 * K] bf16. K even.
void amx_pack_tokens(const uint16_t* xb, int64_t T, int64_t K32, int64_t K, uint16_t* xv);

// Semantics: for n in [n0, n1), t < T: y[t*ldy + n] = (accumulate ? y : 0) + bias[n] +
//   Σ_k f32(w[n, k]) · f32(x[t, k]), x as packed in xv. n0, n1 multiples of 16, K of 32.
void amx_dot_rows(const uint16_t* xv, int64_t T, const MatmulJob& job, int64_t n0, int64_t n1, bool accumulate);
#endif

}  // namespace loom
