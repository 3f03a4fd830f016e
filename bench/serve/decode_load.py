#!/usr/bin/env python3
"""Batched decode through `orbit serve`: one session against many at once, n choices against n requests.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/serve/decode_load.py [--orbit build/cli/orbit]
        [--model models/tinystories-656k] [--sessions 16] [--tokens 300] [--forks 8] [--client native|raw|threads]
        [--json OUT]
    (also: bench/serve/load.py --decode ...)

Starts the server itself (127.0.0.1, a free port; tools/serve_process.py) and always stops it. Three runs:

  alone      one session streams --tokens tokens (temperature 0, end of text biased away so every answer
             runs to its limit)
  together   --sessions sessions stream at once, each its own session and prompt: the decode scheduler puts
             them in one batch, one forward per step (each session is opened by a one-token request first,
             so that the timed answers start together; the alone run does the same)
  forks      one request with n = --forks (temperature 0.8, seed 1; choice i draws with seed 1 + i, all
             decoded together) against --forks requests one after another (seeds 1 .. n, one session each)

--client: how the streams are read. native (the default where build/bench/bench_stream_client is built):
that C++ client reads every stream in one epoll thread and only counts its events; raw (the default
otherwise): the same in one Python thread over raw sockets (raw_client.py); threads: a urllib thread per
session parsing every event as JSON, which on a 2-core machine takes about as much CPU as the server's
decode thread at 16 sessions, so it measured the client as much as the server.

It prints generated tokens/s (aggregate over the run's wall time), p50/p99 of the streamed inter-token gaps,
the ratios side by side, and the mean decode batch the server reports in /metrics
(orbit_decode_batch_sequences), the server's CPU time (in all, and its busiest thread's) and the client's
(opening requests included). A benchmark, not a test: times depend on the machine and its
load (the client shares the machine with the server).
"""
import argparse
import json
import math
import os
import re
import resource
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from serve_process import ServeProcess  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import raw_client  # noqa: E402

PROMPTS = ["Tell me a story about a dog.", "Tell me a story about a boat.", "Tell me a story about a tree.",
           "Tell me a story about the sun.", "Tell me a story about a cat.", "Tell me a story about rain."]
END_OF_TEXT = 2  # the bundled models' end-of-text token (llama2.c and TinyStories tokenizers)
# The native load client (bench/serve/stream_client.cpp), built with the benchmarks; ORBIT_STREAM_CLIENT: another.
NATIVE_CLIENT = os.environ.get("ORBIT_STREAM_CLIENT") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "bench", "bench_stream_client")


def post_url(url, body, session, timeout=900):
    """POSTs a chat completion to the server at `url` in session `session`; the open response."""
    request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("X-Orbit-Session", session)
    return urllib.request.urlopen(request, timeout=timeout)


def post(server, body, session, timeout=900):
    return post_url(server.url, body, session, timeout)


def read_stream(response, session):
    """Reads a streamed chat answer to its end: (the arrival time of each chunk with content, the usage)."""
    arrivals, usage = [], None
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
            arrivals.append(time.perf_counter())
        usage = chunk.get("usage") or usage
    if usage is None:
        raise RuntimeError(f"session {session}: the stream ended without usage")
    return arrivals, usage


def chat_body(model, index, tokens, **extra):
    return {"model": model, "messages": [{"role": "user", "content": PROMPTS[index % len(PROMPTS)]}],
            "max_tokens": tokens, "temperature": 0, "logit_bias": {str(END_OF_TEXT): -100}, **extra}


def stream_one(server, model, index, tokens, session, out, start=None):
    """Streams one answer; appends {tokens, seconds, gaps} (gaps: seconds between content chunks). With
    `start` (a barrier), the session is first opened by a one-token request (its prompt prefilled), then
    every thread sends its timed request at once, so the answers decode side by side from their first step."""
    if start is not None:
        with post(server, chat_body(model, index, 1), session) as r:
            r.read()
        start.wait()
    body = chat_body(model, index, tokens, stream=True, stream_options={"include_usage": True})
    t0 = time.perf_counter()
    with post(server, body, session) as response:
        arrivals, usage = read_stream(response, session)
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    out.append({"tokens": usage["completion_tokens"], "seconds": time.perf_counter() - t0, "gaps": gaps})


def default_client():
    """native where bench_stream_client is built, else raw."""
    return "native" if os.access(NATIVE_CLIENT, os.X_OK) else "raw"


def streams(server, model, count, tokens, tag, client="raw"):
    """`count` sessions streaming at once; the run's tokens, wall seconds and inter-token gaps. client
    "native": bench_stream_client (C++, one epoll thread) reads every stream; "raw": one Python thread over
    raw sockets (raw_client.py); "threads": a urllib thread per session, each event parsed as JSON (costs
    the client about as much CPU as the server's decode thread)."""
    if client in ("native", "raw"):
        sessions = [f"{tag}-{i}" for i in range(count)]
        opening = [chat_body(model, i, 1) for i in range(count)]
        timed = [chat_body(model, i, tokens, stream=True, stream_options={"include_usage": True})
                 for i in range(count)]
        if client == "native":
            return raw_client.native_streams(NATIVE_CLIENT, server.host, server.port, opening, timed, sessions)
        return raw_client.streams(server.host, server.port, opening, timed, sessions)
    if client != "threads":
        raise ValueError(f"client must be 'native', 'raw' or 'threads', got {client!r}")
    out, starts = [], []
    start = threading.Barrier(count + 1, action=lambda: starts.append(time.perf_counter()))
    threads = [threading.Thread(target=stream_one, args=(server, model, i, tokens, f"{tag}-{i}", out, start))
               for i in range(count)]
    for t in threads:
        t.start()
    start.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - starts[0]
    if len(out) != count:
        raise RuntimeError(f"{tag}: {count - len(out)} of {count} streams failed (see the errors above)")
    return {"sequences": count, "tokens": sum(r["tokens"] for r in out), "seconds": wall,
            "gaps": sorted(g for r in out for g in r["gaps"])}


def forks(server, model, n, tokens, together):
    """n answers to one prompt: one request with n (together) or n requests in turn (seeds 1 .. n)."""
    sampled = {"temperature": 0.8}
    t0 = time.perf_counter()
    total = 0
    if together:
        with post(server, chat_body(model, 0, tokens, n=n, seed=1, **sampled), "forks-n") as r:
            total = json.loads(r.read())["usage"]["completion_tokens"]
    else:
        for i in range(n):
            with post(server, chat_body(model, 0, tokens, seed=1 + i, **sampled), f"forks-seq-{i}") as r:
                total += json.loads(r.read())["usage"]["completion_tokens"]
    return {"sequences": n, "tokens": total, "seconds": time.perf_counter() - t0, "gaps": []}


def percentile(values, p):
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def batch_histogram(metrics):
    """(steps, sequences summed over steps) of orbit_decode_batch_sequences."""
    def value(name):
        m = re.search(rf"^{name} (\S+)$", metrics, re.M)
        return float(m.group(1)) if m else 0.0
    return value("orbit_decode_batch_sequences_count"), value("orbit_decode_batch_sequences_sum")


def thread_cpu(pid):
    """CPU seconds (user + system) of each of the process's threads, by thread id (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended
        out[tid] = (int(fields[11]) + int(fields[12])) / ticks
    return out


def client_cpu():
    """CPU seconds of this process and of its children that ended (the native client; the server has not)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def measured(server, label, run):
    """run() with the decode steps it took (/metrics before and after) and the server's CPU time: in all,
    and of its busiest thread (the decode scheduler's when decode dominates)."""
    steps0, seqs0 = batch_histogram(server.call("/metrics"))
    cpu0, client0 = thread_cpu(server.pid), client_cpu()
    result = run()
    cpu1, client1 = thread_cpu(server.pid), client_cpu()
    steps1, seqs1 = batch_histogram(server.call("/metrics"))
    used = [cpu1[t] - cpu0.get(t, 0.0) for t in cpu1]
    result["server_cpu_seconds"] = sum(used)
    result["client_cpu_seconds"] = client1 - client0  # the load client (its opening requests too)
    result["busiest_thread_cpu_seconds"] = max(used, default=0.0)
    result["label"] = label
    result["steps"] = steps1 - steps0
    result["mean_batch"] = (seqs1 - seqs0) / (steps1 - steps0) if steps1 > steps0 else float("nan")
    result["tokens_per_second"] = result["tokens"] / result["seconds"]
    return result


def report(args, model, runs):
    print(f"orbit serve batched decode: model {model} on {args.device} in {args.dtype}, {args.tokens} tokens per "
          f"answer, client {args.client}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')}")
    print(f"{'run':<22} {'seqs':>4} {'tokens':>7} {'wall s':>7} {'tok/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'steps':>6} {'mean batch':>10} {'server cpu s':>12} {'busiest thread s':>16} {'client cpu s':>12}")
    for r in runs.values():
        print(f"{r['label']:<22} {r['sequences']:>4} {r['tokens']:>7} {r['seconds']:>7.2f} "
              f"{r['tokens_per_second']:>8.1f} {1e3 * percentile(r['gaps'], 50):>7.2f} "
              f"{1e3 * percentile(r['gaps'], 99):>7.2f} {r['steps']:>6.0f} {r['mean_batch']:>10.2f} "
              f"{r['server_cpu_seconds']:>12.2f} {r['busiest_thread_cpu_seconds']:>16.2f} "
              f"{r['client_cpu_seconds']:>12.2f}")
    scale = runs["together"]["tokens_per_second"] / runs["alone"]["tokens_per_second"]
    fork_speed = runs["forks_apart"]["seconds"] / runs["forks_together"]["seconds"]
    print(f"{args.sessions} sessions at once: {scale:.2f}x the aggregate tokens/s of one session alone")
    print(f"n = {args.forks} in one request: {fork_speed:.2f}x faster than {args.forks} requests one after another")
    # Tokens per second of the server's busiest thread's CPU time: what the runs would reach with that thread
    # alone on a core (the rest of the server, the client and other load on other cores).
    together_cpu = runs["together"]["busiest_thread_cpu_seconds"]
    alone_cpu = runs["alone"]["busiest_thread_cpu_seconds"]  # 10 ms ticks: 0 for a short answer
    cpu_scale = ((runs["together"]["tokens"] / together_cpu) / (runs["alone"]["tokens"] / alone_cpu)
                 if together_cpu > 0 and alone_cpu > 0 else float("nan"))
    if math.isnan(cpu_scale):
        print("per CPU second of the busiest server thread: not measured (a run shorter than the CPU clock's "
              "10 ms ticks; give more --tokens)")
    else:
        print(f"per CPU second of the busiest server thread: {args.sessions} sessions {cpu_scale:.2f}x one session")
    return {"sessions_scale": scale, "forks_speedup": fork_speed, "sessions_scale_busiest_cpu": cpu_scale}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--orbit", default="build/cli/orbit")
    ap.add_argument("--model", default="models/tinystories-656k")
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=300, help="tokens per answer (the bundled models' context is 512)")
    ap.add_argument("--forks", type=int, default=8)
    ap.add_argument("--device", default="cpu", help="orbit serve --device (cpu, cuda, cuda:N)")
    ap.add_argument("--dtype", default="float32", help="orbit serve --dtype (float32, bfloat16, float16)")
    ap.add_argument("--client", default=default_client(), choices=("native", "raw", "threads"),
                    help="native (the default where built): bench_stream_client reads every stream; raw: one Python "
                         "thread over raw sockets; threads: a urllib thread per session, each event parsed as JSON")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    for name in ("sessions", "tokens", "forks"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    serve_args = ["--max-sessions", str(args.sessions + args.forks + 8), "--device", args.device, "--dtype", args.dtype]
    with ServeProcess(args.orbit, args.model, serve_args, env=env) as s:
        model = s.call("/v1/models")["data"][0]["id"]
        streams(s, model, 1, 8, "warm")  # first-request costs (allocation, tokenizer) out of the runs
        runs = {
            "alone": measured(s, "1 session", lambda: streams(s, model, 1, args.tokens, "alone", args.client)),
            "together": measured(s, f"{args.sessions} sessions at once",
                                 lambda: streams(s, model, args.sessions, args.tokens, "together", args.client)),
            "forks_together": measured(s, f"n={args.forks} in one request",
                                       lambda: forks(s, model, args.forks, args.tokens, True)),
            "forks_apart": measured(s, f"{args.forks} requests in turn",
                                    lambda: forks(s, model, args.forks, args.tokens, False)),
        }
    ratios = report(args, model, runs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, **ratios}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
