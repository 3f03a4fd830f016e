"""Answers with store true while they still run (cli/serve/stored/live_answers.h).

A response with store true exists from its creation, as OpenAI has it: while its stream runs, GET
/v1/responses/{id} returns it with status "in_progress" (no output yet) and its input_items list its input;
a request chaining onto it (previous_response_id) is told it is still in progress (400
previous_response_in_progress), not that it was never stored; DELETE deletes it: the stream goes on for its
client, but nothing is stored when it ends (a later GET is a 404). A stored chat completion still being
generated answers GET and its messages with 409 chat_completion_in_progress, and DELETE deletes it the same
way. Before, all of these answered 404 as for an id never stored, and a DELETE during the stream was lost.

The stream is held open by a client that stops reading after its first event: with --max-unsent-kb 1 its
decode pauses (decode_scheduler.h's OutputBacklog) until it reads again, so it cannot end meanwhile; the test
then reads the stream to its end. Nothing is timed.

Every server is started here on 127.0.0.1 (any free port) and stopped; every socket is closed."""
import contextlib
import json
import re
import socket

from serve_wire import MODEL_NAME, ask, post_bytes

NO_END = {"1": -100, "2": -100}  # no BOS or EOS: the answer runs to its max tokens
DEADLINE_S = 300  # hang guards only: nothing here is timed
# The stream pauses at 1 KiB unsent and is never dropped meanwhile: the test ends it by reading or closing.
HOLDING = ("--max-unsent-kb", "1", "--stall-seconds", "3600", "--min-drain-rate", "0")


def request(server, method, path, body=None):
    status, text = ask(server, method, path, body)
    return status, json.loads(text)


@contextlib.contextmanager
def held_stream(server, path, body, id_pattern):
    """(socket, id) of a streamed request that read up to its answer's id and no further (its decode soon
    pauses: HOLDING); the socket is closed on exit. Its receive buffer and segment size are small, so the
    kernel takes little of the answer (test_serve_stalled_client.py)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
        sock.settimeout(DEADLINE_S)
        sock.connect((server.host, server.port))
        data = post_bytes(path, json.dumps(body).encode())
        sock.sendall(data.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1))
        received = b""
        while not re.search(id_pattern, received):
            piece = sock.recv(4096)
            assert piece, "the stream ended before its answer's id: " + received.decode(errors="replace")
            received += piece
        yield sock, re.search(id_pattern, received).group(1).decode()
    finally:
        sock.close()


def read_to_end(sock):
    """The rest of the stream, read until the server closes the connection (Connection: close)."""
    received = b""
    while True:
        piece = sock.recv(65536)
        if not piece:
            return received.decode(errors="replace")
        received += piece


def response_body(**extra):
    return {"model": MODEL_NAME, "input": "Tell me a long story.", "stream": True, "max_output_tokens": 400,
            "temperature": 0, "top_logprobs": 20, "logit_bias": NO_END, **extra}


def chat_body():
    return {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Tell me a long story."}], "stream": True,
            "store": True, "max_tokens": 400, "temperature": 0, "logprobs": True, "top_logprobs": 20,
            "logit_bias": NO_END}


RESPONSE_ID = rb'"id":"(resp_[0-9a-f]+)"'
CHAT_ID = rb'"id":"(chatcmpl-[^"]+)"'


def test_a_response_in_progress_is_shown_refused_as_previous_and_stored_once_it_ends(start_serve, stories260k_path):
    server = start_serve(stories260k_path, *HOLDING)
    with held_stream(server, "/v1/responses", response_body(), RESPONSE_ID) as (sock, rid):
        status, shown = request(server, "GET", "/v1/responses/" + rid)
        assert status == 200, shown
        assert (shown["id"], shown["status"], shown["output"]) == (rid, "in_progress", [])
        status, items = request(server, "GET", f"/v1/responses/{rid}/input_items")
        assert status == 200, items
        assert [i["content"][0]["text"] for i in items["data"]] == ["Tell me a long story."]
        status, chained = request(server, "POST", "/v1/responses",
                                  {"model": MODEL_NAME, "input": "and then?", "previous_response_id": rid,
                                   "max_output_tokens": 4})
        assert status == 400, chained
        assert chained["error"]["code"] == "previous_response_in_progress"
        assert chained["error"]["param"] == "previous_response_id"
        assert "still in progress" in chained["error"]["message"] and "never stored" not in chained["error"]["message"]
        status, cancel = request(server, "POST", f"/v1/responses/{rid}/cancel")
        assert status == 400 and cancel["error"]["code"] == "response_not_cancellable"
        assert "still in progress" in cancel["error"]["message"]
        tail = read_to_end(sock)
    assert '"type":"response.incomplete"' in tail  # cut by max_output_tokens: no end token
    status, stored = request(server, "GET", "/v1/responses/" + rid)
    assert status == 200 and stored["status"] == "incomplete" and stored["output"], stored
    status, chained = request(server, "POST", "/v1/responses",
                              {"model": MODEL_NAME, "input": "and then?", "previous_response_id": rid,
                               "max_output_tokens": 4})
    assert status == 200, chained


def test_a_response_deleted_while_it_streams_is_never_stored(start_serve, stories260k_path):
    server = start_serve(stories260k_path, *HOLDING)
    with held_stream(server, "/v1/responses", response_body(), RESPONSE_ID) as (sock, rid):
        status, deleted = request(server, "DELETE", "/v1/responses/" + rid)
        assert (status, deleted) == (200, {"id": rid, "object": "response", "deleted": True})
        status, gone = request(server, "GET", "/v1/responses/" + rid)
        assert status == 404 and gone["error"]["code"] == "response_not_found"
        assert request(server, "DELETE", "/v1/responses/" + rid)[0] == 404
        tail = read_to_end(sock)  # the stream goes on for its client
    assert '"type":"response.incomplete"' in tail
    status, gone = request(server, "GET", "/v1/responses/" + rid)
    assert status == 404 and gone["error"]["code"] == "response_not_found"
    status, refused = request(server, "POST", "/v1/responses", {"model": MODEL_NAME, "input": "x",
                                                                  "previous_response_id": rid})
    assert status == 400 and refused["error"]["code"] == "previous_response_not_found"


def test_a_stored_chat_completion_being_generated_is_409_and_a_delete_holds(start_serve, stories260k_path):
    server = start_serve(stories260k_path, *HOLDING)
    with held_stream(server, "/v1/chat/completions", chat_body(), CHAT_ID) as (sock, cid):
        for path in ("/v1/chat/completions/" + cid, f"/v1/chat/completions/{cid}/messages"):
            status, busy = request(server, "GET", path)
            assert status == 409, busy
            assert busy["error"]["code"] == "chat_completion_in_progress" and "still being generated" in busy[
                "error"]["message"]
        status, busy = request(server, "POST", "/v1/chat/completions/" + cid, {"metadata": {"k": "v"}})
        assert status == 409 and busy["error"]["code"] == "chat_completion_in_progress"
        tail = read_to_end(sock)
    assert "[DONE]" in tail
    status, stored = request(server, "GET", "/v1/chat/completions/" + cid)
    assert status == 200 and stored["id"] == cid

    with held_stream(server, "/v1/chat/completions", chat_body(), CHAT_ID) as (sock, cid):
        status, deleted = request(server, "DELETE", "/v1/chat/completions/" + cid)
        assert (status, deleted) == (200, {"id": cid, "object": "chat.completion.deleted", "deleted": True})
        tail = read_to_end(sock)
    assert "[DONE]" in tail
    assert request(server, "GET", "/v1/chat/completions/" + cid)[0] == 404
