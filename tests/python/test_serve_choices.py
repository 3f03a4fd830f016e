"""`orbit serve` streaming n > 1 chat choices: each choice's end goes out when that choice ends.

The choices of a request decode together, one token each per step (cli/serve/run/decode.h). As OpenAI does,
a choice's finish chunk, and the tool calls read out of it, are sent as soon as that choice ends, while the
others go on; the chunks follow the steps (cli/serve/run/choice_order.h), so the order asserted here is a
function of the answers alone, not of timing. Each test starts its own server on 127.0.0.1 on the bundled
stories260K under an exact policy (the same seed gives the same answers in every request).
"""
import http.client
import json

MODEL = "stories260K.bin"
STORY = [{"role": "user", "content": "Tell me a story about a little dog."}]
SEARCH = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"type": "string", "maxLength": 12}}, "required": ["q"]}}}]


def stream_events(server, body):
    """The chunks of a streamed chat completion, in the order they came, each as (index, kind, value) per
    choice it carries: kind "content" (value the text), "tool_calls" (the deltas' list), "finish" (the
    finish_reason), "logprobs" (the number of entries); and the usage chunks' usage as (None, "usage", usage)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=120)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(dict(body, model=MODEL, stream=True)),
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        text = response.read().decode()
        assert response.status == 200, text
    finally:
        conn.close()
    events = []
    for line in text.split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        assert "error" not in chunk, chunk
        if chunk.get("usage"):
            events.append((None, "usage", chunk["usage"]))
        for choice in chunk["choices"]:
            i, delta = choice["index"], choice["delta"]
            if delta.get("content"):
                events.append((i, "content", delta["content"]))
            if delta.get("tool_calls"):
                events.append((i, "tool_calls", delta["tool_calls"]))
            if choice.get("logprobs") and choice["logprobs"].get("content"):
                events.append((i, "logprobs", len(choice["logprobs"]["content"])))
            if choice["finish_reason"]:
                events.append((i, "finish", choice["finish_reason"]))
    return events


def positions(events, index, kind):
    return [at for at, (i, k, _) in enumerate(events) if i == index and k == kind]


def texts(events, n):
    return ["".join(v for i, k, v in events if i == c and k == "content") for c in range(n)]


def test_a_choice_that_hits_a_stop_string_finishes_while_the_other_still_streams(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--policy", "patch:16:exact")
    request = {"messages": STORY, "temperature": 1, "seed": 7, "n": 2, "max_tokens": 32,
               "stream_options": {"include_usage": True}}
    free = texts(stream_events(server, request), 2)
    # A word choice 0 writes in its first half and choice 1 never writes: as a stop string it ends choice 0
    # early and leaves choice 1 to run on to max_tokens.
    words = [" " + w for w in free[0][: len(free[0]) // 2].split() if len(w) >= 3]
    stops = [w for w in words if w not in free[1] and free[0].index(w) > 0]
    assert stops, f"no word of choice 0's first half is missing from choice 1: {free}"
    stop = stops[0]
    events = stream_events(server, dict(request, stop=[stop]))
    got = texts(events, 2)
    assert got == [free[0][: free[0].index(stop)], free[1]], (stop, got, free)
    finishes = [positions(events, i, "finish") for i in range(2)]
    assert [len(f) for f in finishes] == [1, 1], events
    assert [events[f[0]][2] for f in finishes] == ["stop", "length"], events
    # Choice 0's finish chunk went out when it stopped: choice 1's content went on after it.
    later = [at for at in positions(events, 1, "content") if at > finishes[0][0]]
    assert len(later) >= 5, events
    # Usage once, after every choice's finish chunk.
    usage = [at for at, (_, k, _) in enumerate(events) if k == "usage"]
    assert usage == [len(events) - 1], events


def test_a_choice_s_tool_calls_arrive_before_a_longer_choice_finishes(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--policy", "patch:16:exact")
    n = 3
    request = {"messages": [{"role": "user", "content": "Find a story about a cat."}], "tools": SEARCH,
               "tool_choice": "required", "temperature": 1, "seed": 1, "n": n, "max_tokens": 200,
               "logprobs": True}
    events = stream_events(server, request)
    # Every token's entry goes out with its choice (the rest with its finish chunk): their count is the
    # choice's length in steps.
    steps = [sum(v for i, k, v in events if i == c and k == "logprobs") for c in range(n)]
    calls = [positions(events, c, "tool_calls") for c in range(n)]
    finishes = [positions(events, c, "finish") for c in range(n)]
    for c in range(n):
        assert calls[c] and len(finishes[c]) == 1 and events[finishes[c][0]][2] == "tool_calls", events
    shorter = [(a, b) for a in range(n) for b in range(n) if steps[a] < steps[b]]
    # A later choice ends first: sending the choices' ends in index order after the run would fail below.
    assert any(a > b for a, b in shorter), steps
    for a, b in shorter:
        assert calls[a][0] < finishes[b][0], (a, b, steps, events)
    # The calls of each choice, assembled from its deltas, are whole and its own.
    for c in range(n):
        assembled = {}
        for at in calls[c]:
            for delta in events[at][2]:
                call = assembled.setdefault(delta["index"], {"name": delta["function"].get("name"), "arguments": ""})
                call["arguments"] += delta["function"]["arguments"]
        for call in assembled.values():
            assert call["name"] == "search"
            assert isinstance(json.loads(call["arguments"])["q"], str)
