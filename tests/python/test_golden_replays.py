"""The planner decides as it did: three shipped traces replayed under five policies must reproduce the
golden records in tests/data/golden (every step's tokens, patches, bytes and generated tokens exactly; the
predicted and measured KL to float32 rounding). A change meant to alter the planner's
decisions regenerates them (tests/data/golden/README.md)."""
import json
import sys

import pytest

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
import golden_replay  # noqa: E402

TRACES = ["lookback", "agent_coding", "agent_videoqa"]


@pytest.mark.parametrize("name", TRACES)
def test_replay_matches_its_golden_record(name, orbit_cli, stories260k_path, repo_root):
    with open(repo_root / "tests" / "data" / "golden" / f"{name}.json") as f:
        golden = json.load(f)
    trace = repo_root / "tests" / "data" / "traces" / f"{name}.json"
    got = golden_replay.replay(str(orbit_cli), str(stories260k_path), str(trace))
    diff = golden_replay.differences(golden, got, name)
    assert not diff, "\n".join(diff[:20])


def test_a_changed_decision_is_reported():
    step = {k: 0 for k in golden_replay.EXACT}
    step.update(op="admit", predicted_kl=1e-3, kl=1e-3)
    other = dict(step, critical_forward_tokens=5, predicted_kl=2e-3, kl=2e-3)
    diff = golden_replay.differences({"p": [step]}, {"p": [other]}, "t")
    assert len(diff) == 3
    assert "critical_forward_tokens 0 vs 5" in diff[0]
    assert golden_replay.differences({"p": [step]}, {"p": [dict(step, kl=1e-3 * (1 + 1e-7))]}) == []
