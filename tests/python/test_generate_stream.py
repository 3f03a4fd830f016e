"""Streaming and stop strings from Python on the bundled stories260K: Window.generate(stop=..., on_text=...) and
Window.stream (GenerationStream). The pieces join to Generation.text; a stop string cuts the text right before
it, also where it spans tokens and the bytes of one character (stories260K spells 'é' with two byte tokens);
returning False, breaking out of a stream and an exception in the callback cancel the decode and leave the
window answering as before; a call on the window from a stream's loop raises at once naming the call (close()
stops the stream instead); bad stop values raise naming `stop`; streaming decodes what generate decodes."""
import re
import threading

import pytest

pytestmark = pytest.mark.xdist_group("test_generate_stream")

C3, A9 = 3 + 0xC3, 3 + 0xA9  # stories260K's byte tokens <0xC3> <0xA9>: 'é' in UTF-8
AT = 294  # 'at'
# Biases (and a frequency penalty) that make the greedy answer 'at' x 8, 'é' x 2, 'at' x 2, 'é': the model's
# own logits decide the order, found once by a search over biases (each value in the middle of a range of
# biases that give the same answer).
ACCENTS = dict(max_tokens=16, logit_bias={C3: 98.5, A9: 100.0, AT: 96.5}, frequency_penalty=2.0)
ACCENT_TEXT = "at" * 8 + "éé" + "at" * 2 + "é"


@pytest.fixture(scope="module")
def story(orbit, stories260k_path):
    engine = orbit.Engine(str(stories260k_path), pool_bytes=16 << 20)
    window = engine.new_window()
    window.add_turn(engine.tokenize("Once upon a time, there was a little girl.", True))
    yield engine, window, engine.tokenize(" She", False)
    engine.close()


def streamed(window, query, **kwargs):
    pieces = []
    g = window.generate(query, on_text=pieces.append, **kwargs)
    return g, pieces


def test_the_pieces_join_to_the_text(story):
    engine, window, query = story
    plain = window.generate(query, max_tokens=60)
    g, pieces = streamed(window, query, max_tokens=60)
    assert list(g.tokens) == list(plain.tokens) and g.stop_reason == plain.stop_reason == "max_tokens"
    assert "".join(pieces) == g.text == plain.text
    assert len(pieces) > 20 and all(pieces)
    # A stop token ends the run: its text (if any) comes in the last piece.
    stop = plain.tokens[10]
    g, pieces = streamed(window, query, max_tokens=60, stop_tokens=[stop])
    assert g.stop_reason == "stop_token" and g.tokens[-1] == stop
    assert "".join(pieces) == g.text == engine.detokenize(list(g.tokens), query[-1])
    # Text queries stream too; on_text may return True or None to go on.
    g = window.generate("She", max_tokens=12, on_text=lambda piece: True)
    assert g.stop_reason == "max_tokens" and len(g.tokens) == 12


def test_a_stop_string_cuts_the_text_right_before_it(story):
    engine, window, query = story
    plain = window.generate(query, max_tokens=60)
    assert plain.text.startswith(" loved to play with her toys")
    # "ove" spans the tokens " lo" and "ved"; "play" is a token of its own; "her toys" spans three tokens.
    for stop, before in [("ove", " l"), ("play", " loved to "), ("her toys", " loved to play with ")]:
        g, pieces = streamed(window, query, max_tokens=60, stop=stop)
        assert g.stop_reason == "stop_string" and g.text == before, stop
        assert "".join(pieces) == before
        # The tokens run to the one that completed the stop string, and no further.
        assert list(g.tokens) == list(plain.tokens[:len(g.tokens)])
        assert stop in engine.detokenize(list(g.tokens), query[-1])
        assert stop not in engine.detokenize(list(g.tokens[:-1]), query[-1])
        # The token completing it is a stop token too: the stop string's cut applies, and its reason is given.
        both, pieces = streamed(window, query, max_tokens=60, stop=stop, stop_tokens=[g.tokens[-1]])
        assert both.stop_reason == "stop_string" and both.text == before and "".join(pieces) == before, stop
        assert list(both.tokens) == list(g.tokens)
    # Several: the first occurrence of any of them; one that never occurs changes nothing.
    g = window.generate(query, max_tokens=60, stop=["park", "toys", "zebra"])
    assert g.text == " loved to play with her " and g.stop_reason == "stop_string"
    g = window.generate(query, max_tokens=60, stop=("zebra",))
    assert g.text == plain.text and g.stop_reason == "max_tokens"
    # A Generation read for tools or JSON is read from the cut text.
    assert window.generate(query, max_tokens=60, stop="toys", response_format="text").content == " loved to play with her "


def test_a_stop_string_across_a_multibyte_character(story):
    _, window, query = story
    g, pieces = streamed(window, query, **ACCENTS)
    assert g.text == ACCENT_TEXT and "".join(pieces) == ACCENT_TEXT
    assert "é" in pieces and "\ufffd" not in "".join(pieces)  # the lead byte waits for its continuation
    # 'éa' ends inside the token 'at' and starts with the two byte tokens of 'é'; 'té' starts inside 'at'.
    for stop, before in [("éa", "at" * 8 + "é"), ("té", "at" * 7 + "a"), ("é", "at" * 8), ("éé", "at" * 8)]:
        g, pieces = streamed(window, query, stop=stop, **ACCENTS)
        assert g.stop_reason == "stop_string" and g.text == before, stop
        assert "".join(pieces) == before and "\ufffd" not in before
    # max_tokens in the middle of 'é': the text (and the last piece) end with U+FFFD for its first byte.
    g, pieces = streamed(window, query, **dict(ACCENTS, max_tokens=17))
    assert g.tokens[-1] == C3 and g.text == ACCENT_TEXT + "\ufffd" == "".join(pieces)


def test_returning_false_cancels(story):
    _, window, query = story
    plain = window.generate(query, max_tokens=60)
    got = []

    def two_pieces(piece):
        got.append(piece)
        return len(got) < 2

    g = window.generate(query, max_tokens=60, on_text=two_pieces)
    assert g.stop_reason == "cancelled" and len(got) == 2
    assert g.text.startswith("".join(got)) and list(g.tokens) == list(plain.tokens[:len(g.tokens)])
    assert len(g.tokens) <= 4
    assert window.generate(query, max_tokens=60).text == plain.text


def test_an_exception_in_the_callback_propagates_and_the_window_answers_the_same(orbit, story):
    _, window, query = story
    plain = window.generate(query, max_tokens=40)
    calls = []

    def fails(piece):
        calls.append(piece)
        if len(calls) == 3:
            raise ZeroDivisionError("in on_text")

    with pytest.raises(ZeroDivisionError, match="in on_text"):
        window.generate(query, max_tokens=40, on_text=fails)
    assert len(calls) == 3  # no piece after the exception
    again = window.generate(query, max_tokens=40)
    assert list(again.tokens) == list(plain.tokens) and again.text == plain.text
    # The window cannot be used from its own callback (it would wait for itself): OrbitError, raised here.
    with pytest.raises(orbit.OrbitError, match="on_text must not use its window"):
        window.generate(query, max_tokens=8, on_text=lambda piece: window.generate(query, max_tokens=1))
    with pytest.raises(TypeError, match="on_text must be callable"):
        window.generate(query, max_tokens=8, on_text="print")
    assert window.generate(query, max_tokens=40).text == plain.text


def test_stream_yields_the_pieces_and_ends_with_the_generation(orbit, story):
    _, window, query = story
    plain = window.generate(query, max_tokens=60, stop="park")
    s = window.stream(query, max_tokens=60, stop="park")
    assert isinstance(s, orbit.GenerationStream) and s.generation is None
    pieces = list(s)
    assert "".join(pieces) == plain.text == s.generation.text
    assert s.generation.stop_reason == "stop_string" and list(s.generation.tokens) == list(plain.tokens)
    with pytest.raises(RuntimeError, match="once"):
        iter(s)


def test_breaking_out_of_a_stream_cancels_it(story):
    _, window, query = story
    plain = window.generate(query, max_tokens=60)
    s = window.stream(query, max_tokens=400)
    for i, _ in enumerate(s):
        if i == 2:
            break
    g = s.generation
    assert g is not None and g.stop_reason == "cancelled" and len(g.tokens) < 20
    assert list(g.tokens) == list(plain.tokens[:len(g.tokens)])
    # The window is free at once: the same answer as before.
    assert window.generate(query, max_tokens=60).text == plain.text
    # A loop over a stream not kept, and a stream closed by its context manager, end the same way.
    for _ in window.stream(query, max_tokens=400):
        break
    with window.stream(query, max_tokens=400) as s:
        next(iter(s))
    assert s.generation.stop_reason == "cancelled"
    with window.stream(query, max_tokens=400) as s:
        pass
    assert s.generation is None  # never started
    assert window.generate(query, max_tokens=60).text == plain.text


def test_a_stream_left_unread_does_not_hold_its_window(orbit, story, monkeypatch):
    # The decode runs a few pieces ahead of the reader, then waits; a reader that stops reading (an iterator
    # kept, the window called meanwhile from another thread) is waited for only READER_GONE_S, then the decode
    # runs to its end. The reader's own thread is still in the stream: its call raises at once.
    monkeypatch.setattr(orbit._stream, "READER_GONE_S", 0.2)
    _, window, query = story
    plain = window.generate(query, max_tokens=60)
    s = window.stream(query, max_tokens=60)
    it = iter(s)
    first = next(it)
    answers = []
    other = threading.Thread(target=lambda: answers.append(window.generate(query, max_tokens=60).text))
    other.start()
    other.join(60)
    assert not other.is_alive() and answers == [plain.text]  # waited for the stream, not forever
    with pytest.raises(orbit.OrbitError, match="Window.generate: .* inside its Window.stream loop"):
        window.generate(query, max_tokens=60)
    assert first + "".join(it) == plain.text and s.generation.stop_reason == "max_tokens"
    assert window.generate(query, max_tokens=60).text == plain.text  # the stream ended: the window answers


# Each call on the window from a Window.stream loop's body, by the name its error gives.
CALLS_IN_THE_LOOP = {
    "Window.add_turn": lambda orbit, w, q, ids: w.add_turn(q),
    "Window.evict": lambda orbit, w, q, ids: w.evict(ids[0]),
    "Window.generate": lambda orbit, w, q, ids: w.generate(q, max_tokens=2),
    "Window.generate_n": lambda orbit, w, q, ids: w.generate_n(q, 2, max_tokens=2),
    "Window.fork": lambda orbit, w, q, ids: w.fork(),
    "Window.instances": lambda orbit, w, q, ids: w.instances,
    "Window.__len__": lambda orbit, w, q, ids: len(w),
    "Window.logits": lambda orbit, w, q, ids: w.logits(q),
    "Window.stream": lambda orbit, w, q, ids: list(w.stream(q, max_tokens=2)),
    "orbit.generate_many": lambda orbit, w, q, ids: orbit.generate_many([(w, q)]),
}


@pytest.mark.parametrize("name", sorted(CALLS_IN_THE_LOOP))
def test_a_call_on_the_window_in_its_stream_loop_raises_at_once(orbit, story, name):
    # The stream's decode holds the window until it returns and waits for the loop: a call from the loop's body
    # raises at once naming it (it would wait for the whole answer), on every piece, the last one included; the
    # stream goes on unharmed and the window answers the call right after the loop, or after a break.
    _, window, query = story
    w = window.fork()
    ids = [i.id for i in w.instances]
    plain = w.generate(query, max_tokens=12)
    call = CALLS_IN_THE_LOOP[name]
    s = w.stream(query, max_tokens=12)
    pieces = []
    for piece in s:
        pieces.append(piece)
        with pytest.raises(orbit.OrbitError, match=re.escape(name) + r": .*(stream loop|loop's body)") as e:
            call(orbit, w, query, ids)
        assert "after the loop" in str(e.value)
    assert "".join(pieces) == plain.text and s.generation.stop_reason == "max_tokens" and len(pieces) > 1
    for _ in w.stream(query, max_tokens=400):
        break  # a stream left at its first piece: the window is free after the loop
    call(orbit, w, query, ids)
    w.close()


def test_repr_of_a_window_says_its_state_and_never_raises(orbit, story, stories260k_path):
    # A repr never raises nor carries an error message, and never waits on its own thread: in a stream loop's
    # body, in generate's on_text, once closed and once its engine closed it shows the id and one word (before,
    # the first two held the whole "Window.__repr__: window N is streaming ..." error text).
    _, window, query = story
    w = window.fork()
    streaming = [repr(w) for _ in w.stream(query, max_tokens=12)]
    assert len(streaming) > 1 and set(streaming) == {f"Window(id={w.id}, streaming)"}
    busy = []
    w.generate(query, max_tokens=3, on_text=lambda piece: busy.append(repr(w)))
    assert busy and set(busy) == {f"Window(id={w.id}, busy)"}
    assert re.fullmatch(rf"Window\(id={w.id}, instances=\d+, tokens=\d+, policy='[^']+'\)", repr(w))
    w.close()
    assert repr(w) == f"Window(id={w.id}, closed)"
    with orbit.Engine(str(stories260k_path), pool_bytes=8 << 20) as engine:
        orphan = engine.new_window()
    assert repr(orphan) == f"Window(id={orphan.id}, engine closed)"


def test_closing_the_window_in_its_stream_loop_stops_the_stream(orbit, story):
    _, window, query = story
    w = window.fork()
    s = w.stream(query, max_tokens=400)
    for _ in s:
        w.close()  # sets `closed` at once and stops the decode at its next token: the loop ends soon
    assert w.closed and s.generation.stop_reason == "cancelled" and len(s.generation.tokens) < 400
    with pytest.raises(orbit.OrbitError, match="is closed"):
        w.instances


def test_closing_a_stream_from_another_thread_stops_its_loop(orbit, story):
    # A Stop button: close() on another thread while the loop's thread waits in the stream for a piece (here the
    # decode waits for the window, busy with another thread's long call). close() raised ValueError "generator
    # already executing"; it now cancels the decode and returns once the loop ended.
    _, window, query = story
    w = window.fork()
    busy = threading.Thread(target=lambda: w.generate_n(query, 16, max_tokens=400, temperature=1.0, seed=1))
    busy.start()
    s = w.stream(query, max_tokens=400)
    read = []
    reader = threading.Thread(target=lambda: read.extend(s))
    reader.start()
    try:
        while s._pieces is None or not s._pieces().gi_running:  # the loop's thread waits in the stream
            threading.Event().wait(0.01)
        s.close()
        reader.join(timeout=120)
        assert not reader.is_alive()
        assert s.generation is not None and s.generation.stop_reason == "cancelled"
    finally:
        busy.join()
        w.close()


def test_a_stream_of_a_closed_window_or_engine_raises_when_it_is_made(orbit, story, stories260k_path):
    # It returned a stream whose first piece raised, naming Window.generate.
    _, window, query = story
    w = window.fork()
    w.close()
    with pytest.raises(orbit.OrbitError, match=f"^Window.stream: window {w.id} is closed$"):
        w.stream(query)
    engine = orbit.Engine(str(stories260k_path), pool_bytes=16 << 20)
    orphan = engine.new_window()
    engine.close()
    with pytest.raises(orbit.OrbitError, match="^Window.stream: engine is closed$"):
        orphan.stream([1, 2])


def test_an_exception_in_the_loop_cancels_the_stream(story):
    _, window, query = story
    plain = window.generate(query, max_tokens=60)
    s = window.stream(query, max_tokens=400)
    with pytest.raises(KeyError):
        for _ in s:
            raise KeyError("reader")
    assert s.generation.stop_reason == "cancelled"
    assert window.generate(query, max_tokens=60).text == plain.text


def test_stream_raises_generate_errors_when_it_is_made(orbit, story):
    _, window, query = story
    with pytest.raises(ValueError, match="stop"):
        window.stream(query, stop="")
    with pytest.raises(TypeError, match="on_text"):
        window.stream(query, on_text=print)
    with pytest.raises(orbit.OrbitError, match="temperature"):
        window.stream(query, temperature=-1.0)


# Arguments generate() refuses with its own error naming the argument: stream() raises the same when it is made.
BAD_ARGUMENTS = [
    ((None,), {}),  # no query
    (([600],), {}),  # a token outside stories260K's 512
    (([],), {}),
    ((" She",), {"seed": -1}),
    ((" She",), {"seed": 2**64}),
    ((" She",), {"seed": "1"}),
    ((" She",), {"top_p": 2.0}),
    ((" She",), {"max_tokens": True}),
    ((" She",), {"stop": [""]}),
    ((" She",), {"logit_bias": {9999: 1.0}}),
    ((" She",), {"top_logprobs": 3}),  # without logprobs
    ((" She",), {"tool_choice": "required"}),  # without tools
    ((" She",), {"constraint_trigger_block": ("<think>", "</think>")}),  # without a constraint
]


@pytest.mark.parametrize("args, kwargs", BAD_ARGUMENTS, ids=lambda v: repr(v))
def test_stream_refuses_what_generate_refuses_when_it_is_made(orbit, story, args, kwargs):
    # Not at the first piece: the call making the stream raises generate()'s own error (type and text).
    _, window, _ = story
    with pytest.raises(Exception) as generated:
        window.generate(*args, **kwargs)
    assert isinstance(generated.value, (TypeError, ValueError, orbit.OrbitError))
    with pytest.raises(type(generated.value)) as made:
        window.stream(*args, **kwargs)
    assert str(made.value) == str(generated.value)


def test_stream_names_an_argument_generate_takes_in_another_type_or_not_at_all(orbit, story):
    # generate() refuses these through pybind11 ("incompatible function arguments"); stream() names them.
    _, window, query = story
    with pytest.raises(TypeError, match=r"^stream: generate\(\) has no argument 'foo'$"):
        window.stream(query, foo=1)
    with pytest.raises(TypeError, match="^generate: temperature: expected float, got str$"):
        window.stream(query, temperature="hot")
    s = window.stream(query, max_tokens=3, temperature=1.0, seed=5, stop=["zz"])  # good arguments still stream
    assert "".join(s) == window.generate(query, max_tokens=3, temperature=1.0, seed=5, stop=["zz"]).text


def test_bad_stop_values_name_stop(orbit, story):
    _, window, query = story
    for stop, error, message in [
        ("", ValueError, "stop is an empty string"),
        (["a", ""], ValueError, r"stop\[1\] is an empty string"),
        (["a", "b", "c", "d", "e"], ValueError, "stop holds 5 strings; at most 4"),
        (5, TypeError, "stop must be a str, a list of str or None"),
        ([".", 5], TypeError, r"stop\[1\] must be a str"),
    ]:
        with pytest.raises(error, match=message):
            window.generate(query, max_tokens=4, stop=stop)
        with pytest.raises(error, match=message):
            window.generate_n(query, 2, max_tokens=4, stop=stop)
        with pytest.raises(error, match=message):
            orbit.generate_many([(window, query, {"max_tokens": 4, "stop": stop})])
    assert window.generate(query, max_tokens=4, stop=[]).stop_reason == "max_tokens"
    assert window.generate(query, max_tokens=60, stop=["a", "b", "c", "d"]).stop_reason == "stop_string"
    with pytest.raises(TypeError, match="on_text streams one answer"):
        window.generate_n(query, 2, on_text=print)
    with pytest.raises(TypeError, match="on_text streams one answer"):
        orbit.generate_many([(window, query, {"on_text": print})])


def test_generate_n_and_generate_many_take_stop(orbit, story):
    _, window, query = story
    one = window.generate(query, max_tokens=60, temperature=0.9, seed=11, stop=["her", "."])
    answers = window.generate_n(query, 3, max_tokens=60, temperature=0.9, seed=11, stop=["her", "."])
    assert answers[0].text == one.text and list(answers[0].tokens) == list(one.tokens)
    for g in answers:
        assert g.stop_reason in ("stop_string", "max_tokens")
        assert "her" not in g.text and "." not in g.text
    many = orbit.generate_many([(window, query, {"max_tokens": 60, "stop": "toys"}), (window, query)])
    assert many[0].text == " loved to play with her " and many[0].stop_reason == "stop_string"
    assert many[1].stop_reason == "max_tokens"


@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(temperature=0.8, seed=7),
                                      dict(temperature=1.0, top_p=0.9, seed=3, stop=["."])])
def test_streaming_decodes_what_generate_decodes(story, sampling):
    _, window, query = story
    plain = window.generate(query, max_tokens=50, **sampling)
    g, pieces = streamed(window, query, max_tokens=50, **sampling)
    s = window.stream(query, max_tokens=50, **sampling)
    streamed_pieces = list(s)
    for other in (g, s.generation):
        assert list(other.tokens) == list(plain.tokens) and other.text == plain.text
        assert other.stop_reason == plain.stop_reason
    assert "".join(pieces) == "".join(streamed_pieces) == plain.text


def test_tool_calls_stream_as_raw_text(story):
    engine, _, _ = story
    tools = [{"type": "function", "function": {"name": "read_page", "description": "Read a page.",
                                               "parameters": {"type": "object",
                                                              "properties": {"page": {"type": "integer"}},
                                                              "required": ["page"]}}}]
    window = engine.new_window()
    report = window.sync([{"role": "user", "content": "Read the book."}], tools=tools)
    kwargs = dict(tools=tools, tool_choice="required", max_tokens=80)
    plain = window.generate(report.generation_prompt, **kwargs)
    s = window.stream(report.generation_prompt, **kwargs)
    text = "".join(s)
    assert text == plain.text and "<tool_call>" in text  # the call's markup, as the model wrote it
    assert len(plain.tool_calls) == 1  # ids are fresh per answer: the calls are compared without them
    assert [c["function"] for c in s.generation.tool_calls] == [c["function"] for c in plain.tool_calls]
    assert s.generation.content == ""
    window.close()


def test_the_stream_chat_example(orbit, stories260k_path, repo_root):
    import importlib.util
    import io

    path = repo_root / "bindings" / "python" / "examples" / "stream_chat.py"
    spec = importlib.util.spec_from_file_location("stream_chat", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = io.StringIO()
    with orbit.Engine(str(stories260k_path)) as engine:
        messages = example.chat(engine, max_words=3, out=out)
    answers = [m["content"] for m in messages if m["role"] == "assistant"]
    assert len(answers) == 3 and all(answers)
    assert all(len(a.split()) <= 4 for a in answers)  # the reader stopped at 3 words (a piece may hold two)
    assert "cancelled" in out.getvalue() and out.getvalue().count("assistant:") == 3
