"""The Realtime WebSocket (GET /v1/realtime) of `mmrt serve` end to end, on a tiny qwen2-audio
server: the official openai client (tests/js/realtime.mjs), streamed == one-shot (the items of
response.done's mmrt.items sent as a chat completion with input_audio WAV parts give the same
greedy text, token for token), server_vad committing by itself, error events with the session
going on, disconnects (no running requests, KV blocks back to the idle value), and sessions of
random client events.
A minimal RFC 6455 client (WsClient) is here for the checks and bench/realtime_ttft.py."""
import base64
import io
import json
import os
import socket
import struct
import subprocess
import time
import wave

import http_util as hu

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
N = 8  # tokens per greedy reply
INSTRUCTIONS = "Answer the question in the audio."


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


class WsClient:
    """A blocking WebSocket client: text frames, masked, no extensions."""

    def __init__(self, port, path="/v1/realtime?model=tiny_audio", headers=None, timeout=60):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           f"Sec-WebSocket-Version: 13\r\n{extra}\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            d = self.sock.recv(4096)
            if not d:
                break
            self.buf += d
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        self.status = int(head.split(b" ")[1]) if head else 0
        self.head = head.decode(errors="replace")

    def send(self, obj):
        data = json.dumps(obj).encode() if not isinstance(obj, (bytes, str)) else (
            obj.encode() if isinstance(obj, str) else obj)
        mask = os.urandom(4)
        n = len(data)
        hdr = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(
            ">H", n) if n < 65536 else bytes([0x80 | 127]) + struct.pack(">Q", n))
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(hdr + mask + masked)

    def _read(self, n):
        while len(self.buf) < n:
            d = self.sock.recv(65536)
            if not d:
                raise ConnectionError("the server closed the connection")
            self.buf += d
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self):
        """The next text message as JSON (answers pings); None on a close frame."""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            op = b0 & 0x0F
            if op == 0x8:
                return None
            if op == 0x9:  # ping: pong
                mask = os.urandom(4)
                self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + mask +
                                  bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
                continue
            if op in (0x1, 0x2):
                return json.loads(payload)

    def until(self, type_, seen=None, timeout=60):
        end = time.time() + timeout
        while True:
            expect(time.time() < end, f"no {type_} within {timeout} s")
            ev = self.recv()
            expect(ev is not None, f"closed while waiting for {type_}")
            if seen is not None:
                seen.append(ev)
            if ev["type"] == type_:
                return ev

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def speech_pcm(work, rate, sentences, pause_s=0.6, lead_s=0.3, tail_s=0.2):
    """espeak-ng sentences (22050 Hz) joined by pauses, resampled with scipy to `rate`: int16
    little-endian bytes."""
    import numpy as np
    from scipy.signal import resample_poly
    parts = [np.zeros(int(lead_s * 22050))]
    for i, s in enumerate(sentences):
        path = os.path.join(work, f"espeak_{abs(hash(s)) % 10**8}.wav")
        if not os.path.exists(path):
            subprocess.run(["espeak-ng", "-w", path, s], check=True)
        with wave.open(path) as w:
            expect(w.getframerate() == 22050, f"espeak-ng rate {w.getframerate()}")
            x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2") / 32768.0
        parts += [x, np.zeros(int((pause_s if i + 1 < len(sentences) else tail_s) * 22050))]
    x = np.concatenate(parts)
    g = np.gcd(rate, 22050)
    y = resample_poly(x, rate // g, 22050 // g)
    return np.clip(np.round(y * 32767), -32768, 32767).astype("<i2").tobytes()


def wav_of(pcm, rate):
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    return buf.getvalue()


def append_all(ws, pcm, rate, chunk_ms=100):
    step = rate * chunk_ms // 1000 * 2
    for at in range(0, len(pcm), step):
        ws.send({"type": "input_audio_buffer.append",
                 "audio": base64.b64encode(pcm[at:at + step]).decode()})


class _S:
    pass


def setup(ctx, Server):
    if getattr(_S, "srv", None):
        return _S
    _S.model = os.path.join(ctx.work, "tiny_audio")
    if not os.path.exists(os.path.join(_S.model, "config.json")):
        subprocess.run([ctx.mmrt, "make-tiny-model", "--arch", "qwen2-audio", "--out", _S.model],
                       check=True, stdout=subprocess.DEVNULL)
    _S.srv = Server(ctx.mmrt, _S.model, ctx.work)
    _S.port = _S.srv.port
    _S.pcm24 = speech_pcm(ctx.work, 24000, ["The quick brown fox jumps over the lazy dog.",
                                            "Then it runs far away into the forest."])
    _S.idle_kv = hu.metric(_S.port, "mmrt_kv_cache_blocks_used")
    return _S


def one_shot(port, pcm, rate, spans):
    """The same items as a chat completion with input_audio WAV parts."""
    parts = [{"type": "input_audio",
              "input_audio": {"data": base64.b64encode(wav_of(pcm[2 * b:2 * e], rate)).decode(),
                              "format": "wav"}} for b, e in spans]
    body = {"model": "tiny_audio", "messages": [{"role": "system", "content": INSTRUCTIONS},
                                                {"role": "user", "content": parts}],
            "max_tokens": N, "temperature": 0}
    st, _, b = hu.post(port, "/v1/chat/completions", body)
    expect(st == 200, f"chat completion: {st} {b}")
    return b


def openai_client_streamed_equals_one_shot(ctx, Server):
    s = setup(ctx, Server)
    js = os.path.join(ROOT, "tests", "js")
    pcm_path = os.path.join(ctx.work, "speech24.pcm")
    open(pcm_path, "wb").write(s.pcm24)
    p = subprocess.run(["node", os.path.join(js, "realtime.mjs"), f"http://127.0.0.1:{s.port}/v1",
                        pcm_path, "24000", str(N), INSTRUCTIONS],
                       cwd=js, capture_output=True, text=True, timeout=180)
    expect(p.returncode == 0, "realtime.mjs failed:\n" + p.stdout[-2000:] + p.stderr[-2000:])
    out = json.loads(p.stdout.strip().split("\n")[-1])
    resp = out["done"]["response"]
    spans = resp["mmrt"]["items"]
    expect(resp["mmrt"]["sample_rate"] == 24000, resp["mmrt"])
    # Contiguous items covering the whole stream, cut on 40 ms, none over 30 s.
    expect(spans[0][0] == 0 and spans[-1][1] == len(s.pcm24) // 2, f"items {spans}")
    for (b0, e0), (b1, _) in zip(spans, spans[1:]):
        expect(e0 == b1 and e0 % 960 == 0, f"items {spans}")
    expect(all(e - b <= 30 * 24000 for b, e in spans), f"items {spans}")
    expect(len(spans) >= 2, f"the pause between the sentences cuts an item: {spans}")
    ref = one_shot(s.port, s.pcm24, 24000, spans)
    want = ref["choices"][0]["message"]["content"]
    expect(out["text"] == want, f"streamed {out['text']!r} vs one-shot {want!r}")
    expect(resp["usage"]["output_tokens"] == ref["usage"]["completion_tokens"], "token counts")
    expect(resp["usage"]["input_tokens"] == ref["usage"]["prompt_tokens"], "prompt tokens")
    return f"{len(spans)} items, {resp['usage']['output_tokens']} tokens equal"


def server_vad_commits(ctx, Server):
    s = setup(ctx, Server)
    pcm = speech_pcm(ctx.work, 16000, ["Hello there, how are you today?", "I am fine."],
                     tail_s=1.0)
    ws = WsClient(s.port, headers={"Authorization": "Bearer x"})
    expect(ws.status == 101, ws.head)
    ws.until("session.created")
    ws.send({"type": "session.update", "session": {
        "instructions": INSTRUCTIONS, "temperature": 0, "max_response_output_tokens": N,
        "turn_detection": {"type": "server_vad", "silence_duration_ms": 500,
                           "prefix_padding_ms": 300},
        "mmrt": {"input_sample_rate": 16000}}})
    ws.until("session.updated")
    append_all(ws, pcm, 16000)
    seen = []
    done = ws.until("response.done", seen)
    types = [e["type"] for e in seen]
    # The response's timeline is kept like an HTTP request's, its prompt mostly prefilled
    # before the commit, and its outcome counted in the metrics.
    st, _, tr = hu.request(s.port, "GET", done["response"]["mmrt"]["trace"])
    expect(st == 200, f"trace {done['response']['mmrt']['trace']}: {st} {tr[:200]}")
    req = next(e for e in json.loads(tr)["traceEvents"] if e["name"] == "request")
    expect(req["args"]["cached_prompt_tokens"] > 0, f"nothing prefilled early: {req['args']}")
    expect(hu.metric(s.port, "mmrt_request_outcome_total") >= 1, "the response was not counted")
    for t in ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
              "input_audio_buffer.committed", "response.created", "response.text.done"]:
        expect(t in types, f"{t} missing: {types}")
    expect(types.index("input_audio_buffer.committed") < types.index("response.created"), types)
    st = next(e for e in seen if e["type"] == "input_audio_buffer.speech_stopped")
    expect(st["audio_end_ms"] % 40 == 0 and st["item_id"], st)
    ws.close()
    spans = done["response"]["mmrt"]["items"]
    ref = one_shot(s.port, pcm, 16000, spans)
    text = done["response"]["output"][0]["content"][0]["text"]
    expect(text == ref["choices"][0]["message"]["content"], "server_vad streamed == one-shot")
    return f"committed by itself after {spans[-1][1] / 16000:.2f} s, {len(spans)} items"


def errors_and_bounds(ctx, Server):
    s = setup(ctx, Server)
    ws = WsClient(s.port)
    ws.until("session.created")
    cases = [("{not json", "invalid_json"),
             ({"type": "conversation.item.create"}, "unsupported_event"),
             ({"no": "type"}, "missing_type"),
             ({"type": "input_audio_buffer.commit"}, "input_audio_buffer_commit_empty"),
             ({"type": "response.create"}, "input_audio_buffer_not_committed"),
             ({"type": "response.cancel"}, "response_cancel_not_active"),
             ({"type": "session.update", "session": {"mmrt": {"input_sample_rate": 44100}}},
              "invalid_value"),
             ({"type": "session.update", "session": {"turn_detection": {"type": "semantic_vad"}}},
              "invalid_value"),
             ({"type": "input_audio_buffer.append", "audio": "AQID", "event_id": "e1"},
              "invalid_audio")]
    for ev, code in cases:
        ws.send(ev)
        e = ws.until("error")
        expect(e["error"]["code"] == code, f"{ev}: {e}")
        expect(e["error"]["message"], e)
    expect(e["error"]["event_id"] == "e1", e)
    # An unknown type of 100 KB is named in a short excerpt, not echoed; tools are refused.
    ws.send({"type": "x" * 100000})
    e = ws.until("error")
    expect(e["error"]["code"] == "unsupported_event" and len(e["error"]["message"]) < 400,
           f"{len(e['error']['message'])} characters")
    ws.send({"type": "session.update", "session": {"tools": [{"type": "function", "name": "f"}]}})
    e = ws.until("error")
    expect(e["error"]["code"] == "invalid_value" and "tools is not supported" in
           e["error"]["message"], e)
    ws.send({"type": "session.update", "session": {"temperature": 0}})
    u = ws.until("session.updated")
    expect(u["session"]["temperature"] == 0, "the session goes on after the errors")
    ws.close()
    # No upgrade: 426; another model: 404; on a model without audio: 400.
    st, _, _ = hu.request(s.port, "GET", "/v1/realtime")
    expect(st == 426, st)
    w2 = WsClient(s.port, path="/v1/realtime?model=other")
    expect(w2.status == 404, w2.head)
    w2.close()
    w3 = WsClient(ctx.port, path="/v1/realtime")
    expect(w3.status == 400 and "takes no audio" in w3.head + w3.buf.decode(errors="replace"),
           w3.head)
    w3.close()
    return f"{len(cases)} error events"


def wait_idle(port, idle_kv, what):
    end = time.time() + 20
    while time.time() < end:
        run = hu.metric(port, "mmrt_num_requests_running")
        kv = hu.metric(port, "mmrt_kv_cache_blocks_used")
        sess = hu.metric(port, "mmrt_realtime_sessions")
        if run == 0 and kv == idle_kv and sess == 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"{what}: running {run}, kv blocks {kv} (idle {idle_kv}), "
                         f"sessions {sess}")


def disconnects(ctx, Server):
    s = setup(ctx, Server)
    before = hu.metric(s.port, "mmrt_realtime_prefills_total")
    # A stream that never commits, then a disconnect.
    ws = WsClient(s.port)
    ws.until("session.created")
    ws.send({"type": "session.update", "session": {"turn_detection": None}})
    ws.until("session.updated")
    append_all(ws, s.pcm24 * 3, 24000)
    time.sleep(0.3)
    ws.close()
    wait_idle(s.port, s.idle_kv, "never committed")
    expect(hu.metric(s.port, "mmrt_realtime_prefills_total") > before, "prefills ran")
    # Disconnects mid-utterance, at once after a cut (its prefill in flight).
    for k in range(3):
        ws = WsClient(s.port)
        ws.until("session.created")
        ws.send({"type": "session.update", "session": {"turn_detection": None}})
        ws.until("session.updated")
        append_all(ws, s.pcm24[:len(s.pcm24) * (k + 2) // 5], 24000)
        ws.close()
    wait_idle(s.port, s.idle_kv, "mid-utterance disconnects")
    # A response cut off by its connection is counted, once (it went uncounted: its end was no
    # longer awaited); as cancelled where the close came first, as ended where it did not.
    def outcomes(**labels):
        return hu.metric(s.port, "mmrt_request_outcome_total", default=0.0, **labels)
    total, cancelled = outcomes(), outcomes(outcome="cancelled")
    ws = WsClient(s.port)
    ws.until("session.created")
    ws.send({"type": "session.update", "session": {"turn_detection": None,
                                                   "max_response_output_tokens": 4096}})
    ws.until("session.updated")
    append_all(ws, s.pcm24, 24000)
    ws.send({"type": "input_audio_buffer.commit"})
    ws.send({"type": "response.create"})
    ws.until("response.created")
    ws.close()
    wait_idle(s.port, s.idle_kv, "a response cut off")
    expect(outcomes() == total + 1, f"outcomes {total} -> {outcomes()}: the response counted once")
    st, _, _ = hu.request(s.port, "GET", "/health")
    expect(st == 200, "still serving")
    return (f"no requests left, KV blocks back to idle; a response cut off counted "
            f"({'cancelled' if outcomes(outcome='cancelled') > cancelled else 'ended first'})")


def server_audio_budget(ctx, Server):
    """--realtime-max-total-audio bounds the audio of all sessions together: a second session's
    append over it gets an error event and is dropped; once the first clears, it fits."""
    s = setup(ctx, Server)
    srv = Server(ctx.mmrt, s.model, ctx.work, "--realtime-max-total-audio", "5")
    try:
        second_of_pcm = s.pcm24[:24000 * 2]  # 1 s at 24 kHz, pcm16

        def session():
            ws = WsClient(srv.port)
            ws.until("session.created")
            ws.send({"type": "session.update", "session": {"turn_detection": None}})
            ws.until("session.updated")
            return ws

        def append(ws, seconds):
            for _ in range(seconds):
                ws.send({"type": "input_audio_buffer.append",
                         "audio": base64.b64encode(second_of_pcm).decode()})

        a, b = session(), session()
        append(a, 4)
        append(b, 1)
        b.send({"type": "input_audio_buffer.append",
                "audio": base64.b64encode(second_of_pcm).decode(), "event_id": "over"})
        e = b.until("error")
        expect(e["error"]["code"] == "server_audio_budget_exceeded" and
               e["error"]["event_id"] == "over", e)
        a.send({"type": "input_audio_buffer.clear"})
        a.until("input_audio_buffer.cleared")
        b.send({"type": "input_audio_buffer.append",
                "audio": base64.b64encode(second_of_pcm).decode(), "event_id": "fits"})
        b.send({"type": "input_audio_buffer.commit"})
        c = b.until("input_audio_buffer.committed")
        expect(c, "the append after the clear was taken")
        a.close()
        b.close()
        return "the second session's append refused at 5 s across sessions, taken after a clear"
    finally:
        srv.stop()


def _random_session(port, pcm, seed, out):
    """One session of random client events (seeded); appends what went wrong to `out`."""
    import random
    import threading
    rng = random.Random(seed)
    ws = WsClient(port)
    expect(ws.status == 101, ws.head)
    events, ended = [], []

    def reader():
        try:
            while (ev := ws.recv()) is not None:
                events.append(ev)
        except (OSError, ConnectionError, ValueError) as e:
            ended.append(repr(e))
        ended.append("closed")
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    kinds = ["append", "commit", "clear", "create", "cancel", "update", "garbage", "odd"]
    for _ in range(rng.randrange(10, 50)):
        k = rng.choices(kinds, [40, 12, 5, 12, 8, 10, 5, 5])[0]
        if k == "append":  # real speech, half the time under 20 ms, else up to 2 s
            at = rng.randrange(0, len(pcm) // 2) * 2
            n = rng.randrange(1, 480) if rng.random() < 0.5 else rng.randrange(480, 48000)
            ev = {"type": "input_audio_buffer.append",
                  "audio": base64.b64encode(pcm[at:at + 2 * n]).decode()}
        elif k == "odd":
            ev = {"type": "input_audio_buffer.append",
                  "audio": base64.b64encode(os.urandom(2 * rng.randrange(0, 500) + 1)).decode()}
        elif k == "commit":
            ev = {"type": "input_audio_buffer.commit"}
        elif k == "clear":
            ev = {"type": "input_audio_buffer.clear"}
        elif k == "create":
            ev = {"type": "response.create",
                  "response": rng.choice([{}, {"max_output_tokens": rng.choice([1, 4, "inf"])}])}
        elif k == "cancel":
            ev = {"type": "response.cancel"}
        elif k == "update":
            ev = {"type": "session.update", "session": rng.choice([
                {"turn_detection": None},
                {"turn_detection": {"type": "server_vad", "silence_duration_ms": 300}},
                {"mmrt": {"input_sample_rate": rng.choice([16000, 24000])}},
                {"temperature": rng.choice([0, 0.8, 7])}, {"max_response_output_tokens": 3}])}
        else:
            ev = rng.choice(["{", "[]", '{"type": 5}', '{"type": "input_audio_buffer.append"}'])
        ws.send(ev)
        time.sleep(rng.random() * 0.05)
    time.sleep(rng.random() * 1.5)
    if ended:
        out.append(f"session {seed}: the server ended it: {ended}")
    ws.close()
    t.join(5)
    for ev in events:
        if ev["type"] == "response.done" and ev["response"]["status"] == "failed":
            out.append(f"session {seed}: a failed response: {ev['response']['status_details']}")
        if ev["type"] == "error" and ev["error"]["type"] == "server_error":
            out.append(f"session {seed}: {ev['error']}")


def random_events(ctx, Server):
    """Eight sessions at once, each a seeded random sequence of client events (appends of any
    length, odd byte counts, commits, clears, responses created and cancelled, updates that change
    the rate or turn detection mid-stream, garbage): no response fails, no server error, no
    session is ended by the server, and afterwards nothing runs. (It found commits that cut items
    of a few samples, which failed their whole response.)"""
    import threading
    s = setup(ctx, Server)
    problems = []
    threads = [threading.Thread(target=_random_session, args=(s.port, s.pcm24, seed, problems))
               for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    expect(not problems, "; ".join(problems[:5]))
    wait_idle(s.port, s.idle_kv, "after the random sessions")
    return "8 sessions of random events"


def stop(ctx, Server):
    rc = _S.srv.stop()
    _S.srv = None
    expect(rc == 0, f"exit code {rc}")


CHECKS = [("realtime: openai client, streamed == one-shot", openai_client_streamed_equals_one_shot),
          ("realtime: server_vad commits after the silence", server_vad_commits),
          ("realtime: error events, the session goes on", errors_and_bounds),
          ("realtime: disconnects free everything", disconnects),
          ("realtime: one audio budget across sessions", server_audio_budget),
          ("realtime: random event sequences, eight sessions at once", random_events),
          ("realtime: server exits 0", stop)]
