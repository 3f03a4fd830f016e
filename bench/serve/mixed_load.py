#!/usr/bin/env python3
"""Streaming answers while long prompts arrive: what a long prefill costs the sessions that are decoding.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/serve/mixed_load.py \
        --config "old=/tmp/orbit-old" --config "new=build/cli/orbit --prefill-chunk 64" \
        [--model models/tinystories-656k] [--sessions 8] [--tokens 300] [--long-words 330] [--interval 0.5]
        [--rounds 3] [--json OUT]

Each --config is LABEL=ORBIT [serve arguments...]; the configs run one after another in every round (old,
new, old, new, ...), each against a server of its own (127.0.0.1, a free port; tools/serve_process.py),
always stopped. One run:

  streams   --sessions sessions, each its own session and short prompt, each first opened by a one-token
            request, then all streaming --tokens tokens at once (temperature 0, end of text biased away)
  long      while they stream, a request with a long prompt (--long-words words of story text, new text
            each time so that nothing of it is reused, about 1.2 tokens a word on the bundled models) every
            --interval seconds, each in a new session, max_tokens 4, streamed: its time to first token

It prints, per config, the median over the rounds of: the streams' inter-token gap p50 / p99 / max (ms), and
p99 / max of the gaps that overlap a long request's wait for its first token ("during"),
the long requests' TTFT p50 / max (ms) and prompt tokens, and the run's tokens/s (every generated token
over the run's wall time), plus the decode steps the server ran between two pieces of a prefill
(orbit_decode_prefill_yields_total, where it has it). Also each round's figures. A benchmark, not a test:
times depend on the machine and its load (the client shares the machine with the server).

--mode shorts: short requests behind long prompts (head-of-line blocking), no streams:

  longs     --longs requests with a long prompt (as above), one after another, --interval seconds apart
  shorts    meanwhile --short-clients clients each send short prompts (a story request, each in a new
            session, max_tokens 1) one after another, --short-interval seconds apart, until the longs end

It prints the median over the rounds of the short requests' TTFT p50 / p99 / max for those sent while a long
request waited for its first token ("behind"), p50 of the others, the long requests' TTFT p50 / max, and the
short syncs the server ran between two pieces of a long prefill (orbit_prefill_guests_total, where it has it).
"""
import argparse
import json
import os
import random
import re
import shlex
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from serve_process import ServeProcess  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_load import END_OF_TEXT, PROMPTS, read_stream  # noqa: E402
from decode_load import post_url as post  # noqa: E402

WORDS = ("once upon a time there was a little girl named lily she liked to play in the park with her dog max "
         "one day they found a big red ball under a tree the sun was warm and the birds sang happy songs mom "
         "called them home for lunch and they ate soup with bread then they went back out to run and jump").split()


def stream(url, body, session):
    """Streams one answer: (content arrival times, usage, the time the request was sent)."""
    t0 = time.perf_counter()
    with post(url, {**body, "stream": True, "stream_options": {"include_usage": True}}, session) as response:
        arrivals, usage = read_stream(response, session)
    return arrivals, usage, t0


def long_text(rng, words):
    return " ".join(rng.choice(WORDS) for _ in range(words)) + ". Tell me more about it."


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def metric(url, name):
    with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
        text = r.read().decode()
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


def one_run(orbit, serve_args, args, seed):
    server = ServeProcess(orbit, args.model, serve_args)
    try:
        common = {"model": os.path.basename(os.path.normpath(args.model)), "temperature": 0,
                  "logit_bias": {str(END_OF_TEXT): -100}}
        results, failures = [None] * args.sessions, []
        start = threading.Barrier(args.sessions + 1)

        def streamer(i):
            try:
                session = f"stream-{seed}-{i}"
                opening = {**common, "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]}
                with post(server.url, {**opening, "max_tokens": 1}, session) as r:
                    r.read()
                start.wait()
                results[i] = stream(server.url, {**opening, "max_tokens": args.tokens}, session)
            except Exception as e:  # noqa: BLE001 (reported below)
                failures.append(f"stream {i}: {e}")
                start.abort()

        threads = [threading.Thread(target=streamer, args=(i,)) for i in range(args.sessions)]
        for t in threads:
            t.start()
        start.wait()
        t_start = time.perf_counter()
        longs, rng, k = [], random.Random(seed), 0
        while any(t.is_alive() for t in threads):
            time.sleep(args.interval)
            if not any(t.is_alive() for t in threads):
                break
            body = {**common, "max_tokens": 4, "messages": [{"role": "user", "content": long_text(rng, args.long_words)}]}
            arrivals, usage, t0 = stream(server.url, body, f"long-{seed}-{k}")
            k += 1
            longs.append({"ttft": (arrivals[0] - t0) if arrivals else float("nan"), "prompt": usage["prompt_tokens"],
                          "tokens": usage["completion_tokens"], "span": (t0, arrivals[0] if arrivals else t0)})
        for t in threads:
            t.join()
        wall = time.perf_counter() - t_start
        if failures:
            raise RuntimeError("; ".join(failures))
        yields = metric(server.url, "orbit_decode_prefill_yields_total")
    finally:
        server.stop()
    gaps = [b - a for arrivals, _, _ in results for a, b in zip(arrivals, arrivals[1:])]
    # The gaps that overlap a long request's wait for its first token (its prefill among it).
    spans = [x["span"] for x in longs]
    during = [b - a for arrivals, _, _ in results for a, b in zip(arrivals, arrivals[1:])
              if any(a < end and b > start for start, end in spans)]
    generated = sum(u["completion_tokens"] for _, u, _ in results) + sum(x["tokens"] for x in longs)
    return {"gap_p50_ms": percentile(gaps, 50) * 1e3, "gap_p99_ms": percentile(gaps, 99) * 1e3,
            "gap_max_ms": max(gaps) * 1e3, "during_p99_ms": percentile(during, 99) * 1e3,
            "during_max_ms": max(during, default=float("nan")) * 1e3, "ttft_p50_ms": percentile([x["ttft"] for x in longs], 50) * 1e3,
            "ttft_max_ms": max(x["ttft"] for x in longs) * 1e3 if longs else float("nan"),
            "long_requests": len(longs), "long_prompt_tokens": longs[0]["prompt"] if longs else 0,
            "tokens_per_s": generated / wall, "prefill_yields": yields}


def shorts_run(orbit, serve_args, args, seed):
    """--mode shorts: short requests in new sessions while long prompts arrive one after another."""
    server = ServeProcess(orbit, args.model, serve_args)
    try:
        common = {"model": os.path.basename(os.path.normpath(args.model)), "temperature": 0}
        stop, shorts, failures = threading.Event(), [], []

        def short_client(i):
            n = 0
            try:
                while not stop.is_set():
                    body = {**common, "max_tokens": 1,
                            "messages": [{"role": "user", "content": PROMPTS[(i + n) % len(PROMPTS)]}]}
                    arrivals, usage, t0 = stream(server.url, body, f"short-{seed}-{i}-{n}")
                    shorts.append({"t0": t0, "ttft": (arrivals[0] - t0) if arrivals else float("nan"),
                                   "prompt": usage["prompt_tokens"]})
                    n += 1
                    time.sleep(args.short_interval)
            except Exception as e:  # noqa: BLE001 (reported below)
                failures.append(f"short client {i}: {e}")

        threads = [threading.Thread(target=short_client, args=(i,)) for i in range(args.short_clients)]
        for t in threads:
            t.start()
        longs, rng = [], random.Random(seed)
        try:
            for k in range(args.longs):
                time.sleep(args.interval)
                body = {**common, "max_tokens": 4,
                        "messages": [{"role": "user", "content": long_text(rng, args.long_words)}]}
                arrivals, usage, t0 = stream(server.url, body, f"long-{seed}-{k}")
                longs.append({"ttft": (arrivals[0] - t0) if arrivals else float("nan"),
                              "prompt": usage["prompt_tokens"], "span": (t0, arrivals[0] if arrivals else t0)})
        finally:
            stop.set()
            for t in threads:
                t.join()
        if failures:
            raise RuntimeError("; ".join(failures))
        guests = metric(server.url, "orbit_prefill_guests_total")
    finally:
        server.stop()
    spans = [x["span"] for x in longs]
    behind = [x["ttft"] for x in shorts if any(start <= x["t0"] < end for start, end in spans)]
    others = [x["ttft"] for x in shorts if not any(start <= x["t0"] < end for start, end in spans)]
    return {"short_behind_p50_ms": percentile(behind, 50) * 1e3, "short_behind_p99_ms": percentile(behind, 99) * 1e3,
            "short_behind_max_ms": max(behind, default=float("nan")) * 1e3,
            "short_other_p50_ms": percentile(others, 50) * 1e3,
            "long_ttft_p50_ms": percentile([x["ttft"] for x in longs], 50) * 1e3,
            "long_ttft_max_ms": max((x["ttft"] for x in longs), default=float("nan")) * 1e3,
            "shorts_behind": len(behind), "shorts": len(shorts),
            "short_prompt_tokens": shorts[0]["prompt"] if shorts else 0,
            "long_prompt_tokens": longs[0]["prompt"] if longs else 0, "guests": guests}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", action="append", required=True, help="LABEL=ORBIT [serve arguments]")
    parser.add_argument("--model", default="models/tinystories-656k")
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--long-words", type=int, default=330)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mode", choices=["streams", "shorts"], default="streams")
    parser.add_argument("--longs", type=int, default=20, help="shorts mode: long requests per run")
    parser.add_argument("--short-clients", type=int, default=2, help="shorts mode: clients sending short prompts")
    parser.add_argument("--short-interval", type=float, default=0.005, help="shorts mode: a client's pause")
    parser.add_argument("--json")
    args = parser.parse_args()
    configs = []
    for c in args.config:
        label, _, rest = c.partition("=")
        parts = shlex.split(rest)
        configs.append((label, parts[0], parts[1:]))
    runs = {label: [] for label, _, _ in configs}
    for r in range(args.rounds):
        for label, orbit, serve_args in configs:
            out = (shorts_run if args.mode == "shorts" else one_run)(orbit, serve_args, args, seed=r)
            runs[label].append(out)
            print(f"round {r} {label:>8}: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                                         for k, v in out.items()), flush=True)
    first = runs[configs[0][0]][0]
    if args.mode == "shorts":
        print(f"\nmedian over {args.rounds} rounds ({args.longs} {first['long_prompt_tokens']}-token prompts "
              f"{args.interval} s apart; {args.short_clients} clients of {first['short_prompt_tokens']}-token prompts):")
        keys = ["short_behind_p50_ms", "short_behind_p99_ms", "short_behind_max_ms", "short_other_p50_ms",
                "long_ttft_p50_ms", "long_ttft_max_ms"]
    else:
        print(f"\nmedian over {args.rounds} rounds ({args.sessions} streams of {args.tokens} tokens; a "
              f"{first['long_prompt_tokens']}-token prompt every {args.interval} s):")
        keys = ["gap_p50_ms", "gap_p99_ms", "gap_max_ms", "during_p99_ms", "during_max_ms", "ttft_p50_ms",
                "ttft_max_ms", "tokens_per_s"]
    print(f"{'':>8} " + " ".join(f"{k:>20}" for k in keys))
    for label, _, _ in configs:
        print(f"{label:>8} " + " ".join(f"{statistics.median(x[k] for x in runs[label]):>20.1f}" for k in keys))
        print(f"{'':>8} min " + " ".join(f"{min(x[k] for x in runs[label]):.1f}" for k in keys))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
