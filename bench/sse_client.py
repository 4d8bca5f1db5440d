"""A streamed chat completion as the benchmarks' clients read it: one request on a fresh
connection, the arrival time of each received piece holding an event (the first one leaves the
server with the first token: docs/serving.md), the status and the raw answer."""
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "server"))
import http_util as hu  # noqa: E402


def stream(port, body, timeout=300, on_first=None):
    """(status, arrival times of events in s after sending, raw answer bytes); `body` a dict.
    `on_first`, if given, is called once the first event is in."""
    t0 = time.perf_counter()
    times = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(hu.raw(port, "POST", "/v1/chat/completions", json.dumps(body).encode()))
        buf = b""
        while b"data: [DONE]" not in buf:
            c = s.recv(65536)
            if not c:
                break
            buf += c
            if b"data: {" in c:
                times.append(time.perf_counter() - t0)
                if on_first and len(times) == 1:
                    on_first()
    status = int(buf.split(b" ", 2)[1]) if buf.startswith(b"HTTP/") else 0
    return status, times, buf
