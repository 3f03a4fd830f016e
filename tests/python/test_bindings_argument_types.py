"""Float and typed arguments name the call and the argument: None, a str or a bool where a float is needed, or
anything but a Plan / a StepAction / a SyncAction where one is, raise TypeError saying what was expected, where
pybind11 answered "incompatible function arguments" with the whole signature (and read a bool as 1.0 or 0.0).
Values out of range name the keyword under the call made (generate_n's and generate_many's said generate's). And the C++ names the
SDK's messages use reach Python as its keywords and methods: a chunk forgotten past Engine(max_idle_chunks=N), not
EngineOptions::max_idle_chunks; sync's tools and extra, not ChatOptions::tools_json; Window.sync, not
Window::sync. The str arguments and the options structs' own calls are test_bindings_argument_names.py's.

Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python (see conftest.py).
"""
import json
import math
import re

import numpy as np
import pytest

TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"


@pytest.fixture(scope="module")
def engine(orbit, stories260k_path):
    with orbit.Engine(str(stories260k_path)) as e:
        yield e


@pytest.fixture
def window(engine):
    w = engine.new_window()
    w.add_turn([1, 2, 3])
    yield w
    w.close()


# Each float argument of the public calls, given `value` in its place.
FLOAT_ARGUMENTS = {
    "generate: temperature": lambda o, e, w, value: w.generate(" A", max_tokens=1, temperature=value),
    "generate: top_p": lambda o, e, w, value: w.generate(" A", max_tokens=1, top_p=value),
    "generate: presence_penalty": lambda o, e, w, value: w.generate(" A", max_tokens=1, presence_penalty=value),
    "generate: frequency_penalty": lambda o, e, w, value: w.generate(" A", max_tokens=1, frequency_penalty=value),
    "generate_n: temperature": lambda o, e, w, value: w.generate_n(" A", 2, max_tokens=1, temperature=value),
    "generate_n: top_p": lambda o, e, w, value: w.generate_n(" A", 2, max_tokens=1, top_p=value),
    "generate_many: requests[0]: presence_penalty":
        lambda o, e, w, value: o.generate_many([(w, " A", {"max_tokens": 1, "presence_penalty": value})]),
    "run_background: max_seconds": lambda o, e, w, value: e.run_background(value),
    "set_signal_interval: seconds": lambda o, e, w, value: o.set_signal_interval(value),
    "Engine: remote_max_held_fraction": lambda o, e, w, value: o.Engine(e.options.model, remote_max_held_fraction=value),
    # A bias was taken when isinstance(value, int): True as 1.0; a numpy float was refused. The call is named as the
    # call made (generate_n's and generate_many's said generate's).
    "generate: logit_bias[5]": lambda o, e, w, value: w.generate(" A", max_tokens=1, logit_bias={5: value}),
    "generate_n: logit_bias[5]": lambda o, e, w, value: w.generate_n(" A", 2, max_tokens=1, logit_bias={"5": value}),
    "generate_many: requests[0]: logit_bias[5]":
        lambda o, e, w, value: o.generate_many([(w, " A", {"max_tokens": 1, "logit_bias": {np.int64(5): value}})]),
    # WindowPolicy's float fields refused numpy.float32 ("expected a number, got float32").
    "WindowPolicy.kl_budget": lambda o, e, w, value: o.Policy(kl_budget=value),
    "WindowPolicy.recompute_ratio": lambda o, e, w, value: o.Policy().replace(recompute_ratio=value),
    "WindowPolicy.read_through": lambda o, e, w, value: setattr(o.Policy(), "read_through", value),
}


@pytest.mark.parametrize("what", sorted(FLOAT_ARGUMENTS))
def test_a_float_argument_given_another_type_names_it(orbit, engine, window, what):
    for value, type_name in [(None, "None"), ("0.5", "str"), (True, "bool"), (np.bool_(False), "bool"),
                             ([0.5], "list")]:
        with pytest.raises(TypeError, match=f"^{re.escape(what)}: expected float, got {type_name}$"):
            FLOAT_ARGUMENTS[what](orbit, engine, window, value)


def test_float_arguments_still_take_floats_ints_and_numpy_floats(orbit, engine, window):
    asked = window.generate(" A", max_tokens=6, temperature=0.75, top_p=0.5, seed=3, presence_penalty=1.0)
    assert window.generate(" A", max_tokens=6, temperature=np.float32(0.75), top_p=np.float16(0.5), seed=3,
                           presence_penalty=1).tokens == asked.tokens
    assert [g.tokens for g in window.generate_n(" A", 2, max_tokens=6, temperature=np.float64(0.75), top_p=0.5,
                                                  seed=3)][0] == window.generate(" A", max_tokens=6, temperature=0.75,
                                                                                 top_p=0.5, seed=3).tokens
    assert engine.run_background(0) >= 0 and engine.run_background(np.float64(0.5)) >= 0
    biased = window.generate(" A", max_tokens=3, logit_bias={9: 100.0}).tokens
    assert biased == [9, 9, 9]
    for bias in (100, np.float32(100), np.float64(100), np.int64(100)):
        assert window.generate(" A", max_tokens=3, logit_bias={9: bias}).tokens == biased
        assert window.generate_n(" A", 2, max_tokens=3, logit_bias={9: bias})[1].tokens == biased
        assert orbit.generate_many([(window, " A", {"max_tokens": 3, "logit_bias": {9: bias}})])[0].tokens == biased


def test_policy_float_fields_take_numpy_numbers(orbit):
    # numpy.float32 and numpy.int64 raised "WindowPolicy.<field>: expected a number, got float32" where every other
    # float argument takes them; numpy.float64 (a float subclass) passed. Checked field by field (a setter checks
    # the range alone; 0.5 and 1 are inside every float field's), then through Policy() and replace().
    fields = [name for name, value in vars(orbit.Policy).items() if isinstance(value, property)]
    floats = [f for f in fields if isinstance(getattr(orbit.Policy(), f), float)]
    assert {"max_divergence", "deep_energy", "recompute_ratio", "kl_budget", "read_through"} <= set(floats), floats
    for field in floats:
        for numpy_value in (np.float32(0.5), np.float64(0.5), np.float16(0.5), np.int64(1)):
            p = orbit.Policy()
            setattr(p, field, numpy_value)
            assert getattr(p, field) == float(numpy_value) and type(getattr(p, field)) is float, field
        with pytest.raises(TypeError, match=f"^WindowPolicy.{field}: expected float, got bool$"):
            setattr(p, field, np.bool_(True))
        with pytest.raises(ValueError, match=f"^WindowPolicy.{field} = -1 must be in "):
            setattr(p, field, np.float32(-1))
    made = orbit.Policy("patch:8", kl_budget=np.float32(0.25), heal_when_idle=True, heal_min_kl=np.float64(0.125),
                        read_attention_weight=np.float32(2), read_through=np.int32(0))
    assert made == orbit.Policy("patch:8", kl_budget=0.25, heal_when_idle=True, heal_min_kl=0.125,
                                read_attention_weight=2.0, read_through=0.0)
    assert made.replace(attention_weight=np.float32(0.5)).attention_weight == 0.5


def test_top_p_zero_is_the_top_token_alone(orbit, window):
    # As OpenAI takes it (it was refused as outside (0, 1]): the smallest set of tokens whose mass reaches 0 holds
    # the most probable one, so a draw at any temperature is the greedy answer.
    greedy = window.generate(" A", max_tokens=12).tokens
    for seed in (1, 2, 3):
        assert window.generate(" A", max_tokens=12, temperature=1.5, top_p=0, seed=seed).tokens == greedy


@pytest.mark.parametrize("kwargs, message", [
    ({"temperature": -0.5}, "temperature = -0.5 must be a finite number >= 0"),
    ({"temperature": math.inf}, "temperature = inf must be a finite number >= 0"),
    ({"top_p": -0.5}, "top_p = -0.5 must be in [0, 1]"),
    ({"top_p": 1.5}, "top_p = 1.5 must be in [0, 1]"),
    ({"top_p": math.nan}, "top_p = nan must be in [0, 1]"),
    ({"presence_penalty": 2.5}, "presence_penalty = 2.5 must be in [-2, 2]"),
    ({"frequency_penalty": -3}, "frequency_penalty = -3 must be in [-2, 2]"),
])
def test_a_value_out_of_range_names_the_keyword_under_the_call_made(orbit, window, kwargs, message):
    # generate_n's said "generate: temperature = -0.5 ...", where its type errors say "generate_n: temperature".
    for call, fn in [("generate", lambda: window.generate(" A", max_tokens=1, **kwargs)),
                     ("generate_n", lambda: window.generate_n(" A", 2, max_tokens=1, **kwargs))]:
        with pytest.raises(orbit.OrbitError) as e:
            fn()
        assert str(e.value) == f"{call}: {message}"
        assert e.value.source and ".cpp:" in e.value.source  # the SDK's check, its source kept
    # generate_many's said "generate_many: request 0: generate: temperature = ...", its type errors
    # "generate_many: requests[0]: temperature: ...".
    with pytest.raises(orbit.OrbitError) as e:
        orbit.generate_many([(window, " A", dict(kwargs, max_tokens=1))])
    assert str(e.value) == f"generate_many: requests[0]: {message}"
    token = orbit.CancelToken()
    token.cancel()  # answered without decoding, refused all the same: it said "generate: temperature = ..."
    with pytest.raises(orbit.OrbitError) as e:
        orbit.generate_many([(window, " B"), (window, " A", dict(kwargs, max_tokens=1, cancel=token))])
    assert str(e.value) == f"generate_many: requests[1]: {message}"


def test_apply_names_its_plan_argument(orbit, window):
    for value, type_name in [(None, "None"), ("plan", "str"), (window.plan_add_turn([4]).steps, "list")]:
        with pytest.raises(TypeError, match=f"^apply: plan: expected Plan, got {type_name}$"):
            window.apply(value)
    window.apply(window.plan_add_turn([4, 5]))  # a Plan still applies
    assert window.tokens == 5 and len(window.instances) == 2


def test_count_names_its_action_argument(orbit, engine, window):
    plan = window.plan_add_turn([4])
    for value, type_name in [(None, "None"), ("turn", "str"), (orbit.SyncAction.turn, "SyncAction")]:
        with pytest.raises(TypeError, match=f"^Plan.count: action: expected StepAction, got {type_name}$"):
            plan.count(value)
    assert plan.count(orbit.StepAction.keep) == 1
    sync_plan = engine.new_window().plan_sync([{"role": "user", "content": "hi"}], chat_template=TEMPLATE)
    for value, type_name in [(None, "None"), (orbit.StepAction.keep, "StepAction")]:
        with pytest.raises(TypeError, match=f"^SyncPlan.count: action: expected SyncAction, got {type_name}$"):
            sync_plan.count(value)
    assert sync_plan.count(orbit.SyncAction.turn) + sync_plan.count(orbit.SyncAction.admit) == len(sync_plan.units)


def python_message(orbit, call):
    with pytest.raises(orbit.OrbitError) as e:
        call()
    message = str(e.value)
    assert "::" not in message, message  # no C++ name
    assert e.value.reason == message
    return message


def test_a_chunk_forgotten_past_max_idle_chunks_names_the_engine_keyword(orbit, stories260k_path):
    # sync said "... (forgotten past EngineOptions::max_idle_chunks = 1 once no window held it, ...)" and
    # chunk(key) "... is forgotten past EngineOptions::max_idle_chunks: add it again".
    with orbit.Engine(str(stories260k_path), max_idle_chunks=1) as e:
        doc = e.add_tokens([5, 6, 7], label="doc")
        e.add_tokens([8, 9, 10])  # the one kept: doc is forgotten
        synced = python_message(orbit, lambda: e.new_window().sync([{"role": "user", "content": [doc]}],
                                                                    chat_template=TEMPLATE))
        assert "is not registered with this engine (forgotten past Engine(max_idle_chunks=1) once no window held it" \
            in synced, synced
        looked_up = python_message(orbit, lambda: e.chunk(doc.key))
        assert "a chunk no window holds is forgotten past Engine(max_idle_chunks=...): add it again" in looked_up, \
            looked_up


def test_text_without_a_tokenizer_names_the_engine_keyword(orbit, stories260k_path, tmp_path):
    # It said "... a Hugging Face directory's tokenizer.json, or EngineOptions::tokenizer; without one, ...".
    alone = tmp_path / "alone.bin"
    alone.write_bytes(stories260k_path.read_bytes())
    with orbit.Engine(alone) as e:
        message = python_message(orbit, lambda: e.tokenize("Once upon a time"))
        assert "or Engine(tokenizer=...); without one, give token ids" in message, message


def test_a_chunk_part_where_render_chat_takes_none_names_window_sync(orbit, engine):
    # It said "render_chat: messages[0].content[0] is a chunk part, ... (Window::sync and plan_sync place it)".
    chunk = engine.add_tokens([5, 6, 7])
    message = python_message(orbit, lambda: engine.render_chat([{"role": "user", "content": [chunk]}],
                                                                chat_template=TEMPLATE))
    assert message.endswith("is a chunk part, which has no text (Window.sync and plan_sync place it)"), message


@pytest.mark.parametrize("call", ["sync", "render_chat"])
def test_template_options_the_template_refuses_name_the_keywords(orbit, engine, call):
    # Python's json reads NaN, the template's JSON does not: the refusal said "sync: ChatOptions::tools_json:
    # ..." and "ChatOptions::extra_json"; a template that does not parse "ChatOptions::chat_template: ...".
    fn = engine.new_window().sync if call == "sync" else engine.render_chat
    messages = [{"role": "user", "content": "hi"}]
    tools = '[{"type": "function", "function": {"name": "f"}, "x": NaN}]'
    assert python_message(orbit, lambda: fn(messages, tools=tools, chat_template=TEMPLATE)).startswith(f"{call}: tools")
    assert python_message(orbit, lambda: fn(messages, extra='{"x": NaN}', chat_template=TEMPLATE)).startswith(
        f"{call}: extra")
    # The template's own error named no call ("chat_template: line 1: ..."): it is named as the call's others.
    assert python_message(orbit, lambda: fn(messages, chat_template="{% for m in messages %}")).startswith(
        f"{call}: chat_template: line 1: ")


def test_template_errors_name_the_call_made(orbit, engine):
    # A chat template that fails to parse or raises said "chat_template: line 1: ..." from every call, naming none
    # of them; each is now named as the call's other errors are ("sync: tools ...", "render_chat: extra ...").
    messages = [{"role": "user", "content": "hi"}]
    window = engine.new_window()
    calls = {"sync": window.sync, "plan_sync": window.plan_sync, "prepare_sync": window.prepare_sync,
             "render_chat": engine.render_chat, "tokenize_chat": engine.tokenize_chat}
    for name, call in calls.items():
        for template, error in [("{% if %}", "unexpected '%}' in an expression"),
                                ("{{ raise_exception('roles must alternate') }}",
                                 "the template raised an exception: roles must alternate")]:
            message = python_message(orbit, lambda: call(messages, chat_template=template))
            assert message == f"{name}: chat_template: line 1: {error}", message


def test_the_model_template_errors_name_the_call_made(orbit, models_dir, tmp_path):
    # The model's own template (tokenizer_config.json) raising, as Hugging Face templates do for a list they do not
    # take, said "<dir>/tokenizer_config.json (chat_template): line 1: ...": no call.
    model = tmp_path / "tinystories-strict"
    model.mkdir()
    for f in (models_dir / "tinystories-656k").iterdir():
        (model / f.name).symlink_to(f.resolve())
    config = json.loads((models_dir / "tinystories-656k" / "tokenizer_config.json").read_text())
    config["chat_template"] = ("{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}"
                               "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    (model / "tokenizer_config.json").unlink()
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    with orbit.Engine(model, pool_bytes=16 << 20) as e:
        w = e.new_window()
        origin = f"{model / 'tokenizer_config.json'} (chat_template)"
        for name, call in {"sync": w.sync, "plan_sync": w.plan_sync, "render_chat": e.render_chat}.items():
            message = python_message(orbit, lambda: call([{"role": "system", "content": "hi"}]))
            assert message == f"{name}: {origin}: line 1: the template raised an exception: user first", message
        assert e.render_chat([{"role": "user", "content": "hi"}], False) == "hi"


def test_top_logprobs_without_logprobs_says_the_python_keyword(orbit, window):
    # The SDK's "needs logprobs = true" (C++'s spelling of GenerateOptions::logprobs) reached Python as it was.
    expected = "top_logprobs = 3 needs logprobs=True"
    for name, call in [("generate", lambda: window.generate(" A", max_tokens=1, top_logprobs=3)),
                       ("generate_n", lambda: window.generate_n(" A", 2, max_tokens=1, top_logprobs=3)),
                       ("generate_many: requests[0]",
                        lambda: orbit.generate_many([(window, " A", {"max_tokens": 1, "top_logprobs": 3})])),
                       ("generate", lambda: window.stream(" A", max_tokens=1, top_logprobs=3))]:
        assert python_message(orbit, call) == f"{name}: {expected}"
    assert len(window.generate(" A", max_tokens=1, logprobs=True, top_logprobs=3).logprobs[0].top) == 3


def test_the_stream_internals_read_arguments_as_the_public_api(orbit, window):
    # _check_stream_arguments answered None with pybind11's "incompatible function arguments" (naming nothing), and
    # _StreamRoom took a bool as 1 (ahead, give's n, take's timeout) and refused numpy numbers, where Window.stream
    # and the public calls name the argument, take numpy numbers and refuse bools.
    from orbit._orbit import _check_stream_arguments, _StreamRoom
    with pytest.raises(TypeError, match="^_check_stream_arguments: window: expected Window, got None$"):
        _check_stream_arguments(None, " A", {})
    with pytest.raises(TypeError, match="^_check_stream_arguments: kwargs: expected dict, got list$"):
        _check_stream_arguments(window, " A", [("max_tokens", 1)])
    _check_stream_arguments(window, " A", {"max_tokens": np.int64(2), "temperature": np.float32(0.5)})
    token = orbit.CancelToken()
    for value, shown in [(True, "bool"), (np.bool_(True), "bool"), (2.0, "float"), (None, "None")]:
        with pytest.raises(TypeError, match=f"^_StreamRoom: ahead: expected int, got {shown}$"):
            _StreamRoom(value, token, window)
    room = _StreamRoom(np.int64(2), token, window)
    assert room.take(np.float32(0)) and room.take(0) and not room.take(np.float64(0.0))  # two pieces' room
    room.give(np.int32(1))
    assert room.take(np.int64(0))
    for value, shown in [(True, "bool"), (np.bool_(False), "bool"), (None, "None"), ("1", "str")]:
        with pytest.raises(TypeError, match=f"^_StreamRoom.take: timeout_s: expected float, got {shown}$"):
            room.take(value)
    with pytest.raises(ValueError, match="^_StreamRoom.take: timeout_s is nan"):
        room.take(math.nan)
    for value, shown in [(True, "bool"), (1.0, "float"), (None, "None")]:
        with pytest.raises(TypeError, match=f"^_StreamRoom.give: n: expected int, got {shown}$"):
            room.give(value)
    with pytest.raises(ValueError, match="^_StreamRoom.give: n = -1: must be >= 1$"):
        room.give(-1)
    assert not room.take(0)  # nothing given back by the refusals
    token.cancel()
    assert room.take(0) and room.stopped
