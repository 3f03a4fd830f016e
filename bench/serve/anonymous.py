#!/usr/bin/env python3
"""Anonymous windows against named sessions: agents that send no session header, as OpenAI clients do.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/serve/anonymous.py [--orbit build/cli/orbit]
        [--model models/tinystories-656k] [--agents 4] [--requests 20] [--anonymous-windows N] [--repeat 1]

Starts `orbit serve` on 127.0.0.1 (a free port, --no-anticipate so idle work does not blur the counts) for
each run, and sends the agents' requests in turn, one at a time (agent 0, 1, ..., then 0 again): each agent
keeps a conversation under the same system prompt (every fourth request a tool page, every seventh a trim of
its oldest exchange, its history kept under 800 characters, the answer appended), as load.py's agents do.
It runs the same requests twice on fresh servers: with an X-Orbit-Session header per agent (each agent's
window is its own), and with none (the server picks one of its anonymous windows per request by the
messages it shares, cli/serve/sessions/session_table.h). It prints, per run, the critical-path forward tokens
against the radix yardstick's, the window operations the plans named (recalls and evictions: a request
in another agent's window evicts that history and recalls its own), and the wall time. With as many
anonymous windows as agents (the default is 4), the anonymous run should do what the named one does.
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load import PAGES, QUESTIONS, post  # noqa: E402


def serve(args):
    cmd = [args.orbit, "serve", "--model", args.model, "--port", "0", "--no-anticipate"]
    if args.anonymous_windows:
        cmd += ["--anonymous-windows", str(args.anonymous_windows)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    m = re.search(r"listening on http://([^:]+):(\d+)", proc.stdout.readline())
    if not m:
        proc.kill()
        sys.exit("orbit serve did not start")
    return proc, m.group(1), int(m.group(2))


def plan_count(plan, op):
    m = re.search(rf"\b{op} (\d+)", plan or "")
    return int(m.group(1)) if m else 0


def run(args, named):
    proc, host, port = serve(args)
    totals = {"forward": 0.0, "radix": 0, "recall": 0, "evict": 0, "seconds": 0.0}
    try:
        conn = http.client.HTTPConnection(host, port, timeout=600)
        conn.request("GET", "/v1/models")
        model = json.loads(conn.getresponse().read())["data"][0]["id"]
        lists = [[{"role": "system", "content": "You tell short stories."}] for _ in range(args.agents)]
        t0 = time.perf_counter()
        for i in range(args.requests):
            for a, msgs in enumerate(lists):
                if i % 4 == 0:
                    # its call trimmed away; the server requires the tool_call_id, not the call it names
                    msgs.append({"role": "tool", "tool_call_id": f"call_page_{a}_{i}",
                                 "content": PAGES[(a + i // 4) % len(PAGES)] + f" (page {a}.{i})"})
                if i % 7 == 6 and len(msgs) > 4:
                    del msgs[1:3]
                msgs.append({"role": "user", "content": QUESTIONS[(a + i) % len(QUESTIONS)]})
                while sum(len(m["content"]) for m in msgs) > 800 and len(msgs) > 2:
                    del msgs[1]
                body = {"model": model, "messages": msgs, "max_tokens": 16, "temperature": 0}
                status, text = post(conn, "/v1/chat/completions", body, {"X-Orbit-Session": f"agent-{a}"} if named else {})
                if status != 200:
                    sys.exit(f"request failed ({status}): {text[:300]}")
                r = json.loads(text)
                o = r["usage"]["orbit"]
                totals["forward"] += o["forward_tokens"]
                totals["radix"] += o["radix_cache_tokens"]
                for op in ("recall", "evict"):
                    totals[op] += plan_count(o.get("plan"), op)
                msgs.append({"role": "assistant", "content": r["choices"][0]["message"]["content"] or ""})
        totals["seconds"] = time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    return totals


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--orbit", default="build/cli/orbit")
    ap.add_argument("--model", default="models/tinystories-656k")
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--requests", type=int, default=20, help="requests per agent")
    ap.add_argument("--anonymous-windows", type=int, default=0, help="orbit serve --anonymous-windows (0: its default)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each kind, alternated")
    args = ap.parse_args()
    print(f"{args.agents} agents x {args.requests} requests in turn, model {args.model}, "
          f"anonymous windows {args.anonymous_windows or 'default'}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')}")
    print(f"{'run':<10} {'orbit fwd':>9} {'radix fwd':>9} {'orbit/radix':>11} {'recalls':>7} {'evictions':>9} {'wall s':>7}")
    for _ in range(args.repeat):
        for named in (True, False):
            t = run(args, named)
            print(f"{'named' if named else 'anonymous':<10} {t['forward']:>9.0f} {t['radix']:>9} "
                  f"{t['forward'] / t['radix']:>11.3f} {t['recall']:>7} {t['evict']:>9} {t['seconds']:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
