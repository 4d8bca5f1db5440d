"""Independent reference for Fuyu-8B image preprocessing, written from transformers'
FuyuImageProcessor (PIL + numpy path) and FuyuProcessor's patch step (variable_sized=True), with
the real PIL 9.4 and numpy (transformers itself is not needed).

    /usr/bin/python3 tests/reference/fuyu_image_ref.py --out DIR

Writes test images of many sizes and kinds (JPEG, PNG RGB / RGBA / L / P, tiny, thin and
over-size images) made from skimage's photographs, preprocessor configs, and for every
(image, config) pair DIR/manifest.json records:
  patches    .npy f32 [rows * cols, patch_h * patch_w * 3], (py, px, c) order
  image_size (height, width) as decoded
  resized    (height, width) after the downscale
  crop       (height, width) of the padded image the processor keeps
  grid       (rows, cols) of patches; n_patches; tokens = rows * (cols + 1)
  error      instead of all of the above, the exception type where transformers raises
Plus "errors": files that do not decode.

The steps, as transformers runs them on a uint8 channels-last array:
  resize:    only when h > size.height or w > size.width; s = min(H / h, W / w), sides
             int(h * s), int(w * s); PIL Image.resize((w, h), resample, reducing_gap=None)
  pad:       np.pad bottom / right to (H, W), constant padding_value (into the uint8 array)
  rescale:   float64 multiply, then float32
  normalize: (x - mean) / std in float32 (mean / std a scalar broadcast, or one per channel)
  channels-first, then the processor: crop to min(H, ceil(h / ph) * ph) x min(W, ...), refuse a
  crop that is not whole patches, cut patches as torch's unfold(2).unfold(3) + permute does.
Non-RGB images are converted with PIL convert("RGB") first (transformers leaves that to the
caller: it does no conversion of its own for Fuyu).
"""

import argparse
import io
import json
import math
import os
import struct
import zlib

import numpy as np
from PIL import Image

import skimage.data

DATA = os.path.dirname(skimage.data.__file__)


class HfRefuses(Exception):
    """Where transformers raises (ValueError from PIL, numpy or get_num_patches)."""


# ---------------------------------------------------------------- configuration
def parse_config(cfg):
    """preprocessor_config.json -> what FuyuImageProcessor.preprocess uses (its class defaults)."""

    def get(key, default):
        v = cfg.get(key)
        return default if v is None else v

    size = get("size", {"height": 1080, "width": 1920})
    patch = get("patch_size", {"height": 30, "width": 30})
    return {
        "size": (size["height"], size["width"]),
        "patch": (patch["height"], patch["width"]),
        "padding_value": get("padding_value", 1.0),
        "padding_mode": get("padding_mode", "constant"),
        "mean": get("image_mean", 0.5),
        "std": get("image_std", 0.5),
        "rescale_factor": get("rescale_factor", 1 / 255),
        "resample": get("resample", 2),
        "do_resize": get("do_resize", True),
        "do_pad": get("do_pad", True),
        "do_rescale": get("do_rescale", True),
        "do_normalize": get("do_normalize", True),
    }


# ---------------------------------------------------------------- the steps (HWC until the end)
def decode_rgb(data):
    im = Image.open(io.BytesIO(data))
    if im.mode != "RGB":
        im = im.convert("RGB")
    return np.array(im)


def downscale(arr, p):
    h, w = arr.shape[:2]
    th, tw = p["size"]
    if w <= tw and h <= th:
        return arr
    s = min(th / h, tw / w)
    nh, nw = int(h * s), int(w * s)
    try:
        out = Image.fromarray(arr).resize((nw, nh), resample=p["resample"], reducing_gap=None)
    except ValueError as e:  # PIL: "height and width must be > 0"
        raise HfRefuses(f"PIL resize to {nh}x{nw}: {e}") from e
    return np.array(out)


def pad(arr, p):
    th, tw = p["size"]
    h, w = arr.shape[:2]
    if h > th or w > tw:  # np.pad refuses negative widths with a ValueError
        raise HfRefuses(f"negative padding of {h}x{w} to {th}x{tw}")
    return np.pad(arr, ((0, th - h), (0, tw - w), (0, 0)), mode=p["padding_mode"],
                  constant_values=p["padding_value"])


def rescale(arr, factor):
    return (arr.astype(np.float64) * factor).astype(np.float32)


def normalize(arr, mean, std):
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float32)
    channels = arr.shape[-1]
    mean = list(mean) if isinstance(mean, (list, tuple)) else [mean] * channels
    std = list(std) if isinstance(std, (list, tuple)) else [std] * channels
    if len(mean) != channels or len(std) != channels:
        raise HfRefuses("mean / std do not match the channels")
    return (arr - np.array(mean, dtype=arr.dtype)) / np.array(std, dtype=arr.dtype)


def processor_patches(chw, unpadded_h, unpadded_w, patch):
    """FuyuProcessor's crop + FuyuImageProcessor.patchify_image for one [C, H, W] image."""
    ph, pw = patch
    c, H, W = chw.shape
    new_h = min(H, math.ceil(unpadded_h / ph) * ph)
    new_w = min(W, math.ceil(unpadded_w / pw) * pw)
    if new_h % ph or new_w % pw:  # get_num_patches
        raise HfRefuses(f"crop {new_h}x{new_w} is not divisible by {ph}x{pw}")
    crop = chw[:, :new_h, :new_w]
    rows, cols = new_h // ph, new_w // pw
    # unfold(2, ph, ph).unfold(3, pw, pw): [C, rows, cols, ph, pw] with element
    # [k, r, q, i, j] = crop[k, r * ph + i, q * pw + j]; then the patches' (i, j, k) flattened.
    tiles = crop.reshape(c, rows, ph, cols, pw).transpose(1, 3, 2, 4, 0)
    return tiles.reshape(rows * cols, ph * pw * c), (new_h, new_w), (rows, cols)


def preprocess(data, cfg):
    p = parse_config(cfg)
    arr = decode_rgb(data)
    out = {"image_size": list(arr.shape[:2])}
    try:
        if p["do_resize"]:
            arr = downscale(arr, p)
        rh, rw = arr.shape[:2]
        if p["do_pad"]:
            arr = pad(arr, p)
        if p["do_rescale"]:
            arr = rescale(arr, p["rescale_factor"])
        if p["do_normalize"]:
            arr = normalize(arr, p["mean"], p["std"])
        chw = np.ascontiguousarray(arr.transpose(2, 0, 1))
        patches, crop, grid = processor_patches(chw, rh, rw, p["patch"])
    except HfRefuses as e:
        out["error"] = str(e)
        return None, out
    out.update(resized=[rh, rw], crop=list(crop), grid=list(grid), n_patches=grid[0] * grid[1],
               tokens=grid[0] * (grid[1] + 1))
    return np.ascontiguousarray(patches).astype(np.float32), out


# ---------------------------------------------------------------- the test set
def photo(name, mode="RGB"):
    return np.array(Image.open(os.path.join(DATA, name)).convert(mode))


def pil_bytes(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, format=fmt, **kw)
    return b.getvalue()


def sized(arr, h, w):
    return Image.fromarray(arr).resize((w, h), Image.BICUBIC)


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def make_images():
    """[(file name, bytes)]; the size in each name is height x width."""
    chelsea = photo("chelsea.png")      # 300 x 451
    astronaut = photo("astronaut.png")  # 512 x 512
    coffee = photo("coffee.png")        # 400 x 600
    camera = photo("camera.png", "L")   # 512 x 512
    files = [
        ("coffee_480x640.jpg", pil_bytes(sized(coffee, 480, 640), "JPEG", quality=90)),
        ("astronaut_1080x1920.jpg", pil_bytes(sized(astronaut, 1080, 1920), "JPEG", quality=85)),
        ("coffee_2000x3000.jpg", pil_bytes(sized(coffee, 2000, 3000), "JPEG", quality=80)),
        ("chelsea_1500x1000.jpg", pil_bytes(sized(chelsea, 1500, 1000), "JPEG", quality=85)),
        ("astronaut_1081x1921.png", pil_bytes(sized(astronaut, 1081, 1921), "PNG", compress_level=1)),
        ("coffee_1080x1921.jpg", pil_bytes(sized(coffee, 1080, 1921), "JPEG", quality=88)),
        ("chelsea_30x30.png", pil_bytes(Image.fromarray(chelsea[100:130, 200:230]), "PNG")),
        ("coffee_29x31.png", pil_bytes(Image.fromarray(coffee[150:179, 300:331]), "PNG")),
        ("astronaut_1x1.png", pil_bytes(Image.fromarray(astronaut[200:201, 250:251]), "PNG")),
        ("coffee_7x2000.png", pil_bytes(sized(coffee[200:207], 7, 2000), "PNG")),
        ("chelsea_3000x7.png", pil_bytes(sized(chelsea[:, 220:227], 3000, 7), "PNG")),
        ("chelsea_odd_333x517.png", pil_bytes(sized(chelsea, 333, 517), "PNG")),
        ("coffee_1x2500.png", pil_bytes(sized(coffee[200:201], 1, 2500), "PNG")),
        ("camera_gray_512x512.jpg", pil_bytes(Image.fromarray(camera), "JPEG", quality=90)),
    ]
    alpha = (np.arange(400)[None, :] * 255 // 399).astype(np.uint8).repeat(300, 0)
    rgba = np.dstack([astronaut[100:400, 50:450], alpha])
    files.append(("astronaut_rgba_300x400.png", pil_bytes(Image.fromarray(rgba, "RGBA"), "PNG")))
    files.append(("chelsea_palette_300x451.png", pil_bytes(Image.fromarray(chelsea).quantize(64), "PNG")))
    return files


def error_files(good_jpeg):
    zero = (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 0, 16, 8, 2, 0, 0, 0))
            + png_chunk(b"IDAT", zlib.compress(b"")) + png_chunk(b"IEND", b""))
    return [
        ("truncated.jpg", good_jpeg[: len(good_jpeg) // 3]),
        ("garbage.bin", bytes((i * 37 + 11) % 256 for i in range(4096))),
        ("zero_width.png", zero),
        ("empty.jpg", b""),
    ]


HUB = {
    "do_normalize": True, "do_pad": True, "do_rescale": True, "do_resize": True,
    "image_mean": 0.5, "image_processor_type": "FuyuImageProcessor", "image_std": 0.5,
    "padding_mode": "constant", "padding_value": 1.0, "patch_size": {"height": 30, "width": 30},
    "processor_class": "FuyuProcessor", "resample": 2, "rescale_factor": 0.00392156862745098,
    "size": {"height": 1080, "width": 1920},
}

SMALL = ["coffee_480x640.jpg", "coffee_29x31.png", "chelsea_odd_333x517.png", "astronaut_1x1.png"]

# (config name, config dict, the images it runs on: None for all)
CONFIGS = [
    ("hub", HUB, None),
    ("absent_keys", {}, ["coffee_480x640.jpg", "chelsea_1500x1000.jpg", "coffee_29x31.png"]),
    # Bicubic into 256 x 384 in 16-pixel patches, CLIP mean / std, zero padding; 3000x7 and
    # 1x2500 downscale to zero columns / rows.
    ("small_bicubic_16",
     {"size": {"height": 256, "width": 384}, "patch_size": {"height": 16, "width": 16}, "resample": 3,
      "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
      "padding_value": 0},
     SMALL + ["astronaut_rgba_300x400.png", "chelsea_3000x7.png", "coffee_1x2500.png",
              "camera_gray_512x512.jpg"]),
    # Non-square patches; a fractional pad value (numpy truncates it to 7).
    ("rect_patch_pad7",
     {"size": {"height": 400, "width": 600}, "patch_size": {"height": 20, "width": 40}, "padding_value": 7.9,
      "rescale_factor": 0.00784313725490196, "image_mean": [0.1, 0.2, 0.3], "image_std": 0.7},
     SMALL + ["chelsea_palette_300x451.png"]),
    # No padding: the resized image must be whole patches itself.
    ("no_pad", {"do_pad": False},
     ["chelsea_30x30.png", "coffee_2000x3000.jpg", "chelsea_1500x1000.jpg", "coffee_480x640.jpg",
      "astronaut_1x1.png"]),
    # No resize: an image larger than size cannot be padded to it.
    ("no_resize", {"do_resize": False},
     ["coffee_480x640.jpg", "coffee_29x31.png", "coffee_1080x1921.jpg"]),
    ("no_resize_no_pad_16", {"do_resize": False, "do_pad": False, "patch_size": {"height": 16, "width": 16}},
     ["coffee_480x640.jpg", "chelsea_odd_333x517.png"]),
    ("raw", {"do_rescale": False, "do_normalize": False}, ["chelsea_odd_333x517.png", "astronaut_1x1.png"]),
    ("no_rescale", {"do_rescale": False, "image_mean": [100, 110, 120], "image_std": [50, 60, 70]},
     ["coffee_480x640.jpg"]),
    ("no_normalize", {"do_normalize": False, "padding_value": 255}, ["coffee_29x31.png"]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    out = ap.parse_args().out
    for sub in ("img", "exp"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    manifest = {"cases": [], "errors": [], "configs": {}}

    images = make_images()
    for name, data in images:
        with open(os.path.join(out, "img", name), "wb") as f:
            f.write(data)
    for cname, cfg, only in CONFIGS:
        path = "exp/" + cname + "_preprocessor_config.json"
        with open(os.path.join(out, path), "w") as f:
            json.dump(cfg, f)
        manifest["configs"][cname] = {"file": path}
        for name, data in images:
            if only is not None and name not in only:
                continue
            patches, info = preprocess(data, cfg)
            case = dict(info, config=cname, file="img/" + name)
            if patches is not None:
                npy = f"exp/{cname}__{name}.npy"
                np.save(os.path.join(out, npy), patches)
                case["patches"] = npy
            manifest["cases"].append(case)

    for name, data in error_files(dict(images)["coffee_480x640.jpg"]):
        with open(os.path.join(out, "img", name), "wb") as f:
            f.write(data)
        try:
            decode_rgb(data)
            pil = "ok"
        except Exception as e:  # noqa: BLE001 - any PIL failure counts
            pil = type(e).__name__
        manifest["errors"].append({"file": "img/" + name, "pil": pil})

    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
