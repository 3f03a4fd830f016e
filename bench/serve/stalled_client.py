#!/usr/bin/env python3
"""What a streamed request whose client never reads costs `orbit serve`: its resident memory and the decode
tokens forwarded some seconds after the request, for two binaries alternated.

    /usr/bin/python3 bench/serve/stalled_client.py --old OLD_ORBIT --new NEW_ORBIT [--new-args "--max-unsent-kb 64"]
        [--model models/stories260K/stories260K.bin] [--choices 32,64] [--max-tokens 480] [--wait 6] [--rounds 2]

Per round, binary and n: a server is started, answers one short request, and after a second its VmRSS is read;
a raw socket (4 KiB receive buffer) sends a streamed chat request (n choices, --max-tokens, logprobs with
top_logprobs 20, BOS and EOS biased out so every choice runs to max_tokens) and never reads; after --wait
seconds VmRSS and orbit_decode_tokens_total are read, the socket is closed and the server stopped. The old
binary decodes the whole answer into memory; the new one holds the request past --max-unsent-kb. A benchmark,
not a test: on a loaded machine read the ranges.
"""
import argparse
import json
import os
import re
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from serve_process import ServeProcess  # noqa: E402


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1])


def stalled_run(binary, args, model, n, max_tokens, wait):
    """(RSS before, RSS after, decode tokens) for one stalled stream on a fresh server."""
    server = ServeProcess(binary, model, args)
    name = os.path.basename(model)
    try:
        server.call("/v1/chat/completions", {"model": name, "max_tokens": 8, "messages": [{"role": "user",
                                                                                        "content": "Hi"}]})
        time.sleep(1)
        before = rss_kib(server.pid)
        body = json.dumps({"model": name, "stream": True, "n": n, "max_tokens": max_tokens, "temperature": 0,
                           "logprobs": True, "top_logprobs": 20, "logit_bias": {"1": -100, "2": -100},
                           "messages": [{"role": "user", "content": "Tell me a long story."}]}).encode()
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((server.host, server.port))
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            time.sleep(wait)
            text = server.call("/metrics")
            tokens = int(float(re.search(r"^orbit_decode_tokens_total (\S+)$", text, re.M).group(1)))
            return before, rss_kib(server.pid), tokens
    finally:
        server.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", required=True)
    p.add_argument("--new", required=True)
    p.add_argument("--new-args", default="", help="extra arguments for the new binary (e.g. --max-unsent-kb 64)")
    p.add_argument("--model", default="models/stories260K/stories260K.bin")
    p.add_argument("--choices", default="32,64")
    p.add_argument("--max-tokens", type=int, default=480)
    p.add_argument("--wait", type=float, default=6)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    binaries = [("old", a.old, []), ("new", a.new, a.new_args.split())]
    for r in range(a.rounds):
        for label, binary, args in binaries if r % 2 == 0 else binaries[::-1]:
            for n in (int(c) for c in a.choices.split(",")):
                before, after, tokens = stalled_run(binary, args, a.model, n, a.max_tokens, a.wait)
                print(f"round {r} {label} n={n}: RSS {before} -> {after} KiB (+{(after - before) / 1024:.1f} MiB), "
                      f"decode tokens {tokens}", flush=True)


if __name__ == "__main__":
    main()
