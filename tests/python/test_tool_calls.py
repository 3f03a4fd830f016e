"""Tool calls and JSON answers from Python on the bundled stories260K (a story model whose byte tokens spell
any JSON): a tool loop through Window.sync(messages, tools=...) and Window.generate(..., tools=...,
tool_choice=...), whose calls come back ready to append; JSON answers under a schema; parse_tool_calls and
Engine.tool_call_format; refusals naming the argument."""
import json

import pytest

TOOLS = [{"type": "function", "function": {"name": "read_page", "description": "Read a page of the book.",
                                           "parameters": {"type": "object", "properties": {"page": {"type": "integer"}},
                                                          "required": ["page"]}}}]
PAGES = ["Tom saw a dog.", "The dog ran.", "Tom ran too.", "They found a ball.", "Then they went home."]


@pytest.fixture
def engine(orbit, stories260k_path):
    return orbit.Engine(str(stories260k_path), pool_bytes=32 << 20)


def test_a_tool_loop_in_python(engine):
    window = engine.new_window()
    first = {"role": "user", "content": "Read the book."}
    last = []
    pages = []
    for step in range(5):
        report = window.sync([first, *last], tools=TOOLS)
        g = window.generate(report.generation_prompt, tools=TOOLS, tool_choice="required", max_tokens=80)
        assert len(g.tool_calls) == 1, g.text
        call = g.tool_calls[0]
        assert call["type"] == "function" and call["function"]["name"] == "read_page"
        assert call["id"].startswith("call_")
        page = json.loads(call["function"]["arguments"])["page"]
        assert isinstance(page, int)
        assert g.content == ""
        pages.append(page)
        result = f"Page {page}: {PAGES[abs(page) % len(PAGES)]}"
        # The call goes back as the assistant message that made it (the sliding window keeps the task and it).
        last = [{"role": "assistant", "content": "", "tool_calls": g.tool_calls},
                {"role": "tool", "tool_call_id": call["id"], "content": result}]
        if step > 0:
            assert report.plan.count(engine_module_sync_action(engine, "keep")) >= 1
    assert len(pages) == 5
    # tool_choice "none": text, no call read.
    report = window.sync([first, *last], tools=TOOLS)
    g = window.generate(report.generation_prompt, tools=TOOLS, tool_choice="none", max_tokens=8)
    assert g.tool_calls == [] and g.content == g.text


def engine_module_sync_action(engine, name):
    import orbit
    return getattr(orbit.SyncAction, name)


def test_json_answers_under_a_schema(engine):
    window = engine.new_window()
    window.sync([{"role": "user", "content": "Name a book."}])
    prompt = engine.tokenize("assistant:", False)
    schema = {"type": "object", "properties": {"title": {"type": "string", "maxLength": 12}, "pages": {"type": "integer"}},
              "required": ["title", "pages"]}
    for fmt in (schema, {"type": "json_schema", "json_schema": {"name": "book", "schema": schema}}):
        g = window.generate(prompt, response_format=fmt, max_tokens=64)
        assert isinstance(g.json, dict), g.text
        assert isinstance(g.json["title"], str) and isinstance(g.json["pages"], int)
    g = window.generate(prompt, response_format="json_object", max_tokens=48)
    assert isinstance(g.json, dict), g.text
    plain = window.generate(prompt, max_tokens=4)
    assert plain.json is None and plain.tool_calls == []


def test_tools_under_auto_with_a_json_answer_call_or_answer(engine):
    """Tools under tool_choice 'auto' with a response_format (an agent with a structured final answer): the
    answer is a call or the JSON, both decoded from the first byte. stories260K's tokens for '<' (its byte
    token, 3 + the byte, and 504) pick which: favoured, a call; banned, the JSON."""
    window = engine.new_window()
    report = window.sync([{"role": "user", "content": "Read the book."}], tools=TOOLS)
    schema = {"type": "object", "properties": {"title": {"type": "string", "maxLength": 12}}, "required": ["title"]}
    lt = 3 + ord("<")
    called = window.generate(report.generation_prompt, tools=TOOLS, tool_choice="auto", response_format=schema,
                             max_tokens=80, logit_bias={lt: 100, 504: 100})
    assert len(called.tool_calls) == 1 and called.json is None, called.text
    assert isinstance(json.loads(called.tool_calls[0]["function"]["arguments"])["page"], int)
    answered = window.generate(report.generation_prompt, tools=TOOLS, tool_choice="auto", response_format=schema,
                               max_tokens=80, logit_bias={lt: -100, 504: -100})
    assert answered.tool_calls == [] and isinstance(answered.json, dict), answered.text
    assert isinstance(answered.json["title"], str)


def test_parse_and_refusals(orbit, engine):
    r = orbit.parse_tool_calls('Sure. <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>')
    assert r["content"] == "Sure." and r["tool_calls"][0]["function"]["name"] == "f" and not r["malformed"]
    assert json.loads(r["tool_calls"][0]["function"]["arguments"]) == {"x": 1}
    assert orbit.parse_tool_calls("[TOOL_CALLS] [{\"name\": \"g\", \"arguments\": {}}]", "mistral")["tool_calls"]
    assert engine.tool_call_format() == "hermes"
    window = engine.new_window()
    window.add_turn(engine.tokenize("Tom", True))
    with pytest.raises(orbit.OrbitError, match="'uniqueItems' is not supported"):
        window.generate([1], response_format={"type": "array", "uniqueItems": True})
    with pytest.raises(orbit.OrbitError, match="lookbehind is not supported at character 1"):
        window.generate([1], response_format={"type": "string", "pattern": "(?<=a)b"})
    with pytest.raises(ValueError, match="tool_choice = 'required' needs tools"):
        window.generate([1], tool_choice="required")
    with pytest.raises(orbit.OrbitError, match="not a tool call format"):
        orbit.parse_tool_calls("x", "qwen")
    # Arguments that would say nothing without tools are refused, not ignored.
    with pytest.raises(ValueError, match="tool_call_format = llama3 needs tools"):
        window.generate([1], tool_call_format="llama3")
    with pytest.raises(orbit.OrbitError, match="tools = '' is not a JSON array"):
        window.generate([1], tools="")
    for bad in ("[bad", '{"type": "function"}'):
        with pytest.raises(orbit.OrbitError, match="generate: tools is not a JSON array"):
            window.generate([1], tools=bad, tool_choice="auto")


def test_tool_choice_takes_openais_forms(orbit, engine):
    # OpenAI's tool_choice may be absent (None: "auto") or {"type": "function", "function": {"name": ...}}; both
    # raised pybind11's bare "Unable to cast Python instance" before. The dict names a tool even when the tool
    # is called like a mode.
    tools = TOOLS + [{"type": "function", "function": {"name": "auto", "parameters": {"type": "object"}}}]
    window = engine.new_window()
    report = window.sync([{"role": "user", "content": "Read page 2."}], tools=tools)
    prompt = report.generation_prompt
    assert window.generate([1], tool_choice=None, max_tokens=4).text == window.generate([1], max_tokens=4).text
    free = window.generate(prompt, tools=tools, tool_choice=None, max_tokens=12)
    assert free.tokens == window.generate(prompt, tools=tools, tool_choice="auto", max_tokens=12).tokens
    for name in ("read_page", "auto"):
        named = window.generate(prompt, tools=tools, tool_choice={"type": "function", "function": {"name": name}},
                                max_tokens=80)
        assert [c["function"]["name"] for c in named.tool_calls] == [name], named.text
    forced = window.generate(prompt, tools=tools, tool_choice={"function": {"name": "read_page"}}, max_tokens=80)
    assert forced.tokens == window.generate(prompt, tools=tools, tool_choice="read_page", max_tokens=80).tokens
    with pytest.raises(ValueError, match="tool_choice = 'read_page' needs tools"):
        window.generate([1], tool_choice={"type": "function", "function": {"name": "read_page"}})
    with pytest.raises(ValueError, match="'nope' is not among the tools"):
        window.generate(prompt, tools=tools, tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(ValueError, match="tool_choice.type = 'custom'"):
        window.generate(prompt, tools=tools, tool_choice={"type": "custom", "function": {"name": "auto"}})
    with pytest.raises(ValueError, match="tool_choice.function is missing"):
        window.generate(prompt, tools=tools, tool_choice={"type": "function"})
    with pytest.raises(ValueError, match="tool_choice.function.name is missing"):
        window.generate(prompt, tools=tools, tool_choice={"type": "function", "function": {}})
    with pytest.raises(TypeError, match="generate: tool_choice must be .* got int"):
        window.generate(prompt, tools=tools, tool_choice=1)
    # The same through generate_many's options.
    [many] = orbit.generate_many([(window, prompt, {"tools": tools, "max_tokens": 80,
                                                    "tool_choice": {"type": "function", "function": {"name": "auto"}}})])
    assert [c["function"]["name"] for c in many.tool_calls] == ["auto"]


def test_response_format_json_schema_needs_its_dict(orbit, engine):
    # {"type": "json_schema"} without a json_schema dict was read as a schema of JSON type "json_schema", and a
    # json_schema that is not a dict raised "dictionary update sequence element #0 ...".
    window = engine.new_window()
    window.add_turn(engine.tokenize("Tom", True))
    for bad in ({"type": "json_schema"}, {"type": "json_schema", "json_schema": "x"}):
        with pytest.raises(ValueError, match="response_format.json_schema is missing or not a dict"):
            window.generate([1], response_format=bad)
    with pytest.raises(orbit.OrbitError, match="response_format.json_schema.schema is missing"):
        window.generate([1], response_format={"type": "json_schema", "json_schema": {"name": "x"}})


def test_auto_leaves_text_that_starts_no_call_as_it_was(engine):
    """Under tool_choice 'auto' the tools' grammar applies only from a '<tool_call>' the model writes: a story
    model writes none, so its answer is the one it gives without tools, token for token, sampled or not."""
    window = engine.new_window()
    report = window.sync([{"role": "user", "content": "Tell me a story about a dog."}], tools=TOOLS)
    for temperature, seed in ((0.0, 0), (0.9, 7)):
        plain = window.generate(report.generation_prompt, max_tokens=48, temperature=temperature, seed=seed)
        auto = window.generate(report.generation_prompt, tools=TOOLS, tool_choice="auto", max_tokens=48,
                               temperature=temperature, seed=seed)
        assert "<tool_call>" not in plain.text
        assert auto.tokens == plain.tokens and auto.text == plain.text
        assert auto.tool_calls == [] and auto.content == plain.text.strip()


def test_an_answer_the_vocabulary_cannot_write_is_refused_or_left_free(orbit, models_dir):
    # tinystories-656k's tokenizer has no token for '~', '{' or the first byte of '€': an answer that needs one
    # is refused before the run, naming the byte, where it is asked for (response_format, a forced call); under
    # tool_choice "auto" the tools' grammar is left out and the answer is free text, as without tools.
    engine = orbit.Engine(str(models_dir / "tinystories-656k"), pool_bytes=32 << 20)
    window = engine.new_window()
    window.sync([{"role": "user", "content": "Once"}])
    prompt = engine.tokenize(" upon", False)
    with pytest.raises(orbit.OrbitError, match=r"response_format: the answer cannot be written: .*'~' \(0x7E\)"):
        window.generate(prompt, response_format={"type": "string", "pattern": "^~+$"}, max_tokens=4)
    with pytest.raises(orbit.OrbitError, match=r"response_format: .*0xE2"):
        window.generate(prompt, response_format={"const": "€"}, max_tokens=4)
    tilde = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"s": {"const": "~"}}, "required": ["s"]}}}]
    with pytest.raises(orbit.OrbitError, match=r"response_format: .*'\{' \(0x7B\)"):
        window.generate(prompt, response_format="json_object", max_tokens=4)
    with pytest.raises(orbit.OrbitError, match=r"tool_choice = 'required': the call cannot be written"):
        window.generate(prompt, tools=tilde, tool_choice="required", max_tokens=4)
    free = window.generate(prompt, max_tokens=6)
    auto = window.generate(prompt, tools=tilde, tool_choice="auto", max_tokens=6)
    assert auto.tokens == free.tokens
    # An answer it can write is not refused.
    ok = window.generate(prompt, response_format={"type": "integer"}, max_tokens=6)
    assert ok.json is not None and isinstance(ok.json, int), ok.text


def test_answers_follow_each_calls_own_tools_and_format(engine):
    # generate keeps what it compiled per engine and arguments: each call still gets its own tools, choice and
    # response_format, whatever came before (and the same arguments give the same answer).
    window = engine.new_window()
    window.sync([{"role": "user", "content": "Read the book."}])
    prompt = engine.tokenize("assistant:", False)

    def tool(name):
        return [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}]

    names = []
    for name in ("look", "jump", "look", "jump"):
        g = window.generate(prompt, tools=tool(name), tool_choice="required", max_tokens=120)
        assert len(g.tool_calls) == 1, g.text
        names.append(g.tool_calls[0]["function"]["name"])
    assert names == ["look", "jump", "look", "jump"]
    first = window.generate(prompt, response_format={"type": "integer"}, max_tokens=8)
    assert isinstance(first.json, int), first.text
    assert window.generate(prompt, response_format={"type": "integer"}, max_tokens=8).tokens == first.tokens
    assert window.generate(prompt, response_format={"type": "boolean"}, max_tokens=8).json in (True, False)
    assert window.generate(prompt, max_tokens=4).json is None


def test_a_call_max_tokens_cuts_is_the_call_so_far(orbit, engine):
    text = 'Sure. <tool_call>{"name": "read_page", "arguments": {"page": 1'
    kept = orbit.parse_tool_calls(text)
    assert kept["tool_calls"] == [] and kept["malformed"] and not kept["cut"] and kept["content"] == text
    cut = orbit.parse_tool_calls(text, cut=True)
    assert cut["cut"] and not cut["malformed"] and cut["content"] == "Sure."
    assert cut["tool_calls"][0]["function"] == {"name": "read_page", "arguments": '{"page":1'}
    # A forced call whose budget cannot hold the shortest call is cut: the call so far, flagged, wherever the cut
    # fell (inside the "<tool_call>" mark, before the name: no name or arguments yet), the content empty.
    window = engine.new_window()
    report = window.sync([{"role": "user", "content": "Read the book."}], tools=TOOLS)
    whole = window.generate(report.generation_prompt, tools=TOOLS, tool_choice="required", max_tokens=80)
    assert not whole.tool_call_cut and len(whole.tool_calls) == 1
    seen_cut = None
    for choice in ("required", "read_page"):
        for budget in range(1, len(whole.tokens)):
            g = window.generate(report.generation_prompt, tools=TOOLS, tool_choice=choice, max_tokens=budget)
            if g.stop_reason != "max_tokens":
                continue
            assert g.tool_call_cut and len(g.tool_calls) == 1 and g.content == "", (choice, g.text)
            assert g.tool_calls[0]["function"]["name"] == "read_page"[:len(g.tool_calls[0]["function"]["name"])]
            assert whole.tool_calls[0]["function"]["arguments"].startswith(g.tool_calls[0]["function"]["arguments"])
            seen_cut = g
    assert seen_cut is not None
    # Cut inside the mark, the call is the one tool it can still become, as orbit serve answers it.
    inside_mark = window.generate(report.generation_prompt, tools=TOOLS, tool_choice="read_page", max_tokens=9)
    assert inside_mark.text == "<tool_cal" and inside_mark.tool_call_cut and inside_mark.content == ""
    assert inside_mark.tool_calls[0]["function"] == {"name": "read_page", "arguments": ""}
    # Nothing decoded is no call.
    nothing = window.generate(report.generation_prompt, tools=TOOLS, tool_choice="read_page", max_tokens=0)
    assert nothing.tool_calls == [] and not nothing.tool_call_cut
    g = seen_cut
    # Sent back in the history as a client would, it renders (as text) and the loop goes on.
    report = window.sync([{"role": "user", "content": "Read the book."},
                          {"role": "assistant", "content": "", "tool_calls": g.tool_calls},
                          {"role": "tool", "tool_call_id": g.tool_calls[0]["id"], "content": "bad arguments"}],
                         tools=TOOLS)
    again = window.generate(report.generation_prompt, tools=TOOLS, tool_choice="required", max_tokens=80)
    assert len(again.tool_calls) == 1 and not again.tool_call_cut


def test_a_cut_call_is_settled_as_orbit_serve_settles_it(engine):
    """An answer max_tokens cuts inside a call (orbit::read_answer_calls, as orbit serve reads it): under 'auto'
    beside a JSON response_format (a call or the JSON from the first byte; '<' favoured: a call), a cut inside
    the call's mark or before its name leaves no markup in content: the call is the one tool's (arguments '',
    tool_call_cut), or, where two tools could be meant, left out; a cut inside the name is the one tool the
    written part begins, else left out. A forced call under two tools cut before its name is left out too.
    Python's generate left such markup as content ('<', '<tool_call>{"name": "') and such names as written."""
    import re
    schema = {"type": "object", "properties": {"title": {"type": "string", "maxLength": 12}}, "required": ["title"]}
    note = {"type": "function", "function": {"name": "read_note", "parameters": {
        "type": "object", "properties": {"page": {"type": "integer"}}, "required": ["page"]}}}
    lt = 3 + ord("<")
    seen = set()
    for tools in (TOOLS, TOOLS + [note]):
        names = [t["function"]["name"] for t in tools]
        window = engine.new_window()
        prompt = window.sync([{"role": "user", "content": "Read the book."}], tools=tools).generation_prompt
        for max_tokens in range(1, 24):
            g = window.generate(prompt, tools=tools, tool_choice="auto", response_format=schema, max_tokens=max_tokens,
                                logit_bias={lt: 100, 504: 100})
            context = (names, max_tokens, g.text, g.content, g.tool_calls)
            if g.stop_reason != "max_tokens" or not g.text.startswith("<"):
                continue  # whole: a call, or the JSON where max_tokens holds it and not the shortest call
            assert g.content == "" and g.json is None, context
            name = re.search(r'"name":\s*"([^"]*)("?)', g.text)
            if name and name.group(2):
                continue  # the name is whole: the call as far as it was written
            written = name.group(1) if name else ""
            meant = [n for n in names if n.startswith(written)]
            calls = [c["function"] for c in g.tool_calls]
            assert calls == ([{"name": meant[0], "arguments": ""}] if len(meant) == 1 else []), context
            assert g.tool_call_cut == (len(meant) == 1), context
            seen.add(("inside the name" if written else "before the name", len(meant) == 1))
        forced = window.generate(prompt, tools=tools, tool_choice="required", max_tokens=9)
        assert forced.text.startswith("<tool_cal") and "read" not in forced.text, forced.text  # before the name
        assert forced.content == "" and forced.stop_reason == "max_tokens", forced.text
        assert [c["function"] for c in forced.tool_calls] == (
            [{"name": "read_page", "arguments": ""}] if len(tools) == 1 else []), forced.tool_calls
    # Cuts before the name (in the mark too), settled to the one tool and left out.
    assert {("before the name", True), ("before the name", False)} <= seen, seen


def test_a_llama3_json_answer_whose_first_key_is_name_stays_the_json(engine):
    """Llama 3's calls have no mark: {"name": a tool's name, "parameters": {...}}. Under tools and 'auto' beside a
    JSON response_format whose first key is "name" (decoded as a call or the JSON), the JSON answer ('A'
    favoured: the name "Ada", which no tool has) cut by max_tokens, or whole, was read as a call named "A",
    "Ada" (or left out, its content lost). It is the JSON: content as written, no call."""
    schema = {"type": "object", "properties": {"name": {"enum": ["Ada"]}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    window = engine.new_window()
    prompt = window.sync([{"role": "user", "content": "Who is she?"}], tools=TOOLS).generation_prompt

    def answer(max_tokens):
        return window.generate(prompt, tools=TOOLS, tool_choice="auto", response_format=schema,
                               tool_call_format="llama3", max_tokens=max_tokens, logit_bias={3 + ord("A"): 100})

    cut = 0
    for max_tokens in range(1, 24):
        g = answer(max_tokens)
        context = (max_tokens, g.text, g.content, g.tool_calls, g.stop_reason)
        if '"A' not in g.text:
            continue  # before the name: a call or the JSON
        assert g.tool_calls == [] and not g.tool_call_cut and g.content == g.text.strip(), context
        cut += g.stop_reason == "max_tokens"
    assert cut >= 3, cut
    whole = answer(60)
    assert whole.stop_reason != "max_tokens" and whole.tool_calls == [], whole.text
    assert whole.json["name"] == "Ada" and whole.content == whole.text.strip()


def test_a_cut_name_two_tools_begin_is_left_out(engine):
    """A forced call cut inside its name where the part written begins two tools' names (read_page and read_note
    after "read_") cannot say which was meant: it is left out (no call, not tool_call_cut), the content empty,
    the answer cut; once the part written begins one name only, it is that tool's call, arguments ''."""
    note = {"type": "function", "function": {"name": "read_note", "parameters": {
        "type": "object", "properties": {"page": {"type": "integer"}}, "required": ["page"]}}}
    tools = TOOLS + [note]
    window = engine.new_window()
    prompt = window.sync([{"role": "user", "content": "Read the book."}], tools=tools).generation_prompt
    seen = set()
    for max_tokens in range(1, 40):
        g = window.generate(prompt, tools=tools, tool_choice="required", max_tokens=max_tokens)
        name = g.text.partition('"name": "')[2]
        if g.stop_reason != "max_tokens" or not name or '"' in name:
            continue  # not cut inside the name
        meant = [t["function"]["name"] for t in tools if t["function"]["name"].startswith(name)]
        calls = [c["function"] for c in g.tool_calls]
        assert g.content == "", g.text
        assert calls == ([{"name": meant[0], "arguments": ""}] if len(meant) == 1 else []), (g.text, calls)
        assert g.tool_call_cut == (len(meant) == 1), g.text
        seen.add(len(meant))
    assert 2 in seen, seen  # "r" to "read_": left out


# zod's z.hostname() as zod-to-json-schema writes it: a lookahead bounds the length beside format hostname; its
# automaton takes over a hundred milliseconds to compile.
HOSTNAME = {"type": "string", "format": "hostname",
            "pattern": "^(?=.{1,253}\\.?$)[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
                       "(?:\\.[a-zA-Z0-9](?:[-0-9a-zA-Z]{0,61}[0-9a-zA-Z])?)*\\.?$"}


def test_a_schema_sent_again_is_not_compiled_again(orbit, engine):
    # Window.generate keeps what its arguments compile to in the engine's constraint cache: the same schema
    # again is a hit (no compile), another schema or another form of the argument is an entry of its own, and
    # the answer under the kept constraint is the one the first, compiling, call gave.
    window = engine.new_window()
    window.sync([{"role": "user", "content": "Name a host."}])
    prompt = engine.tokenize("assistant:", False)
    window.generate(prompt, max_tokens=2)  # free text: nothing compiled, nothing kept
    before = engine.stats.constraint_cache
    assert (before.entries, before.hits, before.misses) == (0, 0, 0)
    assert before.max_entries == 64 and before.max_bytes == 256 << 20

    first = window.generate(prompt, response_format=HOSTNAME, max_tokens=24)
    s = engine.stats.constraint_cache
    assert (s.entries, s.hits, s.misses) == (1, 0, 1)
    assert s.bytes > 0
    again = window.generate(prompt, response_format=HOSTNAME, max_tokens=24)
    s = engine.stats.constraint_cache
    assert (s.entries, s.hits, s.misses) == (1, 1, 1)
    assert again.tokens == first.tokens and again.text == first.text
    assert isinstance(first.json, str), first.text

    wrapped = {"type": "json_schema", "json_schema": {"name": "host", "schema": HOSTNAME}}
    window.generate(prompt, response_format=wrapped, max_tokens=24)
    window.generate(prompt, response_format={"type": "integer"}, max_tokens=8)
    s = engine.stats.constraint_cache
    assert (s.entries, s.hits, s.misses) == (3, 1, 3)
    # A refusal is not kept: it raises again, and compiles again.
    with pytest.raises(orbit.OrbitError, match="uniqueItems"):
        window.generate(prompt, response_format={"type": "array", "uniqueItems": True}, max_tokens=8)
    with pytest.raises(orbit.OrbitError, match="uniqueItems"):
        window.generate(prompt, response_format={"type": "array", "uniqueItems": True}, max_tokens=8)
    s = engine.stats.constraint_cache
    assert (s.entries, s.misses) == (3, 5)
    # Another engine's cache is its own: its first call compiles, and answers as this one did.
    other = orbit.Engine(engine.model_info.origin, pool_bytes=32 << 20)
    w2 = other.new_window()
    w2.sync([{"role": "user", "content": "Name a host."}])
    assert w2.generate(prompt, response_format=HOSTNAME, max_tokens=24).tokens == first.tokens
    assert other.stats.constraint_cache.misses == 1
    assert "ConstraintCacheStats(entries=1" in repr(other.stats.constraint_cache)


def test_the_constraint_cache_bounds_are_engine_options(orbit, stories260k_path):
    # Engine(constraint_cache=ConstraintCacheOptions(...)) bounds the engine's cache as C++'s
    # EngineOptions::constraint_cache does: past max_entries (or max_bytes) the least recently used go first.
    defaults = orbit.ConstraintCacheOptions()
    assert (defaults.max_entries, defaults.max_bytes) == (64, 256 << 20)
    small = orbit.Engine(str(stories260k_path), pool_bytes=32 << 20,
                         constraint_cache=orbit.ConstraintCacheOptions(max_entries=2))
    assert small.options.constraint_cache.max_entries == 2
    assert small.options.constraint_cache.max_bytes == 256 << 20
    window = small.new_window()
    window.sync([{"role": "user", "content": "Count."}])
    prompt = small.tokenize("assistant:", False)
    for schema in ({"type": "integer"}, {"type": "boolean"}, {"type": "null"}):
        window.generate(prompt, response_format=schema, max_tokens=4)
    s = small.stats.constraint_cache
    assert (s.entries, s.misses, s.max_entries) == (2, 3, 2)
    window.generate(prompt, response_format={"type": "integer"}, max_tokens=4)  # dropped: compiled again
    s = small.stats.constraint_cache
    assert (s.entries, s.hits, s.misses) == (2, 0, 4)

    # max_bytes 1: the entry just used stays, the others go.
    tight = orbit.Engine(str(stories260k_path), pool_bytes=32 << 20,
                         constraint_cache=orbit.ConstraintCacheOptions(max_bytes=1))
    w = tight.new_window()
    w.sync([{"role": "user", "content": "Count."}])
    for schema in ({"type": "integer"}, {"type": "boolean"}):
        w.generate(prompt, response_format=schema, max_tokens=4)
    s = tight.stats.constraint_cache
    assert (s.entries, s.max_bytes) == (1, 1)
    # max_entries 0 keeps nothing.
    none = orbit.Engine(str(stories260k_path), pool_bytes=32 << 20,
                        constraint_cache=orbit.ConstraintCacheOptions(max_entries=0))
    w = none.new_window()
    w.sync([{"role": "user", "content": "Count."}])
    w.generate(prompt, response_format={"type": "integer"}, max_tokens=4)
    assert none.stats.constraint_cache.entries == 0


def test_the_constraint_cache_bounds_refuse_what_cannot_be_a_size(orbit, stories260k_path):
    with pytest.raises(ValueError, match="max_entries = -1 must be >= 0"):
        orbit.ConstraintCacheOptions(max_entries=-1)
    with pytest.raises(ValueError, match="max_bytes = -5 must be >= 0"):
        orbit.ConstraintCacheOptions(max_bytes=-5)
    with pytest.raises(TypeError, match="constraint_cache: expected a ConstraintCacheOptions"):
        orbit.Engine(str(stories260k_path), constraint_cache={"max_entries": 2})
    assert "max_entries=3" in repr(orbit.ConstraintCacheOptions(max_entries=3))
