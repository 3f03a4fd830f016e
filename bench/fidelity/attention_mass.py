#!/usr/bin/env python3
"""Does the attention a read puts on an instance predict that instance's measured loss?

Runs the Python tool loop (bindings/python/examples/tool_loop.py, without preparing its next list, as
tool_loop_losses.py does) on stories260K and after every step, beside `Window.loss_by_instance(query)` (each
approximate instance's own measured KL and the planner's prediction), computes the softmax mass the query's
last row puts on every instance: the query forwarded here in torch over the window's held KV (Window.kv, keys
before RoPE), the probabilities summed over the instance's rows, averaged over heads and layers (so the
masses of the past and the query sum to 1). That is what a forward flag returning the last row's attention
would give the window at each read. The forward is checked against the window's own logits (printed).

Three masses per instance: `mass_now`, from the same step's read (the loss and the attention of one KV; a
planner has it only after the read), `mass_prev`, from the previous step's read (what a planner has when it
decides: the last read before the plan; instances that read did not see have none), and `mass_moved`, that
one moved to where the instance is now by the recency model: mass_prev · (tokens to the end then / now)^3
(an instance the agent's list moved to the tail gets the attention the tail gets). It prints Spearman and
Pearson (log-log) correlations with the measured loss of:

  predicted                the planner's prediction (its recency weight (length / tokens to end)^3 inside)
  recency                  the recency weight alone
  mass                     the attention mass alone
  predicted/recency*mass   the prediction with the recency weight replaced by the mass
  predicted*mass/mean      the prediction scaled by the mass relative to the window's mean mass per token
  kv_change*mass           the measured KV change squared (not known to a planner; a ceiling) times the mass

over the kept text instances behind a changed context, the embedding instances, and every approximate
instance with a prediction, and a least squares fit log measured ~ log predicted + b log(mass ratio).

Last, a proxy of what a planner would make of each feature (`budget proxy`): at every step, re-serve the
instances with the largest k · feature exactly until the rest's sum is within the budget, k the 50th, 80th or
90th percentile of measured / feature over all rows, and count the steps whose remaining measured losses sum
to within the budget and the tokens re-served. (A proxy: losses interact, and the planner prices actions, not
whole-instance re-prefills.)

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/fidelity/attention_mass.py --seeds 4,5
    OMP_NUM_THREADS=1 /usr/bin/python3 bench/fidelity/attention_mass.py --seeds 4,5,6,7 --json rows.json

Not a test: a measurement (about 15 s per seed on a loaded 2-core machine).
"""
import argparse
import json
import math
import pathlib
import struct
import sys

import numpy as np
import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "bindings" / "python" / "examples")]
import tool_loop  # noqa: E402  (finds a build tree's orbit package itself)

MODEL = REPO / "models" / "stories260K" / "stories260K.bin"


class Llama2c:
    """stories260K in torch (llama2.c's version-0 layout: runtime/src/llama2c.cpp), for the query rows only."""

    def __init__(self, path):
        raw = open(path, "rb").read()
        dim, hidden, layers, heads, kv_heads, vocab, seq_len = struct.unpack("7i", raw[:28])
        data = torch.from_numpy(np.frombuffer(raw, dtype=np.float32, offset=28).copy())
        head = dim // heads
        kv_dim = kv_heads * head
        off = 0

        def take(*shape):
            nonlocal off
            n = int(np.prod(shape))
            t = data[off:off + n].view(*shape)
            off += n
            return t

        self.embed = take(abs(vocab), dim)
        self.rms_att = take(layers, dim)
        self.wq, self.wk = take(layers, dim, dim), take(layers, kv_dim, dim)
        self.wv, self.wo = take(layers, kv_dim, dim), take(layers, dim, dim)
        self.rms_ffn = take(layers, dim)
        self.w1, self.w2, self.w3 = take(layers, hidden, dim), take(layers, dim, hidden), take(layers, hidden, dim)
        self.rms_final = take(dim)
        off += seq_len * head  # freq_cis real and imaginary (unused)
        self.cls = take(abs(vocab), dim) if vocab < 0 else self.embed
        self.layers, self.heads, self.kv_heads, self.head = layers, heads, kv_heads, head

    @staticmethod
    def norm(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * g

    def rotate(self, x, pos):
        """Interleaved RoPE (pairs 2i, 2i+1), theta 10000; x [T, H, d], pos [T]."""
        d = self.head
        freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        ang = pos.to(torch.float64)[:, None] * freq[None, :]
        cos, sin = ang.cos().float()[:, None, :], ang.sin().float()[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out

    def query(self, past_k, past_v, past_pos, tokens, start):
        """Logits of the query rows [Q, vocab] and the last row's attention [layers, heads, S] over the past
        (past_k/v: [layers, P, kv_heads, d], keys before RoPE) and the query itself."""
        x = self.embed[torch.tensor(tokens)]
        q_pos = torch.arange(start, start + len(tokens))
        k_pos = torch.cat([past_pos, q_pos])
        Q, P = len(tokens), past_k.shape[1]
        mask = torch.ones(Q, P + Q, dtype=torch.bool)
        mask[:, P:] = torch.tril(torch.ones(Q, Q, dtype=torch.bool))
        rep = self.heads // self.kv_heads
        last = []
        for l in range(self.layers):
            h = self.norm(x, self.rms_att[l])
            q = (h @ self.wq[l].T).view(Q, self.heads, self.head)
            k = (h @ self.wk[l].T).view(Q, self.kv_heads, self.head)
            v = (h @ self.wv[l].T).view(Q, self.kv_heads, self.head)
            keys = self.rotate(torch.cat([past_k[l], k]), k_pos).repeat_interleave(rep, dim=1)
            values = torch.cat([past_v[l], v]).repeat_interleave(rep, dim=1)
            scores = torch.einsum("qhd,shd->hqs", self.rotate(q, q_pos), keys) / math.sqrt(self.head)
            probs = scores.masked_fill(~mask[None], float("-inf")).softmax(-1)
            last.append(probs[:, -1, :])
            x = x + (torch.einsum("hqs,shd->qhd", probs, values).reshape(Q, -1) @ self.wo[l].T)
            h = self.norm(x, self.rms_ffn[l])
            x = x + (torch.nn.functional.silu(h @ self.w1[l].T) * (h @ self.w3[l].T)) @ self.w2[l].T
        return self.norm(x, self.rms_final) @ self.cls.T, torch.stack(last)


def instance_masses(model, window, query):
    """{instance id: its attention mass from the query's last row} and the largest logit difference
    between this forward and the window's own logits (a check of the torch model)."""
    infos = list(window.instances)
    ks, vs, pos = [], [], []
    for info in infos:
        kv = window.kv(info.id)
        ks.append(torch.from_numpy(np.asarray(kv.k)))
        vs.append(torch.from_numpy(np.asarray(kv.v)))
        pos.append(torch.arange(info.position, info.position + kv.length))
    past_k, past_v = torch.cat(ks, 1), torch.cat(vs, 1)
    logits, last = model.query(past_k, past_v, torch.cat(pos), list(query), int(window.tokens))
    mass = last.mean(dim=(0, 1))  # sums to 1 over the past and the query
    held = torch.from_numpy(np.asarray(window.logits(query, all_rows=True)))
    err = float((held - logits).abs().max())
    out, row = {}, 0
    for info, k in zip(infos, ks):
        out[int(info.id)] = float(mass[row:row + k.shape[1]].sum())
        row += k.shape[1]
    return out, err, float(mass[row:].sum()), row


def collect(policy, seeds):
    model = Llama2c(MODEL)
    rows, summary, errs = [], [], []
    for seed in seeds:
        prev = {}

        def on_step(step, window, query, report, messages, seed=seed):
            nonlocal prev
            now, err, query_mass, past_rows = instance_masses(model, window, query)
            errs.append(err)
            total = int(window.tokens)
            for loss in window.loss_by_instance(query):
                to_end = total - loss.position
                embedding = loss.label.startswith("page ")
                rows.append(dict(seed=seed, step=step, instance=int(loss.instance), label=loss.label,
                                 embedding=embedding, changed=bool(loss.context_changed), length=loss.length,
                                 to_end=to_end, kv_change=loss.kv_change, measured=loss.measured_kl,
                                 predicted=loss.predicted_kl,
                                 recency=1.0 if embedding else min(1.0, loss.length / to_end) ** 3,
                                 mass_now=now.get(int(loss.instance), 0.0),
                                 mass_prev=prev.get(int(loss.instance), (-1.0, 0))[0],
                                 to_end_prev=prev.get(int(loss.instance), (-1.0, 0))[1],
                                 mean_mass=(1.0 - query_mass) * loss.length / max(past_rows, 1)))
            ends = {int(i.id): total - int(i.position) for i in window.instances}
            prev = {i: (m, ends[i]) for i, m in now.items()}

        r = tool_loop.run(policy=policy, seed=seed, on_step=on_step, anticipate=False)
        for row in rows:
            seen = row["mass_prev"] >= 0 and row["to_end_prev"] > 0
            row["mass_moved"] = row["mass_prev"] * (row["to_end_prev"] / row["to_end"]) ** 3 if seen else -1.0
        summary.append((seed, sum(k <= tool_loop.KL_BUDGET for k in r.kl), len(r.kl)))
    return rows, summary, max(errs, default=0.0)


def ranks(a):
    order = np.argsort(a, kind="stable")
    r = np.empty(len(a))
    r[order] = np.arange(len(a))
    return r


def correlations(name, rows, mass_key):
    sel = [r for r in rows if r["measured"] > 1e-9 and r[mass_key] > 0]
    if len(sel) < 5:
        print(f"  {name}: n {len(sel)} (too few)")
        return
    y = np.log([r["measured"] for r in sel])
    mass = np.array([r[mass_key] for r in sel])
    ratio = mass / np.array([r["mean_mass"] for r in sel])
    pred = np.array([max(r["predicted"], 1e-12) for r in sel])
    rec = np.array([max(r["recency"], 1e-12) for r in sel])
    change = np.array([max(r["kv_change"], 1e-9) for r in sel])
    feats = {"predicted": pred, "recency": rec, "mass": mass, "predicted/recency*mass": pred / rec * mass,
             "predicted*mass/mean": pred * ratio, "kv_change*mass": change ** 2 * mass}
    print(f"  {name} (mass {mass_key}), n {len(sel)}: Spearman / Pearson of log values with log measured")
    for label, f in feats.items():
        lf = np.log(f)
        sp = np.corrcoef(ranks(lf), ranks(y))[0, 1]
        pe = np.corrcoef(lf, y)[0, 1]
        print(f"    {label:24s} {sp:+.3f} / {pe:+.3f}")
    x = np.stack([np.ones(len(sel)), np.log(pred), np.log(ratio)], axis=1)
    b = np.linalg.lstsq(x, y, rcond=None)[0]
    base = np.stack([np.ones(len(sel)), np.log(pred)], axis=1)
    b0 = np.linalg.lstsq(base, y, rcond=None)[0]
    print(f"    fit log measured ~ {b[1]:.2f} log predicted + {b[2]:.2f} log(mass / mean mass): residual sd "
          f"{np.std(y - x @ b):.2f} (predicted alone: {np.std(y - base @ b0):.2f})")
    under = y - np.log(pred)
    print(f"    log(measured/predicted) vs log(mass ratio): Pearson {np.corrcoef(under, np.log(ratio))[0, 1]:+.3f}")


def budget_proxy(rows):
    steps = {}
    for r in rows:
        steps.setdefault((r["seed"], r["step"]), []).append(r)
    over = sum(sum(r["measured"] for r in rs) > tool_loop.KL_BUDGET for rs in steps.values())
    print(f"budget proxy: {len(steps)} steps with approximate instances, {over} over the budget by the sum of "
          "their measured losses")
    where = {"moved toward the tail": [0.0, 0.0], "stayed or receded": [0.0, 0.0], "new since": [0.0, 0.0]}
    for rs in steps.values():
        if sum(r["measured"] for r in rs) <= tool_loop.KL_BUDGET:
            continue
        for r in rs:
            kind = ("new since" if r["to_end_prev"] <= 0 else
                    "moved toward the tail" if r["to_end"] < r["to_end_prev"] else "stayed or receded")
            where[kind][0] += r["measured"]
            where[kind][1] += r["predicted"]
    print("  their instances' losses by where each went since the last read: " +
          "; ".join(f"{k} {m:.3f} nats (predicted {p:.4f})" for k, (m, p) in where.items()))

    def ratio(r, key):  # the mass relative to the window's mean per token; 1 where the read did not see it
        return min(max(r[key] / r["mean_mass"], 0.125), 64.0) if r[key] >= 0 else 1.0

    features = {"predicted": lambda r: r["predicted"],
                "predicted*clamp(mass_prev/mean)": lambda r: r["predicted"] * ratio(r, "mass_prev"),
                "predicted*clamp(mass_moved/mean)": lambda r: r["predicted"] * ratio(r, "mass_moved"),
                "predicted/recency*mass_now": lambda r: r["predicted"] / max(r["recency"], 1e-12) * r["mass_now"],
                "kv_change^2*mass_now (ceiling)": lambda r: r["kv_change"] ** 2 * r["mass_now"]}
    for name, feat in features.items():
        ks = [r["measured"] / feat(r) for r in rows if feat(r) > 0 and r["measured"] > 1e-9]
        cells = []
        for q in (50, 80, 90):
            k, within, tokens = float(np.percentile(ks, q)), 0, 0
            for rs in steps.values():
                rs = sorted(rs, key=lambda r: -feat(r))
                rest, measured = k * sum(feat(r) for r in rs), sum(r["measured"] for r in rs)
                for r in rs:
                    if rest <= tool_loop.KL_BUDGET:
                        break
                    rest, measured, tokens = rest - k * feat(r), measured - r["measured"], tokens + r["length"]
                within += measured <= tool_loop.KL_BUDGET
            cells.append(f"q{q}: {within}/{len(steps)} within, {tokens:5d} tokens")
        print(f"  {name:34s} " + "; ".join(cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="patch:16:kl=0.003:heal:prep=1:move=8:lists=3")
    ap.add_argument("--seeds", default="4,5")
    ap.add_argument("--json", help="write the per-instance rows here")
    a = ap.parse_args()
    torch.set_num_threads(1)
    rows, summary, err = collect(a.policy, [int(s) for s in a.seeds.split(",")])
    print(f"policy {a.policy}; torch forward vs the window's logits: largest difference {err:.2e}")
    for seed, within, steps in summary:
        print(f"  seed {seed}: {within}/{steps} steps within the budget")
    groups = (("kept text, context changed", [r for r in rows if r["changed"] and not r["embedding"]]),
              ("embeddings", [r for r in rows if r["embedding"]]),
              ("every instance with a prediction", [r for r in rows if r["predicted"] > 0]))
    for key in ("mass_now", "mass_prev", "mass_moved"):
        for name, sel in groups:
            correlations(name, sel, key)
    inherited = [r for r in rows if not r["changed"] and r["predicted"] == 0]
    if inherited:
        m = np.array([r["measured"] for r in inherited])
        mass = np.array([r["mass_now"] for r in inherited])
        ok = (m > 1e-9) & (mass > 0)
        print(f"  predicted 0 (behind approximate KV): n {len(inherited)}, measured sum {m.sum():.3f}; Spearman of "
              f"mass_now with measured {np.corrcoef(ranks(np.log(mass[ok])), ranks(np.log(m[ok])))[0, 1]:+.3f}")
    budget_proxy(rows)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
