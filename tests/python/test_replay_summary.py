"""`orbit replay`'s summary tables (cli/cmd_replay.cpp) against its own totals, and its appended answers: the
full-prefill row puts each ratio under its column (it printed fwd-tok / full-pf under "critical fwd"), pred-KL
is the plans' mean over every step where no step was measured (it read 0, "no error predicted", under
--no-fidelity), --patch-capacity 0 sizes the offline bound at 0 bytes (it meant the default, the host budget),
an answer decoded to the model's last position is appended (it was refused, one position short), and a step
past a refused turn says so."""
import json
import re
import signal
import subprocess

import pytest

POLICY = "patch:16"


@pytest.fixture(scope="module")
def trace(orbit_cli, stories260k_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("summary") / "rag.trace.json"
    subprocess.run([str(orbit_cli), "make-trace", "--kind", "rag", "--steps", "2", "--seed", "1", "--model",
                    str(stories260k_path), "--out", str(path)], check=True, capture_output=True)
    return path


def replay(orbit_cli, stories260k_path, trace, tmp_path, *extra):
    report = tmp_path / "report.json"
    result = subprocess.run([str(orbit_cli), "replay", str(trace), "--model", str(stories260k_path), "--quiet",
                             "--policy", POLICY, "--json", str(report), *map(str, extra)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return result.stdout, json.loads(report.read_text())


def ratio(a, b):
    return f"{a / b:.3f}x"


def test_the_full_prefill_row_and_pred_kl_without_fidelity(orbit_cli, stories260k_path, trace, tmp_path):
    out, report = replay(orbit_cli, stories260k_path, trace, tmp_path, "--no-fidelity")
    totals = {p["policy"]: p["totals"] for p in report["policies"]}
    mine = totals[POLICY]
    assert mine["fidelity_steps"] == 0 and mine["mean_kl"] is None
    # Without a measurement, pred-KL is the plans' mean over every step with one (it read 0: a mean over none).
    predicted = [s["predicted_kl"] for s in next(p for p in report["policies"] if p["policy"] == POLICY)["steps"]
                 if s["predicted_kl"] >= 0]
    assert mine["mean_predicted_steps"] == len(predicted) > 0
    assert mine["mean_predicted_kl"] == pytest.approx(sum(predicted) / len(predicted), rel=1e-6)
    assert mine["mean_predicted_kl"] > 0
    row = re.search(r"^  full-prefill +(\S+) +(\S+) +(\S+) +(\S+)$", out, re.M)
    assert row, out
    assert row.groups() == (ratio(mine["critical_forward_tokens"], mine["full_prefill_tokens"]), "-",
                            ratio(mine["forward_tokens"], mine["full_prefill_tokens"]), "-")
    assert mine["critical_forward_tokens"] < mine["forward_tokens"]  # the two columns differ here
    for policy in totals:  # mean-KL, pred-KL, max-KL and top1 end each policy's totals line
        line = next(line for line in out.splitlines() if line.startswith(policy + " "))
        predicted = totals[policy]["mean_predicted_kl"]
        shown = "n/a" if predicted is None else f"{predicted:.3e}"
        assert re.search(rf" n/a +{re.escape(shown)} +n/a +n/a$", line), line


def test_pred_kl_with_fidelity_is_the_mean_over_the_measured_steps(orbit_cli, stories260k_path, trace, tmp_path):
    _, report = replay(orbit_cli, stories260k_path, trace, tmp_path)
    mine = next(p for p in report["policies"] if p["policy"] == POLICY)
    predicted = [s["predicted_kl"] for s in mine["steps"] if s.get("fidelity") and s["predicted_kl"] >= 0]
    assert mine["totals"]["fidelity_steps"] > 0 and predicted
    assert mine["totals"]["mean_predicted_kl"] == pytest.approx(sum(predicted) / len(predicted), rel=1e-6)


def test_a_zero_patch_capacity_is_zero(orbit_cli, stories260k_path, trace, tmp_path):
    out, _ = replay(orbit_cli, stories260k_path, trace, tmp_path, "--no-fidelity", "--patch-capacity", "0")
    bound = re.search(r"offline bound over its (\d+) patch demands \(\d+ distinct, capacity (\d+) bytes\): "
                      r".* compulsory (\d+) .* Belady (\d+) .* LRU (\d+) ", out)
    assert bound, out
    demands, capacity, compulsory, belady, lru = map(int, bound.groups())
    assert capacity == 0 and belady == lru == demands  # nothing kept: every demand forms its patch
    out, _ = replay(orbit_cli, stories260k_path, trace, tmp_path, "--no-fidelity")
    assert re.search(r"capacity 1073741824 bytes", out)  # the default: the host budget


def test_an_appended_answer_that_runs_to_the_last_position_is_kept(orbit_cli, stories260k_path, trace, tmp_path):
    # A decode may sample one token past the window's last position (the last token needs none to be sampled),
    # and the answer, appended as a turn, then needed one more position than the model has: the turn was refused.
    steps = json.loads(trace.read_text())
    at = next(i for i, s in enumerate(steps["steps"]) if s["op"] == "generate" and s.get("append"))
    steps["steps"] = steps["steps"][:at + 1]
    steps["steps"][at]["max_tokens"] = 1_000_000
    long = tmp_path / "long.trace.json"
    long.write_text(json.dumps(steps))
    _, report = replay(orbit_cli, stories260k_path, long, tmp_path, "--no-fidelity")
    for p in report["policies"]:
        last = p["steps"][-1]
        assert (last["status"], last["window_tokens"]) == ("ok", 512), (p["policy"], last["status"])
        assert last["decode_tokens"] > 0


def test_a_turn_index_past_a_refused_turn_names_the_refusal(orbit_cli, stories260k_path, trace, tmp_path):
    # Pages of 32768 tokens leave the default pool 6 pages: turns are refused (out_of_capacity), and a later
    # evict of turn 1 finds none. The error named only the trace's field, as if the trace were wrong.
    result = subprocess.run([str(orbit_cli), "replay", str(trace), "--model", str(stories260k_path), "--quiet",
                             "--no-fidelity", "--policy", POLICY, "--page-size", "32768"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 1
    assert re.search(r"field '(turn|count)': the window on branch 'main' lacks an item the trace counts in it "
                     r"\(step \d+ \((turn|generate|admit)\) was refused: out_of_capacity: \w+ refused: the KV pool "
                     r"is full", result.stderr), result.stderr


@pytest.mark.parametrize("edit,field", [({"op": "slide", "count": 2}, "count"), ({"op": "evict", "turn": 0}, "turn")])
def test_positions_after_a_refused_step_are_refused(orbit_cli, stories260k_path, tmp_path, edit, field):
    # B does not fit beside A (550 of 512 positions): its admit is refused, and the window holds A and C where
    # the trace counts A, B and C. `slide 2` evicted A and C (the trace means A and B) and the replay went on;
    # after a refused turn, `evict turn 0` evicted the next turn. Both name what the trace counts no longer.
    trace = {"format": "orbit-trace/1",
             "chunks": [{"name": "A", "random_tokens": 100, "seed": 1}, {"name": "B", "random_tokens": 450, "seed": 2},
                        {"name": "C", "random_tokens": 50, "seed": 3}],
             "steps": [{"op": "admit", "chunk": "A"}, {"op": "admit", "chunk": "B"}, {"op": "admit", "chunk": "C"},
                       {"op": "turn", "random_tokens": 8, "seed": 4}, edit, {"op": "generate", "max_tokens": 2}]}
    if field == "turn":  # the refused item is a turn: the first of two, the second fits
        trace["chunks"] = trace["chunks"][:1]
        trace["steps"] = [{"op": "admit", "chunk": "A"}, {"op": "turn", "random_tokens": 450, "seed": 5},
                          {"op": "turn", "random_tokens": 8, "seed": 4}, edit, {"op": "generate", "max_tokens": 2}]
    path = tmp_path / "refused.trace.json"
    path.write_text(json.dumps(trace))
    result = subprocess.run([str(orbit_cli), "replay", str(path), "--model", str(stories260k_path), "--quiet",
                             "--no-fidelity", "--policy", "reprefill"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout
    assert re.search(rf"step [34] \((slide|evict)\), policy reprefill: field '{field}': the window on branch 'main' "
                     r"lacks an item the trace counts in it \(step 1 \((admit|turn)\) was refused", result.stderr), \
        result.stderr


def test_a_trace_without_steps_is_refused_rather_than_reported(orbit, orbit_cli, stories260k_path, trace, tmp_path):
    # Its ratios were 0 / 0, printed as 1.00x: a claim about a replay that ran nothing.
    empty = json.loads(trace.read_text())
    empty["steps"] = []
    path = tmp_path / "empty.trace.json"
    path.write_text(json.dumps(empty))
    result = subprocess.run([str(orbit_cli), "replay", str(path), "--model", str(stories260k_path), "--quiet",
                             "--no-fidelity"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 1 and "1.00x" not in result.stdout
    assert f"replay: {path} has no steps: nothing to replay" in result.stderr, result.stderr
    with pytest.raises(orbit.OrbitError, match="has no steps: nothing to replay"):
        orbit.replay(str(path), str(stories260k_path), fidelity=False)


def test_a_pool_full_of_huge_pages_names_page_size(orbit_cli, stories260k_path, repo_root):
    # Pages of 20000 tokens leave the default pool a handful: on this agent trace a generate step's deferred
    # repairs found it full, and the error named no argument.
    trace = repo_root / "bench" / "replay" / "agent-json" / "unseen_rag_seed5.trace.json"
    result = subprocess.run([str(orbit_cli), "replay", str(trace), "--model", str(stories260k_path), "--quiet",
                             "--no-fidelity", "--policy", POLICY, "--page-size", "20000"],
                            capture_output=True, text=True, timeout=600)
    if result.returncode == 0:
        pytest.fail("the replay was expected to fill the pool: " + result.stdout[-400:])
    assert "the KV pool is full" in result.stderr and "in pages of --page-size 20000 tokens" in result.stderr, \
        result.stderr


def test_ctrl_c_stops_the_replay_before_its_next_step_and_says_where(orbit_cli, stories260k_path, repo_root,
                                                                     tmp_path):
    # A replay of minutes: the first SIGINT stops it between two steps, naming them, with nothing written.
    report = tmp_path / "report.json"
    trace = repo_root / "bench" / "replay" / "agent-json" / "unseen_rag_seed5.trace.json"
    process = subprocess.Popen([str(orbit_cli), "replay", str(trace), "--model", str(stories260k_path), "--json",
                                str(report)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = process.stderr.readline()
        assert "policy 1/4" in first and "step 1/61" in first, first
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=300)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 130, err
    # Between two steps, or inside one at the SDK's next interruption point.
    assert re.search(r"^orbit replay: interrupted \(Ctrl-C\) (before step \d+/61 of policy 1/4 \(reprefill\)|after step "
                     r"\d+/61 of policy 1/4 \(reprefill\) began): no report \(its ratios need every policy's whole run\); "
                     r"--json not written$", err, re.M), err
    assert out == ""
    assert not report.exists()


def test_steps_a_long_probe_leaves_unmeasured_are_counted(orbit_cli, stories260k_path, repo_root, tmp_path):
    # A probe of 480 tokens fits behind few of story's windows (512 positions): those steps were left unmeasured
    # without a word, and the totals row showed the rest's KL (blind reuse at 0, top-1 1.000) as the run's.
    trace = repo_root / "tests" / "data" / "traces" / "story.json"
    long = json.loads(trace.read_text())
    long["probe"] = {"random_tokens": 480, "seed": 1}
    path = tmp_path / "long-probe.trace.json"
    path.write_text(json.dumps(long))
    out, report = replay(orbit_cli, stories260k_path, path, tmp_path)
    for p in report["policies"]:
        unfit = [s for s in p["steps"] if s.get("probe_unfit")]
        assert p["totals"]["probe_unfit_steps"] == len(unfit) > 0, p["policy"]
        assert all(s["fidelity"] is None for s in unfit)
        line = next(x for x in out.splitlines() if x.startswith(p["policy"] + " "))
        assert line.endswith(f"({len(unfit)} steps not measured: window + probe past the positions)"), line
    # With the trace's own probe every window fits: no step is left out, and the rows say nothing more.
    out, report = replay(orbit_cli, stories260k_path, trace, tmp_path)
    assert all(p["totals"]["probe_unfit_steps"] == 0 for p in report["policies"])
    assert "not measured" not in out
