#!/usr/bin/env bash
# The promise at the socket under overload (docs/benchmarks.md): bench/promise_sweep.py against
# `mmrt serve` on the small checkpoint, rates from half to 10x its capacity, each policy on a
# fresh server. Usage: bench/promise_sweep.sh [DURATION_S] [RATES (comma list)] [POLICIES] [SEEDS]
#   SEEDS (comma list): each rate and policy once per seed, with goodput per seed and its mean
#   (single runs move by up to 10 %: compare policies on several seeds)
#   env: SERVE_ARGS (extra `mmrt serve` arguments, e.g. "--compute-nice 0")
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/release
D=${1:-30}
RATES=${2:-"6,12,24,48,120"}
POLICIES=${3:-"slo,fcfs,fcfs:plain"}
SEEDS=${4:-}
MODEL=build/bench/small
[[ -f $MODEL/config.json ]] || "$B/tools/mmrt" make-tiny-model --arch qwen2-vl --size small --out "$MODEL"
OUT=build/bench/promise
mkdir -p "$OUT"
extra=()
for a in ${SERVE_ARGS:-}; do extra+=(--serve-arg="$a"); done
[[ -n $SEEDS ]] && extra+=(--seeds "$SEEDS")
/usr/bin/python3 bench/promise_sweep.py --mmrt "$B/tools/mmrt" --model "$MODEL" --rates "$RATES" \
  --duration "$D" --policies "$POLICIES" --json "$OUT/sweep_d${D}.json" "${extra[@]}"
