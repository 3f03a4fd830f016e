"""Hostile and demanding requests to `orbit serve` on stories260K that once failed: an answer whose bytes are not
UTF-8 on the Responses API with a store, and a previous_response_id that names nothing. Every server is
started here on 127.0.0.1 (any free port) and stopped."""
import http.client
import json

MODEL_NAME = "stories260K.bin"
# stories260K's tokenizer has a token per byte (<0x00> is id 3): 229 is the byte 0xE2, the first of a
# three-byte character, which the bias makes the model write over and over: no valid UTF-8 follows it.
LEAD_BYTE_TOKEN = "229"


def request(server, method, path, body=None):
    """(status, body text) of one request on a fresh connection (a stream read to its end)."""
    connection = http.client.HTTPConnection(server.host, server.port, timeout=120)
    try:
        data = None if body is None else json.dumps(body).encode()
        connection.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8")  # strict: the server writes only UTF-8
    finally:
        connection.close()


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
    status, text = request(server, "POST", "/v1/responses", invalid_answer())
    assert status == 200, text
    first = json.loads(text)
    said = first["output"][0]["content"][0]["text"]
    assert first["status"] == "incomplete" and "\ufffd" in said, said
    assert request(server, "GET", "/v1/responses/" + first["id"]) == (200, text)

    # Chained to it: its conversation (the answer as the client read it) is read back from the store.
    status, text = request(server, "POST", "/v1/responses", invalid_answer(first["id"]))
    assert status == 200, text
    second = json.loads(text)
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"] + first["usage"]["output_tokens"]
    status, text = request(server, "GET", "/v1/responses/" + second["id"])
    assert (status, json.loads(text)) == (200, second)

    status, text = request(server, "POST", "/v1/responses", invalid_answer(second["id"], stream=True))
    assert status == 200, text
    streamed = events(text)
    assert streamed[-1][0] == "response.incomplete", streamed[-1]
    last = streamed[-1][1]["response"]
    assert "\ufffd" in last["output"][0]["content"][0]["text"]
    server.stop()

    server = start_serve(stories260k_path, "--store", store)
    status, text = request(server, "GET", "/v1/responses/" + first["id"])
    assert (status, json.loads(text)) == (200, first)
    status, text = request(server, "POST", "/v1/responses", invalid_answer(last["id"]))
    assert status == 200, text


def test_a_previous_response_id_that_names_nothing_is_a_400_as_openai_answers_it(start_serve, stories260k_path):
    # OpenAI answers 400 invalid_request_error previous_response_not_found (the openai clients raise
    # BadRequestError); this server answered 404 (NotFoundError), which agents' recovery code does not expect.
    server = start_serve(stories260k_path)
    status, text = request(server, "POST", "/v1/responses", {"model": MODEL_NAME, "input": "x", "store": False,
                                                             "max_output_tokens": 2})
    assert status == 200, text
    for previous in ("resp_never", json.loads(text)["id"]):  # never stored; stored with store false
        for stream in (False, True):  # refused before a stream's first byte
            status, text = request(server, "POST", "/v1/responses", {"model": MODEL_NAME, "input": "x",
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
        status, text = request(server, "POST", "/v1/responses", {"model": MODEL_NAME, "input": "x", "tools": tools,
                                                                 "max_output_tokens": 2})
        assert status == 400, (tools, text)
        error = json.loads(text)["error"]
        assert (error["type"], error["param"]) == ("invalid_request_error", "tools"), text
        assert "expected an array" in error["message"], text
    status, text = request(server, "POST", "/v1/responses", {"model": MODEL_NAME, "input": "x", "tools": [],
                                                             "max_output_tokens": 2})
    assert status == 200, text
