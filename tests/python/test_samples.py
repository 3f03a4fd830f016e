"""The web-agent and video-agent samples (samples/*/) in short mode, on the bundled model.

Each sample runs as a user would run it (a subprocess, `--short`) and writes its report, trace, table and
chart. The test then checks the report's numbers against a re-prefill computed here, independently of orbit:
the numpy float64 forward of tests/python/test_cli_reference.py over each step's window contents (recorded
in the report) followed by the probe. From it the test recomputes every step's KL(re-prefill ‖ window) and
top-1 agreement from the window's own probe logits (--dump-logits) and compares them with the reported ones;
it also recounts the re-prefill's forward tokens and checks the samples computed fewer, checks the prefix-cache
column against an `orbit replay --policy prefix` of the sample's own trace, and that the pages, questions
and actions the samples show are the text their chunks and turns hold (decoded by an independent tokenizer).
"""
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from test_cli_reference import Llama2cReference
from tokenizer_reference import Reference as TokenizerReference

# Its module-scoped fixture is expensive: under pytest-xdist (--dist loadgroup) this file runs on one worker.
pytestmark = pytest.mark.xdist_group("test_samples")

# script, steps in --short mode, operations it must show, bound on the mean KL (the web agent's policy keeps a
# slide's survivors as-is: on stories260K they stay within bench/REPORT.md's near-lossless KL, 0.05 nats)
SAMPLES = {
    "web-agent": ("samples/web-agent/web_agent.py", 8, {"admit", "evict", "recall", "call", "decode"}, 0.05),
    "video-agent": ("samples/video-agent/video_agent.py", 6, {"admit", "reorder", "evict", "recall", "question"},
                    0.1),
}


@pytest.fixture(scope="module")
def reference(stories260k_path):
    return Llama2cReference(stories260k_path)


@pytest.fixture(scope="module", params=sorted(SAMPLES))
def run(request, orbit, repo_root, stories260k_path, tmp_path_factory):
    """Runs one sample in short mode; returns (name, report, logits npz, output dir, stderr)."""
    name = request.param
    script = SAMPLES[name][0]
    out = tmp_path_factory.mktemp(name)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(os.path.dirname(orbit.__file__)),
                                                    env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    result = subprocess.run([sys.executable, str(repo_root / script), "--short", "--dump-logits",
                             "--model", str(stories260k_path), "--out", str(out)],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, f"{script} failed:\n{result.stdout}\n{result.stderr}"
    report = json.loads((out / f"{name}.report.json").read_text())
    logits = np.load(out / f"{name}.logits.npz")
    return name, report, logits, out, result


def softmax_kl_top1(reference_logits, window_logits):
    lr = reference_logits - reference_logits.max(-1, keepdims=True)
    lr = lr - np.log(np.exp(lr).sum(-1, keepdims=True))
    lw = window_logits.astype(np.float64)
    lw = lw - lw.max(-1, keepdims=True)
    lw = lw - np.log(np.exp(lw).sum(-1, keepdims=True))
    kl = float((np.exp(lr) * (lr - lw)).sum(-1).mean())
    # top-1 agrees when the window's argmax is the reference's or ties with it within 1e-4 logits (trace.h)
    picked = np.take_along_axis(reference_logits, window_logits.argmax(-1)[..., None], -1)[..., 0]
    top1 = float((picked >= reference_logits.max(-1) - 1e-4).mean())
    return kl, top1


def test_outputs_are_written(run):
    name, report, _, out, result = run
    short_steps = SAMPLES[name][1]
    assert len(report["steps"]) == short_steps == report["totals"]["steps"]
    table = (out / f"{name}.table.txt").read_text()
    assert table in result.stdout  # the summary table is printed
    assert "radix" in table and "no cache" in table and "KL" in table and len(table.splitlines()) >= short_steps + 4
    assert "for a radix cache" in table
    assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"{name} [" in result.stderr  # the progress bar
    trace = json.loads((out / f"{name}.trace.json").read_text())
    assert trace["format"] == "orbit-trace/1" and trace["probe"] == report["probe"]
    names = {c["name"] for c in trace["chunks"]}
    for step in trace["steps"]:
        for field in ("chunk", "before"):
            if field in step:
                assert step[field] in names
        for chunk in step.get("order", []):
            assert chunk in names


def test_every_operation_the_sample_is_about(run):
    name, report, _, _, _ = run
    wanted = SAMPLES[name][2]
    seen = {op.split()[0] for s in report["steps"] for op in s["operations"]}
    assert wanted <= seen, f"{name}: missing {wanted - seen} in {seen}"


def test_fidelity_against_an_independent_reprefill(run, reference):
    """KL and top-1 recomputed from a numpy re-prefill of each step's window + probe."""
    name, report, logits, _, _ = run
    probe = report["probe"]
    window_logits, orbit_reference = logits["window"], logits["reference"]
    assert window_logits.shape == orbit_reference.shape == (len(report["steps"]), len(probe), reference.vocab)
    for i, step in enumerate(report["steps"]):
        tokens = step["window"] + probe
        assert len(step["window"]) == step["window_tokens"]
        expected = reference.forward(tokens)[-len(probe):]
        # Window.reference_logits is a re-prefill: it matches the numpy one to float32 noise (worst 6.3e-5
        # over ATen's no-AVX/AVX2/AVX-512 kernels, OpenBLAS cores and 1 to 8 threads; test_cli_reference's
        # plain float32 forwards reach 1.3e-4), while a real mistake moves logits by > 1e-2
        assert np.abs(orbit_reference[i] - expected).max() < 1e-3, f"{name} step {i}"
        kl, top1 = softmax_kl_top1(expected, window_logits[i])
        assert step["kl"] == pytest.approx(kl, rel=0.05, abs=5e-5), f"{name} step {i}: KL"
        margins = np.sort(expected, -1)[:, -1] - np.sort(expected, -1)[:, -2]
        if margins.min() > 1e-3:  # no near-tie that float noise could flip
            assert step["top1"] == pytest.approx(top1), f"{name} step {i}: top-1"
    totals = report["totals"]
    assert totals["mean_kl"] == pytest.approx(np.mean([s["kl"] for s in report["steps"]]))
    bound = SAMPLES[name][3]
    if bound is not None:
        assert totals["mean_kl"] < bound and totals["mean_top1"] >= 0.75, totals


def test_fewer_forward_tokens_than_a_reprefill_at_every_step(run):
    name, report, _, _, _ = run
    steps = report["steps"]
    for s in steps:
        # a full re-prefill forwards the whole window, and each read's query
        assert s["reprefill_tokens"] == len(s["window"]) + sum(len(query) for _, query, _ in s["reads"])
        assert s["forward_tokens"] >= 0 and s["seconds"] > 0 and s["reprefill_seconds"] > 0
        # orbit's side counts its queries too: at least the last token of each (its logits)
        assert len(s["reads"]) <= s["query_tokens"] <= sum(len(query) for _, query, _ in s["reads"])
        assert s["query_tokens"] <= s["forward_tokens"]
    forward = sum(s["forward_tokens"] for s in steps)
    reprefill = sum(len(s["window"]) + sum(len(query) for _, query, _ in s["reads"]) for s in steps)
    assert report["totals"]["forward_tokens"] == pytest.approx(forward)
    assert report["totals"]["reprefill_tokens"] == reprefill
    assert forward < reprefill, f"{name}: {forward} forward tokens vs {reprefill} for re-prefills"
    # after the first step (which encodes the content once) each step costs less than re-prefilling
    later = steps[1:]
    assert sum(s["forward_tokens"] for s in later) < 0.6 * sum(len(s["window"]) for s in later)


def test_the_trace_replays(run, orbit_cli, stories260k_path):
    """The trace is orbit-trace/1: `orbit replay` loads and replays it (skipped only when ORBIT_CLI is unset)."""
    name, report, _, out, _ = run
    result = subprocess.run([str(orbit_cli), "replay", str(out / f"{name}.trace.json"), "--model",
                             str(stories260k_path), "--policy", "patch:16", "--no-fidelity", "--json", "-",
                             "--quiet"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    replay = json.loads(result.stdout)
    assert replay["steps"] > 0 and replay["policies"]


def test_prefix_cache_figures(run, orbit_cli, stories260k_path):
    """The prefix-cache column: recomputed here from the prompts the agent sent (report: each step's reads,
    window then query), as an unbounded token-level radix cache that forwards at least a prompt's last token
    (its logits); and the replay figure equals `orbit replay --policy prefix` over the trace steps each step
    recorded."""
    name, report, _, out, _ = run
    cached, expected = [], [0] * len(report["steps"])
    for s in report["steps"]:
        for window, query, generated in s["reads"]:
            prompt = window + query
            best = 0
            for seq in cached:
                n = 0
                while n < min(len(prompt), len(seq)) and prompt[n] == seq[n]:
                    n += 1
                best = max(best, n)
            expected[s["index"]] += len(prompt) - min(best, len(prompt) - 1)
            cached.append(prompt + generated)
    assert [s["prefix_tokens"] for s in report["steps"]] == expected
    assert expected[0] > 0 and all(s["reads"] for s in report["steps"])
    result = subprocess.run([str(orbit_cli), "replay", str(out / f"{name}.trace.json"), "--model",
                             str(stories260k_path), "--policy", "prefix", "--no-fidelity", "--json", "-", "--quiet"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    (prefix,) = [p for p in json.loads(result.stdout)["policies"] if p["policy"] == "prefix"]
    per_step = [s["critical_forward_tokens"] for s in prefix["steps"]]
    covered = 0
    for s in report["steps"]:
        first, end = s["trace_steps"]
        assert first == covered and end >= first      # the steps tile the trace in order
        covered = end
        assert s["prefix_replay_tokens"] == pytest.approx(sum(per_step[first:end]))
    assert covered == len(per_step)
    totals = report["totals"]
    assert totals["prefix_tokens"] == sum(expected)
    assert totals["prefix_replay_tokens"] == pytest.approx(sum(per_step))
    assert totals["prefix_ratio"] == pytest.approx(totals["forward_tokens"] / totals["prefix_tokens"])


def test_text_the_reader_sees_is_what_the_window_holds(run, stories260k_path):
    """Pages, actions and questions shown in the table are the text of the chunks and turns the trace records
    (decoded by the reference tokenizer, tests/python/tokenizer_reference.py); video frames are labelled as
    token streams, not text."""
    name, report, _, out, _ = run
    tok = TokenizerReference(stories260k_path.parent / "tok512.bin")

    def decode(ids):
        return tok.decode(ids).decode("utf-8").strip()

    trace = json.loads((out / f"{name}.trace.json").read_text())
    texts = [t for s in report["steps"] for t in s["texts"]]
    roles = {role for role, _ in texts}
    turns = [decode(st["tokens"]) for st in trace["steps"] if st["op"] == "turn"]
    if name == "web-agent":
        assert {"system", "task", "call", "page"} <= roles
        chunks = {c["name"]: decode(c["tokens"]) for c in trace["chunks"]}
        # the first message's unit: the tools line the template writes, then the system prompt
        assert chunks["system"].startswith("tools: open_page") and chunks["system"].endswith(report["system"])
        assert "user: " + report["task"] in turns
        # every page shown is the tool message a chunk or (read twice in the list) a turn holds
        shown = [t for role, t in texts if role == "page"]
        held = {t for t in list(chunks.values()) + turns if t.startswith("tool: ")}
        assert len(shown) == len(report["steps"]) and {"tool: " + t for t in shown} <= held
        assert all(t.startswith("Town news.") and " found " in t for t in shown)
        # every call shown is the model's call, as the assistant turn the template wrote for it
        calls = [t for role, t in texts if role == "call"]
        written = [json.loads(t[len("assistant: "):]) for t in turns if t.startswith("assistant: ")]
        assert len(calls) == len(written) == len(report["steps"])
        names = {t["function"]["name"] for t in report["tools"]}
        for shown_call, turn in zip(calls, written):
            name, arguments = shown_call.split("(", 1)
            assert name == turn["name"] and name in names
            assert json.loads(arguments[:-1]) == turn["parameters"]
    else:
        assert {"frames", "question", "answer"} <= roles
        assert any("not text" in t for role, t in texts if role == "frames")
        questions = [t for role, t in texts if role == "question"]
        assert questions and [t for t in turns if t.startswith("Mom asked")] == questions
        answers = [t for role, t in texts if role == "answer"]
        assert answers and [t for t in turns if t.startswith(report["answer_query"])] == answers
        assert all(c["name"].startswith("frame") for c in trace["chunks"])
def test_the_replay_hint_names_the_model_the_sample_ran(repo_root, tmp_path, capsys):
    """The closing hint (`orbit replay <trace> --model M`) names the --model given, not the bundled model: a
    trace replays only on the model it was recorded with. Runs the samples' command line (sample_kit.main)
    with a stand-in for the agent, so no model is loaded."""
    sys.path.insert(0, str(repo_root / "samples" / "common"))
    try:
        import sample_kit
    finally:
        sys.path.remove(str(repo_root / "samples" / "common"))
    other = tmp_path / "other model" / "tiny.bin"
    seen = {}

    def fake_run(model, **kwargs):
        seen["model"] = model
        return {"paths": {"trace": tmp_path / "x.trace.json", "table": tmp_path / "x.table.txt"}, "totals": {}}

    assert sample_kit.main(fake_run, "d", "x", default_steps=2, short_steps=1,
                           argv=["--model", str(other), "--out", str(tmp_path)]) == 0
    hint = [line for line in capsys.readouterr().out.splitlines() if "orbit replay" in line]
    assert seen["model"] == str(other)
    assert len(hint) == 1
    assert f"--model '{other}'" in hint[0] and "stories260K" not in hint[0], hint[0]


@pytest.fixture
def served(start_serve, stories260k_path):
    """`orbit serve` on 127.0.0.1 (any free port) for one test, rendering with the web agent's chat template: its
    URL. Skipped when the orbit binary was built without its HTTP server (cpp-httplib missing)."""
    template = pathlib.Path(__file__).resolve().parents[2] / "samples" / "web-agent" / "chat_template.jinja"
    return start_serve(stories260k_path, "--chat-template", template).url


def test_web_agent_drives_the_server_as_an_openai_client(served, repo_root, tmp_path):
    """`web_agent.py --short --server URL`: every step is a chat completion with the three function tools and
    tool_choice naming the step's tool, of the whole message list under one session; every answer is a parsed
    call to that tool (finish_reason "tool_calls") whose page went back as a tool message, every answer carries
    usage.orbit, the session report agrees with the answers' sum, and orbit forwards fewer tokens than the radix
    cache on the same requests."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    result = subprocess.run([sys.executable, str(repo_root / "samples/web-agent/web_agent.py"), "--short", "--quiet",
                             "--server", served, "--session", "test-web-agent", "--out", str(tmp_path)],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, f"served web agent failed:\n{result.stdout}\n{result.stderr}"
    report = json.loads((tmp_path / "web-agent-served.report.json").read_text())
    steps = report["steps"]
    assert len(steps) == 8
    for s in steps:
        assert s["finish_reason"] == "tool_calls", s
        call = s["call"]
        assert call["type"] == "function" and call["id"] and call["function"]["name"] == s["tool"], s
        assert isinstance(json.loads(call["function"]["arguments"]), dict), s
        assert 1 <= s["completion_tokens"] <= 64, s
        o = s["orbit"]
        assert o is not None, s
        assert isinstance(o["forward_tokens"], (int, float)) and isinstance(o["radix_cache_tokens"], (int, float))
        assert 0 < o["forward_tokens"] <= s["prompt_tokens"] and o["radix_cache_tokens"] <= s["prompt_tokens"], s
        assert o["session"] == "test-web-agent"
    # each request after the first sends back the previous call and its page (a tool message)
    assert all(b["messages"] >= 4 for b in steps[1:])
    assert {s["tool"] for s in steps} == {"open_page", "go_back", "search"}
    info = report["session_info"]
    forward = sum(s["orbit"]["forward_tokens"] for s in steps)
    radix = sum(s["orbit"]["radix_cache_tokens"] for s in steps)
    assert info["requests"] == 8
    assert info["savings"]["forward_tokens"] == pytest.approx(forward)
    assert info["savings"]["radix_cache_tokens"] == pytest.approx(radix)
    assert forward < radix
    assert f"orbit {forward:.0f} vs the radix cache {radix:.0f}" in result.stdout
    # The client thinks (the tool's run) 250 ms after each answer by default, and reports it and the audits.
    assert report["think_ms"] == 250
    assert "client think time after each answer: 250 ms" in result.stdout
    assert set(report["audit_metrics"]) == {"orbit_audits_total", "orbit_audits_owed_total",
                                            "orbit_audits_dropped_total", "orbit_audits_waiting"}
    audits, exact = info["audit"]["audits"], info["audit"]["exact_kv_requests"]
    assert audits + exact <= 8 and exact == sum(s["orbit"]["exact_kv"] for s in steps), (info["audit"], steps)
    read_exact = f"({exact} requests read exact KV)"
    said = f"{audits} audits {read_exact}, mean measured KL " if audits else f"nothing audited {read_exact}; "
    assert f"served fidelity (GET /v1/sessions/test-web-agent, audit): {said}" in result.stdout


def test_web_agent_says_nothing_was_audited_when_no_audit_ran(start_serve, stories260k_path, repo_root, tmp_path):
    """Served by a server that audits nothing (--audit 0), the closing fidelity line says nothing was audited,
    not a mean KL of no measurement (nan)."""
    template = repo_root / "samples" / "web-agent" / "chat_template.jinja"
    url = start_serve(stories260k_path, "--chat-template", template, "--audit", "0").url
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    result = subprocess.run([sys.executable, str(repo_root / "samples/web-agent/web_agent.py"), "--short", "--quiet",
                             "--server", url, "--session", "no-audit", "--think-ms", "0", "--out", str(tmp_path)],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, f"served web agent failed:\n{result.stdout}\n{result.stderr}"
    report = json.loads((tmp_path / "web-agent-served.report.json").read_text())
    assert (report["session_info"].get("audit") or {}).get("audits", 0) == 0
    line = next(x for x in result.stdout.splitlines() if x.startswith("served fidelity"))
    assert re.match(r"served fidelity \(GET /v1/sessions/no-audit, audit\): nothing audited \(\d+ requests read "
                    r"exact KV\); server-wide", line), line
    assert "nan" not in line and "mean measured KL" not in line, line


def test_web_agent_think_time_applies_to_the_served_mode_only(repo_root):
    """--think-ms and --audit are the served mode's: without --serve or --server they are refused, not
    ignored; --audit is refused with --server (it is the server's option)."""
    script = str(repo_root / "samples/web-agent/web_agent.py")
    for extra, says in ((["--think-ms", "0"], "--think-ms and --audit apply to the served mode only"),
                        (["--audit", "1"], "--think-ms and --audit apply to the served mode only"),
                        (["--server", "http://127.0.0.1:9", "--audit", "1"], "--audit is the server's option"),
                        (["--serve", "--think-ms", "-1"], "--think-ms must be 0 or more")):
        result = subprocess.run([sys.executable, script, "--short", "--quiet", *extra], capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 2, (extra, result.stdout, result.stderr)
        assert says in result.stderr, (extra, result.stderr)


def test_web_agent_refuses_what_its_mode_would_drop(repo_root):
    """The served mode runs no window here: the local run's options (--threads, --dump-logits; with --server also
    --policy and --model, which the server chose) are refused naming them, not dropped, as are --serve beside
    --server. Refused before anything starts (exit 2, no server reached)."""
    script = str(repo_root / "samples/web-agent/web_agent.py")
    for extra, says in ((["--server", "http://127.0.0.1:9", "--threads", "2"], "--threads applies to the local run"),
                        (["--serve", "--dump-logits"], "--dump-logits applies to the local run only"),
                        (["--server", "http://127.0.0.1:9", "--policy", "bogus", "--model", "/no.bin"],
                         "--policy, --model apply to the local run only (a window in this process); start your "
                         "server with it"),
                        (["--server", "http://127.0.0.1:9", "--serve"], "--server drives a server you started"),
                        (["--steps", "0"], "--steps must be 1 or more (got 0)"),
                        (["--seed", "-1"], "--seed must be 0 or more (got -1)")):
        result = subprocess.run([sys.executable, script, "--quiet", *extra], capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 2, (extra, result.stdout, result.stderr)
        assert says in result.stderr, (extra, result.stderr)


def test_the_samples_command_line_refuses_bad_steps_and_seeds(repo_root, tmp_path, capsys):
    """--steps 0 ran the model, then failed in the replay ('has no steps'); --seed -1 in numpy; --short beside
    --steps silently won. Each is refused up front naming the option (sample_kit.check_args)."""
    sys.path.insert(0, str(repo_root / "samples" / "common"))
    try:
        import sample_kit
    finally:
        sys.path.remove(str(repo_root / "samples" / "common"))

    def fake_run(model, **kwargs):
        raise AssertionError("the run started")

    for argv, says in ((["--steps", "0"], "--steps must be 1 or more"), (["--steps", "-3"], "--steps must be 1"),
                       (["--seed", "-1"], "--seed must be 0 or more"),
                       (["--short", "--steps", "3"], "--short and --steps both set the steps")):
        with pytest.raises(SystemExit) as stop:
            sample_kit.main(fake_run, "d", "x", default_steps=2, short_steps=1, argv=argv + ["--out", str(tmp_path)])
        assert stop.value.code == 2
        assert says in capsys.readouterr().err, argv


def test_the_samples_report_bad_input_in_one_line(orbit, repo_root, tmp_path):
    """A missing model, a bad policy, a server that does not answer and a missing orbit binary end the sample with
    one 'error:' line naming what is at fault (exit 1), not a traceback."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(os.path.dirname(orbit.__file__)),
                                                    env.get("PYTHONPATH", "")) if p)
    web, video = str(repo_root / "samples/web-agent/web_agent.py"), str(repo_root / "samples/video-agent/video_agent.py")
    missing = str(tmp_path / "no-model.bin")
    for argv, says in (([video, "--model", missing], f"error: {missing}: no such file"),
                       ([web, "--model", missing], f"error: {missing}: no such file"),
                       ([video, "--policy", "bogus"], "error: policy 'bogus': unknown policy 'bogus'"),
                       ([web, "--server", "http://127.0.0.1:9"], "error: --server: cannot reach the server at "
                                                                  "http://127.0.0.1:9"),
                       ([web, "--serve", "--orbit", str(tmp_path / "orbit")], "error: --orbit: no executable at")):
        result = subprocess.run([sys.executable, *argv, "--short", "--quiet", "--out", str(tmp_path / "out")],
                                capture_output=True, text=True, env=env, timeout=300)
        assert result.returncode == 1, (argv, result.stdout, result.stderr)
        assert result.stderr.startswith(says) and "Traceback" not in result.stderr, (argv, result.stderr)
