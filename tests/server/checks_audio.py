"""Audio input over HTTP: one `mmrt serve` of a tiny qwen2-audio model (started on first use,
media sandbox on, --long-audio refuse) serves every check here; the qwen2-vl server of the
caller's context answers the "model takes no audio" checks. groups(ctx, Server) returns the
(name, check) pairs for server_test.py; the last one stops the audio server (SIGTERM, exit 0)."""
import atexit
import base64
import http.server
import io
import json
import math
import os
import subprocess
import threading
import time
import wave

import http_util as hu
from checks_http import expect, expect_error

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROMPT = "What does the audio say?"
N = 10  # tokens per greedy reply


def wav_bytes(seconds, freq, rate=16000, channels=1):
    """16-bit PCM: a tone gliding up from `freq` with a little of its octave."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        frames = bytearray()
        for i in range(int(seconds * rate)):
            t = i / rate
            f = freq * (1 + 0.5 * t / max(seconds, 1e-9))
            v = 0.5 * math.sin(2 * math.pi * f * t) + 0.2 * math.sin(4 * math.pi * f * t)
            s = int(max(-1.0, min(1.0, v)) * 32767).to_bytes(2, "little", signed=True)
            frames += s * channels
        w.writeframes(bytes(frames))
    return buf.getvalue()


class _Files:
    """A local HTTP/1.1 server on 127.0.0.1 serving fixed bytes by path; counts requests."""

    def __init__(self, files):
        outer = self
        self.requests = 0

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                outer.requests += 1
                body = files.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "audio/wav")
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class _State:
    srv = None


def _setup(ctx, Server):
    s = _State
    if s.srv is not None:
        return s
    s.model = os.path.join(ctx.work, "tiny_audio")
    if not os.path.exists(os.path.join(s.model, "config.json")):
        subprocess.run([ctx.mmrt, "make-tiny-model", "--arch", "qwen2-audio", "--out", s.model],
                       check=True, stdout=subprocess.DEVNULL)
    s.wav = os.path.join(ctx.work, "audio.wav")
    with open(s.wav, "wb") as f:
        f.write(wav_bytes(2.0, 440))
    s.b64 = base64.b64encode(open(s.wav, "rb").read()).decode()
    s.srv = Server(ctx.mmrt, s.model, ctx.work, "--long-audio", "refuse", "--max-media-mb", "2",
                   "--media-sandbox", "on", "--fetch-allow", "127.0.0.1")
    s.port = s.srv.port
    atexit.register(lambda: s.srv and s.srv.proc.poll() is None and s.srv.proc.kill())
    return s


def _generate(ctx, model, wav):
    p = subprocess.run([ctx.mmrt, "generate", "--model", model, "--audio", wav, "--prompt", PROMPT,
                        "--max-tokens", str(N), "--quiet", "--ignore-eos"],
                       capture_output=True, timeout=300)
    expect(p.returncode == 0, p.stderr.decode())
    return p.stdout[:-1] if p.stdout.endswith(b"\n") else p.stdout


def _ask(part, n=N):
    return {"messages": [{"role": "user", "content": [part, {"type": "text", "text": PROMPT}]}],
            "max_tokens": n, "temperature": 0, "ignore_eos": True}


def _input_audio(b64, fmt="wav"):
    return {"type": "input_audio", "input_audio": {"data": b64, "format": fmt}}


def _audio_url(url):
    return {"type": "audio_url", "audio_url": {"url": url}}


def openai_client(ctx, Server):
    s = _setup(ctx, Server)
    js = os.path.join(ROOT, "tests", "js")
    p = subprocess.run(["node", os.path.join(js, "server_audio.mjs"),
                        f"http://127.0.0.1:{s.port}/v1", s.wav, PROMPT, str(N)],
                       cwd=js, capture_output=True, text=True, timeout=300)
    print(p.stdout, end="")
    expect(p.returncode == 0, "openai client audio checks failed:\n" + p.stdout + p.stderr)
    got = json.loads(p.stdout.strip().split("\n")[-1])["text"]
    s.want = _generate(ctx, s.model, s.wav)
    expect(got.encode() == s.want, f"HTTP {got!r} vs mmrt generate --audio {s.want!r}")
    return f"greedy reply {got!r}"


def audio_urls(ctx, Server):
    s = _setup(ctx, Server)
    if not hasattr(s, "want"):
        s.want = _generate(ctx, s.model, s.wav)
    files = _Files({"/a.wav": open(s.wav, "rb").read()})
    try:
        for part in [_audio_url("data:audio/wav;base64," + s.b64), _audio_url(files.url("/a.wav"))]:
            st, _, b = hu.post(s.port, "/v1/chat/completions", _ask(part))
            expect(st == 200, f"{part['audio_url']['url'][:40]}: {st} {b}")
            got = b["choices"][0]["message"]["content"].encode()
            expect(got == s.want, f"{part['audio_url']['url'][:40]}: {got!r} vs {s.want!r}")
        expect(files.requests == 1, f"{files.requests} downloads")
        expect(b["mmrt"]["stages_ms"]["media_download"] > 0, "download time reported")
        # The same clip again: served from the caches, not decoded a second time.
        stages = b["mmrt"]["stages_ms"]
        expect(stages["media_decode"] == 0 and stages["preprocessing"] == 0,
               f"a cached clip was decoded again: {stages}")
        skipped = hu.metric(s.port, "mmrt_media_items_skipped_total")
        expect(skipped >= 1, f"mmrt_media_items_skipped_total {skipped}")
        st, _, b = hu.post(s.port, "/v1/chat/completions", _ask(_audio_url(files.url("/no.wav"))))
        expect_error(st, b, 400, param="messages[0].content[0].audio_url", contains="HTTP 404")
        # Refused before the download when the queue alone breaks the promise, as for images.
        before = files.requests
        body = _ask(_audio_url(files.url("/a.wav")))
        body["ttft_deadline_ms"] = 0.001
        st, _, b = hu.post(s.port, "/v1/chat/completions", body)
        expect_error(st, b, 429, contains="before its own prompt and media")
        expect(files.requests == before, "nothing was downloaded for a refused request")
        # Another audio gives another reply (the audio reaches the model).
        other = base64.b64encode(wav_bytes(1.5, 1500)).decode()
        st, _, b = hu.post(s.port, "/v1/chat/completions", _ask(_input_audio(other)))
        expect(st == 200, b)
        expect(b["choices"][0]["message"]["content"].encode() != s.want, "a different audio")
        stages = b["mmrt"]["stages_ms"]
        expect(stages["media_decode"] > 0, f"decode time reported: {stages}")
        expect(stages["preprocessing"] > 0, f"log-mel time reported apart: {stages}")
        # On the qwen2-vl server: 400 naming the part, before any download.
        before = files.requests
        for part in [_input_audio(s.b64), _audio_url(files.url("/a.wav"))]:
            st, _, b = hu.post(ctx.port, "/v1/chat/completions", _ask(part))
            expect_error(st, b, 400, param="messages[0].content[0].type",
                         contains="takes no audio input")
        expect(files.requests == before, "nothing downloaded for a model without audio")
    finally:
        files.close()


def bad_audio(ctx, Server):
    s = _setup(ctx, Server)
    good = open(s.wav, "rb").read()
    cases = [("truncated WAV", good[:len(good) // 3]), ("not audio", b"RIFF" + bytes(range(256)) * 4)]
    for what, data in cases:
        st, _, b = hu.post(s.port, "/v1/chat/completions",
                           _ask(_input_audio(base64.b64encode(data).decode())))
        expect_error(st, b, 422)
        expect(b["error"]["code"] == "unprocessable_media", f"{what}: {b}")
    # Over --max-media-mb (2): 413 naming the field.
    big = base64.b64encode(bytes(3 << 20)).decode()
    st, _, b = hu.post(s.port, "/v1/chat/completions", _ask(_input_audio(big)))
    expect_error(st, b, 413, param="messages[0].content[0].input_audio.data")
    # Over the window with --long-audio refuse: 400 naming both durations.
    long = base64.b64encode(wav_bytes(31.0, 300)).decode()
    st, _, b = hu.post(s.port, "/v1/chat/completions", _ask(_input_audio(long)))
    expect_error(st, b, 400, contains="31")
    refusal = b["error"]["message"]
    expect("30" in refusal, b)
    st, _, _ = hu.request(s.port, "GET", "/health")
    expect(st == 200, "still serving")
    st, _, b = hu.post(s.port, "/v1/chat/completions", _ask(_input_audio(s.b64), 2))
    expect(st == 200, f"a good request after the bad ones: {b}")
    return refusal


def metrics_and_shutdown(ctx, Server):
    s = _setup(ctx, Server)
    port = s.port
    # A request of a new audio (no encoder-cache hit): decoded in the sandbox, encoded.
    before = hu.metric(port, "mmrt_media_sandbox_items_total")
    enc = hu.metric(port, "mmrt_request_stage_seconds_count", stage="encoder")
    st, _, b = hu.post(port, "/v1/chat/completions",
                       _ask(_input_audio(base64.b64encode(wav_bytes(1.0, 700)).decode()), 2))
    expect(st == 200, b)
    # (The books are published just after the response is written: wait for them.)
    end = time.time() + 10
    while time.time() < end and (
            hu.metric(port, "mmrt_media_sandbox_items_total") < before + 1 or
            hu.metric(port, "mmrt_request_stage_seconds_count", stage="encoder") < enc + 1):
        time.sleep(0.02)
    items = hu.metric(port, "mmrt_media_sandbox_items_total")
    expect(items == before + 1, f"audio items decoded in the sandbox: {before} -> {items}")
    expect(hu.metric(port, "mmrt_request_stage_seconds_count", stage="encoder") == enc + 1,
           "the encoder stage observed")
    n = hu.metric(port, "mmrt_request_stage_seconds_count", stage="media_decode")
    expect(n > 0, f"stage media_decode observed for audio requests: {n}")
    n = hu.metric(port, "mmrt_request_stage_seconds_count", stage="preprocessing")
    expect(n > 0, f"stage preprocessing observed for audio requests: {n}")
    lost = hu.metric(port, "mmrt_media_sandbox_workers_lost_total")
    expect(lost == 0, f"{lost} sandbox workers lost")
    rc = s.srv.stop()
    expect(rc == 0, f"audio server exit code {rc}")
    return f"{items:.0f} items in the sandbox, 0 workers lost"


def groups(ctx, Server):
    def bind(f):
        return lambda: f(ctx, Server)
    return [
        ("audio: openai client input_audio, greedy equal to mmrt generate --audio",
         bind(openai_client)),
        ("audio: audio_url data: and http:// equal input_audio; qwen2-vl 400", bind(audio_urls)),
        ("audio: corrupt 422, --long-audio refuse 400, the server goes on", bind(bad_audio)),
        ("audio: stages and sandbox in /metrics, SIGTERM exits 0", bind(metrics_and_shutdown)),
    ]
