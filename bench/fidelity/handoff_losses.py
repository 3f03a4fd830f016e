#!/usr/bin/env python3
"""What the fidelity model predicts, and what is lost, when an agent's first turn changes mid-conversation.

Agent frameworks change the system turn while the history stays: a handoff to another agent (the Agents SDK's
handoffs bring other instructions and tools), tools added for a new phase of a task. Every later message is then
kept behind a changed prefix. For each seed a conversation (a system message, three user/assistant exchanges and
a question, made-up words) is synced on a fresh window (`background='inline'`), then synced again with its system
turn changed one way:

    sys_swap        another one-sentence system message (about as long)
    sys_longer      the system message with two sentences appended
    sys_long_text   the system message with five sentences appended (plain English, 100-220 tokens)
    tools           the same messages with one function tool (its JSON schema renders into the system turn)
    sys_swap+tools  both

and the window is read: the next-token KL (mean over the last 5 rows of the generation prompt followed by
"Once upon a time") of the window as served against a re-prefill of the same messages, beside the largest
predicted KL of the second sync's plans. One line per seed and variant (tokens added to the window, predicted,
measured, over the 3e-3 budget or not), then per variant: measured / predicted (geometric mean, range) and the
count over the budget. A case whose window and query do not fit the model's context is skipped, said so.

    ORBIT_PYTHON_PATH=build/bindings/python OMP_NUM_THREADS=1 /usr/bin/python3 bench/fidelity/handoff_losses.py \\
        --model models/stories260K/stories260K.bin --seeds 0,1,2,3
    ... --model models/tinystories-656k [--calibrate]

Not a test: a measurement (deterministic on one machine; a few seconds per seed).
"""
import argparse
import math
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.environ.get("ORBIT_PYTHON_PATH", os.path.join(REPO, "build", "bindings", "python")))
import orbit  # noqa: E402

BUDGET = 3e-3
WORDS = ("the little cat saw a big dog and they played in the park all day long until the sun went down "
         "then a bird sang to them from a tall tree").split()
SYSTEMS = ["You are a helpful guide who answers questions about animals and parks.",
           "You are a kind teacher. You explain things to small children with simple words.",
           "You write happy endings for stories about pets and their friends."]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def words(seed, n):
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(n))


def kl(ref, got):
    """Mean over rows of KL(softmax(ref) ‖ softmax(got)), nats."""
    ref, got = ref.astype(np.float64), got.astype(np.float64)
    lp = ref - np.logaddexp.reduce(ref, axis=-1, keepdims=True)
    lq = got - np.logaddexp.reduce(got, axis=-1, keepdims=True)
    return float((np.exp(lp) * (lp - lq)).sum(-1).mean())


def conversation(seed):
    messages = [{"role": "system", "content": "You tell short stories about " + words(seed, 8) + "."}]
    for t in range(3):
        messages.append({"role": "user", "content": words(seed * 5 + t, 8 + t)})
        messages.append({"role": "assistant", "content": words(seed * 3 + t + 1, 10)})
    messages.append({"role": "user", "content": words(seed + 11, 9)})
    return messages


def variants(seed, base):
    """{name: (messages, tools)}: the second sync of each case."""
    def system(text):
        return [{"role": "system", "content": text}] + base[1:]
    first = base[0]["content"]
    return {
        "sys_swap": (system(SYSTEMS[seed % 3]), None),
        "sys_longer": (system(" ".join([first, SYSTEMS[seed % 3], SYSTEMS[(seed + 1) % 3]])), None),
        "sys_long_text": (system(" ".join([first] + [SYSTEMS[(seed + k) % 3] for k in range(5)])), None),
        "tools": (base, TOOLS),
        "sys_swap+tools": (system(SYSTEMS[seed % 3]), TOOLS),
    }


def window_tokens(window):
    return sum(i.length for i in window.instances)


def measure(model, calibrate, base, messages, tools):
    """(tokens added, predicted, measured) for one case on a fresh engine."""
    engine = orbit.Engine(model, pool_bytes=64 << 20, background="inline")
    if calibrate:
        engine.calibrate_fidelity()
    window = engine.new_window()
    window.sync(base, chunk_min_tokens=8)
    before = window_tokens(window)
    report = window.sync(messages, chunk_min_tokens=8, tools=tools) if tools else window.sync(messages, chunk_min_tokens=8)
    query = report.generation_prompt + engine.tokenize("Once upon a time", bos=False)
    predicted = max(p.predicted_kl for p in report.plans)
    measured = kl(window.reference_logits(query, all_rows=True)[-5:], window.logits(query, all_rows=True)[-5:])
    return window_tokens(window) - before, predicted, measured


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(REPO, "models", "stories260K", "stories260K.bin"))
    ap.add_argument("--seeds", default="0,1,2,3", help="comma-separated")
    ap.add_argument("--calibrate", action="store_true", help="Engine.calibrate_fidelity() on the model first")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    by_variant = {}
    for seed in seeds:
        base = conversation(seed)
        for name, (messages, tools) in variants(seed, base).items():
            try:
                added, predicted, measured = measure(a.model, a.calibrate, base, messages, tools)
            except orbit.RefusedError as e:  # a long seed's window past the model's context (stories260K: 512)
                print(f"seed {seed} {name:15s} skipped: {e}", flush=True)
                continue
            by_variant.setdefault(name, []).append((predicted, measured))
            print(f"seed {seed} {name:15s} added {added:4d} predicted {predicted:.2e} measured {measured:.2e}"
                  f"{'  OVER' if measured > BUDGET else ''}", flush=True)
    print(f"{'variant':15s} {'measured/predicted (geo mean, min-max)':>40s} {'over budget':>12s}")
    for name, rows in by_variant.items():
        ratios = [m / p for p, m in rows if p > 0]
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else float("nan")
        spread = f"{min(ratios):.2g}-{max(ratios):.2g}" if ratios else "-"
        over = sum(m > BUDGET for _, m in rows)
        print(f"{name:15s} {geo:>26.3g} ({spread:>11s}) {over:>8d}/{len(rows)}")


if __name__ == "__main__":
    main()
