"""Independent reference for LLaVA image preprocessing, written from transformers' PIL path:
LlavaNextImageProcessor (anyres, LLaVA-NeXT / 1.6) and CLIPImageProcessor (LLaVA-1.5), with the
real PIL 9.4 and numpy (transformers itself is not needed).

    /usr/bin/python3 tests/reference/llava_image_ref.py --out DIR

Writes test images of many sizes and kinds (JPEG, PNG RGB / RGBA / L / P, odd and tiny sizes)
made from skimage's photographs, preprocessor configs, and for every (image, config) pair
DIR/manifest.json records:
  pixel_values  .npy f32 [n_crops, 3, H, W] (base crop first, then the tiles row by row)
  image_size    (height, width) as decoded
  best, fitted  anyres: select_best_resolution and get_patch_output_size
  n_crops       1 + tiles
  tokens        the processor's image token count (processing_llava_next _get_number_of_features
                for vision_feature_select_strategy "default", patch 14, one additional token; CLIP:
                (crop / 14)^2), null where the grid is not a multiple of the crop
Plus "errors": files that do not decode.
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

OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
DEFAULT_PINPOINTS = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]
PATCH = 14  # the vision tower's patch size, for the token counts


# ---------------------------------------------------------------- configuration
def parse_config(cfg, anyres):
    """preprocessor_config.json -> the parameters preprocess() uses (HF get_size_dict rules)."""
    size = cfg.get("size", {"shortest_edge": 336})
    if isinstance(size, int):
        size = {"shortest_edge": size}
    elif isinstance(size, (list, tuple)):
        size = {"height": size[0], "width": size[1]}
    crop = cfg.get("crop_size", {"height": 336, "width": 336})
    if isinstance(crop, int):
        crop = {"height": crop, "width": crop}

    def get(key, default):
        v = cfg.get(key)
        return default if v is None else v

    def triple(v):
        return [v] * 3 if isinstance(v, (int, float)) else list(v)

    return {
        "size": size,
        "crop": (crop["height"], crop["width"]),
        "pinpoints": get("image_grid_pinpoints", DEFAULT_PINPOINTS) if anyres else None,
        "mean": triple(get("image_mean", OPENAI_CLIP_MEAN)),
        "std": triple(get("image_std", OPENAI_CLIP_STD)),
        "rescale_factor": get("rescale_factor", 1 / 255),
        "resample": get("resample", 3),
        "do_resize": get("do_resize", True),
        "do_center_crop": get("do_center_crop", True),
        "do_rescale": get("do_rescale", True),
        "do_normalize": get("do_normalize", True),
    }


# ---------------------------------------------------------------- the transforms (HWC uint8)
def decode_rgb(data):
    """Image.open + convert_to_rgb: converted only when the mode is not RGB."""
    im = Image.open(io.BytesIO(data))
    if im.mode != "RGB":
        im = im.convert("RGB")
    return np.array(im)


def pil_resize(arr, height, width, resample):
    """image_transforms.resize for uint8 input: through PIL, reducing_gap=None."""
    return np.array(Image.fromarray(arr).resize((width, height), resample=resample, reducing_gap=None))


def resize_output_size(height, width, size):
    """get_resize_output_image_size: shortest edge to N (long side truncated), or exact (h, w)."""
    if "shortest_edge" in size:
        n = size["shortest_edge"]
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = n, int(n * long / short)
        return (new_long, new_short) if width <= height else (new_short, new_long)
    return (size["height"], size["width"])


def center_crop(arr, crop_h, crop_w):
    """image_transforms.center_crop, including its zero padding of images smaller than the crop."""
    h, w = arr.shape[:2]
    top = (h - crop_h) // 2
    left = (w - crop_w) // 2
    if top >= 0 and left >= 0 and top + crop_h <= h and left + crop_w <= w:
        return arr[top:top + crop_h, left:left + crop_w]
    new_h, new_w = max(crop_h, h), max(crop_w, w)
    padded = np.zeros((new_h, new_w) + arr.shape[2:], dtype=arr.dtype)
    top_pad = math.ceil((new_h - h) / 2)
    left_pad = math.ceil((new_w - w) / 2)
    padded[top_pad:top_pad + h, left_pad:left_pad + w] = arr
    top += top_pad
    left += left_pad
    return padded[max(0, top):min(new_h, top + crop_h), max(0, left):min(new_w, left + crop_w)]


def rescale(arr, factor):
    return (arr.astype(np.float64) * factor).astype(np.float32)


def normalize(arr, mean, std):
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float32)
    return (arr - np.array(mean, dtype=arr.dtype)) / np.array(std, dtype=arr.dtype)


def clip_steps(arr, p):
    """CLIPImageProcessor.preprocess on one image (also LLaVA-NeXT's _preprocess per crop)."""
    if p["do_resize"]:
        h, w = resize_output_size(arr.shape[0], arr.shape[1], p["size"])
        arr = pil_resize(arr, h, w, p["resample"])
    if p["do_center_crop"]:
        arr = center_crop(arr, *p["crop"])
    if p["do_rescale"]:
        arr = rescale(arr, p["rescale_factor"])
    if p["do_normalize"]:
        arr = normalize(arr, p["mean"], p["std"])
    return np.ascontiguousarray(arr.transpose(2, 0, 1)).astype(np.float32)


# ---------------------------------------------------------------- anyres
def select_best_resolution(original_size, possible_resolutions):
    original_height, original_width = original_size
    best_fit = None
    max_effective = 0
    min_wasted = float("inf")
    for height, width in possible_resolutions:
        scale = min(width / original_width, height / original_height)
        dw, dh = int(original_width * scale), int(original_height * scale)
        effective = min(dw * dh, original_width * original_height)
        wasted = width * height - effective
        if effective > max_effective or (effective == max_effective and wasted < min_wasted):
            max_effective = effective
            min_wasted = wasted
            best_fit = (height, width)
    return best_fit


def patch_output_size(original_size, target):
    oh, ow = original_size
    th, tw = target
    scale_w = tw / ow
    scale_h = th / oh
    if scale_w < scale_h:
        return min(math.ceil(oh * scale_w), th), tw
    return th, min(math.ceil(ow * scale_h), tw)


def anyres_crops(arr, p):
    """get_image_patches: [base resized to (s, s)] + tiles of the fitted, zero-padded image."""
    size = p["size"]
    s = size["shortest_edge"] if "shortest_edge" in size else min(size["height"], size["width"])
    tile = p["crop"][0]
    best = select_best_resolution(arr.shape[:2], p["pinpoints"])
    fh, fw = patch_output_size(arr.shape[:2], best)
    fitted = pil_resize(arr, fh, fw, p["resample"])
    py, ry = divmod(best[0] - fh, 2)
    px, rx = divmod(best[1] - fw, 2)
    padded = np.pad(fitted, ((py, py + ry), (px, px + rx), (0, 0)), mode="constant", constant_values=0)
    tiles = []
    for i in range(0, padded.shape[0], tile):
        for j in range(0, padded.shape[1], tile):
            tiles.append(padded[i:i + tile, j:j + tile])
    base = pil_resize(arr, s, s, p["resample"])
    return [base] + tiles, best, (fh, fw), (py, py + ry, px, px + rx)


def anyres_tokens(orig_h, orig_w, crop_h, crop_w, pinpoints):
    """processing_llava_next: _get_number_of_features - 1 ("default" strategy, 1 extra token)."""
    bh, bw = select_best_resolution([orig_h, orig_w], pinpoints)
    scale_h, scale_w = bh // crop_h, bw // crop_w
    ph, pw = crop_h // PATCH, crop_w // PATCH
    cur_h, cur_w = ph * scale_h, pw * scale_w
    if orig_w / orig_h > cur_w / cur_h:
        new_h = (orig_h * cur_w) // orig_w
        cur_h -= ((cur_h - new_h) // 2) * 2
    else:
        new_w = (orig_w * cur_h) // orig_h
        cur_w -= ((cur_w - new_w) // 2) * 2
    features = cur_h * cur_w + cur_h + ph * pw + 1
    return features - 1


def preprocess(data, cfg, anyres):
    p = parse_config(cfg, anyres)
    arr = decode_rgb(data)
    h, w = arr.shape[:2]
    out = {"image_size": [h, w], "best": None, "fitted": None, "pad": None, "tokens": None}
    crop_h, crop_w = p["crop"]
    if anyres:
        crops, best, fitted, pad = anyres_crops(arr, p)
        out.update(best=list(best), fitted=list(fitted), pad=list(pad))
        if all(a % crop_h == 0 and b % crop_h == 0 for a, b in p["pinpoints"]) and crop_h == crop_w:
            out["tokens"] = anyres_tokens(h, w, crop_h, crop_w, p["pinpoints"])
    else:
        crops = [arr]
        if crop_h == crop_w and p["do_center_crop"]:
            out["tokens"] = (crop_h // PATCH) * (crop_w // PATCH)
    pv = np.stack([clip_steps(c, p) for c in crops]).astype(np.float32)
    out["n_crops"] = len(crops)
    return pv, out


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
        ("astronaut_336x336.png", pil_bytes(sized(astronaut, 336, 336), "PNG")),
        ("chelsea_800x300.png", pil_bytes(sized(chelsea, 800, 300), "PNG")),
        ("coffee_300x800.jpg", pil_bytes(sized(coffee, 300, 800), "JPEG", quality=92)),
        ("coffee_20x30.png", pil_bytes(Image.fromarray(coffee[100:120, 200:230]), "PNG")),
        ("chelsea_odd_333x517.png", pil_bytes(sized(chelsea, 333, 517), "PNG")),
        ("chelsea_451x300_orig.jpg", pil_bytes(Image.fromarray(chelsea), "JPEG", quality=88)),
        ("astronaut_672x672.png", pil_bytes(sized(astronaut, 672, 672), "PNG")),
        ("coffee_1000x200.jpg", pil_bytes(sized(coffee, 1000, 200), "JPEG", quality=90)),
        ("coffee_thin_7x500.png", pil_bytes(Image.fromarray(coffee[200:207, 50:550]), "PNG")),
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


NEXT_HUB = {
    "aspect_ratio_setting": "anyres",
    "crop_size": {"height": 336, "width": 336},
    "do_center_crop": True, "do_convert_rgb": True, "do_normalize": True, "do_rescale": True,
    "do_resize": True, "do_pad": True,
    "image_grid_pinpoints": DEFAULT_PINPOINTS,
    "image_mean": OPENAI_CLIP_MEAN, "image_std": OPENAI_CLIP_STD,
    "image_processor_type": "LlavaNextImageProcessor", "processor_class": "LlavaNextProcessor",
    "resample": 3, "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 336},
}
CLIP_HUB = {
    "crop_size": {"height": 336, "width": 336},
    "do_center_crop": True, "do_convert_rgb": True, "do_normalize": True, "do_rescale": True,
    "do_resize": True, "image_mean": OPENAI_CLIP_MEAN, "image_std": OPENAI_CLIP_STD,
    "image_processor_type": "CLIPImageProcessor", "processor_class": "LlavaProcessor",
    "resample": 3, "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 336},
}

# (config name, anyres, config dict, the images it runs on: None for all)
CONFIGS = [
    ("next_hub", True, NEXT_HUB, None),
    ("clip_hub", False, CLIP_HUB, None),
    ("next_absent_keys", True, {}, ["coffee_480x640.jpg", "chelsea_800x300.png"]),
    # Base and tiles resized shortest-edge to 384 then centre-cropped to 336; bilinear.
    ("next_384_bilinear", True,
     {"size": {"shortest_edge": 384}, "crop_size": 336, "resample": 2, "image_mean": 0.5, "image_std": 0.5},
     ["coffee_480x640.jpg", "chelsea_odd_333x517.png", "coffee_20x30.png"]),
    # 224 tiles over 336-multiple pinpoints: partial tiles at the grid's edges.
    ("next_224_partial", True, {"size": {"shortest_edge": 224}, "crop_size": {"height": 224, "width": 224}},
     ["coffee_480x640.jpg", "chelsea_800x300.png", "astronaut_336x336.png"]),
    ("next_custom_pinpoints", True,
     {"image_grid_pinpoints": [[336, 336], [672, 1008], [1008, 672], [336, 1008], [1008, 1008]],
      "size": [336, 336]},
     ["coffee_480x640.jpg", "astronaut_1080x1920.jpg", "coffee_1000x200.jpg", "coffee_20x30.png"]),
    # size {height, width}: an exact resize, then a crop larger than the height (zero rows).
    ("clip_hw_300x400", False, {"size": {"height": 300, "width": 400}, "crop_size": 336},
     ["coffee_480x640.jpg", "coffee_20x30.png", "astronaut_rgba_300x400.png"]),
    # The crop is larger than the resized image on both sides.
    ("clip_224_crop_336", False, {"size": 224, "crop_size": {"height": 336, "width": 336}},
     ["chelsea_800x300.png", "coffee_300x800.jpg", "astronaut_336x336.png"]),
    ("clip_odd_crop", False, {"size": {"shortest_edge": 225}, "crop_size": {"height": 223, "width": 201}},
     ["chelsea_odd_333x517.png", "coffee_1000x200.jpg"]),
    ("clip_no_crop", False, {"size": {"shortest_edge": 224}, "do_center_crop": False},
     ["coffee_480x640.jpg", "coffee_1000x200.jpg"]),
    ("clip_no_resize", False, {"do_resize": False, "crop_size": {"height": 301, "width": 300}},
     ["coffee_20x30.png", "chelsea_odd_333x517.png"]),
    ("clip_no_rescale", False, {"do_rescale": False, "image_mean": [100, 110, 120], "image_std": [50, 60, 70]},
     ["coffee_480x640.jpg"]),
    ("clip_no_normalize", False, {"do_normalize": False}, ["coffee_480x640.jpg"]),
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
    for cname, anyres, cfg, only in CONFIGS:
        path = "exp/" + cname + "_preprocessor_config.json"
        with open(os.path.join(out, path), "w") as f:
            json.dump(cfg, f)
        manifest["configs"][cname] = {"file": path, "anyres": anyres}
        for name, data in images:
            if only is not None and name not in only:
                continue
            pv, info = preprocess(data, cfg, anyres)
            npy = f"exp/{cname}__{name}.npy"
            np.save(os.path.join(out, npy), pv)
            manifest["cases"].append(dict(info, config=cname, file="img/" + name, pixel_values=npy))

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
