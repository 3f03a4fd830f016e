#!/usr/bin/env python3
"""What a policy forwards, and loses, on bench/serve/load.py's agents, one agent at a time.

Each agent is load.py's (a system prompt; per request a question, every fourth a story page as a tool result
before it, every seventh the oldest exchange trimmed, the answer appended, the history kept under
--history-chars), sent to its own `orbit serve` (nothing one agent's window learned serves another's) with
`--audit RATE`. Per agent it prints one JSON line: orbit's forward tokens and the radix yardstick's over the
same requests (usage.orbit, as load.py counts them), and with RATE > 0 the session's audit totals (audits,
violations of the policy's budget, largest and summed first-token KL against a re-prefill). Audits feed the
engine's fidelity correction and a violation serves the next requests exactly, so a run under --audit 1
forwards fewer or more tokens than one under --audit 0: take the tokens from --audit 0.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/fidelity/served_agent_losses.py --policy default --agents 0,1,2,3
    ... --model models/stories260K/stories260K.bin --history-chars 500      # its context is 512 tokens

Each line also counts the requests read from exact KV (usage.orbit.exact_kv: not sampled for an audit unless
--audit-exact) and, of the audits reported in a later response, the largest KL measured on a request read from
exact KV and the smallest on one read from approximate KV: with --audit-exact, a check that the server's
exactness bookkeeping agrees with what the audits measure. --deterministic passes orbit serve's flag (plans,
and so tokens, repeat from run to run).

    ... --agents 0,1,2,3 --audit-exact --deterministic

Not a test: a measurement (without --deterministic tokens vary a little from run to run: idle-time work depends
on timing).
"""
import argparse
import json
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tools"), str(REPO / "bench" / "serve")]
from serve_process import ServeProcess  # noqa: E402
from load import PAGES, QUESTIONS  # noqa: E402  (the agents' texts, as load.py sends them)


def next_messages(messages, index, i, history_chars):
    """load.py's Agent: request i of agent `index` edits `messages` in place."""
    if i % 4 == 0:
        messages.append({"role": "tool", "tool_call_id": f"call_page_{index}_{i}",
                         "content": PAGES[(index + i // 4) % len(PAGES)]})
    if i % 7 == 6 and len(messages) > 4:
        del messages[1:3]
    messages.append({"role": "user", "content": QUESTIONS[(index + i) % len(QUESTIONS)]})
    while sum(len(m["content"]) for m in messages) > history_chars and len(messages) > 2:
        del messages[1]


def run_agent(server, model, index, a):
    session = f"agent-{index}"
    messages = [{"role": "system", "content": "You tell short stories."}]
    forward = radix = audited = 0
    credit = 0.0
    exact_kv = []  # per request: read from exact KV
    measured = {True: [], False: []}  # the audits reported, by whether their request read exact KV
    for i in range(a.requests):
        next_messages(messages, index, i, a.history_chars)
        body = server.call("/v1/chat/completions", {"model": model, "messages": messages,
                                                    "max_tokens": a.max_tokens, "temperature": 0}, session)
        usage = body["usage"]["orbit"]
        forward += usage["forward_tokens"]
        radix += usage["radix_cache_tokens"]
        messages.append({"role": "assistant", "content": body["choices"][0]["message"]["content"] or ""})
        exact_kv.append(bool(usage.get("exact_kv", False)))
        if "audit" in usage:  # an earlier request's (request numbers start at 1)
            measured[exact_kv[usage["audit"]["request"] - 1]].append(usage["audit"]["measured_kl"])
        if a.audit > 0 and (a.audit_exact or not usage.get("exact_kv", usage.get("exact"))):
            credit += a.audit  # the server's sample (Auditor::due): every 1/RATE-th request it offers
            if credit < 1 - 1e-9:
                continue
            credit -= 1
            audited += 1
            deadline = time.time() + 60
            while server.call(f"/v1/sessions/{session}")["audit"]["audits"] < audited and time.time() < deadline:
                time.sleep(0.05)  # the audit runs in idle time, after the answer
    out = {"agent": index, "forward_tokens": forward, "radix_tokens": radix, "exact_kv_requests": sum(exact_kv)}
    if measured[True]:
        out["max_kl_exact_kv"] = max(measured[True])
    if measured[False]:
        out["min_kl_approximate"] = min(measured[False])
    if a.audit > 0:
        t = server.call(f"/v1/sessions/{session}")["audit"]
        out.update(audits=t["audits"], violations=t["violations"], max_kl=t["max_measured_kl"],
                   kl_sum=t["measured_kl_sum"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--orbit", default=str(REPO / "build" / "cli" / "orbit"))
    ap.add_argument("--model", default=str(REPO / "models" / "tinystories-656k"))
    ap.add_argument("--policy", default="default")
    ap.add_argument("--agents", default="0", help="load.py agent indices, comma-separated")
    ap.add_argument("--audit", type=float, default=1.0, help="orbit serve --audit RATE (0: tokens only)")
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--history-chars", type=int, default=900)
    ap.add_argument("--audit-exact", action="store_true", help="orbit serve --audit-exact: audit requests read "
                    "from exact KV too")
    ap.add_argument("--deterministic", action="store_true", help="orbit serve --deterministic")
    a = ap.parse_args()
    extra = (["--audit-exact"] if a.audit_exact else []) + (["--deterministic"] if a.deterministic else [])
    for index in [int(x) for x in a.agents.split(",")]:
        with ServeProcess(a.orbit, a.model, ["--audit", str(a.audit), "--policy", a.policy, *extra]) as server:
            model = server.call("/v1/models")["data"][0]["id"]
            out = run_agent(server, model, index, a)
        out.update(policy=a.policy, model=pathlib.Path(a.model).name, audit=a.audit, history_chars=a.history_chars)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
