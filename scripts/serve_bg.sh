# Sourced by the scripts that need a running `mmrt serve` (scripts/demo_server.sh,
# bench/http_overhead.sh). serve_bg MMRT ARGS...: starts `MMRT serve --port 0 ARGS...` in the
# background, waits until it is ready, and sets SERVE_PID and SERVE_PORT; the server is killed
# when the calling script exits. Exits 1 with the server's log if it stops before it is ready.
serve_bg() {
  local mmrt=$1
  shift
  SERVE_LOG=$(mktemp)
  "$mmrt" serve --port 0 "$@" >"$SERVE_LOG" 2>&1 &
  SERVE_PID=$!
  trap 'kill $SERVE_PID 2>/dev/null || true; rm -f "$SERVE_LOG"' EXIT
  SERVE_PORT=""
  for _ in $(seq 1 300); do
    SERVE_PORT=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$SERVE_LOG" | grep -o '[0-9]*$' || true)
    [[ -n "$SERVE_PORT" ]] && grep -q "ready" "$SERVE_LOG" && return 0
    kill -0 "$SERVE_PID" 2>/dev/null || { cat "$SERVE_LOG"; exit 1; }
    sleep 0.1
  done
  echo "mmrt serve did not get ready:" >&2
  cat "$SERVE_LOG" >&2
  exit 1
}
