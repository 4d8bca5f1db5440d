#!/usr/bin/env python3
"""The promise at the socket, under overload: an independent open-loop client (this process)
against `mmrt serve` (its own process), judged by the client's own clock.

For each policy and each rate, a fresh server on the small checkpoint; Poisson arrivals for
DURATION s of streamed chat requests (160-word prompts, 32 tokens, platinum / gold / silver
20 / 30 / 50 %, 10 % with a 448x336 PNG). Per request the client records, from the first byte it
writes to the first chunk of the answer it reads (the server writes the status line and the first
chunk with the first token), its TTFT, and the class the server says it served.

Reported per (policy, rate): sent, refused, served, served late as the client sees it (per class,
judged against the class it was served in), refusal answer time (median, first byte to status
line), goodput (served within their class's time to first token per second; also weighted by the
served class's weight, 4 / 2 / 1, and counting only requests within their TPOT target too), the client-minus-server TTFT gap, and TPOT as the client sees it (last token minus
first over the tokens between; p99 for platinum and gold, and how many served requests went over
their served class's target). With several seeds (--seeds), each seed's policies run back to
back, and a last table compares slo with the baseline of the best mean goodput seed by seed: the
mean difference, its standard error, and whether it is outside two standard errors.

Usage: promise_sweep.py --mmrt BIN --model DIR [--rates 10,20,...] [--duration 30]
                        [--policies slo,fcfs,fcfs:plain] [--json OUT] [--serve-arg ARG ...]
"""
import argparse
import asyncio
import base64
import io
import json
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "server"))
import http_util as hu  # noqa: E402
from server_test import Server  # noqa: E402

CLASSES = {"platinum": 300.0, "gold": 800.0, "silver": 5000.0}  # mmrt's default classes (ms)
TPOT = {"platinum": 50.0, "gold": 100.0, "silver": None}  # ... their TPOT targets (ms, a mean)
WEIGHTS = {"platinum": 4.0, "gold": 2.0, "silver": 1.0}  # ... and their weights
MIX = [("platinum", 0.2), ("gold", 0.3), ("silver", 0.5)]
DRAIN_S = 30  # after the last arrival
WORDS = ("latency server token image model request class promise budget queue decode prefill "
         "encoder cache stream socket client arrival admission refuse serve").split()


def png_448x336():
    from PIL import Image
    img = Image.new("RGB", (448, 336))
    img.putdata([((x * 7) % 256, (y * 5) % 256, ((x ^ y) * 3) % 256)
                 for y in range(336) for x in range(448)])
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def make_body(rng, image_url):
    cls = rng.choices([c for c, _ in MIX], [w for _, w in MIX])[0]
    text = " ".join(rng.choice(WORDS) for _ in range(160))
    content = text
    with_image = rng.random() < 0.1
    if with_image:
        content = [{"type": "image_url", "image_url": {"url": image_url}},
                   {"type": "text", "text": text}]
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 32,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
            "sla_class": cls}
    return cls, with_image, json.dumps(body).encode()


def request_bytes(body):
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
            b"\r\n\r\n" + body)


async def one(port, cls, with_image, body, t_sched, out):
    rec = {"class": cls, "image": with_image, "status": 0, "lag_ms": 0.0}
    out.append(rec)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as e:
        rec["error"] = f"connect: {e}"
        return
    try:
        t0 = time.perf_counter()  # the first byte goes out now
        rec["lag_ms"] = (t0 - t_sched) * 1e3
        rec["sent_s"] = t0  # made relative to the run's start below
        writer.write(request_bytes(body))
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        t_status = time.perf_counter()
        rec["status"] = int(head.split(b" ", 2)[1])
        rec["status_ms"] = (t_status - t0) * 1e3
        headers = {}
        for line in head.decode("latin-1").split("\r\n")[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        if "x-mmrt-predicted-ttft-ms" in headers:  # through `mmrt router`: its prediction
            rec["router_predicted_ms"] = float(headers["x-mmrt-predicted-ttft-ms"])
        if rec["status"] != 200:
            n = int(headers.get("content-length", "0"))
            b = await reader.readexactly(n) if n else b""
            try:
                rec["error"] = json.loads(b)["error"]["message"][:200]
            except (ValueError, KeyError, TypeError):
                rec["error"] = b[:200].decode("latin-1")
            rec["retry_after"] = headers.get("retry-after")
            return
        async for payload in hu.sse_payloads(reader):
            j = json.loads(payload)
            if "error" in j:
                rec["error"] = str(j["error"].get("message", ""))[:200]
                continue
            # The first chunk of the answer (the role delta the server writes with the first
            # token) ends TTFT: the first byte of content the client receives.
            if j.get("choices") and "ttft_ms" not in rec:
                rec["ttft_ms"] = (time.perf_counter() - t0) * 1e3
            # The chunk with the finish reason follows the last token at once.
            if j.get("choices") and j["choices"][0].get("finish_reason"):
                rec["last_token_ms"] = (time.perf_counter() - t0) * 1e3
            if j.get("usage"):
                rec["tokens"] = j["usage"]["completion_tokens"]
            if "mmrt" in j:
                rec["served_class"] = j["mmrt"].get("sla_class")
                rec["server_ttft_ms"] = j["mmrt"].get("ttft_ms")
                rec["mmrt"] = j["mmrt"]
        rec["e2e_ms"] = (time.perf_counter() - t0) * 1e3
        # TPOT as the client sees it: the mean time per token after the first.
        if rec.get("tokens", 0) > 1 and "last_token_ms" in rec:
            rec["tpot_ms"] = (rec["last_token_ms"] - rec["ttft_ms"]) / (rec["tokens"] - 1)
    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
        rec["error"] = f"{type(e).__name__}: {e}"
    finally:
        writer.close()


async def open_loop(port, rate, duration, seed, image_url):
    rng = random.Random(seed)
    out, tasks = [], []
    start = time.perf_counter() + 0.2
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            break
        cls, img, body = make_body(rng, image_url)
        delay = start + t - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(port, cls, img, body, start + t, out)))
    # Requests still open DRAIN s after the last arrival (a server without admission control
    # queues without bound at 10x its capacity) are cut and counted as unfinished.
    _, pending = await asyncio.wait(tasks, timeout=DRAIN_S)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for r in out:
        if "sent_s" in r:
            r["sent_s"] = round(r["sent_s"] - start, 4)
        if "ttft_ms" not in r and "error" not in r and r["status"] in (0, 200):
            r["error"] = "unfinished"
    return out


def summarize(recs, duration):
    s = {"sent": len(recs)}
    refused = [r for r in recs if r["status"] in (429, 503)]
    served = [r for r in recs if r["status"] == 200 and "ttft_ms" in r and "error" not in r]
    s["refused"] = len(refused)
    s["served"] = len(served)
    s["unfinished"] = sum(1 for r in recs if r.get("error") == "unfinished")
    s["failed"] = len(recs) - len(refused) - len(served) - s["unfinished"]
    s["refusal_ms_p50"] = statistics.median([r["status_ms"] for r in refused]) if refused else None
    # Admitted, then refused before the first token (the admission's prediction was wrong): the
    # client waited for nothing and the engine spent work on it.
    late_refusals = [r for r in refused if "can no longer come within" in r.get("error", "")]
    s["refused_late"] = len(late_refusals)
    s["refused_late_ms_p50"] = statistics.median([r["status_ms"] for r in late_refusals] or [0])
    # Why, per requested class: the refusal message's kind (its numbers stripped).
    kinds = [("tpot", "per output token"), ("displacing", "would make a"),
             ("own work", "its own work alone"), ("spent before", "spent before admission"),
             ("late", "can no longer come within"), ("ttft", "predicted time to first token")]
    reasons = {}
    for r in refused:
        kind = next((k for k, text in kinds if text in r.get("error", "")), "other")
        per_cls = reasons.setdefault(r["class"], {})
        per_cls[kind] = per_cls.get(kind, 0) + 1
    s["refusal_reasons"] = reasons
    # Per requested class, each judged against the class it was served in (a downgraded gold
    # request against silver's budget).
    late, per = 0, {}
    for c in CLASSES:
        got = [r for r in served if r["class"] == c]
        bad = [r for r in got if r["ttft_ms"] > CLASSES[r.get("served_class") or c]]
        # TPOT over the served class's target (a mean per request, as mmrt verify judges it).
        slow = [r for r in got if TPOT[r.get("served_class") or c] is not None and
                r.get("tpot_ms", 0) > TPOT[r.get("served_class") or c]]
        tpots = sorted(r["tpot_ms"] for r in got if "tpot_ms" in r)
        per[c] = {"served": len(got), "late": len(bad), "tpot_over": len(slow),
                  "tpot_p99_ms": round(tpots[min(len(tpots) - 1, int(0.99 * len(tpots)))], 1)
                  if tpots else None,
                  "late_pct": round(100.0 * len(bad) / len(got), 2) if got else 0.0,
                  "ttft_p99_ms": (sorted(r["ttft_ms"] for r in got)[
                      min(len(got) - 1, int(0.99 * len(got)))] if got else None)}
        late += len(bad)
    s["classes"] = per
    s["late"] = late
    s["goodput_rps"] = round((len(served) - late) / duration, 2)
    # Weighted by the class each on-time request was served in (platinum 4, gold 2, silver 1):
    # a policy that refuses every platinum request to serve cheap silver ones scores low here.
    on_time = [r for r in served
               if r["ttft_ms"] <= CLASSES[r.get("served_class") or r["class"]]]
    s["weighted_goodput"] = round(
        sum(WEIGHTS[r.get("served_class") or r["class"]] for r in on_time) / duration, 2)
    # Within the whole class: its time to first token and its TPOT target (the mean time per
    # token after the first, as mmrt verify judges it); silver has no TPOT target.
    def tpot_ok(r):
        t = TPOT[r.get("served_class") or r["class"]]
        return t is None or r.get("tpot_ms", 0) <= t
    s["goodput_tpot_rps"] = round(sum(1 for r in on_time if tpot_ok(r)) / duration, 2)
    gaps = [r["ttft_ms"] - r["server_ttft_ms"] for r in served if r.get("server_ttft_ms") is not None]
    s["client_minus_server_ttft_ms_p50"] = round(statistics.median(gaps), 2) if gaps else None
    s["client_minus_server_ttft_ms_max"] = round(max(gaps), 2) if gaps else None
    s["client_lag_ms_max"] = round(max((r["lag_ms"] for r in recs), default=0), 1)
    errs = {}
    for r in recs:
        if "error" in r and r["status"] not in (429, 503) and r["error"] != "unfinished":
            errs[r["error"][:80]] = errs.get(r["error"][:80], 0) + 1
    s["errors"] = errs
    return s


def engine_work(port):
    """The engine's own account of the run, from /metrics: steps, the time in them and the time the
    step loop was busy, tokens prefilled and generated, preemptions, and requests ended by outcome (work spent on a request that ends refused or
    cancelled is work no client got)."""
    st, _, body = hu.request(port, "GET", "/metrics")
    if st != 200:
        return {}
    out = {}
    for fam in hu.parse_prometheus(body.decode()).values():
        for n, lab, v in fam["samples"]:
            if n in ("mmrt_engine_steps_total", "mmrt_num_preemptions_total",
                     "mmrt_prompt_tokens_total", "mmrt_prompt_tokens_cached_total",
                     "mmrt_generation_tokens_total"):
                key = n[len("mmrt_"):-len("_total")]
                out[key] = out.get(key, 0) + int(v)
            elif n in ("mmrt_engine_step_seconds_total", "mmrt_engine_busy_seconds_total"):
                out[n[len("mmrt_"):-len("_total")]] = round(v, 2)
            elif n == "mmrt_request_outcome_total":
                key = "ended_" + lab.get("outcome", "?")
                out[key] = out.get(key, 0) + int(v)
    return out


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Each run also prints 'refused late': requests admitted and then refused by the "
               "server's late check (with the reasons per class), the engine's counters, and the "
               "tokens prefilled and generated per second the step loop was busy: the machine's "
               "speed in that run, which moves by several percent from run to run on a shared "
               "machine (compare two policies' goodput with it).")
    ap.add_argument("--mmrt", required=True, help="the mmrt binary")
    ap.add_argument("--model", required=True, help="checkpoint directory (the small one)")
    ap.add_argument("--rates", default="10,20,40,80,160",
                    help="comma list of arrival rates, requests per second (default %(default)s)")
    ap.add_argument("--duration", type=float, default=30,
                    help="seconds of arrivals per run (default %(default)s)")
    ap.add_argument("--policies", default="slo,fcfs,fcfs:plain",
                    help="comma list of --policy values, each on a fresh server, e.g. slo:safe "
                         "(default %(default)s)")
    ap.add_argument("--json", help="write every run's summary (JSON) here")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="one more argument for mmrt serve (repeat; e.g. "
                         "--serve-arg=--trace-dir --serve-arg=DIR)")
    ap.add_argument("--seed", type=int, default=7,
                    help="trace seed when --seeds is not given (default %(default)s)")
    ap.add_argument("--seeds", help="comma list: every rate and policy once per seed (seeds "
                    "interleaved with policies, so each pair of policies meets the same traces "
                    "and the same stretch of machine noise); a summary of goodput per seed and "
                    "its mean follows the table")
    ap.add_argument("--records", help="write every request's record (JSON lines) here")
    a = ap.parse_args()
    image_url = png_448x336()
    rates = [float(x) for x in a.rates.split(",")]
    results = []
    work = tempfile.mkdtemp(prefix="promise_")
    seeds = [int(x) for x in a.seeds.split(",")] if a.seeds else [a.seed]
    runs = [(r, sd, p) for r in rates for sd in seeds for p in a.policies.split(",")]
    for rate, seed, policy in runs:
        # The server tests' process wrapper: starts `mmrt serve`, waits for /health, stops it
        # with SIGTERM (its log: WORK/serveN.log).
        srv = Server(a.mmrt, a.model, work, "--policy", policy, "--max-requests", "100000",
                     "--max-connections", "100000", *a.serve_arg)
        try:
            recs = asyncio.run(open_loop(srv.port, rate, a.duration, seed, image_url))
            work_done = engine_work(srv.port)
        finally:
            srv.stop()
        if a.records:
            with open(a.records, "a") as f:
                for r in recs:
                    f.write(json.dumps({"policy": policy, "rate": rate, "seed": seed, **r}) +
                            "\n")
        s = summarize(recs, a.duration)
        s.update({"policy": policy, "rate": rate, "seed": seed, "engine": work_done})
        # The machine's speed in this run: tokens computed (prefilled past the prefix cache, and
        # generated) per second the step loop was busy (a shared machine's speed moves run to
        # run; compare goodput with it).
        busy = work_done.get("engine_busy_seconds", 0)
        s["tokens_per_busy_s"] = round((work_done.get("prompt_tokens", 0) -
                                        work_done.get("prompt_tokens_cached", 0) +
                                        work_done.get("generation_tokens", 0)) / busy) \
            if busy else None
        results.append(s)
        print(f"rate {rate:g} seed {seed} {policy}: sent {s['sent']}, refused {s['refused']} "
              f"(answered in {s['refusal_ms_p50'] or 0:.1f} ms p50), served {s['served']}, "
              f"late {s['late']} (platinum {s['classes']['platinum']['late_pct']} %, gold "
              f"{s['classes']['gold']['late_pct']} %), refused late {s['refused_late']} "
              f"(after {s['refused_late_ms_p50']:.0f} ms p50; why, per class: {s['refusal_reasons']}), "
              f"goodput {s['goodput_rps']}/s (weighted "
              f"{s['weighted_goodput']}, within TPOT too {s['goodput_tpot_rps']}), client-"
              f"server TTFT gap p50 {s['client_minus_server_ttft_ms_p50']} ms, tokens per busy "
              f"second {s['tokens_per_busy_s']}, failed "
              f"{s['failed']} {s['errors'] or ''}, unfinished {s['unfinished']}; engine "
              f"{work_done}", file=sys.stderr, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    print("| rate | policy | sent | refused | refusal p50 ms | served | unfinished | "
          "late platinum % | late gold % | late silver % | goodput /s | weighted goodput /s | "
          "goodput within TPOT too /s | client-server TTFT p50 ms | TPOT p99 platinum / gold ms | "
          "over TPOT | tokens / busy s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in results:
        c = s["classes"]
        print(f"| {s['rate']:g} | {s['policy']} | {s['sent']} | {s['refused']} | "
              f"{(s['refusal_ms_p50'] or 0):.1f} | {s['served']} | {s['unfinished']} | "
              f"{c['platinum']['late_pct']} | "
              f"{c['gold']['late_pct']} | {c['silver']['late_pct']} | {s['goodput_rps']} | "
              f"{s['weighted_goodput']} | {s['goodput_tpot_rps']} | "
              f"{s['client_minus_server_ttft_ms_p50']} | {c['platinum']['tpot_p99_ms']} / "
              f"{c['gold']['tpot_p99_ms']} | "
              f"{c['platinum']['tpot_over'] + c['gold']['tpot_over']} | "
              f"{s['tokens_per_busy_s']} |")
    if len(seeds) > 1:
        print("\n| rate | policy | goodput /s per seed | mean | weighted per seed | mean | "
              "within TPOT too per seed | mean |")
        print("|---|---|---|---|---|---|---|---|")
        for rate in rates:
            for policy in a.policies.split(","):
                g = [s["goodput_rps"] for s in results if s["rate"] == rate and s["policy"] == policy]
                w = [s["weighted_goodput"] for s in results
                     if s["rate"] == rate and s["policy"] == policy]
                t = [s["goodput_tpot_rps"] for s in results
                     if s["rate"] == rate and s["policy"] == policy]
                print(f"| {rate:g} | {policy} | {' / '.join(map(str, g))} | "
                      f"{statistics.mean(g):.2f} | {' / '.join(map(str, w))} | "
                      f"{statistics.mean(w):.2f} | {' / '.join(map(str, t))} | "
                      f"{statistics.mean(t):.2f} |")
        paired_verdicts(results, rates, a.policies.split(","))


def paired_verdicts(results, rates, policies):
    """slo against the baseline with the best mean goodput, seed by seed (each seed's runs are
    back to back, so the machine's drift is mostly shared): the mean difference and its standard
    error, by count and weighted. The acceptance reads 'slo >= the best baseline'; a difference
    inside two standard errors is one these runs cannot tell from the machine's noise."""
    if "slo" not in policies or len(policies) < 2:
        return
    print("\n| rate | baseline | metric | slo minus baseline per seed | mean | std. error | "
          "verdict |")
    print("|---|---|---|---|---|---|---|")
    for rate in rates:
        by = {p: {s["seed"]: s for s in results if s["rate"] == rate and s["policy"] == p}
              for p in policies}
        base = [p for p in policies if p != "slo"]
        best = max(base, key=lambda p: statistics.mean(
            [s["goodput_rps"] for s in by[p].values()] or [0]))
        seeds = sorted(set(by["slo"]) & set(by[best]))
        if len(seeds) < 2:
            continue
        for metric in ("goodput_rps", "weighted_goodput"):
            d = [by["slo"][sd][metric] - by[best][sd][metric] for sd in seeds]
            mean = statistics.mean(d)
            se = statistics.stdev(d) / len(d) ** 0.5
            verdict = ("slo ahead" if mean - 2 * se > 0 else
                       "slo behind" if mean + 2 * se < 0 else "within noise")
            print(f"| {rate:g} | {best} | {metric} | {' / '.join(f'{x:+.2f}' for x in d)} | "
                  f"{mean:+.2f} | {se:.2f} | {verdict} |")


if __name__ == "__main__":
    main()
