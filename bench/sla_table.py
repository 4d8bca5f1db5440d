#!/usr/bin/python3
"""Prints a markdown table from `mmrt bench --json` files (one row per file): per policy the
platinum SLO attainment (refusals count as misses), all-class attainment and goodput, and the
goodput of the last policy over each other one."""
import json
import sys


def main(paths):
    rows = []
    policies = None
    for p in paths:
        runs = json.load(open(p))
        names = [r["policy"] for r in runs]
        if policies is None:
            policies = names
            head = ["rate", "duration"]
            for n in names:
                head += [f"{n} platinum", f"{n} all", f"{n} goodput"]
            head += [f"goodput {names[-1]} / {n}" for n in names[:-1]]
            head += [f"TTFT error {n}" for n in names]
            rows.append(head)
        w = runs[0]["workload"]
        row = [f"{w['rate']:g}", f"{w['duration_s']:g} s"]
        for r in runs:
            c = r["classes"]
            plat = c["platinum"]
            late = plat.get("refused_late", 0)
            refused = f"{plat['refused']} refused" + (f", {late} of them late" if late else "")
            row += [f"{100 * plat['slo_attainment']:.1f} % ({refused})",
                    f"{100 * c['all']['slo_attainment']:.1f} %", f"{r['goodput_rps']:.1f}/s"]
        last = runs[-1]["goodput_rps"]
        row += [f"{last / r['goodput_rps']:.2f}x" if r["goodput_rps"] > 0 else "inf" for r in runs[:-1]]
        for r in runs:
            e = r["engine"]["ttft_prediction"]
            row += [f"{100 * e['mean_abs_rel_error']:.0f} %" if e["count"] else "-"]
        rows.append(row)
    for i, r in enumerate(rows):
        print("| " + " | ".join(r) + " |")
        if i == 0:
            print("|" + " --- |" * len(r))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: sla_table.py BENCH.json ...")
    main(sys.argv[1:])
