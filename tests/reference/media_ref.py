"""Writes the media test set and what the real PIL 9.4 (+ numpy) makes of it.

    /usr/bin/python3 tests/reference/media_ref.py --out DIR

Test images are made here, at test time, from the photographs shipped in skimage's data folder:
JPEG (qualities, 4:4:4 / 4:2:2 / 4:2:0, progressive, grayscale, CMYK, odd sizes), PNG (RGB, RGBA,
L, LA, P, 1/2/4/16-bit, Adam7), WebP (lossy, lossless, with alpha) and broken files. For each,
DIR/manifest.json records the file and the expected result as .npy files:
  decode: PIL Image.open(f).convert("RGB")            -> uint8 [H, W, 3]   (or "error")
  resize: PIL Image.resize((w, h), filter)             -> uint8 [h, w, 3]
  qwen:   media_qwen2vl_ref.preprocess (spec reference) -> pixel_values f32, grid_thw i64
"""

import argparse
import io
import json
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import media_qwen2vl_ref as qref  # noqa: E402

import skimage.data  # noqa: E402

DATA = os.path.dirname(skimage.data.__file__)


def photo(name):
    return np.array(Image.open(os.path.join(DATA, name)).convert("RGB"))


# ---------------------------------------------------------------- a small PNG writer
def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def pack_rows(a, depth):
    """a: [h, w*channels] sample values -> scanline bytes (no filter byte)."""
    if depth == 16:
        return [r.astype(">u2").tobytes() for r in a]
    if depth == 8:
        return [r.astype(np.uint8).tobytes() for r in a]
    per = 8 // depth
    out = []
    for r in a:
        n = (len(r) + per - 1) // per * per
        v = np.zeros(n, np.uint32)
        v[: len(r)] = r
        v = v.reshape(-1, per)
        b = np.zeros(v.shape[0], np.uint32)
        for i in range(per):
            b |= v[:, i] << (8 - depth * (i + 1))
        out.append(b.astype(np.uint8).tobytes())
    return out


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def png_bytes(samples, color_type, depth, palette=None, interlace=False, size=None):
    """samples: [h, w, c] integer array in the range of `depth`."""
    h, w, c = samples.shape
    if interlace:
        raw = b""
        for x0, y0, dx, dy in ADAM7:
            sub = samples[y0::dy, x0::dx]
            if sub.shape[0] == 0 or sub.shape[1] == 0:
                continue
            raw += b"".join(b"\x00" + r for r in pack_rows(sub.reshape(sub.shape[0], -1), depth))
    else:
        raw = b"".join(b"\x00" + r for r in pack_rows(samples.reshape(h, -1), depth))
    w_hdr, h_hdr = size if size else (w, h)
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w_hdr, h_hdr, depth, color_type, 0, 0,
                                                                  1 if interlace else 0))
    if palette is not None:
        out += png_chunk(b"PLTE", bytes(int(v) for v in palette))
    return out + png_chunk(b"IDAT", zlib.compress(raw, 6)) + png_chunk(b"IEND", b"")


def pil_bytes(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, format=fmt, **kw)
    return b.getvalue()


# ---------------------------------------------------------------- the test set
def make_files():
    """Returns [(name, bytes)] of images to decode."""
    chelsea = photo("chelsea.png")        # 451 x 300
    astronaut = photo("astronaut.png")    # 512 x 512
    coffee = photo("coffee.png")          # 600 x 400
    camera = np.array(Image.open(os.path.join(DATA, "camera.png")).convert("L"))  # 512 x 512
    ch = Image.fromarray(chelsea)
    files = []
    J = "JPEG"
    files.append(("chelsea_q95_444.jpg", pil_bytes(ch, J, quality=95, subsampling=0)))
    files.append(("chelsea_q75_422.jpg", pil_bytes(ch, J, quality=75, subsampling=1)))
    files.append(("chelsea_q50_420.jpg", pil_bytes(ch, J, quality=50, subsampling=2)))
    files.append(("coffee_q90_progressive.jpg", pil_bytes(Image.fromarray(coffee), J, quality=90, progressive=True)))
    files.append(("odd_333x217_420.jpg", pil_bytes(Image.fromarray(astronaut[13:230, 7:340]), J, quality=85)))
    files.append(("odd_1x97.jpg", pil_bytes(Image.fromarray(coffee[:97, 200:201]), J, quality=90)))
    files.append(("camera_gray.jpg", pil_bytes(Image.fromarray(camera), J, quality=90)))
    files.append(("chelsea_cmyk.jpg", pil_bytes(ch.convert("CMYK"), J, quality=90)))
    with open(os.path.join(DATA, "rocket.jpg"), "rb") as f:
        files.append(("rocket_original.jpg", f.read()))
    # PNG through PIL's own encoder.
    P = "PNG"
    files.append(("astronaut_rgb.png", pil_bytes(Image.fromarray(astronaut[:300, :400]), P)))
    alpha = (np.arange(400)[None, :] * 255 // 399).astype(np.uint8).repeat(300, 0)
    rgba = np.dstack([astronaut[:300, :400], alpha])
    files.append(("astronaut_rgba.png", pil_bytes(Image.fromarray(rgba, "RGBA"), P)))
    files.append(("camera_l.png", pil_bytes(Image.fromarray(camera[:200, :300]), P)))
    files.append(("camera_la.png", pil_bytes(Image.fromarray(np.dstack([camera[:200, :300], camera[:200, :300][::-1]]), "LA"), P)))
    quant = ch.quantize(200)
    files.append(("chelsea_p.png", pil_bytes(quant, P)))
    files.append(("chelsea_p_trns.png", pil_bytes(quant, P, transparency=3)))
    with open(os.path.join(DATA, "palette_color.png"), "rb") as f:
        files.append(("palette_color_original.png", f.read()))
    # PNG layouts PIL cannot write, through the small writer above.
    a16 = (astronaut[:120, :160].astype(np.uint16) * 257 + np.arange(160, dtype=np.uint16)[None, :, None])
    files.append(("rgb16.png", png_bytes(a16, 2, 16)))
    files.append(("rgba16.png", png_bytes(np.dstack([a16, a16[:, :, :1]]), 6, 16)))
    files.append(("la16.png", png_bytes(np.dstack([a16[:, :, :1], a16[:, :, 1:2]]), 4, 16)))
    g16 = (np.arange(200 * 64, dtype=np.uint32).reshape(64, 200) * 5 % 65536).astype(np.uint16)
    g16[:8] = np.arange(200, dtype=np.uint16)[None, :] + 100  # values around 255 (saturation)
    files.append(("gray16.png", png_bytes(g16[:, :, None], 0, 16)))
    for depth in (1, 2, 4):
        g = (camera[:61, :77] >> (8 - depth))[:, :, None]
        files.append((f"gray{depth}bit.png", png_bytes(g, 0, depth)))
        files.append((f"pal{depth}bit.png", png_bytes(g, 3, depth, palette=np.arange(3 * (1 << depth)) * 7 % 256)))
    files.append(("adam7_rgb.png", png_bytes(astronaut[:37, :53], 2, 8, interlace=True)))
    files.append(("adam7_gray2.png", png_bytes((camera[:29, :31] >> 6)[:, :, None], 0, 2, interlace=True)))
    short_pal = np.array([[[0], [1], [2], [5], [100], [200], [255], [1]]], np.uint8)
    files.append(("short_palette.png", png_bytes(short_pal, 3, 8, palette=[10, 20, 30, 40, 50, 60])))
    # WebP.
    W = "WEBP"
    crop = Image.fromarray(chelsea[:200, :256])
    files.append(("chelsea_lossy.webp", pil_bytes(crop, W, quality=80)))
    files.append(("chelsea_lossless.webp", pil_bytes(crop, W, lossless=True)))
    rgba_crop = Image.fromarray(np.dstack([chelsea[:200, :256], alpha[:200, :256]]), "RGBA")
    files.append(("chelsea_lossy_alpha.webp", pil_bytes(rgba_crop, W, quality=80)))
    files.append(("chelsea_lossless_alpha.webp", pil_bytes(rgba_crop, W, lossless=True, exact=True)))
    return files


def broken_files(good_jpeg, good_png, good_webp):
    """(name, bytes, expected error kind) - each also checked against PIL below."""
    out = []
    out.append(("truncated.jpg", good_jpeg[: len(good_jpeg) // 2], "truncated"))
    with open(os.path.join(DATA, "truncated.jpg"), "rb") as f:
        out.append(("skimage_truncated.jpg", f.read(), "truncated"))
    bad = bytearray(good_jpeg)
    sof = bad.find(b"\xff\xc0")
    bad[sof + 2: sof + 4] = b"\x00\x03"  # SOF segment length 3: a bogus marker length
    out.append(("corrupt_sof.jpg", bytes(bad), "corrupt"))
    out.append(("truncated.png", good_png[: len(good_png) * 2 // 3], "truncated"))
    bad = bytearray(good_png)
    bad[29] ^= 0xFF  # IHDR checksum
    out.append(("corrupt_crc.png", bytes(bad), "corrupt"))
    out.append(("truncated.webp", good_webp[: len(good_webp) // 2], "truncated"))
    return out


def oversized_files():
    """Headers claiming 30000 x 30000 pixels over tiny bodies (the data is never decoded)."""
    bomb_png = png_bytes(np.zeros((1, 1, 3), np.uint8), 2, 8, size=(30000, 30000))
    small = pil_bytes(Image.fromarray(np.zeros((8, 8, 3), np.uint8)), "JPEG")
    b = bytearray(small)
    sof = b.find(b"\xff\xc0")
    b[sof + 5: sof + 9] = struct.pack(">HH", 30000, 30000)
    zero = png_bytes(np.zeros((1, 1, 3), np.uint8), 2, 8, size=(0, 16))
    return [("bomb.png", bomb_png), ("bomb.jpg", bytes(b)), ("zero_width.png", zero)]


RESIZE_CASES = [
    # (source, crop [y0, y1, x0, x1] or None, out_w, out_h)
    ("chelsea.png", None, 224, 224),
    ("chelsea.png", None, 1000, 700),
    ("chelsea.png", None, 451, 150),
    ("chelsea.png", None, 200, 300),
    ("chelsea.png", None, 451, 300),
    ("chelsea.png", None, 1, 1),
    ("chelsea.png", None, 3, 611),
    ("astronaut.png", None, 7, 5),
    ("astronaut.png", None, 448, 448),
    ("astronaut.png", [13, 230, 7, 340], 97, 61),
    ("coffee.png", [0, 300, 100, 101], 5, 17),
    ("coffee.png", [0, 300, 100, 101], 1, 150),
    ("coffee.png", [200, 201, 0, 600], 300, 1),
    ("coffee.png", [100, 110, 0, 600], 448, 28),
    ("coffee.png", [0, 400, 0, 600], 640, 480),
]

QWEN_CASES = [
    # (file from make_files or "big:<w>x<h>", config dict)
    ("chelsea_q75_422.jpg", {}),
    ("astronaut_rgb.png", {"min_pixels": 3136, "max_pixels": 200704}),
    ("camera_gray.jpg", {"size": {"shortest_edge": 3136, "longest_edge": 12845056}}),
    ("astronaut_rgba.png", {"resample": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}),
    ("chelsea_lossy.webp", {"patch_size": 16, "merge_size": 2, "temporal_patch_size": 2}),
    ("odd_1x97.jpg", {}),
    ("tiny:20x30", {}),
    ("wide:1400x40", {"max_pixels": 100000}),
    ("big:1000x800", {"max_pixels": 100352}),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = args.out
    for sub in ("img", "exp"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    manifest = {"decode": [], "errors": [], "oversized": [], "resize": [], "qwen": []}

    def put_file(name, data):
        with open(os.path.join(out, "img", name), "wb") as f:
            f.write(data)
        return "img/" + name

    def put_npy(name, arr):
        np.save(os.path.join(out, "exp", name), arr)
        return "exp/" + name

    files = make_files()
    coffee = photo("coffee.png")
    files.append(("tiny:20x30", pil_bytes(Image.fromarray(coffee[:30, :20]), "PNG")))
    files.append(("wide:1400x40", pil_bytes(Image.fromarray(np.tile(coffee[:40], (1, 3, 1))[:, :1400]), "PNG")))
    big = Image.fromarray(coffee).resize((1000, 800), Image.BICUBIC)
    files.append(("big:1000x800", pil_bytes(big, "JPEG", quality=90)))
    by_name = {}
    for name, data in files:
        fname = name.replace(":", "_") + ("" if "." in name else (".jpg" if name.startswith("big") else ".png"))
        path = put_file(fname, data)
        by_name[name] = (path, data)
        rgb = qref.decode_rgb(data)
        manifest["decode"].append({"file": path, "expect": put_npy(fname + ".npy", rgb),
                                   "mode": Image.open(io.BytesIO(data)).mode})

    good = dict(files)
    for name, data, kind in broken_files(good["chelsea_q75_422.jpg"], good["astronaut_rgb.png"],
                                         good["chelsea_lossy.webp"]):
        try:
            qref.decode_rgb(data)
            pil = "ok"
        except Exception as e:  # noqa: BLE001 - any PIL failure counts
            pil = type(e).__name__ + ": " + str(e)
        manifest["errors"].append({"file": put_file(name, data), "kind": kind, "pil": pil})
    for name, data in oversized_files():
        manifest["oversized"].append({"file": put_file(name, data)})

    for i, (src, crop, w, h) in enumerate(RESIZE_CASES):
        a = photo(src)
        if crop:
            a = np.ascontiguousarray(a[crop[0]:crop[1], crop[2]:crop[3]])
        s = put_npy(f"resize{i}_src.npy", a)
        for filt, code in (("bicubic", Image.BICUBIC), ("bilinear", Image.BILINEAR)):
            r = qref.resize_rgb(a, w, h, code)
            manifest["resize"].append({"src": s, "w": w, "h": h, "filter": filt,
                                       "expect": put_npy(f"resize{i}_{filt}.npy", r)})

    for i, (name, cfg) in enumerate(QWEN_CASES):
        path, data = by_name[name]
        cfg_path = os.path.join(out, "exp", f"qwen{i}_preprocessor_config.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        pv, grid, (rh, rw) = qref.preprocess(data, cfg)
        manifest["qwen"].append({"file": path, "config": "exp/" + os.path.basename(cfg_path),
                                 "pixel_values": put_npy(f"qwen{i}_pv.npy", pv),
                                 "grid": put_npy(f"qwen{i}_grid.npy", grid), "resized": [rh, rw]})

    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
