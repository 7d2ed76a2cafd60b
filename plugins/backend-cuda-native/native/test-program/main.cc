// loom-native-test: the kernel self-test (selftest/) of every device compiled into this build,
// each against the scalar reference, without Node. A device that cannot run here (cuda without a
// GPU) is skipped with the factory's reason unless --require names it. Prints one table row per
// device and seed, then each run's per-family worst errors; exits 1 on any failure.
//
//   loom-native-test [--seed N]... [--threads N] [--device cpu|cuda]... [--require cuda]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cpu/simd-config.h"
#include "device-factory.h"
#include "selftest/kernel-self-test.h"

namespace {

struct Args {
  std::vector<uint64_t> seeds;
  std::vector<std::string> devices, required;
  int threads = 2;
};

bool parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; i++) {
    const std::string k = argv[i];
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
    else
      return false;
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

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse(argc, argv, &args)) {
    std::fprintf(stderr, "usage: %s [--seed N]... [--threads N] [--device cpu|cuda]... [--require cuda]\n", argv[0]);
    return 2;
  }
  std::printf("loom-native-test: devices compiled in: %s; cpu kernels: %s\n", loom::compiled_devices(),
              LOOM_AVX512 ? "avx512" : "avx2");
  std::printf("%-6s %6s %7s %9s %8s %8s  %s\n", "device", "seed", "cases", "failures", "worst", "seconds",
              "worst case");
  bool failed = false;
  std::string details;
  for (const std::string& name : args.devices) {
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
      loom::SelfTestResult r = loom::run_kernel_self_test(device.get(), seed);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // A device fault (bad launch, illegal address) fails the run: run_kernel_self_test
      // collects what Device::synchronize reports.
      std::printf("%-6s %6llu %7d %9d %8.3f %8.1f  %s\n", name.c_str(), static_cast<unsigned long long>(seed), r.cases,
                  r.failures, r.worst_ratio, secs, r.worst_case.c_str());
      std::fflush(stdout);
      details += "-- " + name + " seed " + std::to_string(seed) + "\n" + r.report;
      if (!r.ok || r.failures > 0) failed = true;
    }
  }
  std::printf("\nworst error per op family (ratio <= 1 passes):\n%s", details.c_str());
  std::printf("%s\n", failed ? "FAILED" : "PASSED");
  return failed ? 1 : 0;
}
