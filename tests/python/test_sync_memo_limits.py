"""orbit.set_sync_memo_limits / orbit.sync_memo_limits: the bounds of Window.sync's process-wide memos
(orbit/sync_memo.h), which only `orbit serve --sync-memo-entries / --sync-memo-mb` could set before. Set by
keyword, each checked and named; what the memos hold is the C++ test's (tests/cpp/test_sync_memo_limits.cpp).

Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python (see conftest.py).
"""
import numpy as np
import pytest

TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"


@pytest.fixture
def limits(orbit):
    """The bounds in force before the test, put back after it (they are the process's)."""
    before = orbit.sync_memo_limits()
    yield before
    orbit.set_sync_memo_limits(max_entries=before.max_entries, max_bytes=before.max_bytes)


def test_limits_are_set_by_keyword_and_read_back(orbit, limits):
    assert (limits.max_entries, limits.max_bytes) == (4096, 64 << 20)  # the SDK's defaults
    assert repr(limits) == "SyncMemoLimits(max_entries=4096, max_bytes=67108864)"
    orbit.set_sync_memo_limits(max_entries=np.int64(3))  # a keyword left out keeps its bound
    assert (orbit.sync_memo_limits().max_entries, orbit.sync_memo_limits().max_bytes) == (3, 64 << 20)
    orbit.set_sync_memo_limits(max_bytes=1 << 20)
    assert (orbit.sync_memo_limits().max_entries, orbit.sync_memo_limits().max_bytes) == (3, 1 << 20)
    orbit.set_sync_memo_limits(max_entries=1, max_bytes=np.uint16(1024))
    assert (orbit.sync_memo_limits().max_entries, orbit.sync_memo_limits().max_bytes) == (1, 1024)
    orbit.set_sync_memo_limits()  # nothing given: nothing changes
    assert (orbit.sync_memo_limits().max_entries, orbit.sync_memo_limits().max_bytes) == (1, 1024)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"max_entries": 0}, "OrbitError", "max_entries must be in [1, 1048576], got 0"),
    ({"max_entries": (1 << 20) + 1}, "OrbitError", "max_entries must be in [1, 1048576], got 1048577"),
    ({"max_bytes": 1023}, "OrbitError", "max_bytes must be in [1024, 1099511627776], got 1023"),
    ({"max_entries": 8, "max_bytes": -1}, "OrbitError", "max_bytes must be in [1024, 1099511627776], got -1"),
    ({"max_entries": True}, "TypeError", "max_entries: expected int, got bool"),
    ({"max_bytes": np.bool_(False)}, "TypeError", "max_bytes: expected int, got bool"),
    ({"max_bytes": 2.0 ** 20}, "TypeError", "max_bytes: expected int, got float"),
    ({"max_entries": "8"}, "TypeError", "max_entries: expected int, got str"),
])
def test_a_refused_limit_names_the_keyword_and_changes_nothing(orbit, limits, kwargs, error, message):
    orbit.set_sync_memo_limits(max_entries=7, max_bytes=1 << 20)
    with pytest.raises(orbit.OrbitError if error == "OrbitError" else TypeError) as e:
        orbit.set_sync_memo_limits(**kwargs)
    assert str(e.value) == f"set_sync_memo_limits: {message}"
    assert "::" not in str(e.value)
    assert (orbit.sync_memo_limits().max_entries, orbit.sync_memo_limits().max_bytes) == (7, 1 << 20)


def test_the_keywords_are_keyword_only(orbit, limits):
    with pytest.raises(TypeError):
        orbit.set_sync_memo_limits(8)
    with pytest.raises(TypeError, match="max_entry"):
        orbit.set_sync_memo_limits(max_entry=8)
    assert orbit.sync_memo_limits().max_entries == limits.max_entries


def test_syncs_under_the_smallest_memo_give_the_same_windows(orbit, stories260k_path, limits):
    # A smaller memo changes no result (the lists it dropped are rendered and tokenized again).
    lists = [[{"role": "user", "content": f"Once upon a time {i}"}] for i in range(3)]
    lists += [lists[0] + [{"role": "assistant", "content": "there was a cat."}], lists[1]]

    def windows():
        with orbit.Engine(str(stories260k_path)) as e:
            w = e.new_window()
            return [w.sync(messages, chat_template=TEMPLATE).plan.tokens for messages in lists]

    roomy = windows()
    orbit.set_sync_memo_limits(max_entries=1, max_bytes=1024)
    assert windows() == roomy
