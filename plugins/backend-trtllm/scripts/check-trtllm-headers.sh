#!/bin/sh
# Compile native/src/trtllm-executor.cc against a TensorRT-LLM include tree without linking it:
# the check of issue 16 point 4, runnable on a machine with no GPU and no TensorRT-LLM library.
#
#   scripts/check-trtllm-headers.sh <dir with tensorrt_llm/executor/executor.h> [CUDA include dir]
#
# Only CUDA's cuda_fp16.h/cuda_bf16.h/cuda_fp8.h are needed besides the TensorRT-LLM headers (no
# TensorRT, MPI or torch). Set GUIDED=1 for headers that have GuidedDecodingParams (1.x).
# Keep the TensorRT-LLM tree outside this repository: none of its files may be committed.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
inc=${1:?usage: check-trtllm-headers.sh <trtllm include dir> [cuda include dir]}
cuda=${2:-/usr/local/cuda/include}
for abi in 0 1; do
  g++ -std=c++17 -Wall -Wextra -Werror -fsyntax-only -fexceptions \
    -D_GLIBCXX_USE_CXX11_ABI=$abi -DENABLE_BF16 -DENABLE_FP8 -DLOOM_TRTLLM_HAS_GUIDED_DECODING="${GUIDED:-0}" \
    -I "$inc" -I "$cuda" -I "$here/native/include" -I "$here/native/src" \
    "$here/native/src/trtllm-executor.cc"
  echo "trtllm-executor.cc compiles against $inc with _GLIBCXX_USE_CXX11_ABI=$abi (-Wall -Wextra -Werror)"
done
