// The benchmark's own GPU code (compiled only with the cuda device): the GPU's name and the HBM
// read-bandwidth probe that the decode roofline divides by. It runs on its own buffer and the
// legacy default stream, outside the Device, while the model's stream is idle (the bench calls it
// between steps, each of which ends in Device::synchronize), so it measures the memory system
// alone; a Device op is not needed for a figure only the benchmark uses.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/cuda-device.h"
#include "gpu-bench.h"
#include "op-timing-device.h"

namespace loom_bench {
namespace {

// Semantics: acc = XOR of every 32-bit word of p[0, n) per thread; written only if it equals a
// value no buffer of zeros produces, so the compiler keeps every load and nothing is written.
// 16-byte loads, four independent ones in flight per thread per iteration (enough bytes in
// flight to cover HBM latency with a few blocks per SM), grid-stride so any grid covers n.
__global__ void read_kernel(const uint4* __restrict__ p, int64_t n, unsigned* out) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldg(p + i), b = __ldg(p + i + stride), c = __ldg(p + i + 2 * stride),
                d = __ldg(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldg(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9E3779B9u) out[0] = acc;
}

std::string cuda_error(const char* what, cudaError_t err) {
  return std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
}

// Marks as CUDA events recorded on the device's stream; the events are kept and reused from step
// to step (a step of an 8B model holds ~400 ops).
class CudaQueueMarks final : public loom_test::QueueMarks {
 public:
  explicit CudaQueueMarks(cudaStream_t stream) : stream_(stream) {}
  ~CudaQueueMarks() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  void mark() override {
    if (err_ != cudaSuccess) return;
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      err_ = cudaEventCreate(&e);
      if (err_ != cudaSuccess) return;
      events_.push_back(e);
    }
    err_ = cudaEventRecord(events_[used_], stream_);
    if (err_ == cudaSuccess) used_++;
  }
  bool take(std::vector<double>* seconds, std::string* error) override {
    seconds->clear();
    if (err_ == cudaSuccess && used_ > 0) err_ = cudaEventSynchronize(events_[used_ - 1]);
    for (size_t i = 1; err_ == cudaSuccess && i < used_; i++) {
      float ms = 0;
      err_ = cudaEventElapsedTime(&ms, events_[i - 1], events_[i]);
      seconds->push_back(double(ms) * 1e-3);
    }
    used_ = 0;
    const cudaError_t err = err_;
    err_ = cudaSuccess;
    if (err != cudaSuccess) *error = cuda_error("queue marks", err);
    return err == cudaSuccess;
  }

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
  cudaError_t err_ = cudaSuccess;
};

}  // namespace

bool cuda_gpu_info(GpuInfo* out, std::string* error) {
  cudaDeviceProp prop;
  const cudaError_t err = cudaGetDeviceProperties(&prop, 0);
  if (err != cudaSuccess) {
    *error = cuda_error("cudaGetDeviceProperties", err);
    return false;
  }
  out->name = prop.name;
  out->cc_major = prop.major;
  out->cc_minor = prop.minor;
  out->sms = prop.multiProcessorCount;
  out->memory_gib = double(prop.totalGlobalMem) / double(1ull << 30);
  return true;
}

bool cuda_read_bandwidth(int64_t bytes, int repeats, std::vector<double>* gbps, std::string* error) {
  gbps->clear();
  int sms = 0;
  cudaError_t err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int64_t n = bytes / 16;
  uint4* buf = nullptr;
  unsigned* sink = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  if (err == cudaSuccess) err = cudaMalloc(&buf, size_t(n) * 16);
  if (err == cudaSuccess) err = cudaMalloc(&sink, sizeof(unsigned));
  // Zeros: the XOR stays 0, so the sink is never written; pages are touched before timing.
  if (err == cudaSuccess) err = cudaMemset(buf, 0, size_t(n) * 16);
  if (err == cudaSuccess) err = cudaEventCreate(&start);
  if (err == cudaSuccess) err = cudaEventCreate(&stop);
  // 8 blocks of 256 threads per SM: full occupancy for this register-light kernel.
  const unsigned blocks = unsigned(std::max(1, sms) * 8);
  // Untimed passes first (~50 ms of reads at 2 GiB): the clocks ramp before the timed ones, or the
  // best pass understates the bandwidth and every roofline share above it reads too high.
  constexpr int kWarmup = 64;
  for (int r = -kWarmup; r < repeats && err == cudaSuccess; r++) {  // r < 0: warm-up
    err = cudaEventRecord(start);
    read_kernel<<<blocks, 256>>>(buf, n, sink);
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err == cudaSuccess) err = cudaEventRecord(stop);
    if (err == cudaSuccess) err = cudaEventSynchronize(stop);
    float ms = 0;
    if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, start, stop);
    if (err == cudaSuccess && r >= 0 && ms > 0) gbps->push_back(double(n) * 16 / (double(ms) * 1e-3) / 1e9);
  }
  if (err != cudaSuccess) *error = cuda_error("read-bandwidth probe", err);
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  if (buf) cudaFree(buf);
  if (sink) cudaFree(sink);
  return err == cudaSuccess && !gbps->empty();
}

bool cuda_kernel_paths(loom::Device* dev, loom::CudaKernelPaths* out) {
  auto* cuda = dynamic_cast<loom::CudaDevice*>(dev);
  if (cuda != nullptr) *out = cuda->kernel_paths();
  return cuda != nullptr;
}

bool cuda_set_kernel_paths(loom::Device* dev, const loom::CudaKernelPaths& paths) {
  auto* cuda = dynamic_cast<loom::CudaDevice*>(dev);
  if (cuda != nullptr) cuda->set_kernel_paths(paths);
  return cuda != nullptr;
}

std::unique_ptr<loom_test::QueueMarks> cuda_queue_marks(loom::Device* dev) {
  auto* cuda = dynamic_cast<loom::CudaDevice*>(dev);
  if (cuda == nullptr) return nullptr;
  return std::make_unique<CudaQueueMarks>(cuda->stream());
}

void cuda_profiler_range(bool on) { (void)(on ? cudaProfilerStart() : cudaProfilerStop()); }

}  // namespace loom_bench
