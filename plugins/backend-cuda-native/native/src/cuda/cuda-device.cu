// The cuda device's memory, staging and error handling, and the probe behind device: cuda|auto.
// Kernels live in the other .cu files of this folder.
#include "cuda/cuda-device.h"

#include <cstdio>
#include <cstring>
#include <memory>

#include "cuda/cuda-api.h"
#include "cuda/grid-dependency.cuh"

// Written by scripts/build.mjs and the test program's CMakeLists: the archs this build targets.
#if __has_include("cuda-archs.h")
#include "cuda-archs.h"
#endif
#ifndef LOOM_CUDA_ARCHS_STR
#define LOOM_CUDA_ARCHS_STR "unknown"
#endif

namespace loom {
namespace {

// The smallest kernel: launching it proves the binary holds an image (or PTX) this GPU can run.
__global__ void probe_kernel(int* out) { *out = 42; }

// Launched once with programmatic stream serialization: whether this GPU, driver and setup (a
// MIG slice, a virtual GPU) accept the attribute, before every launch depends on it.
__global__ void overlap_probe_kernel() { wait_for_prior_kernels(); }

std::string cuda_version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

Status unavailable(const std::string& message) { return Status::Error("cuda_unavailable", message); }

}  // namespace

const char* cuda_compiled_archs() { return LOOM_CUDA_ARCHS_STR; }

Status cuda_probe() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  const std::string runtime = cuda_version_text(CUDART_VERSION);
  if (err == cudaErrorInsufficientDriver || err == cudaErrorStubLibrary || err == cudaErrorSystemDriverMismatch) {
    cudaGetLastError();
    return unavailable("no usable NVIDIA driver (" + std::string(cudaGetErrorName(err)) +
                       "): the driver is missing or older than the CUDA " + runtime +
                       " runtime this build links. Fix: install or update the NVIDIA driver (nvidia-smi must list "
                       "the GPU and a CUDA version >= " + runtime + "), or set `device: cpu`");
  }
  if (err == cudaErrorNoDevice || (err == cudaSuccess && count == 0)) {
    cudaGetLastError();
    return unavailable("no CUDA GPU is visible (" + std::string(cudaGetErrorName(err)) +
                       "). Fix: check `nvidia-smi` and CUDA_VISIBLE_DEVICES (and the container's --gpus flag), or "
                       "set `device: cpu`");
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    return unavailable(std::string("the CUDA runtime cannot start (") + cudaGetErrorName(err) + ": " +
                       cudaGetErrorString(err) + "). Fix: check the driver with `nvidia-smi`, or set `device: cpu`");
  }
  cudaDeviceProp prop;
  if ((err = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess || (err = cudaSetDevice(0)) != cudaSuccess)
    return unavailable(std::string("GPU 0 cannot be opened (") + cudaGetErrorName(err) + ": " +
                       cudaGetErrorString(err) + "). Fix: check `nvidia-smi`, or set `device: cpu`");
  const std::string sm = "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
  if (prop.major < 8)
    return unavailable(std::string("GPU 0 (") + prop.name + ", " + sm +
                       ") is older than the sm_80 (Ampere) this runtime's bf16 tensor-core kernels need. Fix: use "
                       "an A100/A10/L4/L40/H100-class GPU, or set `device: cpu`");
  int* flag = nullptr;
  if ((err = cudaMalloc(&flag, sizeof(int))) != cudaSuccess)
    return unavailable(std::string("cannot allocate on GPU 0 (") + cudaGetErrorName(err) +
                       "). Fix: free GPU memory (see `nvidia-smi`), or set `device: cpu`");
  probe_kernel<<<1, 1>>>(flag);
  err = cudaGetLastError();
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  int got = 0;
  if (err == cudaSuccess) err = cudaMemcpy(&got, flag, sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(flag);
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidPtx || err == cudaErrorUnsupportedPtxVersion) {
    cudaGetLastError();
    return unavailable(std::string("this build has no kernel image for GPU 0 (") + prop.name + ", " + sm +
                       "; " + cudaGetErrorName(err) + "): it was compiled for " + LOOM_CUDA_ARCHS_STR +
                       ". Fix: rebuild with LOOM_CUDA_ARCHS=" + std::to_string(prop.major) +
                       std::to_string(prop.minor) + " node plugins/backend-cuda-native/scripts/build.mjs (or update "
                       "the driver, if the PTX is newer than it), or set `device: cpu`");
  }
  if (err != cudaSuccess || got != 42) {
    cudaGetLastError();
    return unavailable(std::string("a test kernel failed on GPU 0 (") + prop.name + ", " + sm + ": " +
                       cudaGetErrorName(err) + "). Fix: check the GPU with `nvidia-smi`, or set `device: cpu`");
  }
  return Status::Ok();
}

Status create_cuda_device(std::unique_ptr<Device>* out) {
  CudaKernelPaths paths;
  std::string bad_paths;
  if (!cuda_kernel_paths_from_env(&paths, &bad_paths)) return unavailable(bad_paths);
  cudaDeviceProp prop;
  cudaStream_t stream = nullptr;
  cudaError_t err = cudaSetDevice(0);
  if (err == cudaSuccess) err = cudaGetDeviceProperties(&prop, 0);
  if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (err != cudaSuccess)
    return unavailable(std::string("cannot create a CUDA stream on GPU 0 (") + cudaGetErrorName(err) + ")");
  auto dev = std::make_unique<CudaDevice>(0, stream, prop, paths);
  Status st = dev->take_status();
  if (!st.ok()) return st;
  *out = std::move(dev);
  return Status::Ok();
}

CudaDevice::CudaDevice(int ordinal, cudaStream_t stream, const cudaDeviceProp& prop, const CudaKernelPaths& paths)
    : ordinal_(ordinal),
      stream_(stream),
      sm_count_(prop.multiProcessorCount),
      pdl_capable_(prop.major >= 9),
      gpu_name_(prop.name),
      paths_(paths) {
  // Freed memory stays in the stream-ordered pool instead of going back to the driver at every
  // synchronize: steps allocate and free their scratch at the same sizes again and again.
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, ordinal) == cudaSuccess) {
    uint64_t keep = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  if (pdl_capable_) {
    cudaError_t err = launch_kernel(stream_, true, overlap_probe_kernel, dim3(1), dim3(32), 0);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream_);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // not a fault: launches go without the attribute
      pdl_capable_ = false;
    }
  }
  wgmma_capable_ = cuda_wgmma_supported(stream_);
  check(cudaMallocHost(&stage_host_, size_t(kStageBytes)), "cudaMallocHost (staging ring)");
  check(cudaMalloc(&stage_dev_, size_t(kStageBytes)), "cudaMalloc (staging ring)");
}

CudaDevice::~CudaDevice() {
  cudaStreamSynchronize(stream_);
  for (GrowingBuffer* b : {&attn_partials_, &attn_arrivals_, &lora_partials_, &split_partials_, &prefill_x_, &tc_x_})
    if (b->data) cudaFree(b->data);
  for (auto& r : staged_) cudaEventDestroy(r.done);
  for (auto e : free_events_) cudaEventDestroy(e);
  if (stage_host_) cudaFreeHost(stage_host_);
  if (stage_dev_) cudaFree(stage_dev_);
  cudaStreamDestroy(stream_);
}

bool CudaDevice::check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  std::lock_guard<std::mutex> lock(status_mu_);
  if (status_.ok())
    status_ = Status::Error("native_error", std::string("cuda: ") + what + " failed on " + gpu_name_ + ": " +
                                                cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  return false;
}

Status CudaDevice::take_status() {
  // Launch errors surface at the launch; faults inside kernels surface at the next sync point.
  const cudaError_t last = cudaGetLastError();
  if (last != cudaErrorNotReady) check(last, "a kernel launch");  // NotReady (an event query) is no fault
  std::lock_guard<std::mutex> lock(status_mu_);
  Status st = status_;
  status_ = Status::Ok();
  return st;
}

void* CudaDevice::alloc(int64_t bytes) {
  void* p = nullptr;
  // cudaMallocAsync returns 256-byte aligned memory (the contract's alignment), ordered on the
  // stream: memory freed by release() is reused only after the ops queued before it.
  if (cudaMallocAsync(&p, size_t(bytes > 0 ? bytes : 1), stream_) != cudaSuccess) {
    cudaGetLastError();  // out of memory is reported by the nullptr, not kept as a device fault
    return nullptr;
  }
  return p;
}

void CudaDevice::release(void* p) {
  if (p) check(cudaFreeAsync(p, stream_), "cudaFreeAsync");
}

void* CudaDevice::grow(GrowingBuffer* buf, int64_t bytes) {
  if (bytes <= buf->bytes) return buf->data;
  release(buf->data);
  buf->data = alloc(bytes);
  buf->bytes = buf->data ? bytes : 0;
  return buf->data;
}

void CudaDevice::upload(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) check(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyHostToDevice, stream_), "upload");
}

void CudaDevice::download(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) check(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDeviceToHost, stream_), "download");
}

void CudaDevice::copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) check(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDeviceToDevice, stream_), "copy");
}

void CudaDevice::zero(void* dst, int64_t bytes) {
  if (bytes > 0) check(cudaMemsetAsync(dst, 0, size_t(bytes), stream_), "zero");
}

Status CudaDevice::synchronize() {
  check(cudaStreamSynchronize(stream_), "synchronize");
  return take_status();
}

bool CudaDevice::event_done(cudaEvent_t ev) {
  const cudaError_t q = cudaEventQuery(ev);
  // Not ready is an answer, not a fault, but the runtime also keeps it as this thread's last
  // error: clear it, or the next launch's cudaGetLastError check would report it as that
  // launch's failure.
  if (q == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  return check(q, "staging query");
}

void* CudaDevice::stage(const void* src, int64_t bytes) {
  if (!stage_host_ || !stage_dev_) return nullptr;
  const int64_t size = (bytes + 255) & ~int64_t(255);
  if (size > kStageBytes) {
    std::lock_guard<std::mutex> lock(status_mu_);
    if (status_.ok())
      status_ = Status::Error("native_error", "cuda: a call description of " + std::to_string(bytes) +
                                                  " bytes exceeds the staging ring (" +
                                                  std::to_string(kStageBytes) + " bytes)");
    return nullptr;
  }
  int64_t off = stage_head_;
  if (off + size > kStageBytes) {
    stage_written_ += uint64_t(kStageBytes - off);  // the skipped end counts as written
    off = 0;
  }
  const int64_t end = off + size;
  // The stream completes copies in order, so once the newest staged range overlapping [off, end)
  // is done, every older one is too: wait for that one (whatever the ring's wrap left where),
  // then recycle the front ranges that are done.
  size_t retire = 0;
  for (size_t i = staged_.size(); i-- > 0;) {
    const StagedRange& r = staged_[i];
    if (r.start < end && off < r.end) {
      check(cudaEventSynchronize(r.done), "staging wait");
      retire = i + 1;
      break;
    }
  }
  while (!staged_.empty()) {
    if (retire == 0 && !event_done(staged_.front().done)) break;
    free_events_.push_back(staged_.front().done);
    staged_.pop_front();
    if (retire > 0) retire--;
  }
  std::memcpy(stage_host_ + off, src, size_t(bytes));
  if (!check(cudaMemcpyAsync(stage_dev_ + off, stage_host_ + off, size_t(bytes), cudaMemcpyHostToDevice, stream_),
             "staging copy"))
    return nullptr;
  cudaEvent_t ev;
  if (!free_events_.empty()) {
    ev = free_events_.back();
    free_events_.pop_back();
  } else if (!check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate")) {
    return nullptr;
  }
  check(cudaEventRecord(ev, stream_), "cudaEventRecord");
  staged_.push_back({off, end, ev});
  stage_head_ = end;
  stage_written_ += uint64_t(size);
  return stage_dev_ + off;
}

void* CudaDevice::stage_reusing(StagedCopy* last, const void* src, int64_t bytes) {
  const int64_t size = (bytes + 255) & ~int64_t(255);
  const bool intact = last->device != nullptr && stage_written_ - last->written_end <= uint64_t(kStageBytes - size);
  if (intact && int64_t(last->bytes.size()) == bytes && std::memcmp(last->bytes.data(), src, size_t(bytes)) == 0)
    return last->device;
  last->device = static_cast<uint8_t*>(stage(src, bytes));
  last->bytes.assign(static_cast<const uint8_t*>(src), static_cast<const uint8_t*>(src) + bytes);
  last->written_end = stage_written_;
  return last->device;
}

}  // namespace loom
