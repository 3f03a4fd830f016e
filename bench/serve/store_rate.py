"""Stored chat completions per second under concurrent clients, with and without group commit.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/serve/store_rate.py [--clients 16] [--seconds 5] [--rounds 3]

Starts `orbit serve` twice on 127.0.0.1 (free ports), each on a fresh store directory (on the filesystem of
--dir, default /tmp: the fsync each commit makes is what is measured), one with `--store-group-commit off`
(one transaction, so one sync of the disk, per stored completion: the old behaviour) and one with it on
(completions that arrive together share one). Each round runs the two in turn: --clients threads, each
with a keep-alive connection and a session of its own, send `store: true` chat completions (max_tokens 2,
the same short message) for --seconds; a round reports completions per second and, from /metrics, the
completions written per commit, and then the same clients with `store: false` on the second server (nothing
written: the ceiling). The last line is the ratio of the medians (on / off). Every stored answer must be a
200 with `Orbit-Stored: true`. Both modes check the store before each run (store_write.h): "off" is the
group commit's absence, not the server before that check. Both servers are stopped at the end, whatever
happens. Standard library only.
"""
import argparse
import http.client
import json
import os
import pathlib
import re
import statistics
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
from serve_process import ServeProcess  # noqa: E402


def metric(server, name):
    text = server.call("/metrics")
    return float(re.search("^" + re.escape(name) + r" (\S+)$", text, re.M).group(1))


def client(server, worker, body, stop, counts, errors):
    connection = http.client.HTTPConnection(server.host, server.port, timeout=120)
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "X-Orbit-Session": f"bench-{worker}"}
    done = 0
    try:
        while not stop.is_set():
            connection.request("POST", "/v1/chat/completions", body=data, headers=headers)
            response = connection.getresponse()
            response.read()
            if response.status != 200 or response.getheader("Orbit-Stored") != ("true" if body["store"] else None):
                errors.append(f"status {response.status}, Orbit-Stored {response.getheader('Orbit-Stored')}")
                return
            done += 1
    finally:
        counts[worker] = done
        connection.close()


def round_on(server, clients, seconds, model_name, store=True):
    """(completions per second, completions written per commit) of one timed run."""
    body = {"model": model_name, "store": store, "max_tokens": 2, "temperature": 0,
            "messages": [{"role": "user", "content": "Once upon a time"}]}
    stored0 = metric(server, "orbit_chat_completions_stored_total")
    commits0 = metric(server, "orbit_chat_completions_commits_total")
    stop, counts, errors = threading.Event(), [0] * clients, []
    threads = [threading.Thread(target=client, args=(server, w, body, stop, counts, errors)) for w in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"a stored completion failed: {errors[0]}")
    stored = metric(server, "orbit_chat_completions_stored_total") - stored0
    commits = metric(server, "orbit_chat_completions_commits_total") - commits0
    return sum(counts) / elapsed, stored / max(commits, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--orbit", default=str(REPO / "build/cli/orbit"))
    parser.add_argument("--model", default=str(REPO / "models/stories260K/stories260K.bin"))
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default="/tmp", help="where the stores are made (its filesystem's fsync counts)")
    args = parser.parse_args()
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    rates = {"off": [], "on": [], "store false": []}
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        servers = {}
        try:
            for mode in ("off", "on"):
                servers[mode] = ServeProcess(args.orbit, args.model, ["--store", f"{root}/{mode}",
                                                                      "--store-group-commit", mode], env=env)
            name = pathlib.Path(args.model).name
            for mode in ("off", "on"):  # a warm-up: sessions made, the prompt's chunk stored
                round_on(servers[mode], args.clients, 1, name)
            print(f"{args.clients} clients, {args.seconds:g} s per run, store in {args.dir}")
            print("| round | group commit | stored completions/s | completions per commit |")
            print("|---|---|---|---|")
            for r in range(args.rounds):
                for mode in ("off", "on"):
                    rate, per_commit = round_on(servers[mode], args.clients, args.seconds, name)
                    rates[mode].append(rate)
                    print(f"| {r + 1} | {mode} | {rate:.0f} | {per_commit:.2f} |", flush=True)
                rate, _ = round_on(servers["on"], args.clients, args.seconds, name, store=False)
                rates["store false"].append(rate)
                print(f"| {r + 1} | (store false) | {rate:.0f} | |", flush=True)
        finally:
            for server in servers.values():
                server.stop()
    on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
    free = statistics.median(rates["store false"])
    print(f"median: off {off:.0f}/s, on {on:.0f}/s, ratio on/off {on / off:.2f}x "
          f"(store false, nothing written: {free:.0f}/s)")


if __name__ == "__main__":
    main()
