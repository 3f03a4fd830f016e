"""Background forming from Python: Engine(background=...), Engine.run_background() and the critical-path vs
background counters of Engine.stats.

A chunk's first sight behind some context is one exact in-context prefill on the critical path; its canonical
(the chunk alone) and its patch are formed afterwards, off the critical path. Where that happens is the
engine's background mode: a worker thread ('thread'), only when run_background() is called ('deferred'), or
at the end of the apply() that queued them ('inline').
"""
import random
import time

import pytest

PAGE = 4
POOL = 8 << 20


def tokens(rng, n):
    return [rng.randrange(1, 512) for _ in range(n)]


def open_engine(orbit, path, background):
    return orbit.Engine(path, pool_bytes=POOL, page_size=PAGE, background=background)


def first_sight(orbit, engine, rng):
    """A window holding chunk a (alone: its canonical is encoded on the critical path), then chunk b behind
    it (first sight: an in-context prefill, its canonical and patch queued for the background)."""
    a = engine.add_tokens(tokens(rng, 16), label="a")
    b = engine.add_tokens(tokens(rng, 12), label="b")
    w = engine.new_window(policy="patch:full")
    w.admit(a)
    report = w.admit(b)
    return w, a, b, report


def test_background_option_takes_names_and_the_enum(orbit, stories260k_path):
    for name, mode in (("thread", orbit.BackgroundMode.thread), ("deferred", orbit.BackgroundMode.deferred),
                       ("inline", orbit.BackgroundMode.inline)):
        with open_engine(orbit, stories260k_path, name) as e:
            assert e.options.background == mode
            assert str(e.options.background) == name
        with open_engine(orbit, stories260k_path, mode) as e:
            assert e.options.background == mode
    with orbit.Engine(stories260k_path, pool_bytes=POOL) as e:
        assert e.options.background == orbit.BackgroundMode.thread  # the default
        assert "background='thread'" in repr(e.options)


def test_a_bad_background_option_is_a_clear_error(orbit, stories260k_path):
    with pytest.raises(ValueError, match=r"background = 'later'.*'thread', 'deferred' or 'inline'"):
        open_engine(orbit, stories260k_path, "later")
    with pytest.raises(TypeError, match=r"background: expected a str or BackgroundMode, got int"):
        open_engine(orbit, stories260k_path, 1)
    # An int that is no member is refused as the enum is made, before any engine sees it.
    with pytest.raises(ValueError, match=r"BackgroundMode\(value\): 7 is not a BackgroundMode \(members: thread=0"):
        open_engine(orbit, stories260k_path, orbit.BackgroundMode(7))


def test_deferred_work_waits_for_run_background_and_the_totals_add_up(orbit, stories260k_path):
    rng = random.Random(5)
    with open_engine(orbit, stories260k_path, "deferred") as e:
        w, a, b, report = first_sight(orbit, e, rng)
        assert report.forward_tokens == b.length  # the in-context prefill only
        assert report.patches_formed == 1
        st = e.stats
        assert st.background_pending == 1
        assert st.background_jobs == 0
        assert st.patches_formed == 0
        assert st.background_forward_tokens == 0
        assert st.background_seconds == 0
        # a's canonical (alone, on the critical path) and b's prefill in context
        assert st.critical_forward_tokens == a.length + b.length
        assert st.forward_tokens == st.critical_forward_tokens
        assert st.critical_seconds > 0

        # More operations that do not need b's patch leave the job queued.
        w.add_turn(tokens(rng, 3))
        assert e.stats.background_pending == 1

        assert e.run_background() == 1
        st = e.stats
        assert st.background_pending == 0
        assert st.background_jobs == 1
        assert st.patches_formed == 1
        assert st.background_failed == 0 and st.background_error == ""
        assert st.background_forward_tokens == b.length  # b's canonical, encoded in the background
        assert st.background_seconds > 0
        assert st.forward_tokens == pytest.approx(st.critical_forward_tokens + st.background_forward_tokens)
        assert e.run_background() == 0  # nothing left

        # The patch is stored now: b behind a again costs no forward.
        v = e.new_window(policy="patch:full")
        v.admit(a)
        before = e.stats.critical_forward_tokens
        hit = v.admit(b)
        assert hit.patch_hits == 1 and hit.forward_tokens == 0
        assert e.stats.critical_forward_tokens == before


def test_run_background_honours_max_seconds(orbit, stories260k_path):
    rng = random.Random(6)
    with open_engine(orbit, stories260k_path, "deferred") as e:
        w, _, _, _ = first_sight(orbit, e, rng)
        w.admit(e.add_tokens(tokens(rng, 8), label="c"))  # a second first sight: two jobs queued
        assert e.stats.background_pending == 2
        # The time budget is checked after each job: with none left, one job runs and the other waits.
        assert e.run_background(max_seconds=0) == 1
        assert e.stats.background_pending == 1 and e.stats.background_jobs == 1
        assert e.run_background(max_seconds=60) == 1
        assert e.stats.background_pending == 0 and e.stats.background_jobs == 2
        with pytest.raises(orbit.OrbitError, match="max_seconds"):
            e.run_background(-1)


def test_inline_forms_within_the_apply_and_thread_drains_on_run_background(orbit, stories260k_path):
    rng = random.Random(7)
    with open_engine(orbit, stories260k_path, "inline") as e:
        _, _, b, _ = first_sight(orbit, e, rng)
        st = e.stats
        assert st.background_pending == 0 and st.background_jobs == 1 and st.patches_formed == 1
        assert st.background_forward_tokens == b.length
        assert e.run_background() == 0
    with open_engine(orbit, stories260k_path, "thread") as e:
        _, _, b, _ = first_sight(orbit, e, rng)
        assert e.run_background() >= 0  # waits for the worker to drain the queue
        st = e.stats
        assert st.background_pending == 0 and st.background_jobs == 1
        assert st.background_forward_tokens == b.length
        assert st.forward_tokens == pytest.approx(st.critical_forward_tokens + st.background_forward_tokens)


def test_thread_run_background_waits_for_jobs_without_keys(orbit, stories260k_path):
    """A live turn's sensitivity is measured by a job that stores nothing (no key): run_background() under
    background='thread' waited only for the keys of the jobs the worker held, and returned while it ran (the
    stats read after it changed in 31 of 40 trials). It waits for every job taken now; and an operation's
    patches_formed counts patch formations only (the measure is a background job, no patch)."""
    rng = random.Random(2)
    with open_engine(orbit, stories260k_path, "thread") as e:
        chunk = e.add_tokens(tokens(rng, 20))
        for _ in range(8):
            w = e.new_window()
            w.admit(chunk)
            report = w.add_turn(tokens(rng, 400))  # a live turn after position 0: measured in the background
            assert report.patches_formed == 0
            e.run_background()
            after = (e.stats.background_jobs, e.stats.background_forward_tokens, e.stats.background_pending)
            time.sleep(0.05)
            later = (e.stats.background_jobs, e.stats.background_forward_tokens, e.stats.background_pending)
            assert after == later, (after, later)
            w.close()


def test_a_read_without_room_for_its_deferred_repairs_raises_capacity_error(orbit, stories260k_path):
    """The repairs a read runs first, refused for want of pool pages, raise CapacityError (status
    'out_of_capacity'), as sync and admit do for the same room; the window is unchanged. It was a plain OrbitError,
    which a caller freeing room on CapacityError took for a failure."""
    rng = random.Random(6)
    e = orbit.Engine(str(stories260k_path), pool_bytes=300_000, background="deferred")
    try:
        chunks = [e.add_tokens([rng.randrange(1, 500) for _ in range(rng.randrange(20, 90))]) for _ in range(8)]
        w = e.new_window()
        for c in chunks[:5]:
            w.admit(c)
        e.run_background()  # the canonicals stored: the new first chunk's repair reads its canonical
        f = w.fork()
        f.evict(f.instances[0].id)
        version = f.version
        with pytest.raises(orbit.CapacityError, match="repairs earlier edits deferred could not run"):
            f.generate([3, 4], max_tokens=2)
        assert f.version == version
    finally:
        e.close()


def test_run_background_after_close_raises(orbit, stories260k_path):
    e = open_engine(orbit, stories260k_path, "deferred")
    e.close()
    with pytest.raises(orbit.OrbitError, match="closed"):
        e.run_background()


def test_an_answer_sent_back_as_a_turn_has_its_sensitivity_measured(orbit, stories260k_path):
    # The answer's rows come from the read that generated it (exact reuse, no prefill): its sensitivity is
    # measured in the background from them, as a prefilled turn's is, so a later plan that keeps or re-forms
    # it over a changed context prices it by its own measure.
    rng = random.Random(3)
    with open_engine(orbit, stories260k_path, "deferred") as engine:
        w = engine.new_window()  # a KL budget, patches formed in the background
        w.add_turn(tokens(rng, 12))
        query = tokens(rng, 3)
        answer = w.generate(query, max_tokens=6)
        plan = w.plan_add_turn(query + list(answer.tokens))
        step = plan.steps[-1]
        assert step.action == orbit.StepAction.load_conditioned and step.forward_tokens == 0
        assert step.measure_sensitivity and step.background_tokens == len(query) + len(answer.tokens)
        w.apply(plan)
        engine.run_background()
        turn = w.instances[-1].id
        later = w.plan_admit(engine.add_tokens(tokens(rng, 10)), before=turn)
        turn_step = next(s for s in later.steps if s.instance == turn)
        assert turn_step.sensitivity > 0 and not turn_step.measure_sensitivity


def test_close_finishes_queued_work_for_the_store_unless_finish_seconds_bounds_it(orbit, stories260k_path, tmp_path):
    """close() forms the queued patches for the store directory by default; close(finish_seconds=0) drops them,
    so a second engine on the directory forwards the chunk again."""
    def admit_b_behind_a(store, seed):
        e = orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, background="deferred", store_dir=store)
        w, a, b, report = first_sight(orbit, e, random.Random(seed))
        assert e.stats.background_pending == 1
        return e, w

    def patch_hits(store, seed):
        with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, background="deferred",
                          store_dir=store) as e:
            rng = random.Random(seed)
            a = e.add_tokens(tokens(rng, 16))
            b = e.add_tokens(tokens(rng, 12))
            v = e.new_window(policy="patch:full:noreuse")  # no exact reuse of the KV the first engine stored
            v.admit(a)
            return v.admit(b).patch_hits

    for finish_seconds, hits in ((None, 1), (0, 0), (30.0, 1)):
        store = str(tmp_path / f"store-{finish_seconds}")
        e, w = admit_b_behind_a(store, 8)
        e.close(finish_seconds=finish_seconds)
        assert e.stats.patches_formed == hits
        assert patch_hits(store, 8) == hits

    e, w = admit_b_behind_a(str(tmp_path / "bad"), 8)
    for bad in (-1.0, float("nan")):
        with pytest.raises(orbit.OrbitError, match=r"finish_seconds = -?nan|finish_seconds = -1"):
            e.close(finish_seconds=bad)
        assert not e.closed
    for wrong in ("soon", True):  # a bool is no number of seconds
        with pytest.raises(TypeError, match=r"close: finish_seconds: expected float"):
            e.close(finish_seconds=wrong)
    assert not e.closed
    e.close()
