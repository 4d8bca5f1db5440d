#!/bin/bash
# Runs on the GPU machine, from the repository root, with build/gpu-pack carried beside the
# working tree (scripts/gpu_pack.sh builds it here): unpacks the build, records the machine, runs
# the CUDA parameter of every per-device test suite and the model suites on cuda, and writes every
# log under $OUT (what comes back). Prints a short table last. Each stage has its own time limit;
# the whole stays under 8 minutes. Exit status: 0 when no stage failed.
# usage: OUT=/some/dir scripts/gpu_check.sh [STAGE...]   (stages: see `stages` below; default all)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mmrt-gpu-out}
mkdir -p "$OUT" build/gpu
pack=build/gpu-pack/mmrt-gpu.tar.xz
if [[ ! -f $pack ]]; then
  echo "gpu_check: $pack is missing: run scripts/gpu_pack.sh and carry build/gpu-pack" >&2
  exit 2
fi
dir=$(mktemp -d)
tar -C "$dir" -xJf "$pack"
B=$dir/pack
export LD_LIBRARY_PATH=$B/lib
summary=$OUT/summary.md
{
  echo "revision: $(paste -sd' ' build/gpu-pack/REVISION 2>/dev/null || echo unknown)"
  echo "date: $(date -u +%FT%TZ)"
} > "$summary"
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit \
  --format=csv > "$OUT/gpu.csv" 2>&1 || true
"$B/mmrt" devices > "$OUT/devices.txt" 2>&1 || true

# stage NAME LIMIT_S ENV CMD...: runs one stage, logs to $OUT/NAME.log, adds its table row.
failed=0
stage() {
  local name=$1 limit=$2 env=$3
  shift 3
  local t0=$SECONDS
  env $env timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local pass fail skip
  pass=$(grep -c '^\[       OK \]' "$OUT/$name.log")
  fail=$(grep -c '^\[  FAILED  \].*(' "$OUT/$name.log")
  skip=$(grep -c '^\[  SKIPPED \].*(' "$OUT/$name.log")
  ((rc != 0)) && failed=1
  printf '| %-16s | rc %3s | %4s ok | %3s failed | %3s skipped | %4ss |\n' "$name" "$rc" "$pass" \
    "$fail" "$skip" "$((SECONDS - t0))" >> "$summary"
}
stages=(${@:-ops linear models models_ref bench})
for s in "${stages[@]}"; do
  case $s in
    ops)  # every op suite's cuda parameter (PyTorch references run on this machine's python3)
      stage ops_cuda 120 "" "$B/test_ops" --gtest_filter='*/cuda'
      stage ops_ref_cuda 180 "" "$B/test_ops_ref" --gtest_filter='*/cuda' ;;
    linear)
      stage linear_cuda 60 "" "$B/test_linear" --gtest_filter='*cuda*'
      stage linear_ref_cuda 120 "" "$B/test_linear_ref" --gtest_filter='*cuda*' ;;
    models)  # skipped, naming the ops cuda lacks, until every family's ops are there
      stage models_cuda 120 "MMRT_TEST_DEVICE=cuda" "$B/test_models" ;;
    models_ref)
      stage models_ref_cuda 240 "MMRT_TEST_DEVICE=cuda" "$B/test_models_ref" ;;
    bench)  # the CPU side of the same machine, for same-run ratios later
      stage bench_ops_cpu 60 "" "$B/bench_ops" --benchmark_filter='EncoderBlock' \
        --benchmark_min_time=0.2 ;;
    *) echo "gpu_check: unknown stage $s" >&2; exit 2 ;;
  esac
done
rm -rf "$dir"
echo
cat "$OUT/gpu.csv" 2>/dev/null | tail -1
head -3 "$OUT/devices.txt"
cat "$summary"
exit $failed
