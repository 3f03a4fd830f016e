#!/usr/bin/python3
"""A tool loop's conversation grown long, then edited: does a window's overhead stay near-linear in its length?

    ORBIT_PYTHON_PATH=build/bindings/python OMP_NUM_THREADS=1 /usr/bin/python3 bench/window/conversation_scale.py \\
        [--sizes 100,200,400] [--orbit build/cli/orbit] [--cache /tmp/orbit-bench]

Per size N: a message list (system, user, then N - 2 messages of a tool loop: an assistant call and a ~30-token tool
result, alternating) synced to a new window of the default policy, then, each step synced and followed by
`window.idle()` (the agent's wait for its tool), as an agent edits it:

    append      a call and its result appended (three times)
    trim        the five oldest tool results dropped, a call and result appended (twice, each followed by an append)
    system      the system message changed, a call and result appended
    summary     the messages between the user's and the middle replaced by one summary message (a user
                message), a call and result appended; then three appends ("after summary")

For each kind, the mean CPU seconds of the sync and of the idle call that followed it, and their growth exponents
between consecutive sizes (log of the cost ratio over log of the size ratio: 1 linear, 2 quadratic), with the
forward tokens beside them: the forwards a sync or idle call must run (what the edit changed, and an idle heal's
re-formed tail) against the bookkeeping around them. The model is a 1-layer random llama with long positions,
made once under --cache (`orbit make-model`), with tinystories-656k's tokenizer and no chat template (the built-in
one), so the forwards are cheap and the overhead shows.
"""
import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.environ.get("ORBIT_PYTHON_PATH", os.path.join(REPO, "build", "bindings", "python")))
import orbit  # noqa: E402

WORDS = ("the dog ran to the park and found a big red ball lily was happy she threw it far the sun was warm "
         "a bird sang in the tree mom said come home").split()
TOOLS = [{"type": "function", "function": {
    "name": "read_page", "description": "Read one page of the book",
    "parameters": {"type": "object", "properties": {"page": {"type": "integer"}}, "required": ["page"]}}}]
SYSTEM = "You read the pages of a book with the read_page tool, one at a time, and answer the user."
USER = "Read the book page by page and tell me what the dog found."
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def make_model(orbit_cli, cache, positions):
    path = os.path.join(cache, f"conversation-scale-{positions}")
    if os.path.exists(os.path.join(path, "tokenizer.json")):
        return path
    subprocess.run([orbit_cli, "make-model", "--out", path, "--force", "--preset", "tiny-llama", "--layers", "1",
                    "--max-pos", str(positions), "--vocab", "2048", "--hidden", "16", "--heads", "2",
                    "--kv-heads", "1", "--head-dim", "8", "--intermediate", "32"], check=True, stdout=subprocess.DEVNULL)
    for name in TOKENIZER_FILES:
        source = os.path.join(REPO, "models", "tinystories-656k", name)
        if os.path.exists(source):
            shutil.copy(source, path)
    return path


def call(i):
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": "read_page", "arguments": json.dumps({"page": i})}}]}


def result(i):
    r = random.Random(i)
    return {"role": "tool", "tool_call_id": f"call_{i}",
            "content": f"page {i}: " + " ".join(r.choice(WORDS) for _ in range(24)) + "."}


def cpu(fn):
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def run_size(engine, n):
    """[(kind, sync seconds, sync forward tokens, idle seconds, idle forward tokens)] for one conversation of n."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
    page = 0
    while len(messages) < n:
        messages += [call(page), result(page)]
        page += 1
    window = engine.new_window()
    window.sync(messages, tools=TOOLS)
    engine.run_background()
    rows = []

    def step(kind):
        nonlocal page
        messages.extend([call(page), result(page)])
        page += 1
        report, sync_s = cpu(lambda: window.sync(messages, tools=TOOLS))
        idle, idle_s = cpu(window.idle)
        rows.append((kind, sync_s, report.forward_tokens, idle_s, idle.forward_tokens))

    for _ in range(3):
        step("append")
    for _ in range(2):
        for j in reversed([j for j, m in enumerate(messages) if m["role"] == "tool"][:5]):
            del messages[j]
        step("trim")
        step("append")
    messages[0] = {"role": "system", "content": SYSTEM + " Answer in one sentence."}
    step("system")
    half = len(messages) // 2
    messages[2:half] = [{"role": "user", "content": "Summary of the pages so far: " + result(10**6)["content"]}]
    step("summary")
    for _ in range(3):
        step("after summary")
    window.close()
    return rows


def exponent(a, b, na, nb):
    return math.log(b / a) / math.log(nb / na) if a > 0 and b > 0 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100,200,400", help="conversation lengths in messages (ascending)")
    ap.add_argument("--orbit", default=os.path.join(REPO, "build", "cli", "orbit"), help="the orbit CLI (make-model)")
    ap.add_argument("--cache", default="/tmp/orbit-bench", help="where the made-up model is kept")
    args = ap.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes: '{args.sizes}' is not a comma-separated list of message counts")
    if any(s < 10 for s in sizes) or sizes != sorted(set(sizes)):
        ap.error(f"--sizes: {args.sizes}: each at least 10, ascending, no repeats")
    model = make_model(args.orbit, args.cache, 1 << (max(sizes) * 64).bit_length())
    engine = orbit.Engine(model, background="deferred")
    table = {}  # kind -> size -> [sync s, sync tokens, idle s, idle tokens, count]
    for n in sizes:
        print(f"conversation of {n} messages ...", file=sys.stderr, flush=True)
        for kind, sync_s, sync_t, idle_s, idle_t in run_size(engine, n):
            acc = table.setdefault(kind, {}).setdefault(n, [0.0, 0.0, 0.0, 0.0, 0])
            for k, v in enumerate((sync_s, sync_t, idle_s, idle_t)):
                acc[k] += v
            acc[4] += 1
    print("| kind | messages | sync CPU s | exp | sync fwd tokens | idle CPU s | exp | idle fwd tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, by_size in table.items():
        previous = None
        for n in sizes:
            s, st, i, it, count = by_size[n]
            s, st, i, it = s / count, st / count, i / count, it / count
            es = exponent(previous[0], s, previous[4], n) if previous else float("nan")
            ei = exponent(previous[2], i, previous[4], n) if previous else float("nan")
            print(f"| {kind} | {n} | {s:.4f} | {es:.2f} | {st:.0f} | {i:.4f} | {ei:.2f} | {it:.0f} |")
            previous = (s, st, i, it, n)


if __name__ == "__main__":
    main()
