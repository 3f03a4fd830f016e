#!/usr/bin/env python3
"""Two `orbit serve` binaries' streamed decode side by side: tokens/s at 1, 4 and 16 sessions, alternated.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/serve/decode_compare.py --old OLD_ORBIT --new NEW_ORBIT
        [--model models/tinystories-656k] [--sessions 1,4,16] [--tokens 300] [--repeats 8]
        [--client native|raw|threads] [--old-client C] [--new-client C]

Starts both servers (the options of decode_load.py), then --repeats times, for each session count, streams
--tokens tokens per session on one and then the other (the order swapped every repeat), as decode_load.py's
`streams` does (each session opened by a one-token request, then all sent at once). Per run: aggregate
tokens/s, and of the server's busiest thread (the decode scheduler's) the CPU microseconds per decode step
(/proc's schedstat, in nanoseconds, over /metrics' steps), the times it was switched out involuntarily
per step, and the time per step it was runnable but waited for a CPU (schedstat's second field); and the
CPU microseconds per generated token of all the server's threads together, and of all but that one (the
request threads writing the streams, the idle worker). At the
end, per session count: each measure's range over the runs and the median of the new / old ratios of the
runs side by side. --old-client / --new-client give the two sides other clients: with --old and --new the
same binary, the clients are compared. A benchmark, not a test: on a loaded machine read the ranges.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import decode_load  # noqa: E402
from serve_process import ServeProcess  # noqa: E402


def thread_stats(pid):
    """{tid: (CPU ns, involuntary switches, ns runnable but waiting for a CPU)} of the process's threads."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns, waited = (int(v) for v in f.read().split()[:2])
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                switches = int(next(line for line in f if line.startswith("nonvoluntary_ctxt_switches")).split()[1])
        except (OSError, StopIteration):
            continue  # the thread ended
        out[tid] = (ns, switches, waited)
    return out


def measure(server, model, count, tokens, tag, client):
    """One run of `count` sessions: tok/s; of the busiest thread per step: CPU µs, involuntary switches, and
    µs it was runnable but waited for a CPU (the run queue: other threads, the client, other load); the
    server's CPU µs per token, all threads and all but the busiest."""
    steps0, _ = decode_load.batch_histogram(server.call("/metrics"))
    before = thread_stats(server.pid)
    run = decode_load.streams(server, model, count, tokens, tag, client)
    after = thread_stats(server.pid)
    steps1, _ = decode_load.batch_histogram(server.call("/metrics"))
    used = {t: tuple(a - b for a, b in zip(after[t], before.get(t, (0, 0, 0)))) for t in after}
    ns, switches, waited = max(used.values())
    steps = max(1.0, steps1 - steps0)
    total = sum(u[0] for u in used.values())
    per_token = 1e3 * max(1, run["tokens"])
    return (run["tokens"] / run["seconds"], ns / 1e3 / steps, switches / steps, waited / 1e3 / steps,
            total / per_token, (total - ns) / per_token)


def summary(counts, runs):
    names = ("tok/s", "us/step", "preempted/step", "waiting us/step", "server us/tok", "others us/tok")
    print(f"\n{'sessions':>8} {'measure':>15} {'old range':>15} {'new range':>15} {'new/old median':>15} "
          f"{'new/old range':>15}")
    for c in counts:
        for i, name in enumerate(names):
            old = [r[i] for r in runs["old"][c]]
            new = [r[i] for r in runs["new"][c]]
            ratios = [n / o for n, o in zip(new, old) if o > 0]
            digits = 2 if i in (2, 4, 5) else 0
            span = lambda v: f"{min(v):.{digits}f}-{max(v):.{digits}f}"  # noqa: E731
            if not ratios:  # every old value 0 (no preemption, say): no ratio to give
                print(f"{c:>8} {name:>15} {span(old):>15} {span(new):>15} {'-':>15} {'-':>15}")
                continue
            print(f"{c:>8} {name:>15} {span(old):>15} {span(new):>15} {statistics.median(ratios):>15.2f} "
                  f"{min(ratios):>7.2f}-{max(ratios):.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--model", default="models/tinystories-656k")
    ap.add_argument("--sessions", default="1,4,16")
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--client", default=decode_load.default_client(), choices=("native", "raw", "threads"),
                    help="decode_load.streams' client: bench_stream_client (the default where built), one Python "
                         "thread over raw sockets, or a urllib thread per session")
    ap.add_argument("--old-client", choices=("native", "raw", "threads"), help="the old side's client (--client)")
    ap.add_argument("--new-client", choices=("native", "raw", "threads"), help="the new side's client (--client)")
    args = ap.parse_args(argv)
    counts = [int(c) for c in args.sessions.split(",")]
    if any(c < 1 for c in counts) or args.tokens < 1 or args.repeats < 1:
        ap.error("--sessions, --tokens and --repeats must be >= 1")
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    serve_args = ["--max-sessions", str(2 * max(counts) + 8)]
    runs = {"old": {c: [] for c in counts}, "new": {c: [] for c in counts}}
    clients = {"old": args.old_client or args.client, "new": args.new_client or args.client}
    with ServeProcess(args.old, args.model, serve_args, env=env) as old, \
            ServeProcess(args.new, args.model, serve_args, env=env) as new:
        servers = {"old": old, "new": new}
        model = old.call("/v1/models")["data"][0]["id"]
        for name, s in servers.items():
            decode_load.streams(s, model, max(counts), 8, f"{name}-warm")
        print(f"{'repeat':>6} {'binary':>6} {'sessions':>8} {'tok/s':>9} {'us/step':>9} {'preempted/step':>14} "
              f"{'waiting us/step':>15} {'server us/tok':>13} {'others us/tok':>13}")
        for r in range(args.repeats):
            for c in counts:
                for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
                    got = measure(servers[name], model, c, args.tokens, f"{name}-{r}-{c}", clients[name])
                    runs[name][c].append(got)
                    print(f"{r + 1:>6} {name:>6} {c:>8} {got[0]:>9.0f} {got[1]:>9.0f} {got[2]:>14.2f} {got[3]:>15.0f} "
                          f"{got[4]:>13.2f} {got[5]:>13.2f}", flush=True)
    summary(counts, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
