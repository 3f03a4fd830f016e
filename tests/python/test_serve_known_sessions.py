"""`orbit serve --max-known-sessions N`: the session records kept (for GET /v1/sessions/{id} and the totals). Past N
the least recently used record whose window is neither resident nor running is forgotten: GET answers 404 for it,
/metrics counts N known, and the session's next request starts it anew (its requests counted from 1). A value out
of range is refused by name before the model loads. Every server is started on 127.0.0.1 (a free port) and
stopped."""
import time
import urllib.error

import pytest

CHAT = {"messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 2, "temperature": 0}


def gauge(server, name):
    line = next(l for l in server.call("/metrics").splitlines() if l.startswith(name + " "))
    return int(float(line.split()[-1]))


def chat(server, session):
    """One chat request of `session`; returns once at most one window is resident (--max-sessions 1: the windows
    the idle worker held when a request ended leave memory once it lets go of them)."""
    answer = server.call("/v1/chat/completions", {"model": "stories", **CHAT}, session=session)
    deadline = time.monotonic() + 300  # a hang guard only
    while gauge(server, 'orbit_sessions{state="resident"}') > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    return answer


def known(server, session):
    """GET /v1/sessions/{session}'s body, or None for its 404."""
    try:
        return server.call(f"/v1/sessions/{session}")
    except urllib.error.HTTPError as e:
        assert e.code == 404, e.code
        return None


def test_records_past_max_known_sessions_are_forgotten(start_serve, stories260k_path):
    # One resident window: each session's window leaves memory when the next session's request ends, so every
    # record but the newest is out of memory and may be forgotten (the old binary: "unknown argument").
    server = start_serve(stories260k_path, "--name", "stories", "--max-known-sessions", "2", "--max-sessions", "1")
    for session in ("a", "b", "c"):
        chat(server, session)
    assert known(server, "a") is None  # the least recently used, out of memory: forgotten
    b, c = known(server, "b"), known(server, "c")
    assert b["requests"] == 1 and not b["resident"], b
    assert c["requests"] == 1, c
    assert gauge(server, 'orbit_sessions{state="known"}') == 2
    # A forgotten session is served again, as a new one; the oldest left now is b.
    chat(server, "a")
    assert known(server, "a")["requests"] == 1
    assert known(server, "b") is None and known(server, "c") is not None
    assert gauge(server, 'orbit_sessions{state="known"}') == 2


def test_a_record_out_of_memory_keeps_its_totals(start_serve, stories260k_path):
    # Kept out of memory, a record still answers GET with its totals, and the session's next request adds to them.
    server = start_serve(stories260k_path, "--name", "stories", "--max-sessions", "1")
    chat(server, "a")
    chat(server, "b")  # a's window leaves memory
    a = known(server, "a")
    assert a["requests"] == 1 and not a["resident"] and a["left_memory"] == 1, a
    assert a["completion_tokens"] > 0 and a["window"] is None
    chat(server, "a")
    assert known(server, "a")["requests"] == 2


@pytest.mark.parametrize("value, message", [
    ("0", "argument '--max-known-sessions' must be >= 1, got 0"),
    ("-3", "argument '--max-known-sessions' must be >= 1, got -3"),
    ("1048577", "argument '--max-known-sessions' must be at most 1048576, got 1048577"),
    ("many", "'--max-known-sessions'"),
])
def test_max_known_sessions_out_of_range_is_refused_by_name(refused_serve, stories260k_path, value, message):
    stderr = refused_serve(stories260k_path, "--max-known-sessions", value)
    assert message in stderr and "unknown argument" not in stderr, (value, stderr)
