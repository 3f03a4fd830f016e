"""The remote tier from Python: engines sharing canonicals through a Redis server on a free 127.0.0.1 port
(conftest's redis_port fixture: password 'right', always stopped after the test), and an unreachable remote that
never stops an engine."""
import json
import subprocess
import time

import pytest
from conftest import free_port, redis_server  # and the redis_port fixture

PAGE = 4
POOL = 8 << 20


def _redis_url(port):
    return f"redis://:right@127.0.0.1:{port}"


# The remote has no secret, which the engine says once a process (test_a_remote_without_a_secret_warns_once_at_open
# checks that); which test of a worker says it first depends on the order xdist gives them.
@pytest.mark.filterwarnings("ignore:remote tier .* has no secret")
def test_engines_share_canonicals_through_a_redis_remote(orbit, stories260k_path, tmp_path, redis_port):
    url = _redis_url(redis_port)
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


def test_an_unreachable_remote_never_stops_the_engine(orbit, stories260k_path):
    url = f"redis://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.warns(orbit.RemoteUnreachableWarning, match="cannot connect"):  # said at open
        engine = orbit.Engine(stories260k_path, remote=url, pool_bytes=POOL, page_size=PAGE)
    # Its queued write cannot be delivered: the close says so (the local tiers keep the entry).
    with pytest.warns(orbit.OrbitWarning, match="closed with 1 queued write .* not delivered"), engine as e:
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


def test_a_write_a_close_left_for_a_stopped_remote_is_resent_by_the_next_open(orbit, stories260k_path, tmp_path):
    port = free_port()
    url = _redis_url(port)
    tokens = [5, 17, 42, 99, 100, 7, 8]

    def engine():
        return orbit.Engine(stories260k_path, store_dir=tmp_path / "s", remote=url, remote_secret="s",
                            pool_bytes=POOL, page_size=PAGE)

    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    with redis_server(port, tmp_path / "first"):
        e = engine()  # opened while the server answers
    # The server is gone (killed): the canonical's write waits in the queue, and the close says it is re-sent.
    with pytest.warns(orbit.OrbitWarning, match="closed with 1 queued write .* next open of this store re-sends"), e:
        e.precompute(e.add_tokens(tokens))
        assert e.stats.canonicals_encoded == 1
    with redis_server(port, tmp_path / "second"):  # back, and empty (no persistence)
        assert orbit.store_remote_summary(url).entries == 0
        with engine() as e:
            for _ in range(3000):  # the re-send runs in the background: up to 60 s on a loaded machine
                if e.stats.store.remote.resent == 1:
                    break
                time.sleep(0.02)
            remote = e.stats.store.remote
            assert remote.resent == 1 and remote.resend_backlog == 0 and remote.writes == 0
        assert orbit.store_remote_summary(url).entries == 1  # sent from the local copy, not encoded again


def test_engines_share_only_values_sealed_with_their_remote_secret(orbit, stories260k_path, tmp_path, redis_port):
    url = _redis_url(redis_port)
    tokens = [5, 17, 42, 99, 100, 7, 8]

    def engine(name, secret):
        return orbit.Engine(stories260k_path, store_dir=tmp_path / name, remote=url, remote_secret=secret,
                            pool_bytes=POOL, page_size=PAGE)

    with engine("writer", "team-s3cret") as e:
        e.precompute(e.add_tokens(tokens))
    with engine("teammate", "team-s3cret") as e:  # the same secret: recalled
        e.new_window().admit(e.add_tokens(tokens))
        assert e.stats.canonicals_encoded == 0 and e.stats.store.remote.hits == 1
    with pytest.warns(orbit.OrbitWarning) as caught:
        with engine("outsider", "another-s3cret") as e:  # another secret: refused and recomputed, warned of once
            e.new_window().admit(e.add_tokens(tokens))
            e.new_window().admit(e.add_tokens(tokens[:4]))  # written by none: a plain miss
            remote = e.stats.store.remote
            assert e.stats.canonicals_encoded == 2 and remote.hits == 0
            assert remote.unauthenticated == 1 and remote.corrupt == 0  # not damage: another engine's value
            assert "does not verify" in remote.last_error and "s3cret" not in remote.last_error
    refused = [str(w.message) for w in caught if "does not verify" in str(w.message)]
    assert len(refused) == 1 and "need the same secret" in refused[0] and "s3cret" not in refused[0], refused


def test_a_remote_without_a_secret_warns_once_at_open(orbit, stories260k_path):
    import os
    import pathlib
    import subprocess
    import sys

    url = f"redis://127.0.0.1:{free_port()}"
    script = (f"import orbit\n"
              f"for secret in ['', '', 'x']:\n"
              f"    orbit.Engine({str(stories260k_path)!r}, remote={url!r}, remote_secret=secret).close()\n")
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(orbit.__file__).parents[1])}
    env.pop("ORBIT_REMOTE_SECRET", None)
    stderr = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                            check=True).stderr
    assert stderr.count("has no secret: values read from it are checked") == 1, stderr
    with_secret = subprocess.run([sys.executable, "-c", script.replace("['', '', 'x']", "['x']")], env=env,
                                 capture_output=True, text=True, check=True).stderr
    assert "has no secret" not in with_secret, with_secret


def test_a_remote_down_for_long_does_not_stop_the_disk_from_caching(orbit, orbit_cli, stories260k_path, tmp_path):
    """Entries kept on disk for their undelivered remote writes fill at most remote_max_held_fraction of the disk
    budget: past it the oldest are evicted and their writes given up (stats' abandoned, one warning), so puts keep
    landing on disk. With 1 every one is kept and, once they fill the budget, puts are refused (the behaviour
    before the bound, when a remote that never connects froze the disk cache)."""
    chunks = [[i * 10 + t for t in range(1, 9)] for i in range(1, 13)]  # 12 distinct chunks of one size
    with orbit.Engine(stories260k_path, store_dir=tmp_path / "size", pool_bytes=POOL, page_size=PAGE) as e:
        e.precompute(e.add_tokens(chunks[0]))
        one = e.stats.store.tiers[2].bytes  # a chunk's blob on disk
    assert one > 0
    url = f"redis://127.0.0.1:{free_port()}"  # nothing listens there: every remote write stays undelivered

    def run(name, fraction):
        with pytest.warns(orbit.OrbitWarning) as caught:
            with orbit.Engine(stories260k_path, store_dir=tmp_path / name, remote=url, pool_bytes=POOL,
                              page_size=PAGE, disk_budget_bytes=4 * one + one // 2,
                              remote_max_held_fraction=fraction) as e:
                assert e.options.remote_max_held_fraction == fraction
                for tokens in chunks:
                    e.precompute(e.add_tokens(tokens))
                s = e.stats.store
        return s, [str(w.message) for w in caught]

    s, messages = run("bounded", 0.5)
    assert s.refusals == 0 and s.tiers[2].entries >= 1
    assert s.remote.abandoned == len(chunks) - s.tiers[2].entries  # every chunk stored, the oldest given up
    given_up = [m for m in messages if "gave up" in m]
    assert len(given_up) == 1 and "127.0.0.1" in given_up[0] and "max_held_fraction" in given_up[0]
    summary = orbit.store_summary(tmp_path / "bounded")  # what `orbit store stat` shows, read from the index
    assert summary.remote_abandoned == {url: s.remote.abandoned}
    assert summary.remote_pending == {url: s.tiers[2].entries}  # the kept ones, re-sent by the next open
    stat = subprocess.run([str(orbit_cli), "store", "stat", "--store", str(tmp_path / "bounded"), "--json"],
                          capture_output=True, text=True, check=True)
    assert json.loads(stat.stdout)["remote_writes"] == {
        url: {"pending": s.tiers[2].entries, "abandoned": s.remote.abandoned}}

    s, messages = run("unbounded", 1.0)
    assert s.remote.abandoned == 0 and s.refusals >= 1  # the disk full of kept entries: puts refused
    assert not [m for m in messages if "gave up" in m]


@pytest.mark.parametrize("fraction", [-0.5, 1.5, float("nan")])
def test_remote_max_held_fraction_outside_0_to_1_is_refused_naming_it(orbit, stories260k_path, tmp_path, fraction):
    with pytest.raises(orbit.OrbitError, match="remote_max_held_fraction"):
        orbit.Engine(stories260k_path, store_dir=tmp_path, remote="redis://127.0.0.1:1", pool_bytes=POOL,
                     page_size=PAGE, remote_max_held_fraction=fraction)


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_store_stat_of_an_unreachable_remote_says_so_on_stderr(orbit_cli, json_flag):
    # Before, the status was 1 with nothing on stderr: the failure was only in the report on stdout.
    url = f"redis://127.0.0.1:{free_port()}"
    stat = subprocess.run([str(orbit_cli), "store", "stat", "--remote", url, *json_flag], capture_output=True,
                          text=True, timeout=120)
    assert stat.returncode == 1
    assert f"orbit store stat: error: the remote tier {url} is unreachable (" in stat.stderr
    assert (json.loads(stat.stdout)["remote"]["reachable"] is False) if json_flag else "UNREACHABLE" in stat.stdout


def _fake_cluster_node(start_slot):
    """A node that answers CLUSTER SLOTS with one range from `start_slot` to 16383 (itself), and every other
    command with an empty or OK reply; returns (port, stop)."""
    import socket
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    done = threading.Event()

    def reply(args):
        words = [a.upper() for a in args]
        if words[:2] == [b"CLUSTER", b"SLOTS"]:
            return b"*1\r\n*3\r\n:%d\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n" % (start_slot, port)
        if words[:1] == [b"INFO"]:
            body = b"redis_version:7.0.0\r\nused_memory:1\r\n"
            return b"$%d\r\n%s\r\n" % (len(body), body)
        if words[:1] == [b"DBSIZE"]:
            return b":0\r\n"
        if words[:1] == [b"SCAN"]:
            return b"*2\r\n$1\r\n0\r\n*0\r\n"
        return b"+OK\r\n"

    def serve(conn):
        buf = b""
        with conn:
            while not done.is_set():
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                buf += data
                while buf.startswith(b"*") and b"\r\n" in buf:  # whole commands (arrays of bulk strings)
                    head = buf.index(b"\r\n")
                    at, args = head + 2, []
                    for _ in range(int(buf[1:head])):
                        end = buf.find(b"\r\n", at)
                        size = int(buf[at + 1:end]) if end >= 0 else -1
                        if end < 0 or len(buf) < end + 2 + size + 2:
                            break
                        args.append(buf[end + 2:end + 2 + size])
                        at = end + 2 + size + 2
                    else:
                        buf = buf[at:]
                        conn.sendall(reply(args))
                        continue
                    break

    def accept():
        with srv:
            while not done.is_set():
                try:
                    conn, _ = srv.accept()
                except socket.timeout:
                    continue
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return port, done.set


@pytest.mark.parametrize("start_slot", [0, -3000])
def test_a_cluster_reply_naming_slots_out_of_range_is_not_trusted(orbit_cli, start_slot):
    # A range starting below slot 0 was written before the slot table (the process crashed with SIGSEGV); such a
    # range is skipped, and a node that names no valid range is refused as naming no slot owner.
    port, stop = _fake_cluster_node(start_slot)
    try:
        stat = subprocess.run([str(orbit_cli), "store", "stat", "--remote", f"redis-cluster://127.0.0.1:{port}"],
                              capture_output=True, text=True, timeout=120)
    finally:
        stop()
    assert stat.returncode in (0, 1), stat.stderr  # never a signal
    if start_slot == 0:
        assert stat.returncode == 0, stat.stderr
    else:
        assert stat.returncode == 1
        assert "names no slot owner" in stat.stdout + stat.stderr
