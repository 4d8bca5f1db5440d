#!/usr/bin/env python3
"""Time to first token of a question about a streamed video: segmented prefill (the clip sent as
a growing request, chunk by chunk, while it is filmed) against the whole clip sent cold with the
question, the same chunks and model both ways, in one run.

A lossless (x264 -qp 0, yuv420p) testsrc2 clip of --chunks x --chunk-frames frames at --fps is
made with ffmpeg and cut by frame index into chunk MP4s, lossless again, so the chunks' frames
decode to exactly the clip's (checked here with PyAV). Each chunk is a video_url part with
nframes = its frame count and min_pixels = max_pixels = the frame's area (the frame grid does not
depend on the frame count); every part after the first carries "continues": true (mmrt's extension).
Each way runs on a fresh `mmrt serve` (no cache shared), warmed up by one request about another
clip (a grey one, so no prefix beyond the chat template is shared):
  streamed  one request per chunk as it arrives (every chunk so far, max_tokens 1; back to back,
            or --pace s apart), then the question: every chunk, then the text part
  whole     the question request alone, the same parts
  onefile   the question about the uncut clip as one video_url (nframes = every frame)
The question asks for 8 greedy tokens (ignore_eos, logprobs) over SSE; TTFT is the client's time
from sending it to the first content delta (where no text comes before the end of the stream:
the end of the stream less the server's decode time, marked ~), next to the server's own
mmrt.ttft_ms and stages_ms. The greedy replies must agree (token bytes, and logprobs within 1e-3,
as special tokens have no bytes): exit 1 if streamed and whole differ, or if whole's prompt is
not onefile's (the server did not join the continuing parts into one video).

    /usr/bin/python3 bench/video_stream_ttft.py [--mmrt build/release/tools/mmrt] [--size small]
        [--reps 3] [--chunks 8] [--chunk-frames 4] [--fps 2] [--pace 0]
        [--ways streamed,whole,onefile] [--out build/bench/video]
"""
import argparse
import base64
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
import http_util as hu  # noqa: E402
from server_test import Server  # noqa: E402

import av  # noqa: E402
import numpy as np  # noqa: E402

W, H = 224, 168  # multiples of 28: the frame is not resized
PROMPT = "What happens in the video?"
FF = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-y"]
X264 = ["-c:v", "libx264", "-qp", "0", "-preset", "veryfast", "-pix_fmt", "yuv420p",
        "-threads", "1"]
STAGES = ["media_decode", "preprocessing", "queue", "encoder", "prefill"]


def make_clips(out, chunks, per, fps):
    whole = os.path.join(out, "stream_whole.mp4")
    src = f"testsrc2=s={W}x{H}:r={fps:g}:d={chunks * per / fps:g}"
    subprocess.run(FF + ["-f", "lavfi", "-i", src] + X264 + [whole], check=True, timeout=300)
    parts = []
    for k in range(chunks):
        p = os.path.join(out, f"stream_chunk{k}.mp4")
        sel = f"select='between(n\\,{k * per}\\,{k * per + per - 1})',setpts=N/FRAME_RATE/TB"
        subprocess.run(FF + ["-i", whole, "-vf", sel, "-fps_mode", "passthrough"] + X264 + [p],
                       check=True, timeout=300)
        parts.append(p)
    grey = os.path.join(out, "stream_warmup.mp4")
    subprocess.run(FF + ["-f", "lavfi", "-i", f"color=c=gray:s={W}x{H}:r={fps:g}:d={per / fps:g}"]
                   + X264 + [grey], check=True, timeout=300)
    return whole, parts, grey


def frames(path):
    with av.open(path) as c:
        return [f.to_ndarray(format="yuv420p") for f in c.decode(video=0)]


def video(path, nframes, continues=False):
    u = {"url": "data:video/mp4;base64," + base64.b64encode(open(path, "rb").read()).decode(),
         "nframes": nframes, "min_pixels": W * H, "max_pixels": W * H}
    if continues:
        u["continues"] = True
    return {"type": "video_url", "video_url": u}


class TimedSock:
    """Records when the first content delta arrives (the first delta carries the role and "")."""

    def __init__(self, s):
        self.s, self.seen, self.first = s, b"", None

    def recv(self, n):
        c = self.s.recv(n)
        self.seen += c
        if self.first is None and self.seen.count(b'"content":"') >= 2:
            self.first = time.perf_counter()
        return c


def question(port, content, max_tokens=8):
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True, "stream": True, "logprobs": True,
            "stream_options": {"include_usage": True}}
    with socket.create_connection(("127.0.0.1", port), timeout=600) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ts = TimedSock(s)
        t0 = time.perf_counter()
        s.sendall(hu.raw(port, "POST", "/v1/chat/completions", body))
        st, _, raw, _ = hu.read_response(ts)
        end = time.perf_counter()
    if st != 200:
        raise RuntimeError(f"the question got {st}: {raw[:600].decode(errors='replace')}")
    ev = [e for e in hu.sse_events(raw) if isinstance(e, dict)]
    ch = [c for e in ev for c in e.get("choices", [])]
    text = "".join(c["delta"].get("content", "") for c in ch)
    lp = [t for c in ch for t in (c.get("logprobs") or {}).get("content", [])]
    m = next(e["mmrt"] for e in ev if e.get("mmrt"))
    u = next(e["usage"] for e in ev if e.get("usage"))
    # No text before the end (tokens without text of their own are sent with the last chunk):
    # the client's end of stream less the server's decode time after the first token.
    client = (ts.first - t0) * 1e3 if ts.first else (end - t0) * 1e3 - m["stages_ms"]["decode"]
    return {"client_ms": client, "delta": ts.first is not None, "server_ms": m["ttft_ms"],
            "tokens": [bytes(t["bytes"]).hex() for t in lp], "logprobs": [t["logprob"] for t in lp],
            "stages_ms": m["stages_ms"], "prompt": u["prompt_tokens"],
            "cached": u.get("prompt_tokens_details", {}).get("cached_tokens", 0), "reply": text}


def prefill(port, content):
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 1, "temperature": 0}
    st, _, b = hu.post(port, "/v1/chat/completions", body, timeout=600)
    if st != 200:
        raise RuntimeError(f"a chunk request got {st}: {json.dumps(b)[:600]}")
    return {"server_ms": b["mmrt"]["ttft_ms"], "prompt": b["usage"]["prompt_tokens"],
            "cached": b["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)}


def run_way(a, model, way, whole, parts, grey):
    srv = Server(a.mmrt, model, a.out)
    try:
        prefill(srv.port, [video(grey, a.chunk_frames)])  # warm-up: another clip
        chunk_parts = [video(p, a.chunk_frames, k > 0) for k, p in enumerate(parts)]
        ask = chunk_parts + [{"type": "text", "text": PROMPT}]
        pre = []
        if way == "streamed":
            t0 = time.perf_counter()
            for k in range(len(parts)):
                wait = t0 + k * a.pace - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                pre.append(prefill(srv.port, chunk_parts[:k + 1]))
            wait = t0 + len(parts) * a.pace - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
        elif way == "onefile":
            ask = [video(whole, len(parts) * a.chunk_frames), {"type": "text", "text": PROMPT}]
        r = question(srv.port, ask)
        r["chunk_requests"] = pre
        return r
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mmrt", default=os.path.join(ROOT, "build", "release", "tools", "mmrt"))
    ap.add_argument("--size", default="small", choices=["tiny", "small"],
                    help="make-tiny-model --size of the qwen2-vl checkpoint (build/bench/SIZE)")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench", "video"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--chunk-frames", type=int, default=4, help="frames per chunk (even)")
    ap.add_argument("--fps", type=float, default=2.0)
    ap.add_argument("--pace", type=float, default=0.0,
                    help="seconds between chunk requests in the streamed way (0: back to back)")
    ap.add_argument("--ways", default="streamed,whole,onefile")
    a = ap.parse_args()
    ways = a.ways.split(",")
    if a.chunk_frames < 2 or a.chunk_frames % 2 or a.chunks < 1 or a.reps < 1:
        ap.error("--chunk-frames must be even and at least 2; --chunks, --reps at least 1")
    if set(ways) - {"streamed", "whole", "onefile"}:
        ap.error("--ways: streamed, whole, onefile")
    os.makedirs(a.out, exist_ok=True)
    model = os.path.join(ROOT, "build", "bench", a.size)
    if not os.path.exists(os.path.join(model, "config.json")):
        subprocess.run([a.mmrt, "make-tiny-model", "--arch", "qwen2-vl", "--size", a.size,
                        "--out", model], check=True, stdout=subprocess.DEVNULL)
    whole, parts, grey = make_clips(a.out, a.chunks, a.chunk_frames, a.fps)
    fw, fc = frames(whole), [f for p in parts for f in frames(p)]
    same = len(fw) == len(fc) == a.chunks * a.chunk_frames and all(
        np.array_equal(x, y) for x, y in zip(fw, fc))
    if not same:
        sys.exit(f"the chunks' {len(fc)} frames do not decode to the clip's {len(fw)}")
    print(f"model: make-tiny-model --arch qwen2-vl --size {a.size}; clip: testsrc2 {W}x{H}, "
          f"{len(fw)} frames at {a.fps:g} fps, {a.chunks} chunks of {a.chunk_frames} frames "
          f"(the chunks' frames equal the clip's); {a.reps} reps (median), a fresh server each")
    runs = {w: [] for w in ways}
    for rep in range(a.reps):  # the ways interleaved, so drift hits them alike
        for w in ways:
            print(f"[video_stream_ttft] rep {rep + 1}/{a.reps}: {w}", file=sys.stderr)
            runs[w].append(run_way(a, model, w, whole, parts, grey))
    med = statistics.median
    summary = {}
    print(f"\n{'way':>8} | {'TTFT ms':>8} {'(server)':>9} | {'prompt':>6} {'cached':>6} | "
          + " ".join(f"{s[:10]:>10}" for s in STAGES) + " | reply")
    for w, rs in runs.items():
        s = {"client_ms": med(r["client_ms"] for r in rs),
             "server_ms": med(r["server_ms"] for r in rs), "prompt": rs[0]["prompt"],
             "cached": med(r["cached"] for r in rs),
             "stages_ms": {k: med(r["stages_ms"][k] for r in rs) for k in STAGES},
             "replies": sorted({r["reply"] for r in rs}),
             "token_seqs": sorted({tuple(r["tokens"]) for r in rs}),
             "no_delta": not all(r["delta"] for r in rs)}
        if w == "streamed":
            s["chunk_request_server_ms"] = med(p["server_ms"] for r in rs
                                               for p in r["chunk_requests"])
        summary[w] = s
        star = "~" if s["no_delta"] else " "
        print(f"{w:>8} | {s['client_ms']:>7.1f}{star} {s['server_ms']:>9.1f} | {s['prompt']:>6} "
              f"{s['cached']:>6.0f} | " + " ".join(f"{s['stages_ms'][k]:>10.1f}" for k in STAGES)
              + " | " + " / ".join(repr(x) for x in s["replies"])
              + f" ({len(rs[0]['tokens'])} tokens)")
    print("ms: client-side time from sending the question to its first content delta; (server): "
          "mmrt.ttft_ms; stages: mmrt.stages_ms of the question request (medians); ~: no text "
          "came before the end of the stream, so the client's time is the end of the stream less "
          "the server's decode time")
    ok = True
    if "streamed" in summary:
        print(f"streamed: each chunk request took "
              f"{summary['streamed']['chunk_request_server_ms']:.1f} ms (server TTFT, median)")
    if "streamed" in summary and "whole" in summary:
        s, w = summary["streamed"], summary["whole"]
        print(f"ratio whole / streamed TTFT: {w['client_ms'] / s['client_ms']:.2f}x client, "
              f"{w['server_ms'] / s['server_ms']:.2f}x server")
        # Special tokens have no bytes: their logprobs tell them apart too.
        dl = max(abs(x - y) for r in runs["streamed"] for q in runs["whole"]
                 for x, y in zip(r["logprobs"], q["logprobs"]))
        agree = s["token_seqs"] == w["token_seqs"] and len(s["token_seqs"]) == 1 and dl <= 1e-3
        print(f"greedy replies streamed vs whole ({len(runs['streamed'][0]['tokens'])} tokens, "
              f"every rep): {'agree' if agree else 'DIFFER'} (token bytes equal, logprobs "
              f"within {dl:.3g}; 1e-3 allowed)")
        ok &= agree
    if "onefile" in summary:
        for w in ("streamed", "whole"):
            if w in summary:
                o, x = summary["onefile"], summary[w]
                joined = x["prompt"] == o["prompt"]
                print(f"{w} vs onefile: replies "
                      f"{'agree' if x['token_seqs'] == o['token_seqs'] else 'DIFFER'}, "
                      f"prompt tokens {x['prompt']} vs {o['prompt']}"
                      + ("" if joined else " (the continuing parts were NOT joined into one "
                                           "video)"))
                ok &= joined
    js = os.path.join(a.out, "stream_ttft.json")
    with open(js, "w") as f:
        json.dump({"config": {k: v for k, v in vars(a).items() if k != "mmrt"},
                   "frames": len(fw), "size": [W, H], "summary": summary, "runs": runs,
                   "ok": ok}, f, indent=1)
    print(f"wrote {os.path.relpath(js, ROOT) if js.startswith(ROOT + os.sep) else js}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
