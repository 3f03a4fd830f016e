"""What a store directory keeps of its remote writes, as an operator sees and maintains it offline (`orbit store`,
cli/cmd_store.cpp; orbit/store.h): the count of writes given up past remote_max_held_fraction, kept over every
run, is zeroed by `orbit store reset-counts` (with the store closed); the records of writes not yet delivered, which
only an open with their remote re-sends (so those of a remote no store opens any more stay for good), are listed per
remote by `orbit store stat` and dropped by `orbit store forget-remote`. The stores here are made by an engine whose
remote never connects (a free 127.0.0.1 port nobody listens on), with a disk budget of 4.5 chunks."""
import json
import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest
from conftest import free_port

PAGE = 4
POOL = 8 << 20


def _store_with_given_up_writes(orbit, model, directory, url):
    """Precomputes 12 chunks into `directory` with `url` down: the disk keeps the newest (their writes pending) and
    the oldest are given up. Returns (pending, abandoned)."""
    chunks = [[i * 10 + t for t in range(1, 9)] for i in range(1, 13)]
    with orbit.Engine(model, store_dir=directory / "size", pool_bytes=POOL, page_size=PAGE) as e:
        e.precompute(e.add_tokens(chunks[0]))
        one = e.stats.store.tiers[2].bytes
    with pytest.warns(orbit.OrbitWarning):
        with orbit.Engine(model, store_dir=directory / "store", remote=url, pool_bytes=POOL, page_size=PAGE,
                          disk_budget_bytes=4 * one + one // 2) as e:
            for tokens in chunks:
                e.precompute(e.add_tokens(tokens))
            s = e.stats.store
    assert s.remote.abandoned > 0 and s.tiers[2].entries > 0
    return s.tiers[2].entries, s.remote.abandoned


def _store(orbit_cli, *args):
    return subprocess.run([str(orbit_cli), "store", *map(str, args)], capture_output=True, text=True, timeout=120)


def _remote_writes(orbit_cli, directory):
    stat = _store(orbit_cli, "stat", "--store", directory, "--json")
    assert stat.returncode == 0, stat.stderr
    return json.loads(stat.stdout)["remote_writes"]


def test_reset_counts_zeroes_the_writes_given_up_and_refuses_an_open_store(orbit, orbit_cli, stories260k_path,
                                                                          tmp_path):
    url = f"redis://127.0.0.1:{free_port()}"
    pending, abandoned = _store_with_given_up_writes(orbit, stories260k_path, tmp_path, url)
    store = tmp_path / "store"
    assert _remote_writes(orbit_cli, store) == {url: {"pending": pending, "abandoned": abandoned}}

    # Open (an engine counts into it): refused, naming why; nothing changed.
    with orbit.Engine(stories260k_path, store_dir=store, pool_bytes=POOL, page_size=PAGE):
        refused = _store(orbit_cli, "reset-counts", "--store", store)
    assert refused.returncode == 1
    assert "is open" in refused.stderr and "reset-counts" in refused.stderr
    assert _remote_writes(orbit_cli, store)[url]["abandoned"] == abandoned

    # A remote with no count: nothing to reset, as without --remote (exit 0, the other remote's count kept).
    other = _store(orbit_cli, "reset-counts", "--store", store, "--remote", "redis://127.0.0.1:1")
    assert other.returncode == 0, other.stderr
    assert other.stdout == "no count of remote writes given up for redis://127.0.0.1:1 to reset\n"
    assert _remote_writes(orbit_cli, store)[url]["abandoned"] == abandoned

    done = _store(orbit_cli, "reset-counts", "--store", store, "--remote", url, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"reset": {url: abandoned}}
    # The records still pending are not a count: they stay, re-sent by the next open with that remote.
    assert _remote_writes(orbit_cli, store) == {url: {"pending": pending, "abandoned": 0}}
    assert orbit.store_summary(store).remote_abandoned == {}
    again = _store(orbit_cli, "reset-counts", "--store", store)
    assert again.returncode == 0 and "no count of remote writes given up to reset" in again.stdout
    # Resetting one remote's count twice: the second finds it reset (exit 0), in text and in --json.
    again = _store(orbit_cli, "reset-counts", "--store", store, "--remote", url)
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"no count of remote writes given up for {url} to reset\n"
    again = _store(orbit_cli, "reset-counts", "--store", store, "--remote", url, "--json")
    assert again.returncode == 0 and json.loads(again.stdout) == {"reset": {}}, again.stderr


def test_forget_remote_drops_the_records_of_a_remote_no_store_opens_again(orbit, orbit_cli, stories260k_path,
                                                                          tmp_path):
    url = f"redis://127.0.0.1:{free_port()}"
    pending, abandoned = _store_with_given_up_writes(orbit, stories260k_path, tmp_path, url)
    store = tmp_path / "store"
    text = _store(orbit_cli, "stat", "--store", store)
    assert f"remote writes {url}: {pending} writes or erases recorded, not yet delivered" in text.stdout
    assert "forget-remote drops them" in text.stdout

    with orbit.Engine(stories260k_path, store_dir=store, pool_bytes=POOL, page_size=PAGE):
        refused = _store(orbit_cli, "forget-remote", "--store", store, "--remote", url)
    assert refused.returncode == 1
    assert "is open" in refused.stderr and "forget-remote" in refused.stderr
    unknown = _store(orbit_cli, "forget-remote", "--store", store, "--remote", "redis://127.0.0.1:1")
    assert unknown.returncode == 1
    assert "no record of writes not yet delivered to redis://127.0.0.1:1" in unknown.stderr and url in unknown.stderr
    assert _store(orbit_cli, "forget-remote", "--store", store).returncode == 1  # --remote is required

    dry = _store(orbit_cli, "forget-remote", "--store", store, "--remote", url, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout) == {"remote": url, "records": pending, "dry_run": True}
    assert _remote_writes(orbit_cli, store)[url]["pending"] == pending

    done = _store(orbit_cli, "forget-remote", "--store", store, "--remote", url)
    assert done.returncode == 0, done.stderr
    assert f"remote writes {url}: {pending} records of writes or erases not yet delivered dropped" in done.stdout
    # The count of writes given up is another thing: it stays until reset-counts.
    assert _remote_writes(orbit_cli, store) == {url: {"pending": 0, "abandoned": abandoned}}
    assert orbit.store_summary(store).remote_pending == {}
    # The entries stay, readable as before; `verify` finds them whole.
    verify = _store(orbit_cli, "verify", "--store", store)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_forget_remote_dry_run_reads_a_read_only_store(orbit, orbit_cli, stories260k_path, tmp_path):
    # As gc's, a dry run writes nothing: it opened LOCK and the index for writing ("cannot open .../LOCK:
    # Read-only file system"). Run by a user who cannot write the store (nobody, when the tests run as root).
    url = f"redis://127.0.0.1:{free_port()}"
    pending, _ = _store_with_given_up_writes(orbit, stories260k_path, tmp_path, url)
    as_other = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root, and no setpriv to run the CLI as nobody")
        as_other = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    with tempfile.TemporaryDirectory() as shared:
        os.chmod(shared, 0o755)  # nobody reaches it (tmp_path's parents are the user's own)
        store = pathlib.Path(shared) / "store"
        shutil.copytree(tmp_path / "store", store)
        for path in [store, *store.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222 | (0o555 if path.is_dir() else 0o444))
        try:
            dry = subprocess.run([*as_other, str(orbit_cli), "store", "forget-remote", "--store", str(store), "--remote",
                                  url, "--dry-run", "--json"], capture_output=True, text=True, timeout=120)
            assert dry.returncode == 0, dry.stderr
            assert json.loads(dry.stdout) == {"remote": url, "records": pending, "dry_run": True}
        finally:
            for path in [store, *store.rglob("*")]:
                path.chmod(path.stat().st_mode | 0o200)
