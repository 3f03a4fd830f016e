#!/usr/bin/env python3
"""Web agent: a browsing episode over many steps on an orbit window, driven by a message list.

The agent keeps its conversation as chat messages, as it would for a chat API, and hands the whole list to
`Window.sync` at every step (sdk/include/orbit/sync.h): the system prompt, then per step the page it read
(a tool message), its action (an assistant message) and the observation (a user message). The list keeps
the last three pages: the oldest page message leaves it, and sync slides that page out of the window. Now
and then the agent looks back at an earlier page: its message returns, and sync recalls it (the page's
canonical comes from the store and gets a fresh patch on its current context). When the transcript outgrows
the model's positions, the oldest action and observation messages leave the list and sync evicts them (the
system message stays). Pages are chunks (encoded once, stored position-free): sync makes a chunk of every
message at least as long as the shortest page, and keeps the shorter messages as live turns.

    window  [ system | ...transcript turns... | page p-2 | act | obs | page p-1 | act | obs | page p | act | obs ]

Everything is text, tokenized by the model's tokenizer and rendered one message per line (the chat template
below: a story model reads plain lines): the pages of a small town's website, written from word lists in
the simple register of the children's stories the bundled stories260K was trained on (each page shares the
site's header and tells its own short scene), the agent's action (decoded greedily by the model after "Then
Lily went to the") and the observation. The table and the report show that text. Every number is measured
on real model computation (the bundled stories260K, or --model with a tokenizer).

    /usr/bin/python3 samples/web-agent/web_agent.py            # 32 steps on the bundled model
    /usr/bin/python3 samples/web-agent/web_agent.py --short    # 8 steps (what the tests run)

Served mode: the same agent drives `orbit serve` through the OpenAI chat-completions protocol (chat_client.py,
standard library only): every step sends the whole message list to /v1/chat/completions under one session
(X-Orbit-Session), the answer is the action, and at the end it prints orbit's forward tokens against the radix
cache's, from each answer's usage.orbit and from GET /v1/sessions/{id}. The server renders the messages with
the model's chat template (the plain one for stories260K) and makes chunks of its own size.

    /usr/bin/python3 samples/web-agent/web_agent.py --serve                         # starts build/cli/orbit serve
    /usr/bin/python3 samples/web-agent/web_agent.py --server http://127.0.0.1:8000  # a server already running
"""
from __future__ import annotations

import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "common"))
import sample_kit as kit  # noqa: E402

KEEP = 3              # pages kept in the window
LOOK_BACK_EVERY = 4   # every 4th step revisits an earlier page
ACTION_TOKENS = 6     # tokens the agent decodes for its action
SYSTEM = "Lily was a little girl who liked to read. One day she read the pages of her town, one by one."
ACTION_QUERY = "Then Lily went to the"    # the agent decodes its next action after it
PROBE = "Lily looked at the page and"      # the fidelity probe, read after the window
CHAT_TEMPLATE = "{% for message in messages %}{{ message.content }}\n{% endfor %}"  # one message per line

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


def run(model=kit.DEFAULT_MODEL, *, steps: int = 32, policy: str = "default", out=None, seed: int = 0,
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
                                     f"transcript, a look-back every {LOOK_BACK_EVERY} steps, synced from a "
                                     f"message list (samples/web-agent, seed {seed}).",
                         probe=probe, progress=progress, keep_logits=dump_logits)
        # pages become chunks, the shorter system, action and observation messages live turns
        chunk_min = min(len(engine.tokenize(site.page(p), bos=False)) for p in range(steps))
        # the list: (message, note): the note names the message in the operations (a turn) or the trace (a chunk)
        entries = [({"role": "system", "content": SYSTEM}, "system")]

        def messages() -> list[dict]:
            return [m for m, _ in entries]

        def sync() -> None:
            ep.sync(messages(), {k: note for k, (_, note) in enumerate(entries)}, chat_template=CHAT_TEMPLATE,
                    chunk_min_tokens=chunk_min)

        def fits() -> bool:
            plan = window.plan_sync(messages(), chat_template=CHAT_TEMPLATE, chunk_min_tokens=chunk_min)
            return len(plan.tokens) + len(ep.probe) <= budget

        new_pages: list[int] = []
        for step in range(steps):
            look_back = step >= LOOK_BACK_EVERY and step % LOOK_BACK_EVERY == LOOK_BACK_EVERY - 1
            # a look-back revisits the page first seen KEEP+1 new pages ago (it has left the list)
            page = new_pages[-(KEEP + 1)] if look_back else len(new_pages)
            ep.begin_step(f"{'back to' if look_back else 'page'} {page}")
            if step == 0:
                ep.note_text("system", SYSTEM)
            text = site.page(page)
            # the oldest page leaves the list (sync slides it out), the page read joins it
            pages = [k for k, (m, _) in enumerate(entries) if m["role"] == "tool"]
            if len(pages) >= KEEP:
                del entries[pages[0]]
            entries.append(({"role": "tool", "content": text}, f"page{page}"))
            sync()
            ep.note_text("look back" if look_back else "page", text)
            action = engine.detokenize(action_query + ep.generate(action_query, max_tokens=ACTION_TOKENS)).strip()
            entries.append(({"role": "assistant", "content": action}, "action"))
            ep.note_text("action", action)
            observation = site.observation(page)
            entries.append(({"role": "user", "content": observation}, "observation"))
            ep.note_text("observation", observation)
            # the transcript grows; stay within the model's positions: the oldest turns leave the list
            while not fits():
                oldest = next((k for k, (m, _) in enumerate(entries) if m["role"] in ("assistant", "user")), None)
                if oldest is None:
                    break
                del entries[oldest]
            sync()
            if not look_back:
                new_pages.append(page)
            ep.end_step()
        title = (f"web agent on {pathlib.Path(str(model)).name}: {steps} steps, policy {window.policy.name}")
        meta = {"model": str(model), "fingerprint": info.fingerprint, "policy": window.policy.name,
                "steps_requested": steps, "seed": seed, "keep": KEEP, "system": SYSTEM,
                "action_query": ACTION_QUERY, "probe_text": PROBE}
        return kit.finish(ep, window, out, meta, title)


# ---- served mode: the agent as an OpenAI client of `orbit serve` ------------------------------------------

def agent_messages(entries: list[dict], step: int, new_pages: list[int], site: Site) -> tuple[str, int, bool]:
    """The served agent's step: the oldest page leaves the list and the page read joins it (as run() does);
    returns (label, page, look_back)."""
    look_back = step >= LOOK_BACK_EVERY and step % LOOK_BACK_EVERY == LOOK_BACK_EVERY - 1
    page = new_pages[-(KEEP + 1)] if look_back else len(new_pages)
    pages = [k for k, m in enumerate(entries) if m["role"] == "tool"]
    if len(pages) >= KEEP:
        del entries[pages[0]]
    entries.append({"role": "tool", "content": site.page(page)})
    return f"{'back to' if look_back else 'page'} {page}", page, look_back


def trim_transcript(entries: list[dict], budget: int, tokens_per_char: float, margin: int) -> None:
    """Drops the oldest action and observation messages while the list's estimated prompt (its characters
    times the tokens per character the server last reported) plus `margin` passes `budget` positions."""
    def estimate() -> float:
        return tokens_per_char * sum(len(m["content"]) + len(m["role"]) + 3 for m in entries)

    while estimate() + margin > budget:
        oldest = next((k for k, m in enumerate(entries) if m["role"] in ("assistant", "user")), None)
        if oldest is None:
            return
        del entries[oldest]


def run_served(url: str, *, steps: int = 32, seed: int = 0, out=None, session: str = "", quiet: bool = False) -> dict:
    """The web agent against an OpenAI-compatible orbit server at `url`: one chat completion per step, the
    whole message list each time. Prints a table per step and orbit vs the radix cache; writes
    web-agent-served.report.json. Returns the report."""
    import json

    import chat_client

    out = pathlib.Path(out or kit.REPO / "out" / "web-agent")
    session = session or f"web-agent-{seed}-{int(time.time())}"
    client = chat_client.ChatClient(url, session=session)
    (model,) = client.models()[:1]
    budget = int(0.75 * model["context_length"]) if model.get("context_length") else 4096
    site = Site(seed)
    entries = [{"role": "system", "content": SYSTEM}]
    new_pages: list[int] = []
    rows, tokens_per_char = [], 0.5
    progress = None if quiet else kit.Progress(steps, "web-agent (served)")
    for step in range(steps):
        label, page, look_back = agent_messages(entries, step, new_pages, site)
        # room for this request's answer and the next step's page, action and observation
        trim_transcript(entries, budget - ACTION_TOKENS, tokens_per_char, margin=0)
        t0 = time.perf_counter()
        answer = client.chat(model["id"], entries, max_tokens=ACTION_TOKENS)
        seconds = time.perf_counter() - t0
        usage = answer["usage"]
        tokens_per_char = usage["prompt_tokens"] / max(1, sum(len(m["content"]) + len(m["role"]) + 3
                                                               for m in entries))
        action = answer["choices"][0]["message"]["content"] or ""
        rows.append({"step": step, "label": label, "messages": len(entries), "seconds": seconds,
                     "prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
                     "finish_reason": answer["choices"][0]["finish_reason"], "answer": action,
                     "orbit": usage.get("orbit")})
        entries.append({"role": "assistant", "content": action})
        entries.append({"role": "user", "content": site.observation(page)})
        if not look_back:
            new_pages.append(page)
        if progress:
            o = usage.get("orbit") or {}
            progress.update(1, f"{label}: fwd {o.get('forward_tokens', 0):.0f} radix {o.get('radix_cache_tokens', 0):.0f}")
    info = client.session_info()
    forward = sum((r["orbit"] or {}).get("forward_tokens", 0) for r in rows)
    radix = sum((r["orbit"] or {}).get("radix_cache_tokens", 0) for r in rows)
    idle = sum((r["orbit"] or {}).get("idle_forward_tokens", 0) for r in rows)
    head = f"{'step':>4}  {'what':<11} {'msgs':>4} {'prompt':>6} {'fwd tok':>7} {'radix':>6} {'ms':>7}  plan / answer"
    lines = [f"web agent served by {url} (model {model['id']}, session {session}): {steps} steps", head,
             "-" * len(head)]
    for r in rows:
        o = r["orbit"] or {}
        lines.append(f"{r['step']:>4}  {r['label']:<11} {r['messages']:>4} {r['prompt_tokens']:>6} "
                     f"{o.get('forward_tokens', 0):>7.0f} {o.get('radix_cache_tokens', 0):>6.0f} "
                     f"{1e3 * r['seconds']:>7.1f}  {o.get('plan', '')} | {kit.clip(r['answer'], 40)}")
    savings = info["savings"]
    lines += ["-" * len(head),
              f"forward tokens (usage.orbit, summed): orbit {forward:.0f} vs the radix cache {radix:.0f} "
              f"({forward / radix if radix else float('nan'):.2f}x); {idle:.0f} more in idle time",
              f"GET /v1/sessions/{session}: {info['requests']} requests, orbit {savings['forward_tokens']:.0f} vs "
              f"radix {savings['radix_cache_tokens']:.0f} (ratio {savings['ratio']:.2f}, saved "
              f"{savings['saved_tokens']:.0f})"]
    print("\n".join(lines))
    report = {"url": url, "model": model, "session": session, "steps": rows, "session_info": info,
              "totals": {"forward_tokens": forward, "radix_cache_tokens": radix, "idle_forward_tokens": idle}}
    out.mkdir(parents=True, exist_ok=True)
    path = out / "web-agent-served.report.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"report: {path}")
    return report


def main(argv=None) -> int:
    ap = kit.arg_parser(__doc__.split("\n\n")[0], "web-agent", default_steps=32, short_steps=8)
    ap.add_argument("--server", metavar="URL",
                    help="drive an OpenAI-compatible orbit server at URL (e.g. http://127.0.0.1:8000) instead of "
                         "a window in this process")
    ap.add_argument("--serve", action="store_true",
                    help="start `orbit serve --model MODEL --port 0` on 127.0.0.1 (with --policy), drive it, stop it")
    ap.add_argument("--orbit", default=str(kit.REPO / "build" / "cli" / "orbit"),
                    help="the orbit executable --serve runs (default: build/cli/orbit)")
    ap.add_argument("--session", default="", help="the X-Orbit-Session of the served mode (default: a new one)")
    args = ap.parse_args(argv)
    steps = 8 if args.short else args.steps
    if args.server or args.serve:
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
        import chat_client

        if args.server:
            run_served(args.server, steps=steps, seed=args.seed, out=args.out, session=args.session, quiet=args.quiet)
            return 0
        try:
            with chat_client.OrbitServer(args.orbit, args.model, policy=args.policy) as server:
                run_served(server.url, steps=steps, seed=args.seed, out=args.out, session=args.session,
                           quiet=args.quiet)
        except chat_client.ServeUnavailable as e:
            sys.exit(f"error: {e}")
        return 0
    result = run(args.model, steps=steps, policy=args.policy, out=args.out, seed=args.seed, threads=args.threads,
                 dump_logits=args.dump_logits, quiet=args.quiet)
    kit.print_outputs(result["paths"], args.model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
