#!/usr/bin/env bash
# What HTTP costs, measured in one run on the tiny checkpoint (ratios of the same run only):
#   1. TTFT and per-token gap: client-observed vs the server's own timeline (bench/http_ttft.py);
#   2. throughput at 64 concurrent streams: `mmrt bench` in-process vs `mmrt bench --url` with
#      the same trace (about 64 requests arriving within 100 ms, 128 tokens each), REPS times each.
# Usage: bench/http_overhead.sh [REPS] [SIZE]
#   SIZE: the qwen2-vl preset served, tiny (default) or small (hidden 768, 12 layers: a step of 64
#   sequences takes tens of milliseconds, as a real model's does, so part 2 weighs HTTP's per-token
#   work against a realistic per-token compute).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MMRT=$ROOT/build/release/tools/mmrt
REPS=${1:-3}
SIZE=${2:-tiny}
# The tiny checkpoint makes ~40k tokens/s on 2 cores: part 2 then measures what HTTP costs per
# streamed token (server formatting and writes, and the client's reading, on the same cores),
# an upper bound on its share for a real model, whose tokens come 100x slower. (The small
# random checkpoint emits many ids without text, which send no chunk: the client cannot see
# its first token.)
M=$ROOT/build/bench/$SIZE
[[ -f $M/config.json ]] || "$MMRT" make-tiny-model --arch qwen2-vl --size "$SIZE" --out "$M" >/dev/null
# Classes that accept a miss: every request is served, throughput is comparable.
SLA=$ROOT/build/bench/sla_accept.json
cat >"$SLA" <<'JSON'
{"classes": [{"name": "platinum", "ttft_ms": 300, "tpot_ms": 50, "on_miss": "accept"},
             {"name": "gold", "ttft_ms": 800, "tpot_ms": 100, "on_miss": "accept"},
             {"name": "silver", "ttft_ms": 5000, "on_miss": "accept"}], "default_class": "silver"}
JSON
source "$ROOT/scripts/serve_bg.sh"
serve_bg "$MMRT" --model "$M" --sla-config "$SLA"
PORT=$SERVE_PORT
echo "== 1. HTTP's share of TTFT and of the per-token gap (server on port $PORT)"
/usr/bin/python3 "$ROOT/bench/http_ttft.py" "$PORT" 200
echo "== 2. throughput at 64 concurrent streams: in-process vs over HTTP, same trace"
# A fresh server for every repetition: a server that has served the trace before would answer
# its prompts from the prefix cache, which the in-process engine starts without.
LOAD=(--workload text --rate 640 --duration 0.1 --max-tokens 128 --seed 3 --sla "$SLA" --quiet)
tok() { grep -o '[0-9.]* tok/s' | head -1 | grep -o '^[0-9.]*'; }
ratios=()
for r in $(seq 1 "$REPS"); do
  kill "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID" 2>/dev/null || true
  serve_bg "$MMRT" --model "$M" --sla-config "$SLA"
  a=$("$MMRT" bench --model "$M" --policy fcfs "${LOAD[@]}" | tok)
  b=$("$MMRT" bench --url "http://127.0.0.1:$SERVE_PORT" "${LOAD[@]}" | tok)
  ratio=$(/usr/bin/python3 -c "print(f'{$b / $a:.3f}')")
  ratios+=("$ratio")
  echo "  rep $r: in-process $a tok/s, HTTP $b tok/s, HTTP / in-process $ratio"
done
med=$(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(( (REPS + 1) / 2 ))p")
echo "  median ratio $med"
echo "  (at 64 streams: HTTP costs about (1/HTTP - 1/in-process) CPU seconds per token of the two)"
