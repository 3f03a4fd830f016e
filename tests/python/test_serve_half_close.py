"""A client of `orbit serve` that shuts down its sending side after its request (a half-close,
shutdown(SHUT_WR), which HTTP/1.1 permits and some proxies and tools do) is answered to the end, whole or
streamed; one that closed its socket still has its run cancelled (cli/serve/http/peer_watch.h: both send the
same end of stream, and the server's one probe, a 100 Continue before a whole answer or a ": ping" comment in
a stream, is taken by the first and answered with a reset by the second). Raw sockets; every server is started
here on 127.0.0.1 (any free port) and stopped, every socket closed."""
import contextlib
import json
import random
import re
import socket
import time

import pytest
from serve_wire import MODEL_NAME, post_bytes

NO_END = {"1": -100, "2": -100}  # no BOS or EOS (both end an answer): it runs to its token limit
DEADLINE_S = 180  # hang guard only: a loaded machine may be slow, nothing here is timed

# (path, body) of each generating endpoint, asking for `tokens` tokens exactly.
ENDPOINTS = {
    "chat": lambda tokens: ("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": tokens}),
    "completions": lambda tokens: ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": tokens}),
    "responses": lambda tokens: ("/v1/responses", {"input": "Once upon a time", "max_output_tokens": tokens}),
}


@contextlib.contextmanager
def sent(server, endpoint, tokens, stream, ending):
    """A socket that sent one request and then ended its side with `ending` (socket.SHUT_WR, or None for
    close()); yields it (None once closed). The request and its end leave together (TCP_CORK holds the request
    until the end pushes it out), so the server has the end of stream before it starts the run."""
    path, body = ENDPOINTS[endpoint](tokens)
    data = json.dumps({"model": MODEL_NAME, "stream": stream, "logit_bias": NO_END, **body}).encode()
    client = socket.create_connection((server.host, server.port))
    try:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        client.sendall(post_bytes(path, data))
        if ending is None:
            client.close()
            yield None
        else:
            client.shutdown(ending)
            yield client
    finally:
        client.close()


def read_to_end(client):
    client.settimeout(DEADLINE_S)
    data = b""
    while piece := client.recv(65536):
        data += piece
    return data


def parse(raw):
    """(the interim answers' status lines, the final status line, its body) of one HTTP/1.1 answer read to
    the end of the connection; a chunked body is decoded."""
    interims = []
    while True:
        head, _, raw = raw.partition(b"\r\n\r\n")
        status_line = head.split(b"\r\n")[0].decode()
        if not status_line.startswith("HTTP/1.1 1"):
            break
        interims.append(status_line)
    if b"transfer-encoding: chunked" not in head.lower():
        return interims, status_line, raw
    body = b""
    while True:
        size, _, raw = raw.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            return interims, status_line, body
        body, raw = body + raw[:n], raw[n + 2:]


def check_whole(endpoint, answer, tokens):
    if endpoint == "responses":
        assert (answer["status"], answer["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
        assert answer["usage"]["output_tokens"] == tokens
    else:
        assert answer["choices"][0]["finish_reason"] == "length", answer
        assert answer["usage"]["completion_tokens"] == tokens


def check_stream(endpoint, text, tokens):
    blocks = text.split("\n\n")
    assert blocks[-1] == "", text[-200:]
    events = [block for block in blocks[:-1] if block != ": ping"]
    if endpoint == "responses":
        last = events[-1].split("\n")
        assert last[0] == "event: response.incomplete", events[-1]
        check_whole(endpoint, json.loads(last[1][len("data: "):])["response"], tokens)
    else:
        assert events[-1] == "data: [DONE]", events[-1]
        finish = json.loads(events[-2][len("data: "):])["choices"][0]["finish_reason"]
        assert finish == "length", events[-2]
    assert blocks.count(": ping") == 1, text[:400]  # the probe, once, as its own comment event


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_a_client_that_half_closes_after_its_request_is_answered_to_the_end(start_serve, stories260k_path,
                                                                            endpoint, stream):
    # Such a client was taken for one that left (end of stream was all the server looked at): its run was
    # cancelled, a whole answer cut short (2 of 480 tokens in a trial, finish_reason written as "length") and a
    # stream ended without its last events (no ": ping", no [DONE]).
    server = start_serve(stories260k_path)
    tokens = 60
    with sent(server, endpoint, tokens, stream, socket.SHUT_WR) as client:
        interims, status_line, body = parse(read_to_end(client))
    assert status_line.startswith("HTTP/1.1 200"), (status_line, body[:300])
    if stream:
        check_stream(endpoint, body.decode(), tokens)
        assert interims == []  # the head went out before the run: the probe is inside the stream
    else:
        check_whole(endpoint, json.loads(body), tokens)
        assert interims == ["HTTP/1.1 100 Continue"]  # the probe, before the answer's head
    assert server.call("/health")["status"] == "ok"


def metric(server, name):
    found = re.search("^" + re.escape(name) + r" (\S+)$", server.call("/metrics"), re.M)
    return 0.0 if found is None else float(found.group(1))


def test_a_client_that_closed_its_socket_after_its_request_is_still_cancelled(start_serve, stories260k_path):
    # The other side of the probe: end of stream is no longer enough to cancel, so each of these runs (480
    # tokens, the context's room) ends early only because the probe's reset is seen.
    server = start_serve(stories260k_path)
    left = 0
    for endpoint in sorted(ENDPOINTS):
        for stream in (False, True):
            with sent(server, endpoint, 480, stream, None):
                left += 1
    deadline = time.monotonic() + DEADLINE_S
    while metric(server, "orbit_cancelled_total") < left or metric(server, "orbit_decode_running") > 0:
        assert time.monotonic() < deadline, (metric(server, "orbit_cancelled_total"), left)
        time.sleep(0.1)
    assert metric(server, "orbit_cancelled_total") == left  # a run that reached its 480 tokens is not cancelled
    # A whole answer its client never got is no answer given: 499 ("client closed request"), where it was
    # counted a 200; a stream's 200 went out with its head.
    for endpoint in ENDPOINTS:
        labels = '{endpoint="%s",status="%s"}'
        assert metric(server, "orbit_requests_total" + labels % (endpoint, 499)) == 1, endpoint
        assert metric(server, "orbit_requests_total" + labels % (endpoint, 200)) == 1, endpoint


def test_a_request_watches_its_own_connection_when_another_address_has_its_port(start_serve, stories260k_path):
    # The request's socket was found among the process's descriptors by its port numbers alone: a connection
    # from 127.0.0.2 with the same source port, opened first, was taken for it, so this client's leaving went
    # unseen (its 480 tokens run to the end, counted 200) and the half-close probe went to the other's socket.
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", 0))
    except OSError as e:
        pytest.skip(f"127.0.0.2 is not a local address on this machine ({e})")
    server = start_serve(stories260k_path)
    other = None
    for _ in range(50):  # a source port free on both addresses
        port = random.randint(40000, 60000)
        try:
            other = socket.create_connection((server.host, server.port), source_address=("127.0.0.2", port))
            client = socket.create_connection((server.host, server.port), source_address=("127.0.0.1", port))
            break
        except OSError:
            if other is not None:
                other.close()
            other = None
    assert other is not None, "no source port free on both 127.0.0.1 and 127.0.0.2"
    try:
        path, body = ENDPOINTS["chat"](480)
        data = json.dumps({"model": MODEL_NAME, "logit_bias": NO_END, **body}).encode()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        client.sendall(post_bytes(path, data))
        client.close()
        deadline = time.monotonic() + DEADLINE_S
        while metric(server, "orbit_cancelled_total") < 1:
            assert metric(server, 'orbit_requests_total{endpoint="chat",status="200"}') == 0, "ran to the end"
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert metric(server, 'orbit_requests_total{endpoint="chat",status="499"}') == 1
    finally:
        other.close()
