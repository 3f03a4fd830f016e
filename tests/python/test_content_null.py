"""A message's content of None, or no content at all, through the Python API and `orbit serve`: "" to the chat
template (orbit/sync.h ChatMessage::content_form), as OpenAI-compatible servers give it, since OpenAI's clients
send null on every assistant turn of tool calls alone and templates such as Qwen3's add the content to a string;
and None itself, where a template is given one (an extra variable), printed as Python's Jinja prints it ("None",
and booleans "True"/"False"). The server runs on 127.0.0.1 (a free port) and is always stopped."""
import json

import pytest
from conftest import serving
from serve_wire import ask

# Each message's content as a marker: N for None, U for undefined, [text] for a string.
PROBE = ("{% for m in messages %}{{ m.role }}={% if m.content is none %}N{% elif m.content is defined %}"
         "[{{ m.content }}]{% else %}U{% endif %};{% endfor %}")
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "21 C, clear"}


@pytest.fixture(scope="module")
def engine(orbit, models_dir):
    with orbit.Engine(models_dir / "tinystories-656k", pool_bytes=64 << 20, background="inline") as e:
        yield e


def turns(content=..., **extra):
    assistant = {"role": "assistant", "tool_calls": [CALL], **extra}
    if content is not ...:
        assistant["content"] = content
    return [{"role": "user", "content": "Weather?"}, assistant]


def test_python_reads_none_as_empty(engine):
    for content in (None, ..., ""):
        assert engine.render_chat(turns(content), False, chat_template=PROBE) == "user=[Weather?];assistant=[];"


def test_none_and_booleans_print_as_pythons_jinja(engine):
    text = engine.render_chat([{"role": "user", "content": "x"}], False, chat_template="{{ a }}|{{ b }}|{{ c }}|"
                              "{{ a ~ '!' }}|{{ a | string }}|{{ d }}|{{ d ~ '?' }}",
                              extra={"a": None, "b": True, "c": False})
    assert text == "None|True|False|None!|None||?"


@pytest.fixture(scope="module")
def server(orbit_cli, stories260k_path, tmp_path_factory):
    template = tmp_path_factory.mktemp("content-null") / "probe.jinja"
    # Markers long enough that the prompt's token count would tell the three apart.
    template.write_text("{% for m in messages %}{{ m.role }}: {% if m.content is none %}the content is none"
                        "{% elif m.content is defined %}{{ m.content }}{% else %}no content was given at all"
                        "{% endif %}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")
    with serving(orbit_cli, stories260k_path, "--chat-template", str(template)) as process:
        yield process


def post(server, path, body):
    status, text = ask(server, "POST", path, body)
    return status, json.loads(text)


def prompt_tokens(server, messages):
    status, body = post(server, "/v1/chat/completions",
                        {"model": "stories260K.bin", "messages": messages, "max_tokens": 1})
    assert status == 200, body
    return body["usage"]["prompt_tokens"]


def test_serve_reads_null_and_missing_content_as_empty(server):
    empty = prompt_tokens(server, turns("") + [RESULT])
    assert prompt_tokens(server, turns(None) + [RESULT]) == empty
    assert prompt_tokens(server, turns() + [RESULT]) == empty
    assert prompt_tokens(server, turns(None, refusal="") + [RESULT]) == empty
    # The Responses API's function_call item makes the same assistant turn.
    items = [{"role": "user", "content": "Weather?"},
             {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
             {"type": "function_call_output", "call_id": "c1", "output": "21 C, clear"}]
    status, body = post(server, "/v1/responses", {"model": "stories260K.bin", "input": items, "max_output_tokens": 1})
    assert status == 200 and body["usage"]["input_tokens"] == empty, body
