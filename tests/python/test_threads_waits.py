"""Native work a Python thread leaves waiting or running: a call on Python's main thread that waits for another
thread's call on its window takes Ctrl-C while it waits (py_window.h's lock_unless), and the interpreter exits
cleanly with a decode or run_background left on a daemon thread (the engines still open are closed at exit,
orbit/__init__.py). Each scenario runs in a child interpreter (test_threads.py's run_child), so a hang or a crash
fails the test instead of hanging or killing pytest."""
import textwrap

import pytest
from test_threads import check_ok, run_child, run_ok


@pytest.fixture
def child(orbit, stories260k_path):
    """run_ok on the bundled stories260K: child(body) is the checked result of running `body` in a child."""
    return lambda body: run_ok(orbit, stories260k_path, body)


CTRL_C_WAITING_FOR_THE_WINDOW = """
    import os, signal
    e = orbit.Engine(M)
    w = e.new_window()
    w.add_turn([1, 2, 3])
    holding, release = threading.Event(), threading.Event()
    def hold(piece):  # the holder's decode, on another thread, paused until the end
        holding.set()
        release.wait(120)
        return False
    holder = threading.Thread(target=lambda: w.generate([4], max_tokens=400, on_text=hold))
    holder.start()
    assert holding.wait(60)
    armed = [False]
    def handler(signum, frame):  # raises only inside the try below: a signal outside it is dropped
        if armed[0]:
            raise KeyboardInterrupt
    signal.signal(signal.SIGINT, handler)
    calls = {"generate": lambda: w.generate([5], max_tokens=4), "add_turn": lambda: w.add_turn([6]),
             "logits": lambda: w.logits([5]), "generate_many": lambda: orbit.generate_many([(w, [5])])}
    for name, call in calls.items():
        stop = threading.Event()
        def send():  # every 0.1 s until the call returned: one sent before the call began is dropped
            while not stop.is_set():
                os.kill(os.getpid(), signal.SIGINT)
                stop.wait(0.1)
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            armed[0] = True
            call()
            outcome = "FINISHED"
        except KeyboardInterrupt:
            outcome = "INTERRUPTED"
        armed[0] = False
        stop.set()
        sender.join()
        print(name, outcome, "held" if holder.is_alive() else "free")
    release.set()
    holder.join()
    assert w.generate([5], max_tokens=4).stop_reason == "max_tokens"  # nothing left locked
    print("DONE")
"""


def test_ctrl_c_stops_a_call_waiting_for_its_window(child):
    # A call on the main thread waiting for another thread's call on its window took a plain lock: Ctrl-C
    # surfaced only once the other call ended (here: never, until the holder is let go). The wait now runs the
    # signal handlers, and one that raises ends it, the window still held by the other thread.
    result = child(CTRL_C_WAITING_FOR_THE_WINDOW)
    for name in ("generate", "add_turn", "logits", "generate_many"):
        assert f"{name} INTERRUPTED held" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("left", ["stream", "run_background", "generate"])
def test_the_interpreter_exits_cleanly_with_native_work_left_on_a_daemon_thread(orbit, stories260k_path, left):
    # A Window.stream read in part (its decode runs on a daemon thread), run_background or a generate on a daemon
    # thread, and the script ends without close(): the interpreter tore the threads down inside orbit's C++
    # frames (std::terminate: exit 134) or the background queue's signal poll took a finalized interpreter's GIL
    # (exit 139). The engines still open are now closed at exit first, and the process exits 0.
    body = {
        "stream": """
            it = iter(w.stream([5, 6], max_tokens=400))
            print("piece", repr(next(it)), flush=True)
        """,
        "run_background": """
            for k in range(6):
                v = e.new_window()
                for r in random.Random(k).sample(refs, 10):
                    v.admit(r)
                v.reorder(list(reversed([x.id for x in v.instances])))
            threading.Thread(target=e.run_background, daemon=True).start()
        """,
        "generate": """
            started = threading.Event()
            threading.Thread(target=lambda: w.generate([5], max_tokens=400, on_text=lambda p: started.set() or True),
                             daemon=True).start()
            assert started.wait(60)
        """,
    }[left]
    setup = """
        e = orbit.Engine(M, threads=1, background="deferred")
        rng = random.Random(7)
        refs = [e.add_tokens([rng.randrange(1, 512) for _ in range(30)]) for i in range(40)]
        w = e.new_window()
        w.add_turn([1, 2, 3, 4])
    """
    result = run_child(orbit, stories260k_path, textwrap.dedent(setup) + textwrap.dedent(body) + 'print("DONE")\n')
    check_ok(result)
