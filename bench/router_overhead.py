#!/usr/bin/env python3
"""The router's cost on time to first token (docs/scale-out.md): a real etcd, one `mmrt serve
--cluster-etcd` worker and `mmrt router`, all on loopback; N streamed chat requests sent one at a
time, alternately straight to the worker and through the router, each timed by this client from
its first byte sent to the first content chunk received. Prints both medians and their
difference (same run, same worker, same prompts).
Usage: bench/router_overhead.py --mmrt BIN [--model DIR] [--requests N]"""
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
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="router_overhead_")
    model = a.model
    if model is None:
        model = os.path.join(work, ct.MODEL)
        os.system(f"{a.mmrt} make-tiny-model --arch qwen2-vl --out {model} >/dev/null")
    name = os.path.basename(os.path.normpath(model))
    ct.MODEL = name
    etcd = ct.Etcd(work)
    worker = router = None
    try:
        worker = Server(a.mmrt, model, work, "--cluster-etcd", etcd.url, "--served-model-name", name)
        router = ct.Router(a.mmrt, work, etcd.url)
        ct.until("the worker at the router", lambda: len(router.workers()) == 1, 15)
        direct, routed = [], []
        for i in range(a.requests):
            body = json.dumps({"model": name, "stream": True, "max_tokens": 2, "messages": [
                {"role": "user", "content": f"Request {i}: say something short."}]}).encode()
            # Alternate which goes first so neither always meets a warmer cache.
            for port, out in ((worker.port, direct), (router.port, routed))[:: 1 if i % 2 else -1]:
                out.append(ttft_ms(port, body))
        d, r = statistics.median(direct), statistics.median(routed)
        print(f"model {name}, {a.requests} requests each way, client TTFT median: direct "
              f"{d:.2f} ms, through the router {r:.2f} ms, difference {r - d:+.2f} ms "
              f"(p90 {sorted(direct)[int(0.9 * len(direct))]:.2f} / "
              f"{sorted(routed)[int(0.9 * len(routed))]:.2f} ms)")
    finally:
        ct.stop_cluster(router, [worker] if worker else [], etcd)


if __name__ == "__main__":
    main()
