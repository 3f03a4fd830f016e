"""Threads against one Engine from Python: the first calls from two threads must not deadlock, and
Engine.close() racing window operations must stop them with OrbitError, never crash the process.

Each scenario runs in a child interpreter with a timeout, so a hang or a crash fails the test instead of
hanging or killing pytest. Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python.
"""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

TIMEOUT = 30


def run_child(orbit, model, body):
    """Runs `body` in a fresh interpreter that imports orbit from the same place; returns the result. A child
    still running after TIMEOUT seconds gets SIGABRT, which faulthandler answers with every thread's Python
    stack: the failure shows where it hung (or crawled, on a loaded machine)."""
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(orbit.__file__)))
    script = textwrap.dedent(
        """
        import faulthandler, random, sys, threading, time
        faulthandler.enable()
        sys.path.insert(0, {pkg!r})
        import orbit
        M = {model!r}
        """
    ).format(pkg=package_dir, model=str(model)) + textwrap.dedent(body)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = child.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGABRT)
        try:
            stdout, stderr = child.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            stdout, stderr = child.communicate()
        pytest.fail(f"child still running after {TIMEOUT} s (deadlock?); its output and stacks:\n{stdout}\n{stderr}")
    return subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)


def check_ok(result):
    assert result.returncode == 0, f"child exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    assert "DONE" in result.stdout, result.stdout + result.stderr


def run_ok(orbit, model, body):
    """run_child(orbit, model, body), checked to have exited 0 after printing DONE (check_ok); its result."""
    result = run_child(orbit, model, body)
    check_ok(result)
    return result


@pytest.fixture
def child(orbit, stories260k_path):
    """run_ok on the bundled stories260K: child(body) is the checked result of running `body` in a child."""
    return lambda body: run_ok(orbit, stories260k_path, body)


def test_first_calls_from_two_threads_do_not_deadlock(child):
    # Several fresh interpreters: the deadlock needed both threads to reach numpy's first use together.
    for _ in range(5):
        child("""
            e = orbit.Engine(M)
            ts = [threading.Thread(target=lambda: e.add_tokens([1, 2, 3])) for _ in range(2)]
            for t in ts: t.start()
            for t in ts: t.join()
            ws = [e.new_window() for _ in range(2)]
            ts = [threading.Thread(target=lambda w=w: w.add_turn([4, 5, 6])) for w in ws]
            for t in ts: t.start()
            for t in ts: t.join()
            print("DONE")
        """)


def test_close_racing_window_operations_raises_orbit_error(child, tmp_path):
    # The reproduction: two threads register and admit chunks on their own windows (sliding past 400
    # tokens) while the main thread closes the engine. Every worker must end with OrbitError
    # "engine is closed"; the child must exit normally (a crash here was SIGSEGV in the store).
    for run in range(5):
        child(f"""
            e = orbit.Engine(M, store_dir={str(tmp_path / f"store{run}")!r})
            outcome = {{}}
            def work(name, seed):
                rng = random.Random(seed)
                try:
                    w = e.new_window()
                    while True:
                        c = e.add_tokens([rng.randrange(1, 512) for _ in range(20)])
                        w.admit(c)
                        if w.tokens > 400:
                            w.slide(1)
                except orbit.OrbitError as err:
                    outcome[name] = str(err)
            ts = [threading.Thread(target=work, args=(n, s)) for n, s in (("a", 1), ("b", 2))]
            for t in ts: t.start()
            time.sleep(0.3)
            e.close()
            for t in ts: t.join()
            # Each call names itself: the window's (Window.admit: engine is closed) and the engine's (add_tokens).
            # Any call of the loop can be the first to meet the close: on a loaded machine a thread may even
            # start after it (new_window), or meet it reading w.tokens.
            assert sorted(outcome) == ["a", "b"], outcome
            calls = ("add_tokens", "new_window", "Window.admit", "Window.slide", "Window.tokens")
            assert all(m in [c + ": engine is closed" for c in calls] for m in outcome.values()), outcome
            print("DONE")
        """)


def test_calls_from_generate_callbacks_raise_or_run_never_wait_for_themselves(child):
    # generate's on_text runs on the decoding thread, inside the window's call and the engine's operation: a
    # call that would wait for either (the engine's close, its own window, orbit.generate_many over it, which
    # waited forever) raises OrbitError naming why, raised by generate once the decode stopped; calls on other
    # windows and the engine run. A stream's loop runs on another thread than its decode: closing the engine
    # or the window there returns (the decode stops at its next token, 'cancelled', before the engine closes).
    child("""
        e = orbit.Engine(M, pool_bytes=16 << 20)
        def story():
            w = e.new_window()
            w.add_turn(e.tokenize("Once upon a time, there was a little girl.", True))
            return w
        w, other, q = story(), story(), e.tokenize(" She", False)
        refused = {
            "engine.close": (e.close, "close(): called from inside an operation of this engine"),
            "window.close": (w.close, "must not use its window"),
            "window.fork": (w.fork, "must not use its window"),
            "generate_many": (lambda: orbit.generate_many([(other, q), (w, q)]), "must not use its window"),
        }
        for name, (call, message) in refused.items():
            try:
                w.generate(q, max_tokens=8, on_text=lambda piece: call())
                raise AssertionError(name + " did not raise")
            except orbit.OrbitError as err:
                assert message in str(err), (name, str(err))
        ran = []
        def others(piece):
            if not ran:
                ran.append(orbit.generate_many([(other, q)])[0].stop_reason)
                ran.append(other.fork().close())
                ran.append(e.new_window().close())
                ran.append(e.run_background())
        assert w.generate(q, max_tokens=8, on_text=others).stop_reason == "max_tokens" and len(ran) == 4
        for piece in w.stream(q, max_tokens=400):
            w.close()
            break
        assert w.closed
        for piece in other.stream(q, max_tokens=400):
            e.close()
            break
        assert e.closed
        print("DONE")
    """)


def test_close_refused_inside_an_engine_operation_stops_nothing(child):
    # calibrate_fidelity's progress runs inside the engine's operation: a close() there is refused before any
    # decode is stopped, so another thread's answers run to their end and the engine stays open and usable
    # (the refusal once cancelled them and left the engine reading closed for good).
    child("""
        import threading
        e = orbit.Engine(M, pool_bytes=16 << 20)
        w = e.new_window()
        w.add_turn([1, 2, 3])
        ends, refusals, stop = [], [], threading.Event()
        def decode():
            while not stop.is_set():
                ends.append(w.generate([1], max_tokens=200, ignore_eos=True).stop_reason)
        t = threading.Thread(target=decode)
        t.start()
        def progress(done, total):
            if not refusals:
                try:
                    e.close()
                except orbit.OrbitError as err:
                    refusals.append(str(err))
        e.calibrate_fidelity(progress=progress)
        stop.set()
        t.join()
        assert len(refusals) == 1 and "called from inside an operation of this engine" in refusals[0], refusals
        assert ends and set(ends) == {"max_tokens"}, ends
        assert not e.closed and e.new_window().generate([1], max_tokens=3).stop_reason == "max_tokens"
        e.close()
        assert e.closed
        print("DONE")
    """)


def test_window_refuses_reads_after_engine_close(orbit, stories260k_path):
    e = orbit.Engine(stories260k_path)
    w = e.new_window()
    w.admit(e.add_tokens([1, 2, 3, 4]))
    instance = w.instances[0].id
    e.close()
    for read in (lambda: w.instances, lambda: w.kv(instance), lambda: w.tokens, lambda: w.logits([1]),
                 lambda: w.policy, lambda: w.label, lambda: w.max_bytes, lambda: w.version):
        with pytest.raises(orbit.OrbitError, match="engine is closed"):
            read()
    # stats answers still, as documented: the counters as close left them, the closed store's part empty.
    assert e.stats.chunks == 1 and e.stats.windows == 1 and e.stats.store.tiers == [] and e.stats.store.misses == 0


def test_ctrl_c_stops_replay_between_steps(child):
    # Without a progress callback the replay ran to the end (tens of seconds here) before the
    # KeyboardInterrupt surfaced; signals are now checked before every step. The child installs Python's
    # SIGINT handler itself: a suite started in the background by a non-interactive shell (`script &`, as
    # `nohup ./scripts/test.sh &` does) hands its children SIGINT ignored, Python then keeps it ignored, and the
    # replay ran to its end past the timeout (the failures seen beside a loaded build).
    # The progress callback counts the steps begun without running Python code (print into a StringIO, both C),
    # so only the replay's own check can deliver the signal: a Python callback would run the handler itself.
    # The signal goes out once 3 steps have begun, not at a fixed time (a loaded machine can take longer than
    # any fixed delay to open the engines, and the signal then came before the first step), and the check is
    # that the replay stopped before its end, whatever the machine's speed.
    result = child("""
        import functools, io, os, signal
        signal.signal(signal.SIGINT, signal.default_int_handler)
        trace = orbit.make_trace("web", steps=40)
        log = io.StringIO()
        def send_sigint():
            while log.getvalue().count("\\n") < 3:
                time.sleep(0.005)
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=send_sigint, daemon=True).start()
        try:
            orbit.replay(trace, M, progress=functools.partial(print, file=log))
            outcome = "FINISHED"
        except KeyboardInterrupt:
            outcome = "INTERRUPTED"
        steps = log.getvalue().splitlines()
        policies, per_policy = int(steps[-1].split()[1]), int(steps[-1].split()[3])
        print(outcome, len(steps), policies * per_policy)
        print("DONE")
    """)
    words = result.stdout.split()
    assert words[0] == "INTERRUPTED", result.stdout
    begun, total = int(words[1]), int(words[2])
    assert 3 <= begun < total, f"the replay began {begun} of its {total} steps before the KeyboardInterrupt"


CTRL_C_DURING_DECODE = """
    import os, signal
    e = orbit.Engine(M)
    ws = [e.new_window() for _ in range(64)]
    calls = {
        "generate_n": lambda: ws[0].generate_n([1], 128, max_tokens=200),
        "generate_many": lambda: orbit.generate_many([(w, [1], {"max_tokens": 200}) for w in ws] * 2),
    }
    inside = []
    returned = threading.Event()
    def send_sigint():
        # Again every 0.1 s until a handler ran inside the call or the call returned: on a loaded machine the
        # main thread can reach the call after a signal, whose handler then runs before it.
        while not returned.is_set() and True not in inside:
            os.kill(os.getpid(), signal.SIGINT)
            returned.wait(0.1)
    def handler(signum, frame):
        # Inside the decode the window is in a call on this thread, so reading it raises; outside, it answers.
        try:
            ws[0].tokens
            inside.append(False)
        except orbit.OrbitError as err:
            inside.append("in a call on this thread" in str(err))
            if RAISE:
                raise KeyboardInterrupt
    signal.signal(signal.SIGINT, handler)
    sender = threading.Thread(target=send_sigint, daemon=True)
    sender.start()
    try:
        stops = sorted({g.stop_reason for g in calls[CALL]()})
    except KeyboardInterrupt:
        stops = None
    returned.set()
    sender.join()  # no signal comes after this: the checks below are not interrupted
    print("INTERRUPTED" if stops is None else "FINISHED", True in inside, stops or "")
    # Nothing is left locked or half-done: every window answers greedily as a fresh one does.
    fresh = e.new_window().generate([1], max_tokens=8).tokens
    assert all(w.generate([1], max_tokens=8).tokens == fresh for w in ws[:3])
    print("DONE")
"""


@pytest.mark.parametrize("call", ["generate_n", "generate_many"])
@pytest.mark.parametrize("raises", [True, False])
def test_ctrl_c_stops_a_decode_at_its_next_token(child, call, raises):
    # A decode without on_text runs without the GIL; Python runs a signal's handler only when the main thread
    # runs Python code, so Ctrl-C used to surface after every branch's whole answer (27 s for generate_n of
    # 1024 x 511 tokens here), the answers then lost. The decode now delivers signals while it runs: the
    # handler runs inside the call (it sees its window busy on this thread), and one that raises
    # (KeyboardInterrupt) stops the decode at its next token and is raised by the call; one that does not
    # raise leaves the answers whole.
    result = child(f"CALL, RAISE = {call!r}, {raises!r}\n" + textwrap.dedent(CTRL_C_DURING_DECODE))
    expected = "INTERRUPTED True" if raises else "FINISHED True ['max_tokens']"
    assert expected in result.stdout, result.stdout + result.stderr


CTRL_C_DURING_SYNC = """
    import os, signal
    import numpy as np
    T = ("{% for message in messages %} <|start_story|>{{ message.role }}: {{ message.content }}{% endfor %}"
         "{% if add_generation_prompt %} <|start_story|>assistant:{% endif %}")
    # Poll at every interruption point (one per message here): a sync of these tiny messages takes
    # milliseconds, under the default 0.1 s between polls.
    assert orbit.set_signal_interval(0) == 0.1
    e = orbit.Engine(M, background="inline")
    inside = []
    def handler(signum, frame):
        # Inside the sync the window is in a call on this thread, so reading it raises; after it, it answers.
        try:
            w.tokens
            inside.append(False)
        except orbit.OrbitError as err:
            inside.append("in a call on this thread" in str(err))
            if RAISE:
                raise KeyboardInterrupt
    signal.signal(signal.SIGINT, handler)
    # Each attempt syncs new messages (40 units, one instance each) into a new window while a timer sends SIGINT
    # a few milliseconds in; one that lands after the sync runs the handler outside it, and the next attempt
    # tries again. Stored KV would make a repeated list fast, hence new text every time.
    for attempt in range(100):
        msgs = [{"role": "user", "content": f"tale {attempt} part {i}"} for i in range(40)]
        expected = len(e.tokenize_chat(msgs, False, chat_template=T))
        w = e.new_window()
        timer = threading.Timer(0.005, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        try:
            w.sync(msgs, chat_template=T)
            outcome = "FINISHED"
        except KeyboardInterrupt:
            outcome = "INTERRUPTED"
        timer.join()
        time.sleep(0.01)  # a signal sent after the sync is handled here, outside it
        if True in inside:
            break
    assert True in inside, f"no handler ran inside a sync in {attempt + 1} attempts: {inside}"
    # Interrupted: nothing of the sync was committed (0 of its units); not: every unit is there.
    print(outcome, w.tokens, expected, len(w.instances))
    # Either way the window is consistent and usable: syncing the list again gives what a fresh engine gives.
    w.sync(msgs, chat_template=T)
    ref = orbit.Engine(M, background="inline").new_window()
    ref.sync(msgs, chat_template=T)
    assert w.tokens == ref.tokens == expected
    gap = float(np.abs(w.logits([1]) - ref.logits([1])).max())
    assert gap <= 1e-5, gap
    print("DONE")
"""


@pytest.mark.parametrize("raises", [True, False])
def test_ctrl_c_stops_a_sync_between_instances(orbit, models_dir, raises):
    # Window operations run without the GIL, so Ctrl-C used to surface only after the whole operation (a long
    # prefill: all of it). On the main thread they now deliver signals at their interruption points (before
    # each instance a plan serves): a handler that raises stops the sync there, nothing committed, and the
    # sync raises it; one that does not raise runs inside the sync, which completes.
    result = run_ok(orbit, models_dir / "tinystories-656k",
                    f"RAISE = {raises!r}\n" + textwrap.dedent(CTRL_C_DURING_SYNC))
    words = result.stdout.split()
    if raises:
        assert words[:2] == ["INTERRUPTED", "0"] and words[3] == "0", result.stdout
    else:
        assert words[0] == "FINISHED" and words[1] == words[2], result.stdout


# A script's sender of SIGINT again and again: send_sigint() sends one every 0.5 ms until `stop` is set.
SEND_SIGINTS = """
    import os, signal
    stop = threading.Event()
    def send_sigint():
        while not stop.is_set():
            os.kill(os.getpid(), signal.SIGINT)
            stop.wait(0.0005)
"""


# The prelude (after SEND_SIGINTS) of the scripts that send SIGINT again and again during one call and count the
# deliveries inside it. Every interruption point polls for signals; `e` is an engine on M and `rng` a
# random.Random(SEED). The script defines `w`, the window the call runs on (the handler reads it: inside a call on
# this thread that raises), and raises_now(inside), which says from the deliveries counted so far whether the
# handler raises KeyboardInterrupt; interrupted_by_sigints(call) runs the call under the signals.
SIGINTS_DURING_A_CALL = """
    import os, signal
    assert orbit.set_signal_interval(0) == 0.1
    e = orbit.Engine(M)
    rng = random.Random(SEED)
    inside, busy = [], [False]
    def handler(signum, frame):
        # Counts the deliveries inside the call; a delivery outside it, or nested in this handler (a signal sent
        # while it runs), is not counted and returns.
        if busy[0]:
            return
        busy[0] = True
        try:
            w.tokens
            return  # outside the call
        except orbit.OrbitError as err:
            inside.append("in a call on this thread" in str(err))
        finally:
            busy[0] = False
        if raises_now(inside):
            raise KeyboardInterrupt
    signal.signal(signal.SIGINT, handler)
    def interrupted_by_sigints(call):
        # Runs call() while a thread keeps sending SIGINT (its deliveries counted afresh); True when it raised
        # KeyboardInterrupt.
        inside.clear()
        sender = threading.Thread(target=send_sigint, daemon=True)
        stop.clear()
        sender.start()
        try:
            call()
            interrupted = False
        except KeyboardInterrupt:
            interrupted = True
        stop.set()
        sender.join()
        time.sleep(0.001)  # a signal still pending is handled here, outside the call
        return interrupted
"""


def with_sigints(script, seed):
    """`script` after SEND_SIGINTS and the SIGINTS_DURING_A_CALL prelude (its rng seeded with `seed`), dedented."""
    return (f"SEED = {seed!r}\n" + textwrap.dedent(SEND_SIGINTS) + textwrap.dedent(SIGINTS_DURING_A_CALL) +
            textwrap.dedent(script))


CTRL_C_INSIDE_ONE_FORWARD = """
    import numpy as np
    # The interruption points (every one polls): before the turn's one instance and before each layer of its forward.
    def raises_now(inside):
        # At the second delivery inside the call: a call with one instance and no point inside its forward has a
        # single point, so only points inside the forward give a second delivery.
        return inside.count(True) == 2
    # Each attempt adds one new long turn (one instance, one forward: new tokens, nothing stored to reuse) to a
    # new window while SIGINT keeps coming; it stops once an attempt was interrupted.
    outcome = "FINISHED"
    for attempt in range(200):
        turn = [rng.randrange(1, 512) for _ in range(480)]
        w = e.new_window()
        if interrupted_by_sigints(lambda: w.add_turn(turn)):
            outcome = "INTERRUPTED"
            break
    # Interrupted inside the forward: nothing of the turn committed.
    print(outcome, attempt + 1, w.tokens, len(w.instances))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # The window is usable: the same turn added now gives what a fresh engine gives.
    if outcome == "INTERRUPTED":
        w.add_turn(turn)
    ref = orbit.Engine(M).new_window()
    ref.add_turn(turn)
    assert w.tokens == ref.tokens == len(turn)
    gap = float(np.abs(w.logits([1]) - ref.logits([1])).max())
    assert gap <= 1e-5, gap
    print("DONE")
"""


def test_ctrl_c_stops_one_long_forward_between_layers(child):
    # One long instance (a turn of 480 tokens) was one unit: Ctrl-C during its forward surfaced only after the
    # whole forward. Its forward now has an interruption point before each layer: a handler that raises at its
    # second delivery inside the call stops it there (the old module polled once per instance, so the second
    # delivery came after the call, which always finished), and nothing is committed.
    result = child(with_sigints(CTRL_C_INSIDE_ONE_FORWARD, seed=3))
    words = result.stdout.split()
    assert words[0] == "INTERRUPTED" and words[2:4] == ["0", "0"], result.stdout + result.stderr


CTRL_C_DURING_RUN_BACKGROUND = """
    import os, signal
    signal.signal(signal.SIGINT, signal.default_int_handler)
    assert orbit.set_signal_interval(0) == 0.1
    e = orbit.Engine(M, pool_bytes=64 << 20, page_size=4, background="deferred")
    rng = random.Random(4)
    # Each first sight behind a context queues one job (its canonical encoded, its patch formed).
    a = e.add_tokens([rng.randrange(1, 512) for _ in range(16)])
    for i in range(120):
        w = e.new_window(policy="patch:full")
        w.admit(a)
        w.admit(e.add_tokens([rng.randrange(1, 512) for _ in range(24)]))
    total = e.stats.background_pending
    def send_sigint():
        # Once 3 jobs ran (counted, not timed), SIGINT: the call must stop before its last job.
        while e.stats.background_jobs < 3:
            time.sleep(0.0005)
        os.kill(os.getpid(), signal.SIGINT)
    sender = threading.Thread(target=send_sigint, daemon=True)
    sender.start()
    try:
        e.run_background()
        outcome = "FINISHED"
    except KeyboardInterrupt:
        outcome = "INTERRUPTED"
    sender.join()
    st = e.stats
    # Nothing lost: what ran is done, the rest (and the job stopped inside its forward) is still queued.
    print(outcome, total, st.background_jobs, st.background_pending, st.background_failed)
    assert st.background_jobs + st.background_pending == total
    assert e.run_background() == st.background_pending
    st = e.stats
    assert st.background_pending == 0 and st.background_failed == 0 and st.background_jobs == total
    print("DONE")
"""


def test_ctrl_c_stops_run_background_between_jobs_and_loses_none(child):
    # run_background ran every queued job before a KeyboardInterrupt surfaced. It now delivers signals before
    # each job and before each layer of a job's forward: sent once 3 jobs ran, SIGINT stops it with jobs still
    # queued (the old module ran them all: none pending), and a later call runs them all, none failed.
    result = child(CTRL_C_DURING_RUN_BACKGROUND)
    outcome, total, ran, pending, failed = result.stdout.split()[:5]
    assert outcome == "INTERRUPTED" and int(total) > 20, result.stdout
    assert 3 <= int(ran) < int(total) and int(pending) > 0 and failed == "0", result.stdout


CTRL_C_DURING_DEFERRED_REPAIRS = """
    import os, signal
    assert orbit.set_signal_interval(0) == 0.1
    rng = random.Random(5)
    texts = [[rng.randrange(1, 512) for _ in range(40)] for _ in range(12)]
    def deferred_window(e):
        # 12 chunks, the first evicted: 11 re-prefills deferred, which generate_many runs before it decodes.
        w = e.new_window(policy="reprefill")
        for t in texts:
            w.admit(e.add_tokens(t))
        w.evict(w.instances[0].id)
        return w
    e = orbit.Engine(M, background="inline")
    w = deferred_window(e)
    deferred = sum(i.deferred for i in w.instances)
    inside = []
    def handler(signum, frame):
        # Raises at the first delivery inside the call (the window is in a call on this thread). The old module
        # polled only at the decode's tokens, after every repair had run.
        try:
            w.tokens
        except orbit.OrbitError as err:
            inside.append("in a call on this thread" in str(err))
            raise KeyboardInterrupt
    signal.signal(signal.SIGINT, handler)
    # SIGINT from before the call until it returns (SEND_SIGINTS): the first poll inside it finds a signal pending.
    sender = threading.Thread(target=send_sigint, daemon=True)
    sender.start()
    time.sleep(0.01)
    try:
        orbit.generate_many([(w, [1], {"max_tokens": 4})])
        outcome = "FINISHED"
    except KeyboardInterrupt:
        outcome = "INTERRUPTED"
    stop.set()
    sender.join()
    time.sleep(0.01)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    left = sum(i.deferred for i in w.instances)
    print(outcome, True in inside, deferred, left)
    # The window answers as one on a fresh engine after the same edits.
    ref = deferred_window(orbit.Engine(M, background="inline"))
    assert orbit.generate_many([(w, [1], {"max_tokens": 6})])[0].tokens == ref.generate([1], max_tokens=6).tokens
    print("DONE")
"""


def test_ctrl_c_stops_generate_many_in_its_deferred_repairs(child):
    # orbit.generate_many installed no InterruptScope: the repairs its windows deferred ran whole before its
    # decode took Ctrl-C. It now polls there too (before each instance, between layers), and the
    # KeyboardInterrupt, not the C++ Interrupted, is what it raises; every repair stays deferred (the old module
    # raised only after running them all: none left).
    result = child(textwrap.dedent(SEND_SIGINTS) + textwrap.dedent(CTRL_C_DURING_DEFERRED_REPAIRS))
    outcome, inside, deferred, left = result.stdout.split()[:4]
    assert outcome == "INTERRUPTED" and inside == "True", result.stdout
    assert int(deferred) >= 10 and left == deferred, result.stdout


CTRL_C_INSIDE_A_QUERY_FORWARD = """
    import numpy as np
    # Every interruption point polls. The window holds one 20-token turn and nothing deferred, so a read has no
    # point before its query's forward: the only points are before each layer of that forward (and, for
    # generate, the decode's signal polls at its tokens, after the forward).
    turn = [rng.randrange(1, 512) for _ in range(20)]
    def new_window(e):
        w = e.new_window()
        w.add_turn(turn)
        return w
    w = new_window(e)
    before = (w.tokens, [i.id for i in w.instances])
    calls = {
        "logits": lambda q: w.logits(q),
        "generate": lambda q: w.generate(q, max_tokens=4),
    }
    def raises_now(inside):
        return True in inside  # at the first delivery inside the call
    # Each attempt reads after a new 480-token query (nothing stored to reuse: one long forward) while SIGINT
    # keeps coming; it stops once an attempt was interrupted inside that forward. For generate that is an
    # attempt after which the same query forwards all its tokens again: one interrupted at a token (the
    # signal came after the forward) kept the query's KV for exact reuse, and the loop goes on.
    outcome, at_tokens = "FINISHED", 0
    for attempt in range(200):
        q = [rng.randrange(1, 512) for _ in range(480)]
        interrupted = interrupted_by_sigints(lambda: calls[CALL](q))
        assert (w.tokens, [i.id for i in w.instances]) == before
        if interrupted and CALL == "generate":
            again = w.generate(q, max_tokens=4)  # no signal comes now: runs whole
            if again.prompt_forward_tokens != len(q):
                at_tokens += 1
                continue
        if interrupted:
            outcome = "INTERRUPTED"
            break
    print(outcome, attempt + 1, at_tokens, w.tokens == before[0], len(w.instances))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # The window answers as one on a fresh engine: the read interrupted left nothing behind.
    ref = new_window(orbit.Engine(M))
    gap = float(np.abs(w.logits(q) - ref.logits(q)).max())
    assert gap <= 1e-5, gap
    g, rg = w.generate(q, max_tokens=6), ref.generate(q, max_tokens=6)
    assert g.tokens == rg.tokens, (g.tokens, rg.tokens)
    if CALL == "logits":
        assert g.prompt_forward_tokens == rg.prompt_forward_tokens == len(q)
    print("DONE")
"""


@pytest.mark.parametrize("call", ["logits", "generate"])
def test_ctrl_c_stops_a_long_query_forward_between_layers(child, call):
    # A read's query forward (Window.logits, generate's first forward: the query's 480 tokens after the
    # window) was one unit: Ctrl-C during it surfaced only after the whole forward (logits: after the call,
    # which had no point inside it and always finished; generate: at the decode's first token, the query's KV
    # then kept for exact reuse). It now has an interruption point before each layer: a handler raising at its
    # first delivery inside the call stops the forward there, the window unchanged (tokens, instances), nothing
    # of the read kept (the same query forwards all its tokens again), and later reads answer as a fresh
    # window's.
    result = child(f"CALL = {call!r}\n" + with_sigints(CTRL_C_INSIDE_A_QUERY_FORWARD, seed=6))
    words = result.stdout.split()
    assert words[0] == "INTERRUPTED" and words[3:5] == ["True", "1"], result.stdout + result.stderr


CTRL_C_INSIDE_A_MEASURING_READ = """
    # Every interruption point polls: the measuring reads' only points are before each layer of their forwards.
    def raises_now(inside):
        return inside.count(True) == 1
    docs = [e.add_tokens([rng.randrange(1, 512) for _ in range(120)]) for _ in range(2)]
    w = e.new_window(policy="blind")
    for d in docs:
        w.admit(d)
    target = w.instances[1].id
    query = [rng.randrange(1, 512) for _ in range(200)]
    reads = {"disposable": lambda: w.disposable(target, query, answer_tokens=4),
             "loss_by_instance": lambda: w.loss_by_instance(query)}
    want = {name: read() for name, read in reads.items()}
    for name, read in reads.items():
        before = (w.version, w.tokens, w.stats.query_forward_tokens, e.stats.radix_cache_tokens)
        outcome = "FINISHED"
        for attempt in range(200):
            if interrupted_by_sigints(read):
                outcome = "INTERRUPTED"
                break
            before = (w.version, w.tokens, w.stats.query_forward_tokens, e.stats.radix_cache_tokens)
        after = (w.version, w.tokens, w.stats.query_forward_tokens, e.stats.radix_cache_tokens)
        # Interrupted inside a forward: nothing counted, the window as it was.
        print(name, outcome, after == before)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    got = w.disposable(target, query, answer_tokens=4)
    assert (got.answer, got.answer_without) == (want["disposable"].answer, want["disposable"].answer_without)
    assert [l.measured_kl for l in w.loss_by_instance(query)] == [l.measured_kl for l in want["loss_by_instance"]]
    print("DONE")
"""


def test_ctrl_c_stops_disposable_and_loss_by_instance_between_layers(child):
    # disposable's greedy decodes and loss_by_instance's reference forward and per-instance reads had no
    # interruption point: Ctrl-C surfaced only after the whole call (the old module always prints FINISHED). Each
    # forward now has a point before each layer: the first delivery inside the call stops it, nothing counted.
    result = child(with_sigints(CTRL_C_INSIDE_A_MEASURING_READ, seed=4))
    lines = [line.split() for line in result.stdout.splitlines() if line.split()[:1] in (["disposable"],
                                                                                       ["loss_by_instance"])]
    assert lines == [["disposable", "INTERRUPTED", "True"], ["loss_by_instance", "INTERRUPTED", "True"]], (
        result.stdout + result.stderr)


def test_window_calls_name_themselves_when_closed(orbit, stories260k_path):
    # A closed window's call, and a window's call once its engine closed, say which call was refused.
    e = orbit.Engine(stories260k_path)
    chunk = e.add_tokens([1, 2, 3, 4])
    w = e.new_window()
    w.close()
    with pytest.raises(orbit.OrbitError, match=rf"^Window\.admit: window {w.id} is closed$"):
        w.admit(chunk)
    with pytest.raises(orbit.OrbitError, match=rf"^Window\.generate: window {w.id} is closed$"):
        w.generate([1], max_tokens=1)
    other = e.new_window()
    e.close()
    with pytest.raises(orbit.OrbitError, match=r"^Window\.logits: engine is closed$"):
        other.logits([1])
    with pytest.raises(orbit.OrbitError, match=r"^Window\.generate: engine is closed$"):
        other.generate([1], max_tokens=1)
    with pytest.raises(orbit.OrbitError, match=r"^generate_many: engine is closed$"):
        orbit.generate_many([(other, [1], {"max_tokens": 1})])

