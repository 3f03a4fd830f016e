#!/usr/bin/python3
"""Real agent trajectories converted into orbit-trace/1 files (eval/include/orbit/trace.h).

Reads the recorded runs of four public agent frameworks from ../shared/traces/sources (README.md there; the
data stays outside the repository and is read at run time) and writes one trace per run, or per question
for Reflexion, that replays the sequence of window edits the real agent made between its model calls:

  swe-agent   SWE-agent's message list at every call: appended actions and observations, old tool outputs
              replaced by a stub in the middle of the context (its last-5-observations history processor)
  openhands   OpenHands' BrowsingAgent prompt at every call, split at its sections: the page (URL and
              accessibility tree) and the action list replaced mid-prompt, a warning inserted and removed
  reflexion   Reflexion (ReAct + self-reflection) on HotpotQA: one trace per question that needed more than
              one trial; a thought call and an action call per ReAct step, a failed trial's scratchpad
              dropped, a reflection call on a side branch (fork, generate, drop), and the reflection
              inserted before the question on the next trial
  webshop     ReAct on WebShop: append-only history (the control case for a prefix cache)

Each call's context is an ordered list of pieces (messages, or prompt sections). Each distinct piece is a
named text chunk, keyed by its content (and its occurrence within the call), so a piece that recurs
identically is the same chunk. Between two calls the converter emits the steps that take the window from
the previous call's pieces to the next one's (evict what left, reorder only when survivors changed order,
admit first sights and recall returning pieces, with "before" where they go in the middle), then one
generate step per call: the read the replay probes for fidelity and costs.

Scaling to a small model (the bundled stories260K has 512 positions, and real text takes about one token
per 1.5 characters in its 512-token vocabulary): every piece's text is cut to a piece cap (its head, " ... ",
and its tail, so a header and the end where a list grows both stay). The cap is --piece-cap, or by default,
per trace, the largest in [16, 64] at which every call fits --max-window tokens, so no piece has to leave
and the window edits are exactly the agent's. Where a call still does not fit, its oldest history pieces
leave (never the ones a framework keeps fixed: system prompt, instructions, few-shot examples, the task,
Reflexion's reflections), as a sliding window would. A text whose token ids another chunk already has (the
engine identifies chunks by content) gets a marker " [n]". Tokens are counted with the model's tokenizer through
the orbit bindings when they import, else bounded by UTF-8 bytes + 1. Each trace's "description" states
the scaling applied.

    /usr/bin/python3 bench/replay/convert_real.py [--sources DIR] [--out DIR] [--model PATH]
        [--max-window N] [--piece-cap N] [--questions N] [--replay]

With --replay it also runs `orbit replay` on every written trace (a --no-fidelity check, then the default
and prefix policies with --json into OUT/replays/) and prints per trace: mean KL, probed steps and reads
within the KL budget, steps measured far over their prediction, and critical-path forward tokens against
the radix-cache yardstick.
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys

from real_sources import SourceError, all_sources  # bench/replay/real_sources.py, beside this script
from yardstick import neutral  # one prefix-cache yardstick per trace, whatever the policy (bench/replay/yardstick.py)

REPO = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_SOURCES = REPO.parent / "shared" / "traces"
DEFAULT_MODEL = REPO / "models" / "stories260K" / "stories260K.bin"
GENERATE_TOKENS = 4
CUT_MARK = " ... "  # where a piece's text was cut
MIN_CAP, MAX_CAP = 16, 64  # the range the piece cap is picked from


# ---- token counts and the fit ----------------------------------------------------------------------------

class Tokens:
    """Counts a text's tokens (no BOS) with the model's tokenizer, else bounds it by UTF-8 bytes + 1."""

    def __init__(self, model):
        self.engine, self.how, self.cache = None, "UTF-8 bytes + 1 (an upper bound: no orbit bindings)", {}
        try:
            import orbit
        except ImportError:
            return
        if not pathlib.Path(model).exists():
            raise SourceError(f"{model}: the model (--model) is missing")
        try:
            engine = orbit.Engine(str(model), pool_bytes=1 << 20)
        except orbit.OrbitError as e:
            raise SourceError(f"--model: {e}") from None
        if not engine.has_tokenizer:
            engine.close()
            raise SourceError(f"{model}: the model has no tokenizer; text traces need one")
        self.engine, self.how = engine, f"the tokenizer of {pathlib.Path(model).name}"

    def count(self, text):
        if text not in self.cache:
            self.cache[text] = (len(self.engine.tokenize(text, bos=False)) if self.engine
                                else len(text.encode("utf-8")) + 1)
        return self.cache[text]

    def identity(self, text):
        """What the engine identifies a chunk by: its token ids where the tokenizer is here (two texts can
        share them: a tokenizer maps characters it lacks to one unknown id), else the text itself."""
        return tuple(self.engine.tokenize(text, bos=False)) if self.engine else text

    def prefix(self, text, cap):
        """The longest prefix of text (in characters) with at most cap tokens."""
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.count(text[:mid]) <= cap else (lo, mid - 1)
        return text[:lo]

    def suffix(self, text, cap):
        """The longest suffix of text (in characters) with at most cap tokens."""
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.count(text[len(text) - mid:]) <= cap else (lo, mid - 1)
        return text[len(text) - lo:]

    def cut(self, text, cap):
        """text within cap tokens: its head, " ... ", and its tail (a third of the room), so a piece keeps
        both its start (a header, a role) and its end (where a growing list or a page changes)."""
        if self.count(text) <= cap:
            return text
        room = cap - self.count(CUT_MARK)
        head_cap, tail_cap = room - room // 3, room // 3
        while head_cap > 0:
            head, tail = self.prefix(text, head_cap), self.suffix(text, tail_cap)
            joined = head + CUT_MARK + tail
            if len(head) + len(tail) >= len(text):
                return self.prefix(text, cap)
            if self.count(joined) <= cap:
                return joined
            head_cap, tail_cap = head_cap - 1, max(0, tail_cap - 1)
        return self.prefix(text, cap)

    def close(self):
        if self.engine:
            self.engine.close()


def occurrence_keys(pieces):
    """Each piece's identity in a call: its content, and which occurrence of that content it is."""
    seen, keys = {}, []
    for p in pieces:
        seen[p.key] = seen.get(p.key, 0) + 1
        keys.append((p.key, seen[p.key]))
    return keys


def fit_call(call, chunks, max_window, trace=""):
    """The call's chunk names, after the oldest droppable pieces left until the window fits max_window;
    with the number of pieces dropped and the window's tokens. A fixed first piece starts with BOS."""
    entries = [(key, p, i == 0 and p.keep) for i, (key, p) in enumerate(zip(occurrence_keys(call.pieces), call.pieces))]
    total, dropped = sum(chunks.tokens(key, p, bos) for key, p, bos in entries), 0
    while total > max_window:
        victim = next((e for e in entries if not e[1].keep), None)
        if victim is None:
            raise SourceError(f"{trace}, {call.note}: the fixed pieces alone take {total} tokens, over --max-window "
                              f"{max_window}; lower --piece-cap")
        total -= chunks.tokens(*victim)
        entries.remove(victim)
        dropped += 1
    return [chunks.name(key, p, bos) for key, p, bos in entries], dropped, total


class Chunks:
    """The trace's chunks: one per distinct (content, occurrence), its text cut to the piece cap. The engine
    identifies chunks by content (their token ids), so a text whose tokens another chunk already has (the
    same content recurring within one call, two contents alike in their first cap tokens, or texts that
    differ only in characters the tokenizer maps to its unknown id) gets a marker " [n]" at its end."""

    def __init__(self, tokens, cap):
        self.tok, self.cap = tokens, cap
        self.texts, self.taken = {}, set()
        self.names, self.list, self.cut_count = {}, [], 0

    def text(self, key, piece):
        if key not in self.texts:
            cut = text = self.tok.cut(piece.key, self.cap)
            n = 1
            while self.tok.identity(text) in self.taken or not text.strip():
                n += 1
                marker = f" [{n}]"
                text = self.tok.prefix(cut, self.cap - self.tok.count(marker) - 1) + marker
            self.texts[key] = text
            self.taken.add(self.tok.identity(text))
        return self.texts[key]

    def tokens(self, key, piece, bos):
        return self.tok.count(self.text(key, piece)) + (1 if bos else 0)

    def name(self, key, piece, bos):
        if key not in self.names:
            name = f"c{len(self.list):03d}-{piece.label}"
            chunk = {"name": name, "text": self.text(key, piece)}
            if bos:
                chunk["bos"] = True
            self.names[key] = name
            self.list.append(chunk)
            self.cut_count += chunk["text"] != piece.key
        return self.names[key]


# ---- window edits between calls --------------------------------------------------------------------------

class Steps:
    """The steps of a trace, with what each branch's window holds and has evicted (trace.h's rules: recall
    only what this branch evicted, admit first sights, every chunk at most once per branch)."""

    def __init__(self):
        self.list, self.current = [], "main"
        self.branches = {"main": {"window": [], "evicted": set()}}

    def go_to(self, names):
        """Evict what is not in names, reorder survivors if their order changed, insert the rest in place."""
        branch = self.branches[self.current]
        window, wanted = branch["window"], set(names)
        for name in [n for n in window if n not in wanted]:
            self.list.append({"op": "evict", "chunk": name})
            window.remove(name)
            branch["evicted"].add(name)
        survivors = [n for n in names if n in window]
        if survivors != window:
            self.list.append({"op": "reorder", "order": survivors})
            window[:] = survivors
        for i, name in enumerate(names):
            if name in window:
                continue
            step = {"op": "recall" if name in branch["evicted"] else "admit", "chunk": name}
            before = next((n for n in names[i + 1:] if n in window), None)
            if before:
                step["before"] = before
            self.list.append(step)
            window.insert(window.index(before) if before else len(window), name)
            branch["evicted"].discard(name)

    def generate(self, note):
        self.list.append({"op": "generate", "max_tokens": GENERATE_TOKENS, "note": note})

    def fork(self, branch):
        parent = self.branches[self.current]
        self.branches[branch] = {"window": list(parent["window"]), "evicted": set(parent["evicted"])}
        self.list.append({"op": "fork", "branch": branch})
        self.current = branch

    def drop(self, branch):
        self.list.append({"op": "drop", "branch": branch})
        del self.branches[branch]
        self.current = "main"


def auto_cap(source, tokens, max_window):
    """The largest piece cap in [MIN_CAP, MAX_CAP] at which every call fits max_window with no piece
    dropped (so the window edits are exactly the agent's), or MIN_CAP when none does."""
    def fits(cap):
        chunks = Chunks(tokens, cap)
        try:
            return all(fit_call(call, chunks, max_window)[1] == 0 for call in source.calls)
        except SourceError:  # the fixed pieces alone do not fit at this cap
            return False

    lo, hi = MIN_CAP, MAX_CAP
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def build_trace(source, tokens, piece_cap, max_window):
    """The trace of one source and its counts (calls, chunks, steps); piece_cap 0 picks it (auto_cap)."""
    cap = piece_cap or auto_cap(source, tokens, max_window)
    chunks, steps = Chunks(tokens, cap), Steps()
    dropped, largest = 0, 0
    for call in source.calls:
        names, gone, total = fit_call(call, chunks, max_window, source.name)
        dropped, largest = dropped + gone, max(largest, total)
        if call.side:
            steps.fork(call.side)
        steps.go_to(names)
        steps.generate(call.note)
        if call.side:
            steps.drop(call.side)
    positions = tokens.engine.model_info.max_positions if tokens.engine else 0
    probe = tokens.count(source.probe)
    if positions and largest + probe + GENERATE_TOKENS > positions:
        raise SourceError(f"{source.name}: a call's window of {largest} tokens, the probe's {probe} and the answer's "
                          f"{GENERATE_TOKENS} pass the model's {positions} positions (--max-window {max_window}): give "
                          f"--max-window {positions - probe - GENERATE_TOKENS} or less")
    how = "the largest cap at which no call drops a piece" if not piece_cap else "--piece-cap"
    description = (f"{source.description} Converted from the recorded run by bench/replay/convert_real.py for a "
                   f"small model: each piece's text cut to {cap} tokens ({how}; head, ' ... ', tail) "
                   f"({chunks.cut_count} of {len(chunks.list)} chunks cut), a call's window kept <= {max_window} "
                   f"tokens by dropping its oldest history pieces ({dropped} pieces dropped over "
                   f"{len(source.calls)} calls; largest window {largest} tokens); tokens counted with {tokens.how}.")
    trace = {"format": "orbit-trace/1", "name": source.name, "description": description,
             "probe": {"text": source.probe}, "chunks": chunks.list, "steps": steps.list}
    return trace, {"calls": len(source.calls), "chunks": len(chunks.list), "steps": len(steps.list), "cap": cap}


# ---- replay and summary (--replay) ---------------------------------------------------------------------

def run_replay(args, trace, *extra):
    cmd = [str(args.orbit), "replay", str(trace), "--model", str(args.model), *extra, "--quiet"]
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SourceError(f"{trace}: orbit replay failed: {done.stderr.strip()}")


def replay(args, trace):
    """The --no-fidelity check, then default and prefix with fidelity; the summary row of the default."""
    run_replay(args, trace, "--policy", "default", "--no-fidelity")
    report_path = args.out / "replays" / trace.name
    report_path.parent.mkdir(parents=True, exist_ok=True)
    run_replay(args, trace, "--policy", "default,prefix", "--json", str(report_path))
    report = neutral(json.loads(report_path.read_text(encoding="utf-8")))
    return summary(trace.stem, report)


def summary(name, report):
    """The default policy's row: mean KL over every probed step and over the reads (the generate steps, what
    the model reads), how many are within the policy's KL budget (its ':kl=' spec), how many measured over
    ten times the plan's prediction, and critical forward tokens against the radix-cache yardstick."""
    default, prefix = report["policies"][0], next(p for p in report["policies"] if p["policy"] == "prefix")
    budget = float(re.search(r":kl=([0-9.eE+-]+)", default["policy"]).group(1))
    probed = [s for s in default["steps"] if s.get("fidelity")]
    reads = [s["fidelity"]["kl"] for s in probed if s["op"] == "generate"]
    planned = [s for s in probed if s.get("predicted_kl") is not None and s["predicted_kl"] >= 0]
    over = [s for s in planned if s["fidelity"]["kl"] > max(1e-4, 10 * s["predicted_kl"])]
    t = default["totals"]
    return {"trace": name, "steps": len(default["steps"]), "mean_kl": t["mean_kl"], "max_kl": t["max_kl"],
            "within": sum(s["fidelity"]["kl"] <= budget for s in probed), "probed": len(probed),
            "read_kl": sum(reads) / max(len(reads), 1), "reads_within": sum(k <= budget for k in reads),
            "reads": len(reads), "over_prediction": len(over), "planned": len(planned),
            "critical": t["critical_forward_tokens"],
            "radix": t["radix_tokens"], "prefix_critical": prefix["totals"]["critical_forward_tokens"]}


def print_table(rows):
    print(f"{'trace':32} {'steps':>5} {'mean KL':>8} {'max KL':>8} {'within':>8} {'read KL':>8} {'reads in':>8} "
          f"{'>10x':>8} {'default':>7} {'radix':>6} {'ratio':>5} {'prefix':>6}")
    for r in rows:
        print(f"{r['trace']:32} {r['steps']:5d} {r['mean_kl']:8.1e} {r['max_kl']:8.1e} "
              f"{r['within']:>3d}/{r['probed']:<4d} {r['read_kl']:8.1e} {r['reads_within']:>3d}/{r['reads']:<4d} "
              f"{r['over_prediction']:>3d}/{r['planned']:<4d} {r['critical']:7.0f} {r['radix']:6.0f} "
              f"{r['critical'] / max(r['radix'], 1):5.2f} {r['prefix_critical']:6.0f}")
    print("mean/max KL: the default policy over its probed steps; within: probed steps with KL <= its budget "
          "(:kl=); read KL, reads in: the same at generate steps (the model calls); >10x: probed steps with a plan whose KL "
          "is over 1e-4 and over ten times the plan's prediction; default, prefix: critical-path forward tokens; "
          "radix: the radix-cache yardstick over the same reads; ratio: default / radix.")


# ---- the command -----------------------------------------------------------------------------------------

def write_traces(args):
    """Converts every source into args.out; returns the written paths. The set is written whole or not at all:
    every trace is built first, then each is written beside its place and checked, and only then are they
    renamed into place, so a source that fails (its fixed pieces over --max-window, say) leaves args.out as it
    was rather than holding the traces before it beside an earlier run's."""
    tokens = Tokens(args.model)
    try:
        runs = all_sources(args.sources, args.questions)
        built = [(source, *build_trace(source, tokens, args.piece_cap, args.max_window)) for source in runs]
    finally:
        tokens.close()
    args.out.mkdir(parents=True, exist_ok=True)
    staged = []
    try:
        for source, trace, _ in built:
            path = args.out / f"{source.name}.json"
            part = path.with_name(path.name + ".part")
            staged.append((part, path))
            part.write_text(json.dumps(trace, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            validate(part, path)
    except BaseException:
        for part, _ in staged:
            part.unlink(missing_ok=True)
        raise
    for (source, _, counts), (part, path) in zip(built, staged):
        part.replace(path)
        print(f"{source.name}: {counts['calls']} calls, {counts['chunks']} chunks, {counts['steps']} steps "
              f"(piece cap {counts['cap']}) -> {path}", flush=True)
    return [path for _, path in staged]


def validate(written, path):
    """The bindings' trace loader on the written file (to be renamed to path), when they import (the replay checks
    it otherwise)."""
    try:
        import orbit
    except ImportError:
        return
    try:
        orbit.load_trace(str(written))
    except orbit.OrbitError as e:
        raise SourceError(f"{path}: the written trace does not load: {e}") from None


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sources", type=pathlib.Path, default=DEFAULT_SOURCES,
                    help="the shared traces folder (holding sources/) or the sources folder itself")
    ap.add_argument("--out", type=pathlib.Path, default=REPO / "out" / "real-traces")
    ap.add_argument("--model", type=pathlib.Path, default=DEFAULT_MODEL, help="whose tokenizer counts tokens")
    ap.add_argument("--max-window", type=int, default=460, help="most tokens a call's window holds")
    ap.add_argument("--piece-cap", type=int, default=0,
                    help="most tokens of one piece's text (default 0: per trace, the largest cap in "
                         f"[{MIN_CAP}, {MAX_CAP}] at which no call drops a piece)")
    ap.add_argument("--questions", type=int, default=4, help="Reflexion questions (with >1 trial) converted")
    ap.add_argument("--replay", action="store_true", help="replay every trace and print the summary table")
    ap.add_argument("--orbit", type=pathlib.Path, default=REPO / "build" / "cli" / "orbit", help="the CLI")
    args = ap.parse_args(argv)
    if args.max_window < 2:
        ap.error(f"--max-window must be at least 2, got {args.max_window}")
    if args.questions < 1:
        ap.error(f"--questions must be at least 1, got {args.questions}")
    if args.out.exists() and not args.out.is_dir():
        ap.error(f"--out {args.out} is a file, not a directory")
    if args.piece_cap not in range(0, args.max_window + 1) or args.piece_cap == 1:
        ap.error("--piece-cap must be 0 (picked per trace) or in [2, --max-window]")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        written = write_traces(args)
    except SourceError as e:
        print(f"convert_real.py: {e}", file=sys.stderr)
        return 2
    if args.replay:
        try:
            print_table([replay(args, path) for path in written])
        except SourceError as e:
            print(f"convert_real.py: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
