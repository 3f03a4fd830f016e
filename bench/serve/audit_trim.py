#!/usr/bin/env python3
"""A session that trims its history (the system message and its last 8 messages) through `orbit serve
--audit 1`: every request approximately served is measured against a re-prefill in idle time. Prints, per
policy, the audits, their budget violations, the measured KL (sum, max) and orbit's forward tokens against
the radix yardstick's over the same requests (both count the read's query: usage.orbit).

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/serve/audit_trim.py \\
        --policies default,patch:16:kl=0.003:heal:prep=1:move=8

The second policy is the default without learned lists (WindowPolicy::prepare_lists): the window then
does not know that the next request drops the two oldest messages again. Not a test: a measurement.
"""
import argparse
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
from serve_process import ServeProcess  # noqa: E402  (starts and always stops `orbit serve`)
WORDS = ("the little cat saw a big dog and they played in the park all day long until the sun went down "
         "then a bird sang to them from a tall tree").split()


def words(seed, n):
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(n))


def run(orbit, model, policy, steps):
    with ServeProcess(orbit, model, ["--audit", "1", "--policy", policy]) as server:
        history = [{"role": "system", "content": "You tell short stories about " + words(1, 12) + "."}]
        audited, forward, radix = 0, 0.0, 0.0
        for step in range(steps):
            history.append({"role": "user", "content": words(step + 2, 10 + step % 5)})
            body = server.call("/v1/chat/completions", {"model": pathlib.Path(model).name,
                                                        "messages": history[:1] + history[1:][-8:],
                                                        "max_tokens": 6, "temperature": 0}, "trim")
            usage = body["usage"]["orbit"]
            forward += usage["forward_tokens"]
            radix += usage["radix_cache_tokens"]
            history.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
            audited += 0 if usage.get("exact_kv", usage.get("exact")) else 1  # read from exact KV: not sampled
            while server.call("/v1/sessions/trim")["audit"]["audits"] < audited:
                time.sleep(0.05)  # the audit runs in idle time, after the answer
        return server.call("/v1/sessions/trim")["audit"], forward, radix


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--orbit", default=str(REPO / "build" / "cli" / "orbit"))
    ap.add_argument("--model", default=str(REPO / "models" / "tinystories-656k"))
    ap.add_argument("--policies", default="default,patch:16:kl=0.003:heal:prep=1:move=8")
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args()
    print(f"{'policy':40s} {'audits':>6s} {'over':>5s} {'KL sum':>9s} {'KL max':>9s} {'fwd/radix':>9s}")
    for policy in a.policies.split(","):
        audit, forward, radix = run(a.orbit, a.model, policy, a.steps)
        print(f"{policy:40s} {audit['audits']:6d} {audit['violations']:5d} {audit['measured_kl_sum']:9.2e} "
              f"{audit['max_measured_kl']:9.2e} {forward / radix:9.3f}")


if __name__ == "__main__":
    main()
