#!/usr/bin/env python3
"""The table of bench/compare_revisions.sh: each figure of OLD and NEW per round, the NEW/OLD
ratio per round (taken in the same run) and its median. Usage: compare_table.py WORK ROUNDS RATES"""
import glob
import json
import os
import re
import statistics
import sys

work, rounds, rates = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()

# bench-model text -> {figure: value}, per weight pass ("bf16", "int8 (weight-only, x float)").
def model_figures(text):
    out = {}
    m = re.search(r"memory read bandwidth: ([\d.]+) GB/s", text)
    if m: out["bandwidth GB/s"] = float(m.group(1))
    m = re.search(r"== vision (?:tower|encoder), \d+x\d+ image \([^)]*\): ([\d.]+) ms", text)
    if m: out["vision ms"] = float(m.group(1))
    for sec in re.split(r"== language model, ", text)[1:]:
        fmt = sec.split(" weights")[0]
        for name, pat in [("prefill tok/s", r"prefill \d+ tokens: ([\d.]+) tokens/s"),
                          ("decode b1 tok/s", r"decode batch 1: ([\d.]+) tokens/s"),
                          ("decode b1 paired % of bandwidth", r"read rate = (\d+)% median"),
                          ("decode b8 tok/s", r"decode batch 8: ([\d.]+) tokens/s"),
                          ("b1 rate / 1st model's, alternated", r"alternated: ([\d.]+)x median")]:
            m = re.search(pat, sec)
            if m: out[f"{fmt}: {name}"] = float(m.group(1))
    return out

def sla_figures(path):
    out = {}
    for p in json.load(open(path)):
        pol = p["policy"]
        out[f"{pol}: goodput req/s"] = p["goodput_rps"]
        out[f"{pol}: tokens/s"] = p["throughput_tok_s"]
        c = p["classes"]
        if "platinum" in c:
            out[f"{pol}: platinum SLO %"] = 100 * c["platinum"]["slo_attainment"]
            out[f"{pol}: platinum TTFT p99 ms"] = c["platinum"]["ttft_ms"]["p99"]
        out[f"{pol}: all TTFT p50 ms"] = c["all"]["ttft_ms"]["p50"]
        out[f"{pol}: all TPOT p50 ms"] = c["all"]["tpot_ms"]["p50"]
    return out

def table(title, get):
    rows = {}
    for r in range(1, rounds + 1):
        for who in ("old", "new"):
            f = get(who, r)
            if f is None: continue
            for k, v in f.items(): rows.setdefault(k, {}).setdefault(who, {})[r] = v
    if not rows: return
    print(f"\n## {title}")
    print("| figure | " + " | ".join(f"round {r} old / new (ratio)" for r in range(1, rounds + 1)) +
          " | median new/old |")
    print("|---|" + "---|" * (rounds + 1))
    for k, d in rows.items():
        cells, ratios = [], []
        for r in range(1, rounds + 1):
            o, n = d.get("old", {}).get(r), d.get("new", {}).get(r)
            if o is None or n is None:
                cells.append("—")
                continue
            ratio = n / o if o else float("nan")
            ratios.append(ratio)
            cells.append(f"{o:.4g} / {n:.4g} ({ratio:.3f})")
        med = f"{statistics.median(ratios):.3f}" if ratios else "—"
        print(f"| {k} | " + " | ".join(cells) + f" | {med} |")

def model_get(who, r):
    p = os.path.join(work, f"model_{who}_{r}.txt")
    return model_figures(open(p).read()) if os.path.exists(p) else None

table("mmrt bench-model on the 2b-shape checkpoint", model_get)
for rate in rates:
    def sla_get(who, r, rate=rate):
        p = os.path.join(work, f"sla_{who}_{r}_r{rate}.json")
        return sla_figures(p) if os.path.exists(p) else None
    table(f"mmrt bench at {rate} req/s (small checkpoint)", sla_get)
