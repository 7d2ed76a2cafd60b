// The host side of the cuda device's multi-LoRA ops (lora.cu, lora-kernels.cuh): the items a
// launch reads, the launch shapes and the plans that choose them. Plain C++, so the device's
// header and the test program's emulated build can include it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/param-list.h"
#include "kernels/kernels.h"

namespace loom {

// One segment as the kernels see it (host LoraSegment plus where its expand writes).
struct LoraItem {
  int32_t tok_start, tok_count, rank, col;
  const void* w;
  DType dtype;
  float scale;
  float* y;
  int64_t ldy, N;
};

// The items of one launch as its kernel reads them (param-list.h). A staged copy sits between the
// projection before it and the shrink, and at small batches costs about what the two LoRA kernels
// do. 24 items inline cover q|k|v of 8 distinct adapters (gate|up of 12, o or down of 24); the
// parameters stay under 1.5 KB.
constexpr int kLoraInlineItems = 24;
using LoraItemList = ParamList<LoraItem, kLoraInlineItems>;

constexpr int kShrinkWarps = 8, kShrinkKTile = 512;
constexpr int kExpandThreads = 128, kExpandCols = kExpandThreads * 8, kMaxRank = 128;

// One launch of either kernel: its items, the grid, and the template choice (tokens per
// block, 16-byte loads or not). A shrink's grid.y is rank groups × K slices; `t_span` is one past
// the last token of any segment (a partial plane holds t_span rows of ldt floats).
struct LoraLaunch {
  std::vector<LoraItem> items;
  unsigned grid_x = 0, grid_y = 0, grid_z = 0;
  int tok = 1;
  bool vec = false;
  int rgroups = 1, ksplit = 1;
  int64_t kslice = 0, t_span = 0;
};

inline bool lora_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
inline int lora_tokens_per_block(int max_tok) { return max_tok <= 1 ? 1 : max_tok <= 4 ? 4 : 8; }

// The shrink of `segs` (false: nothing to run), over K in slices of one K tile when `split` (the
// partial planes lora_apply's expand adds), else whole.
inline bool plan_lora_shrink(int64_t K, const LoraSegment* segs, int nsegs, bool split, LoraLaunch* out) {
  out->items.resize(size_t(nsegs));
  int max_rank = 0, max_tok = 0;
  int64_t t_span = 0;
  bool vec = K % 8 == 0;
  for (int i = 0; i < nsegs; i++) {
    const LoraSegment& s = segs[i];
    out->items[size_t(i)] = {s.tok_start, s.tok_count, s.rank, s.col, s.w, s.dtype, s.scale, nullptr, 0, 0};
    max_rank = std::max(max_rank, s.rank);
    max_tok = std::max(max_tok, s.tok_count);
    t_span = std::max<int64_t>(t_span, int64_t(s.tok_start) + s.tok_count);
    vec = vec && lora_aligned16(s.w);
  }
  if (max_rank <= 0 || max_tok <= 0 || K <= 0) return false;
  out->tok = lora_tokens_per_block(max_tok);
  out->vec = vec;
  out->rgroups = (max_rank + kShrinkWarps - 1) / kShrinkWarps;
  out->kslice = split ? kShrinkKTile : K;
  out->ksplit = int((K + out->kslice - 1) / out->kslice);
  out->t_span = t_span;
  out->grid_x = unsigned(nsegs);
  out->grid_y = unsigned(out->rgroups * out->ksplit);
  out->grid_z = unsigned((max_tok + out->tok - 1) / out->tok);
  return true;
}

// The items of lora_expand (every segment writes y) and of lora_apply's expand (each segment
// writes its module's output).
inline void lora_expand_items(const LoraSegment* segs, int nsegs, float* y, int64_t ldy, int64_t N, LoraLaunch* out) {
  out->items.resize(size_t(nsegs));
  for (int i = 0; i < nsegs; i++) {
    const LoraSegment& s = segs[i];
    out->items[size_t(i)] = {s.tok_start, s.tok_count, s.rank, s.col, s.w, s.dtype, s.scale, y, ldy, N};
  }
}
inline void lora_apply_items(const LoraSegment* expand, const int* module, int nsegs, const LoraOutput* outs,
                             LoraLaunch* out) {
  out->items.resize(size_t(nsegs));
  for (int i = 0; i < nsegs; i++) {
    const LoraSegment& s = expand[i];
    const LoraOutput& o = outs[module[i]];
    out->items[size_t(i)] = {s.tok_start, s.tok_count, s.rank, s.col, s.w, s.dtype, s.scale, o.y, o.ldy, o.N};
  }
}

// The expand of `out->items` (lora_expand_items or lora_apply_items); false: nothing to run.
inline bool plan_lora_expand(LoraLaunch* out) {
  int max_tok = 0, max_rank = 0;
  int64_t max_n = 0;
  bool vec = true;
  for (const LoraItem& it : out->items) {
    max_tok = std::max(max_tok, it.tok_count);
    max_rank = std::max(max_rank, it.rank);
    max_n = std::max(max_n, it.N);
    vec = vec && it.N % 8 == 0 && lora_aligned16(it.w);
  }
  if (out->items.empty() || max_tok <= 0 || max_rank <= 0 || max_n <= 0) return false;
  out->tok = lora_tokens_per_block(max_tok);
  out->vec = vec;
  out->grid_x = unsigned(out->items.size());
  out->grid_y = unsigned((max_n + kExpandCols - 1) / kExpandCols);
  out->grid_z = unsigned((max_tok + out->tok - 1) / out->tok);
  return true;
}

}  // namespace loom
