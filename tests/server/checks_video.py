"""Video input over HTTP on the caller's qwen2-vl server (`ctx.port`): `video_url` parts as data
URLs, http:// URLs (a local file server on 127.0.0.1) and local files under the allowed media
directory give the reply `mmrt generate --video` gives; a repeated clip is served from the caches
without being decoded again; a pruned clip (`video_url.prune_threshold`, the approximate tier)
prefills fewer tokens and replies as `mmrt generate --video-prune-threshold` does; qwen-vl-utils'
sampling keys in `video_url` change the frames sampled as `mmrt generate --video-nframes` does;
a stream's segments (`video_url.continues`) answer as the whole clip; damaged and wrongly typed
clips and bad thresholds get a clear error and the server goes on. Clips are made with the ffmpeg CLI from lavfi sources. CHECKS lists the (name, check) pairs."""
import base64
import os
import shutil
import subprocess

import http_util as hu
from checks_audio import _Files
from checks_http import expect, expect_error

PROMPT = "What happens in the video?"
N = 8


def _clip(ctx, name="clip.mp4", src="testsrc2=s=112x84:r=10:d=2"):
    path = os.path.join(ctx.work, name)
    if not os.path.exists(path):
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-y", "-f",
                        "lavfi", "-i", src, "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt",
                        "yuv420p", "-g", "10", path], check=True, timeout=120)
    return path


def _ask(url, n=N, **video_url):
    return {"messages": [{"role": "user", "content": [
        {"type": "video_url", "video_url": {"url": url, **video_url}},
        {"type": "text", "text": PROMPT}]}],
        "max_tokens": n, "temperature": 0, "ignore_eos": True}


def _generate(ctx, path, *extra):
    p = subprocess.run([ctx.mmrt, "generate", "--model", ctx.model, "--video", path, "--prompt",
                        PROMPT, "--max-tokens", str(N), "--quiet", "--ignore-eos", *extra],
                       capture_output=True, timeout=300)
    expect(p.returncode == 0, p.stderr.decode())
    return p.stdout[:-1] if p.stdout.endswith(b"\n") else p.stdout


def video_urls(ctx):
    path = _clip(ctx)
    data = open(path, "rb").read()
    want = _generate(ctx, path)
    local = os.path.join(ctx.media_dir, "clip.mp4")
    shutil.copy(path, local)
    files = _Files({"/clip.mp4": data})
    try:
        b64 = base64.b64encode(data).decode()
        for url in ["data:video/mp4;base64," + b64, files.url("/clip.mp4"), "file://" + local]:
            st, _, b = hu.post(ctx.port, "/v1/chat/completions", _ask(url))
            expect(st == 200, f"{url[:40]}: {st} {b}")
            got = b["choices"][0]["message"]["content"].encode()
            expect(got == want, f"{url[:40]}: {got!r} vs mmrt generate --video {want!r}")
        # The repeats were served from the caches: nothing decoded, the KV reused.
        stages = b["mmrt"]["stages_ms"]
        expect(stages["media_decode"] == 0, f"a cached clip was decoded again: {stages}")
        expect(b["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, b["usage"])
        expect(files.requests == 1, f"{files.requests} downloads")
        # Another clip gives another reply (the video reaches the model), with its decode timed.
        other = _clip(ctx, "other.mp4", "testsrc2=s=84x112:r=25:d=1.5")
        st, _, b = hu.post(ctx.port, "/v1/chat/completions", _ask(
            "data:video/mp4;base64," + base64.b64encode(open(other, "rb").read()).decode()))
        expect(st == 200, b)
        expect(b["choices"][0]["message"]["content"].encode() != want, "a different video")
        expect(b["mmrt"]["stages_ms"]["media_decode"] > 0, b["mmrt"]["stages_ms"])
    finally:
        files.close()
    return f"greedy reply {want!r}"


BOX = ("color=c=0x3366aa:s=112x84:r=10:d=3[bg];color=c=white:s=12x12:r=10:d=3[fg];"
       "[bg][fg]overlay=x='mod(6*n\\,100)':y=30")


def pruned_video(ctx):
    path = _clip(ctx, "box.mp4", BOX)
    url = "data:video/mp4;base64," + base64.b64encode(open(path, "rb").read()).decode()
    st, _, full = hu.post(ctx.port, "/v1/chat/completions", _ask(url))
    expect(st == 200, full)
    st, _, b = hu.post(ctx.port, "/v1/chat/completions", _ask(url, prune_threshold=2))
    expect(st == 200, b)
    kept, whole = b["usage"]["prompt_tokens"], full["usage"]["prompt_tokens"]
    expect(kept < whole, f"pruned prompt {kept} tokens, unpruned {whole}")
    want = _generate(ctx, path, "--video-prune-threshold", "2")
    got = b["choices"][0]["message"]["content"].encode()
    expect(got == want, f"{got!r} vs mmrt generate --video-prune-threshold 2: {want!r}")
    param = "messages[0].content[0].video_url.prune_threshold"
    for bad in [-1, 256, "2", None]:
        st, _, e = hu.post(ctx.port, "/v1/chat/completions", _ask(url, prune_threshold=bad))
        expect_error(st, e, 400, param=param)
    return f"prompt {whole} -> {kept} tokens at threshold 2"


def video_sampling(ctx):
    # 2 s at 10 fps: 20 frames, of which qwen-vl-utils' default (2 fps) samples 4 (2 slices).
    path = _clip(ctx)
    url = "data:video/mp4;base64," + base64.b64encode(open(path, "rb").read()).decode()
    st, _, base = hu.post(ctx.port, "/v1/chat/completions", _ask(url))
    expect(st == 200, base)
    st, _, b8 = hu.post(ctx.port, "/v1/chat/completions", _ask(url, nframes=8))
    expect(st == 200, b8)
    st, _, f4 = hu.post(ctx.port, "/v1/chat/completions", _ask(url, fps=4))
    expect(st == 200, f4)
    n0, n8 = base["usage"]["prompt_tokens"], b8["usage"]["prompt_tokens"]
    expect(n8 > n0, f"8 frames gave {n8} prompt tokens, the default 4 frames {n0}")
    # 4 fps samples the same 8 frames as nframes 8; mmrt generate takes the same settings.
    expect(f4["usage"]["prompt_tokens"] == n8, f"fps 4: {f4['usage']} vs nframes 8: {n8}")
    got = b8["choices"][0]["message"]["content"].encode()
    expect(f4["choices"][0]["message"]["content"].encode() == got, "fps 4 vs nframes 8")
    want = _generate(ctx, path, "--video-nframes", "8")
    expect(got == want, f"{got!r} vs mmrt generate --video-nframes 8: {want!r}")
    st, _, small = hu.post(ctx.port, "/v1/chat/completions",
                           _ask(url, min_pixels=3136, max_pixels=12544))
    expect(st == 200, small)
    expect(small["usage"]["prompt_tokens"] < n0, f"{small['usage']} vs {n0}")
    pw = "messages[0].content[0].video_url."
    for fields, param in [({"nframes": 2.5}, "nframes"), ({"fps": "2"}, "fps"),
                          ({"fps": 0}, "fps"), ({"max_frames": -4}, "max_frames"),
                          ({"fps": 2, "nframes": 4}, "nframes"),
                          ({"total_pixels": 10 ** 13}, "total_pixels")]:
        st, _, e = hu.post(ctx.port, "/v1/chat/completions", _ask(url, **fields))
        expect_error(st, e, 400, param=pw + param)
    # Within range but above the server's budget: a request may lower it, not raise it.
    st, _, e = hu.post(ctx.port, "/v1/chat/completions", _ask(url, min_pixels=10 ** 6))
    expect_error(st, e, 400, contains="not raise")
    return f"prompt {n0} tokens at 4 frames, {n8} at 8, {small['usage']['prompt_tokens']} smaller"


def _lossless(ctx, name, vf=None, src="testsrc2=s=112x84:r=2:d=4"):
    path = os.path.join(ctx.work, name)
    if not os.path.exists(path):
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-y", "-f",
                        "lavfi", "-i", src] + (["-vf", vf] if vf else []) +
                       ["-c:v", "libx264", "-preset", "veryfast", "-qp", "0", "-pix_fmt",
                        "yuv420p", path], check=True, timeout=120)
    return "data:video/mp4;base64," + base64.b64encode(open(path, "rb").read()).decode()


def _segments(urls, text=PROMPT, n=N):
    parts = [{"type": "video_url", "video_url": {"url": u, **({"continues": True} if k else {})}}
             for k, u in enumerate(urls)]
    return {"messages": [{"role": "user", "content": parts + (
        [{"type": "text", "text": text}] if text else [])}],
        "max_tokens": n, "temperature": 0, "ignore_eos": True}


def video_segments(ctx):
    # A stream cut into two lossless segments (4 of the whole clip's 8 frames each, 2 fps: all
    # sampled) answers as the whole clip, and as mmrt generate --video-segments.
    whole = _lossless(ctx, "whole.mp4")
    halves = [_lossless(ctx, "half0.mp4", "trim=end_frame=4"),
              _lossless(ctx, "half1.mp4", "trim=start_frame=4,setpts=PTS-STARTPTS")]
    st, _, w = hu.post(ctx.port, "/v1/chat/completions", _ask(whole))
    expect(st == 200, w)
    # Sent as they arrive (a growing request, 1 token each), then the question.
    for k in (1, 2):
        st, _, b = hu.post(ctx.port, "/v1/chat/completions", _segments(halves[:k], "", 1))
        expect(st == 200, b)
    st, _, b = hu.post(ctx.port, "/v1/chat/completions", _segments(halves))
    expect(st == 200, b)
    got, want = b["choices"][0]["message"]["content"], w["choices"][0]["message"]["content"]
    expect(got == want, f"segments {got!r} vs the whole clip {want!r}")
    expect(b["usage"]["prompt_tokens"] == w["usage"]["prompt_tokens"], (b["usage"], w["usage"]))
    stages = b["mmrt"]["stages_ms"]
    expect(stages["media_decode"] == 0, f"a segment was decoded for the question: {stages}")
    cached = b["usage"]["prompt_tokens_details"]["cached_tokens"]
    expect(cached >= 4 * 140, f"only {cached} prompt tokens came from the prefix cache")
    paths = [os.path.join(ctx.work, f"half{k}.mp4") for k in (0, 1)]
    gen = subprocess.run([ctx.mmrt, "generate", "--model", ctx.model, "--video", ",".join(paths),
                          "--video-segments", "--prompt", PROMPT, "--max-tokens", str(N),
                          "--quiet", "--ignore-eos"], capture_output=True, timeout=300)
    expect(gen.returncode == 0, gen.stderr.decode())
    expect(gen.stdout.rstrip(b"\n") == got.encode(), f"{gen.stdout!r} vs {got!r}")
    # A first part that continues nothing, a non-boolean, and a segment of another frame size.
    body = _segments(halves)
    body["messages"][0]["content"][0]["video_url"]["continues"] = True
    st, _, e = hu.post(ctx.port, "/v1/chat/completions", body)
    expect_error(st, e, 400, param="messages[0].content[0].video_url.continues")
    body = _segments(halves)
    body["messages"][0]["content"][1]["video_url"]["continues"] = "yes"
    st, _, e = hu.post(ctx.port, "/v1/chat/completions", body)
    expect_error(st, e, 400, param="messages[0].content[1].video_url.continues")
    other = _lossless(ctx, "wide.mp4", src="testsrc2=s=168x84:r=2:d=2")
    st, _, e = hu.post(ctx.port, "/v1/chat/completions", _segments([halves[0], other]))
    expect_error(st, e, 400, contains="same frame size")
    return f"{b['usage']['prompt_tokens']} prompt tokens, {cached} from the prefix cache"


def bad_video(ctx):
    data = open(_clip(ctx), "rb").read()
    cases = [("truncated MP4", data[:len(data) // 3]), ("not a video", bytes(range(256)) * 8)]
    for what, bad in cases:
        st, _, b = hu.post(ctx.port, "/v1/chat/completions",
                           _ask("data:video/mp4;base64," + base64.b64encode(bad).decode()))
        expect_error(st, b, 422)
        expect(b["error"]["code"] == "unprocessable_media", f"{what}: {b}")
    # An image where a video is expected: its decoder names what it found.
    png = open(ctx.image, "rb").read()
    st, _, b = hu.post(ctx.port, "/v1/chat/completions",
                       _ask("data:video/mp4;base64," + base64.b64encode(png).decode()))
    expect_error(st, b, 422, contains="PNG")
    # The wrong MIME type and a one-frame clip: 400 naming the problem.
    st, _, b = hu.post(ctx.port, "/v1/chat/completions",
                       _ask("data:image/png;base64," + base64.b64encode(png).decode()))
    expect_error(st, b, 400, param="messages[0].content[0].video_url")
    one = _clip(ctx, "one.mp4", "testsrc2=s=56x56:r=10:d=0.1")
    st, _, b = hu.post(ctx.port, "/v1/chat/completions",
                       _ask("data:video/mp4;base64," + base64.b64encode(open(one, "rb").read()).decode()))
    expect_error(st, b, 400, contains="has 1 frame: frames go to the model in groups of 2")
    # The server goes on.
    st, _, b = hu.post(ctx.port, "/v1/chat/completions",
                       {"messages": [{"role": "user", "content": "still there?"}], "max_tokens": 2})
    expect(st == 200, b)


CHECKS = [
    ("video: video_url data:, http:// and file:// equal mmrt generate --video; cached repeat",
     video_urls),
    ("video: video_url.prune_threshold prunes (fewer prompt tokens, as mmrt generate); bad "
     "thresholds 400", pruned_video),
    ("video: video_url's qwen-vl-utils sampling keys (nframes, fps, pixel budgets) as mmrt "
     "generate; bad values 400 naming the field, budgets above the server's refused",
     video_sampling),
    ("video: a stream's segments (video_url.continues) sent as a growing request answer as the "
     "whole clip and mmrt generate --video-segments, reusing its KV; bad segments 400",
     video_segments),
    ("video: truncated, garbage, PNG and 1-frame clips refused clearly; the server goes on",
     bad_video),
]
