#!/bin/bash
# Runs on the GPU machine, from the repository root, with build/gpu-pack carried beside the
# working tree (scripts/gpu_pack.sh builds it here): unpacks the build, records the machine, runs
# the CUDA parameter of every per-device test suite and the model suites on cuda, and writes every
# log under $OUT (what comes back). Prints a short table last. Each stage has its own time limit;
# a stage that would pass DEADLINE seconds (default 480: a device call's limit is 600) is cut to
# it, and the stages after it are reported as not run. Exit status: 0 when no stage failed.
# usage: OUT=/some/dir [DEADLINE=480] scripts/gpu_check.sh [STAGE...]
#        (stages: ops linear models engine bench_model bench_engine models_ref bench hf; default
#        all, in that order: the figures before the slow PyTorch model references)
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
# The pack's libraries first; cuBLAS is the machine's (the toolkit's folder where ldconfig lacks it).
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
summary=$OUT/summary.md
{
  echo "revision: $(paste -sd' ' build/gpu-pack/REVISION 2>/dev/null || echo unknown)"
  echo "date: $(date -u +%FT%TZ)"
} > "$summary"
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit \
  --format=csv > "$OUT/gpu.csv" 2>&1 || true
"$B/mmrt" devices > "$OUT/devices.txt" 2>&1 || true

# stage NAME LIMIT_S ENV CMD...: runs one stage, logs to $OUT/NAME.log, adds its table row.
DEADLINE=${DEADLINE:-480}
failed=0
last_rc=0  # the last stage's exit status
stage() {
  local name=$1 limit=$2 env=$3
  shift 3
  local left=$((DEADLINE - SECONDS))
  if ((left < 10)); then
    printf '| %-16s | not run: the %ss deadline |\n' "$name" "$DEADLINE" >> "$summary"
    return
  fi
  ((limit > left)) && limit=$left
  local t0=$SECONDS
  env $env timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local pass fail skip note
  pass=$(grep -c '^\[       OK \]' "$OUT/$name.log")
  fail=$(grep -c '^\[  FAILED  \].*(' "$OUT/$name.log")
  skip=$(grep -c '^\[  SKIPPED \].*(' "$OUT/$name.log")
  note=$(grep -m1 -o 'model tests skipped on .*\|model tests on .*' "$OUT/$name.log" | cut -c1-90)
  ((rc == 124)) && note="timed out after ${limit}s"
  ((rc != 0)) && failed=1
  last_rc=$rc
  printf '| %-16s | rc %3s | %4s ok | %3s failed | %3s skipped | %4ss | %s\n' "$name" "$rc" \
    "$pass" "$fail" "$skip" "$((SECONDS - t0))" "$note" >> "$summary"
}
stages=(${@:-ops linear models engine bench_model bench_engine models_ref bench hf})
for s in "${stages[@]}"; do
  case $s in
    ops)  # every op suite's cuda parameter (PyTorch references run on this machine's python3)
      stage ops_cuda 60 "" "$B/test_ops" --gtest_filter='*/cuda'
      stage ops_ref_cuda 120 "" "$B/test_ops_ref" --gtest_filter='*/cuda' ;;
    linear)
      stage linear_cuda 30 "" "$B/test_linear" --gtest_filter='*cuda*'
      stage linear_ref_cuda 90 "" "$B/test_linear_ref" --gtest_filter='*cuda*' ;;
    models)
      stage models_cuda 60 "MMRT_TEST_DEVICE=cuda" "$B/test_models" ;;
    engine)  # the engine's mixed workload batched on the GPU against each request alone
      stage engine_cuda 60 "" "$B/test_engine_model" --gtest_filter='*EngineDevice*/cuda' ;;
    models_ref)
      stage models_ref_cuda 300 "MMRT_TEST_DEVICE=cuda" "$B/test_models_ref" ;;
    bench_model)  # the 2b-shape checkpoint on cuda: bandwidth, prefill, decode bf16, int8, fp8
      "$B/mmrt" make-tiny-model --arch qwen2-vl --size 2b-shape --out "$dir/m2b" \
        > "$OUT/make_m2b.log" 2>&1
      stage bench_model_cuda 180 "" "$B/mmrt" bench-model --model "$dir/m2b" --device cuda \
        --prompt 307 --steps 16 --image-side 448 --audio-seconds 0 --bandwidth-mb 4096
      # Without step graphs where that failed: the op-by-op figures at least.
      ((last_rc != 0)) && stage bench_model_eager 120 "" "$B/mmrt" bench-model --model \
        "$dir/m2b" --device cuda --prompt 307 --steps 16 --image-side 448 --audio-seconds 0 \
        --bandwidth-mb 4096 --step-graphs 0 ;;
    bench_engine)  # 64 streams through the engine (decode steps as graphs), after 1
      stage bench_engine_cuda 120 "" "$B/mmrt" bench-model --model "$dir/m2b" --device cuda \
        --prompt 64 --steps 4 --no-int8 --image-side 448 --audio-seconds 0 --bandwidth-mb 1024 \
        --kv-mb 4096 --concurrency 1,64 ;;
    hf)  # the anchors in the same call: Hugging Face eager, then plain PyTorch with a CUDA graph
      stage hf_anchor 150 "" python3 scripts/gpu/hf_anchor.py
      stage torch_anchor 90 "" python3 scripts/gpu/torch_decode_anchor.py ;;
    bench)  # the CPU side of the same machine, for same-run ratios later
      stage bench_ops_cpu 30 "" "$B/bench_ops" --benchmark_filter='EncoderBlock' \
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
