"""The remote tier from Python: engines sharing canonicals through a Redis server the test starts on a free
127.0.0.1 port, and an unreachable remote that never stops an engine."""
import pytest

PAGE = 4
POOL = 8 << 20


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_engines_share_canonicals_through_a_redis_remote(orbit, stories260k_path, tmp_path):
    import shutil
    import subprocess
    import time

    server = shutil.which("redis-server")
    if server is None:  # never skipped silently: scripts/common.sh installs it
        pytest.fail("redis-server is not installed (apt install redis-server redis-tools)")
    port = _free_port()
    proc = subprocess.Popen(
        [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )
    try:
        url = f"redis://127.0.0.1:{port}"
        for _ in range(500):
            if orbit.store_remote_summary(url).reachable:
                break
            time.sleep(0.01)
        tokens = [5, 17, 42, 99, 100, 7, 8]
        with orbit.Engine(stories260k_path, store_dir=tmp_path / "a", remote=url, pool_bytes=POOL, page_size=PAGE) as e:
            assert e.options.remote == url
            e.precompute(e.add_tokens(tokens))
            assert e.stats.canonicals_encoded == 1
            assert e.stats.store.remote.enabled
        assert orbit.store_remote_summary(url).entries == 1  # closing the engine sent its queued write
        with orbit.Engine(stories260k_path, store_dir=tmp_path / "b", remote=url, pool_bytes=POOL, page_size=PAGE) as e:
            w = e.new_window()
            w.admit(e.add_tokens(tokens))
            assert e.stats.canonicals_encoded == 0  # recalled from the remote, not encoded again
            remote = e.stats.store.remote
            assert remote.hits == 1 and remote.corrupt == 0 and remote.available
        assert orbit.StoreTier.remote.name == "remote"
    finally:
        proc.kill()
        proc.wait()


def test_an_unreachable_remote_never_stops_the_engine(orbit, stories260k_path):
    url = f"redis://127.0.0.1:{_free_port()}"  # nothing listens there
    with orbit.Engine(stories260k_path, remote=url, pool_bytes=POOL, page_size=PAGE) as e:
        w = e.new_window()
        w.admit(e.add_tokens([1, 2, 3, 4]))
        assert e.stats.canonicals_encoded == 1
        remote = e.stats.store.remote
        assert remote.enabled and not remote.available and remote.errors >= 1
        assert "127.0.0.1" in remote.last_error
    summary = orbit.store_remote_summary(url)
    assert not summary.reachable and "Connection refused" in summary.error
    with pytest.raises(orbit.OrbitError, match="unknown scheme"):
        orbit.Engine(stories260k_path, remote="http://127.0.0.1:1")
