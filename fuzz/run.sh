#!/usr/bin/env bash
# Runs every fuzz target (or those named) for SECONDS each, one after the other, and prints a
# table of executions and findings. Usage: fuzz/run.sh SECONDS [target ...]
# Corpus: the committed seeds (fuzz/corpus/T, read only) plus a working corpus that grows across
# runs (build/fuzz/corpus/T). A crash, leak, timeout or out-of-memory input is saved under
# build/fuzz/artifacts/T/ and makes the script exit 1.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/fuzz/fuzz
SECONDS_EACH=${1:?usage: fuzz/run.sh SECONDS [target ...]}
shift
TARGETS=("$@")
if ((${#TARGETS[@]} == 0)); then
  TARGETS=(fuzz_image fuzz_safetensors fuzz_config fuzz_tokenizer_json fuzz_tokenizer
           fuzz_chat_template fuzz_chat_request fuzz_workload fuzz_audio fuzz_video
           fuzz_http_request)
fi
declare -A MAX_LEN=([fuzz_image]=65536 [fuzz_tokenizer_json]=65536 [fuzz_audio]=65536
                   [fuzz_video]=65536)
failed=0
printf '%-22s %12s %10s %8s %s\n' target executions "exec/s" corpus findings
for t in "${TARGETS[@]}"; do
  work=$ROOT/build/fuzz/corpus/$t art=$ROOT/build/fuzz/artifacts/$t
  mkdir -p "$work" "$art"
  log=$ROOT/build/fuzz/$t.log
  before=$(ls "$art" | wc -l)
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1 \
    "$BIN/$t" "$work" "$ROOT/fuzz/corpus/$t" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 \
    -timeout=10 -max_len="${MAX_LEN[$t]:-16384}" -print_final_stats=1 \
    -artifact_prefix="$art/" > "$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$')
  found=$(( $(ls "$art" | wc -l) - before ))
  what=none
  if ((rc != 0 || found > 0)); then
    failed=1
    what="rc $rc, $found new artifact(s): $(grep -m1 -E 'ERROR|SUMMARY|deadly' "$log")"
  fi
  printf '%-22s %12s %10s %8s %s\n' "$t" "${runs:-?}" "${speed:-?}" "$(ls "$work" | wc -l)" "$what"
done
exit $failed
