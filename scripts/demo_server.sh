#!/usr/bin/env bash
# The server part of the demo: starts `mmrt serve` on the tiny checkpoint, talks to it with the
# official openai client (tests/js/demo_client.mjs), and stops it with SIGTERM.
# Usage: scripts/demo_server.sh MMRT_BINARY CHECKPOINT_DIR
set -euo pipefail
MMRT=${1:?usage: demo_server.sh MMRT CHECKPOINT}
DIR=${2:?usage: demo_server.sh MMRT CHECKPOINT}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/serve_bg.sh"
serve_bg "$MMRT" --model "$DIR"
PORT=$SERVE_PORT
echo "   mmrt serve listening on 127.0.0.1:$PORT"
(cd "$ROOT/tests/js" && node demo_client.mjs "http://127.0.0.1:$PORT/v1")
kill -TERM $SERVE_PID
wait $SERVE_PID
echo "   server stopped (SIGTERM: drained, exit 0)"
