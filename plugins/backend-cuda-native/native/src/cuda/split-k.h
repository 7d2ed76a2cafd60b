// How the cuda device's decode GEMMs (the tensor-core GEMM in matmul-kernels.cuh, the skinny GEMM
// in skinny-gemm-kernels.cuh) cut K over their grid. A decode step's few tokens give few blocks
// (N/64 tiles, 64 for N = 4096, on a GPU of 132 SMs), each streaming its slab of W alone;
// splitting K until the grid holds ~2 blocks per SM keeps HBM busy. Each slice writes its partial
// to a workspace and splitk_reduce_kernel adds the slices in order (deterministic, unlike
// atomics). Header-only and free of CUDA types: the emulator plans the same cuts.
#pragma once

#include <cstdint>

namespace loom {

// Columns per K slice (a multiple of kSplitKStep) and slices (1: not split).
struct KSplit {
  int64_t chunk;
  int slices;
};

// The column step slices are cut at (both GEMMs' k-step) and the fewest steps a slice keeps.
constexpr int64_t kSplitKStep = 32, kSplitKMinSteps = 8;

// K cut for a grid of `blocks` blocks on `sms` SMs: whole from `whole_from` blocks, else enough
// slices for ~2 blocks per SM, each of at least kSplitKMinSteps steps, at most 16.
inline KSplit split_k(int64_t blocks, int64_t K, int sms, int64_t whole_from) {
  if (K <= 0) return {1, 1};
  int64_t s = blocks >= whole_from ? 1 : (2 * int64_t(sms) + blocks - 1) / blocks;
  const int64_t most = K / (kSplitKMinSteps * kSplitKStep);
  s = s < most ? s : most;
  s = s < 16 ? s : 16;
  s = s > 1 ? s : 1;
  const int64_t per = (K + s - 1) / s, chunk = (per + kSplitKStep - 1) / kSplitKStep * kSplitKStep;
  return {chunk, int((K + chunk - 1) / chunk)};
}

}  // namespace loom
