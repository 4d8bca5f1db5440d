#!/usr/bin/env python3
"""Admission at the router under overload (docs/scale-out.md, docs/benchmarks.md): a real etcd
and NATS, two `mmrt serve --cluster-etcd --cluster-nats` workers on the `small` checkpoint and
two routers, all on loopback (they share this machine's cores):
  quotes   `mmrt router --nats --model`: predicts each request's first token on each worker
           from the quotes the workers publish with their load gauges, sends it to the first
           worker in cost order predicted to meet its class and refuses at once when none is;
  workers  `mmrt router` without NATS: tries the workers in affinity order and passes their
           refusals on (admission is theirs alone).
After an unreported warm-up, each rate runs every router on the same seed (the same arrivals
and prompts, each run's behind a system message of its own, so that no run hits another's
prefix cache), each router first in turn.
The client is promise_sweep.py's (an independent open-loop client in this process): Poisson
arrivals of streamed chat requests (160-word prompts, 32 tokens, platinum / gold / silver
20 / 30 / 50 %, 10 % with a 448x336 PNG), judged by its own clock. Per (rate, router): sent,
refused (of them refused by the router itself), served, served late per class (judged against
the class served in), the refusal's answer time (median), goodput, the workers tried in vain
(mmrt_router_passed_on_total), and for the quotes router its predicted first token against the
client's TTFT (median error, signed and absolute) on served requests.
Usage: bench/cluster_admission.py --mmrt BIN [--model DIR] [--rates 6,12,30] [--duration 20]
       [--seed 7] [--modes quotes,workers]"""
import argparse
import asyncio
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cluster"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "server"))
import cluster_test as ct  # noqa: E402
import promise_sweep as ps  # noqa: E402
import http_util as hu  # noqa: E402
from server_test import Server  # noqa: E402


MAKE_BODY = ps.make_body


def distinct(run):
    """promise_sweep's requests with a system message naming the run in front: the same
    arrivals and prompts in every run, but no run finds another's prompts in a prefix cache."""
    make = MAKE_BODY

    def body(rng, image_url):
        cls, img, b = make(rng, image_url)
        j = json.loads(b)
        j["messages"].insert(0, {"role": "system", "content": f"Run {run}."})
        return cls, img, json.dumps(j).encode()
    return body


def report(mode, rate, recs, duration, passed_on):
    s = ps.summarize(recs, duration)
    refused = [r for r in recs if r["status"] in (429, 503)]
    at_router = [r for r in refused if "predicted by the router" in r.get("error", "")]
    served = [r for r in recs if r["status"] == 200 and "ttft_ms" in r and "error" not in r]
    err = [r["router_predicted_ms"] - r["ttft_ms"] for r in served if "router_predicted_ms" in r]
    late = ", ".join(f"{c} {v['late']}/{v['served']}" for c, v in s["classes"].items())
    line = (f"{mode:8s} {rate:5.1f} req/s: sent {s['sent']}, refused {s['refused']} "
            f"({len(at_router)} by the router), served {s['served']}, late {late}; "
            f"refusal answered in {s['refusal_ms_p50'] or 0:.1f} ms (median), goodput "
            f"{s['goodput_rps']:.2f}/s (weighted {s['weighted_goodput']:.2f}), workers tried in "
            f"vain {passed_on:.0f}")
    if err:
        line += (f"; predicted - client TTFT median {statistics.median(err):+.1f} ms, |error| "
                 f"median {statistics.median(abs(e) for e in err):.1f} ms over {len(err)}")
    if s["unfinished"] or s["failed"]:
        line += f"; unfinished {s['unfinished']}, failed {s['failed']} {s['errors']}"
    print(line, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mmrt", required=True)
    ap.add_argument("--model", default="build/bench/small")
    ap.add_argument("--rates", default="6,12,30")
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--modes", default="quotes,workers")
    ap.add_argument("--records", help="write every request's record (JSON lines) here")
    a = ap.parse_args()
    work, name, etcd = ct.bench_setup(a.model, "cluster_admission_")
    nats = ct.Nats(work)
    workers, routers = [], {}
    try:
        for _ in range(2):
            workers.append(Server(a.mmrt, a.model, work, "--cluster-etcd", etcd.url,
                                  "--served-model-name", name, "--cluster-nats", nats.url))
        routers["quotes"] = ct.Router(a.mmrt, work, etcd.url, nats.url, ["--model", a.model],
                                      name="quotes_router")
        routers["workers"] = ct.Router(a.mmrt, work, etcd.url, None, name="plain_router")
        ct.until("both workers at the routers",
                 lambda: all(len(r.workers()) == 2 for r in routers.values()), 15)
        image = ps.png_448x336()
        print(f"model {name}: two workers and the routers on this machine's cores; "
              f"{a.duration:.0f} s per run, seed {a.seed}", flush=True)
        # Warm-up (not reported): the workers' cost models fit their steps, images are cached.
        asyncio.run(ps.open_loop(routers["workers"].port, 4, 8, a.seed + 1000, image))
        modes = a.modes.split(",")
        out = open(a.records, "w") if a.records else None
        for n, rate in enumerate(float(x) for x in a.rates.split(",")):
            for mode in modes if n % 2 == 0 else modes[::-1]:  # each goes first in turn
                port = routers[mode].port
                before = hu.metric(port, "mmrt_router_passed_on_total")
                ps.make_body = distinct(f"{mode} {rate}")
                recs = asyncio.run(ps.open_loop(port, rate, a.duration, a.seed, image))
                report(mode, rate, recs, a.duration,
                       hu.metric(port, "mmrt_router_passed_on_total") - before)
                for r in recs if out else []:
                    out.write(json.dumps({"mode": mode, "rate": rate, **r}) + "\n")
                for w in workers:  # the next run starts on idle workers
                    ct.until("the workers idle", lambda w=w: hu.metric(
                        w.port, "mmrt_num_requests_running") == 0, 60)
    finally:
        for r in routers.values():
            r.stop()
        ct.stop_cluster(None, workers, etcd, nats)


if __name__ == "__main__":
    main()
