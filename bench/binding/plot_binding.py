#!/usr/bin/python3
"""Charts for bench_binding's JSON. Usage: plot_binding.py RESULTS.json OUT_DIR

Writes accuracy.png, rank.png, deficit.png, reorder.png, recall.png into OUT_DIR. Every number plotted
comes from the JSON; nothing is typed in here."""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def num(v):
    return float("nan") if v is None else float(v)


def rank_of(arm):
    # "patch:16" -> 16, "patch:16/32" -> 32 (the value rank, the larger one)
    ranks = arm.split(":")[1].split("/")
    return max(int(r) for r in ranks)


def main():
    data = json.load(open(sys.argv[1]))
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    models = data.get("models", {})

    # 1. accuracy per arm, single vs multi-hop
    fig, axes = plt.subplots(len(models), 1, figsize=(11, 3.6 * max(1, len(models))), squeeze=False)
    for ax, (name, m) in zip(axes[:, 0], models.items()):
        rows = m["reuse"]["accuracy"]
        arms = [r["arm"] for r in rows]
        x = range(len(arms))
        ax.bar([i - 0.2 for i in x], [r["single_hop"]["accuracy"] for r in rows], 0.4, label="single-hop")
        ax.bar([i + 0.2 for i in x], [r["multi_hop"]["accuracy"] for r in rows], 0.4, label="multi-hop")
        ax.set_xticks(list(x))
        ax.set_xticklabels(arms, rotation=30, ha="right", fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("accuracy")
        ax.set_title(f"{name}: answer accuracy by repair arm (n={m['reuse']['n_per_kind']} per kind)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "accuracy.png"), dpi=110)
    plt.close(fig)

    # 2. eta and flip-recover vs rank (multi-hop; stories260K over the query rows), bytes fraction
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(14, 3.8))
    curves = []
    for name, m in models.items():
        rows = [r for r in m["reuse"]["accuracy"] if r["arm"].startswith("patch:")]
        curves.append((name + " (multi-hop)", [rank_of(r["arm"]) for r in rows], [r["multi_hop"] for r in rows],
                       [r["patch_fraction"] for r in rows]))
    if "stories260K" in data:
        rows = [r for r in data["stories260K"]["arms"] if r["arm"].startswith("patch:")]
        curves.append(("stories260K (sampled)", [rank_of(r["arm"]) for r in rows], [r["fidelity"] for r in rows],
                       [r["patch_fraction"] for r in rows]))
    for label, ranks, fid, frac in curves:
        a1.plot(ranks, [num(f["eta"]) for f in fid], "o-", label=label)
        a2.plot(ranks, [num(f["flip_recover"]) for f in fid], "o-", label=label)
        a3.plot(ranks, [100 * f for f in frac], "o-", label=label)
    for ax, t in ((a1, "η vs rank"), (a2, "flip-recover vs rank"), (a3, "patch bytes, % of chunk KV")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("rank m")
        ax.set_title(t)
        ax.grid(alpha=0.3)
    a1.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "rank.png"), dpi=110)
    plt.close(fig)

    # 3. deficit shape: by layer, by token
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    for name, m in models.items():
        d = m["reuse"]["deficit"]
        layers = d["layer_relative_norm"]
        a1.plot([i / max(1, len(layers) - 1) for i in range(len(layers))], layers, "o-", label=name)
        tok = d["token_oracle"]
        a2.plot([t["fraction"] for t in tok], [num(t["oracle"]["eta"]) for t in tok], "o-", label=name + " oracle |Δ|")
        a2.plot([t["fraction"] for t in tok], [num(t["first"]["eta"]) for t in tok], "x--", label=name + " first-p")
    if "stories260K" in data:
        layers = data["stories260K"]["layer_relative_norm"]
        a1.plot([i / max(1, len(layers) - 1) for i in range(len(layers))], layers, "o-", label="stories260K")
    a1.set_xlabel("relative depth (0 = first layer)")
    a1.set_ylabel("‖Δ‖ / ‖KV(B|C)‖")
    a1.set_title("deficit by layer")
    a2.set_xlabel("fraction of B's tokens given exact KV")
    a2.set_ylabel("η")
    a2.set_title("deficit by token (multi-hop)")
    for ax in (a1, a2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "deficit.png"), dpi=110)
    plt.close(fig)

    # 4. reorder
    fig, axes = plt.subplots(1, max(1, len(models)), figsize=(5.5 * max(1, len(models)), 3.6), squeeze=False)
    for ax, (name, m) in zip(axes[0], models.items()):
        rows = m["window"]["reorder"]
        ks = [r["k"] for r in rows]
        for arm, style in (("exact", "o-"), ("orbit", "s-"), ("transfer", "x--")):
            ax.plot(ks, [num(r[arm]["eta"]) for r in rows], style, label=arm)
        ax.set_xticks(ks)
        ax.set_xlabel("K antecedents")
        ax.set_ylabel("η")
        ax.set_title(f"{name}: reorder (rank {m['window'].get('rank', '?')})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "reorder.png"), dpi=110)
    plt.close(fig)

    # 5. recall stale vs fresh
    fig, axes = plt.subplots(2, max(1, len(models)), figsize=(5.5 * max(1, len(models)), 6.4), squeeze=False)
    for col, (name, m) in enumerate(models.items()):
        rows = m["window"]["recall"]
        tau = [r["turnover"] for r in rows]
        ax = axes[0][col]
        ax.plot(tau, [num(r["stale"]["eta"]) for r in rows], "o-", label="stale patch")
        ax.plot(tau, [num(r["fresh"]["eta"]) for r in rows], "s-", label="fresh patch")
        ax.axhline(0, color="gray", lw=0.8)
        ax.set_ylabel("η")
        ax.set_title(f"{name}: recall (rank {m['window'].get('rank', '?')})")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        ax = axes[1][col]
        for arm, style in (("stale", "o-"), ("fresh", "s-"), ("blind", "x--"), ("rebuild", "k:")):
            ax.plot(tau, [r[arm]["accuracy"] for r in rows], style, label=arm)
        ax.set_xlabel("turnover of the earlier context")
        ax.set_ylabel("multi-hop accuracy")
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "recall.png"), dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
