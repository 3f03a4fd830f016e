"""Dynamic-NTK RoPE from Python: a plan's steps carry the shortfall of content formed in a shorter window than
the one after the plan (PlanStep.shortfall_kl), the plan the window length its forwards run at
(Plan.rope_window), and Window.idle() plans no heal for a shortfall the heal would keep (IdleReport.heal_planned).

Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python (see conftest.py).
"""
import json
import random
import shutil

import pytest

from window_helpers import random_tokens

ANCHOR = 64  # the copy's max_position_embeddings: dynamic NTK scales the rotary base past it


@pytest.fixture
def dynamic_engine(orbit, models_dir, tmp_path):
    """An engine on a copy of the bundled tinystories-656k with dynamic-NTK RoPE (factor 2) anchored at 64."""
    model = tmp_path / "dynamic-64x2"
    shutil.copytree(models_dir / "tinystories-656k", model)
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = ANCHOR
    config["rope_scaling"] = {"type": "dynamic", "factor": 2.0}
    (model / "config.json").write_text(json.dumps(config))
    with orbit.Engine(str(model), pool_bytes=8 << 20, page_size=4) as e:
        yield e


def test_plan_exposes_the_shortfall_and_the_rope_window(orbit, dynamic_engine):
    engine = dynamic_engine
    rng = random.Random(11)
    a, b, c = (engine.add_tokens(random_tokens(rng, n, vocab=2048), label=f"s{n}") for n in (32, 24, 25))
    # No budget: a chunk whose context is unchanged is kept, whatever it carries.
    w = engine.new_window(policy="patch:16:heal:check:eager")
    within = w.plan_admit(a)
    assert within.rope_window == 0 and all(s.shortfall_kl == 0 for s in within)
    w.apply(within)
    w.admit(b)  # 56 tokens: still within the anchor
    assert w.plan_heal().rope_window == 0

    past = w.plan_admit(c)  # 81 tokens: past the anchor, forwards run at the window's length
    assert past.window_tokens_after == 81 and past.rope_window == 81
    kept = [s for s in past if s.action == orbit.StepAction.keep]
    assert len(kept) == 2  # a (formed at 32) and b (at 56), read at 81
    assert all(s.shortfall_kl > 0 and s.shortfall_kl <= s.predicted_kl for s in kept)
    formed = [s for s in past if s.action != orbit.StepAction.keep]
    assert len(formed) == 1 and formed[0].shortfall_kl == 0  # c, formed at 81
    assert past.predicted_kl == pytest.approx(sum(s.predicted_kl for s in past))
    w.apply(past)

    # The window carries a's and b's shortfall, past heal_min_kl, but a heal keeps both (exact over an unchanged
    # context) and re-forms nothing: idle time plans none.
    assert w.plan_heal().count(orbit.StepAction.keep) == 3
    for _ in range(5):  # past the sampled self-check's every 4th call
        report = w.idle()
        assert report.predicted_kl >= w.policy.heal_min_kl
        assert not report.heal_planned and report.healed_instances == 0
    w.evict(w.instances[0])  # b and c kept over a changed context: approximate, so healed
    report = w.idle()
    assert report.heal_planned and report.healed_instances == 2
