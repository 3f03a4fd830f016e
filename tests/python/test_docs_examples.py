"""The documentation's examples, run as a reader runs them: README's self-contained Python blocks, every
script in bindings/python/examples/ from the command line (as README's samples table says), bindings/README.md's
examples, the examples help(orbit) and help(orbit.Engine) open with, README's C++ block against the sample it
says it is, and every `orbit` option the docs' command lines use (every *.md) against that command's --help. An
example that breaks, or a doc that names an option that is gone, fails here.

Needs the built module (ORBIT_PYTHON_PATH) and, for the CLI check, ORBIT_CLI (see conftest.py).
"""
import functools
import os
import re
import shlex
import subprocess
import sys
import textwrap

import pytest

# Each example's short run: its arguments and a line its output must hold. A new example needs an entry.
EXAMPLES = {
    "stream_chat.py": (["--max-words", "3"], r"\[cancelled, \d+ tokens\]"),
    "async_agents.py": (["--steps", "1", "--max-words", "3"], r"^both agents: [\d.]+ s$"),
    "tool_loop.py": (["--short"], r"^forward tokens: \d+ computed"),
}
TIMEOUT = 300


def readme(repo_root):
    return (repo_root / "README.md").read_text()


def run_python(orbit, args, cwd, **kwargs):
    env = dict(os.environ)
    package_parent = os.path.dirname(os.path.dirname(orbit.__file__))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, **kwargs)


def standalone_python_blocks(text):
    """README's ```python blocks that are whole programs (they import what they use)."""
    return [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if b.startswith("import ")]


def test_readme_has_standalone_python_blocks(repo_root):
    assert len(standalone_python_blocks(readme(repo_root))) >= 3


@pytest.mark.parametrize("index", [0, 1, 2])
def test_readme_python_block_runs(orbit, repo_root, index):
    block = standalone_python_blocks(readme(repo_root))[index]
    out = run_python(orbit, ["-c", block], cwd=repo_root)
    assert out.returncode == 0, f"README's standalone Python block {index} failed:\n{block}\n{out.stderr}"
    assert out.stdout.strip()  # each prints what it did


def replay_line(line):
    """(policy, forward tokens, patch hits, mean KL) of a line the README's replay example prints."""
    m = re.fullmatch(r"(\S+)\s+(\d+) forward tokens,\s+(\d+) patch hits, mean KL (\S+)", line.strip())
    assert m, line
    return m.group(1), int(m.group(2)), int(m.group(3)), float(m.group(4))


def test_readme_replay_block_prints_what_readme_shows(orbit, repo_root):
    """README's `orbit.replay` example prints the lines README shows after it: the policies, their forward tokens
    and patch hits as shown, each mean KL within 10% of the one shown (or, for the exact baselines, as near 0),
    and rank 16 measurably closer to a re-prefill than rank 4 (the difference the example is there to show)."""
    m = re.search(r"```python\n(import orbit\n[^`]*?orbit\.replay\(.*?)```\n\nprints\n\n```text\n(.*?)```",
                  readme(repo_root), re.S)
    assert m, "README's replay example and the ```text block of what it prints after it"
    out = run_python(orbit, ["-c", m.group(1)], cwd=repo_root)
    assert out.returncode == 0, out.stderr
    got = [replay_line(line) for line in out.stdout.splitlines()]
    shown = [replay_line(line) for line in m.group(2).splitlines()]
    assert [g[:3] for g in got] == [s[:3] for s in shown], out.stdout
    for g, s in zip(got, shown):
        assert (g[3] < 1e-9 and s[3] < 1e-9) or g[3] == pytest.approx(s[3], rel=0.1), (g, s)
    kl = {g[0]: g[3] for g in got}
    assert kl["patch:4"] > 1.5 * kl["patch:16"] > 0, kl


def test_readme_cpp_block_is_the_quickstart_sample(repo_root):
    """README says its C++ block is samples/cpp/quickstart.cpp (which the build compiles and
    scripts/check-install.sh runs): the same code, the file's header comment aside."""
    block = re.findall(r"```cpp\n(.*?)```", readme(repo_root), re.S)[0]
    sample = (repo_root / "samples" / "cpp" / "quickstart.cpp").read_text()
    code = sample[sample.index("#include"):]
    assert block == code, "README's C++ block differs from samples/cpp/quickstart.cpp: copy the file's code"


def test_every_example_has_a_short_run(repo_root):
    scripts = {p.name for p in (repo_root / "bindings" / "python" / "examples").glob("*.py")}
    assert scripts == set(EXAMPLES), "add the example's short run to EXAMPLES"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs_from_the_command_line(orbit, repo_root, stories260k_path, name):
    args, expected = EXAMPLES[name]
    script = repo_root / "bindings" / "python" / "examples" / name
    out = run_python(orbit, [str(script), *args, "--model", str(stories260k_path)], cwd=repo_root)
    assert out.returncode == 0, f"{name} {' '.join(args)} failed:\n{out.stderr}"
    assert re.search(expected, out.stdout, re.M), f"{name}: no line matching {expected!r} in:\n{out.stdout}"
    usage = run_python(orbit, [str(script), "--help"], cwd=repo_root)
    assert usage.returncode == 0 and "--model" in usage.stdout
    for option in args:
        if option.startswith("--"):
            assert option in usage.stdout, f"{name} --help does not list {option}"


@functools.lru_cache(maxsize=None)
def cli_accepted(orbit_cli, command):
    """The arguments `orbit COMMAND` accepts, from the last line of its --help."""
    out = subprocess.run([str(orbit_cli), *command.split(), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"orbit {command} --help: {out.stderr}"
    line = next((l for l in out.stdout.splitlines() if l.startswith("accepted arguments:")), None)
    return out.stdout, set(re.findall(r"--[a-z0-9-]+", line if line else out.stdout))


def fenced_blocks(text):
    """[(language, body)] of a markdown text's fenced code blocks, opening and closing fences told apart."""
    blocks, lang, body = [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if lang is None:
                lang, body = line[3:].strip(), []
            else:
                blocks.append((lang, "\n".join(body) + "\n"))
                lang = None
        elif lang is not None:
            body.append(line)
    return blocks


def doc_cli_lines(text):
    """A doc's command lines that run `orbit` (in ``` or ```sh blocks; continuations joined, comments and
    environment assignments dropped)."""
    lines = []
    for lang, block in fenced_blocks(text):
        if lang not in ("", "sh", "bash"):
            continue
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            m = (re.search(r"(?:^|\s)((?:\S*/)?build[^/\s]*/cli/orbit [a-z].*)$", line)
                 or re.match(r"^(orbit [a-z].*)$", line))
            if m:
                lines.append(m.group(1).rstrip("&").strip())
    return lines


def markdown_docs(repo_root):
    skip = ("build", "node_modules", ".git", "out")
    return [p for p in sorted(repo_root.rglob("*.md"))
            if not any(part in skip or part.startswith("build") for part in p.relative_to(repo_root).parts)]


def test_doc_cli_lines_use_options_their_command_has(orbit_cli, repo_root):
    commands, wrong, count = set(), [], 0
    for doc in markdown_docs(repo_root):
        for line in doc_cli_lines(doc.read_text()):
            count += 1
            words = shlex.split(line.replace("[", " ").replace("]", " ").replace("|", " "))
            command = words[1] if words[1] != "store" else f"store {words[2]}"
            commands.add(command.split()[0])
            _, accepted = cli_accepted(orbit_cli, command)
            wrong += [f"{doc.relative_to(repo_root)}: {line}: orbit {command} has no {w}"
                      for w in words[2:] if w.startswith("--") and w.split("=")[0] not in accepted]
    assert count >= 30 and len(doc_cli_lines(readme(repo_root))) >= 10
    assert not wrong, "\n".join(wrong)
    top, _ = cli_accepted(orbit_cli, "")
    listed = set(re.findall(r"^  ([a-z-]+)\b", top, re.M))
    assert commands <= listed, f"the docs use commands `orbit --help` does not list: {commands - listed}"


def with_repo_models(code, repo_root):
    """The docs' examples name the bundled models from the repository root; run elsewhere, they get the path."""
    return code.replace('"models/', f'"{repo_root}/models/').replace("'models/", f"'{repo_root}/models/")


def bindings_readme_blocks(repo_root):
    """bindings/README.md's examples: the indented program under '## Use' and the first block under '## Text'."""
    text = (repo_root / "bindings" / "README.md").read_text()
    use = text.split("## Use\n", 1)[1]
    lines = []
    for line in use.splitlines()[1:]:
        if line and not line.startswith("    "):
            break
        lines.append(line[4:])
    text_block = re.findall(r"```python\n(.*?)```", text.split("## Text\n", 1)[1], re.S)[0]
    return ["\n".join(lines), "import orbit\n" + text_block]


@pytest.mark.parametrize("index", [0, 1])
def test_bindings_readme_example_runs(orbit, repo_root, tmp_path, index):
    block = bindings_readme_blocks(repo_root)[index]
    out = run_python(orbit, ["-c", with_repo_models(block, repo_root)], cwd=tmp_path)  # store_dir="store" here
    assert out.returncode == 0, f"bindings/README.md's example {index} failed:\n{block}\n{out.stderr}"
    assert out.stdout.strip()


def docstring_example(doc):
    """The indented example after a docstring's first '::' or ':\\n\\n' (dedented)."""
    body = re.split(r":\n\n", doc, maxsplit=1)[1]
    lines = []
    for line in body.splitlines():
        if line and not line.startswith("    "):
            break
        lines.append(line)
    return textwrap.dedent("\n".join(lines))


@pytest.mark.parametrize("where", ["orbit", "orbit.Engine"])
def test_docstring_example_runs(orbit, repo_root, tmp_path, where):
    """help(orbit) and help(orbit.Engine) open with an example; the reader supplies `numpy_or_torch_array`."""
    doc = orbit.__doc__ if where == "orbit" else orbit.Engine.__doc__
    code = ("import numpy as np\nnumpy_or_torch_array = np.zeros((4, 64), np.float32)\n"
            + "import orbit\n" + docstring_example(doc))
    out = run_python(orbit, ["-c", with_repo_models(code, repo_root)], cwd=tmp_path)
    assert out.returncode == 0, f"{where}'s docstring example failed:\n{code}\n{out.stderr}"
