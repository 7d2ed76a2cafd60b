// The best (value, index) of a logits row across a block: argmax, top-k and the sampler's
// reductions (vocab-kernels.cuh, sampler-kernels.cuh).
#pragma once

#include <climits>

#include "cuda/simt-compat.cuh"

namespace loom {

// (value, index) ordered by value descending, then index ascending; idx INT_MAX is "none".
struct Pick {
  float v;
  int idx;
};

__device__ __forceinline__ bool better(float v, int i, const Pick& b) {
  return b.idx == INT_MAX || v > b.v || (v == b.v && i < b.idx);
}

// Block-wide best Pick (every thread gets it). `scratch` holds one Pick per warp.
inline __device__ Pick block_best(Pick p, Pick* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Pick q{__shfl_xor_sync(0xffffffffu, p.v, o), __shfl_xor_sync(0xffffffffu, p.idx, o)};
    if (q.idx != INT_MAX && better(q.v, q.idx, p)) p = q;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = p;
  __syncthreads();
  Pick best = scratch[0];
  for (int w = 1; w < int(blockDim.x >> 5); w++)
    if (scratch[w].idx != INT_MAX && better(scratch[w].v, scratch[w].idx, best)) best = scratch[w];
  return best;
}

}  // namespace loom
