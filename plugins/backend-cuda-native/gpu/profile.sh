#!/usr/bin/env bash
# Nsight Compute over one layer of each benchmark row (issue 15's "ncu counters where the machine
# allows"), for a machine with an NVIDIA GPU, nvcc, CMake, a C++ compiler, ncu and python3; Node is
# not needed. Builds the standalone test program as gpu/check.sh does (a shared build folder is
# reused), then runs `loom-native-test --bench-profile --bench-layers 1` under
# `ncu --profile-from-start off`: the program loads a one-layer Llama-3-8B-shaped model and runs
# one step each of prefill 1x2048, decode batch 1 and 64 (base, sampled mix, distinct adapters)
# between cudaProfilerStart and cudaProfilerStop, so every kernel of those steps is profiled once
# (~60 s on an H200 with the default sections). Prints gpu/ncu-summary.py's table, one line per
# launch in step order (duration, DRAM / busiest memory unit / SM throughput, occupancy,
# registers); the raw CSV stays in the build folder.
#
#   plugins/backend-cuda-native/gpu/profile.sh [-k REGEX]      (only kernels whose name matches)
#
# Environment: LOOM_CHECK_BUILD (build folder, as gpu/check.sh), CUDACXX (nvcc), NCU (ncu), LOOM_PROFILE_SECONDS
# (a hard stop for the profiled program, default 240). Clocks are left as found
# (--clock-control none), as the device notes ask. Exits non-zero when the build or ncu fails.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${LOOM_CHECK_BUILD:-$(mktemp -d "${TMPDIR:-/tmp}/loom-gpu-check.XXXXXX")}
mkdir -p "$build"
nvcc=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
ncu=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
filter=()
[ "${1:-}" = -k ] && [ -n "${2:-}" ] && filter=(-k "regex:$2")

cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')
[ "$cap" = 90 ] && cap=90a  # as gpu/check.sh: the wgmma GEMM needs sm_90a
cmake -S "$here/../native/test-program" -B "$build" -DLOOM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cap" \
  -DCMAKE_CUDA_COMPILER="$nvcc" > "$build/configure.log" || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" > "$build/build.log" 2>&1 || { tail -n 60 "$build/build.log"; exit 1; }

csv="$build/ncu.csv"
rm -f "$csv"
timeout "${LOOM_PROFILE_SECONDS:-240}" "$ncu" --clock-control none --profile-from-start off "${filter[@]}" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --csv --page details --log-file "$csv" \
  "$build/loom-native-test" --bench-profile --device cuda --require cuda --bench-layers 1 > "$build/profile.log" 2>&1 ||
  { tail -n 20 "$build/profile.log"; exit 1; }
grep -E "one step in|FAILED" "$build/profile.log" | sed 's/^\[ *[0-9.]*s\] //'
python3 "$here/ncu-summary.py" "$csv"
