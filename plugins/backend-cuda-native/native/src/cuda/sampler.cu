// Device::sample on the GPU, one block per row (the kernel and its design: sampler-kernels.cuh).
#include "cuda/cuda-device.h"
#include "cuda/sampler-kernels.cuh"

namespace loom {

void CudaDevice::sample(const float* x, int64_t ld, int64_t V, const SampleParams* params, int nrows, int max_top,
                        int32_t* token, float* logprob, int32_t* top_ids, float* top_logprobs, void* scratch) {
  if (nrows <= 0) return;
  SampleParamList list;
  if (!param_list(params, size_t(nrows), &list)) return;  // recorded in the status
  launch("sample launch", sample_kernel, nrows, kSampleThreads, 0, x, ld, V, list, max_top, token, logprob, top_ids,
         top_logprobs, static_cast<uint8_t*>(scratch), sample_row_scratch_bytes(V));
}

}  // namespace loom
