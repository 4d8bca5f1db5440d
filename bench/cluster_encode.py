#!/usr/bin/env python3
"""Platinum image requests with the encoder remote against colocated (docs/scale-out.md,
docs/benchmarks.md): a real etcd; on the `small` checkpoint an encode worker (`mmrt serve
--role encode`), a worker that uses it (`--remote-encoders auto`) and a plain worker (encoders
colocated), all on loopback and sharing this machine's cores. Requests alternate between the
two workers, one at a time, each with a distinct 448x336 PNG (no cache hit anywhere), a short
question, streamed, class platinum. Reports per mode the client's TTFT (request sent to first
content byte: median, p90), refusals, and for the remote mode the bytes and time per
transferred image (from the workers' /metrics): the encoder output's size, the TCP read, the
whole round trip and the encode worker's own decode + encode. With --background K, K long text
streams run on the measured worker meanwhile (what the encoder competes with), and their mean
gap between events (tokens) is reported too.
Usage: bench/cluster_encode.py --mmrt BIN [--model DIR] [--requests N] [--background K]"""
import argparse
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cluster"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "server"))
import cluster_test as ct  # noqa: E402
import http_util as hu  # noqa: E402
import sse_client  # noqa: E402
from cluster_affinity import png  # noqa: E402
from server_test import Server  # noqa: E402


def stream(port, body):
    """(TTFT ms, arrival times of the stream's events, status). The first event (the role
    chunk) leaves the server with the first token (docs/serving.md): a random checkpoint's
    first tokens may render no text, so its arrival is the first token's."""
    status, times, _ = sse_client.stream(port, body)
    return (times[0] * 1e3 if times else None), times, status


def background(port, stop, gaps):
    """Long text streams until `stop`: their gaps between content chunks (ms)."""
    i = 0
    while not stop.is_set():
        i += 1
        body = {"messages": [{"role": "user", "content": f"Story {i}: tell a long story."}],
                "max_tokens": 200, "ignore_eos": True, "temperature": 0, "stream": True,
                "sla_class": "silver"}
        _, times, _ = stream(port, body)
        gaps.extend((b - a) * 1e3 for a, b in zip(times, times[1:]))


def run(label, ports, n, k, seed0):
    print(f"-- {label}: {n} platinum image requests per mode, {k} background stream(s)",
          flush=True)
    ttft = {m: [] for m in ports}
    refused = {m: 0 for m in ports}
    gaps = {m: [] for m in ports}
    for j, (mode, port) in enumerate(ports.items()):
        stop = threading.Event()
        threads = [threading.Thread(target=background, args=(port, stop, gaps[mode]))
                   for _ in range(k)]
        for t in threads:
            t.start()
        time.sleep(0.5 if k else 0)
        for i in range(n):
            body = {"messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": png(seed0 + 1000 * j + i)}},
                {"type": "text", "text": "What is in this picture?"}]}],
                "max_tokens": 8, "temperature": 0, "stream": True, "sla_class": "platinum"}
            first, _, status = stream(port, body)
            if status == 200 and first is not None:
                ttft[mode].append(first)
            else:
                refused[mode] += 1
        stop.set()
        for t in threads:
            t.join()
    for mode in ports:
        v = sorted(ttft[mode])
        g = gaps[mode]
        line = (f"{mode}: TTFT median {statistics.median(v):.0f} ms, p90 "
                f"{v[int(0.9 * (len(v) - 1))]:.0f} ms over {len(v)}, refused {refused[mode]}"
                if v else f"{mode}: every request refused ({refused[mode]})")
        if g:
            line += f"; background streams' mean gap between tokens {statistics.mean(g):.1f} ms"
        print(line, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mmrt", required=True)
    ap.add_argument("--model", default="build/bench/small")
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--background", type=int, default=2)
    a = ap.parse_args()
    work, name, etcd = ct.bench_setup(a.model, "cluster_encode_")
    procs = []
    try:
        enc = Server(a.mmrt, a.model, work, "--role", "encode", "--cluster-etcd", etcd.url,
                     "--served-model-name", name)
        procs.append(enc)
        remote = Server(a.mmrt, a.model, work, "--cluster-etcd", etcd.url, "--served-model-name",
                        name, "--remote-encoders", "auto")
        procs.append(remote)
        colocated = Server(a.mmrt, a.model, work, "--served-model-name", name)
        procs.append(colocated)
        ct.until("the encode worker in view",
                 lambda: hu.metric(remote.port, "mmrt_remote_encode_workers") == 1, 15)
        print(f"model {name}; an encode worker, a worker using it and a colocated worker on this "
              "machine (they share its cores)", flush=True)
        ports = {"colocated": colocated.port, "remote": remote.port}
        run("idle workers", ports, a.requests, 0, 1)
        if a.background:
            run("with text streams", ports, a.requests, a.background, 50000)
        items = hu.metric(remote.port, "mmrt_media_remote_encoded_total")
        per = lambda name: hu.metric(remote.port, name) / max(1, items)  # noqa: E731
        enc_items = max(1, hu.metric(enc.port, "mmrt_encode_items_total"))
        print(f"remote: {items:.0f} items encoded remotely, "
              f"{hu.metric(remote.port, 'mmrt_media_remote_failed_total'):.0f} failed, "
              f"{hu.metric(remote.port, 'mmrt_media_remote_declined_total'):.0f} declined; per "
              f"image {per('mmrt_remote_encode_transfer_bytes_total') / 1e6:.2f} MB read in "
              f"{per('mmrt_remote_encode_transfer_seconds_total') * 1e3:.2f} ms, round trip "
              f"{per('mmrt_remote_encode_round_trip_seconds_total') * 1e3:.0f} ms, of which "
              "the encode worker decoded for "
              f"{hu.metric(enc.port, 'mmrt_encode_preprocess_seconds_total') / enc_items * 1e3:.0f}"
              " ms and encoded for "
              f"{hu.metric(enc.port, 'mmrt_encode_encoder_seconds_total') / enc_items * 1e3:.0f}"
              " ms", flush=True)
    finally:
        ct.stop_cluster(None, procs, etcd)


if __name__ == "__main__":
    main()
