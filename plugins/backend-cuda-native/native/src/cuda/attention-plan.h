// The host side of the cuda device's attention (attention.cu, attention-kernels.cuh,
// attention-tc-kernels.cuh): the work items one call is cut into, which rows take the tensor-core
// kernel, and the constants the kernels and the plan share. Plain C++, so the
// device's header and the test program's emulated build can include it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace loom {

// One query tile of one row over a slice of its visible keys [key_begin, key_end); `partial` is
// the first of the tile's partial records when its keys are split (-1: it writes the output), and
// `group` its split group (the index of its AttnSplitGroup; -1 when not split).
// The tile's queries are q0 = tile · (the kernel's tile size) .. q0 + nq of the row's n·G.
struct AttnWorkItem {
  int32_t row, tile, key_begin, key_end, partial, group;
};
// A query tile (queries q0 .. q0 + nq of its row) whose keys are split into `nsplit` items:
// split s wrote query qq's record at partial + s·nq + qq.
struct AttnSplitGroup {
  int32_t row, q0, nq, partial, nsplit;
};

// The SIMT kernel (attention-kernels.cuh): f32 caches, and head dims the tensor-core kernel is
// not built for.
constexpr int kWarps = 4;                           // warps per block
constexpr int kQueries = 16;                        // queries per item (block)
constexpr int kQueriesPerWarp = kQueries / kWarps;  // warp w owns queries w, w + kWarps, ...
constexpr int kKeys = 32;                           // keys per shared-memory tile: one per lane
constexpr int kMaxDimsPerLane = 8;                  // head_dim up to 256

// Shared memory of a block for head_dim D: queries [kQueries, D], K [kKeys, D + 1], V [kKeys, D]
// (f32), then the cache slots of this K/V tile and the next [2, kKeys] (int32).
inline size_t attention_smem_bytes(int D) {
  return size_t(kQueries * D + kKeys * (D + 1) + kKeys * D) * sizeof(float) + 2 * kKeys * sizeof(int32_t);
}

// The tensor-core kernel (attention-tc-kernels.cuh): 16-bit caches (the MMA's operand types) at
// head dims 64 and 128, which is every call of the cuda device at the models it serves (its
// caches are f16). kTcQueries queries per block (4 warps of 16: the MMA's M side), K/V tiles of
// kTcKeys keys.
constexpr int kTcQueries = 64;
constexpr int kTcKeys = 64;
constexpr int kTcPad = 8;  // halves of padding per shared-memory row: ldmatrix rows hit distinct banks

inline bool tc_attention_shape(const AttnShape& s) {
  return (s.kv_dtype == DType::F16 || s.kv_dtype == DType::BF16) && (s.head_dim == 64 || s.head_dim == 128);
}
// Shared memory of a tensor-core block for head_dim D (16-bit elements, rows padded by kTcPad):
// the query tile's high and low halves [2, kTcQueries, D + pad], then K and V [2 stages, kTcKeys,
// D + pad] each.
inline size_t tc_attention_smem_bytes(int D) {
  return size_t(2 * kTcQueries + 4 * kTcKeys) * size_t(D + kTcPad) * 2;
}

// How a call is cut for its kernel: queries per tile, and the keys a split covers at least (two
// SIMT tiles, one tensor-core tile) and in multiples of (one tile). A decode row at batch 1 has
// one item per KV head (8 blocks for Llama-3-8B on 132 SMs), so its keys are split as finely as
// this to fill the GPU; the merge reads (D + 2) floats per split and query, little beside the
// split's own K/V bytes.
struct AttnTiling {
  int queries, split_keys, key_tile;
  bool tensor_cores;
};
// The kernel of a call: the tensor-core one for its shapes when the caches are 16-byte aligned
// (its cp.async reads; device allocations always are) and `tensor_cores` allows it
// (CudaKernelPaths::tc_attention), else the SIMT one.
inline AttnTiling attention_tiling(const AttnShape& s, const void* kc, const void* vc, bool tensor_cores) {
  const bool aligned = ((reinterpret_cast<uintptr_t>(kc) | reinterpret_cast<uintptr_t>(vc)) & 15) == 0;
  if (tensor_cores && aligned && tc_attention_shape(s)) return {kTcQueries, kTcKeys, kTcKeys, true};
  return {kQueries, 2 * kKeys, kKeys, false};
}
// Blocks (items × KV heads) per SM the split aims for before it stops splitting: several blocks
// of either kernel fit an SM, and their loads and arithmetic overlap.
constexpr int kBlocksPerSm = 4;

// The work of one attention call (host side, where the rows are), for the kernel `tiling` names
// (attention_tiling): items in row order, a row's tiles in order (the tensor-core kernel's in
// reverse: a causal prompt's later tiles see more keys, and blocks start in grid order, so the
// longest start first), a tile's splits in order; a tile whose keys are split gets a group naming
// its partial records. `sm_count` sizes the split (kBlocksPerSm blocks per SM). Returns the
// number of partial records (a split tile's queries per split); each holds Hkv × (D + 2) floats.
inline int64_t plan_attention(const AttnRow* rows, int nrows, const AttnShape& shape, const AttnTiling& tiling,
                              int sm_count, std::vector<AttnWorkItem>* items, std::vector<AttnSplitGroup>* groups) {
  items->clear();
  groups->clear();
  int64_t records = 0;
  const int G = shape.num_heads / shape.num_kv_heads;
  const int Q = tiling.queries;
  int64_t tiles = 0;
  for (int r = 0; r < nrows; r++) tiles += (int64_t(rows[r].n) * G + Q - 1) / Q;
  if (tiles == 0) return 0;
  // Splits per tile that would bring the grid to kBlocksPerSm blocks per SM (1: no split).
  const int64_t blocks = tiles * shape.num_kv_heads;
  const int64_t want = std::max<int64_t>(1, (int64_t(kBlocksPerSm) * sm_count + blocks - 1) / blocks);
  const bool last_first = tiling.tensor_cores;
  for (int r = 0; r < nrows; r++) {
    const AttnRow& row = rows[r];
    const int nqueries = row.n * G, ntiles = (nqueries + Q - 1) / Q;
    for (int i = 0; i < ntiles; i++) {
      const int t = last_first ? ntiles - 1 - i : i;
      const int q0 = t * Q, nq = std::min(Q, nqueries - q0);
      // Keys the tile's queries can see: every cache entry, then the new ones up to its last token
      // (causal) or all of them (a tree mask, which may name any of the row's tokens).
      const int last_token = (q0 + nq - 1) / G;
      const int key_end = row.cache_len + (row.tree_mask ? row.n : last_token + 1);
      int64_t nsplit = std::min<int64_t>(want, (key_end + tiling.split_keys - 1) / tiling.split_keys);
      if (nsplit <= 1) {
        items->push_back({r, t, 0, key_end, -1, -1});
        continue;
      }
      // Whole key tiles per split; rounding may leave fewer splits than asked for.
      const int chunk = int(((key_end + nsplit - 1) / nsplit + tiling.key_tile - 1) / tiling.key_tile * tiling.key_tile);
      nsplit = (key_end + chunk - 1) / chunk;
      const int first = int(records), group = int(groups->size());
      groups->push_back({r, q0, nq, first, int(nsplit)});
      for (int sp = 0; sp < int(nsplit); sp++)
        items->push_back({r, t, sp * chunk, std::min(key_end, (sp + 1) * chunk), first + sp * nq, group});
      records += nsplit * nq;
    }
  }
  return records;
}

}  // namespace loom
