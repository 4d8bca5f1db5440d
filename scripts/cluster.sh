#!/usr/bin/env bash
# A cluster on one machine (docs/scale-out.md): etcd, NATS, N `mmrt serve` workers registered
# in etcd and publishing their load and cache events on NATS, and `mmrt router` in front
# (KV-aware: it reads the checkpoint's tokenizer and processor), on loopback.
#   scripts/cluster.sh up [N (default 2)] [MODEL_DIR (default build/bench/small)]
#   scripts/cluster.sh down
# env: ROUTER_PORT (8080), WORKER_PORT (first worker's port, 8001), ETCD_PORT (2379), NATS_PORT (4222),
#      SERVE_ARGS (extra `mmrt serve` arguments; unset: --batch-invariant, so that a stream
#      resumed on another worker goes on exactly as on the first, for 3-5 % of prefill; set it
#      empty to run without), ENCODE_WORKERS (0: with E > 0, E encode workers
#      `mmrt serve --role encode` on ports 8101.. and the workers use them, --remote-encoders
#      auto). Logs and pids: build/cluster/.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/release/tools/mmrt
D=build/cluster
ROUTER_PORT=${ROUTER_PORT:-8080}
WORKER_PORT=${WORKER_PORT:-8001}
ETCD_PORT=${ETCD_PORT:-2379}
ETCD_URL="http://127.0.0.1:$ETCD_PORT"
NATS_PORT=${NATS_PORT:-4222}
NATS_URL="nats://127.0.0.1:$NATS_PORT"

wait_http() {  # URL SECONDS WHAT
  for _ in $(seq 1 $(($2 * 10))); do
    curl -sf -o /dev/null "$1" && return 0
    sleep 0.1
  done
  echo "cluster: $3 did not answer at $1 within $2 s (logs in $D/)" >&2
  return 1
}

down() {
  [[ -d $D ]] || return 0
  for f in "$D"/router.pid "$D"/worker*.pid "$D"/encoder*.pid "$D"/etcd.pid "$D"/nats.pid; do
    [[ -f $f ]] || continue
    kill "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
  echo "cluster: stopped"
}

up() {
  local n=${1:-2} model=${2:-build/bench/small}
  [[ -x $B ]] || { echo "cluster: build first (make build)" >&2; exit 1; }
  command -v etcd >/dev/null || { echo "cluster: etcd is missing (scripts/setup.sh)" >&2; exit 1; }
  command -v nats-server >/dev/null || { echo "cluster: nats-server is missing (scripts/setup.sh)" >&2; exit 1; }
  if [[ ! -f $model/config.json ]]; then
    "$B" make-tiny-model --arch qwen2-vl --size small --out "$model" >/dev/null
  fi
  down
  mkdir -p "$D"
  rm -rf "$D/etcd-data"
  etcd --name mmrt --data-dir "$D/etcd-data" --listen-client-urls "$ETCD_URL" \
    --advertise-client-urls "$ETCD_URL" --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "mmrt=http://127.0.0.1:$((ETCD_PORT + 1))" >"$D/etcd.log" 2>&1 &
  echo $! >"$D/etcd.pid"
  wait_http "$ETCD_URL/health" 20 etcd
  nats-server -a 127.0.0.1 -p "$NATS_PORT" >"$D/nats.log" 2>&1 &
  echo $! >"$D/nats.pid"
  local e=${ENCODE_WORKERS:-0} remote=""
  for i in $(seq 1 "$e"); do
    "$B" serve --model "$model" --role encode --port $((8100 + i)) --cluster-etcd "$ETCD_URL" \
      >"$D/encoder$i.log" 2>&1 &
    echo $! >"$D/encoder$i.pid"
    remote="--remote-encoders auto"
  done
  for i in $(seq 1 "$n"); do
    local port=$((WORKER_PORT + i - 1))
    # shellcheck disable=SC2086
    "$B" serve --model "$model" --port "$port" --cluster-etcd "$ETCD_URL" \
      --cluster-nats "$NATS_URL" $remote ${SERVE_ARGS---batch-invariant} \
      >"$D/worker$i.log" 2>&1 &
    echo $! >"$D/worker$i.pid"
  done
  "$B" router --etcd "$ETCD_URL" --nats "$NATS_URL" --served-model-name "$(basename "$model")" \
    --model "$model" \
    --port "$ROUTER_PORT" >"$D/router.log" 2>&1 &
  echo $! >"$D/router.pid"
  for i in $(seq 1 "$n"); do wait_http "http://127.0.0.1:$((WORKER_PORT + i - 1))/health" 120 "worker $i"; done
  for i in $(seq 1 "$e"); do wait_http "http://127.0.0.1:$((8100 + i))/health" 120 "encode worker $i"; done
  wait_http "http://127.0.0.1:$ROUTER_PORT/health" 10 router
  echo "cluster: router on http://127.0.0.1:$ROUTER_PORT, $n workers, $e encode workers, etcd at $ETCD_URL"
  curl -s "http://127.0.0.1:$ROUTER_PORT/health"
  echo
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  *) echo "usage: scripts/cluster.sh up [N] [MODEL_DIR] | down" >&2; exit 2 ;;
esac
