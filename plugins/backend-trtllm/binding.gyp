{
  # The addon over our C ABI (native/include/loom-trtllm.h), linked to exactly one implementation:
  #   trtllm_root == ""  -> native/src/fake-executor.cc (tests, machines without TensorRT-LLM);
  #   trtllm_root set    -> native/src/trtllm-executor.cc against <root>/include and <trtllm_lib>.
  # scripts/build.mjs fills these variables from TRTLLM_ROOT, TRTLLM_LIB_DIR, TRTLLM_CXX11_ABI and
  # CUDA_HOME, and the guided-decoding flag from what the headers declare.
  "variables": {
    "trtllm_root%": "",
    "trtllm_lib%": "",
    "trtllm_cxx11_abi%": "1",
    "cuda_include%": "/usr/local/cuda/include",
    "trtllm_guided_decoding%": "0"
  },
  "targets": [
    {
      "target_name": "loom_trtllm",
      "sources": ["native/src/binding.cc", "native/src/request-check.cc", "native/src/response-batch.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "native/include", "native/src"],
      "defines": [
        "NAPI_VERSION=8",
        "NAPI_DISABLE_CPP_EXCEPTIONS",
        "NODE_ADDON_API_DISABLE_DEPRECATED"
      ],
      "cflags!": ["-fno-exceptions", "-fno-rtti"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-O2", "-pthread", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "ldflags": ["-pthread"],
      "conditions": [
        ["trtllm_root==''", {"sources": ["native/src/fake-executor.cc"]}],
        # Node's common.gypi defines _GLIBCXX_USE_CXX11_ABI=1; a library built with the old ABI needs 0 in
        # every file of the addon (std::string crosses between them).
        ["trtllm_cxx11_abi==0", {"defines!": ["_GLIBCXX_USE_CXX11_ABI=1"], "defines": ["_GLIBCXX_USE_CXX11_ABI=0"]}],
        ["trtllm_root!=''", {
          "sources": ["native/src/trtllm-executor.cc"],
          "include_dirs": ["<(trtllm_root)/include", "<(cuda_include)"],
          "defines": [
            "ENABLE_BF16",
            "ENABLE_FP8",
            "LOOM_TRTLLM_HAS_GUIDED_DECODING=<(trtllm_guided_decoding)"
          ],
          "libraries": ["-L<(trtllm_lib)", "-ltensorrt_llm", "-lnvinfer_plugin_tensorrt_llm", "-Wl,-rpath,<(trtllm_lib)", "-ldl"]
        }]
      ]
    }
  ]
}
