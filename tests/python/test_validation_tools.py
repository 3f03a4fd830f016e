"""Tool lists and message lists that are not what they claim are refused naming the argument, not rendered or
decoded as if they were: an entry of `tools` that is no tool dict (generate decoded such a list freely under
tool_choice "auto", and the chat template rendered it as a tool), and a `messages` that is no list at all.
Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python."""
import pytest

QUERY = [1, 2, 3]
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("tools,error,message", [
    ([5], TypeError, r"^generate: tools\[0\]: expected a tool dict .* got int"),
    ('[{"type": "function", "function": {"name": "f"}}, "g"]', TypeError,
     r"^generate: tools\[1\]: expected a tool dict"),
    ([{"type": "function", "function": "f"}], TypeError, r"^generate: tools\[0\]\.function: expected a dict, got str"),
    ([{"type": "function", "function": {"description": "no name"}}], ValueError,
     r"^generate: tools\[0\]\.function\.name: expected a non-empty str"),
    ([{"name": ""}], ValueError, r"^generate: tools\[0\]\.name: expected a non-empty str"),
    ({"type": "function", "function": {"name": "f"}}, TypeError, r"^generate: tools must be a list of tool dicts"),
])
def test_generate_refuses_a_tool_list_entry_that_is_no_tool(orbit, small_engine, tools, error, message):
    window = small_engine.new_window()
    for choice in ("auto", "none"):
        with pytest.raises(error, match=message):
            window.generate(QUERY, max_tokens=2, tools=tools, tool_choice=choice)


def test_generate_takes_tools_wrapped_or_bare(orbit, small_engine):
    window = small_engine.new_window()
    for tools in ([{"type": "function", "function": {"name": "f"}}], [{"name": "f", "parameters": {}}], []):
        assert window.generate(QUERY, max_tokens=2, tools=tools).stop_reason == "max_tokens"


@pytest.mark.parametrize("call", ["sync", "plan_sync", "render_chat", "tokenize_chat"])
def test_chat_calls_refuse_a_tool_that_is_not_a_dict(orbit, small_engine, call):
    target = small_engine if call in ("render_chat", "tokenize_chat") else small_engine.new_window()
    fn = getattr(target, call)
    with pytest.raises(TypeError, match=rf"^{call}: tools\[1\] must be a tool dict, got int"):
        fn(MESSAGES, tools=[{"type": "function", "function": {"name": "f"}}, 5])
    with pytest.raises(TypeError, match=rf"^{call}: tools\[0\] must be a tool dict, got str"):
        fn(MESSAGES, tools='["f"]')


@pytest.mark.parametrize("messages,kind", [(None, "NoneType"), (5, "int")])
def test_sync_names_messages_that_are_not_a_list(orbit, small_engine, messages, kind):
    with pytest.raises(TypeError, match=rf"^messages: expected a list of message dicts, got a {kind}"):
        small_engine.new_window().sync(messages)


@pytest.mark.parametrize("call", ["sync", "plan_sync", "render_chat", "tokenize_chat"])
def test_chat_calls_refuse_a_tool_without_a_name(orbit, small_engine, call):
    """A tool with no name was rendered into the prompt (an unnamed entry in the template's tool list) where
    generate() refuses it: the chat calls check each tool as generate does."""
    target = small_engine if call in ("render_chat", "tokenize_chat") else small_engine.new_window()
    fn = getattr(target, call)
    with pytest.raises(ValueError, match=rf"^{call}: tools\[0\]\.function\.name: expected a non-empty str"):
        fn(MESSAGES, tools=[{"type": "function", "function": {"nam": "f"}}])
    with pytest.raises(ValueError, match=rf"^{call}: tools\[1\]\.name: expected a non-empty str"):
        fn(MESSAGES, tools=[{"name": "f"}, {"name": ""}])


@pytest.mark.parametrize("call", ["sync", "render_chat"])
def test_a_message_key_the_template_never_sees_is_refused(orbit, small_engine, call):
    """A misspelt key ("contnet") was dropped and the message synced empty; now it is named. The keys an
    openai client's message carries when dumped to a dict pass while they hold nothing."""
    target = small_engine if call == "render_chat" else small_engine.new_window()
    fn = getattr(target, call)
    with pytest.raises(ValueError, match=r"^messages\[1\]\.contnet: unknown message key \(a message has role, "):
        fn(MESSAGES + [{"role": "user", "contnet": "hi"}])
    with pytest.raises(ValueError, match=r"^messages\[0\]\.function_call: taken only when None: .*tool_calls"):
        fn([{"role": "assistant", "content": "", "function_call": {"name": "f", "arguments": "{}"}}])
    with pytest.raises(ValueError, match=r"^messages\[0\]\.refusal: taken only when None"):
        fn([{"role": "assistant", "content": "", "refusal": "no"}])
    dumped = {"role": "assistant", "content": "hello", "refusal": None, "annotations": [], "audio": None,
              "function_call": None, "tool_calls": None, "parsed": None}
    plain = {"role": "assistant", "content": "hello"}
    assert small_engine.render_chat(MESSAGES + [dumped]) == small_engine.render_chat(MESSAGES + [plain])
    fn(MESSAGES + [dumped])
