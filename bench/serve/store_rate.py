"""Stored chat completions (or responses) per second under concurrent clients, with and without group commit.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/serve/store_rate.py [--api chat|responses] [--clients 16]
        [--seconds 5] [--rounds 3]

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


# What each --api sends and the /metrics counters of its store's writes.
APIS = {
    "chat": {"path": "/v1/chat/completions", "stored": "orbit_chat_completions_stored_total",
             "commits": "orbit_chat_completions_commits_total"},
    "responses": {"path": "/v1/responses", "stored": "orbit_responses_stored_total",
                  "commits": "orbit_responses_commits_total"},
}


def metric(server, name):
    """The counter `name` from /metrics, or None when the server has none."""
    match = re.search("^" + re.escape(name) + r" (\S+)$", server.call("/metrics"), re.M)
    return float(match.group(1)) if match else None


def request_body(api, model_name, store):
    if api == "chat":
        return {"model": model_name, "store": store, "max_tokens": 2, "temperature": 0,
                "messages": [{"role": "user", "content": "Once upon a time"}]}
    return {"model": model_name, "store": store, "max_output_tokens": 2, "temperature": 0,
            "input": "Once upon a time"}


def client(server, worker, path, body, stop, counts, errors):
    connection = http.client.HTTPConnection(server.host, server.port, timeout=120)
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "X-Orbit-Session": f"bench-{worker}"}
    done = 0
    try:
        while not stop.is_set():
            connection.request("POST", path, body=data, headers=headers)
            response = connection.getresponse()
            response.read()
            if response.status != 200 or response.getheader("Orbit-Stored") != ("true" if body["store"] else None):
                errors.append(f"status {response.status}, Orbit-Stored {response.getheader('Orbit-Stored')}")
                return
            done += 1
    finally:
        counts[worker] = done
        connection.close()


def round_on(server, api, clients, seconds, model_name, store=True):
    """(answers per second, answers written per commit or None) of one timed run."""
    body = request_body(api, model_name, store)
    names = APIS[api]
    stored0, commits0 = metric(server, names["stored"]), metric(server, names["commits"])
    stop, counts, errors = threading.Event(), [0] * clients, []
    threads = [threading.Thread(target=client, args=(server, w, names["path"], body, stop, counts, errors))
               for w in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"a stored answer failed: {errors[0]}")
    if stored0 is None or commits0 is None:
        return sum(counts) / elapsed, None
    stored = metric(server, names["stored"]) - stored0
    commits = metric(server, names["commits"]) - commits0
    return sum(counts) / elapsed, stored / max(commits, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--api", choices=sorted(APIS), default="chat",
                        help="chat: /v1/chat/completions; responses: /v1/responses")
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
                round_on(servers[mode], args.api, args.clients, 1, name)
            what = "completions" if args.api == "chat" else "responses"
            print(f"{args.api}: {args.clients} clients, {args.seconds:g} s per run, store in {args.dir}")
            print(f"| round | group commit | stored {what}/s | {what} per commit |")
            print("|---|---|---|---|")
            for r in range(args.rounds):
                for mode in ("off", "on"):
                    rate, per_commit = round_on(servers[mode], args.api, args.clients, args.seconds, name)
                    rates[mode].append(rate)
                    shown = "-" if per_commit is None else f"{per_commit:.2f}"
                    print(f"| {r + 1} | {mode} | {rate:.0f} | {shown} |", flush=True)
                rate, _ = round_on(servers["on"], args.api, args.clients, args.seconds, name, store=False)
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
