"""Stream obfuscation (cli/serve/wire/stream_obfuscation.h): as OpenAI's API does by default, each streamed
chunk (chat and completions) and each Responses API ".delta" event carries an "obfuscation" field of random
characters, which pads the event to a multiple of 32 bytes so that event sizes do not tell the tokens' lengths;
`stream_options.include_obfuscation: false` turns it off. Before, `true` was refused and no event carried it.
The server is started here on 127.0.0.1 (any free port) on stories260K and always stopped."""
import http.client
import json
import re

import pytest

MODEL_NAME = "stories260K.bin"
BLOCK = 32
NO_END = {"1": -100, "2": -100}  # no BOS or EOS: the answers run to max_tokens


@pytest.fixture(scope="module")
def server(stories_server):
    return stories_server


def stream(server, path, body):
    """The events of a streamed answer as (event line or None, data text, size of the whole event as framed)."""
    connection = http.client.HTTPConnection(*server, timeout=120)
    try:
        connection.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        text = response.read().decode()
        assert response.status == 200, text
    finally:
        connection.close()
    events = []
    for framed in re.findall(r"(?:event: [^\n]*\n)?data: [^\n]*\n\n", text):
        head, _, data = framed.rpartition("data: ")
        events.append((head.strip() or None, data.strip(), len(framed.encode())))
    assert events and events[-1][1] == "[DONE]" or path == "/v1/responses", text[-300:]
    return events


def chat_body(**extra):
    return {"model": MODEL_NAME, "stream": True, "max_tokens": 40, "temperature": 0, "logit_bias": NO_END,
            "messages": [{"role": "user", "content": "Tell me a story."}], **extra}


def check_padded(events):
    """Every event given carries a padding of [A-Za-z0-9] that brings its size to a multiple of BLOCK; returns
    the paddings' lengths."""
    lengths = []
    for _, data, size in events:
        padding = json.loads(data)["obfuscation"]
        assert re.fullmatch("[A-Za-z0-9]+", padding), data
        assert size % BLOCK == 0, (size, data)
        lengths.append(len(padding))
    return lengths


def test_chat_chunks_carry_the_padding_by_default_and_not_when_turned_off(server):
    events = stream(server, "/v1/chat/completions", chat_body(stream_options={"include_usage": True}))
    chunks = [e for e in events if e[1] != "[DONE]"]
    assert len(chunks) >= 40  # the role, one chunk a token or so, the finish, the usage
    lengths = check_padded(chunks)
    # The chunks' texts differ in length, so the paddings do.
    assert len(set(lengths)) > 1, lengths
    assert answer(chunks)  # the answer itself is untouched
    asked = stream(server, "/v1/chat/completions", chat_body(stream_options={"include_obfuscation": True}))
    check_padded([e for e in asked if e[1] != "[DONE]"])
    plain = [e for e in stream(server, "/v1/chat/completions", chat_body(stream_options={"include_obfuscation": False}))
             if e[1] != "[DONE]"]
    assert all("obfuscation" not in json.loads(d) for _, d, _ in plain)
    assert answer(plain) == answer(chunks)  # the same answer, only the padding differs
    # Its text chunks take no more sizes padded than bare: as many or fewer (one per 32 bytes they span).
    assert len(text_chunk_sizes(chunks)) <= len(text_chunk_sizes(plain))


def answer(chunks):
    return "".join(json.loads(d)["choices"][0]["delta"].get("content") or "" for _, d, _ in chunks
                   if json.loads(d)["choices"])


def text_chunk_sizes(chunks):
    """The sizes of the chunks that carry only a piece of text (no role, no finish reason, no usage)."""
    sizes = set()
    for _, data, size in chunks:
        choices = json.loads(data)["choices"]
        if choices and set(choices[0]["delta"]) == {"content"} and choices[0]["finish_reason"] is None:
            sizes.add(size)
    return sizes


def test_completions_chunks_are_padded_too(server):
    body = {"model": MODEL_NAME, "prompt": "Once upon a time", "stream": True, "max_tokens": 20, "temperature": 0,
            "logit_bias": NO_END}
    chunks = [e for e in stream(server, "/v1/completions", body) if e[1] != "[DONE]"]
    check_padded(chunks)
    plain = stream(server, "/v1/completions", dict(body, stream_options={"include_obfuscation": False}))
    assert all("obfuscation" not in json.loads(d) for _, d, _ in plain if d != "[DONE]")


def test_responses_pads_its_delta_events_only(server):
    body = {"model": MODEL_NAME, "input": "Tell me a story.", "stream": True, "max_output_tokens": 40,
            "temperature": 0, "logit_bias": NO_END}
    events = stream(server, "/v1/responses", body)
    deltas = [e for e in events if e[0].endswith(".delta")]
    others = [e for e in events if not e[0].endswith(".delta")]
    assert len(deltas) >= 20 and others
    lengths = check_padded(deltas)
    assert len(set(lengths)) > 1, lengths
    assert all("obfuscation" not in json.loads(d) for _, d, _ in others)
    plain = stream(server, "/v1/responses", dict(body, stream_options={"include_obfuscation": False}))
    assert all("obfuscation" not in json.loads(d) for _, d, _ in plain)
    assert [e[0] for e in plain] == [e[0] for e in events]  # the same events, in the same order


def test_a_padding_option_that_is_not_a_boolean_is_refused_naming_it(server):
    connection = http.client.HTTPConnection(*server, timeout=120)
    try:
        connection.request("POST", "/v1/chat/completions", headers={"Content-Type": "application/json"},
                           body=json.dumps(chat_body(stream_options={"include_obfuscation": "yes"})).encode())
        response = connection.getresponse()
        error = json.loads(response.read().decode())["error"]
    finally:
        connection.close()
    assert response.status == 400 and error["param"] == "stream_options.include_obfuscation", error
