#!/usr/bin/env python3
"""Where the fidelity model misses on the Python tool loop: each instance's measured loss against its prediction.

Runs bindings/python/examples/tool_loop.py (embedding screenshots, text sampled from the model, the oldest
assistant message leaving from the front at every step) under a policy for some seeds, without the idle-time
preparation of its next list (anticipate=False: prepared, the trims it studies are served exactly). After every step it
reads `Window.loss_by_instance(query)`: each instance's own measured KL (the read with that instance's KV
replaced by the exact one) beside the planner's prediction for it. It prints:

  - the steps within the per-step budget, and the mean KL, per seed;
  - for kept text instances behind a changed context: measured / predicted summed by the tokens between the
    instance and the window's end (a model that ranks losses right has one ratio throughout);
  - least squares in log space of the measured and the predicted loss on the instance's length and its
    tokens to the end (with the measured KV change as a third regressor for the measured loss), and the
    residual spread;
  - the measured KV change of those instances by position (the keep feature assumes it falls with the
    tokens between the change and the instance);
  - instances computed exactly behind approximate KV (context unchanged, not exact): the model predicts 0.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/fidelity/tool_loop_losses.py                 # default, seeds 0-3
    OMP_NUM_THREADS=1 /usr/bin/python3 bench/fidelity/tool_loop_losses.py --seeds 4,5 --policy patch:16:kl=0.003:heal:prep=1:move=8:check
    OMP_NUM_THREADS=1 /usr/bin/python3 bench/fidelity/tool_loop_losses.py --seeds 900 --model models/tinystories-656k

Not a test: a measurement. Numbers are KLs (deterministic on one machine), about 10 s per seed.
"""
import argparse
import collections
import pathlib
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "bindings" / "python" / "examples")]
import tool_loop  # noqa: E402  (finds a build tree's orbit package itself)

BUDGET = tool_loop.KL_BUDGET


def collect(policy, seeds, model):
    rows, per_seed = [], []
    for seed in seeds:
        def on_step(step, window, query, report, messages, seed=seed):
            for loss in window.loss_by_instance(query):
                rows.append(dict(seed=seed, step=step, tokens=window.tokens, pos=loss.position, length=loss.length,
                                 turn_or_text=not loss.label.startswith("page "), changed=bool(loss.context_changed),
                                 kv_change=loss.kv_change, measured=loss.measured_kl, predicted=loss.predicted_kl,
                                 exact=loss.kv_change <= 1e-3))
        # the loop as it ran before it prepared its next list (Window.prepare_sync): every trim is kept or
        # recomputed as the policy decides, which is what this measures
        r = tool_loop.run(model=model, policy=policy, seed=seed, on_step=on_step, anticipate=False)
        per_seed.append((seed, sum(k <= BUDGET for k in r.kl), len(r.kl), float(np.mean(r.kl)),
                         r.forward_tokens / max(r.prefix_tokens, 1)))
    return rows, per_seed


def by_distance(kept):
    sums = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for r in kept:
        band = min((r["tokens"] - r["pos"] - r["length"]) // 40, 6)
        sums[band][0] += r["measured"]
        sums[band][1] += r["predicted"]
        sums[band][2] += 1
    print("kept text behind a changed context: measured / predicted by tokens to the window's end")
    for band in sorted(sums):
        m, p, n = sums[band]
        label = f"{band * 40}-{band * 40 + 40}" if band < 6 else "240+"
        print(f"  {label:>8} tokens  n {n:4d}  measured {m:.2e}  predicted {p:.2e}  ratio {m / p:.2f}")


def regress(kept):
    fit = [r for r in kept if r["measured"] > 1e-9 and r["predicted"] > 0 and r["kv_change"] > 0]
    if len(fit) < 4:
        return
    length = np.log([r["length"] for r in fit])
    to_end = np.log([r["tokens"] - r["pos"] for r in fit])
    change = np.log([r["kv_change"] for r in fit])
    ones = np.ones(len(fit))
    for name, y, cols, labels in (
            ("measured", np.log([r["measured"] for r in fit]), [ones, length, to_end], ["length", "tokens_to_end"]),
            ("predicted", np.log([r["predicted"] for r in fit]), [ones, length, to_end], ["length", "tokens_to_end"]),
            ("measured", np.log([r["measured"] for r in fit]), [ones, change, length, to_end],
             ["kv_change", "length", "tokens_to_end"])):
        x = np.stack(cols, axis=1)
        b = np.linalg.lstsq(x, y, rcond=None)[0]
        terms = " * ".join(f"{lab}^{e:.2f}" for lab, e in zip(labels, b[1:]))
        print(f"  {name} ~ {terms}   (residual sd {np.std(y - x @ b):.2f} in log, n {len(fit)})")


def kv_change_by_position(kept):
    bands = collections.defaultdict(list)
    for r in kept:
        bands[min(r["pos"] // 50, 6)].append(r["kv_change"])
    print("measured KV change of those instances by position (median)")
    for band in sorted(bands):
        print(f"  positions {band * 50:3d}{'+' if band == 6 else f'-{band * 50 + 50}':<5} n {len(bands[band]):4d}  "
              f"{float(np.median(bands[band])):.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="default")
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--model", default=str(tool_loop.DEFAULT_MODEL),
                    help="model (.bin or HF directory); default: the bundled stories260K")
    a = ap.parse_args()
    rows, per_seed = collect(a.policy, [int(s) for s in a.seeds.split(",")], a.model)
    print(f"policy {a.policy}, budget {BUDGET}, model {a.model}")
    for seed, within, steps, mean, ratio in per_seed:
        print(f"  seed {seed}: {within}/{steps} steps within the budget, mean KL {mean:.2e}, "
              f"forward tokens {ratio:.2f}x the prefix cache's")
    kept = [r for r in rows if r["changed"] and r["turn_or_text"] and r["predicted"] > 0]
    by_distance(kept)
    print("least squares in log space:")
    regress(kept)
    kv_change_by_position([r for r in rows if r["changed"] and r["turn_or_text"]])
    inherited = [r for r in rows if not r["changed"] and not r["exact"] and r["predicted"] == 0]
    print(f"computed behind approximate KV, predicted 0: n {len(inherited)}, measured sum "
          f"{sum(r['measured'] for r in inherited):.3f}, largest {max((r['measured'] for r in inherited), default=0):.2e}")


if __name__ == "__main__":
    main()
