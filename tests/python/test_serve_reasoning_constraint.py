"""A constraint under `orbit serve --reasoning-parser qwen3` where the answer may open its reasoning itself
(Qwen3's template with thinking on: its generation prompt has no tag). A JSON response_format or a forced call
then allows an optional reasoning block first: the constrained answer from the first byte, or `<think>`, free
text, `</think>`, at most two newlines, then the constrained answer (GenerateOptions::constraint_trigger_block;
the Sampler's own cases are in tests/cpp/test_sampler_trigger.cpp). Leading whitespace keeps both ways open,
and stories260K's best token after its ' ' is '<', so unbiased it thinks; a logit_bias on its '<' and 'h' byte
tokens makes it begin with `<think>` (the constraint allows '<' only as the open tag's start) and think in free
text until max_tokens, one against them makes it answer at once. Each server is started on 127.0.0.1
(a free port) and stopped."""
import http.client
import json
import pathlib

import pytest

QWEN3 = pathlib.Path(__file__).resolve().parents[1] / "data" / "templates" / "qwen3-0.6b.jinja"
ASK = [{"role": "user", "content": "Tell me a story."}]
OPEN_TAG_BIAS = {str(3 + ord("<")): 100, str(3 + ord("h")): 100}  # stories260K's byte tokens <0x3C>, <0x68>
# Unbiased, stories260K writes ' ' then '<think>' here (leading whitespace keeps the block possible): its tokens
# that write '<' (<0x3C>, '<') or 'h' (<0x68>, 'h') biased away, it answers at once.
NO_OPEN_BIAS = {str(t): -100 for t in (3 + ord("<"), 504, 3 + ord("h"), 415)}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture
def qwen3(start_serve, stories260k_path):
    return start_serve(stories260k_path, "--chat-template", str(QWEN3), "--reasoning-parser", "qwen3")


def chat(server, **extra):
    body = dict({"model": "stories260K.bin", "messages": ASK, "max_tokens": 24, "seed": 7}, **extra)
    conn = http.client.HTTPConnection(server.host, server.port, timeout=300)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    answer = json.loads(response.read())
    conn.close()
    assert response.status == 200, answer
    return answer["choices"][0]


@pytest.mark.parametrize("ask", [{"response_format": {"type": "json_object"}},
                                 {"tools": TOOLS, "tool_choice": "required"}], ids=["json", "forced_call"])
def test_the_model_may_think_before_its_constrained_answer(qwen3, start_serve, stories260k_path, ask):
    # Not opened: the constrained answer from the first byte (its leading whitespace included), no reasoning.
    direct = chat(qwen3, max_tokens=64, logit_bias=NO_OPEN_BIAS, **ask)
    assert direct["message"]["reasoning_content"] is None
    if "tools" in ask:
        assert direct["message"]["tool_calls"][0]["function"]["name"] == "f"
    else:
        assert json.loads(direct["message"]["content"]) is not None
    # Opened: '<' (and 'h', so that "<t" goes on as "<th", not as a call's "<to") starts the open tag, which
    # the constraint alone would refuse; the reasoning after it is free text.
    thinking = chat(qwen3, logit_bias=OPEN_TAG_BIAS, **ask)
    message = thinking["message"]
    assert message["content"] is None and "tool_calls" not in message
    assert len(message["reasoning_content"]) > 10
    assert thinking["finish_reason"] == "length"  # max_tokens ended it inside the reasoning
    # Without a reasoning parser nothing may come before the constrained answer: the same bias cannot open
    # a reasoning block, the answer is decoded from its first byte.
    plain = start_serve(stories260k_path, "--chat-template", str(QWEN3))
    message = chat(plain, logit_bias=OPEN_TAG_BIAS, max_tokens=64, **ask)["message"]
    assert "reasoning_content" not in message
    if "tools" in ask:
        assert message["tool_calls"][0]["function"]["name"] == "f"
    else:
        assert message["content"].startswith("{")
