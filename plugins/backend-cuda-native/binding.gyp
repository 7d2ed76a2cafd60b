{
  # One addon, CPU device only for now. The cuda device (native/src/cuda) is added to this file
  # when its kernels land; scripts/build.mjs says so in one line when nvcc is present.
  # loom_isa: "native" (default: every vector unit of the build machine) or "avx2" (AVX-512 off,
  # for machines without it; the test suite builds this variant to check that path too).
  "variables": {"loom_isa%": "native"},
  "targets": [
    {
      "target_name": "loom_native",
      "sources": [
        "native/src/binding.cc",
        "native/src/runtime/thread-pool.cc",
        "native/src/runtime/weights.cc",
        "native/src/reference/kernels-ref.cc",
        "native/src/cpu/matmul-cpu.cc",
        "native/src/cpu/lora-cpu.cc",
        "native/src/cpu/ops-cpu.cc",
        "native/src/cpu/read-bandwidth.cc",
        "native/src/model/llama-model.cc",
        "native/src/selftest/kernel-self-test.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "native/src"],
      "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions", "-O2", "-O3"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17", "-O2"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-O3", "-march=native", "-mavx2", "-mfma", "-mf16c", "-fno-math-errno", "-pthread", "-Wall", "-Wno-unused-parameter"],
      "ldflags": ["-pthread"],
      "conditions": [["loom_isa=='avx2'", {"cflags_cc+": ["-mno-avx512f"]}]]
    }
  ]
}
