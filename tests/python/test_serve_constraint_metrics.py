"""`orbit serve`'s constraint cache in /metrics (cli/serve/run/answer_constraint.h, serve_metrics.h), on
stories260K: a request whose response_format schema (or tools) the cache already holds counts a hit in
orbit_constraint_cache_hits_total, one with a schema it has not seen counts a miss in
orbit_constraint_cache_misses_total and is a new entry. The server is started here on 127.0.0.1 (any free
port) and stopped."""
import re

MODEL_NAME = "stories260K.bin"


def counters(server):
    """{name: value} of the constraint cache's lines in /metrics."""
    text = server.call("/metrics")
    return {name: float(value) for name, value in re.findall(r"^(orbit_constraint_cache_\w+) (\S+)$", text, re.M)}


def schema_request(schema):
    return {"model": MODEL_NAME, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": "Once upon a time"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}}


TOOLS = [{"type": "function", "function": {"name": "look", "description": "Look at something.",
                                           "parameters": {"type": "object", "properties": {"what": {"type": "string"}},
                                                          "required": ["what"]}}}]


def test_a_repeated_schema_is_a_hit_and_a_new_one_a_miss(start_serve, stories260k_path):
    server = start_serve(stories260k_path)
    start = counters(server)
    assert start["orbit_constraint_cache_hits_total"] == 0 and start["orbit_constraint_cache_misses_total"] == 0
    first = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    server.call("/v1/chat/completions", schema_request(first))
    built = counters(server)
    assert built["orbit_constraint_cache_misses_total"] == 1
    assert built["orbit_constraint_cache_hits_total"] == 0
    assert built["orbit_constraint_cache_entries"] == 1

    server.call("/v1/chat/completions", schema_request(first))  # the same schema: found, not built
    again = counters(server)
    assert again["orbit_constraint_cache_hits_total"] == 1
    assert again["orbit_constraint_cache_misses_total"] == 1

    other = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
    server.call("/v1/chat/completions", schema_request(other))
    new = counters(server)
    assert new["orbit_constraint_cache_misses_total"] == 2
    assert new["orbit_constraint_cache_hits_total"] == 1
    assert new["orbit_constraint_cache_entries"] == 2


def test_the_same_tools_again_are_hits(start_serve, stories260k_path):
    server = start_serve(stories260k_path)
    body = {"model": MODEL_NAME, "max_tokens": 4, "temperature": 0, "tools": TOOLS, "tool_choice": "required",
            "messages": [{"role": "user", "content": "Look at the sky."}]}
    server.call("/v1/chat/completions", body)
    first = counters(server)
    assert first["orbit_constraint_cache_misses_total"] >= 1  # the tools' check, and the forced call's grammar
    assert first["orbit_constraint_cache_hits_total"] == 0
    server.call("/v1/chat/completions", body)
    second = counters(server)
    assert second["orbit_constraint_cache_misses_total"] == first["orbit_constraint_cache_misses_total"]
    assert second["orbit_constraint_cache_hits_total"] == first["orbit_constraint_cache_misses_total"]
