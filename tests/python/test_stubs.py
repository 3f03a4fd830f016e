"""The typed stubs (orbit/_orbit.pyi) against the built module, both ways: every function's and method's
parameters as the binding declares them (names, positional or keyword-only, which have defaults and what
they are), every name and member a stub lists exists, and a stub's plain attribute (writable) is a writable
property while a stub's @property without a setter is read-only. test_bindings checks the other way round
(every public name and member has a stub).

Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python (see conftest.py).
"""
import ast
import inspect
import pathlib
import re

import pytest

# Members of the public classes compared here: the public ones and these dunders.
DUNDERS = ("__init__", "__enter__", "__exit__", "__len__", "__iter__", "__contains__")
# Attributes set on instances, not on the class: checked on a real instance below.
INSTANCE_ATTRIBUTES = {"OrbitError": {"source", "status", "reason"},
                       "Generation": {"tool_calls", "tool_call_cut", "content", "json"}}


@pytest.fixture(scope="module")
def stub(orbit):
    return ast.parse((pathlib.Path(orbit.__file__).parent / "_orbit.pyi").read_text())


def stub_parameters(fn: ast.FunctionDef):
    """[(name, kind, default source or None)]; kind is 'posonly', 'pos', 'kw', '*' or '**'."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + [ast.unparse(d) for d in a.defaults]
    out = [(p.arg, "posonly" if i < len(a.posonlyargs) else "pos", d)
           for i, (p, d) in enumerate(zip(positional, defaults))]
    if a.vararg:
        out.append((a.vararg.arg, "*", None))
    out += [(p.arg, "kw", None if d is None else ast.unparse(d)) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append((a.kwarg.arg, "**", None))
    return out


def split_top_level(text):
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch in "([{<"
        depth -= ch in ")]}>"
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    return parts + ([current.strip()] if current.strip() else [])


def binding_signatures(obj, name):
    """The signatures pybind11 writes at the top of a function's docstring (one per overload)."""
    signatures = []
    for line in (obj.__doc__ or "").splitlines():
        m = re.match(r"^(?:\d+\. )?" + re.escape(name) + r"\((.*)\) -> .*$", line.strip())
        if not m:
            continue
        params, keyword_only = [], False
        for p in split_top_level(m.group(1)):
            if p == "*":
                keyword_only = True
            elif p.startswith("**"):
                params.append((p[2:].split(":")[0], "**", None))
            elif p.startswith("*"):
                params.append((p[1:].split(":")[0], "*", None))
                keyword_only = True
            else:
                pname = p.split(":")[0].split("=")[0].strip()
                default = p.split("=", 1)[1].strip() if "=" in p else None
                # pybind11 names an unnamed argument argN: positional only.
                kind = "kw" if keyword_only else ("posonly" if re.fullmatch(r"arg\d+", pname) else "pos")
                params.append((pname, kind, default))
        signatures.append(params)
    if not signatures and inspect.isfunction(obj):  # pure Python attached to a class (Window.stream)
        kinds = {inspect.Parameter.POSITIONAL_ONLY: "posonly", inspect.Parameter.POSITIONAL_OR_KEYWORD: "pos",
                 inspect.Parameter.KEYWORD_ONLY: "kw", inspect.Parameter.VAR_POSITIONAL: "*",
                 inspect.Parameter.VAR_KEYWORD: "**"}
        signatures.append([(p.name, kinds[p.kind], None if p.default is p.empty else repr(p.default))
                           for p in inspect.signature(obj).parameters.values()])
    return signatures


def same_default(stub_default, real_default):
    if (stub_default is None) != (real_default is None):
        return False
    if stub_default is None or stub_default == "..." or stub_default == real_default:
        return True
    try:
        s, r = eval(stub_default), eval(real_default)  # literals only: both sides are source text
    except Exception:
        return False
    if isinstance(s, (list, tuple)) and isinstance(r, (list, tuple)):
        return list(s) == list(r)
    return s == r


def same_parameters(stub_params, real_params):
    if len(stub_params) != len(real_params):
        return False
    for (sn, sk, sd), (rn, rk, rd) in zip(stub_params, real_params):
        if rk == "posonly":
            if sk != "posonly":
                return False
        elif (sn, sk) != (rn, rk):
            return False
        if not same_default(sd, rd):
            return False
    return True


def describe(params):
    return ", ".join(f"{n}[{k}]" + ("" if d is None else f"={d}") for n, k, d in params)


def compared_callables(orbit, stub):
    """(label, binding callable, its name, stub FunctionDefs, is a method) for every function and method."""
    classes = {n.name: n for n in stub.body if isinstance(n, ast.ClassDef)}
    functions = {n.name: n for n in stub.body if isinstance(n, ast.FunctionDef)}
    from orbit import _orbit
    for name in orbit.__all__:
        obj = getattr(orbit, name)
        if getattr(_orbit, name, None) is not getattr(obj, "__wrapped__", obj):  # _keywords.py wraps some
            continue  # pure Python (Store, GenerationStream): typed in place
        if not isinstance(obj, type):
            if callable(obj):
                yield name, obj, name, [functions[name]], False
            continue
        if issubclass(obj, BaseException) or obj.__name__ != name:
            continue  # errors take a message; Policy is WindowPolicy
        defs = {}
        node = classes[name]
        bases = [classes[b.id] for b in node.bases if isinstance(b, ast.Name) and b.id in classes]
        for n in [m for base in bases for m in base.body] + node.body:
            if isinstance(n, ast.FunctionDef) and not any(
                    ast.unparse(d) in ("property", f"{n.name}.setter") for d in n.decorator_list):
                defs.setdefault(n.name, []).append(n)
        for member, value in vars(obj).items():
            if member.startswith("_") and member not in DUNDERS:
                continue
            if isinstance(value, (property, obj)) or not callable(value):
                continue
            if member == "__init__" and "__init__(" not in (value.__doc__ or ""):
                continue  # pybind11's placeholder: the class has no constructor
            yield f"{name}.{member}", getattr(obj, member), member, defs.get(member, []), True


def test_every_binding_signature_matches_its_stub(orbit, stub):
    problems, compared = [], set()
    for label, fn, name, defs, is_method in compared_callables(orbit, stub):
        real = binding_signatures(fn, name)
        assert real, f"{label}: pybind11 wrote no signature in its docstring"
        if not defs:
            problems.append(f"{label}: no stub")
            continue
        stubs = [stub_parameters(d) for d in defs]
        if is_method:
            real = [r[1:] for r in real]  # self
            stubs = [s[1:] for s in stubs]
        if label in ("WindowPolicy.__init__", "WindowPolicy.replace"):
            continue  # **kwargs in the binding, spelled out in the stub: test_window_policy_keywords
        compared.add(label)
        for r in real:
            if not any(same_parameters(s, r) for s in stubs):
                problems.append(f"{label}: the binding takes ({describe(r)}), the stub says "
                                + " | ".join(f"({describe(s)})" for s in stubs))
        for s in stubs:
            if not any(same_parameters(s, r) for r in real):
                problems.append(f"{label}: the stub's ({describe(s)}) is no signature of the binding")
    assert not problems, "\n".join(problems)
    assert {"Engine.__init__", "Window.generate", "Window.stream", "Window.__contains__", "ChunkKind.__init__",
            "replay"} <= compared  # the walk reached functions, methods, the enums' base and pure Python


def test_window_policy_keywords(orbit, stub):
    """WindowPolicy(spec, **options) and replace(**options) take the policy's fields (and rank= for both
    ranks): the stub lists exactly those, and the binding accepts each."""
    policy_stub = next(n for n in stub.body if isinstance(n, ast.ClassDef) and n.name == "WindowPolicy")
    init = next(n for n in policy_stub.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    listed = {a.arg for a in init.args.kwonlyargs}
    fields = {m for m, v in vars(orbit.WindowPolicy).items() if isinstance(v, property) and v.fset is not None}
    assert listed == fields | {"rank"}
    default = orbit.WindowPolicy()
    for field in fields:
        orbit.WindowPolicy(**{field: getattr(default, field)})
        default.replace(**{field: getattr(default, field)})
    orbit.WindowPolicy(rank=8)


def test_every_stub_name_and_member_exists(orbit, stub):
    from orbit import _orbit
    aliases = {t.id for n in stub.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    missing = []
    for node in stub.body:
        name = getattr(node, "name", None) or (node.target.id if isinstance(node, ast.AnnAssign) else None)
        if name is None or name in aliases or name == "_Enum":
            continue  # type aliases and the stub's own base of the enums
        if not hasattr(_orbit, name):
            missing.append(name)
            continue
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(_orbit, name)
        for member in node.body:
            mname = getattr(member, "name", None) or (member.target.id if isinstance(member, ast.AnnAssign) else None)
            if mname and not hasattr(cls, mname) and mname not in INSTANCE_ATTRIBUTES.get(name, ()):
                missing.append(f"{name}.{mname}")
    assert not missing, f"listed in _orbit.pyi, absent from the module: {missing}"


def test_instance_attributes_the_stub_lists_are_set(orbit, stories260k_path):
    with orbit.Engine(str(stories260k_path)) as engine:
        g = engine.new_window().generate([1, 403], max_tokens=2)
        for attr in INSTANCE_ATTRIBUTES["Generation"]:
            assert hasattr(g, attr), f"Generation.{attr}"
        with pytest.raises(orbit.OrbitError) as info:
            engine.new_window().generate([1, 403], max_tokens=-1)
        for attr in INSTANCE_ATTRIBUTES["OrbitError"]:
            assert hasattr(info.value, attr), f"OrbitError.{attr}"


def test_stub_attributes_are_as_writable_as_the_module_s(orbit, stub):
    from orbit import _orbit
    wrong = []
    for node in stub.body:
        if not isinstance(node, ast.ClassDef) or not hasattr(_orbit, node.name):
            continue
        cls = getattr(_orbit, node.name)
        setters = {n.name for n in node.body if isinstance(n, ast.FunctionDef)
                   and any(ast.unparse(d) == f"{n.name}.setter" for d in n.decorator_list)}
        read_only = {n.name for n in node.body if isinstance(n, ast.FunctionDef)
                     and any(ast.unparse(d) == "property" for d in n.decorator_list)} - setters
        writable = setters | {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
        for member, value in vars(cls).items():
            if not isinstance(value, property):
                continue
            if member in writable and value.fset is None:
                wrong.append(f"{node.name}.{member}: writable in the stub, read-only in the module")
            if member in read_only and value.fset is not None:
                wrong.append(f"{node.name}.{member}: read-only in the stub, writable in the module")
    assert not wrong, "\n".join(wrong)


def test_aio_stub_forwards_the_window_s_arguments(orbit, stub):
    """AsyncWindow's coroutines take the synchronous Window's arguments (generate's but on_text, which the
    stream replaces): aio.pyi spells them out, so it follows the binding."""
    from orbit import aio
    aio_stub = ast.parse((pathlib.Path(aio.__file__).parent / "aio.pyi").read_text())
    async_window = next(n for n in aio_stub.body if isinstance(n, ast.ClassDef) and n.name == "AsyncWindow")
    wrong, compared = [], set()
    for node in async_window.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not hasattr(orbit.Window, node.name):
            continue
        real = binding_signatures(getattr(orbit.Window, node.name), node.name)
        if not real:
            continue
        want = [(n, k, d) for n, k, d in real[0][1:] if not (node.name == "generate" and n == "on_text")]
        got = stub_parameters(node)[1:]
        compared.add(node.name)
        if not same_parameters(got, want):
            wrong.append(f"AsyncWindow.{node.name}: Window's ({describe(want)}), aio.pyi's ({describe(got)})")
    assert not wrong, "\n".join(wrong)
    assert {"sync", "generate", "generate_n", "logits", "fork", "idle", "prepare_sync", "close"} <= compared


# Parameters the bindings read as token ids (to_tokens: ints or numpy integers, an integer array or tensor).
TOKEN_PARAMETERS = {
    ("RadixCache", "read"): ("prompt", "generated"),
    ("BlockPrefixCache", "read"): ("prompt", "generated"),
    (None, "chunk_key_tokens"): ("tokens",),
    ("Engine", "detokenize"): ("tokens",),
    ("Engine", "add_tokens"): ("tokens",),
    ("Window", "add_turn"): ("tokens",),
    ("Window", "plan_add_turn"): ("tokens",),
    ("Window", "logits"): ("query",),
    ("Window", "loss_by_instance"): ("query",),
}


def _stub_functions(stub):
    """{(class or None, name): FunctionDef} of every function the stub lists."""
    out = {(None, n.name): n for n in stub.body if isinstance(n, ast.FunctionDef)}
    for c in (n for n in stub.body if isinstance(n, ast.ClassDef)):
        out.update({(c.name, n.name): n for n in c.body if isinstance(n, ast.FunctionDef)})
    return out


def test_token_arguments_are_typed_as_what_they_take(orbit, stub):
    # RadixCache.read, BlockPrefixCache.read and chunk_key_tokens were typed Sequence[int], refusing the arrays,
    # tensors and numpy integers they take (a type checker flagged read(numpy.array([1, 2]))), and Tokens'
    # Sequence[int] refused a list of numpy.int64.
    functions = _stub_functions(stub)
    aliases = {t.id: ast.unparse(n.value) for n in stub.body if isinstance(n, ast.Assign)
               for t in n.targets if isinstance(t, ast.Name)}
    assert "Sequence[SupportsIndex]" in aliases["Tokens"]
    wrong = []
    for (cls, name), params in TOKEN_PARAMETERS.items():
        args = {a.arg: a for a in functions[(cls, name)].args.args + functions[(cls, name)].args.kwonlyargs}
        wrong += [f"{cls}.{name}({p})" for p in params if "Tokens" not in ast.unparse(args[p].annotation)]
    # No int list is read as Python ints only: each goes through to_tokens or to_int.
    for (cls, name), fn in functions.items():
        for a in fn.args.args + fn.args.kwonlyargs:
            if a.annotation is not None and "Sequence[int]" in ast.unparse(a.annotation):
                wrong.append(f"{cls}.{name}({a.arg}): {ast.unparse(a.annotation)}")
    assert not wrong, wrong
    np = pytest.importorskip("numpy")
    tokens = [np.int64(1), np.uint16(2)]
    assert orbit.RadixCache().read(tokens, np.array([3])) == 2
    assert orbit.chunk_key_tokens("f" * 64, tokens) == orbit.chunk_key_tokens("f" * 64, [1, 2])


def _bare_ints(annotation):
    """The annotation itself or a member of its Union / Optional that is bare `int` (not one inside a generic's
    arguments, such as a callback's Callable[[int], ...])."""
    if isinstance(annotation, ast.Name):
        return [annotation] if annotation.id == "int" else []
    if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) in ("Union", "Optional"):
        members = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        return [m for member in members for m in _bare_ints(member)]
    return []


# Bound with pybind11's own int caster and private to the package: typed as the int they are given.
PLAIN_INT_PARAMETERS = {("_Enum", "__init__")}


def test_int_arguments_are_typed_as_what_they_take(orbit, stub, stories260k_path):
    # Int arguments (IntArg, to_int, to_seed) take numpy integers (anything with __index__ but a bool) while the
    # stubs said `int`, so a type checker flagged generate(max_tokens=numpy.int64(8)); they are SupportsIndex.
    aio = ast.parse((pathlib.Path(orbit.__file__).parent / "aio.pyi").read_text())
    wrong = []
    for tree in (stub, aio):
        for (cls, name), fn in _stub_functions(tree).items():
            if (cls, name) in PLAIN_INT_PARAMETERS:
                continue
            for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs:
                if a.annotation is not None and _bare_ints(a.annotation):
                    wrong.append(f"{cls}.{name}({a.arg}): {ast.unparse(a.annotation)}")
    functions = _stub_functions(stub)
    for cls, name, param in (("Window", "generate", "seed"), ("Engine", "__init__", "pool_bytes"),
                             ("WindowPolicy", "__init__", "rank"), ("None", "make_trace", "steps")):
        fn = functions[(None if cls == "None" else cls, name)]
        (a,) = [a for a in fn.args.args + fn.args.kwonlyargs if a.arg == param]
        if "SupportsIndex" not in ast.unparse(a.annotation):
            wrong.append(f"{cls}.{name}({param}): {ast.unparse(a.annotation)}")
    assert not wrong, wrong
    # What they are typed as is what they take: numpy integers wherever the stubs say SupportsIndex.
    np = pytest.importorskip("numpy")
    i = np.int64
    assert orbit.ConstraintCacheOptions(max_entries=i(8), max_bytes=np.uint32(1 << 20)).max_entries == 8
    assert orbit.WindowPolicy(first_k=i(3), rank=np.int16(4)) == orbit.WindowPolicy(first_k=3, rank=4)
    assert orbit.RadixCache(i(64)).read([1, 2]) == orbit.RadixCache(64).read([1, 2])
    orbit.BlockPrefixCache(capacity_tokens=i(64), block_tokens=np.uint8(4))
    assert orbit.make_trace("web", steps=i(3), seed=np.uint64(5)) == orbit.make_trace(
        "web", steps=3, seed=5)
    with orbit.Engine(str(stories260k_path), pool_bytes=i(16 << 20), page_size=np.int32(16), threads=i(1)) as e:
        assert e.piece(i(5)) == e.piece(5)
        assert e.detokenize([5, 6], previous=i(-1)) == e.detokenize([5, 6])
        w = e.new_window(max_bytes=i(0))
        w.add_turn(e.tokenize("Once upon a time"))
        g = w.generate([5], max_tokens=i(3), temperature=1.0, seed=np.uint64(2), top_logprobs=i(0))
        assert g.tokens == w.generate([5], max_tokens=3, temperature=1.0, seed=2).tokens
        assert [x.tokens for x in w.generate_n([5], i(2), max_tokens=2)] == [
            x.tokens for x in w.generate_n([5], 2, max_tokens=2)]
        assert w.plan_slide(i(0)).describe() == w.plan_slide(0).describe()
