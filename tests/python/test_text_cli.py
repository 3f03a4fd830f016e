"""Text on the command line: `orbit tokenize` against the committed reference ids (an independent Python
encoder, tokenizer_reference.py), `orbit generate`, `orbit logits --text`, `orbit fidelity` with text, and
`--help` on every subcommand and benchmark."""
import functools
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tokenizer_reference  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "tokenizer"


def run(cli, *args, check=True):
    r = subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_tokenize_matches_the_reference_ids(orbit_cli, stories260k_path):
    doc = json.loads((DATA / "tok512.json").read_text(encoding="utf-8"))
    for case in doc["cases"]:
        if not case["text"]:
            continue
        args = ["tokenize", "--model", stories260k_path, "--text", case["text"]] + ([] if case["bos"] else ["--no-bos"])
        assert json.loads(run(orbit_cli, *args).stdout)["tokens"] == case["ids"], case["text"]


def test_the_reference_file_is_what_the_reference_encoder_gives(stories260k_path):
    ref = tokenizer_reference.Reference(stories260k_path.parent / "tok512.bin")
    for case in json.loads((DATA / "tok512.json").read_text(encoding="utf-8"))["cases"]:
        assert ref.encode(case["text"], bos=case["bos"]) == case["ids"]


def test_tokenize_the_32000_piece_layout(orbit_cli):
    path = os.environ.get("ORBIT_LLAMA2C_TOKENIZER")
    if not path:
        pytest.skip("ORBIT_LLAMA2C_TOKENIZER is not set (llama2.c's 32000-piece tokenizer.bin, not in the repository)")
    for case in json.loads((DATA / "tokenizer32000.json").read_text(encoding="utf-8"))["cases"]:
        if not case["text"]:
            continue
        args = ["tokenize", "--tokenizer", path, "--text", case["text"]] + ([] if case["bos"] else ["--no-bos"])
        assert json.loads(run(orbit_cli, *args).stdout)["tokens"] == case["ids"], case["text"]


def test_generate_continues_the_prompt_as_text(orbit_cli, stories260k_path):
    out = run(orbit_cli, "generate", "--model", stories260k_path, "--prompt", "Once upon a time", "--max-tokens", "20").stdout
    assert out.startswith(", there was a little girl named Lily.")
    j = json.loads(run(orbit_cli, "generate", "--model", stories260k_path, "--prompt", "Once upon a time",
                       "--max-tokens", "20", "--json").stdout)
    assert len(j["tokens"]) == 20 and j["text"] == out.rstrip("\n")
    prompt = json.loads(run(orbit_cli, "tokenize", "--model", stories260k_path, "--text", "Once upon a time").stdout)["tokens"]
    # Greedy: each generated id is the argmax of `orbit logits` over the prompt and what came before it.
    seq = prompt + j["tokens"]
    rows = np.array(json.loads(run(orbit_cli, "logits", "--model", stories260k_path, "--tokens",
                                   ",".join(map(str, seq)), "--all-positions").stdout)["logits"])
    assert list(rows.argmax(1)[len(prompt) - 1:-1]) == j["tokens"]
    sampled = json.loads(run(orbit_cli, "generate", "--model", stories260k_path, "--prompt", "The dog", "--max-tokens", "12",
                             "--temperature", "1.0", "--top-p", "0.9", "--seed", "3", "--json").stdout)
    again = json.loads(run(orbit_cli, "generate", "--model", stories260k_path, "--prompt", "The dog", "--max-tokens", "12",
                           "--temperature", "1.0", "--top-p", "0.9", "--seed", "3", "--json").stdout)
    assert sampled == again


def test_logits_and_fidelity_take_text(orbit_cli, stories260k_path):
    by_text = json.loads(run(orbit_cli, "logits", "--model", stories260k_path, "--text", "Once upon").stdout)
    by_ids = json.loads(run(orbit_cli, "logits", "--model", stories260k_path, "--tokens", "1,403,407").stdout)
    assert by_text == by_ids
    r = run(orbit_cli, "fidelity", "--model", stories260k_path, "--context-text", "Once upon a time, there was a dog.|The dog was big.",
            "--chunk-text", "He liked to run in the park.", "--query-text", "One day", "--strategies", "reprefill,blind", "--json")
    j = json.loads(r.stdout)
    first = json.loads(run(orbit_cli, "tokenize", "--model", stories260k_path, "--text", "Once upon a time, there was a dog.").stdout)
    second = json.loads(run(orbit_cli, "tokenize", "--model", stories260k_path, "--text", "The dog was big.", "--no-bos").stdout)
    assert j["context_chunk_lengths"] == [len(first["tokens"]), len(second["tokens"])]  # BOS on the first chunk only
    assert j["strategies"][0]["kl"] < 1e-9 and j["strategies"][1]["kl"] > 0
    bad = run(orbit_cli, "fidelity", "--model", stories260k_path, "--chunk", "5", "--chunk-text", "x", check=False)
    assert bad.returncode == 1 and "--chunk or --chunk-text, not both" in bad.stderr


def test_an_empty_context_text_is_no_context_as_an_empty_context_is(orbit_cli, stories260k_path):
    # '--context ""' was no context but '--context-text ""' an error ("chunk 1 is empty"); with either, B starts
    # the window and gets BOS, as without the argument.
    common = ["fidelity", "--model", stories260k_path, "--chunk-text", "He liked to run.", "--query-text", "One day",
              "--strategies", "reprefill", "--json"]

    def tokens(*extra):
        report = json.loads(run(orbit_cli, *common, *extra).stdout)
        assert report["context_chunk_lengths"] == []
        return report["chunk_length"]

    alone = tokens()
    assert tokens("--context-text", "") == alone and tokens("--context", "") == alone


def test_text_without_a_tokenizer_says_so(orbit_cli, stories260k_path, tmp_path):
    alone = tmp_path / "alone.bin"
    alone.write_bytes(stories260k_path.read_bytes())
    r = run(orbit_cli, "generate", "--model", alone, "--prompt", "hi", check=False)
    assert r.returncode == 1 and "has none beside it" in r.stderr and "--tokenizer" in r.stderr
    r = run(orbit_cli, "generate", "--model", alone, "--prompt", "Once", "--max-tokens", "3",
            "--tokenizer", stories260k_path.parent / "tok512.bin")
    assert r.returncode == 0



def test_a_file_that_is_no_checkpoint_is_named_before_its_tokenizer_is_looked_for(orbit_cli, stories260k_path,
                                                                                  tmp_path):
    # Before, tokenize and generate took the vocabulary size from the file's bytes unchecked and answered
    # 'has none beside it (looked for tok1953459744.bin ...)', or, with --tokenizer, tokenized happily.
    text = tmp_path / "notes.bin"
    text.write_text("this is a text file, not a llama2.c checkpoint\n" * 4)
    tokenizer = stories260k_path.parent / "tok512.bin"
    for args in (["tokenize", "--model", text, "--text", "hi"],
                 ["tokenize", "--model", text, "--tokenizer", tokenizer, "--text", "hi"],
                 ["generate", "--model", text, "--prompt", "hi"]):
        r = run(orbit_cli, *args, check=False)
        assert r.returncode == 1, (args, r.stdout)
        assert "read as a llama2.c checkpoint" in r.stderr and "looked for" not in r.stderr, (args, r.stderr)



def test_text_that_is_not_utf8_is_refused_naming_its_argument_whatever_the_tokenizer(orbit_cli, models_dir):
    # The help says UTF-8 text: a llama2.c tokenizer split such bytes into byte tokens (exit 0) while a
    # tokenizer.json refused them naming its own file, as if the file were at fault.
    bad = "a\udcffb"  # os.fsencode gives the byte 0xff back
    for model in (models_dir / "stories260K" / "stories260K.bin", models_dir / "tinystories-656k"):
        for command, arg in (("tokenize", "--text"), ("generate", "--prompt"), ("logits", "--text")):
            r = subprocess.run([str(orbit_cli), command, "--model", str(model), arg, os.fsencode(bad)],
                               capture_output=True, text=True, timeout=300)
            assert r.returncode == 1 and r.stdout == "", (command, model, r.stdout)
            assert f"{command}: argument '{arg}' is not valid UTF-8" in r.stderr, (command, model, r.stderr)
    r = subprocess.run([str(orbit_cli), "fidelity", "--model", str(models_dir / "stories260K" / "stories260K.bin"),
                        "--chunk-text", "ok", "--query-text", os.fsencode(bad)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1 and "fidelity: argument '--query-text' is not valid UTF-8" in r.stderr, r.stderr


def test_a_number_with_white_space_around_it_is_refused_either_side(orbit_cli, stories260k_path):
    # strtoll / strtod skip leading white space: before, --max-tokens " 5" was taken and "5 " refused.
    for name, value in (("--max-tokens", " 5"), ("--max-tokens", "5 "), ("--temperature", " 0.5"),
                        ("--temperature", "0.5 ")):
        args = ["generate", "--model", stories260k_path, "--prompt", "hi", name, value]
        r = run(orbit_cli, *args, check=False)
        assert r.returncode == 1, (name, value, r.stdout)
        assert f"argument '{name}' must be" in r.stderr and f"got '{value}'" in r.stderr, r.stderr



def test_a_shard_size_past_64_bit_bytes_is_refused_naming_the_argument(orbit_cli, tmp_path):
    # Before, --shard-mb 99999999999999 wrapped when turned into bytes and the error was the generator's
    # 'shard_bytes must be >= 0, got -5822864442258358272'.
    r = run(orbit_cli, "make-model", "--out", tmp_path / "m", "--shard-mb", "99999999999999", check=False)
    assert r.returncode == 1
    assert "argument '--shard-mb' is too large" in r.stderr, r.stderr
    assert not (tmp_path / "m").exists()


COMMANDS = {
    "info": ["--model", "--json"],
    "logits": ["--model", "--tokens", "--text", "--positions", "--all-positions", "--no-bos", "--tokenizer"],
    "tokenize": ["--model", "--text", "--no-bos", "--tokenizer"],
    "generate": ["--model", "--prompt", "--max-tokens", "--temperature", "--top-p", "--seed", "--json"],
    "fidelity": ["--model", "--chunk", "--context", "--query", "--chunk-text", "--context-text", "--query-text", "--strategies", "--json"],
    "replay": ["--model", "--policy", "--json", "--explain", "--no-fidelity", "--patch-capacity", "--page-size", "--quiet"],
    "make-trace": ["--kind", "--steps", "--seed", "--model", "--out", "--chunk-tokens", "--sample-text"],
    "make-model": ["--out", "--preset", "--arch"],
    "store": ["ls", "stat", "verify", "gc"],
    "version": [],
}

BENCHMARKS = {
    "bench/bench_forward": ["--model", "--preset", "--lengths", "--reps", "--json", "--cache", "--threads"],
    "bench/bench_replay": ["--model", "--preset", "--cache", "--kinds", "--steps", "--seed", "--policy", "--threads", "--no-fidelity", "--json"],
    "bench/bench_reuse": ["--model", "--preset", "--cache", "--threads", "--lengths", "--context", "--ranks", "--reps", "--json", "--device"],
    "bench/bench_store": ["--model", "--preset", "--layers", "--tokens", "--reps", "--dir", "--json", "--cache", "--threads", "--remote", "--procs", "--share-keys", "--share-bytes"],
    "bench/binding/bench_binding": ["--models", "--stories", "--n", "--seed", "--threads", "--json", "--quick"],
    "bench/bench_gpu": ["--preset", "--layers", "--windows", "--chunks", "--query", "--reps", "--rank", "--device", "--dtype", "--sections", "--device-name", "--json", "--scratch"],
    "bench/bench_window_scale": ["--model", "--sizes", "--reps"],
}


@functools.lru_cache(maxsize=None)
def help_of(cli, command):
    """`orbit COMMAND --help`, run once per worker process for the tests below that read it."""
    return run(cli, command, "--help", check=False)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommand_answers_help(orbit_cli, command):
    r = help_of(orbit_cli, command)
    assert r.returncode == 0, r.stderr
    assert "usage" in r.stdout.lower()
    for name in COMMANDS[command]:
        assert name in r.stdout, f"orbit {command} --help does not mention {name}"


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"store", "version"}))
def test_subcommand_help_describes_then_lists_accepted_arguments(orbit_cli, command):
    # As every command's --help reads: the usage, a sentence saying what it does before the first option,
    # and last the names the parser accepts (store dispatches to subcommands, version takes none).
    r = help_of(orbit_cli, command)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    first_option = next(i for i, line in enumerate(lines) if line.startswith("  --"))
    assert any(re.match(r"  [A-Z]", line) for line in lines[1:first_option]), \
        f"orbit {command} --help has no description before its options:\n" + "\n".join(lines[:first_option + 1])
    assert lines[-1].startswith("accepted arguments: ")
    accepted = set(re.findall(r"--[a-z0-9-]+", lines[-1]))
    assert set(COMMANDS[command]) <= accepted, f"orbit {command}: {set(COMMANDS[command]) - accepted} not accepted"


@pytest.mark.parametrize("command,names", [("store", {"--store", "--remote", "--json", "--dry-run"}),
                                           ("version", set())])
def test_store_and_version_help_end_with_accepted_arguments(orbit_cli, command, names):
    # store dispatches to subcommands and version takes none, but their --help still ends, as every
    # command's does, with the names the parser accepts; store's lists its subcommands' union.
    r = help_of(orbit_cli, command)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1].startswith("accepted arguments: "), f"orbit {command} --help ends with {lines[-1]!r}"
    accepted = set(re.findall(r"--[a-z0-9-]+", lines[-1]))
    assert accepted == names | {"--help"}, f"orbit {command} --help accepts {accepted}"


@pytest.mark.parametrize("bench", sorted(BENCHMARKS))
def test_every_benchmark_answers_help(orbit_cli, bench):
    path = orbit_cli.parent.parent / bench
    if not path.is_file():
        pytest.skip(f"{path} is not built")
    r = run(path, "--help", check=False)
    assert r.returncode == 0, r.stderr
    for name in BENCHMARKS[bench]:
        assert name in r.stdout, f"{bench} --help does not mention {name}"


def test_bench_replay_runs_on_its_default_threads(orbit_cli, tmp_path):
    # bench/replay/README.md runs it without --threads, whose default 0 is the process setting; the argument's
    # lower bound was 1, so every run without --threads stopped on "argument '--threads' must be >= 1, got 0".
    path = orbit_cli.parent.parent / "bench" / "bench_replay"
    if not path.is_file():
        pytest.skip(f"{path} is not built")
    r = run(path, "--kinds", "web", "--steps", "1", "--no-fidelity", "--json", tmp_path / "r.json", check=False)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "r.json").is_file()
    r = run(path, "--threads", "-1", check=False)
    assert r.returncode == 1 and "argument '--threads' must be >= 0, got -1" in r.stderr, r.stderr


def test_replay_help_lists_the_policy_specs(orbit_cli):
    # `orbit serve --help` sends its --policy reader to `orbit replay --help`, which named only a header
    # (orbit/policy.h): the specs themselves are listed there now, as orbit.policy_help() gives them.
    r = help_of(orbit_cli, "replay")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    specs = out.split("policies (--policy; orbit serve's --policy takes the same):\n", 1)[1]
    for form in ("  default[:MOD...] ", "  patch[:M]", "  throughput[:kl=X]", "  reprefill", "  prefix", "  blind"):
        assert form in specs, f"orbit replay --help lists no {form.strip()!r} policy"
    serve = help_of(orbit_cli, "serve")
    assert serve.returncode == 0 and "`orbit replay --help` lists the specs" in serve.stdout, serve.stderr


@pytest.mark.parametrize("command", ["info", "serve", "replay"])
def test_float16_on_the_cpu_names_the_dtype_argument(orbit_cli, repo_root, stories260k_path, command):
    # The refusal named `dtype` (the engine option) where the user typed --dtype.
    trace = [repo_root / "tests" / "data" / "traces" / "agent_rag.json"] if command == "replay" else []
    r = run(orbit_cli, command, *trace, "--model", stories260k_path, "--dtype", "float16", check=False)
    assert r.returncode == 1
    assert f"orbit {command}: error: --dtype: float16 runs on CUDA only" in r.stderr, r.stderr


@pytest.mark.parametrize("name", ["binding-gqa/model.safetensors", "tinystories-656k/tokenizer.json"])
def test_a_file_of_a_hugging_face_directory_names_the_directory(orbit_cli, models_dir, name):
    # Read as a llama2.c header, the weights gave "header field 'hidden_dim' must be positive, got 0".
    path = models_dir / name
    r = run(orbit_cli, "info", "--model", path, check=False)
    assert r.returncode == 1
    assert f"{path}: " in r.stderr and "not a model on its own" in r.stderr, r.stderr
    assert r.stderr.rstrip().endswith(f"give the directory, {path.parent}"), r.stderr


def test_config_json_stands_for_its_directory_tokenizer_included(orbit, orbit_cli, models_dir):
    # load_model took config.json for its directory, but the tokenizer was looked for as a llama2.c file's
    # (tok<vocab>.bin beside it, the vocabulary read from the JSON's first bytes): text failed.
    directory = models_dir / "tinystories-656k"
    args = ["--prompt", "Lily had a dog", "--max-tokens", "8", "--json"]
    by_config = run(orbit_cli, "generate", "--model", directory / "config.json", *args)
    assert by_config.stdout == run(orbit_cli, "generate", "--model", directory, *args).stdout
    with orbit.Engine(str(directory / "config.json")) as a, orbit.Engine(str(directory)) as b:
        assert a.model_info.tokenizer == b.model_info.tokenizer
        assert a.tokenize("Lily had a dog") == b.tokenize("Lily had a dog")


def test_version_answers_as_a_flag_too(orbit_cli):
    # `orbit --version` was "unknown command '--version'" (exit 2).
    flag = run(orbit_cli, "--version")
    assert flag.stdout == run(orbit_cli, "version").stdout and flag.stdout.startswith("orbit ")


@pytest.mark.parametrize("name", ["README.md", "models/stories260K/tok512.bin"])
def test_a_file_that_is_no_checkpoint_says_how_it_was_read(orbit_cli, repo_root, name):
    # A text file or a tokenizer given as the model failed on its "header" alone ("header field 'dim'
    # (1919885347) is not divisible by n_heads (1763734633)"): the message now says how the file was read.
    r = run(orbit_cli, "info", "--model", repo_root / name, check=False)
    assert r.returncode == 1
    assert f"{repo_root / name}: header field" in r.stderr, r.stderr
    assert "(the file read as a llama2.c checkpoint: 7 int32 sizes, then float32 weights" in r.stderr, r.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this machine")
def test_output_that_cannot_be_written_fails_the_command(orbit_cli, stories260k_path):
    """Standard output on a full disk (/dev/full) or closed: the command says so and exits 1, where it used to exit 0
    with nothing written (a script's `orbit logits ... > out.json` took an empty file for a success)."""
    commands = [["tokenize", "--model", stories260k_path, "--text", "Once upon a time"],
                ["info", "--model", stories260k_path],
                ["generate", "--model", stories260k_path, "--prompt", "Once", "--max-tokens", "4"],
                ["generate", "--model", stories260k_path, "--prompt", "Once", "--max-tokens", "4", "--json"],
                ["version"]]
    for args in commands:
        with open("/dev/full", "w") as full:
            r = subprocess.run([str(orbit_cli), *map(str, args)], stdout=full, stderr=subprocess.PIPE, text=True,
                               timeout=300)
        assert r.returncode == 1 and "writing standard output failed" in r.stderr, (args, r.returncode, r.stderr)
        written = subprocess.run([str(orbit_cli), *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, timeout=300)
        assert written.returncode == 0, (args, written.stderr)  # the same command, written: a success
