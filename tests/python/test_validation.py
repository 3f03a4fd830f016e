"""Python-side validation: values that used to be silently reinterpreted are refused with a message
naming the field. Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python."""
import numpy as np
import pytest


@pytest.mark.parametrize("field", ["rank", "rank_k", "rank_v"])
def test_negative_rank_is_refused_not_read_as_full(orbit, field):
    with pytest.raises(ValueError, match=f"WindowPolicy.{field} = -1 must be a positive int or 'full'"):
        orbit.Policy("patch:8", **{field: -1})
    full = orbit.Policy("patch:8", **{field: "full"})
    assert full.rank_k == -1 or full.rank_v == -1  # 'full' still selects every singular direction
    assert orbit.Policy("patch:8", **{field: 3}) != full


def test_page_size_past_the_bound_is_an_error_not_a_crash(orbit, stories260k_path):
    # 2**62 tokens per page overflowed the page's byte size to 0, then divided by it (SIGFPE).
    with pytest.raises(orbit.OrbitError, match=r"^Engine: page_size must be <= 1048576 tokens"):
        orbit.Engine(stories260k_path, page_size=2**62)


@pytest.mark.parametrize("field", ["max_tokens", "note"])
def test_load_trace_refuses_deep_nesting_without_crashing(orbit, tmp_path, field):
    # The error message used to dump() the value, recursing once per level until the stack overflowed.
    deep = "[" * 100000 + "]" * 100000
    path = tmp_path / "deep.json"
    path.write_text('{"format": "orbit-trace/1", "probe": [1], "chunks": [], '
                    '"steps": [{"op": "generate", "%s": %s}]}' % (field, deep))
    with pytest.raises(orbit.OrbitError, match="JSON nests deeper than 128 levels"):
        orbit.load_trace(str(path))


def test_load_trace_reports_an_out_of_range_number(orbit, tmp_path):
    path = tmp_path / "big.json"
    path.write_text('{"format": "orbit-trace/1", "probe": [1e999], "chunks": [], "steps": []}')
    with pytest.raises(orbit.OrbitError, match="not valid JSON: a number is out of range"):
        orbit.load_trace(str(path))


def test_slide_zero_is_no_operation(orbit, small_engine):
    w = small_engine.new_window()
    w.add_turn([1, 2, 3])
    w.admit(small_engine.add_tokens([5, 6, 7, 8]))
    version = w.version
    report = w.slide(0)
    assert report.op == orbit.Operation.slide
    assert w.version == version and len(w) == 2


def test_negative_stop_tokens_are_refused(orbit, small_engine):
    w = small_engine.new_window()
    w.add_turn([1, 2, 3])
    with pytest.raises(orbit.OrbitError, match=r"generate: stop_tokens holds -5, outside the vocabulary \[0, 512\)"):
        w.generate([4], max_tokens=2, stop_tokens=[-5])


def test_token_ids_past_int64_are_named_not_wrapped(orbit, small_engine):
    # 2**63 became a negative id in the cast to int64 and was reported as negative.
    with pytest.raises(ValueError, match=r"add_tokens: tokens\[0\]: 9223372036854775808 is past the largest int64"):
        small_engine.add_tokens([2**63])


def test_instance_id_past_the_range_is_a_value_error(orbit, small_engine):
    w = small_engine.new_window()
    with pytest.raises(ValueError, match=r"evict: instance: instance id 1180591620717411303424 is past the largest"):
        w.evict(2**70)


@pytest.mark.parametrize("spec", ["patch:8:kl=0.1:kl=0.2", "patch:8:heal:heal=0.01", "patch:deep:deep"])
def test_duplicate_policy_modifiers_are_refused(orbit, spec):
    with pytest.raises(orbit.OrbitError, match="is given twice"):
        orbit.Policy(spec)


@pytest.mark.parametrize("options, message", [
    ({"disk_budget_bytes": 5 << 20}, r"^Engine: disk_budget_bytes = 5242880 bounds the disk tier, which needs a store_dir"),
    ({"remote_ttl_seconds": 60}, r"^Engine: remote_ttl_seconds = 60 applies to the remote tier, and remote is empty"),
    ({"remote_secret": "s3cret"}, r"^Engine: remote_secret is given, but remote is empty"),
    ({"remote_max_held_fraction": 0.9},
     r"^Engine: remote_max_held_fraction = 0.9 applies to the remote tier, and remote is empty"),
])
def test_tier_options_without_their_tier_are_refused_not_ignored(orbit, stories260k_path, options, message):
    with pytest.raises(orbit.OrbitError, match=message):
        orbit.Engine(stories260k_path, **options)


def test_an_infinite_temperature_is_refused(orbit, small_engine):
    # softmax(logits / inf) is uniform: every token equally likely whatever the model says.
    w = small_engine.new_window()
    w.add_turn([1, 2, 3])
    with pytest.raises(orbit.OrbitError, match=r"generate: temperature = inf must be a finite number >= 0"):
        w.generate([4], max_tokens=2, temperature=float("inf"))


def test_detokenize_refuses_a_previous_token_outside_the_vocabulary(orbit, stories260k_path):
    with orbit.Engine(stories260k_path) as engine:
        assert isinstance(engine.detokenize([365], previous=1), str)  # BOS, and -1 below: as before
        assert isinstance(engine.detokenize([365], previous=-1), str)
        with pytest.raises(orbit.OrbitError, match=r"detokenize: previous = 99999 is neither -1"):
            engine.detokenize([365], previous=99999)
        with pytest.raises(orbit.OrbitError, match=r"detokenize: previous = -2"):
            engine.detokenize([365], previous=-2)


@pytest.mark.parametrize("kind", ["video", "browse", "rag"])
def test_make_trace_refuses_sample_text_where_there_is_none_to_sample(orbit, kind):
    with pytest.raises(orbit.OrbitError, match=f"sample_text applies to kinds web and agent only \\(kind '{kind}'"):
        orbit.make_trace(kind, steps=2, sample_text=True)
    assert orbit.make_trace("web", steps=2, sample_text=True)["steps"]


@pytest.mark.parametrize("name", ["chat_template", "tools", "extra"])
def test_an_empty_str_for_a_chat_option_is_refused_not_read_as_none(orbit, small_engine, name):
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match=f"{name} is an empty str"):
        small_engine.new_window().sync(messages, **{name: ""})
    with pytest.raises(ValueError, match=f"{name} is an empty str"):
        small_engine.render_chat(messages, **{name: ""})


@pytest.mark.parametrize("call", ["sync", "plan_sync", "prepare_sync", "render_chat", "tokenize_chat"])
def test_chat_option_errors_name_the_argument_and_the_function_called(orbit, small_engine, call):
    messages = [{"role": "user", "content": "hi"}]
    target = small_engine if call in ("render_chat", "tokenize_chat") else small_engine.new_window()
    fn = getattr(target, call)
    with pytest.raises(ValueError, match=rf"^{call}: extra is not valid JSON: Expecting property name"):
        fn(messages, extra="{bad")
    with pytest.raises(ValueError, match=rf"^{call}: tools is not valid JSON: "):
        fn(messages, tools="[bad")
    with pytest.raises(ValueError, match=rf"^{call}: extra must be a JSON object \(a dict of template variables\)"):
        fn(messages, extra="[1]")
    with pytest.raises(ValueError, match=rf"^{call}: tools must be a JSON array \(a list of tool schemas\)"):
        fn(messages, tools="{}")
    with pytest.raises(ValueError, match=rf"^{call}: chat_template is an empty str"):
        fn(messages, chat_template="")
    if call not in ("render_chat", "tokenize_chat"):
        with pytest.raises(ValueError, match=rf"^{call}: chunk_min_tokens = -1 must be >= 0"):
            fn(messages, chunk_min_tokens=-1)
    fn(messages, tools="[]", extra='{"date_string": "today"}')  # valid JSON text is passed on
    # Values of another type name the argument too (they raised a bare cast error, or the C++ option's
    # "ChatOptions::extra_json must be a JSON object").
    with pytest.raises(TypeError, match=rf"^{call}: extra must be a dict of template variables .* got list"):
        fn(messages, extra=[1])
    with pytest.raises(TypeError, match=rf"^{call}: tools must be a list of tool schemas .* got dict"):
        fn(messages, tools={"type": "function", "function": {"name": "f"}})
    with pytest.raises(TypeError, match=rf"^{call}: chat_template must be a str .* got int"):
        fn(messages, chat_template=3)
    fn(messages, tools=({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},))


@pytest.mark.parametrize("name", ["store_list", "store_summary", "store_verify", "store_gc", "store_repair"])
def test_a_store_dir_of_the_wrong_type_names_the_argument(orbit, tmp_path, name):
    # os.fspath's own TypeError ("expected str, bytes or os.PathLike object, not NoneType") named no argument.
    with pytest.raises(TypeError, match=f"{name}: dir must be a str or os.PathLike, got NoneType"):
        getattr(orbit, name)(None)
    if name == "store_list":
        with pytest.raises(orbit.OrbitError):  # an empty directory is no store: the path itself was taken
            orbit.store_list(tmp_path)


@pytest.mark.parametrize("call", ["logits", "reference_logits"])
def test_all_rows_none_is_refused_not_read_as_false(orbit, small_engine, call):
    w = small_engine.new_window()
    w.add_turn([1, 2, 3])
    with pytest.raises(TypeError, match=f"{call}: all_rows: expected bool, got None"):
        getattr(w, call)([1, 2], all_rows=None)
    assert getattr(w, call)([1, 2], all_rows=True).shape[0] == 2
    assert getattr(w, call)([1, 2], all_rows=False).ndim == 1


@pytest.mark.parametrize("seed, error, message", [
    (-1, ValueError, r"generate: seed = -1 is out of range: expected int in \[0, 2\*\*64\)"),
    (2**64, ValueError, r"generate: seed = 18446744073709551616 is out of range"),
    (1.5, TypeError, r"generate: seed: expected int, got float"),
    (None, TypeError, r"generate: seed: expected int, got None"),
    (True, TypeError, r"generate: seed: expected int, got bool"),
])
def test_a_seed_out_of_range_names_the_seed_and_its_range(orbit, small_engine, seed, error, message):
    # pybind11 answered with its generic "incompatible function arguments" and the whole signature.
    w = small_engine.new_window()
    w.add_turn([1, 2, 3])
    with pytest.raises(error, match=message):
        w.generate(" there", max_tokens=2, seed=seed)
    top = w.generate(" there", max_tokens=2, temperature=1.0, seed=2**64 - 1)
    assert top.text == w.generate(" there", max_tokens=2, temperature=1.0, seed=2**64 - 1).text


def test_logprobs_none_is_refused_not_read_as_false(orbit, small_engine):
    # pybind11's bool conversion read None as False: the caller asking for nothing got no log probabilities.
    w = small_engine.new_window()
    w.add_turn([1, 2, 3])
    with pytest.raises(TypeError, match="^generate: logprobs: expected bool, got None"):
        w.generate(" there", max_tokens=2, logprobs=None)
    with pytest.raises(TypeError, match="^generate_n: logprobs: expected bool, got None"):
        w.generate_n(" there", 2, max_tokens=2, logprobs=None)
    with pytest.raises(TypeError, match=r"generate_many.*: logprobs: expected bool, got None"):
        orbit.generate_many([(w, " there", {"max_tokens": 2, "logprobs": None})])
    with pytest.raises(TypeError, match="^generate: logprobs: expected bool, got str"):
        w.generate(" there", max_tokens=2, logprobs="yes")
    assert len(w.generate(" there", max_tokens=2, logprobs=True).logprobs) == 2
    assert w.generate(" there", max_tokens=2, logprobs=False).logprobs == []
    assert len(w.generate_n(" there", 2, max_tokens=2, logprobs=True)[0].logprobs) == 2


ENUMS = ["ChunkKind", "Operation", "StepAction", "PatchMatch", "MissAction", "SurvivorAction", "StalePatch",
         "BackgroundMode", "StoreTier", "EntryKind", "BlobEncoding", "SyncAction"]


@pytest.mark.parametrize("name", ENUMS)
def test_an_enum_refuses_an_int_no_member_holds(orbit, name):
    # pybind11's enums took any int: ChunkKind(99) printed as 'embeddings', other enums as '?'.
    enum = getattr(orbit, name)
    for value in (99, -1, len(enum.__members__)):
        with pytest.raises(ValueError, match=rf"{name}\(value\): {value} is not a {name} \(members: "):
            enum(value)
    for member in enum.__members__.values():
        assert enum(int(member)) == member and str(enum(int(member))) == str(member)
        assert enum(np.int64(int(member))) == member
    # Iterable as Python's enums (pybind11's raised TypeError): the members in value order.
    assert list(enum) == sorted(enum.__members__.values(), key=int) and len(enum) == len(enum.__members__)
    assert all(member in enum for member in enum) and int(list(enum)[0]) not in enum
    # A bool is not an int here, as for every int argument (ChunkKind(True) was ChunkKind.embeddings).
    for value, shown in ((True, "bool"), (np.bool_(False), "bool"), (1.0, "float"), ("0", "str")):
        with pytest.raises(TypeError, match=rf"^{name}\(value\): expected int, got {shown}$"):
            enum(value)
    # One constructor, the checked one: help() listed pybind11's own `value: int` overload too, unreachable.
    assert enum.__init__.__doc__.strip() == f"__init__(self: orbit._orbit.{name}, value: object) -> None"


UNENCODABLE = "a\udcffb"  # a lone surrogate (bytes decoded with errors='surrogateescape'): no UTF-8 for it


@pytest.mark.parametrize("call, named", [
    (lambda w: w.generate(UNENCODABLE, max_tokens=1), "generate: query"),
    (lambda w: w.generate([1], max_tokens=1, stop=UNENCODABLE), "generate: stop"),
    (lambda w: w.generate([1], max_tokens=1, stop=["x", UNENCODABLE]), r"generate: stop\[1\]"),
    (lambda w: w.generate([1], max_tokens=1, response_format="json_object",
                          constraint_trigger_block=(UNENCODABLE, "</think>")),
     r"generate: constraint_trigger_block\[0\]"),
    (lambda w: w.generate([1], max_tokens=1, response_format=UNENCODABLE), "generate: response_format"),
    (lambda w: w.generate([1], max_tokens=1, response_format={"enum": [UNENCODABLE]}), "generate: response_format"),
    (lambda w: w.generate([1], max_tokens=1, tools=[{"name": "f", "description": UNENCODABLE}]), "generate: tools"),
    (lambda w: w.generate([1], max_tokens=1, logit_bias={UNENCODABLE: 1}), "generate: logit_bias key"),
    (lambda w: w.add_turn(UNENCODABLE), "add_turn: tokens"),
    (lambda w: w.admit(UNENCODABLE), "admit: chunk"),
    (lambda w: w.engine.new_window(policy=UNENCODABLE), "new_window: policy"),
    (lambda w: type(w.policy)(UNENCODABLE), r"Policy\(\): spec"),
    (lambda w: type(w.policy)("patch:8", on_miss=UNENCODABLE), "WindowPolicy.on_miss"),
    (lambda w: w.sync([{"role": "user", "content": "x"}], tools=[{"name": "f", "description": UNENCODABLE}]),
     "sync: tools"),
    (lambda w: w.sync([{"role": "user", "content": "x"}], extra={"k": UNENCODABLE}), "sync: extra"),
    (lambda w: w.sync([{"role": "user", "content": "x"}], chat_template=UNENCODABLE), "sync: chat_template"),
    (lambda w: w.sync([{"role": "assistant", "content": "", "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": UNENCODABLE, "arguments": "{}"}}]}]),
     r"messages\[0\].tool_calls\[0\].function.name"),
    (lambda w: w.sync([{"role": "assistant", "content": "", "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "f", "arguments": {"a": UNENCODABLE}}}]}]),
     r"messages\[0\].tool_calls\[0\].function.arguments"),
    (lambda w: w.logits(UNENCODABLE), "logits: query"),
    (lambda w: w.engine.add_tokens(UNENCODABLE), "add_tokens: tokens"),
    (lambda w: w.sync([{"role": "user", "content": UNENCODABLE}]), r"messages\[0\].content"),
    (lambda w: w.sync([{"role": UNENCODABLE, "content": "x"}]), r"messages\[0\].role"),
    (lambda w: w.sync([{"role": "user", "content": [{"type": "text", "text": UNENCODABLE}]}]),
     r"messages\[0\].content\[0\].text"),
])
def test_text_utf8_cannot_hold_is_refused_naming_the_argument(orbit, small_engine, call, named):
    # pybind11's str conversion failed with RuntimeError('Unable to cast Python instance to C++ type'),
    # naming neither the argument nor the character.
    w = small_engine.new_window()
    with pytest.raises(ValueError, match=rf"{named} is not valid text: 'utf-8' codec can't encode character "
                                         r"'\\udcff' in position \d+: surrogates not allowed"):
        call(w)
    assert w.generate("a b", max_tokens=1).stop_reason == "max_tokens"  # the window still answers


@pytest.mark.parametrize("value", [5, ["json_object"], b"json_object"])
def test_a_response_format_of_the_wrong_type_is_a_type_error(orbit, small_engine, value):
    # It was an OrbitError ('must be a str or a dict') naming no type, where every other argument of the wrong
    # type raises TypeError.
    with pytest.raises(TypeError, match=r"generate: response_format must be a str, a dict or None, got "):
        small_engine.new_window().generate([1], max_tokens=1, response_format=value)


def test_paths_are_the_file_systems_bytes(orbit, stories260k_path, tmp_path):
    # A store directory os.listdir names with a byte that is not UTF-8 (a str holding '\udcff') raised
    # ValueError/RuntimeError; a bytes path was read as the text "b'...'"; an error quoting such a path raised
    # UnicodeDecodeError in place of the OrbitError.
    os = __import__("os")
    raw = os.path.join(os.fsencode(tmp_path), b"st\xffore")
    os.mkdir(raw)
    (listed,) = os.listdir(tmp_path)
    assert listed == "st\udcffore"
    with orbit.Engine(str(stories260k_path), store_dir=os.path.join(tmp_path, listed)) as e:
        e.add_text("a dog")
    assert sorted(os.listdir(raw)) == [b"LOCK", b"blobs", b"index.sqlite"]  # the directory os.listdir named
    with orbit.Engine(os.fsencode(stories260k_path), store_dir=raw) as e:
        assert e.model_info.vocab_size == 512
    with pytest.raises(orbit.OrbitError, match="no\ufffdsuch.bin: no such file or directory") as info:
        orbit.Engine(os.path.join(tmp_path, "no\udcffsuch.bin"))
    assert "\ufffd" in info.value.reason


def test_a_path_holding_a_nul_is_refused_not_cut_short(orbit, stories260k_path, tmp_path):
    # The C calls read a path up to its first NUL: Engine(model + "\0x") loaded the model, store_dir="s\0x"
    # made the store s, and save_trace wrote another file than the one named (its part before the NUL); the
    # errors quoted the path cut there. Each now raises ValueError naming the argument, as open() does.
    model, cut = str(stories260k_path), str(tmp_path / "cut")
    trace = orbit.make_trace("web", steps=2)
    calls = {
        "Engine: model": lambda: orbit.Engine(model + "\0.bin"),
        "Engine: tokenizer": lambda: orbit.Engine(model, tokenizer=cut + "\0x"),
        "Engine: store_dir": lambda: orbit.Engine(model, store_dir=cut + "\0x"),
        "save_trace: path": lambda: orbit.save_trace(trace, (cut + "\0x").encode()),
        "load_trace: path": lambda: orbit.load_trace(cut + "\0x"),
        "replay: model": lambda: orbit.replay(trace, model + "\0x"),
        "store_list: dir": lambda: orbit.store_list(cut + "\0x"),
        "store_gc: dir": lambda: orbit.store_gc(cut + "\0x"),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=f"^{name}: embedded null byte at index "):
            call()
    assert not (tmp_path / "cut").exists()  # nothing written under the name before the NUL


def test_numpy_integers_are_instance_ids(orbit, small_engine):
    # An agent picks what to evict with numpy (np.argmax over per-instance losses); numpy's integers were refused
    # ('expected an instance id (int) or an InstanceInfo, got int64') where every token argument takes them.
    np = pytest.importorskip("numpy")
    w = small_engine.new_window()
    for text in ("a dog", "a cat", "a ball"):
        w.admit(small_engine.add_text(text))
    ids = np.array([i.id for i in w.instances])
    assert np.int64(ids[1]) in w and w.instance(np.uint8(ids[1])).id == ids[1]
    assert w.kv(ids[0]).length == w.instances[0].length
    w.reorder(ids[::-1])
    assert [i.id for i in w.instances] == list(ids[::-1])
    w.evict(ids[np.argmax([0.1, 0.9, 0.3])])
    assert [i.id for i in w.instances] == [ids[2], ids[0]]
    for bad in (np.bool_(True), True, np.float64(1.0), 1.0, np.array([1])):
        with pytest.raises(TypeError, match="evict: instance: expected an instance id"):
            w.evict(bad)
    with pytest.raises(TypeError, match="in Window: expected"):
        np.bool_(True) in w
