"""`orbit serve --api-key KEY` / `--api-key-file PATH` / ORBIT_API_KEY (cli/serve/http/api_keys.h): every /v1/*
request needs `Authorization: Bearer KEY`; a missing or wrong one is a 401 invalid_api_key with
`WWW-Authenticate: Bearer`, counted untimed in orbit_requests_total; /health, /metrics and CORS preflights stay
open. The header's value is compared as sent (a '%' escape is not decoded), and no key is ever printed.

Every server is started here on 127.0.0.1 (any free port) and always stopped."""
import http.client
import json
import os

import pytest
from serve_process import NoServe, ServeProcess

MODEL_NAME = "stories260K.bin"
KEY = "sk-orbit-test-7f3a"
CHAT = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


@pytest.fixture(autouse=True)
def no_key_in_environment(monkeypatch):
    monkeypatch.delenv("ORBIT_API_KEY", raising=False)


def ask(server, method, path, body=None, headers=None):
    """(status, headers, body text) of one request on a fresh connection."""
    connection = http.client.HTTPConnection(server.host, server.port, timeout=120)
    try:
        data = None if body is None else json.dumps(body).encode()
        sent = dict(headers or {})
        if data:
            sent["Content-Type"] = "application/json"
        connection.request(method, path, body=data, headers=sent)
        response = connection.getresponse()
        return response.status, response.headers, response.read().decode()
    finally:
        connection.close()


def bearer(key):
    return {"Authorization": f"Bearer {key}"}


def assert_unauthorized(status, headers, text, secret=None):
    assert status == 401, text
    assert headers["WWW-Authenticate"] == "Bearer"
    error = json.loads(text)["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_api_key", error
    if secret:
        assert secret not in text  # the key sent is not echoed
    return error


def metric(server, prefix):
    _, _, text = ask(server, "GET", "/metrics")
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def test_every_v1_route_needs_the_key(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--api-key", KEY)
    assert KEY not in server.output()
    for method, path, body in [("GET", "/v1/models", None), ("POST", "/v1/chat/completions", CHAT),
                               ("POST", "/v1/completions", {"model": MODEL_NAME, "prompt": "a", "max_tokens": 2}),
                               ("POST", "/v1/responses", {"model": MODEL_NAME, "input": "a"}),
                               ("GET", "/v1/sessions/abc", None), ("GET", "/v1/no-such-route", None)]:
        error = assert_unauthorized(*ask(server, method, path, body))
        assert "Authorization: Bearer KEY" in error["message"], error
        assert_unauthorized(*ask(server, method, path, body, bearer("wrong-" + KEY)), secret="wrong-" + KEY)
    status, _, text = ask(server, "POST", "/v1/chat/completions", CHAT, bearer(KEY))
    assert status == 200, text
    status, _, text = ask(server, "GET", "/v1/models", headers={"Authorization": f"bearer {KEY}"})
    assert status == 200, text  # the scheme's case does not matter
    for headers in [{"Authorization": KEY}, {"Authorization": f"Basic {KEY}"}, bearer(KEY + "x"), bearer(KEY[:-1])]:
        assert_unauthorized(*ask(server, "GET", "/v1/models", headers=headers))


def test_the_401_has_openais_fields_and_echoes_no_key(start_serve, stories260k_path, tmp_path):
    keys = tmp_path / "server-keys.txt"
    keys.write_text(KEY + "\n")
    server = start_serve(stories260k_path, "--api-key-file", str(keys))
    sent = "Qz7Xv9Kp2Wj4"
    for headers, says in [({}, "You didn't provide an API key"), (bearer(sent), "Incorrect API key provided"),
                          ({"Authorization": f"Basic {sent}"}, "Incorrect API key provided")]:
        status, _, text = ask(server, "POST", "/v1/chat/completions", CHAT, headers)
        error = assert_unauthorized(status, _, text)
        assert set(error) == {"message", "type", "param", "code"} and error["param"] is None, error
        assert error["message"].startswith(says), error
        # Not the key sent, nor any 4 characters of it (OpenAI shows its last four), nor where the keys are.
        assert not any(sent[i:i + 4] in text for i in range(len(sent) - 3)), text
        assert str(keys) not in text and "server-keys" not in text and KEY not in text, text


def test_health_metrics_and_preflight_stay_open(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--api-key", KEY, "--allow-origin", "http://localhost:5173")
    assert ask(server, "GET", "/health")[0] == 200
    assert ask(server, "GET", "/metrics")[0] == 200
    status, headers, text = ask(server, "OPTIONS", "/v1/chat/completions", headers={
        "Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert status == 204, text
    assert "authorization" in headers["Access-Control-Allow-Headers"].lower()
    # The 401 carries the CORS grant, so a page can read why it was refused.
    status, headers, _ = ask(server, "GET", "/v1/models", headers={"Origin": "http://localhost:5173"})
    assert status == 401 and headers["Access-Control-Allow-Origin"] == "http://localhost:5173"


def test_refusals_are_counted_untimed_and_leave_nothing_in_flight(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--api-key", KEY)
    timed = metric(server, 'orbit_request_seconds_count{endpoint="chat"}')
    for _ in range(3):
        assert_unauthorized(*ask(server, "POST", "/v1/chat/completions", CHAT))
    assert ask(server, "GET", "/v1/models")[0] == 401
    assert metric(server, 'orbit_requests_total{endpoint="chat",status="401"}') == 3
    assert metric(server, 'orbit_requests_total{endpoint="other",status="401"}') == 1
    assert metric(server, 'orbit_request_seconds_count{endpoint="chat"}') == timed
    assert metric(server, "orbit_requests_in_flight{") == 0


def test_the_header_is_compared_as_sent(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--api-key", "k%41y")
    assert ask(server, "GET", "/v1/models", headers=bearer("k%41y"))[0] == 200
    assert_unauthorized(*ask(server, "GET", "/v1/models", headers=bearer("kAy")))
    server = start_serve(stories260k_path, "--api-key", "kAy")
    assert_unauthorized(*ask(server, "GET", "/v1/models", headers=bearer("k%41y")))
    assert ask(server, "GET", "/v1/models", headers=bearer("kAy"))[0] == 200


def test_a_key_file_holds_several_keys_and_joins_the_flag(start_serve, stories260k_path, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("first-key\r\n\n \t\nsecond-key\n")  # a line of spaces and tabs is blank
    server = start_serve(stories260k_path, "--api-key-file", str(keys), "--api-key", KEY)
    for key in ["first-key", "second-key", KEY]:
        assert ask(server, "GET", "/v1/models", headers=bearer(key))[0] == 200, key
    assert_unauthorized(*ask(server, "GET", "/v1/models", headers=bearer("third-key")))
    assert "first-key" not in server.output() and "second-key" not in server.output()


def test_the_environment_key_is_used_only_without_the_flags(start_serve, stories260k_path):
    server = start_serve(stories260k_path, env={"ORBIT_API_KEY": "from-env"})
    assert ask(server, "GET", "/v1/models", headers=bearer("from-env"))[0] == 200
    assert_unauthorized(*ask(server, "GET", "/v1/models"))
    server = start_serve(stories260k_path, "--api-key", KEY, env={"ORBIT_API_KEY": "from-env"})
    assert_unauthorized(*ask(server, "GET", "/v1/models", headers=bearer("from-env")))
    assert ask(server, "GET", "/v1/models", headers=bearer(KEY))[0] == 200


def test_without_a_key_the_server_stays_open(start_serve, stories260k_path):
    server = start_serve(stories260k_path)
    assert ask(server, "GET", "/v1/models")[0] == 200


def refused_start(orbit_cli, model, args, env=None):
    try:
        ServeProcess(orbit_cli, model, args, env=env)
    except NoServe as e:
        pytest.skip(str(e))
    except RuntimeError as e:
        return str(e)
    raise AssertionError(f"orbit serve {args} started")


@pytest.mark.parametrize("content, says", [
    (None, ": no such file"), ("", ": the file is empty (one key per line)"),
    ("\n\n", ": holds no key, only 2 blank line(s)"), (" \t\r\n  \n", ": holds no key, only 2 blank line(s)"),
    ("ok-key\na key with spaces\n", " line 2: the API key holds a space at byte 2"),
    ("ok-key\na-key\twith-tab\n", " line 2: the API key holds a control character (0x09) at byte 6"),
    ("a-key-\x01\n", " line 1: the API key holds a control character (0x01) at byte 7")])
def test_a_bad_key_file_stops_the_start_naming_it_and_why(orbit_cli, stories260k_path, tmp_path, content, says):
    keys = tmp_path / "keys.txt"
    if content is not None:
        keys.write_text(content)
    message = refused_start(orbit_cli, stories260k_path, ["--api-key-file", str(keys)])
    assert f"argument '--api-key-file': {keys}{says}" in message, message
    assert "a key with spaces" not in message and "ok-key" not in message and "a-key" not in message


def test_a_directory_as_the_key_file_stops_the_start_saying_so(orbit_cli, stories260k_path, tmp_path):
    message = refused_start(orbit_cli, stories260k_path, ["--api-key-file", str(tmp_path)])
    assert f"argument '--api-key-file': {tmp_path}: is a directory, not a file of keys" in message, message


def test_an_unreadable_key_file_stops_the_start_with_the_reason(orbit_cli, stories260k_path, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads a file whatever its mode")
    keys = tmp_path / "keys.txt"
    keys.write_text("a-key\n")
    keys.chmod(0)
    message = refused_start(orbit_cli, stories260k_path, ["--api-key-file", str(keys)])
    assert f"argument '--api-key-file': {keys}: cannot open it (Permission denied)" in message, message


def test_a_key_file_failing_as_it_is_read_stops_the_start_with_the_reason(orbit_cli, stories260k_path):
    # /proc/self/mem opens (also for root) but reading its first page fails: unmapped (EIO).
    if not os.path.exists("/proc/self/mem"):
        pytest.skip("no /proc/self/mem here")
    message = refused_start(orbit_cli, stories260k_path, ["--api-key-file", "/proc/self/mem"])
    assert "argument '--api-key-file': /proc/self/mem: cannot read it (" in message, message


@pytest.mark.parametrize("args, env, says", [([], {"ORBIT_API_KEY": ""}, "environment variable ORBIT_API_KEY"),
                                             (["--api-key", ""], None, "argument '--api-key'")])
def test_an_empty_key_stops_the_start(orbit_cli, stories260k_path, args, env, says):
    assert f"{says}: the API key is empty" in refused_start(orbit_cli, stories260k_path, args, env=env)
