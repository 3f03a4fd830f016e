"""`orbit serve --audit 1` over HTTP: a session that trims its history (the system message and the last 8
messages, as agents do past a length) on TinyStories-656K. Every request read from approximate KV is audited in
idle time against a re-prefill, and one read from exact KV (usage.orbit.exact_kv) is not: it has nothing to
lose. The measured KL stays within the budget on at least 95% of the requests (a session past it is served
exactly until it is back within), and /metrics and GET /v1/sessions/ID report the audits."""
import re
import time

import pytest

WORDS = ("the little cat saw a big dog and they played in the park all day long until the sun went down "
         "then a bird sang to them from a tall tree").split()


def words(seed, n):
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(n))


@pytest.fixture
def audited_server(start_serve, models_dir):
    """`orbit serve --audit 1` on TinyStories-656K (127.0.0.1, a free port; always stopped)."""
    return start_serve(models_dir / "tinystories-656k", "--audit", "1")


def wait_for_audits(server, session, count):
    """The session's record once `count` audits ran (idle time follows each answer)."""
    deadline = time.monotonic() + 300
    while True:
        info = server.call(f"/v1/sessions/{session}")
        if info["audit"]["audits"] >= count or time.monotonic() > deadline:
            return info
        time.sleep(0.05)


def test_audits_of_a_trimming_session_hold_the_budget(start_serve, models_dir):
    # --deterministic: which requests read approximate KV depends on the idle work done before each (the answer
    # prefilled as it comes back, the trims learned and prepared), which otherwise races the next request: under
    # load every request here could read exact KV and nothing be audited.
    server = start_serve(models_dir / "tinystories-656k", "--audit", "1", "--deterministic")
    session = "trimmer"
    history = [{"role": "system", "content": "You tell short stories about " + words(1, 12) + "."}]
    usages, audited = [], 0
    for step in range(24):
        history.append({"role": "user", "content": words(step + 2, 10 + step % 5)})
        messages = history[:1] + history[1:][-8:]
        body = server.call("/v1/chat/completions", {"model": "tinystories-656k", "messages": messages,
                                                    "max_tokens": 6, "temperature": 0}, session)
        usage = body["usage"]["orbit"]
        usages.append(usage)
        history.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
        assert usage["exact_kv"] or not usage.get("exact"), usage  # exact mode heals before the read
        audited += 0 if usage["exact_kv"] else 1
        info = wait_for_audits(server, session, audited)
        assert info["audit"]["audits"] == audited, info["audit"]
    audit = info["audit"]
    # The first requests read exact KV (nothing trimmed yet); the trim makes some approximate (here the idle
    # work, each answer prefilled as the next request sends it back and the trim prepared, makes most later ones
    # exact again: 2 of 24 were approximate on 2026-12-06).
    exact = sum(u["exact_kv"] for u in usages)
    assert usages[0]["exact_kv"] and audit["audits"] >= 1, usages
    assert exact + audit["audits"] == len(usages)
    within = len(usages) - audit["violations"]
    assert within >= 0.95 * len(usages), (audit, [u.get("audit") for u in usages])
    # Each response after the first carries the audit of an earlier one; exact ones say why.
    reported = [u["audit"] for u in usages if "audit" in u]
    assert len(reported) >= audit["audits"] - 1
    for a in reported:
        assert a["measured_kl"] >= 0 and a["budget"] > 0 and a["within_budget"] == (a["measured_kl"] <= a["budget"])
    metrics = server.call("/metrics")
    assert re.search(rf"^orbit_audits_total {audit['audits']}$", metrics, re.M), metrics
    assert re.search(rf"^orbit_audit_measured_kl_count {audit['audits']}$", metrics, re.M)
    assert re.search(rf"^orbit_audit_budget_violations_total {audit['violations']}$", metrics, re.M)
    assert "orbit_audit_predicted_kl_total" in metrics
    assert re.search(rf"^orbit_exact_kv_requests_total {exact}$", metrics, re.M), metrics


def metric(metrics, name):
    m = re.search(rf"^{name} (\S+)$", metrics, re.M)
    assert m, f"/metrics has no {name}:\n{metrics}"
    return float(m.group(1))


def test_every_sampled_audit_is_run_owed_dropped_or_waiting(audited_server):
    """/metrics accounts for every sampled request's audit: run (in idle time, or owed and run on a later
    request's turn: orbit_audits_owed_total), dropped, or waiting (orbit_audits_waiting). Requests are sent
    back to back, so some audits may be owed; how many is a race, so only the sum is checked."""
    server, session = audited_server, "back-to-back"
    history = [{"role": "system", "content": "You tell short stories about " + words(3, 12) + "."}]
    sampled = 0
    for step in range(8):
        history.append({"role": "user", "content": words(step + 5, 8 + step % 3)})
        body = server.call("/v1/chat/completions", {"model": "tinystories-656k", "messages": history[:1] + history[-6:],
                                                    "max_tokens": 4, "temperature": 0}, session)
        sampled += 0 if body["usage"]["orbit"]["exact_kv"] else 1
        history.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
    metrics = server.call("/metrics")
    audits, owed = metric(metrics, "orbit_audits_total"), metric(metrics, "orbit_audits_owed_total")
    dropped, waiting = metric(metrics, "orbit_audits_dropped_total"), metric(metrics, "orbit_audits_waiting")
    assert owed <= audits and dropped == 0, metrics  # at most one waits per request: none is dropped
    # One may be running now (taken off the queue, not yet counted); it is counted once it ends.
    assert sampled - 1 <= audits + waiting <= sampled, (sampled, metrics)
    info = wait_for_audits(server, session, sampled)
    assert info["audit"]["audits"] == sampled, info["audit"]
    assert metric(server.call("/metrics"), "orbit_audits_waiting") == 0


def test_audit_owed_after_0_leaves_audits_to_idle_time(start_serve, models_dir):
    """`--audit-owed-after 0`: no audit is owed (the behaviour before owed audits); the option is reported by
    the metrics it changes, not ignored. The same messages each time read exact KV: `--audit-exact` samples
    them."""
    server = start_serve(models_dir / "tinystories-656k", "--audit", "1", "--audit-owed-after", "0", "--audit-exact")
    messages = [{"role": "user", "content": words(2, 10)}]
    for _ in range(3):
        server.call("/v1/chat/completions", {"model": "tinystories-656k", "messages": messages, "max_tokens": 4,
                                             "temperature": 0}, "idle-only")
    info = wait_for_audits(server, "idle-only", 3)
    assert info["audit"]["audits"] == 3, info["audit"]
    assert metric(server.call("/metrics"), "orbit_audits_owed_total") == 0


def test_requests_read_from_exact_kv_are_sampled_only_with_audit_exact(start_serve, models_dir):
    """An append-only conversation reads exact KV at every request: --audit 1 audits none of them (each usage says
    exact_kv, /metrics counts them), --audit 1 --audit-exact audits each, and each measures rounding only."""
    for args in ((), ("--audit-exact",)):
        server = start_serve(models_dir / "tinystories-656k", "--audit", "1", "--deterministic", *args)
        messages = [{"role": "system", "content": "You tell short stories."}]
        for step in range(3):
            messages.append({"role": "user", "content": words(step + 4, 6)})
            body = server.call("/v1/chat/completions", {"model": "tinystories-656k", "messages": messages,
                                                        "max_tokens": 4, "temperature": 0}, "append")
            assert body["usage"]["orbit"]["exact_kv"] is True, body["usage"]
            messages.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
        metrics = server.call("/metrics")
        assert metric(metrics, "orbit_exact_kv_requests_total") == 3, metrics
        info = server.call("/v1/sessions/append")["audit"]
        if args:
            assert metric(metrics, "orbit_audits_total") == 3, metrics  # --deterministic: each ran before its answer ended
            assert info["audits"] == 3 and info["max_measured_kl"] < 1e-8, info
        else:
            assert metric(metrics, "orbit_audits_total") == 0 and metric(metrics, "orbit_audits_waiting") == 0
            assert info["audits"] == 0, info
        server.stop()


def test_audit_exact_without_audits_is_refused(refused_serve, models_dir):
    stderr = refused_serve(models_dir / "tinystories-656k", "--audit", "0", "--audit-exact")
    assert "'--audit-exact'" in stderr and "--audit 0" in stderr


def test_audit_owed_after_negative_is_refused(refused_serve, models_dir):
    stderr = refused_serve(models_dir / "tinystories-656k", "--audit-owed-after", "-1")
    assert "'--audit-owed-after' must be >= 0" in stderr


def test_audit_rate_out_of_range_is_refused(refused_serve, models_dir):
    stderr = refused_serve(models_dir / "tinystories-656k", "--audit", "1.5")
    assert "--audit" in stderr
