#!/usr/bin/python3
"""What serving a recalled chunk by the patch it had under another context loses, against forming it
again and serving it blind, and what the fidelity model predicts for it.

For each document of a text trace after the first (up to five): a window [system turn, documents, a
question turn] built under the default policy (every document formed in context, its patch stored), the
document evicted (its survivors' repairs flushed), then recalled at the window's end under one policy:
`default` (the budget decides), `blind` (the canonical relocated) and
`patch:16:stale=1.0` (the closest stale patch at any divergence). Each case runs on a fresh engine, so no
variant reuses a patch another formed. Prints the recall step's action, its predicted KL and divergence,
and the window's mean next-token KL against a re-prefill over the trace's probe.

    ORBIT_PYTHON_PATH=build/bindings/python /usr/bin/python3 bench/fidelity/stale_recall.py \\
        tests/data/traces/agent_fanout.json
"""
import argparse
import json
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.environ.get("ORBIT_PYTHON_PATH", os.path.join(REPO, "build", "bindings", "python")))
import orbit  # noqa: E402


def mean_kl(ref, got):
    lp = ref - ref.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    lq = got - got.max(-1, keepdims=True)
    lq -= np.log(np.exp(lq).sum(-1, keepdims=True))
    return float((np.exp(lp) * (lp - lq)).sum(-1).mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", help="an orbit-trace/1 text trace (chunks with 'text', a first 'turn', a probe)")
    ap.add_argument("--model", default=os.path.join(REPO, "models", "stories260K", "stories260K.bin"))
    ap.add_argument("--policies", default="default,blind,patch:16:stale=1.0")
    a = ap.parse_args()
    with open(a.trace) as f:
        trace = json.load(f)
    docs = [c for c in trace["chunks"] if "text" in c][:6]
    turns = [s for s in trace["steps"] if s["op"] == "turn" and "text" in s]
    if len(docs) < 2 or not turns or "text" not in trace.get("probe", {}):
        raise SystemExit("stale_recall.py: %s needs text chunks, a text turn and a text probe" % a.trace)
    kls = {}
    for x in range(1, len(docs)):
        for policy in a.policies.split(","):
            with orbit.Engine(a.model, background=orbit.BackgroundMode.inline) as e:
                chunks = [e.add_text(d["text"], label=d["name"]) for d in docs]
                w = e.new_window(policy="default")
                w.add_turn(e.tokenize(turns[0]["text"], bos=True))
                ids = [w.admit(c).added[0] for c in chunks]
                w.add_turn(e.tokenize("What happened next?", bos=False))
                w.evict(ids[x])
                w.flush()
                w.policy = policy
                plan = w.plan_recall(chunks[x])
                step = plan.steps[-1]
                report = w.apply(plan)
                probe = e.tokenize(trace["probe"]["text"], bos=False)
                kl = mean_kl(w.reference_logits(probe, all_rows=True), w.logits(probe, all_rows=True))
                kls.setdefault(policy, []).append(kl)
                print("%-6s %-20s %-13s fwd %5.1f  predicted %.2e  divergence %.2f  KL %.2e"
                      % (docs[x]["name"], policy, step.how, report.forward_tokens, step.predicted_kl,
                         step.divergence, kl))
    for policy, values in kls.items():
        print("%-20s geometric-mean KL %.2e" % (policy, float(np.exp(np.mean(np.log(np.maximum(values, 1e-12)))))))


if __name__ == "__main__":
    main()
