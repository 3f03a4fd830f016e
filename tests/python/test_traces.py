"""Traces from Python (orbit.make_trace / load_trace / save_trace / validate_trace / replay): the dict is the
orbit-trace/1 JSON, files round-trip, replay measures every policy side by side against a re-prefill, and bad
traces raise errors naming the field at fault.

Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python (see conftest.py).
"""
import copy
import json
import re

import numpy as np
import pytest

# Its module-scoped fixture is expensive: under pytest-xdist (--dist loadgroup) this file runs on one worker.
pytestmark = pytest.mark.xdist_group("test_traces")


@pytest.fixture(scope="module")
def web_trace(orbit):
    return orbit.make_trace("web", steps=4, seed=3, max_positions=512, chunk_tokens=12)


def test_make_trace_is_the_json_format_and_deterministic(orbit, web_trace):
    assert web_trace["format"] == orbit.TRACE_FORMAT == "orbit-trace/1"
    assert web_trace["chunks"] and web_trace["steps"]
    ops = {s["op"] for s in web_trace["steps"]}
    assert {"admit", "turn"} <= ops
    assert web_trace == orbit.make_trace("web", steps=4, seed=3, max_positions=512, chunk_tokens=12)
    assert web_trace != orbit.make_trace("web", steps=4, seed=4, max_positions=512, chunk_tokens=12)
    for kind in ("video", "agent"):
        orbit.validate_trace(orbit.make_trace(kind, steps=3, seed=1))


def test_every_kind_make_trace_takes_is_in_its_docstring(orbit):
    # The docstring named only web, video and agent; the agent patterns were made but undocumented.
    for kind in ("web", "video", "agent", "browse", "coding", "videoqa", "fanout", "rag"):
        orbit.validate_trace(orbit.make_trace(kind, steps=2, seed=1))
        assert f"'{kind}'" in orbit.make_trace.__doc__, kind


def test_save_then_load_round_trips(orbit, web_trace, tmp_path):
    path = tmp_path / "web.json"
    orbit.save_trace(web_trace, path)
    assert json.loads(path.read_text())["format"] == "orbit-trace/1"
    assert orbit.load_trace(path) == web_trace
    assert orbit.load_trace(str(path)) == web_trace
    orbit.validate_trace(path)


def test_replay_puts_policies_side_by_side_against_a_reprefill(orbit, web_trace, stories260k_path):
    calls = []
    report = orbit.replay(web_trace, str(stories260k_path), policies=["patch:16", "blind"], baselines=True,
                          threads=1, progress=lambda *a: calls.append(a))
    names = [p["policy"] for p in report["policies"]]
    assert names[:2] == ["patch:16", "blind"] and "reprefill" in names and "prefix" in names
    assert report["steps"] == len(web_trace["steps"])
    by_name = {p["policy"]: p for p in report["policies"]}
    # Re-prefill is the oracle itself: every step's fidelity is float noise; blind reuse is measurably off.
    rep = by_name["reprefill"]
    assert len(rep["steps"]) == len(web_trace["steps"])
    assert rep["totals"]["fidelity_steps"] > 0 and rep["totals"]["max_kl"] < 1e-6
    assert rep["totals"]["mean_top1"] == 1.0
    assert by_name["blind"]["totals"]["max_kl"] > 1e-3
    # The patch policy computes fewer forward tokens than a re-prefill after every mutating step.
    patch = by_name["patch:16"]["totals"]
    assert 0 < patch["forward_tokens"] < patch["full_prefill_tokens"]
    # progress: before every step of every policy, with the policy's name.
    assert len(calls) == len(names) * len(web_trace["steps"])
    assert calls[0][:4] == (0, len(names), 0, len(web_trace["steps"]))
    assert {c[4] for c in calls} == set(names)


def test_replay_without_fidelity_or_baselines(orbit, web_trace, stories260k_path):
    report = orbit.replay(web_trace, str(stories260k_path), policies=["reprefill"], baselines=False,
                          fidelity=False, explain=True)
    (only,) = report["policies"]
    assert only["policy"] == "reprefill"
    assert all(s["fidelity"] is None for s in only["steps"])
    assert any(s.get("plan") for s in only["steps"])


def test_replay_attributes_the_loss_to_instances(orbit, web_trace, stories260k_path):
    report = orbit.replay(web_trace, str(stories260k_path), policies=["blind"], baselines=False, attribute=True)
    (blind,) = report["policies"]
    losses = [l for s in blind["steps"] for l in s.get("instance_losses", [])]
    assert losses and all(l["measured_kl"] >= 0 and l["kv_change"] > 1e-6 for l in losses)
    groups = blind["totals"]["loss_agreement"]
    assert sum(g["instances"] for g in groups) == len(losses)
    assert {g["served_as"] for g in groups} == {l["served_as"] for l in losses}
    with pytest.raises(ValueError, match="attribute=True needs fidelity=True"):
        orbit.replay(web_trace, str(stories260k_path), policies=["blind"], fidelity=False, attribute=True)


def test_bad_traces_raise_naming_the_field(orbit, web_trace, stories260k_path, tmp_path):
    bad = copy.deepcopy(web_trace)
    bad["steps"][0]["op"] = "teleport"
    with pytest.raises(orbit.OrbitError, match="teleport"):
        orbit.validate_trace(bad)
    bad = copy.deepcopy(web_trace)
    bad["steps"].insert(0, {"op": "admit", "chunk": "no-such-chunk"})
    with pytest.raises(orbit.OrbitError, match="no-such-chunk"):
        orbit.replay(bad, str(stories260k_path))
    bad = copy.deepcopy(web_trace)
    bad["format"] = "orbit-trace/9"
    with pytest.raises(orbit.OrbitError, match="format"):
        orbit.validate_trace(bad)
    with pytest.raises(orbit.OrbitError, match="missing.json"):
        orbit.load_trace(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{ not json")
    with pytest.raises(orbit.OrbitError, match="broken.json"):
        orbit.load_trace(tmp_path / "broken.json")
    (tmp_path / "twice.json").write_text(
        '{"format": "orbit-trace/1", "chunks": [{"name": "a", "random_tokens": 5, "seed": 1}], '
        '"steps": [{"op": "admit", "chunk": "a", "chunk": "a"}]}')
    with pytest.raises(orbit.OrbitError, match=r"twice.json: steps\[0\]: field 'chunk': given twice"):
        orbit.load_trace(tmp_path / "twice.json")
    with pytest.raises(TypeError, match="trace"):
        orbit.validate_trace(42)
    with pytest.raises(orbit.OrbitError, match="policy"):
        orbit.replay(web_trace, str(stories260k_path), policies=["patch:banana"], baselines=False)
    with pytest.raises(orbit.OrbitError):
        orbit.replay(web_trace, str(tmp_path / "no-model.bin"))
    with pytest.raises(TypeError, match="progress"):
        orbit.replay(web_trace, str(stories260k_path), progress=5)


def _numpy_ints(value):
    """`value` with every int (bools aside) a numpy scalar of some width: what a trace built with numpy holds."""
    if isinstance(value, dict):
        return {k: _numpy_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numpy_ints(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return np.uint64(value) if value >= 2**62 else np.int64(value) if value >= 2**15 else np.int16(value)
    return value


def test_a_trace_dict_takes_numpy_values_as_the_values_they_equal(orbit, web_trace, stories260k_path, tmp_path):
    # json.dumps refused numpy.int64 ("Object of type int64 is not JSON serializable", no field named): a trace
    # built with numpy (seeds from a numpy Generator, token ids from an array) could not be passed as a dict.
    plain = copy.deepcopy(web_trace)
    plain["steps"].append({"op": "turn", "tokens": [5, 6, 7]})
    plain["steps"].append({"op": "turn", "sample": 2, "temperature": 0.5, "seed": 9})
    orbit.validate_trace(plain)
    numpyish = _numpy_ints(plain)
    numpyish["steps"][-2]["tokens"] = np.array([5, 6, 7], np.int32)
    numpyish["steps"][-1]["temperature"] = np.float32(0.5)
    assert isinstance(numpyish["chunks"][0]["seed"], np.generic)
    orbit.validate_trace(numpyish)
    orbit.save_trace(numpyish, tmp_path / "numpy.json")
    orbit.save_trace(plain, tmp_path / "plain.json")
    assert (tmp_path / "numpy.json").read_text() == (tmp_path / "plain.json").read_text()
    assert orbit.load_trace(tmp_path / "numpy.json") == orbit.load_trace(tmp_path / "plain.json")
    report = orbit.replay(numpyish, str(stories260k_path), policies=["patch:8"], baselines=False, fidelity=False)
    assert [p["policy"] for p in report["policies"]] == ["patch:8"]


def test_a_trace_dict_names_the_path_of_a_value_json_cannot_hold(orbit, web_trace, stories260k_path):
    bad = copy.deepcopy(web_trace)
    bad["steps"][3]["seed"] = np.complex128(1)
    with pytest.raises(TypeError, match=r"^validate_trace: trace\['steps'\]\[3\]\['seed'\]: expected a JSON value "
                                        r"\(dict, list, str, int, float, bool or None\), got complex128$"):
        orbit.validate_trace(bad)
    with pytest.raises(TypeError, match=r"^replay: trace\['steps'\]\[3\]\['seed'\]: "):
        orbit.replay(bad, str(stories260k_path))
    bad = copy.deepcopy(web_trace)
    bad["steps"].append({"op": "turn", "sample": 2, "temperature": np.float64("nan")})
    with pytest.raises(ValueError, match=r"^save_trace: trace\['steps'\]\[%d\]\['temperature'\]: nan is not a "
                                         r"JSON number$" % (len(bad["steps"]) - 1)):
        orbit.save_trace(bad, "never-written.json")
    bad = copy.deepcopy(web_trace)
    bad["chunks"][1]["tokens"] = np.array(["a", "b"])
    with pytest.raises(TypeError, match=r"^validate_trace: trace\['chunks'\]\[1\]\['tokens'\]: .*got ndarray of "
                                        r"dtype <U1$"):
        orbit.validate_trace(bad)
    bad = copy.deepcopy(web_trace)
    bad["steps"][0][(1, 2)] = 3
    with pytest.raises(TypeError, match=r"^validate_trace: trace\['steps'\]\[0\]: key \(1, 2\): expected a str"):
        orbit.validate_trace(bad)
    bad = copy.deepcopy(web_trace)
    bad["steps"][0]["note"] = bad
    with pytest.raises(ValueError, match=r"^validate_trace: trace\['steps'\]\[0\]\['note'\]: a circular reference "
                                         r"\(it holds a dict that holds it\)$"):
        orbit.validate_trace(bad)


def test_an_exception_in_progress_stops_the_replay(orbit, web_trace, stories260k_path):
    seen = []

    def stop_at_third(policy, policies, step, steps, name):
        seen.append(step)
        if len(seen) == 3:
            raise KeyboardInterrupt("stop")

    with pytest.raises(KeyboardInterrupt, match="stop"):
        orbit.replay(web_trace, str(stories260k_path), progress=stop_at_third)
    assert len(seen) == 3


def test_forks_of_a_long_window_are_bounded(orbit):
    # Each fork copies its parent's window items: 1,000 admits forked 1,001 times held a million of them (a 540 KB
    # file of 5,000 admits and 6,000 forks took 1.5 GB to validate). Past a million in all, the fork is refused.
    chunks = [{"name": f"c{i}", "random_tokens": 1, "seed": i} for i in range(1000)]
    steps = [{"op": "admit", "chunk": c["name"]} for c in chunks]
    trace = {"format": "orbit-trace/1", "chunks": chunks, "steps": steps + [{"op": "fork", "branch": "b0"}]}
    orbit.validate_trace(trace)
    trace["steps"] = steps + [{"op": "fork", "branch": f"b{k}"} for k in range(1001)]
    with pytest.raises(orbit.OrbitError, match=r"step 1999 \(fork\): field 'branch': 'b999' would make the live "
                                               r"branches hold 1001000 window items in all, past the 1000000"):
        orbit.validate_trace(trace)


def test_embedding_chunks_apart_in_std_alone_are_two_chunks(orbit, stories260k_path):
    # Their content was compared with std to 6 decimals: 1e-7 and 2e-7 were refused as the same chunk (and the
    # error named field 'tokens', which embedding chunks do not have).
    def chunk(name, std, grid=(1, 2, 2)):
        return {"name": name, "embeddings": {"grid": list(grid), "seed": 7, "std": std}}

    trace = {"format": "orbit-trace/1", "chunks": [chunk("e1", 1e-7), chunk("e2", 2e-7)],
             "steps": [{"op": "admit", "chunk": "e1"}, {"op": "admit", "chunk": "e2"}]}
    report = orbit.replay(trace, str(stories260k_path), policies=["reprefill"], baselines=False, fidelity=False)
    assert [s["status"] for s in report["policies"][0]["steps"]] == ["ok", "ok"]
    # The same rows under another grid are the same content where positions have one row (stories260K's).
    trace["chunks"] = [chunk("e1", 1e-7), chunk("e2", 1e-7, (1, 4, 1))]
    with pytest.raises(orbit.OrbitError, match=r"chunk 1 \('e2'\): field 'embeddings': same content as chunk 'e1'"):
        orbit.replay(trace, str(stories260k_path), policies=["reprefill"], baselines=False, fidelity=False)


def test_replay_and_make_trace_name_their_arguments(orbit, web_trace):
    # replay(trace, None) named the C++ option ReplayOptions::engine.model.
    for model in (None, ""):
        with pytest.raises(ValueError, match=r"^replay: model: a model path is required"):
            orbit.replay(web_trace, model)
    # Past 2^40 three quarters of max_positions overflowed int64, and the trace changed shape without a word.
    with pytest.raises(orbit.OrbitError, match=r"make_trace: max_positions must be in \[64, 2\^40\], got 4611686018427387904"):
        orbit.make_trace("web", steps=2, seed=1, max_positions=2**62)
    assert orbit.make_trace("web", steps=2, seed=1, max_positions=2**40)["steps"]


@pytest.mark.parametrize("call,name", [(lambda o: o.load_trace(5), "load_trace: path"),
                                       (lambda o: o.validate_trace(5), "validate_trace: trace"),
                                       (lambda o: o.save_trace(5, "x.json"), "save_trace: trace")])
def test_a_trace_argument_of_another_type_names_the_function(orbit, call, name):
    # Every one said "trace: expected ...", whichever function was called.
    with pytest.raises(TypeError, match=rf"^{re.escape(name)}: expected a dict \(orbit-trace/1 JSON object\) or a "
                                        r"path, got int$"):
        call(orbit)
