#!/usr/bin/python3
"""Summarise bench_fidelity_features' JSON lines: how well each candidate feature predicts the next-token
loss of an instance kept as-is (or served blind), by kind of content.

    /usr/bin/python3 bench/fidelity/fit_features.py bench_fidelity_features.jsonl

For each group of content (the traces' texts; random ids and model-sampled text) and candidate feature x,
the spread of log(KL / x) over the measurements: the factor a prediction c·x with the best single c
typically misses by is exp(spread). Also the least-squares coefficient through the origin (as
FidelityModel::fit computes it) per kind of content, the mean sensitivity and context KL, and the default model's bias on
whole windows (every survivor kept at once): the geometric mean of predicted / measured.
"""
import argparse
import json
import math
import sys

import numpy as np

FEATURES = {
    "f*w (the planner's keep feature)": lambda r: r["f"] * r["w"],
    "f*w*s^0.4 (with the sensitivity factor)": lambda r: r["f"] * r["w"] * r["sens"] ** 0.4,
    "f*w*ckl (the survivor's context KL)": lambda r: r["f"] * r["w"] * r["ckl"],
    "f*mass (attention mass for w)": lambda r: r["f"] * r["mass"],
    "change*w (the true KV change: an oracle)": lambda r: r["change"] * r["w"],
    "change*mass (oracle)": lambda r: r["change"] * r["mass"],
    "c1*w (first row's change)": lambda r: r["c1"] * r["w"],
    "c4*w (first 4 rows' change)": lambda r: r["c4"] * r["w"],
    "c8*w (first 8 rows' change)": lambda r: r["c8"] * r["w"],
}
BLIND_FEATURES = {
    "w (the planner's blind feature)": lambda r: r["w"],
    "w*s^0.4 (with the sensitivity factor)": lambda r: r["w"] * r["sens"] ** 0.4,
    "w*ckl (the document's context KL)": lambda r: r["w"] * r["ckl"],
    "mass (the query's attention to it)": lambda r: r["mass"],
    "mass*ckl": lambda r: r["mass"] * r["ckl"],
}


def spread(rows, feature):
    y = np.log(np.maximum([r["kl"] for r in rows], 1e-12))
    x = np.log(np.maximum([feature(r) for r in rows], 1e-15))
    return float((y - x).std())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jsonl")
    args = ap.parse_args()
    rows = []
    with open(args.jsonl) as f:
        for n, line in enumerate(f, 1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"{args.jsonl}:{n}: not JSON ({e})")
    if not rows:
        sys.exit(f"{args.jsonl}: no measurements")
    keep = [r for r in rows if r["kind"] == "keep"]
    blind = [r for r in rows if r["kind"] == "blind"]
    groups = [("trace texts", lambda r: r["content"] not in ("random", "sampled")),
              ("random + sampled", lambda r: r["content"] in ("random", "sampled"))]
    for title, sel_all, features in (("keep", keep, FEATURES), ("blind", blind, BLIND_FEATURES)):
        print(f"{title}: spread of log(KL / feature) (sd; the typical miss is exp of it)")
        print(f"  {'feature':44s}" + "".join(f"{g:>20s}" for g, _ in groups))
        for name, feature in features.items():
            cells = []
            for _, member in groups:
                sel = [r for r in sel_all if member(r)]
                cells.append(f"{spread(sel, feature):.2f} (n {len(sel)})" if sel else "-")
            print(f"  {name:44s}" + "".join(f"{c:>20s}" for c in cells))
        print()
    print("the exponents: slope of log(KL / feature) on log(s) and on log(ckl), every kind of content together")
    for name, sel, feature in (("keep (f*w)", keep, lambda r: r["f"] * r["w"]), ("blind (w)", blind, lambda r: r["w"])):
        y = np.log(np.maximum([r["kl"] for r in sel], 1e-12)) - np.log(np.maximum([feature(r) for r in sel], 1e-15))
        slopes = [float(np.polyfit(np.log(np.maximum([r[key] for r in sel], 1e-12)), y, 1)[0]) for key in ("sens", "ckl")]
        print(f"  {name:12s} on s {slopes[0]:.2f}, on ckl {slopes[1]:.2f} (n {len(sel)})")
    print("\nper kind of content: least-squares coefficient through the origin, mean sensitivity, and the")
    print("default model's bias on whole windows (geometric mean of predicted / measured, all survivors kept)")
    print(f"  {'content':16s}{'keep coef (f*w)':>17s}{'blind coef (w)':>16s}{'mean s':>10s}{'mean ckl':>10s}"
          f"{'window bias':>13s}")
    for content in sorted({r["content"] for r in rows}):
        k = [r for r in keep if r["content"] == content]
        b = [r for r in blind if r["content"] == content]
        whole = [r for r in rows if r["kind"] == "keep_all" and r["content"] == content and r["kl"] > 0]

        def coef(sel, feature):
            x = np.array([feature(r) for r in sel])
            y = np.array([r["kl"] for r in sel])
            return float((x * y).sum() / (x * x).sum()) if sel else math.nan

        bias = math.exp(np.mean([math.log(r["predicted"] / r["kl"]) for r in whole])) if whole else math.nan
        print(f"  {content:16s}{coef(k, lambda r: r['f'] * r['w']):17.4f}{coef(b, lambda r: r['w']):16.4f}"
              f"{np.mean([r['sens'] for r in b]):10.2e}{np.mean([r['ckl'] for r in b]):10.3f}{bias:13.2f}")


if __name__ == "__main__":
    main()
