"""The web agent's world and its tools, shared by the in-process and the served agent (web_agent.py).

The site: the pages of a small town's news, written from word lists in the simple register of the children's
stories the bundled stories260K was trained on. Page p tells a short scene and links to pages p+1 and p+2.
The text of a page never changes, so a page read again is the same message, and sync keeps or recalls it.

The tools, as OpenAI function tools (TOOLS), each returning the text of a page, which goes back to the model as
a tool message:

    open_page {"link": 1 | 2}     open a link of the current page (pages p+1 and p+2)
    go_back   {}                  the page before the current one in the browser's history
    search    {"query": string}   the page read so far that shares the most words with the query (ties: the
                                  one read least recently, so a search finds what left the window)

The agent's plan (Agent.tool_for_step): a story model cannot plan a browse, so the loop names the tool each step
(tool_choice naming a function, as agents force a step) and the model writes its arguments under that tool's
grammar (Window.generate(tools=..., tool_choice=...) in process; the server's constrained decoding when served).
Every fourth step searches (the look-back), the step after it goes back (to where the browse was), the others
open a link.

The chat template (chat_template.jinja) is compact on purpose: the model has 512 positions, and a template
that prints each tool's JSON schema (the built-in one) spends most of them on three tools. It lists the tools
by name and description, writes one line per message, and writes a call as Llama 3 does,
{"name": ..., "parameters": {...}}, the shortest of the formats orbit reads (orbit/tool_calls.h).
"""
from __future__ import annotations

import json
import pathlib
import re

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
CHAT_TEMPLATE_FILE = HERE / "chat_template.jinja"
CHAT_TEMPLATE = CHAT_TEMPLATE_FILE.read_text()
TOOL_CALL_FORMAT = "llama3"  # how the template writes calls, and how the answers are read

SYSTEM = "Lily was a little girl who liked to read. One day she read the pages of her town, one by one."
TASK = "Read the town news."

TOOLS = [
    {"type": "function", "function": {
        "name": "open_page", "description": "open link 1 or 2 of the page",
        "parameters": {"type": "object", "properties": {"link": {"enum": [1, 2]}}, "required": ["link"]}}},
    {"type": "function", "function": {
        "name": "go_back", "description": "go back a page",
        "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {
        "name": "search", "description": "find a page you read",
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "maxLength": 16}},
                       "required": ["query"]}}},
]
TOOL_NAMES = [t["function"]["name"] for t in TOOLS]
SEARCH_EVERY = 4     # every 4th step searches (steps 3, 7, ...), and the step after goes back

HEADER = "Town news."
PLACES = ["park", "shop", "school", "farm", "beach", "garden", "pond", "zoo", "lake", "bakery", "forest", "hill"]
PEOPLE = ["Tom", "Sue", "Ben", "Amy", "Max", "Mia", "Sam", "Lucy"]
THINGS = ["a red ball", "a big cake", "a small cat", "a blue boat", "a funny hat", "a shiny toy", "a yellow bird",
          "a little dog", "a green kite", "a soft bear"]
FEELINGS = ["happy", "sad", "surprised", "scared", "proud", "excited"]
SAYINGS = ["Look at this!", "Can I play too?", "It is so pretty!", "Let us share it.", "I want to go home.",
           "Thank you, mom!"]


class Site:
    """Deterministic pages: a shared header, a short scene, and links to the next two pages."""

    def __init__(self, seed: int):
        self.seed = seed

    def place(self, page: int) -> str:
        return PLACES[page % len(PLACES)]

    def page(self, page: int) -> str:
        rng = np.random.default_rng([self.seed, 100 + page])
        place = self.place(page)
        a, b = rng.choice(len(PEOPLE), size=2, replace=False)
        thing = THINGS[rng.integers(len(THINGS))]
        feeling = FEELINGS[rng.integers(len(FEELINGS))]
        saying = SAYINGS[rng.integers(len(SAYINGS))]
        return (f"{HEADER} The {place}. {PEOPLE[a]} found {thing} at the {place}. {PEOPLE[a]} was {feeling}. "
                f"{PEOPLE[b]} said, \"{saying}\" Links: the {self.place(page + 1)}, the {self.place(page + 2)}.")


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


class Browser:
    """The tools' state: the current page, the history go_back walks, when each page was last read."""

    def __init__(self, site: Site):
        self.site = site
        self.history: list[int] = []      # pages opened, in order (go_back pops)
        self.last_read: dict[int, int] = {}  # page -> step it was last read at
        self.step = 0

    def _read(self, page: int) -> int:
        self.last_read[page] = self.step
        return page

    def run(self, name: str, arguments: dict) -> tuple[int, str]:
        """Runs one call: (the page it leads to, a label for the table). Raises ValueError for an unknown tool
        or bad arguments (the constrained decoding never writes one)."""
        if name == "open_page":
            link = arguments.get("link")
            if link not in (1, 2):
                raise ValueError(f"open_page: link {link!r} is not 1 or 2")
            current = self.history[-1] if self.history else -1
            page = current + link
            self.history.append(page)
            return self._read(page), f"open {page}"
        if name == "go_back":
            if len(self.history) > 1:
                self.history.pop()
            page = self.history[-1] if self.history else 0
            return self._read(page), f"back to {page}"
        if name == "search":
            query = words(str(arguments.get("query", "")))
            read = sorted(self.last_read)
            if not read:
                raise ValueError("search: no page has been read yet")
            # most shared words first, then the page read least recently, then the lower page
            page = min(read, key=lambda p: (-len(query & words(self.site.page(p))), self.last_read[p], p))
            self.history.append(page)
            return self._read(page), f"search {page}"
        raise ValueError(f"unknown tool {name!r} (the tools are {', '.join(TOOL_NAMES)})")

    def call(self, call: dict) -> tuple[int, str, str]:
        """Runs an OpenAI tool call {"id", "type", "function": {"name", "arguments" (JSON text)}}: (page, label,
        the tool message's content: the page's text)."""
        fn = call["function"]
        page, label = self.run(fn["name"], json.loads(fn["arguments"] or "{}"))
        return page, label, self.site.page(page)


def tool_for_step(step: int) -> str:
    """The tool the agent's plan names at `step` (tool_choice): a search every SEARCH_EVERY steps (a look back
    at a page read before), go_back right after it (back to where the browse was), open_page otherwise."""
    if step % SEARCH_EVERY == SEARCH_EVERY - 1:
        return "search"
    if step > 0 and step % SEARCH_EVERY == 0:
        return "go_back"
    return "open_page"


def describe_call(call: dict) -> str:
    """open_page({"link": 2}): a call as the table shows it."""
    return f"{call['function']['name']}({call['function']['arguments']})"


def tool_message(call: dict, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call["id"], "content": content}


def call_message(calls: list[dict]) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": calls}
