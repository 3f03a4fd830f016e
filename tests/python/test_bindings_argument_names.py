"""Argument errors name the Python argument: a None (or another type) where a str or a list of them is needed raises
TypeError naming the argument and what it takes, where pybind11 answered "incompatible function arguments" with
the whole signature and named none; and a value the C++ options refuse names the keyword it came from
(`new_window: max_bytes`, `Engine: page_size`), not the C++ field (`WindowOptions::max_bytes`,
`EngineOptions::page_size`). The other argument errors are test_argument_errors.py's and test_validation.py's.

Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python (see conftest.py).
"""
import re

import numpy as np
import pytest


@pytest.fixture(scope="module")
def engine(orbit, stories260k_path):
    with orbit.Engine(str(stories260k_path)) as e:
        yield e


@pytest.fixture(scope="module")
def trace(orbit):
    return orbit.make_trace("web", steps=1, seed=1, max_positions=512, chunk_tokens=8)


def embeddings(engine):
    return np.zeros((2, engine.model_info.hidden_size), dtype=np.float32)


# Each str argument of the public calls, given `value` in its place.
STR_ARGUMENTS = {
    "tokenize: text": lambda o, e, t, value: e.tokenize(value),
    "add_text: text": lambda o, e, t, value: e.add_text(value),
    "add_text: label": lambda o, e, t, value: e.add_text("a", label=value),
    "add_tokens: label": lambda o, e, t, value: e.add_tokens([1, 2], label=value),
    "chunk: key": lambda o, e, t, value: e.chunk(value),
    "add_embeddings: media_digest": lambda o, e, t, value: e.add_embeddings(embeddings(e), media_digest=value),
    "add_embeddings: label": lambda o, e, t, value: e.add_embeddings(embeddings(e), label=value),
    "find_media: media_digest": lambda o, e, t, value: e.find_media(value, rows=2),
    "find_media: label": lambda o, e, t, value: e.find_media("d", rows=2, label=value),
    "new_window: label": lambda o, e, t, value: e.new_window(label=value),
    "parse_tool_calls: text": lambda o, e, t, value: o.parse_tool_calls(value),
    "parse_tool_calls: format": lambda o, e, t, value: o.parse_tool_calls("x", format=value),
    "store_remote_summary: url": lambda o, e, t, value: o.store_remote_summary(value),
    "chunk_key_tokens: model_fingerprint": lambda o, e, t, value: o.chunk_key_tokens(value, [1, 2]),
    "is_store_key: key": lambda o, e, t, value: o.is_store_key(value),
    "make_trace: kind": lambda o, e, t, value: o.make_trace(value),
    "replay: device": lambda o, e, t, value: o.replay(t, e.options.model, device=value),
    "replay: dtype": lambda o, e, t, value: o.replay(t, e.options.model, dtype=value),
    "replay: eviction": lambda o, e, t, value: o.replay(t, e.options.model, eviction=value),
    "replay: policies[1]": lambda o, e, t, value: o.replay(t, e.options.model, policies=["default", value]),
}


@pytest.mark.parametrize("what", sorted(STR_ARGUMENTS))
@pytest.mark.parametrize("value, type_name", [(None, "None"), (5, "int"), (b"x", "bytes")])
def test_a_str_argument_given_another_type_names_it(orbit, engine, trace, what, value, type_name):
    with pytest.raises(TypeError, match=f"^{re.escape(what)}: expected str, got {type_name}$"):
        STR_ARGUMENTS[what](orbit, engine, trace, value)


@pytest.mark.parametrize("value, type_name", [(None, "None"), ("default", "str"), (3, "int")])
def test_replay_policies_not_a_list_names_it(orbit, engine, trace, value, type_name):
    with pytest.raises(TypeError, match=rf"^replay: policies: expected a list of policy specs \(str\), got {type_name}$"):
        orbit.replay(trace, engine.options.model, policies=value)


def test_str_arguments_still_take_a_str(orbit, engine):
    assert engine.tokenize("Once upon a time", bos=False) == engine.tokenize("Once upon a time", bos=False)
    chunk = engine.add_text("Once upon a time", label="story")
    assert engine.chunk(chunk.key).key == chunk.key
    assert engine.new_window(label="w").label == "w"
    assert orbit.is_store_key(chunk.key) and not orbit.is_store_key("x")
    assert orbit.chunk_key_tokens(engine.model_info.fingerprint, [1, 2]) == engine.add_tokens([1, 2]).key
    assert orbit.parse_tool_calls("plain", format="hermes")["content"] == "plain"


def refused(orbit, call):
    with pytest.raises(orbit.OrbitError) as e:
        call()
    message = str(e.value)
    assert "::" not in message, message  # no C++ name
    assert e.value.source and ".cpp:" in e.value.source  # the check's source is kept
    return message


def test_new_window_max_bytes_names_the_keyword(orbit, engine):
    # It said "WindowOptions::max_bytes = -1 must be >= 0 (0 = no limit)".
    assert refused(orbit, lambda: engine.new_window(max_bytes=-1)) == \
        "new_window: max_bytes = -1 must be >= 0 (0 = no limit)"


def test_find_media_names_its_keywords(orbit, engine):
    # "find_media: MediaLookup::media_digest is empty", "find_media: MediaLookup::rows = -1 must be >= 0".
    assert refused(orbit, lambda: engine.find_media("", rows=2)) == "find_media: media_digest is empty"
    assert refused(orbit, lambda: engine.find_media("d", rows=-1)) == "find_media: rows = -1 must be >= 0"


@pytest.mark.parametrize("kwargs, message", [
    ({"page_size": 0}, "Engine: page_size must be >= 1 (got 0)"),
    ({"pool_bytes": -5}, "Engine: pool_bytes must be > 0 (got -5)"),
    ({"threads": -1}, "Engine: threads must be >= 0 (0 = keep the process setting)"),
    ({"host_budget_bytes": -1}, "Engine: host_budget_bytes must be >= 0"),
    ({"max_idle_chunks": -1}, "Engine: max_idle_chunks must be >= 0 (0 = keep every chunk), got -1"),
    ({"cold_tier": "fp8"}, "Engine: cold_tier = 'fp8' is unknown (known: exact, int8)"),
])
def test_engine_keywords_are_named_as_keywords(orbit, stories260k_path, kwargs, message):
    # Each said "EngineOptions::<field> ...".
    assert refused(orbit, lambda: orbit.Engine(str(stories260k_path), **kwargs)) == message


def test_a_cuda_only_keyword_names_the_device_keyword_too(orbit, stories260k_path):
    message = refused(orbit, lambda: orbit.Engine(str(stories260k_path), device_tier_bytes=1 << 20))
    assert message.startswith("Engine: device_tier_bytes = 1048576 asks for a device tier") and \
        "(device is 'cpu')" in message, message


def test_replay_keywords_are_named_as_replay_keywords(orbit, engine, trace):
    # Its engines' checks said "EngineOptions::page_size must be >= 1 (got 0)".
    assert refused(orbit, lambda: orbit.replay(trace, engine.options.model, baselines=False, fidelity=False,
                                               page_size=0)) == "replay: page_size must be >= 1 (got 0)"
