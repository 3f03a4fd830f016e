#!/usr/bin/python3
"""What the default policy's forwards on the critical path buy, by serving action and reason.

Reads the text `orbit replay TRACE --policy default --explain` prints (one file per trace) and sums, over
the default policy's plans only (the `[patch:16:kl=...]` blocks; the baselines' are skipped), the forward
tokens of every instance line by its action (form, prefill, first-k, ...) and the reason the line gives:
first sight, a chunk inserted before it, one evicted before it, an earlier edit, a recall, a reorder. It
also prints the measured sensitivities (`(sensitivity S)`) of the kept instances the plans show, the s the
fidelity model's sensitivity factor reads.

    for t in OUT/real-t656/*.json; do OMP_NUM_THREADS=1 build/cli/orbit replay $t --model models/tinystories-656k \\
        --policy default --explain --no-fidelity --quiet > OUT/expl/t656-$(basename $t .json).txt; done
    /usr/bin/python3 bench/replay/repair_kinds.py 'OUT/expl/s260-*' 'OUT/expl/t656-*'     # one glob per set
"""
import collections
import glob
import re
import sys


def classify(line):
    m = re.match(r"\s+#\d+ (\S+) @\d+: (.*)", line)
    if not m:
        return None
    rest = m.group(2)
    action = rest.split(",")[0].split(" ")[0]
    fwd = re.search(r"([0-9.]+) fwd", rest)
    why = "first sight"
    for key, name in (("recall", "recall"), ("inserted before it", "insert before"), ("evicted", "evicted before"),
                      ("earlier edit", "earlier edit"), ("moved", "reorder"), ("reorder", "reorder")):
        if key in rest:
            why = name
            break
    sens = re.search(r"sensitivity ([0-9.e+-]+)", rest)
    return action, why, float(fwd.group(1)) if fwd else 0.0, float(sens.group(1)) if sens else None


def tally(pattern):
    tokens, count, sens = collections.Counter(), collections.Counter(), []
    for path in sorted(glob.glob(pattern)):
        in_default = False
        with open(path) as f:
            for line in f:
                if line.startswith("       ["):
                    in_default = line.startswith("       [patch:16:kl=")
                    continue
                got = classify(line) if in_default else None
                if not got:
                    continue
                action, why, fwd, s = got
                if fwd:
                    tokens[(action, why)] += fwd
                    count[(action, why)] += 1
                if s is not None:
                    sens.append(s)
    return tokens, count, sorted(sens)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for pattern in sys.argv[1:]:
        tokens, count, sens = tally(pattern)
        print("%s: %d forward tokens in the default's plans" % (pattern, sum(tokens.values())))
        for (action, why), v in tokens.most_common():
            print("  %-10s %-16s %7d tokens  %5d instances" % (action, why, v, count[(action, why)]))
        if sens:
            print("  sensitivity of the kept instances shown: n %d, p10 %.3g, median %.3g, p90 %.3g" % (
                len(sens), sens[len(sens) // 10], sens[len(sens) // 2], sens[9 * len(sens) // 10]))


if __name__ == "__main__":
    main()
