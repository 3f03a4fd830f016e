"""`orbit serve`'s flags for the store's disk tier (cli/serve/cmd_serve.cpp): --store-disk-mb bounds what --store's
disk holds (EngineOptions::disk_budget_bytes), and --remote-max-held-fraction the share of that budget entries kept
for --remote's undelivered writes may fill (EngineOptions::remote_max_held_fraction). Each is refused, naming it,
out of range or where it bounds nothing. The servers here run on 127.0.0.1 (a free port), their remote a free port
nobody listens on, and are stopped after each test."""
import random
import re

import pytest
from conftest import free_port

MODEL = "stories260K.bin"
WORDS = "the cat dog bird tree forest river sun moon happy little big ran jumped played found friend".split()


def _metric(metrics, name):
    return int(re.search(rf"^{re.escape(name)} (\d+)$", metrics, re.M).group(1))


def _fill(server, requests):
    """Chat requests whose system messages differ (about 120 words each: chunks of about 400 KB of KV on disk)."""
    for i in range(requests):
        system = " ".join(random.Random(i).choice(WORDS) for _ in range(120))
        server.call("/v1/chat/completions", {"model": MODEL, "max_tokens": 2, "temperature": 0, "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": "Tell me a story"}]})
    return server.call("/metrics")


def test_the_disk_budget_and_the_share_held_for_the_remote_reach_the_store(start_serve, stories260k_path, tmp_path):
    url = f"redis://127.0.0.1:{free_port()}"  # down throughout: every remote write stays undelivered

    def run(name, fraction):
        server = start_serve(stories260k_path, "--store", str(tmp_path / name), "--store-disk-mb", "1",
                             "--remote", url, "--remote-max-held-fraction", fraction)
        metrics = _fill(server, 6)
        server.stop()
        return metrics

    bounded = run("bounded", "0.25")
    assert _metric(bounded, 'orbit_store_budget_bytes{tier="disk"}') == 1 << 20
    assert 0 < _metric(bounded, 'orbit_store_bytes{tier="disk"}') <= 1 << 20
    # Past a quarter of the budget the oldest held entries went, their writes given up: the disk kept caching.
    assert _metric(bounded, "orbit_store_remote_abandoned_total") > 0
    # 1 holds every one: none given up (puts that need their room are refused instead).
    held = run("held", "1")
    assert _metric(held, 'orbit_store_budget_bytes{tier="disk"}') == 1 << 20
    assert _metric(held, "orbit_store_remote_abandoned_total") == 0


@pytest.mark.parametrize("args, message", [
    (["--store-disk-mb", "4"], "argument '--store-disk-mb' bounds the disk tier of --store DIR, and no --store"),
    (["--store", "{store}", "--store-disk-mb", "-1"], "argument '--store-disk-mb' must be >= 0, got -1"),
    (["--store", "{store}", "--store-disk-mb", "1.5"], "argument '--store-disk-mb' must be an integer, got '1.5'"),
    (["--store", "{store}", "--store-disk-mb", "99999999999999"], "argument '--store-disk-mb' is too large"),
    (["--store", "{store}", "--store-disk-mb", "4", "--remote", "redis://127.0.0.1:1",
      "--remote-max-held-fraction", "1.5"], "argument '--remote-max-held-fraction' must be a fraction in [0, 1], got 1.5"),
    (["--store", "{store}", "--store-disk-mb", "4", "--remote", "redis://127.0.0.1:1",
      "--remote-max-held-fraction", "nan"], "argument '--remote-max-held-fraction' must be a fraction in [0, 1], got nan"),
    (["--store", "{store}", "--store-disk-mb", "4", "--remote", "redis://127.0.0.1:1",
      "--remote-max-held-fraction", "half"], "argument '--remote-max-held-fraction' must be a number, got 'half'"),
    (["--store", "{store}", "--store-disk-mb", "4", "--remote-max-held-fraction", "0.3"],
     "argument '--remote-max-held-fraction' bounds what --store's disk keeps for --remote's undelivered writes, and "
     "needs both (missing: --remote)"),
    (["--remote", "redis://127.0.0.1:1", "--remote-max-held-fraction", "0.3"], "(missing: --store)"),
    (["--store", "{store}", "--remote", "redis://127.0.0.1:1", "--remote-max-held-fraction", "0.3"],
     "argument '--remote-max-held-fraction' is a share of --store-disk-mb's budget, and the disk is unlimited"),
])
def test_store_disk_flags_out_of_range_or_bounding_nothing_are_refused_naming_them(refused_serve, stories260k_path,
                                                                                  tmp_path, args, message):
    args = [a.replace("{store}", str(tmp_path / "store")) for a in args]
    assert message in refused_serve(stories260k_path, *args)
