"""Window.generate's constraint_trigger_block (GenerateOptions::constraint_trigger_block): a reasoning model's
block at the answer's start that the constraint does not apply in. With ("<think>", "</think>") and a JSON
response_format the model may answer at once (JSON from the first byte) or open the block and think in free
text first. stories260K never writes "<think>", so a logit_bias on its '<' and 'h' byte tokens makes it begin
with one: the constraint alone refuses '<', the block allows it only as the open tag's start. The Sampler's own
cases are in tests/cpp/test_sampler_trigger.cpp."""
import json

import pytest

THINK = ("<think>", "</think>")
OPEN_TAG_BIAS = {3 + ord("<"): 100, 3 + ord("h"): 100}  # stories260K's byte tokens <0x3C>, <0x68>


@pytest.fixture
def story(orbit, stories260k_path):
    engine = orbit.Engine(str(stories260k_path), pool_bytes=16 << 20)
    window = engine.new_window()
    window.add_turn(engine.tokenize("Once upon a time, there was a little girl.", True))
    return engine, window, engine.tokenize(" She", False)


def test_a_json_answer_may_think_first(story):
    engine, window, query = story
    # Not opened (unbiased, this story's model takes it: '<' is its best allowed token here, so the tokens that
    # write one are biased away): the JSON from the first byte, as without a block.
    no_open = {t: -100 for t in range(512) if "<" in engine.detokenize([t])}
    direct = window.generate(query, max_tokens=64, response_format="json_object", logit_bias=no_open,
                             constraint_trigger_block=THINK)
    assert direct.json is not None and direct.text.lstrip().startswith("{")
    # Opened: the open tag the grammar alone would refuse, then free text until max_tokens.
    thinking = window.generate(query, max_tokens=24, response_format="json_object", logit_bias=OPEN_TAG_BIAS,
                               constraint_trigger_block=THINK)
    assert thinking.text.startswith("<think>") and len(thinking.text) > len("<think>") + 5
    assert thinking.stop_reason == "max_tokens" and thinking.json is None
    # Without the block the same bias cannot open it: the answer is JSON from its first byte.
    plain = window.generate(query, max_tokens=64, response_format="json_object", logit_bias=OPEN_TAG_BIAS)
    assert plain.json is not None and "<" not in plain.text.split('"')[0]
    # generate_n takes it through its keyword arguments too.
    for g in window.generate_n(query, 2, max_tokens=12, response_format="json_object", logit_bias=OPEN_TAG_BIAS,
                               constraint_trigger_block=list(THINK)):
        assert g.text.startswith("<think>")


def test_a_block_the_prompt_opened_then_a_forced_call(story):
    _, window, query = story
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    # open "": the text begins inside the block; the call is decoded only after the close string, which
    # stories260K never writes: the whole answer is free text and no call is read from it.
    g = window.generate(query, max_tokens=24, tools=tools, tool_choice="required", tool_call_format="hermes",
                        constraint_trigger_block=("", "</think>"))
    assert "<tool_call>" not in g.text and g.stop_reason == "max_tokens"
    forced = window.generate(query, max_tokens=24, tools=tools, tool_choice="required", tool_call_format="hermes")
    assert forced.text.startswith("<tool_call>")


def test_bad_blocks_name_the_argument(orbit, story):
    _, window, query = story
    json_answer = {"max_tokens": 2, "response_format": "json_object"}
    for bad in ["<think>", ("<think>",), ("<think>", "</think>", "x"), ("<think>", 3), {"open": "<think>"}]:
        with pytest.raises(TypeError, match="constraint_trigger_block"):
            window.generate(query, constraint_trigger_block=bad, **json_answer)
    with pytest.raises(ValueError, match="constraint_trigger_block: the close string is empty"):
        window.generate(query, constraint_trigger_block=("<think>", ""), **json_answer)
    with pytest.raises(ValueError, match="constraint_trigger_block .*needs a constraint"):
        window.generate(query, max_tokens=2, constraint_trigger_block=THINK)
    with pytest.raises(TypeError, match="generate_n: constraint_trigger_block must be"):
        window.generate_n(query, 2, constraint_trigger_block="</think>", **json_answer)
    assert json.loads(window.generate(query, max_tokens=64, response_format="json_object",
                                      constraint_trigger_block=None).text) is not None
