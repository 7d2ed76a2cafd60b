// Part b of the GPU check (issue 14, point 5): whole random models (Llama, Mistral, Qwen2) on two
// devices side by side -- the device under test and a baseline -- for a prefill and N decode
// steps of one mixed batch (base rows, LoRA rows of ranks 8 and 16, Medusa tree rows), with each
// row also run alone on the device under test. See model-check.cc for what is compared.
#pragma once

#include <cstdint>
#include <string>

namespace loom {
class Device;
}

namespace loom_check {

struct ModelCheckOptions {
  std::string device = "cpu";          // the device under test: cpu | cuda
  std::string baseline = "reference";  // cpu | reference
  bool small = true;                   // small shapes (the scalar reference is slow) or modest real ones
  int threads = 2;                     // the cpu device's pool
  int decode_steps = 20;
  uint64_t seed = 1;
  std::string filter;                  // run only models whose name contains this ("" = all)
};

// Runs every model in f32 and bf16 and prints one table row per run; returns true when all pass.
// `dut` and `base` are the two devices (owned by the caller).
bool run_model_check(const ModelCheckOptions& opt, loom::Device* dut, loom::Device* base);

}  // namespace loom_check
