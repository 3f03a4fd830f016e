#!/usr/bin/env python3
"""Two tool-calling agents on one engine, interleaved by asyncio: orbit.aio.

Each agent keeps its message list (its task and its last tool exchange) and its own window, as an asyncio
agent framework would: at every step it awaits `w.sync(messages, tools=...)` and `w.generate(...,
tools=..., tool_choice="required")` (the native calls run off the event loop, without the GIL), then awaits
its tool (an I/O-bound coroutine here: a slow lookup) and puts the call and its result in place of the last
exchange. `asyncio.gather` runs both agents: while one waits for its tool, the other decodes, and both
decode at the same time. At the end each agent streams its answer with `async for piece in w.stream(...)`
and stops reading past --max-words words, which cancels the decode (the window is free again right after).

    /usr/bin/python3 bindings/python/examples/async_agents.py [--model M] [--steps N] [--max-words N]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import sys
import time

try:
    import orbit
except ImportError:  # running from a checkout: use a build tree's package when one exists
    _repo = pathlib.Path(__file__).resolve().parents[3]
    for _build in sorted(_repo.glob("build*/bindings/python")):
        if (_build / "orbit" / "__init__.py").is_file():
            sys.path.insert(0, str(_build))
            break
    import orbit
from orbit import aio

REPO = pathlib.Path(__file__).resolve().parents[3]
DEFAULT_MODEL = REPO / "models" / "stories260K" / "stories260K.bin"
TOOLS = [{"type": "function", "function": {
    "name": "read_page", "description": "Read a page of the book.",
    "parameters": {"type": "object", "properties": {"page": {"type": "integer", "minimum": 1, "maximum": 5}},
                   "required": ["page"]}}}]
BOOKS = {
    "Tom": ["Tom saw a dog.", "The dog ran.", "Tom ran too.", "They found a ball.", "Then they went home."],
    "Lily": ["Lily had a cat.", "The cat was lost.", "Lily looked in the park.", "A bird sang.", "The cat came back."],
}


async def read_page(book: list[str], page: int) -> str:
    """The tool: I/O-bound (a lookup that takes a while); the other agent decodes meanwhile."""
    await asyncio.sleep(0.02)
    return f"Page {page}: {book[(page - 1) % len(book)]}"


async def agent(engine: orbit.Engine, name: str, steps: int, max_words: int, out) -> list[dict]:
    """`steps` tool calls, then a streamed answer; returns every message the agent wrote or received."""
    task = {"role": "user", "content": f"Read {name}'s book, then tell me what happened."}
    messages = [task]  # the list synced: the task and the last exchange (the story model has 512 positions)
    transcript = [task]
    async with aio.AsyncWindow(engine.new_window(label=name)) as w:
        for _ in range(steps):
            report = await w.sync(messages, tools=TOOLS)
            g = await w.generate(report.generation_prompt, tools=TOOLS, tool_choice="required", max_tokens=80)
            call = g.tool_calls[0]
            page = json.loads(call["function"]["arguments"])["page"]
            print(f"{name}: read_page({page})", file=out, flush=True)
            result = await read_page(BOOKS[name], page)
            exchange = [{"role": "assistant", "content": "", "tool_calls": g.tool_calls},
                        {"role": "tool", "tool_call_id": call["id"], "content": result}]
            messages = [task, *exchange]  # sync evicts the previous exchange and appends this one
            transcript += exchange
        report = await w.sync(messages, tools=TOOLS)
        answer = w.stream(report.generation_prompt, tools=TOOLS, tool_choice="none", max_tokens=64,
                          temperature=0.8, seed=len(name), stop=["\n", "user:"])
        text = ""
        async with answer:
            async for piece in answer:
                text += piece
                if len(text.split()) >= max_words:
                    break  # cancels the decode
        # Leaving `async with` (aclose()) waited for the decode to stop: the Generation is there.
        g = answer.generation
        print(f"{name}: {text.strip()!r}   [{g.stop_reason}, {len(g.tokens)} tokens]", file=out, flush=True)
        transcript.append({"role": "assistant", "content": text.strip()})
    return transcript


async def run(engine: orbit.Engine, steps: int = 4, max_words: int = 12, out=sys.stdout) -> list[list[dict]]:
    """Both agents together; returns their message lists."""
    return list(await asyncio.gather(*(agent(engine, name, steps, max_words, out) for name in BOOKS)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="a llama2.c .bin with its tokenizer")
    parser.add_argument("--steps", type=int, default=4, help="tool calls per agent")
    parser.add_argument("--max-words", type=int, default=12, help="the reader stops an answer past this")
    args = parser.parse_args(argv)
    with orbit.Engine(args.model) as engine:
        start = time.perf_counter()
        asyncio.run(run(engine, args.steps, args.max_words))
        print(f"both agents: {time.perf_counter() - start:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
