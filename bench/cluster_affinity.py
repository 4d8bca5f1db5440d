#!/usr/bin/env python3
"""Cache-aware routing against round-robin on multi-turn image conversations (docs/scale-out.md,
docs/benchmarks.md): a real etcd and NATS, two `mmrt serve --cluster-etcd --cluster-nats`
workers on the `small` checkpoint and two routers, all on loopback (they share this machine's
cores). N conversations, each one image (a 448x336 PNG) and a question, then T-1 follow-up
turns that repeat the history; one request at a time. Modes (--modes), each with images of its
own: `kv` through `mmrt router --model` (KV-aware: the prompt's block keys against the keys the
workers publish, Dynamo's cost), `affinity` through `mmrt router` (rendezvous on the
conversation's start, moved by the encoder-cache events and load gauges), `round-robin` (turn t
of conversation c to worker (c + t) % 2). With --shared D the N conversations share D images
(conversation c asks about image c % D, each with its own question): a shared document's
prefix. Reports per mode: the encoder-cache and prefix-cache hit rates summed over the workers,
the client's TTFT of follow-up turns and of first turns (median, p90), and the encoder time.
Usage: bench/cluster_affinity.py --mmrt BIN [--model DIR] [--conversations N] [--turns T]
       [--shared D] [--concurrency C] [--modes kv,affinity,round-robin]
With --concurrency C, C clients run conversations side by side (each its turns in order)."""
import argparse
import base64
import io
import json
import os
import random
import statistics
import sys
import threading

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


def run(mode, send, ports, n, turns, seed0, shared=0, concurrency=1):
    before = counters(ports)
    follow, first, enc = [], [], [0.0]
    images = {}
    for c in range(n):
        k = c % shared if shared else c
        if k not in images:
            images[k] = png(seed0 + k)
    lock = threading.Lock()

    def conversation(c):
        msgs = [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": images[c % shared if shared else c]}},
            {"type": "text", "text": f"Conversation {c}: what is in this picture?"}]}]
        for t in range(turns):
            ttft, text, e = send(c, t, msgs)
            with lock:
                enc[0] += e
                (follow if t > 0 else first).append(ttft)
            msgs = msgs + [{"role": "assistant", "content": text},
                           {"role": "user", "content": f"Tell me more, part {t + 1}."}]

    # `concurrency` clients, each taking the next conversation when its last one is done.
    next_c = iter(range(n))

    def client():
        for c in next_c:
            conversation(c)
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    enc = enc[0]
    after = counters(ports)
    d = [a - b for a, b in zip(after, before)]
    follow.sort()
    first.sort()
    print(f"{mode}: encoder cache {d[1]:.0f}/{d[0]:.0f} hits ({d[1] / max(1, d[0]):.0%}), "
          f"prefix cache {d[3] / max(1, d[2]):.0%} of prompt tokens, follow-up TTFT median "
          f"{statistics.median(follow):.1f} ms p90 {follow[int(0.9 * len(follow))]:.1f} ms, "
          f"first-turn TTFT median {statistics.median(first):.1f} ms p90 "
          f"{first[int(0.9 * len(first))]:.1f} ms, encoder time {enc:.0f} ms in all", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mmrt", required=True)
    ap.add_argument("--model", default="build/bench/small")
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--answer-tokens", type=int, default=8, help="tokens per answer")
    ap.add_argument("--shared", type=int, default=0,
                    help="the conversations share this many images (0: one image each)")
    ap.add_argument("--modes", default="kv,affinity,round-robin")
    ap.add_argument("--kv-weight", type=float, default=1.0,
                    help="the KV router's weight on blocks to prefill (mmrt router --kv-weight)")
    ap.add_argument("--concurrency", type=int, default=1,
                    help="conversations in flight at once (clients in parallel)")
    a = ap.parse_args()
    work, name, etcd = ct.bench_setup(a.model, "cluster_affinity_")
    nats = ct.Nats(work)
    workers, router, kv = [], None, None
    try:
        for _ in range(2):
            workers.append(Server(a.mmrt, a.model, work, "--cluster-etcd", etcd.url,
                                  "--served-model-name", name, "--cluster-nats", nats.url))
        router = ct.Router(a.mmrt, work, etcd.url, nats.url)
        kv = ct.Router(a.mmrt, work, etcd.url, nats.url,
                       ["--model", a.model, "--kv-weight", str(a.kv_weight)], name="kv_router")
        ct.until("both workers at the routers",
                 lambda: len(router.workers()) == 2 and len(kv.workers()) == 2, 15)
        ports = [w.port for w in workers]
        print(f"model {name}, {a.conversations} conversations x {a.turns} turns of "
              f"{a.answer_tokens}-token answers, "
              f"{f'{a.shared} shared 448x336 images' if a.shared else 'one 448x336 image each'}"
              f", {a.concurrency} at a time, two workers on this machine", flush=True)
        n = a.answer_tokens
        sends = {"kv": lambda c, t, m: turn(kv.port, m, n),
                 "affinity": lambda c, t, m: turn(router.port, m, n),
                 "round-robin": lambda c, t, m: turn(ports[(c + t) % 2], m, n)}
        for i, mode in enumerate(a.modes.split(",")):
            run(mode, sends[mode], ports, a.conversations, a.turns, 1000 * (i + 1), a.shared,
                a.concurrency)
        print(f"kv router: {ct.hu.metric(kv.port, 'mmrt_router_kv_routed_total'):.0f} requests "
              f"ordered by KV cost, {ct.hu.metric(kv.port, 'mmrt_router_kv_moves_total'):.0f} "
              f"moved off their affinity worker", flush=True)
    finally:
        if kv:
            kv.stop()
        ct.stop_cluster(router, workers, etcd, nats)


if __name__ == "__main__":
    main()
