"""An earlier turn's reasoning reaches the chat template through `orbit serve`: an assistant message's
`reasoning_content` (@ai-sdk/openai-compatible and OpenAI-compatible clients) or `reasoning` (@openai/agents)
on /v1/chat/completions, and a /v1/responses `reasoning` input item's text, which becomes the reasoning_content
of the assistant turn after it (cli/serve/wire/serve_api.h, cli/serve/responses/responses_api.h). The server runs
stories260K under Qwen3's chat template (tests/data/templates/qwen3-0.6b.jinja), which renders the reasoning of
the turns after the last user query between <think> tags, so the prompt's token count shows whether the
template saw it. Started on 127.0.0.1 (a free port) and always stopped."""
import json
import pathlib
import urllib.error

import pytest
from conftest import serving

QWEN3 = pathlib.Path(__file__).resolve().parents[1] / "data" / "templates" / "qwen3-0.6b.jinja"
MODEL = "stories260K.bin"
THOUGHT = "The user wants the weather in Paris, so I should call get_weather with the city."
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


@pytest.fixture(scope="module")
def server(orbit_cli, stories260k_path):
    with serving(orbit_cli, stories260k_path, "--chat-template", str(QWEN3)) as process:
        yield process


def post(server, path, body):
    """(status, parsed body) of one POST."""
    try:
        return 200, server.call(path, body)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


def chat_tokens(server, assistant_extra):
    """prompt_tokens of a weather call's history whose assistant turn carries `assistant_extra`."""
    messages = [{"role": "user", "content": "Weather in Paris?"},
                dict({"role": "assistant", "content": None, "tool_calls": [CALL]}, **assistant_extra),
                {"role": "tool", "tool_call_id": "c1", "content": "21 C, clear"}]
    status, body = post(server, "/v1/chat/completions",
                        {"model": MODEL, "messages": messages, "max_tokens": 1})
    assert status == 200, body
    return body["usage"]["prompt_tokens"]


def test_chat_reasoning_reaches_the_template(server):
    plain = chat_tokens(server, {})
    thought = chat_tokens(server, {"reasoning_content": THOUGHT})
    assert thought > plain + len(THOUGHT.split()) // 2
    assert chat_tokens(server, {"reasoning": THOUGHT}) == thought  # @openai/agents' name for it
    assert chat_tokens(server, {"reasoning": THOUGHT, "reasoning_content": THOUGHT}) == thought
    assert chat_tokens(server, {"reasoning_content": None, "reasoning": None}) == plain


@pytest.mark.parametrize("extra,param", [({"reasoning": "A", "reasoning_content": "B"}, "messages[1].reasoning"),
                                         ({"reasoning_content": ["A"]}, "messages[1].reasoning_content"),
                                         ({"reasoning": {"text": "A"}}, "messages[1].reasoning")])
def test_chat_reasoning_that_cannot_be_read_is_refused(server, extra, param):
    messages = [{"role": "user", "content": "Hi"}, dict({"role": "assistant", "content": "Hello"}, **extra)]
    status, body = post(server, "/v1/chat/completions", {"model": MODEL, "messages": messages, "max_tokens": 1})
    assert status == 400 and body["error"]["param"] == param, body


# @openai/agents on Chat Completions keeps the answer's message, less its content, as its text part's providerData
# and sends it back inside the part: the part carries the message's refusal (null), role and reasoning_content.
ECHOED = {"refusal": None, "role": "assistant", "annotations": []}


def echoed_tokens(server, assistant):
    """prompt_tokens of a weather call's history whose assistant turn (text and the call) is `assistant`."""
    messages = [{"role": "user", "content": "Weather in Paris?"},
                dict({"role": "assistant", "tool_calls": [CALL]}, **assistant),
                {"role": "tool", "tool_call_id": "c1", "content": "21 C, clear"}]
    status, body = post(server, "/v1/chat/completions", {"model": MODEL, "messages": messages, "max_tokens": 1})
    return body["usage"]["prompt_tokens"] if status == 200 else (status, body["error"]["param"])


def test_chat_reasoning_echoed_in_a_text_part_reaches_the_template(server):
    said = "Let me check."
    plain = echoed_tokens(server, {"content": said})
    thought = echoed_tokens(server, {"content": said, "reasoning_content": THOUGHT})
    assert thought > plain
    part = dict({"type": "text", "text": said, "reasoning_content": THOUGHT}, **ECHOED)
    assert echoed_tokens(server, {"content": [part]}) == thought
    assert echoed_tokens(server, {"content": [part], "reasoning": THOUGHT}) == thought  # the same text twice
    assert echoed_tokens(server, {"content": [dict(part, reasoning_content=None)]}) == plain
    refusal = dict(ECHOED, type="refusal", refusal=said, content=None)  # a refusal part's echo: the message less it
    assert echoed_tokens(server, {"content": [refusal]}) == plain


@pytest.mark.parametrize("echo,param", [({"role": "user"}, "content[0].role"),
                                        ({"refusal": "No."}, "content[0].refusal"),
                                        ({"annotations": {}}, "content[0].annotations"),
                                        ({"reasoning_content": "Other."}, "content[0].reasoning_content"),
                                        ({"audio": {"id": "a"}}, "content[0].audio"),
                                        ({"rol": "assistant"}, "content[0].rol")])
def test_chat_echoes_in_a_part_that_say_something_else_are_refused(server, echo, param):
    part = dict({"type": "text", "text": "Let me check."}, **echo)
    assert echoed_tokens(server, {"content": [part], "reasoning_content": THOUGHT}) == (400, "messages[1]." + param)


def respond(server, *items, **extra):
    return post(server, "/v1/responses", dict({"model": MODEL, "input": list(items), "max_output_tokens": 1}, **extra))


USER = {"role": "user", "content": "Weather in Paris?"}
FUNCTION_CALL = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "21 C, clear"}


def reasoning_item(**fields):
    return dict({"type": "reasoning", "id": "rs_1", "summary": []}, **fields)


def test_a_responses_reasoning_item_is_the_next_turns_reasoning_content(server):
    thought = chat_tokens(server, {"reasoning_content": THOUGHT})
    summary = reasoning_item(summary=[{"type": "summary_text", "text": THOUGHT}], encrypted_content=None)
    status, body = respond(server, USER, summary, FUNCTION_CALL, OUTPUT)
    assert status == 200 and body["usage"]["input_tokens"] == thought, body
    # The reasoning as written (content) is preferred to its summary; encrypted_content beside it is not read.
    written = reasoning_item(summary=[{"type": "summary_text", "text": "Weather."}], encrypted_content="gAAA",
                             content=[{"type": "reasoning_text", "text": THOUGHT}], status="completed")
    status, body = respond(server, USER, written, FUNCTION_CALL, OUTPUT)
    assert status == 200 and body["usage"]["input_tokens"] == thought, body
    # The stored response lists it back as an input item, before the call it led to.
    items = server.call(f"/v1/responses/{body['id']}/input_items?order=asc")["data"]
    assert [item["type"] for item in items] == ["message", "reasoning", "function_call", "function_call_output"]
    assert items[1]["content"] == [{"type": "reasoning_text", "text": THOUGHT}], items[1]


def test_reasoning_items_that_cannot_reach_the_template_are_refused(server):
    # Only encrypted_content (this server cannot read it). One with no text and nothing else is no reasoning
    # (OpenAI returns "summary": [] where it summarized nothing): taken, the turn after it without reasoning.
    status, body = respond(server, USER, reasoning_item(encrypted_content="gAAA"), FUNCTION_CALL, OUTPUT)
    assert status == 400 and body["error"]["param"] == "input[1].encrypted_content", body
    assert "cannot be read" in body["error"]["message"], body
    status, body = respond(server, USER, reasoning_item(), FUNCTION_CALL, OUTPUT)
    assert status == 200, body
    # A reasoning item must come right before the assistant turn it led to.
    text = [{"type": "summary_text", "text": THOUGHT}]
    for items in ([USER, reasoning_item(summary=text)], [reasoning_item(summary=text), USER]):
        status, body = respond(server, *items)
        assert status == 400 and "must come right before" in body["error"]["message"], body
    status, body = respond(server, USER, reasoning_item(summary=[{"type": "summary_text", "txt": "x"}]))
    assert status == 400 and body["error"]["param"] == "input[1].summary[0].txt", body
    assert body["error"]["code"] == "unknown_parameter", body
    status, body = respond(server, USER, reasoning_item(summary=text, sumary=[]), FUNCTION_CALL, OUTPUT)
    assert status == 400 and body["error"]["param"] == "input[1].sumary", body
