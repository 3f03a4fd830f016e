"""Fidelity-budgeted plans from Python: each step's predicted KL, and the chunk sensitivity it was scaled by
once a patch has measured it.

Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python (see conftest.py).
"""

PAGE = 4
POOL = 8 << 20


def test_plan_steps_show_the_predicted_kl_and_the_sensitivity_behind_it(orbit, stories260k_path):
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, background="deferred") as e:
        p = e.add_text("You are a helper who reads stories and answers questions about them.")
        x = e.add_text("Tom saw a big red ball in the park. He ran to get it.")
        story = e.add_text("Once upon a time, there was a little cat. The cat liked to play with a ball in the sun.")
        w = e.new_window()  # the default policy: first sights are exact prefills, patches queued
        w.admit(p)
        xi = w.admit(x).added[0]
        w.admit(story)
        w.policy = "patch:16:kl=1"  # a budget that keeps every survivor

        def kept_story():
            (step,) = [s for s in w.plan_evict(xi) if s.chunk == story]
            assert step.action == orbit.StepAction.keep and step.how == "keep"
            return step

        before = kept_story()
        assert before.predicted_kl > 0 and before.sensitivity == -1  # no patch has measured it yet
        e.run_background()
        after = kept_story()
        assert 0 < after.sensitivity < 0.01 and 0 < after.predicted_kl < before.predicted_kl


def test_a_turn_kept_over_a_changed_context_is_priced_by_its_measured_sensitivity(orbit, stories260k_path):
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, background="deferred") as e:
        w = e.new_window()  # the default policy
        w.admit(e.add_text("You are a helper who reads stories and answers questions about them."))
        plan = w.plan_add_turn(e.tokenize("Tom saw a big red ball in the park."))
        (step,) = [s for s in plan if s.is_turn]
        assert step.how == "prefill-turn" and step.background_tokens == step.chunk.length  # measured after it
        first = w.apply(plan).added[0]
        w.add_turn(e.tokenize("He ran to get it, and the ball rolled away."))
        w.policy = "patch:16:kl=1"  # a budget that keeps every survivor

        def kept_turn():
            (s,) = [s for s in w.plan_evict(first) if s.is_turn and s.action == orbit.StepAction.keep]
            return s

        before = kept_turn()
        assert before.predicted_kl > 0 and before.sensitivity == -1  # queued, not measured yet
        background = e.stats.background_forward_tokens
        e.run_background()
        assert e.stats.background_forward_tokens > background  # the turns' forwards alone: background work
        after = kept_turn()
        assert after.sensitivity > 0 and after.predicted_kl != before.predicted_kl

        w2 = e.new_window(policy="prefix")  # no budget: nothing would read it, nothing is measured
        w2.admit(e.add_text("Lily had a small dog."))
        (step,) = [s for s in w2.plan_add_turn(e.tokenize("The dog liked to run.")) if s.is_turn]
        assert step.background_tokens == 0
