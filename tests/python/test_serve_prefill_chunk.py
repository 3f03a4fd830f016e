"""`orbit serve --prefill-chunk N`: a request's prompt is forwarded in pieces of at most N tokens, a decode step
of the running answers between two (decode_scheduler.h). A bad N stops the start naming the argument; the
answer after a prompt forwarded in pieces is the one after it whole (greedy, same usage)."""
import json
import urllib.request

import pytest
from serve_process import NoServe, ServeProcess


def refused_start(orbit_cli, model, args):
    try:
        ServeProcess(orbit_cli, model, args)
    except NoServe as e:
        pytest.skip(str(e))
    except RuntimeError as e:
        return str(e)
    raise AssertionError(f"orbit serve {args} started")


@pytest.mark.parametrize("value, says", [("-1", "must be >= 0, got -1"), ("many", "must be an integer, got 'many'"),
                                         ("1.5", "must be an integer, got '1.5'")])
def test_a_bad_prefill_chunk_stops_the_start_naming_it(orbit_cli, stories260k_path, value, says):
    message = refused_start(orbit_cli, stories260k_path, ["--prefill-chunk", value])
    assert f"argument '--prefill-chunk' {says}" in message, message


def test_prefill_chunk_is_in_the_help(orbit_cli):
    import subprocess
    out = subprocess.run([str(orbit_cli), "serve", "--help"], capture_output=True, text=True, check=True).stdout
    assert "--prefill-chunk N" in out


def answer(server, content):
    body = {"model": "stories260K", "messages": [{"role": "user", "content": content}], "max_tokens": 12,
            "temperature": 0}
    request = urllib.request.Request(server.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=120) as r:
        return json.loads(r.read())


def test_an_answer_after_a_prompt_in_pieces_is_the_answer_after_it_whole(orbit_cli, stories260k_path):
    content = " ".join(["Lily saw a big red ball in the park and ran to get it."] * 20)
    got = {}
    for chunk in ("0", "7"):
        try:
            server = ServeProcess(orbit_cli, stories260k_path, ["--prefill-chunk", chunk, "--audit", "0",
                                                               "--name", "stories260K"])
        except NoServe as e:
            pytest.skip(str(e))
        try:
            got[chunk] = answer(server, content)
        finally:
            server.stop()
    whole, pieces = got["0"], got["7"]
    assert whole["usage"]["prompt_tokens"] > 100
    assert pieces["choices"][0]["message"]["content"] == whole["choices"][0]["message"]["content"]
    for key in ("prompt_tokens", "completion_tokens"):
        assert pieces["usage"][key] == whole["usage"][key]
