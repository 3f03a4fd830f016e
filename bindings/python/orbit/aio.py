"""orbit.aio: a window's model calls as coroutines, for asyncio agent loops.

    from orbit import aio

    async def agent(window: orbit.Window, messages: list[dict]) -> str:
        w = aio.AsyncWindow(window)
        report = await w.sync(messages)                            # Window.sync, off the event loop
        g = await w.generate(report.generation_prompt, max_tokens=64)
        async for piece in w.stream(report.generation_prompt, max_tokens=64, stop="\\n"):
            print(piece, end="", flush=True)                       # Window.stream's pieces, awaited
        return g.text

    texts = await asyncio.gather(agent(w1, m1), agent(w2, m2))   # both windows decode at the same time

A thin layer: each coroutine runs the synchronous call (Window.sync, generate, generate_n, fork, ...,
orbit.generate_many) on a thread of this module's own pool, and the native calls release the GIL, so several
windows progress together under asyncio.gather and the loop stays free. Results, exceptions (types and
messages) and arguments are the synchronous API's. The pool makes a thread when no idle one is left (up to
MAX_THREADS calls at once; more wait for a thread) and keeps it for the next call: a decode holds its thread
for the whole answer (a stream's until its reader has read it), so the loop's default executor (min(32, cores
+ 4) threads) would make the seventh concurrent stream on a 2-core machine wait for whole answers, and take
the threads the application's own run_in_executor calls need. The loop's default executor is not used.

One call at a time per window: each window has an asyncio lock (per event loop), and a call made while another
runs on the same window waits for it in turn (first come, first served) without taking a thread; generate_many
locks each of its windows, in one order. Use the Window itself only while no coroutine of this module runs on
it: a synchronous call waits for a running one on the window's own mutex, blocking the loop meanwhile
(AsyncWindow.call runs any Window method the asynchronous way).

Cancelling the awaiting task (asyncio.wait_for, TaskGroup, task.cancel()) cancels the decode of generate,
generate_n, generate_many and a stream at its next token: each call passes an orbit.CancelToken (a child of the
cancel= given, if any) that the task's cancellation cancels, so the decode ends with stop_reason 'cancelled' as
a CancelToken's cancel() ends it (no tokenizer needed). The task waits for the native call to return before
CancelledError reaches it, so the window is idle then. A call with no way to stop early (sync, fork, idle, ...)
runs to its end first, its result dropped (what it did to the window stays); a call still waiting for its
window is dropped without running. Window.close() and Engine.close() stop a running decode at its next token
too (a stream's decode waiting for its reader is woken at once).

A stream holds its window until its decode ends, and the decode waits for the `async for` that reads it. So an
AsyncWindow call on that window awaited by the task running the loop's body (generate, logits, call(...), fork,
sync, another stream of it, generate_many with it...) raises OrbitError at once naming the call, from the
first piece to the loop's end (its end, a break, an exception, aclose()), instead of waiting behind the stream
for the rest of the answer; await it after the loop (break first to stop the decode early) or on a fork() made
before it. close() from the loop's body is let through and stops the stream, as Window.close() does. A
synchronous call on the Window itself (aw.window.add_turn(...), window.generate(...), orbit.generate_many) made on
the event loop's thread while the stream's decode runs raises OrbitError at once too, from the loop's body or
any other task: every task runs on that thread, so the call would block the loop the decode waits for. Other
tasks' calls (and other threads') still wait their turn: awaiting the lock takes no thread and leaves the event
loop free, so the reader keeps reading and the call runs once the stream ends. A task the loop's body awaits is
such a task, not the loop: a window call wrapped in asyncio.gather(), a task or asyncio.wait_for() (3.11 wraps
it in a task) from the body waits for the stream while the body waits for it; nothing deadlocks (the decode
runs on alone once its reader took no piece for a second, _stream.READER_GONE_S), but it waits for the whole
answer. Await window calls in the loop's body directly, where they raise at once.
"""

from __future__ import annotations

import asyncio
import collections.abc
import concurrent.futures
import contextvars
import functools
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Optional, TypeVar

from . import _stream
from ._orbit import CancelToken, OrbitError, Window, _check_stream_arguments, _StreamRoom
from ._orbit import generate_many as _generate_many

if TYPE_CHECKING:
    from ._orbit import Generation

_T = TypeVar("_T")

# The most calls of this module that run at once (each on its own thread; more wait for one to end).
MAX_THREADS = 1024
_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
_pool_lock = threading.Lock()


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    """The pool this module's calls run on (made on first use, shared by every event loop)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="orbit.aio")
        return _pool


def _forget_pool() -> None:
    """In a fork's child: the parent's pool threads are not there, so a new pool is made on first use."""
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)

# Per event loop: its calls still running on the pool, and the async generator that waits for them when the loop
# ends. asyncio.run (and any loop owner calling loop.shutdown_asyncgens()) closes every async generator the loop
# has seen before it closes: closing this one waits for the loop's calls, so none outlives its loop (a stream left
# unread at the loop's end decodes on alone once its reader is gone, _stream.READER_GONE_S, and is waited for),
# as the loop's default executor's shutdown would wait for its threads. Weak: a dropped loop takes both along.
_running: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, set[asyncio.Future[Any]]]" = weakref.WeakKeyDictionary()
_loop_ends: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncIterator[None]]" = weakref.WeakKeyDictionary()


async def _wait_at_loop_end(loop: asyncio.AbstractEventLoop) -> AsyncIterator[None]:
    """Yields once; closed (at the loop's end), waits for every call of this module still running on `loop`."""
    try:
        yield
    finally:
        while _running.get(loop):
            await asyncio.wait(list(_running[loop]))


async def _on_pool(fn: Callable[..., _T], *args: Any) -> "asyncio.Future[_T]":
    """fn(*args) submitted to the pool: its future, which the running loop waits for before it ends."""
    loop = asyncio.get_running_loop()
    if loop not in _loop_ends:
        end = _loop_ends[loop] = _wait_at_loop_end(loop)
        await end.__anext__()  # started: the loop now knows it, and closes it at its end
    future = loop.run_in_executor(_executor(), fn, *args)
    running = _running.setdefault(loop, set())
    running.add(future)
    future.add_done_callback(running.discard)
    return future

# Each window's lock, per event loop (an asyncio.Lock serves the loop it is first awaited on). Weak both ways:
# a closed loop or a dropped window takes its locks with it.
_locks: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.WeakKeyDictionary[Window, asyncio.Lock]]" = (
    weakref.WeakKeyDictionary())


def _window_lock(window: Window) -> asyncio.Lock:
    """The running loop's lock of `window` (made on first use)."""
    per_loop = _locks.setdefault(asyncio.get_running_loop(), weakref.WeakKeyDictionary())
    lock = per_loop.get(window)
    if lock is None:
        lock = per_loop[window] = asyncio.Lock()
    return lock


class _Reading:
    """One AsyncGenerationStream's loop: the task that reads it, from its first piece to the loop's end."""

    def __init__(self, window: Window, task: "Optional[asyncio.Task[Any]]") -> None:
        self.window = window
        self.task = task

    def end(self) -> None:
        """The loop ended: its task's calls on the window run again (idempotent, any thread)."""
        readings = _streams.get(self.window, [])
        if self in readings:
            readings.remove(self)


# The stream loops running on each window (weak: a dropped window takes its entry with it).
_streams: "weakref.WeakKeyDictionary[Window, list[_Reading]]" = weakref.WeakKeyDictionary()


def _start_reading(window: Window) -> _Reading:
    """Registers the running task as reading a stream on `window` until the returned _Reading's end()."""
    reading = _Reading(window, asyncio.current_task())
    _streams.setdefault(window, []).append(reading)
    return reading


def _reads(window: Window) -> bool:
    """Whether the running task reads a stream on `window` (it runs the body of that stream's loop)."""
    task = asyncio.current_task()
    return task is not None and any(r.task is task for r in _streams.get(window, ()))


def _check_not_streamed(window: Window, what: str) -> None:
    """Raises OrbitError when the running task reads a stream on `window` (the call is made from the loop's
    body): the stream's decode holds the window and waits for this loop, so awaiting the window's turn would
    wait for the whole answer."""
    if _reads(window):
        raise OrbitError(
            f"{what}: window {window.id} is streaming to this task (called inside its AsyncWindow.stream loop): the "
            f"stream's decode holds the window until the stream ends; await {what} after the loop (break out of "
            "it first to stop the decode), or close() the window to stop it")


class _NotRun:
    """What a job cancelled before its thread picked it up returns."""


async def _wait_out(future: "asyncio.Future[Any]") -> None:
    """Waits until `future` is done, even through a cancellation of the awaiting task, which is raised after."""
    cancelled: Optional[asyncio.CancelledError] = None
    while not future.done():
        try:
            await asyncio.wait([future])
        except asyncio.CancelledError as e:
            cancelled = e
    if not future.cancelled():
        future.exception()  # retrieved: an error of a call nobody waits for any more is not logged
    if cancelled is not None:
        raise cancelled


async def _off_loop(fn: Callable[[], _T], token: Optional[CancelToken] = None) -> _T:
    """fn() on this module's pool (in the caller's context). Cancelling the awaiting task cancels
    `token` (the decode fn runs with it stops at its next token; a job not started yet never runs) and waits
    for fn to return before CancelledError goes on."""
    context = contextvars.copy_context()
    dropped = threading.Event()

    def job() -> Any:
        return _NotRun if dropped.is_set() else context.run(fn)

    future = await _on_pool(job)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        dropped.set()
        if token is not None:
            token.cancel()
        await _wait_out(future)
        raise


def _call_token(kwargs: dict[str, Any], what: str) -> CancelToken:
    """The token of one call: a child of kwargs' cancel= (taken out of kwargs), so the task's cancellation
    leaves the caller's token alone. A cancel= of another type raises TypeError naming it."""
    parent = kwargs.pop("cancel", None)
    if parent is not None and not isinstance(parent, CancelToken):
        raise TypeError(f"{what}: cancel must be an orbit.CancelToken or None, got {type(parent).__name__}")
    return CancelToken(parent)


def _generate_with(window: Window, query: Any, ours: dict[str, Any], kwargs: dict[str, Any]) -> "Generation":
    """window.generate(query, **ours, **kwargs), `ours` being this module's arguments (on_text, cancel). An
    argument of the wrong type raises the TypeError the caller's call raises: pybind11's message lists the
    arguments given, and `ours` are not the caller's."""
    try:
        return window.generate(query, **ours, **kwargs)
    except TypeError as e:
        if not str(e).startswith("generate(): incompatible function arguments"):
            raise
    return window.generate(query, **kwargs)  # refused the same way before anything runs


def _call_name(fn: Callable[..., Any]) -> str:
    """How errors name AsyncWindow.call's fn: Window.<name> for a Window method, else its qualified name."""
    name = getattr(fn, "__name__", None)
    if isinstance(name, str) and getattr(Window, name, None) is fn:
        return f"Window.{name}"
    return str(getattr(fn, "__qualname__", type(fn).__name__))


def _refuse_on_text(kwargs: dict[str, Any], what: str) -> None:
    if "on_text" in kwargs:
        raise TypeError(f"{what}: on_text is not taken here; iterate AsyncWindow.stream(...) for the pieces")


class AsyncWindow:
    """A Window whose model calls are coroutines: AsyncWindow(window). The methods mirror Window's (same
    arguments, results and exceptions); `window` is the Window itself. Several AsyncWindows of one Window share
    its lock. `async with AsyncWindow(engine.new_window()) as w:` closes the window at the end."""

    def __init__(self, window: Window) -> None:
        if not isinstance(window, Window):
            raise TypeError(f"AsyncWindow: window must be an orbit.Window, got {type(window).__name__}")
        self._window = window

    @property
    def window(self) -> Window:
        """The Window (synchronous; see the module's note on using it while a coroutine runs)."""
        return self._window

    def __repr__(self) -> str:
        return f"AsyncWindow({self._window!r})"

    async def __aenter__(self) -> "AsyncWindow":
        """The AsyncWindow itself; leaving the block closes the window (close()). OrbitError naming the window when
        it or its engine is closed, as `with window:` raises it ("async with window: window 3 is closed ...")."""
        try:
            self._window.__enter__()  # checks only: takes no lock, changes nothing
        except OrbitError as e:
            raise OrbitError(f"async {e}") from None
        return self

    async def __aexit__(self, *exc: object) -> None:
        """close(): a decode running on the window stops at its next token (AsyncWindow.close)."""
        await self.close()

    async def _run(self, what: str, fn: Callable[[], _T], token: Optional[CancelToken] = None) -> _T:
        """fn() off the loop once the window's lock is ours (_off_loop says what cancelling does); OrbitError
        naming `what` at once from the body of a stream loop on the window (the module's note)."""
        _check_not_streamed(self._window, what)
        async with _window_lock(self._window):
            return await _off_loop(fn, token)

    async def call(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """fn(window, *args, **kwargs) off the loop, in the window's turn: any Window method the asynchronous
        way, e.g. `await w.call(orbit.Window.admit, chunk)`. It runs to its end once started."""
        call = functools.partial(fn, self._window, *args, **kwargs)
        return await self._run(f"AsyncWindow.call({_call_name(fn)})", call)

    async def sync(self, messages: Any, **kwargs: Any) -> Any:
        """Window.sync(messages, **kwargs): a SyncReport."""
        return await self._run("AsyncWindow.sync", functools.partial(self._window.sync, messages, **kwargs))

    async def prepare_sync(self, messages: Any, **kwargs: Any) -> Any:
        """Window.prepare_sync(messages, **kwargs): an IdleReport."""
        prepare = functools.partial(self._window.prepare_sync, messages, **kwargs)
        return await self._run("AsyncWindow.prepare_sync", prepare)

    async def idle(self) -> Any:
        """Window.idle(): an IdleReport."""
        return await self._run("AsyncWindow.idle", self._window.idle)

    async def logits(self, query: Any, **kwargs: Any) -> Any:
        """Window.logits(query, **kwargs): numpy float32."""
        return await self._run("AsyncWindow.logits", functools.partial(self._window.logits, query, **kwargs))

    async def generate(self, query: Any, **kwargs: Any) -> "Generation":
        """Window.generate(query, **kwargs) but on_text (stream() gives the pieces). Cancelling the awaiting
        task cancels the decode at its next token (a CancelToken, child of cancel= if given) and waits for it
        to stop."""
        _refuse_on_text(kwargs, "generate")
        kwargs = dict(kwargs)
        token = _call_token(kwargs, "generate")
        generate = functools.partial(_generate_with, self._window, query, {"cancel": token}, kwargs)
        return await self._run("AsyncWindow.generate", generate, token)

    async def generate_n(self, query: Any, n: int, **kwargs: Any) -> "list[Generation]":
        """Window.generate_n(query, n, **kwargs): n Generations. Cancelling the awaiting task cancels all n at
        their next token, as generate's."""
        kwargs = dict(kwargs)
        token = _call_token(kwargs, "generate_n")
        generate_n = functools.partial(self._window.generate_n, query, n, cancel=token, **kwargs)
        return await self._run("AsyncWindow.generate_n", generate_n, token)

    async def fork(self) -> "AsyncWindow":
        """Window.fork(), as an AsyncWindow (the branch has a lock of its own)."""
        return AsyncWindow(await self._run("AsyncWindow.fork", self._window.fork))

    async def close(self) -> None:
        """Window.close(), as it acts from another thread: a decode running on the window (another task's
        generate or stream) stops at its next token ('cancelled'), a call running otherwise is waited for, and
        the calls still waiting their turn raise OrbitError 'window N is closed'; returns once the window is
        closed. (It used to wait its turn behind every call queued before it, a running answer's whole decode
        included.) From the body of a stream loop on the window it stops that stream the same way."""
        await _off_loop(self._window.close)  # not in the window's turn: the native close stops what holds it

    def stream(self, query: Any, **kwargs: Any) -> "AsyncGenerationStream":
        """The answer's text piece by piece: an AsyncGenerationStream (`async for piece in w.stream(...)`),
        taking generate()'s keyword arguments but on_text. Its arguments are checked here, as Window.stream checks
        them: what generate() refuses for them (a bad query, seed=-1, an unknown keyword...) raises at this call
        with generate()'s own error, not at the first piece."""
        return AsyncGenerationStream(self._window, query, kwargs)


async def generate_many(requests: Any, *, cancel: Optional[CancelToken] = None) -> "list[Generation]":
    """orbit.generate_many(requests, cancel=cancel) off the loop, once each window's lock is ours; a request's
    window may be a Window or an AsyncWindow. Cancelling the awaiting task cancels every request at its next
    token (a CancelToken for the call, child of cancel= if given)."""
    token = _call_token({"cancel": cancel}, "generate_many")
    # Anything but a sequence (a str is none here) goes to the synchronous call unread: it raises generate_many's
    # own error.
    listed = isinstance(requests, collections.abc.Sequence) and not isinstance(requests, (str, bytes))
    plain = [_plain_request(r) for r in requests] if listed else requests
    windows = {id(r[0]): r[0] for r in (plain if listed else ())
               if isinstance(r, (tuple, list)) and r and isinstance(r[0], Window)}
    for window in windows.values():
        _check_not_streamed(window, "orbit.aio.generate_many")
    locks = [_window_lock(w) for _, w in sorted(windows.items())]  # one order: two calls never wait for each other
    held: list[asyncio.Lock] = []
    try:
        for lock in locks:
            await lock.acquire()
            held.append(lock)
        return await _off_loop(functools.partial(_generate_many, plain, cancel=token), token)
    finally:
        for lock in held:
            lock.release()


def _plain_request(request: Any) -> Any:
    """A generate_many request with an AsyncWindow replaced by its Window; anything else as it is (the
    synchronous generate_many judges it)."""
    if isinstance(request, (tuple, list)) and request and isinstance(request[0], AsyncWindow):
        return (request[0].window, *request[1:])
    return request


class AsyncGenerationStream:
    """The text of one answer as it is decoded: AsyncWindow.stream(query, **generate() keyword arguments).

    `async for piece in stream` (once) gives the pieces, as Window.stream's (GenerationStream) do: str, whole
    characters, joining to the answer's text. The decode starts at the first piece asked for, once the window's
    lock is ours, on a thread of this module's pool (Window.generate with an on_text that hands
    each piece to the event loop). Its arguments are checked when it is made (AsyncWindow.stream raises what
    generate() raises for them); errors the decode meets are raised at the piece. Once the `async for` ends,
    `generation` is the Generation (after a break, reading it waits for the cancelled decode to stop at its next
    token). The decode runs at most 8 pieces ahead of the reader; one that takes no
    piece for a second lets it run on to its end. Closing the window or its engine (Window.close(),
    Engine.close(), from any thread) stops the decode at its next token, at once if it waits for the reader.

    Cancelling the task that iterates cancels the decode (stop_reason 'cancelled') and waits for it to stop
    before CancelledError goes on. Leaving the `async for` otherwise (break, an exception) cancels it too; the
    window's lock is held until the decode has stopped, so the window's next call waits for that. aclose()
    (or `async with w.stream(...) as s:`) cancels and waits, and `generation` is then set (None if the stream
    never started, or generate() raised).

    From the first piece to the loop's end, an AsyncWindow call on the window awaited in the loop's body (by the
    task reading the stream) raises OrbitError at once naming the call, as it could only wait for the whole
    answer: await it after the loop. close() there stops the stream instead. Other tasks' calls wait their turn
    (the module's note says why a task the loop's body awaits waits too). A synchronous call on the Window made on
    the event loop's thread (by any task) while the decode runs raises OrbitError at once: it would block the loop.
    """

    def __init__(self, window: Window, query: Any, kwargs: dict[str, Any]) -> None:
        if "on_text" in kwargs:
            raise TypeError("stream: on_text is the stream's own; iterate the stream for the pieces")
        parent = kwargs.get("cancel")
        if parent is not None and not isinstance(parent, CancelToken):
            raise TypeError(f"stream: cancel must be an orbit.CancelToken or None, got {type(parent).__name__}")
        # Refused here, as generate() refuses them (and Window.stream does), rather than at the first piece.
        _check_stream_arguments(window, query, {k: v for k, v in kwargs.items() if k != "cancel"})
        self._window = window
        self._query = query
        self._kwargs = kwargs
        self._iterated = False
        self._closed = False
        self._decode: Optional[_Decode] = None

    @property
    def generation(self) -> "Optional[Generation]":
        """The Generation once the decode ended (None before, and when generate() raised). After a loop that broke
        off (the decode cancelled, stopping at its next token), reading it waits for that stop."""
        decode = self._decode
        if decode is None:
            return None
        if decode.generation is None and decode.cancelled.is_set() and decode.started.is_set():
            decode.returned.wait()  # bounded: a cancelled decode returns at its next token, never waiting for us
        return decode.generation

    def __aiter__(self) -> AsyncIterator[str]:
        """The pieces (once); the decode starts at the first one asked for."""
        if self._iterated:
            raise RuntimeError("an AsyncGenerationStream is iterated once")
        self._iterated = True
        return _Pieces(self)  # not kept here: a loop that breaks drops it, and that cancels the decode

    async def aclose(self) -> None:
        """Cancels the decode if it runs and waits for it to stop; a stream not started never starts."""
        self._closed = True
        if self._decode is not None:
            self._decode.reading_ended()
            await self._decode.stop()

    async def __aenter__(self) -> "AsyncGenerationStream":
        """The stream itself; leaving the block closes it (aclose())."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """aclose(): a decode still running is cancelled and waited for."""
        await self.aclose()

    async def _start(self) -> "Optional[_Decode]":
        """Takes the window's lock and starts the decode (None: the stream was closed meanwhile); the running task
        reads it from then on. OrbitError at once from the body of another stream loop on the window."""
        _check_not_streamed(self._window, "AsyncWindow.stream")
        lock = _window_lock(self._window)
        await lock.acquire()
        decode: Optional[_Decode] = None
        if self._closed:
            lock.release()
            return None
        try:
            kwargs = dict(self._kwargs)
            decode = _Decode(asyncio.get_running_loop(), _call_token(kwargs, "stream"), self._window)
            ours = {"on_text": decode.on_text, "cancel": decode.token}
            # Every task of the loop runs on this thread, so a synchronous call on the window from the loop's body
            # (aw.window.add_turn(...)) would block the loop, and with it the reader the decode waits for: while
            # the decode runs, the window's own calls made on this thread raise at once (PyWindow::run).
            decode.room.hold_reader()
            await decode.start(functools.partial(_generate_with, self._window, self._query, ours, kwargs), lock)
        except BaseException:
            if decode is not None:
                decode.room.release_reader()
            lock.release()
            raise
        decode.reading = _start_reading(self._window)
        self._decode = decode
        return decode


class _End:
    """The mark after the last piece: the decode returned."""


class _Decode:
    """One Window.generate(on_text=...) on an executor thread, its pieces handed to the loop in an asyncio.Queue,
    the Generation (or the error) at the end. The window's lock is released once it returned."""

    def __init__(self, loop: asyncio.AbstractEventLoop, token: CancelToken, window: Window) -> None:
        self._loop = loop
        self.token = token  # generate's cancel=: the decode stops at its next token once it is cancelled
        self.items: "asyncio.Queue[Any]" = asyncio.Queue()  # pieces, then _End
        # Pieces the decode may still hand over unread; cancelling the token and closing the window or its
        # engine wake a decode waiting for room at once (it then stops at its next token).
        self.room = _StreamRoom(_stream.AHEAD, token, window)
        self.cancelled = threading.Event()
        self.alone = False  # the reader stopped reading: the decode no longer waits for it
        self.future: "Optional[asyncio.Future[Generation]]" = None
        self.generation: "Optional[Generation]" = None
        self.started = threading.Event()  # generate began on its thread
        self.returned = threading.Event()  # generate returned or raised (set on its thread)
        self.read_to_end = False
        self.reading: Optional[_Reading] = None  # the loop reading it, until the loop ends

    def reading_ended(self) -> None:
        """The loop ended (its end, a break, an exception, aclose()): the task's calls on the window run again,
        and so do the window's synchronous calls on the loop's thread (their check ends with the decode too)."""
        if self.reading is not None:
            self.reading.end()
        self.room.release_reader()

    async def start(self, generate: Callable[[], "Generation"], lock: asyncio.Lock) -> None:
        context = contextvars.copy_context()

        def run() -> "Generation":
            # The Generation is kept on the decode's thread too, so that a reader can have it without the loop.
            self.started.set()
            try:
                self.generation = generation = context.run(generate)
                return generation
            finally:
                self.returned.set()

        self.future = await _on_pool(run)

        def ended(future: "asyncio.Future[Generation]") -> None:
            self.settle()
            self.room.release_reader()  # the window is free: a synchronous call on it no longer waits
            lock.release()
            self.items.put_nowait(_End)  # after every piece: they were queued on the loop before this

        self.future.add_done_callback(ended)

    def on_text(self, piece: str) -> bool:
        """generate's on_text, on the executor thread: waits for room (not past READER_GONE_S, not once stopped),
        hands the piece over, and goes on unless cancelled."""
        if not self.alone and not self.cancelled.is_set() and not self.room.take(_stream.READER_GONE_S):
            self.alone = True
        try:
            self._loop.call_soon_threadsafe(self.items.put_nowait, piece)
        except RuntimeError:  # the loop is closed: nobody reads any more
            self.cancelled.set()
        return not self.cancelled.is_set()

    def cancel(self) -> None:
        """Any thread, never waits: the decode stops at its next token (one waiting for room goes on at once:
        the token's cancel wakes it)."""
        self.cancelled.set()
        self.token.cancel()

    async def stop(self) -> None:
        """Cancels and waits for generate to return."""
        self.cancel()
        if self.future is not None:
            await _wait_out(self.future)
            self.settle()

    def settle(self) -> None:
        """Keeps the Generation of a decode that returned one."""
        future = self.future
        if future is not None and future.done() and not future.cancelled() and future.exception() is None:
            self.generation = future.result()


class _Pieces:
    """The iterator of an AsyncGenerationStream. Dropping it (a loop that breaks) cancels the decode."""

    def __init__(self, stream: AsyncGenerationStream) -> None:
        self._stream = stream

    def __aiter__(self) -> "_Pieces":
        return self

    async def __anext__(self) -> str:
        decode = self._stream._decode
        if decode is None:
            decode = None if self._stream._closed else await self._stream._start()
            if decode is None:
                raise StopAsyncIteration
        if decode.read_to_end:
            raise StopAsyncIteration
        try:
            item = await decode.items.get()
        except asyncio.CancelledError:
            decode.reading_ended()
            await decode.stop()
            raise
        if item is _End:
            decode.read_to_end = True
            decode.reading_ended()
            assert decode.future is not None
            error = decode.future.exception()
            if error is not None:
                raise error
            raise StopAsyncIteration
        decode.room.give()
        return item

    def __del__(self) -> None:
        decode = self._stream._decode
        if decode is not None:
            decode.reading_ended()
            decode.cancel()
