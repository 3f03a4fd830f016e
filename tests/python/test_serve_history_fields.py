"""What a chat request's history says about its tool calls and names is checked as OpenAI's API checks it
(cli/serve/wire/serve_api.h), so nothing reaches the chat template that it would render wrongly or not at all:
a tool message names the call it answers (tool_call_id, required and not empty), a call has an id, its JSON
arguments give no key twice in one object (the template would see one value), the names in the history
(messages[i].name, tool_calls[j].function.name) are 1 to 64 of [A-Za-z0-9_-]. Each is refused with a 400 naming
the field. A `user` names its session by a SHA-256 of it, in a namespace no other `user` reaches; /v1/responses
names `instructions` when they alone overflow the context. The server is started here on
127.0.0.1 (any free port) on stories260K and always stopped."""
import hashlib

import pytest
from conftest import post_json

MODEL_NAME = "stories260K.bin"
CALL = {"role": "assistant", "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}


@pytest.fixture(scope="module")
def server(stories_server):
    """(host, port) of the module's `orbit serve` on stories260K (conftest's stories_server)."""
    return stories_server


def chat(server, messages, **more):
    return post_json(server, "/v1/chat/completions",
                     {"model": MODEL_NAME, "messages": messages, "max_tokens": 2, "temperature": 0, **more})


def refused(answer, field, says=None):
    status, body = answer
    assert status == 400, body
    assert body["error"]["param"] == field, body
    assert body["error"]["type"] == "invalid_request_error", body
    assert body["error"]["message"].startswith(field + ": "), body
    if says is not None:
        assert says in body["error"]["message"], body
    return body["error"]["message"]


@pytest.mark.parametrize("result", [{"role": "tool", "content": "21 C"},
                                    {"role": "tool", "tool_call_id": None, "content": "21 C"},
                                    {"role": "tool", "tool_call_id": "", "content": "21 C"}])
def test_a_tool_message_must_name_the_call_it_answers(server, result):
    refused(chat(server, [{"role": "user", "content": "Weather?"}, CALL, result]), "messages[2].tool_call_id")


def test_a_tool_call_in_the_history_must_have_an_id(server):
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}
    refused(chat(server, [{"role": "user", "content": "Weather?"}, call]), "messages[1].tool_calls[0].id")


def test_results_as_clients_send_them_are_served(server):
    # What the openai, LangChain and agents clients send: the call, then its result naming it (LangChain also
    # gives the tool's name); and what an agent that trims its context sends, a result whose call was dropped.
    result = {"role": "tool", "tool_call_id": "call_1", "content": "21 C", "name": "get_weather"}
    assert chat(server, [{"role": "user", "content": "Weather?"}, CALL, result])[0] == 200
    assert chat(server, [{"role": "user", "content": "Weather?"}, result])[0] == 200


@pytest.mark.parametrize("name", ["get weather", "x</tool_call>", "a.b", "n" * 65],
                         ids=["space", "markup", "dot", "65"])
def test_a_call_in_the_history_is_held_to_the_tool_name_rule(server, name):
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": "{}"}}]}
    refused(chat(server, [{"role": "user", "content": "Weather?"}, call]), "messages[1].tool_calls[0].function.name",
            "is not a tool name")


@pytest.mark.parametrize("arguments", ['{"city": "Paris", "city": "Rome"}', '{"trip": [{"to": "Rome", "to": "Oslo"}]}'],
                         ids=["key-twice", "nested-key-twice"])
def test_arguments_a_parse_would_alter_are_refused(server, arguments):
    # The template sees JSON arguments parsed: only one of the two cities would reach it.
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": arguments}}]}
    refused(chat(server, [{"role": "user", "content": "Weather?"}, call]), "messages[1].tool_calls[0].function.arguments")
    status, body = post_json(server, "/v1/responses", {
        "model": MODEL_NAME, "max_output_tokens": 2, "store": False,
        "input": [{"role": "user", "content": "Weather?"},
                  {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": arguments}]})
    assert (status, body["error"]["param"]) == (400, "input[1].arguments"), body


def test_arguments_as_answered_are_served(server):
    # A call max_tokens cut comes back as it was answered (not JSON), and JSON that parses as written.
    for arguments in ('{"city": "Pa', '{"x": 1.5, "big": 12345678901234567890123, "a": {"k": 1}, "b": {"k": 2}}'):
        call = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": arguments}}]}
        result = {"role": "tool", "tool_call_id": "call_1", "content": "bad arguments"}
        assert chat(server, [{"role": "user", "content": "Weather?"}, call, result])[0] == 200


@pytest.mark.parametrize("name", ["a" * 100_000, "John Doe", "ann.b", ""], ids=["100KB", "space", "dot", "empty"])
def test_a_message_name_is_held_to_openais_rule(server, name):
    message = refused(chat(server, [{"role": "user", "content": "Hi", "name": name}]), "messages[0].name",
                      "is not a message name")
    assert len(message) < 300  # a 100 KB name is quoted by its first 40 bytes


def test_message_names_as_clients_send_them_are_served(server):
    assert chat(server, [{"role": "system", "content": "Be brief.", "name": "rules"},
                         {"role": "user", "content": "Hi", "name": "ann_2-b"}])[0] == 200


def test_a_message_name_reaches_the_prompt(server):
    # The built-in template writes "user (Alice): ..." (it wrote "user: ...", the name checked and then dropped).
    def prompt_tokens(**name):
        status, body = chat(server, [{"role": "user", "content": "Hi", **name}])
        assert status == 200, body
        return body["usage"]["prompt_tokens"]
    plain = prompt_tokens()
    assert prompt_tokens(name="Alice") > plain and prompt_tokens(name="Alice_the_long_name") > prompt_tokens(name="Alice")


def session_of(server, user):
    status, body = chat(server, [{"role": "user", "content": "Once"}], user=user)
    assert status == 200, body
    return body["usage"]["orbit"]["session"]


def test_a_user_names_its_session_by_sha256_in_its_own_namespace(server):
    hashed = "user-" + hashlib.sha256("john doe".encode()).hexdigest()[:32]
    assert session_of(server, "john doe") == hashed
    assert session_of(server, "alice-01") == "alice-01"  # a session id outside user- is its own session
    # A valid id that looks like another user's hash is hashed too: no `user` can choose another's session.
    assert session_of(server, hashed) == "user-" + hashlib.sha256(hashed.encode()).hexdigest()[:32]


def test_responses_names_the_instructions_when_they_alone_overflow(server):
    story = "Once upon a time there was a cat. " * 200
    base = {"model": MODEL_NAME, "max_output_tokens": 2, "store": False}
    status, body = post_json(server, "/v1/responses", {**base, "input": "Hi", "instructions": story})
    assert (status, body["error"]["code"], body["error"]["param"]) == (400, "context_length_exceeded", "instructions")
    status, body = post_json(server, "/v1/responses", {**base, "input": story, "instructions": "Be brief."})
    assert (status, body["error"]["code"], body["error"]["param"]) == (400, "context_length_exceeded", "input")
