#!/usr/bin/env python3
"""Independent reference for Qwen2-VL video input, written from the definitions of
qwen-vl-utils 0.0.8 (vision_process.py: smart_nframes, the torchvision reader, fetch_video,
fetch_image, smart_resize) and transformers' Qwen2VLImageProcessor._preprocess for videos, plus
get_rope_index over prompts with videos (tests/reference/qwen2_vl_ref.py). Runs under Debian's
/usr/bin/python3 (torch 1.13, torchvision 0.14, PyAV 10, PIL 9.4, numpy); qwen-vl-utils and
transformers are not needed.

    /usr/bin/python3 tests/reference/qwen2_vl_video_ref.py --out DIR

DIR/manifest.json (every array in an .npy file next to it):
  sampling.nframes  [total, fps, rule, fixed nframes, frame_factor, n or -1 (ValueError)] rows
  sampling.linspace [total, n, offset] rows; linspace.npy holds every
                    torch.linspace(0, total - 1, n).round().long() back to back (float32, this
                    process's torch kernel: manifest "capability")
  plans             VideoInfo-like headers (width, height, fps, frames) with the sampling rule,
                    frame factor and the processor's budgets -> n, indices, sample_fps, the
                    fetch_video max_pixels, the qwen-vl-utils size, the processor's size, grid
  clips             files made here with the ffmpeg CLI (lavfi sources: testsrc2, a static
                    `color` scene with a small box that stops after 15 frames, the same box
                    always moving; H.264, lossless H.264, VP9; 10, 24, 25, 29.97, 30, 60 fps),
                    what PyAV reads (fps = float(average_rate), frames = decoded frames), the
                    plan, pixel_values_videos (.npy f32: PyAV rgb24 -> uint8 TCHW ->
                    torchvision resize -> the processor), video_grid_thw, and the frame/slice
                    equalities of the decoded frames (equal bytes): first_equal_slice,
                    frames_reused; the approximate tier's kept tokens at several thresholds
                    (prune: [{threshold, kept .npy int64}], from the uint8 frames). FRAME_FACTOR 2 always samples an even count; the odd case
                    (the last frame repeated by the processor) uses frame_factor 1.
  frame_lists       uint8 frames (.npy [n, H, W, 3] each) through fetch_image (PIL BICUBIC) and
                    the processor: pixel_values_videos, grid
  rope              prompts with image and video pads: the expanded ids, Qwen2-VL positions and
                    Qwen2.5-VL ones for tokens_per_second 2 and 4, computed as HF does (float32)
                    and in double; [3 * S] int64 followed by rope_delta
"""

import argparse
import json
import math
import os
import subprocess
import sys

import av
import numpy as np
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as TF

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import media_qwen2vl_ref as hf  # noqa: E402  transformers' smart_resize, rescale/normalise
import qwen2_vl_ref  # noqa: E402  get_rope_index

# qwen-vl-utils 0.0.8 module constants.
IMAGE_FACTOR = 28
MIN_PIXELS = 4 * 28 * 28
MAX_PIXELS = 16384 * 28 * 28
MAX_RATIO = 200
VIDEO_MIN_PIXELS = 128 * 28 * 28
VIDEO_MAX_PIXELS = 768 * 28 * 28
VIDEO_TOTAL_PIXELS = 24576 * 28 * 28
FRAME_FACTOR = 2
FPS = 2.0
FPS_MIN_FRAMES = 4
FPS_MAX_FRAMES = 768

FFMPEG = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-y"]


def round_by_factor(number, factor):
    return round(number / factor) * factor


def ceil_by_factor(number, factor):
    return math.ceil(number / factor) * factor


def floor_by_factor(number, factor):
    return math.floor(number / factor) * factor


def smart_resize(height, width, factor=IMAGE_FACTOR, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS):
    """qwen-vl-utils' smart_resize (0.0.8, with the later max(factor, .) guards)."""
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(f"absolute aspect ratio must be smaller than {MAX_RATIO}")
    h_bar = max(factor, round_by_factor(height, factor))
    w_bar = max(factor, round_by_factor(width, factor))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, floor_by_factor(height / beta, factor))
        w_bar = max(factor, floor_by_factor(width / beta, factor))
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = ceil_by_factor(height * beta, factor)
        w_bar = ceil_by_factor(width * beta, factor)
    return h_bar, w_bar


def smart_nframes(ele, total_frames, video_fps, rule="round", frame_factor=FRAME_FACTOR):
    """rule "round": 0.0.8 (round_by_factor after the clamp); "floor": 0.0.10+."""
    if "nframes" in ele:
        nframes = round_by_factor(ele["nframes"], frame_factor)
    else:
        fps = ele.get("fps", FPS)
        min_frames = ceil_by_factor(ele.get("min_frames", FPS_MIN_FRAMES), frame_factor)
        max_frames = floor_by_factor(ele.get("max_frames", min(FPS_MAX_FRAMES, total_frames)),
                                     frame_factor)
        nframes = total_frames / video_fps * fps
        if rule == "round":
            nframes = min(max(nframes, min_frames), max_frames)
            nframes = round_by_factor(nframes, frame_factor)
        else:
            nframes = min(min(max(nframes, min_frames), max_frames), total_frames)
            nframes = floor_by_factor(nframes, frame_factor)
    if not (frame_factor <= nframes and nframes <= total_frames):
        raise ValueError(f"nframes should in interval [{frame_factor}, {total_frames}], but got {nframes}.")
    return nframes


def frame_indices(total, n):
    return torch.linspace(0, total - 1, n).round().long().tolist()


def plan(width, height, fps, frames, rule="round", frame_factor=FRAME_FACTOR, pp=None, nframes=0):
    """_read_video_torchvision + fetch_video's sizing + the processor's own smart_resize."""
    c = hf.load_config(pp or {})
    ele = {"nframes": nframes} if nframes else {}
    n = smart_nframes(ele, frames, fps, rule, frame_factor)
    idx = frame_indices(frames, n)
    sample_fps = n / max(frames, 1e-6) * fps
    max_pixels = max(min(VIDEO_MAX_PIXELS, VIDEO_TOTAL_PIXELS / n * frame_factor),
                     int(VIDEO_MIN_PIXELS * 1.05))
    max_pixels = min(VIDEO_MAX_PIXELS, max_pixels)  # a message's max_pixels (the default)
    rh, rw = smart_resize(height, width, IMAGE_FACTOR, VIDEO_MIN_PIXELS, max_pixels)
    factor = c["patch_size"] * c["merge_size"]
    ph, pw = hf.smart_resize(rh, rw, factor, c["min_pixels"], c["max_pixels"])
    tp = c["temporal_patch_size"]
    grid = [-(-n // tp), ph // c["patch_size"], pw // c["patch_size"]]
    return {"n": n, "indices": idx, "sample_fps": sample_fps, "max_pixels": max_pixels,
            "video_size": [rh, rw], "resized": [ph, pw], "grid": grid}


def processor_frames(frames_hwc, c):
    """Qwen2VLImageProcessor._preprocess of a video's frames (uint8 [H, W, 3] each, the values
    fetch_video's .float() holds): its smart_resize + PIL resize (a copy at the same size), then
    rescale (float64 -> float32), normalise (float32), the last frame repeated to a multiple of
    temporal_patch_size and the 9-D patchify. Returns pixel_values_videos, grid."""
    factor = c["patch_size"] * c["merge_size"]
    h, w = frames_hwc[0].shape[:2]
    ph, pw = hf.smart_resize(h, w, factor, c["min_pixels"], c["max_pixels"])
    mean = np.array(c["image_mean"], dtype=np.float32)
    std = np.array(c["image_std"], dtype=np.float32)
    out = []
    for f in frames_hwc:
        r = hf.resize_rgb(np.ascontiguousarray(f), pw, ph, c["resample"])
        x = (r.astype(np.float64) * c["rescale_factor"]).astype(np.float32)
        out.append(((x - mean) / std).transpose(2, 0, 1))
    patches = np.stack(out)  # [T, C, H, W]
    p, tp, m = c["patch_size"], c["temporal_patch_size"], c["merge_size"]
    if patches.shape[0] % tp != 0:
        reps = np.repeat(patches[-1][np.newaxis], tp - patches.shape[0] % tp, axis=0)
        patches = np.concatenate([patches, reps], axis=0)
    C = patches.shape[1]
    gt, gh, gw = patches.shape[0] // tp, ph // p, pw // p
    patches = patches.reshape(gt, tp, C, gh // m, m, p, gw // m, m, p)
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    flat = np.ascontiguousarray(patches.reshape(gt * gh * gw, C * tp * p * p), dtype=np.float32)
    return flat, [gt, gh, gw]


# ---- sampling grid ------------------------------------------------------------------------------

FPS_SET = [24.0, 25.0, 30000 / 1001, 30.0, 60.0]


def sampling_grid(out):
    totals = list(range(1, 121)) + list(range(121, 2001, 13)) + [767, 768, 769, 1535, 1536, 1999, 2000]
    rows = []
    for total in totals:
        for fps in FPS_SET:
            for rule in ("round", "floor"):
                for ff in (2, 1):
                    if ff == 1 and (rule == "floor" or total % 3):
                        continue
                    try:
                        n = smart_nframes({}, total, fps, rule, ff)
                    except ValueError:
                        n = -1
                    rows.append([total, fps, rule, 0, ff, n])
        for fixed in (1, 2, 3, 5, 8, 13, 64, 100, 769):
            try:
                n = smart_nframes({"nframes": fixed}, total, 25.0)
            except ValueError:
                n = -1
            rows.append([total, 25.0, "round", fixed, 2, n])
    # linspace: every small n, the sampled counts, and a sweep of large n.
    pairs = set()
    for total in list(range(1, 201)) + list(range(201, 2001, 7)) + [2000]:
        for n in range(1, min(total, 40) + 1):
            pairs.add((total, n))
        for n in (total, total - 1, total // 2 + 1, total // 3, (2 * total) // 3):
            if 1 <= n <= total:
                pairs.add((total, n))
    for r in rows:
        if r[5] > 0:
            pairs.add((r[0], r[5]))
    for total in (768, 1000, 1501, 1999, 2000):
        for n in range(2, total + 1, 5):
            pairs.add((total, n))
    flat, lin = [], []
    for total, n in sorted(pairs):
        lin.append([total, n, len(flat)])
        flat += frame_indices(total, n)
    np.save(os.path.join(out, "linspace.npy"), np.array(flat, dtype=np.int64))
    return {"nframes": rows, "linspace": lin, "linspace_file": "linspace.npy"}


def plan_grid():
    sizes = [(640, 360), (1920, 1080), (320, 240), (360, 640), (56, 56), (1280, 720),
             (3840, 2160), (100, 3000), (3000, 16), (176, 144), (1, 1), (4100, 20)]
    heads = []
    for w, h in sizes:
        for fps in FPS_SET:
            for seconds in (0.5, 3, 10.5, 61, 400):
                frames = int(round(seconds * fps))
                heads.append((w, h, fps, frames))
    pps = [None, {"min_pixels": 3136, "max_pixels": 200704},
           {"min_pixels": 401408, "max_pixels": 12845056}]
    rows = []
    for i, (w, h, fps, frames) in enumerate(heads):
        for rule in ("round", "floor"):
            for ppi, pp in enumerate(pps):
                if ppi and (i + ppi) % 3:  # the tighter budgets on a third of the headers
                    continue
                for ff in (2, 1) if rule == "round" else (2,):
                    if ff == 1 and i % 4:
                        continue
                    row = {"width": w, "height": h, "fps": fps, "frames": frames, "rule": rule,
                           "frame_factor": ff, "pp": pp or {}}
                    try:
                        row.update(plan(w, h, fps, frames, rule, ff, pp))
                    except ValueError as e:
                        row["error"] = str(e)
                    rows.append(row)
    return rows


# ---- clips -------------------------------------------------------------------------------------

def box_over(bg, size, rate, seconds, x_expr):
    """A 10x10 white box over the source `bg` ("name=options"), at x = x_expr of frame n."""
    return (f"{bg}:s={size}:r={rate}:d={seconds},format=rgb24[bg];"
            f"color=c=white:s=10x10:r={rate}:d={seconds},format=rgb24[b];"
            f"[bg][b]overlay=x={x_expr}:y=H/3:shortest=1:format=rgb")


X264 = ["-c:v", "libx264", "-preset", "veryfast", "-g", "12", "-bf", "2", "-pix_fmt", "yuv420p",
        "-threads", "1"]
LOSSLESS = ["-c:v", "libx264", "-preset", "veryfast", "-qp", "0", "-g", "30", "-pix_fmt",
            "yuv420p", "-threads", "1"]
VP9 = ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-crf", "30", "-b:v", "0",
       "-g", "12", "-pix_fmt", "yuv420p", "-threads", "1"]

# name, lavfi graph, encoder arguments, file
CLIPS = [
    ("moving_640x360_30", "testsrc2=s=640x360:r=30:d=3", X264, "moving_640x360_30.mp4"),
    ("static_box_320x240_25",
     box_over("color=c=0x3366aa", "320x240", 25, 4, "min(4*n\\,60)"), LOSSLESS,
     "static_box_320x240_25.mp4"),
    ("moving_box_320x240_25",
     box_over("color=c=0x3366aa", "320x240", 25, 2, "mod(3*n\\,W-10)"), LOSSLESS,
     "moving_box_320x240_25.mp4"),
    ("odd_160x120_10", "testsrc2=s=160x120:r=10:d=3.5", X264, "odd_160x120_10.mp4"),
    ("portrait_360x640_24", "testsrc2=s=360x640:r=24:d=3.5", X264, "portrait_360x640_24.mp4"),
    ("ntsc_320x240_2997", "testsrc2=s=320x240:r=30000/1001:d=5", VP9, "ntsc_320x240_2997.webm"),
    ("hd_1920x1080_60", "testsrc2=s=1920x1080:r=60:d=0.5", X264, "hd_1920x1080_60.mp4"),
    ("tiny_56x56_25", "testsrc2=s=56x56:r=25:d=1", X264, "tiny_56x56_25.mp4"),
]

# (clip, case name, rule, frame_factor, processor budgets)
CLIP_CASES = [
    ("moving_640x360_30", "moving", "round", 2, None),
    ("moving_640x360_30", "moving_tight_processor", "round", 2,
     {"min_pixels": 3136, "max_pixels": 200704}),
    ("static_box_320x240_25", "static_box", "round", 2, None),
    ("moving_box_320x240_25", "moving_box", "floor", 2, None),
    ("odd_160x120_10", "odd_frames", "round", 1, None),
    ("portrait_360x640_24", "portrait_round", "round", 2, None),
    ("portrait_360x640_24", "portrait_floor", "floor", 2, None),
    ("ntsc_320x240_2997", "ntsc", "round", 2, None),
    ("hd_1920x1080_60", "hd60", "round", 2, None),
    ("tiny_56x56_25", "tiny", "round", 2, None),
]


def read_clip(path, indices=None):
    """PyAV: (frames at `indices` as rgb24 uint8 [H, W, 3], decoded frame count, average_rate)."""
    with av.open(path) as c:
        s = c.streams.video[0]
        fps = float(s.average_rate)
        want = set(indices or [])
        got, n = {}, 0
        for f in c.decode(video=0):
            if n in want:
                got[n] = f.to_ndarray(format="rgb24")
            n += 1
    return [got[i] for i in (indices or [])], n, fps


def slice_equalities(frames, tp):
    """mmrt's exact-reuse bookkeeping from the decoded bytes: the slices' frame ids (first frame
    with equal bytes), the first slice with the same ids, and the frames equal to an earlier one."""
    ids, reused = [], 0
    for i, f in enumerate(frames):
        first = next((j for j in range(i) if np.array_equal(frames[j], f)), i)
        reused += first != i
        ids.append(first)
    slices = -(-len(ids) // tp)
    keys = [tuple(ids[min(s * tp + t, len(ids) - 1)] for t in range(tp)) for s in range(slices)]
    return [keys.index(k) for k in keys], reused


PRUNE_THRESHOLDS = [0.5, 1, 2, 4, 8, 16]


def pruned_tokens(frames_hwc, tp, patch, merge, threshold):
    """The approximate temporal tier's rule on the processor's uint8 frames: a token is a
    (patch*merge)^2 block of one tp-frame slice (the last frame repeated to fill the last slice);
    slice 0 is kept; a later token is dropped when the mean absolute difference of its bytes from
    the last KEPT token at the same block is below the threshold. Kept indices, slice-major."""
    f = np.stack(frames_hwc).astype(np.int32)  # [n, H, W, 3]
    if f.shape[0] % tp:
        f = np.concatenate([f, np.repeat(f[-1:], tp - f.shape[0] % tp, axis=0)])
    b = patch * merge
    n, H, W, C = f.shape
    # [slices, bh, bw, tp * b * b * C]
    blocks = f.reshape(n // tp, tp, H // b, b, W // b, b, C).transpose(0, 2, 4, 1, 3, 5, 6)
    blocks = blocks.reshape(n // tp, (H // b) * (W // b), -1)
    per = blocks.shape[1]
    kept = list(range(per))
    ref = blocks[0].copy()
    for s in range(1, blocks.shape[0]):
        diff = np.abs(blocks[s] - ref).sum(axis=1)  # integer sums
        keep = diff >= threshold * blocks.shape[2]
        ref[keep] = blocks[s][keep]
        kept += [s * per + q for q in np.nonzero(keep)[0].tolist()]
    return kept


def make_clips(out):
    made = {}
    for name, graph, args, fn in CLIPS:
        subprocess.run(FFMPEG + ["-f", "lavfi", "-i", graph] + args + [os.path.join(out, fn)],
                       check=True)
        _, frames, fps = read_clip(os.path.join(out, fn))
        with av.open(os.path.join(out, fn)) as c:
            s = c.streams.video[0]
            made[name] = {"file": fn, "frames": frames, "fps": fps, "width": s.width,
                          "height": s.height}
    cases = []
    for clip, case, rule, ff, pp in CLIP_CASES:
        info = made[clip]
        p = plan(info["width"], info["height"], info["fps"], info["frames"], rule, ff, pp)
        frames, _, _ = read_clip(os.path.join(out, info["file"]), p["indices"])
        video = torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2)  # uint8 TCHW
        rh, rw = p["video_size"]
        video = TF.resize(video, [rh, rw], interpolation=InterpolationMode.BICUBIC,
                          antialias=True).float()
        hwc = video.permute(0, 2, 3, 1).numpy().astype(np.uint8)  # the float values are integers
        c = hf.load_config(pp or {})
        pv, grid = processor_frames(list(hwc), c)
        assert grid == p["grid"], (grid, p["grid"])
        np.save(os.path.join(out, f"{case}_pixel_values.npy"), pv)
        first_equal, reused = slice_equalities(frames, c["temporal_patch_size"])
        prune = []
        if p["resized"] == p["video_size"]:  # hwc are the processor's own frames
            for t in PRUNE_THRESHOLDS:
                kept = pruned_tokens(list(hwc), c["temporal_patch_size"], c["patch_size"],
                                     c["merge_size"], t)
                fn = f"{case}_kept_{t}.npy"
                np.save(os.path.join(out, fn), np.array(kept, dtype=np.int64))
                prune.append({"threshold": t, "kept": fn})
        cases.append({"name": case, "clip": clip, **info, "rule": rule, "frame_factor": ff,
                      "pp": pp or {}, **p, "pixel_values": f"{case}_pixel_values.npy",
                      "prune": prune,
                      "first_equal_slice": first_equal, "frames_reused": reused})
    return cases


# ---- frame lists -------------------------------------------------------------------------------

def frame_list_reference(frames, pp):
    """fetch_video for a list of images: fetch_image (smart_resize with MIN_PIXELS / MAX_PIXELS,
    PIL's resize, BICUBIC), padded to a multiple of FRAME_FACTOR with the last, then the processor."""
    images = []
    for f in frames:
        im = Image.fromarray(f).convert("RGB")
        w, h = im.size
        rh, rw = smart_resize(h, w, IMAGE_FACTOR, MIN_PIXELS, MAX_PIXELS)
        images.append(np.array(im.resize((rw, rh), resample=Image.BICUBIC)))
    nframes = ceil_by_factor(len(images), FRAME_FACTOR)
    images += [images[-1]] * (nframes - len(images))
    return processor_frames(images, hf.load_config(pp or {}))


def make_frame_lists(out, clips_dir):
    rng = np.random.default_rng(11)
    lists = []
    decoded, _, _ = read_clip(os.path.join(clips_dir, "moving_640x360_30.mp4"), [0, 17, 33, 50, 70])
    y, x = np.mgrid[0:70, 0:100]
    grad = np.stack([(2.5 * x) % 256, (3.6 * y) % 256, (x + y) % 256], -1).astype(np.uint8)
    cases = [
        ("decoded_5", decoded, None),  # odd: qwen-vl-utils pads with the last frame
        ("decoded_5_tight", decoded, {"min_pixels": 3136, "max_pixels": 100352}),
        ("noise_3_100x70", [rng.integers(0, 256, (70, 100, 3), dtype=np.uint8) for _ in range(3)],
         None),
        ("gradient_2_100x70", [grad, grad[:, ::-1].copy()], None),
        ("mixed_sizes_4", [rng.integers(0, 256, (100, 200 + k, 3), dtype=np.uint8)
                           for k in (0, 1, 3, 6)], None),  # all resize to 112x196
        ("single_frame", [decoded[2][:90, :130].copy()], None),
        ("tiny_4_20x20", [rng.integers(0, 256, (20, 20, 3), dtype=np.uint8) for _ in range(4)], None),
    ]
    for name, frames, pp in cases:
        files = []
        for k, f in enumerate(frames):
            fn = f"list_{name}_{k}.npy"
            np.save(os.path.join(out, fn), np.ascontiguousarray(f, dtype=np.uint8))
            files.append(fn)
        pv, grid = frame_list_reference(frames, pp)
        np.save(os.path.join(out, f"list_{name}_pixel_values.npy"), pv)
        lists.append({"name": name, "frames": files, "pp": pp or {}, "grid": grid,
                      "pixel_values": f"list_{name}_pixel_values.npy"})
    return lists


# ---- rope --------------------------------------------------------------------------------------

def rope_cases(out):
    cfg = {"image_token_id": 1012, "video_token_id": 1013, "vision_start_token_id": 1009,
           "vision_end_token_id": 1010, "vision_config": {"spatial_merge_size": 2}}
    rng = np.random.default_rng(5)
    # Items: (kind, grid, sample_fps of the video). sample_fps values from real plans and some
    # where t * 2 / fps * tokens_per_second lands on integers.
    prompts = [
        [("video", [3, 26, 46], 2.0)],
        [("image", [1, 4, 6], 0), ("video", [10, 4, 6], 1.998), ("image", [1, 8, 4], 0)],
        [("video", [4, 20, 28], 2.0), ("video", [2, 24, 24], 4.0 / 3)],
        [("video", [24, 2, 2], 40 / 496 * 24), ("text", None, 0), ("video", [7, 4, 2], 0.5)],
        [("video", [33, 2, 4], 56 / 660 * 24), ("image", [1, 2, 2], 0),
         ("video", [26, 2, 2], 52 / 636 * 24)],
        [("video", [1, 4, 4], 3.0), ("video", [40, 2, 2], 80 / 1201 * 30000 / 1001)],
    ]
    cases = []
    for k, items in enumerate(prompts):
        ids = [int(t) for t in rng.integers(0, 900, 3 + k)]
        expanded = list(ids)
        grids = {"image": [], "video": []}
        spg = []
        kinds = []
        for kind, grid, sfps in items:
            text = [int(t) for t in rng.integers(0, 900, 2 + (k % 3))]
            if kind == "text":
                ids += text
                expanded += text
                continue
            pad = cfg["image_token_id"] if kind == "image" else cfg["video_token_id"]
            ids += [cfg["vision_start_token_id"], pad, cfg["vision_end_token_id"]] + text
            n = grid[0] * (grid[1] // 2) * (grid[2] // 2)
            expanded += [cfg["vision_start_token_id"]] + [pad] * n + [cfg["vision_end_token_id"]] + text
            grids[kind].append(grid)
            kinds.append({"kind": kind, "grid": grid,
                          "second_per_grid": 2.0 / sfps if kind == "video" else 0.0})
            if kind == "video":
                spg.append(2.0 / sfps)
        entry = {"ids": ids, "items": kinds}
        np.save(os.path.join(out, f"rope{k}_ids.npy"), np.array(expanded, dtype=np.int64))
        entry["expanded"] = f"rope{k}_ids.npy"

        def save(tag, pos, delta):
            fn = f"rope{k}_{tag}.npy"
            np.save(os.path.join(out, fn),
                    np.concatenate([pos.numpy().astype(np.int64).ravel(), [delta]]).astype(np.int64))
            entry[tag] = fn

        save("qwen2", *qwen2_vl_ref.get_rope_index(cfg, expanded, grids["image"], grids["video"]))
        for tps in (2, 4):
            for iv in ("f32", "f64"):
                save(f"qwen25_tps{tps}_{iv}",
                     *qwen2_vl_ref.get_rope_index(cfg, expanded, grids["image"], grids["video"],
                                                  spg, tps, iv))
        cases.append(entry)
    return cfg, cases


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    manifest = {"torch": torch.__version__, "pyav": av.__version__,
                "capability": torch.backends.cpu.get_cpu_capability()
                if hasattr(torch.backends, "cpu") and hasattr(torch.backends.cpu, "get_cpu_capability")
                else next((l.split(":")[1].strip() for l in torch.__config__.show().splitlines()
                           if "CPU capability usage" in l), "unknown")}
    manifest["sampling"] = sampling_grid(a.out)
    manifest["plans"] = plan_grid()
    manifest["clips"] = make_clips(a.out)
    manifest["frame_lists"] = make_frame_lists(a.out, a.out)
    manifest["rope_config"], manifest["rope"] = rope_cases(a.out)
    with open(os.path.join(a.out, "manifest.json"), "w") as fh:
        json.dump(manifest, fh)


if __name__ == "__main__":
    sys.exit(main())
