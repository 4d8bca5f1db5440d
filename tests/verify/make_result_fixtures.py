#!/usr/bin/env python3
"""Writes the sample verify results the HTML report tests render: fixtures/result_pass.json
(a healthy run) and fixtures/result_fail.json (a run with a queueing episode, thermal throttling
and a late frame streak), each with about 600 requests. Deterministic: the same files every time.

Usage: make_result_fixtures.py [OUT_DIR]   (default: the fixtures folder next to this script)
"""
import json
import math
import os
import random
import sys

DURATION_S = 300.0
WARMUP_S = 10.0
CONFIDENCE = 0.95
K = 3
STAGES = ["media_download", "media_decode", "queue", "encoder", "prefill", "decode", "client"]

# name -> (kind, rate per second, rules [(metric, stat, threshold ms)])
CLASSES = {
    "gold": ("text", 1.1, [("ttft", "p99", 300.0), ("e2e", "p99", 2500.0)]),
    "silver": ("image", 0.4, [("ttft", "p90", 800.0), ("e2e", "p90", 4000.0)]),
    "stream": ("frame", 0.45, [("ttft", "p90", 250.0)]),
}


def pct(values, p):
    """Nearest-rank percentile (as the server's reports compute it); None for no values."""
    if not values:
        return None
    v = sorted(values)
    rank = math.ceil(p / 100.0 * len(v))
    return v[min(max(rank, 1), len(v)) - 1]


def dist(values):
    if not values:
        return {"n": 0, "p50": None, "p90": None, "p99": None, "max": None, "mean": None}
    return {"n": len(values), "p50": r1(pct(values, 50)), "p90": r1(pct(values, 90)),
            "p99": r1(pct(values, 99)), "max": r1(max(values)),
            "mean": r1(sum(values) / len(values))}


def r1(x):
    return None if x is None else round(x, 1)


def needed_samples(quantile, over, confidence):
    """Fewest samples for which `over` exceedances still show the quantile holds."""
    p = 1.0 - quantile
    n = over + 1
    while n < 100000:
        # P(Binomial(n, p) <= over)
        term = (1 - p) ** n
        cdf = term
        for k in range(1, over + 1):
            term *= (n - k + 1) / k * p / (1 - p)
            cdf += term
        if cdf <= 1 - confidence:
            return n
        n += 1
    return n


def schedule(rng):
    events = []
    for name, (kind, rate, _) in CLASSES.items():
        t = 0.0
        if kind == "frame":
            t = 0.7
            while t < WARMUP_S + DURATION_S:
                events.append((round(t, 3), name, kind))
                t += 1.0 / rate
            continue
        while True:
            t += rng.expovariate(rate)
            if t >= WARMUP_S + DURATION_S:
                break
            k = kind
            if kind == "image" and rng.random() < 0.3:
                k = "repeat_image"
            events.append((round(t, 3), name, k))
    events.sort()
    return events


def congestion(t, failing):
    """Extra queueing (ms) at time t: the failing run has an episode from 200 s to 260 s."""
    if failing and 200.0 <= t <= 260.0:
        return 250.0 + 300.0 * math.sin((t - 200.0) / 60.0 * math.pi)
    return 0.0


def one_request(rng, i, t, cls, kind, failing):
    warmup = t < WARMUP_S
    stages = {s: 0.0 for s in STAGES}
    if kind == "image":
        stages["media_download"] = rng.uniform(4, 18)
    if kind in ("image", "frame"):
        stages["media_decode"] = rng.uniform(2, 7)
    stages["queue"] = rng.expovariate(1 / 4.0) + congestion(t, failing) * rng.uniform(0.6, 1.3)
    if warmup:
        stages["queue"] += rng.uniform(30, 120)
    stages["encoder"] = {"image": rng.uniform(25, 45), "frame": rng.uniform(18, 30),
                         "repeat_image": rng.uniform(0.5, 1.5)}.get(kind, 0.0)
    stages["prefill"] = rng.uniform(12, 40) * (1.3 if failing and t > 200 else 1.0)
    tokens = rng.randint(8, 24) if kind == "frame" else rng.randint(12, 48 if kind == "text" else 96)
    tpot = rng.uniform(7.5, 11.0) * (1.25 if failing and t > 200 else 1.0)
    stages["decode"] = tokens * tpot
    stages["client"] = rng.uniform(0.3, 2.0)
    status = "ok"
    if failing and 215 <= t <= 250 and rng.random() < 0.08:
        status = "refused"
    elif failing and rng.random() < 0.006:
        status = rng.choice(["error", "timeout"])
    elif not failing and rng.random() < 0.002:
        status = "error"
    r = {"i": i, "t_s": t, "class": cls, "kind": kind,
         "stream": "camera-0" if kind == "frame" else "", "status": status, "warmup": warmup,
         "ttft_ms": None, "e2e_ms": None, "tpot_ms": None, "tokens": 0, "violated": False,
         "why": "", "lag_ms": round(abs(rng.gauss(0.1, 0.15)), 3), "stages_ms": None}
    if status != "ok":
        return r
    ttft = sum(stages[s] for s in ("media_download", "media_decode", "queue", "encoder",
                                   "prefill"))
    e2e = ttft + stages["decode"] + stages["client"]
    r.update({"ttft_ms": round(ttft, 2), "e2e_ms": round(e2e, 2), "tpot_ms": round(tpot, 2),
              "tokens": tokens, "stages_ms": {s: round(v, 2) for s, v in stages.items()}})
    if not warmup:
        why = []
        for metric, _, limit in CLASSES[cls][2]:
            value = r[metric + "_ms"]
            if value > limit:
                why.append(f"{metric} {value:.0f} ms > {limit:.0f} ms")
        r["violated"] = bool(why)
        r["why"] = "; ".join(why)
    return r


def class_summary(name, reqs, rng):
    measured = [r for r in reqs if not r["warmup"]]
    ok = [r for r in measured if r["status"] == "ok"]
    metric = {m: [r[m + "_ms"] for r in ok] for m in ("ttft", "e2e", "tpot")}
    itl = []
    for r in ok:
        itl += [r["tpot_ms"] * rng.lognormvariate(0, 0.25) for _ in range(4)]
    c = {"name": name, "requests": len(measured), "completed": len(ok),
         "refused": sum(r["status"] == "refused" for r in measured),
         "errors": sum(r["status"] == "error" for r in measured),
         "timeouts": sum(r["status"] == "timeout" for r in measured),
         "violations": sum(r["violated"] for r in measured),
         "ttft_ms": dist(metric["ttft"]), "tpot_ms": dist(metric["tpot"]), "itl_ms": dist(itl),
         "e2e_ms": dist(metric["e2e"]), "rules": []}
    if name == "all":
        return c
    for m, stat, limit in CLASSES[name][2]:
        q = float(stat[1:])
        values = metric[m]
        observed = pct(values, q)
        over = sum(v > limit for v in values)
        needed = needed_samples(q / 100.0, over, CONFIDENCE)
        if observed is not None and observed > limit:
            status = "fail"
            message = f"{stat.upper()} {m.upper()} {observed:.1f} ms > {limit:.0f} ms " \
                      f"(by {observed - limit:.1f} ms)"
        elif len(values) < needed:
            status = "insufficient"
            message = f"{len(values)} samples, {needed} needed to show {stat} at " \
                      f"{CONFIDENCE:.0%} confidence"
        else:
            status = "pass"
            message = f"{stat.upper()} {m.upper()} {observed:.1f} ms <= {limit:.0f} ms"
        c["rules"].append({"rule": f"{m} {stat} <= {limit:.0f} ms", "metric": m, "stat": stat,
                           "threshold_ms": limit, "observed_ms": r1(observed),
                           "samples": len(values), "over": over, "needed": needed,
                           "status": status, "message": message})
    return c


def streaks_of(reqs):
    frames = [r for r in reqs if r["kind"] == "frame" and not r["warmup"]]
    longest, run, at, start = 0, 0, None, None
    for r in frames:
        late = r["violated"] or r["status"] != "ok"
        run = run + 1 if late else 0
        if run == 1:
            start = r["t_s"]
        if run > longest:
            longest, at = run, start
    return [{"stream": "camera-0", "k": K, "frames": len(frames), "longest": longest,
             "at_s": at if longest else None, "status": "fail" if longest >= K else "pass"}]


def attribution_of(reqs):
    ok = [r for r in reqs if not r["warmup"] and r["status"] == "ok"]

    def mean_stages(group):
        if not group:
            return {"n": 0, "stages_ms": {s: None for s in STAGES}}
        return {"n": len(group), "stages_ms": {
            s: round(sum(r["stages_ms"][s] for r in group) / len(group), 1) for s in STAGES}}

    violating = mean_stages([r for r in ok if r["violated"]])
    passing = mean_stages([r for r in ok if not r["violated"]])
    measured = [r for r in reqs if not r["warmup"]]
    a = {"dominant": None, "dominant_share": None, "violating": violating, "passing": passing,
         "refused": sum(r["status"] == "refused" for r in measured),
         "errors": sum(r["status"] == "error" for r in measured),
         "timeouts": sum(r["status"] == "timeout" for r in measured)}
    if violating["n"]:
        st = violating["stages_ms"]
        dom = max(STAGES, key=lambda s: st[s])
        a["dominant"] = dom
        a["dominant_share"] = round(st[dom] / sum(st.values()), 3)
    return a


def drift_of(reqs):
    ok = [r for r in reqs if not r["warmup"] and r["status"] == "ok"]
    mid = WARMUP_S + DURATION_S / 2

    def half(rs):
        t = [r["ttft_ms"] for r in rs]
        e = [r["e2e_ms"] for r in rs]
        return {"ttft_p50_ms": r1(pct(t, 50)), "ttft_p99_ms": r1(pct(t, 99)),
                "e2e_p50_ms": r1(pct(e, 50)), "e2e_p99_ms": r1(pct(e, 99))}

    a = half([r for r in ok if r["t_s"] < mid])
    b = half([r for r in ok if r["t_s"] >= mid])
    tr = round(b["ttft_p50_ms"] / a["ttft_p50_ms"], 3)
    er = round(b["e2e_p50_ms"] / a["e2e_p50_ms"], 3)
    return {"first_half": a, "second_half": b, "ttft_p50_ratio": tr, "e2e_p50_ratio": er,
            "steady": max(tr, er) < 1.2 and min(tr, er) > 1 / 1.2}


def telemetry_of(rng, failing):
    out = []
    throttle = 0
    t = 0.0
    while t <= WARMUP_S + DURATION_S:
        hot = failing and t >= 190
        if failing and t in (205.0, 230.0, 245.0):
            throttle += 1
        temp = None
        if failing:
            temp = round(61 + (25 * min(1.0, (t - 190) / 50) if hot else 0) + rng.uniform(-1, 1),
                         1)
        out.append({"t_s": t, "temp_c": temp, "throttle": throttle if failing else -1,
                    "steal_pct": round(abs(rng.gauss(4.5 if hot else 0.3, 0.3)), 2),
                    "busy_pct": round(min(99.0, (82 if hot else 48) + rng.uniform(-6, 6)), 1),
                    "load1": round((6.5 if hot else 3.1) + rng.uniform(-0.4, 0.4), 2),
                    "gpu_reasons": ""})
        t += 5.0
    return out


def check(name, title, value, expected, verdict, required, detail=""):
    return {"name": name, "title": title, "value": value, "expected": expected,
            "verdict": verdict, "required": required, "detail": detail}


def preflight_of(failing):
    gov = "powersave on 0-7" if failing else "performance on 0-7"
    before = [
        check("server", "Server reachable and ready", "200 OK in 3.1 ms", "200", "ok", True),
        check("governor", "CPU frequency governor", gov, "performance",
              "warn" if failing else "ok", False,
              "frequency scaling adds latency under bursty load" if failing else ""),
        check("smt", "Simultaneous multithreading", "on", "any", "info", False),
        check("swap", "Swap in use", "0 MiB", "0 MiB", "ok", False),
        check("thp", "Transparent huge pages", "madvise", "madvise or always", "ok", False),
        check("temperature", "CPU package temperature", "61 \u00b0C" if failing else "unknown",
              "< 85 \u00b0C", "ok" if failing else "unknown", False,
              "" if failing else "no thermal sensor exposed (virtual machine)"),
        check("steal", "CPU steal time", "0.3 %", "< 2 %", "ok", False),
        check("ntp", "Clock synchronised", "yes", "yes", "ok", False),
    ]
    after = [dict(c) for c in before]
    if failing:
        after[5] = check("temperature", "CPU package temperature", "87 \u00b0C", "< 85 \u00b0C",
                         "warn", False, "the package throttled during the run")
        after[6] = check("steal", "CPU steal time", "4.6 %", "< 2 %", "warn", False)
    return {"mode": "warn", "before": before, "after": after}


def fingerprint_of(failing):
    return {"hostname": "edge-node-07" if failing else "lab-bench-02",
            "kernel": "6.1.0-28-amd64",
            "cmdline": "BOOT_IMAGE=/boot/vmlinuz-6.1.0-28-amd64 root=UUID=3c1e0f5a ro quiet "
                       "isolcpus=4-7 nohz_full=4-7",
            "cpu_model": "AMD EPYC 7763 64-Core Processor",
            "cpus": 8, "memory_gb": 32,
            "governor": "powersave" if failing else "performance",
            "mmrt_version": "0.9.2 (a1b2c3d)", "model": "qwen3-vl-2b q8"}


def result(failing):
    rng = random.Random(7 if failing else 3)
    reqs = [one_request(rng, i, t, cls, kind, failing)
            for i, (t, cls, kind) in enumerate(schedule(rng))]
    classes = [class_summary(n, [r for r in reqs if r["class"] == n], rng) for n in CLASSES]
    classes.append(class_summary("all", reqs, rng))
    streaks = streaks_of(reqs)
    reasons = []
    for c in classes:
        for rule in c["rules"]:
            if rule["status"] == "fail":
                reasons.append({"kind": "fail", "rule": f"{c['name']}: {rule['rule']}",
                                "message": rule["message"]})
    for s in streaks:
        if s["status"] == "fail":
            reasons.append({"kind": "fail", "rule": f"{s['stream']}: fewer than {K} late frames "
                            "in a row", "message": f"{s['longest']} consecutive late frames at "
                            f"{s['at_s']:.1f} s"})
    verdict = "FAIL" if reasons else "PASS"
    measured = [r for r in reqs if not r["warmup"]]
    lag = sorted(r["lag_ms"] for r in reqs)
    res = {
        "mmrt_verify": 1,
        "generated_at": "2026-12-01T22:40:00Z" if failing else "2026-11-28T09:15:00Z",
        "verdict": verdict, "exit_code": 1 if reasons else 0, "reasons": reasons,
        "run": {"url": "http://10.0.3.17:8000" if failing else "http://127.0.0.1:8000",
                "workload": "default-mixed", "seed": 1, "duration_s": DURATION_S,
                "warmup_s": WARMUP_S, "requests_scheduled": len(reqs),
                "requests_measured": len(measured), "preflight": "warn",
                "confidence": CONFIDENCE, "k": K},
        "generator": {"lag_p50_ms": pct(lag, 50), "lag_p99_ms": pct(lag, 99),
                      "lag_max_ms": lag[-1], "limit_ms": 10, "ok": True},
        "classes": classes,
        "thresholds": {n: {f"{m}_p99_ms": v for m, s, v in rules if s == "p99"}
                       for n, (_, _, rules) in CLASSES.items()},
        "streaks": streaks,
        "attribution": attribution_of(reqs),
        "drift": drift_of(reqs),
        "telemetry": telemetry_of(rng, failing),
        "preflight": preflight_of(failing),
        "baseline": None,
        "fingerprint": fingerprint_of(failing),
        "requests": reqs,
    }
    if failing:
        rows = []
        lab = {("all", "ttft", "p99"): 95.0, ("all", "e2e", "p99"): 1610.0,
               ("gold", "ttft", "p99"): 88.0, ("gold", "e2e", "p99"): 1450.0}
        by_name = {c["name"]: c for c in classes}
        for (cls, m, stat), lab_ms in lab.items():
            here = by_name[cls][m + "_ms"][stat]
            delta = here - lab_ms
            rows.append({"class": cls, "metric": m, "stat": stat, "lab_ms": lab_ms,
                         "here_ms": here, "delta_ms": round(delta, 1),
                         "delta_pct": round(delta / lab_ms * 100, 1), "tolerance_pct": 20,
                         "status": "fail" if delta / lab_ms * 100 > 20 else "pass"})
        res["baseline"] = {
            "file": "lab.json", "lab_generated_at": "2026-11-28T09:15:00Z", "rows": rows,
            "fingerprint_diffs": [
                {"key": "governor", "lab": "performance", "here": "powersave"},
                {"key": "hostname", "lab": "lab-bench-02", "here": "edge-node-07"},
                {"key": "temperature", "lab": "unknown", "here": "61 \u00b0C before, 87 \u00b0C "
                 "after"}]}
    return res


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "fixtures")
    os.makedirs(out_dir, exist_ok=True)
    for name, failing in (("result_pass.json", False), ("result_fail.json", True)):
        res = result(failing)
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(f"{name}: {res['verdict']}, {len(res['requests'])} requests")


if __name__ == "__main__":
    main()
