"""Hostile and demanding requests to `orbit serve` on stories260K: an answer whose bytes are not UTF-8 on the
Responses API with a store, a previous_response_id that names nothing, fields of the wrong type (which once
failed), and clients that leave in the middle of their answers, many times over. Every server is started here
on 127.0.0.1 (any free port) and stopped."""
import http.client
import json
import os
import re
import socket
import time

from serve_wire import MODEL_NAME, ask, post_bytes

# stories260K's tokenizer has a token per byte (<0x00> is id 3): 229 is the byte 0xE2, the first of a
# three-byte character, which the bias makes the model write over and over: no valid UTF-8 follows it.
LEAD_BYTE_TOKEN = "229"


def events(text):
    """The (type, data) of each event of a Responses stream."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def invalid_answer(previous=None, stream=False):
    body = {"model": MODEL_NAME, "input": "Once upon a time", "max_output_tokens": 6,
            "logit_bias": {LEAD_BYTE_TOKEN: 100}, "stream": stream}
    if previous:
        body["previous_response_id"] = previous
    return body


def test_a_response_whose_bytes_are_not_utf8_is_stored_as_the_client_read_it(start_serve, stories260k_path,
                                                                               tmp_path):
    # Its stored conversation used to be written to the store's SQLite as JSON holding those bytes: the
    # write threw, the whole answer became a 500 and a stream's end response.failed.
    store = str(tmp_path / "store")
    server = start_serve(stories260k_path, "--store", store)
    status, text = ask(server, "POST", "/v1/responses", invalid_answer())
    assert status == 200, text
    first = json.loads(text)
    said = first["output"][0]["content"][0]["text"]
    assert first["status"] == "incomplete" and "\ufffd" in said, said
    assert ask(server, "GET", "/v1/responses/" + first["id"]) == (200, text)

    # Chained to it: its conversation (the answer as the client read it) is read back from the store.
    status, text = ask(server, "POST", "/v1/responses", invalid_answer(first["id"]))
    assert status == 200, text
    second = json.loads(text)
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"] + first["usage"]["output_tokens"]
    status, text = ask(server, "GET", "/v1/responses/" + second["id"])
    assert (status, json.loads(text)) == (200, second)

    status, text = ask(server, "POST", "/v1/responses", invalid_answer(second["id"], stream=True))
    assert status == 200, text
    streamed = events(text)
    assert streamed[-1][0] == "response.incomplete", streamed[-1]
    last = streamed[-1][1]["response"]
    assert "\ufffd" in last["output"][0]["content"][0]["text"]
    server.stop()

    server = start_serve(stories260k_path, "--store", store)
    status, text = ask(server, "GET", "/v1/responses/" + first["id"])
    assert (status, json.loads(text)) == (200, first)
    status, text = ask(server, "POST", "/v1/responses", invalid_answer(last["id"]))
    assert status == 200, text


def test_a_previous_response_id_that_names_nothing_is_a_400_as_openai_answers_it(start_serve, stories260k_path):
    # OpenAI answers 400 invalid_request_error previous_response_not_found (the openai clients raise
    # BadRequestError); this server answered 404 (NotFoundError), which agents' recovery code does not expect.
    server = start_serve(stories260k_path)
    status, text = ask(server, "POST", "/v1/responses", {"model": MODEL_NAME, "input": "x", "store": False,
                                                         "max_output_tokens": 2})
    assert status == 200, text
    for previous in ("resp_never", json.loads(text)["id"]):  # never stored; stored with store false
        for stream in (False, True):  # refused before a stream's first byte
            status, text = ask(server, "POST", "/v1/responses", {"model": MODEL_NAME, "input": "x",
                                                                 "previous_response_id": previous,
                                                                 "stream": stream})
            error = json.loads(text)["error"]
            assert (status, error["type"], error["code"], error["param"]) == (
                400, "invalid_request_error", "previous_response_not_found", "previous_response_id"), text
            assert previous in error["message"]


def test_responses_tools_of_the_wrong_type_are_refused_naming_the_field(start_serve, stories260k_path):
    # An empty object passed the check for "no tools" (an empty JSON value) and was served as none.
    server = start_serve(stories260k_path)
    for tools in ({}, {"type": "function"}, "read", 1):
        status, text = ask(server, "POST", "/v1/responses", {"model": MODEL_NAME, "input": "x", "tools": tools,
                                                             "max_output_tokens": 2})
        assert status == 400, (tools, text)
        error = json.loads(text)["error"]
        assert (error["type"], error["param"]) == ("invalid_request_error", "tools"), text
        assert "expected an array" in error["message"], text
    status, text = ask(server, "POST", "/v1/responses", {"model": MODEL_NAME, "input": "x", "tools": [],
                                                         "max_output_tokens": 2})
    assert status == 200, text


def test_chat_tool_fields_of_the_wrong_type_are_refused_naming_them(start_serve, stories260k_path):
    # A function's description and strict were taken whatever their type (a number, an object reached the
    # chat template; strict "yes" read as nothing), where the Responses API refused them.
    server = start_serve(stories260k_path)

    def ask_with(**function):
        tool = {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}, **function}}
        return ask(server, "POST", "/v1/chat/completions", {"model": MODEL_NAME, "max_tokens": 2, "tools": [tool],
                                                             "messages": [{"role": "user", "content": "x"}]})
    for field, value, expected in (("description", 7, "a string"), ("description", {"text": "d"}, "a string"),
                                   ("strict", "yes", "a boolean"), ("strict", 1, "a boolean")):
        status, text = ask_with(**{field: value})
        assert status == 400, (field, value, text)
        error = json.loads(text)["error"]
        assert (error["type"], error["param"]) == ("invalid_request_error", "tools[0].function." + field), text
        assert "expected " + expected in error["message"], text
    for function in ({"description": "Reads a page.", "strict": False}, {"description": None, "strict": None}):
        status, text = ask_with(**function)
        assert status == 200, (function, text)


def open_descriptors(server):
    return len(os.listdir(f"/proc/{server.process.pid}/fd"))


def metrics_on(connection):
    """The /metrics text, read on `connection`, a kept-alive connection (so that reading it opens no descriptor
    on the server)."""
    connection.request("GET", "/metrics")
    response = connection.getresponse()
    text = response.read().decode()
    assert response.status == 200
    return text


def busy(connection):
    """{endpoint: n} of orbit_requests_in_flight, with the decode's running sequences (orbit_decode_running), read
    on a kept-alive connection (metrics_on)."""
    text = metrics_on(connection)
    prefix = 'orbit_requests_in_flight{endpoint="'
    out = {line[len(prefix):].split('"')[0]: int(line.split()[-1]) for line in text.splitlines()
           if line.startswith(prefix)}
    out["decoding"] = sum(int(line.split()[-1]) for line in text.splitlines()
                          if line.startswith("orbit_decode_running "))
    return out


def leave_midway(server, path, body, stream):
    """Sends a long request and leaves: after the stream's first bytes, or at once for a whole answer (its run
    has started or is about to: either way it must end and free what it holds); half of them with a reset."""
    data = json.dumps(body).encode()
    client = socket.create_connection((server.host, server.port))
    client.sendall(post_bytes(path, data))
    if stream:
        assert client.recv(64).startswith(b"HTTP/1.1 200")
    if body.get("seed", 0) % 2:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    client.close()


def test_clients_that_leave_midway_many_times_leave_no_descriptor_or_request_behind(start_serve, stories260k_path):
    server = start_serve(stories260k_path)
    metrics = http.client.HTTPConnection(server.host, server.port, timeout=120)
    idle = {"chat": 0, "completions": 0, "responses": 0, "decoding": 0}
    assert busy(metrics) == idle
    descriptors = open_descriptors(server)  # the listener, the model, this kept-alive connection, ...
    story = [{"role": "user", "content": "Once upon a time"}]
    for seed in range(40):
        for path, body in (("/v1/chat/completions", {"messages": story, "max_tokens": 400}),
                           ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 400}),
                           ("/v1/responses", {"input": "Once upon a time", "max_output_tokens": 400})):
            for stream in (False, True):
                leave_midway(server, path, {"model": MODEL_NAME, "seed": seed, "stream": stream, **body}, stream)
    deadline = time.monotonic() + 120  # not a timing claim: how long a loaded machine may take to wind down
    state = (busy(metrics), open_descriptors(server))
    while time.monotonic() < deadline and state != (idle, min(state[1], descriptors)):
        time.sleep(0.1)
        state = (busy(metrics), open_descriptors(server))
    assert state[0] == idle
    assert state[1] <= descriptors
    metrics.close()
    status, text = ask(server, "POST", "/v1/chat/completions", {"model": MODEL_NAME, "messages": story,
                                                                 "max_tokens": 4})
    assert status == 200 and json.loads(text)["choices"][0]["finish_reason"] == "length", text


def test_a_target_in_absolute_form_is_served_as_its_path_and_query(start_serve, stories260k_path, tmp_path):
    # RFC 9112 §3.2.2: a server MUST accept the absolute form (a proxy's: "GET http://host:port/path?q"). It
    # was routed as a path "http://..." and answered 404. The authority is not checked (the server answers
    # any Host): any host, and the scheme in any case, reads as the path.
    server = start_serve(stories260k_path, "--store", str(tmp_path / "store"))
    origin = f"http://{server.host}:{server.port}"
    status, text = ask(server, "GET", origin + "/v1/models")
    assert status == 200 and json.loads(text)["data"][0]["id"] == MODEL_NAME, text
    assert ask(server, "GET", "HTTP://elsewhere.example/v1/models?x=1")[0] == 200
    # The query reaches the route: a limit it refuses names limit, one it takes lists.
    status, text = ask(server, "GET", origin + "/v1/chat/completions?limit=0")
    assert status == 400 and json.loads(text)["error"]["param"] == "limit", text
    status, text = ask(server, "GET", origin + "/v1/chat/completions?limit=2&order=desc")
    assert status == 200 and json.loads(text)["object"] == "list", text
    status, text = ask(server, "POST", origin + "/v1/chat/completions",
                       {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Once"}], "max_tokens": 2})
    assert status == 200 and json.loads(text)["object"] == "chat.completion", text
    # No path: "/" (no route there), as "GET / HTTP/1.1" is answered.
    assert ask(server, "GET", origin)[0] == ask(server, "GET", "/")[0] == 404


def known_sessions(connection):
    """orbit_sessions{state="known"}, read on a kept-alive connection (metrics_on)."""
    return int(next(line.split()[-1] for line in metrics_on(connection).splitlines()
                    if line.startswith('orbit_sessions{state="known"}')))


def leave_after_created(server, body):
    """Streams a long response and leaves once its response.created event arrived: its id."""
    data = json.dumps({**body, "stream": True}).encode()
    client = socket.create_connection((server.host, server.port))
    client.sendall(post_bytes("/v1/responses", data))
    seen = b""
    while not re.search(rb'"id": ?"(resp_\w+)"', seen):  # response.created's, the stream's first event
        piece = client.recv(4096)
        assert piece, seen
        seen += piece
    client.close()
    return re.search(rb'"id": ?"(resp_\w+)"', seen).group(1).decode()


def test_a_response_the_client_left_leaves_no_session_record_behind(start_serve, stories260k_path):
    # A Responses request with store true runs in a session named by its response id, so a continuation finds
    # its window. One the client left is not stored: nothing could name its session again, and each such
    # record stayed known until max_known_sessions (4096) pushed out the oldest, a live session's among them.
    # (Fails on the old code once any of these was cut: a response the model ended before its client left is
    # stored, and keeps its session, so the count is of the stored ones.)
    server = start_serve(stories260k_path)
    metrics = http.client.HTTPConnection(server.host, server.port, timeout=120)
    idle = {"chat": 0, "completions": 0, "responses": 0, "decoding": 0}
    body = {"model": MODEL_NAME, "input": "Once upon a time", "max_output_tokens": 400}
    ids = [leave_after_created(server, {**body, "seed": seed}) for seed in range(6)]
    deadline = time.monotonic() + 120  # not a timing claim: how long a loaded machine may take to wind down
    while time.monotonic() < deadline and busy(metrics) != idle:
        time.sleep(0.1)
    assert busy(metrics) == idle
    stored = sum(ask(server, "GET", "/v1/responses/" + i)[0] == 200 for i in ids)
    assert known_sessions(metrics) == stored  # a job's session ends before it leaves the in-flight count

    # A stored response keeps its session (a continuation runs in it); one with store false never had one.
    status, text = ask(server, "POST", "/v1/responses", {**body, "max_output_tokens": 2})
    assert status == 200, text
    first = json.loads(text)
    assert known_sessions(metrics) == stored + 1
    assert ask(server, "POST", "/v1/responses", {**body, "max_output_tokens": 2, "store": False})[0] == 200
    status, text = ask(server, "POST", "/v1/responses", {**body, "max_output_tokens": 2,
                                                         "previous_response_id": first["id"]})
    assert status == 200, text
    assert known_sessions(metrics) == stored + 1
    metrics.close()


def test_every_function_call_must_be_answered_exactly_once_as_openai_has_it(start_serve, stories260k_path):
    # The Responses API took a continuation whose calls had no output in its input, and a call answered twice;
    # OpenAI answers both with a 400 (the first with its "No tool output found for function call X.", param
    # input). Each call is answered once here: 200.
    server = start_serve(stories260k_path)
    tools = [{"type": "function", "name": "search", "parameters": {
        "type": "object", "properties": {"q": {"type": "string", "maxLength": 12}}, "required": ["q"]}}]
    status, text = ask(server, "POST", "/v1/responses", {
        "model": MODEL_NAME, "input": "Find a story about a cat.", "tools": tools, "tool_choice": "required",
        "max_output_tokens": 60})
    assert status == 200, text
    made = json.loads(text)
    calls = [item["call_id"] for item in made["output"] if item["type"] == "function_call"]
    assert calls, made["output"]
    outputs = [{"type": "function_call_output", "call_id": c, "output": "a cat"} for c in calls]

    def continued(items, previous=made["id"]):
        status, text = ask(server, "POST", "/v1/responses", {
            "model": MODEL_NAME, "previous_response_id": previous, "input": items, "tools": tools,
            "tool_choice": "none", "max_output_tokens": 2})
        return status, json.loads(text)

    status, body = continued([{"role": "user", "content": "And a dog?"}])
    assert status == 400 and body["error"] == {
        "message": f"No tool output found for function call {calls[0]}.", "type": "invalid_request_error",
        "param": "input", "code": None}, body
    status, body = continued(outputs + outputs[:1])
    assert status == 400 and body["error"]["param"] == f"input[{len(calls)}].call_id", body
    assert body["error"]["message"].startswith(f"Duplicate function_call_output for call_id '{calls[0]}'."), body
    status, body = continued(outputs)
    assert status == 200, body
    # Answered in the previous response's conversation: not again.
    status, body = continued([{"type": "function_call_output", "call_id": calls[0], "output": "again"}], body["id"])
    assert status == 400 and "after the previous response's conversation" in body["error"]["message"], body

    # Without a previous response: the input's own calls.
    call = {"type": "function_call", "call_id": "c1", "name": "search", "arguments": '{"q": "cat"}'}
    answer = {"type": "function_call_output", "call_id": "c1", "output": "a cat"}
    for items, param in (([call], "input"), ([call, answer, answer], "input[2].call_id")):
        status, text = ask(server, "POST", "/v1/responses", {"model": MODEL_NAME, "input": items,
                                                             "tools": tools, "max_output_tokens": 2})
        assert status == 400 and json.loads(text)["error"]["param"] == param, text
