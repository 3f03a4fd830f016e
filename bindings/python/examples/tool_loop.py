#!/usr/bin/env python3
"""A tool-calling agent loop on orbit windows, as agent frameworks write one: a message list, synced.

An agent browses. It keeps the conversation as a list of chat messages, as it would for a chat API, and at
every step hands the whole list to `window.sync(messages)`, which turns what changed into window operations
(sdk/include/orbit/sync.h). The model (one token sampled over its window) picks a tool, the tool returns an
observation, and the loop edits its list:

    tool            returns                              the message list
    open_page(p)    a screenshot of page p (embeddings)  a tool message whose content holds the screenshot
                                                          chunk as a part; at most --keep screenshot messages
                                                          stay: the oldest is dropped from the list
    go_back()       the screenshot of an earlier page    the same chunk in a new tool message at the end (a
                                                          message still showing it is dropped first)
    search(q)       a text result (a text chunk)         a tool message holding the result chunk
    every step      the action and observation, as text  an assistant message; past 3/4 of the model's
                                                          positions the oldest of them are dropped
    every --speculate steps: fork a speculative branch (of the window before the step's sync), sync it to
                    the list with the page the model would visit next too, and commit the branch (it becomes the window, its list the list) when the
                    model is more confident there, else drop it (close(): its private pages return to the pool)

While a tool runs, the loop knows most of what its rules will do when it returns: the action it chose names
what the tool will show (its assistant message says so), a page it goes back to or a search it repeats shows
what it showed before, the oldest screenshot leaves for a new one, and the oldest assistant messages leave past
the position budget. It passes that list to `window.prepare_sync`, which computes it exactly in idle time (a
throwaway fork; the KV stored for exact reuse), so the sync after the tool serves everything the trim moved
from exact KV and forwards only what is new. A trim from the front costs a prefix cache everything behind it
and a keep here a loss the fidelity model under-predicts at the window's tail; prepared, it costs neither.
(--no-anticipate turns it off.)

sync does the rest: a new message is a turn (text at the tail) or an admitted chunk (a chunk part; text
anywhere else); a dropped message is evicted (its chunks stay in the store); a screenshot that comes back
is recalled (its canonical and patches come from the store); moved messages are reordered.

The system prompt, the turns and the search results are text, tokenized by the model's tokenizer (the model
needs one); --verbose prints them. Screenshots are not text: the bundled model has no vision tower, so a
page's "screenshot" is a fixed pseudo-random [rows, hidden] input embedding derived from the page number (the
same page gives the same chunk, as a digest of the pixels would). With a vision-language model, pass the
vision tower's output instead.

At the end it prints what it did and what it cost: forward tokens computed against a **prefix cache** doing
the same work (what every serving engine ships: a shadow window under the `prefix` policy, on a second
engine of the same model with its own store, synced to the same message lists, forked, committed and dropped
with the window; like the window it recomputes after each change) and against no cache at all (a full
re-prefill of the window at every step), and fidelity: max |logits - re-prefill logits| over each step's
decision query.

    /usr/bin/python3 bindings/python/examples/tool_loop.py                 # 24 steps on the bundled model
    /usr/bin/python3 bindings/python/examples/tool_loop.py --short --json  # a quick run, a JSON report
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np

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
TOOLS = ("open_page", "go_back", "search")
KL_BUDGET = 0.003  # the default policy's per-step budget (kDefaultKlBudget, sdk/include/orbit/policy.h)


@dataclass
class Report:
    """What the loop did and what it cost (also what --json prints)."""
    steps: int = 0
    operations: dict = field(default_factory=lambda: {op: 0 for op in (
        "sync", "admit", "add_turn", "slide", "evict", "recall", "reorder", "fork", "commit", "drop")})
    tools: dict = field(default_factory=lambda: {t: 0 for t in TOOLS})
    forward_tokens: float = 0.0           # computed by the window operations
    idle_tokens: float = 0.0              # computed in idle time while the tools ran (Window.idle: background)
    prefix_tokens: float = 0.0            # the same lists synced on a prefix cache (the shadow `prefix` window)
    reprefill_tokens: float = 0.0         # no cache: a full re-prefill of the window at every step
    max_logit_error: list = field(default_factory=list)  # per step: vs. a re-prefill of the same window
    kl: list = field(default_factory=list)               # per step: mean KL(re-prefill || window) over the rows
    window_tokens: list = field(default_factory=list)    # per step
    seconds_per_step: list = field(default_factory=list)
    final_instances: list = field(default_factory=list)  # labels, in window order
    turns: list = field(default_factory=list)            # per step: the text of its assistant message
    prepared_tokens: float = 0.0          # of idle_tokens: the lists prepared (Window.prepare_sync)
    prepared_steps: int = 0               # steps whose sync found its list prepared up to the new messages
    messages: int = 0                     # messages in the final list
    policy: str = ""


SYSTEM = "Lily was a helper. She opened pages, went back and looked for things to find her lost cat."
DECISION_QUERY = "Next, Lily chose to"   # the model reads it after the window and picks the tool
PLACES = ["park", "shop", "farm", "pond", "hill"]
FINDINGS = ["A cat hid", "Milk was left", "Paw prints", "A red bow", "A girl saw a cat"]


class Tools:
    """The environment: pages with synthetic screenshots (embeddings), and a search engine returning text.
    Every chunk is registered in the engine and in the shadow engine (the same content gives the same key in
    both, so the shadow window syncs to the same message lists)."""

    def __init__(self, engines: list[orbit.Engine], rows: int, seed: int):
        self.engines = engines
        self.hidden = engines[0].model_info.hidden_size
        self.rows = rows
        self.seed = seed
        self.history: list[int] = []  # pages visited, in order
        self.results: dict[int, orbit.ChunkRef] = {}  # searches made: query -> result
        self.scale = 0.5  # spread of the synthetic embeddings

    def screenshot(self, page: int) -> orbit.ChunkRef:
        rng = np.random.default_rng([self.seed, page])
        pixels_as_embeddings = (rng.standard_normal((self.rows, self.hidden)) * self.scale).astype(np.float32)
        return self._register(lambda e: e.add_embeddings(pixels_as_embeddings, media_digest=f"page-{page}",
                                                         label=f"page {page}"))

    def _register(self, make) -> orbit.ChunkRef:
        chunks = [make(e) for e in self.engines]
        return chunks[0]

    def open_page(self, page: int) -> orbit.ChunkRef:
        self.history.append(page)
        return self.screenshot(page)

    def go_back(self, steps_back: int) -> orbit.ChunkRef:
        if len(self.history) < 2:
            return self.open_page(len(self.history))
        page = self.history[-1 - min(steps_back, len(self.history) - 1)]
        self.history.append(page)
        return self.screenshot(page)

    def search(self, query: int) -> orbit.ChunkRef:
        place = PLACES[(query + self.seed) % len(PLACES)]
        finding = FINDINGS[(query * 3 + self.seed) % len(FINDINGS)]
        self.results[query] = self._register(lambda e: e.add_text(f"{finding} at the {place}.", label=f"result {query}"))
        return self.results[query]

    def foreseen(self, tool: str, choice: int) -> orbit.ChunkRef | None:
        """What the call will return, where the agent knows it before the tool runs: a page it visited (going
        back shows the screenshot it saw) or a search it made (the same query, the same result). None for a
        new page. (Only a guess an agent makes: prepare_sync costs idle time when it is wrong, nothing else.)"""
        if tool == "go_back" and len(self.history) >= 2:
            return self.screenshot(self.history[-1 - min(1 + choice % 3, len(self.history) - 1)])
        if tool == "search":
            return self.results.get(choice % 5)
        return None

    def target(self, tool: str, choice: int) -> str:
        """The label of what the call will show (the page or result the action names), known before it runs."""
        if tool == "search":
            return f"result {choice % 5}"
        if tool == "go_back" and len(self.history) >= 2:
            return f"page {self.history[-1 - min(1 + choice % 3, len(self.history) - 1)]}"
        return f"page {len(self.history)}"

    def turn(self, tool: str, target: str) -> str:
        """The step's action and what it showed (target: its label), as a short text message."""
        action = {"open_page": "opened", "go_back": "went back to", "search": "searched and found"}[tool]
        return f"Lily {action} {target}."


def tool_message(observation: orbit.ChunkRef) -> dict:
    """A tool result as a chat message: a text part naming it, then the observation's chunk as a part."""
    return {"role": "tool", "content": [{"type": "text", "text": f"{observation.label}: "},
                                        {"type": "chunk", "chunk": observation}]}


def chunk_of(message: dict) -> orbit.ChunkRef | None:
    """The chunk a tool message holds (None for text messages)."""
    content = message["content"]
    return content[-1]["chunk"] if isinstance(content, list) else None


def observe(messages: list[dict], observation: orbit.ChunkRef, keep: int) -> list[dict]:
    """The list with the observation's tool message at the end: a message still showing the same chunk is
    dropped first (a window holds a chunk once; sync moves it), and at most `keep` screenshots stay."""
    out = [m for m in messages if chunk_of(m) != observation] + [tool_message(observation)]
    while sum(1 for m in out if is_screenshot(chunk_of(m))) > keep:
        oldest = next(k for k, m in enumerate(out) if is_screenshot(chunk_of(m)))
        del out[oldest]  # the oldest screenshot leaves the view (its text results stay)
    return out


def is_screenshot(chunk: orbit.ChunkRef | None) -> bool:
    return chunk is not None and chunk.kind == orbit.ChunkKind.embeddings


def mean_kl(reference: np.ndarray, logits: np.ndarray) -> float:
    """KL(reference || window) of the next-token distributions, in nats, averaged over the query's rows."""
    def log_softmax(x):
        z = x - x.max(axis=-1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    lp, lq = log_softmax(reference.astype(np.float64)), log_softmax(logits.astype(np.float64))
    return float((np.exp(lp) * (lp - lq)).sum(axis=-1).mean())


def confidence(logits: np.ndarray) -> float:
    """Max softmax probability of the next token: how sure the model is of its next move."""
    z = logits - logits.max()
    p = np.exp(z)
    return float(p.max() / p.sum())


def run(model: pathlib.Path | str = DEFAULT_MODEL, steps: int = 24, keep: int = 3, speculate: int = 4,
        policy: str = "default", seed: int = 0, rows: int = 6, store_dir: str | None = None,
        pool_bytes: int = 64 << 20, max_bytes: int = 0, verbose: bool = False, anticipate: bool = True,
        on_step=None) -> Report:
    """Runs the agent loop; returns the Report. Every number in it is measured on real model computation.

    anticipate: while the tool runs, the window prepares the list the loop's rules will make when it returns
    (Window.prepare_sync), so the sync after it serves what the trim moved from exact KV.
    on_step(step, window, query, report, messages), when given, is called after each step's measurement (tests
    use it to check the window against the list and against a re-prefill they build themselves)."""
    report = Report(policy=policy)
    with orbit.Engine(model, store_dir=store_dir, pool_bytes=pool_bytes, page_size=4) as engine, \
            orbit.Engine(model, pool_bytes=pool_bytes, page_size=4) as shadow_engine:
        if not engine.has_tokenizer:
            raise SystemExit(f"tool_loop: the model {model} has no tokenizer, and the loop's messages are text "
                             "(a llama2.c model needs tok512.bin / tokenizer.bin beside it)")
        tools = Tools([engine, shadow_engine], rows, seed)
        window = engine.new_window(policy=policy, max_bytes=max_bytes, label="agent")
        # The prefix cache's cost: a shadow window under `prefix`, on its own engine (nothing either stores
        # can serve the other), synced to every list the window is; forks, commits and drops follow too.
        shadow = {id(window): shadow_engine.new_window(policy="prefix", label="prefix cache")}
        decision_query = engine.tokenize(DECISION_QUERY, bos=False)
        max_positions = engine.model_info.max_positions
        budget = int(0.75 * max_positions) if max_positions else 1 << 30

        def sync(w, messages: list[dict]) -> list[int]:
            """Brings w and its shadow to `messages`; counts the operations sync applied and their cost.
            Returns the query of the next read: the template's generation prompt, then the decision query."""
            r = w.sync(messages)
            report.operations["sync"] += 1
            for plan in r.plans:
                op = plan.op.label
                if op == "sync":  # units added: one plan for the list; count the edits it made
                    for u in r.plan.units:
                        if u.action.label != "keep":
                            report.operations["add_turn" if u.action.label == "turn" else u.action.label] += 1
                    report.operations["evict"] += len(r.plan.evict)
                    report.operations["reorder"] += int(r.plan.reorder)
                else:
                    report.operations["add_turn" if op == "turn" else op] += 1
            report.forward_tokens += r.forward_tokens
            report.prefix_tokens += shadow[id(w)].sync(messages).forward_tokens
            return list(r.generation_prompt) + decision_query

        def ready(w):
            """Before the loop reads w (generate, logits): the repairs its edits deferred run now, on w and on
            its shadow alike (a read would run them anyway; flushing first puts their cost in the report)."""
            report.forward_tokens += w.flush().forward_tokens
            report.prefix_tokens += shadow[id(w)].flush().forward_tokens
            return w

        def fits(messages: list[dict], reserve: int = 0) -> list[dict]:
            """The list within the position budget (less `reserve` tokens): the oldest assistant messages leave
            (the system stays)."""
            messages = list(messages)
            while len(window.plan_sync(messages).tokens) + reserve + len(decision_query) > budget:
                oldest = next((k for k, m in enumerate(messages) if m["role"] == "assistant"), None)
                if oldest is None:
                    break
                del messages[oldest]
            return messages

        added = {"page": 0, "result": 0}  # tokens the last new page's and new result's tool message took

        def foreseen_list(messages: list[dict], tool: str, choice: int, page_ahead: bool = False) -> list[dict]:
            """The list the loop's rules will make when the tool returns, as far as they are known before it
            runs: the action's assistant message (it names what the tool will show) and, where the agent has
            seen it, the observation (observe drops what it replaces); where it has not, the drops it makes
            room by, and the trim (fits) with room for the new tool message, as long as the last such one.
            page_ahead: the list of the speculative branch, which then also opens the next page."""
            seen = tools.foreseen(tool, choice)
            turn = {"role": "assistant", "content": tools.turn(tool, tools.target(tool, choice))}
            out = observe(messages, seen, keep) + [turn] if seen is not None else list(messages)
            new_pages = int(seen is None and tool != "search") + int(page_ahead)  # screenshots not known yet
            while new_pages and sum(1 for m in out if is_screenshot(chunk_of(m))) + new_pages > keep:
                del out[next(k for k, m in enumerate(out) if is_screenshot(chunk_of(m)))]
            reserve = page_ahead * added["page"]
            if seen is None:  # the new tool message and the assistant message after it are still to come
                reserve += added["page" if tool != "search" else "result"]
                reserve += len(window.plan_sync(out + [turn]).tokens) - len(window.plan_sync(out).tokens)
            return fits(out, reserve=reserve)

        def measure_added(base: list[dict]) -> None:
            """Notes what a new tool message took (base: the list with it last)."""
            grew = len(window.plan_sync(base).tokens) - len(window.plan_sync(base[:-1]).tokens)
            added["page" if is_screenshot(chunk_of(base[-1])) else "result"] = grew

        def prepare(lst: list[dict]) -> None:
            prepared = window.prepare_sync(lst).forward_tokens
            report.prepared_tokens += prepared
            report.idle_tokens += prepared

        messages = [{"role": "system", "content": SYSTEM}]
        query = sync(window, messages)
        for step in range(steps):
            t0 = time.perf_counter()
            # 1. the model picks a tool (and its argument): one token sampled after the window
            before = ready(window).stats.critical_forward_tokens
            choice = window.generate(query, max_tokens=1, temperature=1.0, seed=seed * 7919 + step).tokens[0]
            # A read that looks first (Policy.read_attention_weight) may repair the window before its answer: the
            # repairs, and the query's forward again after them (counted whole), are the window's (0 without it).
            repaired = window.stats.critical_forward_tokens - before
            if repaired > 0:
                report.forward_tokens += repaired + len(query)
            # ... and the prefix cache makes the same call (it then holds the query and the answer, as a radix
            # cache does; its decode, like the window's, is not counted)
            shadow[id(window)].generate(query, max_tokens=1, temperature=1.0, seed=seed * 7919 + step)
            tool = TOOLS[choice % len(TOOLS)] if step > 0 else "open_page"
            report.tools[tool] += 1
            # 2. the tool runs; meanwhile the window uses the wait (heals what the policy approximated,
            #    prepares the recall of the chunk evicted last) and prepares the list the loop's rules will make
            #    when the tool returns (what observe and fits will drop, what the action names): background
            #    work, off the critical path
            report.idle_tokens += window.idle().forward_tokens
            forking = speculate and step % speculate == speculate - 1
            foreseen = foreseen_list(messages, tool, choice) if anticipate else None
            if foreseen is not None:  # after idle(): a heal changes the KV the prepared list starts from
                prepare(foreseen)
                if forking:
                    prepare(foreseen_list(messages, tool, choice, page_ahead=True))
            if tool == "open_page":
                observation = tools.open_page(len(tools.history))
            elif tool == "go_back":
                observation = tools.go_back(1 + choice % 3)
            else:
                observation = tools.search(choice % 5)
            # 3. the list grows by the observation and the step's assistant message; sync applies the change
            text = tools.turn(tool, observation.label)
            base = observe(messages, observation, keep)
            measure_added(base)
            messages = fits(base + [{"role": "assistant", "content": text}])
            report.prepared_steps += int(foreseen is not None and messages[:len(foreseen)] == foreseen)
            if forking:  # the branch starts from the window before this sync and syncs its own list
                branch = window.fork()
                shadow[id(branch)] = shadow[id(window)].fork()
                report.operations["fork"] += 1
            query = sync(window, messages)
            report.turns.append(text)
            # 4. now and then: a speculative branch (fork), synced one page ahead, committed or dropped
            if forking:
                ahead = fits(observe(messages, tools.screenshot(len(tools.history)), keep))
                branch_query = sync(branch, ahead)  # prefetch the next page in the branch
                gain = (confidence(ready(branch).logits(branch_query)) -
                        confidence(ready(window).logits(query)))
                if gain > 0:
                    shadow.pop(id(window)).close()
                    window.close()
                    window, messages, query = branch, ahead, branch_query  # commit: the branch is the window
                    tools.history.append(len(tools.history))
                    report.operations["commit"] += 1
                else:
                    shadow.pop(id(branch)).close()
                    branch.close()  # drop: its private pages go back to the pool
                    report.operations["drop"] += 1
            # 5. measure: cost vs. a re-prefill, fidelity vs. a re-prefill
            report.reprefill_tokens += window.tokens
            held = ready(window).logits(query, all_rows=True)
            reference = window.reference_logits(query, all_rows=True)
            error = np.abs(held - reference).max()
            report.max_logit_error.append(float(error))
            report.kl.append(mean_kl(reference, held))
            report.window_tokens.append(window.tokens)
            report.seconds_per_step.append(time.perf_counter() - t0)
            report.steps += 1
            if on_step is not None:
                on_step(step, window, query, report, messages)
            if verbose:
                labels = " | ".join(i.chunk.label if not i.is_turn else "turn" for i in window.instances)
                print(f"step {step:3d} {tool:9s} -> {observation.label:10s} window [{labels}] "
                      f"err {error:.2e}\n         message: {text}", flush=True)
        report.final_instances = [i.chunk.label if not i.is_turn else "turn" for i in window.instances]
        report.messages = len(messages)
        shadow.pop(id(window)).close()
        window.close()
    return report


def print_summary(report: Report) -> None:
    ops = ", ".join(f"{k} {v}" for k, v in report.operations.items() if v)
    print(f"policy {report.policy}: {report.steps} steps; operations: {ops}")
    print("tools: " + ", ".join(f"{k} {v}" for k, v in report.tools.items()))
    ratio = report.forward_tokens / report.reprefill_tokens if report.reprefill_tokens else float("nan")
    vs_prefix = report.forward_tokens / report.prefix_tokens if report.prefix_tokens else float("nan")
    print(f"forward tokens: {report.forward_tokens:.0f} computed vs {report.prefix_tokens:.0f} for a prefix cache "
          f"window synced to the same lists ({vs_prefix:.2f}x) and {report.reprefill_tokens:.0f} with no cache, a full "
          f"re-prefill at every step ({ratio:.1%}); {report.idle_tokens:.0f} more in idle time while the tools ran "
          f"({report.prepared_tokens:.0f} of them preparing the next list, which {report.prepared_steps} of "
          f"{report.steps} syncs found)")
    if report.turns:
        print(f"{report.messages} messages in the final list; the last assistant message: {report.turns[-1]}")
    print(f"fidelity: max |logits - re-prefill| per step: max {max(report.max_logit_error):.3e}, "
          f"mean {np.mean(report.max_logit_error):.3e}; KL(re-prefill || window) per step: mean "
          f"{np.mean(report.kl):.2e}, max {max(report.kl):.2e}, within the default budget "
          f"({KL_BUDGET:g}) on {sum(k <= KL_BUDGET for k in report.kl)} of {len(report.kl)} steps")
    print(f"time per step: {1e3 * np.mean(report.seconds_per_step):.1f} ms; final window: {report.final_instances}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(DEFAULT_MODEL), help="model (.bin or HF directory); default: bundled")
    ap.add_argument("--steps", type=int, default=24, help="agent steps (default 24)")
    ap.add_argument("--short", action="store_true", help="a quick run (8 steps)")
    ap.add_argument("--keep", type=int, default=3, help="screenshots kept in the window (default 3)")
    ap.add_argument("--speculate", type=int, default=4, help="fork a speculative branch every N steps (0: never)")
    ap.add_argument("--policy", default="default",
                    help="window policy spec (see orbit.policy_help()); default: the library's default "
                         f"({orbit.WindowPolicy().name}); patch:16:exact re-conditions every survivor")
    ap.add_argument("--no-anticipate", action="store_true",
                    help="do not prepare the next list while the tool runs (Window.prepare_sync): the sync after a "
                         "trim then keeps or recomputes what it moved, as the policy decides")
    ap.add_argument("--store-dir", default=None, help="chunk store directory (default: memory only)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print the report as JSON instead of the summary")
    ap.add_argument("--verbose", "-v", action="store_true", help="one line per step")
    args = ap.parse_args(argv)
    report = run(args.model, steps=8 if args.short else args.steps, keep=args.keep, speculate=args.speculate,
                 policy=args.policy, seed=args.seed, store_dir=args.store_dir, verbose=args.verbose,
                 anticipate=not args.no_anticipate)
    if args.json:
        print(json.dumps(asdict(report), indent=2))
    else:
        print_summary(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
