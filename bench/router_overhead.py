#!/usr/bin/env python3
"""The router's cost on time to first token (docs/scale-out.md): a real etcd, one `mmrt serve
--cluster-etcd` worker and `mmrt router`, all on loopback; N streamed chat requests sent one at a
time, alternately straight to the worker and through the router, each timed by this client from
its first byte sent to the first content chunk received. Prints both medians and their
difference (same run, same worker, same prompts).
With --kv the router routes KV-aware (`mmrt router --model`, NATS started here): each routed
request's prompt is laid out and its block keys computed. With --image each request carries a
448x336 PNG (the router decodes its base64, reads its header and hashes it).
Usage: bench/router_overhead.py --mmrt BIN [--model DIR] [--requests N] [--kv] [--image]"""
import argparse
import json
import os
import re
import socket
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cluster"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "server"))
import cluster_test as ct  # noqa: E402
import http_util as hu  # noqa: E402
from server_test import Server  # noqa: E402


# The first event of the answer: mmrt writes it (the role delta) with the first token, as the
# promise sweep's client counts it.
FIRST_CONTENT = re.compile(rb"data: ")


def ttft_ms(port, body):
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(hu.raw(port, "POST", "/v1/chat/completions", body))
        buf = b""
        first = None
        while True:
            c = s.recv(65536)
            if not c:
                break
            buf += c
            if first is None and FIRST_CONTENT.search(buf):
                first = (time.perf_counter() - t0) * 1e3
            if b"data: [DONE]" in buf:
                break
    return first


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mmrt", required=True)
    ap.add_argument("--model", default=None, help="default: a tiny qwen2-vl written here")
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--kv", action="store_true", help="KV-aware routing (router --model)")
    ap.add_argument("--image", action="store_true", help="a 448x336 PNG in every request")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="router_overhead_")
    model = a.model
    if model is None:
        model = os.path.join(work, ct.MODEL)
        os.system(f"{a.mmrt} make-tiny-model --arch qwen2-vl --out {model} >/dev/null")
    name = os.path.basename(os.path.normpath(model))
    ct.MODEL = name
    etcd = ct.Etcd(work)
    nats = ct.Nats(work) if a.kv else None
    worker = router = None
    image = None
    if a.image:
        sys.path.insert(0, HERE)
        from cluster_affinity import png
        image = png(7)
    try:
        worker = Server(a.mmrt, model, work, "--cluster-etcd", etcd.url, "--served-model-name", name,
                        *(["--cluster-nats", nats.url] if nats else []))
        router = ct.Router(a.mmrt, work, etcd.url, nats.url if nats else None,
                           ["--model", model] if a.kv else [])
        ct.until("the worker at the router", lambda: len(router.workers()) == 1, 15)
        direct, routed = [], []
        for i in range(a.requests):
            text = f"Request {i}: say something short."
            content = text if image is None else [
                {"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": text}]
            body = json.dumps({"model": name, "stream": True, "max_tokens": 2, "messages": [
                {"role": "user", "content": content}]}).encode()
            # Alternate which goes first so neither always meets a warmer cache.
            for port, out in ((worker.port, direct), (router.port, routed))[:: 1 if i % 2 else -1]:
                out.append(ttft_ms(port, body))
        d, r = statistics.median(direct), statistics.median(routed)
        mode = ("KV-aware router" if a.kv else "router") + (", an image each" if image else "")
        if a.kv:
            mode += f" ({ct.hu.metric(router.port, 'mmrt_router_kv_routed_total'):.0f} KV-routed)"
        print(f"model {name}, {mode}, {a.requests} requests each way, client TTFT median: direct "
              f"{d:.2f} ms, through the router {r:.2f} ms, difference {r - d:+.2f} ms "
              f"(p90 {sorted(direct)[int(0.9 * len(direct))]:.2f} / "
              f"{sorted(routed)[int(0.9 * len(routed))]:.2f} ms)")
    finally:
        ct.stop_cluster(router, [worker] if worker else [], etcd, *([nats] if nats else []))


if __name__ == "__main__":
    main()
