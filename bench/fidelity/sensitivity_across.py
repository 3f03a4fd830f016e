#!/usr/bin/python3
"""Does the next-token KL scale with a chunk's sensitivity as the fidelity model's factor assumes, across models?

Reads `orbit replay --attribute --json` reports (a glob per model) and takes, from the blind baseline, every
instance served blind or kept over a context change, measured and predicted above zero. Those instances were
never formed in context, so their sensitivity is unknown to the planner and predicted at factor 1; their
measured KV change squared (`kv_change`², the deficit's share of the conditioned KV) is the sensitivity s the
factor would read. Per set it prints the median s and the geometric mean of measured / predicted, then the
slope of log(measured / predicted) on log s between the first two sets: how fast the loss at equal features
grows with s from one model to the other (the factor charges (s / s_ref)^e above the reference: e would match
it). It also prints, per set, the default policy's `loss_agreement` (predicted / measured, geometric mean).

    /usr/bin/python3 bench/fidelity/sensitivity_across.py 's260=OUT/attr/*-s260.json' 't656=OUT/attr/*-t656.json'
"""
import glob
import json
import math
import sys


def points(files, kind):
    out = []
    for path in files:
        with open(path) as f:
            report = json.load(f)
        blind = next(p for p in report["policies"] if p["policy"].startswith("blind"))
        for step in blind["steps"]:
            for i in step.get("instance_losses") or []:
                if i["served_as"] == kind and i["measured_kl"] > 1e-9 and i["predicted_kl"] > 0 and \
                        i.get("kv_change", 0) > 0:
                    out.append((math.log(i["kv_change"] ** 2), math.log(i["measured_kl"] / i["predicted_kl"])))
    return out


def default_agreement(files):
    agg = {}
    for path in files:
        with open(path) as f:
            report = json.load(f)
        default = next(p for p in report["policies"] if p["policy"].startswith("patch:16:kl="))
        for a in default["totals"].get("loss_agreement") or []:
            if a["bias"]:
                n, s = agg.get(a["served_as"], (0, 0.0))
                agg[a["served_as"]] = (n + a["compared"], s + a["compared"] * math.log(a["bias"]))
    return {k: (n, math.exp(s / n)) for k, (n, s) in agg.items() if n}


def main():
    sets = [a.split("=", 1) for a in sys.argv[1:]]
    if len(sets) < 2 or any(len(s) != 2 for s in sets):
        sys.exit(__doc__)
    means = {}
    for name, pattern in sets:
        files = sorted(glob.glob(pattern))
        for kind in ("blind", "kept over a context change"):
            pts = points(files, kind)
            if not pts:
                continue
            xs = sorted(x for x, _ in pts)
            mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
            means[(name, kind)] = (mx, my)
            print("%-8s blind policy, %-27s n %5d  median s %.3g  measured / predicted (geometric mean) %.3f" % (
                name, kind, len(pts), math.exp(xs[len(xs) // 2]), math.exp(my)))
        for kind, (n, bias) in sorted(default_agreement(files).items()):
            print("%-8s default policy, %-26s n %5d  predicted / measured (geometric mean) %.2f" % (
                name, kind, n, bias))
    (a, _), (b, _) = sets[0], sets[1]
    for kind in ("blind", "kept over a context change"):
        if (a, kind) in means and (b, kind) in means:
            (x1, y1), (x2, y2) = means[(a, kind)], means[(b, kind)]
            print("%s -> %s, %s: measured / predicted ~ s^%.2f at factor 1" % (a, b, kind, (y2 - y1) / (x2 - x1)))


if __name__ == "__main__":
    main()
