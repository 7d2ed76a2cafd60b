// See device-factory.h. The cuda branch exists only when the build linked the CUDA library
// (LOOM_WITH_CUDA, defined by binding.gyp / the test program's CMakeLists when nvcc was found).
#include "device-factory.h"

#include "cpu/cpu-device.h"
#ifdef LOOM_WITH_CUDA
#include "cuda/cuda-api.h"
#endif

namespace loom {

const char* compiled_devices() {
#ifdef LOOM_WITH_CUDA
  return "cpu,cuda";
#else
  return "cpu";
#endif
}

Status cuda_usable() {
#ifdef LOOM_WITH_CUDA
  // The probe runs once per process: it initialises the CUDA context, which costs ~100 ms+.
  static const Status probed = cuda_probe();
  return probed;
#else
  return Status::Error("cuda_unavailable",
                       "this build of the native runtime has no cuda device: nvcc was not found when it was built (or "
                       "LOOM_CUDA=0 was set). "
                       "Fix: install the CUDA toolkit (nvcc 12.x/13.x, or set CUDA_HOME) and rebuild with "
                       "`node plugins/backend-cuda-native/scripts/build.mjs`, or set `device: cpu`");
#endif
}

Status create_device(const std::string& name, int threads, std::unique_ptr<Device>* out) {
  if (name == "cpu") {
    *out = std::make_unique<CpuDevice>(threads);
    return Status::Ok();
  }
  if (name == "cuda" || name == "auto") {
    Status usable = cuda_usable();
    if (!usable.ok()) {
      if (name == "cuda") return usable;
      *out = std::make_unique<CpuDevice>(threads);
      return Status::Ok();
    }
#ifdef LOOM_WITH_CUDA
    return create_cuda_device(out);
#endif
  }
  return Status::Error("native_error", "unknown device `" + name + "` (expected cpu, cuda or auto)");
}

}  // namespace loom
