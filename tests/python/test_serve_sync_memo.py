"""`orbit serve`'s bounds on Window::sync's memos (--sync-memo-entries, --sync-memo-mb: orbit/sync_memo.h) and their
gauges in /metrics (orbit_sync_memo_entries{memo}, orbit_sync_memo_bytes{memo}), on stories260K: every request
with a new message list adds a list to each memo until the bound, and none past it; a bound out of range is
refused at start naming the argument. Every server is started here on 127.0.0.1 (any free port) and stopped."""
import re

import pytest

MODEL_NAME = "stories260K.bin"


def memo_gauges(server):
    """{(name, memo): value} of the sync memos' lines in /metrics."""
    text = server.call("/metrics")
    found = re.findall(r'^(orbit_sync_memo_(?:entries|bytes))\{memo="(\w+)"\} (\d+)$', text, re.M)
    return {(name, memo): int(value) for name, memo, value in found}


def request(i):
    return {"model": MODEL_NAME, "max_tokens": 2, "temperature": 0,
            "messages": [{"role": "system", "content": f"You tell stories to reader {i}."},
                         {"role": "user", "content": f"Tell me a story about a dog named Rex number {i}."}]}


def test_the_memos_stay_within_small_bounds_and_their_gauges_move(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--sync-memo-entries", "2", "--sync-memo-mb", "1")
    start = memo_gauges(server)
    assert set(start) == {(n, m) for n in ("orbit_sync_memo_entries", "orbit_sync_memo_bytes")
                          for m in ("cuts", "encodings")}
    assert all(v == 0 for v in start.values()), start
    seen = []
    for i in range(5):
        server.call("/v1/chat/completions", request(i))
        g = memo_gauges(server)
        seen.append(g)
        for memo in ("cuts", "encodings"):
            assert 1 <= g[("orbit_sync_memo_entries", memo)] <= 2, g
            assert 0 < g[("orbit_sync_memo_bytes", memo)] <= 1 << 20, g
    # Five new lists: the memos filled to their bound of two and stayed there.
    assert seen[-1][("orbit_sync_memo_entries", "cuts")] == 2
    assert seen[-1][("orbit_sync_memo_entries", "encodings")] == 2


@pytest.mark.parametrize("argument, value, expected", [
    ("--sync-memo-entries", "0", "argument '--sync-memo-entries' must be >= 1"),
    ("--sync-memo-entries", "1048577", "argument '--sync-memo-entries' must be at most 1048576"),
    ("--sync-memo-mb", "0", "argument '--sync-memo-mb' must be >= 1"),
    ("--sync-memo-mb", "1048577", "argument '--sync-memo-mb' must be at most 1048576"),
])
def test_a_bound_out_of_range_is_refused_naming_the_argument(refused_serve, stories260k_path, argument, value,
                                                             expected):
    stderr = refused_serve(stories260k_path, argument, value)
    assert expected in stderr, stderr
