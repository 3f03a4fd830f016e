"""orbit.aio calls on a window from the body of its own `async for ... in AsyncWindow.stream(...)` loop, on the bundled
stories260K. The stream's decode holds the window until it ends and waits for the loop that reads it, so such a
call could only wait for the rest of the answer: it raises OrbitError at once naming the call, on every piece up to
the loop's end, and runs after the loop (or a break). close() there stops the stream. Other tasks' calls wait their
turn as before, and a task the loop's body awaits is one of them: it waits for the whole answer, but nothing
deadlocks."""
import asyncio
import re

import pytest
from conftest import STORY  # the `engine` and `story` fixtures are conftest's (story: a 60-token answer)

pytestmark = pytest.mark.xdist_group("test_aio")

MESSAGES = [{"role": "user", "content": "What did the dog find?"}]


async def nested_stream(aw, query):
    return [p async for p in aw.stream(query, max_tokens=2)]


async def fork_and_close(aw):
    child = await aw.fork()
    child.window.close()


# The calls made from the loop's body: the name the error starts with -> the call (aio, AsyncWindow, query).
CALLS_IN_THE_LOOP = {
    "AsyncWindow.call(Window.add_turn)": lambda aio, w, q: w.call(type(w.window).add_turn, [403, 412]),
    "AsyncWindow.generate": lambda aio, w, q: w.generate(q, max_tokens=2),
    "AsyncWindow.generate_n": lambda aio, w, q: w.generate_n(q, 2, max_tokens=2),
    "AsyncWindow.logits": lambda aio, w, q: w.logits(q),
    "AsyncWindow.sync": lambda aio, w, q: w.sync(MESSAGES),
    "AsyncWindow.prepare_sync": lambda aio, w, q: w.prepare_sync(MESSAGES),
    "AsyncWindow.idle": lambda aio, w, q: w.idle(),
    "AsyncWindow.fork": lambda aio, w, q: fork_and_close(w),
    "AsyncWindow.stream": lambda aio, w, q: nested_stream(w, q),
    "orbit.aio.generate_many": lambda aio, w, q: aio.generate_many([(w, q, {"max_tokens": 2})]),
}


@pytest.mark.parametrize("name", sorted(CALLS_IN_THE_LOOP))
def test_a_call_on_the_window_in_its_stream_loop_raises_at_once(orbit, story, name):
    # Before, the call waited for the window's lock, which the stream's decode held while it waited for this loop:
    # READER_GONE_S (1 s), then the rest of the answer, and then it ran. Now it raises at once, on every piece (the
    # last one included, whether or not the decode returned meanwhile), through any AsyncWindow of the window; the
    # stream goes on unharmed, and the call runs after the loop and after a break.
    from orbit import aio

    window, query, plain = story
    call = CALLS_IN_THE_LOOP[name]

    async def main():
        w = aio.AsyncWindow(window)
        s = w.stream(query, max_tokens=60)
        pieces, errors = [], []
        async for piece in s:
            pieces.append(piece)
            for through in (w, aio.AsyncWindow(window)):
                with pytest.raises(orbit.OrbitError, match=re.escape(name) + r": window \d+ is streaming") as e:
                    await call(aio, through, query)
                errors.append(str(e.value))
        after_end = await call(aio, w, query)
        async for _ in w.stream(query, max_tokens=400):
            break  # left at its first piece: the next call waits for the decode to stop, then runs
        after_break = await call(aio, w, query)
        return pieces, s.generation, errors, after_end, after_break

    pieces, g, errors, after_end, after_break = asyncio.run(main())
    assert "".join(pieces) == plain.text and g.stop_reason == "max_tokens" and len(pieces) > 1
    assert len(errors) == 2 * len(pieces)
    assert all("AsyncWindow.stream loop" in e and f"await {name} after the loop" in e for e in errors)
    if name == "AsyncWindow.generate":
        assert list(after_end.tokens) == list(plain.tokens[:2]) == list(after_break.tokens)


# Synchronous calls on the Window itself, made on the event loop's thread: the name the error starts with -> the call.
SYNC_CALLS_ON_THE_LOOP = {
    "Window.add_turn": lambda orbit, w, q: w.add_turn([403, 412]),
    "Window.generate": lambda orbit, w, q: w.generate(q, max_tokens=2),
    "Window.logits": lambda orbit, w, q: w.logits(q),
    "Window.fork": lambda orbit, w, q: w.fork().close(),
    "Window.instances": lambda orbit, w, q: w.instances,
    "Window.__len__": lambda orbit, w, q: len(w),
    "Window.stream": lambda orbit, w, q: list(w.stream(q, max_tokens=2)),
    "orbit.generate_many": lambda orbit, w, q: orbit.generate_many([(w, q, {"max_tokens": 2})]),
}


@pytest.mark.parametrize("name", sorted(SYNC_CALLS_ON_THE_LOOP))
@pytest.mark.parametrize("from_reader", [True, False], ids=["loop_body", "other_task"])
def test_a_synchronous_window_call_on_the_event_loop_raises_at_once(orbit, story, name, from_reader):
    # aw.window.add_turn(...) inside `async for piece in aw.stream(q)`: every task shares the loop's thread, so the
    # thread check of Window.stream did not apply and the call waited for the window's mutex, which the stream's
    # decode held while it waited for the loop the call blocked: READER_GONE_S (1 s), then the rest of the answer,
    # and then it ran. Now it raises at once, from the loop's body or from another task of the loop, while the
    # decode runs; the stream goes on unharmed, and the call works after the loop.
    from orbit import aio

    window, query, plain = story
    call = SYNC_CALLS_ON_THE_LOOP[name]

    async def elsewhere():
        call(orbit, window, query)

    async def main():
        w = aio.AsyncWindow(window)
        s = w.stream(query, max_tokens=60)
        pieces, errors = [], []
        async for piece in s:
            if not pieces:  # the decode waits for this loop: it runs until the loop takes its last piece
                with pytest.raises(orbit.OrbitError, match=re.escape(name) + r": .*(stream loop|loop's body)") as e:
                    if from_reader:
                        call(orbit, window, query)
                    else:
                        await asyncio.create_task(elsewhere())
                errors.append(str(e.value))
            pieces.append(piece)
        call(orbit, window, query)  # the decode ended: the window answers on this thread again
        async for _ in w.stream(query, max_tokens=400):
            break  # left at its first piece: the decode stops, and the window answers again
        call(orbit, window, query)
        return pieces, s.generation, errors

    pieces, g, errors = asyncio.run(main())
    assert "".join(pieces) == plain.text and g.stop_reason == "max_tokens" and len(pieces) > 1
    assert len(errors) == 1 and "AsyncWindow.stream" in errors[0] and "after the loop" in errors[0]


def test_closing_the_window_in_its_stream_loop_stops_the_stream(orbit, story):
    # As Window.close() in a Window.stream loop: the decode stops at its next token and the loop ends soon after
    # (before, close() waited its turn behind the stream: the whole 400-token answer was decoded first).
    from orbit import aio

    window, query, _ = story

    async def main():
        w = aio.AsyncWindow(window)
        s = w.stream(query, max_tokens=400)
        async for _ in s:
            await w.close()
            assert window.closed
        return s.generation

    g = asyncio.run(main())
    assert g.stop_reason == "cancelled" and len(g.tokens) < 400
    with pytest.raises(orbit.OrbitError, match="is closed"):
        window.instances


def test_another_task_waits_for_the_stream(orbit, story, paused):
    # A call from a task other than the reader waits for its turn (it takes no thread and leaves the event loop
    # free, so the reader goes on reading), then runs once the stream's decode ended.
    from orbit import aio

    window, query, plain = story

    async def main():
        w = aio.AsyncWindow(window)
        s = w.stream(query, max_tokens=60)
        first = asyncio.Event()
        pieces = []

        async def read():
            async for piece in s:
                pieces.append(piece)
                first.set()
                await asyncio.sleep(0)  # lets the waiting call try its turn while the stream runs

        reader = asyncio.create_task(read())
        await first.wait()
        g = await w.generate(query, max_tokens=61)
        ended_first = s.generation  # set as the decode returned, before the window's turn passed on
        await reader
        return g, ended_first, "".join(pieces)

    g, streamed, text = asyncio.run(main())
    assert streamed is not None and streamed.text == plain.text == text
    assert len(g.tokens) == 61 and g.text.startswith(plain.text)


@pytest.fixture
def paused(orbit, monkeypatch):
    """A reader that stops reading holds the decode (AHEAD pieces ahead) instead of letting it run alone."""
    monkeypatch.setattr(orbit._stream, "READER_GONE_S", 60.0)


def test_a_task_the_loop_awaits_waits_for_the_whole_answer_without_deadlock(orbit, engine, story, monkeypatch):
    # The loop's body awaiting another task's call on the window (asyncio.gather wraps it in a task) waits for the
    # stream: that task is not the reader, so it waits its turn, and the reader reads nothing meanwhile. The decode
    # runs on alone once no piece was taken for READER_GONE_S (shortened here), the call then runs and the loop
    # reads the rest: the whole answer, nothing lost, no deadlock.
    from orbit import aio

    monkeypatch.setattr(orbit._stream, "READER_GONE_S", 0.05)
    window, query, plain = story
    twin = engine.new_window()
    twin.add_turn(engine.tokenize(STORY, True))
    expected = twin.generate(query, max_tokens=5)
    twin.close()

    async def main():
        w = aio.AsyncWindow(window)
        s = w.stream(query, max_tokens=60)
        pieces, gathered = [], None
        async for piece in s:
            pieces.append(piece)
            if gathered is None:
                [gathered] = await asyncio.gather(w.generate(query, max_tokens=5))
                assert s.generation is not None  # it ran once the decode had ended
        return pieces, s.generation, gathered

    pieces, g, gathered = asyncio.run(main())
    assert "".join(pieces) == g.text == plain.text and g.stop_reason == "max_tokens"
    assert list(gathered.tokens) == list(expected.tokens)


def test_generation_is_there_right_after_a_loop_breaks(orbit, story):
    # Leaving the loop with break cancels the decode; `generation` was None until the decode stopped (about 0.3 s
    # later), where Window.stream's is set at once. Reading it now waits for that stop (the next token).
    from orbit import aio

    window, query, _ = story

    async def main():
        s = aio.AsyncWindow(window).stream(query, max_tokens=400)
        async for _ in s:
            break
        return s.generation

    g = asyncio.run(main())
    assert g is not None and g.stop_reason == "cancelled" and len(g.tokens) < 400
