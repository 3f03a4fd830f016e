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
import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_SOURCES = REPO.parent / "shared" / "traces"
DEFAULT_MODEL = REPO / "models" / "stories260K" / "stories260K.bin"
GENERATE_TOKENS = 4
CUT_MARK = " ... "  # where a piece's text was cut
MIN_CAP, MAX_CAP = 16, 64  # the range the piece cap is picked from


class SourceError(Exception):
    """A source file that is missing or does not have the shape the converter reads."""


@dataclasses.dataclass
class Piece:
    key: str    # identity across calls: the full text, before any cut
    label: str  # a short role used in the chunk's name (system, tool, page, thought, ...)
    keep: bool = False  # fixed by the framework: never dropped to fit the window


@dataclasses.dataclass
class Call:
    pieces: list
    note: str
    side: str = ""  # a side call: replayed on a branch of this name, forked from main and dropped after


@dataclasses.dataclass
class Source:
    name: str
    description: str
    probe: str  # the fidelity query: the text a call's generation follows
    calls: list


# ---- reading the sources ---------------------------------------------------------------------------------

def read_text(path):
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SourceError(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SourceError(f"{path}: unreadable: {e}") from None


def read_json(path):
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise SourceError(f"{path}: not JSON: {e}") from None


def field(obj, name, kind, path, where=""):
    """obj[name], which must be a `kind`; a SourceError naming the file and field otherwise."""
    at = f"{where}.{name}" if where else name
    if not isinstance(obj, dict) or name not in obj:
        raise SourceError(f"{path}: field '{at}' is missing")
    if not isinstance(obj[name], kind):
        raise SourceError(f"{path}: field '{at}' is a {type(obj[name]).__name__}, not a {kind.__name__}")
    return obj[name]


def clean(text):
    """Plain text for the tokenizer: CRLF folded to LF, control characters other than LF and tab removed."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", "", text)


# ---- SWE-agent -------------------------------------------------------------------------------------------

SWE_FILE = "swe-agent_marshmallow-code__marshmallow-1867.traj"


def swe_message(message, path, where):
    """One message as the plain `role: content` text a chat template would hold, tool calls included."""
    role = field(message, "role", str, path, where)
    text = f"{role}: {field(message, 'content', str, path, where)}"
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        text += f"\n[{fn.get('name', 'tool')}] {fn.get('arguments', '')}"
    label = {"user": "task" if where.endswith("[1]") else "user"}.get(role, role)
    return Piece(key=clean(text), label=label, keep=role == "system" or label == "task")


def parse_swe_agent(sources):
    """Call 0 sends the system prompt and the issue; call i > 0 sends the message list step i-1 recorded
    (its action and observation appended, the history processor's stubs applied)."""
    path = sources / SWE_FILE
    steps = field(read_json(path), "trajectory", list, path)
    if not steps:
        raise SourceError(f"{path}: field 'trajectory' is empty")
    lists = []
    for i, step in enumerate(steps):
        where = f"trajectory[{i}]"
        messages = field(step, "messages", list, path, where)
        lists.append([swe_message(m, path, f"{where}.messages[{j}]") for j, m in enumerate(messages)])
    first = [p for p in lists[0] if p.label in ("system", "task")]
    calls = [Call(first, "call 0: system prompt and issue")]
    calls += [Call(pieces, f"call {i + 1}: after action {i}") for i, pieces in enumerate(lists[:-1])]
    return Source("real-swe-agent-marshmallow-1867",
                  "SWE-agent 1.0 fixing marshmallow-code/marshmallow#1867 (princeton-nlp/SWE-agent demonstration "
                  "trajectory), one piece per message; old tool outputs become stubs in the middle of the context.",
                  "\nassistant:", calls)


# ---- OpenHands BrowsingAgent -----------------------------------------------------------------------------

OPENHANDS_DIR = "openhands_browsing_agent_test_browse_internet"
SECTION_START = re.compile(r"^(# |IMPORTANT!|Here is an example)")
SECTION_LABELS = {"# Instructions": "instructions", "# Goal": "goal", "# Action Space": "actions",
                  "IMPORTANT!": "warning", "# Current Page URL": "url", "# Current Accessibility Tree": "page",
                  "# Previous Actions": "history", "Here is an example": "example"}


def browsing_sections(text):
    """The BrowserGym prompt split where a section starts: a '# ' heading, the warning, the closing example."""
    sections, lines = [], []
    for line in clean(text).split("\n"):
        if SECTION_START.match(line) and lines:
            sections.append("\n".join(lines))
            lines = []
        lines.append(line)
    sections.append("\n".join(lines))
    pieces = []
    for section in sections:
        label = next((v for k, v in SECTION_LABELS.items() if section.startswith(k)), "section")
        pieces.append(Piece(key=section, label=label, keep=label in ("instructions", "goal", "actions")))
    return pieces


def parse_openhands(sources):
    folder = sources / OPENHANDS_DIR
    prompts = sorted(folder.glob("prompt_*.log")) if folder.is_dir() else []
    if not prompts:
        raise SourceError(f"{folder}: missing, or holds no prompt_NNN.log")
    calls = [Call(browsing_sections(read_text(p)), f"call {i}: {p.name}") for i, p in enumerate(prompts)]
    return Source("real-openhands-browsing",
                  "OpenHands BrowsingAgent (OpenDevin/OpenDevin integration test test_browse_internet), 15 prompts "
                  "split at their sections; the page and the action list are replaced mid-prompt every call.",
                  "\nIn order to accomplish my goal", calls)


# ---- ReAct on WebShop ------------------------------------------------------------------------------------

WEBSHOP_FILE = "react_webshop_episode.json"


def parse_webshop(sources):
    """The notebook's loop: call j sends prompt1 then steps 0..j as `{obs}\\n\\nAction:` for the reset and
    ` {action}\\nObservation: {obs}\\n\\nAction:` for every later step (append-only)."""
    path = sources / WEBSHOP_FILE
    doc = read_json(path)
    prompt1 = field(doc, "prompt1", str, path)
    printed = field(doc, "printed_episode", str, path)
    steps = re.findall(r"Action: (.*?)\nObservation: (.*?)\n\n(?=Action: |\Z)", printed + "\n\n", re.S)
    if not steps or steps[0][0] != "reset":
        raise SourceError(f"{path}: field 'printed_episode' does not start with 'Action: reset\\nObservation: '")
    pieces = [Piece(key=clean(prompt1), label="fewshot", keep=True),
              Piece(key=clean(f"{steps[0][1]}\n\nAction:"), label="task", keep=True)]
    pieces += [Piece(key=clean(f" {a}\nObservation: {o}\n\nAction:"), label="step") for a, o in steps[1:]]
    calls = [Call(pieces[:j + 2], f"call {j}: after {steps[j][0][:40]}") for j in range(len(steps))]
    return Source(f"real-webshop-{doc.get('episode', 'episode')}",
                  "ReAct on WebShop (ysymyth/ReAct WebShop.ipynb, prompt1 and one printed episode), one piece per "
                  "step; append-only history, the case where a prefix cache loses nothing.",
                  " click[", calls)


# ---- Reflexion on HotpotQA -------------------------------------------------------------------------------

REFLEXION_LOG = "reflexion_hotpotqa_ReAct_reflexion_100_questions_5_trials.txt"
REFLEXION_PROMPTS = "reflexion_hotpotqa_prompts.json"
TRIAL_HEADER = re.compile(r"^BEGIN TRIAL (\d+)$")
STATUS_HEADER = re.compile(r"^-+ BEGIN (CORRECT|INCORRECT|HALTED) AGENTS -+$")
SCRATCH_LINE = re.compile(r"^(Thought|Action|Observation) \d+:")
REFLECTION_MARK = "You have attempted to answer following question before and failed."


def reflexion_blocks(text, path):
    """Every agent record of the log: (trial, status, lines from its 'Question:' to its 'Correct answer:')."""
    blocks, trial, status, lines = [], 0, "", None
    for line in text.split("\n"):
        m_trial, m_status = TRIAL_HEADER.match(line), STATUS_HEADER.match(line)
        if m_trial or m_status:
            trial = int(m_trial.group(1)) if m_trial else trial
            status = m_status.group(1) if m_status else status
        elif line.startswith("Question:") and lines is None:
            lines = [line]
        elif lines is not None:
            lines.append(line)
            if line.startswith("Correct answer:"):
                blocks.append((trial, status, lines))
                lines = None
    if not blocks:
        raise SourceError(f"{path}: no agent records ('Question:' ... 'Correct answer:') found")
    return blocks


def reflexion_record(lines, path):
    """One record: (question, reflections, scratchpad entries as 'Thought n: ...' texts)."""
    head, rest = lines[0][len("Question:"):], lines[1:]
    question = head.split(REFLECTION_MARK)[0].strip()
    reflections, scratch = [], []
    for line in rest[:-1]:
        if SCRATCH_LINE.match(line):
            scratch.append(line)
        elif scratch:
            scratch[-1] += "\n" + line
        elif line.startswith("- "):
            reflections.append(line[2:].strip())
    if not scratch:
        raise SourceError(f"{path}: the record of question '{question[:60]}' has no Thought/Action/Observation")
    return question, reflections, [clean(s.strip()) for s in scratch]


def reflexion_questions(text, path):
    """Per question, in the order of first appearance: its trials until the first correct one."""
    questions = {}
    for trial, status, lines in reflexion_blocks(text, path):
        question, reflections, scratch = reflexion_record(lines, path)
        trials = questions.setdefault(question, [])
        if not trials or trials[-1]["status"] != "CORRECT":
            trials.append({"trial": trial, "status": status, "reflections": reflections, "scratch": scratch})
    return questions


def react_calls(fixed, scratch, trial):
    """A trial's calls: per step a thought call and an action call, each after the scratchpad so far."""
    calls, pad = [], []
    for entry in scratch:
        kind = entry.split(" ", 1)[0]
        if kind in ("Thought", "Action"):
            calls.append(Call(fixed + list(pad), f"trial {trial}: {entry.split(':', 1)[0].lower()}"))
        pad.append(Piece(key="\n" + entry, label=kind.lower()))
    return calls, pad


def reflexion_source(index, question, trials, prompts, path):
    """One question's trials: a failed trial's reflection call runs on a side branch; the next trial holds
    the reflections (the framework's header, then one piece per reflection) before the question."""
    p = {k: field(prompts, k, str, path) for k in ("REACT_REFLECT_INSTRUCTION", "REFLECT_INSTRUCTION",
                                                  "REFLECTION_HEADER", "WEBTHINK_SIMPLE6", "REFLECTIONS")}
    react = p["REACT_REFLECT_INSTRUCTION"].split("{examples}")[0]
    reflect = p["REFLECT_INSTRUCTION"].split("{examples}")[0]
    fixed_react = [Piece(clean(react), "instruction", True),
                   Piece(clean(p["WEBTHINK_SIMPLE6"] + "\n(END OF EXAMPLES)"), "examples", True)]
    fixed_reflect = [Piece(clean(reflect), "instruction", True),
                     Piece(clean(p["REFLECTIONS"] + "\nPrevious trial:"), "examples", True)]
    q = Piece(clean(f"\nQuestion: {question}"), "question", True)
    calls = []
    for n, t in enumerate(trials):
        notes = [Piece(clean(p["REFLECTION_HEADER"] + "Reflections:"), "reflections", True)] if t["reflections"] else []
        notes += [Piece(clean("- " + r), "reflection", True) for r in t["reflections"]]
        trial_calls, pad = react_calls(fixed_react + notes + [q], t["scratch"], t["trial"])
        calls += trial_calls
        if n + 1 < len(trials):
            end = Piece("\n\nReflection:", "cue", True)
            calls.append(Call(fixed_reflect + [q] + pad + [end], f"trial {t['trial']}: reflection", f"reflect{n + 1}"))
    outcome = " → ".join(t["status"].lower() for t in trials)
    return Source(f"real-reflexion-q{index:02d}",
                  f"Reflexion (noahshinn/reflexion, ReAct + reflexion on HotpotQA), question #{index} of the log "
                  f"(0-based, in order of first appearance), "
                  f"{len(trials)} trials ({outcome}); per ReAct step a thought call and an action call, reflection "
                  f"calls on a side branch, failed scratchpads dropped and reflections inserted before the question.",
                  "\nThought:", calls)


def parse_reflexion(sources, count):
    path, prompts_path = sources / REFLEXION_LOG, sources / REFLEXION_PROMPTS
    questions = reflexion_questions(read_text(path), path)
    prompts = read_json(prompts_path)
    chosen = [(i, q, t) for i, (q, t) in enumerate(questions.items()) if len(t) > 1][:count]
    return [reflexion_source(i, q, t, prompts, prompts_path) for i, q, t in chosen]


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
    report = json.loads(report_path.read_text(encoding="utf-8"))
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

def all_sources(sources, questions):
    """Every source's runs, in a fixed order; a SourceError names the file and field at fault."""
    if not sources.is_dir():
        raise SourceError(f"{sources}: no such directory (pass --sources DIR, the folder holding sources/)")
    folder = sources / "sources" if (sources / "sources").is_dir() else sources
    return ([parse_swe_agent(folder), parse_openhands(folder)] + parse_reflexion(folder, questions) +
            [parse_webshop(folder)])


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
