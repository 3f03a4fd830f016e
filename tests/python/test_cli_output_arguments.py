"""The file arguments `orbit replay --json OUT` and `orbit make-trace --out FILE` write to are checked before any
work (cli/args.cpp check_output_argument): an empty path, a directory that does not exist or is a file, and a
path that is a directory are refused at once, naming the argument. Before, replay checked only the last case
up front: an empty --json or one in a missing directory failed after the whole replay had run (minutes on a
long trace) with ": cannot move the replay report (--json) into place" or "cannot write the replay report
(--json) (temporary file ...)". Nor may the path be an input of the same run (check_output_not_input): the
trace replayed, the model, a tokenizer beside a llama2.c model, a file inside a Hugging Face model's directory."""
import subprocess

import pytest


def run(orbit_cli, *args):
    return subprocess.run([str(orbit_cli), *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture
def trace(orbit_cli, stories260k_path, tmp_path):
    path = tmp_path / "rag.trace.json"
    result = run(orbit_cli, "make-trace", "--kind", "rag", "--steps", "3", "--seed", "1", "--model",
                 stories260k_path, "--out", path)
    assert result.returncode == 0, result.stderr
    return path


def shared_root(trace, prefix, mode):
    """A directory under /tmp of `mode` (the unprivileged user reaches it, where pytest's tmp_path is 0700) holding
    a readable copy of `trace`: (root, the copy)."""
    import os
    import shutil
    import tempfile

    root = tempfile.mkdtemp(prefix=prefix)
    os.chmod(root, mode)
    readable = shutil.copy(trace, os.path.join(root, "trace.json"))
    os.chmod(readable, 0o644)
    return root, readable


def cases(tmp_path, command, name, what):
    """(path, what the error says) for each path the argument `name` refuses."""
    (tmp_path / "plain").write_text("not a directory")
    return [("", f"{command}: argument '{name}' is empty (give the path to write {what} to)"),
            (tmp_path / "missing" / "out.json",
             f"{command}: argument '{name}': the directory {tmp_path / 'missing'} does not exist"),
            (tmp_path / "plain" / "out.json", f"{command}: argument '{name}': {tmp_path / 'plain'} is not a directory"),
            (tmp_path, f"{tmp_path}: refusing to write {what} ({name}) over a directory")]


def test_replay_refuses_a_json_path_it_cannot_write_before_replaying(orbit_cli, stories260k_path, trace, tmp_path):
    for path, says in cases(tmp_path, "replay", "--json", "the replay report"):
        result = run(orbit_cli, "replay", trace, "--model", stories260k_path, "--no-fidelity", "--json", path)
        assert result.returncode == 1, result.stderr
        assert says in result.stderr, result.stderr
        assert "replay: policy" not in result.stderr  # refused before the first step's progress line
        assert result.stdout == ""


def test_replay_refuses_a_json_path_in_a_directory_it_may_not_write_before_replaying(orbit_cli, stories260k_path,
                                                                                      trace, as_unprivileged):
    # The report is written beside its path and renamed into place once the replay is over: a directory the
    # process may not write in failed then ("cannot write the replay report (--json) (temporary file ...):
    # Permission denied"), the replay's minutes and its table lost. Run as an unprivileged user (root may write
    # anywhere); a file named "--" ("--json --": the path left out) is refused too.
    import os
    import shutil

    as_user = as_unprivileged
    root, readable = shared_root(trace, "orbit-unwritable-", 0o755)
    try:
        closed = os.path.join(root, "closed")
        os.mkdir(closed, 0o555)
        out = os.path.join(closed, "report.json")
        result = subprocess.run([*as_user, str(orbit_cli), "replay", readable, "--model", str(stories260k_path),
                                 "--no-fidelity", "--json", out], capture_output=True, text=True, timeout=300)
        assert result.returncode == 1, result.stderr
        assert f"replay: argument '--json': cannot write the replay report in {closed}: Permission denied" in \
            result.stderr, result.stderr
        assert "replay: policy" not in result.stderr and result.stdout == ""  # before the first step
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = run(orbit_cli, "replay", trace, "--model", stories260k_path, "--no-fidelity", "--json", "--")
    assert result.returncode == 1 and "argument '--json' is '--', which reads as an option" in result.stderr


def test_another_users_file_in_a_sticky_directory_is_refused_before_the_run(orbit_cli, stories260k_path, trace,
                                                                            as_unprivileged):
    # In a sticky directory (/tmp's mode) only a file's owner may rename over it: the run went to its end, then
    # failed to move its output into place. A file of the user's own there is replaced as before.
    import os
    import shutil

    if not as_unprivileged:
        pytest.skip("needs root: a file of another user is made for the unprivileged run to meet")
    root, readable = shared_root(trace, "orbit-sticky-", 0o1777)
    try:
        theirs = os.path.join(root, "theirs.json")
        with open(theirs, "w") as f:
            f.write("root's")
        os.chmod(theirs, 0o666)  # writable by anyone, yet not replaceable by rename
        for command in (["replay", readable, "--model", str(stories260k_path), "--no-fidelity", "--json", theirs],
                        ["make-trace", "--kind", "rag", "--steps", "3", "--model", str(stories260k_path), "--out",
                         theirs]):
            result = subprocess.run([*as_unprivileged, str(orbit_cli), *command], capture_output=True, text=True,
                                    timeout=300)
            name = "--json" if command[0] == "replay" else "--out"
            assert result.returncode == 1, result.stderr
            assert (f"{command[0]}: argument '{name}': cannot replace {theirs}: it belongs to another user (uid 0) in "
                    f"the sticky directory {root}") in result.stderr, result.stderr
            assert "replay: policy" not in result.stderr and "make-trace: wrote" not in result.stdout
        with open(theirs) as f:
            assert f.read() == "root's"
        mine = os.path.join(root, "mine.json")
        for _ in range(2):  # made, then replaced by its owner
            result = subprocess.run([*as_unprivileged, str(orbit_cli), "make-trace", "--kind", "rag", "--steps", "3",
                                     "--model", str(stories260k_path), "--out", mine], capture_output=True, text=True,
                                    timeout=300)
            assert result.returncode == 0, result.stderr
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_make_trace_refuses_an_out_path_it_cannot_write(orbit_cli, stories260k_path, tmp_path):
    for path, says in cases(tmp_path, "make-trace", "--out", "the trace file"):
        result = run(orbit_cli, "make-trace", "--kind", "rag", "--steps", "3", "--seed", "1", "--model",
                     stories260k_path, "--out", path)
        assert result.returncode == 1, result.stderr
        assert says in result.stderr, result.stderr


@pytest.mark.parametrize("argument, left_out", [("--device", "leave it out for cpu"),
                                                ("--dtype", "leave it out for float32")])
def test_an_empty_device_or_dtype_is_refused(orbit_cli, stories260k_path, argument, left_out):
    # Before, the runtime read "" as the default and `orbit info --device ""` ran on cpu.
    result = run(orbit_cli, "info", "--model", stories260k_path, argument, "")
    assert result.returncode == 1, result.stderr
    assert f"{argument}: the value is empty ({left_out})" in result.stderr


def test_an_output_never_replaces_an_input_of_the_run(orbit_cli, stories260k_path, models_dir, tmp_path):
    # Before, `replay T --json T` replaced the trace with its report and `make-trace --out MODEL` the model.
    model_dir = tmp_path / "llama2c"
    model_dir.mkdir()
    model = model_dir / "model.bin"
    model.write_bytes(stories260k_path.read_bytes())
    tokenizer = model_dir / "tok512.bin"
    tokenizer.write_bytes((stories260k_path.parent / "tok512.bin").read_bytes())
    trace = tmp_path / "web.trace.json"
    made = run(orbit_cli, "make-trace", "--kind", "web", "--steps", "2", "--seed", "1", "--model", model, "--out", trace)
    assert made.returncode == 0, made.stderr
    before = {path: path.read_bytes() for path in (model, tokenizer, trace)}
    replaces = "writing it would replace this run's input; give another path"
    for out, given in ((trace, "TRACE"), (model, "--model"), (tokenizer, "--model (the tokenizer beside it)")):
        result = run(orbit_cli, "replay", trace, "--model", model, "--quiet", "--no-fidelity", "--policy", "blind",
                     "--json", out)
        assert result.returncode == 1, result.stderr
        assert f"replay: argument '--json' ({out}) is the file given as {given}: {replaces}" in result.stderr
        if out != trace:
            result = run(orbit_cli, "make-trace", "--kind", "web", "--steps", "1", "--model", model, "--out", out)
            assert result.returncode == 1, result.stderr
            assert f"make-trace: argument '--out' ({out}) is the file given as {given}: {replaces}" in result.stderr
    assert {path: path.read_bytes() for path in before} == before
    tinystories_dir = models_dir / "tinystories-656k"
    config = tinystories_dir / "config.json"
    result = run(orbit_cli, "make-trace", "--kind", "web", "--steps", "1", "--model", tinystories_dir, "--out", config)
    assert result.returncode == 1, result.stderr
    assert f"is a file inside the directory given as --model ({tinystories_dir})" in result.stderr
    # Another existing file is replaced, as --help says.
    other = tmp_path / "report.json"
    other.write_text("old")
    result = run(orbit_cli, "replay", trace, "--model", model, "--quiet", "--no-fidelity", "--policy", "blind",
                 "--json", other)
    assert result.returncode == 0, result.stderr
    assert other.read_text().startswith("{")
