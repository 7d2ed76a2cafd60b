// The bf16 prefill matmul on AMX tiles (Sapphire Rapids and newer Xeons: amx_bf16), where the
// CPU and the kernel allow it; matmul_bf16_dot (matmul-bf16-avx512.cc) calls it for the rows it
// covers. Same arithmetic as the vdpbf16ps path: the activations rounded to bf16 once per call,
// bf16 × bf16 products summed in f32 (so the same 2^-9 · Σ|x·w| bound), the weights used as
// stored: a weight matrix [N, K] row-major is already an AMX "A" operand (16 rows × 32 bf16 per
// tile, stride K), and the activations are written once per call in the "B" operand's pair-
// interleaved layout. One tdpbf16ps is 16 × 16 × 32 multiply-adds (measured ~470 GMAC/s per core
// here, against ~30 for AVX-512 dot products).
//
// Linux hands out AMX state per process on request (arch_prctl ARCH_REQ_XCOMP_PERM, kernel 5.16+);
// where that fails (older kernels, some hypervisors) amx_usable() is false and the vdpbf16ps path
// does all the work.
#include "cpu/intrinsics.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "cpu/cpu-device.h"
#include "cpu/matmul-bf16-amx.h"
#include "cpu/simd-config.h"

namespace loom {

#if LOOM_AMX_BF16

namespace {

constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

// The tile configuration: tmm0-3 accumulators (16 rows × 16 f32), tmm4-5 weights (16 rows × 32
// bf16), tmm6-7 activations (16 k-pairs × 16 tokens × 2 bf16).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

TileConfig bf16_tiles() {
  TileConfig cfg;
  for (int i = 0; i < 8; i++) {
    cfg.rows[i] = 16;
    cfg.colsb[i] = 64;
  }
  return cfg;
}

}  // namespace

ScopedTileConfig::ScopedTileConfig(const void* config) {
  _tile_storeconfig(saved_);  // all zero (palette 0) when the thread has no configuration
  _tile_loadconfig(config);
}

ScopedTileConfig::~ScopedTileConfig() {
  if (saved_[0] != 0)
    _tile_loadconfig(saved_);
  else
    _tile_release();
}

bool amx_usable() {
  static const bool usable = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return usable;
}

void amx_pack_tokens(const uint16_t* xb, int64_t T, int64_t K32, int64_t K, uint16_t* xv) {
  // xv [ceil(T/16)][K/2][16][2]: for tile tt, k-pair p, token j: (x[16tt+j][2p], x[16tt+j][2p+1]).
  const int64_t tiles = (T + 15) / 16;
  for (int64_t tt = 0; tt < tiles; tt++) {
    uint32_t* out = reinterpret_cast<uint32_t*>(xv + tt * K * 16);
    for (int64_t j = 0; j < 16; j++) {
      const int64_t t = tt * 16 + j;
      if (t < T) {
        const uint32_t* row = reinterpret_cast<const uint32_t*>(xb + t * K32);
        for (int64_t p = 0; p < K / 2; p++) out[p * 16 + j] = row[p];
      } else {
        for (int64_t p = 0; p < K / 2; p++) out[p * 16 + j] = 0;
      }
    }
  }
}

void amx_store_tiles(const float (&c)[4][16][16], bool two_tok, bool two_rows, int64_t n, int64_t tt, int64_t T,
                     const MatmulJob& job, bool accumulate) {
  // c[a][i][j]: weight row n + 16·(a/2) + i, token 16·(tt + a%2) + j. Each token's 16 rows are
  // one column of the tile: gathered into a vector and written to y's row contiguously (a scalar
  // transpose cost as much as the tile products at K = 576).
  const __m512i column = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32(16));
  for (int a = 0; a < 4; a++) {
    if ((a & 1) && !two_tok) continue;
    if ((a & 2) && !two_rows) continue;
    const int64_t nb = n + (a & 2 ? 16 : 0), tb = (tt + (a & 1)) * 16;
    const int toks = int(std::min<int64_t>(16, T - tb));
    const __m512 bias = job.bias ? _mm512_loadu_ps(job.bias + nb) : _mm512_setzero_ps();
    for (int j = 0; j < toks; j++) {
      float* y = job.y + (tb + j) * job.ldy + nb;
      __m512 v = _mm512_add_ps(_mm512_i32gather_ps(column, &c[a][0][j], 4), bias);
      if (accumulate) v = _mm512_add_ps(v, _mm512_loadu_ps(y));
      _mm512_storeu_ps(y, v);
    }
  }
}

void amx_dot_rows(const uint16_t* xv, int64_t T, const MatmulJob& job, int64_t n0, int64_t n1, bool accumulate) {
  const int64_t K = job.w.cols;
  const uint16_t* w = static_cast<const uint16_t*>(job.w.data);
  const int64_t tiles = (T + 15) / 16;
  const int64_t tile_stride = K * 16;  // uint16 elements per token tile of xv
  const TileConfig cfg = bf16_tiles();
  const ScopedTileConfig tiles_in_use(&cfg);
  alignas(64) float c[4][16][16];
  // 32 weight rows × 32 tokens per pass: 2 A tiles, 2 B tiles, 4 accumulators.
  for (int64_t n = n0; n < n1; n += 32) {
    const bool two_rows = n + 16 < n1;  // a second 16-row tile in this block
    for (int64_t tt = 0; tt < tiles; tt += 2) {
      const bool two_tok = tt + 1 < tiles;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      const uint16_t* b0 = xv + tt * tile_stride;
      const uint16_t* b1 = two_tok ? b0 + tile_stride : b0;
      for (int64_t k = 0; k < K; k += 32) {
        _tile_loadd(4, w + n * K + k, K * 2);
        _tile_loadd(6, b0 + k * 16, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (two_tok) {
          _tile_loadd(7, b1 + k * 16, 64);
          _tile_dpbf16ps(1, 4, 7);
        }
        if (two_rows) {
          _tile_loadd(5, w + (n + 16) * K + k, K * 2);
          _tile_dpbf16ps(2, 5, 6);
          if (two_tok) _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, c[0], 64);
      if (two_tok) _tile_stored(1, c[1], 64);
      if (two_rows) _tile_stored(2, c[2], 64);
      if (two_rows && two_tok) _tile_stored(3, c[3], 64);
      amx_store_tiles(c, two_tok, two_rows, n, tt, T, job, accumulate);
    }
  }
}

#endif  // LOOM_AMX_BF16

}  // namespace loom
