"""The store's warnings (orbit/common/warn.h) reach Python as orbit.OrbitWarning through the warnings module:
a disk write that failed (the store's blobs/ replaced by a file after the engine opened), an engine closed with
entries that never reached the disk, and a blob found corrupt. A filter that makes them errors raises them from
the call that warned (close()) or reports them through sys.unraisablehook, and nothing hangs."""
import pathlib
import shutil
import sys
import warnings

import pytest

POOL = 8 << 20
TOKENS = list(range(1, 40))
HOST_BUDGET = 64 << 10  # a few chunks' canonicals of stories260K


def break_the_disk(store):
    """blobs/ becomes a file: every later blob write fails (ENOTDIR), even as root."""
    blobs = pathlib.Path(store, "blobs")
    shutil.rmtree(blobs, ignore_errors=True)
    blobs.write_bytes(b"")


def write_through_a_broken_disk(orbit, model, store):
    engine = orbit.Engine(model, store_dir=store, pool_bytes=POOL, page_size=4)
    break_the_disk(store)
    engine.precompute(engine.add_tokens(TOKENS))
    degraded = engine.stats.store.disk_degraded
    engine.close()
    return degraded


def test_a_failed_disk_write_is_an_orbit_warning(orbit, stories260k_path, tmp_path, capfd):
    store = tmp_path / "store"
    with pytest.warns(orbit.OrbitWarning) as caught:
        assert write_through_a_broken_disk(orbit, stories260k_path, store)
    messages = [str(w.message) for w in caught if issubclass(w.category, orbit.OrbitWarning)]
    failed = [m for m in messages if "a disk write failed" in m]
    assert len(failed) == 1 and failed[0].startswith(f"store {store}: a disk write failed (")
    assert any("closing with entries that never reached the disk" in m for m in messages)
    assert issubclass(orbit.OrbitWarning, UserWarning)
    assert "orbit: warning" not in capfd.readouterr().err  # said once, through Python


def test_an_error_filter_raises_or_reports_without_hanging(orbit, stories260k_path, tmp_path, monkeypatch):
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(u.exc_value))
    raised = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            write_through_a_broken_disk(orbit, stories260k_path, tmp_path / "store")
        except orbit.OrbitWarning as e:  # close() raises the first warning its own thread queued
            raised.append(e)
    seen = [str(e) for e in raised + unraisable if isinstance(e, orbit.OrbitWarning)]
    assert any("a disk write failed" in m or "never reached the disk" in m for m in seen), (raised, unraisable)


def test_a_corrupt_blob_is_an_orbit_warning(orbit, stories260k_path, tmp_path):
    store = tmp_path / "store"
    with orbit.Engine(stories260k_path, store_dir=store, pool_bytes=POOL, page_size=4) as engine:
        engine.precompute(engine.add_tokens(TOKENS))
    blobs = list(pathlib.Path(store, "blobs").rglob("*.blob"))
    assert blobs
    for blob in blobs:
        with open(blob, "r+b") as f:
            f.truncate(100)
    with pytest.warns(orbit.OrbitWarning, match="marked corrupt and recomputed") as caught:
        with orbit.Engine(stories260k_path, store_dir=store, pool_bytes=POOL, page_size=4) as engine:
            engine.new_window().admit(engine.add_tokens(TOKENS))
            assert engine.stats.store.corrupt_reads >= 1
    assert all(str(store) in str(w.message) for w in caught if "marked corrupt" in str(w.message))


def test_an_index_row_whose_key_was_damaged_is_left_out_with_a_warning(orbit, stories260k_path, tmp_path):
    # A row whose key a damaged page changed names no chunk: it was loaded all the same, counted in the disk tier's
    # entries while its chunk was recomputed and stored a second time, and nothing said so before `store verify`.
    import sqlite3

    store = tmp_path / "store"
    with orbit.Engine(stories260k_path, store_dir=store, pool_bytes=POOL, page_size=4) as engine:
        ref = engine.add_tokens(TOKENS)
        engine.precompute(ref)
        engine.precompute(engine.add_tokens(TOKENS[:20]))
    db = sqlite3.connect(store / "index.sqlite")
    db.execute("UPDATE entries SET key = 'Z' || substr(key, 2) WHERE key = ?", (ref.key,))
    db.commit()
    db.close()
    with pytest.warns(orbit.OrbitWarning, match="is not a store key") as caught:
        with orbit.Engine(stories260k_path, store_dir=store, pool_bytes=POOL, page_size=4) as engine:
            disk = [t for t in engine.stats.store.tiers if t.tier.name == "disk"][0]
            assert disk.entries == 1  # the other chunk's row only
    said = [str(w.message) for w in caught if "is not a store key" in str(w.message)]
    assert len(said) == 1 and f"orbit store repair --store {store}" in said[0]


def test_a_blobs_path_that_is_a_file_is_named_as_one(orbit, stories260k_path, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "blobs").write_bytes(b"")
    with pytest.raises(orbit.OrbitError, match=r"/blobs is not a directory \(it is a regular file\); move it aside"):
        orbit.Engine(stories260k_path, store_dir=store, pool_bytes=POOL, page_size=4)


def test_at_exit_the_warnings_reach_stderr(orbit, stories260k_path, tmp_path):
    # An engine left open is closed at exit (orbit's atexit handler, while Python's warnings still work): its
    # close warning is an OrbitWarning on stderr. Before, it was closed while the interpreter finalized, after
    # the sink was uninstalled, and printed as the CLI prints it; nothing touches the finalized interpreter.
    import os
    import subprocess

    store = tmp_path / "store"
    script = (f"import pathlib, shutil, orbit\n"
              f"engine = orbit.Engine({str(stories260k_path)!r}, store_dir={str(store)!r}, pool_bytes={POOL})\n"
              f"shutil.rmtree({str(store / 'blobs')!r})\n"
              f"pathlib.Path({str(store / 'blobs')!r}).write_bytes(b'')\n"
              f"engine.precompute(engine.add_tokens({TOKENS!r}))\n"
              f"assert engine.stats.store.disk_degraded\n")
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(orbit.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert any("OrbitWarning: store " in line and "a disk write failed" in line for line in lines), done.stderr
    assert f"OrbitWarning: store {store}: closing with entries that never reached the disk: " in done.stderr


def test_entries_memory_lets_go_that_the_disk_cannot_take_are_counted(orbit, stories260k_path, tmp_path):
    # StoreStats.demotions_lost was counted in C++ only (not in Python's StoreStats, nor in /metrics).
    store = tmp_path / "store"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine = orbit.Engine(stories260k_path, store_dir=store, pool_bytes=POOL, page_size=4,
                              host_budget_bytes=HOST_BUDGET)
        break_the_disk(store)  # memory keeps what the disk fails to take, within its budget
        for i in range(8):
            engine.precompute(engine.add_tokens([i + 1] + TOKENS))
        stats = engine.stats.store
        engine.close()
    assert stats.disk_degraded
    assert stats.demotions_lost > 0
    assert stats.tiers[1].bytes <= HOST_BUDGET
    assert repr(stats).endswith(f", demotions_lost={stats.demotions_lost})")
    assert any("demotions_lost" in str(w.message) for w in caught if issubclass(w.category, orbit.OrbitWarning))
