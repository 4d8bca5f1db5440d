"""Writes the torchvision-resize test set and what the real torchvision 0.14 makes of it.

    /usr/bin/python3 tests/reference/resize_torch_ref.py --out DIR

For each case, DIR/manifest.json records a source image (uint8 [H, W, 3] .npy) and
  expect:         torchvision.transforms.functional.resize(frames, [h, w], BICUBIC, antialias=True)
                  on a uint8 [1, 3, H, W] tensor, in this process (torch's own CPU kernel choice)
  expect_default: the same with ATEN_CPU_CAPABILITY=default (torch's no-AVX build), in a child
                  process
both as uint8 [h, w, 3]. The manifest also names the capability this process's torch used
("AVX2", "AVX512" or "NO AVX"). Sources: photographs from skimage's data folder (scaled and
tiled to size), smooth gradients, uniform noise and black-on-white text-like strokes.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F

import skimage.data

DATA = os.path.dirname(skimage.data.__file__)

# (source width, height, target width, height, content)
CASES = [
    (1920, 1080, 644, 364, "photo"),   # qwen-vl-utils' frame sizes
    (1920, 1080, 1288, 728, "photo"),
    (1920, 1080, 644, 364, "text"),
    (640, 360, 644, 364, "photo"),     # a slight upscale
    (640, 360, 644, 364, "noise"),
    (320, 240, 336, 252, "photo"),
    (320, 240, 336, 252, "gradient"),
    (1280, 720, 448, 252, "text"),
    (333, 217, 97, 61, "noise"),       # odd sizes, down and up
    (97, 61, 333, 217, "photo"),
    (640, 480, 640, 240, "photo"),     # one axis only
    (640, 480, 320, 480, "gradient"),
    (64, 64, 65, 63, "noise"),
    (50, 40, 50, 40, "noise"),         # same size: a copy
    (1, 1, 5, 7, "noise"),
    (7, 5, 1, 1, "noise"),
    (1, 97, 3, 20, "photo"),
    (600, 10, 37, 3, "text"),          # extreme ratios
    (2000, 30, 28, 56, "gradient"),
    (13, 1000, 56, 28, "noise"),
    (4000, 8, 3, 8, "noise"),
]


def photo(w, h, seed):
    names = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg"]
    im = Image.open(os.path.join(DATA, names[seed % len(names)])).convert("RGB")
    # Scale the short side to fit, then tile (mirrored) to the exact size: natural content at
    # the resolution of a real frame.
    s = max(w / im.width, h / im.height, 0.05)
    im = im.resize((max(1, round(im.width * s)), max(1, round(im.height * s))), Image.BICUBIC)
    a = np.array(im)
    reps = (-(-h // a.shape[0]) + 1, -(-w // a.shape[1]) + 1, 1)
    a = np.tile(np.concatenate([a, a[::-1]], 0), (reps[0], 1, 1))
    a = np.tile(np.concatenate([a, a[:, ::-1]], 1), (1, reps[1], 1))
    return np.ascontiguousarray(a[:h, :w])


def content(kind, w, h, rng, seed):
    if kind == "photo":
        return photo(w, h, seed)
    if kind == "noise":
        return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    if kind == "gradient":
        y, x = np.mgrid[0:h, 0:w].astype(np.float64)
        r = 255 * x / max(w - 1, 1)
        g = 255 * y / max(h - 1, 1)
        b = 127.5 + 127.5 * np.sin(x / 7.0 + y / 11.0)
        return np.clip(np.stack([r, g, b], -1) + rng.normal(0, 2, (h, w, 3)), 0, 255).astype(np.uint8)
    # text: white background, dark 1-3 px strokes in rows of "glyphs", a coloured banner.
    a = np.full((h, w, 3), 245, np.uint8)
    for y0 in range(2, h - 2, 14):
        for x0 in range(2, w - 2, 9):
            if rng.random() < 0.25:
                continue
            glyph = rng.random((10, 7)) < 0.35
            sub = a[y0:y0 + 10, x0:x0 + 7]
            sub[glyph[:sub.shape[0], :sub.shape[1]]] = (20, 20, 30)
    a[: max(1, h // 12)] = (200, 30, 40)
    return a


def tv_resize(src, w, h):
    t = torch.from_numpy(src).permute(2, 0, 1)[None].contiguous()
    out = F.resize(t, [h, w], interpolation=InterpolationMode.BICUBIC, antialias=True)
    return out[0].permute(1, 2, 0).contiguous().numpy()


def capability():
    return torch.__config__.show().split("CPU capability usage:")[1].split("\n")[0].strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--expect-only", action="store_true", help="(child) write expect_default only")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = args.out
    if args.expect_only:
        with open(os.path.join(out, "manifest.json")) as f:
            manifest = json.load(f)
        for c in manifest["cases"]:
            src = np.load(os.path.join(out, c["src"]))
            np.save(os.path.join(out, c["expect_default"]), tv_resize(src, c["w"], c["h"]))
        return
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20240614)
    manifest = {"torch": torch.__version__, "capability": capability(), "cases": []}
    for n, (sw, sh, w, h, kind) in enumerate(CASES):
        src = content(kind, sw, sh, rng, n)
        assert src.shape == (sh, sw, 3), (src.shape, sw, sh)
        name = f"case{n:02d}"
        np.save(os.path.join(out, name + ".src.npy"), src)
        np.save(os.path.join(out, name + ".expect.npy"), tv_resize(src, w, h))
        manifest["cases"].append({"src": name + ".src.npy", "expect": name + ".expect.npy",
                                  "expect_default": name + ".default.npy", "w": w, "h": h,
                                  "content": kind})
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    subprocess.run([sys.executable, os.path.abspath(__file__), "--out", out, "--expect-only"],
                   env=env, check=True)


if __name__ == "__main__":
    main()
