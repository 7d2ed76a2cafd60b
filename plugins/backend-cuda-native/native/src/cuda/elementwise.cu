// Row-wise and element-wise ops of the cuda device (the kernels: elementwise-kernels.cuh).
#include "cuda/cuda-device.h"
#include "cuda/elementwise-kernels.cuh"

namespace loom {

void CudaDevice::embedding(const int32_t* ids, int64_t T, const WeightView& table, float* y) {
  if (T <= 0) return;
  launch("embedding launch", embedding_kernel, dim3(element_grid(table.cols), unsigned(T)), kElementThreads, 0, ids,
         table.data, table.dtype, table.cols, y);
}

void CudaDevice::rmsnorm(const float* x, int64_t T, int64_t ldx, int64_t H, const float* w, float eps, float* y,
                         int64_t ldy) {
  rmsnorm_rows(x, T, ldx, H, w, eps, y, ldy, nullptr, 0);
}

void CudaDevice::rmsnorm_rows(const float* x, int64_t T, int64_t ldx, int64_t H, const float* w, float eps, float* y,
                              int64_t ldy, uint16_t* yb, int64_t ldyb) {
  if (T <= 0) return;
  launch("rmsnorm launch", rmsnorm_kernel, unsigned(T), rmsnorm_threads(H), 0, x, ldx, H, w, eps, y, ldy, yb, ldyb);
}

void CudaDevice::silu_mul(const float* gate, const float* up, int64_t n, float* y) {
  if (n <= 0) return;
  // A quarter of the threads where the kernel takes 4 elements at a time; the grid-stride loop
  // covers n either way.
  launch("silu_mul launch", silu_mul_kernel, element_grid((n + 3) / 4), kElementThreads, 0, gate, up, n, y);
}

void CudaDevice::silu_residual(const float* t, int64_t n, float* y) {
  if (n <= 0) return;
  launch("silu_residual launch", silu_residual_kernel, element_grid(n), kElementThreads, 0, t, n, y);
}

void CudaDevice::rope(float* x, int64_t T, int64_t ldx, int heads, int D, const float* cos, const float* sin) {
  if (T <= 0) return;
  launch("rope launch", rope_kernel, unsigned(T), kRowOpThreads, 0, x, ldx, heads, D, cos, sin);
}

void CudaDevice::rope_tables(const int32_t* positions, int64_t T, const double* inv_freq, int64_t half, float* cos,
                             float* sin) {
  if (T <= 0 || half <= 0) return;
  launch("rope_tables launch", rope_tables_kernel, dim3(blocks_for(half, kRowOpThreads), unsigned(T)), kRowOpThreads, 0,
         positions, inv_freq, half, cos, sin);
}

void CudaDevice::gather_rows(const float* src, int64_t ld, const int32_t* idx, int64_t n, int64_t H, float* dst) {
  if (n <= 0) return;
  launch("gather_rows launch", gather_rows_kernel, dim3(element_grid(H), unsigned(n)), kElementThreads, 0, src, ld, idx,
         H, dst);
}

void CudaDevice::kv_slots(const AttnRow* rows, int nrows, int block_size, int32_t* slot) {
  if (nrows <= 0) return;
  KvSlotRowList list;
  if (!param_list(rows, size_t(nrows), &list)) return;
  launch("kv_slots launch", kv_slots_kernel, unsigned(nrows), kRowOpThreads, 0, list, block_size, slot);
}

void CudaDevice::paged_slots(const int32_t* block_table, const int32_t* idx, int64_t n, int block_size,
                             int32_t* slot) {
  if (n <= 0) return;
  launch("paged_slots launch", paged_slots_kernel, element_grid(n), kElementThreads, 0, block_table, idx, n, block_size,
         slot);
}

void CudaDevice::kv_store(const float* k, const float* v, int64_t T, int64_t ldk, const int32_t* slot, int64_t E,
                          DType kv_dtype, void* kc, void* vc) {
  if (T <= 0) return;
  const dim3 grid(element_grid(E), unsigned(T));
  switch (kv_dtype) {
    case DType::F32:
      launch("kv_store launch", kv_store_kernel<float>, grid, kElementThreads, 0, k, v, ldk, slot, E,
             static_cast<float*>(kc), static_cast<float*>(vc));
      break;
    case DType::F16:
      launch("kv_store launch", kv_store_kernel<__half>, grid, kElementThreads, 0, k, v, ldk, slot, E,
             static_cast<__half*>(kc), static_cast<__half*>(vc));
      break;
    default:
      launch("kv_store launch", kv_store_kernel<__nv_bfloat16>, grid, kElementThreads, 0, k, v, ldk, slot, E,
             static_cast<__nv_bfloat16*>(kc), static_cast<__nv_bfloat16*>(vc));
  }
}

void CudaDevice::rope_kv_store(float* qkv, int64_t T, int64_t ldx, int q_heads, int kv_heads, int D, const float* cos,
                               const float* sin, const int32_t* slot, DType kv_dtype, void* kc, void* vc) {
  if (T <= 0) return;
  const dim3 grid(rope_kv_store_grid(q_heads, kv_heads, D), unsigned(T));
  switch (kv_dtype) {
    case DType::F32:
      launch("rope_kv_store launch", rope_kv_store_kernel<float>, grid, kElementThreads, 0, qkv, ldx, q_heads, kv_heads,
             D, cos, sin, slot, static_cast<float*>(kc), static_cast<float*>(vc));
      break;
    case DType::F16:
      launch("rope_kv_store launch", rope_kv_store_kernel<__half>, grid, kElementThreads, 0, qkv, ldx, q_heads,
             kv_heads, D, cos, sin, slot, static_cast<__half*>(kc), static_cast<__half*>(vc));
      break;
    default:
      launch("rope_kv_store launch", rope_kv_store_kernel<__nv_bfloat16>, grid, kElementThreads, 0, qkv, ldx, q_heads,
             kv_heads, D, cos, sin, slot, static_cast<__nv_bfloat16*>(kc), static_cast<__nv_bfloat16*>(vc));
  }
}

void CudaDevice::kv_copy(const int32_t* from, const int32_t* to, int64_t n, int64_t E, DType kv_dtype, void* kc,
                         void* vc) {
  if (n <= 0) return;
  launch("kv_copy launch", kv_copy_kernel, 1, kKvCopyThreads, 0, from, to, n, E * dtype_size(kv_dtype) / 2,
         static_cast<uint16_t*>(kc), static_cast<uint16_t*>(vc));
}

}  // namespace loom
