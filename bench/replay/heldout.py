#!/usr/bin/env python3
"""Does the default policy's fidelity budget hold on traces nobody tuned it on?

Generates agent traces with `orbit make-trace` for seeds the shipped traces do not use (or takes trace
files given with --traces), replays each under the given policies with `orbit replay --json`, and prints per
trace and policy: the probed steps, how many of them kept the measured KL(re-prefill || window) within the
policy's per-step budget, mean and max KL, top-1, and critical-path forward tokens against the radix cache
(the yardstick replay runs beside every policy). The last lines pool every probed step.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/replay/heldout.py                    # 5 kinds x seeds 101..103
    /usr/bin/python3 bench/replay/heldout.py --kinds coding,rag --seeds 201,202 --policy default,patch:16:kl=0.003:heal
    /usr/bin/python3 bench/replay/heldout.py --traces out/real-traces/*.json --jobs 2
    /usr/bin/python3 bench/replay/heldout.py --model models/tinystories-656k --calibrate-fidelity   # its own fit

Not a test: it states what the budget does where it was not fitted. Replay JSON goes to --out.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys

from yardstick import neutral  # one prefix-cache yardstick per trace, whatever the policy (bench/replay/yardstick.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_BUDGET = 0.003  # kDefaultKlBudget (sdk/include/orbit/policy.h): the default policy's per-step budget


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--orbit", default=os.environ.get("ORBIT_CLI", os.path.join(ROOT, "build/cli/orbit")))
    ap.add_argument("--model", default=os.path.join(ROOT, "models/stories260K/stories260K.bin"))
    ap.add_argument("--kinds", default="browse,coding,videoqa,fanout,rag")
    ap.add_argument("--seeds", default="101,102,103")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--sample-text", action="store_true", help="make-trace --sample-text (kinds web and agent only)")
    ap.add_argument("--traces", nargs="*", default=None, help="trace files to replay instead of generating")
    ap.add_argument("--policy", default="default")
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET, help="per-step KL budget to test against")
    ap.add_argument("--out", default=os.path.join(ROOT, "out/heldout"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--reuse", action="store_true", help="read existing replay JSON instead of replaying")
    ap.add_argument("--calibrate-fidelity", action="store_true",
                    help="orbit replay --calibrate-fidelity: each engine fits its fidelity model on this model first")
    return ap.parse_args()


def run(cmd):
    env = dict(os.environ, OMP_NUM_THREADS="1")  # the replays run side by side, one core each
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if r.returncode != 0:
        sys.exit("command failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stderr[-2000:]))


def make_traces(a):
    paths = []
    for kind in a.kinds.split(","):
        for seed in a.seeds.split(","):
            fanout = kind == "fanout"  # fan-out rounds are long: the shipped one has 3
            tag = "_text" if a.sample_text else ""
            path = os.path.join(a.out, "%s%s_seed%s.json" % (kind, tag, seed))
            if not (a.reuse and os.path.exists(path)):
                run([a.orbit, "make-trace", "--kind", kind, "--steps", str(3 if fanout else a.steps), "--seed", seed,
                     "--model", a.model, "--out", path] + (["--sample-text"] if a.sample_text else []))
            paths.append(path)
    return paths


def replay(a, trace):
    name = os.path.splitext(os.path.basename(trace))[0]
    out = os.path.join(a.out, name + ".replay.json")
    if not (a.reuse and os.path.exists(out)):
        run([a.orbit, "replay", trace, "--model", a.model, "--policy", a.policy, "--json", out, "--quiet"] +
            (["--calibrate-fidelity"] if a.calibrate_fidelity else []))
    with open(out) as f:
        return name, neutral(json.load(f))


def summarize(report, budget):
    rows = {}
    for pol in report["policies"]:
        if pol.get("baseline"):
            continue
        kls = [s["fidelity"]["kl"] for s in pol["steps"] if s.get("fidelity")]
        t = pol["totals"]
        rows[pol["policy"]] = dict(
            probed=len(kls), within=sum(1 for k in kls if k <= budget), kls=kls, top1=t["mean_top1"],
            crit=t["critical_forward_tokens"], all=t["forward_tokens"], radix=t["radix_tokens"],
            checks=t.get("fidelity_checks", 0), correction=t.get("fidelity_correction", 1.0))
    return rows


def main():
    a = parse_args()
    os.makedirs(a.out, exist_ok=True)
    traces = a.traces if a.traces else make_traces(a)
    # Each report is <out>/<trace's name>.replay.json: two traces of one name (from two directories) would
    # share it, one's numbers printed for both (and, replayed side by side, written at once).
    named = {}
    for trace in traces:
        name = os.path.splitext(os.path.basename(trace))[0]
        if name in named:
            sys.exit("--traces: %s and %s have the same name %r: their reports would share %s; rename one" %
                     (named[name], trace, name, os.path.join(a.out, name + ".replay.json")))
        named[name] = trace
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        reports = list(pool.map(lambda t: replay(a, t), traces))
    pooled = {}
    print("%-24s %-44s %6s %8s %9s %9s %6s %9s" % ("trace", "policy", "probed", "within", "mean KL", "max KL",
                                                   "top-1", "crit/radix"))
    for name, report in reports:
        for pol, r in summarize(report, a.budget).items():
            p = pooled.setdefault(pol, dict(probed=0, within=0, kls=[], crit=0, radix=0, all=0))
            for k in ("probed", "within", "crit", "radix", "all"):
                p[k] += r[k]
            p["kls"] += r["kls"]
            mean = sum(r["kls"]) / max(1, len(r["kls"]))
            print("%-24s %-44s %6d %8d %9.2e %9.2e %6.3f %9.3f" % (
                name, pol, r["probed"], r["within"], mean, max(r["kls"] or [0]), r["top1"],
                r["crit"] / max(1.0, r["radix"])))
    for pol, p in pooled.items():
        mean = sum(p["kls"]) / max(1, len(p["kls"]))
        print("all %d traces, %s: %d of %d probed steps within %.0e (%.1f%%), mean KL %.2e, crit %d vs radix %d "
              "(%.3fx), all %d" % (len(reports), pol, p["within"], p["probed"], a.budget,
                                   100.0 * p["within"] / max(1, p["probed"]), mean, p["crit"], p["radix"],
                                   p["crit"] / max(1.0, p["radix"]), p["all"]))


if __name__ == "__main__":
    main()
