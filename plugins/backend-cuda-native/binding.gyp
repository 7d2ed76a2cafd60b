{
  # One addon: the cpu device always, the cuda device when scripts/build.mjs found nvcc and built
  # build/cuda/libloom_cuda.a (passed in loom_cuda_lib with the static CUDA runtime in loom_cudart).
  # loom_cpu_flags: the vector flags build.mjs probed (-march=native where the CPU has AVX2 + FMA +
  # F16C). loom_isa: "native" (default: every vector unit of the build machine) or "avx2" (AVX-512
  # off, for machines without it).
  "variables": {"loom_isa%": "native", "loom_cpu_flags%": "-march=native", "loom_cuda_lib%": "", "loom_cudart%": ""},
  "targets": [
    {
      "target_name": "loom_native",
      "sources": [
        "native/src/binding.cc",
        "native/src/device-factory.cc",
        "native/src/runtime/thread-pool.cc",
        "native/src/runtime/weights.cc",
        "native/src/runtime/huge-page-arena.cc",
        "native/src/runtime/quantize-q8.cc",
        "native/src/reference/kernels-ref.cc",
        "native/src/reference/sampler-ref.cc",
        "native/src/cpu/matmul-cpu.cc",
        "native/src/cpu/matmul-q8-cpu.cc",
        "native/src/cpu/matmul-q8-amx.cc",
        "native/src/cpu/matmul-bf16-avx512.cc",
        "native/src/cpu/matmul-bf16-amx.cc",
        "native/src/cpu/lora-cpu.cc",
        "native/src/cpu/ops-cpu.cc",
        "native/src/cpu/sampler-cpu.cc",
        "native/src/cpu/read-bandwidth.cc",
        "native/src/model/llama-model.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "native/src"],
      "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions", "-O2", "-O3"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17", "-O2"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-O3", "<@(loom_cpu_flags)", "-fno-math-errno", "-pthread", "-Wall", "-Wno-unused-parameter"],
      "ldflags": ["-pthread"],
      "conditions": [
        ["loom_isa=='avx2'", {"cflags_cc+": ["-mno-avx512f"]}],
        ["loom_cuda_lib!=''", {
          "defines+": ["LOOM_WITH_CUDA"],
          "libraries+": ["<(loom_cuda_lib)", "<(loom_cudart)", "-ldl", "-lrt", "-lpthread"]
        }]
      ]
    }
  ]
}
