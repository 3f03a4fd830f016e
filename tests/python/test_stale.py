"""Stale patches under a fidelity budget, from Python: a chunk recalled behind most of the context its patch
was formed on may be served by that patch (PlanStep.match == PatchMatch.stale, PlanStep.divergence), priced
by the fidelity model like any approximate action; without a budget it is formed again.

Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python (see conftest.py).
"""
import numpy as np
import pytest


@pytest.fixture
def engine(orbit, stories260k_path):
    with orbit.Engine(stories260k_path, pool_bytes=8 << 20, page_size=4, background=orbit.BackgroundMode.deferred) as e:
        if not e.has_tokenizer:
            pytest.skip("the bundled model has no tokenizer beside it")
        yield e


def recall_plan(engine, policy):
    system = engine.add_text("You are a helper who reads stories and answers questions about them.")
    page = engine.add_text("Tom saw a big red ball in the park. He ran to get it.")
    story = engine.add_text("Once upon a time, there was a little cat. The cat liked to play with a ball in the sun.")
    w = engine.new_window(policy=policy)
    w.admit(system)
    w.admit(page)
    instance = w.admit(story).added[0]
    engine.run_background()  # the story's patch behind [system, page] is stored
    w.evict(instance)
    w.add_turn(engine.tokenize("Why", bos=False))
    plan = w.plan_recall(story)
    step = plan.steps[-1]
    assert step.chunk == story
    return w, plan, step


def test_a_budget_serves_a_recall_by_its_stale_patch(orbit, engine):
    w, plan, step = recall_plan(engine, "default")
    assert step.action == orbit.StepAction.apply_patch
    assert step.match == orbit.PatchMatch.stale
    assert 0 < step.divergence < 0.15
    assert step.forward_tokens == 0
    assert 0 < plan.predicted_kl <= orbit.WindowPolicy().kl_budget
    assert "stale patch (divergence" in plan.describe()
    assert w.apply(plan).forward_tokens == 0
    probe = engine.tokenize("The cat", bos=False)
    got, ref = w.logits(probe, all_rows=True), w.reference_logits(probe, all_rows=True)
    assert np.abs(got - ref).max() < 2.0  # approximate, not exact: the patch saw another context


@pytest.mark.parametrize("policy", ["patch:16", "patch:16:kl=1e-9"])
def test_without_room_in_a_budget_a_recall_is_formed(orbit, engine, policy):
    _, _, step = recall_plan(engine, policy)
    assert step.action == orbit.StepAction.form
    assert step.match == orbit.PatchMatch.none


@pytest.mark.parametrize("policy", ["default", "patch:16:stale=1:heal=0"])
def test_heal_re_forms_what_a_stale_patch_served(orbit, engine, policy):
    # A stale patch is formed on the window's very context (the context hash matches) yet approximate: heal
    # must form it again there, after which the window reads what a re-prefill reads.
    w, plan, step = recall_plan(engine, policy)
    assert step.match == orbit.PatchMatch.stale
    w.apply(plan)
    probe = engine.tokenize("The cat", bos=False)
    assert not all(i.exact for i in w.instances)
    healed = w.heal()
    assert healed.forward_tokens >= step.chunk.length
    assert all(i.exact for i in w.instances)
    got, ref = w.logits(probe, all_rows=True), w.reference_logits(probe, all_rows=True)
    assert np.abs(got - ref).max() < 1e-3
    assert w.heal().forward_tokens == 0  # exact now: nothing left to heal


def test_heal_under_throughput_replaces_a_truncated_stored_patch(orbit, engine):
    # throughput prefills its misses but reads stored patches: a rank-16 patch of a 20-token chunk, stored under
    # the exact context's key, is approximate, and heal must not read it again.
    a = engine.add_tokens(list(range(10, 30)))
    b = engine.add_tokens(list(range(40, 60)))
    former = engine.new_window(policy=orbit.Policy("patch:16", reuse_computed=False))  # no exact-reuse KV
    former.admit(a)
    former.admit(b)
    engine.run_background()  # b's rank-16 patch behind [a] is stored
    w = engine.new_window(policy="throughput:kl=1")  # room for the patch's loss
    w.admit(a)
    step = w.plan_admit(b).steps[-1]
    assert step.action == orbit.StepAction.apply_patch and step.match == orbit.PatchMatch.exact and not step.exact
    w.admit(b)
    assert not w.instances[-1].exact
    assert w.heal().forward_tokens == b.length
    assert all(i.exact for i in w.instances)
    probe = [3, 4, 5]
    assert np.abs(w.logits(probe, all_rows=True) - w.reference_logits(probe, all_rows=True)).max() < 1e-3
