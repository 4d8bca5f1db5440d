#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora under fuzz/corpus/ (committed; rerun to regenerate).

Usage: make_seeds.py MMRT_BINARY   (the binary writes the tiny checkpoint whose config.json,
preprocessor_config.json and tokenizer.json seed the text fuzzers). Images come from PIL, the
safetensors file is written by hand from the format's definition. Audio seeds are written by
soundfile (libsndfile, the library mmrt decodes with), each under 8 KiB; video seeds by the ffmpeg
CLI.
"""
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

from PIL import Image

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def image_seeds():
    # First byte: mode selector of fuzz_image (0 reference, 1 fast).
    def img(mode, size, color):
        im = Image.new(mode, size, color)
        for x in range(size[0]):  # a little structure for the codecs to chew on
            im.putpixel((x, x * size[1] // size[0]), 0 if mode in ("L", "1", "P", "I;16") else (0,) * len(mode))
        return im

    def save(im, fmt, **kw):
        b = io.BytesIO()
        im.save(b, fmt, **kw)
        return b.getvalue()

    rgb = img("RGB", (40, 30), (200, 30, 60))
    seeds = {
        "rgb.png": save(rgb, "PNG"),
        "gray.png": save(img("L", (17, 9), 128), "PNG"),
        "palette.png": save(rgb.convert("P"), "PNG"),
        "rgba.png": save(img("RGBA", (12, 20), (1, 2, 3, 4)), "PNG"),
        "gray16.png": save(img("I;16", (8, 8), 300), "PNG"),
        "optimized.png": save(rgb, "PNG", optimize=True),
        "baseline.jpg": save(rgb, "JPEG", quality=80),
        "progressive.jpg": save(rgb, "JPEG", quality=60, progressive=True),
        "gray.jpg": save(img("L", (33, 7), 90), "JPEG"),
        "cmyk.jpg": save(rgb.convert("CMYK"), "JPEG"),
        "subsampled.jpg": save(rgb, "JPEG", subsampling=2),
        "lossy.webp": save(rgb, "WEBP", quality=50),
        "lossless.webp": save(rgb, "WEBP", lossless=True),
        "alpha.webp": save(img("RGBA", (10, 10), (9, 9, 9, 100)), "WEBP"),
    }
    for i, (name, data) in enumerate(sorted(seeds.items())):
        put("fuzz_image", name, bytes([i & 1]) + data)


def audio_seeds():
    # fuzz_audio takes the file itself. Short clips (a tone and a little noise) in every
    # container and coding the decoder accepts, at rates that need resampling and at 16 kHz.
    import numpy as np
    import soundfile as sf

    def clip(seconds, rate, channels):
        t = np.arange(int(seconds * rate)) / rate
        rng = np.random.default_rng(7)
        x = [0.4 * np.sin(2 * np.pi * (330 + 110 * c) * t) + 0.05 * rng.standard_normal(t.size)
             for c in range(channels)]
        return np.stack(x, axis=1).astype(np.float32)

    seeds = {  # name: (seconds, rate, channels, format, subtype)
        "pcm16_mono_16k.wav": (0.1, 16000, 1, "WAV", "PCM_16"),
        "pcm16_stereo_44k.wav": (0.02, 44100, 2, "WAV", "PCM_16"),
        "pcm24_mono_48k.wav": (0.03, 48000, 1, "WAV", "PCM_24"),
        "float32_mono_8k.wav": (0.1, 8000, 1, "WAV", "FLOAT"),
        "double_stereo_16k.wav": (0.02, 16000, 2, "WAV", "DOUBLE"),
        "u8_mono_22k.wav": (0.1, 22050, 1, "WAV", "PCM_U8"),
        "ulaw_mono_8k.wav": (0.2, 8000, 1, "WAV", "ULAW"),
        "ima_adpcm_mono_16k.wav": (0.2, 16000, 1, "WAV", "IMA_ADPCM"),
        "ms_adpcm_stereo_16k.wav": (0.1, 16000, 2, "WAV", "MS_ADPCM"),
        "wavex_3ch_16k.wav": (0.03, 16000, 3, "WAVEX", "PCM_16"),
        "flac16_mono_16k.flac": (0.25, 16000, 1, "FLAC", "PCM_16"),
        "flac24_stereo_44k.flac": (0.02, 44100, 2, "FLAC", "PCM_24"),
        "vorbis_mono_16k.ogg": (0.1, 16000, 1, "OGG", "VORBIS"),
        "opus_mono_48k.ogg": (0.1, 48000, 1, "OGG", "OPUS"),
        "opus_stereo_48k.ogg": (0.05, 48000, 2, "OGG", "OPUS"),
        "mp3_mono_16k.mp3": (0.3, 16000, 1, "MP3", "MPEG_LAYER_III"),
        "mp3_stereo_44k.mp3": (0.1, 44100, 2, "MP3", "MPEG_LAYER_III"),
    }
    for name, (seconds, rate, channels, fmt, subtype) in seeds.items():
        b = io.BytesIO()
        sf.write(b, clip(seconds, rate, channels), rate, format=fmt, subtype=subtype)
        data = b.getvalue()
        assert len(data) < 8192, (name, len(data))
        put("fuzz_audio", name, data)


def video_seeds():
    # fuzz_video takes the file itself. Tiny clips (testsrc2, key frames every 4 frames so the
    # decoder seeks) in every container and codec the decoder accepts, written by the ffmpeg CLI
    # (FFmpeg is the library mmrt decodes with), each under 8 KiB.
    ff = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-y"]
    src = ["-f", "lavfi", "-i", "testsrc2=s=32x24:r=10:d=1"]
    seeds = {  # name: encoder arguments
        "h264_bframes.mp4": ["-c:v", "libx264", "-preset", "veryfast", "-g", "4", "-bf", "2",
                             "-pix_fmt", "yuv420p", "-movflags", "+faststart"],
        "h264_444.mkv": ["-c:v", "libx264", "-preset", "veryfast", "-g", "4", "-pix_fmt", "yuv444p"],
        "hevc.mp4": ["-c:v", "libx265", "-x265-params", "log-level=error", "-g", "4"],
        "vp9.webm": ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-g", "4", "-pix_fmt", "yuv420p"],
        "vp8.webm": ["-c:v", "libvpx", "-deadline", "realtime", "-g", "4"],
        "av1.mkv": ["-c:v", "libaom-av1", "-cpu-used", "8", "-g", "4", "-pix_fmt", "yuv420p"],
        "mpeg4.avi": ["-c:v", "mpeg4", "-q:v", "10", "-g", "4"],
        "mjpeg.avi": ["-c:v", "mjpeg", "-q:v", "10", "-frames:v", "4"],
        "with_audio.mp4": ["-f", "lavfi", "-i", "sine=d=0.2", "-map", "1:a", "-map", "0:v",
                           "-c:a", "aac", "-c:v", "libx264", "-preset", "veryfast", "-g", "4",
                           "-pix_fmt", "yuv420p"],
    }
    tmp = tempfile.mkdtemp(prefix="mmrt_seeds_")
    try:
        for name, args in seeds.items():
            path = os.path.join(tmp, name)
            subprocess.run(ff + src + args + [path], check=True)
            with open(path, "rb") as f:
                data = f.read()
            assert len(data) < 8192, (name, len(data))
            put("fuzz_video", name, data)
    finally:
        shutil.rmtree(tmp)


def safetensors_seed(header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    put("fuzz_safetensors", "two.safetensors", safetensors_seed(
        {"__metadata__": {"format": "pt"},
         "a.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
         "b.bias": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]}},
        bytes(range(22))))
    put("fuzz_safetensors", "f16.safetensors", safetensors_seed(
        {"x": {"dtype": "F16", "shape": [1, 4], "data_offsets": [0, 8]}}, bytes(8)))
    put("fuzz_safetensors", "empty.safetensors", safetensors_seed({}, b""))


def checkpoint_seeds(mmrt):
    tmp = tempfile.mkdtemp(prefix="mmrt_seeds_")
    try:
        subprocess.run([mmrt, "make-tiny-model", "--arch", "qwen2-vl", "--out", tmp + "/m"],
                       check=True, stdout=subprocess.DEVNULL)
        m = tmp + "/m"
        cfg = open(m + "/config.json", "rb").read()
        pp = open(m + "/preprocessor_config.json", "rb").read()
        put("fuzz_config", "config.json", b"\0" + cfg)
        c = json.loads(cfg)
        c["rope_scaling"] = {"type": "mrope", "mrope_section": [2, 3, 3]}
        c["text_config"] = {"hidden_size": c["hidden_size"], "vocab_size": c["vocab_size"]}
        put("fuzz_config", "config_variant.json", b"\0" + json.dumps(c).encode())
        put("fuzz_config", "preprocessor_config.json", b"\1" + pp)
        p = json.loads(pp)
        p["size"] = {"shortest_edge": 3136, "longest_edge": 12845056}
        put("fuzz_config", "preprocessor_size.json", b"\1" + json.dumps(p).encode())
        tok = open(m + "/tokenizer.json", "rb").read()
        put("fuzz_tokenizer_json", "tiny_tokenizer.json", tok)  # also fuzz_tokenizer's tokenizer
        put("fuzz_tokenizer_json", "sentencepiece.json", json.dumps(sentencepiece_tokenizer()).encode())
        # The other families' files: selector (family << 1) | is_preprocessor_config, bit 7 for
        # LLaVA-NeXT's anyres keys.
        for arch, fam, anyres in (("llava-next", 1, 0x80), ("llava", 1, 0), ("fuyu", 2, 0)):
            d = f"{tmp}/{arch}"
            subprocess.run([mmrt, "make-tiny-model", "--arch", arch, "--out", d],
                           check=True, stdout=subprocess.DEVNULL)
            put("fuzz_config", f"{arch}_config.json",
                bytes([fam << 1]) + open(d + "/config.json", "rb").read())
            put("fuzz_config", f"{arch}_preprocessor_config.json",
                bytes([(fam << 1) | 1 | anyres]) + open(d + "/preprocessor_config.json", "rb").read())
            if arch == "fuyu":  # a Unigram tokenizer.json
                put("fuzz_tokenizer_json", "unigram.json", open(d + "/tokenizer.json", "rb").read())
    finally:
        shutil.rmtree(tmp)


def sentencepiece_tokenizer():
    """A small Llama-style tokenizer.json: byte fallback, Prepend + Replace, Strip decoder."""
    u = "\u2581"
    vocab = {"<unk>": 0, "<s>": 1}
    vocab.update({f"<0x{b:02X}>": 2 + b for b in range(256)})
    for w in [u, "a", "b", "ab", u + "a", u + "ab"]:
        vocab[w] = len(vocab)
    return {"added_tokens": [{"id": 0, "content": "<unk>", "special": True},
                             {"id": 1, "content": "<s>", "special": True}],
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": u},
                {"type": "Replace", "pattern": {"String": " "}, "content": u}]},
            "pre_tokenizer": None,
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": u}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True,
                      "vocab": vocab, "merges": [u + " a", "a b", u + "a b"]}}


def text_seeds():
    texts = {
        "hello.txt": "Hello, world! How are you?\n".encode(),
        "mixed.txt": "你好 🙂 <|im_start|>user\nx = 42;<|im_end|>\t  tabs".encode(),
        "nfc.txt": "e\u0301 \u00e9 \ufb01 \u2126".encode(),
        "invalid.txt": b"ok \xff\xfe \xc3\x28 \xed\xa0\x80 end",
        "digits.txt": b"1234567890 3.14159 0x1F",
    }
    for n, t in texts.items():
        put("fuzz_tokenizer", n, t)
    # Chat: parts separated by NUL; the first byte of a part is role (bits 0-1), kind (2-3),
    # new message (7), vision id (6), generation prompt (5).
    put("fuzz_chat_template", "user_image.bin", b"\x81Describe\0\x05\0\x21what is it?")
    put("fuzz_chat_template", "system_user.bin", b"\x80Be brief.\0\x81hi\0\x82hello\0\xe1more")
    put("fuzz_chat_template", "audio.bin", b"\x81\x0cx")


def request_seeds():
    # First byte: bit 0 completion endpoint, bit 1 local media allowed (a missing directory).
    user = {"role": "user", "content": "Hello"}
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    seeds = {
        "chat.bin": (0, {"model": "tiny", "messages": [user], "max_tokens": 8}),
        "chat_all_fields.bin": (0, {
            "messages": [{"role": "system", "content": "Be brief."}, user],
            "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.7,
            "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 1, "stop": ["\n", "END"],
            "presence_penalty": 0.1, "frequency_penalty": 0.1, "repetition_penalty": 1.05,
            "ignore_eos": False, "user": "u", "service_tier": "priority", "sla_class": "gold",
            "ttft_deadline_ms": 300, "max_completion_tokens": 16, "n": 1}),
        "chat_image.bin": (0, {"messages": [{"role": "user", "content": [
            image, {"type": "text", "text": "What is it?"}]}]}),
        "chat_file.bin": (2, {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "file:///nonexistent-mmrt-fuzz/a.png"}}]}]}),
        "chat_http.bin": (0, {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": "http://127.0.0.1:9/a.png"}]}]}),
        "chat_refused.bin": (0, {"messages": [user], "tools": [{"type": "function"}],
                                 "response_format": {"type": "json_object"}}),
        "completion.bin": (1, {"prompt": "Once upon a time", "max_tokens": 4}),
        "completion_ids.bin": (1, {"prompt": [1, 2, 3], "echo": False}),
    }
    for name, (mode, body) in seeds.items():
        put("fuzz_chat_request", name, bytes([mode]) + json.dumps(body).encode())


def workload_seeds():
    # First byte: bit 0 YAML (else JSON). The documented examples, and a JSON rewrite of each.
    docs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "examples")
    for name in sorted(os.listdir(docs)):
        if name.endswith(".yaml"):
            with open(os.path.join(docs, name), "rb") as f:
                put("fuzz_workload", name.replace(".yaml", "_yaml.bin"), bytes([1]) + f.read())
    w = {"name": "w", "seed": 2, "duration_s": 30, "warmup_s": 2, "rate": 3,
         "requests": [{"kind": "text", "weight": 2, "prompt_words": 8, "max_tokens": 4},
                      {"kind": "image", "image_sizes": [[64, 48]]},
                      {"kind": "repeat_image", "turns": 2, "turn_gap_s": 0.5}],
         "streams": [{"name": "c", "fps": 5, "class": "gold", "distinct_frames": 2}],
         "classes": {"gold": {"weight": 1, "ttft_ms": {"p50": 10, "p99": 30},
                              "tpot_ms": {"p90": 5}, "itl_jitter_ms": 3, "refusals_ok": True}},
         "overall": {"e2e_ms": {"p99": 100}}, "confidence": 0.99, "k": 2,
         "preflight_required": ["governor", "thp"]}
    put("fuzz_workload", "all_fields_json.bin", bytes([0]) + json.dumps(w).encode())


def http_seeds():
    body = b'{"model":"tiny","messages":[{"role":"user","content":"hi"}]}'
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    put("fuzz_http_request", "content_length.bin",
        head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    chunks = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(body[i:i + 20]), body[i:i + 20])
                      for i in range(0, len(body), 20))
    put("fuzz_http_request", "chunked_trailer.bin",
        head + b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\nX-T: 1\r\n\r\n")
    put("fuzz_http_request", "pipelined.bin",
        b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 2 + head +
        b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n")
    put("fuzz_http_request", "te_and_cl.bin",
        head + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    image_seeds()
    audio_seeds()
    video_seeds()
    safetensors_seeds()
    checkpoint_seeds(sys.argv[1])
    text_seeds()
    request_seeds()
    workload_seeds()
    http_seeds()
    n = sum(len(fs) for _, _, fs in os.walk(ROOT))
    print(f"wrote {n} seed files under {ROOT}")


if __name__ == "__main__":
    main()
