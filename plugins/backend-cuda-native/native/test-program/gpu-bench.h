// The GPU benchmark (issue 15, point 1): decode, prefill and LoRA-op speed of LlamaModel on one
// device, each figure beside its roofline, in one table. Run by gpu/bench.sh on a GPU at the
// Llama-3-8B shape; `--bench-shape tiny` runs the same code at toy sizes so the cpu device proves
// it works in `npm test` (test/gpu-bench.test.ts). See gpu-bench.cc for what each row times.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/kernel-paths.h"

namespace loom {
class Device;
}
namespace loom_test {
class QueueMarks;
}

namespace loom_bench {

struct BenchOptions {
  std::string shape = "llama3-8b";  // llama3-8b | tiny
  int threads = 2;                  // the cpu device's pool and its bandwidth probe
  int steps = 0;                    // timed steps per decode row (0: by shape: 20, tiny 5)
  uint64_t seed = 1;
  double seconds = 0;        // soft budget for the measurements after loading (0: none): rows
                             // past it are skipped and say so, so a slow first GPU run still prints
  std::string dir;           // where the weights file is written ("": /dev/shm when it has room, else TMPDIR)
  double peak_tflops = 0;    // dense bf16 peak for the prefill roofline (0: from the GPU's name)
  int layers = 0;            // override the shape's layer count (0: the shape's): a quick look at
                             // the other dimensions of the real shape on a small machine
  bool profile = false;      // for a kernel profiler (Nsight Compute with --profile-from-start off):
                             // no table; load the model, then run one step of each profiled row
                             // (prefill 1x2048, decode batch 1 and 64, base and sampled mix, batch
                             // 64 distinct adapters) between cudaProfilerStart and Stop
};

// Runs the benchmark on `dev` (owned by the caller) and prints progress lines, then the table.
// Returns 0 when every row was measured (targets may fail: they are reported, not enforced),
// 1 when a row failed (a load error or a device fault).
int run_gpu_bench(const BenchOptions& opt, loom::Device* dev);

// The cuda-only parts, in gpu-bench-cuda.cu (compiled only with the cuda device).
struct GpuInfo {
  std::string name;  // cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"
  int cc_major = 0, cc_minor = 0, sms = 0;
  double memory_gib = 0;
};
// GPU 0's properties; false with `error` set when the runtime cannot read them.
bool cuda_gpu_info(GpuInfo* out, std::string* error);
// HBM read bandwidth: a vectorised read-only kernel over a `bytes` buffer (far past the L2),
// timed with CUDA events; GB/s (1e9 bytes/s) of each of `repeats` passes after one warm-up.
bool cuda_read_bandwidth(int64_t bytes, int repeats, std::vector<double>* gbps, std::string* error);
// The cuda device's optional kernel paths (CudaDevice::kernel_paths / set_kernel_paths), for the
// rows that time a path against its fallback; false when `dev` is not the cuda device.
bool cuda_kernel_paths(loom::Device* dev, loom::CudaKernelPaths* out);
bool cuda_set_kernel_paths(loom::Device* dev, const loom::CudaKernelPaths& paths);
// Marks in the cuda device's stream (CUDA events) for the in-stream breakdown; null when `dev` is
// not the cuda device.
std::unique_ptr<loom_test::QueueMarks> cuda_queue_marks(loom::Device* dev);
// cudaProfilerStart (`on`) or cudaProfilerStop: the range a profiler started with
// --profile-from-start off collects.
void cuda_profiler_range(bool on);

}  // namespace loom_bench
