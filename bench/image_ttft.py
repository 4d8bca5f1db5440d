#!/usr/bin/env python3
"""Time to the first token of image requests as a client sees it, against a running `mmrt serve`:
N streamed chat requests, one after another, each with a new WxH PNG (random pixels, so neither
the encoder cache nor the prefix cache can serve it) and a short question. For each: the client's
TTFT (request sent -> the first chunk's first byte, which the server writes with the first
token) and the server's stages (stages_ms of the final
chunk's `mmrt` block: encoder, prefill, ...). Prints one line per request and the medians.
Usage: image_ttft.py PORT [N] [--side S] [--prompt TEXT]"""
import argparse
import base64
import io
import json
import os
import socket
import statistics
import sys
import time

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "server"))
import http_util as hu  # noqa: E402


def png(side, seed):
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("port", type=int)
    ap.add_argument("n", type=int, nargs="?", default=5)
    ap.add_argument("--side", type=int, default=448)
    ap.add_argument("--prompt", default="Describe this image in one sentence.")
    ap.add_argument("--max-tokens", type=int, default=4)
    a = ap.parse_args()
    rows = []
    base = time.time_ns() % 1_000_000_000  # new pixels every run: nothing cached from the last
    for i in range(a.n):
        body = {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png(a.side, base + i)}},
            {"type": "text", "text": a.prompt}]}],
            "max_tokens": a.max_tokens, "stream": True, "sla_class": "silver"}
        req = hu.raw(a.port, "POST", "/v1/chat/completions", body)
        s = socket.create_connection(("127.0.0.1", a.port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter()
        s.sendall(req)
        buf, tf = b"", None
        while True:
            c = s.recv(65536)
            if not c:
                break
            buf += c
            if tf is None and b"data: {" in buf:  # the first chunk leaves with the first token
                tf = time.perf_counter()
            if b"data: [DONE]" in buf:
                break
        s.close()
        stages = {}
        for line in buf.split(b"\n"):
            if line.startswith(b"data: {") and b'"mmrt"' in line:
                stages = json.loads(line[6:]).get("mmrt", {}).get("stages_ms", {})
        if tf is None:
            raise SystemExit("no content in the response: " + buf[:3000].decode(errors="replace"))
        ttft = (tf - t0) * 1e3
        rows.append((ttft, stages.get("encoder", 0.0), stages.get("prefill", 0.0)))
        print(f"request {i}: client TTFT {ttft:.1f} ms; server stages " +
              ", ".join(f"{k} {v:.1f}" for k, v in stages.items() if v > 0))
    med = [statistics.median(r[j] for r in rows) for j in range(3)]
    print(f"median of {len(rows)}: client TTFT {med[0]:.1f} ms, encoder {med[1]:.1f} ms, "
          f"prefill {med[2]:.1f} ms")


if __name__ == "__main__":
    main()
