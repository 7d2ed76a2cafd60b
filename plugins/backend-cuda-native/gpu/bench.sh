#!/usr/bin/env bash
# GPU benchmark of the cuda device (issue 15, point 1), for a machine with an NVIDIA GPU, nvcc,
# CMake and a C++ compiler; Node is not needed. Builds the standalone test program
# (native/test-program) for the local GPU only and runs `loom-native-test --bench`: a random
# Llama-3-8B-shaped bf16 model (hidden 4096, 32 layers, 32/8 heads, intermediate 14336, vocab
# 128256; written as a safetensors file in /dev/shm or TMPDIR, nothing downloaded) loaded through
# LlamaModel on cuda, then one table (native/test-program/gpu-bench.cc says what each row times):
#   - HBM read bandwidth (a read kernel, best of 10 passes over 2 GiB; again at the end);
#   - the LoRA op (Device::lora_apply, hidden 4096, rank 16) at batch 1 and 64 distinct adapters;
#   - the dense projections alone (Device::matmul, gate/up and down shapes) at batch 1, 8 and 64;
#   - decode step time at batch 1, 8, 32, 64 with 512 cached tokens per row: base greedy, base in a
#     sampling mix (temperature 0.8 + top-p 0.95 seeded / greedy rows), one shared adapter, and a
#     distinct rank-16 adapter per row on all 7 modules; sampling on the device;
#   - prefill tokens/s and TFLOP/s for one 2048-token prompt and for 8 prompts of 512;
#   - each optional kernel path (cuda/kernel-paths.h) against its fallback: the rows it serves
#     re-timed with it alone off, as a ratio to the time with it on;
# then where three steps' time goes by device op, twice: each op waited for alone, and each op in
# the running step by CUDA events in the stream (no waits; an op's launch gaps are its own);
# each beside its roofline (bytes / measured bandwidth; FLOPs / the GPU's dense bf16 peak) and
# issue 15's targets marked PASS/FAIL. Under 8 minutes on an H100 in total: the measurements get
# what the build leaves of LOOM_BENCH_TOTAL (rows past it are skipped and say so).
# Exits non-zero when the build fails, the cuda device cannot run here, or a row cannot be
# measured (a device fault); a missed target does not fail it.
#
#   plugins/backend-cuda-native/gpu/bench.sh [--steps N] [--peak-tflops X] [--bench-dir DIR]
#
# Environment: LOOM_BENCH_BUILD (build folder; default LOOM_CHECK_BUILD, so a folder gpu/check.sh
# built is reused as is, else a fresh temp one), LOOM_BENCH_TOTAL (seconds for build + run, default
# 450), LOOM_BENCH_LOG (also write the output there), CUDACXX (nvcc).
set -euo pipefail
started=$(date +%s)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${LOOM_BENCH_BUILD:-${LOOM_CHECK_BUILD:-$(mktemp -d "${TMPDIR:-/tmp}/loom-gpu-bench.XXXXXX")}}
mkdir -p "$build"
nvcc=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
total=${LOOM_BENCH_TOTAL:-450}
log=${LOOM_BENCH_LOG:-$build/bench.log}
mkdir -p "$(dirname "$log")"

{
  echo "== GPU"
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit \
    --format=csv
  "$nvcc" --version | tail -n1
} 2>&1 | tee "$log"
# "9.0" -> 90: build for this GPU only (a few times faster than the addon's five targets); the
# same configuration as gpu/check.sh, so a shared build folder is not rebuilt.
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')
# Hopper as sm_90a, as the addon builds it: the wgmma GEMM needs the architecture-specific features.
[ "$cap" = 90 ] && cap=90a

echo "== build (sm_$cap, $build)" | tee -a "$log"
cmake -S "$here/../native/test-program" -B "$build" -DLOOM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cap" \
  -DCMAKE_CUDA_COMPILER="$nvcc" > "$build/configure.log" || { tee -a "$log" < "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" > "$build/build.log" 2>&1 || { tail -n 60 "$build/build.log" | tee -a "$log"; exit 1; }
built=$(( $(date +%s) - started ))
echo "built in ${built}s" | tee -a "$log"

# What the build left of the total, less a minute for loading the model and the rows in flight
# when the budget runs out; at least two minutes.
left=$(( total - built - 60 ))
[ "$left" -lt 120 ] && left=120
echo "== benchmark (measurement budget ${left}s)" | tee -a "$log"
status=0
# A hard stop past the budget (a hung kernel must not spend the session's GPU time): exit 124.
timeout $(( left + 180 )) "$build/loom-native-test" --bench --device cuda --require cuda --threads "$(nproc)" \
  --bench-seconds "$left" "$@" 2>&1 | tee -a "$log" || status=$?  # pipefail: the program's status (tee does not fail)
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader | sed 's/^/after: /' |
  tee -a "$log"
echo "== $( [ $status -eq 0 ] && echo DONE || echo FAILED ) in $(( $(date +%s) - started ))s (output also in $log)" |
  tee -a "$log"
exit $status
