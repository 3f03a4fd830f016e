"""What the web-agent and video-agent samples share: finding the `orbit` module, a progress bar, the
per-step bookkeeping (operations, forward tokens, time, fidelity against a re-prefill) and the trace
(orbit-trace/1, eval/include/orbit/trace.h); the summary table, JSON report and PNG chart are written by
sample_outputs.py.

Cost is compared with two engines without orbit: a **radix cache** (the prefix cache every serving engine
ships) and **no cache** (a full re-prefill of the window at every step). The radix cache is SGLang's at token
granularity with unbounded memory (orbit.RadixCache, planner/prefix_cache.h, the yardstick `orbit replay`
reports): it computes only when the agent reads (generates), and then only the prompt's tokens (the window,
then the query) after the longest prefix it holds from an earlier read, where an earlier read's sequence
includes its query and the tokens it generated (so an action decoded and then added as a turn is already
cached), and at least the prompt's last token, whose logits the read needs. orbit's forward tokens count the
same: its operations' forwards and the query tokens each generate forwards (`Generation.prompt_forward_tokens`:
all of the query, or only its last token when exact reuse holds the rest). No cache re-prefills the window
after each step and each read's query. For reference the episode's trace is also replayed under orbit's
`prefix` preset (`orbit.replay`: re-prefill plus exact reuse of what was computed behind the same window, an
executing radix cache): `prefix_replay_tokens` in the report.

An `Episode` wraps one window. Each agent step is

    episode.begin_step("page 3")
    episode.admit(chunk) / add_turn(tokens) / slide(n) / recall(chunk) / evict(instance) / reorder(chunks)
    episode.sync(messages, notes)   # or: the agent's message list, Window.sync turning it into operations
    episode.end_step()          # measures fidelity: Window.logits(probe) vs Window.reference_logits(probe)

Every operation goes through `Window.plan_*` then `Window.apply` (or `Window.sync`, which does the same for
each operation it applies) and is timed; its ApplyReport's forward tokens are summed per step. Fidelity is
measured after the step and is not counted in its cost.
"""
from __future__ import annotations

import argparse
import pathlib
import shlex
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from sample_outputs import write_outputs

REPO = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_MODEL = REPO / "models" / "stories260K" / "stories260K.bin"


def import_orbit():
    """The `orbit` module: installed, on PYTHONPATH, or from a build tree of this checkout
    (<repo>/build*/bindings/python, the one built last first)."""
    try:
        import orbit  # noqa: F401
        return orbit
    except ImportError as e:
        error = e
    builds = [p for p in REPO.glob("build*/bindings/python") if (p / "orbit" / "__init__.py").is_file()]
    builds.sort(key=lambda p: max((f.stat().st_mtime for f in (p / "orbit").glob("_orbit*.so")), default=0),
                reverse=True)
    for build in builds:
        sys.path.insert(0, str(build))
        try:
            import orbit  # noqa: F401
            return orbit
        except ImportError as e:
            error = e
            sys.path.remove(str(build))
    sys.exit(f"error: cannot import the orbit module ({error}). Build it (./scripts/main.sh, or cmake -DORBIT_PYTHON=ON and "
             "the target orbit_python) and set PYTHONPATH=<build>/bindings/python, or run "
             "scripts/install-python.sh.")


# ---- progress ----------------------------------------------------------------------------------------------

class Progress:
    """A minimal progress bar on stderr (no dependency). On a terminal it redraws one line; otherwise it
    prints a line at every 10% so logs stay short."""

    def __init__(self, total: int, label: str, stream=None, width: int = 28):
        self.total, self.label, self.width = max(total, 1), label, width
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.done = 0
        self.start = time.perf_counter()
        self._last_decile = -1

    def update(self, n: int = 1, note: str = "") -> None:
        self.done = min(self.total, self.done + n)
        frac = self.done / self.total
        elapsed = time.perf_counter() - self.start
        eta = elapsed / frac - elapsed if frac > 0 else 0.0
        filled = int(round(frac * self.width))
        line = (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} "
                f"{elapsed:5.1f}s eta {eta:4.1f}s {note}")
        if self.tty:
            self.stream.write("\r" + line[:120].ljust(120))
            if self.done == self.total:
                self.stream.write("\n")
            self.stream.flush()
        else:
            decile = int(frac * 10)
            if decile != self._last_decile or self.done == self.total:
                self._last_decile = decile
                self.stream.write(line + "\n")
                self.stream.flush()


# ---- fidelity ----------------------------------------------------------------------------------------------

TOP1_TIE_LOGITS = 1e-4  # orbit::kTop1TieLogits


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def fidelity(window_logits: np.ndarray, reference_logits: np.ndarray) -> tuple[float, float]:
    """(mean over rows of KL(reference ‖ window) in nats, fraction of rows whose top-1 agrees) — the
    measure `orbit replay` reports (trace.h StepFidelity): the window's argmax agrees when it is the
    reference's or ties with it (reference logit within TOP1_TIE_LOGITS of the largest)."""
    w = np.atleast_2d(window_logits)
    r = np.atleast_2d(reference_logits)
    lr, lw = log_softmax(r), log_softmax(w)
    kl = (np.exp(lr) * (lr - lw)).sum(axis=-1)
    picked = np.take_along_axis(r, w.argmax(axis=-1)[:, None], axis=-1)[:, 0]
    top1 = (picked >= r.max(axis=-1) - TOP1_TIE_LOGITS).mean()
    return float(max(kl.mean(), 0.0)), float(top1)


# ---- tokens ------------------------------------------------------------------------------------------------

def token_ids(values, vocab: int) -> list[int]:
    """Maps arbitrary non-negative ints into [3, vocab) (ids 0-2 are special in llama2.c vocabularies)."""
    return [3 + int(v) % (vocab - 3) for v in values]


# ---- a prefix cache -----------------------------------------------------------------------------------------

def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def prefix_cache_tokens(reads: list[tuple[list[int], list[int], list[int]]]) -> list[int]:
    """Forward tokens an unbounded token-granular prefix (radix) cache computes for a sequence of reads
    (window tokens, query tokens, generated tokens): per read, the prompt's (window + query) tokens after the
    longest prefix of any earlier read's full sequence (window + query + generated), and at least its last
    token (a read needs its logits). The samples count with orbit.RadixCache (planner/prefix_cache.h, what
    `orbit replay` runs); this independent model is the oracle tests/python/test_samples.py checks it against."""
    seen: list[list[int]] = []
    out = []
    for window, query, generated in reads:
        prompt = list(window) + list(query)
        held = max((common_prefix(prompt, s) for s in seen), default=0)
        out.append(len(prompt) - min(held, len(prompt) - 1))
        seen.append(prompt + list(generated))
    return out


# ---- the episode -------------------------------------------------------------------------------------------

@dataclass
class StepRecord:
    index: int
    label: str
    operations: list = field(default_factory=list)   # e.g. ["admit shot 3", "slide 1", "turn 4"]
    forward_tokens: float = 0.0      # token-forwards of this step's operations (ApplyReports) and its queries
    query_tokens: float = 0.0        # of which the queries its generates forwarded (prompt_forward_tokens)
    prefix_tokens: float = 0.0       # a prefix cache serving the step's reads (see the module docstring)
    prefix_replay_tokens: float = 0.0  # the trace's steps replayed under orbit's `prefix` baseline
    reprefill_tokens: int = 0        # no cache: a full re-prefill of the window after the step, and its queries
    window_tokens: int = 0
    patches_formed: int = 0
    patch_hits: int = 0
    canonicals_encoded: int = 0
    seconds: float = 0.0             # plan + apply of the step's operations + reading the probe's logits
    reprefill_seconds: float = 0.0   # Window.reference_logits(probe): a re-prefill of the window + probe
    decode_tokens: int = 0           # tokens generated by the agent in this step (not in forward_tokens)
    idle_tokens: float = 0.0         # computed in idle time after a decode (Window.idle; not in forward_tokens)
    decode_seconds: float = 0.0
    kl: float = 0.0                  # mean over probe rows of KL(re-prefill ‖ window), nats
    top1: float = 1.0                # fraction of probe rows whose argmax agrees with the re-prefill
    exact: bool = False              # every instance's KV equals a re-prefill (as the window tracks it)
    window: list = field(default_factory=list)        # the window's tokens in order after the step
    instances: list = field(default_factory=list)     # labels in window order ("turn" for live turns)
    texts: list = field(default_factory=list)         # [role, text]: what the step added, readable
    trace_steps: list = field(default_factory=list)   # [first, end): this step's steps in the trace
    reads: list = field(default_factory=list)         # [window tokens, query, generated] per generate


class Episode:
    """One window driven step by step, recording cost, fidelity and the orbit-trace/1 steps."""

    def __init__(self, orbit, engine, window, *, name: str, description: str, probe: list[int],
                 progress: Progress | None = None, keep_logits: bool = False):
        self.orbit, self.engine, self.window = orbit, engine, window
        self.name, self.description, self.probe = name, description, list(probe)
        self.progress = progress
        self.steps: list[StepRecord] = []
        self.chunk_names: dict[str, str] = {}   # key -> trace name
        self.trace_chunks: list[dict] = []
        self.trace_steps: list[dict] = []
        self.turn_tokens: dict[int, list[int]] = {}  # live turn instance id -> tokens
        self.keep_logits = keep_logits
        self.logits: list[tuple[np.ndarray, np.ndarray]] = []  # per step: (window, reference), all rows
        self.current: StepRecord | None = None
        self.reads: list[tuple[int, list[int], list[int], list[int]]] = []  # (step, window, query, generated)

    # -- chunks --
    def register(self, chunk, tokens: list[int], name: str) -> None:
        """Names a token chunk for the trace (the trace carries its tokens explicitly)."""
        if chunk.key not in self.chunk_names:
            self.chunk_names[chunk.key] = name
            self.trace_chunks.append({"name": name, "tokens": list(map(int, tokens))})

    def chunk_name(self, chunk) -> str:
        return self.chunk_names[chunk.key]

    # -- steps --
    def begin_step(self, label: str) -> None:
        self.current = StepRecord(index=len(self.steps), label=label)
        self.current.trace_steps = [len(self.trace_steps), len(self.trace_steps)]

    def note_text(self, role: str, text: str) -> None:
        """Records readable text the step added (a page, an action, a question) for the table and report."""
        self.current.texts.append([role, text.strip()])

    def _settle(self) -> None:
        """Waits for the background work the last operation queued (canonicals and patches of first sights,
        formed on the engine's thread): as `orbit replay` runs it after each step, so that the next operation
        finds it done whatever the machine's load, and the sample's forward tokens are the same in every run.
        An agent's own pauses (a tool's run, the user) usually cover it; not timed as the operation's."""
        self.engine.run_background()

    def _run(self, what: str, plan, trace_step: dict | None) -> object:
        t0 = time.perf_counter()
        report = self.window.apply(plan)
        self.current.seconds += time.perf_counter() - t0
        self._settle()
        self.current.operations.append(what)
        self.current.forward_tokens += report.forward_tokens
        self.current.patches_formed += report.patches_formed
        self.current.patch_hits += report.patch_hits
        self.current.canonicals_encoded += report.canonicals_encoded
        if trace_step is not None:
            self.trace_steps.append(trace_step)
        return report

    def flush(self) -> None:
        """Runs the repairs earlier edits deferred (every preset defers them to the next read; a read would
        run them itself, unaccounted): before each read, so their cost lands in this step's forward tokens."""
        if not any(i.deferred for i in self.window.instances):
            return
        t0 = time.perf_counter()
        report = self.window.flush()
        self.current.seconds += time.perf_counter() - t0
        self._settle()
        self.current.operations.append("flush")
        self.current.forward_tokens += report.forward_tokens
        self.current.patches_formed += report.patches_formed
        self.current.patch_hits += report.patch_hits
        self.current.canonicals_encoded += report.canonicals_encoded

    def _timed_plan(self, make):
        t0 = time.perf_counter()
        plan = make()
        self.current.seconds += time.perf_counter() - t0
        return plan

    def admit(self, chunk) -> object:
        plan = self._timed_plan(lambda: self.window.plan_admit(chunk))
        return self._run(f"admit {chunk.label}", plan, {"op": "admit", "chunk": self.chunk_name(chunk)})

    def recall(self, chunk, before=None) -> object:
        """Re-admits an evicted chunk at the tail, or before the chunk instance `before`."""
        step = {"op": "recall", "chunk": self.chunk_name(chunk)}
        if before is not None:
            if before.is_turn:
                raise ValueError("recall: `before` must be a chunk instance (the trace names chunks)")
            step["before"] = self.chunk_name(before.chunk)
            plan = self._timed_plan(lambda: self.window.plan_recall(chunk, before=before))
        else:
            plan = self._timed_plan(lambda: self.window.plan_recall(chunk))
        return self._run(f"recall {chunk.label}", plan, step)

    def add_turn(self, tokens: list[int], note: str = "turn") -> object:
        tokens = list(map(int, tokens))
        plan = self._timed_plan(lambda: self.window.plan_add_turn(tokens))
        report = self._run(f"{note} {len(tokens)}", plan, {"op": "turn", "tokens": tokens, "note": note})
        for iid in report.added:
            self.turn_tokens[int(iid)] = tokens
        return report

    def slide(self, count: int = 1) -> object:
        gone = [i.chunk.label for i in self.window.instances if not i.is_turn][:count]
        plan = self._timed_plan(lambda: self.window.plan_slide(count))
        return self._run(f"slide {'+'.join(gone)}", plan, {"op": "slide", "count": int(count)})

    def evict(self, instance) -> object:
        info = self.window.instance(instance)
        if info.is_turn:
            turns = [i.id for i in self.window.instances if i.is_turn]
            step = {"op": "evict", "turn": turns.index(info.id)}
            what = "evict turn"
        else:
            step = {"op": "evict", "chunk": self.chunk_name(info.chunk)}
            what = f"evict {info.chunk.label}"
        plan = self._timed_plan(lambda: self.window.plan_evict(info.id))
        return self._run(what, plan, step)

    def reorder_chunks(self, chunk_order: list) -> object | None:
        """Reorders the window's chunks into `chunk_order` (every chunk in the window, once); live turns keep
        their slots (the trace's reorder semantics). Nothing happens when the order is unchanged."""
        instances = self.window.instances
        chunk_slots = [i for i in instances if not i.is_turn]
        by_key = {i.chunk.key: i for i in chunk_slots}
        if sorted(c.key for c in chunk_order) != sorted(by_key):
            raise ValueError("reorder_chunks: the order must name every chunk in the window once")
        if [c.key for c in chunk_order] == [i.chunk.key for i in chunk_slots]:
            return None
        it = iter(chunk_order)
        order = [i.id if i.is_turn else by_key[next(it).key].id for i in instances]
        plan = self._timed_plan(lambda: self.window.plan_reorder(order))
        return self._run("reorder " + ",".join(c.label for c in chunk_order), plan,
                         {"op": "reorder", "order": [self.chunk_name(c) for c in chunk_order]})

    def sync(self, messages: list[dict], notes: dict[int, str], **options) -> object:
        """Brings the window to `messages` (Window.sync: one call, its operations planned and applied under the
        window's policy) and records each operation it applied as the methods above do, with its trace step.
        notes[i] names what message i becomes: a turn's note in the operations and the trace ("action 12"),
        a chunk's trace name (the first name a content gets stays). options go to Window.sync."""
        before = {i.id: i for i in self.window.instances}
        order = [i.id for i in self.window.instances]
        t0 = time.perf_counter()
        r = self.window.sync(messages, **options)
        self.current.seconds += time.perf_counter() - t0
        self._settle()
        units = {u.instance: u for u in r.plan.units}
        for u in r.plan.units:
            if not u.is_turn and u.action.label in ("admit", "recall"):
                chunk = u.chunk or self.engine.chunk(u.key)
                self.register(chunk, u.tokens, notes.get(u.first_message, f"message{u.first_message}"))
        for plan, report in zip(r.plans, r.reports):
            for iid in report.added:
                before[iid] = self.window.instance(iid)
            if plan.op.label == "sync":  # one plan for the whole list: the trace says it as its edits
                steps = self._sync_composite(r.plan, before, order, notes)
            else:
                steps = [self._sync_step(plan, report, before, order, units, notes)]
            for what, step in steps:
                self.current.operations.append(what)
                self.trace_steps.append(step)
            self.current.forward_tokens += report.forward_tokens
            self.current.patches_formed += report.patches_formed
            self.current.patch_hits += report.patch_hits
            self.current.canonicals_encoded += report.canonicals_encoded
            order[:] = list(plan.order)
        return r

    def _sync_composite(self, sync_plan, before: dict, order: list, notes: dict) -> list[tuple[str, dict]]:
        """A sync applied as one plan (units added), as the orbit-trace/1 steps that make the same window:
        its evictions, a reorder of the kept instances, each new unit in list order (a turn at the tail, a chunk
        before the next kept instance), and a last reorder where a duplicate went in as a turn."""
        out, cur = [], list(order)

        def reorder_to(target):
            if [before[i].is_turn for i in target] != [before[i].is_turn for i in cur]:
                raise ValueError("sync moved a live turn, which orbit-trace/1's reorder (chunks only) cannot say")
            names = [self.chunk_name(before[i].chunk) for i in target if not before[i].is_turn]
            out.append(("reorder " + ",".join(names), {"op": "reorder", "order": names}))

        evict = list(sync_plan.evict)
        oldest = [i for i in cur if not before[i].is_turn][:len(evict)]
        slid = 0  # evictions that are the window's oldest chunk instances: one slide, as sync's edits say it
        while slid < len(evict) and evict[slid] == oldest[slid]:
            slid += 1
        if slid:
            names = "+".join(self.chunk_name(before[i].chunk) for i in evict[:slid])
            out.append((f"slide {names}", {"op": "slide", "count": slid}))
            cur = [i for i in cur if i not in set(evict[:slid])]
        for gone in evict[slid:]:
            info = before[gone]
            if info.is_turn:
                out.append(("evict turn", {"op": "evict", "turn": [i for i in cur if before[i].is_turn].index(gone)}))
            else:
                out.append((f"evict {self.chunk_name(info.chunk)}",
                            {"op": "evict", "chunk": self.chunk_name(info.chunk)}))
            cur.remove(gone)
        kept = [u.instance for u in sync_plan.units if u.action.label == "keep"]
        if kept != cur:
            reorder_to(kept)
            cur = kept
        units = list(sync_plan.units)
        for k, u in enumerate(units):
            op = u.action.label
            if op == "keep":
                continue
            if op == "turn":
                note = notes.get(u.first_message, "turn")
                tokens = list(map(int, u.tokens))
                self.turn_tokens[int(u.instance)] = tokens
                out.append((f"{note} {len(tokens)}", {"op": "turn", "tokens": tokens, "note": note}))
                cur.append(u.instance)
                continue
            chunk = u.chunk or self.engine.chunk(u.key)
            step = {"op": op, "chunk": self.chunk_name(chunk)}
            following = next((v.instance for v in units[k + 1:] if v.action.label == "keep"), None)
            if following is None:
                cur.append(u.instance)
            else:
                if before[following].is_turn:
                    raise ValueError(f"sync {op}ed {chunk.label} before a live turn, which orbit-trace/1 cannot say")
                step["before"] = self.chunk_name(before[following].chunk)
                cur.insert(cur.index(following), u.instance)
            out.append((f"{op} {self.chunk_name(chunk)}", step))
        final = [u.instance for u in units]
        if final != cur:
            reorder_to(final)
        return out

    def _sync_step(self, plan, report, before: dict, order: list, units: dict, notes: dict) -> tuple[str, dict]:
        """One operation sync applied, as (what the operations column says, its orbit-trace/1 step); `order`
        and `before` describe the window before it."""
        op = plan.op.label
        if op == "slide":
            gone = [i for i in order if i not in set(plan.order)]
            return (f"slide {'+'.join(self.chunk_name(before[i].chunk) for i in gone)}",
                    {"op": "slide", "count": len(gone)})
        if op == "evict":
            (gone,) = [i for i in order if i not in set(plan.order)]
            info = before[gone]
            if info.is_turn:
                return "evict turn", {"op": "evict", "turn": [i for i in order if before[i].is_turn].index(gone)}
            return f"evict {self.chunk_name(info.chunk)}", {"op": "evict", "chunk": self.chunk_name(info.chunk)}
        if op == "turn":
            unit = units[report.added[0]]
            note = notes.get(unit.first_message, "turn")
            tokens = list(map(int, unit.tokens))
            self.turn_tokens[int(report.added[0])] = tokens
            return f"{note} {len(tokens)}", {"op": "turn", "tokens": tokens, "note": note}
        if op in ("admit", "recall"):
            unit = units[report.added[0]]
            chunk = unit.chunk or self.engine.chunk(unit.key)
            step = {"op": op, "chunk": self.chunk_name(chunk)}
            at = list(plan.order).index(report.added[0])
            if at + 1 < len(plan.order):
                following = before[plan.order[at + 1]]
                if following.is_turn:
                    raise ValueError(f"sync {op}ed {chunk.label} before a live turn, which orbit-trace/1 cannot say")
                step["before"] = self.chunk_name(following.chunk)
            return f"{op} {self.chunk_name(chunk)}", step
        if op == "reorder":
            chunks = [before[i] for i in plan.order if not before[i].is_turn]
            if [before[i].is_turn for i in plan.order] != [before[i].is_turn for i in order]:
                raise ValueError("sync moved a live turn, which orbit-trace/1's reorder (chunks only) cannot say")
            return ("reorder " + ",".join(self.chunk_name(c.chunk) for c in chunks),
                    {"op": "reorder", "order": [self.chunk_name(c.chunk) for c in chunks]})
        raise ValueError(f"sync applied a {op}, which this episode does not record")

    def generate(self, query: list[int], max_tokens: int) -> list[int]:
        """The agent decodes (greedy) after the window + query: the query tokens the call forwards count as
        forward tokens (as the radix cache counts them), the generated ones as decode."""
        return [int(t) for t in self.read(query, max_tokens).tokens]

    def read(self, query: list[int], max_tokens: int, **options):
        """generate() returning the whole Generation; options go to Window.generate (tools, tool_choice,
        tool_call_format, ...: the Generation then has tool_calls)."""
        self.flush()
        window = self.window_tokens()
        g = self.window.generate(list(query), max_tokens=max_tokens, **options)
        read = (window, list(map(int, query)), [int(t) for t in g.tokens])
        self.reads.append((self.current.index, *read))
        self.current.reads.append(list(read))
        self.current.forward_tokens += g.prompt_forward_tokens
        self.current.query_tokens += g.prompt_forward_tokens
        self.current.decode_tokens += len(g.tokens)
        # The read goes into the trace too, so a replay's yardstick and `prefix` see its query and answer (an
        # answer the agent then adds as a turn is one both already computed).
        self.trace_steps.append({"op": "generate", "max_tokens": int(max_tokens), "query": list(map(int, query)),
                                 "note": "decode"})
        self.current.decode_seconds += g.seconds
        self.current.operations.append(f"decode {len(g.tokens)}")
        self._settle()
        # The agent now waits on its tool: the window spends the wait as its policy asks (the default policy
        # heals and prepares a recall; patch:16 does nothing). Background work, as orbit replay counts it.
        idle = self.window.idle()
        self._settle()
        if idle.forward_tokens:
            self.current.idle_tokens += idle.forward_tokens
            self.current.operations.append(f"idle {idle.forward_tokens:.0f}")
        return g

    def window_tokens(self) -> list[int]:
        out: list[int] = []
        for inst in self.window.instances:
            if inst.is_turn:
                out += list(inst.turn_tokens) if inst.turn_tokens else self.turn_tokens[int(inst.id)]
            else:
                out += self.chunk_tokens[inst.chunk.key]
        return out

    @property
    def chunk_tokens(self) -> dict[str, list[int]]:
        names = {c["name"]: c["tokens"] for c in self.trace_chunks}
        return {key: names[name] for key, name in self.chunk_names.items()}

    def end_step(self) -> StepRecord:
        s, w = self.current, self.window
        self.flush()
        t0 = time.perf_counter()
        mine = w.logits(self.probe, all_rows=True)
        s.seconds += time.perf_counter() - t0
        t0 = time.perf_counter()
        ref = w.reference_logits(self.probe, all_rows=True)
        s.reprefill_seconds = time.perf_counter() - t0
        s.kl, s.top1 = fidelity(mine, ref)
        if self.keep_logits:
            self.logits.append((np.array(mine, dtype=np.float32), np.array(ref, dtype=np.float32)))
        s.trace_steps[1] = len(self.trace_steps)
        s.window_tokens = int(w.tokens)
        s.reprefill_tokens = s.window_tokens + sum(len(query) for _, query, _ in s.reads)
        s.exact = all(i.exact for i in w.instances)
        s.window = self.window_tokens()
        s.instances = [("turn" if i.is_turn else i.chunk.label) for i in w.instances]
        assert len(s.window) == s.window_tokens, (len(s.window), s.window_tokens)
        self.steps.append(s)
        self.current = None
        if self.progress:
            self.progress.update(1, f"{s.label}: fwd {s.forward_tokens:.0f}/{s.reprefill_tokens} KL {s.kl:.1e}")
        return s

    # -- outputs --
    def measure_prefix_cache(self, model: str) -> None:
        """Fills StepRecord.prefix_tokens (orbit.RadixCache over the episode's reads: window and query as the
        prompt, the answer as what it went on to hold) and
        StepRecord.prefix_replay_tokens (the trace replayed under `prefix` on a fresh engine)."""
        for s in self.steps:
            s.prefix_tokens = 0.0
        radix = self.orbit.RadixCache()  # unbounded: the strongest of the yardsticks
        for step, window, query, generated in self.reads:
            self.steps[step].prefix_tokens += radix.read(window + query, generated)
        report = self.orbit.replay(self.trace(), str(model), policies=["prefix"], baselines=False, fidelity=False)
        (prefix,) = [p for p in report["policies"] if p["policy"] == "prefix"]
        per_trace_step = [st["critical_forward_tokens"] for st in prefix["steps"]]
        if len(per_trace_step) != len(self.trace_steps):
            raise RuntimeError(f"prefix replay: {len(per_trace_step)} steps for a trace of {len(self.trace_steps)}")
        for s in self.steps:
            first, end = s.trace_steps
            s.prefix_replay_tokens = float(sum(per_trace_step[first:end]))

    def totals(self) -> dict:
        fwd = sum(s.forward_tokens for s in self.steps)
        full = sum(s.reprefill_tokens for s in self.steps)
        prefix = sum(s.prefix_tokens for s in self.steps)
        return {
            "steps": len(self.steps),
            "forward_tokens": fwd,
            "query_tokens": sum(s.query_tokens for s in self.steps),
            "prefix_tokens": prefix,
            "prefix_ratio": fwd / prefix if prefix else float("nan"),
            "prefix_replay_tokens": sum(s.prefix_replay_tokens for s in self.steps),
            "reprefill_tokens": full,
            "forward_fraction": fwd / full if full else float("nan"),
            "seconds": sum(s.seconds for s in self.steps),
            "reprefill_seconds": sum(s.reprefill_seconds for s in self.steps),
            "mean_kl": float(np.mean([s.kl for s in self.steps])) if self.steps else 0.0,
            "max_kl": max((s.kl for s in self.steps), default=0.0),
            "mean_top1": float(np.mean([s.top1 for s in self.steps])) if self.steps else 1.0,
            "patches_formed": sum(s.patches_formed for s in self.steps),
            "patch_hits": sum(s.patch_hits for s in self.steps),
            "decode_tokens": sum(s.decode_tokens for s in self.steps),
            "idle_tokens": sum(s.idle_tokens for s in self.steps),
        }

    def trace(self) -> dict:
        """The episode as an orbit-trace/1 document (eval/include/orbit/trace.h): `orbit replay` replays it."""
        return {"format": "orbit-trace/1", "name": self.name, "description": self.description,
                "probe": list(self.probe), "chunks": self.trace_chunks, "steps": self.trace_steps}


# ---- command line ------------------------------------------------------------------------------------------

def arg_parser(description: str, default_out: str, default_steps: int, short_steps: int) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--model", default=str(DEFAULT_MODEL),
                    help="a llama2.c .bin or a Hugging Face directory (default: the bundled stories260K)")
    ap.add_argument("--steps", type=int, default=default_steps, help=f"agent steps (default {default_steps})")
    ap.add_argument("--short", action="store_true", help=f"a quick run for tests ({short_steps} steps)")
    ap.add_argument("--policy", default="default",
                    help="window policy spec (orbit.policy_help(); default: the default policy)")
    ap.add_argument("--out", default=str(REPO / "out" / default_out), help="output directory")
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic content")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0: keep the process setting)")
    ap.add_argument("--dump-logits", action="store_true",
                    help="also write every step's probe logits (window and re-prefill) to <name>.logits.npz")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuses, naming the option, what would otherwise fail only after the model ran (arg_parser's options)."""
    if args.steps < 1:
        ap.error(f"--steps must be 1 or more (got {args.steps})")
    if args.seed < 0:
        ap.error(f"--seed must be 0 or more (got {args.seed})")
    if args.short and args.steps != ap.get_default("steps"):
        ap.error("--short and --steps both set the steps: give one")


def finish(episode: Episode, window, out_dir: pathlib.Path, meta: dict, title: str) -> dict:
    """Writes the outputs (write_outputs), prints the summary table, closes the window; returns the
    sample's result: {"paths": {kind: path}, "totals": episode.totals()}."""
    episode.measure_prefix_cache(meta["model"])
    paths = write_outputs(episode, out_dir, meta, title)
    print(paths["table"].read_text(), end="")
    window.close()
    return {"paths": paths, "totals": episode.totals()}


def main(run, description: str, name: str, default_steps: int, short_steps: int, argv=None) -> int:
    """A sample's command line: parses the common options and calls run(model, steps=..., policy=..., out=...,
    seed=..., threads=..., dump_logits=..., quiet=...), then prints where the outputs went."""
    ap = arg_parser(description, name, default_steps, short_steps)
    args = ap.parse_args(argv)
    check_args(ap, args)
    orbit = import_orbit()
    try:
        result = run(args.model, steps=short_steps if args.short else args.steps, policy=args.policy, out=args.out,
                     seed=args.seed, threads=args.threads, dump_logits=args.dump_logits, quiet=args.quiet)
    except orbit.OrbitError as e:  # a missing model, a bad policy: the library names what is at fault
        sys.exit(f"error: {e}")
    print_outputs(result["paths"], args.model)
    return 0


def print_outputs(paths: dict, model: str) -> None:
    """Prints where the outputs went and the command that replays the trace on `model`, the model the
    sample ran (a trace replays only on the model it was recorded with)."""
    for kind in ("table", "report", "trace", "chart", "logits"):
        if kind in paths:
            print(f"{kind:>6}: {paths[kind]}")
    print(f"replay the trace under other policies: build/cli/orbit replay {shlex.quote(str(paths['trace']))} "
          f"--model {shlex.quote(str(model))} --policy patch:16,patch:4")


def check_has_tokenizer(engine, what: str) -> None:
    if not engine.has_tokenizer:
        sys.exit(f"error: {what} writes its text with the model's tokenizer, and this model has none "
                 "(a llama2.c model needs tok512.bin / tokenizer.bin beside it, a Hugging Face directory its "
                 "tokenizer.json)")


def check_model_fits(info, needed_positions: int, what: str) -> None:
    if info.max_positions and needed_positions > info.max_positions:
        sys.exit(f"error: {what} needs {needed_positions} positions; the model allows {info.max_positions}")
    if info.vocab_size < 16:
        sys.exit(f"error: the model's vocabulary ({info.vocab_size}) is too small for the synthetic content")

