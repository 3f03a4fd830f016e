"""`orbit serve --calibrate-fidelity` on the bundled stories260K: it calibrates the fidelity model before listening
(a line on stderr before and one after) unless its store holds a calibration, which a later start reads (and says
so, with or without the flag); --no-stored-calibration measures at every start; without --store it says nothing is
kept. Servers are started on 127.0.0.1 by conftest's start_serve and always stopped."""
import re


def serve_lines(server):
    return [line for line in server.output().splitlines() if "fidelity model" in line]


def test_serve_calibrates_at_start_once_per_store(start_serve, stories260k_path, tmp_path):
    store = tmp_path / "store"
    first = start_serve(stories260k_path, "--store", str(store), "--calibrate-fidelity")
    lines = serve_lines(first)
    assert len(lines) == 2, first.output()
    assert lines[0] == f"orbit serve: calibrating the fidelity model on {stories260k_path} (seeded, nothing timed)..."
    calibrated = re.match(r"^orbit serve: fidelity model calibrated in [\d.]+ s from (\d+) deficits "
                          rf"\(stored in --store {re.escape(str(store))}\): (keep .*)$", lines[1])
    assert calibrated and int(calibrated.group(1)) > 0, lines[1]
    first.stop()

    # The next start reads it, with or without the flag, and measures nothing.
    for args in (["--calibrate-fidelity"], []):
        again = start_serve(stories260k_path, "--store", str(store), *args)
        assert serve_lines(again) == [
            f"orbit serve: fidelity model read from the calibration in --store {store}: {calibrated.group(2)}"]
        again.stop()

    # Without the store's copy it measures again, and says why it keeps nothing.
    fresh = start_serve(stories260k_path, "--store", str(store), "--calibrate-fidelity", "--no-stored-calibration")
    lines = serve_lines(fresh)
    assert len(lines) == 2 and "(not stored: --no-stored-calibration)" in lines[1], fresh.output()


def test_serve_without_a_store_calibrates_at_every_start_and_says_so(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--calibrate-fidelity")
    lines = serve_lines(server)
    assert len(lines) == 2 and "(not stored: no --store)" in lines[1], server.output()
    plain = start_serve(stories260k_path)
    assert serve_lines(plain) == []  # no flag, no store: nothing said, nothing measured
