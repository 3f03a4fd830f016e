"""orbit.aio on the bundled stories260K: the window's model calls as coroutines. Windows driven together under
asyncio.gather answer as the same calls made one after another; the native calls run off the event loop; a
stream's pieces join to its Generation's text; cancelling the awaiting task (or leaving an `async for`)
cancels the decode and waits for it, leaving the window answering as before; closing the window wakes a
stream's decode waiting for its reader, which stops at its next token; errors are the synchronous API's; one
window runs one call at a time, the others waiting their turn; no thread outlives the loop.

The event loop is asyncio.run's (pytest-asyncio is not required). Where a test needs the decode paused
mid-answer it sets READER_GONE_S high: the decode then runs at most AHEAD pieces ahead of a reader that
stops reading, so nothing here depends on how fast anything runs."""
import asyncio
import threading

import pytest
from conftest import STORY  # the `engine` and `story` fixtures are conftest's (story: a 60-token answer)

pytestmark = pytest.mark.xdist_group("test_aio")

MESSAGES = [{"role": "system", "content": "You tell short stories about Lily and her dog."},
            {"role": "user", "content": "What did the dog find?"}]


@pytest.fixture
def paused(orbit, monkeypatch):
    """A reader that stops reading holds the decode (AHEAD pieces ahead) instead of letting it run alone."""
    monkeypatch.setattr(orbit._stream, "READER_GONE_S", 60.0)


@pytest.fixture
def calls(orbit, monkeypatch):
    """Wraps Window.generate to record each native call: ('enter' | 'exit', tag, thread id) in order, the
    Generations returned. A test may set calls.gate: the first piece of text then waits for it (a call without
    on_text waits before it starts)."""
    original = orbit.Window.generate

    class Calls:
        events: list = []
        results: list = []
        gate = None  # a threading.Event the first piece waits for
        first_piece = threading.Event()

    def wait_at_gate():
        if not Calls.first_piece.is_set():
            Calls.first_piece.set()
            assert Calls.gate.wait(60), "the gate was never opened"

    def generate(self, query, **kwargs):
        on_text = kwargs.get("on_text")
        if Calls.gate is not None and on_text is not None:
            def gated(piece):
                wait_at_gate()
                return on_text(piece)
            kwargs["on_text"] = gated
        elif Calls.gate is not None:
            wait_at_gate()
        Calls.events.append(("enter", kwargs.get("max_tokens"), threading.get_ident()))
        try:
            g = original(self, query, **kwargs)
        finally:
            Calls.events.append(("exit", kwargs.get("max_tokens"), threading.get_ident()))
        Calls.results.append(g)
        return g

    monkeypatch.setattr(orbit.Window, "generate", generate)
    return Calls


def chat(window, answers=2, **options):
    """The synchronous agent: sync the messages, answer, append the answer, `answers` times."""
    messages = list(MESSAGES)
    out = []
    for _ in range(answers):
        g = window.generate(window.sync(messages).generation_prompt, max_tokens=24, **options)
        out.append(list(g.tokens))
        messages += [{"role": "assistant", "content": g.text}, {"role": "user", "content": "And then?"}]
    return out


async def achat(w, answers=2, **options):
    """The same agent with orbit.aio."""
    messages = list(MESSAGES)
    out = []
    for _ in range(answers):
        report = await w.sync(messages)
        g = await w.generate(report.generation_prompt, max_tokens=24, **options)
        out.append(list(g.tokens))
        messages += [{"role": "assistant", "content": g.text}, {"role": "user", "content": "And then?"}]
    return out


def test_gathered_windows_answer_as_sequential_sync_calls(orbit, engine):
    from orbit import aio

    sampled = dict(temperature=0.9, seed=7)
    expected = [chat(engine.new_window()), chat(engine.new_window(), **sampled)]

    async def main():
        a, b = aio.AsyncWindow(engine.new_window()), aio.AsyncWindow(engine.new_window())
        got = await asyncio.gather(achat(a), achat(b, **sampled))
        prompt = (await a.sync(MESSAGES)).generation_prompt
        n = await a.generate_n(prompt, 3, max_tokens=12, temperature=0.9, seed=3)
        many = await aio.generate_many([(a, prompt), (b.window, prompt, {"max_tokens": 8})])
        branch = await a.fork()
        forked = await branch.generate(prompt, max_tokens=12)
        await branch.close()
        return got, a.window, prompt, n, many, forked, b.window

    got, window, prompt, n, many, forked, other = asyncio.run(main())
    assert got == expected
    assert expected[0] != expected[1]  # the sampled agent answers otherwise: the comparison tells them apart
    assert [list(g.tokens) for g in n] == [list(g.tokens) for g in window.generate_n(prompt, 3, max_tokens=12,
                                                                                     temperature=0.9, seed=3)]
    assert [g.text for g in many] == [g.text for g in orbit.generate_many([(window, prompt),
                                                                           (other, prompt, {"max_tokens": 8})])]
    assert forked.text == window.generate(prompt, max_tokens=12).text


def test_the_native_calls_run_off_the_loop(orbit, story, paused, calls):
    from orbit import aio

    window, query, plain = story
    other = window.fork()

    async def main():
        a, b = aio.AsyncWindow(window), aio.AsyncWindow(other)
        s = a.stream(query, max_tokens=60)
        pieces = s.__aiter__()
        first = await pieces.__anext__()
        # a's decode is under way, waiting for its reader; b answers meanwhile.
        g = await b.generate(query, max_tokens=60)
        unfinished = s.generation
        rest = [p async for p in pieces]
        return threading.get_ident(), first + "".join(rest), g, unfinished, s.generation

    loop_thread, text, g, unfinished, generation = asyncio.run(main())
    assert unfinished is None and generation.stop_reason == "max_tokens"
    assert text == generation.text == g.text == plain.text
    threads = {thread for _, _, thread in calls.events}
    assert len(threads) == 2 and loop_thread not in threads  # each call on an executor thread
    assert [e[0] for e in calls.events] == ["enter", "enter", "exit", "exit"]  # b ran inside a's decode
    other.close()


def test_stream_pieces_join_to_the_text(orbit, story):
    from orbit import aio

    window, query, plain = story
    stopped = window.generate(query, max_tokens=60, stop="park")

    async def main():
        w = aio.AsyncWindow(window)
        s = w.stream(query, max_tokens=60)
        assert isinstance(s, aio.AsyncGenerationStream) and s.generation is None
        pieces = [p async for p in s]
        with pytest.raises(RuntimeError, match="once"):
            s.__aiter__()
        async with w.stream(query, max_tokens=60, stop="park") as t:
            cut = [p async for p in t]
        text = [p async for p in w.stream("She", max_tokens=12)]
        return pieces, s.generation, cut, t.generation, text

    pieces, g, cut, g_cut, text = asyncio.run(main())
    assert len(pieces) > 20 and all(pieces)
    assert "".join(pieces) == g.text == plain.text and list(g.tokens) == list(plain.tokens)
    assert "".join(cut) == g_cut.text == stopped.text and g_cut.stop_reason == "stop_string"
    assert "".join(text) == window.generate("She", max_tokens=12).text


def test_cancelling_the_task_cancels_the_stream(orbit, story, paused):
    from orbit import aio

    window, query, plain = story

    async def main():
        w = aio.AsyncWindow(window)
        s = w.stream(query, max_tokens=400)
        two = asyncio.Event()
        got = []

        async def read():
            async for piece in s:
                got.append(piece)
                if len(got) == 2:
                    two.set()

        task = asyncio.create_task(read())
        await two.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        stopped = s.generation  # set before CancelledError reached the task: the decode had stopped
        again = await w.generate(query, max_tokens=60)
        return got, stopped, again

    got, g, again = asyncio.run(main())
    assert g is not None and g.stop_reason == "cancelled"
    assert len(g.tokens) < 60 and list(g.tokens) == list(plain.tokens[:len(g.tokens)])
    assert g.text.startswith("".join(got))
    assert again.text == plain.text and window.generate(query, max_tokens=60).text == plain.text


def test_leaving_the_loop_cancels_the_stream(orbit, story, paused):
    from orbit import aio

    window, query, plain = story

    async def main():
        w = aio.AsyncWindow(window)
        s = w.stream(query, max_tokens=400)
        async for _ in s:
            break
        # The next call waits for the decode to stop (the window's turn comes once it has).
        after_break = await w.generate(query, max_tokens=60)
        broken = s.generation
        t = w.stream(query, max_tokens=400)
        with pytest.raises(KeyError):
            async for _ in t:
                raise KeyError("reader")
        await t.aclose()
        async with w.stream(query, max_tokens=400) as u:
            await u.__aiter__().__anext__()
        async with w.stream(query, max_tokens=400) as never:
            pass
        return after_break, broken, t.generation, u.generation, never.generation

    after_break, broken, raised, closed, never = asyncio.run(main())
    assert after_break.text == plain.text
    for g in (broken, raised, closed):
        assert g.stop_reason == "cancelled" and len(g.tokens) < 60
        assert list(g.tokens) == list(plain.tokens[:len(g.tokens)])
    assert never is None  # never started
    assert window.generate(query, max_tokens=60).text == plain.text


def test_closing_the_window_wakes_a_stream_waiting_for_its_reader(orbit, engine, story, waiting_for_room):
    from orbit import aio

    _, query, plain = story
    window = engine.new_window()
    window.add_turn(engine.tokenize(STORY, True))
    # The decode runs AHEAD pieces ahead of a reader that stops reading, then waits for it (for an hour), so only
    # the close's wake-up lets it stop at its next token.
    [waiting] = waiting_for_room([window])

    async def main():
        s = aio.AsyncWindow(window).stream(query, max_tokens=60)
        pieces = []
        async for piece in s:
            pieces.append(piece)
            if len(pieces) == 1:
                # Closed on another thread once the decode waits for this loop, which reads nothing meanwhile.
                # The timeouts are hang guards only (leaving the loop on one cancels the decode).
                assert await asyncio.to_thread(waiting.wait, 60)
                await asyncio.wait_for(asyncio.to_thread(window.close), 60)
        return s.generation, "".join(pieces)

    g, text = asyncio.run(main())
    assert window.closed
    assert g.stop_reason == "cancelled" and len(g.tokens) < 60
    assert list(g.tokens) == list(plain.tokens[:len(g.tokens)])
    assert text == plain.text[:len(text)] and g.text.startswith(text)


def test_cancelling_the_task_cancels_generate(orbit, story, calls):
    from orbit import aio

    window, query, plain = story
    calls.gate = threading.Event()

    async def main():
        w = aio.AsyncWindow(window)
        task = asyncio.create_task(w.generate(query, max_tokens=400))
        assert await asyncio.to_thread(calls.first_piece.wait, 60)  # the decode waits at its first piece
        task.cancel()
        for _ in range(5):  # the task takes its cancellation (one turn of the loop), then the decode goes on
            await asyncio.sleep(0)
        calls.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        calls.gate = None
        return await w.generate(query, max_tokens=60)

    again = asyncio.run(main())
    g = calls.results[0]
    assert g.stop_reason == "cancelled" and len(g.tokens) < 60
    assert list(g.tokens) == list(plain.tokens[:len(g.tokens)])
    assert again.text == plain.text


def test_close_stops_the_running_decode_and_refuses_the_queued_calls(orbit, story, calls):
    # AsyncWindow.close() waited its turn behind every call queued before it, a running answer's whole decode
    # included; Window.close() from another thread stops that decode at its next token. Now the asynchronous
    # close acts as that one: the running generate ends 'cancelled' (or, closed before it began, raises), and a
    # call queued behind it raises OrbitError naming the closed window.
    from orbit import aio

    window, query, plain = story
    calls.gate = threading.Event()

    async def main():
        w = aio.AsyncWindow(window)
        running = asyncio.create_task(w.generate(query, max_tokens=400))
        assert await asyncio.to_thread(calls.first_piece.wait, 60)  # its call is at the gate
        queued = asyncio.create_task(w.logits(query))
        await asyncio.sleep(0)
        closing = asyncio.create_task(w.close())
        def closed_soon():  # close() marks the window at once (before, it waited for the running answer)
            for _ in range(6000):
                if window.closed:
                    return True
                threading.Event().wait(0.01)
            return False

        marked = await asyncio.to_thread(closed_soon)
        calls.gate.set()
        await closing
        running, queued = await asyncio.gather(running, queued, return_exceptions=True)
        return marked, running, queued

    marked, running, queued = asyncio.run(main())
    assert marked
    if isinstance(running, BaseException):
        assert isinstance(running, orbit.OrbitError) and "is closed" in str(running), running
    else:
        assert running.stop_reason == "cancelled" and len(running.tokens) < len(plain.tokens)
    assert isinstance(queued, orbit.OrbitError) and f"window {window.id} is closed" in str(queued), queued
    assert window.closed


def test_generate_without_a_tokenizer(orbit, models_dir):
    # generate cancels through a CancelToken, which needs no tokenizer; it decodes as Window.generate does.
    from orbit import aio

    with orbit.Engine(str(models_dir / "binding-gqa")) as engine:
        assert not engine.has_tokenizer
        window = engine.new_window()
        window.add_turn([1, 2, 3, 4])
        plain = window.generate([5, 6], max_tokens=8)
        g = asyncio.run(aio.AsyncWindow(window).generate([5, 6], max_tokens=8))
        assert list(g.tokens) == list(plain.tokens) and len(plain.tokens) == 8


def gated(monkeypatch, owner, name):
    """Replaces owner.name (a native decode call) by one that waits for the returned gate before it runs and
    records its result; returns (entered, gate, results)."""
    original = getattr(owner, name)
    entered, gate, results = threading.Event(), threading.Event(), []

    def call(*args, **kwargs):
        entered.set()
        assert gate.wait(60), "the gate was never opened"
        results.append(original(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(owner, name, call)
    return entered, gate, results


async def cancel_when_entered(task, entered, gate):
    """Cancels `task` once its native call has begun (held at the gate), then opens the gate; the task must
    end in CancelledError."""
    assert await asyncio.to_thread(entered.wait, 60)
    task.cancel()
    for _ in range(5):  # the task takes its cancellation (one turn of the loop), then the call goes on
        await asyncio.sleep(0)
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_cancelling_the_task_cancels_generate_n(orbit, story, monkeypatch):
    from orbit import aio

    window, query, plain = story
    entered, gate, results = gated(monkeypatch, orbit.Window, "generate_n")

    async def main():
        w = aio.AsyncWindow(window)
        await cancel_when_entered(asyncio.create_task(w.generate_n(query, 3, max_tokens=400)), entered, gate)
        return await w.generate(query, max_tokens=60)

    again = asyncio.run(main())
    assert [g.stop_reason for g in results[0]] == ["cancelled"] * 3
    assert all(len(g.tokens) < 60 for g in results[0])
    assert again.text == plain.text


def test_cancelling_the_task_cancels_generate_many(orbit, engine, story, monkeypatch):
    from orbit import aio

    window, query, plain = story
    entered, gate, results = gated(monkeypatch, aio, "_generate_many")
    mine = orbit.CancelToken()  # a caller's token: the task's cancellation leaves it alone

    async def main():
        w = aio.AsyncWindow(window)
        requests = [(w, query, {"max_tokens": 400}), (window, query, {"max_tokens": 400})]
        await cancel_when_entered(asyncio.create_task(aio.generate_many(requests, cancel=mine)), entered, gate)
        return await w.generate(query, max_tokens=60)

    again = asyncio.run(main())
    assert [g.stop_reason for g in results[0]] == ["cancelled"] * 2
    assert all(len(g.tokens) < 60 for g in results[0])
    assert not mine.cancelled and again.text == plain.text


def caught(call):
    try:
        call()
    except Exception as e:  # noqa: BLE001 -- compared below
        return type(e), str(e)
    raise AssertionError("no exception")


async def acaught(coro):
    try:
        await coro
    except Exception as e:  # noqa: BLE001
        return type(e), str(e)
    raise AssertionError("no exception")


def test_errors_are_the_sync_apis(orbit, engine, story):
    from orbit import aio

    window, query, _ = story
    closed = engine.new_window()
    closed.close()
    bad = [dict(temperature=-1.0), dict(stop=""), dict(stop=5), dict(logit_bias={"x": 1}), dict(max_tokens="8"),
           dict(tool_choice="required")]
    expected = [caught(lambda o=o: window.generate(query, **o)) for o in bad]
    assert {t for t, _ in expected} == {orbit.OrbitError, ValueError, TypeError}
    expected_closed = caught(lambda: closed.generate(query))
    expected_many = caught(lambda: orbit.generate_many([(window, query), (query, query)]))
    not_lists = (5, None, 3.5)  # aio's own reading of the requests raised "'int' object is not iterable"
    expected_not_lists = [caught(lambda r=r: orbit.generate_many(r)) for r in not_lists]
    expected_sync = caught(lambda: window.sync([{"role": "user", "content": "hi"}], extra=3))

    async def main():
        w = aio.AsyncWindow(window)
        got = [await acaught(w.generate(query, **o)) for o in bad]
        streamed = [caught(lambda o=o: w.stream(query, **o)) for o in bad]  # at the call, not the first piece
        got_closed = await acaught(aio.AsyncWindow(closed).generate(query))
        got_many = await acaught(aio.generate_many([(w, query), (query, query)]))
        got_not_lists = [await acaught(aio.generate_many(r)) for r in not_lists]
        got_sync = await acaught(w.sync([{"role": "user", "content": "hi"}], extra=3))
        with pytest.raises(TypeError, match="on_text"):
            await w.generate(query, on_text=print)
        with pytest.raises(TypeError, match="on_text"):
            w.stream(query, on_text=print)
        return got, streamed, got_closed, (got_many, got_not_lists), got_sync, await w.generate(query, max_tokens=4)

    got, streamed, got_closed, (got_many, got_not_lists), got_sync, after = asyncio.run(main())
    assert got == expected and streamed == expected
    assert got_closed == expected_closed and "closed" in got_closed[1]
    assert got_many == expected_many and got_sync == expected_sync
    assert got_not_lists == expected_not_lists and "requests must be a list" in got_not_lists[0][1]
    assert len(after.tokens) == 4  # the window answers after every error
    with pytest.raises(TypeError, match="AsyncWindow: window must be an orbit.Window"):
        aio.AsyncWindow(engine)


def test_one_call_at_a_time_per_window(orbit, story, paused, calls):
    from orbit import aio

    window, query, plain = story

    async def main():
        w = aio.AsyncWindow(window)
        s = w.stream(query, max_tokens=60)
        pieces = s.__aiter__()
        first = await pieces.__anext__()  # the stream's decode holds the window, paused for its reader
        queued = asyncio.create_task(aio.AsyncWindow(window).generate(query, max_tokens=61))  # another wrapper
        dropped = asyncio.create_task(w.generate(query, max_tokens=62))
        batch = asyncio.create_task(aio.generate_many([(w, query, {"max_tokens": 63})]))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not queued.done() and not dropped.done() and not batch.done()
        dropped.cancel()  # cancelled while waiting for its turn: it never runs
        with pytest.raises(asyncio.CancelledError):
            await dropped
        text = first + "".join([p async for p in pieces])
        return text, (await queued), (await batch)[0]

    text, queued, batched = asyncio.run(main())
    assert text == plain.text and queued.text.startswith(plain.text)
    assert len(queued.tokens) == 61 and len(batched.tokens) == 63
    # One native call at a time, in the order asked for (generate_many records no event: not Window.generate);
    # the cancelled one (62) never started.
    assert [(e[0], e[1]) for e in calls.events] == [("enter", 60), ("exit", 60), ("enter", 61), ("exit", 61)]


def test_no_thread_outlives_the_loop(orbit, story):
    from orbit import aio

    window, query, _ = story
    before = set(threading.enumerate())

    async def main():
        w = aio.AsyncWindow(window)
        await asyncio.gather(w.generate(query, max_tokens=8), w.generate_n(query, 2, max_tokens=8))
        async for _ in w.stream(query, max_tokens=400):
            break
        reader = asyncio.create_task(w.stream(query, max_tokens=400).__aiter__().__anext__())
        await asyncio.sleep(0)
        reader.cancel()
        left = w.stream(query, max_tokens=400)
        pieces = left.__aiter__()
        await pieces.__anext__()  # started, and kept unread past the loop's end
        return pieces

    pieces = asyncio.run(main())
    # orbit.aio's pool keeps its threads for the next calls (idle: the loop waited for its calls at its end).
    assert all(t.name.startswith("orbit.aio") for t in set(threading.enumerate()) - before)
    assert window.generate(query, max_tokens=8).tokens  # nothing holds the window
    del pieces


def test_more_streams_than_the_default_executor_has_threads(orbit, story, paused):
    """Each stream's decode holds a thread until its reader has read it: twelve streams read in lockstep (none
    reads its second piece before every one has read its first) all start, on orbit.aio's own threads; the
    loop's default executor is left to the application (on 2 cores it has 6 threads, and the seventh stream
    would wait, with `paused`, a minute for one)."""
    import concurrent.futures

    from orbit import aio

    window, query, plain = story
    forks = [window.fork() for _ in range(12)]
    submitted = []

    class Counting(concurrent.futures.ThreadPoolExecutor):
        def submit(self, *args, **kwargs):
            submitted.append(args[0])
            return super().submit(*args, **kwargs)

    async def read(w, barrier):
        out = []
        async for piece in aio.AsyncWindow(w).stream(query, max_tokens=20):
            if len(out) == 1:
                await asyncio.wait_for(barrier.wait(), 30)
            out.append(piece)
        return "".join(out)

    async def main():
        asyncio.get_running_loop().set_default_executor(Counting(max_workers=2))
        barrier = asyncio.Barrier(len(forks))
        return await asyncio.gather(*(read(f, barrier) for f in forks))

    texts = asyncio.run(main())
    assert texts == [window.generate(query, max_tokens=20).text] * len(forks)
    assert submitted == []
    for f in forks:
        f.close()


def test_the_async_agents_example(orbit, stories260k_path, repo_root):
    import importlib.util
    import io

    path = repo_root / "bindings" / "python" / "examples" / "async_agents.py"
    spec = importlib.util.spec_from_file_location("async_agents", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = io.StringIO()
    with orbit.Engine(str(stories260k_path)) as engine:
        agents = asyncio.run(example.run(engine, steps=3, out=out))
    assert len(agents) == 2
    for messages in agents:
        calls = [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]
        tools = [m for m in messages if m["role"] == "tool"]
        assert len(calls) == len(tools) == 3
        assert messages[-1]["role"] == "assistant" and messages[-1]["content"]
    text = out.getvalue()
    assert text.count("read_page(") == 6 and text.count(" tokens]") == 2


def test_the_other_calls_mirror_the_window(orbit, engine, story):
    import numpy as np
    from orbit import aio

    window, query, _ = story
    twin = engine.new_window()
    twin.add_turn(engine.tokenize(STORY, True))
    twin.add_turn([403, 412])
    messages = MESSAGES + [{"role": "assistant", "content": "A ball."}]

    async def main():
        async with aio.AsyncWindow(engine.new_window()) as scratch:
            prepared = await scratch.prepare_sync(messages)
            idle = await scratch.idle()
        w = aio.AsyncWindow(window)
        report = await w.call(orbit.Window.add_turn, [403, 412])
        logits = await w.logits(query)
        return scratch.window, prepared, idle, report, logits

    closed, prepared, idle, report, logits = asyncio.run(main())
    assert closed.closed  # `async with` closed it
    assert isinstance(prepared, orbit.IdleReport) and isinstance(idle, orbit.IdleReport)
    assert isinstance(report, orbit.ApplyReport) and window.tokens == twin.tokens
    assert np.array_equal(logits, twin.logits(query))
    twin.close()


def test_the_stub_lists_every_public_name_and_member(orbit):
    import ast
    import inspect
    import pathlib

    from orbit import aio

    stub = ast.parse((pathlib.Path(aio.__file__).parent / "aio.pyi").read_text())
    classes = {n.name: n for n in stub.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in stub.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    public = {name for name, obj in vars(aio).items() if not name.startswith("_") and getattr(obj, "__module__", "")
              == aio.__name__}
    assert public == set(classes) | functions == {"AsyncWindow", "AsyncGenerationStream", "generate_many"}
    for name, node in classes.items():
        listed = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        members = {m for m, _ in inspect.getmembers(getattr(aio, name))
                   if not m.startswith("_") or m in ("__aiter__", "__aenter__", "__aexit__")}
        assert members <= listed, f"aio.{name}: {members - listed} missing from aio.pyi"
        for member in members:
            assert (getattr(getattr(aio, name), member).__doc__ or "").strip(), f"aio.{name}.{member} has no docstring"


# Arguments generate() refuses (test_generate_stream.BAD_ARGUMENTS in part, and keywords generate() takes in
# another type or not at all): AsyncWindow.stream raises at the call what Window.stream raises at its call.
STREAM_REFUSALS = [
    ((None,), {}),
    (([600],), {}),  # a token outside stories260K's 512
    ((" She",), {"seed": -1}),
    ((" She",), {"top_p": 2.0}),
    ((" She",), {"max_tokens": True}),
    ((" She",), {"stop": [""]}),
    ((" She",), {"top_logprobs": 3}),  # without logprobs
    ((" She",), {"tool_choice": "required"}),  # without tools
    ((" She",), {"constraint_trigger_block": ("<think>", "</think>")}),  # without a constraint
    ((" She",), {"foo": 1}),
    ((" She",), {"temperature": "hot"}),
    ((" She",), {"cancel": 5}),
]


@pytest.mark.parametrize("args, kwargs", STREAM_REFUSALS, ids=lambda v: repr(v))
def test_stream_refuses_bad_arguments_at_the_call_as_window_stream_does(orbit, story, args, kwargs):
    from orbit import aio

    window, _, _ = story
    expected = caught(lambda: window.stream(*args, **kwargs))
    assert expected[0] in (TypeError, ValueError, orbit.OrbitError)

    async def main():
        w = aio.AsyncWindow(window)
        made = caught(lambda: w.stream(*args, **kwargs))  # no await: nothing ran on the loop yet
        good = w.stream(" She", max_tokens=3)  # good arguments still stream, and the window answers
        return made, "".join([piece async for piece in good]), good.generation

    made, text, generation = asyncio.run(main())
    assert made == expected
    assert text == generation.text and len(generation.tokens) == 3


def test_async_with_on_a_closed_window_raises_naming_it(orbit, engine):
    from orbit import aio

    closed = engine.new_window()
    closed.close()
    with pytest.raises(orbit.OrbitError) as sync_with:
        with closed:
            pass

    async def enter(window):
        async with aio.AsyncWindow(window):
            raise AssertionError("the block ran")

    with pytest.raises(orbit.OrbitError) as async_with:
        asyncio.run(enter(closed))
    assert str(async_with.value) == f"async {sync_with.value}"
    assert str(async_with.value).startswith(f"async with window: window {closed.id} is closed")

    other = orbit.Engine(engine.options.model, pool_bytes=8 << 20)  # a window whose engine is closed
    orphan = other.new_window()
    other.close()
    with pytest.raises(orbit.OrbitError, match=rf"^async with window: window {orphan.id}'s engine is closed"):
        asyncio.run(enter(orphan))
