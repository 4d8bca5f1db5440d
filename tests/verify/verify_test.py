"""`mmrt verify` end to end against a real `mmrt serve` on the tiny model: a comfortable workload
PASSes (and saves a baseline), an overloaded one FAILs naming the rule and the dominant stage
(and is compared with that baseline), a 10-second run asking for a P99 claim is INVALID for too
few samples, a camera-like frame stream with a forced stall (the server stopped with SIGSTOP)
FAILs the k-consecutive rule, strict preflight on fixture trees decides INVALID or not, and the
HTML reports open in headless Chromium without console errors (screenshots kept in --work)."""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from server_test import SLA, Server  # noqa: E402

FIX = os.path.join(HERE, "fixtures", "sys")

COMFORTABLE = {
    "name": "comfortable", "seed": 3, "duration_s": 30, "warmup_s": 3, "rate": 12,
    "requests": [
        {"kind": "text", "weight": 8, "prompt_words": 16, "max_tokens": 8},
        {"kind": "image", "weight": 1, "images_dir": "IMAGES", "prompt_words": 8,
         "max_tokens": 8},
        {"kind": "repeat_image", "weight": 1, "image_sizes": [[224, 224]], "turns": 2,
         "turn_gap_s": 1, "prompt_words": 8, "max_tokens": 8},
    ],
    "streams": [{"name": "cam0", "fps": 2, "class": "gold", "image_sizes": [[160, 120]],
                 "distinct_frames": 3, "max_tokens": 4}],
    "classes": {"gold": {"weight": 1, "ttft_ms": {"p50": 500, "p99": 3000},
                         "e2e_ms": {"p99": 6000}}},
    "overall": {"ttft_ms": {"p99": 3000}},
    "steady_state_ratio": 3, "steady_state_min_delta_ms": 50, "max_generator_lag_ms": 50,
}

# Class "batch" is accepted whatever its prediction (the server's SLA config below), so the
# overload shows as queueing rather than as refusals at admission.
OVERLOADED = {
    "name": "overloaded", "seed": 4, "duration_s": 5, "warmup_s": 1, "rate": 300,
    # Prompts long enough that the tiny model cannot keep up whatever the client manages to
    # send under load (with 160 words, the faster GEMM of bf16 weights in their blocked layout
    # kept up when the generator lagged on a busy machine, and nothing queued).
    "requests": [{"kind": "text", "weight": 9, "prompt_words": 480, "max_tokens": 96},
                 {"kind": "image", "weight": 1, "image_sizes": [[224, 224]], "max_tokens": 64}],
    "classes": {"batch": {"weight": 1, "ttft_ms": {"p99": 300}}},
    # The overload takes both cores here, so the generator lags more than a real client would:
    # on a shared 2-core CI host, 1.2 s at p99 was seen (the run then INVALID, not FAIL). This
    # case is about the FAIL verdict and its attribution; the lag rule has its own test
    # (test_verdict.cpp), so the limit here is the run's length.
    "max_generator_lag_ms": 5000, "timeout_s": 120,
}

SHORT = {
    "name": "ten-seconds", "seed": 5, "duration_s": 10, "warmup_s": 1, "rate": 5,
    "requests": [{"kind": "text", "weight": 1, "max_tokens": 4}],
    "classes": {"gold": {"weight": 1, "ttft_ms": {"p99": 5000}}},
    "max_generator_lag_ms": 50,
}

# Judged at P50 only: enough samples in 10 s, so preflight alone decides between PASS and
# INVALID.
STRICT = dict(SHORT, name="strict", classes={"gold": {"weight": 1, "ttft_ms": {"p50": 5000}}})

FRAMES = {
    "name": "camera", "seed": 6, "duration_s": 12, "warmup_s": 1, "rate": 0,
    "streams": [{"name": "cam0", "fps": 10, "class": "gold", "image_sizes": [[96, 96]],
                 "distinct_frames": 5, "max_tokens": 2}],
    "classes": {"gold": {"weight": 1, "ttft_ms": {"p50": 250}}},
    "k": 3, "max_generator_lag_ms": 50,
}


def verify(mmrt, work, name, workload, *extra, expect, on_start=None):
    """Runs mmrt verify; `on_start` is called (on a thread) when it announces its schedule,
    0.2 s before the schedule's time zero."""
    wl = os.path.join(work, name + ".json")
    with open(wl, "w") as f:
        json.dump(workload, f)
    out = os.path.join(work, name + ".result.json")
    cmd = [mmrt, "verify", "--workload", wl, "--json", out,
           "--report", os.path.join(work, name + ".html"), *extra]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err, hooks = [], []

    def read_stderr():
        for line in p.stderr:
            err.append(line)
            if on_start and " requests over " in line and not hooks:
                hooks.append(threading.Thread(target=on_start))
                hooks[0].start()
    captured = []
    readers = [threading.Thread(target=read_stderr),
               threading.Thread(target=lambda: captured.append(p.stdout.read()))]
    for r in readers:
        r.start()
    try:
        p.wait(timeout=600)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise
    finally:
        for r in readers:
            r.join()
        for h in hooks:
            h.join()
    stdout = captured[0] if captured else ""
    if p.returncode != expect:
        raise AssertionError(f"{name}: exit {p.returncode}, expected {expect}\n"
                             f"stdout:\n{stdout}\nstderr:\n{''.join(err)[-3000:]}")
    with open(out) as f:
        return json.load(f), stdout


def rules_failed(res):
    return [r["rule"] for r in res["reasons"] if r["kind"] == "fail"]


def check_browser(work, name, verdict):
    png = os.path.join(work, name + ".png")
    p = subprocess.run(["node", os.path.join(HERE, "report_browser.mjs"),
                        os.path.join(work, name + ".html"), png, "--expect-verdict", verdict],
                       capture_output=True, text=True, timeout=180)
    if p.returncode != 0:
        raise AssertionError(f"report {name}: {p.stdout}\n{p.stderr}")
    return png


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mmrt", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model = os.path.join(a.work, "tiny")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        subprocess.run([a.mmrt, "make-tiny-model", "--arch", "qwen2-vl", "--out", model],
                       check=True, stdout=subprocess.DEVNULL)
    # A folder of real image files (PNG and JPEG, three sizes) for the image requests.
    images = os.path.join(a.work, "images")
    os.makedirs(images, exist_ok=True)
    from PIL import Image
    for i, (size, ext) in enumerate([((320, 240), "png"), ((200, 300), "jpg"), ((160, 160), "png")]):
        Image.effect_mandelbrot(size, (-2, -1.5, 1, 1.5), 30 + i).convert("RGB").save(
            os.path.join(images, f"real{i}.{ext}"))
    COMFORTABLE["requests"][1]["images_dir"] = images
    sla = os.path.join(a.work, "sla.json")
    with open(sla, "w") as f:
        json.dump(SLA, f)
    srv = Server(a.mmrt, model, a.work, "--sla-config", sla)
    # Two cores here: the server's threads get a lower priority than the load generator, so an
    # overloaded server does not starve the client that measures it (on a real deployment the
    # generator runs on other cores or another machine).
    for tid in os.listdir(f"/proc/{srv.proc.pid}/task"):
        os.setpriority(os.PRIO_PROCESS, int(tid), 10)
    url = f"http://127.0.0.1:{srv.port}"
    lab = os.path.join(a.work, "lab.json")
    failed = []

    def case(name, fn):
        if a.only and not any(o in name for o in a.only):
            return
        t0 = time.time()
        try:
            note = fn()
            print(f"ok   {name} ({time.time() - t0:.1f} s){': ' + note if note else ''}", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported
            failed.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)

    def comfortable():
        res, out = verify(a.mmrt, a.work, "pass", COMFORTABLE, "--url", url,
                          "--save-baseline", lab, expect=0)
        assert out.startswith("mmrt verify: PASS"), out[:200]
        assert res["verdict"] == "PASS" and res["reasons"] == [], res["reasons"]
        overall = res["classes"][-1]
        assert overall["name"] == "all"
        r99 = [r for r in overall["rules"] if r["stat"] == "p99"][0]
        assert r99["samples"] >= r99["needed"] == 299, r99
        assert res["streaks"][0]["stream"] == "cam0" and res["streaks"][0]["status"] == "pass"
        assert res["generator"]["ok"], res["generator"]
        names = {c["name"] for c in res["preflight"]["before"]}
        assert {"governor", "thp", "swap", "throttle", "steal"} <= names, names
        # The folder's images were sent: image prompts carry their vision tokens.
        img = [r["prompt_tokens"] for r in res["requests"] if r["kind"] == "image"]
        txt = [r["prompt_tokens"] for r in res["requests"] if r["kind"] == "text"]
        assert img and sum(img) / len(img) > sum(txt) / len(txt) + 20, (img[:5], txt[:5])
        cached = sum(r["cached_tokens"] for r in res["requests"] if r["kind"] == "repeat_image")
        assert cached > 0, "repeated-image turns hit no cache"
        b = json.load(open(lab))
        assert b["mmrt_verify_baseline"] == 1 and "all" in b["histograms"]
        png = check_browser(a.work, "pass", "PASS")
        return (f"{overall['requests']} requests, TTFT p50 {overall['ttft_ms']['p50']} ms p99 "
                f"{overall['ttft_ms']['p99']} ms, screenshot {os.path.basename(png)}")

    def overloaded():
        res, out = verify(a.mmrt, a.work, "fail", OVERLOADED, "--url", url, "--baseline", lab,
                          expect=1)
        assert res["verdict"] == "FAIL"
        fails = rules_failed(res)
        assert "batch: ttft p99 <= 300 ms" in fails, fails
        dom = res["attribution"]["dominant"]
        # Requests pile up faster than they are served: waiting is what they were made of.
        assert dom == "queue", res["attribution"]
        assert f"violations were made of: {dom}" in out, out
        assert res["baseline"]["rows"], "no baseline rows"
        png = check_browser(a.work, "fail", "FAIL")
        v = res["classes"][-1]
        return (f"{v['violations']} of {v['requests']} violated, dominant stage {dom} "
                f"({res['attribution']['dominant_share'] * 100:.0f} %), "
                f"screenshot {os.path.basename(png)}")

    def short_run():
        res, out = verify(a.mmrt, a.work, "short", SHORT, "--model", model, "--server-log",
                          os.path.join(a.work, "short-server.log"), expect=2)
        msgs = [r["message"] for r in res["reasons"] if r["kind"] == "invalid"]
        assert any("needs >= 299 samples" in m for m in msgs), msgs
        assert not rules_failed(res), res["reasons"]
        check_browser(a.work, "short", "INVALID")
        return msgs[0]

    def stalled_stream():
        # The server is stopped for 0.8 s from t = 6 s of a 10 fps stream: 8 frames wait.
        def stall():
            time.sleep(6.2)
            os.kill(srv.proc.pid, signal.SIGSTOP)
            time.sleep(0.8)
            os.kill(srv.proc.pid, signal.SIGCONT)
        res, _ = verify(a.mmrt, a.work, "stall", FRAMES, "--url", url, expect=1, on_start=stall)
        s = res["streaks"][0]
        assert s["status"] == "fail" and s["longest"] >= 3, s
        assert "cam0: fewer than 3 consecutive misses" in rules_failed(res), res["reasons"]
        # The streak starts with the frames scheduled in the stall (or just before it, whose
        # answers were still on their way).
        assert 5.5 <= s["at_s"] <= 6.9, s
        return f"longest streak {s['longest']} frames from t = {s['at_s']} s"

    def strict_preflight():
        res, _ = verify(a.mmrt, a.work, "strict-bad", STRICT, "--url", url, "--preflight",
                        "strict", "--sysfs-root", os.path.join(FIX, "laptop-default", "sys"),
                        "--procfs-root", os.path.join(FIX, "laptop-default", "proc"), expect=2)
        strict = [r["rule"] for r in res["reasons"] if r["rule"].startswith("preflight (strict)")]
        assert any("governor" in r for r in strict), res["reasons"]
        assert res["fingerprint"]["governor"] != "unknown", res["fingerprint"]
        res, _ = verify(a.mmrt, a.work, "strict-good", STRICT, "--url", url, "--preflight",
                        "strict", "--sysfs-root", os.path.join(FIX, "tuned-latency", "sys"),
                        "--procfs-root", os.path.join(FIX, "tuned-latency", "proc"), expect=0)
        assert res["verdict"] == "PASS" and not res["reasons"], res["reasons"]
        return f"laptop-default: INVALID ({', '.join(strict)}); tuned-latency: PASS"

    def bad_options():
        p = subprocess.run([a.mmrt, "verify", "--url", url, "--workload", "/nonexistent.json"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 3 and "/nonexistent.json" in p.stderr, (p.returncode, p.stderr)
        p = subprocess.run([a.mmrt, "verify", "--url", "http://127.0.0.1:1"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 3 and "health" in p.stderr, (p.returncode, p.stderr)
        return "exit 3 with the cause named"

    try:
        case("comfortable workload PASSes, saves a baseline, report renders", comfortable)
        case("overloaded workload FAILs naming rule and dominant stage", overloaded)
        case("10-second P99 claim is INVALID (too few samples)", short_run)
        case("k-consecutive rule: forced stall in a frame stream FAILs", stalled_stream)
        case("strict preflight on fixture trees", strict_preflight)
        case("bad options: exit 3", bad_options)
    finally:
        rc = srv.stop()
    if rc != 0:
        print(f"FAIL server exit status {rc}")
        failed.append("server exit")
    print(f"{'FAILED' if failed else 'passed'}: {len(failed)} failing", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
