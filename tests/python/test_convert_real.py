"""bench/replay/convert_real.py on the real agent trajectories kept beside the repository (../shared/traces):
every trace it writes loads with the bindings' trace loader, carries the window edits its framework made
(stubs and pages replaced mid-context, reflections on a side branch, append-only history), and one replays.
Skips where the trajectories are not on this machine."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

# Its module-scoped fixture is expensive: under pytest-xdist (--dist loadgroup) this file runs on one worker.
pytestmark = pytest.mark.xdist_group("test_convert_real")

REPO = pathlib.Path(__file__).resolve().parents[2]
CONVERTER = REPO / "bench" / "replay" / "convert_real.py"
CANDIDATES = [REPO.parent / "shared" / "traces", pathlib.Path("/work/shared/traces")]


def sources_dir():
    return next((p for p in CANDIDATES if (p / "sources").is_dir()), None)


@pytest.fixture(scope="module")
def converted(orbit, stories260k_path, tmp_path_factory):
    """Runs the converter once into a temporary folder; returns {trace name: (trace dict, printed line)}."""
    sources = sources_dir()
    if sources is None:
        pytest.skip("the real trajectories are not here: none of " + ", ".join(map(str, CANDIDATES)))
    out = tmp_path_factory.mktemp("real-traces")
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(orbit.__file__).resolve().parents[1]), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(CONVERTER), "--sources", str(sources), "--out", str(out),
                           "--model", str(stories260k_path)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = {line.split(":")[0]: line for line in done.stdout.splitlines()}
    traces = {p.stem: (orbit.load_trace(str(p)), lines.get(p.stem)) for p in sorted(out.glob("*.json"))}
    return traces, out


def ops(trace):
    return [s["op"] for s in trace["steps"]]


def test_every_written_trace_loads_and_was_reported(converted):
    traces, _ = converted
    names = sorted(traces)
    assert any(n.startswith("real-swe-agent") for n in names)
    assert "real-openhands-browsing" in names
    assert any(n.startswith("real-webshop") for n in names)
    assert len([n for n in names if n.startswith("real-reflexion-q")]) == 4
    for name, (trace, line) in traces.items():
        assert trace["format"] == "orbit-trace/1" and trace["name"] == name
        assert line is not None, f"no line printed for {name}"
        calls = int(line.split(": ")[1].split(" calls")[0])
        assert ops(trace).count("generate") == calls, name
        assert "cut to" in trace["description"], name


def test_the_frameworks_edits_are_in_the_traces(converted):
    traces, _ = converted
    swe = next(t for n, (t, _) in traces.items() if n.startswith("real-swe-agent"))
    # a tool output replaced by its stub where it stood: an eviction, then an admission before a later piece
    assert "evict" in ops(swe) and any(s["op"] == "admit" and "before" in s for s in swe["steps"])
    page = traces["real-openhands-browsing"][0]
    assert any(s["op"] == "admit" and s["chunk"].endswith("-page") and "before" in s for s in page["steps"])
    webshop = next(t for n, (t, _) in traces.items() if n.startswith("real-webshop"))
    assert set(ops(webshop)) == {"admit", "generate"}, "WebShop's history is append-only"
    for name, (trace, _) in traces.items():
        if name.startswith("real-reflexion-q"):
            assert {"fork", "drop", "evict"} <= set(ops(trace)), name
            assert any(s["op"] == "admit" and s["chunk"].endswith("-reflection") and "before" in s
                       for s in trace["steps"]), name


def test_the_converter_is_deterministic(converted, orbit, stories260k_path, tmp_path):
    traces, out = converted
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(orbit.__file__).resolve().parents[1]))
    subprocess.run([sys.executable, str(CONVERTER), "--sources", str(sources_dir()), "--out", str(tmp_path),
                    "--model", str(stories260k_path)], check=True, capture_output=True, env=env, timeout=300)
    for path in sorted(out.glob("*.json")):
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path.name


def test_a_converted_trace_replays(converted, orbit_cli, stories260k_path):
    _, out = converted
    trace = next(out.glob("real-webshop-*.json"))
    done = subprocess.run([str(orbit_cli), "replay", str(trace), "--model", str(stories260k_path), "--policy",
                           "default", "--no-fidelity", "--json", "-", "--quiet"], capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert all(s["status"] == "ok" for p in report["policies"] for s in p["steps"])


def test_no_two_chunks_share_token_ids_under_a_tokenizer_with_unknowns(orbit, models_dir, tmp_path):
    """tinystories-656k's tokenizer maps characters it lacks (')' among them) to one unknown id, so two
    texts that differ only there are one content to the engine, which refuses a trace holding both.
    Reflexion q38 (the seventh question converted) has such a pair of actions."""
    sources = sources_dir()
    if sources is None:
        pytest.skip("the real trajectories are not here: none of " + ", ".join(map(str, CANDIDATES)))
    model = models_dir / "tinystories-656k"
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(orbit.__file__).resolve().parents[1]))
    subprocess.run([sys.executable, str(CONVERTER), "--sources", str(sources), "--out", str(tmp_path),
                    "--model", str(model), "--questions", "7"], check=True, capture_output=True, env=env,
                   timeout=300)
    with orbit.Engine(str(model), pool_bytes=1 << 20) as engine:
        for path in sorted(tmp_path.glob("*.json")):
            chunks = orbit.load_trace(str(path))["chunks"]
            ids = [tuple(engine.tokenize(c["text"], bos=bool(c.get("bos")))) for c in chunks]
            repeated = sorted({c["name"] for c, i in zip(chunks, ids) if ids.count(i) > 1})
            assert not repeated, f"{path.name}: chunks with the same token ids: {repeated}"


def test_a_window_past_the_models_positions_and_bad_counts_are_refused(orbit, stories260k_path, tmp_path):
    """--max-window 100000 wrote traces stories260K cannot replay (5 of 7 refused at a step past its 512
    positions, one replayed with 32 refusals) and exited 0; --questions -1 converted all but the last question,
    --max-window -5 was refused naming --piece-cap, and a model that does not load printed a traceback."""
    sources = sources_dir()
    if sources is None:
        pytest.skip("the real trajectories are not here: none of " + ", ".join(map(str, CANDIDATES)))
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(orbit.__file__).resolve().parents[1]), OMP_NUM_THREADS="1")

    def convert(*args):
        return subprocess.run([sys.executable, str(CONVERTER), "--sources", str(sources), "--out",
                               str(tmp_path / "out"), *map(str, args)], capture_output=True, text=True, env=env,
                              timeout=300)

    wide = convert("--model", stories260k_path, "--max-window", 100000)
    assert wide.returncode == 2
    assert "pass the model's 512 positions (--max-window 100000): give --max-window" in wide.stderr, wide.stderr
    for args, says in ((("--max-window", -5), "--max-window must be at least 2, got -5"),
                       (("--questions", -1), "--questions must be at least 1, got -1")):
        done = convert("--model", stories260k_path, *args)
        assert done.returncode == 2 and says in done.stderr, done.stderr
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    broken = convert("--model", empty)
    assert broken.returncode == 2 and broken.stderr.startswith("convert_real.py: --model: "), broken.stderr
    assert "Traceback" not in broken.stderr


def test_a_source_that_fails_leaves_the_out_folder_as_it_was(converted, orbit, stories260k_path, tmp_path):
    """--max-window 60 fails at the third source (its fixed pieces take 70 tokens): the two traces before it were
    written beside an earlier run's, the folder then holding a set no run made. Now nothing is written."""
    _, first = converted
    out = tmp_path / "out"
    out.mkdir()
    earlier = {p.name: p.read_bytes() for p in sorted(first.glob("*.json"))}
    for name, data in earlier.items():
        (out / name).write_bytes(data)
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(orbit.__file__).resolve().parents[1]), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(CONVERTER), "--sources", str(sources_dir()), "--out", str(out),
                           "--model", str(stories260k_path), "--max-window", "60"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 2 and "over --max-window 60" in done.stderr, done.stderr
    assert {p.name: p.read_bytes() for p in sorted(out.iterdir())} == earlier


def test_heldout_refuses_two_traces_of_one_name(tmp_path):
    """Their reports shared <out>/<name>.replay.json: one trace's numbers were printed for both."""
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "t.json").write_text("{}")
    done = subprocess.run([sys.executable, str(REPO / "bench" / "replay" / "heldout.py"), "--traces",
                           str(tmp_path / "a" / "t.json"), str(tmp_path / "b" / "t.json"), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "have the same name 't': their reports would share" in done.stderr, done.stderr
