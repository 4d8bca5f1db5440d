#!/usr/bin/env python3
"""Cache-aware routing against round-robin on multi-turn image conversations (docs/scale-out.md,
docs/benchmarks.md): a real etcd, two `mmrt serve --cluster-etcd` workers on the `small`
checkpoint and `mmrt router`, all on loopback (they share this machine's cores). N
conversations, each one image (a distinct 448x336 PNG) and a question, then T-1 follow-up turns
that repeat the history; one request at a time. Once through the router, once sent
round-robin (turn t of conversation c to worker (c + t) % 2) with other images of the same
size. Reports per mode: the encoder-cache and prefix-cache hit rates summed over the workers,
the client's TTFT of follow-up turns (median, p90), and the encoder time the workers spent.
Usage: bench/cluster_affinity.py --mmrt BIN [--model DIR] [--conversations N] [--turns T]"""
import argparse
import base64
import io
import json
import os
import random
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cluster"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "server"))
import cluster_test as ct  # noqa: E402
import sse_client  # noqa: E402
import http_util as hu  # noqa: E402
from server_test import Server  # noqa: E402


def png(seed):
    from PIL import Image
    rng = random.Random(seed)
    img = Image.new("RGB", (448, 336))
    img.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256))
                 for _ in range(448 * 336)])
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def turn(port, messages, answer_tokens=8):
    body = {"messages": messages, "max_tokens": answer_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    _, times, buf = sse_client.stream(port, body, timeout=120)
    ttft = times[0] * 1e3 if times else None
    text, encoder_ms = "", 0.0
    for line in buf.split(b"\n"):
        if line.startswith(b"data: {"):
            j = json.loads(line[6:])
            if j.get("choices"):
                text += j["choices"][0].get("delta", {}).get("content") or ""
            if "mmrt" in j:
                encoder_ms = j["mmrt"].get("stages_ms", {}).get("encoder", 0.0)
    return ttft, text, encoder_ms


def counters(ports):
    names = ("mmrt_mm_cache_queries_total", "mmrt_mm_cache_hits_total",
             "mmrt_prefix_cache_queries_total", "mmrt_prefix_cache_hits_total")
    return [sum(hu.metric(p, n) for p in ports) for n in names]


def run(mode, send, ports, n, turns, seed0):
    before = counters(ports)
    follow, enc = [], 0.0
    for c in range(n):
        msgs = [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": png(seed0 + c)}},
            {"type": "text", "text": f"Conversation {c}: what is in this picture?"}]}]
        for t in range(turns):
            ttft, text, e = send(c, t, msgs)
            enc += e
            if t > 0:
                follow.append(ttft)
            msgs = msgs + [{"role": "assistant", "content": text},
                           {"role": "user", "content": f"Tell me more, part {t + 1}."}]
    after = counters(ports)
    d = [a - b for a, b in zip(after, before)]
    follow.sort()
    print(f"{mode}: encoder cache {d[1]:.0f}/{d[0]:.0f} hits ({d[1] / max(1, d[0]):.0%}), "
          f"prefix cache {d[3] / max(1, d[2]):.0%} of prompt tokens, follow-up TTFT median "
          f"{statistics.median(follow):.1f} ms p90 {follow[int(0.9 * len(follow))]:.1f} ms, "
          f"encoder time {enc:.0f} ms in all", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mmrt", required=True)
    ap.add_argument("--model", default="build/bench/small")
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--answer-tokens", type=int, default=8, help="tokens per answer")
    a = ap.parse_args()
    work, name, etcd = ct.bench_setup(a.model, "cluster_affinity_")
    workers, router = [], None
    try:
        for _ in range(2):
            workers.append(Server(a.mmrt, a.model, work, "--cluster-etcd", etcd.url,
                                  "--served-model-name", name))
        router = ct.Router(a.mmrt, work, etcd.url)
        ct.until("both workers at the router", lambda: len(router.workers()) == 2, 15)
        ports = [w.port for w in workers]
        print(f"model {name}, {a.conversations} conversations x {a.turns} turns of "
              f"{a.answer_tokens}-token answers, one 448x336 image each, two workers on this "
              "machine", flush=True)
        n = a.answer_tokens
        run("through the router", lambda c, t, m: turn(router.port, m, n), ports,
            a.conversations, a.turns, 1000)
        run("round-robin", lambda c, t, m: turn(ports[(c + t) % 2], m, n), ports,
            a.conversations, a.turns, 2000)
    finally:
        ct.stop_cluster(router, workers, etcd)


if __name__ == "__main__":
    main()
