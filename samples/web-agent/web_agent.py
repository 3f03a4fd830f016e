#!/usr/bin/env python3
"""Web agent: a browsing episode over many steps on an orbit window.

Every step the agent reads a page: the page's text becomes a chunk (encoded once, stored position-free) and
the step's action and observation become live turns. The window keeps the last three pages over a growing
transcript (slide) and now and then looks back at an earlier page (recall: the page's canonical comes from
the store and gets a fresh patch on its current context). When the transcript outgrows the model's
positions, the oldest turns are evicted (the system turn stays).

    window  [ system | ...transcript turns... | page p-2 | act | obs | page p-1 | act | obs | page p | act | obs ]

Everything is text, tokenized by the model's tokenizer: the pages of a small town's website, written from
word lists in the simple register of the children's stories the bundled stories260K was trained on (each
page shares the site's header and tells its own short scene), the agent's action (decoded greedily by the
model after "Then Lily went to the") and the observation. The table and the report show that text. Every
number is measured on real model computation (the bundled stories260K, or --model with a tokenizer).

    /usr/bin/python3 samples/web-agent/web_agent.py            # 32 steps on the bundled model
    /usr/bin/python3 samples/web-agent/web_agent.py --short    # 8 steps (what the tests run)
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "common"))
import sample_kit as kit  # noqa: E402

KEEP = 3              # pages kept in the window
LOOK_BACK_EVERY = 4   # every 4th step revisits an earlier page
ACTION_TOKENS = 6     # tokens the agent decodes for its action
SYSTEM = "Lily was a little girl who liked to read. One day she read the pages of her town, one by one."
ACTION_QUERY = "Then Lily went to the"    # the agent decodes its next action after it
PROBE = "Lily looked at the page and"      # the fidelity probe, read after the window

HEADER = "Town news."
PLACES = ["park", "shop", "school", "farm", "beach", "garden", "pond", "zoo", "lake", "bakery", "forest", "hill"]
PEOPLE = ["Tom", "Sue", "Ben", "Amy", "Max", "Mia", "Sam", "Lucy"]
THINGS = ["a red ball", "a big cake", "a small cat", "a blue boat", "a funny hat", "a shiny toy", "a yellow bird",
          "a little dog", "a green kite", "a soft bear"]
FEELINGS = ["happy", "sad", "surprised", "scared", "proud", "excited"]
SAYINGS = ["Look at this!", "Can I play too?", "It is so pretty!", "Let us share it.", "I want to go home.",
           "Thank you, mom!"]


class Site:
    """Deterministic pages of a small town's website: a shared header, then a short scene per page."""

    def __init__(self, seed: int):
        self.seed = seed

    def page(self, page: int) -> str:
        rng = np.random.default_rng([self.seed, 100 + page])
        place = PLACES[page % len(PLACES)]
        a, b = rng.choice(len(PEOPLE), size=2, replace=False)
        thing = THINGS[rng.integers(len(THINGS))]
        feeling = FEELINGS[rng.integers(len(FEELINGS))]
        saying = SAYINGS[rng.integers(len(SAYINGS))]
        return (f"{HEADER} The {place}. {PEOPLE[a]} found {thing} at the {place}. {PEOPLE[a]} was {feeling}. "
                f"{PEOPLE[b]} said, \"{saying}\"")

    def title(self, page: int) -> str:
        return PLACES[page % len(PLACES)]

    def observation(self, page: int) -> str:
        return f"She read the page about the {self.title(page)}."


def run(model=kit.DEFAULT_MODEL, *, steps: int = 32, policy: str = "patch:16", out=None, seed: int = 0,
        threads: int = 0, dump_logits: bool = False, quiet: bool = False) -> dict:
    """Runs the episode, prints the summary table, writes the outputs; returns the report's paths and totals."""
    orbit = kit.import_orbit()
    out = pathlib.Path(out or kit.REPO / "out" / "web-agent")
    with orbit.Engine(str(model), page_size=16, threads=threads) as engine:
        info = engine.model_info
        kit.check_has_tokenizer(engine, "the web agent")
        budget = int(0.75 * info.max_positions) if info.max_positions else 4096
        site = Site(seed)
        system = engine.tokenize(SYSTEM, bos=True)
        action_query = engine.tokenize(ACTION_QUERY, bos=False)
        probe = engine.tokenize(PROBE, bos=False)
        longest_page = max(len(engine.tokenize(site.page(p), bos=False)) for p in range(len(PLACES)))
        kit.check_model_fits(info, len(system) + KEEP * (longest_page + 24) + len(probe) + ACTION_TOKENS,
                             "the web agent")
        window = engine.new_window(policy=policy, label="web-agent")
        progress = None if quiet else kit.Progress(steps, "web-agent")
        ep = kit.Episode(orbit, engine, window, name="web-agent",
                         description=f"Web agent: {steps} steps, the last {KEEP} pages over a growing "
                                     f"transcript, a look-back every {LOOK_BACK_EVERY} steps "
                                     f"(samples/web-agent, seed {seed}).",
                         probe=probe, progress=progress, keep_logits=dump_logits)
        new_pages: list[int] = []
        for step in range(steps):
            look_back = step >= LOOK_BACK_EVERY and step % LOOK_BACK_EVERY == LOOK_BACK_EVERY - 1
            # a look-back revisits the page first seen KEEP+1 new pages ago (it has been slid out)
            page = new_pages[-(KEEP + 1)] if look_back else len(new_pages)
            ep.begin_step(f"{'back to' if look_back else 'page'} {page}")
            if step == 0:
                ep.add_turn(system, note="system")
                ep.note_text("system", engine.detokenize(system))
            text = site.page(page)
            tokens = engine.tokenize(text, bos=False)
            chunk = engine.add_tokens(tokens, label=f"page {page}")
            ep.register(chunk, tokens, f"page{page}")
            if chunk not in window:
                # make room first: the oldest page leaves; survivors are relocated only
                while sum(1 for i in window.instances if not i.is_turn) >= KEEP:
                    ep.slide(1)
                if chunk in window.evicted:
                    ep.recall(chunk)    # look back: canonical from the store, a fresh patch on this context
                    ep.note_text("look back", engine.detokenize(tokens))
                else:
                    ep.admit(chunk)
                    ep.note_text("page", engine.detokenize(tokens))
            action = ep.generate(action_query, max_tokens=ACTION_TOKENS)
            ep.add_turn(action_query + action, note="action")
            ep.note_text("action", engine.detokenize(action_query + action))
            observation = site.observation(page)
            observation = engine.tokenize(observation, bos=False)
            ep.add_turn(observation, note="observation")
            ep.note_text("observation", engine.detokenize(observation))
            # the transcript grows; stay within the model's positions by evicting the oldest turns
            while window.tokens + len(ep.probe) > budget:
                turns = [i for i in window.instances if i.is_turn]
                if len(turns) <= 1:
                    break
                ep.evict(turns[1])     # turns[0] is the system turn
            if not look_back:
                new_pages.append(page)
            ep.end_step()
        title = (f"web agent on {pathlib.Path(str(model)).name}: {steps} steps, policy {window.policy.name}")
        meta = {"model": str(model), "fingerprint": info.fingerprint, "policy": window.policy.name,
                "steps_requested": steps, "seed": seed, "keep": KEEP, "system": SYSTEM,
                "action_query": ACTION_QUERY, "probe_text": PROBE}
        return kit.finish(ep, window, out, meta, title)


def main(argv=None) -> int:
    return kit.main(run, __doc__.split("\n\n")[0], "web-agent", default_steps=32, short_steps=8, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
