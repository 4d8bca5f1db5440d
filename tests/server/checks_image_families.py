"""LLaVA-NeXT, LLaVA-1.5, Fuyu and Qwen2.5-VL over HTTP: one `mmrt serve` per family of tiny
checkpoints (the media sandbox on) answers the official openai client's checks
(tests/js/server_openai.mjs, the same suite the qwen2-vl server passes), a greedy reply with an image equal to `mmrt generate
--image`, another image giving another reply, and 400s for what the model does not take (a
422 for a damaged video where the model takes video).
groups(ctx, Server, sla) returns the (name, check) pairs for server_test.py; the last one stops
the servers (SIGTERM, exit 0)."""
import atexit
import base64
import os
import subprocess

import http_util as hu
from checks_http import expect, expect_error

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROMPT = "What is shown in this image?"
N = 10  # tokens per greedy reply
ARCHS = ("llava-next", "llava", "fuyu", "qwen2.5-vl")
TAKES_VIDEO = ("qwen2.5-vl",)


class _State:
    servers = {}


def _setup(ctx, Server, sla, arch):
    s = _State.servers.get(arch)
    if s is not None:
        return s
    s = type("S", (), {})()
    s.model = os.path.join(ctx.work, "tiny_" + arch)
    if not os.path.exists(os.path.join(s.model, "config.json")):
        subprocess.run([ctx.mmrt, "make-tiny-model", "--arch", arch, "--out", s.model],
                       check=True, stdout=subprocess.DEVNULL)
    s.image = os.path.join(ctx.work, arch + ".png")
    hu.write_test_image(s.image, size=(150, 100))
    s.other = os.path.join(ctx.work, arch + "_other.png")
    hu.write_test_image(s.other, size=(60, 200))
    s.srv = Server(ctx.mmrt, s.model, ctx.work, "--sla-config", sla, "--media-sandbox", "on")
    s.port = s.srv.port
    atexit.register(lambda: s.srv and s.srv.proc.poll() is None and s.srv.proc.kill())
    _State.servers[arch] = s
    return s


def _generate(ctx, model, image):
    p = subprocess.run([ctx.mmrt, "generate", "--model", model, "--image", image, "--prompt",
                        PROMPT, "--max-tokens", str(N), "--quiet", "--ignore-eos"],
                       capture_output=True, timeout=300)
    expect(p.returncode == 0, p.stderr.decode())
    return p.stdout[:-1] if p.stdout.endswith(b"\n") else p.stdout


def _ask(image):
    url = "data:image/png;base64," + base64.b64encode(open(image, "rb").read()).decode()
    return {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": PROMPT}]}],
        "max_tokens": N, "temperature": 0, "ignore_eos": True}


def openai_client(ctx, Server, sla, arch):
    s = _setup(ctx, Server, sla, arch)
    js = os.path.join(ROOT, "tests", "js")
    p = subprocess.run(["node", os.path.join(js, "server_openai.mjs"),
                        f"http://127.0.0.1:{s.port}/v1", s.image],
                       cwd=js, capture_output=True, text=True, timeout=300)
    print(p.stdout, end="")
    expect(p.returncode == 0, f"openai client checks on {arch} failed:\n" + p.stdout + p.stderr)


def greedy_equals_generate(ctx, Server, sla, arch):
    s = _setup(ctx, Server, sla, arch)
    want = _generate(ctx, s.model, s.image)
    st, _, b = hu.post(s.port, "/v1/chat/completions", _ask(s.image))
    expect(st == 200, f"{st} {b}")
    got = b["choices"][0]["message"]["content"].encode()
    expect(got == want, f"HTTP {got!r} vs mmrt generate --image {want!r}")
    expect(b["usage"]["prompt_tokens"] > 20, f"the image's tokens are in the prompt: {b['usage']}")
    # Another image (another aspect ratio) gives other log-probabilities: the pixels reach the
    # model (a tiny random model may still pick the same greedy tokens).
    replies = []
    for image in (s.image, s.other):
        body = _ask(image)
        body["logprobs"] = True
        st, _, r = hu.post(s.port, "/v1/chat/completions", body)
        expect(st == 200, r)
        replies.append(r)
    b2 = replies[1]
    lp = [[t["logprob"] for t in r["choices"][0]["logprobs"]["content"]] for r in replies]
    expect(lp[0] != lp[1], f"the same log-probabilities for two images: {lp[0][:3]}")
    if arch != "llava":
        expect(b2["usage"]["prompt_tokens"] != b["usage"]["prompt_tokens"],
               "another aspect ratio, another token count")
    return f"greedy reply {got!r}, prompt {b['usage']['prompt_tokens']} tokens"


def refusals(ctx, Server, sla, arch):
    s = _setup(ctx, Server, sla, arch)
    body = _ask(s.image)
    body["messages"][0]["content"][0] = {"type": "input_audio",
                                         "input_audio": {"data": "UklGRg==", "format": "wav"}}
    st, _, b = hu.post(s.port, "/v1/chat/completions", body)
    expect_error(st, b, 400, param="messages[0].content[0].type", contains="takes no audio input")
    body["messages"][0]["content"][0] = {"type": "video_url",
                                         "video_url": {"url": "data:video/mp4;base64,AAAA"}}
    st, _, b = hu.post(s.port, "/v1/chat/completions", body)
    if arch in TAKES_VIDEO:  # a video it takes, but 3 bytes are not one
        expect_error(st, b, 422)
    else:
        expect_error(st, b, 400, param="messages[0].content[0].type", contains="video")
    body = _ask(s.image)
    body["messages"][0]["content"][0]["image_url"]["url"] = "data:image/png;base64," + \
        base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(40)).decode()
    st, _, b = hu.post(s.port, "/v1/chat/completions", body)
    expect_error(st, b, 422)
    st, _, b = hu.post(s.port, "/v1/chat/completions", _ask(s.image))
    expect(st == 200, f"the server goes on after bad media: {st} {b}")


def shutdown(ctx, Server, sla):
    codes = {arch: s.srv.stop() for arch, s in _State.servers.items()}
    _State.servers = {}
    expect(all(c == 0 for c in codes.values()), f"exit codes {codes}")


def groups(ctx, Server, sla):
    out = []
    for arch in ARCHS:
        def bind(f, arch=arch):
            return lambda: f(ctx, Server, sla, arch)
        out += [
            (f"{arch}: the openai client suite with images", bind(openai_client)),
            (f"{arch}: greedy reply with an image equal to mmrt generate --image",
             bind(greedy_equals_generate)),
            (f"{arch}: audio 400, video " + ("422 (damaged)" if arch in TAKES_VIDEO else "400") +
             ", corrupt image 422, the server goes on",
             bind(refusals)),
        ]
    out.append(("llava, fuyu: SIGTERM exits 0", lambda: shutdown(ctx, Server, sla)))
    return out
