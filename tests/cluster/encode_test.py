#!/usr/bin/env python3
"""Encode workers end to end (docs/scale-out.md, "Encode workers"): a real etcd, and per family
of tiny checkpoints an `mmrt serve --role encode` encode worker, an `mmrt serve
--remote-encoders auto` worker that finds it in etcd and a plain `mmrt serve`, each in its own
process on loopback.

Checks, for every image family (Qwen2-VL, Qwen2.5-VL, LLaVA-NeXT, LLaVA-1.5, Fuyu) and
Qwen2-Audio: a greedy reply with a media item equal to the plain server's, the item encoded by
the encode worker (its counters and the bytes its transfer agent sent: rows x width x 4) and
none encoded locally. With two encode workers: a request's two images encoded side by side,
and answered from the encode workers' cache when another worker asks for them. On Qwen2-VL: an encode worker killed between encoding and the transfer
(SIGKILL when the worker reads the output) -> the item is encoded locally, the reply equal;
an encode worker of another checkpoint under the same name answers 409 and is not used; the
link to an encode worker cut (a TCP proxy) and restored; a damaged image gets the plain
server's 422; with no encode worker left in etcd the worker
encodes locally (declined).
Usage: encode_test.py --mmrt BIN --work DIR"""
import argparse
import base64
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
sys.path.insert(0, HERE)
import http_util as hu  # noqa: E402
from checks_audio import wav_bytes  # noqa: E402
from cluster_test import CutProxy, Etcd, check, failures, stop_cluster, until  # noqa: E402
from server_test import Server  # noqa: E402

N = 8  # tokens per greedy reply
FAMILIES = ("qwen2-vl", "qwen2.5-vl", "llava-next", "llava", "fuyu", "qwen2-audio")
PROMPT = "What is in it?"


def tiny(mmrt, work, arch, seed=0):
    out = os.path.join(work, f"tiny_{arch}" + (f"_{seed}" if seed else ""))
    if not os.path.exists(os.path.join(out, "config.json")):
        subprocess.run([mmrt, "make-tiny-model", "--arch", arch, "--out", out, "--seed",
                        str(seed)], check=True, stdout=subprocess.DEVNULL)
    return out


def media_part(arch, work, size=(150, 100)):
    if arch == "qwen2-audio":
        wav = base64.b64encode(wav_bytes(1.5, 440)).decode()
        return {"type": "input_audio", "input_audio": {"data": wav, "format": "wav"}}
    path = os.path.join(work, "enc_image_%dx%d.png" % size)
    if not os.path.exists(path):
        hu.write_test_image(path, size=size)
    url = "data:image/png;base64," + base64.b64encode(open(path, "rb").read()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def ask(part):
    return {"model": "m", "messages": [{"role": "user", "content": [part, {"type": "text",
                                                                           "text": PROMPT}]}],
            "max_tokens": N, "temperature": 0, "ignore_eos": True}


def reply(port, body):
    st, _, b = hu.post(port, "/v1/chat/completions", body)
    return st, (b["choices"][0]["message"]["content"] if st == 200 else b)


def remote(port, what):
    return hu.metric(port, "mmrt_media_remote_" + what + "_total")


def encode_worker(mmrt, model, work, etcd, prefix, *extra):
    return Server(mmrt, model, work, "--role", "encode", "--served-model-name", "m",
                  "--cluster-etcd", etcd.url, "--cluster-prefix", prefix, "--cluster-ttl", "2",
                  *extra)


def pd_worker(mmrt, model, work, etcd, prefix):
    w = Server(mmrt, model, work, "--served-model-name", "m", "--cluster-etcd", etcd.url,
               "--cluster-prefix", prefix, "--cluster-ttl", "2", "--remote-encoders", "auto")
    until("the encode worker in the worker's view",
          lambda: hu.metric(w.port, "mmrt_remote_encode_workers") == 1, 15)
    return w


def family(mmrt, work, etcd, arch):
    model = tiny(mmrt, work, arch)
    prefix = f"/enc/{arch}/"
    procs = []
    try:
        enc = encode_worker(mmrt, model, work, etcd, prefix)
        procs.append(enc)
        pd = pd_worker(mmrt, model, work, etcd, prefix)
        procs.append(pd)
        plain = Server(mmrt, model, work, "--served-model-name", "m")
        procs.append(plain)
        body = ask(media_part(arch, work))
        st_p, want = reply(plain.port, body)
        st, got = reply(pd.port, body)
        items = hu.metric(enc.port, "mmrt_encode_items_total")
        sent = hu.metric(enc.port, "mmrt_transfer_bytes_sent_total")
        read = hu.metric(pd.port, "mmrt_remote_encode_transfer_bytes_total")
        check(st == st_p == 200 and got == want and remote(pd.port, "encoded") == 1 and
              remote(pd.port, "failed") == 0 and items == 1 and sent == read > 0 and
              hu.metric(enc.port, "mmrt_transfer_held_bytes") == 0,
              f"{arch}: the reply with its media encoded on the encode worker equals the plain "
              f"server's ({got!r}); {int(sent)} bytes transferred and released")
    finally:
        stop_cluster(None, procs)


def sharing(mmrt, work, etcd):
    """Two encode workers, two workers using them: a request's two images are encoded side by
    side (each where its key sends it); the same request on the other worker is answered from
    the encode workers' cache."""
    model = tiny(mmrt, work, "qwen2-vl")
    prefix = "/enc/sharing/"
    procs = []
    try:
        encs = [encode_worker(mmrt, model, work, etcd, prefix) for _ in range(2)]
        procs += encs
        pds = []
        for _ in range(2):
            w = Server(mmrt, model, work, "--served-model-name", "m", "--cluster-etcd", etcd.url,
                       "--cluster-prefix", prefix, "--remote-encoders", "auto")
            procs.append(w)
            until("both encode workers in view",
                  lambda: hu.metric(w.port, "mmrt_remote_encode_workers") == 2, 15)
            pds.append(w)
        plain = Server(mmrt, model, work, "--served-model-name", "m")
        procs.append(plain)
        body = ask(media_part("qwen2-vl", work, (100, 80)))
        body["messages"][0]["content"].insert(1, media_part("qwen2-vl", work, (80, 100)))
        _, want = reply(plain.port, body)
        st1, got1 = reply(pds[0].port, body)
        per = sorted(hu.metric(e.port, "mmrt_encode_items_total") for e in encs)
        check(st1 == 200 and got1 == want and remote(pds[0].port, "encoded") == 2 and per == [1, 1],
              f"two images of one request encoded remotely side by side (per encode worker: "
              f"{[hu.metric(e.port, 'mmrt_encode_items_total') for e in encs]}), reply equal")
        st2, got2 = reply(pds[1].port, body)
        hits = sum(hu.metric(e.port, "mmrt_encode_cache_hits_total") for e in encs)
        check(st2 == 200 and got2 == want and hits == 2 and remote(pds[1].port, "encoded") == 2,
              "the same request on another worker: both images from the encode workers' cache, "
              "reply equal")
    finally:
        stop_cluster(None, procs)


def faults(mmrt, work, etcd):
    model = tiny(mmrt, work, "qwen2-vl")
    body = ask(media_part("qwen2-vl", work))
    procs = []
    try:
        plain = Server(mmrt, model, work, "--served-model-name", "m")
        procs.append(plain)
        _, want = reply(plain.port, body)

        # Killed between encoding and the transfer.
        enc = encode_worker(mmrt, model, work, etcd, "/enc/fault/", "--test-fault",
                            "exit-before-transfer")
        procs.append(enc)
        pd = pd_worker(mmrt, model, work, etcd, "/enc/fault/")
        procs.append(pd)
        st, got = reply(pd.port, body)
        check(st == 200 and got == want and enc.proc.wait(10) == -9 and
              remote(pd.port, "failed") == 1 and remote(pd.port, "encoded") == 0,
              "an encode worker killed between encoding and the transfer: the item is encoded "
              "locally, the reply equal to the plain server's")

        # Its lease gone, the worker encodes locally (declined: no encode worker in view).
        until("the dead encode worker out of the view",
              lambda: hu.metric(pd.port, "mmrt_remote_encode_workers") == 0, 10)
        body2 = ask(media_part("qwen2-vl", work, (120, 90)))  # not in any cache
        _, want2 = reply(plain.port, body2)
        st, got = reply(pd.port, body2)
        check(st == 200 and got == want2 and remote(pd.port, "declined") == 1,
              "no encode worker in etcd: the item is encoded locally")

        # An encode worker of another checkpoint under the same name: 409, not used.
        other = encode_worker(mmrt, tiny(mmrt, work, "qwen2-vl", seed=7), work, etcd,
                              "/enc/fault/")
        procs.append(other)
        until("the other encode worker in the view",
              lambda: hu.metric(pd.port, "mmrt_remote_encode_workers") == 1, 10)
        body3 = ask(media_part("qwen2-vl", work, (90, 120)))
        _, want3 = reply(plain.port, body3)
        st, got = reply(pd.port, body3)
        log = open(pd.log_path).read()
        check(st == 200 and got == want3 and remote(pd.port, "failed") == 2 and
              hu.metric(other.port, "mmrt_encode_items_total") == 0 and
              "computes with another model" in log,
              "an encode worker of another checkpoint answers 409 and is not used "
              f"({st} {remote(pd.port, 'failed')} {remote(pd.port, 'declined')} "
              f"{hu.metric(other.port, 'mmrt_encode_items_total')})")

        # The link to an encode worker cut, then restored (a TCP proxy stands for it): encoded
        # locally while it is cut, remotely again after.
        linked = encode_worker(mmrt, model, work, etcd, "/enc/link/")
        procs.append(linked)
        proxy = CutProxy(linked.port)
        pd2 = Server(mmrt, model, work, "--served-model-name", "m", "--remote-encoders",
                     f"http://127.0.0.1:{proxy.port}", "--remote-encode-timeout", "2")
        procs.append(pd2)
        got, want, counts = [], [], []
        for i, size in enumerate([(70, 50), (50, 70), (60, 60)]):
            if i == 1:
                proxy.cut()
            if i == 2:
                proxy.restore()
            b = ask(media_part("qwen2-vl", work, size))
            want.append(reply(plain.port, b)[1])
            got.append(reply(pd2.port, b)[1])
            counts.append((remote(pd2.port, "encoded"), remote(pd2.port, "failed")))
        check(got == want and counts == [(1, 0), (1, 1), (2, 1)],
              f"the link to the encode worker cut: encoded locally, remotely again once it is "
              f"restored, replies equal (encoded, failed after each: {counts})")

        # A damaged image: the plain server's answer.
        png = open(os.path.join(work, "enc_image_150x100.png"), "rb").read()
        bad = ask({"type": "image_url", "image_url": {
            "url": "data:image/png;base64," + base64.b64encode(png[:len(png) // 2]).decode()}})
        st_p, b_p = reply(plain.port, bad)
        st, b = reply(pd.port, bad)
        check(st == st_p == 422 and b["error"]["message"] == b_p["error"]["message"] and
              remote(pd.port, "failed") == 3,
              f"a damaged image (its header intact): the encode worker's error, then the same "
              f"422 as from the plain server ({b['error']['message']!r})")
    finally:
        stop_cluster(None, procs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mmrt", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    etcd = Etcd(a.work)
    t0 = time.time()
    try:
        for arch in FAMILIES:
            family(a.mmrt, a.work, etcd, arch)
        sharing(a.mmrt, a.work, etcd)
        faults(a.mmrt, a.work, etcd)
    finally:
        etcd.kill()
    print(f"{len(failures)} failure(s) in {time.time() - t0:.0f} s")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
