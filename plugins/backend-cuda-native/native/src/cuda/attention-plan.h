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
// the first of the tile's partial records when its keys are split (-1: it writes the output).
struct AttnWorkItem {
  int32_t row, tile, key_begin, key_end, partial;
};
// A query tile whose keys are split into `nsplit` items: split s wrote the records from
// partial + s * kQueries.
struct AttnSplitGroup {
  int32_t row, tile, partial, nsplit;
};

constexpr int kWarps = 4;                           // warps per block
constexpr int kQueries = 16;                        // queries per item (block)
constexpr int kQueriesPerWarp = kQueries / kWarps;  // warp w owns queries w, w + kWarps, ...
constexpr int kKeys = 32;                           // keys per shared-memory tile: one per lane
constexpr int kMaxDimsPerLane = 8;                  // head_dim up to 256
// Least keys per split: two tiles. A decode row at batch 1 has one item per KV head (8 blocks for
// Llama-3-8B on 132 SMs), so its keys are split as finely as this to fill the GPU; the merge reads
// (D + 2) floats per split and query, little beside the split's own K/V bytes.
constexpr int kSplitKeys = 2 * kKeys;
// Blocks (items × KV heads) per SM the split aims for before it stops splitting: a 4-warp block
// with head_dim 128 takes ~41 KB of shared memory, so several fit an SM, and their loads and
// arithmetic overlap.
constexpr int kBlocksPerSm = 4;

// Shared memory of a block for head_dim D: queries [kQueries, D], K [kKeys, D + 1], V [kKeys, D]
// (f32), then the cache slots of this K/V tile and the next [2, kKeys] (int32).
inline size_t attention_smem_bytes(int D) {
  return size_t(kQueries * D + kKeys * (D + 1) + kKeys * D) * sizeof(float) + 2 * kKeys * sizeof(int32_t);
}

// The tensor-core kernel (attention-tc-kernels.cuh) for a prompt's causal rows: kTcQueries
// queries per block (4 warps of 16: the MMA's M side) over K/V tiles of kTcKeys keys.
constexpr int kTcQueries = 64;
constexpr int kTcKeys = 64;
constexpr int kTcPad = 8;  // halves of padding per shared-memory row: ldmatrix rows hit distinct banks

// Whether the tensor-core kernel takes rows of this shape: 16-bit caches (the MMA's operand types)
// and head dims it is built for.
inline bool tc_attention_shape(const AttnShape& s) {
  return (s.kv_dtype == DType::F16 || s.kv_dtype == DType::BF16) && (s.head_dim == 64 || s.head_dim == 128);
}
// Whether `row` goes to the tensor-core kernel: a causal row (a prompt or a prompt's chunk) with
// at least one full tile of queries. Decode rows, short chunks and tree rows stay on the SIMT
// kernel, which splits long histories across blocks and applies tree masks.
inline bool tc_attention_row(const AttnRow& row, const AttnShape& s) {
  return tc_attention_shape(s) && row.tree_mask == nullptr &&
         int64_t(row.n) * (s.num_heads / s.num_kv_heads) >= kTcQueries;
}
// Shared memory of a tensor-core block for head_dim D (16-bit elements, rows padded by kTcPad):
// the query tile's high and low halves [2, kTcQueries, D + pad], then K and V [2 stages, kTcKeys,
// D + pad] each.
inline size_t tc_attention_smem_bytes(int D) {
  return size_t(2 * kTcQueries + 4 * kTcKeys) * size_t(D + kTcPad) * 2;
}

// The work of one attention call (host side, where the rows are). With `tensor_cores` (the
// caches 16-byte aligned, as cp.async needs), rows the tensor-core kernel takes
// (tc_attention_row) become `tc_items`: one per kTcQueries queries, a row's last tile first, with
// its visible keys [0, key_end) (key_begin 0, partial -1). The others become `items` in row order, a row's tiles
// in order, a tile's splits in order; a tile whose keys are split gets a group naming its partial
// records. `sm_count` sizes the split (kBlocksPerSm blocks per SM). Returns the number of partial
// records (kQueries per split of every split tile); each holds Hkv × (D + 2) floats.
inline int64_t plan_attention(const AttnRow* rows, int nrows, const AttnShape& shape, int sm_count,
                              std::vector<AttnWorkItem>* items, std::vector<AttnSplitGroup>* groups,
                              bool tensor_cores, std::vector<AttnWorkItem>* tc_items) {
  items->clear();
  groups->clear();
  tc_items->clear();
  int64_t records = 0;
  const int G = shape.num_heads / shape.num_kv_heads;
  int64_t tiles = 0;
  for (int r = 0; r < nrows; r++) {
    const AttnRow& row = rows[r];
    if (!tensor_cores || !tc_attention_row(row, shape)) {
      tiles += (int64_t(row.n) * G + kQueries - 1) / kQueries;
      continue;
    }
    // Last tile first: a causal row's later tiles see more keys, and blocks start in grid order,
    // so the longest start first and the short ones fill the tail.
    const int nqueries = row.n * G;
    for (int t = (nqueries - 1) / kTcQueries; t >= 0; t--) {
      const int last_token = (std::min(nqueries, (t + 1) * kTcQueries) - 1) / G;
      tc_items->push_back({r, t, 0, row.cache_len + last_token + 1, -1});
    }
  }
  if (tiles == 0) return 0;
  // Splits per tile that would bring the grid to kBlocksPerSm blocks per SM (1: no split).
  const int64_t blocks = tiles * shape.num_kv_heads;
  const int64_t want = std::max<int64_t>(1, (int64_t(kBlocksPerSm) * sm_count + blocks - 1) / blocks);
  for (int r = 0; r < nrows; r++) {
    const AttnRow& row = rows[r];
    if (tensor_cores && tc_attention_row(row, shape)) continue;
    const int nqueries = row.n * G;
    for (int t = 0; t * kQueries < nqueries; t++) {
      // Keys the tile's queries can see: every cache entry, then the new ones up to its last token
      // (causal) or all of them (a tree mask, which may name any of the row's tokens).
      const int last_token = (std::min(nqueries, (t + 1) * kQueries) - 1) / G;
      const int key_end = row.cache_len + (row.tree_mask ? row.n : last_token + 1);
      int64_t nsplit = std::min<int64_t>(want, (key_end + kSplitKeys - 1) / kSplitKeys);
      if (nsplit <= 1) {
        items->push_back({r, t, 0, key_end, -1});
        continue;
      }
      // Whole kKeys tiles per split; rounding may leave fewer splits than asked for.
      const int chunk = int(((key_end + nsplit - 1) / nsplit + kKeys - 1) / kKeys * kKeys);
      nsplit = (key_end + chunk - 1) / chunk;
      const int first = int(records);
      groups->push_back({r, t, first, int(nsplit)});
      for (int sp = 0; sp < int(nsplit); sp++)
        items->push_back({r, t, sp * chunk, std::min(key_end, (sp + 1) * chunk), first + sp * kQueries});
      records += nsplit * kQueries;
    }
  }
  return records;
}

}  // namespace loom
