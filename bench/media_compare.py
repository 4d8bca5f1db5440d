"""mmrt image preprocessing vs PIL + numpy vs OpenCV, one thread, same images, same output size.

    /usr/bin/python3 bench/media_compare.py [--mmrt build/release/tools/mmrt] [--repeat 15]

Images (made here from skimage's photographs): a 4K JPEG (astronaut upscaled to 3840x2160 with
PIL bicubic, saved at quality 90), a 1080p PNG (coffee upscaled to 1920x1080) and a 640x480 JPEG
(coffee, quality 90). Outputs: Qwen2-VL pixel_values at max_pixels = 1003520 (smart_resize), and
at a fixed 448x448.

Contenders, each timed from the file bytes in memory to pixel_values [N, 1176] float32:
  PIL     Image.open + convert("RGB") + resize(BICUBIC) + numpy rescale/normalise/patchify
          (tests/reference/media_qwen2vl_ref.py, transformers' slow-processor steps)
  OpenCV  cv2.imdecode + cvtColor(BGR->RGB) + cv2.resize(INTER_CUBIC) + the same numpy steps,
          cv2.setNumThreads(1)
  mmrt    `mmrt preprocess --repeat N --json` in reference and fast mode, one thread
Times are the best of N runs after 2 warm-ups (wall clock, and process CPU time in brackets).
The script also checks that mmrt reference equals PIL bit for bit and reports how far fast mode
and OpenCV are from it. Must run under Debian's /usr/bin/python3 (numpy, PIL 9.4, cv2).
"""

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import media_qwen2vl_ref as qref  # noqa: E402

import skimage.data  # noqa: E402

MAXPIX = 1003520


def make_images(d):
    data = os.path.dirname(skimage.data.__file__)
    out = {}
    specs = [("4k.jpg", "astronaut.png", (3840, 2160), "JPEG"),
             ("1080p.png", "coffee.png", (1920, 1080), "PNG"),
             ("640x480.jpg", "coffee.png", (640, 480), "JPEG")]
    for name, src, size, fmt in specs:
        p = os.path.join(d, name)
        if not os.path.exists(p):
            im = Image.open(os.path.join(data, src)).convert("RGB").resize(size, Image.BICUBIC)
            im.save(p, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
        with open(p, "rb") as f:
            out[name] = (p, f.read())
    return out


def timed(fn, repeat):
    for _ in range(2):
        fn()
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return min(wall), min(cpu), statistics.median(wall)


def target(h, w, fixed):
    if fixed:
        return 448, 448
    return qref.smart_resize(h, w, 28, 3136, MAXPIX)


def pil_path(data, fixed):
    rgb = qref.decode_rgb(data)
    rh, rw = target(rgb.shape[0], rgb.shape[1], fixed)
    return qref.normalize_and_patchify(qref.resize_rgb(rgb, rw, rh, Image.BICUBIC), qref.DEFAULTS)[0]


def cv_path(cv2, data, fixed):
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    rh, rw = target(rgb.shape[0], rgb.shape[1], fixed)
    return qref.normalize_and_patchify(cv2.resize(rgb, (rw, rh), interpolation=cv2.INTER_CUBIC),
                                       qref.DEFAULTS)[0]


def to_uint8(pv):
    """Inverts the normalisation (exact: neighbouring levels are 0.015 apart) -> uint8 values."""
    x = pv.reshape(pv.shape[0], 3, -1).astype(np.float64)
    mean = np.array(qref.OPENAI_CLIP_MEAN)[None, :, None]
    std = np.array(qref.OPENAI_CLIP_STD)[None, :, None]
    return np.rint((x * std + mean) * 255).astype(np.int32)


def diff(a, b):
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    du = np.abs(to_uint8(a) - to_uint8(b))
    return d.mean(), d.max(), du.mean(), du.max()


def run_mmrt(exe, model_dir, path, mode, fixed, repeat, prefix):
    cmd = [exe, "preprocess", "--model", model_dir, "--image", path, "--mode", mode,
           "--repeat", str(repeat + 2), "--json", "--out", prefix]
    if fixed:
        cmd += ["--size", "448x448"]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return r, np.load(prefix + ".pixel_values.npy")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mmrt", default=os.path.join(ROOT, "build", "release", "tools", "mmrt"))
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "media_bench"))
    args = ap.parse_args()
    import cv2
    cv2.setNumThreads(1)
    os.makedirs(args.work, exist_ok=True)
    model_dir = os.path.join(args.work, "model")
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "preprocessor_config.json"), "w") as f:
        json.dump({"min_pixels": 3136, "max_pixels": MAXPIX}, f)
    images = make_images(args.work)

    rows, acc = [], []
    for name, (path, data) in images.items():
        for fixed in (False, True):
            out = "448x448" if fixed else "max_pixels"
            pil_w, pil_c, _ = timed(lambda: pil_path(data, fixed), args.repeat)
            cv_w, cv_c, _ = timed(lambda: cv_path(cv2, data, fixed), args.repeat)
            prefix = os.path.join(args.work, f"{name}.{out}")
            ref_r, ref_pv = run_mmrt(args.mmrt, model_dir, path, "reference", fixed, args.repeat, prefix + ".ref")
            fast_r, fast_pv = run_mmrt(args.mmrt, model_dir, path, "fast", fixed, args.repeat, prefix + ".fast")
            pil_pv = pil_path(data, fixed)
            exact = pil_pv.shape == ref_pv.shape and np.array_equal(pil_pv.view(np.uint32), ref_pv.view(np.uint32))
            rs = ref_r["resized"]
            rows.append((name, f"{rs[0]}x{rs[1]}", pil_w, pil_c, cv_w, cv_c,
                         ref_r["best_ms"]["total"], ref_r["best_ms"]["cpu"],
                         fast_r["best_ms"]["total"], fast_r["best_ms"]["cpu"], exact,
                         fast_r["decoded"]))
            acc.append((name, f"{rs[0]}x{rs[1]}", fast_r["decoded"], diff(fast_pv, pil_pv),
                        diff(cv_path(cv2, data, fixed), pil_pv)))

    print(f"one thread, best of {args.repeat} (wall ms; process CPU ms in brackets)\n")
    print("| image | output | PIL + numpy | OpenCV | mmrt reference | mmrt fast | PIL / fast | OpenCV / fast"
          " | PIL / ref | OpenCV / ref | ref == PIL |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (n, o, pw, pc, cw, cc, rw, rc, fw, fc, ex, dec) in rows:
        print(f"| {n} | {o} | {pw:.1f} ({pc:.1f}) | {cw:.1f} ({cc:.1f}) | {rw:.1f} ({rc:.1f}) | "
              f"{fw:.1f} ({fc:.1f}) | {pw / fw:.1f}x | {cw / fw:.1f}x | {pw / rw:.1f}x | {cw / rw:.1f}x | "
              f"{'yes' if ex else 'NO'} |")
    print("\ndistance from the PIL reference: pixel_values mean / max abs, and the uint8 levels they"
          " encode mean / max abs")
    print("| image | output | fast decoded at | fast: pv mean / max | fast: uint8 mean / max"
          " | OpenCV: pv mean / max | OpenCV: uint8 mean / max |")
    print("|---|---|---|---|---|---|---|")
    for (n, o, dec, f, c) in acc:
        print(f"| {n} | {o} | {dec[0]}x{dec[1]} | {f[0]:.4f} / {f[1]:.3f} | {f[2]:.2f} / {f[3]} | "
              f"{c[0]:.4f} / {c[1]:.3f} | {c[2]:.2f} / {c[3]} |")


if __name__ == "__main__":
    main()
