#!/usr/bin/env python3
"""A stream's time per output token while images arrive, as a client sees it: `mmrt serve` with
`--encoder-parts off` (each image's vision tower runs whole in one step) against `on` (a few
blocks a step, as the stream's TPOT schedule allows), fresh servers, alternated ROUNDS times.

Two SLA classes (written to the work folder, `--sla-config`): "stream", a first token within 5 s
and TPOT_MS per output token, and "image", a first token within 60 s, so that admission serves
every image on a slow machine. Per trial, a streamed text request of class stream (TOKENS tokens,
EOS ignored) starts; in an "images" trial, once its first byte is in, IMAGES requests of class
image with a new SIDExSIDE PNG each (random pixels: no cache can serve them) follow 0.3 s apart. The client measures the stream's mean TPOT
(its last event minus its first over the tokens between) and each image request's TTFT (its first
content byte); the stream's longest gap between two tokens comes from the server's trace (the
client cannot see a token whose text the detokenizer holds back). A "none" trial is the same
stream alone.

With `--video SECONDS` each "image" is a video instead: a new SIDExSIDE H.264 clip of SECONDS
seconds at 2 frames per second (ffmpeg's cellauto pattern with a new seed, so that no cache and
no slice reuse can serve it), sent as a `video_url`; a Qwen-VL model encodes it slice by slice.

Usage: encoder_beside_decode.py --mmrt BIN --model DIR [--side 448] [--tpot-ms 200]
                                [--tokens 24] [--images 1] [--rounds 2] [--video SECONDS]
                                [--serve-arg ARG ...]
"""
import argparse
import json
import os
import base64
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "server"))
import http_util as hu  # noqa: E402
import image_ttft  # noqa: E402  (its random-pixel PNG)
import sse_client  # noqa: E402
from server_test import Server  # noqa: E402


def png_url(side, seed):
    return "data:image/png;base64," + image_ttft.png(side, seed)


def video_url(side, seconds, seed, work):
    path = os.path.join(work, f"clip{seed}.mp4")
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-y", "-f", "lavfi",
                    "-i", f"cellauto=s={side}x{side}:r=2:seed={seed}:rule=110", "-t", str(seconds),
                    "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", path],
                   check=True, timeout=120)
    with open(path, "rb") as f:
        return "data:video/mp4;base64," + base64.b64encode(f.read()).decode()


def media_part(a, seed, work):
    if a.video:
        return {"type": "video_url", "video_url": {"url": video_url(a.side, a.video, seed, work)}}
    return {"type": "image_url", "image_url": {"url": png_url(a.side, seed)}}


def stream(port, body, first_byte=None):
    """(status, first content byte s, last one s, raw answer) from sending the request."""
    status, times, raw = sse_client.stream(port, body, 600, first_byte.set if first_byte else None)
    return status, times[0] if times else None, times[-1] if times else None, raw


def server_gaps_ms(port, raw):
    """The stream's gaps between consecutive tokens (ms), from its trace."""
    rid = raw.split(b'"id":"')[1].split(b'"')[0].decode()
    st, _, body = hu.request(port, "GET", f"/v1/requests/{rid}/trace")
    if st != 200:
        return []
    tr = json.loads(body)
    events = tr["traceEvents"] if isinstance(tr, dict) else tr
    ts = sorted(e["ts"] / 1000.0 for e in events if e.get("name") == "token")
    return [b - a for a, b in zip(ts, ts[1:])]


def trial(port, a, with_images, seed):
    text = {"stream": True, "max_tokens": a.tokens, "sla_class": "stream", "ignore_eos": True,
            "messages": [{"role": "user", "content": "Tell me a long story about servers. " * 4}]}
    res, started = {}, threading.Event()
    th = threading.Thread(target=lambda: res.update(s=stream(port, text, started)))
    th.start()
    imgs = []
    if with_images:
        started.wait(120)
        threads = []
        for i in range(a.images):
            body = {"stream": True, "max_tokens": 4, "sla_class": "image",
                    "messages": [{"role": "user", "content": [
                        media_part(a, seed * 100 + i, a.work),
                        {"type": "text", "text": "Describe this image."}]}]}
            t = threading.Thread(target=lambda b=body: imgs.append(stream(port, b)))
            t.start()
            threads.append(t)
            time.sleep(0.3)
        for t in threads:
            t.join()
    th.join()
    st, first, last, raw = res["s"]
    if st != 200 or first is None:
        raise RuntimeError(f"the stream failed: {raw[:300]!r}")
    gaps = server_gaps_ms(port, raw)
    return {"tpot_ms": 1000.0 * (last - first) / max(1, a.tokens - 1),
            "max_gap_ms": max(gaps) if gaps else None,
            "image_ttft_ms": [1000.0 * f for s, f, _, _ in imgs if s == 200 and f is not None],
            "images_failed": sum(1 for s, f, _, _ in imgs if s != 200),
            "image_errors": [raw[-300:].decode(errors="replace") for s, f, _, raw in imgs
                             if s != 200 or f is None]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mmrt", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--side", type=int, default=448)
    ap.add_argument("--tpot-ms", type=float, default=200)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--images", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--video", type=float, default=0)
    ap.add_argument("--serve-arg", action="append", default=[])
    a = ap.parse_args()
    work = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bench",
                        "encoder_beside_decode")
    a.work = work
    os.makedirs(work, exist_ok=True)
    sla = os.path.join(work, "sla.json")
    with open(sla, "w") as f:
        json.dump({"classes": [
            {"name": "stream", "ttft_ms": 5000, "tpot_ms": a.tpot_ms, "weight": 2,
             "on_miss": "refuse"},
            {"name": "image", "ttft_ms": 60000, "weight": 1, "on_miss": "refuse"}]}, f)
    rows, seed = [], 1
    for rnd in range(a.rounds):
        for mode in ("off", "on"):
            srv = Server(a.mmrt, a.model, work, "--encoder-parts", mode, "--sla-config", sla,
                         *a.serve_arg)
            try:
                trial(srv.port, a, False, 0)  # warm-up: the first request's one-time costs
                for kind in ("none", "images"):
                    r = trial(srv.port, a, kind == "images", seed)
                    seed += 1
                    r.update(round=rnd + 1, parts=mode, trial=kind)
                    rows.append(r)
                    ttft = r["image_ttft_ms"]
                    print(f"round {rnd + 1} parts {mode} {kind}: stream TPOT {r['tpot_ms']:.1f} ms, "
                          f"longest gap {r['max_gap_ms']:.0f} ms"
                          + (f", image TTFT {statistics.median(ttft):.0f} ms (median of {len(ttft)})"
                             if ttft else ""), flush=True)
                    time.sleep(0.5)
            finally:
                srv.stop()
    print(f"\n| parts | stream TPOT alone (ms) | with images (ms) | ratio | longest gap alone / with "
          f"images (ms) | image TTFT median (ms) |")
    print("|---|---|---|---|---|---|")
    for mode in ("off", "on"):
        alone = [r for r in rows if r["parts"] == mode and r["trial"] == "none"]
        busy = [r for r in rows if r["parts"] == mode and r["trial"] == "images"]
        ratio = [b["tpot_ms"] / n["tpot_ms"] for n, b in zip(alone, busy)]
        ttft = [t for r in busy for t in r["image_ttft_ms"]]

        def cells(rs, key, fmt):
            return " / ".join(fmt.format(r[key]) for r in rs)
        print("| " + " | ".join([
            mode, cells(alone, "tpot_ms", "{:.1f}"), cells(busy, "tpot_ms", "{:.1f}"),
            " / ".join(f"{x:.2f}" for x in ratio),
            cells(alone, "max_gap_ms", "{:.0f}") + " ; " + cells(busy, "max_gap_ms", "{:.0f}"),
            f"{statistics.median(ttft):.0f}" if ttft else "—"]) + " |")
    failed = sum(r["images_failed"] for r in rows)
    if failed:
        print(f"\n{failed} image requests were not served (refused or failed), e.g.:")
        for r in rows:
            for e in r["image_errors"][:1]:
                print(f"  round {r['round']} parts {r['parts']}: {e}")


if __name__ == "__main__":
    main()
