"""An option followed by another of its command's argument names is refused as a value left out (cli/args.cpp):
`orbit serve --store --no-anticipate` made a store directory named "--no-anticipate" in the working directory
and served with anticipation on, and `orbit replay ... --json --quiet` wrote its report to a file named
"--quiet" while printing its progress. "--help" still passes as a value (`orbit tokenize --text --help`
tokenizes the text "--help")."""
import json
import pathlib
import subprocess


def run(orbit_cli, *args, cwd=None, timeout=120):
    """The command's result; paths resolved, since it may run in another directory (cwd)."""
    absolute = [str(a.resolve()) if isinstance(a, pathlib.Path) else str(a) for a in args]
    return subprocess.run([str(pathlib.Path(orbit_cli).resolve()), *absolute], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def test_serve_refuses_a_flag_as_the_store_directory(orbit_cli, stories260k_path, tmp_path):
    # Before, the server started (this test ran into its timeout) with a store in tmp_path/--no-anticipate.
    result = run(orbit_cli, "serve", "--model", stories260k_path, "--host", "127.0.0.1", "--port", "0", "--store",
                 "--no-anticipate", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert ("serve: argument '--store' needs a value (the next argument, '--no-anticipate', is one of serve's "
            "arguments)") in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_replay_refuses_a_flag_as_its_json_path(orbit_cli, stories260k_path, tmp_path):
    trace = tmp_path / "rag.trace.json"
    made = run(orbit_cli, "make-trace", "--kind", "rag", "--steps", "3", "--seed", "1", "--model", stories260k_path,
               "--out", trace)
    assert made.returncode == 0, made.stderr
    result = run(orbit_cli, "replay", trace, "--model", stories260k_path, "--no-fidelity", "--json", "--quiet",
                 cwd=tmp_path, timeout=300)
    assert result.returncode == 1, result.stderr
    assert "replay: argument '--json' needs a value (the next argument, '--quiet'" in result.stderr
    assert not (tmp_path / "--quiet").exists()


def test_help_still_passes_as_a_value(orbit_cli, stories260k_path):
    result = run(orbit_cli, "tokenize", "--model", stories260k_path, "--text", "--help")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["tokens"][0] == 1  # the BOS, then the text's tokens: not the help text
    assert len(json.loads(result.stdout)["tokens"]) > 1


def test_an_empty_path_is_refused_naming_its_argument(orbit_cli, stories260k_path):
    # Before, the path's own error named nothing: ": no such file or directory", ": tokenizer file not found".
    model = str(stories260k_path)
    for command, args, name in [
            ("info", ["--model", ""], "--model"),
            ("tokenize", ["--tokenizer", "", "--text", "hi"], "--tokenizer"),
            ("replay", ["--trace", "", "--model", model], "--trace"),
            ("serve", ["--model", model, "--chat-template", ""], "--chat-template"),
            ("serve", ["--model", model, "--api-key-file", ""], "--api-key-file")]:
        result = run(orbit_cli, command, *args, timeout=60)
        assert result.returncode == 1, (command, name, result.stderr)
        assert f"{command}: argument '{name}' is empty (give a path)" in result.stderr, result.stderr


def test_a_directory_where_a_file_goes_is_named_as_one(orbit_cli, stories260k_path, models_dir, tmp_path):
    # A directory named model.safetensors read "neither model.safetensors nor ... is present"; a --tokenizer
    # directory without tokenizer.json read "<dir>/tokenizer.json: cannot open".
    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        source = models_dir / "tinystories-656k" / name
        if source.exists():
            (model / name).write_bytes(source.read_bytes())
    (model / "model.safetensors").mkdir()
    result = run(orbit_cli, "info", "--model", model)
    assert result.returncode == 1
    assert f"{model / 'model.safetensors'}: not a regular file (a directory;" in result.stderr, result.stderr
    result = run(orbit_cli, "tokenize", "--model", stories260k_path, "--tokenizer", tmp_path, "--text", "hi")
    assert result.returncode == 1
    assert f"{tmp_path}: a directory with no tokenizer.json" in result.stderr, result.stderr
