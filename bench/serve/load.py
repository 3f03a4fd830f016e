#!/usr/bin/env python3
"""Load benchmark for `orbit serve` on loopback: concurrent agent sessions, each a growing conversation.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/serve/load.py [--orbit build/cli/orbit]
        [--model models/tinystories-656k] [--sessions 16] [--requests 20] [--max-tokens 16] [--policy SPEC]
        [--anonymous] [--anonymous-windows N] [--json OUT]

Starts the server itself (127.0.0.1, a free port). Each session is an agent: a system prompt, then per
request a user question, every fourth request a tool result (a story page, long enough to be a chunk)
before it, every seventh a trim of the oldest exchange, and the answer appended; half the sessions stream.
It runs twice: one session alone (--requests requests: the cost of a request with the engine to itself),
then all sessions at once. It prints latency p50/p99, requests/s and generated tokens/s for both, and
orbit's critical-path forward tokens against the radix yardstick's (usage.orbit, summed; beside them the
tokens orbit forwarded in idle time, prefilling answers as the sessions send them back, and how many requests
read KV equal to a re-prefill's, usage.orbit.exact_kv: the rest were served approximately), and checks that every request
got a 200 with an answer and usage, and that /metrics counted exactly the requests sent (none lost). The
agents keep their history under --history-chars (the bundled model's context is 512 tokens).
Exit status 1 when any request failed or was lost. A benchmark, not a timed test: times depend on the
machine.

Decode is batched across sessions (one forward per step over every running answer; cli/serve/
decode_scheduler.h), but these answers are short (--max-tokens 16) and the requests' prefills take their own
turns, so the loaded run shows the server's mix more than decode. `load.py --decode [ARGS]` runs the batched
decode benchmark instead (decode_load.py: one session against --sessions at once streaming a few hundred
tokens each, per-token p50/p99, and n choices in one request against n requests in turn).
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

PAGES = [
    "The dog found a big red ball in the park. Lily was happy. She threw the ball and the dog ran after it. "
    "They played all day in the sun until the sky was pink and it was time to go home.",
    "Tom had a small boat. He took it to the pond with his mom. The boat went fast on the water and a duck "
    "swam after it. Tom laughed and the duck said quack. Then it began to rain and they ran home.",
    "Sue liked to draw. One day she drew a big tree with red apples. Her friend Ben saw it and wanted to "
    "draw too. They drew a house, a cat and a sun, and they put the pictures on the wall.",
]
QUESTIONS = ["What happened next?", "Who was there?", "Why were they happy?", "Tell me more.", "What did they see?"]


def start_server(args):
    cmd = [args.orbit, "serve", "--model", args.model, "--port", "0", "--max-sessions", str(args.sessions + 4)]
    if args.policy:
        cmd += ["--policy", args.policy]
    if args.anonymous_windows:
        cmd += ["--anonymous-windows", str(args.anonymous_windows)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    line = proc.stdout.readline()
    m = re.search(r"listening on http://([^:]+):(\d+)", line)
    if not m:
        proc.kill()
        sys.exit(f"orbit serve did not start: {line}{proc.stderr.read()}")
    return proc, m.group(1), int(m.group(2))


def post(conn, path, body, headers):
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **headers})
    resp = conn.getresponse()
    return resp.status, resp.read().decode("utf-8", "replace")


def parse_stream(text):
    """The answer and usage of an SSE chat stream; None when it did not end with [DONE]."""
    answer, usage, done = "", None, False
    for line in text.split("\n"):
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        for choice in chunk.get("choices", []):
            answer += choice["delta"].get("content") or ""
        usage = chunk.get("usage") or usage
    return (answer, usage) if done else (None, None)


class Agent(threading.Thread):
    def __init__(self, index, args, host, port, model, results):
        super().__init__()
        self.index, self.args, self.host, self.port, self.model = index, args, host, port, model
        self.results = results
        self.stream = index % 2 == 1

    def run(self):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
        session = f"load-{self.args.phase}-{self.index}"
        messages = [{"role": "system", "content": "You tell short stories."}]
        for i in range(self.args.requests):
            if i % 4 == 0:
                # A page a tool read: its call is trimmed from the list, as agents do; the server requires
                # the result's tool_call_id (as OpenAI does) but not the call it names.
                messages.append({"role": "tool", "tool_call_id": f"call_page_{self.index}_{i}",
                                 "content": PAGES[(self.index + i // 4) % len(PAGES)]})
            if i % 7 == 6 and len(messages) > 4:
                del messages[1:3]  # the agent trims its oldest exchange
            messages.append({"role": "user", "content": QUESTIONS[(self.index + i) % len(QUESTIONS)]})
            while sum(len(m["content"]) for m in messages) > self.args.history_chars and len(messages) > 2:
                del messages[1]  # ... and keeps its history within the model's context
            body = {"model": self.model, "messages": messages, "max_tokens": self.args.max_tokens,
                    "temperature": 0, "stream": self.stream}
            if self.stream:
                body["stream_options"] = {"include_usage": True}  # usage comes in a stream only when asked
            t0 = time.perf_counter()
            try:
                headers = {} if self.args.anonymous else {"X-Orbit-Session": session}
                status, text = post(conn, "/v1/chat/completions", body, headers)
            except (OSError, http.client.HTTPException) as e:
                status, text = -1, str(e)
                conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
            seconds = time.perf_counter() - t0
            answer, usage = None, None
            if status == 200:
                if self.stream:
                    answer, usage = parse_stream(text)
                else:
                    r = json.loads(text)
                    answer, usage = r["choices"][0]["message"]["content"], r.get("usage")
            ok = status == 200 and answer is not None and usage is not None and "orbit" in usage
            self.results.append({"ok": ok, "status": status, "seconds": seconds, "usage": usage,
                                 "error": None if ok else text[:300]})
            messages.append({"role": "assistant", "content": answer or ""})
        conn.close()


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def run_phase(args, host, port, model, sessions, phase):
    args.phase = phase
    results = []
    agents = [Agent(i, args, host, port, model, results) for i in range(sessions)]
    t0 = time.perf_counter()
    for a in agents:
        a.start()
    for a in agents:
        a.join()
    wall = time.perf_counter() - t0
    good = [r for r in results if r["ok"]]
    lat = [r["seconds"] for r in good] or [0.0]
    summary = {
        "phase": phase, "sessions": sessions, "requests": len(results), "failed": len(results) - len(good),
        "wall_seconds": wall, "p50_seconds": percentile(lat, 50), "p99_seconds": percentile(lat, 99),
        "mean_seconds": statistics.fmean(lat), "requests_per_second": len(good) / wall,
        "completion_tokens": sum(r["usage"]["completion_tokens"] for r in good),
        "prompt_tokens": sum(r["usage"]["prompt_tokens"] for r in good),
        "orbit_forward_tokens": sum(r["usage"]["orbit"]["forward_tokens"] for r in good),
        "radix_cache_tokens": sum(r["usage"]["orbit"]["radix_cache_tokens"] for r in good),
        "orbit_idle_forward_tokens": sum(r["usage"]["orbit"].get("idle_forward_tokens", 0) for r in good),
        # requests read from KV equal to a re-prefill's (nothing lost: usage.orbit.exact_kv)
        "exact_kv_requests": sum(bool(r["usage"]["orbit"].get("exact_kv")) for r in good),
        "errors": [r["error"] for r in results if not r["ok"]][:3],
    }
    summary["completion_tokens_per_second"] = summary["completion_tokens"] / wall
    return summary


def chat_requests_counted(text):
    """orbit_requests_total of the chat endpoint, every status."""
    return sum(float(v) for v in re.findall(r'^orbit_requests_total\{endpoint="chat",status="\d+"\} (\S+)$', text, re.M))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--orbit", default="build/cli/orbit")
    ap.add_argument("--model", default="models/tinystories-656k")
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--policy", default="")
    ap.add_argument("--history-chars", type=int, default=900,
                    help="the agents drop their oldest messages past this many characters (the bundled model's "
                         "context is 512 tokens)")
    ap.add_argument("--anonymous", action="store_true",
                    help="send no X-Orbit-Session header, as OpenAI clients do: the server matches each request "
                         "to one of its anonymous windows (--anonymous-windows) by the messages it shares")
    ap.add_argument("--anonymous-windows", type=int, default=0, help="orbit serve --anonymous-windows (0: its default)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    proc, host, port = start_server(args)
    try:
        conn = http.client.HTTPConnection(host, port, timeout=60)
        conn.request("GET", "/v1/models")
        model = json.loads(conn.getresponse().read())["data"][0]["id"]
        alone = run_phase(args, host, port, model, 1, "alone")
        loaded = run_phase(args, host, port, model, args.sessions, "loaded")
        conn = http.client.HTTPConnection(host, port, timeout=60)  # the first one may have idled out
        conn.request("GET", "/metrics")
        metrics = conn.getresponse().read().decode()
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    counted = chat_requests_counted(metrics)
    sent = alone["requests"] + loaded["requests"]
    print(f"orbit serve load: {args.sessions} sessions x {args.requests} requests, max_tokens {args.max_tokens}, "
          f"model {model}, policy {args.policy or 'default'}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')}")
    print(f"{'run':<8} {'requests':>8} {'failed':>6} {'p50 s':>8} {'p99 s':>8} {'req/s':>7} {'gen tok/s':>9} "
          f"{'prompt tok':>10} {'orbit fwd':>9} {'radix fwd':>9} {'orbit/radix':>11} {'orbit idle':>10} {'exact KV':>8}")
    for s in (alone, loaded):
        ratio = s["orbit_forward_tokens"] / s["radix_cache_tokens"] if s["radix_cache_tokens"] else float("nan")
        print(f"{s['phase']:<8} {s['requests']:>8} {s['failed']:>6} {s['p50_seconds']:>8.3f} {s['p99_seconds']:>8.3f} "
              f"{s['requests_per_second']:>7.2f} {s['completion_tokens_per_second']:>9.1f} {s['prompt_tokens']:>10} "
              f"{s['orbit_forward_tokens']:>9.0f} {s['radix_cache_tokens']:>9} {ratio:>11.3f} "
              f"{s['orbit_idle_forward_tokens']:>10.0f} {s['exact_kv_requests']:>8}")
    scale = loaded["completion_tokens_per_second"] / alone["completion_tokens_per_second"]
    print(f"{args.sessions} sessions generate {scale:.2f}x the tokens/s of one session alone")
    print(f"requests sent {sent}, answered and counted by /metrics {counted:.0f}")
    failed = alone["failed"] + loaded["failed"]
    lost = sent - counted
    for s in (alone, loaded):
        for e in s["errors"]:
            print(f"  failed: {e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"alone": alone, "loaded": loaded, "sent": sent, "counted": counted}, f, indent=1)
    if failed or lost:
        print(f"FAILED: {failed} request(s) failed, {lost:.0f} lost")
        return 1
    print("no request failed or was lost")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--decode":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import decode_load
        sys.exit(decode_load.main(sys.argv[2:]))
    sys.exit(main())
