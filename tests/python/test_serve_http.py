"""`orbit serve`'s connections under slow and hostile clients (cli/serve/http/http_front.h), on stories260K.

A client that sends a byte at a time or stops halfway through its head must not hold a worker: its head
has a deadline (408), and /health answers while more such clients are connected than there are workers.
Bodies are refused as they arrive past the limit (a chunked upload is not read whole first); a known path
with another method is 405 with Allow; the refusals are counted in /metrics; idle connections are kept
longer than clients' pools keep theirs, and the answers announce it. A second SIGTERM ends the drain at once.
Every server is started here on 127.0.0.1 (any free port) and always stopped."""
import http.client
import json
import re
import signal
import socket
import subprocess
import threading
import time

import pytest
from conftest import post_json

MODEL_NAME = "stories260K.bin"


@pytest.fixture
def serve(start_serve, stories260k_path):
    """start(*args) -> (host, port, pid) of an `orbit serve` on stories260K; every one is stopped."""
    def start(*args):
        server = start_serve(stories260k_path, *args)
        return server.host, server.port, server.pid

    return start


def request(host, port, method, path, body=None, timeout=60):
    """(status, headers, body text) of one request on a fresh connection."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        connection.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        connection.close()


def completion(host, port, timeout=120):
    return request(host, port, "POST", "/v1/completions",
                   {"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}, timeout)


def read_until(sock, done):
    """Bytes read from `sock` until done(bytes) or the connection closes."""
    data = b""
    while not done(data):
        piece = sock.recv(65536)
        if not piece:
            break
        data += piece
    return data


def read_status(sock):
    """The status code of the first answer on `sock` (None when it closed without one)."""
    data = b""
    while b"\r\n" not in data:
        piece = sock.recv(4096)
        if not piece:
            return None
        data += piece
    return int(data.split(b" ")[1])


class Trickler:
    """Connections that send a request line, then the rest of their head a byte at a time, never ending it."""

    def __init__(self, host, port, count, interval):
        self.socks = [socket.create_connection((host, port)) for _ in range(count)]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self.thread.start()

    def _run(self, interval):
        for s in self.socks:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\n")
        for byte in b"Host: x\r\nX-Slow: " + b"a" * 100000:
            for s in self.socks:
                try:
                    s.send(bytes([byte]))
                except OSError:
                    pass
            if self.stop.wait(interval):
                return

    def close(self):
        self.stop.set()
        self.thread.join()
        for s in self.socks:
            s.close()


def test_health_and_requests_answer_while_slow_clients_outnumber_the_workers(serve):
    host, port, _ = serve("--threads", "2", "--header-seconds", "600")
    slow = Trickler(host, port, count=6, interval=0.2)
    try:
        time.sleep(1)  # every slow connection has sent some of its head
        status, _, body = request(host, port, "GET", "/health", timeout=30)
        assert (status, json.loads(body)) == (200, {"status": "ok"})
        status, _, body = completion(host, port, timeout=60)
        assert status == 200, body
    finally:
        slow.close()


def test_a_head_that_trickles_or_stops_gets_408_at_the_header_deadline(serve):
    host, port, _ = serve("--threads", "2", "--header-seconds", "1")
    trickling = Trickler(host, port, count=1, interval=0.1)  # never stops sending, never finishes
    stalled = socket.create_connection((host, port))
    stalled.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")  # half a head, then nothing
    try:
        for sock in (trickling.socks[0], stalled):
            sock.settimeout(60)
            assert read_status(sock) == 408
    finally:
        trickling.close()
        stalled.close()
    status, _, body = request(host, port, "GET", "/metrics")
    assert re.search(r'orbit_requests_total\{endpoint="completions",status="408"\} 1', body), body
    assert re.search(r'orbit_requests_total\{endpoint="other",status="408"\} 1', body), body


def peak_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1))


def test_a_chunked_upload_past_the_limit_is_refused_as_it_arrives(serve):
    host, port, pid = serve("--max-body-kb", "1024")
    assert completion(host, port)[0] == 200  # the model and a request's memory are in the peak already
    before = peak_rss_kib(pid)
    total, piece = 64 << 20, 64 << 10
    sock = socket.create_connection((host, port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    sent = [0]

    def upload():
        chunk = b"%x\r\n" % piece + b"x" * piece + b"\r\n"
        try:
            while sent[0] < total:
                sock.sendall(chunk)
                sent[0] += piece
        except OSError:  # the server closed the connection after its answer
            pass

    sender = threading.Thread(target=upload, daemon=True)
    sender.start()
    sock.settimeout(60)
    status = read_status(sock)
    sender.join(timeout=60)
    sock.close()
    assert status == 413
    # The server stopped reading soon after the limit: the upload could not finish (the kernel's buffers
    # and the server's 1 MiB lingering read take a few MiB of the 64).
    assert sent[0] < total, "the server read the whole upload"
    grown_mib = (peak_rss_kib(pid) - before) / 1024
    assert grown_mib < 24, f"peak RSS grew {grown_mib:.0f} MiB for a 1 MiB limit"
    status, _, body = request(host, port, "GET", "/metrics")
    assert re.search(r'orbit_requests_total\{endpoint="completions",status="413"\} 1', body), body


def test_a_content_length_past_the_limit_is_refused_before_the_body(serve):
    host, port, _ = serve("--max-body-kb", "1")
    sock = socket.create_connection((host, port))
    sock.settimeout(60)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n\r\n")
    assert read_status(sock) == 413  # no byte of the 100 MB body was sent
    sock.close()
    status, _, body = request(host, port, "GET", "/metrics")
    assert re.search(r'orbit_requests_total\{endpoint="chat",status="413"\} 1', body), body


def test_a_body_some_mib_over_the_limit_sent_whole_reads_its_413(serve):
    # A client library sends the whole body before it reads: the server drops what it declared while it
    # lingers, so the client reads the 413 (not a reset, which it reports as a broken pipe).
    host, port, _ = serve("--max-body-kb", "64")
    payload = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "x" * (12 << 20)}]}
    status, _, body = request(host, port, "POST", "/v1/chat/completions", payload)
    assert status == 413, body
    assert "is over the limit of 65536 bytes" in json.loads(body)["error"]["message"]


def test_a_known_path_with_another_method_is_405_with_allow(serve):
    host, port, _ = serve()
    for method, path, allow in [("PUT", "/v1/chat/completions", "GET, HEAD, POST"),
                                ("PUT", "/v1/chat/completions/c1", "GET, HEAD, POST, DELETE"),
                                ("POST", "/v1/chat/completions/c1/messages", "GET, HEAD"),
                                ("GET", "/v1/completions", "POST"),
                                ("DELETE", "/v1/responses", "POST"), ("POST", "/health", "GET, HEAD"),
                                ("POST", "/v1/models", "GET, HEAD"), ("PUT", "/v1/sessions/s1", "GET, HEAD, DELETE")]:
        status, headers, body = request(host, port, method, path)
        assert status == 405, (method, path, body)
        assert headers.get("Allow") == allow
        assert json.loads(body)["error"]["code"] == "method_not_allowed"
    assert request(host, port, "GET", "/v1/nothing")[0] == 404
    # Counted by endpoint and status, but not in the endpoints' latency histograms: a 405 runs none of their work.
    metrics = request(host, port, "GET", "/metrics")[2]
    for endpoint, count in (("chat", 1), ("completions", 1), ("responses", 1), ("other", 5)):
        assert f'orbit_requests_total{{endpoint="{endpoint}",status="405"}} {count}\n' in metrics, metrics
    for endpoint in ("chat", "completions", "responses"):
        assert f'orbit_request_seconds_count{{endpoint="{endpoint}"}}' not in metrics, metrics


def test_no_answer_advertises_byte_ranges_and_a_range_gets_the_whole_answer(serve):
    # The request reader drops Range and If-Range, so every answer goes whole; cpp-httplib still added
    # "Accept-Ranges: bytes" to HEAD answers (routed, refused, 404), advertising ranges the server ignores.
    host, port, _ = serve()
    for method in ("HEAD", "GET"):
        for path in ("/health", "/v1/models", "/metrics", "/v1/nothing", "/v1/completions"):
            connection = http.client.HTTPConnection(host, port, timeout=60)
            try:
                connection.request(method, path, headers={"Range": "bytes=0-3"})
                response = connection.getresponse()
                body = response.read()
                fields = [name.lower() for name, _ in response.getheaders()]
                assert "accept-ranges" not in fields, (method, path, response.getheaders())
                assert response.status != 206 and "content-range" not in fields, (method, path, response.status)
                if method == "GET" and response.status == 200:
                    assert int(response.getheader("Content-Length")) == len(body) > 4, (path, body)
            finally:
                connection.close()


def test_a_json_body_sent_as_a_form_is_read_as_json_past_8_kib(serve):
    # curl -d names application/x-www-form-urlencoded; the library behind parsed such a body as form fields and
    # refused one over its compiled-in 8 KiB with a 413, far below --max-body-kb. The reader drops that type.
    host, port, _ = serve()
    body = json.dumps({"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 2, "temperature": 0})
    for padding in (0, 20000):
        connection = http.client.HTTPConnection(host, port, timeout=60)
        try:
            connection.request("POST", "/v1/completions", body=(body + " " * padding).encode(),
                               headers={"Content-Type": "application/x-www-form-urlencoded"})
            response = connection.getresponse()
            text = response.read().decode()
            assert response.status == 200, (padding, text)
            assert json.loads(text)["usage"]["completion_tokens"] == 2
        finally:
            connection.close()


def test_idle_connections_outlive_clients_pools_and_the_answers_say_so(serve):
    host, port, _ = serve()
    connection = http.client.HTTPConnection(host, port, timeout=60)
    connection.request("GET", "/v1/models")
    response = connection.getresponse()
    response.read()
    timeout = int(re.search(r"timeout=(\d+)", response.getheader("Keep-Alive")).group(1))
    assert timeout >= 60  # longer than Node's (4-5 s), httpx's (5 s) and aiohttp's (15 s) idle pools
    time.sleep(6)  # past cpp-httplib's default of 5 s
    connection.request("GET", "/health")
    assert connection.getresponse().status == 200
    connection.close()


def test_pipelined_requests_and_expect_100_continue(serve):
    host, port, _ = serve()
    sock = socket.create_connection((host, port))
    sock.settimeout(60)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    data = read_until(sock, lambda d: d.count(b"HTTP/1.1 200") == 2 and d.endswith(b"}"))
    assert data.count(b"HTTP/1.1 200") == 2 and MODEL_NAME.encode() in data, data
    body = json.dumps({"model": MODEL_NAME, "prompt": "Once", "max_tokens": 2}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
    assert read_status(sock) == 100  # before any byte of the body
    sock.sendall(body)
    data = read_until(sock, lambda d: b"text_completion" in d)
    assert b"HTTP/1.1 200" in data and b"text_completion" in data, data
    sock.close()


def session_request(host, port, path, sessions):
    """(status, error or None, usage.orbit.session) of one request carrying one X-Orbit-Session line per entry."""
    body = ({"model": MODEL_NAME, "input": "Once", "max_output_tokens": 2} if path == "/v1/responses" else
            {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Once"}], "max_tokens": 2})
    connection = http.client.HTTPConnection(host, port, timeout=120)
    try:
        data = json.dumps(body).encode()
        connection.putrequest("POST", path)
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(len(data)))
        for session in sessions:
            connection.putheader("X-Orbit-Session", session)
        connection.endheaders(data)
        response = connection.getresponse()
        answer = json.loads(response.read())
        if response.status != 200:
            return response.status, answer["error"], None
        return response.status, None, answer["usage"]["orbit"]["session"]
    finally:
        connection.close()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
def test_the_session_header_names_one_session_or_is_refused(serve, path):
    host, port, _ = serve()
    assert session_request(host, port, path, ["story-1"]) == (200, None, "story-1")
    for sessions, says in ((["story-1", "story-2"], "more than once"), (["story-1", "story-1"], "more than once"),
                           (["a/b"], "may hold only")):
        status, error, _ = session_request(host, port, path, sessions)
        assert status == 400, (sessions, status)
        assert error["param"] == "X-Orbit-Session" and says in error["message"], (sessions, error)


def test_a_prompt_past_the_context_in_bytes_is_context_length_exceeded(serve):
    # Refused from its byte count before it is tokenized (more bytes than 512 positions can hold).
    host, port, _ = serve()
    status, _, body = request(host, port, "POST", "/v1/chat/completions",
                              {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hello " * 20000}]})
    error = json.loads(body)["error"]
    assert (status, error["code"], error["param"]) == (400, "context_length_exceeded", "messages"), body


def streamed_completion(host, port, session, out):
    """A streamed /v1/completions answer as long as the context allows (end of story banned), on `session`:
    appends (status, body) to `out`, or the exception when the connection failed or the answer broke off."""
    try:
        connection = http.client.HTTPConnection(host, port, timeout=120)
        body = {"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 480, "stream": True,
                "logit_bias": {"1": -100, "2": -100}}
        connection.request("POST", "/v1/completions", body=json.dumps(body),
                           headers={"Content-Type": "application/json", "X-Orbit-Session": session})
        response = connection.getresponse()
        out.append((response.status, response.read().decode()))
        connection.close()
    except (OSError, http.client.HTTPException) as e:  # IncompleteRead: a chunked body cut before its last chunk
        out.append(e)


# "slow_head" (a test-only fault) holds each streamed answer's head 300 ms, so the stop meets answers admitted whose
# stream has not started: each must still end with its error event and the body's last chunk, not a cut body.
@pytest.mark.parametrize("fault", ["", "slow_head"])
def test_a_second_sigterm_ends_the_drain_at_once(start_serve, stories260k_path, fault):
    # 150 long answers (480 tokens each, on one session): drained, they would take several seconds.
    server = start_serve(stories260k_path, "--threads", "160", "--drain-seconds", "120",
                         env={"OMP_NUM_THREADS": "1", "ORBIT_SERVE_TEST_FAULT": fault})
    answers = []
    clients = [threading.Thread(target=streamed_completion, args=(server.host, server.port, "queue", answers))
               for _ in range(150)]
    for client in clients:
        client.start()
    # Waits that fail naming what they waited for (a loaded machine may be slow; nothing here is timed): before,
    # they gave up silently after 60 s, and the signals then went to a server not decoding yet or not draining.
    # The answers decode together in one batch: any sequence running will do.
    deadline = time.monotonic() + 180
    while not re.search(r"^orbit_decode_running [1-9]", server.call("/metrics"), re.M):
        assert time.monotonic() < deadline, "no answer decoding (orbit_decode_running > 0) within 180 s"
        time.sleep(0.01)
    server.process.send_signal(signal.SIGTERM)
    while "draining" not in server.output():
        assert time.monotonic() < deadline, "no 'draining' line after SIGTERM within 180 s:\n" + server.output()
        time.sleep(0.01)
    second = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    try:
        status = server.process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pytest.fail("the server was still draining 5 s after the second SIGTERM:\n" + server.output())
    assert time.monotonic() - second < 5
    for client in clients:
        client.join(timeout=60)
    assert status != 0, server.output()
    assert re.search(r"signal 15 again: ending the drain now, \d+ request\(s\) still in flight", server.output())
    assert len(answers) == 150
    # Each answer ended: whole, cut short by the shutdown's error event, or refused (503) during the drain.
    assert all(isinstance(a, tuple) and (a[0] == 503 or a[1].endswith("data: [DONE]\n\n")) for a in answers), answers
    assert any(isinstance(a, tuple) and a[0] == 200 and "server_shutdown" in a[1] for a in answers), answers


def test_a_second_server_on_a_port_in_use_is_refused(start_serve, orbit_cli, stories260k_path):
    # cpp-httplib's SO_REUSEPORT let the second bind too, and the kernel split connections between the two.
    first = start_serve(stories260k_path)
    second = subprocess.run([str(orbit_cli), "serve", "--model", str(stories260k_path), "--host", first.host,
                             "--port", str(first.port)], capture_output=True, text=True, timeout=120)
    assert second.returncode == 1, second.stdout + second.stderr
    assert f"serve: --host {first.host} --port {first.port}: cannot bind (in use" in second.stderr
    assert first.call("/health") == {"status": "ok"}


def test_a_stream_to_an_http_1_0_client_is_its_bytes_ended_by_the_close(serve):
    # HTTP/1.0 has no chunked transfer coding, which a server must not send such a client (RFC 9112 6.1): its events
    # go out as they are and the connection's close ends them. HTTP/1.1 clients still get them chunked.
    host, port, _ = serve()
    bodies = {"/v1/chat/completions": {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}],
                                       "max_tokens": 4, "stream": True},
              "/v1/responses": {"model": MODEL_NAME, "input": "Hi", "max_output_tokens": 4, "stream": True}}
    for path, body in bodies.items():
        for version in ("HTTP/1.0", "HTTP/1.1"):
            data = json.dumps(body).encode()
            with socket.create_connection((host, port), timeout=60) as sock:
                sock.sendall(f"POST {path} {version}\r\nHost: x\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
                answer = read_until(sock, lambda got: version == "HTTP/1.1" and got.endswith(b"\r\n0\r\n\r\n"))
            head, _, events = answer.partition(b"\r\n\r\n")
            fields = {line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip()
                      for line in head.decode().split("\r\n")[1:]}
            assert head.startswith(b"HTTP/1.1 200"), (path, version, head)
            if version == "HTTP/1.0":
                assert "transfer-encoding" not in fields and fields.get("connection") == "close", (path, head)
                assert events.startswith((b"data: ", b"event: ")), (path, events[:40])
                assert events.endswith(b"data: [DONE]\n\n" if "chat" in path else b"}\n\n"), (path, events[-40:])
            else:
                assert fields.get("transfer-encoding") == "chunked", (path, head)


def test_completions_default_to_16_tokens_as_openai_and_max_tokens_sets_both(start_serve, stories260k_path):
    # /v1/completions answered 256 tokens without max_tokens (the chat default): OpenAI's legacy default is 16.
    completion = {"model": "stories260K.bin", "prompt": "Once upon a time", "temperature": 0}
    chat = {"model": "stories260K.bin", "messages": [{"role": "user", "content": "Once upon a time"}],
            "temperature": 0}
    for args, completion_tokens, chat_tokens in (((), 16, 256), (("--max-tokens", "24"), 24, 24)):
        server = start_serve(stories260k_path, *args)
        address = (server.host, server.port)
        status, body = post_json(address, "/v1/completions", completion)
        assert status == 200, body
        assert body["usage"]["completion_tokens"] <= completion_tokens, body["usage"]
        if body["choices"][0]["finish_reason"] == "length":
            assert body["usage"]["completion_tokens"] == completion_tokens
        status, body = post_json(address, "/v1/completions", {**completion, "max_tokens": 40})
        assert status == 200 and body["usage"]["completion_tokens"] <= 40, body
        status, body = post_json(address, "/v1/chat/completions", chat)
        assert status == 200 and body["usage"]["completion_tokens"] <= chat_tokens, body
