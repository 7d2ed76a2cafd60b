// The Q8 prefill matmul on AMX int8 tiles (Sapphire Rapids and newer Xeons: amx_int8), called
// by matmul_q8 for steps of kQ8AmxMinTokens or more. Same formula as the VNNI kernel: the
// activations quantised per 32-block to int8 (scale max|x|/127), each block's integer dot
// product exact, scaled by dw·dx in f32. One tdpbssd takes one 32-weight block of 16 weight rows
// (the A operand: the stored int8 values, stride one Q8 row) against 16 tokens' same block (the
// B operand, written once per call in its 4-byte-interleaved layout): 16 × 16 × 32 signed
// multiply-adds, whose 16 × 16 int32 sums are then scaled and added into f32 accumulators.
// A tile cannot hold two blocks: their scales differ, and the per-block integer sums are what
// the scales multiply.
#include "cpu/intrinsics.h"

#include <algorithm>
#include <cstring>

#include "cpu/cpu-device.h"
#include "cpu/matmul-bf16-amx.h"
#include "cpu/matmul-q8-amx.h"
#include "cpu/simd-config.h"

namespace loom {

#if LOOM_AMX_INT8

namespace {

// tmm0-3: int32 sums (16 rows × 16 tokens), tmm4-5: weights (16 rows × 32 int8), tmm6-7:
// activations (8 rows of 4-byte groups × 16 tokens).
struct alignas(64) Int8TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

Int8TileConfig int8_tiles() {
  Int8TileConfig cfg;
  for (int i = 0; i < 4; i++) {
    cfg.rows[i] = 16;
    cfg.colsb[i] = 64;
  }
  for (int i = 4; i < 6; i++) {
    cfg.rows[i] = 16;
    cfg.colsb[i] = 32;
  }
  for (int i = 6; i < 8; i++) {
    cfg.rows[i] = 8;
    cfg.colsb[i] = 64;
  }
  return cfg;
}

}  // namespace

void amx_q8_pack_tokens(const float* x, int64_t T, int64_t ldx, int64_t K, int8_t* xv, float* dx) {
  const int64_t nb = K / kQ8Block;
  for (int64_t j = 0; j < 16; j++) {
    for (int64_t b = 0; b < nb; b++) {
      int8_t q[32] = {};
      float d = 0;
      if (j < T) {
        const float* xb = x + j * ldx + b * 32;
        const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        d = amax / 127.0f;
        const __m512 id = _mm512_set1_ps(d > 0 ? 1.0f / d : 0.0f);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, id))));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16),
                         _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, id))));
      }
      // Block b of token j: 8 groups of 4 bytes, group g at row g, column j.
      int8_t* tile = xv + b * 512;
      for (int g = 0; g < 8; g++) std::memcpy(tile + g * 64 + j * 4, q + g * 4, 4);
      dx[b * 16 + j] = d;
    }
  }
}

void amx_q8_dot_rows(const int8_t* xv, const float* dx, int64_t T, const MatmulJob& job, int64_t n0, int64_t n1,
                     bool accumulate) {
  const int64_t K = job.w.cols, nb = K / kQ8Block, row_bytes = q8_row_bytes(K);
  const int8_t* w = static_cast<const int8_t*>(job.w.data);
  const int64_t tiles = (T + 15) / 16;
  const int64_t tile_stride = nb * 512;  // bytes of xv per 16-token tile
  const Int8TileConfig cfg = int8_tiles();
  const ScopedTileConfig tiles_in_use(&cfg);
  alignas(64) int32_t c[4][16][16];
  alignas(64) float f[4][16][16];
  // This 32-row block's scales, [block][row], as f32.
  static thread_local std::vector<float> dw;
  if (int64_t(dw.size()) < nb * 32) dw.resize(size_t(nb * 32));
  for (int64_t n = n0; n < n1; n += 32) {
    const bool two_rows = n + 16 < n1;
    const int nrows = two_rows ? 32 : 16;
    for (int i = 0; i < nrows; i++) {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(w + (n + i) * row_bytes + K);
      for (int64_t b = 0; b < nb; b++) {
        uint16_t h;
        std::memcpy(&h, s + b, 2);
        dw[size_t(b * 32 + i)] = f16_to_f32(h);
      }
    }
    for (int64_t tt = 0; tt < tiles; tt += 2) {
      const bool two_tok = tt + 1 < tiles;
      std::memset(f, 0, sizeof f);
      const int8_t* x0 = xv + tt * tile_stride;
      const int8_t* x1 = two_tok ? x0 + tile_stride : x0;
      const float* d0 = dx + tt * nb * 16;
      const float* d1 = two_tok ? d0 + nb * 16 : d0;
      for (int64_t b = 0; b < nb; b++) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        _tile_loadd(4, w + n * row_bytes + b * 32, row_bytes);
        _tile_loadd(6, x0 + b * 512, 64);
        _tile_dpbssd(0, 4, 6);
        if (two_tok) {
          _tile_loadd(7, x1 + b * 512, 64);
          _tile_dpbssd(1, 4, 7);
        }
        if (two_rows) {
          _tile_loadd(5, w + (n + 16) * row_bytes + b * 32, row_bytes);
          _tile_dpbssd(2, 5, 6);
          if (two_tok) _tile_dpbssd(3, 5, 7);
        }
        _tile_stored(0, c[0], 64);
        if (two_tok) _tile_stored(1, c[1], 64);
        if (two_rows) _tile_stored(2, c[2], 64);
        if (two_rows && two_tok) _tile_stored(3, c[3], 64);
        // f[a][i][:] += dw[row i] · dx[tokens] · c[a][i][:]
        for (int a = 0; a < 4; a++) {
          if ((a & 1) && !two_tok) continue;
          if ((a & 2) && !two_rows) continue;
          const __m512 dxv = _mm512_loadu_ps((a & 1 ? d1 : d0) + b * 16);
          const float* dwb = dw.data() + b * 32 + (a & 2 ? 16 : 0);
          for (int i = 0; i < 16; i++) {
            const __m512 sc = _mm512_mul_ps(dxv, _mm512_set1_ps(dwb[i]));
            _mm512_store_ps(f[a][i], _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[a][i])), sc,
                                                     _mm512_load_ps(f[a][i])));
          }
        }
      }
      amx_store_tiles(f, two_tok, two_rows, n, tt, T, job, accumulate);
    }
  }
}

#endif  // LOOM_AMX_INT8

}  // namespace loom
