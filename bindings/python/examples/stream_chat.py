#!/usr/bin/env python3
"""A chat turn streamed to the user as it is decoded, ended by stop strings, cut short by the reader.

An agent keeps its conversation as a message list and syncs the window to it (window.sync). Each answer is
read with `window.stream(prompt, stop=[...])`: the pieces print as they come (whole characters; text a stop
string could still take back is held until it cannot), the answer ends right before a stop string, and the
loop may leave early (here: once the answer holds --max-words words), which cancels the decode at once and
leaves the window free for the next turn. The streamed text is what goes back into the list.

The same with a callback, for code that wants no iterator: window.generate(prompt, stop=..., on_text=f),
where f(piece) returning False cancels.

    /usr/bin/python3 bindings/python/examples/stream_chat.py [--model M] [--max-words N]
"""
from __future__ import annotations

import argparse
import pathlib
import sys

try:
    import orbit
except ImportError:  # running from a checkout: use a build tree's package when one exists
    _repo = pathlib.Path(__file__).resolve().parents[3]
    for _build in sorted(_repo.glob("build*/bindings/python")):
        if (_build / "orbit" / "__init__.py").is_file():
            sys.path.insert(0, str(_build))
            break
    import orbit

REPO = pathlib.Path(__file__).resolve().parents[3]
DEFAULT_MODEL = REPO / "models" / "stories260K" / "stories260K.bin"
QUESTIONS = ["What did the dog find?", "Where did they go next?", "How did the day end?"]
STOP = ["\n", "user:"]  # the end of the assistant's line, or the model starting the user's turn itself


def chat(engine: orbit.Engine, max_words: int, out=sys.stdout) -> list[dict]:
    """Three streamed turns; returns the message list. An answer past max_words words is cut by the reader."""
    window = engine.new_window()
    messages = [{"role": "system", "content": "You tell short stories about Lily and her dog."}]
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        report = window.sync(messages)
        print(f"user: {question}\nassistant:", end="", file=out, flush=True)
        answer = window.stream(report.generation_prompt, max_tokens=64, temperature=0.8, seed=len(messages),
                               stop=STOP)
        text = ""
        for piece in answer:
            print(piece, end="", file=out, flush=True)
            text += piece
            if len(text.split()) >= max_words:
                break  # cancels the decode; the window is free right after the loop
        g = answer.generation
        print(f"   [{g.stop_reason}, {len(g.tokens)} tokens]", file=out)
        messages.append({"role": "assistant", "content": text.strip()})
    return messages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="a model with a tokenizer")
    parser.add_argument("--max-words", type=int, default=12, help="the reader stops an answer past this many")
    args = parser.parse_args(argv)
    with orbit.Engine(args.model) as engine:
        chat(engine, args.max_words)
    return 0


if __name__ == "__main__":
    sys.exit(main())
