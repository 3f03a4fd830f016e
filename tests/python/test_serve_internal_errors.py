"""A request whose handler fails with an exception nothing foresaw (cli/serve/http/request_count.h): it is
answered with an OpenAI error naming the request and the exception (a whole answer: 500 with the JSON body; a
stream, whose 200 head went out: an error event, chat's before [DONE], Responses' response.failed), counted
once in orbit_requests_total as a 500, and no longer in flight, so the drain finds none left.

The failure is injected with the test-only ORBIT_SERVE_TEST_FAULT=run (ServeOptions::test_fault), which makes
every run throw an exception that is not orbit::Error. Every server is started here on 127.0.0.1 (any free
port) and always stopped."""
import json
import time

import pytest
from serve_process import NoServe, ServeProcess
from serve_wire import MODEL_NAME, ask, counts, grown

FAULT = {"ORBIT_SERVE_TEST_FAULT": "run"}
BODIES = {
    "/v1/chat/completions": {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3},
    "/v1/completions": {"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 3},
    "/v1/responses": {"model": MODEL_NAME, "input": "Hi", "max_output_tokens": 3},
}
ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/responses": "responses"}


def assert_names_the_failure(error, path):
    assert error["code"] == "internal_error", error
    assert error["message"].startswith(f"POST {path} failed: internal error: "), error
    assert "ORBIT_SERVE_TEST_FAULT=run" in error["message"], error  # the exception's own words


def last_error(path, text):
    """The error a stream ended with: chat's and completions' data event before [DONE], Responses'
    response.failed."""
    events = [line[len("data: "):] for line in text.split("\n") if line.startswith("data: ")]
    if path == "/v1/responses":
        last = json.loads(events[-1])
        assert last["type"] == "response.failed", last
        assert last["response"]["status"] == "failed"
        return last["response"]["error"]
    assert events[-1] == "[DONE]", text
    return json.loads(events[-2])["error"]


def drained_in_flight(server):
    """The requests in flight when SIGTERM came, as the server says when it starts draining."""
    assert server.stop() == 0, server.output()
    deadline = time.monotonic() + 30  # the thread that reads its output may lag its exit
    while "draining" not in server.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    line = next(line for line in server.output().splitlines() if "draining" in line)
    return int(line.split("draining ")[1].split(" ")[0])


@pytest.mark.parametrize("stream", [False, True])
def test_an_exception_is_an_error_answer_counted_once_and_not_left_in_flight(start_serve, stories260k_path, stream):
    server = start_serve(stories260k_path, "--drain-seconds", "5", env=FAULT)
    for path, body in BODIES.items():
        answered, timed = counts(server)
        status, text = ask(server, "POST", path, dict(body, stream=stream))
        if stream:
            assert status == 200, text  # the head went out before the run
            assert_names_the_failure(last_error(path, text), path)
        else:
            assert status == 500, text
            assert_names_the_failure(json.loads(text)["error"], path)
        answered_after, timed_after = counts(server)
        endpoint = ENDPOINTS[path]
        # The /metrics read before the request is counted too; the run had begun, so the 500 is timed.
        assert grown(answered, answered_after) == {(endpoint, 500): 1, ("other", 200): 1}, path
        assert grown(timed, timed_after) == {endpoint: 1}, path
    assert drained_in_flight(server) == 0, server.output()


def test_a_request_refused_before_its_run_is_not_touched_by_the_fault(start_serve, stories260k_path):
    server = start_serve(stories260k_path, env=FAULT)
    status, text = ask(server, "POST", "/v1/chat/completions", dict(BODIES["/v1/chat/completions"], model="nope"))
    assert status == 404, text
    assert drained_in_flight(server) == 0, server.output()


def test_an_unknown_fault_stops_the_start_naming_it(orbit_cli, stories260k_path):
    with pytest.raises(RuntimeError, match="ORBIT_SERVE_TEST_FAULT=disk is not a fault tests inject"):
        try:
            ServeProcess(orbit_cli, stories260k_path, env={"ORBIT_SERVE_TEST_FAULT": "disk"})
        except NoServe as e:
            pytest.skip(str(e))
