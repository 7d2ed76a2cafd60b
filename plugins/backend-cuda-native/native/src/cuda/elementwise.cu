// Row-wise and element-wise ops of the cuda device (the kernels: elementwise-kernels.cuh).
#include "cuda/cuda-device.h"
#include "cuda/elementwise-kernels.cuh"

namespace loom {

void CudaDevice::embedding(const int32_t* ids, int64_t T, const WeightView& table, float* y) {
  if (T <= 0) return;
  embedding_kernel<<<dim3(element_grid(table.cols), unsigned(T)), kElementThreads, 0, stream_>>>(ids, table.data, table.dtype,
                                                                                      table.cols, y);
  check(cudaGetLastError(), "embedding launch");
}

void CudaDevice::rmsnorm(const float* x, int64_t T, int64_t ldx, int64_t H, const float* w, float eps, float* y,
                         int64_t ldy) {
  if (T <= 0) return;
  rmsnorm_kernel<<<unsigned(T), rmsnorm_threads(H), 0, stream_>>>(x, ldx, H, w, eps, y, ldy);
  check(cudaGetLastError(), "rmsnorm launch");
}

void CudaDevice::silu_mul(const float* gate, const float* up, int64_t n, float* y) {
  if (n <= 0) return;
  silu_mul_kernel<<<element_grid(n), kElementThreads, 0, stream_>>>(gate, up, n, y);
  check(cudaGetLastError(), "silu_mul launch");
}

void CudaDevice::silu_residual(const float* t, int64_t n, float* y) {
  if (n <= 0) return;
  silu_residual_kernel<<<element_grid(n), kElementThreads, 0, stream_>>>(t, n, y);
  check(cudaGetLastError(), "silu_residual launch");
}

void CudaDevice::rope(float* x, int64_t T, int64_t ldx, int heads, int D, const float* cos, const float* sin) {
  if (T <= 0) return;
  rope_kernel<<<unsigned(T), kRowOpThreads, 0, stream_>>>(x, ldx, heads, D, cos, sin);
  check(cudaGetLastError(), "rope launch");
}

void CudaDevice::rope_tables(const int32_t* positions, int64_t T, const double* inv_freq, int64_t half, float* cos,
                             float* sin) {
  if (T <= 0 || half <= 0) return;
  rope_tables_kernel<<<dim3(blocks_for(half, kRowOpThreads), unsigned(T)), kRowOpThreads, 0, stream_>>>(positions, inv_freq, half, cos,
                                                                                    sin);
  check(cudaGetLastError(), "rope_tables launch");
}

void CudaDevice::gather_rows(const float* src, int64_t ld, const int32_t* idx, int64_t n, int64_t H, float* dst) {
  if (n <= 0) return;
  gather_rows_kernel<<<dim3(element_grid(H), unsigned(n)), kElementThreads, 0, stream_>>>(src, ld, idx, H, dst);
  check(cudaGetLastError(), "gather_rows launch");
}

void CudaDevice::kv_slots(const AttnRow* rows, int nrows, int block_size, int32_t* slot) {
  if (nrows <= 0) return;
  const void* d_rows = stage(rows, int64_t(nrows) * int64_t(sizeof(AttnRow)));
  if (!d_rows) return;
  kv_slots_kernel<<<unsigned(nrows), kRowOpThreads, 0, stream_>>>(static_cast<const AttnRow*>(d_rows), block_size, slot);
  check(cudaGetLastError(), "kv_slots launch");
}

void CudaDevice::paged_slots(const int32_t* block_table, const int32_t* idx, int64_t n, int block_size,
                             int32_t* slot) {
  if (n <= 0) return;
  paged_slots_kernel<<<element_grid(n), kElementThreads, 0, stream_>>>(block_table, idx, n, block_size, slot);
  check(cudaGetLastError(), "paged_slots launch");
}

void CudaDevice::kv_store(const float* k, const float* v, int64_t T, int64_t ldk, const int32_t* slot, int64_t E,
                          DType kv_dtype, void* kc, void* vc) {
  if (T <= 0) return;
  const dim3 grid(element_grid(E), unsigned(T));
  switch (kv_dtype) {
    case DType::F32:
      kv_store_kernel<<<grid, kElementThreads, 0, stream_>>>(k, v, ldk, slot, E, static_cast<float*>(kc),
                                                      static_cast<float*>(vc));
      break;
    case DType::F16:
      kv_store_kernel<<<grid, kElementThreads, 0, stream_>>>(k, v, ldk, slot, E, static_cast<__half*>(kc),
                                                      static_cast<__half*>(vc));
      break;
    default:
      kv_store_kernel<<<grid, kElementThreads, 0, stream_>>>(k, v, ldk, slot, E, static_cast<__nv_bfloat16*>(kc),
                                                      static_cast<__nv_bfloat16*>(vc));
  }
  check(cudaGetLastError(), "kv_store launch");
}

void CudaDevice::rope_kv_store(float* qkv, int64_t T, int64_t ldx, int q_heads, int kv_heads, int D, const float* cos,
                               const float* sin, const int32_t* slot, DType kv_dtype, void* kc, void* vc) {
  if (T <= 0) return;
  const dim3 grid(rope_kv_store_grid(q_heads, kv_heads, D), unsigned(T));
  switch (kv_dtype) {
    case DType::F32:
      rope_kv_store_kernel<<<grid, kElementThreads, 0, stream_>>>(qkv, ldx, q_heads, kv_heads, D, cos, sin, slot,
                                                                  static_cast<float*>(kc), static_cast<float*>(vc));
      break;
    case DType::F16:
      rope_kv_store_kernel<<<grid, kElementThreads, 0, stream_>>>(qkv, ldx, q_heads, kv_heads, D, cos, sin, slot,
                                                                  static_cast<__half*>(kc), static_cast<__half*>(vc));
      break;
    default:
      rope_kv_store_kernel<<<grid, kElementThreads, 0, stream_>>>(qkv, ldx, q_heads, kv_heads, D, cos, sin, slot,
                                                                  static_cast<__nv_bfloat16*>(kc),
                                                                  static_cast<__nv_bfloat16*>(vc));
  }
  check(cudaGetLastError(), "rope_kv_store launch");
}

void CudaDevice::kv_copy(const int32_t* from, const int32_t* to, int64_t n, int64_t E, DType kv_dtype, void* kc,
                         void* vc) {
  if (n <= 0) return;
  kv_copy_kernel<<<1, kKvCopyThreads, 0, stream_>>>(from, to, n, E * dtype_size(kv_dtype) / 2, static_cast<uint16_t*>(kc),
                                         static_cast<uint16_t*>(vc));
  check(cudaGetLastError(), "kv_copy launch");
}

}  // namespace loom
