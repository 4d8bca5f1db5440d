#!/usr/bin/env bash
# Same-run comparison of two revisions: builds the `mmrt` binary of OLD and NEW (git revisions;
# NEW may be "work" for the working tree as built in build/release), then alternates them
# ROUNDS times on
#   mmrt bench-model  on the 2b-shape checkpoint (prefill, decode batch 1 and 8, int8, vision)
#   mmrt bench        on the small checkpoint at each rate in RATES (fcfs:plain and slo)
# and prints every figure of both with the NEW/OLD ratio per round and its median. Machines here
# are shared and noisy: only ratios taken in the same run mean anything.
#
#   bench/compare_revisions.sh OLD NEW
#   env: ROUNDS (3), RATES ("28 34"), DURATION (10 s per bench run), STEPS (16, bench-model),
#        SKIP_MODEL=1 / SKIP_SLA=1 (one half only), WORK (build/compare: worktrees, logs),
#        M2B (build/m2b), SMALL (build/bench/small)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OLD=${1:?usage: bench/compare_revisions.sh OLD NEW}
NEW=${2:?usage: bench/compare_revisions.sh OLD NEW}
ROUNDS=${ROUNDS:-3}
RATES=${RATES:-"28 34"}
DURATION=${DURATION:-10}
STEPS=${STEPS:-16}
WORK=${WORK:-$ROOT/build/compare}
M2B=${M2B:-$ROOT/build/m2b}
SMALL=${SMALL:-$ROOT/build/bench/small}
mkdir -p "$WORK"
# Results of an earlier run would be read as this run's.
rm -f "$WORK"/model_*.txt "$WORK"/sla_*.json "$WORK"/sla_*.txt

# The mmrt binary of a revision (built once, cached under $WORK).
binary_of() {
  local rev=$1
  if [[ $rev == work ]]; then
    echo "$ROOT/build/release/tools/mmrt"
    return
  fi
  local sha
  sha=$(git rev-parse --short=12 "$rev")
  local dir="$WORK/src-$sha"
  if [[ ! -x $dir/build/tools/mmrt ]]; then
    echo "== building $rev ($sha) in $dir" >&2
    rm -rf "$dir"
    git worktree add --force --detach "$dir" "$sha" >&2
    cmake -S "$dir" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DMMRT_BUILD_TESTS=OFF -DMMRT_BUILD_BENCH=OFF >&2
    cmake --build "$dir/build" --target mmrt -j "$(nproc)" >&2
  fi
  echo "$dir/build/tools/mmrt"
}

OLD_BIN=$(binary_of "$OLD")
NEW_BIN=$(binary_of "$NEW")
echo "== OLD $OLD: $OLD_BIN" >&2
echo "== NEW $NEW: $NEW_BIN" >&2

# Checkpoints (written by NEW; both read the same Hugging Face layout).
[[ -f $SMALL/config.json ]] || "$NEW_BIN" make-tiny-model --arch qwen2-vl --size small --out "$SMALL" >&2
if [[ ${SKIP_MODEL:-0} != 1 && ! -f $M2B/config.json ]]; then
  "$NEW_BIN" make-tiny-model --arch qwen2-vl --size 2b-shape --out "$M2B" >&2
fi

for ((round = 1; round <= ROUNDS; ++round)); do
  # Alternate which revision goes first, so a drift of the machine hits both alike.
  if ((round % 2)); then order="old new"; else order="new old"; fi
  for who in $order; do
    bin=$OLD_BIN
    [[ $who == new ]] && bin=$NEW_BIN
    if [[ ${SKIP_MODEL:-0} != 1 ]]; then
      echo "== round $round: $who bench-model" >&2
      "$bin" bench-model --model "$M2B" --prompt 512 --steps "$STEPS" --image-side 448 \
        > "$WORK/model_${who}_${round}.txt"
    fi
    if [[ ${SKIP_SLA:-0} != 1 ]]; then
      for rate in $RATES; do
        echo "== round $round: $who bench --rate $rate" >&2
        "$bin" bench --model "$SMALL" --rate "$rate" --duration "$DURATION" \
          --policy fcfs:plain,slo --quiet --json "$WORK/sla_${who}_${round}_r${rate}.json" \
          > "$WORK/sla_${who}_${round}_r${rate}.txt"
      done
    fi
  done
done

/usr/bin/python3 "$ROOT/bench/compare_table.py" "$WORK" "$ROUNDS" "$RATES"
