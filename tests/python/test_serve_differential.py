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
            # the two requests forward their rows in other pieces: float32 rounding, worst 1.8e-6 over ATen's
            # no-AVX/AVX2/AVX-512 kernels, OpenBLAS cores and 1 to 8 threads
            assert got["logprob"] == pytest.approx(expected["logprob"], abs=1e-4)
            assert [t["token"] for t in got["top_logprobs"]] == [t["token"] for t in expected["top_logprobs"]]
        checked += finish == "stop"
    assert checked >= 4  # the stop strings did stop these answers


def test_responses_honours_seed_and_refuses_what_chat_refuses(exact_server):
    # The Responses body is rewritten as a chat body: a seed not copied left sampled answers random, and a
    # sampler chat refuses (top_k) went unnoticed.
    body = {"model": MODEL, "input": "Tell me a story.", "temperature": 1.0, "seed": 11, "max_output_tokens": 24}
    texts = set()
    for _ in range(3):
        status, text = post(exact_server, "/v1/responses", body)
        assert status == 200, text
        texts.add(json.loads(text)["output"][0]["content"][0]["text"])
    assert len(texts) == 1
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story."}], "temperature": 1.0,
            "seed": 11, "max_tokens": 24}
    status, text = post(exact_server, "/v1/chat/completions", chat)
    assert status == 200, text
    assert json.loads(text)["choices"][0]["message"]["content"] in texts
    status, text = post(exact_server, "/v1/responses", dict(body, top_k=5))
    assert status == 400
    assert json.loads(text)["error"]["code"] == "unsupported_parameter"
    assert json.loads(text)["error"]["param"] == "top_k"
