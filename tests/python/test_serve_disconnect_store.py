"""What `orbit serve` does with a stored answer (store true) whose streaming client leaves before it ends.

As OpenAI ends a foreground stream its client closes (only `background` responses outlive their client, and
this server runs none), the run is cancelled between forwards and nothing is stored: while it still runs, GET
/v1/responses/{id} answers status in_progress (a stored chat completion: 409 chat_completion_in_progress) and
a previous_response_id naming it is a 400 previous_response_in_progress; once it stopped, the id is unknown:
404, and chaining to it is a 400 previous_response_not_found. The client here stops reading first (with
--max-unsent-kb 1 the decode then pauses, so the answer is surely still running when it leaves), then closes.
Every server is started here on 127.0.0.1 (any free port) and stopped."""
import json
import socket
import time

from serve_wire import MODEL_NAME, ask, post_bytes

NO_END = {"1": -100, "2": -100}  # neither BOS nor EOS: the answer runs to its max tokens


def open_unread(server, path, body):
    """A raw connection that sent `body` streamed to `path` and read until the answer's id showed: the id and the
    socket, left unread."""
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect((server.host, server.port))
    client.sendall(post_bytes(path, json.dumps(dict(body, model=MODEL_NAME, stream=True, store=True)).encode()))
    seen, keys = b"", (b'"id":"resp_', b'"id":"chatcmpl')
    while not any(k in seen and seen.find(b'"', seen.index(k) + 6) >= 0 for k in keys):
        piece = client.recv(256)
        assert piece, seen
        seen += piece
    start = seen.index(next(k for k in keys if k in seen)) + 6
    return seen[start:seen.index(b'"', start)].decode(), client


def after_it_stops(server, path, running):
    """The (status, body) GET `path` answers once `running(status, body)` no longer holds (polled; the
    server notices a closed socket between forwards)."""
    for _ in range(600):
        status, text = ask(server, "GET", path)
        body = json.loads(text)
        if not running(status, body):
            return status, body
        time.sleep(0.1)
    raise AssertionError(f"{path} still running: {status} {body}")


def test_a_stored_response_whose_client_left_is_cancelled_and_not_stored(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--max-unsent-kb", "1")
    rid, client = open_unread(server, "/v1/responses", {
        "input": "Once upon a time", "max_output_tokens": 400, "temperature": 0, "logit_bias": NO_END})
    status, body = ask(server, "GET", "/v1/responses/" + rid)
    assert status == 200 and json.loads(body)["status"] == "in_progress", body
    status, body = ask(server, "POST", "/v1/responses", {"model": MODEL_NAME, "input": "x",
                                                          "previous_response_id": rid})
    assert status == 400 and json.loads(body)["error"]["code"] == "previous_response_in_progress", body
    client.close()
    status, body = after_it_stops(server, "/v1/responses/" + rid,
                                  lambda s, b: s == 200 and b.get("status") == "in_progress")
    assert status == 404 and body["error"]["code"] == "response_not_found", body
    status, body = ask(server, "POST", "/v1/responses", {"model": MODEL_NAME, "input": "x",
                                                          "previous_response_id": rid})
    assert status == 400 and json.loads(body)["error"]["code"] == "previous_response_not_found", body


def test_a_stored_chat_completion_whose_client_left_is_cancelled_and_not_stored(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--max-unsent-kb", "1")
    cid, client = open_unread(server, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 400, "temperature": 0,
        "logit_bias": NO_END})
    status, body = ask(server, "GET", "/v1/chat/completions/" + cid)
    assert status == 409 and json.loads(body)["error"]["code"] == "chat_completion_in_progress", body
    client.close()
    status, body = after_it_stops(server, "/v1/chat/completions/" + cid, lambda s, b: s == 409)
    assert status == 404 and body["error"]["code"] == "not_found", body
    status, body = ask(server, "GET", "/v1/chat/completions?limit=100")
    assert cid not in [c["id"] for c in json.loads(body)["data"]], body
