#!/usr/bin/env python3
"""Sums Nsight Compute's per-kernel durations by kernel name (run on the GPU machine).

    ncu --csv --metrics gpu__time_duration.sum ... > raw.csv
    python3 bench/gpu/ncu_summary.py raw.csv [--top 15]

Prints, per kernel name (templates shortened), the launches, the total and the share of the GPU time, so
a forward's time can be placed among its kernels (ncu serialises kernels: host overhead is not in it).
"""
import argparse
import collections
import csv
import re

UNITS = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0}


def short(name):
    name = re.sub(r"\(.*", "", name)  # drop the argument list
    name = re.sub(r"<.*>", "<>", name)  # and template arguments
    return name.split("::")[-1][:70]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    total = collections.Counter()
    count = collections.Counter()
    with open(a.csv, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]  # ncu's own ==PROF== lines are not CSV
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", "")) * UNITS.get(row["Metric Unit"], 1e-9)
        k = short(row["Kernel Name"])
        total[k] += value
        count[k] += 1
    all_s = sum(total.values())
    print(f"{sum(count.values())} kernels, {all_s * 1e3:.3f} ms of GPU time")
    for k, s in total.most_common(a.top):
        print(f"  {s * 1e3:9.3f} ms {100 * s / all_s:5.1f}%  {count[k]:5d}x  {k}")


if __name__ == "__main__":
    main()
