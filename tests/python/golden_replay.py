"""Golden replays: what `orbit replay --json` decides per step, reduced to the fields a planner change must
keep, and a comparison of two such records.

Kept exactly: every step's token counts (critical, the query's among them, background, heal, prepare, decode), patches formed and
hit, canonicals encoded, bytes moved, window tokens and bytes, status and the generated tokens: together
they pin down the action each plan chose. predicted_kl must agree to float32 rounding (PREDICTED_REL
relative): the patched policies predict it from a float32 SVD residual, and LAPACK's blocking (so the order of
its sums) depends on the CPU, so two machines differ by ~1e-7 relative. The measured KL is a float32 forward's: it may move by rounding only, bounded as in
tests/cpp/float_tolerance.h (a logit drift of delta moves a KL by at most 2·delta·sqrt(2·KL) + delta²).

    python3 tests/python/golden_replay.py record ORBIT MODEL OUT TRACE...   reduce replays into OUT/<trace>.json
    python3 tests/python/golden_replay.py compare DIR_A DIR_B               every difference, exit 1 if any
"""
import json
import math
import os
import subprocess
import sys
import tempfile

POLICIES = "default,patch:16,prefix,blind,cacheblend:0.3"
EXACT = ("op", "status", "critical_forward_tokens", "query_forward_tokens", "background_forward_tokens", "forward_tokens",
         "heal_forward_tokens", "prepare_forward_tokens", "decode_tokens", "patches_formed", "patch_hits",
         "canonicals_encoded", "bytes_moved", "window_tokens", "window_bytes", "generated")
# The logit drift two float32 runs of the bundled model may show (float_tolerance.h with its sizes: 5
# layers, reductions of at most 512, logits below 20).
LOGIT_DRIFT = 8 * 5 * math.sqrt(512) * 2.0 ** -24 * 20
# The relative rounding of a float32 quantity summed over at most 512 terms, with the same margin of 8.
PREDICTED_REL = 8 * math.sqrt(512) * 2.0 ** -24


def reduce_report(report):
    """The fields compared, per policy and step, from a replay's JSON."""
    out = {}
    for p in report["policies"]:
        steps = []
        for s in p["steps"]:
            r = {k: s.get(k) for k in EXACT}
            r["predicted_kl"] = s.get("predicted_kl")
            fid = s.get("fidelity")
            r["kl"] = fid["kl"] if fid else None
            r["top1"] = fid["top1"] if fid else None
            steps.append(r)
        out[p["policy"]] = steps
    return out


def replay(orbit, model, trace, policies=POLICIES):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "replay.json")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        subprocess.run([orbit, "replay", trace, "--model", model, "--policy", policies, "--json", path, "--quiet"],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        with open(path) as f:
            return reduce_report(json.load(f))


def kl_margin(kl):
    return 2 * LOGIT_DRIFT * math.sqrt(2 * max(kl, 0.0)) + LOGIT_DRIFT ** 2


def differences(a, b, name=""):
    """Every way two reduced replays differ, as readable lines (empty: they match)."""
    out = []
    if sorted(a) != sorted(b):
        return [f"{name}: policies differ: {sorted(a)} vs {sorted(b)}"]
    for policy in a:
        sa, sb = a[policy], b[policy]
        if len(sa) != len(sb):
            out.append(f"{name} {policy}: {len(sa)} vs {len(sb)} steps")
            continue
        for i, (x, y) in enumerate(zip(sa, sb)):
            where = f"{name} {policy} step {i} ({x['op']})"
            out += [f"{where}: {k} {x[k]} vs {y[k]}" for k in EXACT if x[k] != y[k]]
            px, py = x["predicted_kl"], y["predicted_kl"]
            if (px is None) != (py is None) or (px is not None and abs(px - py) > PREDICTED_REL * max(abs(px), abs(py))):
                out.append(f"{where}: predicted_kl {px} vs {py}")
            kx, ky = x["kl"], y["kl"]
            if (kx is None) != (ky is None) or (kx is not None and abs(kx - ky) > kl_margin(max(kx, ky))):
                out.append(f"{where}: kl {kx} vs {ky}")
    return out


def write(path, reduced):
    """One step per line: diffs of a regenerated record show the steps that changed."""
    with open(path, "w") as f:
        f.write("{\n")
        for n, (policy, steps) in enumerate(sorted(reduced.items())):
            f.write(f" {json.dumps(policy)}: [\n")
            f.write(",\n".join("  " + json.dumps(s, sort_keys=True, separators=(",", ":")) for s in steps))
            f.write("\n ]" + ("," if n + 1 < len(reduced) else "") + "\n")
        f.write("}\n")


def main(argv):
    if len(argv) >= 5 and argv[0] == "record":
        orbit, model, out = argv[1:4]
        os.makedirs(out, exist_ok=True)
        for trace in argv[4:]:
            name = os.path.basename(trace).split(".")[0]
            write(os.path.join(out, name + ".json"), replay(orbit, model, trace))
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        lines, compared = [], 0
        for fname in sorted(os.listdir(argv[1])):
            other = os.path.join(argv[2], fname)
            if not fname.endswith(".json") or not os.path.exists(other):
                continue
            with open(os.path.join(argv[1], fname)) as f, open(other) as g:
                a, b = json.load(f), json.load(g)
            a = reduce_report(a) if "policies" in a else a
            b = reduce_report(b) if "policies" in b else b
            lines += differences(a, b, fname)
            compared += sum(len(v) for v in a.values())
        print("\n".join(lines) if lines else f"all {compared} policy-steps match")
        return 1 if lines else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
