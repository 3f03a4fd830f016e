"""`orbit serve --remote URL` checks the remote once at start: a server that does not answer (nothing on the
port, or a refused password) is named on stderr with its URL and the cause, and the server still starts (the
tier is optional); a server that answers gives no warning. Redis is started here on 127.0.0.1 (a free port)
and always stopped."""
import shutil
import socket
import subprocess
import time

import pytest


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_port(tmp_path):
    """The port of a redis-server on 127.0.0.1 with the password 'right', stopped after the test."""
    server = shutil.which("redis-server")
    if server is None:  # never skipped silently: scripts/common.sh installs it
        pytest.fail("redis-server is not installed (apt install redis-server redis-tools)")
    port = free_port()
    process = subprocess.Popen([server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--dir",
                                str(tmp_path), "--requirepass", "right"], stdout=subprocess.DEVNULL)
    try:
        for _ in range(500):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"AUTH right\r\nPING\r\n")
                    if b"+PONG" in s.recv(64):
                        break
            except OSError:
                time.sleep(0.02)
        else:
            pytest.fail("redis-server did not start")
        yield port
    finally:
        process.kill()
        process.wait()


def test_an_unreachable_remote_is_named_at_start_and_the_server_serves(start_serve, stories260k_path):
    url = f"redis://127.0.0.1:{free_port()}"  # nothing listens there
    server = start_serve(stories260k_path, "--remote", url, "--name", "m")
    out = server.output()
    assert f"orbit serve: warning: --remote {url} is unreachable at start" in out
    assert "cannot connect" in out
    answer = server.call("/v1/chat/completions", {"model": "m", "max_tokens": 2,
                                                  "messages": [{"role": "user", "content": "Hi"}]})
    assert answer["choices"][0]["message"]["role"] == "assistant"


def test_a_wrong_password_is_named_with_the_url_redacted(start_serve, stories260k_path, redis_port):
    server = start_serve(stories260k_path, "--remote", f"redis://:hunter2@127.0.0.1:{redis_port}")
    out = server.output()
    assert f"--remote redis://:***@127.0.0.1:{redis_port} is unreachable at start" in out
    assert "AUTH" in out
    assert "hunter2" not in out  # the password is never printed


def test_a_remote_that_answers_gives_no_warning(start_serve, stories260k_path, redis_port):
    server = start_serve(stories260k_path, "--remote", f"redis://:right@127.0.0.1:{redis_port}")
    assert "unreachable" not in server.output()
