"""Fidelity-budgeted plans from Python: each step's predicted KL, and the chunk sensitivity it was scaled by
once a patch has measured it.

Engine.calibrate_fidelity fits the fidelity model alone (plans' predicted_kl move, their estimated_seconds do not),
the same on two engines; Engine.calibrate fits both models.

Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python (see conftest.py).
"""
import pytest

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


def test_a_kept_instance_the_last_query_looked_at_is_priced_by_that_look(orbit, stories260k_path):
    # The recency weight prices a short text far from the end at next to nothing; the share of the last
    # generate's attention it received (InstanceInfo.attention) is a floor under it with attention_weight > 0.
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, background="deferred") as e:
        w = e.new_window(policy=orbit.Policy("default").replace(attention_weight=0))
        w.admit(e.add_text("You are a helper who reads stories and answers questions about them."))
        x = w.admit(e.add_text("Tom saw a big red ball in the park.")).added[0]
        ball = e.add_text("The ball was red.")
        w.admit(ball)
        for i in range(6):
            w.admit(e.add_text(f"Story {i}: once upon a time there was a little dog who liked to run and play."))
        assert all(i.attention == -1 for i in w.instances)  # no generate read it yet
        w.generate(e.tokenize("What colour was the ball?"), max_tokens=1)
        shares = [i.attention for i in w.instances]
        assert all(0 <= s <= 1 for s in shares) and 0.05 < sum(shares) < 1  # the query's own tokens take the rest
        (looked,) = [i.attention for i in w.instances if i.chunk == ball]
        assert looked > 0

        def kept_ball():
            (s,) = [s for s in w.plan_evict(x) if s.chunk == ball and s.action == orbit.StepAction.keep]
            return s.predicted_kl

        by_recency = kept_ball()
        w.policy = orbit.Policy("default")  # attention_weight 1
        by_attention = kept_ball()
        assert by_attention > by_recency * 2
        fork = w.fork()  # a fork keeps what the window learned
        assert [i.attention for i in fork.instances] == shares
        fork.close()


def test_a_kept_instance_the_tail_repeats_is_priced_by_content(orbit, stories260k_path):
    # The recency weight prices a short text far from the end at next to nothing; with content_weight > 0 its
    # share of the content matches of the window's last tokens (a name and a phrase the last chunk repeats)
    # is a floor under it. attention_weight is off, so no generate's attention enters.
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, background="deferred") as e:
        w = e.new_window(policy=orbit.Policy("default").replace(attention_weight=0))
        w.admit(e.add_text("You are a helper who reads stories and answers questions about them."))
        x = w.admit(e.add_text("Tom saw a big red ball in the park.")).added[0]
        key = e.add_text("The zebra Quixby hid the golden key under the old mill.")
        w.admit(key)
        for i in range(6):
            w.admit(e.add_text(f"Story {i}: once upon a time there was a little dog who liked to run and play."))
        w.admit(e.add_text("Where did the zebra Quixby hide the golden key?"))

        def kept_key():
            (s,) = [s for s in w.plan_evict(x) if s.chunk == key and s.action == orbit.StepAction.keep]
            return s.predicted_kl

        by_recency = kept_key()
        w.policy = orbit.Policy("default").replace(attention_weight=0, content_weight=1)
        by_content = kept_key()
        assert by_content > by_recency * 10


def test_a_read_that_looks_first_is_planned_by_its_own_attention(orbit, stories260k_path):
    # With read_attention_weight > 0 a generate's first forward of its query re-plans the window with each kept
    # instance weighing at least that many times the share of its attention it received: when the plan
    # re-forms anything, the repairs run and the query is forwarded again (both counted in
    # query_forward_tokens); when it re-forms nothing, that forward was the answer's and costs nothing more.
    # generate_n looks once, with a forward of its own, before it forks. Without it the read serves the
    # window as the edit left it.
    def read(look, evict=True, n=1):
        with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, background="deferred") as e:
            w = e.new_window(policy=orbit.Policy("default").replace(attention_weight=0, defer_repairs=False))
            w.admit(e.add_text("You are a helper who reads stories and answers questions about them."))
            x = w.admit(e.add_text("Tom saw a big red ball in the park.")).added[0]
            w.admit(e.add_text("The zebra Quixby hid the golden key under the old mill."))
            for i in range(6):
                w.admit(e.add_text(f"Story {i}: once upon a time there was a little dog who liked to run and play."))
            if evict:
                w.evict(x)  # the survivors' KV is stale; the budget keeps them
            w.policy = w.policy.replace(read_attention_weight=look)
            stale = sum(i.context_changed for i in w.instances)
            before = w.stats
            q = e.tokenize("Where did the zebra Quixby hide the golden key?")
            g = w.generate(q, max_tokens=1) if n == 1 else w.generate_n(q, n, max_tokens=1)[0]
            after = w.stats
            return (len(q), after.query_forward_tokens - before.query_forward_tokens, g.prompt_forward_tokens,
                    after.critical_forward_tokens - before.critical_forward_tokens, stale,
                    sum(i.context_changed for i in w.instances))

    n, queries, prompt, repaired, stale, left = read(0)
    assert stale > 0 and queries == prompt == n and repaired == 0 and left == stale  # nothing re-formed
    n, queries, prompt, repaired, stale, left = read(1e6)
    assert queries == prompt == 2 * n  # the look, then the answer's forward over the repaired window
    assert repaired > 0 and left < stale  # the read's plan re-formed what its query looks at
    n, queries, prompt, repaired, stale, left = read(1e6, evict=False)
    assert stale == left == 0 and repaired == 0 and queries == prompt == n  # nothing to repair: the look is free
    n, queries, prompt, repaired, stale, left = read(1e6, n=2)
    assert prompt == 2 * n and repaired > 0 and left < stale  # generate_n's look, then its first answer's forward


def test_a_look_whose_plan_re_serves_only_the_kv_it_held_is_the_answers_forward(orbit, stories260k_path):
    # A read's plan can re-serve a kept instance with the very KV it holds: here, at the last read, a stored
    # patch formed on the instance's exact context, the one it was served from, priced anew below what its
    # keep carried. Nothing the query's first forward read changed, so that forward is the answer's: the query
    # is forwarded once (it was forwarded twice, with no repair, before). The edits are one found by a
    # random search over edit sequences; every read's count is checked against what changed.
    texts = {0: "You are a helper who reads stories and answers questions about them.",
             1: "Tom saw a big red ball in the park. He ran to get it.",
             2: "Once upon a time, there was a little cat. The cat liked to play with a ball in the sun.",
             7: "Thought: I should look at the page again to find the answer.",
             10: "Mia had a red kite. The wind took it high above the trees."}
    ops = [("admit", 0, None), ("admit", 7, 1), ("read",), ("idle",), ("admit", 1, 1), ("read",), ("idle",),
           ("evict", 1), ("recall", 1), ("turn",), ("admit", 10, 1), ("evict", 3), ("idle",), ("admit", 2, 1),
           ("read",), ("evict", 2), ("admit", 1, 1), ("evict", 3), ("read",), ("read",), ("admit", 7, 3), ("read",)]
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, background="deferred") as e:
        chunks = {k: e.add_text(t) for k, t in texts.items()}
        w = e.new_window(policy=orbit.Policy("default").replace(read_attention_weight=1))
        q = e.tokenize("Where did the cat play?")
        reads = []
        for op in ops:
            if op[0] == "admit":
                at = op[2] if op[2] is not None and op[2] < len(w.instances) else None
                w.admit(chunks[op[1]], before=None if at is None else w.instances[at].id)
            elif op[0] == "evict":
                w.evict(w.instances[op[1]].id)
            elif op[0] == "recall":
                w.recall(chunks[op[1]])
            elif op[0] == "turn":
                w.add_turn(e.tokenize("Why", bos=False))
            elif op[0] == "idle":
                w.idle()
                e.run_background()
            else:
                held = [(i.id, i.formed_by, i.patch_key, i.exact, i.match) for i in w.instances]
                before = w.stats
                g = w.generate(q, max_tokens=1)
                after = w.stats
                same = held == [(i.id, i.formed_by, i.patch_key, i.exact, i.match) for i in w.instances]
                repaired = after.critical_forward_tokens - before.critical_forward_tokens
                reads.append((after.query_forward_tokens - before.query_forward_tokens, g.prompt_forward_tokens,
                              repaired, same))
        for queries, prompt, repaired, same in reads:
            assert queries == prompt and (queries <= len(q) or repaired > 0 or not same)
        queries, prompt, repaired, same = reads[-1]
        assert same and repaired == 0 and queries == len(q)


def evict_plan(e):
    """A window of three chunks under a budget that keeps every survivor, and the plan evicting its second:
    its steps carry the fidelity model's predicted KL and the cost model's estimated seconds."""
    w = e.new_window()
    w.admit(e.add_text("You are a helper who reads stories and answers questions about them."))
    second = w.admit(e.add_text("Tom saw a big red ball in the park. He ran to get it.")).added[0]
    w.admit(e.add_text("Once upon a time, there was a little cat. The cat liked to play with a ball in the sun."))
    w.policy = "patch:16:kl=1"
    return lambda: w.plan_evict(second)


def test_calibrate_fidelity_fits_the_fidelity_model_alone(orbit, stories260k_path):
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, background="deferred") as e:
        plan = evict_plan(e)
        before = plan()
        assert before.predicted_kl > 0
        report = e.calibrate_fidelity()
        assert isinstance(report, orbit.CalibrationReport)
        assert report.fidelity_samples >= 7 and report.fidelity_model and "(default)" not in report.fidelity_model
        assert report.samples == 0 and report.cost_model == ""  # nothing timed
        after = plan()
        assert after.predicted_kl != before.predicted_kl  # the fidelity model moved ...
        assert after.estimated_seconds == before.estimated_seconds  # ... the cost model did not
        assert [s.estimated_seconds for s in after] == [s.estimated_seconds for s in before]
    # Seeded, nothing timed: another engine of the model fits the same model.
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, background="deferred") as other:
        assert other.calibrate_fidelity().fidelity_model == report.fidelity_model
    with pytest.raises(orbit.OrbitError, match="closed"):
        other.calibrate_fidelity()


def test_calibrate_fits_the_cost_model_too(orbit, stories260k_path):
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, background="deferred") as e:
        plan = evict_plan(e)
        before = plan()
        report = e.calibrate()
        assert report.samples > 0 and report.cost_model and report.seconds > 0
        assert report.fidelity_samples >= 7 and "(default)" not in report.fidelity_model
        after = plan()
        assert after.estimated_seconds != before.estimated_seconds
        assert after.predicted_kl != before.predicted_kl
