#!/usr/bin/env bash
# The media sandbox's cost per image against in-process decoding, in one run (mmrt bench-sandbox):
# a 3840x2160 photo-like JPEG and a 448x448 PNG, written by PIL, through the tiny checkpoint's
# Qwen2-VL preprocessing (the weights do not matter: only the processor is loaded).
# Usage: bench/sandbox_overhead.sh [ITERATIONS]   (JSON in build/bench/sandbox/result.json)
set -euo pipefail
cd "$(dirname "$0")/.."
M=build/release/tools/mmrt
D=build/bench/sandbox
mkdir -p "$D"
[[ -f build/bench/tiny/config.json ]] || "$M" make-tiny-model --arch qwen2-vl --out build/bench/tiny >/dev/null
if [[ ! -f $D/4k.jpg || ! -f $D/448.png ]]; then
  /usr/bin/python3 - "$D" <<'PY'
import sys
import numpy as np
from PIL import Image
d, r = sys.argv[1], np.random.default_rng(7)
def photo(w, h):
    # smooth gradients + texture + noise: compresses like a photograph, not like flat colour
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([128 + 90 * np.sin(x / 97 + y / 131), 128 + 80 * np.cos(x / 61 - y / 89),
                     128 + 70 * np.sin((x + y) / 173)], -1)
    tex = 25 * np.sin(x / 3.1) * np.cos(y / 4.7)
    img = base + tex[..., None] + r.normal(0, 6, (h, w, 3))
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
photo(3840, 2160).save(f"{d}/4k.jpg", quality=90)
photo(448, 448).save(f"{d}/448.png")
PY
fi
"$M" bench-sandbox --model build/bench/tiny --image "$D/4k.jpg" --image "$D/448.png" \
  --iterations "${1:-30}" --json "$D/result.json"
