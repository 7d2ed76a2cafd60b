#!/usr/bin/env bash
# GPU check of the cuda device (issue 14, point 5), for a machine with an NVIDIA GPU, nvcc, CMake
# and a C++ compiler; Node is not needed. Builds the standalone test program
# (native/test-program) for the local GPU only and runs:
#   a. every cuda kernel against the scalar reference on the self-test's seeded grid of real
#      shapes (the same grid the cpu device passes in `npm test`), one table row per seed;
#   b. whole random Llama/Mistral/Qwen2 models (f32 and bf16) on cuda and on cpu side by side: a
#      prefill and 20 decode steps of one batch of base, LoRA (ranks 8, 16) and Medusa tree rows,
#      each row also alone on cuda; logits within tolerance, greedy tokens and walk ends
#      identical, seeded sampled tokens identical, rows alone equal to themselves in the batch
#      (native/test-program/model-check.cc), one table row per model and dtype.
# Exits non-zero when the build fails, the cuda device cannot run here, or any case fails.
#
#   plugins/backend-cuda-native/gpu/check.sh [--seed N]...     (part a seeds, default 1 2 3;
#                                                               part b runs seed 1)
# Environment: LOOM_CHECK_BUILD (build folder, default a fresh temp one), CUDACXX (nvcc).
set -euo pipefail
started=$(date +%s)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${LOOM_CHECK_BUILD:-$(mktemp -d "${TMPDIR:-/tmp}/loom-gpu-check.XXXXXX")}
mkdir -p "$build"
nvcc=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
seeds=("$@")
[ ${#seeds[@]} -eq 0 ] && seeds=(--seed 1 --seed 2 --seed 3)

echo "== GPU"
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
# "9.0" -> 90: build for this GPU only (a few times faster than the addon's five targets).
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')
"$nvcc" --version | tail -n1

echo "== build (sm_$cap, $build)"
cmake -S "$here/../native/test-program" -B "$build" -DLOOM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cap" \
  -DCMAKE_CUDA_COMPILER="$nvcc" > "$build/configure.log" || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" > "$build/build.log" 2>&1 || { tail -n 60 "$build/build.log"; exit 1; }
echo "built in $(( $(date +%s) - started ))s"

echo "== a. cuda kernels vs the reference"
status=0
# Hard stops (a hung kernel must not spend the session's GPU time): exit 124 counts as a failure.
timeout 300 "$build/loom-native-test" --device cuda --require cuda --threads "$(nproc)" "${seeds[@]}" || status=$?

echo "== b. whole models, cuda vs cpu"
timeout 300 "$build/loom-native-test" --models real --device cuda --baseline cpu --require cuda --threads "$(nproc)" \
  --steps 20 || status=$?

echo "== $( [ $status -eq 0 ] && echo PASSED || echo FAILED ) in $(( $(date +%s) - started ))s"
exit $status
