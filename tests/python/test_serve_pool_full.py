"""A request whose window the KV pool cannot hold beside the windows `orbit serve` keeps
(cli/serve/run/request_run.cpp's sync_making_room, SessionTable::let_go_idle, RequestPath::engine_failure).

While idle sessions' windows hold the pool's pages, a new request makes room by letting the least recently used
idle windows go (their chunks stay in the store: the session's next request syncs a new window from them), never
a window a request is using. It was refused with 500 engine_error instead (24 of 51 pages free, the rest held by
windows no request used). Only when the windows requests are using leave no room is it refused: 503 with
Retry-After and the code kv_pool_full, saying the pool is full and 'refused' once, naming --pool-mb.

The running request is held by a client that stops reading after its first event: with --max-unsent-kb 1 its
decode pauses (decode_scheduler.h's OutputBacklog), so it holds its window until the test reads on. Nothing is
timed. Every server is started here on 127.0.0.1 (any free port) and stopped; every socket is closed.

A streamed request (chat, a stored chat completion, the Responses API) syncs its window before its stream's
head (RequestPath::sync_ahead), so its refusal is the same 503 with Retry-After; it was a 200 whose stream
carried the error as an event (chat) or response.failed (Responses), with no Retry-After, and the Responses
API's whole answer had no Retry-After either."""
import http.client
import json

from serve_wire import MODEL_NAME, ask
from test_serve_live_answers import CHAT_ID, HOLDING, NO_END, held_stream, read_to_end

# 1 MiB holds 51 pages of stories260K's KV (16 tokens a page); each prompt below is about 400 tokens (25 pages),
# its own text (no chunk shared with another's), so two such windows cannot both stay in the pool.
PROMPT = " once upon a time" * 80


def post(server, path, body):
    """(status, headers, body) of a POST: the body parsed as JSON, or the text of a stream."""
    connection = http.client.HTTPConnection(server.host, server.port, timeout=300)
    try:
        connection.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        text = response.read().decode()
        streamed = response.getheader("Content-Type", "").startswith("text/event-stream")
        return response.status, dict(response.getheaders()), text if streamed else json.loads(text)
    finally:
        connection.close()


def chat(server, user, words=PROMPT, **extra):
    """(status, headers, body) of a greedy chat request of session `user`."""
    return post(server, "/v1/chat/completions", {
        "model": MODEL_NAME, "user": user, "max_tokens": 6, "temperature": 0,
        "messages": [{"role": "user", "content": user + words}], **extra})


def respond(server, user, words=PROMPT, **extra):
    """(status, headers, body) of a greedy Responses API request of session `user`, the same conversation."""
    return post(server, "/v1/responses", {"model": MODEL_NAME, "user": user, "max_output_tokens": 6,
                                          "temperature": 0, "input": user + words, **extra})


def assert_pool_full(result):
    """A 503 kv_pool_full with Retry-After: 1, as JSON, before any byte of a stream."""
    status, headers, body = result
    assert status == 503, body
    assert headers.get("Retry-After") == "1", headers
    error = body["error"]
    assert error["code"] == "kv_pool_full" and error["type"] == "server_error", error
    message = error["message"]
    assert message.count("the KV pool is full") == 1, message
    assert message.count("refused") == 1, message
    assert "--pool-mb 1)" in message and "larger --pool-mb" in message, message
    assert "evict, slide or close windows" not in message, message


def answer(result):
    status, _, body = result
    assert status == 200, body
    return body["choices"][0]["message"]["content"]


def evictions(server, session):
    status, text = ask(server, "GET", "/v1/sessions/" + session)
    assert status == 200, text
    return json.loads(text)["left_memory"]


def test_idle_windows_make_room_and_their_sessions_are_served_again(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--pool-mb", "1")
    first = answer(chat(server, "alpha"))
    # beta's window needs alpha's pages: alpha's idle window goes (it was a 500 engine_error).
    beta = answer(chat(server, "beta"))
    assert evictions(server, "alpha") == 1
    # alpha again, the same request: its window is synced anew from the store, beta's goes; the same answer.
    assert answer(chat(server, "alpha")) == first
    assert evictions(server, "beta") == 1
    assert answer(chat(server, "beta")) == beta


def test_a_request_the_running_windows_leave_no_room_for_is_503_kv_pool_full(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--pool-mb", "1", *HOLDING)
    answer(chat(server, "idle"))  # an idle window: let go for the next request, which still cannot fit
    running = {"model": MODEL_NAME, "user": "running", "stream": True, "max_tokens": 90, "temperature": 0,
               "logprobs": True, "top_logprobs": 20, "logit_bias": NO_END,
               "messages": [{"role": "user", "content": "running" + PROMPT}]}
    longer = PROMPT + " the end" * 20
    with held_stream(server, "/v1/chat/completions", running, CHAT_ID) as (sock, _):
        assert_pool_full(chat(server, "refused", longer))
        assert evictions(server, "idle") == 1  # let go, as far as that went
        # Streamed, stored, and on the Responses API, whole or streamed: the same refusal, before any byte.
        assert_pool_full(chat(server, "refused", longer, stream=True))
        assert_pool_full(chat(server, "refused", longer, stream=True, store=True))
        assert_pool_full(respond(server, "refused", longer))
        assert_pool_full(respond(server, "refused", longer, stream=True))
        assert "[DONE]" in read_to_end(sock)  # the running request was never touched
    # Its window idle now, the same request fits, streamed too.
    assert chat(server, "refused", longer)[0] == 200
    status, _, stream = chat(server, "refused", longer, stream=True)
    assert status == 200 and stream.rstrip().endswith("data: [DONE]"), stream
    status, _, stream = respond(server, "refused", longer, stream=True)
    assert status == 200 and "event: response.incomplete" in stream, stream  # its 6 tokens: max_output_tokens
