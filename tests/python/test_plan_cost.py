"""A plan's forward tokens are what its apply forwards: a chunk's first sight at position 0 (nothing before it) is
encoded on the critical path, and the plan says so (PlanStep.encode_canonical, Plan.forward_tokens).

Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python (see conftest.py).
"""
import pytest


@pytest.mark.parametrize("policy", ["default", "patch:16", "prefix", "reprefill", "blind"])
def test_a_first_sight_at_position_zero_is_priced_as_the_forward_it_is(orbit, stories260k_path, policy):
    with orbit.Engine(str(stories260k_path), background="inline") as e:
        w = e.new_window(policy=policy)
        doc = e.add_tokens(list(range(10, 50)), label="doc")
        plan = w.plan_admit(doc)
        assert plan.steps[0].encode_canonical
        assert plan.forward_tokens == 40
        assert w.apply(plan).forward_tokens == 40
        # A new chunk placed before it: its own encode, planned and forwarded alike.
        first = e.add_tokens(list(range(60, 90)), label="first")
        plan = w.plan_admit(first, before=w.instances[0].id)
        assert plan.forward_tokens == w.apply(plan).forward_tokens >= 30
        # Once stored, the same chunk at position 0 of another window is read, not encoded.
        other = e.new_window(policy=policy)
        plan = other.plan_admit(doc)
        assert not plan.steps[0].encode_canonical
        assert plan.forward_tokens == 0 == other.apply(plan).forward_tokens
