"""Errors that name what is wrong: calls on a closed engine, text no UTF-8 can hold, arguments checked up front,
and instances whose __init__ never ran."""
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

LONE = "ab\udcffc"  # a lone surrogate: what bytes decoded with errors='surrogateescape' hold


@pytest.fixture(scope="module")
def engine(orbit, stories260k_path):
    with orbit.Engine(str(stories260k_path)) as e:
        yield e


@pytest.fixture()
def window(engine):
    w = engine.new_window()
    w.admit(engine.add_text("Once upon a time", bos=True))
    return w


# Engine: each call after close() but `closed`, `stats`, the fidelity model's description and repr() raises
# "<call>: engine is closed", naming itself as a window's call does.
AFTER_CLOSE = {
    "tokenize": lambda e: e.tokenize("a"),
    "detokenize": lambda e: e.detokenize([1, 2]),
    "piece": lambda e: e.piece(3),
    "has_tokenizer": lambda e: e.has_tokenizer,
    "tool_call_format": lambda e: e.tool_call_format(),
    "options": lambda e: e.options,
    "model_info": lambda e: e.model_info,
    "add_text": lambda e: e.add_text("a"),
    "add_tokens": lambda e: e.add_tokens([1, 2]),
    "chunk": lambda e: e.chunk(e.add_tokens([1, 2]).key if not e.closed else "k"),
    "chunks": lambda e: e.chunks,
    "add_embeddings": lambda e: e.add_embeddings(np.zeros((2, 64), np.float32)),
    "find_media": lambda e: e.find_media("digest", rows=2),
    "precompute": lambda e: e.precompute(e.add_tokens([1, 2]) if not e.closed else "k"),
    "new_window": lambda e: e.new_window().close(),
    "run_background": lambda e: e.run_background(),
    "calibrate": lambda e: e.calibrate(),
    "calibrate_fidelity": lambda e: e.calibrate_fidelity(),
    "render_chat": lambda e: e.render_chat([{"role": "user", "content": "hi"}]),
    "tokenize_chat": lambda e: e.tokenize_chat([{"role": "user", "content": "hi"}]),
    "has_chat_template": lambda e: e.has_chat_template,
}
SLOW_WHILE_OPEN = {"calibrate", "calibrate_fidelity"}  # seconds each: only their refusal is checked


@pytest.mark.parametrize("call", sorted(AFTER_CLOSE))
def test_every_engine_call_after_close_raises(orbit, stories260k_path, call):
    # tokenize, detokenize, piece, has_tokenizer and options answered after close(); tool_call_format read the
    # closed engine's refusal of its probe as the template's and answered 'hermes'. The refusal said
    # "engine is closed" alone, whichever call it refused.
    e = orbit.Engine(str(stories260k_path))
    if call not in SLOW_WHILE_OPEN:
        AFTER_CLOSE[call](e)  # fine while open
    e.close()
    with pytest.raises(orbit.OrbitError, match=rf"^{call}: engine is closed$"):
        AFTER_CLOSE[call](e)
    assert e.closed and e.stats.windows == 0
    assert repr(e) == f"Engine(model={str(stories260k_path)!r}, closed)"


# Text a str holds but UTF-8 cannot: each call names its argument.
UNENCODABLE = {
    "add_text: text": lambda e: e.add_text(LONE),
    "add_text: label": lambda e: e.add_text("a", label=LONE),
    "add_tokens: label": lambda e: e.add_tokens([1, 2], label=LONE),
    "tokenize: text": lambda e: e.tokenize(LONE),
    "chunk: key": lambda e: e.chunk(LONE),
    "find_media: media_digest": lambda e: e.find_media(LONE, rows=2),
    "find_media: label": lambda e: e.find_media("d", rows=2, label=LONE),
    "new_window: label": lambda e: e.new_window(label=LONE),
    "tool_call_format: chat_template": lambda e: e.tool_call_format(chat_template=LONE),
    "Engine: device": lambda e: type(e)(e.options.model, device=LONE),
    "Engine: remote": lambda e: type(e)(e.options.model, remote=LONE),
}


@pytest.mark.parametrize("what", sorted(UNENCODABLE))
def test_unencodable_text_names_the_argument(orbit, engine, what):
    # pybind11's std::string conversion refused these with "incompatible function arguments", naming none.
    with pytest.raises(ValueError, match=f"^{what} is not valid text: .*surrogates not allowed"):
        UNENCODABLE[what](engine)


@pytest.mark.parametrize("arg", ["text", "format"])
def test_parse_tool_calls_names_unencodable_text(orbit, arg):
    kwargs = {"text": "<tool_call>{}</tool_call>", "format": "hermes", arg: LONE}
    with pytest.raises(ValueError, match=f"^parse_tool_calls: {arg} is not valid text"):
        orbit.parse_tool_calls(**kwargs)


def test_store_remote_summary_names_unencodable_url(orbit):
    with pytest.raises(ValueError, match="^store_remote_summary: url is not valid text"):
        orbit.store_remote_summary("redis://" + LONE)


def test_detokenize_and_piece_name_themselves_for_an_id_outside_the_vocabulary(orbit, engine):
    # They said only "token id 99999 is outside the vocabulary [0, 512) of the tokenizer ...".
    with pytest.raises(orbit.OrbitError, match=r"^detokenize: tokens\[1\] = 99999 is outside the vocabulary \[0, 512\)$"):
        engine.detokenize([1, 99999])
    with pytest.raises(orbit.OrbitError, match=r"^piece: token -3 is outside the vocabulary \[0, 512\)$"):
        engine.piece(-3)


def test_disposable_refuses_answer_tokens_past_the_context(orbit, engine, window):
    # The decodes ran until the forward refused "input.positions: position 512 is past ...".
    instance = window.instances[0].id
    limit = engine.model_info.max_positions
    room = limit - 5 - 2 + 1  # 5 tokens in the window, a 2-token query
    assert window.disposable(instance, [1, 2], answer_tokens=1).instance == instance
    for n in (room + 1, 2**40):
        with pytest.raises(orbit.OrbitError, match=f"^disposable: answer_tokens = {n} does not fit: .* at most "
                                                   f"{room} answer tokens in the model's {limit} positions"):
            window.disposable(instance, [1, 2], answer_tokens=n)


def test_store_dir_errors_name_the_argument(orbit, tmp_path):
    # '' said "give --store DIR" (the CLI's option); Store(None) raised os.fspath's error, naming nothing.
    for call, what in [(lambda d: orbit.store_gc(d), "store_gc: dir"), (lambda d: orbit.store_list(d), "store_list: dir"),
                       (lambda d: orbit.Store(d), "Store: dir")]:
        with pytest.raises(ValueError, match=f"^{what} is empty: give the store directory$"):
            call("")
        with pytest.raises(TypeError, match=f"^{what} must be a str or os.PathLike, got NoneType$"):
            call(None)
    with pytest.raises(TypeError, match="^Store: dir must be a str or os.PathLike, got bytes$"):
        orbit.Store(b"store")
    with pytest.raises(orbit.OrbitError):
        orbit.Store(tmp_path / "none")  # a PathLike still reaches the store's own check
    # A directory whose name is not UTF-8 (os.listdir gives it with a lone surrogate) is read, not refused.
    raw = os.path.join(os.fsencode(tmp_path), b"st\xffore")
    os.mkdir(raw)
    (listed,) = [n for n in os.listdir(tmp_path) if n.startswith("st")]
    with pytest.raises(orbit.OrbitError) as e:
        orbit.store_list(os.path.join(tmp_path, listed))
    assert "not valid text" not in str(e.value)


def test_tool_choice_not_among_the_tools_says_generate(orbit, window):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with pytest.raises(ValueError, match=(
        r"^generate: tool_choice: 'nope' is not among the tools \(f\) nor one of 'auto', 'none', 'required'$"
    )):
        window.generate([1], max_tokens=2, tools=tools, tool_choice="nope")
    with pytest.raises(ValueError, match=r"^generate: tool_choice: 'g' is not among the tools \(f\)$"):
        window.generate([1], max_tokens=2, tools=tools, tool_choice={"type": "function", "function": {"name": "g"}})


def test_tool_errors_name_the_call_and_a_bad_value_before_a_missing_tool(orbit, window):
    # A forced call's tools errors came without the call's name; a bad tool_choice or tool_call_format value
    # without tools was called only "needs tools".
    twice = [{"name": "f"}, {"name": "f"}]
    for choice in ("required", "auto"):  # under auto they were taken, their calls read under neither's schema
        with pytest.raises(ValueError, match=(r"^generate: tools\[1\]\.name: 'f' is also the name of tools\[0\] "
                                              r"\(tool names must be unique\)$")):
            window.generate([1], max_tokens=2, tools=twice, tool_choice=choice)
    with pytest.raises(ValueError, match=r"^sync: tools\[1\]\.function\.name: 'f' is also the name of tools\[0\]"):
        window.sync([{"role": "user", "content": "Hi"}],
                    tools=[{"type": "function", "function": {"name": n}} for n in ("f", "f")])
    with pytest.raises(orbit.OrbitError, match=r"^generate_n: tools\[0\]\.parameters: a schema must be an object"):
        window.generate_n([1], 2, max_tokens=2, tools=[{"name": "f", "parameters": "nope"}], tool_choice="required")
    with pytest.raises(ValueError, match=(r"^generate: tool_choice: 'bogus' is not one of 'auto', 'none', "
                                          r"'required' \(and no tools were given for it to name\)$")):
        window.generate([1], max_tokens=2, tool_choice="bogus")
    with pytest.raises(ValueError, match=r"^generate: tool_choice = 'required' needs tools$"):
        window.generate([1], max_tokens=2, tool_choice="required")
    with pytest.raises(orbit.OrbitError, match=r"^generate: tool_call_format: 'xml' is not a tool call format"):
        window.generate([1], max_tokens=2, tool_call_format="xml")
    with pytest.raises(ValueError, match=r"^generate: tool_call_format = hermes needs tools"):
        window.generate([1], max_tokens=2, tool_call_format="hermes")


BARE_INIT = """
import sys, orbit
cls = getattr(orbit, sys.argv[1])
obj = cls.__new__(cls)
try:
    print(repr(eval(sys.argv[2])))  # garbage, or a crash, where the method read the missing C++ object
except TypeError as e:
    print("TypeError:", e)
"""


@pytest.mark.parametrize("name, expr", [
    ("Engine", "obj.tokenize('a')"), ("Engine", "obj.close()"), ("Engine", "repr(obj)"),
    ("CancelToken", "obj.cancelled"), ("WindowPolicy", "obj.rank_k"), ("WindowPolicy", "repr(obj)"),
    ("ConstraintCacheOptions", "obj.max_bytes"), ("RadixCache", "obj.read([1, 2])"), ("BlockPrefixCache", "obj.size"),
    ("Store", "obj.summary()"), ("Store", "obj.dir"),
])
def test_a_bare_instance_of_a_class_with_a_constructor_raises(orbit, name, expr):
    # By the run before: Engine's methods raised UnicodeDecodeError or 'Unable to cast from non-held to held
    # instance', CancelToken read cancelled=True, WindowPolicy and ConstraintCacheOptions garbage numbers,
    # Store AttributeError '_dir'. Run apart, so a crash fails this case only.
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(orbit.__file__).parent.parent))
    r = subprocess.run([sys.executable, "-c", BARE_INIT, name, expr], capture_output=True, text=True, timeout=30,
                       env=env)
    assert r.returncode == 0, f"{name}.__new__ then {expr}: exit {r.returncode} {r.stderr[-300:]}"
    assert r.stdout.startswith(f"TypeError: this orbit.{name} was made by {name}.__new__ without __init__ and "
                               f"holds nothing; create one with orbit.{name}("), r.stdout


def test_a_second_init_on_a_live_instance_is_refused(orbit, engine, stories260k_path):
    # pybind11 ignored it: e.__init__(path), policy.__init__("reprefill") and token.__init__() returned None and
    # changed nothing, silently.
    token = orbit.CancelToken()
    token.cancel()
    made = [(engine, (str(stories260k_path),)), (orbit.WindowPolicy("patch:8"), ("reprefill",)), (token, ()),
            (orbit.ConstraintCacheOptions(max_entries=3), ()), (orbit.RadixCache(64), (32,)),
            (orbit.ChunkKind.tokens, (1,))]
    for obj, args in made:
        name = type(obj).__name__
        with pytest.raises(TypeError, match=rf"^orbit.{name}.__init__: this {name} is already made \(__init__ runs "
                                            rf"once\); create another with orbit.{name}\(...\)$"):
            obj.__init__(*args)
    assert orbit.WindowPolicy("patch:8").name == "patch:8" and token.cancelled and engine.tokenize("a")
    assert orbit.ChunkKind.tokens == orbit.ChunkKind(0)

    class Mine(orbit.WindowPolicy):  # a subclass's own __init__ still reaches the binding's once
        def __init__(self):
            super().__init__("reprefill")

    assert Mine().name == "reprefill"


def test_instances_made_by_their_constructor_still_work(orbit, engine):
    assert orbit.CancelToken().cancelled is False
    assert orbit.WindowPolicy("patch:16") == orbit.WindowPolicy("patch:16")
    assert orbit.ConstraintCacheOptions(max_entries=3).max_entries == 3
    assert engine.new_window(policy=orbit.WindowPolicy("patch:16")).policy == orbit.WindowPolicy("patch:16")


# The trace functions' text arguments: each names itself (pybind11's std::string conversion raised "incompatible
# function arguments" for these, naming none). Checked before any engine opens, so the model is never loaded.
TRACE_UNENCODABLE = {
    "make_trace: kind": lambda orbit, trace, model: orbit.make_trace(LONE),
    "replay: device": lambda orbit, trace, model: orbit.replay(trace, model, device=LONE),
    "replay: dtype": lambda orbit, trace, model: orbit.replay(trace, model, dtype=LONE),
    "replay: eviction": lambda orbit, trace, model: orbit.replay(trace, model, eviction=LONE),
    r"replay: policies\[1\]": lambda orbit, trace, model: orbit.replay(trace, model, policies=["default", LONE]),
}


@pytest.mark.parametrize("what", sorted(TRACE_UNENCODABLE))
def test_trace_calls_name_unencodable_text(orbit, stories260k_path, what):
    trace = orbit.make_trace("web", steps=1)
    with pytest.raises(ValueError, match=f"^{what} is not valid text: .*surrogates not allowed"):
        TRACE_UNENCODABLE[what](orbit, trace, str(stories260k_path))


def test_trace_paths_take_names_that_are_not_utf8(orbit, tmp_path):
    # A file whose name is not UTF-8, as os.listdir gives it (a lone surrogate): saved and loaded back.
    trace = orbit.make_trace("web", steps=1)
    raw = os.path.join(os.fsencode(tmp_path), b"tr\xffce.json")
    name = os.fsdecode(raw)
    orbit.save_trace(trace, name)
    assert os.path.exists(raw)
    assert orbit.load_trace(name) == orbit.load_trace(pathlib.Path(name)) == trace
    with pytest.raises(orbit.OrbitError, match="nowhere"):
        orbit.replay(trace, tmp_path / "nowhere.bin", baselines=False, fidelity=False)


# Engine(...)'s typed keywords, a value of another type for each, and the type its error asks for.
ENGINE_WRONG_TYPES = {
    "pool_bytes": (1.5, "int"), "page_size": ("16", "int"), "host_budget_bytes": (None, "int"),
    "disk_budget_bytes": ([0], "int"), "threads": (2 ** 40, r"int in \[-2147483648, 2147483647\]"),
    "remote_ttl_seconds": (2 ** 70, r"int in \[-9223372036854775808, 9223372036854775807\]"),
    "device_tier_bytes": (b"0", "int"), "max_idle_chunks": (0.0, "int"), "max_background_bytes": ("1", "int"), "remote": (b"redis://x", "str"),
    "remote_secret": (1, "str"), "device": (None, "str"), "dtype": (b"float32", "str"), "eviction": (0, "str"),
    "cold_tier": (None, "str"), "embedding_cache": ("yes", "bool"), "shared_canonicals": ([True], "bool"),
    "stored_calibration": (1, "bool"), "window_past": (None, "bool"),
}


# Every bool-typed argument of the API, by the name its TypeError gives: the call with the value `v`.
BOOL_ARGUMENTS = {
    "Engine: embedding_cache": lambda orbit, e, w, path, v: orbit.Engine(path, embedding_cache=v),
    "Engine: shared_canonicals": lambda orbit, e, w, path, v: orbit.Engine(path, shared_canonicals=v),
    "Engine: stored_calibration": lambda orbit, e, w, path, v: orbit.Engine(path, stored_calibration=v),
    "tokenize: bos": lambda orbit, e, w, path, v: e.tokenize("a", bos=v),
    "add_text: pin": lambda orbit, e, w, path, v: e.add_text("a", pin=v),
    "add_text: bos": lambda orbit, e, w, path, v: e.add_text("a", bos=v),
    "add_tokens: pin": lambda orbit, e, w, path, v: e.add_tokens([1, 2], pin=v),
    "add_embeddings: pin": lambda orbit, e, w, path, v: e.add_embeddings(
        np.zeros((1, e.model_info.hidden_size), np.float32), pin=v),
    "find_media: pin": lambda orbit, e, w, path, v: e.find_media("d", rows=1, pin=v),
    "render_chat: add_generation_prompt": lambda orbit, e, w, path, v: e.render_chat([], v),
    "tokenize_chat: add_generation_prompt": lambda orbit, e, w, path, v: e.tokenize_chat([], v),
    "parse_tool_calls: cut": lambda orbit, e, w, path, v: orbit.parse_tool_calls("a", cut=v),
    "store_gc: dry_run": lambda orbit, e, w, path, v: orbit.store_gc(path, dry_run=v),
    "make_trace: sample_text": lambda orbit, e, w, path, v: orbit.make_trace(steps=2, sample_text=v),
    "replay: baselines": lambda orbit, e, w, path, v: orbit.replay(orbit.make_trace(steps=2), path, baselines=v),
    "replay: fidelity": lambda orbit, e, w, path, v: orbit.replay(orbit.make_trace(steps=2), path, fidelity=v),
    "replay: explain": lambda orbit, e, w, path, v: orbit.replay(orbit.make_trace(steps=2), path, explain=v),
    "replay: attribute": lambda orbit, e, w, path, v: orbit.replay(orbit.make_trace(steps=2), path, attribute=v),
    "logits: all_rows": lambda orbit, e, w, path, v: w.logits([1, 2], all_rows=v),
    "reference_logits: all_rows": lambda orbit, e, w, path, v: w.reference_logits([1, 2], all_rows=v),
    "generate: logprobs": lambda orbit, e, w, path, v: w.generate([1, 2], max_tokens=1, logprobs=v),
    "WindowPolicy.deep_only": lambda orbit, e, w, path, v: orbit.Policy(deep_only=v),
    "WindowPolicy.self_check": lambda orbit, e, w, path, v: orbit.Policy().replace(self_check=v),
}


@pytest.mark.parametrize("value, type_shown", [(None, "None"), (1.5, "float"), (2 ** 70, "int"), ("yes", "str"),
                                               (0, "int"), (1, "int"), (np.int64(1), "int64")])
@pytest.mark.parametrize("name", sorted(BOOL_ARGUMENTS))
def test_a_bool_argument_takes_only_a_bool(orbit, engine, window, tmp_path, stories260k_path, name, value,
                                           type_shown):
    # pybind11 read a bool argument through __bool__: None was False, 1.5, 2**70 and "yes" True; now anything but
    # True, False or a numpy bool is a TypeError naming the argument. Ints 0/1 are refused too: a strict API.
    call = BOOL_ARGUMENTS[name]
    path = str(tmp_path) if name == "store_gc: dry_run" else str(stories260k_path)
    if name == "store_gc: dry_run":
        (tmp_path / "blobs").mkdir()
    with pytest.raises(TypeError, match=f"^{re.escape(name)}: expected bool, got {type_shown}$"):
        call(orbit, engine, window, path, value)


def test_a_bool_argument_takes_true_false_and_numpy_bools(orbit, engine, window, stories260k_path):
    for v in (True, False, np.bool_(True), np.bool_(False)):
        assert engine.tokenize("a", bos=v) == engine.tokenize("a", bos=bool(v))
        assert orbit.Policy(deep_only=v).deep_only is bool(v)
        assert window.logits([1, 2], all_rows=v).ndim == (2 if v else 1)
        with orbit.Engine(str(stories260k_path), embedding_cache=v, shared_canonicals=v) as e:
            assert e.options.embedding_cache is bool(v)


@pytest.mark.parametrize("keyword", sorted(ENGINE_WRONG_TYPES))
def test_engine_names_the_keyword_of_a_value_of_another_type(orbit, stories260k_path, keyword):
    # Still a TypeError, as pybind11 raised for these typed parameters, now naming the keyword and the type asked
    # for (before: "__init__(): incompatible constructor arguments" and the whole signature).
    value, expected = ENGINE_WRONG_TYPES[keyword]
    with pytest.raises(TypeError, match=rf"^Engine: {keyword}: expected {expected}, got "):
        orbit.Engine(str(stories260k_path), **{keyword: value})


def test_engine_keywords_keep_their_signature_and_conversions(orbit, stories260k_path):
    # The keywords are read from an options struct (engine_args.cpp): the signature pybind11 showed for the
    # 21-parameter constructor is unchanged (stored_calibration and window_past added at its end, remote_max_held_fraction beside the
    # other remote keywords), an unknown keyword is a TypeError naming it, a positional argument
    # past the model is refused as before, and the values pybind11 converted are still taken.
    signature = orbit.Engine.__init__.__doc__.splitlines()[0]
    assert signature == (
        "__init__(self: orbit._orbit.Engine, model: object, *, store_dir: object = None, pool_bytes: int = 268435456,"
        " page_size: int = 16, host_budget_bytes: int = 1073741824, disk_budget_bytes: int = 0, threads: int = 0,"
        " remote: str = '', remote_ttl_seconds: int = 0, remote_secret: str = '',"
        " remote_max_held_fraction: float = 0.5, device: str = 'cpu',"
        " dtype: str = 'float32', eviction: str = 'lru', cold_tier: str = 'exact', device_tier_bytes: int = 0,"
        " embedding_cache: bool = True, background: object = 'thread', shared_canonicals: bool = True,"
        " max_idle_chunks: int = 0, max_background_bytes: int = 0, constraint_cache: object = None, tokenizer: object = None,"
        " stored_calibration: bool = True, window_past: bool = True) -> None")
    with pytest.raises(TypeError, match=r"^Engine: unexpected keyword argument 'pool_byte' \(it takes model and "
                                        r"store_dir, pool_bytes, .*tokenizer, stored_calibration, window_past\)$"):
        orbit.Engine(str(stories260k_path), pool_byte=1 << 20)
    for args, kwargs in [((str(stories260k_path), 1 << 20), {}), ((), {}),
                         ((str(stories260k_path),), {"model": str(stories260k_path)})]:
        with pytest.raises(TypeError, match="incompatible constructor arguments"):
            orbit.Engine(*args, **kwargs)
    # (All but a bool for an int, which pybind11 took as 1: test_an_int_argument_takes_no_bool.)
    with orbit.Engine(model=str(stories260k_path), page_size=np.int64(4), threads=np.int32(1),
                      embedding_cache=np.bool_(False), pool_bytes=8 << 20) as e:
        assert e.options.page_size == 4 and e.options.pool_bytes == 8 << 20 and not e.options.embedding_cache
        assert e.options.threads == 1


def _messages():
    return [{"role": "user", "content": "hi"}]


# Every int-typed argument of the API, by the name its TypeError gives: the call with the value `v`.
INT_ARGUMENTS = {
    **{f"Engine: {k}": (lambda k: lambda orbit, e, w, v: orbit.Engine(e.model_info.origin, **{k: v}))(k)
       for k in ("pool_bytes", "page_size", "host_budget_bytes", "disk_budget_bytes", "threads",
                 "remote_ttl_seconds", "device_tier_bytes", "max_idle_chunks",
                 "max_background_bytes")},
    "detokenize: previous": lambda orbit, e, w, v: e.detokenize([1, 2], previous=v),
    "piece: token": lambda orbit, e, w, v: e.piece(v),
    "find_media: rows": lambda orbit, e, w, v: e.find_media("d", rows=v),
    "new_window: max_bytes": lambda orbit, e, w, v: e.new_window(max_bytes=v),
    "plan_slide: chunks": lambda orbit, e, w, v: w.plan_slide(v),
    "slide: chunks": lambda orbit, e, w, v: w.slide(chunks=v),
    "prepare_recalls: max_chunks": lambda orbit, e, w, v: w.prepare_recalls(max_chunks=v),
    "prepare_moves: max_chunks": lambda orbit, e, w, v: w.prepare_moves(max_chunks=v),
    "disposable: answer_tokens": lambda orbit, e, w, v: w.disposable(w.instances[0], [1], answer_tokens=v),
    "generate: max_tokens": lambda orbit, e, w, v: w.generate([1, 2], max_tokens=v),
    "generate: top_logprobs": lambda orbit, e, w, v: w.generate([1, 2], max_tokens=1, top_logprobs=v),
    "generate: seed": lambda orbit, e, w, v: w.generate([1, 2], max_tokens=1, seed=v),
    "generate_n: n": lambda orbit, e, w, v: w.generate_n([1, 2], v, max_tokens=1),
    "generate_n: max_tokens": lambda orbit, e, w, v: w.generate_n([1, 2], 2, max_tokens=v),
    "generate_n: top_logprobs": lambda orbit, e, w, v: w.generate_n([1, 2], 2, max_tokens=1, top_logprobs=v),
    "generate_n: seed": lambda orbit, e, w, v: w.generate_n([1, 2], 2, max_tokens=1, seed=v),
    "generate_many: requests[0]: max_tokens": lambda orbit, e, w, v: orbit.generate_many([(w, [1], {"max_tokens": v})]),
    "sync: chunk_min_tokens": lambda orbit, e, w, v: w.sync(_messages(), chunk_min_tokens=v),
    "plan_sync: chunk_min_tokens": lambda orbit, e, w, v: w.plan_sync(_messages(), chunk_min_tokens=v),
    "prepare_sync: chunk_min_tokens": lambda orbit, e, w, v: w.prepare_sync(_messages(), chunk_min_tokens=v),
    "make_trace: steps": lambda orbit, e, w, v: orbit.make_trace(steps=v),
    "make_trace: seed": lambda orbit, e, w, v: orbit.make_trace(steps=2, seed=v),
    "make_trace: max_positions": lambda orbit, e, w, v: orbit.make_trace(steps=2, max_positions=v),
    "make_trace: position_rows": lambda orbit, e, w, v: orbit.make_trace(steps=2, position_rows=v),
    "make_trace: chunk_tokens": lambda orbit, e, w, v: orbit.make_trace(steps=2, chunk_tokens=v),
    **{f"replay: {k}": (lambda k: lambda orbit, e, w, v: orbit.replay(orbit.make_trace(steps=2), e.model_info.origin,
                                                                      **{k: v}))(k)
       for k in ("threads", "pool_bytes", "page_size", "host_budget_bytes", "device_tier_bytes")},
    "ConstraintCacheOptions: max_entries": lambda orbit, e, w, v: orbit.ConstraintCacheOptions(max_entries=v),
    "ConstraintCacheOptions: max_bytes": lambda orbit, e, w, v: orbit.ConstraintCacheOptions(max_bytes=v),
    "RadixCache: capacity_tokens": lambda orbit, e, w, v: orbit.RadixCache(capacity_tokens=v),
    "BlockPrefixCache: capacity_tokens": lambda orbit, e, w, v: orbit.BlockPrefixCache(capacity_tokens=v),
    "BlockPrefixCache: block_tokens": lambda orbit, e, w, v: orbit.BlockPrefixCache(block_tokens=v),
    "WindowPolicy.prepare_recalls": lambda orbit, e, w, v: orbit.Policy(prepare_recalls=v),
    "WindowPolicy.prepare_lists": lambda orbit, e, w, v: orbit.Policy().replace(prepare_lists=v),
    "WindowPolicy.first_k": lambda orbit, e, w, v: orbit.Policy(first_k=v),
}


@pytest.mark.parametrize("value, type_shown", [(True, "bool"), (False, "bool"), (np.bool_(True), "bool"),
                                               (np.array(True), "bool"), (None, "None"), (1.5, "float"),
                                               ("3", "str")])
@pytest.mark.parametrize("name", sorted(INT_ARGUMENTS))
def test_an_int_argument_takes_no_bool(orbit, engine, window, name, value, type_shown):
    # bool is an int subclass: pybind11 read max_tokens=True as 1 and slide(chunks=False) as 0. Now a bool, numpy's
    # included, is a TypeError naming the argument, in the bool arguments' form; so are other types (pybind11 named
    # none of them, and generate_many's options said "max_tokens must be an int").
    with pytest.raises(TypeError, match=f"^{re.escape(name)}: expected int, got {type_shown}$"):
        INT_ARGUMENTS[name](orbit, engine, window, value)


def test_an_int_argument_out_of_its_range_names_it(orbit, engine, window):
    with pytest.raises(TypeError, match=r"^generate: top_logprobs: expected int in \[-2147483648, 2147483647\], "
                                        r"got 4294967296$"):
        window.generate([1, 2], max_tokens=1, top_logprobs=2**32)
    with pytest.raises(TypeError, match=r"^slide: chunks: expected int in \[-9223372036854775808, "
                                        r"9223372036854775807\], got 36893488147419103232$"):
        window.slide(2**65)
    with pytest.raises(ValueError, match=r"^generate: seed = -1 is out of range: expected int in \[0, 2\*\*64\)$"):
        window.generate([1, 2], max_tokens=1, seed=-1)


def test_an_int_argument_takes_ints_and_numpy_ints(orbit, engine, window):
    for v in (2, np.int64(2), np.int32(2), np.uint8(2)):
        assert len(window.generate([1, 2], max_tokens=v).tokens) == 2
        assert len(window.generate_n([1, 2], v, max_tokens=v)) == 2
        assert engine.piece(v) == engine.piece(2)
        assert orbit.ConstraintCacheOptions(max_entries=v).max_entries == 2
        assert orbit.Policy(prepare_moves=v).prepare_moves == 2
    assert window.plan_slide(np.int64(0)) is not None


def test_the_async_api_refuses_a_bool_for_an_int(orbit, window):
    import asyncio

    import orbit.aio as aio

    async def main():
        async with aio.AsyncWindow(window.fork()) as w:
            with pytest.raises(TypeError, match="^generate: max_tokens: expected int, got bool$"):
                await w.generate([1, 2], max_tokens=True)
            with pytest.raises(TypeError, match="^generate_n: n: expected int, got bool$"):
                await w.generate_n([1, 2], True, max_tokens=1)
            with pytest.raises(TypeError, match="^generate: max_tokens: expected int, got bool$"):
                async for _ in w.stream([1, 2], max_tokens=True):
                    pass
    asyncio.run(main())
    with pytest.raises(TypeError, match="^generate: max_tokens: expected int, got bool$"):
        list(window.stream([1, 2], max_tokens=True))


# Every token-list argument, by the name its TypeError gives: the call with the list `v`.
TOKEN_LISTS = {
    "detokenize: tokens": lambda orbit, e, w, v: e.detokenize(v),
    "add_tokens: tokens": lambda orbit, e, w, v: e.add_tokens(v),
    "add_turn: tokens": lambda orbit, e, w, v: w.add_turn(v),
    "plan_add_turn: tokens": lambda orbit, e, w, v: w.plan_add_turn(v),
    "generate: query": lambda orbit, e, w, v: w.generate(v, max_tokens=1),
    "generate: stop_tokens": lambda orbit, e, w, v: w.generate([1, 2], max_tokens=1, stop_tokens=v),
    "logits: query": lambda orbit, e, w, v: w.logits(v),
    "reference_logits: query": lambda orbit, e, w, v: w.reference_logits(v),
    "disposable: query": lambda orbit, e, w, v: w.disposable(w.instances[0], v),
    "loss_by_instance: query": lambda orbit, e, w, v: w.loss_by_instance(v),
    "RadixCache.read: prompt": lambda orbit, e, w, v: orbit.RadixCache().read(v),
    "RadixCache.read: generated": lambda orbit, e, w, v: orbit.RadixCache().read([1, 2], v),
    "BlockPrefixCache.read: prompt": lambda orbit, e, w, v: orbit.BlockPrefixCache().read(v),
    "BlockPrefixCache.read: generated": lambda orbit, e, w, v: orbit.BlockPrefixCache().read([1, 2], v),
    "chunk_key_tokens: tokens": lambda orbit, e, w, v: orbit.chunk_key_tokens(e.model_info.fingerprint, v),
}


@pytest.mark.parametrize("name", sorted(TOKEN_LISTS))
def test_a_token_list_takes_no_bool(orbit, engine, window, name):
    # numpy.asarray([True, 2]) is an int64 array: detokenize([True, 2]) read token 1 and RadixCache.read([True, 2])
    # (pybind11's int) did too. Now a bool element is a TypeError naming the argument and its index; ints, numpy
    # integers and integer arrays are taken as before, and a bool array is refused by its dtype.
    for tokens, index in (([True, 2], 0), ((2, np.bool_(False)), 1), ([2, 3, False], 2)):
        with pytest.raises(TypeError, match=f"^{re.escape(name)}\\[{index}\\]: expected int, got bool$"):
            TOKEN_LISTS[name](orbit, engine, window, tokens)
    for tokens in ([1, 2], (np.int64(1), np.int32(2)), np.array([1, 2]), np.array([1, 2], np.uint16)):
        TOKEN_LISTS[name](orbit, engine, window.fork(), tokens)
    with pytest.raises(TypeError, match=f"^{re.escape(name)}: dtype bool; expected integers"):
        TOKEN_LISTS[name](orbit, engine, window, np.array([True, False]))


@pytest.mark.parametrize("name", sorted(TOKEN_LISTS))
def test_a_token_list_takes_numpy_ints_and_no_numpy_bool(orbit, engine, window, name):
    # A 0-d numpy bool array was not checked: numpy.asarray([numpy.array(True), 2]) read it as 1, and a bool array
    # inside a list as ints. numpy.asarray([numpy.uint64(5), 2]) is float64, so numpy's unsigned scalars were
    # refused ("dtype float64"), and [2**63, 1] was refused as floats; now they are ints, named if out of int64.
    for tokens, index in (([np.array(True), 2], 0), ((2, np.array(False)), 1)):
        with pytest.raises(TypeError, match=f"^{re.escape(name)}\\[{index}\\]: expected int, got bool$"):
            TOKEN_LISTS[name](orbit, engine, window, tokens)
    with pytest.raises(TypeError, match=f"^{re.escape(name)}\\[1\\]: dtype bool; expected integers"):
        TOKEN_LISTS[name](orbit, engine, window, [2, np.array([True])])
    with pytest.raises(ValueError, match=f"^{re.escape(name)}\\[0\\]: 9223372036854775808 is past the largest int64"):
        TOKEN_LISTS[name](orbit, engine, window, [2**63, 1])
    for tokens in ([np.uint64(1), 2], (np.uint64(1), np.int8(2)), [np.array(1), np.array(2, np.uint64)]):
        TOKEN_LISTS[name](orbit, engine, window.fork(), tokens)


def test_a_grid_names_the_index_of_a_bool(orbit, engine):
    rows = np.zeros((2, engine.model_info.hidden_size), np.float32)
    with pytest.raises(TypeError, match=r"^add_embeddings: grid\[0\]\[1\]: expected int, got bool$"):
        engine.add_embeddings(rows, grid=[[0, True]])  # numpy read it as [[0, 1]]
    with pytest.raises(TypeError, match=r"^add_embeddings: grid\[1\]: expected int, got bool$"):
        engine.add_embeddings(rows, grid=(0, np.bool_(True)))
    with pytest.raises(TypeError, match=r"^add_embeddings: grid\[1\]\[0\]: expected int, got bool$"):
        engine.add_embeddings(rows, grid=[[0, 1], [np.array(True), 0]])
    assert engine.add_embeddings(rows, grid=[[0, np.int64(1)]]).length == 2


def test_embeddings_name_the_index_of_a_bool(orbit, engine):
    # numpy.asarray(rows, "float32") read a bool among the rows as 1.0 or 0.0; now it is a TypeError naming the
    # argument and its index, as a token list's is. Floats, ints and float arrays among the rows are read as before.
    h = engine.model_info.hidden_size
    row = [0.5] * h
    cases = (
        ([row, [True] + row[1:]], r"embeddings\[1\]\[0\]: expected a number, got bool"),
        ((row, tuple(row[:-1]) + (np.bool_(False),)), rf"embeddings\[1\]\[{h - 1}\]: expected a number, got bool"),
        ([row[:2] + [np.array(True)] + row[3:]], r"embeddings\[0\]\[2\]: expected a number, got bool"),
        ([row, np.ones(h, bool)], r"embeddings\[1\]: dtype bool; embeddings must be float32, bfloat16 or float16"),
    )
    for rows, message in cases:
        with pytest.raises(TypeError, match=f"^add_embeddings: {message}$"):
            engine.add_embeddings(rows)
    with pytest.raises(TypeError, match=r"^add_embeddings: embeddings: dtype bool; embeddings must be float32"):
        engine.add_embeddings(np.ones((2, h), bool))
    ints = [[1] * h, [0] * h]
    taken = [[1.0] * h, [np.float32(0.0)] * h]
    assert engine.add_embeddings(ints).key == engine.add_embeddings(taken).key
    assert engine.add_embeddings([row, np.full(h, 0.5)]).length == 2


def test_rank_takes_numpy_ints_and_no_bool_as_the_counts_do(orbit):
    # rank, rank_k and rank_v refused np.int64(3) ("expected a positive int or 'full', got 3") while the counts
    # (first_k, prepare_recalls, ...) took it; they now read ints as the counts do.
    for field in ("rank", "rank_k", "rank_v"):
        for value, shown in ((True, "bool"), (np.bool_(False), "bool"), (1.5, "float"), (None, "None")):
            with pytest.raises(TypeError, match=f"^WindowPolicy.{field}: expected int, got {shown}$"):
                orbit.Policy("patch:8", **{field: value})
        with pytest.raises(TypeError, match=f"^WindowPolicy.{field}: expected a positive int or 'full', got 'ful'$"):
            orbit.Policy("patch:8", **{field: "ful"})
        assert orbit.Policy("patch:8", **{field: np.int64(3)}) == orbit.Policy("patch:8", **{field: 3})
        assert orbit.Policy().replace(**{field: np.uint8(5)}) == orbit.Policy().replace(**{field: 5})


def test_logit_bias_takes_numpy_int_keys_and_no_bool(orbit, window):
    # A numpy integer key was refused ("keys must be token ids (int), got 3"), unlike every other token id.
    biased = window.generate([1, 2], max_tokens=3, logit_bias={np.int64(9): 100}).tokens
    assert biased == window.generate([1, 2], max_tokens=3, logit_bias={9: 100}).tokens == [9, 9, 9]
    with pytest.raises(TypeError, match="^generate: logit_bias keys must be token ids \\(int\\), got True$"):
        window.generate([1, 2], max_tokens=1, logit_bias={True: 1})
    # Two keys for one token: the last one silently won.
    with pytest.raises(ValueError, match="^generate: logit_bias key '5' names token 5, which another key names too$"):
        window.generate([1, 2], max_tokens=1, logit_bias={5: 1, "5": -1})


def test_a_0d_array_is_not_a_token_list(orbit, window):
    # numpy.ascontiguousarray read numpy.array(5) as [5], where a plain 5 is refused.
    import torch
    for scalar in (np.array(5), np.array([[5]])[0, 0, ...], torch.tensor(5)):
        for call, what in ((window.logits, "logits: query"), (window.generate, "generate: query"),
                           (window.engine.add_tokens, "add_tokens: tokens")):
            with pytest.raises(ValueError, match=f"^{what}: a 0-d array \\(one value\\); expected a 1-D one"):
                call(scalar)


def test_a_misspelt_keyword_is_named_with_the_nearest_one(orbit, engine, window):
    # pybind11 answered "incompatible function arguments" and every signature, never naming the word.
    for call, says in (
            (lambda: window.generate([1], maxtokens=4), "generate: unexpected keyword argument 'maxtokens' "
                                                        "(did you mean 'max_tokens'?)"),
            (lambda: window.sync([], chunk_min_token=4), "sync: unexpected keyword argument 'chunk_min_token' "
                                                         "(did you mean 'chunk_min_tokens'?)"),
            (lambda: engine.new_window(polcy="prefix"), "new_window: unexpected keyword argument 'polcy' "
                                                        "(did you mean 'policy'?)"),
            (lambda: orbit.set_sync_memo_limits(max_entriez=3), "set_sync_memo_limits: unexpected keyword argument "
                                                               "'max_entriez' (did you mean 'max_entries'?)"),
            (lambda: orbit.make_trace(vocab_size=5), "make_trace: unexpected keyword argument 'vocab_size' (it takes "
                                                     "kind, steps, seed, max_positions, position_rows, chunk_tokens, "
                                                     "sample_text)")):
        with pytest.raises(TypeError) as e:
            call()
        assert str(e.value) == says
    # The call's own errors pass unchanged.
    with pytest.raises(TypeError, match=r"^generate: max_tokens: expected int, got str$"):
        window.generate([1], max_tokens="4")
    # A missing argument, one positional argument too many and one given twice are named the same way.
    for call, says in (
            (lambda: window.generate(), "generate: missing required argument 'query'"),
            (lambda: window.generate([1], 4), "generate: takes 1 positional argument (query), got 2"),
            (lambda: window.generate([1], query=[2]), "generate: got argument 'query' both by position and by keyword"),
            (lambda: engine.tokenize_chat(), "tokenize_chat: missing required argument 'messages'"),
            (lambda: orbit.replay("t.json"), "replay: missing required argument 'model'"),
            (lambda: orbit.generate_many(), "generate_many: missing required argument 'requests'")):
        with pytest.raises(TypeError) as e:
            call()
        assert str(e.value) == says
    assert orbit.Window.generate.__doc__.startswith("generate(self: orbit._orbit.Window, query: object, *,")


TOOLS = [{"type": "function", "function": {"name": "find", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]


# Each of these was accepted and changed nothing (the CLI refuses the same settings, or they contradict each other).
SAYS_NOTHING = {
    "top_p at temperature 0": (lambda o, w: w.generate(" A", max_tokens=1, top_p=0.5),
                               "generate: top_p applies only with temperature > 0"),
    "seed at temperature 0": (lambda o, w: w.generate(" A", max_tokens=1, seed=3),
                              "generate: seed applies only with temperature > 0"),
    "generate_n's seed at temperature 0": (lambda o, w: w.generate_n(" A", 2, max_tokens=1, seed=3),
                                           "seed applies only with temperature > 0"),
    "generate_many's top_p at temperature 0": (
        lambda o, w: o.generate_many([(w, " A", {"max_tokens": 1, "top_p": 0.9})]),
        "generate_many: requests[0]: top_p applies only with temperature > 0"),
    "a call format with tool_choice none": (
        lambda o, w: w.generate(" A", max_tokens=1, tools=TOOLS, tool_choice="none", tool_call_format="hermes"),
        "tool_call_format = hermes says how calls are read, and tool_choice = 'none' reads none"),
    "a response_format beside a forced call": (
        lambda o, w: w.generate(" A", max_tokens=1, tools=TOOLS, tool_choice="required",
                                response_format="json_object"),
        "response_format shapes a text answer, and tool_choice = 'required' makes the answer a call"),
    "a response_format beside a named call": (
        lambda o, w: w.generate(" A", max_tokens=1, tools=TOOLS, tool_choice="find",
                                response_format={"type": "object"}),
        "tool_choice = 'find' makes the answer a call"),
    "rank beside rank_k": (lambda o, w: o.Policy(rank=8, rank_k=4), "rank sets rank_k and rank_v together"),
    "rank_v beside rank": (lambda o, w: o.Policy("patch:16").replace(rank_v=4, rank=8),
                           "rank_v was given too"),
}


@pytest.mark.parametrize("case", sorted(SAYS_NOTHING))
def test_arguments_that_would_change_nothing_are_refused_by_name(orbit, window, case):
    call, message = SAYS_NOTHING[case]
    with pytest.raises(ValueError, match=re.escape(message)):
        call(orbit, window)


def test_their_meaningful_neighbours_still_run(orbit, window):
    assert window.generate(" A", max_tokens=2, temperature=0.0, top_p=1.0, seed=0).tokens
    assert window.generate(" A", max_tokens=2, temperature=0.8, top_p=0.5, seed=3).tokens
    assert window.generate(" A", max_tokens=2, tools=TOOLS, tool_choice="required", response_format="text").tokens
    assert orbit.Policy(rank_k=4, rank_v=8).name.startswith("patch:4/8")
    # A malformed response_format is refused as such beside a forced call too.
    with pytest.raises(orbit.OrbitError, match="response_format"):
        window.generate(" A", max_tokens=1, tools=TOOLS, tool_choice="required", response_format="xml")


@pytest.mark.parametrize("keyword", ["tokenizer", "store_dir", "device", "dtype", "eviction", "cold_tier"])
def test_an_empty_engine_setting_is_refused_not_read_as_its_default(orbit, stories260k_path, keyword):
    with pytest.raises(ValueError, match=re.escape(f"Engine: {keyword} is empty (leave it out for the default")):
        orbit.Engine(stories260k_path, **{keyword: ""})


def test_remote_max_held_fraction_needs_a_bounded_disk_tier(orbit, stories260k_path, tmp_path):
    url = "redis://127.0.0.1:1"
    with pytest.raises(orbit.OrbitError, match=r"remote_max_held_fraction = 0\.3 is a share of the disk tier's budget, "
                                               r"and store_dir is empty"):
        orbit.Engine(stories260k_path, remote=url, remote_max_held_fraction=0.3)
    with pytest.raises(orbit.OrbitError, match=r"and disk_budget_bytes is 0 \(the disk is unlimited\)"):
        orbit.Engine(stories260k_path, store_dir=tmp_path, remote=url, remote_max_held_fraction=0.3)


def test_replay_refuses_two_specs_of_one_policy(orbit, stories260k_path):
    trace = orbit.make_trace("web", steps=3, seed=1)
    with pytest.raises(orbit.OrbitError, match=r"replay: policies lists 'patch:16' twice"):
        orbit.replay(trace, stories260k_path, policies=["patch:16", "patch:16"])
    with pytest.raises(orbit.OrbitError, match=r"replay: policies lists 'default' and '.*', the same policy"):
        orbit.replay(trace, stories260k_path, policies=["default", "patch:16:kl=0.003:heal:prep=1:move=8:lists=3"])
