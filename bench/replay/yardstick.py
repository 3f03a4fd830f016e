"""One prefix-cache yardstick per trace, whatever the policy.

`orbit replay` runs its prefix-cache yardsticks (the bounded and unbounded radix caches, the radix cache read at
model calls alone, vLLM's block cache; eval/src/trace_yardstick.h) beside each policy, over the windows that
policy built. Where a trace has `place` steps, the policy chooses where a new chunk goes, so the caches read
each policy's order: on lookback the patching policies' orders cost the radix cache 500 tokens and the exact
ones' (which leave the agent's order) 456; on agent, 1664 against 1560. A server with a radix cache gets no
planner: it reads the agent's order, and a report comparing every policy against whichever order that policy
chose would hand the patching policies a weaker peer.

So each report reads one yardstick per trace: every yardstick total of every policy becomes that of the policy
whose windows cost the radix cache least (one policy's run, all its yardsticks together; the first listed among
equals; on these traces the agent's order, which every policy but the patching ones leaves). It is chosen among
the policies of the run, so a run should include one that keeps the agent's order (`prefix` or `reprefill`; every
report here does). A policy's own figures stay beside them as `<field>_own`. Per-step yardstick figures
(`steps[i].radix_tokens`) are left as they are: a per-read check compares a read with the radix cache reading the
same window (`orbit replay` prints the policies' own yardsticks too; these scripts rewrite them).
"""

FIELDS = ("radix_tokens", "radix_unbounded_tokens", "radix_call_tokens", "block_cache_tokens", "prefix_cache_tokens")


def neutral(report, like=None):
    """Rewrites report's policies' yardstick totals to the trace's one yardstick (see above); returns report.
    like: another report of the same trace, already rewritten, whose yardstick to take (a second replay of other
    policies). A report without yardsticks, or already rewritten, is returned as it is."""
    policies = [p for p in report.get("policies", []) if "radix_tokens" in p.get("totals", {})]
    if not policies or "radix_tokens_own" in policies[0]["totals"]:
        return report
    if like is not None:
        first = neutral(like)["policies"][0]["totals"]
        chosen = {f: first[f] for f in FIELDS if f in first}
        name = first["yardstick_policy"]
    else:
        cheapest = min(policies, key=lambda p: p["totals"]["radix_tokens"])
        chosen = {f: cheapest["totals"][f] for f in FIELDS if f in cheapest["totals"]}
        name = cheapest["policy"]
    for p in policies:
        t = p["totals"]
        for field, value in chosen.items():
            if field in t:
                t[field + "_own"] = t[field]
                t[field] = value
        t["yardstick_policy"] = name
    return report
