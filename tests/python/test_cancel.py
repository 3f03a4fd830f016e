"""orbit.CancelToken on the bundled stories260K: a decode stopped natively from another thread. generate,
generate_n and generate_many (a token per request or for the whole call) end with stop_reason 'cancelled' well
before their end; a token cancelled before the call answers at once without decoding; leaving a Window.stream
loop stops the decode at its next token, not its next piece; Window.close() in a stream's loop stops the decode
instead of waiting for it; a stream's cancel= is the parent of its own token; Window.closed is read without the
window's lock. Engine.close() stops the decodes of all its windows at their next token, waking the streams that
wait for their reader, and refuses the decodes asked for while it waits.

stories260K stops at its position limit (about 500 tokens), and decodes that in well under a second, so no
test lets a decode run before its token is cancelled: a decode is held in on_text, or its call waits for a window
another call holds (paused in on_text) until the token is cancelled. A cancel may then land before the call
starts or during its decode, and either ends 'cancelled' (nothing here depends on how fast anything runs)."""
import contextlib
import threading

import pytest
from conftest import STORY  # the `engine` and `story` fixtures are conftest's

pytestmark = pytest.mark.xdist_group("test_cancel")

LONG = 100000  # max_tokens (with ignore_eos): the position limit (about 500 tokens) ends an uncancelled run


@pytest.fixture
def story_max_tokens():
    """The `story` fixture's answer is the uncancelled whole answer."""
    return LONG


@pytest.fixture
def story_ignore_eos():
    return True


def in_thread(call):
    """Runs call() on a thread; returns (started, result): started is set right before the call, result() joins
    and returns its value (or raises its exception)."""
    started = threading.Event()
    out = {}

    def run():
        started.set()
        try:
            out["value"] = call()
        except BaseException as e:  # noqa: BLE001 -- raised by result()
            out["error"] = e

    thread = threading.Thread(target=run)
    thread.start()

    def result():
        thread.join(60)
        assert not thread.is_alive(), "the decode was not cancelled"
        if "error" in out:
            raise out["error"]
        return out["value"]

    return started, result


@contextlib.contextmanager
def held(window, query):
    """Holds `window` for the block: a generate on another thread, paused in its on_text (it ends 'cancelled'
    at the block's end), so a call on the window made in the block waits until then."""
    holding, release = threading.Event(), threading.Event()

    def hold(piece):
        holding.set()
        assert release.wait(60)
        return False

    _, result = in_thread(lambda: window.generate(query, max_tokens=LONG, ignore_eos=True, on_text=hold))
    assert holding.wait(60)
    try:
        yield
    finally:
        release.set()
        assert result().stop_reason == "cancelled"


def assert_cancelled_early(g, plain):
    assert g.stop_reason == "cancelled"
    assert len(g.tokens) < len(plain.tokens) // 4, (len(g.tokens), len(plain.tokens))
    assert list(g.tokens) == list(plain.tokens[:len(g.tokens)])


def test_the_token(orbit):
    token = orbit.CancelToken()
    assert not token.cancelled and "cancelled=False" in repr(token)
    child = orbit.CancelToken(token)
    child.cancel()
    assert child.cancelled and not token.cancelled  # a child leaves its parent alone
    other = orbit.CancelToken(token)
    token.cancel()
    token.cancel()  # idempotent
    assert token.cancelled and other.cancelled  # a parent's cancel reaches its children
    with pytest.raises(TypeError, match="CancelToken: parent must be an orbit.CancelToken or None, got int"):
        orbit.CancelToken(3)


def test_generate_cancelled_from_another_thread(orbit, story):
    window, query, plain = story
    assert plain.stop_reason == "position_limit" and len(plain.tokens) > 400
    token = orbit.CancelToken()
    first_piece = threading.Event()
    go_on = threading.Event()

    def on_text(piece):  # holds the decode at its first piece, then lets it go on (never asking it to stop)
        first_piece.set()
        assert go_on.wait(60)
        return True

    _, result = in_thread(lambda: window.generate(query, max_tokens=LONG, ignore_eos=True, on_text=on_text, cancel=token))
    assert first_piece.wait(60)
    token.cancel()  # from this thread, while the decode runs
    go_on.set()
    g = result()
    assert_cancelled_early(g, plain)
    assert len(g.tokens) <= 3  # the next token's check stopped it
    # Without a callback at all: a plain generate stops too.
    token = orbit.CancelToken()
    with held(window, query):
        started, result = in_thread(lambda: window.generate(query, max_tokens=LONG, ignore_eos=True, cancel=token))
        assert started.wait(60)
        token.cancel()
    assert_cancelled_early(result(), plain)
    assert window.generate(query, max_tokens=LONG, ignore_eos=True).tokens == plain.tokens  # the window answers as before


def test_generate_n_cancelled_from_another_thread(orbit, story):
    window, query, plain = story
    token = orbit.CancelToken()
    with held(window, query):
        started, result = in_thread(lambda: window.generate_n(query, 3, max_tokens=LONG, ignore_eos=True, cancel=token))
        assert started.wait(60)
        token.cancel()
    answers = result()
    assert len(answers) == 3
    for g in answers:
        assert_cancelled_early(g, plain)
    with pytest.raises(TypeError, match="generate_n: cancel must be an orbit.CancelToken or None, got str"):
        window.generate_n(query, 2, cancel="stop")


def test_generate_many_cancelled_from_another_thread(orbit, engine, story):
    window, query, plain = story
    other = engine.new_window()
    other.add_turn(engine.tokenize(STORY, True))
    # A token for the whole call stops every request.
    token = orbit.CancelToken()
    requests = [(window, query, {"max_tokens": LONG, "ignore_eos": True}), (other, query, {"max_tokens": LONG, "ignore_eos": True})]
    with held(window, query):
        started, result = in_thread(lambda: orbit.generate_many(requests, cancel=token))
        assert started.wait(60)
        token.cancel()
    for g in result():
        assert_cancelled_early(g, plain)
    # A request's own token stops that request alone: the other decodes to its end.
    token = orbit.CancelToken()
    requests = [(window, query, {"max_tokens": LONG, "ignore_eos": True, "cancel": token}), (other, query, {"max_tokens": LONG, "ignore_eos": True})]
    with held(window, query):
        started, result = in_thread(lambda: orbit.generate_many(requests))
        assert started.wait(60)
        token.cancel()
    stopped, finished = result()
    assert_cancelled_early(stopped, plain)
    assert finished.tokens == plain.tokens and finished.stop_reason == "position_limit"
    with pytest.raises(TypeError, match=r"generate_many: requests\[0\]: cancel must be an orbit.CancelToken"):
        orbit.generate_many([(window, query, {"cancel": True})])
    with pytest.raises(TypeError, match="generate_many: cancel must be an orbit.CancelToken or None, got list"):
        orbit.generate_many([(window, query)], cancel=[token])
    other.close()


def test_a_token_cancelled_before_the_call_answers_at_once(orbit, story):
    window, query, plain = story
    token = orbit.CancelToken()
    token.cancel()
    child = orbit.CancelToken(token)  # cancelled through its parent
    for cancel in (token, child):
        g = window.generate(query, max_tokens=LONG, ignore_eos=True, cancel=cancel)
        assert g.stop_reason == "cancelled" and list(g.tokens) == [] and g.text == "" and g.prompt_forward_tokens == 0
        answers = window.generate_n(query, 3, max_tokens=LONG, ignore_eos=True, cancel=cancel)
        assert [(a.stop_reason, list(a.tokens)) for a in answers] == [("cancelled", [])] * 3
    together = orbit.generate_many([(window, query, {"max_tokens": LONG, "ignore_eos": True, "cancel": token}), (window, query)])
    assert together[0].stop_reason == "cancelled" and list(together[0].tokens) == []
    assert together[1].stop_reason == "max_tokens" and len(together[1].tokens) == 32  # decoded
    assert [g.stop_reason for g in orbit.generate_many([(window, query)], cancel=token)] == ["cancelled"]
    # No lock is taken: it answers while another thread's call holds the window.
    with held(window, query):
        assert window.generate(query, max_tokens=LONG, ignore_eos=True, cancel=token).stop_reason == "cancelled"
        assert window.generate_n(query, 2, cancel=token)[1].stop_reason == "cancelled"
    with pytest.raises(TypeError, match="generate: cancel must be an orbit.CancelToken or None, got float"):
        window.generate(query, cancel=1.0)


def test_a_call_waiting_for_the_window_answers_once_its_token_is_cancelled(orbit, engine, story):
    # A decode waiting for another thread's call on its window took its token only once it had the window: a
    # Stop button did nothing until the other call's whole answer. Each call below returns while the window is
    # still held (result() would otherwise wait for the holder, paused until the block's end, and time out).
    # A cancel landing before the call begins answers the same way (cancelled before the call).
    window, query, _ = story
    other = engine.new_window()
    other.add_turn(engine.tokenize(STORY, True))
    calls = {
        "generate": lambda t: [window.generate(query, max_tokens=LONG, ignore_eos=True, cancel=t)],
        "generate_n": lambda t: window.generate_n(query, 2, max_tokens=LONG, ignore_eos=True, cancel=t),
        # The free window is locked, then given back: the call ends while the other one still waits.
        "generate_many": lambda t: orbit.generate_many([(other, query), (window, query)], cancel=t),
    }
    with held(window, query):
        for name, call in calls.items():
            token = orbit.CancelToken()
            started, result = in_thread(lambda call=call, token=token: call(token))
            assert started.wait(60)
            token.cancel()
            answers = result()
            assert [(g.stop_reason, list(g.tokens)) for g in answers] == [("cancelled", [])] * len(answers), name
        assert other.generate(query, max_tokens=4).stop_reason == "max_tokens"  # generate_many let it go
        # A request's own token leaves the call waiting for its other requests: it decodes once the window is free.
        token = orbit.CancelToken()
        _, result = in_thread(lambda: orbit.generate_many([(window, query, {"cancel": token}), (other, query)]))
        token.cancel()
    stopped, decoded = result()
    assert stopped.stop_reason == "cancelled" and decoded.stop_reason == "max_tokens"
    other.close()


def test_a_call_waiting_for_the_window_raises_once_it_is_closed(orbit, engine, story):
    # close() from a third thread used to leave the waiting call waiting for the holder's end too.
    _, query, _ = story
    window = engine.new_window()
    window.add_turn(engine.tokenize(STORY, True))
    with held(window, query):
        for what, call in (("Window.logits", lambda: window.logits(query)),
                           ("Window.generate", lambda: window.generate(query, cancel=orbit.CancelToken()))):
            started, result = in_thread(call)
            assert started.wait(60)
            if what == "Window.logits":
                _, closing = in_thread(window.close)  # waits for the holder, paused until the block's end
            with pytest.raises(orbit.OrbitError, match=f"{what}: window {window.id} is closed"):
                result()
    closing()
    assert window.closed


def test_closing_a_window_of_a_running_generate_many_waits_for_its_next_token(orbit, engine, story):
    # A generate_many held each of its windows until the whole batch ended: close() of one window stopped its
    # requests at their next token but returned only once every other window's answers were done. The main
    # thread runs generate_many; signal handlers run in the batch's signal poll, where a call on a window the batch
    # holds is refused as a call inside one of its calls. A timer's handler that finds the batch decoding starts a
    # thread that closes one window and then signals; that handler must still find the batch holding the other.
    import signal
    assert threading.current_thread() is threading.main_thread()
    _, query, _ = story
    closed, other = engine.new_window(), engine.new_window()
    for w in (closed, other):
        w.add_turn(engine.tokenize(STORY, True))
    seen, threads = {}, []

    def batch_holds_other():
        try:
            other.instances
            return False
        except orbit.OrbitError as e:
            assert "is in a call on this thread already" in str(e)
            return True

    def close_then_signal():
        closed.close()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    fired = []

    def on_timer(signum, frame):
        # Marked before anything that can run a handler again inside this one (a loaded machine's ticks pile up).
        if fired:
            return
        fired.append(True)
        if not batch_holds_other():
            fired.clear()
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        threads.append(in_thread(close_then_signal)[1])

    def on_closed(signum, frame):
        seen["in_batch"] = batch_holds_other()

    handlers = {signal.SIGALRM: signal.signal(signal.SIGALRM, on_timer),
                signal.SIGUSR1: signal.signal(signal.SIGUSR1, on_closed)}
    previous_interval = orbit.set_signal_interval(0)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.005, 0.005)
        answers = orbit.generate_many([(closed, query, {"max_tokens": LONG, "ignore_eos": True})] +
                                      [(other, query, {"max_tokens": LONG, "ignore_eos": True, "temperature": 1.0, "seed": i})
                                       for i in range(16)])
        signal.setitimer(signal.ITIMER_REAL, 0)
        for joined in threads:  # its signal handled here, under on_closed, when the close outlasted the batch
            joined()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        orbit.set_signal_interval(previous_interval)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert len(threads) == 1, "no timer tick found the batch decoding"
    assert seen == {"in_batch": True}
    assert answers[0].stop_reason == "cancelled"
    assert {g.stop_reason for g in answers[1:]} <= {"max_tokens", "position_limit"}
    other.close()


def test_a_window_closed_while_generate_many_waits_for_it_cancels_its_requests_only(orbit, engine, story):
    # The whole call raised "generate_many: window N is closed", the other windows' requests lost with it. A window
    # closed before the call is still refused as generate() refuses it: the close is retried, a little later each
    # time, until it lands while the call waits for the window (held by another thread's generate until then).
    _, query, _ = story
    other = engine.new_window()
    other.add_turn(engine.tokenize(STORY, True))
    for delay in (0.05, 0.2, 1.0, 3.0, 10.0):
        window = engine.new_window()
        window.add_turn(engine.tokenize(STORY, True))
        with held(window, query):
            started, result = in_thread(lambda w=window: orbit.generate_many(
                [(w, query, {"max_tokens": LONG, "ignore_eos": True}), (other, query, {"max_tokens": 4})]))
            assert started.wait(60)
            threading.Event().wait(delay)
            _, closing = in_thread(window.close)  # waits for the holder, paused until the block's end
            try:
                answers = result()
            except orbit.OrbitError as e:
                assert str(e) == f"generate_many: requests[0]: window {window.id} is closed"  # closed before the call
                continue
        closing()
        assert [g.stop_reason for g in answers] == ["cancelled", "max_tokens"]
        assert list(answers[0].tokens) == [] and len(answers[1].tokens) == 4
        break
    else:
        pytest.fail("every close landed before the call began")
    other.close()


@pytest.mark.parametrize("bad, message", [
    ({"temperature": float("nan")}, "generate: temperature = nan must be a finite number >= 0"),
    ({"top_p": 2.0}, r"generate: top_p = 2 must be in \[0, 1\]"),
    ({"top_logprobs": 3}, "generate: top_logprobs = 3 needs logprobs=True"),
    ({"query": [600]}, r"generate: query token 0 = 600 is outside the vocabulary \[0, 512\)"),
    ({"query": []}, "generate: empty query"),
])
def test_a_token_cancelled_before_the_call_still_refuses_bad_arguments(orbit, story, bad, message):
    # A cancelled token answered before the arguments were checked: temperature=nan, a query token outside the
    # vocabulary or top_p=2 gave a cancelled Generation, and the same call raised only once its token was not
    # cancelled. Each now raises as generate() does, from generate, generate_n and generate_many.
    window, query, _ = story
    token = orbit.CancelToken()
    token.cancel()
    options = dict(bad)
    q = options.pop("query", query)
    calls = [("generate", lambda: window.generate(q, cancel=token, **options)),
             ("generate_n", lambda: window.generate_n(q, 2, cancel=token, **options)),
             (r"generate_many: requests\[0\]", lambda: orbit.generate_many([(window, q, options)], cancel=token))]
    for name, call in calls:  # each named under the call made (generate_many's by its request)
        with pytest.raises(orbit.OrbitError, match=message.replace("generate:", name + ":", 1)):
            call()


def test_leaving_a_stream_stops_the_decode_at_its_next_token(orbit, story, monkeypatch):
    # A stop string that the answer spells from its second piece on, ending in text it never writes: every
    # piece after the first is held back (it may still become the stop string) until the answer leaves it,
    # dozens of tokens later. The decode is held right after the first piece until the loop has been left, so
    # it can only stop at a token: at the piece it would stop only after the held-back text.
    window, query, plain = story
    first = window.stream(query, max_tokens=1)
    head = "".join(first)
    held = plain.text[len(head):][:200] + "\u2603"
    assert len(window.generate(query, max_tokens=LONG, ignore_eos=True, stop=held).tokens) > 40
    original = orbit.Window.generate

    def generate(self, q, **kwargs):
        on_text, token = kwargs["on_text"], kwargs["cancel"]

        def held_until_left(piece):
            on_text(piece)
            for _ in range(6000):  # until the loop left (its token cancelled), 60 s at most
                if token.cancelled:
                    break
                threading.Event().wait(0.01)
            return True

        kwargs["on_text"] = held_until_left
        return original(self, q, **kwargs)

    monkeypatch.setattr(orbit.Window, "generate", generate)
    s = window.stream(query, max_tokens=LONG, ignore_eos=True, stop=held)
    for piece in s:
        assert piece == head
        break
    g = s.generation
    assert g.stop_reason == "cancelled" and len(g.tokens) <= 3, (g.stop_reason, len(g.tokens))
    assert list(g.tokens) == list(plain.tokens[:len(g.tokens)])


def test_closing_the_window_in_a_stream_loop_stops_the_decode(orbit, engine, story):
    _, query, plain = story
    window = engine.new_window()
    window.add_turn(engine.tokenize(STORY, True))
    s = window.stream(query, max_tokens=LONG, ignore_eos=True)
    pieces = []
    for piece in s:
        pieces.append(piece)
        if len(pieces) == 1:
            window.close()  # waits for the decode's next token, not for its end
            assert window.closed
    g = s.generation
    assert_cancelled_early(g, plain)
    assert "".join(pieces) == plain.text[:len("".join(pieces))]
    with pytest.raises(orbit.OrbitError, match="closed"):
        window.generate(query)


def test_closed_is_read_without_the_lock(orbit, engine, story):
    _, query, _ = story
    window = engine.new_window()
    window.add_turn(engine.tokenize(STORY, True))
    reading, release = threading.Event(), threading.Event()

    def hold(piece):
        reading.set()
        assert release.wait(60)
        return True

    _, result = in_thread(lambda: window.generate(query, max_tokens=LONG, ignore_eos=True, on_text=hold))
    assert reading.wait(60)
    try:
        assert window.closed is False  # answers while the window's lock is held (it used to read it unlocked)
        _, closing = in_thread(window.close)
        for _ in range(6000):  # close() marks the window at once, then waits for the decode's next token
            if window.closed:
                break
            threading.Event().wait(0.01)
        assert window.closed is True
    finally:
        release.set()
    closing()
    assert result().stop_reason == "cancelled"
    with pytest.raises(orbit.OrbitError, match="closed"):
        window.generate(query, cancel=orbit.CancelToken())


def test_a_stream_takes_a_parent_token(orbit, story):
    window, query, plain = story
    token = orbit.CancelToken()
    s = window.stream(query, max_tokens=LONG, ignore_eos=True, cancel=token)
    pieces = []
    for piece in s:
        pieces.append(piece)
        token.cancel()  # the caller's token, cancelled from the loop: the stream's own is its child
    assert_cancelled_early(s.generation, plain)
    assert "".join(pieces) == plain.text[:len("".join(pieces))]
    s = window.stream(query, cancel=token)  # cancelled before it starts: no piece, a cancelled Generation
    assert list(s) == [] and s.generation.stop_reason == "cancelled" and list(s.generation.tokens) == []
    with pytest.raises(TypeError, match="stream: cancel must be an orbit.CancelToken or None, got bool"):
        window.stream(query, cancel=True)


def engine_story(orbit, stories260k_path):
    """An engine of this test's own (closing it is what is tested), a window of it holding the story, the query
    after it and its uncancelled answer."""
    engine = orbit.Engine(str(stories260k_path), pool_bytes=32 << 20)
    window = engine.new_window()
    window.add_turn(engine.tokenize(STORY, True))
    query = engine.tokenize(" She", False)
    return engine, window, query, window.generate(query, max_tokens=LONG, ignore_eos=True)


def test_closing_the_engine_stops_a_running_decode(orbit, stories260k_path):
    engine, window, query, plain = engine_story(orbit, stories260k_path)
    other = engine.new_window()
    other.add_turn(engine.tokenize(STORY, True))
    first_piece, go_on = threading.Event(), threading.Event()

    def on_text(piece):  # holds the decode at its first piece until close() has begun, never asking it to stop
        first_piece.set()
        assert go_on.wait(60)
        return True

    _, result = in_thread(lambda: window.generate(query, max_tokens=LONG, ignore_eos=True, on_text=on_text))
    assert first_piece.wait(60)
    _, closing = in_thread(engine.close)
    try:
        for _ in range(6000):  # close() marks the engine closed, then waits for the decode's next token
            if engine.closed:
                break
            threading.Event().wait(0.01)
        assert engine.closed
        # A decode asked for while close() waits does not start, on any window of the engine.
        for call in (lambda: other.generate(query, max_tokens=LONG, ignore_eos=True), lambda: other.generate_n(query, 2),
                     lambda: orbit.generate_many([(other, query)])):
            with pytest.raises(orbit.OrbitError, match="engine is closed"):
                call()
    finally:
        go_on.set()
    g = result()  # stopped at its next token: close() waited for that, not for the whole answer
    assert_cancelled_early(g, plain)
    assert len(g.tokens) <= 3
    closing()
    with pytest.raises(orbit.OrbitError, match="engine is closed"):
        window.generate(query)


def test_closing_the_engine_wakes_the_streams_waiting_for_their_reader(orbit, stories260k_path, waiting_for_room):
    # Two streams of the engine, each read for one piece and then left: their decodes wait for their readers,
    # which only the close's wake-up ends; they stop at their next token. The joins' timeouts are hang guards.
    engine, window, query, plain = engine_story(orbit, stories260k_path)
    other = engine.new_window()
    other.add_turn(engine.tokenize(STORY, True))
    waiting = waiting_for_room([window, other])
    streams = [window.stream(query, max_tokens=LONG, ignore_eos=True), other.stream(query, max_tokens=LONG, ignore_eos=True)]
    readers = [iter(s) for s in streams]
    firsts = [next(r) for r in readers]
    closer = threading.Thread(target=engine.close)
    try:
        assert all(w.wait(60) for w in waiting)
        closer.start()
        closer.join(60)
        assert not closer.is_alive(), "close() waits for the streams' decodes: they were not woken"
    except BaseException:
        for s in streams:
            s.close()  # cancels the decodes, so nothing is left waiting after the failure
        if closer.ident is not None:
            closer.join()
        raise
    assert engine.closed
    for s, first, reader in zip(streams, firsts, readers):
        text = first + "".join(reader)  # the pieces queued before the decode stopped, then the end
        g = s.generation
        assert_cancelled_early(g, plain)  # not run to its end: woken, it stopped at its next token
        assert text == plain.text[:len(text)] and g.text.startswith(text)
