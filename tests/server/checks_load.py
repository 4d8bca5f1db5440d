"""Load checks: many concurrent SSE streams, clients that disconnect mid-stream, /health under
load (measured, reported, not asserted: tests never assert time), RSS in steady state, and the
graceful shutdown."""
import asyncio
import json
import signal
import socket
import statistics
import os
import subprocess
import sys
import time

import http_util as hu


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def one_stream(port, i, max_tokens, drop_after=None):
    """One streamed chat; returns ("ok", n_chunks) / ("dropped", n) / ("error", what)."""
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        body = {"messages": [{"role": "user", "content": f"stream {i % 50}"}],
                "max_tokens": max_tokens if drop_after is None else 4000, "stream": True,
                "ignore_eos": True, "stream_options": {"include_usage": True}}
        w.write(hu.raw(port, "POST", "/v1/chat/completions", body))
        await w.drain()
        head = await r.readuntil(b"\r\n\r\n")
        status = int(head.split()[1])
        if status != 200:
            rest = await r.read(4096)
            w.close()
            return ("error", f"status {status}: {rest[:200]!r}")
        n, finish, tokens = 0, None, 0
        async for p in hu.sse_payloads(r):
            d = json.loads(p)
            if "error" in d:
                w.close()
                return ("error", d["error"]["message"])
            if d["choices"] and d["choices"][0].get("finish_reason"):
                finish = d["choices"][0]["finish_reason"]
            if d.get("usage"):
                tokens = d["usage"]["completion_tokens"]
            n += 1
            if drop_after is not None and n >= drop_after:
                w.transport.abort()
                return ("dropped", n)
        w.close()
        if finish != "length" or tokens != max_tokens:
            return ("error", f"finish {finish}, {tokens} tokens")
        return ("ok", tokens)
    except Exception as e:  # noqa: BLE001
        return ("error", f"{type(e).__name__}: {e}")


PROBE = r"""
import socket, sys, time
port, stop = int(sys.argv[1]), sys.argv[2]
import os
while not os.path.exists(stop):
    t0 = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                c = s.recv(4096)
                if not c:
                    break
                data += c
        ok = data.startswith(b"HTTP/1.1 200")
    except OSError:
        ok = False
    print(f"{(time.perf_counter() - t0) * 1e3:.3f} {int(ok)}", flush=True)
    time.sleep(0.02)
"""


class HealthProbe:
    """Asks /health on a fresh connection every 20 ms from its own process (the load client's
    interpreter lock would otherwise delay it); keeps the latencies."""

    def __init__(self, port, work):
        self.stop_file = os.path.join(work, "probe.stop")
        if os.path.exists(self.stop_file):
            os.remove(self.stop_file)
        self.proc = subprocess.Popen([sys.executable, "-c", PROBE, str(port), self.stop_file],
                                     stdout=subprocess.PIPE, text=True)
        self.lat, self.bad = [], 0

    def finish(self):
        open(self.stop_file, "w").close()
        out, _ = self.proc.communicate(timeout=30)
        rows = [x.split() for x in out.strip().split("\n") if x]
        self.lat = [float(r[0]) for r in rows]
        self.bad = sum(1 for r in rows if r[1] != "1")


def wave(port, n, max_tokens, drop=0):
    async def run():
        tasks = [one_stream(port, i, max_tokens, 2 if i < drop else None) for i in range(n)]
        return await asyncio.gather(*tasks)
    return asyncio.run(run())


def wait_idle(port, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if (hu.metric(port, "mmrt_kv_cache_blocks_used") == 0 and
                hu.metric(port, "mmrt_http_requests_in_flight") == 0):
            return True
        time.sleep(0.05)
    return False


def concurrent_streams(ctx):
    n = ctx.streams
    # Wave 1 warms the server (buffers, KV pages, caches); its RSS afterwards is the baseline.
    r1 = wave(ctx.port, n, 32)
    err1 = [x for x in r1 if x[0] != "ok"]
    expect(not err1, f"wave 1: {len(err1)} errors, e.g. {err1[:3]}")
    expect(wait_idle(ctx.port), "idle after wave 1")
    base = rss_kib(ctx.pid)
    probe = HealthProbe(ctx.port, ctx.work)
    time.sleep(0.1)
    t0 = time.time()
    r2 = wave(ctx.port, n, 32)
    took = time.time() - t0
    probe.finish()
    err2 = [x for x in r2 if x[0] != "ok"]
    expect(not err2, f"wave 2: {len(err2)} errors, e.g. {err2[:3]}")
    expect(probe.bad == 0, f"/health failed {probe.bad} times under load")
    expect(wait_idle(ctx.port), "idle after wave 2")
    after = rss_kib(ctx.pid)
    expect(after <= base * 1.05, f"RSS {after} KiB after vs {base} KiB baseline (> 5 %)")
    lat = sorted(probe.lat)
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return (f"{n} streams in {took:.1f} s, 0 errors; /health during the run: {len(lat)} probes, "
            f"median {statistics.median(lat):.1f} ms, p99 {p99:.1f} ms, max {lat[-1]:.1f} ms; "
            f"RSS {base // 1024} MiB -> {after // 1024} MiB")


def disconnecting_clients(ctx):
    before = hu.metric(ctx.port, "mmrt_request_outcome_total", outcome="cancelled")
    r = wave(ctx.port, 400, 64, drop=200)
    dropped = sum(1 for x in r if x[0] == "dropped")
    ok = sum(1 for x in r if x[0] == "ok")
    expect(dropped == 200 and ok == 200, f"{dropped} dropped, {ok} ok: {[x for x in r if x[0] == 'error'][:3]}")
    expect(wait_idle(ctx.port), "every request ended")
    expect(hu.metric(ctx.port, "mmrt_kv_cache_blocks_used") == 0, "no KV blocks in use")
    cancelled = hu.metric(ctx.port, "mmrt_request_outcome_total", outcome="cancelled") - before
    expect(cancelled == 200, f"{cancelled} cancelled, expected 200")
    return "200 dropped mid-stream, all cancelled, 0 KV blocks in use"


def graceful_shutdown(ctx, srv):
    """SIGTERM with a stream in flight: the stream finishes, new connections are refused, the
    process exits 0."""
    s = socket.create_connection(("127.0.0.1", ctx.port), timeout=60)
    s.sendall(hu.raw(ctx.port, "POST", "/v1/chat/completions",
                     {"messages": [{"role": "user", "content": "long"}], "max_tokens": 300,
                      "ignore_eos": True, "stream": True}))
    first = s.recv(4096)
    expect(first.startswith(b"HTTP/1.1 200"), first[:80])
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    st, _, _ = hu.request(ctx.port, "GET", "/health", timeout=2)
    expect(st in (0, 503), f"health after SIGTERM: {st}")
    st, hd, body, _ = hu.read_response(s, first)
    s.close()
    ev = hu.sse_events(body)
    expect(ev and ev[-1] == "[DONE]", "the stream ended")
    fin = [e for e in ev if e != "[DONE]" and e.get("choices") and e["choices"][0].get("finish_reason")]
    expect(fin and fin[0]["choices"][0]["finish_reason"] == "length", "it finished, not cancelled")
    rc = srv.proc.wait(30)
    expect(rc == 0, f"exit code {rc}")


CHECKS = [
    ("concurrent SSE streams: all complete, /health answers, RSS steady", concurrent_streams),
    ("200 clients disconnecting mid-stream leave no KV blocks in use", disconnecting_clients),
]


def stalled_reader(ctx):
    """A client that stops reading its stream without closing: once 16 MB wait unsent, the server
    drops the connection itself, and the request is cancelled at once, its KV blocks freed (a
    connection the server dropped counts as lost, like one the client closed)."""
    def cancelled_total():
        return hu.metric(ctx.port, "mmrt_request_outcome_total", default=0, outcome="cancelled")

    before = cancelled_total()
    s = socket.create_connection(("127.0.0.1", ctx.port), timeout=120)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    body = {"messages": [{"role": "user", "content": "talk"}], "max_tokens": 30000,
            "ignore_eos": True, "stream": True, "logprobs": True, "top_logprobs": 20}
    t0 = time.time()
    s.sendall(hu.raw(ctx.port, "POST", "/v1/chat/completions", body))
    first = s.recv(4096)
    expect(first.startswith(b"HTTP/1.1 200"), first[:80])
    # Never read again; the server must give up on its own.
    end = time.time() + 90
    while time.time() < end and cancelled_total() == before:
        time.sleep(0.1)
    took = time.time() - t0
    cancelled = cancelled_total() - before
    expect(cancelled == 1, f"the stalled stream was not cancelled within {took:.0f} s")
    expect(wait_idle(ctx.port), "idle after the dropped stream")
    s.close()
    return f"dropped by the server and cancelled {took:.1f} s after the request, KV freed"


CHECKS.append(("a client that stops reading is dropped by the server and its request cancelled",
               stalled_reader))
