"""`orbit serve --calibrate-fidelity` on the bundled stories260K: it calibrates the fidelity model before listening
(a line on stderr before, one per seed measured, one after) unless its store holds a calibration, which a later start
reads (and says so, with or without the flag); --no-stored-calibration measures at every start; without --store or
--remote it says nothing is kept; two servers with store directories of their own sharing one Redis calibrate once; a
remote that does not answer at start is said to have left the default fidelity model; a signal while it calibrates
stops it before it listens, and a second while a step no signal cuts short (the remote's ping) stops it at once.
Servers (and redis-server) are started on 127.0.0.1 by conftest's fixtures and always stopped."""
import re
import signal
import socket
import subprocess
import time

from conftest import free_port


def serve_lines(server):
    return [line for line in server.output().splitlines() if "fidelity model" in line]


def progress_lines(server):
    """The per-seed progress lines (stderr is not a terminal here: one line per seed)."""
    return [line for line in server.output().splitlines() if line.startswith("orbit serve: fidelity calibration:")]


def test_serve_calibrates_at_start_once_per_store(start_serve, stories260k_path, tmp_path):
    store = tmp_path / "store"
    first = start_serve(stories260k_path, "--store", str(store), "--calibrate-fidelity")
    lines = serve_lines(first)
    assert len(lines) == 2, first.output()
    assert lines[0] == f"orbit serve: calibrating the fidelity model on {stories260k_path} (seeded, nothing timed)..."
    calibrated = re.match(r"^orbit serve: fidelity model calibrated in [\d.]+ s from (\d+) deficits "
                          rf"\(stored in --store {re.escape(str(store))}\): (keep .*)$", lines[1])
    assert calibrated and int(calibrated.group(1)) > 0, lines[1]
    progress = progress_lines(first)
    seeds = len(progress)
    assert seeds >= 1, first.output()
    for i, line in enumerate(progress):
        assert re.match(rf"^orbit serve: fidelity calibration: seed {i + 1}/{seeds} measured \([\d.]+ s\)$", line), line
    output = first.output()  # between the line before the measurement and the one after
    assert output.index(lines[0]) < output.index(progress[0]) and output.index(progress[-1]) < output.index(lines[1])
    first.stop()

    # The next start reads it, with or without the flag, and measures nothing.
    for args in (["--calibrate-fidelity"], []):
        again = start_serve(stories260k_path, "--store", str(store), *args)
        assert serve_lines(again) == [
            f"orbit serve: fidelity model read from the calibration in --store {store}: {calibrated.group(2)}"]
        assert progress_lines(again) == []
        again.stop()

    # Without the store's copy it measures again, and says why it keeps nothing.
    fresh = start_serve(stories260k_path, "--store", str(store), "--calibrate-fidelity", "--no-stored-calibration")
    lines = serve_lines(fresh)
    assert len(lines) == 2 and "(not stored: --no-stored-calibration)" in lines[1], fresh.output()


def test_serve_without_a_store_calibrates_at_every_start_and_says_so(start_serve, stories260k_path, tmp_path):
    server = start_serve(stories260k_path, "--calibrate-fidelity")
    lines = serve_lines(server)
    assert len(lines) == 2 and "(not stored: no --store or --remote)" in lines[1], server.output()
    plain = start_serve(stories260k_path)  # no flag, no store: nothing measured, and the server says what it plans with
    assert serve_lines(plain) == [
        "orbit serve: planning with the default fidelity model (fitted on the bundled stories260K; on another model "
        "its predicted KL can be off several-fold); --calibrate-fidelity fits it here before listening"]
    assert progress_lines(plain) == []
    stored = start_serve(stories260k_path, "--store", str(tmp_path / "s"))
    assert serve_lines(stored)[0].endswith(f"--calibrate-fidelity fits it here before listening and keeps it in "
                                           f"--store {tmp_path / 's'}"), stored.output()


def test_two_servers_with_their_own_stores_share_the_calibration_through_redis(start_serve, stories260k_path,
                                                                              tmp_path, redis_port):
    url = f"redis://:right@127.0.0.1:{redis_port}"
    shown = f"redis://:***@127.0.0.1:{redis_port}"
    first_store, second_store = tmp_path / "a", tmp_path / "b"
    first = start_serve(stories260k_path, "--store", str(first_store), "--remote", url, "--calibrate-fidelity")
    lines = serve_lines(first)
    assert len(lines) == 2, first.output()
    calibrated = re.match(rf"^orbit serve: fidelity model calibrated in [\d.]+ s from \d+ deficits \(stored in "
                          rf"--store {re.escape(str(first_store))} or --remote {re.escape(shown)}\): (keep .*)$",
                          lines[1])
    assert calibrated, lines[1]
    first.stop()  # its remote write sent before it exits

    # Another machine: an empty store directory of its own, the same Redis. It measures nothing.
    second = start_serve(stories260k_path, "--store", str(second_store), "--remote", url, "--calibrate-fidelity")
    assert serve_lines(second) == [
        f"orbit serve: fidelity model read from the calibration on --remote {shown}: "
        f"{calibrated.group(1)}"], second.output()
    assert progress_lines(second) == []
    assert ":right@" not in second.output()  # the password never printed


def test_serve_says_a_remote_down_at_start_left_the_default_fidelity_model(start_serve, stories260k_path, tmp_path):
    url = f"redis://127.0.0.1:{free_port()}"  # nothing listens there
    server = start_serve(stories260k_path, "--store", str(tmp_path / "s"), "--remote", url)
    assert re.search(rf"^orbit serve: --remote {re.escape(url)} did not answer the read of a stored fidelity "
                     r"calibration \([\d.]+ s, bounded by the remote tier's timeouts\); planning with the default "
                     r"fidelity model until a later request reads one from it$", server.output(), re.M), server.output()


def _stopped_while_calibrating(orbit_cli, stories260k_path, signals):
    """Starts `orbit serve --calibrate-fidelity`, sends `signals` (0.05 s apart) once its calibration began, and
    returns (exit status, stdout, stderr)."""
    server = subprocess.Popen([str(orbit_cli), "serve", "--model", str(stories260k_path), "--port", "0",
                               "--calibrate-fidelity"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = server.stderr.readline()
        while first and "calibrating the fidelity model" not in first:
            first = server.stderr.readline()
        assert first, "the server ended before calibrating"
        for i, sig in enumerate(signals):
            if i:
                time.sleep(0.05)
            server.send_signal(sig)
        out, err = server.communicate(timeout=120)
        return server.returncode, out, first + err
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_a_signal_while_the_server_starts_stops_it_before_listening(orbit_cli, stories260k_path):
    # Its start took signals only once it listened: Ctrl-C during a calibration (or a model's load) went
    # unheard until then, and the server announced it listened before draining.
    status, out, err = _stopped_while_calibrating(orbit_cli, stories260k_path, [signal.SIGINT])
    assert status == 130, err
    assert "listening" not in out, out
    assert "orbit serve: signal 2 while starting: stopping at the next step of the start" in err, err
    assert err.rstrip().endswith("orbit serve: stopped before listening (signal 2)"), err


def _stopped_twice_while_pinging(orbit_cli, stories260k_path):
    """Starts `orbit serve --remote` at a listener that takes the connection and never answers (the start's ping of
    the remote waits up to a second for the reply, a step no signal cuts short), sends SIGTERM once the ping
    connected and again once the server said it took the first; returns (exit status, stdout, stderr), or None when
    the start ended before the second signal could be sent (a loaded machine can spend the ping's second between
    the two)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        silent.settimeout(120)
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}"
        server = subprocess.Popen([str(orbit_cli), "serve", "--model", str(stories260k_path), "--port", "0",
                                   "--remote", url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            connection, _ = silent.accept()
            with connection:
                server.send_signal(signal.SIGTERM)
                err = line = server.stderr.readline()
                while line and "while starting" not in line:
                    line = server.stderr.readline()
                    err += line
                if server.poll() is not None:
                    return None
                server.send_signal(signal.SIGTERM)
                out, rest = server.communicate(timeout=120)
            err += rest
            if "stopped before listening" in err:
                return None  # the ping's reply timed out, and the start stopped, before the second signal came
            return server.returncode, out, err
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()


def test_a_second_signal_while_the_server_starts_stops_it_at_once(orbit_cli, stories260k_path):
    # The first waits for the step under way (here the remote's ping, which no signal cuts short); the second does
    # not wait.
    for _ in range(5):
        stopped = _stopped_twice_while_pinging(orbit_cli, stories260k_path)
        if stopped is not None:
            break
    assert stopped is not None, "in 5 tries the start never outlasted the time between two signals"
    status, out, err = stopped
    assert status == 143, err
    assert "listening on" not in out, out
    assert "orbit serve: signal 15 while starting: stopping at the next step of the start" in err, err
    assert err.rstrip().endswith("orbit serve: signal 15 again: stopping now, before listening"), err
