"""`orbit serve` refuses a request field it does not know, as OpenAI's API does, rather than answer as if it had
not been sent (cli/serve/wire/serve_api.h, cli/serve/responses/responses_api.h): a misspelt sampling field, a
chat field sent to /v1/completions, a stray key inside the Responses API's `text`. Each gets a 400 with code
`unknown_parameter` naming the field; what OpenAI's clients send as hints is still taken. The server is started
here on 127.0.0.1 (any free port) on stories260K and always stopped."""
import pytest
from conftest import post_json

MODEL_NAME = "stories260K.bin"
HELLO = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def server(stories_server):
    """(host, port) of the module's `orbit serve` on stories260K (conftest's stories_server)."""
    return stories_server


def refused(status, body, field):
    assert status == 400, body
    assert body["error"]["code"] == "unknown_parameter", body
    assert body["error"]["param"] == field, body
    return body["error"]["message"]


def test_chat_refuses_a_misspelt_field_naming_what_it_meant(server):
    status, body = post_json(server, "/v1/chat/completions",
                        {"model": MODEL_NAME, "messages": HELLO, "max_tokens": 2, "temprature": 0})
    assert "did you mean 'temperature'" in refused(status, body, "temprature")
    status, body = post_json(server, "/v1/chat/completions",
                        {"model": MODEL_NAME, "messages": HELLO, "max_tokens": 2, "chat_template_kwargs": None})
    refused(status, body, "chat_template_kwargs")


def test_chat_takes_the_hints_openai_clients_send(server):
    status, body = post_json(server, "/v1/chat/completions",
                        {"model": MODEL_NAME, "messages": HELLO, "max_tokens": 2, "prompt_cache_key": "k",
                         "safety_identifier": "u", "verbosity": "medium", "prompt_cache_retention": "24h"})
    assert status == 200, body
    status, body = post_json(server, "/v1/chat/completions",
                        {"model": MODEL_NAME, "messages": HELLO, "max_tokens": 2, "verbosity": "high"})
    assert status == 400 and body["error"]["param"] == "verbosity", body


@pytest.mark.parametrize("field,value", [("tools", [{"type": "function", "function": {"name": "f"}}]),
                                         ("response_format", {"type": "json_object"}),
                                         ("store", True), ("metadata", {"k": "v"})])
def test_completions_refuses_chat_fields_it_would_drop(server, field, value):
    status, body = post_json(server, "/v1/completions",
                        {"model": MODEL_NAME, "prompt": "Once", "max_tokens": 2, field: value})
    assert "/v1/chat/completions" in refused(status, body, field)


def test_responses_refuses_unknown_fields_at_each_level(server):
    base = {"model": MODEL_NAME, "input": "Hi", "max_output_tokens": 2}
    refused(*post_json(server, "/v1/responses", {**base, "foo": 1}), "foo")
    refused(*post_json(server, "/v1/responses", {**base, "text": {"fromat": {"type": "text"}}}), "text.fromat")
    refused(*post_json(server, "/v1/responses", {**base, "text": {"format": {"type": "text", "x": 1}}}),
            "text.format.x")
    status, body = post_json(server, "/v1/responses", {**base, "stream_options": {"include_obfuscation": False}})
    assert status == 400 and body["error"]["param"] == "stream_options", body
    status, body = post_json(server, "/v1/responses", {**base, "prompt_cache_key": "k", "safety_identifier": "u"})
    assert status == 200, body


def test_chat_refuses_a_response_format_key_out_of_place(server):
    # {"type": "json_object", "schema": ...} answered JSON of any shape: the schema was dropped unannounced.
    status, body = post_json(server, "/v1/chat/completions",
                        {"model": MODEL_NAME, "messages": HELLO, "max_tokens": 2,
                         "response_format": {"type": "json_object", "schema": {"type": "object"}}})
    refused(status, body, "response_format.schema")


def test_a_tool_key_out_of_place_is_refused(server):
    # A misspelt "parameters" gave the model a tool whose arguments nothing checked.
    tool = {"type": "function", "function": {"name": "f", "params": {"type": "object"}}}
    status, body = post_json(server, "/v1/chat/completions",
                        {"model": MODEL_NAME, "messages": HELLO, "max_tokens": 2, "tools": [tool]})
    refused(status, body, "tools[0].function.params")
    status, body = post_json(server, "/v1/responses",
                        {"model": MODEL_NAME, "input": "Hi", "max_output_tokens": 2,
                         "tools": [{"type": "function", "name": "f", "defer_loading": True}]})
    refused(status, body, "tools[0].defer_loading")


def chat(server, messages):
    return post_json(server, "/v1/chat/completions", {"model": MODEL_NAME, "messages": messages, "max_tokens": 2})


def test_a_message_key_no_role_has_is_refused_by_its_path(server):
    status, body = chat(server, HELLO + [{"role": "assistant", "content": "Hello"},
                                         {"role": "user", "content": "Hi", "contnet": "Hi"}])
    message = refused(status, body, "messages[2].contnet")
    assert "a user message" in message and "did you mean 'content'" in message
    # tool_call_id belongs to tool messages only; name to any role (@langchain/openai sends a tool's name).
    status, body = chat(server, [{"role": "user", "content": "Hi", "tool_call_id": "c"}])
    refused(status, body, "messages[0].tool_call_id")
    status, body = chat(server, [{"role": "system", "content": "Be brief", "reasoning_content": "x"}] + HELLO)
    refused(status, body, "messages[0].reasoning_content")


def test_message_keys_the_clients_send_are_taken_or_refused_by_name(server):
    # What OpenAI's response message and the clients echo back, null or empty, is accepted.
    status, body = chat(server, HELLO + [{"role": "assistant", "content": "Hello", "refusal": None, "audio": None,
                                          "function_call": None, "reasoning_content": None, "reasoning": None,
                                          "name": "bot"}, {"role": "user", "content": "Hi", "name": "ann"}])
    assert status == 200, body
    # A key the chat template would not see is refused, not dropped: audio, a function_call. (An earlier turn's
    # reasoning, @ai-sdk/openai-compatible's reasoning_content or @openai/agents' reasoning, is given to the
    # template: test_serve_reasoning.py.)
    for key, value in [("audio", {"id": "a"}), ("function_call", {"name": "f", "arguments": "{}"})]:
        status, body = chat(server, HELLO + [{"role": "assistant", "content": "Hello", key: value}] + HELLO)
        assert status == 400 and body["error"]["param"] == "messages[1]." + key, body
        assert "chat template would not see it" in body["error"]["message"], body


def test_an_assistant_refusal_string_is_read_as_its_text(server):
    def prompt_tokens(extra):
        status, body = chat(server, HELLO + [dict({"role": "assistant", "content": "Hello"}, **extra)] + HELLO)
        assert status == 200, body
        return body["usage"]["prompt_tokens"]
    assert prompt_tokens({"refusal": "I will not say that story again"}) > prompt_tokens({})


def test_a_responses_input_item_key_its_type_has_not_is_refused_by_its_path(server):
    def respond(item):
        return post_json(server, "/v1/responses", {"model": MODEL_NAME, "max_output_tokens": 2,
                                              "input": [{"role": "user", "content": "Hi"}, item]})
    status, body = respond({"type": "function_call_output", "cal_id": "c", "output": "4"})
    assert "did you mean 'call_id'" in refused(status, body, "input[1].cal_id")
    status, body = respond({"role": "user", "content": "Hi", "name": "ann"})
    refused(status, body, "input[1].name")
    # id, status and phase, as the SDKs send an answer's items back, are still taken.
    status, body = respond({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                            "phase": "final_answer", "content": [{"type": "output_text", "text": "Hello"}]})
    assert status == 200, body


def test_a_key_inside_a_content_part_or_tool_call_is_refused_by_its_path(server):
    # A misspelt key inside a part or a call was dropped: {"type": "text", "txt": ...} read as an empty part.
    status, body = chat(server, [{"role": "user", "content": [{"type": "text", "text": "", "txt": "Hi"}]}])
    message = refused(status, body, "messages[0].content[0].txt")
    assert "a text part" in message and "did you mean 'text'" in message
    status, body = chat(server, HELLO + [{"role": "assistant", "content": [
        {"type": "refusal", "refusal": "No", "text": "x"}]}] + HELLO)
    refused(status, body, "messages[1].content[0].text")
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    for extra, path in [({"idx": 0}, "idx"), ({"function": {"name": "f", "argumnts": "{}"}}, "function.argumnts")]:
        status, body = chat(server, HELLO + [{"role": "assistant", "content": None, "tool_calls": [{**call, **extra}]},
                                             {"role": "tool", "tool_call_id": "c1", "content": "4"}])
        refused(status, body, "messages[1].tool_calls[0]." + path)
    status, body = chat(server, HELLO + [{"role": "assistant", "content": None,
                                          "tool_calls": [{**call, "index": "0"}]}])
    assert status == 400 and body["error"]["param"] == "messages[1].tool_calls[0].index", body


def test_part_and_call_keys_the_clients_send_are_taken(server):
    # @openai/agents' prompt_cache_breakpoint on a text part; a streamed call's index (@langchain/openai sends
    # back the raw calls it could not parse); the openai SDK's parsed and parsed_arguments (runTools sends the
    # answer back as it parsed it).
    call = {"id": "c1", "type": "function", "index": 0,
            "function": {"name": "f", "arguments": "{}", "parsed_arguments": {}}}
    status, body = chat(server, [
        {"role": "user", "content": [{"type": "text", "text": "Hi", "prompt_cache_breakpoint": {"mode": "explicit"}}]},
        {"role": "assistant", "content": None, "refusal": None, "parsed": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "4"}])
    assert status == 200, body
    status, body = chat(server, [{"role": "user", "content": [{"type": "text", "text": "Hi",
                                                               "prompt_cache_breakpoint": "explicit"}]}])
    assert status == 400 and body["error"]["param"] == "messages[0].content[0].prompt_cache_breakpoint", body


def test_a_key_inside_a_responses_content_part_is_refused_by_its_path(server):
    def respond(*items):
        return post_json(server, "/v1/responses", {"model": MODEL_NAME, "max_output_tokens": 2, "input": list(items)})
    status, body = respond({"role": "user", "content": [{"type": "input_text", "text": "Hi", "txt": "x"}]})
    assert "did you mean 'text'" in refused(status, body, "input[0].content[0].txt")
    status, body = respond({"role": "user", "content": "Hi"},
                           {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                           {"type": "function_call_output", "call_id": "c",
                            "output": [{"type": "input_text", "text": "4", "annotations": []}]})
    refused(status, body, "input[2].output[0].annotations")
    # An answer's items as the SDKs send them back: output_text's annotations and logprobs, the openai SDK's
    # parsed and parsed_arguments; @openai/agents' prompt_cache_breakpoint on an input_text part.
    status, body = respond(
        {"role": "user", "content": [{"type": "input_text", "text": "Hi", "prompt_cache_breakpoint": {"mode": "explicit"}}]},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Hello", "annotations": [], "logprobs": [], "parsed": None}]},
        {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": "{}", "status": "completed",
         "parsed_arguments": None},
        {"type": "function_call_output", "call_id": "c", "output": "4"})
    assert status == 200, body


def twice(status, body, field):
    assert status == 400, body
    assert body["error"]["param"] == field, body
    assert body["error"]["type"] == "invalid_request_error", body
    assert body["error"]["message"].startswith(field + ": given twice in one object"), body


def test_a_key_given_twice_is_refused_by_its_path(server):
    # JSON keeps one value of a repeated key: {"max_tokens": 3, "max_tokens": 12} answered 12 tokens, and a
    # second "messages" replaced the first without a word.
    raw = (b'{"model": "stories260K.bin", "max_tokens": 3, "max_tokens": 12, '
           b'"messages": [{"role": "user", "content": "Hi"}]}')
    twice(*post_json(server, "/v1/chat/completions", raw), "max_tokens")
    raw = (b'{"model": "stories260K.bin", "max_tokens": 2, "messages": [{"role": "user", "content": "IGNORED"}], '
           b'"messages": [{"role": "user", "content": "Hi"}]}')
    twice(*post_json(server, "/v1/chat/completions", raw), "messages")
    raw = (b'{"model": "stories260K.bin", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}, '
           b'{"role": "user", "content": "a", "content": "b"}]}')
    twice(*post_json(server, "/v1/chat/completions", raw), "messages[1].content")
    raw = (b'{"model": "stories260K.bin", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}], '
           b'"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", '
           b'"properties": {"a": {"type": "string"}, "a": {"type": "integer"}}}}}]}')
    twice(*post_json(server, "/v1/chat/completions", raw), "tools[0].function.parameters.properties.a")
    raw = b'{"model": "stories260K.bin", "prompt": "Once", "prompt": "Twice", "max_tokens": 2}'
    twice(*post_json(server, "/v1/completions", raw), "prompt")
    raw = b'{"model": "stories260K.bin", "input": "Hi", "max_output_tokens": 16, "text": {"format": {}, "format": {}}}'
    twice(*post_json(server, "/v1/responses", raw), "text.format")
    # The same key in two objects is two keys.
    raw = (b'{"model": "stories260K.bin", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}, '
           b'{"role": "assistant", "content": "Yo"}, {"role": "user", "content": "Hi"}]}')
    assert post_json(server, "/v1/chat/completions", raw)[0] == 200


def test_a_boolean_schema_is_a_schema(server):
    # JSON Schema's `true` (any value) was refused as "expected an object, got a boolean".
    import json

    def chat_format(schema):
        return post_json(server, "/v1/chat/completions", {
            "model": MODEL_NAME, "messages": HELLO, "max_tokens": 24, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "any", "schema": schema}}})
    status, body = chat_format(True)
    assert status == 200, body
    if body["choices"][0]["finish_reason"] == "stop":
        json.loads(body["choices"][0]["message"]["content"])  # a whole JSON value
    status, body = chat_format(False)
    assert status == 400 and body["error"]["param"] == "response_format.json_schema.schema", body
    status, body = chat_format("nope")
    assert status == 400 and "an object or a boolean" in body["error"]["message"], body
    status, body = post_json(server, "/v1/responses", {
        "model": MODEL_NAME, "input": "Hi", "max_output_tokens": 24,
        "text": {"format": {"type": "json_schema", "name": "any", "schema": True}}})
    assert status == 200, body
