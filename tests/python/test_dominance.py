"""Never worse than a radix cache: the default policy, the `prefix` and `throughput` presets against the radix
yardstick.

`orbit replay` runs the radix cache (SGLang semantics: token granular, every read's window, query and
generated tokens held, bounded by the replay engine's KV pool) beside each policy over the same reads
(`radix_tokens` per read; tests/python/test_yardstick.py recomputes it independently). Both sides count the
same tokens: the radix cache forwards a read's prompt (window and query) after the longest prefix it holds,
at least the last token of a model call; orbit's critical-path tokens include the query tokens its model
call forwards (`query_forward_tokens`: at least the last, as exact reuse holds the rest of a query asked
before). Here, on every shipped trace (tests/data/traces and the agent and unseen traces in
bench/replay/agent-json):

- per read, the critical-path tokens orbit forwarded since the previous read (the read's own operation,
  its query, and the repairs earlier edits deferred to it) are at most what the radix cache forwards for
  that read;
- over the whole trace, at every read, orbit's running total is at most the radix cache's (disposable
  steps left out on both sides, below);
- `throughput` (no background work of its own): cumulatively, and its total forward tokens, critical and
  background, are at most the radix cache's. Per read it is not checked: it never heals, so more of the
  windows it returns to were served approximately before (the case described below); measured, 3 of the
  19 traces have such a read (6 to 44 tokens over).

Per read, two kinds of read are left out, and only there:
- `disposable`, an analysis only orbit runs (a second decode with one instance's conditioning switched off):
  the canonical it encodes for it and the second decode's query are counted as forwards; a radix cache has
  no such call to compare with, so the running totals leave the step out on both sides;
- a `generate` whose appended answer is another policy's (the replay appends the first policy's transcript
  so every policy reads the same windows): the radix cache is credited with having generated those tokens,
  orbit generated others (`agreement` < 1) and forwards the transcript's.

The default policy is approximate: a read over instances it served approximately before holds no exact KV
for them, while a radix cache that computed them exactly does. That is where a read can still cost it more
(see `KNOWN` below: the measured cases, each a few tokens, listed so that any new one fails). A radix cache
would not share that reason: it is the price of the earlier read orbit served without a forward (each time
the running total stays below the radix cache's), not a saving the comparison gives the radix cache.
"""
import pathlib

import pytest

from conftest import SHARED_REPLAY_POLICIES as POLICIES

REPO = pathlib.Path(__file__).resolve().parents[2]
TRACES = sorted((REPO / "tests" / "data" / "traces").glob("*.json")) + \
    sorted((REPO / "bench" / "replay" / "agent-json").glob("*.trace.json"))

# (trace, step) reads where the default policy forwards more than the radix cache, measured on the bundled
# stories260K. It is the price of an earlier read orbit served without a forward, paid when a new instance
# is computed over the KV it kept approximately (WindowPolicy::read_through prices that KV by what the fresh
# instance reads of it; a radix cache that recomputed it at the earlier read has it exact):
# - web.json step 25 (an admit, 64 vs 32): re-serves 32 tokens kept over the step 19 slide, where the radix
#   cache forwarded 154 against orbit's 70.
# (video.json step 40 went when the last query's attention began to price what it read, WindowPolicy::
# attention_weight: the step 33 eviction's survivors are re-served at step 37, where the radix cache forwards
# more, 158 tokens against 94; unseen_fanout_seed23 step 24, unseen_rag_seed23 step 28 and unseen_coding_seed11 step 55 went earlier, when
# heals began to carry the tentative tail and windows learned their evictions.) A new one fails here until it
# is understood and listed with its reason (bench/replay/radix_report.py REASONS).
KNOWN = {("web.json", 25)}


def compared_per_read(step):
    if step["op"] == "disposable":
        return False
    agreement = step.get("agreement")
    return not (step["op"] == "generate" and agreement is not None and agreement < 1.0)


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
def test_never_more_tokens_than_a_radix_cache(trace, shared_replay):
    report = shared_replay(trace)
    by_name = {p["policy"]: p for p in report["policies"]}
    for name in POLICIES:
        policy = by_name[name] if name != "default" else next(p for k, p in by_name.items() if k.startswith("patch:16:kl="))
        since_read = orbit_total = radix_total = 0.0
        reads = worse = 0
        for s in policy["steps"]:
            since_read += s["critical_forward_tokens"]
            if s["op"] != "disposable":
                orbit_total += s["critical_forward_tokens"]
            if s["yardstick_read"] is None:
                continue
            reads += 1
            if s["op"] != "disposable":
                radix_total += s["radix_tokens"]
            where = f"{trace.name} {name} step {s['index']} ({s['op']})"
            assert orbit_total <= radix_total, f"{where}: {orbit_total} tokens so far vs {radix_total}"
            if name != "throughput" and compared_per_read(s) and since_read > s["radix_tokens"]:
                worse += 1
                assert name == "default" and (trace.name, s["index"]) in KNOWN, \
                    f"{where}: {since_read} tokens vs {s['radix_tokens']} for the radix cache"
            since_read = 0.0
        assert reads > 0, trace.name
        if name == "throughput":  # background work is not free there: all of its forwards count
            totals = policy["totals"]
            assert totals["forward_tokens"] <= totals["radix_tokens"], f"{trace.name} throughput: {totals}"
