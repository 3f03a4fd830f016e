"""top_logprobs under a constraint: always min(top_logprobs, vocabulary) entries.

Where a constraint (response_format json_schema, a forced tool call) allows fewer tokens than top_logprobs
asks for, the list holds every allowed token first, by its log probability, then the masked tokens most
likely before the mask, each at -inf: -9999.0 on the wire (OpenAI's stand-in; JSON has no infinity), -inf
in Python's Window.generate. Before, such a step listed the allowed tokens alone (here: one). Whole and
streamed chat answers, and Python's generate, on the bundled stories260K; each server test starts its own
server on 127.0.0.1.
"""
import json
import math

from serve_wire import MODEL_NAME as MODEL
from serve_wire import answered

K = 5
MASKED = -9999.0
# One string value allowed: most of the answer's steps allow a single token.
SCHEMA = {"type": "object", "properties": {"answer": {"enum": ["yes"]}}, "required": ["answer"],
          "additionalProperties": False}
FORMAT = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
SEARCH = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"type": "string", "maxLength": 8}}, "required": ["q"]}}}]


def post(server, body):
    """The answer text of a chat completion of `body`, the model added; it must answer 200."""
    return answered(server, "POST", "/v1/chat/completions", dict(body, model=MODEL))


def check_entries(entries):
    """Every entry lists K tokens: the allowed ones (finite, descending) first, then masked ones at -9999.0,
    the chosen token among the allowed. Returns how many steps listed masked tokens."""
    with_masked = 0
    assert entries
    for e in entries:
        top = e["top_logprobs"]
        assert len(top) == K, e
        values = [t["logprob"] for t in top]
        allowed = [v for v in values if v != MASKED]
        assert allowed and values[:len(allowed)] == sorted(allowed, reverse=True), e
        assert all(v == MASKED for v in values[len(allowed):]) and all(v <= 0 for v in allowed), e
        assert e["logprob"] != MASKED and e["token"] in [t["token"] for t in top[:len(allowed)]], e
        if len(allowed) < K:
            with_masked += 1
            if len(allowed) == 1:
                assert allowed[0] == 0.0 or math.isclose(allowed[0], 0.0, abs_tol=1e-9), e
    return with_masked


def streamed_entries(server, body):
    text = post(server, dict(body, stream=True))
    entries = []
    for line in text.split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for choice in json.loads(line[6:])["choices"]:
            entries += (choice.get("logprobs") or {}).get("content") or []
    return entries


def test_top_logprobs_under_a_schema_has_k_entries_whole_and_streamed(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--policy", "patch:16:exact")
    body = {"messages": [{"role": "user", "content": "Is the cat happy?"}], "response_format": FORMAT,
            "temperature": 0, "max_tokens": 60, "logprobs": True, "top_logprobs": K}
    whole = json.loads(post(server, body))["choices"][0]
    assert json.loads(whole["message"]["content"]) == {"answer": "yes"}, whole
    entries = whole["logprobs"]["content"]
    # Most steps allow one token: before, they listed that token alone.
    assert check_entries(entries) > len(entries) // 2, entries
    streamed = streamed_entries(server, body)
    check_entries(streamed)
    assert streamed == entries


def test_top_logprobs_of_a_forced_call_has_k_entries(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--policy", "patch:16:exact")
    body = {"messages": [{"role": "user", "content": "Find a story about a cat."}], "tools": SEARCH,
            "tool_choice": "required", "temperature": 0, "max_tokens": 60, "logprobs": True, "top_logprobs": K}
    whole = json.loads(post(server, body))["choices"][0]
    assert whole["message"]["tool_calls"], whole
    entries = whole["logprobs"]["content"]
    assert check_entries(entries) > 0, entries
    streamed = streamed_entries(server, body)
    check_entries(streamed)
    assert streamed == entries


def test_generate_lists_masked_tokens_at_minus_infinity(orbit, stories260k_path):
    engine = orbit.Engine(str(stories260k_path), pool_bytes=16 << 20)
    window = engine.new_window()
    window.add_turn(engine.tokenize("Is the cat happy?", True))
    g = window.generate(engine.tokenize(" Answer:", False), max_tokens=60, response_format=SCHEMA, logprobs=True,
                        top_logprobs=K)
    assert json.loads(g.text) == {"answer": "yes"}, g.text
    masked_steps = 0
    for step in g.logprobs:
        assert len(step.top) == K
        values = [t.logprob for t in step.top]
        finite = [v for v in values if math.isfinite(v)]
        assert finite and values[:len(finite)] == sorted(finite, reverse=True)
        assert all(v == -math.inf for v in values[len(finite):])
        assert step.token in [t.token for t in step.top[:len(finite)]]
        masked_steps += len(finite) < K
    assert masked_steps > len(g.logprobs) // 2
