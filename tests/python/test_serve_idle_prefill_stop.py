"""A request that comes while the idle worker prefills a session's anticipated answer stops that prefill
(cli/serve/compute/idle_worker.cpp, IdleWorker::prefill_anticipated): the prefill holds the session's window, and a
client that sends the answer back at once used to wait for the whole sync of its conversation before its own. Now
the request stops it at the sync's next interruption point, nothing of it kept, counted in
orbit_idle_prefills_skipped_total{cause="request"}, and syncs the answer itself.

The test-only fault ORBIT_SERVE_TEST_FAULT=idle_prefill_waits makes each planned prefill wait for a request, and says
so on stderr, so the next request always meets one under way. Its answers must equal those of a --deterministic
server (whose idle work runs whole before each answer ends) for the same conversation: a stopped prefill leaves the
window as the last answer left it. Both servers are started on 127.0.0.1 and always stopped."""
import json
import time

from serve_wire import MODEL_NAME, ask, metric_value

STOPPED = 'orbit_idle_prefills_skipped_total{cause="request"}'
WAITS = "an anticipated prefill waits for a request"


def stopped(server):
    return metric_value(server, STOPPED)


def prefills_waiting(server, count):
    """Waits until `count` prefills said they wait (a hang guard only: nothing is timed)."""
    deadline = time.monotonic() + 300
    while server.output().count(WAITS) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.output().count(WAITS) == count, server.output()


def turn(server, messages):
    status, body = ask(server, "POST", "/v1/chat/completions", {
        "model": MODEL_NAME, "user": "agent", "max_tokens": 12, "temperature": 0, "messages": messages})
    assert status == 200, body
    return json.loads(body)["choices"][0]["message"]["content"]


def conversation(server, on_answer):
    messages = [{"role": "user", "content": "Once upon a time there was a little dog."}]
    answers = []
    for k, user in enumerate(["Then what happened?", "And after that?", "How did it end?"]):
        answers.append(turn(server, messages))
        on_answer(k + 1)
        messages += [{"role": "assistant", "content": answers[-1]}, {"role": "user", "content": user}]
    answers.append(turn(server, messages))
    return answers


def test_a_request_stops_the_anticipated_prefill_and_answers_as_without_it(start_serve, stories260k_path):
    reference = start_serve(stories260k_path, "--audit", "0", "--deterministic")
    expected = conversation(reference, lambda k: None)
    server = start_serve(stories260k_path, "--audit", "0", env={"ORBIT_SERVE_TEST_FAULT": "idle_prefill_waits"})
    seen = []

    def meets_a_waiting_prefill(k):
        prefills_waiting(server, k)  # the next request comes while the prefill of answer k is under way
        seen.append(stopped(server))

    answers = conversation(server, meets_a_waiting_prefill)
    assert answers == expected
    assert seen == [0, 1, 2]  # each prefill was stopped by the request after it, before that request's answer
    assert stopped(server) == 3
    server.stop()
    assert "prefilling the answer" not in server.output()  # a stop is no failure
