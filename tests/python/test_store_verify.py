"""store_verify's and store_repair's reports from Python and the CLI on a directory in a blob's place: verify calls
it bad (VerifyReport.problems, as `orbit store verify` prints it, naming repair), and repair drops its row, moves
the directory with what it holds to DIR/quarantine/, and keeps every other entry."""
import contextlib
import json
import os
import shutil
import subprocess
import tempfile

PAGE = 4
POOL = 8 << 20


def _store(orbit, model, directory, chunks):
    """A store of `chunks` precomputed chunks; their keys."""
    with orbit.Engine(str(model), pool_bytes=POOL, page_size=PAGE, store_dir=directory) as e:
        refs = [e.add_tokens([5 + i, 17, 42, 99, 100, 7, 8]) for i in range(chunks)]
        for ref in refs:
            e.precompute(ref)
    return [ref.key for ref in refs]


def _blob(orbit, directory, key):
    return next(x.blob_path for x in orbit.store_list(directory) if x.key == key)


@contextlib.contextmanager
def _scratch_root(prefix):
    """A directory the CLI's unprivileged user may enter (pytest's tmp_path has parents it may not), removed
    afterwards with every mode restored."""
    root = tempfile.mkdtemp(prefix=prefix)
    try:
        os.chmod(root, 0o755)
        yield root
    finally:
        for d, _, _ in os.walk(root):
            os.chmod(d, 0o755)
        shutil.rmtree(root)


def _close_shard(store, shard, as_user):
    """Makes blobs/NN `shard` unlistable to the CLI: as root, the store goes to nobody (who runs the CLI) and the
    shard stays root's, mode 0700; otherwise the shard's mode is 000."""
    if as_user:
        for d, _, files in os.walk(store):
            for p in [d] + [os.path.join(d, f) for f in files]:
                os.chown(p, 65534, 65534)
        os.chown(shard, 0, 0)
    os.chmod(shard, 0o700 if as_user else 0o000)


def _open_shard(shard, as_user):
    os.chmod(shard, 0o755)
    if as_user:
        os.chown(shard, 65534, 65534)


def _replace_with_directory(blob):
    """The blob becomes a directory holding someone's files (a .tmp and a .blob among them); their paths."""

    os.remove(blob)
    os.mkdir(blob)
    kept = [os.path.join(blob, name) for name in ("notes.txt", "draft.tmp", "copy.blob")]
    for p in kept:
        with open(p, "w") as f:
            f.write("mine")
    return kept


def test_verify_calls_a_directory_in_a_blobs_place_bad_and_names_repair(orbit, orbit_cli, stories260k_path,
                                                                       tmp_path):
    keys = _store(orbit, stories260k_path, tmp_path, 3)
    blob = _blob(orbit, tmp_path, keys[1])
    _replace_with_directory(blob)

    # It was listed as unreadable ("verify again") on every run, though no read makes a directory a blob.
    report = orbit.store_verify(tmp_path)
    assert report.checked == 3 and report.unreadable == []
    assert [(p.key, p.path) for p in report.problems] == [(keys[1], blob)]
    assert "it is a directory, not a blob file" in report.problems[0].reason
    assert f"repair drops its row and moves it to {tmp_path}/quarantine/" in report.problems[0].reason
    assert not report.clean and not report
    assert repr(report) == ("VerifyReport(checked=3, problems=[1 VerifyProblem], unreadable=[], unreferenced_blobs=0, "
                            "temp_files=0, unreadable_dirs=[], index_damage='', clean=False)")
    with orbit.Store(tmp_path) as store:
        assert [p.key for p in store.verify().problems] == [keys[1]]
    # The same list as the CLI's (exit status 1: something is bad), which names the fix.
    cli = subprocess.run([str(orbit_cli), "store", "verify", "--store", str(tmp_path), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 1, cli.stderr
    assert json.loads(cli.stdout)["problems"] == [
        {"key": p.key, "path": p.path, "reason": p.reason} for p in report.problems]
    text = subprocess.run([str(orbit_cli), "store", "verify", "--store", str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert text.returncode == 1 and f"BAD {keys[1]} {blob}" in text.stdout
    assert f"run `orbit store repair --store {tmp_path}`" in text.stdout


def test_repair_moves_a_directory_blob_to_quarantine_and_keeps_the_rest(orbit, orbit_cli, stories260k_path,
                                                                        tmp_path):

    keys = _store(orbit, stories260k_path, tmp_path, 8)
    blob = _blob(orbit, tmp_path, keys[3])
    kept = _replace_with_directory(blob)

    # The CLI stopped at the directory before ("store repair: cannot read ...: Is a directory; fix that and run
    # the repair again"), repairing nothing else; then it left the directory in blobs/.
    run = subprocess.run([str(orbit_cli), "store", "repair", "--store", str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert f"note: dropped row {keys[3]}: {blob}: is a directory, not a blob file" in run.stdout
    moved = os.path.join(tmp_path, "quarantine", os.path.basename(blob))
    assert f"note: moved the directory {blob} (not a blob file) to {moved} with what it holds" in run.stdout
    assert "7 blobs scanned; 0 rows restored, 1 dropped, 0 blobs rejected" in run.stdout  # not copy.blob
    assert not os.path.exists(blob)
    assert all(os.path.exists(os.path.join(moved, os.path.basename(p))) for p in kept)
    report = orbit.store_verify(tmp_path)
    assert report.clean and report.checked == 7 and report.temp_files == 0 and report.unreferenced_blobs == 0
    assert sorted(x.key for x in orbit.store_list(tmp_path)) == sorted(k for k in keys if k != keys[3])
    # Nothing the directory holds is taken for the store's: gc removes none of it.
    assert orbit.store_gc(tmp_path).removed_paths == []
    assert all(os.path.exists(os.path.join(moved, os.path.basename(p))) for p in kept)
    again = orbit.store_repair(tmp_path)  # the dropped row stays dropped; nothing is left to move
    assert (again.rows_dropped, again.rows_restored, again.blobs_rejected) == (0, 0, 0) and again.notes == []


def test_verify_report_keeps_bad_blobs_apart_from_unreadable_ones(orbit, stories260k_path, tmp_path):

    keys = _store(orbit, stories260k_path, tmp_path, 2)
    os.remove(_blob(orbit, tmp_path, keys[0]))
    report = orbit.store_verify(tmp_path)
    assert [p.key for p in report.problems] == [keys[0]] and "missing" in report.problems[0].reason
    assert report.unreadable == []
    assert repr(report) == ("VerifyReport(checked=2, problems=[1 VerifyProblem], unreadable=[], unreferenced_blobs=0, "
                            "temp_files=0, unreadable_dirs=[], index_damage='', clean=False)")


def test_the_text_listing_keeps_one_line_per_entry_for_a_path_holding_a_newline(orbit, orbit_cli, stories260k_path,
                                                                                tmp_path):
    # A store directory whose name holds a newline (or a backslash, or an escape) printed it raw: one entry's
    # line became two, and a terminal ran the escape. The text output escapes them as C does; --json keeps them.
    directory = tmp_path / "a\nb\\c\x1b"
    directory.mkdir()
    keys = _store(orbit, stories260k_path, directory, 2)
    listing = subprocess.run([str(orbit_cli), "store", "ls", "--store", str(directory)], capture_output=True,
                             text=True, timeout=120)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert len(lines) == 3 and lines[-1] == "2 entries", listing.stdout
    escaped = str(tmp_path) + "/a\\nb\\\\c\\x1b/"
    assert all(line.split()[0] in keys and escaped in line for line in lines[:2]), listing.stdout
    stat = subprocess.run([str(orbit_cli), "store", "stat", "--store", str(directory)], capture_output=True, text=True,
                          timeout=120)
    assert f"store        {str(tmp_path)}/a\\nb\\\\c\\x1b\n" in stat.stdout, stat.stdout
    as_json = subprocess.run([str(orbit_cli), "store", "ls", "--store", str(directory), "--json"],
                             capture_output=True, text=True, timeout=120)
    assert all(e["blob"].startswith(str(directory) + "/") for e in json.loads(as_json.stdout))


def test_a_blob_directory_that_cannot_be_listed_is_named_not_skipped(orbit, orbit_cli, stories260k_path,
                                                                    as_unprivileged):
    # stat, gc and gc --dry-run counted 0 unreferenced blobs, exit status 0, while a blobs/NN they could not list held
    # one: the scan stopped there unseen. The CLI runs as an unprivileged user (root lists any directory).
    as_user = as_unprivileged
    with _scratch_root("orbit-unlisted-") as root:
        store = os.path.join(root, "store")
        keys = _store(orbit, stories260k_path, store, 2)
        blob = _blob(orbit, store, keys[0])
        shard = os.path.dirname(blob)
        orphan = os.path.join(shard, "0" * 64 + ".0123456789abcdef.blob")
        shutil.copy(blob, orphan)
        _close_shard(store, shard, as_user)

        def store_cli(*args):
            return subprocess.run(as_user + [str(orbit_cli), "store", *args, "--store", store], capture_output=True,
                                  text=True, timeout=120)

        unlisted = f"UNREADABLE DIRECTORY {shard}: Permission denied"
        for args in (["stat"], ["gc", "--dry-run"], ["verify"], ["gc"]):
            r = store_cli(*args)
            assert r.returncode == 2, (args, r.stdout, r.stderr)
            assert unlisted in r.stdout, (args, r.stdout)
            assert "could not be listed: the report is incomplete" in r.stderr or args == ["verify"], r.stderr
        r = store_cli("gc", "--dry-run", "--json")
        assert r.returncode == 2 and json.loads(r.stdout)["unreadable_dirs"] == [f"{shard}: Permission denied"]
        assert os.path.exists(orphan)  # nothing in it removed
        _open_shard(shard, as_user)
        r = store_cli("gc")
        assert r.returncode == 0 and "1 unreferenced blobs" in r.stdout, r.stdout
        assert not os.path.exists(orphan)


def test_repair_and_a_lost_index_refuse_a_blob_directory_that_cannot_be_listed(orbit, orbit_cli, stories260k_path,
                                                                              as_unprivileged):
    # With the index lost and a blobs/NN it could not list, repair restored the rows of the blobs it reached,
    # said nothing and exited 0, and gc then removed every blob of the unlisted part's later directories as
    # unreferenced; ls/stat/verify/gc stopped with "internal error" (an uncaught filesystem error), and
    # `orbit serve --store` did too. Each now refuses naming the directory, and repair changes nothing.
    as_user = as_unprivileged
    with _scratch_root("orbit-unlisted-repair-") as root:
        store = os.path.join(root, "store")
        keys = _store(orbit, stories260k_path, store, 3)
        shard = os.path.dirname(_blob(orbit, store, keys[0]))
        blobs = sorted(os.path.join(d, f) for d, _, files in os.walk(os.path.join(store, "blobs")) for f in files
                       if f.endswith(".blob"))
        for name in os.listdir(store):
            if name.startswith("index.sqlite"):
                os.remove(os.path.join(store, name))
        _close_shard(store, shard, as_user)

        def run(*args):
            return subprocess.run(as_user + [str(orbit_cli), *args], capture_output=True, text=True, timeout=120)

        unlisted = f"cannot list {shard}: Permission denied"
        r = run("store", "repair", "--store", store)
        assert r.returncode == 1 and unlisted in r.stderr and "nothing was changed" in r.stderr, (r.stdout, r.stderr)
        assert not os.path.exists(os.path.join(store, "index.sqlite"))
        for args in (["ls"], ["stat"], ["verify"], ["gc", "--dry-run"], ["gc"]):
            r = run("store", *args, "--store", store)
            assert r.returncode == 1 and unlisted in r.stderr and "internal error" not in r.stderr, (args, r.stderr)
        try:
            r = run("serve", "--model", str(stories260k_path), "--store", store, "--port", "0")
        except subprocess.TimeoutExpired:
            raise AssertionError("orbit serve started on a store whose index is lost beside an unlisted blobs/NN")
        assert r.returncode != 0 and unlisted in r.stderr, r.stderr
        assert not os.path.exists(os.path.join(store, "index.sqlite"))  # no empty index made over the blobs
        assert all(os.path.exists(b) for b in blobs)
        _open_shard(shard, as_user)
        r = run("store", "repair", "--store", store)
        assert r.returncode == 0 and "3 rows restored" in r.stdout, (r.stdout, r.stderr)
        assert sorted(e.key for e in orbit.store_list(store)) == sorted(keys)


def test_gc_and_stat_report_names_that_are_not_utf8_as_escapes(orbit, orbit_cli, stories260k_path, tmp_path):
    # A stray file named with a byte that is not UTF-8 made `gc --json` fail after its removals ("internal error",
    # no report of what went) and Python's store_gc raise UnicodeDecodeError after removing it; `stat --json` failed
    # the same way on such a store directory. Such bytes are reported as \xNN, as ls reports paths from the index.
    directory = tmp_path / "s"
    _store(orbit, stories260k_path, directory, 2)
    shard = next(p for p in (directory / "blobs").iterdir() if p.is_dir())
    stray = os.path.join(os.fsencode(shard), b"stray\xff.blob")
    for dry_run in (True, False):
        with open(stray, "wb") as f:
            f.write(b"junk")
        args = [str(orbit_cli), "store", "gc", "--store", str(directory), "--json"] + (["--dry-run"] if dry_run else [])
        gc = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert gc.returncode == 0, gc.stderr
        report = json.loads(gc.stdout)
        assert report["removed_blobs"] == 1 and report["paths"] == [str(shard) + "/stray\\xff.blob"], report
        assert os.path.exists(stray) == dry_run
    with open(stray, "wb") as f:
        f.write(b"junk")
    report = orbit.store_gc(directory)
    assert report.removed_paths == [str(shard) + "/stray\\xff.blob"] and not os.path.exists(stray)
    odd = os.path.join(os.fsencode(tmp_path), b"store\xe9")
    _store(orbit, stories260k_path, odd, 1)
    stat = subprocess.run([os.fsencode(str(orbit_cli)), b"store", b"stat", b"--store", odd, b"--json"],
                          capture_output=True, timeout=120)
    assert stat.returncode == 0, stat.stderr
    assert json.loads(stat.stdout)["dir"] == str(tmp_path) + "/store\\xe9"
    assert orbit.store_summary(os.fsdecode(odd)).dir == str(tmp_path) + "/store\\xe9"


def test_an_index_the_caller_cannot_read_says_why(orbit, orbit_cli, stories260k_path, as_unprivileged):
    # SQLite's "unable to open database file" named the file but not the cause, where the blob and LOCK messages
    # say "Permission denied".
    with _scratch_root("orbit-closed-index-") as root:
        store = os.path.join(root, "store")
        _store(orbit, stories260k_path, store, 1)
        index = os.path.join(store, "index.sqlite")
        os.chmod(index, 0o600 if as_unprivileged else 0o000)  # root's file, closed to nobody (or to its owner)
        r = subprocess.run(as_unprivileged + [str(orbit_cli), "store", "ls", "--store", store], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 1, r.stdout
        assert f"store index {index}: cannot open: unable to open database file (Permission denied)" in r.stderr, \
            r.stderr
