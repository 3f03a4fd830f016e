"""`orbit serve` started on a store damaged while it was down: index.sqlite bytes flipped, blobs replaced by
FIFOs or directories. The server starts and answers as the first server did (a damaged entry is a miss that
is recomputed and rewritten, with a warning naming the blob and orbit_store_faults_total{kind="corrupt_read"}),
and nothing good is lost: `orbit store gc` keeps the blobs of damaged rows and `orbit store repair` restores
them; the Python Engine recomputes such an entry too. Every server is started here on 127.0.0.1 (any free
port) and stopped."""
import os
import re
import sqlite3
import subprocess

MODEL_NAME = "stories260K.bin"
CHAT = {"model": MODEL_NAME, "max_tokens": 6, "temperature": 0,
        "messages": [{"role": "system", "content": "You are a storyteller who tells short stories about animals "
                                                   "in the forest and their friends."},
                     {"role": "user", "content": "Tell me a story"}]}


def answer(server):
    return server.call("/v1/chat/completions", CHAT, timeout=60)["choices"][0]["message"]


def first_answer(start_serve, model, store):
    server = start_serve(model, "--store", str(store))
    message = answer(server)
    server.stop()
    return message


def blobs(store):
    return sorted(p for p in (store / "blobs").rglob("*.blob") if p.is_file())


def entry_rows(store):
    db = sqlite3.connect(store / "index.sqlite")
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return db.execute("SELECT key, blob FROM entries").fetchall()
    finally:
        db.close()


def flip_rows(store, rows):
    """Flips one byte of each row's blob path and the same byte of both copies of its key (the table's and the
    key index's), so that no row names the key or its blob any more and SQLite's own checks still pass."""
    path = store / "index.sqlite"
    data = bytearray(path.read_bytes())
    for key, blob in rows:
        at = data.find(blob.encode())
        assert at >= 0
        offsets = [at + len(blob) - 6]
        start = 0
        while (o := data.find(key.encode(), start)) >= 0:
            start = o + 1
            if not at <= o < at + len(blob):
                offsets.append(o + 10)
        assert len(offsets) == 3
        for o in offsets:
            data[o] = ord("b") if data[o] == ord("a") else ord("a")
    path.write_bytes(bytes(data))


def store_command(orbit_cli, *args):
    return subprocess.run([str(orbit_cli), "store", *args], capture_output=True, text=True, timeout=120)


def test_flipped_index_rows_lose_no_blob(start_serve, orbit_cli, stories260k_path, tmp_path):
    store = tmp_path / "store"
    first = first_answer(start_serve, stories260k_path, store)
    good = blobs(store)
    rows = entry_rows(store)
    assert len(good) == len(rows) >= 2
    flip_rows(store, rows)
    gc = store_command(orbit_cli, "gc", "--store", str(store))
    assert gc.returncode == 0, gc.stderr
    assert all(p.is_file() for p in good), gc.stdout  # the old gc deleted them: their rows looked gone
    assert gc.stdout.count("kept ") == len(good) and f"orbit store repair --store {store}" in gc.stdout
    server = start_serve(stories260k_path, "--store", str(store))
    assert answer(server) == first  # the entries are misses: recomputed, and written again
    server.stop()
    repair = store_command(orbit_cli, "repair", "--store", str(store))
    assert repair.returncode == 0, repair.stderr
    assert store_command(orbit_cli, "verify", "--store", str(store)).returncode == 0
    assert {key for key, _ in entry_rows(store)} >= {key for key, _ in rows}


def corrupt_reads(server):
    metrics = server.call("/metrics")
    return int(re.search(r'orbit_store_faults_total\{kind="corrupt_read"\} (\d+)', metrics).group(1))


def check_recomputed_and_rewritten(start_serve, orbit_cli, model, store, first, damaged):
    server = start_serve(model, "--store", str(store))
    assert answer(server) == first
    assert corrupt_reads(server) >= 1
    server.stop()
    warnings = [line for line in server.output().splitlines() if "recomputed" in line]
    assert any(str(p) in line for line in warnings for p in damaged), server.output()
    # What was read was written again; what was not is reported as bad (not "verify again": it will not
    # read next time either), and repair drops those rows instead of stopping at them.
    verify = store_command(orbit_cli, "verify", "--store", str(store))
    assert verify.returncode in (0, 1) and "UNREADABLE" not in verify.stdout, verify.stdout
    repair = store_command(orbit_cli, "repair", "--store", str(store))
    assert repair.returncode == 0, repair.stderr
    verify = store_command(orbit_cli, "verify", "--store", str(store))
    assert verify.returncode == 0, verify.stdout
    server = start_serve(model, "--store", str(store))
    assert answer(server) == first
    assert corrupt_reads(server) == 0
    server.stop()


def test_a_blob_replaced_by_a_directory_is_recomputed_with_a_warning(start_serve, orbit_cli, stories260k_path,
                                                                      tmp_path):
    # A directory where a blob was is damage, as a FIFO is: no later read makes it a blob. The entry is marked
    # corrupt, recomputed and written again under a new name, and the server says so once per blob, naming it. (Its
    # read's EISDIR was once taken for a failed read that proves nothing: the entry was kept and recomputed on every
    # request, and verify called it unreadable on every run.) Repair then moves the directories to quarantine/.
    store = tmp_path / "store"
    first = first_answer(start_serve, stories260k_path, store)
    damaged = blobs(store)
    for p in damaged:
        p.unlink()
        p.mkdir()
    server = start_serve(stories260k_path, "--store", str(store))
    assert answer(server) == first
    assert answer(server) == first
    server.stop()
    warnings = [line for line in server.output().splitlines() if "it is a directory, not a blob file" in line]
    named = [p for p in damaged if any(str(p) in line for line in warnings)]
    assert named, server.output()
    assert all(sum(str(p) in line for line in warnings) == 1 for p in named), warnings
    assert all("marked corrupt and recomputed" in line for line in warnings)
    # Entries read were written again; a row still naming a directory is bad, never unreadable.
    verify = store_command(orbit_cli, "verify", "--store", str(store))
    assert verify.returncode in (0, 1) and "UNREADABLE" not in verify.stdout, verify.stdout
    assert all(p.is_dir() for p in damaged)
    repair = store_command(orbit_cli, "repair", "--store", str(store))
    assert repair.returncode == 0, repair.stderr
    verify = store_command(orbit_cli, "verify", "--store", str(store))
    assert verify.returncode == 0, verify.stdout
    assert not any(p.exists() for p in damaged)
    assert all((store / "quarantine" / p.name).is_dir() for p in damaged)


def test_a_blob_replaced_by_a_fifo_is_recomputed_without_blocking(start_serve, orbit_cli, stories260k_path,
                                                                  tmp_path):
    store = tmp_path / "store"
    first = first_answer(start_serve, stories260k_path, store)
    damaged = blobs(store)
    for p in damaged:
        p.unlink()
        os.mkfifo(p)  # opening it to read would wait for a writer forever
    check_recomputed_and_rewritten(start_serve, orbit_cli, stories260k_path, store, first, damaged)


ENGINE_CHILD = """
import sys, warnings
import orbit
model, store = sys.argv[1], sys.argv[2]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with orbit.Engine(model, store_dir=store, pool_bytes=8 << 20, page_size=4) as e:
        e.precompute(e.add_tokens([3, 14, 15, 92, 65, 35]))
        print("corrupt_reads", e.stats.store.corrupt_reads)
for w in caught:
    print("warning", w.message)
"""


def test_engine_on_a_store_whose_blobs_were_replaced_by_fifos_recomputes_without_blocking(orbit, stories260k_path,
                                                                                         tmp_path):
    # The Python Engine on the same damage, in a child process (a read that blocks is then a timeout, not a
    # hung test run): a warning names the FIFO, a corrupt read is counted and the entry is recomputed.
    import pathlib
    import sys

    store = tmp_path / "store"
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(orbit.__file__).resolve().parents[1]))

    def engine():
        run = subprocess.run([sys.executable, "-c", ENGINE_CHILD, str(stories260k_path), str(store)],
                             capture_output=True, text=True, timeout=120, env=env)
        assert run.returncode == 0, run.stderr
        return run.stdout

    assert "corrupt_reads 0" in engine()
    damaged = blobs(store)
    assert damaged
    for p in damaged:
        p.unlink()
        os.mkfifo(p)
    out = engine()
    reads = int(re.search(r"corrupt_reads (\d+)", out).group(1))
    assert reads >= 1
    assert any("FIFO" in line and str(store) in line for line in out.splitlines() if line.startswith("warning")), out
