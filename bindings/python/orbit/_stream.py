"""Window.stream: an answer's text piece by piece, as Window.generate(on_text=...) releases it.

The decode runs on a worker thread (Window.generate with an on_text that queues each piece, and a CancelToken);
iterating the stream hands the pieces over as they come. Leaving the loop early (break, an exception, close())
cancels the token, so the decode stops at its next token (not its next piece: a stop string's possible start or a
character's first bytes may hold pieces back for many tokens), and waits for it to stop, so the window is free again
right after the loop. Window.close() or Engine.close() from the loop's body stops the decode the same way. Any other
call on the window from the loop's body (add_turn, generate, fork, evict, instances, another stream of it,
orbit.generate_many with it...) raises OrbitError at once, naming the call: the decode holds the window until it
returns, so the call would wait for the whole answer (src/stream_readers.h). That holds from the first piece until
the loop ends (its end, a break, close(); an iterator taken by hand, until it is finished, closed or dropped),
whether or not the decode returned meanwhile, so a call on the last piece fails as one on the first does; the window
answers again right after the loop. Other threads' calls wait for the decode. The decode runs at most AHEAD pieces
ahead of the reader, so a loop that breaks wastes few tokens; it waits for room in a _StreamRoom (src/wake.h), which
the token's cancel (or a parent's), the window's close and the engine's close wake at once. A reader that takes no
piece for READER_GONE_S seconds is taken to have left the stream unfinished (an iterator kept but no longer read),
and the decode then runs to its end without waiting, so it never holds the window for long (for other threads: the
reader's own calls raise until the loop ends).
"""

from __future__ import annotations

import queue
import threading
import weakref
from typing import TYPE_CHECKING, Any, Generator, Iterator, Optional

from ._orbit import CancelToken, _check_stream_arguments, _StreamRoom

if TYPE_CHECKING:
    from ._orbit import Generation, Tokens, Window

AHEAD = 8  # pieces the decode may run ahead of the reader
READER_GONE_S = 1.0  # how long it waits for a reader that runs behind before it goes on alone


class GenerationStream:
    """The text of one answer as it is decoded: Window.stream(query, **generate() keyword arguments).

    Iterate it (once) for the pieces, str, each final when it comes (whole characters no stop string can take back);
    they join to the answer's text. Its arguments are checked when it is made: what generate() refuses for them (a
    bad query, seed=-1, an unknown keyword...) raises here, naming the argument, as generate() raises it. The decode
    starts at the first piece asked for, on a worker thread; errors it meets are raised there. Once the loop ends,
    `generation` is the Generation (stop_reason and the rest, tool_calls and json with tools or a response_format).
    Leaving the loop early -- break, an exception in its body, close() -- cancels the decode through a CancelToken:
    it stops at its next token (stop_reason 'cancelled', the Generation holding what was decoded) and the loop's
    exit waits for that, so the window is usable right after. window.close() or engine.close() in the loop's body
    (or on another thread) stops the decode at its next token too, waking it at once if it waits for the loop (the
    loop then ends with what was queued). Any other call on the window from the loop's body -- add_turn, generate,
    fork, evict, reading instances, a second stream of it, orbit.generate_many with it -- raises OrbitError at once
    naming the call, from the first piece to the loop's end: the decode holds the window until it returns, so the
    call could only wait for the whole answer; make it after the loop (break first to stop the decode early), or use
    another window (a fork() made before the loop). An iterator taken by hand counts as the loop until it is
    finished, closed or dropped. Other threads' calls wait for the decode. A cancel= given is the parent of the
    stream's token: cancelling it stops the stream as well. The decode runs at most 8 pieces ahead of the loop; one
    that takes no piece for a second lets it run on to its end. An iterator taken by hand (it = iter(s); next(it))
    and left unfinished is cancelled when it is dropped, or by close() (`with window.stream(...) as s:` closes at
    the end). With tools the pieces are the raw answer, call markup included (e.g. "<tool_call>{...}</tool_call>");
    the calls are read from the whole text into generation.tool_calls.
    """

    def __init__(self, window: "Window", query: "Tokens", kwargs: dict[str, Any]) -> None:
        if "on_text" in kwargs:
            raise TypeError("stream: on_text is the stream's own; iterate the stream for the pieces")
        parent = kwargs.pop("cancel", None)
        if parent is not None and not isinstance(parent, CancelToken):
            raise TypeError(f"stream: cancel must be an orbit.CancelToken or None, got {type(parent).__name__}")
        # Refused here, as generate() refuses them, rather than at the first piece.
        _check_stream_arguments(window, query, kwargs)
        self._window = window
        self._query = query
        self._kwargs = kwargs
        self._started = False
        # The running iterator, weakly: a loop that breaks drops it, and dropping it cancels the decode.
        self._pieces: Optional["weakref.ReferenceType[Generator[str, None, None]]"] = None
        self._closed = False  # close() was called: a stream not started never starts
        self._token = CancelToken(parent)  # the decode's: cancelled when the loop is left
        self._generation: Optional["Generation"] = None
        self._ended = threading.Event()  # the iterator finished (its decode stopped and the window is free)

    @property
    def generation(self) -> Optional["Generation"]:
        """The Generation once the stream ended (None before, and when generate() raised)."""
        return self._generation

    def __iter__(self) -> Iterator[str]:
        """The pieces (once): the decode starts at the first one asked for. Dropping the iterator before its
        end (a loop that breaks) cancels the decode and waits for it to stop."""
        if self._started:
            raise RuntimeError("a GenerationStream is iterated once")
        self._started = True
        pieces = self._run()
        self._pieces = weakref.ref(pieces)
        return pieces

    def close(self) -> None:
        """Cancels the decode if it runs and waits for it to stop; a stream not started never starts. From
        another thread than the loop's too (a Stop button): that loop then ends once the decode stops."""
        self._closed = True
        self._token.cancel()
        pieces = self._pieces() if self._pieces is not None else None
        if pieces is not None:
            try:
                pieces.close()
            except ValueError:  # "generator already executing": another thread's loop waits in it for a piece;
                self._ended.wait()  # the cancel ends that wait, and the loop, once the decode stops

    def __enter__(self) -> "GenerationStream":
        """The stream itself; leaving the block closes it (close())."""
        return self

    def __exit__(self, *exc: object) -> None:
        """close(): a decode still running is cancelled."""
        self.close()

    def _run(self) -> Generator[str, None, None]:
        try:
            yield from self._pieces_until_done()
        finally:
            self._ended.set()

    def _pieces_until_done(self) -> Generator[str, None, None]:
        if self._closed:
            return
        items: "queue.SimpleQueue[tuple[str, Any]]" = queue.SimpleQueue()
        # Pieces the decode may still queue before it waits for the reader. take() returns at once (True) when
        # the token is cancelled or the window or its engine begins closing: the decode then stops at its next
        # token. False: the reader took nothing for READER_GONE_S (it is taken to have left).
        room = _StreamRoom(AHEAD, self._token, self._window)
        alone = False  # the reader stopped reading: the decode no longer waits

        def on_text(piece: str) -> bool:
            nonlocal alone
            if not alone and not self._token.cancelled and not room.take(READER_GONE_S):
                alone = True
            items.put(("piece", piece))
            return True  # the token stops the decode (at its next token)

        def decode() -> None:
            try:
                generation = self._window.generate(self._query, on_text=on_text, cancel=self._token, **self._kwargs)
                items.put(("done", generation))
            except BaseException as e:  # handed to the reader, raised there
                items.put(("error", e))

        # This thread runs the loop's body: until the loop ends (its end, a break, close()), the window's calls
        # made on it raise at once instead of waiting for a decode that waits for the loop. Until the loop ends,
        # not until the decode returns: a call on the last piece would else raise or not as the decode raced it.
        room.hold_reader()
        worker = threading.Thread(target=decode, name="orbit-stream", daemon=True)
        try:
            worker.start()
        except BaseException:
            room.release_reader()
            raise
        try:
            while True:
                kind, value = items.get()
                if kind == "piece":
                    room.give()
                    yield value
                elif kind == "error":
                    raise value
                else:
                    self._generation = value
                    return
        finally:
            self._token.cancel()  # wakes a decode waiting for room: it goes on, and stops at its next token
            worker.join()
            room.release_reader()  # the window is free: this thread may call it again
            while self._generation is None and not items.empty():  # a cancelled run's Generation
                kind, value = items.get()
                if kind == "done":
                    self._generation = value


def stream(self: "Window", query: "Tokens", **kwargs: Any) -> GenerationStream:
    """The answer's text piece by piece (a GenerationStream); takes generate()'s keyword arguments but on_text,
    checked here (what generate() refuses raises at this call, naming the argument). Leaving the loop early
    cancels the decode and leaves the window usable; `.generation` is the Generation. A call on the window from
    the loop's body raises OrbitError at once (close() stops the stream instead)."""
    return GenerationStream(self, query, kwargs)
