"""The Python API's threads and lifetimes on the bundled model: one window from many threads, no leak of engines
or windows across many create/close cycles, a window outliving its engine object, a store directory across
engines, docstrings through help(), enum labels, and classes only the API makes. The window operations, arrays
and errors are test_bindings.py's.

Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python (see conftest.py).
"""
import gc
import inspect
import json
import os
import pathlib
import random
import subprocess
import sys
import threading

import numpy as np
import pytest

from window_helpers import PAGE, POOL, make_chunks, random_tokens


@pytest.fixture
def engine(orbit, stories260k_path):
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE) as e:
        yield e


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# ---- threads and lifetimes ----------------------------------------------------------------------------


def test_one_window_from_many_threads(orbit, engine):
    rng = random.Random(12)
    chunks = make_chunks(engine, rng, 4)
    w = engine.new_window()
    for ch in chunks[:3]:
        w.admit(ch)
    forks = [w.fork() for _ in range(3)]
    q = [2, 3, 4]
    expected = w.logits(q, all_rows=True)
    errors = []

    def worker(i):
        try:
            for _ in range(10):
                assert np.array_equal(w.logits(q, all_rows=True), expected)
                f = forks[i]
                if len(f) == 3:
                    f.admit(chunks[3])
                else:
                    f.evict(f.instances[-1])
                f.generate(q, max_tokens=3)
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert np.array_equal(w.logits(q, all_rows=True), expected)


def test_no_leak_of_windows_or_engines_across_many_cycles(orbit, stories260k_path):
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE) as e:
        chunks = make_chunks(e, random.Random(13), 3)
        free = e.stats.pool_free_pages
        for i in range(200):
            with e.new_window() as w:
                w.admit(chunks[i % 3])
                w.add_turn([1, 2, 3])
                f = w.fork()
                f.admit(chunks[(i + 1) % 3])
                if i % 2:
                    del f  # dropped by reference counting, not close()
                else:
                    f.close()
            assert e.stats.windows == 0, f"cycle {i}"
            assert e.stats.pool_free_pages == free, f"cycle {i}"

    def cycle(i):
        with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE) as e:
            start = e.stats.pool_free_pages
            w = e.new_window()
            w.admit(e.add_tokens([1, 2, 3, 4 + i % 50]))
            w.logits([5])
            w.close()
            assert e.stats.pool_free_pages == start
        w = None  # noqa: F841

    for i in range(20):  # warm up allocators and caches
        cycle(i)
    gc.collect()
    rss_start = rss_bytes()
    for i in range(200):
        cycle(i)
    gc.collect()
    growth = rss_bytes() - rss_start
    print(f"RSS growth over 200 engine cycles: {growth / 2**20:.1f} MiB")
    assert growth < 32 << 20, f"RSS grew {growth / 2**20:.1f} MiB over 200 engine cycles"


def test_a_window_outliving_its_engine_object(orbit, stories260k_path):
    e = orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE)
    ch = e.add_tokens([1, 2, 3])
    w = e.new_window()
    del e
    gc.collect()
    w.admit(ch)  # the window keeps its engine alive
    assert w.engine.stats.windows == 1
    assert w.logits([4]).shape == (512,)


def test_with_on_a_closed_window_or_engine_raises_naming_it(orbit, stories260k_path):
    # As `with f:` on a closed file raises: the block does not run on something closed.
    entered = []
    e = orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE)
    w = e.new_window()
    w.close()
    with pytest.raises(orbit.OrbitError, match=rf"^with window: window {w.id} is closed"):
        with w:
            entered.append(w)
    orphan = e.new_window()
    e.close()
    assert orphan.closed  # its engine's close() closed it too
    with pytest.raises(orbit.OrbitError, match=rf"^with window: window {orphan.id}'s engine is closed$"):
        with orphan:
            entered.append(orphan)
    with pytest.raises(orbit.OrbitError, match="^with engine: the engine is closed"):
        with e:
            entered.append(e)
    assert entered == []
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE) as open_engine:  # open ones enter
        with open_engine.new_window() as open_window:
            assert not open_window.closed


def test_a_chunk_ref_is_valid_while_an_engine_holds_it(orbit, stories260k_path):
    # Content no other engine of this process holds (random tokens of a seed used nowhere else).
    rng = random.Random(20261201)
    e = orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE)
    ref = e.add_tokens(random_tokens(rng, 37))
    w = e.new_window()
    w.admit(ref)
    placed = w.instances[0].chunk  # a copy read back from the window
    assert ref.valid and placed.valid and placed == ref
    e.close()
    assert not ref.valid and not placed.valid
    # Forgotten by an engine keeping one idle chunk: not valid until it is added again.
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, max_idle_chunks=1) as small:
        tokens = random_tokens(rng, 21)
        first = small.add_tokens(tokens)
        assert first.valid
        for _ in range(3):
            small.add_tokens(random_tokens(rng, 21))
        assert not first.valid
        assert small.add_tokens(tokens) == first and first.valid


def test_docstrings_reach_help(orbit):
    assert "plan_admit" in (orbit.Window.__doc__ or "")
    assert "Raises" in inspect.getdoc(orbit.Window.apply)


def test_a_store_directory_persists_canonicals_across_engines(orbit, stories260k_path, tmp_path):
    store = tmp_path / "store"
    tokens = [3, 14, 15, 92, 65, 35]
    with orbit.Engine(stories260k_path, store_dir=store, pool_bytes=POOL, page_size=PAGE) as e:
        chunk = e.add_tokens(tokens, label="pi")
        assert chunk.key == orbit.chunk_key_tokens(e.model_info.fingerprint, tokens)
        assert orbit.is_store_key(chunk.key) and not orbit.is_store_key("xyz")
        e.precompute(chunk)
        assert e.stats.canonicals_encoded == 1
        assert any(t.enabled for t in e.stats.store.tiers)
    summary = orbit.store_summary(store)
    assert summary.entries >= 1 and summary.entries_by_kind.get("canonical", 0) >= 1
    entries = orbit.store_list(store)
    assert chunk.key in {x.key for x in entries}
    assert orbit.store_verify(store).clean
    assert orbit.store_gc(store, dry_run=True).removed_blobs == 0
    with orbit.Engine(stories260k_path, store_dir=str(store), pool_bytes=POOL, page_size=PAGE) as e:
        again = e.add_tokens(tokens)
        w = e.new_window()
        w.admit(again)
        assert e.stats.canonicals_encoded == 0  # read from the store, not encoded again
    with pytest.raises(orbit.OrbitError):
        orbit.store_summary(tmp_path / "not-a-store")

    # The same through orbit.Store: a context manager and an iterable of entries.
    with orbit.Store(store) as s:
        assert s.dir == str(store) and s.model_fingerprint == summary.model_fingerprint
        assert len(s) == summary.entries and {x.key for x in s} == {x.key for x in entries}
        assert s.verify().clean and s.gc(dry_run=True).removed_blobs == 0
    assert s.closed and "closed" in repr(s)
    with pytest.raises(orbit.OrbitError, match="closed"):
        list(s)
    with pytest.raises(orbit.OrbitError, match="not-a-store"):
        orbit.Store(tmp_path / "not-a-store")


def test_store_gc_reports_the_blob_it_keeps_for_repair(orbit, stories260k_path, tmp_path):
    # A row whose blob path was damaged leaves its good blob unreferenced: gc keeps it (repair rebuilds the row
    # from it) and says so in kept_paths, which Python could not read.
    import sqlite3

    store = tmp_path / "store"
    with orbit.Engine(stories260k_path, store_dir=store, pool_bytes=POOL, page_size=PAGE) as e:
        e.precompute(e.add_tokens([3, 14, 15, 92, 65, 35]))
    (entry,) = [x for x in orbit.store_list(store) if x.kind.label == "canonical"]
    db = sqlite3.connect(store / "index.sqlite")
    with db:
        db.execute("UPDATE entries SET blob = blob || '.gone' WHERE key = ?", (entry.key,))
    db.close()
    report = orbit.store_gc(store)
    assert report.removed_blobs == 0 and report.kept_paths == [entry.blob_path]
    assert f"kept_paths={[entry.blob_path]!r}" in repr(report)
    assert orbit.store_repair(store).rows_restored == 1 and orbit.store_verify(store).clean


def test_every_enum_has_its_label(orbit):
    # The stub types every enum as _Enum: .label (the C++ name, str() of the member), int() and .name. The
    # store's EntryKind and BlobEncoding had no label, so `entry.kind.label` raised AttributeError.
    enums = [v for v in vars(orbit).values() if isinstance(v, type) and hasattr(v, "__members__")]
    assert orbit.EntryKind in enums and orbit.BlobEncoding in enums and orbit.StepAction in enums
    for enum in enums:
        for member in enum.__members__.values():
            assert member.label == str(member) and int(member) == member.value, (enum, member)
    assert orbit.EntryKind.canonical.label == "canonical" and orbit.BlobEncoding.int8.label == "int8"



BARE_NEW = """
import sys, orbit
cls = getattr(orbit, sys.argv[1])
try:
    obj = cls.__new__(cls)
except TypeError as e:
    print(e)
    sys.exit(0)
print(repr(getattr(obj, sys.argv[2])))  # reached only where __new__ gave an instance with no C++ object
"""


@pytest.mark.parametrize("name, member", [("Window", "instances"), ("ChunkRef", "key"), ("Generation", "text"),
                                          ("Plan", "steps"), ("InstanceInfo", "turn_tokens")])
def test_a_class_only_the_api_makes_refuses_a_bare_instance(orbit, name, member):
    # Cls.__new__(Cls) gave an instance with no C++ object under it, its members reading uninitialized memory:
    # by the run, Window.instances hung or raised 'Invalid argument', ChunkRef.key died of SIGBUS,
    # Window.generate of SIGSEGV, Plan.steps raised SystemError. Run apart, so a crash fails this test only.
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(orbit.__file__).parent.parent))
    r = subprocess.run([sys.executable, "-c", BARE_NEW, name, member], capture_output=True, text=True, timeout=20,
                       env=env)
    assert r.returncode == 0, f"orbit.{name}.__new__ then .{member}: exit {r.returncode} {r.stderr[-300:]}"
    assert r.stdout.startswith(f"orbit.{name} cannot be created directly: orbit's calls return it"), r.stdout


FORKED = r"""
import json, os, sys
import orbit
model, store = sys.argv[1], sys.argv[2] or None
e = orbit.Engine(model, store_dir=store)
w = e.new_window()
w.admit(e.add_tokens([1, 365, 169, 44, 33, 22]))
before = w.generate([1, 403], max_tokens=4).tokens
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # the child: every call refused, naming itself; close() and exit release nothing and return
    said = []
    for call in (lambda: e.add_tokens([1, 2, 3]), lambda: e.tokenize("hi"),
                 lambda: w.generate([1, 403], max_tokens=2), lambda: w.sync([{"role": "user", "content": "x"}])):
        try:
            call()
            said.append("answered")
        except orbit.OrbitError as error:
            said.append(str(error))
    e.close()
    w.close()
    os.write(write, json.dumps(said).encode())
    sys.exit(0)  # the interpreter's exit destroys what is left, as a worker's does
os.close(write)
said = json.loads(os.read(read, 1 << 16))
_, status = os.waitpid(pid, 0)
after = w.generate([1, 403], max_tokens=4).tokens  # the parent's engine goes on
e.close()
print(json.dumps({"said": said, "status": status, "child": pid, "parent": os.getpid(), "same": before == after}))
"""


@pytest.mark.parametrize("with_store", [False, True], ids=["memory", "store"])
def test_an_engine_does_not_cross_fork(orbit, stories260k_path, tmp_path, with_store):
    # A child of fork() that closed an engine with a store hung (its destructor waited on the parent's store
    # thread), or, after using it, died of an uncaught C++ exception. Run apart, so a hang fails this test only.
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(orbit.__file__).parent.parent))
    store = str(tmp_path / "store") if with_store else ""
    r = subprocess.run([sys.executable, "-c", FORKED, str(stories260k_path), store], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-600:]
    out = json.loads(r.stdout)
    assert out["status"] == 0 and out["same"], out
    fork = (f"engine was opened in process {out['parent']} and this process ({out['child']}) is a fork of it: an "
            "engine does not cross fork() (its threads and store connections stay in the parent); open a new Engine "
            "in this process")
    assert out["said"] == [f"{call}: {fork}" for call in ("add_tokens", "tokenize", "Window.generate", "Window.sync")]
