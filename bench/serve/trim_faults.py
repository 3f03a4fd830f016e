#!/usr/bin/env python3
"""Two `orbit serve` binaries' page faults per burst of decode runs and resident memory after load and idle.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/serve/trim_faults.py --old OLD_ORBIT --new NEW_ORBIT
        [--model models/stories260K/stories260K.bin] [--sessions 16] [--tokens 300] [--repeats 8]
        [--gap 2] [--idle 8]

Starts both servers (the options of decode_compare.py), then --repeats times streams --sessions sessions of
--tokens tokens on one and then the other (the order swapped every repeat, decode_load.py's `streams`), with
--gap seconds between runs on top of the other binary's run. Per run: the minor page faults over the run
(/proc's stat, minflt) of the process and of its busiest thread (the decode scheduler's, by CPU time), and
its resident memory after it (VmRSS). At the end both servers sit idle for
--idle seconds and their resident memory is read again: the idle worker's heap trim must have brought it
down. A benchmark, not a test: on a loaded machine read the ranges.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import decode_load  # noqa: E402
from serve_process import ServeProcess  # noqa: E402


def minflt(path):
    with open(f"{path}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])  # the 10th field, counted after the name


def threads(pid):
    """{tid: (CPU ns, minor faults)} of the process's threads."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[tid] = (int(f.read().split()[0]), minflt(f"/proc/{pid}/task/{tid}"))
        except OSError:
            continue  # the thread ended
    return out


def run_faults(server, model, args, tag):
    """(the process's minor faults over one run, those of its busiest thread: the decode scheduler's)."""
    pid = server.pid
    before, threads_before = minflt(f"/proc/{pid}"), threads(pid)
    decode_load.streams(server, model, args.sessions, args.tokens, tag)
    after, threads_after = minflt(f"/proc/{pid}"), threads(pid)
    used = {t: (v[0] - threads_before.get(t, (0, 0))[0], v[1] - threads_before.get(t, (0, 0))[1])
            for t, v in threads_after.items()}
    return after - before, max(used.values())[1]


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1]) / 1024


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--model", default="models/stories260K/stories260K.bin")
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--gap", type=float, default=2.0)
    ap.add_argument("--idle", type=float, default=8.0)
    args = ap.parse_args(argv)
    if args.sessions < 1 or args.tokens < 1 or args.repeats < 1 or args.gap < 0 or args.idle < 0:
        ap.error("--sessions, --tokens and --repeats must be >= 1, --gap and --idle >= 0")
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    serve_args = ["--max-sessions", str(2 * args.sessions + 8)]
    faults = {"old": [], "new": []}
    decode_faults = {"old": [], "new": []}
    with ServeProcess(args.old, args.model, serve_args, env=env) as old, \
            ServeProcess(args.new, args.model, serve_args, env=env) as new:
        servers = {"old": old, "new": new}
        model = old.call("/v1/models")["data"][0]["id"]
        for name, s in servers.items():
            decode_load.streams(s, model, args.sessions, 8, f"{name}-warm")
        print(f"{'repeat':>6} {'binary':>6} {'faults':>8} {'decode thread':>13} {'RSS MiB':>8}")
        for r in range(args.repeats):
            for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
                time.sleep(args.gap)
                whole, decode = run_faults(servers[name], model, args, f"{name}-{r}")
                faults[name].append(whole)
                decode_faults[name].append(decode)
                print(f"{r + 1:>6} {name:>6} {whole:>8} {decode:>13} {rss_mib(servers[name].pid):>8.1f}",
                      flush=True)
        loaded = {name: rss_mib(s.pid) for name, s in servers.items()}
        time.sleep(args.idle)
        for name, s in servers.items():
            print(f"{name}: faults per run {min(faults[name])}-{max(faults[name])} "
                  f"(median {statistics.median(faults[name]):.0f}), the decode thread's "
                  f"{min(decode_faults[name])}-{max(decode_faults[name])} "
                  f"(median {statistics.median(decode_faults[name]):.0f}); RSS after load {loaded[name]:.1f} MiB, "
                  f"after {args.idle:.0f} s idle {rss_mib(s.pid):.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
