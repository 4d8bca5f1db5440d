#!/usr/bin/env bash
# Runs every benchmark program once, briefly (`make bench`). Figures are recorded in docs/.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/release
for prog in "$B"/bench/bench_*; do
  [[ -x $prog ]] || continue
  echo "== $(basename "$prog")"
  "$prog" --benchmark_min_time=0.1
done
echo "== tokenizer, JavaScript reference"
node bench/tokenizer_js.mjs 1
node bench/tokenizer_js.mjs 1 llama2
echo "== media vs PIL and OpenCV"
/usr/bin/python3 bench/media_compare.py --mmrt "$B/tools/mmrt" --repeat 3
echo "== model speed on the small checkpoint"
[[ -f build/bench/small/config.json ]] || "$B/tools/mmrt" make-tiny-model --arch qwen2-vl --size small --out build/bench/small
"$B/tools/mmrt" bench-model --model build/bench/small --concurrency 1,4,16
echo "== media sandbox overhead"
bash bench/sandbox_overhead.sh 10
echo "== video: preprocessing vs PyAV + torchvision, and the temporal tiers"
/usr/bin/python3 bench/video_bench.py --mmrt "$B/tools/mmrt" --repeat 3
echo "== video: a streamed clip (segmented prefill) vs the whole clip, TTFT of the question"
/usr/bin/python3 bench/video_stream_ttft.py --mmrt "$B/tools/mmrt" --reps 3
