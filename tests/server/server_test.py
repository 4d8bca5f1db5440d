#!/usr/bin/env python3
"""`mmrt serve` end to end: a real server process on loopback, nothing mocked.

Runs the official openai client's checks (tests/js/server_openai.mjs), then raw-socket checks of
what a client library hides (malformed and oversize requests, slow headers, pipelining,
disconnects), bit-identity with `mmrt generate`, /metrics as valid Prometheus text, traces, the
load run (1,000 concurrent SSE streams; 200 clients that disconnect mid-stream), mixed traffic
with bad input and dropped connections, and the graceful shutdown. Usage: server_test.py --mmrt BIN --work DIR [--only NAME ...]
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_util as hu  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

SLA = {
    "classes": [
        {"name": "platinum", "ttft_ms": 300, "tpot_ms": 50, "weight": 4, "on_miss": "refuse"},
        {"name": "gold", "ttft_ms": 800, "tpot_ms": 100, "weight": 2, "on_miss": "downgrade"},
        {"name": "silver", "ttft_ms": 5000, "weight": 1, "on_miss": "refuse"},
        {"name": "batch", "ttft_ms": 0, "weight": 0.5, "on_miss": "accept"},
    ],
    "default_class": "batch",
}


class Server:
    def __init__(self, mmrt, model, work, *extra):
        Server.count = getattr(Server, "count", 0) + 1
        self.log_path = os.path.join(work, f"serve{Server.count}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [mmrt, "serve", "--model", model, "--port", "0", *extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None
        end = time.time() + 60
        while time.time() < end and self.port is None:
            time.sleep(0.02)
            for line in open(self.log_path):
                if "listening on http://" in line:
                    self.port = int(line.split("http://")[1].split()[0].rsplit(":", 1)[1])
            if self.proc.poll() is not None:
                raise RuntimeError("the server exited: " + open(self.log_path).read())
        if self.port is None:
            raise RuntimeError("the server did not listen: " + open(self.log_path).read())
        while time.time() < end:
            st, _, _ = hu.request(self.port, "GET", "/health")
            if st == 200:
                return
            time.sleep(0.05)
        raise RuntimeError("the server did not get ready")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait()
        return self.proc.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mmrt", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--streams", type=int, default=1000)
    a = ap.parse_args()
    # 1,000 concurrent connections need as many descriptors on this side too.
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, a.streams + 512)), hard))
    os.makedirs(a.work, exist_ok=True)
    model = os.path.join(a.work, "tiny")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        subprocess.run([a.mmrt, "make-tiny-model", "--arch", "qwen2-vl", "--out", model],
                       check=True, stdout=subprocess.DEVNULL)
    image = os.path.join(a.work, "image.png")
    hu.write_test_image(image)
    sla = os.path.join(a.work, "sla.json")
    with open(sla, "w") as f:
        json.dump(SLA, f)
    traces = os.path.join(a.work, "traces")
    media_dir = os.path.join(a.work, "media")
    os.makedirs(media_dir, exist_ok=True)
    hu.write_test_image(os.path.join(media_dir, "local.png"))

    import checks_audio
    import checks_chaos
    import checks_hostile
    import checks_http
    import checks_image_families
    import checks_load
    import checks_video
    ctx = hu.Context(a.mmrt, model, image, a.work, traces, media_dir, a.streams)
    srv = Server(a.mmrt, model, a.work, "--sla-config", sla, "--trace-dir", traces,
                 "--max-body-mb", "4", "--read-timeout", "1", "--allowed-media-dir", media_dir,
                 "--drain-timeout", "20", "--max-media-mb", "2", "--fetch-allow", "127.0.0.0/8",
                 "--media-fetch-timeout", "2")
    ctx.port = srv.port
    ctx.pid = srv.proc.pid
    results = []
    try:
        groups = [("openai client", lambda: checks_http.openai_client(ctx))]
        groups += [(n, (lambda f: lambda: f(ctx))(f)) for n, f in checks_http.CHECKS]
        groups += [(n, (lambda f: lambda: f(ctx))(f)) for n, f in checks_hostile.CHECKS]
        groups += [(n, (lambda f: lambda: f(ctx))(f)) for n, f in checks_load.CHECKS]
        groups += [(n, (lambda f: lambda: f(ctx))(f)) for n, f in checks_video.CHECKS]
        groups += [(n, (lambda f: lambda: f(ctx))(f)) for n, f in checks_chaos.CHECKS]
        groups += checks_audio.groups(ctx, Server)
        groups += checks_image_families.groups(ctx, Server, sla)
        groups += checks_hostile.groups(ctx, Server)
        for name, fn in groups:
            if a.only and not any(o in name for o in a.only):
                continue
            t0 = time.time()
            try:
                note = fn()
                results.append((name, True, note))
                print(f"ok   {name} ({time.time() - t0:.1f} s){': ' + note if note else ''}",
                      flush=True)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                results.append((name, False, str(e)))
                print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
        if not a.only or any("tenant" in o for o in a.only):
            name = "API keys: 401, 403 per class, tenant-salted caches, per-tenant rate"
            keys = os.path.join(a.work, "keys.json")
            with open(keys, "w") as f:
                json.dump(checks_http.KEYS, f)
            tsrv = Server(a.mmrt, model, a.work, "--sla-config", sla, "--api-keys", keys,
                          "--tenant-max-media-mb", "1", "--fetch-allow", "127.0.0.1")
            try:
                note = checks_http.tenants(tsrv.port, image)
                results.append((name, True, note))
                print(f"ok   {name}: {note}", flush=True)
            except Exception as e:  # noqa: BLE001
                results.append((name, False, str(e)))
                print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            finally:
                trc = tsrv.stop()
                if trc != 0:
                    results.append(("keyed server exit code", False, str(trc)))
        if not a.only or any("shutdown" in o for o in a.only):
            name = "SIGTERM drains a stream in flight and exits 0"
            try:
                checks_load.graceful_shutdown(ctx, srv)
                results.append((name, True, ""))
                print("ok   " + name, flush=True)
            except Exception as e:  # noqa: BLE001
                results.append((name, False, str(e)))
                print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
    finally:
        rc = srv.stop()
        if srv.proc.returncode is None:
            srv.proc.kill()
    failed = [r for r in results if not r[1]]
    print(f"{len(results) - len(failed)}/{len(results)} server checks passed (server exit {rc})")
    if failed:
        print("--- server log (tail) ---")
        print("".join(open(srv.log_path).readlines()[-40:]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
