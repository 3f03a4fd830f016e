"""The store's tiers from Python: Engine's eviction / cold_tier / device_tier_bytes / embedding_cache options,
errors that name them, stats for every tier, and the embedding cache sparing a vision encoder: the second
engine registers the media with find_media and never calls the encoder."""
import pytest

PAGE = 4
POOL = 8 << 20


def _engine(orbit, path, **kwargs):
    return orbit.Engine(path, pool_bytes=POOL, page_size=PAGE, **kwargs)


def test_tier_options_and_stats(orbit, stories260k_path, tmp_path):
    with _engine(orbit, stories260k_path, store_dir=tmp_path, eviction="cost-aware", cold_tier="int8",
                 host_budget_bytes=2 << 20) as e:
        o = e.options
        assert (o.eviction, o.cold_tier, o.device_tier_bytes, o.embedding_cache) == ("cost-aware", "int8", 0, True)
        e.precompute(e.add_tokens([5, 17, 42, 99, 100, 7, 8]))
        s = e.stats.store
        assert [t.tier.name for t in s.tiers] == ["device", "host", "disk"]
        assert [t.enabled for t in s.tiers] == [False, True, True]
        assert all(t.policy == "cost-aware" for t in s.tiers)
        assert s.tiers[1].budget_bytes == 2 << 20 and s.tiers[1].entries == 1
        assert s.canonical_encoding == orbit.BlobEncoding.int8 and not s.pinned_host
    entries = orbit.store_list(tmp_path)
    assert [str(x.encoding) for x in entries] == ["int8"]  # the canonical went to disk as int8 rows


def test_int8_canonicals_read_back_are_priced(orbit, stories260k_path, tmp_path):
    """A plan that reads a canonical back from int8 rows says what the rounding costs (quantized_kl) and is not
    exact; the same chunk computed here, or read from an exact store, is exact."""
    text = "Once upon a time there was a little girl named Lily. She loved to play in the park."
    with _engine(orbit, stories260k_path, store_dir=tmp_path / "int8", cold_tier="int8") as e:
        chunk = e.add_text(text)
        fresh = e.new_window().plan_admit(chunk)
        assert fresh.exact and fresh.steps[0].quantized_kl == 0  # nothing stored yet: it is encoded here
        e.precompute(chunk)
        assert e.new_window().plan_admit(chunk).steps[0].quantized_kl == 0  # in memory: the computed one
    with _engine(orbit, stories260k_path, store_dir=tmp_path / "exact") as e:
        e.precompute(e.add_text(text))
    for cold_tier, expect_loss in [("int8", True), ("exact", False)]:
        with _engine(orbit, stories260k_path, store_dir=tmp_path / cold_tier, cold_tier=cold_tier) as e:
            w = e.new_window()
            plan = w.plan_admit(e.add_text(text))
            step = plan.steps[0]
            assert step.how == "canonical"
            assert (step.quantized_kl > 0) == expect_loss
            assert plan.exact != expect_loss and step.exact != expect_loss
            assert step.predicted_kl == pytest.approx(step.quantized_kl)
            w.apply(plan)
            assert e.stats.store.tiers[2].hits == 1  # it was read from the disk
            if expect_loss:
                # Its measured loss against a re-prefill is real, and the plan no longer calls it nothing.
                q = e.tokenize(" Then she said")
                logits, reference = w.logits(q), w.reference_logits(q)
                assert abs(logits - reference).max() > 0
                # Read once, the blob's own error prices the next plan that reads it (not the prior).
                again = e.new_window().plan_admit(e.add_text(text)).steps[0]
                assert 0 < again.quantized_kl < step.quantized_kl


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"eviction": "mru"}, "^Engine: eviction: "),
        ({"cold_tier": "fp8"}, "^Engine: cold_tier = 'fp8'"),
        ({"cold_tier": "int8"}, r"^Engine: cold_tier = 'int8' encodes the disk tier, which needs a store_dir"),
        ({"device_tier_bytes": 1 << 20}, r"^Engine: device_tier_bytes = 1048576 .*\(device is 'cpu'\)"),  # a CPU engine
        ({"device_tier_bytes": -1}, "^Engine: device_tier_bytes must be >= 0"),
    ],
)
def test_bad_tier_options_name_the_option(orbit, stories260k_path, kwargs, message):
    with pytest.raises(orbit.OrbitError, match=message):
        _engine(orbit, stories260k_path, **kwargs)


def test_replay_engines_take_the_tier_options(orbit, stories260k_path):
    trace = orbit.make_trace("web", steps=2, seed=1, max_positions=512, chunk_tokens=8)
    with pytest.raises(orbit.OrbitError, match="^replay: eviction: "):
        orbit.replay(trace, str(stories260k_path), baselines=False, fidelity=False, eviction="mru")


def test_device_tier_on_cuda(orbit, stories260k_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the device tier needs one")
    with _engine(orbit, stories260k_path, device="cuda", device_tier_bytes=4 << 20) as e:
        e.precompute(e.add_tokens([5, 17, 42, 99, 100, 7, 8]))
        s = e.stats.store
        assert s.tiers[0].enabled and s.tiers[0].entries == 1 and s.pinned_host


def test_embedding_cache_spares_the_encoder(orbit, stories260k_path, tmp_path):
    import numpy as np

    calls = []

    def encode(pixels, hidden):  # a stand-in vision tower whose calls are counted
        calls.append(pixels)
        rng = np.random.default_rng(pixels)
        return rng.standard_normal((6, hidden)).astype(np.float32)

    grid = np.array([[0] * 6, [0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2]], dtype=np.int64)
    digest = "sha256-of-frame-17"

    def register(engine):
        ref = engine.find_media(digest, grid=grid)
        if ref is None:
            ref = engine.add_embeddings(encode(17, engine.model_info.hidden_size), grid=grid, media_digest=digest)
        return ref

    with _engine(orbit, stories260k_path, store_dir=tmp_path) as first:
        if first.model_info.position_rows == 1:
            grid = np.arange(3, 9, dtype=np.int64)  # 1-D positions on this model
        a = register(first)
        assert register(first) == a  # known here already: no second encode
        logits_a = first.new_window()
        logits_a.admit(a)
        expected = logits_a.logits([1, 2])
        assert (first.stats.media_missed, first.stats.media_found) == (1, 1)
    assert len(calls) == 1

    with _engine(orbit, stories260k_path, store_dir=tmp_path) as second:
        b = register(second)
        assert len(calls) == 1  # found in the store: the encoder did not run
        assert b == a and b.length == 6
        assert second.stats.media_found == 1
        w = second.new_window()
        w.admit(b)
        assert np.allclose(w.logits([1, 2]), expected, atol=1e-4)
        assert second.stats.canonicals_encoded == 0  # its canonical was stored by the first engine

    with _engine(orbit, stories260k_path, store_dir=tmp_path / "off", embedding_cache=False) as e:
        register(e)
    with _engine(orbit, stories260k_path, store_dir=tmp_path / "off") as e:
        register(e)
    assert len(calls) == 3  # nothing was cached by the engine with embedding_cache=False


def test_store_inspection_reports_a_row_with_a_non_utf8_key(orbit, stories260k_path, tmp_path):
    import sqlite3

    with _engine(orbit, stories260k_path, store_dir=tmp_path) as e:
        ref = e.add_tokens([5, 17, 42, 99, 100, 7, 8])
        e.precompute(ref)
    db = sqlite3.connect(tmp_path / "index.sqlite")  # a damaged or hand-edited row: any bytes
    db.execute("UPDATE entries SET key = CAST(X'ff41' || substr(key, 3) AS TEXT)")
    db.commit()
    db.close()
    shown = "\\xffA" + ref.key[2:]
    assert [x.key for x in orbit.store_list(tmp_path)] == [shown]  # a str, not a UnicodeDecodeError
    report = orbit.store_verify(tmp_path)
    assert [(p.key, p.reason) for p in report.problems] == [
        (shown, "the index row's key is not a store key (64 lowercase hex characters)")
    ]


def _flip_key_index_byte(index_path, key):
    """Flips one byte of `key` in the index of keys only (the table's copy, just before the row's blob path, and the
    blob path itself stay): SQLite's integrity_check then finds the table and its index disagree."""
    data = bytearray(index_path.read_bytes())
    copies = [o for o in range(len(data)) if data.startswith(key.encode(), o)]
    in_path = data.find(f"/{key}.".encode()) + 1  # in the row's blob path "blobs/xx/KEY.NONCE.blob"
    blob_at = in_path - len("blobs/xx/")
    index_copies = [o for o in copies if o != in_path and not (o < blob_at and blob_at - (o + len(key)) < 8)]
    assert len(copies) == 3 and len(index_copies) == 1, (copies, blob_at)
    at = index_copies[0] + 10
    data[at] = ord("b") if data[at] == ord("a") else ord("a")
    index_path.write_bytes(bytes(data))


def test_store_verify_reports_a_key_index_that_disagrees_with_its_table(orbit, stories260k_path, tmp_path):
    import sqlite3

    with _engine(orbit, stories260k_path, store_dir=tmp_path) as e:
        ref = e.add_tokens([5, 17, 42, 99, 100, 7, 8])
        e.precompute(ref)
    db = sqlite3.connect(tmp_path / "index.sqlite")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every row in index.sqlite itself
    db.close()
    _flip_key_index_byte(tmp_path / "index.sqlite", ref.key)

    report = orbit.store_verify(tmp_path)
    assert "missing from index sqlite_autoindex_entries_1" in report.index_damage
    assert not report.clean and not report and f"index_damage={report.index_damage!r}" in repr(report)
    with orbit.Store(tmp_path) as store:
        assert store.verify().index_damage == report.index_damage
    with pytest.raises(orbit.OrbitError, match="index.sqlite is damaged"):
        orbit.store_gc(tmp_path)

    repaired = orbit.store_repair(tmp_path)
    assert repaired.index_reindexed and (repaired.rows_dropped, repaired.rows_restored) == (0, 0)
    assert any("REINDEX rebuilt its indexes" in n for n in repaired.notes)
    after = orbit.store_verify(tmp_path)
    assert after.clean and after.index_damage == "" and after.checked == report.checked
    assert ref.key in [x.key for x in orbit.store_list(tmp_path)]
    assert orbit.store_gc(tmp_path).removed_blobs == 0
