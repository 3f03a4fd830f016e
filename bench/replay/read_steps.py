#!/usr/bin/env python3
"""The reads of `orbit replay --json` results, beside all probed steps, per policy.

For each policy (baselines left out), over every replay JSON given: the probed steps within the per-step
budget; the generate steps' (the reads') within count, mean and max KL; critical forward tokens, of which
the reads' query forwards (`query_forward_tokens`), against the radix cache's (`radix_tokens`, one yardstick per
trace for every policy: bench/replay/yardstick.py). A replay
measures every step after its operation, so an edit step shows the window as the edit left it; a generate
step shows it after the read's own plan (WindowPolicy::read_attention_weight), hence the reads' cells.

    /usr/bin/python3 bench/replay/read_steps.py 'OUT/heldout/*.replay.json' [--budget 0.003]
"""
import argparse
import collections
import glob
import json

from yardstick import neutral  # one prefix-cache yardstick per trace, whatever the policy (bench/replay/yardstick.py)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("patterns", nargs="+", help="replay JSON files or glob patterns")
    ap.add_argument("--budget", type=float, default=0.003)
    args = ap.parse_args()
    totals = collections.OrderedDict()
    files = sorted({f for p in args.patterns for f in glob.glob(p)})
    for f in files:
        with open(f) as fh:
            d = json.load(fh)
        if "policies" not in d:  # a trace, not a replay
            continue
        neutral(d)
        for p in d["policies"]:
            if p.get("baseline"):
                continue
            a = totals.setdefault(p["policy"], collections.Counter())
            a["radix"] += p["totals"].get("radix_tokens") or 0
            for s in p["steps"]:
                a["crit"] += s["critical_forward_tokens"]
                a["queries"] += s["query_forward_tokens"]
                fi = s.get("fidelity")
                if not fi:
                    continue
                a["probed"] += 1
                a["within"] += fi["kl"] <= args.budget
                if s["op"] == "generate":
                    a["reads"] += 1
                    a["reads_within"] += fi["kl"] <= args.budget
                    a["reads_kl"] += fi["kl"]
                    a["reads_max"] = max(a["reads_max"], fi["kl"])
    for name, a in totals.items():
        print(f"{name}: {a['within']}/{a['probed']} within; reads {a['reads_within']}/{a['reads']}, "
              f"mean KL {a['reads_kl'] / max(a['reads'], 1):.2e}, max {a['reads_max']:.2e}; "
              f"crit {a['crit']:.0f} (queries {a['queries']:.0f}) vs radix {a['radix']:.0f} "
              f"({a['crit'] / max(a['radix'], 1):.3f}x)")


if __name__ == "__main__":
    main()
