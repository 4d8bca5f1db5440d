#!/usr/bin/env python3
"""Failover of a stream (docs/scale-out.md): a real etcd, two `mmrt serve --cluster-etcd`
workers and `mmrt router` on loopback. A greedy streamed chat request of T tokens goes through
the router; after K events its worker is killed (-9). The client measures the stall (from the
last event before the kill to the first after it: the other worker's prefill of the prompt and
the tokens already sent), the whole answer's time, and compares the text with an undisturbed run of the same
request (tokens lost or repeated: 0 expected); the router's view drops the dead worker within
its lease. Repeated N times, a fresh worker replacing the killed one each time.
The other worker continues from the tokens the client has (cluster/stream_relay.h): the answer
holds T tokens (usage), none lost or repeated, and its text up to the failure is the undisturbed
run's. After it, the text matches only where both workers compute bit-identically: on the bf16
`small` checkpoint the other worker prefills what the first decoded, and greedy tokens may
diverge unless the workers run with --batch-invariant (--serve-arg=--batch-invariant; see
docs/scale-out.md). A fast model may put several tokens in one event: --kill-after counts
events.
Usage: bench/cluster_failover.py --mmrt BIN [--model DIR] [--trials N] [--tokens T] [--kill-after K]
       [--serve-arg ARG ...]"""
import argparse
import http.client
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cluster"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "server"))
import cluster_test as ct  # noqa: E402
from server_test import Server  # noqa: E402

TTL = 2


def stream(port, body, kill=None, after=0):
    """Events' texts and arrival times; `kill(worker id)` runs after `after` events."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    worker = resp.getheader("x-mmrt-worker")
    times, texts, usage = [], [], None
    while True:
        line = resp.readline()
        if not line:
            break
        if not line.startswith(b"data: "):
            continue
        p = line[6:].strip()
        times.append(time.perf_counter() - t0)
        if p == b"[DONE]":
            break
        j = json.loads(p)
        if "error" in j:
            print("stream error:", j["error"].get("message"), file=sys.stderr, flush=True)
            break
        if j.get("usage"):
            usage = j["usage"]["completion_tokens"]
        if j.get("choices"):
            texts.append(j["choices"][0].get("delta", {}).get("content") or "")
        if kill and len(times) == after:
            kill(worker)
            kill = None
    conn.close()
    return texts, times, worker, usage


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mmrt", required=True)
    ap.add_argument("--model", default="build/bench/small")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--kill-after", type=int, default=0,
                    help="events before the kill (default: a quarter of the undisturbed run's)")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="passed to every worker (e.g. --serve-arg=--batch-invariant)")
    a = ap.parse_args()
    work, name, etcd = ct.bench_setup(a.model, "cluster_failover_")
    args = ("--cluster-etcd", etcd.url, "--cluster-ttl", str(TTL), "--served-model-name", name,
            *a.serve_arg)
    workers = [Server(a.mmrt, a.model, work, *args) for _ in range(2)]
    router = ct.Router(a.mmrt, work, etcd.url)
    try:
        ct.until("both workers", lambda: len(router.workers()) == 2, 15)

        def body(trial):  # a prompt of its own per trial: as many chances to diverge
            return json.dumps({"messages": [{"role": "user",
                                             "content": f"Tell me a long story, number {trial}."}],
                               "stream": True, "max_tokens": a.tokens, "ignore_eos": True,
                               "temperature": 0,
                               "stream_options": {"include_usage": True}}).encode()
        ref_ms = []
        stalls, totals, drops, exact, whole, before_ok, counted = [], [], [], 0, 0, 0, 0
        for trial in range(a.trials):
            # The undisturbed run of this trial's request, then the same request with its worker
            # killed mid-stream (the prompt is then in that worker's prefix cache, not the
            # other's: the second computes it cold).
            ref, ref_times, _, _ = stream(router.port, body(trial))
            ref_ms.append(ref_times[-1] * 1e3)
            if trial == 0:
                ref_gap = max(b - a_ for a_, b in zip(ref_times, ref_times[1:]))
                print(f"model {name} {' '.join(a.serve_arg)}, {a.tokens} tokens, undisturbed: "
                      f"{ref_times[-1] * 1e3:.0f} ms, longest gap between events "
                      f"{ref_gap * 1e3:.1f} ms", flush=True)
            killed = {}

            def kill(worker_id):
                w = next(w for w in workers if worker_id.startswith(f"127.0.0.1:{w.port}-"))
                w.proc.kill()
                w.proc.wait()
                killed["w"], killed["t"] = w, time.time()

            after = a.kill_after or max(2, len(ref_times) // 4)
            texts, times, _, usage = stream(router.port, body(trial), kill, after)
            if "w" not in killed or len(times) <= after:
                # A reply of fewer events (a fast model puts several tokens in one): no failover.
                print(f"  trial {trial}: {len(times)} events, the kill came at the end or not at "
                      f"all: not counted", file=sys.stderr, flush=True)
                if "w" in killed:
                    ct.until("the dead worker to leave", lambda: len(router.workers()) == 1,
                             TTL + 5)
                    workers.remove(killed["w"])
                    workers.append(Server(a.mmrt, a.model, work, *args))
                    ct.until("the new worker", lambda: len(router.workers()) == 2, 15)
                continue
            counted += 1
            whole += usage == a.tokens
            sent = "".join(texts[:after - 1])  # the events before the kill (role first)
            before_ok += "".join(ref).startswith(sent)
            # The stall: from the last event before the kill to the first one after it.
            stalls.append((times[after] - times[after - 1]) * 1e3)
            totals.append(times[-1] * 1e3)
            exact += "".join(texts) == "".join(ref)
            if "".join(texts) != "".join(ref):
                got, want = "".join(texts), "".join(ref)
                n = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
                         min(len(got), len(want)))
                print(f"  trial {trial}: {len(times)} events, {len(got)} of {len(want)} characters, "
                      f"first difference at {n}, resumed after character {len(sent)}: "
                      f"{got[max(0, n - 8):n + 8]!r} against {want[max(0, n - 8):n + 8]!r}",
                      file=sys.stderr, flush=True)
            ct.until("the dead worker to leave", lambda: len(router.workers()) == 1, TTL + 5)
            drops.append(time.time() - killed["t"])
            workers.remove(killed["w"])
            workers.append(Server(a.mmrt, a.model, work, *args))
            ct.until("the new worker", lambda: len(router.workers()) == 2, 15)
        print(f"{counted} failovers (kill -9 after {a.kill_after or 'a quarter of the'} events): "
              f"stall median "
              f"{statistics.median(stalls):.0f} ms (max {max(stalls):.0f}), answer "
              f"{statistics.median(totals):.0f} ms against {statistics.median(ref_ms):.0f} undisturbed, "
              f"answers of {a.tokens} tokens {whole}/{counted}, text before the failure equal "
              f"to the undisturbed run's {before_ok}/{counted}, whole text equal "
              f"{exact}/{counted}, dead worker out of the router's view after "
              f"{statistics.median(drops):.1f} s (TTL {TTL} s)", flush=True)
    finally:
        ct.stop_cluster(router, workers, etcd)


if __name__ == "__main__":
    main()
