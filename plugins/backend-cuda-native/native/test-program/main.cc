// loom-native-test: the kernel self-test (selftest/) of every device compiled into this build,
// each against the scalar reference, without Node. A device that cannot run here (cuda without a
// GPU) is skipped with the factory's reason unless --require names it. Prints one table row per
// device and seed, then each run's per-family worst errors; exits 1 on any failure.
// `--device emulated-cuda` runs the cuda kernels the SIMT emulator covers (emulated-cuda.h) on
// this machine's CPU against the reference, by the self-test's cases for them; no GPU needed.
// With --models it is part b's device under test (against cpu): whole models through the cuda
// device's kernels and the model's device-memory paths.
// With --models, part b instead (model-check.h): whole random models on the device under test
// (the first --device, default cpu) against a baseline (--baseline, default: cpu for cuda, the
// scalar reference for cpu), in small shapes (fast on the reference) or modest real ones.
// With --bench, the GPU benchmark instead (gpu-bench.h, issue 15): decode, prefill and LoRA-op
// speed of a random Llama-3-8B-shaped model on one device beside their rooflines, one table.
// --families limits the self-test to the named families (kernel-self-test.cc's kFamilies); a
// failing row is followed by a `failed families:` line naming them, which that flag reruns.
// --kernel-paths prints the names LOOM_CUDA_DISABLE takes, one per line (gpu/check.sh's triage).
// LOOM_CUDA_DISABLE (cuda/kernel-paths.h) turns optional kernel paths off on the cuda device and,
// here, on the emulated one too, so their fallbacks are checked the same way.
//
//   loom-native-test [--seed N]... [--threads N] [--device cpu|cuda|emulated-cuda]... [--require cuda]
//                    [--families NAME,...]
//   loom-native-test --models small|real [--device cpu|cuda] [--baseline cpu|reference]
//                    [--steps N] [--model NAME] [--seed N] [--threads N] [--require cuda]
//   loom-native-test --bench [--bench-shape llama3-8b|smollm2-135m|tiny] [--device cpu|cuda] [--steps N]
//                    [--bench-seconds S] [--bench-dir DIR] [--peak-tflops X] [--bench-layers N]
//                    [--seed N] [--threads N] [--require cuda] [--bench-profile]
//   loom-native-test --kernel-paths
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cpu/simd-config.h"
#include "device-factory.h"
#include "emulated-cuda.h"
#include "forwarding-device.h"
#include "gpu-bench.h"
#include "model-check.h"
#include "selftest/kernel-self-test.h"

namespace {

struct Args {
  std::vector<uint64_t> seeds;
  std::vector<std::string> devices, required;
  int threads = 2;
  std::string models;    // "": the kernel self-test; small | real: part b
  std::string baseline;  // part b's baseline device ("": by the device under test)
  std::string model;     // part b: only models whose name contains this
  int steps = 20;
  bool steps_set = false;
  bool bench = false;  // --bench: the GPU benchmark
  bool list_kernel_paths = false;  // --kernel-paths: print LOOM_CUDA_DISABLE's names and exit
  loom_bench::BenchOptions bench_opt;
  // The emulated device's optional kernel paths: LOOM_CUDA_DISABLE, as the cuda device reads it.
  loom::CudaKernelPaths kernel_paths;
  std::vector<std::string> families;  // --families: only these self-test families ("": all)
};

// "a,b,c" -> {"a", "b", "c"} (empty items dropped).
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t end = std::min(s.find(',', at), s.size());
    if (end > at) out.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

bool parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; i++) {
    const std::string k = argv[i];
    if (k == "--bench") {  // the flags without a value
      a->bench = true;
      continue;
    }
    if (k == "--bench-profile") {
      a->bench = a->bench_opt.profile = true;
      continue;
    }
    if (k == "--kernel-paths") {
      a->list_kernel_paths = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (k == "--seed")
      a->seeds.push_back(std::strtoull(v, nullptr, 10));
    else if (k == "--threads")
      a->threads = std::atoi(v);
    else if (k == "--device")
      a->devices.push_back(v);
    else if (k == "--require")
      a->required.push_back(v);
    else if (k == "--models")
      a->models = v;
    else if (k == "--baseline")
      a->baseline = v;
    else if (k == "--model")
      a->model = v;
    else if (k == "--families")
      a->families = split_list(v);
    else if (k == "--steps")
      a->steps = std::atoi(v), a->steps_set = true;
    else if (k == "--bench-shape")
      a->bench_opt.shape = v;
    else if (k == "--bench-seconds")
      a->bench_opt.seconds = std::atof(v);
    else if (k == "--bench-dir")
      a->bench_opt.dir = v;
    else if (k == "--peak-tflops")
      a->bench_opt.peak_tflops = std::atof(v);
    else if (k == "--bench-layers")
      a->bench_opt.layers = std::atoi(v);
    else
      return false;
  }
  if (a->bench) {
    if (!a->models.empty()) return false;
    if (a->devices.empty()) a->devices = {"cpu"};
    a->bench_opt.threads = a->threads;
    a->bench_opt.steps = a->steps_set ? a->steps : 0;
    a->bench_opt.seed = a->seeds.empty() ? 1 : a->seeds[0];
    return a->threads >= 1 && a->steps >= 1 && a->devices.size() == 1 && a->bench_opt.seconds >= 0 &&
           a->bench_opt.layers >= 0;
  }
  if (!a->models.empty()) {
    if (a->models != "small" && a->models != "real") return false;
    if (a->devices.empty()) a->devices = {"cpu"};
    if (a->baseline.empty()) a->baseline = a->devices[0] == "cpu" ? "reference" : "cpu";
    if (a->seeds.empty()) a->seeds = {1};
    return a->threads >= 1 && a->steps >= 1 && a->devices.size() == 1 && a->baseline != a->devices[0];
  }
  if (a->seeds.empty()) a->seeds = {1, 2, 3};
  if (a->devices.empty()) {
    const std::string all = loom::compiled_devices();
    for (size_t s = 0; s <= all.size();) {
      const size_t e = all.find(',', s) == std::string::npos ? all.size() : all.find(',', s);
      a->devices.push_back(all.substr(s, e - s));
      s = e + 1;
    }
  }
  return a->threads >= 1;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  for (const auto& s : v)
    if (s == x) return true;
  return false;
}

// A device by name for part b: the scalar reference (a process-wide singleton), or one from the
// factory, held in `owned`. Null with the reason printed when it cannot be made here.
loom::Device* model_check_device(const Args& args, const std::string& name, std::unique_ptr<loom::Device>* owned) {
  if (name == "reference") return loom::reference_device();
  if (name == "emulated-cuda") {
    *owned = loom_emulated::make_emulated_cuda_device(args.kernel_paths);
    return owned->get();
  }
  if (name == "cuda") {
    const loom::Status usable = loom::cuda_usable();
    if (!usable.ok()) {
      std::printf("cuda skipped: %s\n", usable.message.c_str());
      return nullptr;
    }
  }
  const loom::Status made = loom::create_device(name, args.threads, owned);
  if (!made.ok()) {
    std::printf("%s: cannot create: %s\n", name.c_str(), made.message.c_str());
    return nullptr;
  }
  return owned->get();
}

// The baseline device with the KV cache dtype of the device under test: the model then rounds
// K/V to the same dtype on both (kv_store's semantics; the cpu device and the reference take any),
// so part b's logits differ only by summation order, not by the f16 cache's rounding, which grows
// over the steps and would otherwise set the bound.
class KvDtypeDevice final : public loom_test::ForwardingDevice {
 public:
  KvDtypeDevice(loom::Device* inner, loom::DType kv) : ForwardingDevice(inner), kv_(kv) {}
  loom::DType kv_dtype() const override { return kv_; }

 private:
  loom::DType kv_;
};

// Part b (--models): every model in f32 and bf16 per seed; a device that cannot run here fails
// only when --require names it.
int run_models(const Args& args) {
  std::unique_ptr<loom::Device> dut_owned, base_owned;
  loom::Device* dut = model_check_device(args, args.devices[0], &dut_owned);
  loom::Device* base = dut ? model_check_device(args, args.baseline, &base_owned) : nullptr;
  if (!dut || !base) {
    const bool required = contains(args.required, args.devices[0]) || contains(args.required, args.baseline);
    std::printf("%s\n", required ? "FAILED" : "SKIPPED");
    return required ? 1 : 0;
  }
  std::unique_ptr<KvDtypeDevice> base_kv;
  if (base->kv_dtype() != dut->kv_dtype()) {
    base_kv = std::make_unique<KvDtypeDevice>(base, dut->kv_dtype());
    base = base_kv.get();
  }
  bool ok = true;
  for (uint64_t seed : args.seeds) {
    loom_check::ModelCheckOptions o;
    o.device = args.devices[0];
    o.baseline = args.baseline;
    o.small = args.models == "small";
    o.threads = args.threads;
    o.decode_steps = args.steps;
    o.seed = seed;
    o.filter = args.model;
    ok = loom_check::run_model_check(o, dut, base) && ok;
  }
  std::printf("%s\n", ok ? "PASSED" : "FAILED");
  return ok ? 0 : 1;
}

// A self-test row's failing families, as one line gpu/check.sh reruns them from
// (`--families a,b --seed N`); nothing when none failed. Flushes the row before it.
void print_failed_families(const char* device, uint64_t seed, const loom::SelfTestResult& r) {
  if (!r.failed_families.empty()) {
    std::string names;
    for (const std::string& f : r.failed_families) names += (names.empty() ? "" : ",") + f;
    std::printf("failed families: %s seed %llu: %s\n", device, static_cast<unsigned long long>(seed), names.c_str());
  }
  std::fflush(stdout);
}

// The benchmark (--bench) on the one --device; a device that cannot run here fails only when
// --require names it.
int run_bench(const Args& args) {
  std::unique_ptr<loom::Device> owned;
  loom::Device* dev = model_check_device(args, args.devices[0], &owned);
  if (!dev) {
    const bool required = contains(args.required, args.devices[0]);
    std::printf("%s\n", required ? "FAILED" : "SKIPPED");
    return required ? 1 : 0;
  }
  return loom_bench::run_gpu_bench(args.bench_opt, dev);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: %s [--seed N]... [--threads N] [--device cpu|cuda|emulated-cuda]... [--require cuda]\n"
                 "          [--families NAME,...]\n"
                 "       %s --models small|real [--device cpu|cuda] [--baseline cpu|reference] [--steps N]\n"
                 "          [--model NAME] [--seed N]... [--threads N] [--require cuda]\n"
                 "       %s --bench [--bench-shape llama3-8b|smollm2-135m|tiny] [--device cpu|cuda] [--steps N] [--bench-seconds S]\n"
                 "          [--bench-dir DIR] [--peak-tflops X] [--bench-layers N] [--seed N] [--threads N]\n"
                 "          [--require cuda]\n"
                 "       %s --kernel-paths\n",
                 argv[0], argv[0], argv[0], argv[0]);
    return 2;
  }
  if (args.list_kernel_paths) {
    for (const loom::CudaKernelPathName& p : loom::kCudaKernelPathNames) std::printf("%s\n", p.name);
    return 0;
  }
  std::string bad_paths;
  if (!loom::cuda_kernel_paths_from_env(&args.kernel_paths, &bad_paths)) {
    std::fprintf(stderr, "%s\n", bad_paths.c_str());
    return 2;
  }
  std::printf("loom-native-test: devices compiled in: %s; cpu kernels: %s\n", loom::compiled_devices(),
              LOOM_AVX512 ? "avx512" : "avx2");
  if (args.bench) return run_bench(args);
  if (!args.models.empty()) return run_models(args);
  std::printf("%-6s %6s %7s %9s %8s %8s  %s\n", "device", "seed", "cases", "failures", "worst", "seconds",
              "worst case");
  bool failed = false;
  std::string details;
  for (const std::string& name : args.devices) {
    if (name == "emulated-cuda") {
      for (uint64_t seed : args.seeds) {
        const auto t0 = std::chrono::steady_clock::now();
        loom::SelfTestResult r = loom_emulated::run_emulated_cuda_check(seed, args.kernel_paths, args.families);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("%-6s %6llu %7d %9d %8.3f %8.1f  %s\n", "emulated-cuda", static_cast<unsigned long long>(seed),
                    r.cases, r.failures, r.worst_ratio, secs, r.worst_case.c_str());
        print_failed_families("emulated-cuda", seed, r);
        details += "-- emulated-cuda seed " + std::to_string(seed) + "\n" + r.report;
        if (!r.ok || r.failures > 0) failed = true;
      }
      continue;
    }
    if (name == "cuda") {
      const loom::Status usable = loom::cuda_usable();
      if (!usable.ok()) {
        std::printf("%-6s %6s %7s %9s %8s %8s  skipped: %s\n", "cuda", "-", "-", "-", "-", "-", usable.message.c_str());
        if (contains(args.required, "cuda")) failed = true;
        continue;
      }
    }
    std::unique_ptr<loom::Device> device;
    const loom::Status made = loom::create_device(name, args.threads, &device);
    if (!made.ok()) {
      std::printf("%-6s  cannot create: %s\n", name.c_str(), made.message.c_str());
      failed = true;
      continue;
    }
    for (uint64_t seed : args.seeds) {
      const auto t0 = std::chrono::steady_clock::now();
      loom::SelfTestResult r = args.families.empty() ? loom::run_kernel_self_test(device.get(), seed)
                                                     : loom::run_self_test_families(device.get(), seed, args.families);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // A device fault (bad launch, illegal address) fails the run: run_kernel_self_test
      // collects what Device::synchronize reports.
      std::printf("%-6s %6llu %7d %9d %8.3f %8.1f  %s\n", name.c_str(), static_cast<unsigned long long>(seed), r.cases,
                  r.failures, r.worst_ratio, secs, r.worst_case.c_str());
      print_failed_families(name.c_str(), seed, r);
      details += "-- " + name + " seed " + std::to_string(seed) + "\n" + r.report;
      if (!r.ok || r.failures > 0) failed = true;
    }
  }
  std::printf("\nworst error per op family (ratio <= 1 passes):\n%s", details.c_str());
  std::printf("%s\n", failed ? "FAILED" : "PASSED");
  return failed ? 1 : 0;
}
