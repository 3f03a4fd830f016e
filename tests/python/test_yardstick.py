"""The prefix-cache yardsticks in `orbit replay --json`, recomputed independently from their definitions.

For every read the replay lists the token ids the yardsticks saw (`yardstick_read`: window, query,
generated). This test replays each shipped trace and runs its own models of the two caches over those
reads, then requires the replay's per-read counts to agree exactly:

- radix (SGLang): a trie with one node per token. A read reuses the longest held prefix of its prompt
  (window + query) and forwards the rest of the prompt; then every token of the read (generated ones too)
  is held, each touched token stamped with the read's clock. Over the budget, the childless token with the
  oldest stamp goes first, one token at a time.
- block (vLLM automatic prefix caching): full blocks only, each named by a SHA-256 chain over the blocks
  before it. A read reuses block size x (leading full prompt blocks held); every full block of the read is
  then held and stamped; over the budget (capacity // block size blocks) the block with the oldest stamp
  goes first, the deepest among equals.
- a model call (generate, disposable) forwards at least its prompt's last token, held or not: the next token
  needs its logits (SGLang and vLLM both cap a hit at prompt - 1 tokens), as orbit forwards at least the
  query's last token; an admit, recall or turn read only computes the window and reuses all it holds.
- radix at calls (`radix_call_tokens`): the bounded radix cache again, read at the model calls alone, as a
  server computes a prompt only when a request comes (admit, recall and turn count 0 there).

Steps that are not reads carry no yardstick_read and count 0; totals are the sums.
"""
import hashlib
import heapq
import json
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
TRACES = sorted((REPO / "tests" / "data" / "traces").glob("*.json"))
AGENT_TRACES = sorted((REPO / "bench" / "replay" / "agent-json").glob("*.trace.json"))


class TokenTrie:
    """SGLang's radix cache, one trie node per token."""

    def __init__(self, capacity):
        self.capacity = capacity  # tokens; 0 = unbounded
        self.root = {"children": {}, "stamp": None, "parent": None, "token": None}
        self.size = 0
        self.clock = 0

    def insert(self, tokens):
        """Holds every token of a read, stamped with its clock, then evicts down to the budget."""
        self.clock += 1
        node = self.root
        for tok in tokens:
            child = node["children"].get(tok)
            if child is None:
                child = {"children": {}, "stamp": None, "parent": node, "token": tok}
                node["children"][tok] = child
                self.size += 1
            child["stamp"] = self.clock
            node = child
        self.evict()

    def evict(self):
        if not self.capacity or self.size <= self.capacity:
            return
        leaves = []
        stack = [self.root]
        while stack:
            n = stack.pop()
            stack.extend(n["children"].values())
            if n is not self.root and not n["children"]:
                leaves.append((n["stamp"], id(n), n))
        heapq.heapify(leaves)
        while self.size > self.capacity:
            _, _, leaf = heapq.heappop(leaves)
            parent = leaf["parent"]
            del parent["children"][leaf["token"]]
            self.size -= 1
            if parent is not self.root and not parent["children"]:
                heapq.heappush(leaves, (parent["stamp"], id(parent), parent))

    def held_prefix(self, tokens):
        node, n = self.root, 0
        for tok in tokens:
            node = node["children"].get(tok)
            if node is None:
                break
            n += 1
        return n


def reusable(prompt, logits):
    """Prompt tokens a hit may cover: all, or for a model call all but the last."""
    return len(prompt) - 1 if logits and prompt else len(prompt)


def radix_forwarded(trie, prompt, generated, logits=True):
    reused = min(trie.held_prefix(prompt), reusable(prompt, logits))
    trie.insert(prompt + generated)
    return len(prompt) - reused


class HashedBlocks:
    """vLLM's automatic prefix caching: full blocks named by a SHA-256 chain."""

    def __init__(self, capacity_tokens, block):
        self.block = block
        self.capacity = capacity_tokens // block if capacity_tokens else None
        self.held = {}  # chained digest -> (stamp, depth)
        self.clock = 0

    def chain(self, tokens):
        digest, out = b"", []
        for j in range(len(tokens) // self.block):
            piece = tokens[j * self.block:(j + 1) * self.block]
            digest = hashlib.sha256(digest + json.dumps(piece).encode()).digest()
            out.append(digest)
        return out

    def read(self, prompt, generated, logits=True):
        self.clock += 1
        digests = self.chain(prompt + generated)
        hits = 0
        for d in digests[:reusable(prompt, logits) // self.block]:
            if d not in self.held:
                break
            hits += 1
        for depth, d in enumerate(digests):
            self.held[d] = (self.clock, depth)
        if self.capacity is not None and len(self.held) > self.capacity:
            order = sorted(self.held, key=lambda d: (self.held[d][0], -self.held[d][1]))
            for d in order[:len(self.held) - self.capacity]:
                del self.held[d]
        return len(prompt) - hits * self.block


def replay_json(orbit_cli, model, trace, tmp_path, extra=()):
    out = tmp_path / (trace.stem + ".replay.json")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run([str(orbit_cli), "replay", str(trace), "--model", str(model), "--policy", "default",
                    "--no-fidelity", "--json", str(out), "--quiet", *extra], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def check_policy(policy, where):
    cap = policy["yardstick"]["capacity_tokens"]
    block = policy["yardstick"]["block_tokens"]
    radix, unbounded, blocks = TokenTrie(cap), TokenTrie(0), HashedBlocks(cap, block)
    at_calls = TokenTrie(cap)  # radix_call_tokens: the same cache, read at model calls alone
    sums = {"radix_tokens": 0, "radix_unbounded_tokens": 0, "block_cache_tokens": 0, "radix_call_tokens": 0}
    reads = 0
    for s in policy["steps"]:
        read = s["yardstick_read"]
        here = f"{where} step {s['index']} ({s['op']})"
        if read is None:
            assert (s["radix_tokens"], s["radix_unbounded_tokens"], s["block_cache_tokens"],
                    s["radix_call_tokens"]) == (0, 0, 0, 0), here
            continue
        assert s["op"] not in ("evict", "slide", "reorder", "place"), f"{here}: an edit is not a model call"

        reads += 1
        prompt = read["window"] + read["query"]
        logits = s["op"] in ("generate", "disposable")
        got = {"radix_tokens": radix_forwarded(radix, prompt, read["generated"], logits),
               "radix_unbounded_tokens": radix_forwarded(unbounded, prompt, read["generated"], logits),
               "block_cache_tokens": blocks.read(prompt, read["generated"], logits),
               "radix_call_tokens": radix_forwarded(at_calls, prompt, read["generated"]) if logits else 0}
        for k, v in got.items():
            assert s[k] == v, f"{here}: {k} {s[k]} in the replay, {v} recomputed"
            sums[k] += v
        assert got["radix_unbounded_tokens"] <= got["radix_tokens"] <= len(prompt), here
        assert got["radix_unbounded_tokens"] <= got["block_cache_tokens"], here
        if not logits:
            assert got["radix_call_tokens"] == 0, f"{here}: only a model call is read at calls"
        if s["op"] in ("admit", "recall", "turn") and min(read["window"], default=0) >= 0:
            assert len(read["window"]) == s["window_tokens"], here  # text only: one id per position
    t = policy["totals"]
    assert t["yardstick_reads"] == reads, where
    for k, v in sums.items():
        assert t[k] == v, f"{where}: totals {k} {t[k]}, steps sum to {v}"
    return sums


@pytest.mark.parametrize("trace", TRACES + AGENT_TRACES, ids=lambda p: p.name)
def test_yardsticks_agree_with_an_independent_model(trace, shared_replay):
    report = shared_replay(trace)  # the default, prefix and throughput policies (test_dominance reads it too)
    assert report["policies"]
    for p in report["policies"]:
        check_policy(p, f"{trace.name} {p['policy']}")


@pytest.mark.parametrize("name", ["agent_videoqa.json", "agent_coding.json", "web.json"])
@pytest.mark.parametrize("budget", [40, 300])
def test_bounded_yardsticks_agree_when_the_budget_binds(name, budget, orbit_cli, stories260k_path, tmp_path):
    trace = REPO / "tests" / "data" / "traces" / name
    report = replay_json(orbit_cli, stories260k_path, trace, tmp_path, ["--yardstick-tokens", str(budget)])
    binds = False
    for p in report["policies"]:
        assert p["yardstick"]["capacity_tokens"] == budget
        sums = check_policy(p, f"{name} {p['policy']} budget {budget}")
        binds = binds or sums["radix_tokens"] > sums["radix_unbounded_tokens"]
    assert binds, "the budget never evicted anything the trace read again"


def test_the_independent_models_on_known_reads():
    trie = TokenTrie(0)
    assert radix_forwarded(trie, [1, 2, 3, 4], [5, 6]) == 4
    assert radix_forwarded(trie, [1, 2, 3, 4, 5, 6, 7], []) == 1  # the answer came back in the window
    assert radix_forwarded(trie, [1, 2, 9], []) == 1
    assert radix_forwarded(trie, [1, 2, 3, 4], []) == 1  # held whole: a model call recomputes the last
    assert radix_forwarded(trie, [1, 2, 3, 4], [], logits=False) == 0  # a prefill does not
    small = TokenTrie(6)
    radix_forwarded(small, [1, 2, 3, 4], [])
    radix_forwarded(small, [7, 8], [])
    radix_forwarded(small, [1, 2, 5], [])  # one over: 4 goes (the oldest leaf)
    assert small.held_prefix([1, 2, 3, 4]) == 3 and small.held_prefix([7, 8]) == 2
    radix_forwarded(small, [9], [])  # then 3, the next oldest leaf
    assert small.held_prefix([1, 2, 3]) == 2 and small.held_prefix([1, 2, 5]) == 3
    blocks = HashedBlocks(0, 4)
    assert blocks.read(list(range(10)), []) == 10
    assert blocks.read(list(range(12)), []) == 4  # two full blocks reused
    assert blocks.read(list(range(12)), []) == 4  # held whole: the last block holds the last token
    assert blocks.read(list(range(12)), [], logits=False) == 0
    assert blocks.read([0, 1, 2, 3, 4, 99, 6, 7], []) == 4
    bounded = HashedBlocks(8, 4)
    bounded.read(list(range(8)), [])
    bounded.read([50, 51, 52, 53], [])  # evicts 4..7, the older read's deeper block
    assert bounded.read(list(range(8)), []) == 4


def prefix_policy_mismatches(policy):
    """Reads where the `prefix` preset (orbit executing a radix cache) forwarded on the critical path, since
    the previous read, other than the radix yardstick forwards for the read: (index, op, orbit, radix)."""
    out, since = [], 0.0
    for s in policy["steps"]:
        since += s["critical_forward_tokens"]
        if s["yardstick_read"] is None:
            continue
        if s["op"] != "disposable" and since != s["radix_tokens"]:  # disposable: an analysis only orbit runs
            out.append((s["index"], s["op"], since, s["radix_tokens"]))
        since = 0.0
    return out


def check_query_accounting(policy, where):
    """A read's query tokens are on orbit's critical path as on the yardstick's: at least the last one."""
    for s in policy["steps"]:
        here = f"{where} step {s['index']} ({s['op']})"
        if s["op"] == "generate" and s["status"] == "ok":
            assert 1 <= s["query_forward_tokens"] <= len(s["yardstick_read"]["query"]), here
            assert s["query_forward_tokens"] <= s["critical_forward_tokens"], here
            assert s["decode_tokens"] == len(s["generated"]), here
        elif s["op"] == "disposable":
            assert s["query_forward_tokens"] == 2 * len(s["yardstick_read"]["query"]), here
        else:
            assert s["query_forward_tokens"] == 0, here
    t = policy["totals"]
    assert t["query_forward_tokens"] == sum(s["query_forward_tokens"] for s in policy["steps"]), where


@pytest.mark.parametrize("trace", TRACES + AGENT_TRACES, ids=lambda p: p.name)
def test_an_executing_radix_cache_forwards_what_the_yardstick_counts(trace, shared_replay):
    """`prefix` re-prefills from the first token that differs and reuses what it computed behind the same
    window, queries included: read for read, what the radix yardstick counts."""
    report = shared_replay(trace)
    by_name = {p["policy"]: p for p in report["policies"]}
    for p in report["policies"]:
        check_query_accounting(p, f"{trace.name} {p['policy']}")
    assert prefix_policy_mismatches(by_name["prefix"]) == [], trace.name


def test_append_only_reads_cost_the_radix_cache_exactly(orbit_cli, stories260k_path, tmp_path):
    """An append-only agent (new chunks and turns at the end, answers appended, a question asked twice), where a
    radix cache is optimal: the `prefix` preset and the default policy forward per read exactly what the radix
    yardstick counts, the query's tokens included; a repeated question costs both its last token."""
    trace = {
        "format": "orbit-trace/1", "name": "append-only", "probe": {"random_tokens": 3, "seed": 4},
        "chunks": [{"name": "sys", "random_tokens": 12, "seed": 1}, {"name": "doc1", "random_tokens": 20, "seed": 2},
                   {"name": "doc2", "random_tokens": 24, "seed": 3}],
        "steps": [
            {"op": "admit", "chunk": "sys"},
            {"op": "turn", "random_tokens": 6, "seed": 10},
            {"op": "generate", "max_tokens": 4, "append": True, "query": {"random_tokens": 3, "seed": 11}},
            {"op": "admit", "chunk": "doc1"},
            {"op": "turn", "random_tokens": 5, "seed": 12},
            {"op": "generate", "max_tokens": 3, "query": {"random_tokens": 4, "seed": 13}},
            {"op": "generate", "max_tokens": 3, "query": {"random_tokens": 4, "seed": 13}},
            {"op": "generate", "max_tokens": 4, "append": True, "query": {"random_tokens": 2, "seed": 14}},
            {"op": "admit", "chunk": "doc2"},
            {"op": "generate", "max_tokens": 4, "append": True, "query": {"random_tokens": 3, "seed": 15}},
        ]}
    path = tmp_path / "append-only.json"
    path.write_text(json.dumps(trace))
    out = tmp_path / "append-only.replay.json"
    subprocess.run([str(orbit_cli), "replay", str(path), "--model", str(stories260k_path), "--policy",
                    "default,prefix", "--no-fidelity", "--json", str(out), "--quiet"], check=True,
                   env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.DEVNULL)
    report = json.loads(out.read_text())
    by_name = {p["policy"]: p for p in report["policies"]}
    default = next(p for k, p in by_name.items() if k.startswith("patch:16:kl="))
    for p in (by_name["prefix"], default):
        check_query_accounting(p, p["policy"])
        assert prefix_policy_mismatches(p) == [], p["policy"]
        assert p["totals"]["critical_forward_tokens"] == p["totals"]["radix_tokens"], p["policy"]
        again = p["steps"][6]  # the repeated question: window, query and answer held
        assert (again["query_forward_tokens"], again["critical_forward_tokens"], again["radix_tokens"]) == (1, 1, 1)
        assert p["steps"][5]["query_forward_tokens"] == 4  # its first time: all of it
