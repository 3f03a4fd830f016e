#!/usr/bin/env python3
"""What an owed audit costs the client whose request runs it (`orbit serve --audit`, audit.h).

Requests sent back to back leave the idle worker no time, so an audit idle time did not reach is owed and run by
a later request (`--audit-owed-after`, default 1): two reads on the audited fork, one a full re-prefill. This
times that: one session that trims its history (the system message and its last 8 messages, as agents do past a
length), streamed answers, each request sent as soon as the last one's stream ended (no think time), against a
server started here on 127.0.0.1 (always stopped). With `--audit 0.5` every second request is sampled
(Auditor::due: the 2nd, 4th, ...; a request read from exact KV, exact mode's included, is neither sampled nor
counted, replayed here from usage.orbit.exact_kv, or usage.orbit.exact from a binary that does not report it),
so the request after a sampled one owes its audit and the others owe none. Printed, per server and group:
requests, TTFT (first content event) and total (the stream's [DONE]) min / median in ms:

    owed      requests that an audit was owed to (`--audit-owed-after 1`)
    not owed  the other requests of the same server (sampled ones included: they fork their window)
    idle only every request of a server with `--audit-owed-after 0` (audits left to idle time and dropped)
    no audit  every request of a server with `--audit 0`: the baseline

`--orbit-old PATH` adds the same runs for another binary. Rounds alternate the servers (and binaries), each
round a fresh server, so that the machine's load falls on all alike. `/metrics`' orbit_audits_owed_total,
read at each round's end, is printed beside the owed requests counted here. Not a test: a measurement.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/serve/audit_cost.py --rounds 5 --steps 40
"""
import argparse
import http.client
import json
import pathlib
import re
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO / "bench" / "serve"))
from audit_trim import words  # noqa: E402  (the trimming session's messages)
from serve_process import ServeProcess  # noqa: E402  (starts and always stops `orbit serve`)


def streamed(conn, body, session):
    """One streamed chat request on a kept-alive connection: (ttft s, total s, usage, text)."""
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json", "X-Orbit-Session": session})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"status {response.status}: {response.read()[:300]!r}")
    ttft, usage, text = None, None, []
    for raw in response:  # lines of the event stream
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            break
        event = json.loads(line[6:])
        if event.get("usage"):
            usage = event["usage"]
        for choice in event.get("choices", []):
            delta = choice.get("delta", {}).get("content")
            if delta:
                text.append(delta)
                if ttft is None:
                    ttft = time.perf_counter() - t0
    response.read()
    total = time.perf_counter() - t0
    return (ttft if ttft is not None else total), total, usage, "".join(text)


def metric(text, name):
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


def run_server(orbit, model, owed_after, rate, steps, max_tokens, extra=()):
    """One server, one conversation: [(owed, ttft, total)] and the server's orbit_audits_owed_total."""
    # --audit 0 refuses --audit-owed-after (it would do nothing)
    args = ["--audit", str(rate), *(["--audit-owed-after", str(owed_after)] if rate > 0 else []), *extra]
    with ServeProcess(orbit, model, args) as server:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=300)
        history = [{"role": "system", "content": "You tell short stories about " + words(1, 12) + "."}]
        credit, sampled_before, rows = 0.0, False, []
        for step in range(steps):
            history.append({"role": "user", "content": words(step + 2, 10 + step % 5)})
            body = {"model": pathlib.Path(model).name, "messages": history[:1] + history[1:][-8:],
                    "max_tokens": max_tokens, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}}
            ttft, total, usage, text = streamed(conn, body, "cost")
            history.append({"role": "assistant", "content": text})
            rows.append((sampled_before and owed_after > 0, ttft, total))
            orbit = (usage or {}).get("orbit", {})
            exact = bool(orbit.get("exact_kv", orbit.get("exact")))
            sampled_before = False
            if not exact:  # Auditor::due's credit (an exact request is not sampled, nor counted)
                credit += rate
                if credit >= 1 - 1e-9:
                    credit -= 1
                    sampled_before = True
        conn.close()
        owed_total = metric(server.call("/metrics"), "orbit_audits_owed_total")
    return rows, owed_total


def ms(values):
    return (f"{min(values) * 1e3:7.2f} {statistics.median(values) * 1e3:7.2f}" if values else f"{'-':>7s} {'-':>7s}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--orbit", default=str(REPO / "build" / "cli" / "orbit"))
    ap.add_argument("--orbit-old", default="", help="a second binary, timed in the same rounds")
    ap.add_argument("--args", default="", help="more options for --orbit's servers (space-separated)")
    ap.add_argument("--model", default=str(REPO / "models" / "tinystories-656k"))
    ap.add_argument("--rate", type=float, default=0.5, help="--audit RATE (0.5: every second request sampled)")
    ap.add_argument("--steps", type=int, default=40, help="requests per server")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    binaries = [("new", a.orbit, a.args.split())] + ([("old", a.orbit_old, [])] if a.orbit_old else [])
    groups = {}  # (binary, group) -> ([ttft], [total])
    owed_counted, owed_metric = {}, {}
    for _ in range(a.rounds):
        for name, orbit, extra in binaries:
            for owed_after, rate in ((1, a.rate), (0, a.rate), (1, 0.0)):
                rows, owed_total = run_server(orbit, a.model, owed_after, rate, a.steps, a.max_tokens, extra)
                for owed, ttft, total in rows[1:]:  # the first request opens the session
                    group = ("no audit" if rate == 0 else "idle only" if owed_after == 0 else
                             "owed" if owed else "not owed")
                    ttfts, totals = groups.setdefault((name, group), ([], []))
                    ttfts.append(ttft)
                    totals.append(total)
                if owed_after and rate:
                    owed_counted[name] = owed_counted.get(name, 0) + sum(1 for r in rows if r[0])
                    owed_metric[name] = owed_metric.get(name, 0) + owed_total
    print(f"{'binary':6s} {'group':10s} {'n':>4s} {'TTFT min':>8s} {'median':>7s} {'total min':>9s} {'median':>7s}")
    for name, _, _ in binaries:
        for group in ("owed", "not owed", "idle only", "no audit"):
            ttfts, totals = groups.get((name, group), ([], []))
            print(f"{name:6s} {group:10s} {len(ttfts):4d} {ms(ttfts):>16s} {ms(totals):>17s}")
        print(f"{name:6s} owed requests counted here {owed_counted.get(name, 0)}, "
              f"orbit_audits_owed_total {owed_metric.get(name, 0):.0f}")


if __name__ == "__main__":
    main()
