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
API's whole answer had no Retry-After either.

A session's own window counts too: an edit of its long message needs the old unit's pages and the new one's at
once, so when no idle window is left its window is renewed and the sync planned from nothing (it was 503 on
every retry with nothing else running). A conversation over the whole pool is a 400 naming --pool-mb (it was a
503 inviting a retry no waiting could satisfy). A request the running windows leave no room for waits for one
of them to end, up to --pool-wait-ms, instead of a 503 at once (0: at once, as the test above asks).

/v1/completions admits its prompt as chat syncs its window (RequestPath::waiting_for_pool, RoomMaker): it lets idle
windows go, is refused with the same 503 (whole, and streamed before its stream's head) and waits the same way
under --pool-wait-ms. It was a 500 engine_error (whole) or a 200 whose stream ended in that error event, at once,
and no idle window was let go for it."""
import http.client
import json
import re
import threading
import time

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


def complete(server, words, **extra):
    """(status, headers, body) of a greedy /v1/completions request."""
    return post(server, "/v1/completions", {"model": MODEL_NAME, "max_tokens": 6, "temperature": 0,
                                            "prompt": words, **extra})


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


def metric(server, name):
    status, text = ask(server, "GET", "/metrics")
    assert status == 200, text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, f"/metrics has no {name}:\n{text}"
    return float(found.group(1))


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
    server = start_serve(stories260k_path, "--pool-mb", "1", "--pool-wait-ms", "0", *HOLDING)
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


def test_a_session_whose_edit_needs_its_own_old_pages_is_served_from_a_renewed_window(start_serve, stories260k_path):
    # The last word of a ~400-token message changed: the new unit's 26 pages and the old unit's 25 do not fit the
    # pool's 51 together, and no other window is left to let go. Every retry was 503 kv_pool_full ('send it again'),
    # with no other request running; now the session's own window is renewed and the edit planned from nothing.
    server = start_serve(stories260k_path, "--pool-mb", "1")
    assert chat(server, "z", PROMPT + " 0")[0] == 200
    edited = chat(server, "z", PROMPT + " 1")
    assert edited[0] == 200, edited[2]
    assert evictions(server, "z") == 1  # its old window left memory for the edit
    # The same greedy answer as a window that never held the old message: another session's, the same messages.
    fresh = post(server, "/v1/chat/completions", {
        "model": MODEL_NAME, "user": "fresh", "max_tokens": 6, "temperature": 0,
        "messages": [{"role": "user", "content": "z" + PROMPT + " 1"}]})
    assert answer(edited) == answer(fresh)


def test_a_conversation_over_the_whole_pool_is_400_and_lets_nothing_go(start_serve, stories260k_path):
    # 55 empty messages: 439 tokens (within the model's 512), but each message is a unit of whole pages of its
    # own, 55 pages against the pool's 51. No retry can hold it: a 400 on messages naming --pool-mb, not a 503
    # inviting one, and the idle window is not let go for it.
    server = start_serve(stories260k_path, "--pool-mb", "1")
    assert chat(server, "idle")[0] == 200
    messages = [{"role": ("user", "assistant")[i % 2], "content": ""} for i in range(54)]
    messages.append({"role": "user", "content": "ok"})
    status, headers, body = post(server, "/v1/chat/completions", {
        "model": MODEL_NAME, "user": "many", "max_tokens": 2, "temperature": 0, "messages": messages})
    assert status == 400, body
    assert "Retry-After" not in headers, headers
    error = body["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "context_length_exceeded", error
    assert error["param"] == "messages", error
    message = error["message"]
    assert "needs 55 KV pages" in message and "the whole KV pool has 51" in message, message
    assert "--pool-mb 1)" in message and "larger --pool-mb" in message and "no retry" in message, message
    assert evictions(server, "idle") == 0


def test_a_request_the_running_windows_leave_no_room_for_waits_for_them_under_pool_wait_ms(start_serve,
                                                                                          stories260k_path):
    # As above, but the server waits (--pool-wait-ms, here long enough never to run out): the refused request lets
    # the idle window go, still does not fit beside the running stream, and waits outside the gate for a request
    # to release its window; once the held stream is read to its end it syncs again and is answered 200. It was
    # a 503 at once (a burst of 4 new sessions at --pool-mb 1: 3 answered 503). Nothing is timed: the idle
    # window let go says the request reached its sync, which holds the gate the held stream needs to end.
    server = start_serve(stories260k_path, "--pool-mb", "1", "--pool-wait-ms", "3600000", *HOLDING)
    answer(chat(server, "idle"))
    running = {"model": MODEL_NAME, "user": "running", "stream": True, "max_tokens": 90, "temperature": 0,
               "logprobs": True, "top_logprobs": 20, "logit_bias": NO_END,
               "messages": [{"role": "user", "content": "running" + PROMPT}]}
    waited = {}
    with held_stream(server, "/v1/chat/completions", running, CHAT_ID) as (sock, _):
        waiter = threading.Thread(target=lambda: waited.update(result=chat(server, "waiter", PROMPT + " the end" * 20)))
        waiter.start()
        while evictions(server, "idle") == 0:  # until the waiter's sync let the idle window go
            waiter.join(0.05)
        assert "result" not in waited or waited["result"][0] != 503, waited
        assert "[DONE]" in read_to_end(sock)
        waiter.join()
    assert waited["result"][0] == 200, waited["result"]


def test_pool_wait_ms_is_refused_by_name_when_malformed(refused_serve, stories260k_path):
    for value in ("-1", "soon", "3600001"):  # the old binary: "unknown argument"
        stderr = refused_serve(stories260k_path, "--pool-wait-ms", value)
        assert "'--pool-wait-ms'" in stderr and "unknown argument" not in stderr, (value, stderr)


# Every chat request audited, a new session's first one too (read from exact KV: --audit-exact), in idle time only
# (none owed to a later request): each sampled request's fork of its window (audit.h) waits, holding the pages it
# shares with that window, until idle time runs it.
AUDIT_ALL_IN_IDLE_TIME = ("--audit", "1", "--audit-owed-after", "0", "--audit-exact")


def audits_accounted(server, sampled):
    """Once /metrics accounts for each of `sampled` audits (run, failed, dropped or waiting; one idle time is
    reading is none of them until it ends, so this polls, with a hang guard only), how many were dropped for a
    request the pool refused (among those dropped)."""
    deadline = time.monotonic() + 300
    while True:
        run, failed = metric(server, "orbit_audits_total"), metric(server, "orbit_audits_failed_total")
        dropped, waiting = metric(server, "orbit_audits_dropped_total"), metric(server, "orbit_audits_waiting")
        for_pool = metric(server, "orbit_audits_dropped_for_pool_total")
        if run + failed + dropped + waiting == sampled or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert run + failed + dropped + waiting == sampled, (run, failed, dropped, waiting)
    assert for_pool <= dropped, (for_pool, dropped)
    return for_pool


def test_an_audits_window_copy_does_not_starve_the_next_request(start_serve, stories260k_path):
    # alpha's request is audited: its window's fork waits for idle time, holding alpha's 25 pages. beta's window
    # (26 pages) needs them: alpha's idle window is let go, but the fork still held its pages, no request was
    # running to wait for, and beta was answered 503 kv_pool_full at once. Now the waiting audit is dropped
    # (counted) and beta is served, whether idle time ran alpha's audit first or not.
    server = start_serve(stories260k_path, "--pool-mb", "1", "--pool-wait-ms", "3600000", *AUDIT_ALL_IN_IDLE_TIME)
    answer(chat(server, "alpha"))
    answer(chat(server, "beta", PROMPT + " the end" * 20))
    assert evictions(server, "alpha") == 1
    audits_accounted(server, 2)


def test_a_burst_of_new_sessions_past_the_pool_is_answered_whole(start_serve, stories260k_path):
    # 8 new sessions at once, two windows' worth of pool: each request that finds no room lets idle windows go,
    # drops waiting audits' forks and waits for a running request to end. The audits' forks held pages no request
    # would give back, and requests were answered 503 kv_pool_full (7 of 8 answered at the default --audit 0.1).
    server = start_serve(stories260k_path, "--pool-mb", "1", "--pool-wait-ms", "3600000", *AUDIT_ALL_IN_IDLE_TIME)
    results = [None] * 8

    def send(i):
        results[i] = chat(server, f"burst{i}")

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r[0] for r in results] == [200] * len(results), [r[2] for r in results if r[0] != 200]
    # Two windows fit the pool at once: the third request refused found two audits' forks waiting, unless idle
    # time between the answers ran them, so how many were dropped is a race; each is accounted for.
    audits_accounted(server, len(results))


# A stream that holds its window (and its pages) until the test reads it (HOLDING), and a prompt that does not fit
# beside it once the idle window is let go.
RUNNING = {"model": MODEL_NAME, "user": "running", "stream": True, "max_tokens": 90, "temperature": 0,
           "logprobs": True, "top_logprobs": 20, "logit_bias": NO_END,
           "messages": [{"role": "user", "content": "running" + PROMPT}]}
LONGER = PROMPT + " the end" * 20


def test_a_completion_the_running_windows_leave_no_room_for_is_503_kv_pool_full(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--pool-mb", "1", "--pool-wait-ms", "0", *HOLDING)
    answer(chat(server, "idle"))
    with held_stream(server, "/v1/chat/completions", RUNNING, CHAT_ID) as (sock, _):
        assert_pool_full(complete(server, "refused" + LONGER))  # was a 500 engine_error
        assert evictions(server, "idle") == 1  # the idle window was let go for it, as for a chat request
        # Streamed: the same JSON 503 before any byte of the stream (was a 200 whose stream ended in the error).
        assert_pool_full(complete(server, "refused" + LONGER, stream=True))
        assert "[DONE]" in read_to_end(sock)
    status, _, body = complete(server, "refused" + LONGER)
    assert status == 200 and body["object"] == "text_completion", body
    status, _, stream = complete(server, "refused" + LONGER, stream=True)
    assert status == 200 and stream.rstrip().endswith("data: [DONE]") and '"error"' not in stream, stream


def test_a_completion_the_running_windows_leave_no_room_for_waits_under_pool_wait_ms(start_serve, stories260k_path):
    # As the chat request above waits: the streamed completion lets the idle window go, still does not fit beside
    # the held stream, and waits (before its stream's head) until that stream is read to its end. Nothing is timed.
    server = start_serve(stories260k_path, "--pool-mb", "1", "--pool-wait-ms", "3600000", *HOLDING)
    answer(chat(server, "idle"))
    waited = {}
    with held_stream(server, "/v1/chat/completions", RUNNING, CHAT_ID) as (sock, _):
        waiter = threading.Thread(
            target=lambda: waited.update(result=complete(server, "waiter" + LONGER, stream=True)))
        waiter.start()
        while evictions(server, "idle") == 0 and waiter.is_alive():  # until the waiter's admit let it go
            waiter.join(0.05)
        assert "result" not in waited, waited["result"]  # it waits (the old binary: at once, an error event)
        assert "[DONE]" in read_to_end(sock)
        waiter.join()
    status, _, stream = waited["result"]
    assert status == 200 and stream.rstrip().endswith("data: [DONE]") and '"error"' not in stream, stream


def test_an_answer_the_pool_could_not_hold_beside_its_prompt_is_decoded_and_its_next_turn_is_400(start_serve,
                                                                                                 stories260k_path):
    # The pool holds windows' KV, not an answer's while it is decoded (the decode batch's own buffers hold that,
    # outside --pool-mb): 45 one-page messages (367 tokens with the generation prompt; 45 of the pool's 51 pages)
    # are answered to max_tokens 120, though their window and the answer (8 pages more) would not fit the pool.
    # The turn that sends the answer back needs that window, 55 pages: the 400 naming --pool-mb, no retry.
    server = start_serve(stories260k_path, "--pool-mb", "1")
    messages = [{"role": ("user", "assistant")[i % 2], "content": ""} for i in range(44)]
    messages.append({"role": "user", "content": "ok"})
    long_answer = {"model": MODEL_NAME, "user": "long", "max_tokens": 120, "temperature": 0, "logit_bias": NO_END,
                   "messages": messages}
    status, _, body = post(server, "/v1/chat/completions", long_answer)
    assert status == 200, body
    assert body["choices"][0]["finish_reason"] == "length", body
    assert body["usage"]["prompt_tokens"] == 367 and body["usage"]["completion_tokens"] == 120, body["usage"]
    status, _, stream = post(server, "/v1/chat/completions", {**long_answer, "stream": True})
    assert status == 200 and '"finish_reason":"length"' in stream and stream.rstrip().endswith("data: [DONE]"), stream
    messages += [{"role": "assistant", "content": body["choices"][0]["message"]["content"]},
                 {"role": "user", "content": "ok"}]
    status, headers, body = post(server, "/v1/chat/completions", {**long_answer, "max_tokens": 2, "messages": messages})
    assert status == 400 and "Retry-After" not in headers, body
    error = body["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages", error
    assert "needs 55 KV pages" in error["message"] and "the whole KV pool has 51" in error["message"], error
