#!/usr/bin/python3
"""Where the default policy's critical tokens go: the blind floor, repairs over it, and queries.

Reads the replay JSON `heldout.py` (or `orbit replay --json`) wrote, one directory per set, and splits each
trace's critical-path forward tokens of the default policy (the `patch:16:kl=...` run) into
  floor    blind reuse's critical tokens less its queries: first sights and new turns, no repair at all
  repairs  the rest of the default's tokens less its queries: patch forming, re-prefills, heals the KL
           budget bought, paid at the step they ran on (listed per op)
  queries  the query tokens the default's model calls forwarded (`query_forward_tokens`)
each also as a ratio to the radix cache's tokens for the same reads (`radix_tokens`), as radix_report.py's
crit / radix. Per trace (the traces every directory holds, side by side), then per directory (all of its
traces), with measured / predicted KL over the default's probed steps with a prediction above 1e-6 (median,
90th percentile, steps above 1): how far the fidelity model that chose the repairs was off.

    /usr/bin/python3 bench/replay/crit_split.py out/heldout-s260 out/heldout-t656
"""
import argparse
import collections
import glob
import json
import os

from yardstick import neutral  # one prefix-cache yardstick per trace, whatever the policy (bench/replay/yardstick.py)

BUDGET = 0.003  # kDefaultKlBudget (sdk/include/orbit/policy.h)


def policy(report, prefix):
    return next(p for p in report["policies"] if p["policy"].startswith(prefix))


def split(report):
    d, b = policy(report, "patch:16:kl="), policy(report, "blind")
    t, bt = d["totals"], b["totals"]
    kls = [s["fidelity"]["kl"] for s in d["steps"] if s.get("fidelity")]
    ratios = [s["fidelity"]["kl"] / s["predicted_kl"] for s in d["steps"]
              if s.get("fidelity") and (s.get("predicted_kl") or 0) > 1e-6]
    floor = bt["critical_forward_tokens"] - bt["query_forward_tokens"]
    queries = t["query_forward_tokens"]
    by_op = collections.Counter()
    for sd, sb in zip(d["steps"], b["steps"]):
        by_op[sd["op"]] += (sd["critical_forward_tokens"] - sd["query_forward_tokens"]) - \
            (sb["critical_forward_tokens"] - sb["query_forward_tokens"])
    return dict(radix=t["radix_tokens"], crit=t["critical_forward_tokens"], floor=floor, queries=queries,
                repairs=t["critical_forward_tokens"] - queries - floor, probed=len(kls),
                within=sum(k <= BUDGET for k in kls), kl_sum=sum(kls), by_op=by_op, ratios=ratios)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="crit_split.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", metavar="DIR", help="a directory of *.replay.json (one per trace)")
    return ap.parse_args(argv)


def main():
    args = parse_args()
    sets = []
    for d in args.dirs:
        if not os.path.isdir(d):
            raise SystemExit("crit_split: DIR '%s' is not a directory" % d)
        files = sorted(glob.glob(os.path.join(d, "*.replay.json")))
        if not files:
            raise SystemExit("crit_split: no *.replay.json in directory '%s'" % d)
        sets.append({os.path.basename(f)[:-len(".replay.json")]: split(neutral(json.load(open(f)))) for f in files})
    names = sorted(set.intersection(*[set(s) for s in sets]))
    print("%-32s" % "trace" + "".join(" | %6s %6s %6s %6s %6s %6s" % ("radix", "crit", "floor", "repair", "query",
                                                                      "c/rdx") for _ in sets))
    for n in names:
        print("%-32s" % n + "".join(" | %6d %6d %6d %6d %6d %6.3f" % (
            s[n]["radix"], s[n]["crit"], s[n]["floor"], s[n]["repairs"], s[n]["queries"],
            s[n]["crit"] / max(1.0, s[n]["radix"])) for s in sets))
    for d, s in zip(args.dirs, sets):
        tot = collections.Counter()
        ops = collections.Counter()
        ratios = sorted(x for n in s for x in s[n]["ratios"])
        for n in s:
            for k in ("radix", "crit", "floor", "repairs", "queries", "probed", "within", "kl_sum"):
                tot[k] += s[n][k]
            ops.update(s[n]["by_op"])
        r = max(1.0, tot["radix"])
        print("%s (%d traces): radix %d, crit %d (%.3fx) = floor %d (%.3fx) + repairs %d (%.3fx) + queries %d "
              "(%.3fx); within %.0e on %d of %d probed steps, mean KL %.2e" % (
                  d, len(s), tot["radix"], tot["crit"], tot["crit"] / r, tot["floor"], tot["floor"] / r,
                  tot["repairs"], tot["repairs"] / r, tot["queries"], tot["queries"] / r, BUDGET, tot["within"],
                  tot["probed"], tot["kl_sum"] / max(1, tot["probed"])))
        print("  repairs by the op of the step that paid them:",
              ", ".join("%s %d" % (op, v) for op, v in ops.most_common() if v))
        if ratios:
            print("  measured / predicted KL, %d steps predicted above 1e-6: median %.3f, p90 %.2f, above 1 on %d" % (
                len(ratios), ratios[len(ratios) // 2], ratios[int(0.9 * len(ratios))], sum(x > 1 for x in ratios)))


if __name__ == "__main__":
    main()
