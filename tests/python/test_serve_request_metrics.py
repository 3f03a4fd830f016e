"""How `orbit serve` counts its answers in /metrics (cli/serve/serve_metrics.h): every answer once in
orbit_requests_total{endpoint, status}, and only the requests that ran on the model in the endpoint's
orbit_request_seconds histogram. Each status is checked against /metrics read before and after it: 400 (a
body that is not JSON), 404 (an unknown path, an unknown model), 405, 408 (a body that did not arrive in
time), 413 (a body over the limit), 503 (a request while the server drains), and 200 for a run. Every
server is started here on 127.0.0.1 (any free port) and always stopped."""
import json
import socket
import threading
import time

import pytest
from serve_wire import MODEL_NAME, ask, counts, grown, request_counts



def counted_by(server, act):
    """What act() added to orbit_requests_total and to orbit_request_seconds_count; the /metrics read that
    came before it is counted too, as ("other", 200)."""
    answered, timed = counts(server)
    act()
    answered_after, timed_after = counts(server)
    return grown(answered, answered_after), grown(timed, timed_after)


def completion(prompt="Once upon a time", **extra):
    return dict({"model": MODEL_NAME, "prompt": prompt, "max_tokens": 4, "temperature": 0}, **extra)


def read_status(sock):
    data = b""
    while b"\r\n" not in data:
        piece = sock.recv(4096)
        if not piece:
            return None
        data += piece
    return int(data.split(b" ")[1])


def test_each_status_is_counted_once_and_only_runs_are_timed(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--max-body-kb", "1", "--body-seconds", "1")
    metrics_read = {("other", 200): 1}

    def check(act, answered, timed=None):
        got_answered, got_timed = counted_by(server, act)
        assert got_answered == {**metrics_read, **answered}
        assert got_timed == (timed or {})

    # A run: counted and timed, streamed or not.
    check(lambda: ask(server, "POST", "/v1/completions", completion()), {("completions", 200): 1}, {"completions": 1})
    check(lambda: ask(server, "POST", "/v1/completions", completion(stream=True)), {("completions", 200): 1},
          {"completions": 1})
    # Refused before anything ran: counted, not timed.
    check(lambda: ask(server, "POST", "/v1/chat/completions", raw=b"{not json"), {("chat", 400): 1})
    check(lambda: ask(server, "POST", "/v1/completions", completion(model="gpt-4")), {("completions", 404): 1})
    check(lambda: ask(server, "POST", "/v1/responses", raw=b"[]"), {("responses", 400): 1})
    check(lambda: ask(server, "GET", "/v1/nothing"), {("other", 404): 1})
    check(lambda: ask(server, "GET", "/v1/completions"), {("completions", 405): 1})
    # A GET of /v1/chat/completions is the stored chat completions' list, not a chat request (it was counted
    # under chat, its 400s too).
    check(lambda: ask(server, "GET", "/v1/chat/completions"), {("other", 200): 2})
    check(lambda: ask(server, "GET", "/v1/chat/completions?limit=abc"), {("other", 400): 1})
    check(lambda: ask(server, "GET", "/v1/models"), {("other", 200): 2})
    check(lambda: ask(server, "GET", "/health"), {("other", 200): 2})
    check(lambda: ask(server, "POST", "/v1/completions", completion(prompt="x" * 2048)), {("completions", 413): 1})

    def slow_body():
        sock = socket.create_connection((server.host, server.port))
        sock.settimeout(60)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        assert read_status(sock) == 408
        sock.close()

    check(slow_body, {("chat", 408): 1})


def test_a_request_refused_while_draining_is_counted_once_and_not_timed(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--drain-seconds", "300")
    # A streamed answer read slowly (a 4 KiB receive buffer, 2 KiB every 100 ms): in flight, its writes
    # progressing, so the drain waits for it for as long as this test reads slowly. 16 choices of 400 tokens
    # with 20 log probabilities each (about 10 MiB of events) outgrow the server's send buffer (at most
    # net.ipv4.tcp_wmem's 4 MiB): one choice fitted, so the server could write the whole answer into the
    # kernel, end the drain and exit before the test asked during it (connection refused).
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect((server.host, server.port))
    body = json.dumps({"model": MODEL_NAME, "messages": [{"role": "user", "content": "Once upon a time"}],
                       "max_tokens": 400, "stream": True, "logprobs": True, "top_logprobs": 20,
                       "n": 16}).encode()
    client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(body) + body)
    fast = threading.Event()
    received = []

    def reader():
        while True:
            piece = client.recv(65536 if fast.is_set() else 2048)
            if not piece:
                return
            received.append(piece)
            if not fast.is_set():
                time.sleep(0.1)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        while not received:
            time.sleep(0.05)
        answered, timed = counts(server)
        server.process.terminate()
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline:
            status, text = ask(server, "POST", "/v1/completions", completion())
            if status == 503:
                break
            time.sleep(0.05)  # the signal thread has not started the drain yet
        assert status == 503, text
        answered_after, timed_after = counts(server)
        assert thread.is_alive(), "the slow stream ended before the checks: the drain did not wait for it"
    finally:
        fast.set()
        thread.join(timeout=120)
        client.close()
    added = grown(answered, answered_after)
    ran = added.pop(("completions", 200), 0)  # completions answered before the drain started, if any
    assert added == {("other", 200): 1, ("completions", 503): 1}
    assert grown(timed, timed_after) == ({"completions": ran} if ran else {})
    assert server.process.wait(timeout=120) == 0


def metrics_on(sock):
    """{(endpoint, status): n} of orbit_requests_total, read over an open keep-alive connection."""
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return request_counts(body.decode())[0]


@pytest.mark.parametrize("path, body, last", [
    # Cut by max_output_tokens, the Responses stream ends with response.incomplete.
    ("/v1/responses", {"model": MODEL_NAME, "input": "Once upon a time", "max_output_tokens": 2, "stream": True,
                       "temperature": 0}, b"event: response.incomplete\ndata: "),
    ("/v1/chat/completions", {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Once upon a time"}],
                              "max_tokens": 2, "stream": True, "temperature": 0}, b"data: [DONE]\n\n"),
])
def test_a_stream_is_counted_before_its_last_event_goes_out(start_serve, stories260k_path, path, body, last):
    # /metrics is asked, on a connection opened before, the moment the stream's last event arrived: a stream
    # counted after it went out would be missing from some of these reads.
    server = start_serve(stories260k_path)
    endpoint = {"/v1/responses": "responses", "/v1/chat/completions": "chat"}[path]
    data = json.dumps(body).encode()
    request = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(data)}\r\n\r\n").encode() + data
    with socket.create_connection((server.host, server.port), timeout=60) as metrics:
        missed = 0
        for _ in range(100):
            before = metrics_on(metrics).get((endpoint, 200), 0)
            with socket.create_connection((server.host, server.port), timeout=60) as stream:
                stream.sendall(request)
                received = b""
                while last not in received or b"\n\n\r\n" not in received[received.index(last):]:
                    piece = stream.recv(65536)
                    assert piece, received
                    received += piece
                missed += metrics_on(metrics).get((endpoint, 200), 0) != before + 1
        assert missed == 0, f"{missed} of 100 reads right after the last event missed the stream"
