"""A minimal HTTP/1.1 client over raw sockets (so the tests see exactly what the server sends),
the Prometheus text parser the metrics check uses, and shared fixtures."""
import json
import re
import socket


class Context:
    def __init__(self, mmrt, model, image, work, traces, media_dir, streams):
        self.mmrt, self.model, self.image, self.work = mmrt, model, image, work
        self.traces, self.media_dir, self.streams = traces, media_dir, streams
        self.port = None
        self.pid = None


def write_test_image(path, size=(96, 72)):
    from PIL import Image
    img = Image.new("RGB", size)
    img.putdata([((x * 7) % 256, (y * 5) % 256, (x * y) % 256)
                 for y in range(size[1]) for x in range(size[0])])
    img.save(path)


def read_response(sock, buf=b""):
    """Reads one response; returns (status, headers, body, leftover bytes)."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed before the response headers")
        buf += chunk
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, v = line.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            while b"\r\n" not in buf:
                buf += _recv(sock)
            size_line, buf = buf.split(b"\r\n", 1)
            size = int(size_line, 16)
            while len(buf) < size + 2:
                buf += _recv(sock)
            body += buf[:size]
            buf = buf[size + 2:]
            if size == 0:
                break
    elif "content-length" in headers:
        n = int(headers["content-length"])
        while len(buf) < n:
            buf += _recv(sock)
        body, buf = buf[:n], buf[n:]
    else:  # until close
        body = buf
        while True:
            c = sock.recv(65536)
            if not c:
                break
            body += c
        buf = b""
    return status, headers, body, buf


def _recv(sock):
    c = sock.recv(65536)
    if not c:
        raise ConnectionError("connection closed mid-response")
    return c


def raw(port, method, path, body=None, headers=None):
    h = {"Host": "127.0.0.1", "Content-Type": "application/json"}
    h.update(headers or {})
    data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else b"")
    if body is not None or method == "POST":
        h["Content-Length"] = str(len(data))
    req = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return req.encode() + data


async def sse_payloads(reader):
    """The `data:` payloads (bytes) of a chunked SSE response body, as they arrive (an asyncio
    StreamReader positioned after the headers); ends at [DONE] or at the last chunk."""
    buf = b""
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        data = await reader.readexactly(size + 2)
        if size == 0:
            return
        buf += data[:-2]
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            for line in ev.split(b"\n"):
                if not line.startswith(b"data: "):
                    continue
                if line[6:] == b"[DONE]":
                    return
                yield line[6:]


def request(port, method, path, body=None, headers=None, timeout=60):
    """One request on a fresh connection; returns (status, headers, body bytes)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(raw(port, method, path, body, headers))
            st, hd, b, _ = read_response(s)
            return st, hd, b
    except (ConnectionError, OSError):
        return 0, {}, b""


def post(port, path, body, **kw):
    st, hd, b = request(port, "POST", path, body, **kw)
    return st, hd, (json.loads(b) if b else None)


def sse_events(body):
    """The data payloads of an SSE body (comments skipped); [DONE] as the string."""
    out = []
    for block in body.decode().split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                p = line[6:]
                out.append(p if p == "[DONE]" else json.loads(p))
    return out


# ---- Prometheus text exposition format (0.0.4), strictly ----
_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\\\|\\"|\\n)*)"')


def parse_prometheus(text):
    """Returns {family: {"type", "help", "samples": [(name, labels dict, value)]}}; raises
    ValueError naming the line for anything malformed: a sample before its TYPE, a name that is
    not a metric name, bad labels or values, histogram buckets that are not cumulative or do not
    end at +Inf == _count."""
    fams, cur = {}, None
    if not text.endswith("\n"):
        raise ValueError("the exposition must end with a newline")
    for n, line in enumerate(text.split("\n")[:-1], 1):
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            parts = line.split(" ", 3)
            if len(parts) < 4 or not _NAME.match(parts[2]):
                raise ValueError(f"line {n}: malformed {parts[1]}: {line!r}")
            f = fams.setdefault(parts[2], {"type": "untyped", "help": "", "samples": []})
            if parts[1] == "TYPE":
                if parts[3] not in ("counter", "gauge", "histogram", "summary", "untyped"):
                    raise ValueError(f"line {n}: unknown type {parts[3]!r}")
                if f["samples"]:
                    raise ValueError(f"line {n}: TYPE after samples of {parts[2]}")
                f["type"] = parts[3]
            else:
                f["help"] = parts[3]
            cur = parts[2]
            continue
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", line)
        if not m:
            raise ValueError(f"line {n}: malformed sample {line!r}")
        name, lab, val = m.groups()
        labels = {}
        if lab:
            inner = lab[1:-1]
            pos = 0
            while pos < len(inner):
                lm = _LABEL.match(inner, pos)
                if not lm:
                    raise ValueError(f"line {n}: malformed labels {lab!r}")
                labels[lm.group(1)] = lm.group(2)
                pos = lm.end()
                if pos < len(inner):
                    if inner[pos] != ",":
                        raise ValueError(f"line {n}: malformed labels {lab!r}")
                    pos += 1
        v = float(val)  # raises on garbage; +Inf / NaN are valid
        fam = cur
        if fam is None or not (name == fam or name.startswith(fam + "_")):
            raise ValueError(f"line {n}: sample {name} outside its family (after {cur})")
        fams[fam]["samples"].append((name, labels, v))
    for fam, f in fams.items():
        if f["type"] != "histogram":
            continue
        series = {}
        for name, labels, v in f["samples"]:
            key = tuple(sorted((k, x) for k, x in labels.items() if k != "le"))
            s = series.setdefault(key, {"buckets": [], "count": None})
            if name == fam + "_bucket":
                s["buckets"].append((float(labels["le"]), v))
            elif name == fam + "_count":
                s["count"] = v
        for key, s in series.items():
            b = s["buckets"]
            if not b or b[-1][0] != float("inf"):
                raise ValueError(f"{fam}{key}: buckets do not end at +Inf")
            if any(b[i][0] >= b[i + 1][0] or b[i][1] > b[i + 1][1] for i in range(len(b) - 1)):
                raise ValueError(f"{fam}{key}: buckets are not increasing and cumulative")
            if s["count"] != b[-1][1]:
                raise ValueError(f"{fam}{key}: _count {s['count']} != +Inf bucket {b[-1][1]}")
    return fams


def metric(port, name, default=None, **labels):
    """The sum of `name`'s samples with those labels; `default` where there is none (a counter
    before its first event), else an error."""
    st, _, body = request(port, "GET", "/metrics")
    if st != 200:
        raise RuntimeError(f"/metrics answered {st}")
    total, seen = 0.0, False
    for fam in parse_prometheus(body.decode()).values():
        for n, lab, v in fam["samples"]:
            if n == name and all(lab.get(k) == str(x) for k, x in labels.items()):
                total += v
                seen = True
    if not seen:
        if default is not None:
            return default
        raise RuntimeError(f"no sample {name} {labels}")
    return total
