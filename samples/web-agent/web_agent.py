#!/usr/bin/env python3
"""Web agent: a browsing episode over many steps on an orbit window.

Every step the agent looks at a page: the page's screenshot becomes a chunk (encoded once, stored
position-free) and the step's action and observation become live turns. The window keeps the last three
screenshots over a growing transcript (slide) and now and then looks back at an earlier page (recall: the
screenshot's canonical comes from the store and gets a fresh patch on its current context). When the
transcript outgrows the model's positions, the oldest turns are evicted (the system turn stays).

    window  [ system | ...transcript turns... | shot p-2 | act | obs | shot p-1 | act | obs | shot p | act | obs ]

Screenshots are synthetic: the bundled model has no vision tower, so a screenshot is a deterministic token
stream standing for the page's visual tokens: a site layout shared by every page (header, navigation,
repeated background), with a few tokens that distinguish the page. The agent's action is decoded by the
model (greedy) after an "action:" query; the observation is a short deterministic text. Every number is
measured on real model computation (the bundled stories260K, or --model).

    /usr/bin/python3 samples/web-agent/web_agent.py            # 32 steps on the bundled model
    /usr/bin/python3 samples/web-agent/web_agent.py --short    # 8 steps (what the tests run)
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "common"))
import sample_kit as kit  # noqa: E402

SHOT_TOKENS = 32      # visual tokens per screenshot
KEEP = 3              # screenshots kept in the window
LOOK_BACK_EVERY = 4   # every 4th step revisits an earlier page
SYSTEM = [10, 11, 12, 13, 14, 15, 16, 17]   # "you are a browsing agent; task: ..."
ACTION_QUERY = [40, 41]                     # "action:" — the agent decodes its next action after it
PROBE = [40, 41, 42, 43]                    # the fidelity probe: "action: next page" read after the window


class Site:
    """Deterministic synthetic pages: screenshots share a layout; a few tokens tell pages apart."""

    def __init__(self, vocab: int, seed: int):
        self.vocab, self.seed = vocab, seed
        rng = np.random.default_rng([seed, 7])
        self.header = rng.integers(50, 500, size=6)
        self.nav = rng.integers(50, 500, size=4)
        self.background = rng.integers(50, 500, size=3)
        self.footer = rng.integers(50, 500, size=4)

    def screenshot(self, page: int) -> list[int]:
        rng = np.random.default_rng([self.seed, 100 + page])
        body = np.resize(self.background, SHOT_TOKENS - 14)     # redundant background, repeated
        slots = rng.choice(len(body), size=4, replace=False)    # a few tokens that make the page this page
        body[slots] = rng.integers(50, 500, size=4)
        return kit.token_ids(np.concatenate([self.header, self.nav, body, self.footer]), self.vocab)

    def observation(self, page: int, action: list[int]) -> list[int]:
        return kit.token_ids([30, 31, page * 7 + 60, page * 13 + 61] + [a + 1 for a in action[:2]], self.vocab)


def run(model=kit.DEFAULT_MODEL, *, steps: int = 32, policy: str = "patch:16", out=None, seed: int = 0,
        threads: int = 0, dump_logits: bool = False, quiet: bool = False) -> dict:
    """Runs the episode, prints the summary table, writes the outputs; returns the report's paths and totals."""
    orbit = kit.import_orbit()
    out = pathlib.Path(out or kit.REPO / "out" / "web-agent")
    with orbit.Engine(str(model), page_size=16, threads=threads) as engine:
        info = engine.model_info
        vocab = info.vocab_size
        budget = int(0.75 * info.max_positions) if info.max_positions else 4096
        kit.check_model_fits(info, len(SYSTEM) + KEEP * (SHOT_TOKENS + 12) + len(PROBE) + 8, "the web agent")
        site = Site(vocab, seed)
        window = engine.new_window(policy=policy, label="web-agent")
        progress = None if quiet else kit.Progress(steps, "web-agent")
        ep = kit.Episode(orbit, engine, window, name="web-agent",
                         description=f"Web agent: {steps} steps, the last {KEEP} screenshots over a growing "
                                     f"transcript, a look-back every {LOOK_BACK_EVERY} steps "
                                     f"(samples/web-agent, seed {seed}).",
                         probe=kit.token_ids(PROBE, vocab), progress=progress, keep_logits=dump_logits)
        new_pages: list[int] = []
        for step in range(steps):
            look_back = step >= LOOK_BACK_EVERY and step % LOOK_BACK_EVERY == LOOK_BACK_EVERY - 1
            # a look-back revisits the page first seen KEEP+1 new pages ago (its screenshot has been slid out)
            page = new_pages[-(KEEP + 1)] if look_back else len(new_pages)
            ep.begin_step(f"{'back to' if look_back else 'page'} {page}")
            if step == 0:
                ep.add_turn(kit.token_ids(SYSTEM, vocab), note="system")
            tokens = site.screenshot(page)
            shot = engine.add_tokens(tokens, label=f"shot {page}")
            ep.register(shot, tokens, f"shot{page}")
            if shot not in window:
                # make room first: the oldest screenshot leaves; survivors are relocated only
                while sum(1 for i in window.instances if not i.is_turn) >= KEEP:
                    ep.slide(1)
                if shot in window.evicted:
                    ep.recall(shot)    # look back: canonical from the store, a fresh patch on this context
                else:
                    ep.admit(shot)
            action = ep.generate(kit.token_ids(ACTION_QUERY, vocab), max_tokens=3)
            ep.add_turn(kit.token_ids(ACTION_QUERY, vocab) + action, note="action")
            ep.add_turn(site.observation(page, action), note="observation")
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
                "steps_requested": steps, "seed": seed, "shot_tokens": SHOT_TOKENS, "keep": KEEP}
        return kit.finish(ep, window, out, meta, title)


def main(argv=None) -> int:
    return kit.main(run, __doc__.split("\n\n")[0], "web-agent", default_steps=32, short_steps=8, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
