"""The fidelity calibration kept in the store, and the fidelity model's description, on the bundled stories260K.

Engine(store_dir=D).calibrate_fidelity() writes the deficits it measured to D (report.stored), and an engine
opened later on D fits its fidelity model from them without measuring (fidelity_calibration() == 'store', the
same description); stored_calibration=False neither reads nor writes; a memory-only engine stores nothing. Through
a remote (Redis, started on 127.0.0.1 by conftest's redis_server and always stopped) another store directory reads it
('remote'), also when the remote was down at the first question: it is asked again later.
fidelity_model_description() says the model plans use, marked default or fitted, also after close().
calibrate_fidelity(progress=f) calls f(seeds_done, seeds) after each seed; what f raises stops it."""
import re
import time

import pytest
from conftest import free_port, redis_server

DEFAULT_DESCRIPTION = re.compile(r"^keep \S+ \(default\), blind \S+ \(default\), .* s_ref \S+$")


def open_engine(orbit, stories260k_path, store_dir=None, **kwargs):
    return orbit.Engine(str(stories260k_path), pool_bytes=8 << 20,
                        store_dir=None if store_dir is None else str(store_dir), **kwargs)


def test_the_description_names_the_model_plans_use_and_answers_after_close(orbit, stories260k_path):
    engine = open_engine(orbit, stories260k_path)
    before = engine.fidelity_model_description()
    assert DEFAULT_DESCRIPTION.match(before), before
    assert "(fitted)" not in before and engine.fidelity_calibration() == "default"
    report = engine.calibrate_fidelity()
    after = engine.fidelity_model_description()
    assert after == report.fidelity_model and after != before
    assert after.count("(fitted)") >= 5, after  # every kind the calibration measures
    assert engine.fidelity_calibration() == "calibrated"
    assert not report.stored  # memory only: nothing outlives the engine
    engine.close()
    assert engine.fidelity_model_description() == after and engine.fidelity_calibration() == "calibrated"


def test_a_stored_calibration_is_read_by_the_next_engine_on_the_store(orbit, stories260k_path, tmp_path):
    store = tmp_path / "store"
    with open_engine(orbit, stories260k_path, store) as first:
        assert first.options.stored_calibration
        report = first.calibrate_fidelity()
        assert report.stored
    with open_engine(orbit, stories260k_path, store) as second:
        assert second.fidelity_calibration() == "store"
        assert second.fidelity_model_description() == report.fidelity_model
    with open_engine(orbit, stories260k_path, store, stored_calibration=False) as off:
        assert not off.options.stored_calibration
        assert off.fidelity_calibration() == "default"
        assert DEFAULT_DESCRIPTION.match(off.fidelity_model_description())
        assert not off.calibrate_fidelity().stored  # nor written


def test_stored_calibration_takes_a_bool_only(orbit, stories260k_path):
    with pytest.raises(TypeError, match="^Engine: stored_calibration: expected bool, got int"):
        open_engine(orbit, stories260k_path, stored_calibration=0)


def test_calibrate_fidelity_reports_each_seed_and_a_raising_callback_stops_it(orbit, stories260k_path, tmp_path):
    seen = []
    with open_engine(orbit, stories260k_path, tmp_path / "a") as engine:
        report = engine.calibrate_fidelity(progress=lambda done, seeds: seen.append((done, seeds)))
        assert report.stored and engine.fidelity_calibration() == "calibrated"
    seeds = seen[-1][1] if seen else 0
    assert seeds >= 1 and seen == [(i + 1, seeds) for i in range(seeds)], seen

    def stop(done, seeds):
        raise RuntimeError(f"stop at seed {done}/{seeds}")

    with open_engine(orbit, stories260k_path, tmp_path / "b") as engine:
        with pytest.raises(RuntimeError, match=f"^stop at seed 1/{seeds}$"):
            engine.calibrate_fidelity(progress=stop)
        assert engine.fidelity_calibration() == "default"  # nothing fitted
    with open_engine(orbit, stories260k_path, tmp_path / "b") as engine:
        assert engine.fidelity_calibration() == "default"  # nor stored
        with pytest.raises(TypeError, match="progress: expected a callable or None"):
            engine.calibrate_fidelity(progress=3)


def test_a_remote_down_at_the_first_question_is_asked_again_and_its_calibration_says_remote(orbit, stories260k_path,
                                                                                           tmp_path):
    port = free_port()
    url = f"redis://:right@127.0.0.1:{port}"
    with pytest.warns(orbit.RemoteUnreachableWarning, match="unreachable at open"):  # nothing listens there yet
        waiting = open_engine(orbit, stories260k_path, tmp_path / "b", remote=url)
    assert waiting.fidelity_calibration() == "default"  # the remote does not answer: the defaults, for now
    with redis_server(port, tmp_path):
        with open_engine(orbit, stories260k_path, tmp_path / "a", remote=url) as first:
            report = first.calibrate_fidelity()
            assert report.stored
        # Asked again once the remote tier's retry interval (1 s) has passed: the entry the first engine wrote.
        deadline = time.monotonic() + 60
        while waiting.fidelity_calibration() != "remote" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert waiting.fidelity_calibration() == "remote"
        assert waiting.fidelity_model_description() == report.fidelity_model
        # The engine's own reads, down and up, are counted apart from the user's lookups.
        store = waiting.stats.store
        assert store.internal_reads >= 2 and store.remote.internal_reads >= 2
        assert store.misses == 0 and store.remote.misses == 0 and store.remote.skipped == 0
        waiting.close()
        # Copied into b's directory: the next engine there reads it at open, from the store.
        with open_engine(orbit, stories260k_path, tmp_path / "b", remote=url) as again:
            assert again.fidelity_calibration() == "store"
