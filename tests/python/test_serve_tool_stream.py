"""`orbit serve` streaming tool calls as they are written, as OpenAI streams them.

Where a call is decoded under the tools' grammar (here tool_choice "required" and a named function), a
streamed chat answer's call opens with a delta carrying its index, id, type "function", its name and
arguments "", as soon as its name is read; then deltas carry pieces of its arguments' JSON text as they are
generated, one call after the other. The Responses API streams response.function_call_arguments.delta events
the same way. Whatever way it streams, the deltas concatenated are the answer's calls: the same names and
arguments as the same request not streamed (the exact policy and a fixed seed make the answers the same),
and, with store true, the same ids as the stored completion. Each test starts its own server on
127.0.0.1 on the bundled stories260K.
"""
import json

from serve_wire import MODEL_NAME as MODEL
from serve_wire import answered

MESSAGES = [{"role": "user", "content": "Find a story about a cat."}]
SEARCH = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"type": "string", "maxLength": 12}, "page": {"type": "integer"}},
    "required": ["q", "page"]}}}]


def post(server, path, body):
    """The answer text of a POST of `body`, the model added, to `path`; it must answer 200."""
    return answered(server, "POST", path, dict(body, model=MODEL))


def get(server, path):
    """The parsed answer of a GET of `path`; it must answer 200."""
    return json.loads(answered(server, "GET", path))


def stream_chunks(server, body):
    """The chunks of a streamed chat completion (the data of each event but [DONE])."""
    text = post(server, "/v1/chat/completions", dict(body, stream=True))
    return [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ") and line != "data: [DONE]"]


def assemble(chunks, choice=0):
    """Choice `choice`'s calls as a client assembles them, by index, and the tool-call deltas of each call in
    the order they came."""
    calls, deltas = {}, {}
    for chunk in chunks:
        for c in chunk["choices"]:
            if c["index"] != choice:
                continue
            for d in c["delta"].get("tool_calls") or []:
                i = d["index"]
                if i not in calls:
                    assert d["type"] == "function" and d["id"] and isinstance(d["function"]["name"], str), d
                    calls[i] = {"id": d["id"], "name": d["function"]["name"], "arguments": ""}
                else:
                    assert "id" not in d and "name" not in d["function"], d  # opened once
                calls[i]["arguments"] += d["function"]["arguments"]
                deltas.setdefault(i, []).append(d)
    return [calls[i] for i in sorted(calls)], [deltas[i] for i in sorted(deltas)]


def plain(calls):
    return [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in calls]


def test_a_streamed_call_arrives_in_pieces_that_spell_the_non_streamed_call(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--policy", "patch:16:exact")
    for choice in ("required", {"type": "function", "function": {"name": "search"}}):
        request = {"messages": MESSAGES, "tools": SEARCH, "tool_choice": choice, "temperature": 1, "seed": 3,
                   "max_tokens": 150, "parallel_tool_calls": True}
        whole = json.loads(post(server, "/v1/chat/completions", request))["choices"][0]
        chunks = stream_chunks(server, dict(request, store=True))
        calls, deltas = assemble(chunks)
        assert calls and [{"name": c["name"], "arguments": c["arguments"]} for c in calls] == plain(
            whole["message"]["tool_calls"]), (calls, whole)
        for per_call in deltas:
            # The opening delta: the name, no arguments yet; then the arguments in more than one piece.
            assert per_call[0]["function"]["arguments"] == "", per_call
            assert len(per_call) > 2, per_call
        finish = [c["finish_reason"] for chunk in chunks for c in chunk["choices"] if c["finish_reason"]]
        assert finish == [whole["finish_reason"]] == ["tool_calls"]
        # The stored answer is the streamed one: the same ids.
        stored = get(server, "/v1/chat/completions/" + chunks[0]["id"])["choices"][0]["message"]["tool_calls"]
        assert [{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                for c in stored] == calls


def test_cut_calls_and_n_choices_stream_what_they_answer(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--policy", "patch:16:exact")
    base = {"messages": MESSAGES, "tools": SEARCH, "tool_choice": "required", "temperature": 1, "seed": 5}
    # max_tokens inside the call: finish_reason "length" and the call as far as it was written, alike.
    for max_tokens in (4, 9, 17, 23):
        request = dict(base, max_tokens=max_tokens)
        whole = json.loads(post(server, "/v1/chat/completions", request))["choices"][0]
        calls, _ = assemble(stream_chunks(server, request))
        assert [{"name": c["name"], "arguments": c["arguments"]} for c in calls] == plain(
            whole["message"]["tool_calls"]), (max_tokens, calls, whole)
    # n = 3: each choice's pieces spell that choice's calls.
    request = dict(base, n=3, max_tokens=150)
    whole = json.loads(post(server, "/v1/chat/completions", request))["choices"]
    chunks = stream_chunks(server, request)
    for i in range(3):
        calls, deltas = assemble(chunks, i)
        assert [{"name": c["name"], "arguments": c["arguments"]} for c in calls] == plain(
            whole[i]["message"]["tool_calls"]), i
        assert all(len(d) > 2 for d in deltas), deltas


def test_responses_stream_function_call_arguments_as_they_are_written(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--policy", "patch:16:exact")
    tools = [{"type": "function", "name": "search", "parameters": SEARCH[0]["function"]["parameters"]}]
    request = {"input": "Find a story about a cat.", "tools": tools, "tool_choice": "required", "temperature": 1,
               "seed": 3, "max_output_tokens": 150, "store": False}
    whole = json.loads(post(server, "/v1/responses", request))
    text = post(server, "/v1/responses", dict(request, stream=True))
    events = [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ")]
    deltas, done = {}, {}
    for e in events:
        if e["type"] == "response.function_call_arguments.delta":
            deltas.setdefault(e["output_index"], []).append(e["delta"])
        if e["type"] == "response.function_call_arguments.done":
            done[e["output_index"]] = e["arguments"]
    final = events[-1]["response"]["output"]
    calls = [item for item in final if item["type"] == "function_call"]
    assert calls and [(c["name"], c["arguments"]) for c in calls] == [
        (c["name"], c["arguments"]) for c in whole["output"] if c["type"] == "function_call"]
    for index, item in enumerate(final):
        if item["type"] != "function_call":
            continue
        assert len(deltas[index]) > 1, deltas
        assert "".join(deltas[index]) == done[index] == item["arguments"]


def test_a_tool_name_that_is_not_one_is_refused_naming_it(start_serve, stories260k_path):
    # "x</tool_call>" closed the call it was written in: tool_choice "required" answered the markup as text.
    from conftest import post_json
    server = start_serve(stories260k_path)
    address = (server.host, server.port)
    for name in ("x</tool_call>", "a b", "n" * 65):
        tool = {"type": "function", "function": {"name": name, "parameters": SEARCH[0]["function"]["parameters"]}}
        status, body = post_json(address, "/v1/chat/completions", {
            "model": MODEL, "messages": MESSAGES, "max_tokens": 100, "tools": [tool], "tool_choice": "required"})
        assert status == 400 and body["error"]["param"] == "tools[0].function.name", (name, body)
        status, body = post_json(address, "/v1/responses", {
            "model": MODEL, "input": "Find a cat.", "max_output_tokens": 100, "tool_choice": "required",
            "tools": [dict(tool["function"], type="function")]})
        assert status == 400 and body["error"]["param"] == "tools[0].name", (name, body)


def test_an_argument_holding_the_closing_mark_is_still_a_call(start_serve, stories260k_path):
    # A forced call whose schema makes it write "</tool_call>" inside a string: the mark there ended the call,
    # so the answer came back as its markup in content, and the stream stopped at the string's first quote.
    server = start_serve(stories260k_path, "--policy", "patch:16:exact")
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"enum": ["</tool_call>x"]}}, "required": ["a"]}}}
    body = {"messages": MESSAGES, "max_tokens": 100, "seed": 1, "tools": [tool], "tool_choice": "required"}
    message = json.loads(post(server, "/v1/chat/completions", body))["choices"][0]["message"]
    assert message["content"] is None and plain(message["tool_calls"]) == [
        {"name": "f", "arguments": '{"a":"</tool_call>x"}'}], message
    calls, _ = assemble(stream_chunks(server, body))
    assert [{"name": c["name"], "arguments": c["arguments"]} for c in calls] == plain(message["tool_calls"])


# search (its argument q alone) and other: under seed 3 the forced call is search's, its name written in tokens
# 20 to 22.
CUT_TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"type": "string", "maxLength": 12}}, "required": ["q"]}}},
    {"type": "function", "function": {"name": "other", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}]


def test_a_call_cut_inside_its_name_never_shows_a_name_no_tool_has(start_serve, stories260k_path):
    # max_tokens 20 cut the call inside "search": the answer's call was named "s" (21: "se", streamed 22: the
    # call opened as "sea"; 19 and less: ""). Under search and other a cut name that begins one tool's name
    # only is that tool's (arguments ""); one that begins both ("") leaves the cut call out. Either way the
    # answer ends "length".
    server = start_serve(stories260k_path, "--policy", "patch:16:exact")
    names = {"search", "other"}
    base = {"messages": MESSAGES, "tools": CUT_TOOLS, "tool_choice": "required", "temperature": 1, "seed": 3}
    seen = set()
    for max_tokens in (19, 20, 21, 22):
        request = dict(base, max_tokens=max_tokens)
        whole = json.loads(post(server, "/v1/chat/completions", request))["choices"][0]
        assert whole["finish_reason"] == "length", whole
        calls = whole["message"].get("tool_calls") or []
        assert all(c["function"]["name"] in names for c in calls), (max_tokens, whole)
        seen.update((max_tokens, c["function"]["name"], c["function"]["arguments"]) for c in calls)
        chunks = stream_chunks(server, request)
        streamed, _ = assemble(chunks)
        assert [{"name": c["name"], "arguments": c["arguments"]} for c in streamed] == plain(calls), (
            max_tokens, streamed, whole)
        finish = [c["finish_reason"] for chunk in chunks for c in chunk["choices"] if c["finish_reason"]]
        assert finish == ["length"], finish
        response = json.loads(post(server, "/v1/responses", {
            "input": MESSAGES[0]["content"], "tool_choice": "required", "temperature": 1, "seed": 3,
            "max_output_tokens": max_tokens, "store": False,
            "tools": [dict(t["function"], type="function") for t in CUT_TOOLS]}))
        items = [item for item in response["output"] if item["type"] == "function_call"]
        assert all(item["name"] in names for item in items), (max_tokens, response["output"])
        assert response["status"] == "incomplete", response
        text = post(server, "/v1/responses", {
            "input": MESSAGES[0]["content"], "tool_choice": "required", "temperature": 1, "seed": 3,
            "max_output_tokens": max_tokens, "store": False, "stream": True,
            "tools": [dict(t["function"], type="function") for t in CUT_TOOLS]})
        events = [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ")]
        for e in events:
            if e["type"] in ("response.output_item.added", "response.output_item.done"):
                assert e["item"]["type"] != "function_call" or e["item"]["name"] in names, (max_tokens, e)
    # Cut inside "search" (20 to 22), the call is search's, its arguments not begun.
    assert {(m, "search", "") for m in (20, 21, 22)} <= seen, seen


def test_a_forced_call_cut_before_its_name_is_the_only_tool_it_can_be(start_serve, stories260k_path):
    # tool_choice "required" with one tool, cut before or inside its name: the call was named "" (max_tokens 1,
    # 20) or "se" (22).
    server = start_serve(stories260k_path, "--policy", "patch:16:exact")
    base = {"messages": MESSAGES, "tools": CUT_TOOLS[:1], "tool_choice": "required", "temperature": 1, "seed": 3}
    for max_tokens in (1, 20, 22):
        request = dict(base, max_tokens=max_tokens)
        whole = json.loads(post(server, "/v1/chat/completions", request))["choices"][0]
        assert whole["finish_reason"] == "length" and plain(whole["message"]["tool_calls"]) == [
            {"name": "search", "arguments": ""}], (max_tokens, whole)
        calls, _ = assemble(stream_chunks(server, request))
        assert [{"name": c["name"], "arguments": c["arguments"]} for c in calls] == [
            {"name": "search", "arguments": ""}], (max_tokens, calls)


def test_an_auto_call_cut_before_its_name_leaves_no_markup_in_content(start_serve, stories260k_path):
    # tool_choice "auto" with a JSON response_format: a call or the JSON from the first byte; '<' favoured (its
    # byte token 63 and 504), a call. Cut after the call's mark but before its name began, the markup
    # ('<tool_call>{"name": "') was the message's content; cut inside the mark ('<'), no call. Now the call is
    # settled as a forced one cut there: the one tool's (arguments ""), or, under two tools, left out; never
    # markup in content. Each cut's own tokens (its logprobs) say where it was cut.
    import re
    server = start_serve(stories260k_path, "--policy", "patch:16:exact")
    schema = {"type": "object", "properties": {"title": {"type": "string", "maxLength": 12}}, "required": ["title"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    before_name = inside_mark = 0
    for tools, one in ((CUT_TOOLS[:1], "search"), (CUT_TOOLS, None)):
        base = {"messages": MESSAGES, "tools": tools, "tool_choice": "auto", "response_format": fmt,
                "temperature": 0, "logit_bias": {"63": 100, "504": 100}, "logprobs": True}
        for max_tokens in range(1, 16):
            request = dict(base, max_tokens=max_tokens)
            whole = json.loads(post(server, "/v1/chat/completions", request))["choices"][0]
            raw = "".join(e["token"] for e in whole["logprobs"]["content"])
            content = whole["message"]["content"] or ""
            calls = plain(whole["message"].get("tool_calls") or [])
            context = (tools[-1]["function"]["name"], max_tokens, raw, whole)
            if not raw.startswith("<"):
                continue  # the JSON answer: max_tokens holds it and not the shortest call
            assert "<" not in content and "tool_call" not in content, context
            if re.search(r'"name":\s*"\w', raw):
                continue  # the name began: as before (test_a_call_cut_inside_its_name_never_shows_a_name_no_tool_has)
            assert whole["finish_reason"] == "length" and content == "", context
            # A call or the JSON from the first byte: '<' began the call, so a cut inside its mark is one too,
            # settled as a forced call cut there is (it was left out, no call).
            assert calls == ([{"name": one, "arguments": ""}] if one else []), context
            if not calls:  # left out: no content either, as OpenAI answers a call without text (was "")
                assert whole["message"]["content"] is None, context
            before_name += "<tool_call>" in raw
            inside_mark += "<tool_call>" not in raw and one is not None
            chunks = stream_chunks(server, request)
            streamed, _ = assemble(chunks)
            text = "".join(c["delta"].get("content") or "" for chunk in chunks for c in chunk["choices"])
            assert text == "" and [{"name": c["name"], "arguments": c["arguments"]} for c in streamed] == calls
            assert [c["finish_reason"] for chunk in chunks for c in chunk["choices"] if c["finish_reason"]] == [
                "length"]
            responses = {"input": MESSAGES[0]["content"],
                         "tools": [dict(t["function"], type="function") for t in tools], "tool_choice": "auto", "temperature": 0, "logit_bias": {"63": 100, "504": 100},
                         "max_output_tokens": max_tokens, "store": False,
                         "text": {"format": {"type": "json_schema", "name": "answer", "schema": schema}}}
            response = json.loads(post(server, "/v1/responses", responses))
            assert response["status"] == "incomplete", response
            assert [(i["name"], i["arguments"]) for i in response["output"] if i["type"] == "function_call"] == [
                (c["name"], c["arguments"]) for c in calls], response["output"]
            texts = [part["text"] for i in response["output"] if i["type"] == "message" for part in i["content"]]
            assert all("<" not in t for t in texts), response["output"]
            if not calls:  # the call left out and nothing written: no message item (was one holding "")
                assert texts == [], response["output"]
            events = post(server, "/v1/responses", dict(responses, stream=True))
            if not calls:
                assert '"type":"message"' not in events.replace(" ", ""), events
            assert "tool_call" not in "".join(
                json.loads(line[6:]).get("delta", "") for line in events.split("\n")
                if line.startswith("data: ") and "output_text.delta" in line), events
    # Cuts after the whole mark, before the name: both tool sets reached them; inside the mark: the one tool's.
    assert before_name >= 2 and inside_mark >= 1, (before_name, inside_mark)


def test_llama3_json_stays_the_json_and_a_name_two_tools_begin_is_left_out(start_serve, stories260k_path):
    # Served with --tool-call-format llama3, whose calls have no mark ({"name": ..., "parameters": {...}}):
    # under tools and "auto" beside a JSON response_format whose first key is "name", the JSON answer ('A'
    # favoured: "Ada", no tool's name) was read as a call named "A" ... "Ada" (or left out, the content lost);
    # it is the JSON, whole and cut, streamed or not. And a forced call cut inside its name where the part
    # written begins two tools' names ("sea" of seat and search) is left out as ambiguous, the answer "length".
    server = start_serve(stories260k_path, "--policy", "patch:16:exact", "--tool-call-format", "llama3")
    schema = {"type": "object", "properties": {"name": {"enum": ["Ada"]}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}}
    base = {"messages": MESSAGES, "tools": SEARCH, "tool_choice": "auto", "response_format": fmt,
            "temperature": 0, "logit_bias": {str(3 + ord("A")): 100}, "logprobs": True}
    cut = 0
    for max_tokens in (6, 9, 12, 15, 60):
        request = dict(base, max_tokens=max_tokens)
        whole = json.loads(post(server, "/v1/chat/completions", request))["choices"][0]
        raw = "".join(e["token"] for e in whole["logprobs"]["content"])
        context = (max_tokens, raw, whole)
        if '"A' not in raw:
            continue  # before the name: a call or the JSON
        assert not whole["message"].get("tool_calls") and whole["message"]["content"] == raw.strip(), context
        assert whole["finish_reason"] == ("length" if max_tokens < 60 else "stop"), context
        cut += whole["finish_reason"] == "length"
        chunks = stream_chunks(server, request)
        text = "".join(c["delta"].get("content") or "" for chunk in chunks for c in chunk["choices"])
        assert text.strip() == raw.strip() and assemble(chunks)[0] == [], (context, chunks)
    assert cut >= 2, cut
    seat = {"type": "function", "function": {"name": "seat", "parameters": {"type": "object", "properties": {}}}}
    forced = {"messages": MESSAGES, "tools": SEARCH + [seat], "tool_choice": "required", "temperature": 0,
              "logit_bias": {str(3 + ord("r")): 100}, "logprobs": True}
    ambiguous = 0
    for max_tokens in range(1, 16):
        whole = json.loads(post(server, "/v1/chat/completions", dict(forced, max_tokens=max_tokens)))["choices"][0]
        raw = "".join(e["token"] for e in whole["logprobs"]["content"])
        name = raw.partition('"name": "')[2]
        if not name or '"' in name or not "sea".startswith(name):
            continue  # not cut inside the part both names share
        assert whole["finish_reason"] == "length" and not whole["message"].get("tool_calls"), (max_tokens, raw, whole)
        assert not whole["message"]["content"], (max_tokens, raw, whole)
        ambiguous += 1
    assert ambiguous >= 1, ambiguous

