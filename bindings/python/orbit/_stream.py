"""Window.stream: an answer's text piece by piece, as Window.generate(on_text=...) releases it.

The decode runs on a worker thread (Window.generate with an on_text that queues each piece); iterating the
stream hands the pieces over as they come. Leaving the loop early (break, an exception, close()) cancels the
decode at its next piece and waits for it to stop, so the window is free again right after the loop. The
decode runs at most AHEAD pieces ahead of the reader, so a loop that breaks wastes few tokens; a reader that
takes no piece for READER_GONE_S seconds is taken to have left the stream unfinished (an iterator kept but no
longer read), and the decode then runs to its end without waiting, so it never holds the window for long.
"""

from __future__ import annotations

import queue
import threading
import weakref
from typing import TYPE_CHECKING, Any, Generator, Iterator, Optional

if TYPE_CHECKING:
    from ._orbit import Generation, Tokens, Window

AHEAD = 8  # pieces the decode may run ahead of the reader
READER_GONE_S = 1.0  # how long it waits for a reader that runs behind before it goes on alone


class GenerationStream:
    """The text of one answer as it is decoded: Window.stream(query, **generate() keyword arguments).

    Iterate it (once) for the pieces, str, each final when it comes (whole characters no stop string can take
    back); they join to the answer's text. The decode starts at the first piece asked for, on a worker thread;
    errors generate() raises (bad arguments included) are raised there. Once the loop ends, `generation` is the
    Generation (stop_reason and the rest, tool_calls and json with tools or a response_format). Leaving the
    loop early -- break, an exception in its body, close() -- cancels the decode: it stops at its next piece
    (stop_reason 'cancelled', the Generation holding what was decoded) and the loop's exit waits for that, so
    the window is usable right after. The decode runs at most 8 pieces ahead of the loop; one that takes no
    piece for a second lets it run on to its end. An iterator taken by hand (it = iter(s); next(it)) and left unfinished
    is cancelled when it is dropped, or by close() (`with window.stream(...) as s:` closes at the end). With
    tools the pieces are the raw answer, call markup included (e.g. "<tool_call>{...}</tool_call>"); the calls
    are read from the whole text into generation.tool_calls.
    """

    def __init__(self, window: "Window", query: "Tokens", kwargs: dict[str, Any]) -> None:
        if "on_text" in kwargs:
            raise TypeError("stream: on_text is the stream's own; iterate the stream for the pieces")
        self._window = window
        self._query = query
        self._kwargs = kwargs
        self._started = False
        # The running iterator, weakly: a loop that breaks drops it, and dropping it cancels the decode.
        self._pieces: Optional["weakref.ReferenceType[Generator[str, None, None]]"] = None
        self._cancel = threading.Event()
        self._generation: Optional["Generation"] = None

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
        """Cancels the decode if it runs and waits for it to stop; a stream not started never starts."""
        self._cancel.set()
        pieces = self._pieces() if self._pieces is not None else None
        if pieces is not None:
            pieces.close()

    def __enter__(self) -> "GenerationStream":
        """The stream itself; leaving the block closes it (close())."""
        return self

    def __exit__(self, *exc: object) -> None:
        """close(): a decode still running is cancelled."""
        self.close()

    def _run(self) -> Generator[str, None, None]:
        if self._cancel.is_set():
            return
        items: "queue.SimpleQueue[tuple[str, Any]]" = queue.SimpleQueue()
        room = threading.Semaphore(AHEAD)  # pieces the decode may still queue before it waits for the reader
        alone = False  # the reader stopped reading: the decode no longer waits

        def on_text(piece: str) -> bool:
            nonlocal alone
            if not alone and not self._cancel.is_set() and not room.acquire(timeout=READER_GONE_S):
                alone = True
            items.put(("piece", piece))
            return not self._cancel.is_set()

        def decode() -> None:
            try:
                items.put(("done", self._window.generate(self._query, on_text=on_text, **self._kwargs)))
            except BaseException as e:  # handed to the reader, raised there
                items.put(("error", e))

        worker = threading.Thread(target=decode, name="orbit-stream", daemon=True)
        worker.start()
        try:
            while True:
                kind, value = items.get()
                if kind == "piece":
                    room.release()
                    yield value
                elif kind == "error":
                    raise value
                else:
                    self._generation = value
                    return
        finally:
            self._cancel.set()
            room.release(AHEAD + 1)  # a decode waiting for room goes on, and stops at once
            worker.join()
            while self._generation is None and not items.empty():  # a cancelled run's Generation
                kind, value = items.get()
                if kind == "done":
                    self._generation = value


def stream(self: "Window", query: "Tokens", **kwargs: Any) -> GenerationStream:
    """The answer's text piece by piece (a GenerationStream); takes generate()'s keyword arguments but on_text.
    Leaving the loop early cancels the decode and leaves the window usable; `.generation` is the Generation."""
    return GenerationStream(self, query, kwargs)
