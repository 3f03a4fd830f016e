"""`orbit serve`'s arguments that name something unusable fail at startup with an error naming the argument
and what is wrong with it (cli/serve/cmd_serve.cpp): a --chat-template that is a directory was called "the file
is empty". Nothing is left running: each server here exits on its own."""
import subprocess

import pytest


def test_a_chat_template_directory_is_named_as_one(refused_serve, stories260k_path, tmp_path):
    stderr = refused_serve(stories260k_path, "--chat-template", str(tmp_path))
    assert f"--chat-template {tmp_path}: is a directory, not a file" in stderr


def test_an_empty_host_is_refused_naming_the_argument(orbit_cli, stories260k_path):
    # Before, '--host ""' started a server announced as 'listening on http://:PORT' that listened on ::1 only.
    result = subprocess.run([str(orbit_cli), "serve", "--model", str(stories260k_path), "--host", "", "--port", "0"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "argument '--host' is empty" in result.stderr
    assert "listening on" not in result.stdout + result.stderr


def test_a_chat_template_that_is_not_utf8_is_refused_at_start(refused_serve, stories260k_path, tmp_path):
    # Before, the server started with it and every chat request was a 400 blaming the request's messages
    # (a tokenizer.json refuses the bytes; a llama2.c tokenizer encoded them as they were).
    template = tmp_path / "latin1.jinja"
    template.write_bytes(b"\xff\xfe{% for m in messages %}{{ m['content'] }}{% endfor %}")
    stderr = refused_serve(stories260k_path, "--chat-template", str(template))
    assert f"--chat-template {template}: the file is not valid UTF-8" in stderr


@pytest.mark.parametrize("argument, left_out", [
    ("--store", "leave it out to serve without a store"),
    ("--remote", "leave it out to serve without a remote tier"),
    ("--tool-call-format", "leave it out to read calls in the chat template's format"),
    ("--device", "leave it out for cpu"),
    ("--dtype", "leave it out for float32"),
])
def test_an_empty_value_is_refused_naming_the_argument(refused_serve, stories260k_path, argument, left_out):
    # Before, each empty value was read as the argument left out: the server started with no store, no remote
    # tier, the template's call format, on cpu in float32, and nothing said the argument had been ignored (this
    # test then ran into its timeout with the server listening).
    stderr = refused_serve(stories260k_path, argument, "")
    assert argument in stderr and "empty" in stderr and left_out in stderr, stderr


def test_an_ipv6_host_is_announced_in_brackets(orbit_cli, stories260k_path):
    # Before, 'listening on http://::1:PORT', a URL no client parses.
    import socket
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError as e:
        pytest.skip(f"no IPv6 loopback here: {e}")
    process = subprocess.Popen([str(orbit_cli), "serve", "--model", str(stories260k_path), "--host", "::1", "--port",
                                "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = process.stdout.readline()
        assert "listening on http://[::1]:" in line, line
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_a_pool_past_the_page_ids_is_refused_naming_the_argument(refused_serve, stories260k_path):
    # The engine's own check names its field (EngineOptions::pool_bytes); before, that was all the command line
    # heard of it.
    stderr = refused_serve(stories260k_path, "--pool-mb", "100000000")
    assert "argument '--pool-mb'" in stderr and "page ids" in stderr, stderr
