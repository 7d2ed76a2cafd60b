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
#   c. only after a failure, which optional kernel path (cuda/kernel-paths.h) it follows: part a's
#      first failing seed (its failing families only) and part b's first failing model, rerun
#      with no path off (whatever LOOM_CUDA_DISABLE said), with each path off alone, and with all
#      of them off, one table row each. A
#      failure that comes and goes with nothing off is a race (try pdl off first); one that goes
#      away with one path off names that path, whose fallback LOOM_CUDA_DISABLE can take meanwhile.
# Exits non-zero when the build fails, the cuda device cannot run here, or any case fails (part c
# does not change that).
#
#   plugins/backend-cuda-native/gpu/check.sh [--seed N]...     (part a seeds, default 1 2 3;
#                                                               part b runs seed 1)
# Environment: LOOM_CHECK_BUILD (build folder, default a fresh temp one), CUDACXX (nvcc),
# LOOM_CHECK_TRIAGE_SECONDS (part c's budget: no rerun starts after it, default 150).
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
# "9.0" -> 90: build for this GPU only (a few times faster than the addon's five targets), Hopper
# as sm_90a, as the addon builds it: the wgmma GEMM needs the architecture-specific features.
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')
[ "$cap" = 90 ] && cap=90a
"$nvcc" --version | tail -n1

echo "== build (sm_$cap, $build)"
cmake -S "$here/../native/test-program" -B "$build" -DLOOM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cap" \
  -DCMAKE_CUDA_COMPILER="$nvcc" > "$build/configure.log" || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" > "$build/build.log" 2>&1 || { tail -n 60 "$build/build.log"; exit 1; }
echo "built in $(( $(date +%s) - started ))s"

test=("$build/loom-native-test" --require cuda --threads "$(nproc)")
part_a=(--device cuda)
part_b=(--models real --device cuda --baseline cpu --steps 20)

echo "== a. cuda kernels vs the reference"
status=0
# Hard stops (a hung kernel must not spend the session's GPU time): exit 124 counts as a failure.
# pipefail: each pipeline's status is the program's (tee does not fail).
timeout 300 "${test[@]}" "${part_a[@]}" "${seeds[@]}" 2>&1 | tee "$build/part-a.log" || status=$?

echo "== b. whole models, cuda vs cpu"
timeout 300 "${test[@]}" "${part_b[@]}" 2>&1 | tee "$build/part-b.log" || status=$?

# "passed", or "FAILED" with what the rerun's output says (part a: its failing cases).
rerun_result() {
  local rc=$1 out=$2 failures
  [ "$rc" -eq 0 ] && { echo passed; return; }
  failures=$(awk '$1 == "cuda" && $2 ~ /^[0-9]+$/ { print $4; exit }' "$out")
  echo "FAILED (rc $rc${failures:+, $failures failing cases})"
}

triage() {
  local budget=${LOOM_CHECK_TRIAGE_SECONDS:-150} t0 a_line a_seed="" a_families="" b_model paths all off p rc
  t0=$(date +%s)
  # "failed families: cuda seed 1: matmul,attention" (a device fault is its family's failure).
  a_line=$(grep -m1 '^failed families: cuda seed ' "$build/part-a.log" || true)
  if [ -n "$a_line" ]; then
    a_seed=$(awk '{ sub(":", "", $5); print $5 }' <<< "$a_line")
    a_families=${a_line##*: }
  fi
  b_model=$(awk '/^[a-z0-9]+ +(f32|bf16) / && / FAIL/ { print $1; exit }' "$build/part-b.log")
  echo "== c. which kernel path: part a seed ${a_seed:--} families ${a_families:--}; part b model ${b_model:--}" \
    "(budget ${budget}s)"
  if [ -z "$a_families" ] && [ -z "$b_model" ]; then
    echo "no failing family or model to rerun (a build, start or time-out failure: see above)"
    return
  fi
  mapfile -t paths < <("$build/loom-native-test" --kernel-paths)
  all=$(IFS=,; echo "${paths[*]}")
  printf '%-14s %-40s %s\n' "paths off" "part a" "part b"
  for p in "" "${paths[@]}" all; do
    if [ $(( $(date +%s) - t0 )) -ge "$budget" ]; then
      echo "(budget spent: the remaining rows were not run)"
      break
    fi
    off=$p
    [ "$p" = all ] && off=$all
    local ra=- rb=-
    if [ -n "$a_families" ]; then
      rc=0
      LOOM_CUDA_DISABLE=$off timeout 120 "${test[@]}" "${part_a[@]}" --seed "$a_seed" --families "$a_families" \
        > "$build/triage.log" 2>&1 || rc=$?
      ra=$(rerun_result "$rc" "$build/triage.log")
    fi
    if [ -n "$b_model" ]; then
      rc=0
      LOOM_CUDA_DISABLE=$off timeout 150 "${test[@]}" "${part_b[@]}" --model "$b_model" > "$build/triage.log" 2>&1 ||
        rc=$?
      rb=$(rerun_result "$rc" "$build/triage.log")
    fi
    printf '%-14s %-40s %s\n' "${p:-(none)}" "$ra" "$rb"
  done
}
[ $status -eq 0 ] || triage

echo "== $( [ $status -eq 0 ] && echo PASSED || echo FAILED ) in $(( $(date +%s) - started ))s"
exit $status
