#!/usr/bin/env python3
"""The Realtime WebSocket of `mmrt serve` end to end (tests/server/checks_realtime.py): a real
server process of a tiny qwen2-audio model on loopback, nothing mocked, and a tiny qwen2-vl one
for the "model takes no audio" answer. Reuses server_test.py's Server helper.
Usage: realtime_test.py --mmrt BIN --work DIR [--only NAME ...]"""
import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks_realtime  # noqa: E402
from server_test import Server  # noqa: E402


class Ctx:
    pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mmrt", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    ctx = Ctx()
    ctx.mmrt, ctx.work = a.mmrt, a.work
    vl = os.path.join(a.work, "tiny")
    if not os.path.exists(os.path.join(vl, "model.safetensors")):
        subprocess.run([a.mmrt, "make-tiny-model", "--arch", "qwen2-vl", "--out", vl],
                       check=True, stdout=subprocess.DEVNULL)
    vsrv = Server(a.mmrt, vl, a.work)
    ctx.port = vsrv.port
    results = []
    try:
        for name, fn in checks_realtime.CHECKS:
            if a.only and not any(o in name for o in a.only) and fn is not checks_realtime.stop:
                continue
            t0 = time.time()
            try:
                note = fn(ctx, Server)
                results.append((name, True))
                print(f"ok   {name} ({time.time() - t0:.1f} s){': ' + note if note else ''}",
                      flush=True)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                results.append((name, False))
                print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
    finally:
        vsrv.stop()
        srv = getattr(checks_realtime._S, "srv", None)
        if srv is not None:
            if srv.proc.poll() is None:
                srv.proc.kill()
            print("--- realtime server log (tail) ---")
            print("".join(open(srv.log_path).readlines()[-30:]))
    failed = [r for r in results if not r[1]]
    print(f"{len(results) - len(failed)}/{len(results)} realtime checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
