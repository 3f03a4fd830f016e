"""orbit serve answers a request the same whichever way it is asked: streamed or whole, alone or after others.

Each test starts its own server on 127.0.0.1 (conftest.py's start_serve) on the bundled stories260K and
compares answers at temperature 0 that must be equal under an exact policy.
"""
import http.client
import json

import pytest

MODEL = "stories260K.bin"


def post(server, path, body, session=None):
    """(status, text) of a POST; a stream's whole body."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=120)
    try:
        headers = {"Content-Type": "application/json"}
        if session:
            headers["X-Orbit-Session"] = session
        conn.request("POST", path, body=json.dumps(body), headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def streamed_chat(server, body):
    """(content, logprobs entries in the order the chunks carried them, finish_reason) of a streamed chat."""
    status, text = post(server, "/v1/chat/completions", dict(body, stream=True))
    assert status == 200, text
    content, entries, finish = "", [], None
    for line in text.split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for choice in json.loads(line[6:])["choices"]:
            content += choice["delta"].get("content") or ""
            if choice.get("logprobs"):
                entries += choice["logprobs"]["content"]
            finish = choice["finish_reason"] or finish
    return content, entries, finish


@pytest.fixture
def exact_server(start_serve, stories260k_path):
    return start_serve(stories260k_path, "--policy", "prefix")


def test_stream_with_a_stop_string_sends_the_whole_answers_logprobs(exact_server):
    # A stop string that starts inside a token or at a token's start: the whole answer's log probabilities end
    # with the last token that writes content; the stream sent one more, the token that wrote the stop string.
    checked = 0
    for stop in [" the", ".", "ca", "a", "he", "ed"]:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story."}], "temperature": 0,
                "max_tokens": 40, "stop": stop, "logprobs": True, "top_logprobs": 2}
        status, text = post(exact_server, "/v1/chat/completions", body)
        assert status == 200, text
        whole = json.loads(text)["choices"][0]
        content, entries, finish = streamed_chat(exact_server, body)
        assert content == whole["message"]["content"]
        assert finish == whole["finish_reason"]
        want = whole["logprobs"]["content"]
        assert [e["token"] for e in entries] == [e["token"] for e in want], f"stop {stop!r}"
        for got, expected in zip(entries, want):
            assert got["logprob"] == pytest.approx(expected["logprob"], abs=1e-5)
            assert [t["token"] for t in got["top_logprobs"]] == [t["token"] for t in expected["top_logprobs"]]
        checked += finish == "stop"
    assert checked >= 4  # the stop strings did stop these answers
