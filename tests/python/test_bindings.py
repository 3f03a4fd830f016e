"""The Python API end to end on the bundled model: every public name documented and in the stub, every window
operation, plan then apply, fork isolation, the re-prefill oracle, numpy/torch inputs, and errors with clear
messages (never a crash). Threads, lifetimes and leaks are test_bindings_lifetimes.py's.

Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python (see conftest.py).
"""
import ast
import pathlib
import random

import numpy as np
import pytest

from window_helpers import PAGE, POOL, make_chunks, random_tokens, window_error


@pytest.fixture
def engine(orbit, stories260k_path):
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE) as e:
        yield e


# ---- the module ---------------------------------------------------------------------------------------


def public_members(cls):
    for name, value in vars(cls).items():
        if name.startswith("_") and name not in ("__enter__", "__exit__", "__len__", "__iter__",
                                                 "__contains__"):
            continue
        if name in ("name", "value") or isinstance(value, type(cls)):  # enum internals
            continue
        yield name, value


def test_every_public_name_has_a_docstring(orbit):
    assert orbit.__version__
    for name in orbit.__all__:
        obj = getattr(orbit, name)
        if isinstance(obj, str):
            continue
        assert (obj.__doc__ or "").strip(), f"orbit.{name} has no docstring"
        if isinstance(obj, type) and not issubclass(obj, BaseException):
            for member, value in public_members(obj):
                if isinstance(value, obj):  # enum members
                    continue
                assert (getattr(value, "__doc__", None) or "").strip(), f"orbit.{name}.{member} has no docstring"


def test_the_stub_lists_every_public_name_and_member(orbit):
    package_dir = pathlib.Path(orbit.__file__).parent
    assert (package_dir / "py.typed").is_file()
    tree = ast.parse((package_dir / "_orbit.pyi").read_text())
    for typed_in_place in ("_store.py", "_stream.py"):  # pure Python, typed in place
        tree.body += ast.parse((package_dir / typed_in_place).read_text()).body
    stub_classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    stub_names = set(stub_classes)
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AnnAssign, ast.Assign)):
            stub_names |= {n.name} if isinstance(n, ast.FunctionDef) else {
                t.id for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    init_stub = (package_dir / "__init__.pyi").read_text()
    for name in orbit.__all__:
        assert name in stub_names, f"{name} missing from _orbit.pyi"
        assert f"{name} as {name}" in init_stub, f"{name} missing from __init__.pyi"
    for name in orbit.__all__:
        obj = getattr(orbit, name)
        if not isinstance(obj, type) or issubclass(obj, BaseException) or name == "Policy":
            continue
        stub = stub_classes[name]
        listed = {n.name for n in stub.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        listed |= {n.target.id for n in stub.body if isinstance(n, ast.AnnAssign)}
        if stub.bases and isinstance(stub.bases[0], ast.Name) and stub.bases[0].id in stub_classes:
            base = stub_classes[stub.bases[0].id]
            listed |= {n.name for n in base.body if isinstance(n, ast.FunctionDef)}
        for member, _ in public_members(obj):
            assert member in listed, f"orbit.{name}.{member} missing from _orbit.pyi"


def test_engine_is_a_context_manager_with_model_info(orbit, stories260k_path):
    with orbit.Engine(str(stories260k_path), pool_bytes=POOL, page_size=PAGE) as e:
        info = e.model_info
        assert info.architecture == "llama"
        assert info.num_layers > 0 and info.vocab_size == 512 and info.hidden_size > 0
        assert info.position_rows == 1
        assert len(info.fingerprint) > 0
        assert e.options.page_size == PAGE and e.options.pool_bytes == POOL
        assert "stories260K" in repr(e) and "ModelInfo(" in repr(info)
        assert not e.closed
        stats = e.stats
        assert stats.pool_pages > 0 and stats.pool_free_pages == stats.pool_pages and stats.windows == 0
    assert e.closed
    e.close()  # idempotent
    assert "closed" in repr(e)


def test_max_idle_chunks_bounds_the_registered_chunks(orbit, stories260k_path):
    with orbit.Engine(str(stories260k_path), pool_bytes=POOL, page_size=PAGE, max_idle_chunks=2) as e:
        assert e.options.max_idle_chunks == 2
        refs = [e.add_tokens([1 + i, 2 + i, 3 + i]) for i in range(4)]
        assert e.stats.chunks == 2 and [c.key for c in e.chunks] == [r.key for r in refs[2:]]
        with pytest.raises(orbit.OrbitError, match="max_idle_chunks"):
            e.chunk(refs[0].key)
        assert e.add_tokens([1, 2, 3]).key == refs[0].key  # added again: the same chunk
    with pytest.raises(orbit.OrbitError, match="max_idle_chunks"):
        orbit.Engine(str(stories260k_path), pool_bytes=POOL, page_size=PAGE, max_idle_chunks=-1)


def test_max_background_bytes_drops_the_oldest_queued_jobs(orbit, stories260k_path):
    # Deferred background work nobody runs: every first sight in context queues a patch job holding its KV.
    def admit_six(e):
        w = e.new_window(policy="patch:full:noreuse")
        for i in range(6):
            w.admit(e.add_tokens([(7 * i + j) % 500 + 3 for j in range(10)]))
        return w

    with orbit.Engine(str(stories260k_path), pool_bytes=POOL, page_size=PAGE, background="deferred") as e:
        admit_six(e)
        unbounded = e.stats
        assert e.options.max_background_bytes == 0 and unbounded.background_dropped == 0
        assert unbounded.background_pending >= 4
        per_job = unbounded.background_pending_bytes // unbounded.background_pending
        assert per_job > 0
    with orbit.Engine(str(stories260k_path), pool_bytes=POOL, page_size=PAGE, background="deferred",
                      max_background_bytes=2 * per_job) as e:
        assert e.options.max_background_bytes == 2 * per_job
        admit_six(e)
        s = e.stats
        assert s.background_pending == 2 and s.background_pending_bytes <= 2 * per_job
        assert s.background_dropped == unbounded.background_pending - 2
        assert e.run_background() >= 1 and e.stats.background_pending_bytes == 0
    with pytest.raises(orbit.OrbitError, match="max_background_bytes"):
        orbit.Engine(str(stories260k_path), pool_bytes=POOL, page_size=PAGE, max_background_bytes=-1)


def test_chunk_valid_does_not_count_as_a_use(orbit, stories260k_path):
    # max_idle_chunks forgets the least recently used chunk; reading .valid must not make a chunk recently used
    # (Engine::has_chunk), where e.chunk(key) does: the engine forgets the one its own uses left oldest.
    with orbit.Engine(str(stories260k_path), pool_bytes=POOL, page_size=PAGE, max_idle_chunks=2) as e:
        old, new = e.add_tokens([1, 2, 3]), e.add_tokens([4, 5, 6])
        for _ in range(3):
            assert old.valid  # the last asked of the two
        e.add_tokens([7, 8, 9])  # past 2: the least recently used goes, which is still `old`
        assert not old.valid and new.valid
        with pytest.raises(orbit.OrbitError, match="max_idle_chunks"):
            e.chunk(old.key)
        # A use (e.chunk) does move it: then the other one goes.
        third = e.chunk(e.add_tokens([7, 8, 9]).key)
        e.chunk(new.key)
        e.add_tokens([10, 11, 12])
        assert new.valid and not third.valid


def test_engine_device_and_dtype(orbit, stories260k_path):
    # bf16 on CPU: the weights load as bf16, windows run, the options and model info say so.
    with orbit.Engine(str(stories260k_path), pool_bytes=POOL, page_size=PAGE, device="cpu", dtype="bfloat16") as e:
        assert e.options.device == "cpu" and e.options.dtype == "bfloat16"
        assert e.model_info.device == "cpu" and e.model_info.dtype == "bfloat16"
        assert "dtype='bfloat16'" in repr(e.options)
        w = e.new_window(policy="reprefill")
        w.admit(e.add_tokens([1, 365, 1691 % 512, 7]))
        got = np.asarray(w.logits([5, 6]))
        want = np.asarray(w.reference_logits([5, 6]))
        assert np.abs(got - want).max() <= 5e-2 * np.abs(want).max()
    with pytest.raises(orbit.OrbitError, match="is not a compute dtype"):
        orbit.Engine(str(stories260k_path), dtype="int8")
    with pytest.raises(orbit.OrbitError, match="is not a device"):
        orbit.Engine(str(stories260k_path), device="gpu")


def test_engine_cuda_without_a_gpu_is_a_clear_error(orbit, stories260k_path):
    try:
        e = orbit.Engine(str(stories260k_path), device="cuda", pool_bytes=POOL, page_size=PAGE)
    except orbit.OrbitError as err:
        assert "no CUDA device" in str(err) and "'cuda'" in str(err)
        return
    with e:  # this process has a GPU: the engine must really run there
        assert e.model_info.device == "cuda:0"


# ---- window operations --------------------------------------------------------------------------------


def test_every_window_operation_plan_then_apply(orbit, engine):
    rng = random.Random(1)
    a, b, c, d = make_chunks(engine, rng, 4)
    assert a == engine.chunk(a.key) and hash(a) == hash(engine.chunk(a.key))
    assert len(a) == a.length and a.kind == orbit.ChunkKind.tokens and a.label == "c0" and len(a.key) == 64
    assert engine.add_tokens(engine_tokens := random_tokens(random.Random(9), 6)) == engine.add_tokens(engine_tokens)
    w = engine.new_window(policy="patch:16", label="main")
    assert w.label == "main" and w.policy.name == "patch:16" and len(w) == 0 and w.engine is engine

    # admit: plan (nothing changes), then apply
    plan = w.plan_admit(a)
    assert isinstance(plan, orbit.Plan) and plan.op == orbit.Operation.admit and w.version == plan.window_version
    assert len(plan) == len(plan.steps) == 1 and plan.exact and plan.window_tokens_after == a.length
    assert [s.action for s in plan] == [orbit.StepAction.canonical] and str(plan) == plan.describe()
    assert "Plan(admit" in repr(plan) and "PlanStep(canonical" in repr(plan.steps[0])
    assert w.version == 0 and len(w) == 0
    report = w.apply(plan)
    assert isinstance(report, orbit.ApplyReport) and report.op == orbit.Operation.admit
    assert report.canonicals_encoded == 1 and len(report.added) == 1 and w.version == 1
    r = w.admit(b)
    assert r.patches_formed == 1 and r.forward_tokens > 0
    w.admit(c, before=w.instances[1])  # before b
    assert [i.chunk for i in w.instances] == [a, c, b]
    t = w.add_turn(np.array([5, 6, 7]))
    assert len(t.added) == 1
    turn = w.instance(t.added[0])
    assert turn.is_turn and turn.turn_tokens == [5, 6, 7] and turn.formed_by == orbit.StepAction.prefill_turn
    assert w.tokens == a.length + b.length + c.length + 3 == w.stats.tokens
    assert a in w and turn in w and turn.id in w and d not in w and 999999 not in w
    # A chunk's key (str), as admit and the other chunk arguments take it; a key no chunk placed here has is not in.
    assert a.key in w and d.key not in w and "no such key" not in w
    for item in (1.5, None, True, b"key", [a]):
        with pytest.raises(TypeError, match="in Window: expected a ChunkRef, a chunk key"):
            item in w
    positions = [i.position for i in w]
    assert positions == sorted(positions) and positions[0] == 0

    # evict / slide / recall
    evicted = w.evict(w.instances[1])  # c
    assert evicted.removed and w.evicted == [c]
    w.slide(1)  # a, the oldest chunk
    assert set(ch.key for ch in w.evicted) == {a.key, c.key}
    assert [i.chunk for i in w.instances if not i.is_turn] == [b]
    recall_plan = w.plan_recall(a, before=w.instances[0])
    assert recall_plan.op == orbit.Operation.recall
    w.apply(recall_plan)
    assert w.instances[0].chunk == a and w.evicted == [c]
    w.recall(c.key)  # by key, at the tail
    assert w.instances[-1].chunk == c and w.evicted == []

    # reorder / place / recondition
    order = [i.id for i in w.instances][::-1]
    w.reorder(order)
    assert [i.id for i in w.instances] == order
    w.admit(d)
    assert w.plan_place().op == orbit.Operation.reorder
    w.place()
    w.recondition()
    stats = w.stats
    assert stats.instances == len(w) == 5 and stats.turns == 1 and stats.chunk_instances == 4
    assert stats.operations == w.version and "WindowStats(" in repr(stats)

    # reading
    q = [3, 4, 5]
    last = w.logits(q)
    rows = w.logits(q, all_rows=True)
    assert last.dtype == np.float32 and last.shape == (512,) and rows.shape == (3, 512)
    assert np.allclose(rows[-1], last, atol=1e-5)
    ref = w.reference_logits(q, all_rows=True)
    assert ref.shape == rows.shape and ref.dtype == np.float32
    g = w.generate(q, max_tokens=5)
    assert len(g.tokens) == 5 and g.stop_reason == "max_tokens" and list(g) == g.tokens
    prefix = list(q)
    for tok in g.tokens:  # greedy follows the argmax
        assert int(np.argmax(w.logits(prefix))) == tok
        prefix.append(tok)
    s1 = w.generate(q, max_tokens=6, temperature=1.0, top_p=0.9, seed=7)
    assert s1.tokens == w.generate(q, max_tokens=6, temperature=1.0, top_p=0.9, seed=7).tokens
    stop = w.generate(q, max_tokens=10, stop_tokens=[g.tokens[1]])
    assert stop.stop_reason == "stop_token" and len(stop.tokens) <= 2
    first_chunk = next(i for i in w if not i.is_turn)
    rep = w.disposable(first_chunk, q, answer_tokens=3)
    assert rep.instance == first_chunk.id and len(rep.answer) == 3 and bool(rep) == rep.disposable
    kv = w.kv(first_chunk)
    info = engine.model_info
    assert kv.length == first_chunk.length and kv.k.dtype == np.float32
    assert kv.k.shape == (info.num_layers, kv.length, *kv.k_shape) and kv.v.shape[:2] == (info.num_layers, kv.length)
    assert kv.pages.dtype == np.int32 and len(kv.pages) >= 1
    assert "Window(id=" in repr(w)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reprefill_policy_logits_equal_reference(orbit, engine, seed):
    rng = random.Random(100 + seed)
    chunks = make_chunks(engine, rng, 6)
    w = engine.new_window(policy=orbit.Policy("reprefill"))
    query = random_tokens(rng, 3)
    checked = 0
    for _ in range(30):
        inst = w.instances
        present = {i.chunk.key for i in inst if not i.is_turn}
        absent = [c for c in chunks if c.key not in present and c not in w.evicted]
        op = rng.randrange(7)
        if op == 0 and absent:
            before = rng.choice(inst) if inst and rng.randrange(3) == 0 else None
            w.admit(rng.choice(absent), before=before)
        elif op == 1:
            w.add_turn(random_tokens(rng, rng.randrange(2, 5)))
        elif op == 2 and len(inst) > 1:
            w.evict(rng.choice(inst))
        elif op == 3 and w.stats.chunk_instances > 1:
            w.slide(1)
        elif op == 4 and w.evicted:
            w.recall(rng.choice(w.evicted))
        elif op == 5 and len(inst) > 1:
            order = [i.id for i in inst]
            rng.shuffle(order)
            w.reorder(order)
        elif op == 6 and inst:
            w = w.fork()
        else:
            continue
        if len(w) == 0:
            continue
        assert window_error(w, query) <= 2e-4, f"step {_}: op {op}"
        checked += 1
    assert checked >= 10


def test_full_rank_patches_reconditioned_equal_reference(orbit, engine):
    rng = random.Random(5)
    a, b, c = make_chunks(engine, rng, 3)
    w = engine.new_window(policy=orbit.Policy("patch:full:exact"))
    for x in (a, b, c):
        w.admit(x)
    w.evict(w.instances[0])
    w.reorder([i.id for i in w.instances][::-1])
    assert window_error(w, [1, 2, 3]) <= 5e-4


@pytest.mark.parametrize("policy", ["default", "patch:16"])
def test_recondition_re_forms_what_an_edit_changed_and_keeps_the_rest(orbit, engine, policy):
    # Under a budget (default) as without one: turns and instances formed on their context as it is are kept
    # (a forced keep was refused under a budget: "no serving action can serve"), those an eviction left
    # behind a changed context are formed again, and the window reads what a re-prefill reads.
    rng = random.Random(11)
    a, b, c = make_chunks(engine, rng, 3)
    w = engine.new_window(policy=policy)
    w.add_turn([1, 7, 9, 11])
    for x in (a, b, c):
        w.admit(x)
    assert all(step.action == orbit.StepAction.keep for step in w.plan_recondition().steps)
    w.evict(w.instances[1])
    plan = w.plan_recondition()
    actions = {step.instance: step.action for step in plan.steps}
    turn, later = w.instances[0].id, [i.id for i in w.instances[1:]]
    assert actions[turn] == orbit.StepAction.keep
    assert all(actions[i] != orbit.StepAction.keep for i in later)
    w.apply(plan)
    assert all(i.exact for i in w.instances)
    assert window_error(w, [3, 4, 5]) <= 5e-4


def test_a_stale_plan_or_another_windows_plan_is_refused(orbit, engine):
    rng = random.Random(2)
    a, b = make_chunks(engine, rng, 2)
    w = engine.new_window()
    w.admit(a)
    stale = w.plan_admit(b)
    w.add_turn([5, 6])
    with pytest.raises(orbit.OrbitError, match="stale plan"):
        w.apply(stale)
    other = engine.new_window()
    with pytest.raises(orbit.OrbitError, match="plan was made by window"):
        other.apply(w.plan_add_turn([7]))
    assert w.plan_evict(w.instances[0]).count(orbit.StepAction.evict) == 1


def test_forks_are_isolated_and_free_their_pages(orbit, engine):
    rng = random.Random(3)
    a, b, c = make_chunks(engine, rng, 3)
    free_at_start = engine.stats.pool_free_pages
    q = [7, 8, 9]
    parent = engine.new_window()
    parent.admit(a)
    parent.admit(b)
    parent.add_turn([4, 5, 6])
    before = parent.logits(q, all_rows=True)
    parent_ids = [i.id for i in parent.instances]
    used = free_at_start - engine.stats.pool_free_pages
    with parent.fork() as child:
        assert engine.stats.pool_free_pages == free_at_start - used  # a fork allocates nothing
        assert child.stats.shared_pages == used and child.id != parent.id
        assert [i.id for i in child.instances] == parent_ids
        child.admit(c)
        child.evict(parent_ids[0])
        child.add_turn([1, 2])
        child.reorder([i.id for i in child.instances][::-1])
        assert np.array_equal(parent.logits(q, all_rows=True), before)
        assert [i.id for i in parent.instances] == parent_ids and parent.evicted == []
        speculative = child.fork()
        speculative.slide(1)
        assert len(child) == 4 and len(speculative) == 3
        speculative.close()
        assert child.stats.evicted == 1
    assert child.closed
    with pytest.raises(orbit.OrbitError, match="is closed"):
        child.admit(c)
    assert parent.stats.shared_pages == 0
    survivor = parent.fork()
    parent.close()
    assert np.array_equal(survivor.logits(q, all_rows=True), before)
    survivor.close()
    assert engine.stats.pool_free_pages == free_at_start and engine.stats.windows == 0


def test_max_bytes_refusal_raises_capacity_error_and_leaves_the_window(orbit, engine):
    rng = random.Random(4)
    chunks = make_chunks(engine, rng, 6)
    per_token = engine.model_info.kv_bytes_per_token
    w = engine.new_window(max_bytes=per_token * PAGE * 4)
    with pytest.raises(orbit.CapacityError) as info:
        for ch in chunks:
            w.admit(ch)
    err = info.value
    assert isinstance(err, orbit.OrbitError) and isinstance(err, RuntimeError)
    assert err.status == "out_of_capacity" and err.reason and str(err) == err.reason
    version, n = w.version, len(w)
    absent = next(ch for ch in chunks if ch not in w)
    plan = w.plan_admit(absent)
    assert plan.device_bytes_after > w.max_bytes
    with pytest.raises(orbit.CapacityError):
        w.apply(plan)
    assert w.version == version and len(w) == n and w.stats.device_bytes <= w.max_bytes


def test_a_plan_the_pool_refuses_says_how_many_pages_it_lacks(orbit, engine, stories260k_path):
    rng = random.Random(5)
    per_token = engine.model_info.kv_bytes_per_token
    bounded = engine.new_window(max_bytes=per_token * PAGE)
    big = engine.add_tokens(random_tokens(rng, PAGE * 3))
    own = bounded.plan_admit(big)
    assert own.refused_capacity and own.pool_pages_short == 0  # the window's own bound: no pool count
    with orbit.Engine(stories260k_path, pool_bytes=per_token * PAGE * 2, page_size=PAGE) as tight:
        w = tight.new_window()
        plan = w.plan_admit(tight.add_tokens(random_tokens(rng, PAGE * 5)))
        assert plan.refused_capacity and plan.pool_pages_short == 3  # five pages needed, two free
        assert "the KV pool is too small (2 pages in all, 2 free; this plan needs 5)" in plan.refusal
        with pytest.raises(orbit.CapacityError):
            w.apply(plan)
        fits = w.plan_admit(tight.add_tokens(random_tokens(rng, PAGE)))
        assert not fits.refusal and fits.pool_pages_short == 0


def test_positions_past_the_model_limit(orbit, engine):
    limit = engine.model_info.max_positions
    rng = random.Random(6)
    long_chunk = engine.add_tokens(random_tokens(rng, limit // 2 + 8))
    other = engine.add_tokens(random_tokens(rng, limit // 2 + 8))
    w = engine.new_window(policy="blind")
    w.admit(long_chunk)
    with pytest.raises(orbit.RefusedError, match="past the model's limit of 512") as info:
        w.admit(other)
    assert isinstance(info.value, orbit.OrbitError) and info.value.status == "refused"
    plan = w.plan_admit(other)  # planning is fine; applying is refused
    with pytest.raises(orbit.RefusedError):
        w.apply(plan)
    assert len(w) == 1
    # generate's query and sync's rendering past the limit are refused alike (they raised a plain OrbitError).
    with pytest.raises(orbit.RefusedError, match="positions pass the model's 512") as info:
        w.generate(random_tokens(rng, limit // 2), max_tokens=1)
    assert info.value.status == "refused" and info.value.source
    with pytest.raises(orbit.RefusedError, match="more than the model's 512 positions") as info:
        engine.new_window().sync([{"role": "user", "content": "Once upon a time" * limit}])
    assert info.value.status == "refused"


# ---- arrays -------------------------------------------------------------------------------------------


def test_embeddings_from_numpy_and_torch(orbit, engine):
    torch = pytest.importorskip("torch")
    hidden = engine.model_info.hidden_size
    gen = np.random.default_rng(0)
    x = (gen.standard_normal((6, hidden)) * 0.1).astype(np.float32)
    ref_np = engine.add_embeddings(x, label="frame")
    assert ref_np.kind == orbit.ChunkKind.embeddings and ref_np.length == 6 and ref_np.label == "frame"
    assert engine.add_embeddings(torch.from_numpy(x)) == ref_np  # same bytes, same key
    assert engine.add_embeddings(np.asfortranarray(x)) == ref_np  # non-contiguous: copied, same content
    assert engine.add_embeddings(torch.from_numpy(x.T.copy()).T) == ref_np
    assert engine.add_embeddings(x.tolist()) == ref_np  # nested lists: converted to float32
    t_bf16 = torch.from_numpy(x).to(torch.bfloat16)
    ref_bf16 = engine.add_embeddings(t_bf16)
    assert ref_bf16.kind == orbit.ChunkKind.embeddings and ref_bf16 != ref_np
    ref_fp16 = engine.add_embeddings(x.astype(np.float16))
    assert engine.add_embeddings(torch.from_numpy(x.astype(np.float16))) == ref_fp16
    t_grad = torch.from_numpy(x).clone().requires_grad_(True)
    assert engine.add_embeddings(t_grad) == ref_np
    with_grid = engine.add_embeddings(x, grid=np.arange(10, 16))
    assert with_grid.length == 6
    digest = engine.add_embeddings(x, media_digest="sha256:frame-0")
    assert digest == engine.add_embeddings(x + 1, media_digest="sha256:frame-0")

    w = engine.new_window(policy="reprefill")
    w.add_turn([1, 2, 3])
    w.admit(ref_np)
    w.admit(ref_bf16)
    w.add_turn(torch.tensor([4, 5]))
    assert window_error(w, np.array([6, 7], dtype=np.int32)) <= 2e-4
    tokens = engine.add_tokens(torch.tensor([9, 10, 11]))
    assert tokens == engine.add_tokens([9, 10, 11]) == engine.add_tokens(np.array([9, 10, 11], dtype=np.uint16))


def test_bad_arrays_raise_type_and_value_errors(orbit, engine):
    torch = pytest.importorskip("torch")
    hidden = engine.model_info.hidden_size
    x = np.zeros((4, hidden), dtype=np.float32)
    with pytest.raises(TypeError, match=r"dtype float64.*float32"):
        engine.add_embeddings(x.astype(np.float64))
    with pytest.raises(TypeError, match=r"torch dtype int64"):
        engine.add_embeddings(torch.zeros((4, hidden), dtype=torch.int64))
    with pytest.raises(TypeError, match="numpy array or a torch tensor"):
        engine.add_embeddings(42)
    with pytest.raises(ValueError, match=r"shape \[8\].*\[n, hidden\]"):
        engine.add_embeddings(np.zeros(8, dtype=np.float32))
    with pytest.raises(ValueError, match=rf"width 7 != the model's hidden size {hidden}"):
        engine.add_embeddings(np.zeros((4, 7), dtype=np.float32))
    with pytest.raises(ValueError, match="no rows"):
        engine.add_embeddings(np.zeros((0, hidden), dtype=np.float32))
    with pytest.raises(orbit.OrbitError, match="NaN or Inf"):
        engine.add_embeddings(np.full((2, hidden), np.nan, dtype=np.float32))
    with pytest.raises(TypeError, match=r"grid: dtype float"):
        engine.add_embeddings(x, grid=np.zeros(4))
    with pytest.raises(ValueError, match=r"grid: shape \[1, 1, 4\]"):
        engine.add_embeddings(x, grid=np.zeros((1, 1, 4), dtype=np.int64))
    with pytest.raises(orbit.OrbitError, match="grid"):
        engine.add_embeddings(x, grid=np.arange(5))
    with pytest.raises(TypeError, match=r"tokens: dtype float64; expected integers"):
        engine.add_tokens([1.5, 2.0])
    with pytest.raises(TypeError, match=r"tokens: torch dtype float32"):
        engine.add_tokens(torch.ones(3))
    # a str is text, not a sequence of ids: it is tokenized (no BOS)
    assert engine.add_tokens("hello") == engine.add_tokens(engine.tokenize("hello", bos=False))
    with pytest.raises(ValueError, match=r"shape \[2, 2\]; token ids must be 1-D"):
        engine.add_tokens([[1, 2], [3, 4]])
    with pytest.raises(orbit.OrbitError, match="empty chunk"):
        engine.add_tokens([])
    with pytest.raises(orbit.OrbitError, match="token 1 = 100000"):
        engine.add_tokens([1, 100000])
    w = engine.new_window()
    with pytest.raises(orbit.OrbitError, match="empty query"):
        w.logits([])
    with pytest.raises(TypeError, match="instance id"):
        w.evict("nope")
    with pytest.raises(TypeError, match="instance id"):
        w.evict(True)
    with pytest.raises(ValueError, match="negative"):
        w.evict(-1)
    with pytest.raises(TypeError, match="ChunkRef or a chunk key"):
        w.admit(3)
    # Instance ids start at 1: a `before` of 0 names none (None places at the tail), as an unknown id does.
    chunk = engine.add_tokens([5, 6])
    for call in (lambda: w.admit(chunk, before=0), lambda: w.plan_admit(chunk, before=np.int64(0))):
        with pytest.raises(ValueError, match="before: instance id 0 names no instance"):
            call()
    assert len(w) == 0
    # A torch tensor without data to read (sparse, or on the meta device) is refused naming the argument.
    for call, message in ((lambda: engine.add_tokens(torch.tensor([1, 2]).to_sparse()), "tokens: .*layout"),
                          (lambda: w.add_turn(torch.empty(3, dtype=torch.int64, device="meta")),
                           "tokens: .*meta device"),
                          (lambda: engine.add_embeddings(torch.zeros(2, hidden).to_sparse()),
                           "embeddings: .*layout"),
                          (lambda: engine.add_embeddings(torch.empty(2, hidden, device="meta")),
                           "embeddings: .*meta device")):
        with pytest.raises((TypeError, ValueError), match=message):
            call()


def test_misuse_raises_orbit_errors_with_the_cpp_message(orbit, engine, stories260k_path, tmp_path):
    rng = random.Random(11)
    a, b = make_chunks(engine, rng, 2)
    w = engine.new_window()
    with pytest.raises(orbit.OrbitError, match="is not registered with this engine") as info:
        engine.chunk("0" * 64)
    assert info.value.source and ".cpp:" in info.value.source
    with pytest.raises(orbit.OrbitError):
        w.admit("f" * 64)  # an unknown key
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE) as other:
        foreign = other.add_tokens([1, 2, 3, 99])
    with pytest.raises(orbit.OrbitError, match="not registered with this engine"):
        w.admit(foreign)
    w.admit(a)
    with pytest.raises(orbit.OrbitError, match="already in window"):
        w.admit(a)
    with pytest.raises(orbit.OrbitError, match="was not evicted"):
        w.recall(b)
    with pytest.raises(orbit.OrbitError, match="holds no instance 12345"):
        w.evict(12345)
    with pytest.raises(orbit.OrbitError, match="order lists 0 instances"):
        w.reorder([])
    with pytest.raises(orbit.OrbitError, match="empty turn"):
        w.add_turn([])
    with pytest.raises(orbit.OrbitError, match="slide: chunks = 5"):
        w.slide(5)
    with pytest.raises(orbit.OrbitError, match="top_p"):
        w.generate([1], top_p=2.0)
    with pytest.raises(orbit.OrbitError, match="max_tokens"):
        w.generate([1], max_tokens=-1)
    with pytest.raises(orbit.OrbitError, match=f"^kv: window {w.id} holds no instance 777777$"):
        w.kv(777777)
    with pytest.raises(orbit.OrbitError, match=f"^prepare_evictions: window {w.id} holds no instance 777777$"):
        w.prepare_evictions([777777])

    # invalid options
    with pytest.raises(orbit.OrbitError, match="/nonexistent/model.bin"):
        orbit.Engine("/nonexistent/model.bin")
    with pytest.raises(orbit.OrbitError, match="page_size must be >= 1"):
        orbit.Engine(stories260k_path, page_size=0)
    with pytest.raises(orbit.OrbitError, match="pool_bytes must be > 0"):
        orbit.Engine(stories260k_path, pool_bytes=-5)
    with pytest.raises(TypeError):
        orbit.Engine(stories260k_path, bogus=1)
    with pytest.raises(TypeError, match="os.PathLike"):
        orbit.Engine(12)
    with pytest.raises(orbit.OrbitError, match="max_bytes"):
        engine.new_window(max_bytes=-1)
    with pytest.raises(orbit.OrbitError, match="unknown policy 'bogus'"):
        engine.new_window(policy="bogus")
    with pytest.raises(TypeError, match="Policy or a spec string"):
        engine.new_window(policy=3)

    # closed engine: every call raises, nothing crashes
    engine.close()
    for call in (lambda: w.admit(b), lambda: w.logits([1]), lambda: engine.add_tokens([1, 2]),
                 lambda: engine.new_window(), lambda: w.plan_add_turn([1]), lambda: w.fork()):
        with pytest.raises(orbit.OrbitError, match="engine is closed"):
            call()
    repr(w)
    assert engine.stats.chunks >= 2


def test_reads_query_forwards_are_counted_apart_and_compare_with_the_radix_yardstick(orbit, stories260k_path):
    """generate's prompt forward and disposable's two query forwards are query_forward_tokens, logits()'s are
    logits_forward_tokens, on the window and the engine; forward_tokens stays the operations' alone, and
    critical_forward_tokens + query_forward_tokens is the side radix_cache_tokens compares with."""
    with orbit.Engine(str(stories260k_path), pool_bytes=32 << 20) as engine:
        rng = random.Random(41)
        (doc,) = make_chunks(engine, rng, 1)
        w = engine.new_window(policy="default")
        w.add_turn(random_tokens(rng, 5))
        d = w.admit(doc).added[0]
        applied = w.stats
        assert (applied.query_forward_tokens, applied.logits_forward_tokens) == (0, 0)
        query = random_tokens(rng, 4)
        g = w.generate(query, max_tokens=3)
        assert g.prompt_forward_tokens == 4
        # The first read, everything new: the radix cache forwards the whole prompt (turn, chunk, query), and
        # orbit the turn and the chunk in context, then the query: the same tokens on both sides.
        first = w.stats
        assert first.radix_cache_tokens == 5 + len(doc) + 4
        assert first.critical_forward_tokens + first.query_forward_tokens == first.radix_cache_tokens
        w.logits(query, all_rows=True)
        # The doc's first sight queued a patch job whose canonical encode the engine counts and no window does:
        # run it now, so that the count below moves by the reads' own encodes alone (under load it could land
        # between the two reads of the count).
        engine.run_background()
        encoded_before = engine.stats.canonicals_encoded
        w.disposable(d, query, answer_tokens=2)
        s = w.stats
        assert s.query_forward_tokens == 4 + 2 * 4 and s.logits_forward_tokens == 4
        # The operations' forwards, and the doc's canonical when disposable had to encode it to fall back to
        # (counted on the critical path, as the engine counts it).
        encoded = len(doc) * (engine.stats.canonicals_encoded - encoded_before)
        assert (s.forward_tokens, s.critical_forward_tokens) == (applied.forward_tokens + encoded,
                                                                 applied.critical_forward_tokens + encoded)
        assert "query_forward_tokens=12" in repr(s) and "logits_forward_tokens=4" in repr(s)
        e = engine.stats
        assert e.query_forward_tokens == 12 and e.logits_forward_tokens == 4
