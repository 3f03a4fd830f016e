"""The samples' outputs: the summary table, the JSON report, the trace and the PNG chart of an Episode
(sample_kit.py), written side by side by write_outputs().
"""
from __future__ import annotations

import json
import sys
import pathlib
from dataclasses import asdict
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sample_kit import Episode


def short_operations(operations: list[str]) -> str:
    """'admit frame 0; admit frame 1; reorder frame 1,frame 0; question 5' -> 'admit×2; reorder; question 5'."""
    out: list[list] = []
    for op in operations:
        verb, _, rest = op.partition(" ")
        text = op if verb in ("system", "action", "observation", "question", "note", "turn", "decode") else verb
        if verb in ("admit", "recall", "slide", "evict") and rest and verb != "evict":
            text = f"{verb} {rest}"
        if out and out[-1][0].split(" ")[0] == verb and verb in ("admit", "evict", "slide"):
            out[-1][1] += 1
            out[-1][0] = verb
        else:
            out.append([text, 1])
    return "; ".join(t if n == 1 else f"{t}×{n}" for t, n in out)


def clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def summary_table(episode: Episode, title: str) -> str:
    head = (f"{'step':>4}  {'what':<14} {'window':>6} {'fwd tok':>8} {'radix':>7} {'no cache':>8} {'ms':>7} "
            f"{'re-pf ms':>8} {'KL (nats)':>10} {'top-1':>5}  operations")
    lines = [title, "fwd tok: forward tokens orbit computed (queries included); radix: a radix cache serving the "
                    "agent's reads (SGLang's, token granularity, unbounded; window and query); no cache: a full "
                    "re-prefill of the window and the queries", head,
             "-" * len(head)]
    for s in episode.steps:
        lines.append(f"{s.index:>4}  {s.label[:14]:<14} {s.window_tokens:>6} {s.forward_tokens:>8.0f} "
                     f"{s.prefix_tokens:>7.0f} {s.reprefill_tokens:>8} {1e3 * s.seconds:>7.1f} "
                     f"{1e3 * s.reprefill_seconds:>8.1f} {s.kl:>10.2e} {s.top1:>5.2f}  {short_operations(s.operations)}")
        for role, text in s.texts:
            lines.append(f"{'':>6}{role:>12}: {clip(text, 96)}")
    t = episode.totals()
    lines.append("-" * len(head))
    lines.append(f"{'all':>4}  {'':<14} {'':>6} {t['forward_tokens']:>8.0f} {t['prefix_tokens']:>7.0f} "
                 f"{t['reprefill_tokens']:>8} {1e3 * t['seconds']:>7.1f} {1e3 * t['reprefill_seconds']:>8.1f} "
                 f"{t['mean_kl']:>10.2e} {t['mean_top1']:>5.2f}  (KL, top-1: mean over steps)")
    lines.append(f"forward tokens: {t['forward_tokens']:.0f} computed vs {t['prefix_tokens']:.0f} for a radix cache "
                 f"({t['prefix_ratio']:.2f}x) and {t['reprefill_tokens']} with no cache, a full re-prefill at every "
                 f"step ({t['forward_fraction']:.1%}); orbit replay's `prefix` preset (an executing radix cache) on "
                 f"the trace: {t['prefix_replay_tokens']:.0f}")
    lines.append(f"patches formed {t['patches_formed']}, reused {t['patch_hits']}; max KL {t['max_kl']:.2e}")
    if t["idle_tokens"]:
        lines.append(f"idle time (Window.idle after each decode, while the tool runs): {t['idle_tokens']:.0f} more "
                     "forward tokens, off the critical path")
    return "\n".join(lines)


def write_outputs(episode: Episode, out_dir: pathlib.Path, meta: dict, title: str) -> dict:
    """Writes <name>.table.txt, <name>.report.json, <name>.trace.json, <name>.png (and <name>.logits.npz
    when the episode kept logits). Returns {kind: path}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / episode.name
    paths = {"table": stem.with_suffix(".table.txt"), "report": stem.with_suffix(".report.json"),
             "trace": stem.with_suffix(".trace.json"), "chart": stem.with_suffix(".png")}
    table = summary_table(episode, title)
    paths["table"].write_text(table + "\n")
    paths["trace"].write_text(json.dumps(episode.trace(), indent=1) + "\n")
    if episode.keep_logits:
        paths["logits"] = stem.with_suffix(".logits.npz")
        np.savez_compressed(paths["logits"],
                            window=np.stack([a for a, _ in episode.logits]),
                            reference=np.stack([b for _, b in episode.logits]))
    try:
        chart(episode, paths["chart"], title)
    except ImportError as e:  # the run's table, trace and report are kept all the same
        print(f"warning: no chart ({e}; matplotlib draws it: apt install python3-matplotlib)", file=sys.stderr)
        del paths["chart"]
    report = dict(meta)
    report.update({"sample": episode.name, "probe": episode.probe, "totals": episode.totals(),
                   "steps": [asdict(s) for s in episode.steps],
                   "outputs": {k: str(v) for k, v in paths.items() if k != "report"}})
    paths["report"].write_text(json.dumps(report, indent=1) + "\n")
    return paths


def chart(episode: Episode, path: pathlib.Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s.index for s in episode.steps]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    ax1.bar(steps, [s.forward_tokens for s in episode.steps], color="#2b7bba", label="orbit: forward tokens")
    ax1.plot(steps, [s.prefix_tokens for s in episode.steps], "v-", color="#edae49",
             label="radix cache: forward tokens")
    ax1.plot(steps, [s.reprefill_tokens for s in episode.steps], "o-", color="#d1495b",
             label="no cache (full re-prefill): forward tokens")
    ax1.set_ylabel("forward tokens per step")
    ax1.set_title(title)
    ax1b = ax1.twinx()
    ax1b.plot(steps, [1e3 * s.seconds for s in episode.steps], "s--", color="#2b7bba", alpha=0.6,
              label="orbit ms")
    ax1b.plot(steps, [1e3 * s.reprefill_seconds for s in episode.steps], "^--", color="#d1495b", alpha=0.6,
              label="re-prefill ms")
    ax1b.set_ylabel("ms per step")
    h1, l1 = ax1.get_legend_handles_labels()
    h2, l2 = ax1b.get_legend_handles_labels()
    ax1.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8)
    kls = [max(s.kl, 1e-12) for s in episode.steps]
    ax2.semilogy(steps, kls, "o-", color="#3d9970", label="KL(re-prefill ‖ orbit), nats")
    ax2.set_ylabel("KL (nats, log)")
    ax2.set_xlabel("step")
    ax2b = ax2.twinx()
    ax2b.plot(steps, [s.top1 for s in episode.steps], "d:", color="#555555", label="top-1 agreement")
    ax2b.set_ylim(-0.05, 1.05)
    ax2b.set_ylabel("top-1 agreement")
    h1, l1 = ax2.get_legend_handles_labels()
    h2, l2 = ax2b.get_legend_handles_labels()
    ax2.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
