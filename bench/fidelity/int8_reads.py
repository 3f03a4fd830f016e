#!/usr/bin/python3
"""What reading stored KV back from int8 rows (cold_tier='int8') loses, against what the plans predict for it.

For each seed and each window size k (1, 2, 4): k TinyStories paragraphs (a seeded choice and order) are
precomputed by one engine into an int8 store; a second engine on that store admits them in order (the first is
read as the canonical at position 0, the rest blind: on_miss='blind', no budget), and a third engine without a
store admits the same chunks under the same policy, exactly. Both read a short query; the KL of the int8 window's
next token against the exact one's is the rounding's own loss (every other approximation is the same on both
sides). The prediction is the planner's: each admit's quantized_kl (its step is the window's last instance,
recency weight 1), rescaled to the instance's recency weight in the final window.

    ORBIT_PYTHON_PATH=build/bindings/python OMP_NUM_THREADS=1 /usr/bin/python3 bench/fidelity/int8_reads.py \\
        models/stories260K/stories260K.bin --seeds 0-4
"""
import argparse
import os
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.environ.get("ORBIT_PYTHON_PATH", os.path.join(REPO, "build", "bindings", "python")))
import orbit  # noqa: E402

TEXTS = [
    "Once upon a time there was a little girl named Lily. She loved to play in the park with her dog Max.",
    "One day, Tom went to the store with his mom. He saw a big red ball and wanted it very much.",
    "The sun was shining and the birds were singing. Sam and Mia ran to the pond to see the ducks.",
    "Grandma baked a cake for the party. Everyone was happy and they sang a song together.",
    "The little cat climbed up the tree. It was scared and could not get down, so Ben helped it.",
    "A big dog barked at the mailman. The mailman was not afraid and gave the dog a treat.",
    "Anna found a shiny stone by the river. She put it in her pocket and ran home to show dad.",
]
QUERIES = [" Then she said", " The end. Once", " He was", " They all"]


def kl(ref, got):
    lp = ref - ref.max()
    lp -= np.log(np.exp(lp).sum())
    lq = got - got.max()
    lq -= np.log(np.exp(lq).sum())
    return float((np.exp(lp) * (lp - lq)).sum())


def seeds(spec):
    lo, _, hi = spec.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def one_window(model, texts, query):
    """(measured KL, predicted KL) of `texts` read back from int8 rows."""
    policy = orbit.WindowPolicy(on_miss="blind", kl_budget=0)
    with tempfile.TemporaryDirectory() as store:
        with orbit.Engine(model, store_dir=store, cold_tier="int8") as writer:
            for t in texts:
                writer.precompute(writer.add_text(t))
        with orbit.Engine(model, store_dir=store, cold_tier="int8") as cold, orbit.Engine(model) as exact:
            w_cold, w_exact = cold.new_window(policy=policy), exact.new_window(policy=policy)
            lengths, losses = [], []
            for t in texts:
                plan = w_cold.plan_admit(cold.add_text(t))
                losses.append(plan.steps[-1].quantized_kl)
                lengths.append(plan.steps[-1].chunk.length)
                w_cold.apply(plan)
                w_exact.admit(exact.add_text(t))
            q = cold.tokenize(query)
            measured = kl(w_exact.logits(q), w_cold.logits(q))
    total, start = sum(lengths), 0
    predicted = 0.0
    for length, loss in zip(lengths, losses):
        predicted += loss * (length / (total - start)) ** 3  # planner::recency_weight
        start += length
    return measured, predicted


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--seeds", default="0-4", help="a seed or a range, e.g. 0-4")
    args = ap.parse_args()
    rows = []
    for seed in seeds(args.seeds):
        order = np.random.default_rng(seed).permutation(len(TEXTS))
        for k in (1, 2, 4):
            measured, predicted = one_window(args.model, [TEXTS[i] for i in order[:k]], QUERIES[seed % len(QUERIES)])
            rows.append((measured, predicted))
            print(f"seed {seed} k {k}: measured {measured:.3g} predicted {predicted:.3g} "
                  f"ratio {measured / predicted if predicted > 0 else float('nan'):.3g}")
    covered = sum(m <= p for m, p in rows)
    print(f"{covered} of {len(rows)} windows within their prediction; largest measured {max(m for m, _ in rows):.3g}")


if __name__ == "__main__":
    main()
