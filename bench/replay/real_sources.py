"""The recorded runs of four public agent frameworks (../shared/traces/sources), read into the calls a
converter turns into window edits (convert_real.py): each call's context as an ordered list of pieces. A file
that is missing or does not have the shape read here raises SourceError naming the file and field."""
import dataclasses
import json
import re


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


def all_sources(sources, questions):
    """Every source's runs, in a fixed order; a SourceError names the file and field at fault."""
    if not sources.is_dir():
        raise SourceError(f"{sources}: no such directory (pass --sources DIR, the folder holding sources/)")
    folder = sources / "sources" if (sources / "sources").is_dir() else sources
    return ([parse_swe_agent(folder), parse_openhands(folder)] + parse_reflexion(folder, questions) +
            [parse_webshop(folder)])
