#!/usr/bin/env bash
# The SLA rate sweep behind docs/benchmarks.md: `mmrt bench` on the small checkpoint at several
# Poisson rates, each serving one trace with fcfs:plain (no admission control, fixed budget: an
# engine without SLA classes), fcfs (mmrt's admission and batch controller, arrival order) and
# slo; then one table. Usage: bench/sla_sweep.sh [DURATION_S] [RATE ...]
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/release
D=${1:-10}
shift || true
RATES=("$@")
[[ ${#RATES[@]} -gt 0 ]] || RATES=(20 24 28 32 36 40)
MODEL=build/bench/small
[[ -f $MODEL/config.json ]] || "$B/tools/mmrt" make-tiny-model --arch qwen2-vl --size small --out "$MODEL"
OUT=build/bench/sla
mkdir -p "$OUT"
files=()
for r in "${RATES[@]}"; do
  echo "== rate $r req/s, $D s" >&2
  "$B/tools/mmrt" bench --model "$MODEL" --rate "$r" --duration "$D" --policy fcfs:plain,fcfs,slo \
    --json "$OUT/r${r}_d${D}.json" > "$OUT/r${r}_d${D}.txt"
  files+=("$OUT/r${r}_d${D}.json")
done
/usr/bin/python3 bench/sla_table.py "${files[@]}"
