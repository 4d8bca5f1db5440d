"""Mixed traffic with every kind of trouble at once, on the caller's qwen2-vl server: an open-loop
client (Poisson arrivals, a fixed seed) sends text, shared images, two images, video, damaged
images and truncated JSON, streamed and not, in every SLA class, and drops a fifth of its
connections on purpose (mid-body, after sending, after the status line, mid-stream). Each answer
it reads whole must be complete (every token asked for, `[DONE]`) or a short JSON error with a
4xx/503 status; afterwards nothing is left running or waiting, no KV block is in use and the
server still answers. (This traffic found the parser's error quoting a whole unterminated string:
a 1 MB body came back as a 1 MB error.)"""
import asyncio
import base64
import io
import json
import os
import random
import re
import subprocess
import time

import http_util as hu

KINDS = [("text", 35), ("image", 25), ("two images", 10), ("video", 10), ("bad image", 10),
         ("bad json", 10)]
DROPS = [(None, 80), ("mid body", 5), ("after sending", 5), ("after the status", 5),
         ("mid stream", 5)]
WORDS = "alpha beta gamma delta image video token queue model serve".split()


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def _png(w, h, seed):
    from PIL import Image
    img = Image.new("RGB", (w, h))
    img.putdata([((x * seed) % 256, (y * 5 + seed) % 256, (x ^ y) % 256)
                 for y in range(h) for x in range(w)])
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _request(rng, media):
    kind = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 120)))
    part = lambda url: {"type": "image_url", "image_url": {"url": url}}  # noqa: E731
    content = text
    if kind == "image":
        content = [part(rng.choice(media["images"])), {"type": "text", "text": text}]
    elif kind == "two images":
        content = [part(rng.choice(media["images"])), part(rng.choice(media["images"])),
                   {"type": "text", "text": text}]
    elif kind == "video":
        content = [{"type": "video_url", "video_url": {"url": media["video"]}},
                   {"type": "text", "text": text}]
    elif kind == "bad image":
        u = rng.choice(media["images"])
        u = rng.choice([u[:len(u) // 2], u[:40] + "!!!" + u[43:], "data:image/png;base64,AAAA",
                        "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" +
                                                                    b"\0" * 64).decode()])
        content = [part(u), {"type": "text", "text": text}]
    body = {"messages": [{"role": "user", "content": content}],
            "max_tokens": rng.randrange(1, 24), "ignore_eos": True, "stream": rng.random() < 0.7,
            "sla_class": rng.choice(["platinum", "gold", "silver", "batch"])}
    if body["stream"]:
        body["stream_options"] = {"include_usage": True}
    raw = json.dumps(body).encode()
    if kind == "bad json":
        raw = raw[:rng.randrange(1, len(raw))]
    drop = rng.choices([d for d, _ in DROPS], [w for _, w in DROPS])[0]
    return kind, body, raw, drop


async def _one(port, kind, body, raw, drop, rng):
    rec = {"kind": kind, "drop": drop, "max_tokens": body["max_tokens"], "stream": body["stream"]}
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(raw)).encode() + b"\r\n\r\n")
    r, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        if drop == "mid body":
            w.write(head + raw[:len(raw) // 2])
            await w.drain()
            await asyncio.sleep(rng.random() * 0.3)
            return rec
        w.write(head + raw)
        await w.drain()
        if drop == "after sending":
            await asyncio.sleep(rng.random() * 0.3)
            return rec
        status_line = await asyncio.wait_for(r.readline(), 120)
        rec["status"] = int(status_line.split()[1]) if status_line else 0
        if drop == "after the status":
            return rec
        headers = (await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 120)).decode().lower()
        data = b""
        while True:
            chunk = await asyncio.wait_for(r.read(65536), 120)
            if not chunk:
                break
            data += chunk
            if drop == "mid stream" and "text/event-stream" in headers:
                return rec
            if b"data: [DONE]" in data or (b"0\r\n\r\n" in data[-7:]):
                break
            m = re.search(r"content-length: *(\d+)", headers)
            if m and len(data) >= int(m.group(1)):
                break
        rec["body"] = data
        return rec
    finally:
        w.close()


async def _traffic(port, rate, duration, seed, media):
    rng = random.Random(seed)
    tasks, t, t0 = [], 0.0, time.time()
    while t < duration:
        t += rng.expovariate(rate)
        await asyncio.sleep(max(0.0, t0 + t - time.time()))
        req = _request(rng, media)
        tasks.append(asyncio.create_task(_one(port, *req, random.Random(rng.random()))))
    return await asyncio.gather(*tasks, return_exceptions=True)


def _judge(rec):
    """What is wrong with one answer read whole (None: nothing)."""
    st, body = rec.get("status", 0), rec.get("body", b"")
    if st == 200:
        if rec["kind"] in ("bad json",):
            return "a truncated body was served"
        if rec["stream"]:
            got = re.findall(rb'"completion_tokens": *(\d+)', body)
            if b"data: [DONE]" not in body or not got or int(got[-1]) != rec["max_tokens"]:
                return f"an incomplete stream: {body[-300:]!r}"
        else:
            try:
                n = json.loads(body[body.find(b"{"):])["usage"]["completion_tokens"]
            except (ValueError, KeyError) as e:
                return f"an unreadable answer ({e}): {body[:200]!r}"
            if n != rec["max_tokens"]:
                return f"{n} tokens of {rec['max_tokens']}"
        return None
    if st in (400, 422, 429, 503):
        if len(body) > 600:  # the longest message, cut, in its JSON
            return f"a {st} error of {len(body)} bytes"
        try:
            msg = json.loads(body[body.find(b"{"):])["error"]["message"]
        except (ValueError, KeyError, TypeError):
            return f"a {st} without a JSON error: {body[:200]!r}"
        return None if msg else f"a {st} with an empty message"
    return f"status {st}: {body[:300]!r}"


def mixed_traffic(ctx, rate=12.0, duration=8.0, seed=7):
    clip = os.path.join(ctx.work, "chaos.mp4")
    subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-f", "lavfi", "-i",
                    "testsrc2=s=112x84:r=10:d=2", "-pix_fmt", "yuv420p", clip], check=True)
    media = {"images": [_png(448, 336, 3), _png(224, 224, 7), _png(28, 28, 13),
                        _png(1000, 60, 17)],
             "video": "data:video/mp4;base64," + base64.b64encode(open(clip, "rb").read()).decode()}
    recs = asyncio.run(_traffic(ctx.port, rate, duration, seed, media))
    errors = [r for r in recs if isinstance(r, BaseException)]
    expect(not errors, f"{len(errors)} requests raised on the client: {errors[:3]!r}")
    read = [r for r in recs if r["drop"] is None]
    bad = [(r["kind"], why) for r in read if (why := _judge(r))]
    expect(not bad, f"{len(bad)} of {len(read)} answers wrong: {bad[:5]}")
    by = {}
    for r in read:
        by.setdefault(r["kind"], {}).setdefault(r["status"], 0)
        by[r["kind"]][r["status"]] += 1
    expect(by.get("bad json", {}).keys() <= {400}, f"truncated JSON: {by.get('bad json')}")
    expect(by.get("bad image", {}).keys() <= {400, 422}, f"damaged images: {by.get('bad image')}")
    expect(by.get("image", {}).get(200, 0) > 0, f"no image request served: {by}")
    # Every request ends: nothing running, waiting or in media, no KV block in use.
    gauges = ("mmrt_num_requests_running", "mmrt_num_requests_waiting",
              "mmrt_num_requests_in_media", "mmrt_kv_cache_blocks_used")
    end, left = time.time() + 30, {}
    while True:
        try:
            left = {g: hu.metric(ctx.port, g) for g in gauges}
        except RuntimeError:  # a router has no engine gauges: its workers' are not checked
            break
        if not any(left.values()) or time.time() > end:
            break
        time.sleep(0.2)
    expect(not any(left.values()), f"after the traffic: {left}")
    st, _, _ = hu.request(ctx.port, "GET", "/health")
    expect(st == 200, f"/health after the traffic: {st}")
    return (f"{len(recs)} requests, {len(recs) - len(read)} dropped on purpose; answers by kind "
            f"and status: " + "; ".join(f"{k} {v}" for k, v in sorted(by.items())))


CHECKS = [("mixed traffic with bad input and dropped connections: complete answers or short "
           "errors, nothing left running", mixed_traffic)]


if __name__ == "__main__":
    import argparse
    import sys
    import tempfile
    ap = argparse.ArgumentParser(description="mixed traffic with bad input and dropped "
                                 "connections against a listening qwen2-vl server or router")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rate", type=float, default=12.0, help="requests per second (Poisson)")
    ap.add_argument("--duration", type=float, default=8.0, help="seconds of arrivals")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    a = ap.parse_args()

    class _Ctx:
        pass
    c = _Ctx()
    c.port, c.work = a.port, a.work or tempfile.mkdtemp(prefix="mmrt-chaos-")
    try:
        print(mixed_traffic(c, a.rate, a.duration, a.seed))
    except AssertionError as e:
        print(f"FAIL: {e}")
        sys.exit(1)
