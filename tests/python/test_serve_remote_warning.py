"""`orbit serve --remote URL` checks the remote once at start: a server that does not answer (nothing on the
port, or a refused password) is named on stderr with its URL and the cause, and the server still starts (the
tier is optional); a server that answers gives no warning. Redis is started on 127.0.0.1 (a free port) by
conftest's redis_port fixture and always stopped."""
import time

from conftest import free_port, redis_server  # and the redis_port fixture


def chat(server, text):
    answer = server.call("/v1/chat/completions", {"model": "m", "max_tokens": 2,
                                                  "messages": [{"role": "user", "content": text}]})
    assert answer["choices"][0]["message"]["role"] == "assistant"


def test_an_unreachable_remote_is_named_at_start_and_the_server_serves(start_serve, stories260k_path):
    url = f"redis://127.0.0.1:{free_port()}"  # nothing listens there
    server = start_serve(stories260k_path, "--remote", url, "--name", "m")
    out = server.output()
    assert f"orbit serve: warning: --remote {url} is unreachable at start" in out
    assert "cannot connect" in out
    chat(server, "Hi")


def test_the_cause_said_at_start_is_said_once_and_another_cause_still_is(start_serve, stories260k_path, tmp_path):
    port = free_port()
    server = start_serve(stories260k_path, "--remote", f"redis://127.0.0.1:{port}", "--name", "m")
    chat(server, "Hi")  # the remote tier's first use fails as the start check did: not printed again
    with redis_server(port, tmp_path):  # a server answers now, but wants a password the URL does not give
        deadline = time.monotonic() + 60
        n = 0
        while "NOAUTH" not in server.output() and time.monotonic() < deadline:
            time.sleep(1.1)  # past the tier's retry_after_ms (1 s): the next use tries the server again
            n += 1
            chat(server, f"Hello number {n}")
        out = server.output()
    assert "NOAUTH" in out, out  # a cause of its own: the tier's warning says it
    assert out.count("cannot connect") == 1, out  # the start warning only


def test_a_wrong_password_is_named_with_the_url_redacted(start_serve, stories260k_path, redis_port):
    server = start_serve(stories260k_path, "--remote", f"redis://:hunter2@127.0.0.1:{redis_port}")
    out = server.output()
    assert f"--remote redis://:***@127.0.0.1:{redis_port} is unreachable at start" in out
    assert "AUTH" in out
    assert "hunter2" not in out  # the password is never printed


def test_a_remote_that_answers_gives_no_warning(start_serve, stories260k_path, redis_port):
    server = start_serve(stories260k_path, "--remote", f"redis://:right@127.0.0.1:{redis_port}")
    assert "unreachable" not in server.output()
