"""`orbit serve --reasoning-parser` reads a reasoning model's thinking out of its answers
(cli/serve/run/reasoning.h): chat's message.reasoning_content and delta.reasoning_content, the Responses API's
reasoning item and its response.reasoning_text.* events, usage's reasoning_tokens; /v1/completions is never
parsed. The bundled models never write <think>, so the servers here run stories260K under a small template
whose generation prompt opens <think> (as DeepSeek-R1's does): the whole answer is then reasoning. Under
Qwen3's template (no tag in the generation prompt) the parser's name decides. Each server is started on 127.0.0.1 (a free port) and stopped."""
import http.client
import json
import pathlib

import pytest

MODEL = "stories260K.bin"
QWEN3 = pathlib.Path(__file__).resolve().parents[1] / "data" / "templates" / "qwen3-0.6b.jinja"
# ChatML whose generation prompt opens the reasoning; an assistant turn's reasoning_content is rendered
# between the tags before its content (tests/node/serve_reasoning.mjs serves it too).
THINK_TEMPLATE = pathlib.Path(__file__).resolve().parents[1] / "data" / "think_open.jinja"
ASK = [{"role": "user", "content": "Tell me a story."}]


@pytest.fixture
def thinking(start_serve, stories260k_path):
    return start_serve(stories260k_path, "--chat-template", str(THINK_TEMPLATE), "--reasoning-parser", "qwen3")


def post(server, path, body, stream=False):
    """(status, parsed body), or for a stream (status, [each event's data parsed])."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=300)
    try:
        conn.request("POST", path, body=json.dumps(dict(body, model=MODEL, stream=stream)),
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        text = response.read().decode()
    finally:
        conn.close()
    if not stream or response.status != 200:
        return response.status, json.loads(text)
    return 200, [json.loads(line[6:]) for line in text.split("\n")
                 if line.startswith("data: ") and line != "data: [DONE]"]


def chat(server, **extra):
    status, body = post(server, "/v1/chat/completions", dict({"messages": ASK, "max_tokens": 24, "seed": 7}, **extra))
    assert status == 200, body
    return body


def test_an_answer_begun_inside_the_reasoning_is_reasoning(thinking):
    body = chat(thinking)
    message = body["choices"][0]["message"]
    assert message["content"] is None
    assert len(message["reasoning_content"]) > 10
    assert "<think>" not in message["reasoning_content"]
    assert body["choices"][0]["finish_reason"] == "length"  # max_tokens ended it inside the reasoning
    usage = body["usage"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] == usage["completion_tokens"] == 24


def test_streamed_reasoning_equals_the_whole_answers(thinking):
    whole = chat(thinking)["choices"][0]["message"]["reasoning_content"]
    status, chunks = post(thinking, "/v1/chat/completions",
                          {"messages": ASK, "max_tokens": 24, "seed": 7, "stream_options": {"include_usage": True}},
                          stream=True)
    assert status == 200
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == whole
    assert len([d for d in deltas if d.get("reasoning_content")]) > 3  # as it was generated, not at the end
    assert not any(d.get("content") for d in deltas)
    assert chunks[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] == 24


def test_responses_answer_with_a_reasoning_item(thinking):
    reasoning = chat(thinking)["choices"][0]["message"]["reasoning_content"]
    body = {"input": ASK[0]["content"], "max_output_tokens": 24, "seed": 7}
    status, response = post(thinking, "/v1/responses", body)
    assert status == 200, response
    item = response["output"][0]
    assert item["type"] == "reasoning" and item["id"].startswith("rs_")
    assert item["content"] == [{"type": "reasoning_text", "text": reasoning}]
    assert [o["type"] for o in response["output"]] == ["reasoning"]  # no empty message beside it
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == 24
    status, events = post(thinking, "/v1/responses", body, stream=True)
    assert status == 200
    types = [e["type"] for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert events[2]["item"]["type"] == "reasoning"
    deltas = [e for e in events if e["type"] == "response.reasoning_text.delta"]
    assert "".join(e["delta"] for e in deltas) == reasoning
    assert all(e["output_index"] == 0 and e["item_id"] == events[2]["item"]["id"] for e in deltas)
    done = next(e for e in events if e["type"] == "response.reasoning_text.done")
    assert done["text"] == reasoning
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == reasoning


def test_a_constraint_applies_after_the_reasoning(thinking):
    # The answer begins inside the reasoning: the JSON answer (or a forced call) is decoded under its
    # constraint from </think> on, so the reasoning before it is the free answer's.
    free = chat(thinking)["choices"][0]["message"]["reasoning_content"]
    constrained = chat(thinking, response_format={"type": "json_object"})["choices"][0]["message"]
    assert constrained["reasoning_content"] == free
    assert constrained["content"] is None
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    forced = chat(thinking, tools=tools, tool_choice="required")["choices"][0]
    assert forced["message"]["reasoning_content"] == free
    assert "tool_calls" not in forced["message"]  # max_tokens ended it before a call began
    assert forced["finish_reason"] == "length"


def test_the_reasoning_sent_back_renders_as_answered(thinking):
    first = chat(thinking)
    reasoning = first["choices"][0]["message"]["reasoning_content"]
    back = ASK + [{"role": "assistant", "content": None, "reasoning_content": reasoning},
                  {"role": "user", "content": "And then?"}]
    second = chat(thinking, messages=back, max_tokens=1)
    # The template renders the reasoning between its tags: the same prompt as that text sent as content.
    as_text = ASK + [{"role": "assistant", "content": f"<think>\n{reasoning}\n</think>\n\n"},
                     {"role": "user", "content": "And then?"}]
    status, counted = post(thinking, "/v1/chat/completions", {"messages": as_text, "max_tokens": 1})
    assert status == 200, counted
    assert second["usage"]["prompt_tokens"] == counted["usage"]["prompt_tokens"]
    assert second["usage"]["prompt_tokens"] > first["usage"]["prompt_tokens"] + 10
    # The window kept the first turn (its prompt, at least) for the turn that sends it back.
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= first["usage"]["prompt_tokens"]


@pytest.mark.parametrize("parser", ["qwen3", "deepseek_r1"])
def test_without_a_tag_in_the_prompt_the_name_decides(start_serve, stories260k_path, parser):
    server = start_serve(stories260k_path, "--chat-template", str(QWEN3), "--reasoning-parser", parser)
    message = chat(server)["choices"][0]["message"]
    if parser == "qwen3":  # Qwen3 opens <think> itself where it thinks: this answer did not
        assert message["reasoning_content"] is None and len(message["content"]) > 10
    else:  # DeepSeek-R1's distills begin inside their reasoning
        assert message["content"] is None and len(message["reasoning_content"]) > 10


def test_without_a_parser_the_answer_is_content(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--chat-template", str(THINK_TEMPLATE))
    body = chat(server)
    message = body["choices"][0]["message"]
    assert "reasoning_content" not in message and len(message["content"]) > 10
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0


def test_completions_are_never_parsed_and_carry_no_reasoning_count(start_serve, stories260k_path):
    # A raw prompt has no generation prompt to say where an answer begins, and the legacy completion has no
    # field for reasoning (as vLLM's parsers apply to chat only): the text is the model's as written, and the
    # usage leaves completion_tokens_details out rather than count 0 reasoning tokens it never looked for.
    server = start_serve(stories260k_path, "--reasoning-parser", "deepseek_r1")
    request = {"prompt": "<think>\nOnce upon a time", "max_tokens": 12, "temperature": 0}
    status, body = post(server, "/v1/completions", request)
    assert status == 200, body
    choice = body["choices"][0]
    assert set(choice) == {"index", "text", "logprobs", "finish_reason"}
    assert len(choice["text"]) > 10
    assert "completion_tokens_details" not in body["usage"]
    assert body["usage"]["completion_tokens"] == 12
    status, events = post(server, "/v1/completions", dict(request, stream_options={"include_usage": True}), stream=True)
    assert status == 200
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == choice["text"]
    assert all(set(e["choices"][0]) == set(choice) for e in events if e["choices"])
    assert "completion_tokens_details" not in events[-1]["usage"]


def test_an_unknown_parser_is_refused_by_name(refused_serve, stories260k_path):
    stderr = refused_serve(stories260k_path, "--reasoning-parser", "think")
    assert "'--reasoning-parser' must be one of none, deepseek_r1, qwen3, got 'think'" in stderr
