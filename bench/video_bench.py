"""Video: mmrt's preprocessing against PyAV + torchvision, and what the temporal tiers save.

    /usr/bin/python3 bench/video_bench.py [--mmrt build/release/tools/mmrt]
        [--model build/bench/small] [--repeat 3] [--sweep 0.5,1,2,4,8,16] [--out build/bench/video]

Three 8-second 640x360 30 fps H.264 clips are made here with ffmpeg's lavfi sources (the same
bytes every run: x264 on one thread):
  object   a 24-pixel white box sliding over a flat blue background (a static camera)
  screen   a white page with a colour-bar panel and a text cursor that steps every 2 s
           (a screen recording: mostly static)
  moving   testsrc2: moving gradients, a counter and a scrolling pattern (the worst case)

1. Preprocessing, one thread, from the file's bytes in memory to pixel_values_videos:
     python  PyAV decode (thread_count 1) of every frame, as torchvision.io.read_video does,
             the sampled frames as uint8 [T, C, H, W], torchvision resize (bicubic, antialias)
             to fetch_video's size, then Qwen2VLImageProcessor's steps (PIL resize at the same
             size, rescale, normalise, patchify: tests/reference/media_qwen2vl_ref.py),
             torch.set_num_threads(1)
     mmrt    `mmrt preprocess --video F --repeat N --json` (one thread)
   Best of N after a warm-up, per stage.
2. `mmrt bench-video` on the checkpoint (default: the small random one, made here if missing):
   no temporal reuse, the exact tier and the approximate tier at each threshold of the sweep;
   video tokens, prefill and time to first token as ratios to no reuse from the same run, and
   the approximate tier's KL divergence and greedy agreement against the exact tier's.
Prints markdown tables (docs/video.md records them) and writes the raw JSON next to the clips.
"""

import argparse
import io
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

import av  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torchvision.transforms import InterpolationMode  # noqa: E402
from torchvision.transforms import functional as TF  # noqa: E402

import media_qwen2vl_ref as hf  # noqa: E402
import qwen2_vl_video_ref as vref  # noqa: E402

SECONDS, RATE, SIZE = 8, 30, "640x360"
X264 = ["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", "-threads", "1"]
CLIPS = [
    ("object",
     f"color=c=0x3366aa:s={SIZE}:r={RATE}:d={SECONDS},format=rgb24[bg];"
     f"color=c=white:s=24x24:r={RATE}:d={SECONDS},format=rgb24[b];"
     "[bg][b]overlay=x='mod(4*n\\,616)':y=168:shortest=1:format=rgb"),
    ("screen",
     f"color=c=white:s={SIZE}:r={RATE}:d={SECONDS},format=rgb24[bg];"
     f"smptebars=s=320x180:r={RATE}:d={SECONDS},format=rgb24[p];"
     f"color=c=black:s=4x16:r={RATE}:d={SECONDS},format=rgb24[c];"
     "[bg][p]overlay=x=24:y=24:shortest=1:format=rgb[s];"
     "[s][c]overlay=x='360+8*floor(t/2)':y=240:shortest=1:format=rgb"),
    ("moving", f"testsrc2=s={SIZE}:r={RATE}:d={SECONDS}"),
]


def make_clips(out):
    paths = {}
    for name, graph in CLIPS:
        p = os.path.join(out, name + ".mp4")
        if not os.path.exists(p):
            subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-filter_complex", graph] + X264 +
                           [p + ".tmp.mp4"], check=True)
            os.replace(p + ".tmp.mp4", p)
        paths[name] = p
    return paths


def python_preprocess(data, pp):
    """qwen-vl-utils' torchvision path + the slow processor, timed per stage (ms)."""
    t0 = time.perf_counter()
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.video[0]
        s.thread_count = 1
        fps = float(s.average_rate)
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    h, w = frames[0].shape[:2]
    plan = vref.plan(w, h, fps, len(frames), pp=pp)
    video = torch.from_numpy(np.stack([frames[i] for i in plan["indices"]])).permute(0, 3, 1, 2)
    t1 = time.perf_counter()
    rh, rw = plan["video_size"]
    resized = TF.resize(video, [rh, rw], interpolation=InterpolationMode.BICUBIC, antialias=True)
    hwc = [f.permute(1, 2, 0).contiguous().numpy() for f in resized]
    t2 = time.perf_counter()
    flat, grid = vref.processor_frames(hwc, hf.load_config(pp))
    t3 = time.perf_counter()
    return {"decode": (t1 - t0) * 1e3, "resize": (t2 - t1) * 1e3, "patchify": (t3 - t2) * 1e3,
            "total": (t3 - t0) * 1e3, "tokens": flat.shape[0] // 4, "grid": grid}


def best_of(fn, repeat):
    fn()
    runs = [fn() for _ in range(repeat)]
    return {k: (min(r[k] for r in runs) if isinstance(runs[0][k], float) else runs[0][k])
            for k in runs[0]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mmrt", default=os.path.join(ROOT, "build/release/tools/mmrt"))
    ap.add_argument("--model", default=os.path.join(ROOT, "build/bench/small"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build/bench/video"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sweep", default="0.5,1,2,4,8,16")
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    torch.set_num_threads(1)
    os.makedirs(a.out, exist_ok=True)
    if not os.path.exists(os.path.join(a.model, "config.json")):
        print(f"[video_bench] making the small checkpoint in {a.model}", file=sys.stderr)
        subprocess.run([a.mmrt, "make-tiny-model", "--arch", "qwen2-vl", "--size", "small",
                        "--out", a.model], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(a.model, "preprocessor_config.json")) as f:
        pp = json.load(f)
    clips = make_clips(a.out)

    print("### Preprocessing, one thread, best of %d (ms)\n" % a.repeat)
    print("| clip | tokens | python decode | resize | processor | total | mmrt decode | resize "
          "| patchify | total | python / mmrt |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, path in clips.items():
        print(f"[video_bench] preprocessing {name}", file=sys.stderr)
        with open(path, "rb") as f:
            data = f.read()
        py = best_of(lambda: python_preprocess(data, pp), a.repeat)
        r = subprocess.run([a.mmrt, "preprocess", "--model", a.model, "--video", path, "--repeat",
                            str(a.repeat + 1), "--json"], check=True, capture_output=True,
                           text=True)
        m = json.loads(r.stdout)
        if m["tokens"] != py["tokens"] or m["grid_thw"] != py["grid"]:
            sys.exit(f"{name}: mmrt made {m['tokens']} tokens {m['grid_thw']}, "
                     f"the reference {py['tokens']} {py['grid']}")
        b = m["best_ms"]
        print(f"| {name} | {m['tokens']} | {py['decode']:.0f} | {py['resize']:.0f} | "
              f"{py['patchify']:.0f} | {py['total']:.0f} | {b['decode']:.1f} | {b['resize']:.1f} | "
              f"{b['patchify']:.1f} | {b['total']:.1f} | {py['total'] / b['total']:.1f}x |")

    js = os.path.join(a.out, "bench_video.json")
    print(f"[video_bench] mmrt bench-video over {len(clips)} clips", file=sys.stderr)
    subprocess.run([a.mmrt, "bench-video", "--model", a.model, "--video", ",".join(clips.values()),
                    "--sweep", a.sweep, "--repeat", str(a.repeat), "--json", js], check=True,
                   stdout=sys.stderr)
    with open(js) as f:
        res = json.load(f)
    print("\n### Temporal tiers on the checkpoint, medians of %d interleaved runs\n" % a.repeat)
    print("| clip | tier | video tokens | kept | tokens / s of video | encoder vs none | "
          "prefill vs none | TTFT ms | TTFT vs none | KL mean (nats) | KL max | greedy |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in res:
        name = os.path.splitext(os.path.basename(c["video"]))[0]
        full = next(v for v in c["variants"] if v["tier"] == "exact")["video_tokens"]
        for v in c["variants"]:
            print(f"| {name} | {v['tier']} | {v['video_tokens']} | "
                  f"{100 * v['video_tokens'] / full:.1f}% | {v['video_tokens'] / SECONDS:.0f} | "
                  f"{v['encoder_vs_none']:.2f}x | {v['prefill_vs_none']:.2f}x | "
                  f"{v['ttft_ms']:.0f} | {v['ttft_vs_none']:.2f}x | {v['kl_mean']:.2g} | "
                  f"{v['kl_max']:.2g} | {v['greedy_agree']}/{v['positions']} |")
    print("\nThe exact tier's top token (mean over the positions): " + "; ".join(
        f"{os.path.splitext(os.path.basename(c['video']))[0]} p {c['exact_top_p']:.3f}, "
        f"{c['exact_top_margin']:.3f} nats above the second" for c in res) + ".")


if __name__ == "__main__":
    main()
