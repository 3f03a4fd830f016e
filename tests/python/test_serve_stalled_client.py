"""A client that stops reading its streamed answer (cli/serve/compute/decode_scheduler.h's OutputBacklog): once
its unsent output passes --max-unsent-kb its sequences are held, no forward for them while other requests
decode, and once it has taken nothing for --stall-seconds it is dropped as a client that left (its request
cancelled, its decode freed, orbit_stalled_clients_total). Before, the whole answer was decoded and queued in
the server's memory for a client that would never read it. A client that reads, but less than
--min-drain-rate while the server waits on it, is dropped too (orbit_slow_clients_total). While every
sequence in the batch is held, idle work runs. A request whose log probabilities would pass
--max-answer-logprobs is refused before it runs. Every server is started here on 127.0.0.1 (any free port)
and stopped; every socket is closed."""
import contextlib
import json
import re
import socket
import time
import urllib.error

import pytest

MODEL_NAME = "stories260K.bin"
N, MAX_TOKENS = 32, 480  # a prompt of about 20 tokens and 480 more fill the 512-token context
WHOLE = N * MAX_TOKENS  # the decode tokens of the stalled answer decoded to its end
NO_END = {"1": -100, "2": -100}  # no BOS or EOS (both stop an answer): every choice runs to max_tokens
DEADLINE_S = 180  # hang guards only: a loaded 2-core machine may be slow, nothing here is timed


def metric(server, name):
    """The value of metric line `name` (with its labels, if any) in /metrics; None when there is no such line."""
    found = re.search("^" + re.escape(name) + r" (\S+)$", server.call("/metrics"), re.M)
    return None if found is None else float(found.group(1))


def wait_for(what, check, deadline_s=DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < deadline, f"not within {deadline_s} s: {what}"
        time.sleep(0.1)


def stream_body(**extra):
    return {"model": MODEL_NAME, "stream": True, "n": N, "max_tokens": MAX_TOKENS, "temperature": 0,
            "logprobs": True, "top_logprobs": 20, "logit_bias": NO_END,
            "messages": [{"role": "user", "content": "Tell me a long story."}], **extra}


@contextlib.contextmanager
def stalled_stream(server):
    """A socket that sent a streamed request with large n and logprobs and never reads its answer; closed on exit.
    Its receive buffer is small, so the kernel holds little of the answer on its side, and so is its advertised
    segment size (TCP_MAXSEG), which keeps the server's send buffer for it small (Linux sizes it from the segment
    size: `ss -tm` showed 3.9 MB on loopback's 64 KiB segments, 170 KB on 536-byte ones): what the server can
    write before its writes to this client wait for good is a small part of the answer."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
        sock.connect((server.host, server.port))
        body = json.dumps(stream_body()).encode()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        yield sock
    finally:
        sock.close()


def decode_state(server):
    """(orbit_decode_held, orbit_decode_holds_total, orbit_decode_tokens_total) from one read of /metrics: the
    scheduler renders them together under one lock, so they are one state of it."""
    text = server.call("/metrics")
    values = []
    for name in ("orbit_decode_held", "orbit_decode_holds_total", "orbit_decode_tokens_total"):
        found = re.search("^" + name + r" (\S+)$", text, re.M)
        assert found is not None, f"no {name} in /metrics"
        values.append(float(found.group(1)))
    return tuple(values)


# A hold is not final until the server's writes to the stalled client wait for good. Until its send buffer for the
# client is full, the request's thread still hands output on to the socket, slower than the scheduler decodes when
# the machine is loaded (it writes 32 choices' chunks with 20 log probabilities each); whenever that brings the
# unsent output back within --max-unsent-kb the scheduler releases the stream, decodes a step or more and holds it
# again (orbit_decode_holds_total grows by N each time). Once the buffer is full the stream stays held. So a test
# waits for the state it needs instead of reading it once after the first hold.


def wait_until_held(server):
    """Waits for the stalled stream's N sequences to be held; fails at once once half its answer was decoded."""

    def held():
        held_now, _, tokens = decode_state(server)
        assert tokens < WHOLE / 2, f"{tokens} of the stalled stream's {WHOLE} tokens decoded without a hold"
        return held_now == N

    wait_for(f"the stalled stream's {N} sequences held (orbit_decode_held)", held)


def check_held_stream_takes_no_forward(server, reads=10):
    """Reads the decode's state every 0.2 s until `reads` reads in a row found the stream's N sequences held with no
    hold added since the read before (orbit_decode_holds_total unchanged, so no release and hold again between
    them), and fails at once when two such reads differ in orbit_decode_tokens_total: a held sequence was forwarded
    (nothing else decodes meanwhile). A read that finds the stream released, or held anew, starts the count again
    (the server was still filling its send buffer for the client); DEADLINE_S bounds the wait."""
    previous, in_a_row = decode_state(server), 0

    def held_long_enough():
        nonlocal previous, in_a_row
        time.sleep(0.2)
        state = decode_state(server)
        if state[0] == N and previous[0] == N and state[1] == previous[1]:
            assert state[2] == previous[2], f"decode tokens {previous[2]} -> {state[2]} while the stream was held"
            in_a_row += 1
        else:
            in_a_row = 0
        previous = state
        return in_a_row >= reads

    wait_for(f"{reads} reads in a row with the stalled stream's {N} sequences held and no new hold",
             held_long_enough)


def test_a_stream_nobody_reads_is_held_while_another_request_decodes(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--max-unsent-kb", "64", "--stall-seconds", "3600")
    with stalled_stream(server):
        wait_until_held(server)
        at_hold = metric(server, "orbit_decode_tokens_total")
        assert at_hold < WHOLE / 2, f"{at_hold} of {WHOLE} tokens decoded before the hold"
        assert metric(server, "orbit_decode_holds_total") >= N
        # Another client's request decodes to its end meanwhile.
        other = server.call("/v1/chat/completions", {
            "model": MODEL_NAME, "max_tokens": 24, "temperature": 0, "logit_bias": NO_END,
            "messages": [{"role": "user", "content": "Hello there."}]})
        assert other["choices"][0]["finish_reason"] == "length"
        assert other["usage"]["completion_tokens"] == 24
        # The held stream decodes nothing more: no decode token is forwarded while it stays held.
        check_held_stream_takes_no_forward(server)
        assert metric(server, "orbit_decode_tokens_total") < WHOLE / 2
        assert metric(server, "orbit_stalled_clients_total") == 0
    # The client left with its answer unread: its request is cancelled and its sequences end.
    wait_for("the left stream's request cancelled and its decode freed",
             lambda: metric(server, "orbit_cancelled_total") == 1 and metric(server, "orbit_decode_running") == 0
             and metric(server, 'orbit_requests_in_flight{endpoint="chat"}') == 0)
    assert metric(server, "orbit_decode_held") == 0


def test_a_held_stream_frees_its_slots_for_a_request_waiting_for_room(start_serve, stories260k_path):
    # Held sequences kept their slots: with the batch full of streams nobody reads (here one of N choices under
    # --max-batch N), every other request waited for their clients, until the stall timeout (an hour here) or
    # forever for clients that read a little. Now the held stream decodes on to its end while a request waits
    # for room, and that request is answered.
    server = start_serve(stories260k_path, "--max-unsent-kb", "64", "--stall-seconds", "3600", "--max-batch",
                         str(N))
    with stalled_stream(server):
        wait_until_held(server)
        other = server.call("/v1/chat/completions", {
            "model": MODEL_NAME, "max_tokens": 24, "temperature": 0, "logit_bias": NO_END,
            "messages": [{"role": "user", "content": "Hello there."}]})
        assert other["choices"][0]["finish_reason"] == "length"
        assert other["usage"]["completion_tokens"] == 24
        # The stalled stream was decoded on (to its end, or its context's) to make room, its output kept for its
        # client: held, it had less than half its answer.
        assert metric(server, "orbit_decode_tokens_total") >= 0.9 * WHOLE + 24
        assert metric(server, "orbit_decode_held") == 0 and metric(server, "orbit_stalled_clients_total") == 0


def test_idle_work_runs_while_a_stream_nobody_reads_is_held(start_serve, stories260k_path):
    # A held sequence takes no forward, so while only held sequences are in the batch the idle worker may use
    # the gate: here it prefills a session's anticipated answer (orbit_idle_forward_tokens_total). Before, the
    # batch held idle work off as long as it had any sequence, held or not, so this waited for the stalled
    # client to leave (--stall-seconds 3600 here: never within the test).
    server = start_serve(stories260k_path, "--max-unsent-kb", "64", "--stall-seconds", "3600")
    with stalled_stream(server):
        wait_until_held(server)
        assert metric(server, "orbit_idle_forward_tokens_total") == 0
        answer = server.call("/v1/chat/completions", {
            "model": MODEL_NAME, "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "Hello there."}]}, session="while-held")
        assert answer["usage"]["completion_tokens"] >= 1
        wait_for("the session's answer prefilled in idle time while the stream is held",
                 lambda: metric(server, "orbit_idle_forward_tokens_total") > 0)
        # Its client still there and its sequences still in the batch (held again, if the server was still
        # filling its send buffer): the idle work ran beside it, not after it.
        wait_for(f"the stalled stream's {N} sequences held again (orbit_decode_held)",
                 lambda: metric(server, "orbit_decode_held") == N)
        assert metric(server, "orbit_decode_running") == N
        assert metric(server, "orbit_stalled_clients_total") == 0
        assert metric(server, "orbit_cancelled_total") == 0
        assert server.call("/v1/sessions/while-held")["savings"]["idle_forward_tokens"] > 0
    wait_for("the left stream's request cancelled and its decode freed",
             lambda: metric(server, "orbit_cancelled_total") == 1 and metric(server, "orbit_decode_running") == 0)


def test_a_stream_nobody_reads_is_dropped_after_the_stall_timeout(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--max-unsent-kb", "64", "--stall-seconds", "2")
    with stalled_stream(server) as sock:
        wait_until_held(server)
        wait_for("the stalled client dropped (orbit_stalled_clients_total)",
                 lambda: metric(server, "orbit_stalled_clients_total") == 1)
        wait_for("the dropped request cancelled and its decode freed",
                 lambda: metric(server, "orbit_cancelled_total") == 1 and metric(server, "orbit_decode_running") == 0
                 and metric(server, 'orbit_requests_in_flight{endpoint="chat"}') == 0)
        assert metric(server, "orbit_decode_held") == 0
        # Held until dropped, then one step to end each sequence: far from the whole answer.
        assert metric(server, "orbit_decode_tokens_total") < WHOLE / 2
        # The server closed the connection: what the kernel held of the answer, then its end.
        sock.settimeout(60)
        with contextlib.suppress(ConnectionResetError):
            while sock.recv(65536):
                pass
    # The server still answers.
    assert server.call("/v1/chat/completions", {"model": MODEL_NAME, "max_tokens": 4, "messages": [
        {"role": "user", "content": "Hi."}]})["usage"]["completion_tokens"] >= 1


class Trickle:
    """A socket that sent a streamed request and reads its answer a little at a time: at most STEP bytes, then
    a pause, so it never reads faster than STEP / PAUSE_S bytes a second (slower on a loaded machine), yet the
    server's writes to it make progress again and again. Its advertised segment size is small (TCP_MAXSEG), so
    the server's send buffer stays small and the little it reads frees room there often."""
    STEP, PAUSE_S = 4096, 0.05  # at most 80 KiB/s

    def __init__(self, server, body):  # the server closes the connection after the answer
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
        self.sock.connect((server.host, server.port))
        raw = json.dumps(body).encode()
        self.sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                          b"Content-Type: application/json\r\nContent-Length: " + str(len(raw)).encode() + b"\r\n\r\n" + raw)
        self.received = b""

    def read(self, limit):
        """Reads until the server closes the connection or `limit` bytes came; returns whether it closed."""
        self.sock.settimeout(DEADLINE_S)  # a hang guard: the server writes or closes
        while len(self.received) < limit:
            try:
                piece = self.sock.recv(self.STEP)
            except ConnectionResetError:
                return True
            if not piece:
                return True
            self.received += piece
            time.sleep(self.PAUSE_S)
        return False

    def close(self):
        self.sock.close()


def test_a_client_that_trickles_its_reads_below_the_drain_rate_is_dropped(start_serve, stories260k_path):
    # A window of 2 s spent waiting must bring 2 MiB: this client takes at most 80 KiB/s. Its reads keep the
    # stall limit from firing (each write waits far less than 2 s), so before --min-drain-rate it was kept
    # until the whole answer (about 25 MB) had gone out at its pace.
    server = start_serve(stories260k_path, "--max-unsent-kb", "64", "--stall-seconds", "2",
                         "--min-drain-rate", str(1 << 20))
    client = Trickle(server, stream_body())
    try:
        closed = client.read(limit=4 << 20)
        assert closed, f"read {len(client.received)} bytes without being dropped"
    finally:
        client.close()
    assert client.received.startswith(b"HTTP/1.1 200"), client.received[:200]
    assert b"data: [DONE]" not in client.received
    wait_for("the slow client counted and its request cancelled",
             lambda: metric(server, "orbit_cancelled_total") == 1 and metric(server, "orbit_decode_running") == 0)
    # Dropped for its rate, not for a write that made no progress for the stall limit.
    assert metric(server, "orbit_stalled_clients_total") == 1
    assert metric(server, "orbit_slow_clients_total") == 1
    assert metric(server, "orbit_decode_tokens_total") < WHOLE / 2


def test_a_slow_client_above_the_default_drain_rate_reads_its_whole_answer(start_serve, stories260k_path):
    # The same trickling reader, at up to 80 KiB/s, against the default rate (1 KiB/s): served to its end. The
    # stall limit is 10 s here, so that a loaded machine that slows this reader many times over still leaves
    # each write progress within it.
    server = start_serve(stories260k_path, "--max-unsent-kb", "64", "--stall-seconds", "10")
    client = Trickle(server, stream_body(n=2, max_tokens=200))
    try:
        closed = client.read(limit=64 << 20)
    finally:
        client.close()
    assert closed and b"data: [DONE]" in client.received, client.received[-300:]
    assert client.received.count(b'"finish_reason":"length"') == 2
    assert metric(server, "orbit_stalled_clients_total") == 0
    assert metric(server, "orbit_slow_clients_total") == 0


def test_an_answer_over_the_log_probability_limit_is_refused_naming_its_parameters(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--max-answer-logprobs", "4000")
    body = {"model": MODEL_NAME, "n": 4, "max_tokens": 200, "logprobs": True, "top_logprobs": 20,
            "messages": [{"role": "user", "content": "Hi."}]}
    with pytest.raises(urllib.error.HTTPError) as refused:
        server.call("/v1/chat/completions", body)
    assert refused.value.code == 400
    error = json.loads(refused.value.read().decode())["error"]
    assert error["code"] == "answer_too_large" and error["param"] == "max_tokens"
    assert "max_tokens (200) x n (4) x (1 + top_logprobs 20) = 16800" in error["message"]
    assert "(4000, --max-answer-logprobs); lower max_tokens, n or top_logprobs" in error["message"]
    answer = server.call("/v1/chat/completions", {**body, "max_tokens": 40})  # 3360 entries: served
    assert len(answer["choices"]) == 4 and len(answer["choices"][0]["logprobs"]["content"]) >= 1
    # The Responses API names its own field.
    with pytest.raises(urllib.error.HTTPError) as refused:
        server.call("/v1/responses", {"model": MODEL_NAME, "input": "Hi.", "max_output_tokens": 200,
                                      "top_logprobs": 20, "include": ["message.output_text.logprobs"]})
    assert refused.value.code == 400
    error = json.loads(refused.value.read().decode())["error"]
    assert error["param"] == "max_output_tokens", error
    assert error["message"].startswith("max_output_tokens (200) x (1 + top_logprobs 20) = 4200 "), error


@pytest.mark.parametrize("argument, value, says", [
    ("--max-unsent-kb", "0", "argument '--max-unsent-kb' must be >= 1, got 0"),
    ("--stall-seconds", "0", "argument '--stall-seconds' must be >= 1, got 0"),
    ("--stall-seconds", "86401", "argument '--stall-seconds' must be <= 86400"),
    ("--min-drain-rate", "-1", "argument '--min-drain-rate' must be >= 0, got -1"),
    ("--min-drain-rate", "1073741825", "argument '--min-drain-rate' must be <= 1073741824 (1 GiB/s), got 1073741825"),
    ("--max-answer-logprobs", "0", "argument '--max-answer-logprobs' must be >= 1, got 0"),
])
def test_bad_bounds_stop_the_start_naming_the_option(refused_serve, stories260k_path, argument, value, says):
    stderr = refused_serve(stories260k_path, argument, value)
    assert says in stderr, stderr
