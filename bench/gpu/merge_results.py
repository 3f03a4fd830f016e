#!/usr/bin/env python3
"""Merges bench_gpu JSON files from separate runs into one, section by section, recording which run (commit
and command) each section came from. Later files replace the sections they hold.

    python3 bench/gpu/merge_results.py RUN1.json RUN2.json [...] -o bench/gpu/results/gpu.json

Ratios stay within a section, and a section comes whole from one run, so every ratio the report prints was
measured side by side in one process.
"""
import argparse
import json

SECTIONS = ("ttft", "slide", "prefill_decode", "device_bytes", "relocation", "recall")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args()
    merged, origin = {}, {}
    for path in args.runs:
        with open(path) as f:
            run = json.load(f)
        for key, value in run.items():
            if key in SECTIONS:
                merged[key] = value
                origin[key] = {"commit": run.get("commit", ""), "command": run.get("command", [])}
            elif key not in merged or key not in ("command", "commit"):
                merged[key] = value
    merged["commit"] = ", ".join(sorted({o["commit"] for o in origin.values() if o["commit"]}))
    merged["sections_from"] = origin
    with open(args.out, "w") as f:
        json.dump(merged, f, indent=2)
        f.write("\n")
    print(f"wrote {args.out}: " + ", ".join(f"{k} from {v['commit']}" for k, v in origin.items()))


if __name__ == "__main__":
    main()
