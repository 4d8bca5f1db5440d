"""Independent reference for Qwen2-VL image preprocessing, written from the spec
(transformers' Qwen2VLImageProcessor, PIL path): PIL decode + convert("RGB"), smart_resize,
PIL resize with reducing_gap=None, rescale in float64 then float32, normalise in float32,
temporal duplicate, and the (gt, bh, bw, mh, mw, C, T, py, px) flattening.

Used by tests/media (bit-exact comparison) and bench/media_compare.py (the PIL + numpy timing).
Must run under Debian's /usr/bin/python3 (numpy + PIL 9.4).
"""

import io
import math

import numpy as np
from PIL import Image

OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

DEFAULTS = {
    "min_pixels": 56 * 56,
    "max_pixels": 28 * 28 * 1280,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": OPENAI_CLIP_MEAN,
    "image_std": OPENAI_CLIP_STD,
    "rescale_factor": 1 / 255,
    "resample": 3,
}


def load_config(cfg):
    """Class defaults overridden by a preprocessor_config.json dict; min/max_pixels win over size."""
    c = dict(DEFAULTS)
    size = cfg.get("size")
    if size is not None:
        c["min_pixels"] = size["shortest_edge"]
        c["max_pixels"] = size["longest_edge"]
    for k in ("min_pixels", "max_pixels", "patch_size", "temporal_patch_size", "merge_size",
              "image_mean", "image_std", "rescale_factor", "resample"):
        if cfg.get(k) is not None:
            c[k] = cfg[k]
    return c


def smart_resize(height, width, factor, min_pixels, max_pixels):
    """Newer transformers behaviour: no minimum side check, max(factor, ...) in the shrink branch."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError(
            f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def decode_rgb(data):
    """PIL's Image.open(f).convert("RGB") as a uint8 [H, W, 3] array."""
    im = Image.open(io.BytesIO(data))
    if im.mode != "RGB":
        im = im.convert("RGB")
    return np.array(im)


def resize_rgb(arr, width, height, resample):
    """transformers' image_transforms.resize for a uint8 array: through PIL, reducing_gap=None."""
    return np.array(Image.fromarray(arr).resize((width, height), resample=resample, reducing_gap=None))


def normalize_and_patchify(resized, c):
    p, tp, m = c["patch_size"], c["temporal_patch_size"], c["merge_size"]
    x = resized.astype(np.float64) * c["rescale_factor"]
    x = x.astype(np.float32)
    mean = np.array(c["image_mean"], dtype=np.float32)
    std = np.array(c["image_std"], dtype=np.float32)
    x = (x - mean) / std                      # [H, W, C] float32
    x = x.transpose(2, 0, 1)                  # [C, H, W]
    patches = x[np.newaxis]                   # [frames=1, C, H, W]
    if patches.shape[0] % tp != 0:
        repeats = np.repeat(patches[-1][np.newaxis], tp - 1, axis=0)
        patches = np.concatenate([patches, repeats], axis=0)
    channel = patches.shape[1]
    grid_t = patches.shape[0] // tp
    grid_h, grid_w = resized.shape[0] // p, resized.shape[1] // p
    patches = patches.reshape(grid_t, tp, channel, grid_h // m, m, p, grid_w // m, m, p)
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    flat = patches.reshape(grid_t * grid_h * grid_w, channel * tp * p * p)
    return flat, np.array([[grid_t, grid_h, grid_w]], dtype=np.int64)


def preprocess(data, cfg=None):
    """File bytes -> (pixel_values [N, C*T*p*p] float32, grid_thw [1, 3] int64, (h, w) resized)."""
    c = load_config(cfg or {})
    rgb = decode_rgb(data)
    factor = c["patch_size"] * c["merge_size"]
    rh, rw = smart_resize(rgb.shape[0], rgb.shape[1], factor, c["min_pixels"], c["max_pixels"])
    resized = resize_rgb(rgb, rw, rh, c["resample"])
    pv, grid = normalize_and_patchify(resized, c)
    return pv, grid, (rh, rw)
