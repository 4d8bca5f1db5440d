#!/usr/bin/env bash
# Regenerates the example reports of docs/verify.md on this machine: a tiny model, a server with
# its threads at a lower priority than the load generator (2 cores), a comfortable run saved as
# the baseline (PASS) and an overloaded run compared with it (FAIL).
#   bash docs/examples/make_verify_examples.sh [path/to/mmrt]
set -euo pipefail
cd "$(dirname "$0")"
MMRT=${1:-../../build/release/tools/mmrt}
WORK=$(mktemp -d)
trap 'kill $(cat "$WORK/pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$WORK"' EXIT
"$MMRT" make-tiny-model --arch qwen2-vl --out "$WORK/tiny" >/dev/null
"$MMRT" serve --model "$WORK/tiny" --port 0 >"$WORK/serve.log" 2>&1 &
echo $! >"$WORK/pid"
for _ in $(seq 600); do
  URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$WORK/serve.log" | head -1 || true)
  [[ -n "$URL" ]] && curl -sf "$URL/health" >/dev/null && break
  sleep 0.1
done
for t in /proc/$(cat "$WORK/pid")/task/*; do renice -n 10 -p "$(basename "$t")" >/dev/null; done
set +e
"$MMRT" verify --url "$URL" --workload verify-comfortable.yaml --save-baseline "$WORK/lab.json" \
  --report verify-pass.html --json "$WORK/pass.json" | tee verify-pass.txt
echo "exit $?"
"$MMRT" verify --url "$URL" --workload verify-overloaded.yaml --baseline "$WORK/lab.json" \
  --report verify-fail.html --json "$WORK/fail.json" | tee verify-fail.txt
echo "exit $?"
