// The cuda device's ops over logits rows: argmax, top-k, log-sum-exp and the tree walk, one block
// per row (the kernels and their design: vocab-kernels.cuh).
#include "cuda/cuda-device.h"
#include "cuda/vocab-kernels.cuh"

namespace loom {

void CudaDevice::argmax(const float* x, int64_t T, int64_t ld, int64_t V, int32_t* out) {
  if (T <= 0) return;
  launch("argmax launch", argmax_kernel, unsigned(T), kRowThreads, 0, x, ld, V, out);
}

void CudaDevice::top_k(const float* x, int64_t T, int64_t ld, int64_t V, int K, const int32_t* ids, int32_t* out) {
  if (T <= 0 || K <= 0) return;
  launch("top_k launch", top_k_kernel, unsigned(T), kRowThreads, 0, x, ld, V, K, ids, out);
}

void CudaDevice::log_sum_exp(const float* x, int64_t T, int64_t ld, int64_t V, double* out) {
  if (T <= 0) return;
  launch("log_sum_exp launch", log_sum_exp_kernel, unsigned(T), kRowThreads, 0, x, ld, V, out);
}

void CudaDevice::tree_walk(const int32_t* tokens, const int32_t* argmax, const LeafRow* rows, int nrows,
                             int32_t* leaf) {
  if (nrows <= 0) return;
  LeafRowList list;
  if (!param_list(rows, size_t(nrows), &list)) return;
  launch("tree_walk launch", tree_walk_kernel, blocks_for(nrows, 64), 64, 0, tokens, argmax, list, nrows, leaf);
}

}  // namespace loom
