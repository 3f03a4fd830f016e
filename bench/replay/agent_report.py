#!/usr/bin/python3
"""Agent-trace report: every agent-pattern trace (and the older traces as regressions, and unseen traces
generated with seeds the project does not ship) replayed under the default policy and the comparison
policies, side by side in one `orbit replay` run per trace; writes bench/REPORT-agents.md and per-step
plots (critical-path forward tokens and KL per step, default vs prefix cache).

    /usr/bin/python3 bench/replay/agent_report.py [--orbit build/cli/orbit] [--model PATH] [--out bench]
                                                  [--traces NAME,...] [--quick]

Every number in the report is read from the replay JSON this script writes next to it
(bench/replay/agent-json/<trace>.json); the command for each is printed in the report.
"""
import argparse
import json
import os
import subprocess
import sys
import time

# Every preset defers repairs to the next read, the `prefix` baseline too (a request-driven prefix cache
# computes once per model call); the `:eager` pair shows what repairing at every edit costs. The default
# uses idle time (`:heal:prep=1:move=8`, Window::idle after every generate step); the same budget without it,
# with the heal alone, and without the prepared moves show what each part buys.
POLICIES = ["default", "patch:16:kl=0.003", "patch:16:kl=0.003:heal", "patch:16:kl=0.003:heal:prep=1", "patch:16",
            "patch:16:exact", "firstk:8", "cacheblend:0.3", "default:eager", "prefix:eager"]
# Rounds per replay: each step's time is the fastest of them (wall time on shared cores swings by tens of
# percent between runs; tokens and KL are the same in every round).
REPEAT = 3
# Looser fidelity budgets than the default's, for the frontier: what each trace could save at what loss.
BUDGETS = ["patch:16:kl=0.006:heal:prep=1:move=8", "patch:16:kl=0.012:heal:prep=1:move=8"]
# Tighter budgets, replayed only on the agent and unseen traces whose default misses top-1: what meeting it
# would cost there (one more replay, tokens and fidelity only, so one round).
TIGHT = ["patch:16:kl=0.002:heal:prep=1:move=8", "patch:16:kl=0.001:heal:prep=1:move=8",
         "patch:16:kl=0.0005:heal:prep=1:move=8"]
AGENT = ["agent_browse", "agent_coding", "agent_videoqa", "agent_fanout", "agent_rag"]
OLD = ["web", "video", "lookback", "agent", "story"]
# Unseen: generated here with seeds no shipped trace uses (shipped agent traces use seed 1). Seed 23 was
# added after the default policy's idle-time settings were chosen on the others: none of its traces informed
# a choice.
UNSEEN = [("browse", 7, 10), ("coding", 11, 10), ("rag", 5, 10), ("videoqa", 9, 10),
          ("browse", 23, 10), ("coding", 23, 10), ("rag", 23, 10), ("videoqa", 23, 10), ("fanout", 23, 3)]

TARGET_RATIO = 1.0 / 3.0
TARGET_KL = 1e-3
TARGET_TOP1 = 0.99


def meets_kl(t):
    return t["mean_kl"] is not None and t["mean_kl"] <= TARGET_KL


def meets_top1(t):
    return t["mean_top1"] is not None and t["mean_top1"] >= TARGET_TOP1


def run(cmd):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, env=dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1")))


def by_name(report):
    return {p["policy"]: p for p in report["policies"]}


def fmt_ratio(a, b):
    return "n/a" if not b else "%.3f" % (a / b)


def fmt_kl(x):
    return "n/a" if x is None else "%.1e" % x


def plot(report, default_name, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pol = by_name(report)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    for name, style in ((default_name, "-o"), ("prefix", "-s")):
        p = pol[name]
        xs = [s["index"] for s in p["steps"]]
        ax1.plot(xs, [s["critical_forward_tokens"] for s in p["steps"]], style, ms=3, label=name)
        kl = [(s["index"], max(s["fidelity"]["kl"], 1e-12)) for s in p["steps"] if s.get("fidelity")]
        ax2.semilogy([k for k, _ in kl], [v for _, v in kl], style, ms=3, label=name)
    d = pol[default_name]
    ax1.plot([s["index"] for s in d["steps"]], [s["background_forward_tokens"] for s in d["steps"]], ":", color="gray",
             label=default_name + " background (idle time)")
    pk = [(s["index"], s["predicted_kl"]) for s in d["steps"] if s.get("fidelity") and (s.get("predicted_kl") or 0) > 0]
    if pk:
        ax2.semilogy([k for k, _ in pk], [v for _, v in pk], ":", color="gray", label=default_name + " predicted")
    ax2.axhline(TARGET_KL, color="red", lw=0.8, ls="--", label="KL target")
    ax1.set_ylabel("fwd tokens")
    ax2.set_ylabel("KL vs re-prefill")
    ax2.set_xlabel("trace step")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    ax1.set_title(report["trace"])
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def why_missed(report, default_name):
    """Measured reasons a target is missed, from the replay itself."""
    pol = by_name(report)
    d, prefix, blind = pol[default_name], pol["prefix"], pol["blind"]
    td, tp, tb = d["totals"], prefix["totals"], blind["totals"]
    out = []
    r = td["critical_forward_tokens"] / tp["critical_forward_tokens"] if tp["critical_forward_tokens"] else 0
    if r > TARGET_RATIO:
        floor = tb["critical_forward_tokens"] / tp["critical_forward_tokens"]
        turn_tokens = sum(s["critical_forward_tokens"] for s in prefix["steps"] if s["op"] in ("turn", "generate"))
        first = sum(s["critical_forward_tokens"] for s in blind["steps"] if s["op"] in ("admit",))
        out.append(
            "cost %.2fx prefix: blind reuse (no repair at all) already costs %.2fx; live turns are %.0f of the "
            "prefix cache's %.0f critical tokens and first sights %.0f, which every policy pays"
            % (r, floor, turn_tokens, tp["critical_forward_tokens"], first))
        # What the default pays above blind reuse, by operation: the repairs its KL budget buys.
        extra = {}
        for a, b in zip(d["steps"], blind["steps"]):
            extra[a["op"]] = extra.get(a["op"], 0) + a["critical_forward_tokens"] - b["critical_forward_tokens"]
        paid = sorted(((op, x) for op, x in extra.items() if x > 0), key=lambda x: -x[1])
        if paid:
            out.append("against blind reuse: %+.0f critical tokens in all; where it pays more, for the repairs its KL "
                       "budget buys: %s" % (td["critical_forward_tokens"] - tb["critical_forward_tokens"],
                                            ", ".join("%s %.0f" % x for x in paid)))
        over = [(a["index"], a["op"], a["critical_forward_tokens"], b["critical_forward_tokens"])
                for a, b in zip(d["steps"], prefix["steps"]) if a["critical_forward_tokens"] > b["critical_forward_tokens"]]
        over.sort(key=lambda x: x[3] - x[2])
        if over:
            out.append("steps where it pays more than the prefix cache (repairs the budget asked for): " + ", ".join(
                "%d %s (%.0f vs %.0f)" % x for x in over[:4]))
        else:
            out.append("no step costs more than the prefix cache's")
        plain = pol.get("patch:16")
        if plain is not None and plain["totals"]["mean_kl"] is not None:
            tp16 = plain["totals"]
            out.append("patch:16 (no budget: survivors kept, reorders and recalls served from patches or formed) costs "
                       "%.2fx at mean KL %.1e, top-1 %.3f"
                       % (tp16["critical_forward_tokens"] / tp["critical_forward_tokens"], tp16["mean_kl"], tp16["mean_top1"]))
    if td["mean_kl"] is not None and (td["mean_kl"] > TARGET_KL or (td["mean_top1"] or 0) < TARGET_TOP1):
        worst = sorted((s for s in d["steps"] if s.get("fidelity")), key=lambda s: -s["fidelity"]["kl"])[:3]
        out.append("fidelity: mean KL %.1e, top-1 %.3f; worst steps " % (td["mean_kl"], td["mean_top1"]) + ", ".join(
            "%d %s KL %.1e (predicted %s)" % (s["index"], s["op"], s["fidelity"]["kl"], fmt_kl(s.get("predicted_kl"))) for s in worst))
    if (td["mean_top1"] or 1) < TARGET_TOP1 and td.get("top1_rows"):
        missed = [s for s in d["steps"] if s.get("fidelity") and s["fidelity"]["top1_misses"] > 0]
        out.append("top-1: %d misses in %d probe rows, %d of them at the reference's near ties (its top two logits "
                   "within 0.1, so either token is nearly its choice; %d of the %d rows are such); misses at steps %s"
                   % (td["top1_misses"], td["top1_rows"], td["near_tie_misses"], td["near_tie_rows"], td["top1_rows"],
                      ", ".join("%d %s (%d)" % (s["index"], s["op"], s["fidelity"]["top1_misses"]) for s in missed)))
        rows = [m for s in missed for m in s["fidelity"].get("misses", [])]
        if rows:
            margins = sorted(m["margin"] for m in rows)
            kls = sorted(m["kl"] for m in rows)
            out.append("at the missed rows the reference preferred its own token to the window's pick by %.3f to %.3f "
                       "logits (median %.3f; a clear choice leads by a logit or more), and those rows' own KL was %.1e to "
                       "%.1e"
                       % (margins[0], margins[-1], margins[len(margins) // 2], kls[0], kls[-1]))
    if td["critical_seconds"] >= tp["critical_seconds"]:
        out.append("wall %.3f s vs prefix %.3f s (same run)" % (td["critical_seconds"], tp["critical_seconds"]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--orbit", default="build/cli/orbit")
    ap.add_argument("--model", default="models/stories260K/stories260K.bin")
    ap.add_argument("--out", default="bench")
    ap.add_argument("--traces", default="", help="comma-separated subset of trace names")
    ap.add_argument("--quick", action="store_true", help="agent traces only, no unseen or old traces")
    ap.add_argument("--orbit-note", default="", help="where the binary came from, for the report")
    ap.add_argument("--reuse", action="store_true", help="read a trace's replay JSON when it exists instead of replaying")
    ap.add_argument("--no-write", action="store_true", help="replay only; do not write the report (for parallel runs)")
    a = ap.parse_args()

    jdir = os.path.join(a.out, "replay", "agent-json")
    pdir = os.path.join(a.out, "replay", "agent-plots")
    os.makedirs(jdir, exist_ok=True)
    os.makedirs(pdir, exist_ok=True)
    traces = [(n, "tests/data/traces/%s.json" % n, "agent") for n in AGENT]
    if not a.quick:
        for kind, seed, steps in UNSEEN:
            name = "unseen_%s_seed%d" % (kind, seed)
            path = os.path.join(jdir, name + ".trace.json")
            if not (a.reuse and os.path.exists(path)):
                run([a.orbit, "make-trace", "--kind", kind, "--steps", str(steps), "--seed", str(seed), "--model", a.model, "--out", path])
            traces.append((name, path, "unseen"))
        traces += [(n, "tests/data/traces/%s.json" % n, "old") for n in OLD]
    if a.traces:
        keep = set(a.traces.split(","))
        traces = [t for t in traces if t[0] in keep]

    rows, notes, cmds, frontier, tight = [], [], [], [], []
    t0 = time.time()
    for name, path, group in traces:
        out = os.path.join(jdir, name + ".json")
        cmd = [a.orbit, "replay", path, "--model", a.model, "--policy", ",".join(POLICIES + BUDGETS),
               "--repeat", str(REPEAT), "--quiet", "--json", out]
        if not (a.reuse and os.path.exists(out)):
            run(cmd)
        cmds.append(" ".join(cmd))
        rep = json.load(open(out))
        pol = by_name(rep)
        default_name = rep["policies"][0]["policy"]  # the first asked: "default" resolves to its spec
        prefix = pol["prefix"]["totals"]
        for p in rep["policies"]:
            t = p["totals"]
            rows.append((group, name, p["policy"] + (" (default)" if p is rep["policies"][0] else ""),
                         fmt_ratio(t["critical_forward_tokens"], prefix["critical_forward_tokens"]),
                         fmt_ratio(t["forward_tokens"], prefix["forward_tokens"]),
                         fmt_ratio(t["critical_seconds"], prefix["critical_seconds"]),
                         fmt_kl(t["mean_kl"]), "n/a" if t["mean_top1"] is None else "%.3f" % t["mean_top1"],
                         "n/a" if not t.get("predicted_steps") else "%.2f / x%.1f" % (t["kl_prediction_bias"], t["kl_prediction_spread"])))
        png = os.path.join(pdir, name + ".png")
        plot(rep, default_name, png)
        d = pol[default_name]["totals"]
        ratio = d["critical_forward_tokens"] / prefix["critical_forward_tokens"]
        met = {
            "cost <= 1/3": ratio <= TARGET_RATIO,
            "KL <= 1e-3": meets_kl(d),
            "top-1 >= 0.99": meets_top1(d),
            "wall < prefix": d["critical_seconds"] < prefix["critical_seconds"],
            "not worse in both": not (d["critical_forward_tokens"] > prefix["critical_forward_tokens"] and (d["mean_kl"] or 0) > (prefix["mean_kl"] or 0)),
        }
        notes.append((group, name, default_name, ratio, d, met, why_missed(rep, default_name), png,
                      d["forward_tokens"] / prefix["forward_tokens"]))
        if group != "old" and not meets_top1(d):
            tout = os.path.join(jdir, name + ".tight.json")
            tcmd = [a.orbit, "replay", path, "--model", a.model, "--policy", ",".join(TIGHT), "--quiet", "--json", tout]
            if not (a.reuse and os.path.exists(tout)):
                run(tcmd)
            cmds.append(" ".join(tcmd))
            tpol = by_name(json.load(open(tout)))
            tprefix = tpol["prefix"]["totals"]["critical_forward_tokens"]
            for pname, t in [(default_name + " (default)", d)] + [(x, tpol[x]["totals"]) for x in TIGHT] + \
                    [("blind", tpol["blind"]["totals"])]:
                tight.append((name, pname, t["critical_forward_tokens"] / tprefix, t))
        if group != "old":
            cells, best = [], None
            for pname in [default_name] + BUDGETS + ["blind"]:
                t = pol[pname]["totals"]
                r = t["critical_forward_tokens"] / prefix["critical_forward_tokens"]
                ok = meets_kl(t) and meets_top1(t)
                cells.append("%.3f at %s%s" % (r, fmt_kl(t["mean_kl"]), "" if ok else " (**fails**)"))
                if ok and (best is None or r < best[1]):
                    best = (pname, r)
            frontier.append((group, name, cells, best))

    if a.no_write:
        return
    orbit_note = a.orbit_note or a.orbit
    md = ["# Agent traces: the default policy against the prefix cache", "",
          "Generated by `/usr/bin/python3 bench/replay/agent_report.py` (CPU, stories260K, OMP_NUM_THREADS=1; "
          "the replays may run in parallel processes with --no-write, then one pass with --reuse writes this). Each trace is one `orbit replay` run: every policy and the baselines "
          "(reprefill, prefix, blind) on its own engine, side by side, so wall-time ratios compare like with like; "
          "every policy is replayed %d times, interleaved, and each step's time is the fastest of them "
          "(`orbit replay --repeat %d`)." % (REPEAT, REPEAT), "",
          "Columns: critical-path forward tokens, all forward tokens (critical path and background: canonical "
          "encodes, patch forming, idle-time work) and critical-path wall time as ratios to the prefix cache "
          "(same run); mean KL(re-prefill || window) over the probe rows after each step; top-1 agreement; "
          "the fidelity model's agreement (geometric mean of predicted / measured KL, and the typical factor "
          "one step's prediction misses by, over steps where both exceed 1e-7).", "",
          "Every preset defers the repairs an edit (evict, slide, reorder) would do to the next read or "
          "forwarding operation (`WindowPolicy::defer_repairs`), the `prefix` baseline included: a "
          "request-driven prefix cache (vLLM, SGLang) computes once per model call, from the first token that "
          "differs, whatever the agent edited in between. `prefix:eager` and `default:eager` (the default "
          "policy repairing at every edit) show what eager repair costs; against `prefix:eager` every ratio "
          "here would look better than it is. A step that leaves repairs deferred is not probed (no read sees "
          "that state); the step that runs them is, and pays for them.", "",
          "Idle time: an agent waits after every model call while the tool it asked for runs. The default "
          "policy spends that wait (`Window::idle`, which `orbit replay` calls after every generate step, after "
          "the step's probe) healing the window (`Window::heal`: a prefill from the first approximate instance, "
          "so what one step's budget approximated does not outlive the next wait; only when the window's "
          "predicted KL is at least a tenth of the budget), preparing the recall of "
          "the chunk evicted last (`Window::prepare_recalls`: its patch formed behind the window as it is, so a "
          "recall to the tail forwards nothing on the critical path) and, in a window that has reordered, "
          "preparing moves of up to 8 chunks behind the others (`Window::prepare_moves`: what an agent that "
          "attends by moving a chunk last then reads from a stored patch). That work is background: it is in the "
          "all-tokens column, not in the critical-path one. `patch:16:kl=0.003` is the same budget without idle "
          "time, `patch:16:kl=0.003:heal` with the heal alone, `patch:16:kl=0.003:heal:prep=1` without the "
          "prepared moves.", "",
          "Targets (default policy): critical tokens <= 1/3 of prefix, mean KL <= 1e-3, top-1 >= 0.99, "
          "critical wall below prefix, never worse than prefix in cost and fidelity at once.", "",
          "## Targets, default policy", "",
          "| group | trace | default | crit tokens vs prefix | all tokens vs prefix | mean KL | top-1 | " +
          " | ".join(notes[0][5].keys()) + " |",
          "|---|---|---|---|---|---|---|" + "---|" * len(notes[0][5])]
    for group, name, dn, ratio, d, met, _, _, all_ratio in notes:
        md.append("| %s | %s | %s | %.3f | %.2f | %s | %s | %s |" % (group, name, dn, ratio, all_ratio, fmt_kl(d["mean_kl"]),
                  "n/a" if d["mean_top1"] is None else "%.3f" % d["mean_top1"], " | ".join("yes" if v else "**no**" for v in met.values())))
    md += ["", "Targets met, default policy, by group: " + "; ".join(
        "%s: %s" % (g, ", ".join("%s %d/%d" % (k, sum(1 for n in notes if n[0] == g and n[5][k]), sum(1 for n in notes if n[0] == g))
                                 for k in notes[0][5]))
        for g in ("agent", "unseen", "old") if any(n[0] == g for n in notes)) + ".", "",
           "The fidelity model (planner/fidelity_model.h) predicts a window's KL from per-instance features "
           "(recency weight, the local change of a kept instance's context, the serving action's loss, and "
           "the chunk's sensitivity to its context, measured when its patch is formed); "
           "the pred/meas column is its geometric-mean bias over the steps that lose fidelity, the miss "
           "factor how far a single step's prediction typically is. A bias > 1 means the budget spends "
           "tokens on repairs the measurement shows were not needed."]
    md += ["", "## The budget frontier", "",
           "Critical tokens vs the prefix cache at mean KL, for the default's budget, looser ones, and blind "
           "reuse (no budget); a cell fails when mean KL > 1e-3 or top-1 < 0.99. The last column is the "
           "cheapest of them that meets both. One budget serves every trace only as far as the fidelity model "
           "ranks their losses right: its predictions run high on some traces and low on others (pred/meas "
           "below), so the budget that keeps agent_coding within 1e-3 leaves the others short of their "
           "frontier.", "",
           "| group | trace | " + " | ".join([notes[0][2] + " (default)"] + BUDGETS + ["blind"]) + " | cheapest meeting KL and top-1 |",
           "|---|---|" + "---|" * (len(BUDGETS) + 3)]
    for group, name, cells, best in frontier:
        md.append("| %s | %s | %s | %s |" % (group, name, " | ".join(cells),
                  "none" if best is None else "%s: %.3f" % (best[0], best[1])))
    if tight:
        md += ["", "## What top-1 >= 0.99 would cost where the default misses it", "",
               "The agent and unseen traces whose default misses top-1, replayed again under tighter budgets "
               "(one `orbit replay` run each, beside its own baselines). Misses counts the probe rows whose "
               "top-1 differs, and of them those at the reference's near ties.", "",
               "| trace | policy | crit tokens vs prefix | mean KL | top-1 | misses (near ties) / rows | "
               "meets cost and top-1 |", "|---|---|---|---|---|---|---|"]
        for name, pname, r, t in tight:
            md.append("| %s | %s | %.3f | %s | %.3f | %d (%d) / %d | %s |" % (
                name, pname, r, fmt_kl(t["mean_kl"]), t["mean_top1"], t["top1_misses"], t["near_tie_misses"],
                t["top1_rows"], "yes" if r <= TARGET_RATIO and meets_top1(t) and meets_kl(t) else "no"))
    md += ["", "## Every trace and policy", "",
           "| group | trace | policy | crit tokens vs prefix | all tokens vs prefix | crit wall vs prefix | mean KL | top-1 | pred/meas, miss |",
           "|---|---|---|---|---|---|---|---|---|"]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    md += ["", "## Where a target is missed, and why (measured)", "",
           "Between blind reuse and the default lie the repairs the KL budget buys on the critical path "
           "(re-forming survivors whose context changed, recalls no prepared patch serves). Blind reuse is the "
           "floor of what any repair policy pays there: first sights and live turns; where it is above 1/3 of "
           "the prefix cache's, no policy meets the cost target on that trace. The budget (kl=0.003 for a 1e-3 target) is three times the "
           "target because the fidelity model's prediction for one instance is off by a factor of ~6.7 either "
           "way: `orbit replay --attribute` measures each instance's own loss, and a model that merely predicted "
           "lower picks the instances it under-states (bench/fidelity/README.md, \"Each instance's own loss\")."
           " A top-1 miss at a mean KL within the target comes from a few probe rows that flip, mostly at "
           "the reference's near ties (its top two logits within 0.1: either token is nearly its choice); each "
           "such trace below counts them. A chunk moved behind antecedents it never saw is priced by what it "
           "passed and its move prepared in idle time; how that was measured against the other repairs is in "
           "bench/fidelity/README.md (\"A chunk moved behind new antecedents\").",
           ""]
    for group, name, dn, ratio, d, met, why, _, _ in notes:
        if all(met.values()):
            continue
        md.append("- **%s** (%s): missed %s." % (name, group, ", ".join(k for k, v in met.items() if not v)))
        md += ["  - " + w for w in why]
    md += ["", "## Per-step plots (default vs prefix cache)", ""]
    for group, name, dn, ratio, d, met, why, png, _ in notes:
        md.append("### %s\n\n![%s](%s)\n" % (name, name, os.path.relpath(png, a.out)))
    md += ["## Commands", "", "The orbit binary (`--orbit`, default build/cli/orbit): " + orbit_note, "", "```"] + cmds + ["```", ""]
    with open(os.path.join(a.out, "REPORT-agents.md"), "w") as f:
        f.write("\n".join(md))
    print("wrote", os.path.join(a.out, "REPORT-agents.md"), file=sys.stderr)


if __name__ == "__main__":
    main()
