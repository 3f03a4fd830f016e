"""`orbit serve`'s idle worker hands the heap's free pages back to the system (malloc_trim) once the server has
been quiet a while (cli/serve/compute/heap_trim.h), not between bursts of requests a second or two apart: a
trim there made every burst fault its working memory back in. The memory still comes back once the server
is quiet. The schedule is read from the trims themselves (orbit_heap_trims_total in /metrics), not from page
faults, which other processes on a loaded machine move. Linux and glibc only (/proc, malloc_trim). Every
server is started here on 127.0.0.1 (any free port) and stopped."""
import re
import sys
import threading
import time

import pytest

MODEL_NAME = "stories260K.bin"
SESSIONS, TOKENS = 16, 300
QUIET_S = 5  # HeapTrimSchedule::kQuiet
LONGEST_S = 30  # HeapTrimSchedule::kLongest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def minor_faults(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])  # minflt, the 10th field, counted after the name


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1])


def trims(server):
    return int(re.search(r"^orbit_heap_trims_total (\d+)$", server.call("/metrics"), re.M).group(1))


def burst(server, tag):
    """SESSIONS sessions answering at once (decoded in one batch), each TOKENS tokens."""
    errors = []

    def one(i):
        body = {"model": MODEL_NAME, "max_tokens": TOKENS, "temperature": 0, "logit_bias": {"2": -100},
                "messages": [{"role": "user", "content": f"Tell me a story about a dog number {i}."}]}
        try:
            server.call("/v1/chat/completions", body, session=f"{tag}-{i}")
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(SESSIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_bursts_a_second_apart_keep_their_memory_and_a_quiet_server_returns_it(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--max-sessions", str(8 * SESSIONS))
    for r in range(3):  # the tables and pools reach their size
        burst(server, f"warm-{r}")
    faults = []
    before, start = trims(server), time.monotonic()
    for r in range(5):
        time.sleep(1.5)  # past the old trim's second, short of QUIET_S
        minor = minor_faults(server.pid)
        burst(server, f"run-{r}")
        faults.append(minor_faults(server.pid) - minor)
    during, elapsed = trims(server) - before, time.monotonic() - start
    loaded = rss_kib(server.pid)
    print(f"trims during the bursts {during} in {elapsed:.1f} s, minor faults per burst {faults}, "
          f"RSS after load {loaded} KiB")
    # No trim in a gap shorter than QUIET_S: at most the one every LONGEST_S on a server never quiet that long.
    # The old schedule (a trim a second) trimmed in each of the five gaps.
    assert during <= 1 + int(elapsed // LONGEST_S), (during, elapsed)
    # Quiet, the server trims, and its resident memory comes down below the most it held before the trim. Not
    # below `loaded` alone: the idle work the bursts left (on a loaded machine it runs late, after them) can
    # raise it first, and a trim comes only after QUIET_S without that work, so the wait sees what it reached.
    deadline = time.monotonic() + QUIET_S + 60  # a hang guard: on a loaded machine idle work can run long
    held = loaded
    while trims(server) == before + during:
        held = max(held, rss_kib(server.pid))
        assert time.monotonic() < deadline, f"no trim in {QUIET_S + 60} s of quiet (RSS {held} KiB at most)"
        time.sleep(0.1)
    while rss_kib(server.pid) > held - 1024:
        assert time.monotonic() < deadline, (f"{trims(server) - before - during} trims and RSS "
                                             f"{rss_kib(server.pid)} KiB after at most {held} KiB before the "
                                             f"trim ({loaded} KiB after the load) and idle")
        time.sleep(0.1)
    print(f"RSS after idle {rss_kib(server.pid)} KiB")


def test_a_server_that_serves_only_completions_trims_once_quiet(start_serve, stories260k_path):
    # A completion uses no window, so it released none and left no idle work: the worker never saw the server
    # used, and a server serving /v1/completions alone never trimmed (0 after 12 s quiet; malloc_trim by hand
    # then freed 9.5 MB).
    server = start_serve(stories260k_path)
    before = trims(server)
    for i in range(40):
        server.call("/v1/completions", {"model": MODEL_NAME, "prompt": f"Once upon a time {i}", "max_tokens": 24,
                                        "temperature": 0})
    deadline = time.monotonic() + QUIET_S + 60  # a hang guard: QUIET_S after the last request on an idle machine
    while trims(server) == before:
        assert time.monotonic() < deadline, f"no trim in {QUIET_S + 60} s of quiet after 40 completions"
        time.sleep(0.2)
