#!/usr/bin/env python3
"""HTTP's share of time to first token and of the per-token gap, measured in one run against a
running `mmrt serve`: for each streamed request (sequential, one keep-alive connection) the
client's TTFT (send -> first content byte) against the server's own (engine timeline, from
submission), and the client's mean gap between content chunks against the server's decode time
per token. Usage: http_ttft.py PORT [N]"""
import json
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "server"))
import http_util as hu  # noqa: E402


def main():
    port = int(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rows = []
    for i in range(n + 10):
        body = {"messages": [{"role": "user", "content": f"Tell me a story, number {i % 7}."}],
                "max_tokens": 32, "ignore_eos": True, "stream": True, "sla_class": "silver"}
        t0 = time.perf_counter()
        s.sendall(hu.raw(port, "POST", "/v1/chat/completions", body))
        buf, tf, chunks = b"", None, []
        while b"0\r\n\r\n" not in buf:
            c = s.recv(65536)
            if not c:
                raise SystemExit("the server closed the connection")
            now = time.perf_counter()
            buf += c
            k = buf.count(b'"content":"') - 1  # the first delta carries the role and ""
            while len(chunks) < k:
                chunks.append(now)
            if tf is None and k >= 1:
                tf = now
        ev = [json.loads(x[6:]) for x in buf.decode().split("\n") if x.startswith("data: {")]
        m = next(e for e in ev if e.get("mmrt"))["mmrt"]
        if i < 10:
            continue  # warm-up
        gap = (chunks[-1] - chunks[0]) / (len(chunks) - 1) * 1e3 if len(chunks) > 1 else 0
        rows.append(((tf - t0) * 1e3, m["ttft_ms"], gap, m["stages_ms"]["decode"] / 31, len(chunks)))
    s.close()

    def med(k):
        return statistics.median(r[k] for r in rows)

    added = sorted(r[0] - r[1] for r in rows)
    print(f"{n} streamed requests, 32 tokens each, one keep-alive connection")
    print(f"  TTFT: client median {med(0):.3f} ms, server {med(1):.3f} ms; HTTP adds median "
          f"{statistics.median(added):.3f} ms, p90 {added[int(len(added) * 0.9)]:.3f} ms")
    print(f"  per token: client gap between chunks median {med(2):.3f} ms, server decode "
          f"{med(3):.3f} ms/token; chunks per reply median {med(4):.0f} (text held back for "
          f"whole UTF-8 characters or merged between drains makes fewer chunks than tokens)")


if __name__ == "__main__":
    main()
