"""An empty X-Orbit-Session header ("X-Orbit-Session:" with nothing, or only blanks, after the colon) is
refused with a 400 naming the header, as a malformed session id is: cpp-httplib drops a field without a
value, so the front names it in the head it hands on (cli/serve/http/http_request_reader.h) and the route
refuses it rather than serving the request as if no session was named. A header is read as it was sent:
cpp-httplib 0.11 percent-decodes header values, so "ab%2Dcd" reached the route as "ab-cd"; the front passes
every '%' on as "%25" and the id, which may not hold '%', is refused. Sent over raw sockets: HTTP clients
differ on whether they send an empty header at all. Every server is started on 127.0.0.1 (a free port)
and stopped."""
import json
import socket

import pytest
from conftest import serving

MODEL_NAME = "stories260K.bin"
CHAT = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 2}
RESPONSE = {"model": MODEL_NAME, "input": "Once upon a time", "max_output_tokens": 2}


def raw_request(server, path, body, header_lines):
    """(status, parsed JSON body) of a POST whose head carries `header_lines` exactly as given."""
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
            f"Content-Length: {len(data)}\r\n").encode() + b"".join(line + b"\r\n" for line in header_lines)
    with socket.create_connection((server.host, server.port), timeout=120) as sock:
        sock.sendall(head + b"\r\n" + data)
        answer = b""
        while True:
            piece = sock.recv(65536)
            if not piece:
                break
            answer += piece
    status_line, _, rest = answer.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split(b" ")[1]), json.loads(payload)


@pytest.fixture(scope="module")
def server(orbit_cli, stories260k_path):
    with serving(orbit_cli, stories260k_path) as process:
        yield process


@pytest.mark.parametrize("path, body", [("/v1/chat/completions", CHAT), ("/v1/responses", RESPONSE),
                                        ("/v1/completions", {"model": MODEL_NAME, "prompt": "A", "max_tokens": 2})])
@pytest.mark.parametrize("line", [b"X-Orbit-Session:", b"X-Orbit-Session: \t ", b"x-orbit-session:"])
def test_an_empty_session_header_is_refused_naming_it(server, path, body, line):
    status, answer = raw_request(server, path, body, [line])
    assert status == 400, answer
    error = answer["error"]
    assert error["param"] == "X-Orbit-Session"
    assert error["code"] == "invalid_value", error  # it was null
    assert error["message"].startswith("header X-Orbit-Session: empty"), error["message"]


def test_an_empty_and_a_named_session_header_together_are_given_twice(server):
    status, answer = raw_request(server, "/v1/chat/completions", CHAT, [b"X-Orbit-Session: s1", b"X-Orbit-Session:"])
    assert status == 400, answer
    assert "given 2 times" in answer["error"]["message"]


def test_a_named_session_and_no_header_are_served(server):
    assert raw_request(server, "/v1/chat/completions", CHAT, [b"X-Orbit-Session: s1"])[0] == 200
    assert raw_request(server, "/v1/chat/completions", CHAT, [])[0] == 200
    assert raw_request(server, "/v1/chat/completions", CHAT, [b"Accept:"])[0] == 200  # other empty fields pass


def test_the_servers_own_empty_field_header_may_not_be_sent(server):
    status, answer = raw_request(server, "/v1/chat/completions", CHAT, [b"Orbit-Empty-Field: X-Orbit-Session"])
    assert status == 400, answer
    assert "Orbit-Empty-Field" in answer["error"]["message"]


@pytest.mark.parametrize("path, body", [("/v1/chat/completions", CHAT), ("/v1/responses", RESPONSE),
                                        ("/v1/completions", {"model": MODEL_NAME, "prompt": "A", "max_tokens": 2})])
@pytest.mark.parametrize("value", [b"ab%2Dcd", b"%41", b"s1%", b"a%u0041"])
def test_a_session_header_is_read_as_sent_not_percent_decoded(server, path, body, value):
    status, answer = raw_request(server, path, body, [b"X-Orbit-Session: " + value])
    assert status == 400, answer
    error = answer["error"]
    assert error["param"] == "X-Orbit-Session"
    assert error["message"].startswith("header X-Orbit-Session: "), error["message"]


def test_an_empty_field_is_named_as_sent(server):
    # Not the session header: "X-Orbit-Sessio%6E" is another name, whatever its decoding would say.
    assert raw_request(server, "/v1/chat/completions", CHAT, [b"X-Orbit-Sessio%6E:"])[0] == 200
