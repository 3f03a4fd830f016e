"""Option values out of range are refused naming the option (cli/args.cpp, cli/cmd_replay.cpp):
`orbit replay --page-size 1000000000` named EngineOptions::page_size, not --page-size; `orbit serve --audit
1e-320` (a number too small for a double, read as a subnormal) said "must be a number"; `orbit replay --policy
default,default` replayed the same policy twice, as two columns the report cannot tell apart."""
import subprocess

import pytest


def run(orbit_cli, *args, timeout=120):
    return subprocess.run([str(orbit_cli), *[str(a) for a in args]], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def trace(orbit_cli, stories260k_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("ranges") / "rag.trace.json"
    made = run(orbit_cli, "make-trace", "--kind", "rag", "--steps", "3", "--seed", "1", "--model", stories260k_path,
               "--out", path)
    assert made.returncode == 0, made.stderr
    return path


def replay(orbit_cli, stories260k_path, trace, *args):
    return run(orbit_cli, "replay", trace, "--model", stories260k_path, "--no-fidelity", "--quiet", "--json", "-",
               *args, timeout=300)


def test_replay_page_size_past_the_engines_bound_names_the_argument(orbit_cli, stories260k_path, trace):
    result = replay(orbit_cli, stories260k_path, trace, "--page-size", "1000000000")
    assert result.returncode == 1, result.stderr
    assert ("replay: argument '--page-size' must be <= 1048576 (tokens a KV page holds), got 1000000000"
            in result.stderr)
    assert "EngineOptions" not in result.stderr


@pytest.mark.parametrize("policies, refusal", [
    ("default,default", "replay: argument '--policy' lists 'default' twice; each policy is one column of the report"),
    ("prefix,throughput,prefix", "lists 'prefix' twice"),
    # Two spellings of one policy: its canonical name (WindowPolicy::name()) is the same.
    ("default,patch:16:kl=0.003:heal:prep=1:move=8:lists=3",
     "lists 'default' and 'patch:16:kl=0.003:heal:prep=1:move=8:lists=3', the same policy"),
])
def test_replay_refuses_a_policy_listed_twice(orbit_cli, stories260k_path, trace, policies, refusal):
    result = replay(orbit_cli, stories260k_path, trace, "--policy", policies)
    assert result.returncode == 1, result.stderr
    assert refusal in result.stderr
    assert result.stdout == ""  # refused before any replay


def test_replay_distinct_policies_still_run(orbit_cli, stories260k_path, trace):
    result = replay(orbit_cli, stories260k_path, trace, "--policy", "prefix,throughput")
    assert result.returncode == 0, result.stderr
    assert '"prefix"' in result.stdout and '"throughput"' in result.stdout


def serve_refusal(orbit_cli, stories260k_path, *args):
    """serve's stderr where a later argument is refused: --audit-owed-after -1 is read after --audit, so the
    server never starts and what it said of --audit shows first."""
    result = run(orbit_cli, "serve", "--model", stories260k_path, "--host", "127.0.0.1", "--port", "0", *args,
                 "--audit-owed-after", "-1")
    assert result.returncode == 1, result.stderr
    return result.stderr


def test_serve_audit_too_small_for_a_double_is_read_as_the_number_it_rounds_to(orbit_cli, stories260k_path):
    # 1e-320 is a subnormal double (strtod sets ERANGE): before, "argument '--audit' must be a number".
    said = serve_refusal(orbit_cli, stories260k_path, "--audit", "1e-320")
    assert "'--audit'" not in said
    assert "argument '--audit-owed-after' must be >= 0" in said
    assert "argument '--audit' must be a fraction in [0, 1]" in serve_refusal(orbit_cli, stories260k_path, "--audit",
                                                                               "-1e-320")


def test_serve_audit_past_a_doubles_range_is_refused_as_such(orbit_cli, stories260k_path):
    said = serve_refusal(orbit_cli, stories260k_path, "--audit", "1e999")
    assert "serve: argument '--audit' is out of range (past a double's), got '1e999'" in said
    assert "serve: argument '--audit' must be a number, got 'x'" in serve_refusal(orbit_cli, stories260k_path,
                                                                                   "--audit", "x")


@pytest.mark.parametrize("text", ["0x0", "-0X1p-3", "+0x0"])
def test_a_hexadecimal_number_is_refused(orbit_cli, stories260k_path, text):
    # strtod reads hexadecimal too: "--temperature 0x10" was a temperature of 16.
    said = serve_refusal(orbit_cli, stories260k_path, "--audit", text)
    assert f"serve: argument '--audit' must be a number, got '{text}'" in said
    result = run(orbit_cli, "generate", "--model", stories260k_path, "--prompt", "Once", "--temperature", "0x10")
    assert result.returncode == 1 and "argument '--temperature' must be a number, got '0x10'" in result.stderr


def test_a_seed_takes_every_value_the_sdk_does(orbit_cli, stories260k_path, tmp_path):
    # Seeds are [0, 2^64) in the SDK and in traces: the CLI took only [0, 2^63) and called 2^63 "not an integer",
    # so the command a trace records to make it again (its description) did not run.
    out = tmp_path / "t.json"
    made = run(orbit_cli, "make-trace", "--kind", "browse", "--steps", "2", "--seed", str(2**63), "--model",
               stories260k_path, "--out", out)
    assert made.returncode == 0, made.stderr
    assert f"--seed {2**63}" in out.read_text()
    top = run(orbit_cli, "generate", "--model", stories260k_path, "--prompt", "Once", "--max-tokens", "2",
              "--temperature", "1", "--seed", str(2**64 - 1))
    assert top.returncode == 0, top.stderr
    for value in (str(2**64), "-1", "1x", ""):
        refused = run(orbit_cli, "generate", "--model", stories260k_path, "--prompt", "Once", "--temperature", "1",
                      "--seed", value)
        assert refused.returncode == 1
        assert f"generate: argument '--seed' must be an integer in [0, 2^64), got '{value}'" in refused.stderr
    # Past int64, an integer argument says its range, not that it is no integer.
    steps = run(orbit_cli, "make-trace", "--kind", "browse", "--steps", "99999999999999999999", "--model",
                stories260k_path, "--out", out)
    assert "argument '--steps' must be an integer in [-2^63, 2^63), got '99999999999999999999'" in steps.stderr


def test_make_trace_refuses_text_kinds_for_a_model_without_a_tokenizer(orbit_cli, models_dir, tmp_path):
    # The trace was written, and every replay of it then failed: the model cannot read its text.
    out = tmp_path / "t.json"
    for kind in ("browse", "coding", "videoqa", "fanout", "rag"):
        made = run(orbit_cli, "make-trace", "--kind", kind, "--model", models_dir / "binding-gqa", "--out", out)
        assert made.returncode == 1
        assert (f"make-trace: --kind {kind} writes text, and the model {models_dir / 'binding-gqa'} (--model) has no "
                "tokenizer to replay it with (kinds web, video and agent write token ids)") in made.stderr
        assert not out.exists()
    made = run(orbit_cli, "make-trace", "--kind", "agent", "--steps", "2", "--model", models_dir / "binding-gqa",
               "--out", out)
    assert made.returncode == 0, made.stderr


def test_make_trace_position_rows_is_one_or_three(orbit):
    for rows in (0, 2, 4, -1):
        with pytest.raises(orbit.OrbitError, match=rf"make_trace: position_rows must be 1 \(RoPE\) or 3 \(M-RoPE\), "
                                                   rf"got {rows}"):
            orbit.make_trace("web", steps=1, position_rows=rows)
    assert orbit.make_trace("web", steps=1, position_rows=3)["chunks"]


def test_serve_max_batch_is_at_least_one_and_at_most_65536(orbit_cli, stories260k_path):
    assert "argument '--max-batch' must be >= 1" in serve_refusal(orbit_cli, stories260k_path, "--max-batch", "0")
    assert "serve: argument '--max-batch' must be at most 65536, got 65537" in serve_refusal(
        orbit_cli, stories260k_path, "--max-batch", "65537")


def test_serve_refuses_fidelity_options_that_would_do_nothing(orbit_cli, stories260k_path):
    result = run(orbit_cli, "serve", "--model", stories260k_path, "--port", "0", "--audit", "0",
                 "--audit-owed-after", "3")
    assert result.returncode == 1, result.stderr
    assert "argument '--audit-owed-after' says when an audit is owed, and --audit 0 runs none" in result.stderr
    result = run(orbit_cli, "serve", "--model", stories260k_path, "--port", "0", "--no-stored-calibration")
    assert result.returncode == 1, result.stderr
    assert ("argument '--no-stored-calibration' keeps the fidelity calibration out of --store and --remote, and "
            "neither is given") in result.stderr
    assert "got 2" in serve_refusal(orbit_cli, stories260k_path, "--audit", "2")


def test_replay_patch_capacity_needs_a_policy_that_forms_patches(orbit_cli, stories260k_path, trace):
    result = replay(orbit_cli, stories260k_path, trace, "--policy", "blind,cacheblend:0.5", "--patch-capacity", "1000")
    assert result.returncode == 1, result.stderr
    assert ("argument '--patch-capacity' sizes the offline bound of the patches a policy forms, and no policy of "
            "--policy forms one") in result.stderr
    assert replay(orbit_cli, stories260k_path, trace, "--policy", "patch:16", "--patch-capacity", "1000"
                  ).returncode == 0
