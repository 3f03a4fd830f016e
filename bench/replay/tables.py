#!/usr/bin/python3
"""Replay tables: every shipped trace under the default policy, patch:16, patch:16:exact and the three
baselines (reprefill, prefix, blind), one `orbit replay` run per trace, written to bench/replay/TABLES.md.

    /usr/bin/python3 bench/replay/tables.py [--orbit build/cli/orbit] [--model PATH] [--traces NAME|PATH,...]
                                            [--out bench/replay/TABLES.md] [--json-dir DIR] [--reuse]
                                            [--sweep 0.001,0.003,0.01,0.03]

Per trace and policy the table gives forward tokens (all, and on the critical path), the radix cache's
tokens for the same reads (the yardstick `orbit replay` runs beside every policy: SGLang's semantics, token
granular, each read's window, query and generated tokens held; `totals.radix_tokens`), the critical-path and
all forward tokens as ratios to it, the critical-path tokens as ratios to re-prefill's (the `reprefill`
policy: every instance whose context changed is prefilled again) and to no cache, the critical-path wall
time, mean KL(re-prefill || window) over the probe rows after each step, and mean top-1 agreement. Above the
per-trace tables: the agent-pattern traces under a sweep of per-step KL budgets (the default policy against
its targets: bench/REPORT-agents.md, from bench/replay/agent_report.py). The policies of one trace run side
by side in one process, each on its own engine, so time ratios compare like with like; absolute times
depend on the machine. Every number is read from the replay JSON written next to the table (--json-dir); the
command that produced the table and each replay command are at its top.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys

from yardstick import neutral  # one prefix-cache yardstick per trace, whatever the policy (bench/replay/yardstick.py)

# `prefix` (like every preset) defers repairs to the next read, as a request-driven prefix cache computes
# once per model call; `prefix:eager` and `default:eager` repair at every edit.
POLICIES = ["default", "patch:16", "patch:16:exact", "reprefill", "prefix", "blind", "default:eager", "prefix:eager"]
# The shipped traces: the token-id regression workloads, then the text traces (story-like text).
TRACES = ["web", "video", "lookback", "agent", "story",
          "agent_browse", "agent_coding", "agent_videoqa", "agent_fanout", "agent_rag"]
TRACE_DIR = "tests/data/traces"
# The KL-budget sweep: the agent-pattern traces under patch:16 at each per-step budget (the default's among
# them), so a reader sees the cost/fidelity frontier the default sits on.
SWEEP_TRACES = ["agent_browse", "agent_coding", "agent_videoqa", "agent_fanout", "agent_rag"]
SWEEP_BUDGETS = ["0.001", "0.003", "0.01", "0.03"]
# The sweep's policies use idle time as the default policy does (Window::idle after every generate step).
SWEEP_IDLE = ":heal:prep=1:move=8"


def trace_path(name):
    """A shipped trace's name (tests/data/traces/NAME.json) or a path to any trace file."""
    if os.path.sep in name or name.endswith(".json"):
        if not os.path.isfile(name):
            raise SystemExit("tables.py: --traces: no trace file '%s'" % name)
        return os.path.splitext(os.path.basename(name))[0], name
    path = os.path.join(TRACE_DIR, name + ".json")
    if not os.path.isfile(path):
        raise SystemExit("tables.py: --traces: '%s' is not a shipped trace (%s)" % (name, path))
    return name, path


def replay(orbit, model, path, policies, out):
    cmd = [orbit, "replay", path, "--model", model, "--policy", ",".join(policies), "--quiet", "--json", out]
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)  # the JSON is the result
    return cmd


def ratio(a, b):
    """a / b; a zero denominator is 1 when the numerator is zero too, else undefined."""
    if b == 0:
        return 1.0 if a == 0 else None
    return a / b


def rows(report, default_first=True):
    """One row per policy: the numbers the table shows, keyed. default_first: the first policy asked for was
    'default' (the report names it by its spec, e.g. patch:16:kl=0.003), so its row says so."""
    by_name = {p["policy"]: p for p in report["policies"]}
    if "reprefill" not in by_name:
        raise ValueError("replay report of '%s' has no 'reprefill' policy" % report["trace"])
    reprefill = by_name["reprefill"]["totals"]
    out = []
    for i, p in enumerate(report["policies"]):
        t = p["totals"]
        if "radix_tokens" not in t:
            raise ValueError("replay report of '%s' has no radix yardstick (an older orbit?)" % report["trace"])
        out.append({
            "policy": p["policy"] + (" (default)" if i == 0 and default_first else ""),
            "forward_tokens": t["forward_tokens"],
            "critical_forward_tokens": t["critical_forward_tokens"],
            # The trace's one yardstick (yardstick.neutral): the radix cache over the run that cost it least,
            # the same for every policy (this policy's own reads differ where a `place` step's order is its own).
            "radix_tokens": t["radix_tokens"],
            "x_radix": ratio(t["critical_forward_tokens"], t["radix_tokens"]),
            "all_x_radix": ratio(t["forward_tokens"], t["radix_tokens"]),
            "x_reprefill": ratio(t["critical_forward_tokens"], reprefill["critical_forward_tokens"]),
            "x_no_cache": ratio(t["critical_forward_tokens"], t["full_prefill_tokens"]),
            "critical_seconds": t["critical_seconds"],
            "mean_kl": t["mean_kl"],
            "mean_top1": t["mean_top1"],
        })
    return out


def fmt(x, spec):
    return "n/a" if x is None else spec % x


def table(report, default_first=True):
    head = ("| policy | fwd tokens | critical fwd tokens | radix tokens | critical × radix | all × radix "
            "| critical × re-prefill | critical × no cache | critical wall ms | mean KL (nats) | top-1 |")
    md = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows(report, default_first):
        md.append("| %s | %.0f | %.0f | %.0f | %s | %s | %s | %s | %.1f | %s | %s |" % (
            r["policy"], r["forward_tokens"], r["critical_forward_tokens"], r["radix_tokens"],
            fmt(r["x_radix"], "%.3f"), fmt(r["all_x_radix"], "%.2f"), fmt(r["x_reprefill"], "%.3f"),
            fmt(r["x_no_cache"], "%.3f"), 1e3 * r["critical_seconds"],
            fmt(r["mean_kl"], "%.2e"), fmt(r["mean_top1"], "%.3f")))
    return md


def parse_default_budget(reports):
    """The default policy's budget as its name in a report says (patch:16:kl=0.003 -> 0.003), or 'n/a'."""
    for _, report in reports:
        name = report["policies"][0]["policy"]
        if ":kl=" in name:
            return name.split(":kl=")[1].split(":")[0]
    return "n/a"


def totals(report, policy):
    for p in report["policies"]:
        if p["policy"] == policy:
            return p["totals"]
    raise ValueError("replay report of '%s' has no '%s' policy" % (report["trace"], policy))


def sweep_table(reports, budgets):
    head = "| trace | " + " | ".join("`kl=%s`" % b for b in budgets) + " | `blind` |"
    md = [head, "|---|" + "---|" * (len(budgets) + 1)]
    for name, report in reports:
        cells = []
        for policy in ["patch:16:kl=%s%s" % (b, SWEEP_IDLE) for b in budgets] + ["blind"]:
            t = totals(report, policy)
            cells.append("%s · %s · %s" % (fmt(ratio(t["critical_forward_tokens"], t["radix_tokens"]), "%.2f×"),
                                           fmt(t["mean_kl"], "%.1e"), fmt(t["mean_top1"], "%.3f")))
        md.append("| %s | %s |" % (name, " | ".join(cells)))
    return md


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--orbit", default="build/cli/orbit", help="the orbit executable")
    ap.add_argument("--model", default="models/stories260K/stories260K.bin")
    ap.add_argument("--traces", default=",".join(TRACES),
                    help="comma-separated shipped trace names or trace paths (default: every shipped trace)")
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help="comma-separated policies; the baselines reprefill, prefix and blind are always replayed")
    ap.add_argument("--out", default="bench/replay/TABLES.md", help="the Markdown file to write")
    ap.add_argument("--json-dir", default=None, help="where the replay reports go (default: tables-json/ beside --out)")
    ap.add_argument("--reuse", action="store_true", help="read a trace's replay JSON when it exists instead of replaying")
    ap.add_argument("--sweep", default=",".join(SWEEP_BUDGETS),
                    help="comma-separated per-step KL budgets replayed on the agent-pattern traces ('' skips)")
    a = ap.parse_args(argv)

    if not os.path.isfile(a.orbit) or not os.access(a.orbit, os.X_OK):
        raise SystemExit("tables.py: --orbit '%s' is not an executable (build it: cmake --build build --target orbit)" % a.orbit)
    if not os.path.exists(a.model):
        raise SystemExit("tables.py: --model '%s' does not exist" % a.model)
    policies = [p for p in a.policies.split(",") if p]
    if not policies:
        raise SystemExit("tables.py: --policies is empty")
    traces = [trace_path(n) for n in a.traces.split(",") if n]
    if not traces:
        raise SystemExit("tables.py: --traces is empty")
    jdir = a.json_dir or os.path.join(os.path.dirname(a.out) or ".", "tables-json")
    os.makedirs(jdir, exist_ok=True)

    sections, cmds, agent_reports, by_trace = [], [], [], {}
    for name, path in traces:
        out = os.path.join(jdir, name + ".json")
        cmd = [a.orbit, "replay", path, "--model", a.model, "--policy", ",".join(policies), "--quiet", "--json", out]
        if not (a.reuse and os.path.exists(out)):
            cmd = replay(a.orbit, a.model, path, policies, out)
        cmds.append(" ".join(shlex.quote(c) for c in cmd))
        with open(out) as f:
            report = by_trace[name] = neutral(json.load(f))
        sections += ["## %s" % name, "",
                     "`%s`: %d steps; model fingerprint %s…" % (path, report["steps"], report["fingerprint"][:16]), ""]
        sections += table(report, policies[0] == "default") + [""]
        if name in SWEEP_TRACES and policies[0] == "default":
            agent_reports.append((name, report))

    budgets = [b for b in a.sweep.split(",") if b]
    for b in budgets:
        try:
            if not float(b) > 0:
                raise ValueError
        except ValueError:
            raise SystemExit("tables.py: --sweep: '%s' is not a KL budget > 0" % b)
    sweep_reports = []
    if budgets:
        for name, path in traces:
            if name not in SWEEP_TRACES:
                continue
            out = os.path.join(jdir, name + ".sweep.json")
            sweep_policies = ["patch:16:kl=%s%s" % (b, SWEEP_IDLE) for b in budgets]
            cmd = [a.orbit, "replay", path, "--model", a.model, "--policy", ",".join(sweep_policies), "--quiet",
                   "--json", out]
            if not (a.reuse and os.path.exists(out)):
                cmd = replay(a.orbit, a.model, path, sweep_policies, out)
            cmds.append(" ".join(shlex.quote(c) for c in cmd))
            with open(out) as f:
                sweep_reports.append((name, neutral(json.load(f), like=by_trace[name])))

    front = []
    if sweep_reports:
        front += ["## The KL budget: cost against fidelity", "",
                  "`patch:16` under each per-step KL budget (`:kl=X`; the default is `kl=%s`), with the default's "
                  "use of idle time (`%s`: heal, prepare a recall after every generate step), and blind reuse: "
                  "critical-path forward tokens × the radix cache's for the same reads · mean KL · top-1. A larger "
                  "budget lets the planner keep more survivors and reuse more patches over changed contexts. The default policy "
                  "against its targets: `bench/REPORT-agents.md`." % (
                      parse_default_budget(agent_reports), SWEEP_IDLE), ""]
        front += sweep_table(sweep_reports, budgets) + [""]
    sections = front + sections

    command = "OMP_NUM_THREADS=%s OPENBLAS_NUM_THREADS=%s /usr/bin/python3 bench/replay/tables.py %s" % (
        os.environ.get("OMP_NUM_THREADS", "1"), os.environ.get("OPENBLAS_NUM_THREADS", "1"),
        " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:])))
    md = ["# Replay tables: the shipped traces under each policy", "",
          "Generated by `%s`%s." % (command.rstrip(), " from the replay JSON the commands at the bottom wrote"
                                     if a.reuse else ""), "",
          "Each trace is one `orbit replay` run on %s: every policy on its own engine, side by side. "
          "Columns: forward tokens the window operations computed (all, and on the critical path: what a step "
          "waits for; canonicals and patches formed in the background are off it); the radix cache's tokens for "
          "the same reads (`radix tokens`: the yardstick `orbit replay` runs beside every policy, SGLang's "
          "semantics: token granular, each read's window, query and generated tokens held, bounded by the "
          "replay engine's KV pool; one per trace, the same for every policy: a policy's own reads differ from "
          "another's where the trace lets it choose, a `place` step's order or a generate whose answer is not "
          "appended, and the radix cache is given the run that cost it least, bench/replay/yardstick.py); "
          "critical-path and all "
          "forward tokens as ratios to it; critical-path forward tokens as ratios to re-prefill (`reprefill`: "
          "prefill every instance whose context changed, reuse nothing else) and to no cache at all (a full "
          "re-prefill of the window after every mutating step); `prefix` is a policy row, not a yardstick: orbit "
          "executing a radix cache on the same engine (re-prefill plus exact reuse of what was computed behind "
          "the same window); critical-path wall time of the window operations (fidelity forwards not timed; "
          "on a model this small per-call overhead dominates it, and on a shared machine it is noisy; the "
          "forward tokens are deterministic); mean over steps of KL(re-prefill || window) "
          "on the trace's probe, and mean top-1 agreement with the re-prefill. Every preset, `prefix` and "
          "`reprefill` included, defers the repairs an edit (evict, slide, reorder) would do to the next read "
          "or forwarding step, as a request-driven engine computes once per model call; the `:eager` rows "
          "repair at every edit. A step left with deferred repairs is not probed (no read sees it)."
          % os.path.basename(a.model), ""]
    md += sections
    md += ["## Replay commands", "", "```"] + cmds + ["```", ""]
    with open(a.out, "w") as f:
        f.write("\n".join(md))
    print("wrote", a.out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
