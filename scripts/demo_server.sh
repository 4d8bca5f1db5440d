#!/usr/bin/env bash
# The server part of the demo: starts `mmrt serve` on the tiny checkpoint, talks to it with the
# official openai client (tests/js/demo_client.mjs), and stops it with SIGTERM.
# Usage: scripts/demo_server.sh MMRT_BINARY CHECKPOINT_DIR
set -euo pipefail
MMRT=${1:?usage: demo_server.sh MMRT CHECKPOINT}
DIR=${2:?usage: demo_server.sh MMRT CHECKPOINT}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOG=$(mktemp)
"$MMRT" serve --model "$DIR" --port 0 >"$LOG" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; rm -f "$LOG"' EXIT
PORT=""
for _ in $(seq 1 300); do
  PORT=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$LOG" | grep -o '[0-9]*$' || true)
  [[ -n "$PORT" ]] && grep -q "ready" "$LOG" && break
  kill -0 $PID 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 0.1
done
echo "   mmrt serve listening on 127.0.0.1:$PORT"
(cd "$ROOT/tests/js" && node demo_client.mjs "http://127.0.0.1:$PORT/v1")
kill -TERM $PID
wait $PID
echo "   server stopped (SIGTERM: drained, exit 0)"
