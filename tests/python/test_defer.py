"""Deferred repairs from Python: every preset defers an edit's repairs to the next read (WindowPolicy
.defer_repairs, ':eager' turns it off); Window.flush / plan_flush run them; InstanceInfo.deferred and
PlanStep.deferred show what waits; a read repairs first and is exact.

Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python (see conftest.py).
"""
import random

import numpy as np
import pytest

from window_helpers import random_tokens


@pytest.fixture
def engine(small_engine):
    return small_engine


def test_deferred_repairs_wait_for_the_next_read(orbit, engine):
    rng = random.Random(5)
    a, b = (engine.add_tokens(random_tokens(rng, 8), label=f"c{i}") for i in range(2))
    question, answer, query = random_tokens(rng, 5), random_tokens(rng, 6), random_tokens(rng, 3)
    assert orbit.WindowPolicy().defer_repairs and orbit.Policy("prefix").defer_repairs
    assert not orbit.Policy("prefix:eager").defer_repairs and orbit.Policy("prefix:eager").name == "prefix:eager"
    assert orbit.Policy("reprefill").replace(defer_repairs=False).name == "reprefill:eager"

    def build(policy):
        w = engine.new_window(policy=policy)
        w.admit(a)
        w.admit(b)
        w.add_turn(question)
        w.add_turn(answer)
        return w

    eager = build("reprefill:eager")
    assert eager.evict(eager.instances[2]).forward_tokens == 6  # the answer, re-prefilled at once
    w = build("reprefill")
    plan = w.plan_evict(w.instances[2])
    assert plan.forward_tokens == 0 and [s.deferred for s in plan.steps if s.action != orbit.StepAction.evict] == [
        False, False, True]
    w.apply(plan)
    assert [i.deferred for i in w.instances] == [False, False, True]
    assert w.plan_flush().op == orbit.Operation.flush and w.plan_flush().forward_tokens == 6
    w.evict(w.instances[2])  # the answer leaves: its repair never runs
    version = w.version
    assert w.flush().forward_tokens == 0 and w.version == version
    w.evict(w.instances[0])  # b waits
    assert w.instances[0].deferred
    error = np.max(np.abs(w.logits(query, all_rows=True) - w.reference_logits(query, all_rows=True)))
    assert error < 1e-4  # a read repairs first
    assert not w.instances[0].deferred and w.instances[0].exact
