// Which of the cuda device's optional kernel paths it may take. Every path is on by default; the
// environment variable LOOM_CUDA_DISABLE (a comma-separated list of the names below) turns named
// ones off. Two uses: an escape hatch should a newer kernel misbehave on some GPU or driver (the
// fallback is the kernel that path replaced, which takes every shape), and A/B timing of a path
// against its fallback in one process (gpu-bench.cc re-times rows with each path off).
//
// Header-only and free of CUDA types: the test program's SIMT emulator honours the same switches.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>

namespace loom {

struct CudaKernelPaths {
  // attention-tc-kernels.cuh for 16-bit caches at head dims 64/128; off: the SIMT flash kernel.
  bool tc_attention = true;
  // gemm_tc_kernel for decode batches of 33-64, 16-64 with skinny-gemm off (matmul-kernels.cuh);
  // off: the SIMT tiles.
  bool tc_gemm = true;
  // gemm_skinny_kernel for decode batches of 5-32 (skinny-gemm-kernels.cuh); off: the GEMV below
  // 16 tokens, gemm_tc_kernel from 16.
  bool skinny_gemm = true;
  // Programmatic dependent launch on sm_90+ (grid-dependency.cuh): each kernel's blocks may start
  // while the one before it finishes; off: the stream's plain order (each kernel starts after the
  // previous one has drained).
  bool pdl = true;
  // Device::rmsnorm_matmul's norm folded into the GEMV's read of x (matmul-kernels.cuh:
  // GemvNorm) at 1-4 tokens, and for a prompt whose projections all take the prefill GEMM, the
  // norm writing that GEMM's bf16 x (norm_rounds_prefill_x); off: an rmsnorm launch, then the
  // projection (which rounds x itself).
  bool fused_norm = true;
  // gemm_wgmma_kernel for the prefill path's large jobs on sm_90a (wgmma-gemm-kernels.cuh); off:
  // the mma.sync prefill GEMM. A device whose binary has no sm_90a code never takes it.
  bool wgmma = true;
  // The TMA-fed, warp-specialized form of that GEMM (gemm_wgmma_tma_kernel); off: its cp.async-fed
  // form (gemm_wgmma_kernel).
  bool tma = true;
};

// Each path's name in LOOM_CUDA_DISABLE, and its switch.
struct CudaKernelPathName {
  const char* name;
  bool CudaKernelPaths::*flag;
};
constexpr CudaKernelPathName kCudaKernelPathNames[] = {
    {"tc-attention", &CudaKernelPaths::tc_attention}, {"tc-gemm", &CudaKernelPaths::tc_gemm},
    {"skinny-gemm", &CudaKernelPaths::skinny_gemm},   {"pdl", &CudaKernelPaths::pdl},
    {"fused-norm", &CudaKernelPaths::fused_norm},     {"wgmma", &CudaKernelPaths::wgmma},
    {"tma", &CudaKernelPaths::tma},
};

// The names LOOM_CUDA_DISABLE accepts, comma-separated, for messages.
inline std::string cuda_kernel_path_names() {
  std::string names;
  for (const CudaKernelPathName& p : kCudaKernelPathNames) names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

// Parses a LOOM_CUDA_DISABLE value into `out` (starting from every path on). Empty items and
// surrounding spaces are ignored. Returns false with `*error` naming the unknown item.
inline bool parse_cuda_kernel_paths(const std::string& list, CudaKernelPaths* out, std::string* error) {
  CudaKernelPaths paths;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t end = std::min(list.find(',', at), list.size());
    std::string item = list.substr(at, end - at);
    const size_t first = item.find_first_not_of(" \t"), last = item.find_last_not_of(" \t");
    item = first == std::string::npos ? "" : item.substr(first, last - first + 1);
    bool known = item.empty();
    for (const CudaKernelPathName& p : kCudaKernelPathNames)
      if (item == p.name) paths.*p.flag = false, known = true;
    if (!known) {
      *error = "LOOM_CUDA_DISABLE: unknown kernel path \"" + item + "\" (expected a comma-separated list of " +
               cuda_kernel_path_names() + ")";
      return false;
    }
    at = end + 1;
  }
  *out = paths;
  return true;
}

// The paths LOOM_CUDA_DISABLE leaves on (all when it is unset).
inline bool cuda_kernel_paths_from_env(CudaKernelPaths* out, std::string* error) {
  const char* env = std::getenv("LOOM_CUDA_DISABLE");
  return parse_cuda_kernel_paths(env ? env : "", out, error);
}

}  // namespace loom
