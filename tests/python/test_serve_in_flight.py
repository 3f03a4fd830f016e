"""orbit_requests_in_flight{endpoint} at /metrics (cli/serve/serve_metrics.h): the model-endpoint requests
(chat, completions, responses) from their arrival until their answer ended, the count SIGTERM's drain waits
for (cli/serve/http/request_count.h). It is 1 while a stream is being written and back at 0 once a request
ended, whether it was answered, failed with an exception (the test-only ORBIT_SERVE_TEST_FAULT=run) or was
cancelled by a client that left mid-stream.

Also: a streamed /v1/responses request that fails before its response.created went out (the test-only
ORBIT_SERVE_TEST_FAULT=stream_start) ends with the Responses stream's `error` event, not a cut connection.

Every server is started here on 127.0.0.1 (any free port) and always stopped."""
import json
import socket
import time

import pytest
from serve_wire import MODEL_NAME, ask, in_flight, send_queue, unread_streams

BODIES = {
    "/v1/chat/completions": {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3},
    "/v1/completions": {"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 3},
    "/v1/responses": {"model": MODEL_NAME, "input": "Hi", "max_output_tokens": 3},
}
ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/responses": "responses"}


def requests_total(server, endpoint, status_code):
    _, text = ask(server, "GET", "/metrics")
    line = f'orbit_requests_total{{endpoint="{endpoint}",status="{status_code}"}} '
    return sum(int(x[len(line):]) for x in text.splitlines() if x.startswith(line))


def until(condition, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


IDLE = {"chat": 0, "completions": 0, "responses": 0}


@pytest.mark.parametrize("stream", [False, True])
def test_answered_requests_leave_the_gauge_at_zero(start_serve, stories260k_path, stream):
    server = start_serve(stories260k_path)
    assert in_flight(server) == IDLE
    for path, body in BODIES.items():
        status, text = ask(server, "POST", path, dict(body, stream=stream))
        assert status == 200, text
        # A stream leaves the count when cpp-httplib lets go of its writer, just after its last byte.
        assert until(lambda: in_flight(server) == IDLE), (path, in_flight(server))


@pytest.mark.parametrize("stream", [False, True])
def test_failed_requests_leave_the_gauge_at_zero(start_serve, stories260k_path, stream):
    server = start_serve(stories260k_path, env={"ORBIT_SERVE_TEST_FAULT": "run"})
    for path, body in BODIES.items():
        status, text = ask(server, "POST", path, dict(body, stream=stream))
        assert status == (200 if stream else 500), text
        assert "ORBIT_SERVE_TEST_FAULT=run" in text
        # A stream leaves the count when cpp-httplib lets go of its writer, just after its last byte.
        assert until(lambda: in_flight(server) == IDLE), (path, in_flight(server))


def stalled(server_port, client_port, state):
    """Whether the server's send queue to the client holds at least 256 KiB and has not moved for 2 s (a write
    waiting for room); `state` carries the last reading between calls."""
    queued = send_queue(server_port, client_port)
    if queued != state.get("last"):
        state.update(last=queued, since=time.monotonic())
        return False
    return queued is not None and queued >= 256 << 10 and time.monotonic() - state["since"] >= 2


def test_a_stream_whose_client_left_leaves_the_gauge_at_zero(start_serve, stories260k_path):
    server = start_serve(stories260k_path)
    client = unread_streams(server.host, server.port, 8)
    try:
        # A write waits for a reader that never reads: its request stays in flight (one at a time: they are
        # answered in order on one connection).
        state = {}
        assert until(lambda: stalled(server.port, client.getsockname()[1], state), 120)
        assert in_flight(server) == dict(IDLE, chat=1)
    finally:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
        client.close()
    assert until(lambda: in_flight(server) == IDLE), in_flight(server)
    assert requests_total(server, "chat", 200) >= 1  # a stream cut by its client: its head said 200


def test_a_responses_stream_that_fails_before_it_started_ends_with_an_error_event(start_serve, stories260k_path):
    server = start_serve(stories260k_path, env={"ORBIT_SERVE_TEST_FAULT": "stream_start"})
    status, text = ask(server, "POST", "/v1/responses", dict(BODIES["/v1/responses"], stream=True))
    assert status == 200, text  # the head went out before the run
    assert text.startswith("event: error\ndata: "), text
    events = [json.loads(line[len("data: "):]) for line in text.split("\n") if line.startswith("data: ")]
    assert len(events) == 1, events  # no response.created: there is no response to fail
    error = events[0]
    assert error["type"] == "error" and error["code"] == "internal_error" and error["param"] is None, error
    assert error["sequence_number"] == 0
    assert error["message"].startswith("POST /v1/responses failed: internal error: "), error
    assert "ORBIT_SERVE_TEST_FAULT=stream_start" in error["message"], error
    assert requests_total(server, "responses", 500) == 1
    assert until(lambda: in_flight(server) == IDLE), in_flight(server)
    # A whole answer and the other endpoints never reach that point.
    status, text = ask(server, "POST", "/v1/responses", BODIES["/v1/responses"])
    assert status == 200, text
    status, text = ask(server, "POST", "/v1/chat/completions", dict(BODIES["/v1/chat/completions"], stream=True))
    assert status == 200 and text.endswith("data: [DONE]\n\n"), text
