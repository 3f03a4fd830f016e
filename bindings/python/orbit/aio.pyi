# Type stub of orbit.aio (aio.py): Window's model calls as coroutines. The arguments are Window's (_orbit.pyi).
import types
from typing import Any, AsyncIterator, Callable, Optional, Sequence, SupportsIndex, TypeVar, Union

import numpy
import numpy.typing

from ._orbit import CancelToken, Generation, IdleReport, Messages, SyncReport, Tokens, Window

_T = TypeVar("_T")

MAX_THREADS: int  # the most calls of orbit.aio that run at once, each on a thread of its own pool

class AsyncWindow:
    """A Window whose model calls are coroutines: AsyncWindow(window); one call at a time per window (the others
    wait in turn); cancelling a generate, generate_n or stream cancels its decode at its next token (a
    CancelToken) and waits for it to stop. A call awaited in the body of a stream loop on the same window (by
    the task reading it) raises OrbitError at once naming the call, until the loop ends; close() there stops
    the stream. Other tasks' calls wait for the stream to end."""
    def __init__(self, window: Window) -> None: ...
    @property
    def window(self) -> Window: ...
    async def __aenter__(self) -> "AsyncWindow":
        """The AsyncWindow; OrbitError ("async with window: window N is closed ...") when it or its engine is
        closed, as `with window:` raises it."""
    async def __aexit__(self, *exc: object) -> None: ...
    async def call(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """fn(window, *args, **kwargs) off the loop, in the window's turn."""
    async def sync(
        self,
        messages: Messages,
        *,
        chunk_min_tokens: SupportsIndex = 64,
        chat_template: Optional[str] = None,
        tools: Union[Sequence[dict], str, None] = None,
        extra: Union[dict, str, None] = None,
    ) -> SyncReport: ...
    async def prepare_sync(
        self,
        messages: Messages,
        *,
        chunk_min_tokens: SupportsIndex = 64,
        chat_template: Optional[str] = None,
        tools: Union[Sequence[dict], str, None] = None,
        extra: Union[dict, str, None] = None,
    ) -> IdleReport: ...
    async def idle(self) -> IdleReport: ...
    async def logits(self, query: Tokens, *, all_rows: bool = False) -> numpy.typing.NDArray[numpy.float32]: ...
    async def generate(
        self,
        query: Union[Tokens, str],
        *,
        max_tokens: SupportsIndex = 32,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: SupportsIndex = 0,
        stop_tokens: Optional[Tokens] = None,
        stop: Union[str, Sequence[str], None] = None,
        tools: Union[Sequence[dict], str, None] = None,
        tool_choice: Union[str, dict, None] = "auto",
        response_format: Union[str, dict, None] = None,
        tool_call_format: Optional[str] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        logit_bias: Optional[dict[Union[int, str], float]] = None,
        logprobs: bool = False,
        top_logprobs: SupportsIndex = 0,
        constraint_trigger_block: Optional[tuple[str, str]] = None,
        cancel: Optional[CancelToken] = None,
        ignore_eos: bool = False,
    ) -> Generation:
        """Window.generate but on_text; cancelling the task cancels the decode at its next token (through a
        CancelToken, child of cancel= if given: the caller's token is left alone)."""
    async def generate_n(self, query: Union[Tokens, str], n: SupportsIndex, **kwargs: Any) -> list[Generation]:
        """Window.generate_n; cancelling the task cancels all n answers at their next token."""
    async def fork(self) -> "AsyncWindow": ...
    async def close(self) -> None: ...
    def stream(self, query: Union[Tokens, str], **kwargs: Any) -> "AsyncGenerationStream":
        """`async for piece in w.stream(prompt, max_tokens=200, stop=["\\n\\n"])`; generate()'s arguments but
        on_text, checked here: what generate() refuses raises at this call, as Window.stream does."""

class AsyncGenerationStream:
    """The text of one answer as it is decoded; `generation` once the loop ended (or after aclose()). From the
    first piece to the loop's end, the window's AsyncWindow calls awaited in the loop's body raise OrbitError."""
    @property
    def generation(self) -> Optional[Generation]: ...
    def __aiter__(self) -> AsyncIterator[str]: ...
    async def aclose(self) -> None: ...
    async def __aenter__(self) -> "AsyncGenerationStream": ...
    async def __aexit__(
        self, exc_type: Optional[type], exc: Optional[BaseException], tb: Optional[types.TracebackType]
    ) -> None: ...

_AnyWindow = Union[Window, AsyncWindow]

async def generate_many(
    requests: Sequence[Union[tuple[_AnyWindow, Tokens], tuple[_AnyWindow, Tokens, dict]]],
    *,
    cancel: Optional[CancelToken] = None,
) -> list[Generation]:
    """orbit.generate_many off the loop, once each window's lock is ours; cancelling the task cancels every
    request at its next token (a CancelToken for the call, child of cancel= if given)."""
