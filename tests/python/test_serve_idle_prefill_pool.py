"""An answer the idle worker cannot prefill because the KV pool has no room for it (cli/serve/compute/idle_worker.cpp,
IdleWorker::skip_refused_prefill).

In idle time `orbit serve` prefills a session's answer as its next request will send it back. That work is optional:
refused for the pool, it is skipped, nothing is let go for it, and the next request syncs the answer itself. It was
logged on every refusal as a failure, with the SDK's advice to its caller ("evict, slide or close windows"), which is
the server's own business. Now it is counted in orbit_idle_prefills_skipped_total{cause="kv_pool"} and said once, in
the server's words.

45 one-page messages (45 of the 51 pages of --pool-mb 1) answered to 120 tokens: the window with the answer needs 8
pages more, past the whole pool, so every prefill of such an answer is refused, whatever else the pool holds. The
test polls /metrics until the idle worker tried (a hang guard only: nothing is timed). The server is started on
127.0.0.1 and always stopped."""
import re
import time

from serve_wire import MODEL_NAME, ask
from test_serve_live_answers import NO_END

SKIPPED = 'orbit_idle_prefills_skipped_total{cause="kv_pool"}'


def skipped(server):
    status, text = ask(server, "GET", "/metrics")
    assert status == 200, text
    found = re.search("^" + re.escape(SKIPPED) + r" (\S+)$", text, re.M)
    assert found, f"/metrics has no {SKIPPED}:\n{text}"
    return float(found.group(1))


def skipped_reaches(server, count):
    deadline = time.monotonic() + 300
    while skipped(server) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert skipped(server) == count


def long_answer(server, user):
    messages = [{"role": ("user", "assistant")[i % 2], "content": ""} for i in range(44)]
    messages.append({"role": "user", "content": user})
    status, body = ask(server, "POST", "/v1/chat/completions", {
        "model": MODEL_NAME, "user": user, "max_tokens": 120, "temperature": 0, "logit_bias": NO_END,
        "messages": messages})
    assert status == 200, body


def test_an_answer_the_pool_cannot_hold_is_skipped_counted_and_said_once(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--pool-mb", "1", "--audit", "0")
    long_answer(server, "first")
    skipped_reaches(server, 1)
    long_answer(server, "second")  # its window lets the first's go; its answer is refused the same way
    skipped_reaches(server, 2)
    server.stop()
    output = server.output()
    assert "evict, slide or close windows" not in output, output
    assert "prefilling the answer" not in output, output  # the old failure line
    said = [line for line in output.splitlines() if "not prefilled in idle time" in line]
    assert len(said) == 1, output
    assert "KV pool had no room" in said[0] and SKIPPED in said[0], said
