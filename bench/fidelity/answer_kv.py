#!/usr/bin/env python3
"""What an answer's KV kept from its decode costs the next turn, against a prefill of the same tokens.

A generate keeps the query's and the answer's KV as its decode computed them (one row per step) and stores
them under the same KV state a forward of those tokens behind the window would have; the next turn that
starts with the query and the answer reuses them with no forward (docs/ARCHITECTURE.md, "Exact reuse").
This replays a real agent conversation (ReAct on WebShop, ../shared/traces) turn by turn on two engines:
  decoded   observation turn, then generate(query) and the query + answer added as a turn (reused from
            the decode: 0 tokens forwarded);
  prefilled the same tokens added as turns with no generate (the query + answer forwarded as one prefill).
Per turn it prints whether the answer turn's KV is bit-identical on both, the largest difference, and the
next-token KL (nats, float64, over every row of the next query) of each window against a re-prefill of the
whole window (Window.reference_logits) and of the decoded window against the prefilled one. With --evict
the oldest turn after the first leaves before each observation from the third on, so the answers' KV is
kept over a context change and served as the default policy's budget allows.

    ORBIT_PYTHON_PATH=build/bindings/python OMP_NUM_THREADS=1 /usr/bin/python3 bench/fidelity/answer_kv.py \
        --model models/stories260K/stories260K.bin --answer-tokens 16

Not a test: it states a measured cost. Deterministic on one machine and build.
"""
import argparse
import json
import os
import pathlib
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, os.environ.get("ORBIT_PYTHON_PATH", str(REPO / "build" / "bindings" / "python")))
import orbit  # noqa: E402

EPISODE = REPO.parent / "shared" / "traces" / "sources" / "react_webshop_episode.json"


def observations(path, cap_chars):
    """The episode's observations in order (each cut to cap_chars characters), the turns the agent read."""
    text = json.loads(pathlib.Path(path).read_text())["printed_episode"]
    parts = [p.split("\nAction:")[0].strip() for p in text.split("Observation:")[1:]]
    return ["Observation: " + p[:cap_chars] for p in parts if p]


def kl_rows(reference, got):
    """KL(reference || got) per row, in float64."""
    def log_softmax(x):
        x = np.asarray(x, dtype=np.float64)
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))
    lp, lq = log_softmax(reference), log_softmax(got)
    return (np.exp(lp) * (lp - lq)).sum(-1)


def answer_diff(a, b):
    ka, kb, va, vb = (np.asarray(x) for x in (a.k, b.k, a.v, b.v))
    same = np.array_equal(ka, kb) and np.array_equal(va, vb)
    return same, float(max(np.abs(ka - kb).max(), np.abs(va - vb).max()))


def run(args):
    decoded = orbit.Engine(args.model, pool_bytes=64 << 20)
    prefilled = orbit.Engine(args.model, pool_bytes=64 << 20)
    wd, wp = decoded.new_window(), prefilled.new_window()
    query = decoded.tokenize(" Action:", bos=False)
    first = True
    print("%4s %7s %6s %10s %11s %11s %11s" % ("turn", "window", "bits", "max |diff|", "KL ref||dec",
                                               "KL ref||pre", "KL pre||dec"))
    rows = []
    for turn, obs in enumerate(observations(EPISODE, args.obs_chars)):
        obs_tokens = decoded.tokenize(obs, bos=first)
        if wd.tokens + len(obs_tokens) + len(query) + args.answer_tokens + len(query) > args.max_window:
            break
        first = False
        if args.evict and turn >= 2:  # the oldest turn after the first leaves: the rest kept over a change
            wd.evict(wd.instances[1]), wp.evict(wp.instances[1])
        wd.add_turn(obs_tokens), wp.add_turn(obs_tokens)
        answer = list(wd.generate(query, max_tokens=args.answer_tokens, ignore_eos=True).tokens)  # a fixed length
        rd = wd.add_turn(query + answer)
        wp.add_turn(query + answer)
        if rd.forward_tokens != 0:
            sys.exit("turn %d: the answer turn forwarded %d tokens: the decode's KV was not reused" %
                     (turn, rd.forward_tokens))
        same, diff = answer_diff(wd.kv(wd.instances[-1]), wp.kv(wp.instances[-1]))
        ld, lp = wd.logits(query, all_rows=True), wp.logits(query, all_rows=True)
        ref = wd.reference_logits(query, all_rows=True)
        row = (kl_rows(ref, ld).mean(), kl_rows(ref, lp).mean(), kl_rows(lp, ld).mean())
        rows.append((same,) + row)
        print("%4d %7d %6s %10.2e %11.2e %11.2e %11.2e" % (turn, wd.tokens, "same" if same else "differ",
                                                          diff, *row))
    decoded.close(), prefilled.close()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(REPO / "models" / "stories260K" / "stories260K.bin"))
    ap.add_argument("--answer-tokens", type=int, default=16, help="tokens each generate decodes")
    ap.add_argument("--obs-chars", type=int, default=80, help="characters kept of each observation")
    ap.add_argument("--max-window", type=int, default=480, help="stop before the window passes this")
    ap.add_argument("--evict", action="store_true",
                    help="from the third turn on, evict the oldest turn after the first before each observation")
    rows = run(ap.parse_args())
    if not rows:
        sys.exit("no turn fitted --max-window")
    cols = np.array([r[1:] for r in rows])
    print("%d turns, answer KV bit-identical on %d; mean KL ref||dec %.2e (max %.2e), ref||pre %.2e (max %.2e), "
          "pre||dec %.2e (max %.2e)" % (len(rows), sum(r[0] for r in rows), cols[:, 0].mean(), cols[:, 0].max(),
                                        cols[:, 1].mean(), cols[:, 1].max(), cols[:, 2].mean(), cols[:, 2].max()))


if __name__ == "__main__":
    main()
