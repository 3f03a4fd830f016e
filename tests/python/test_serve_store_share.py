"""Servers sharing one --store directory announce it (cli/serve/store_share.h), on stories260K.

A server starting on a store another live server uses prints a note naming that server's pid; a lock file a
server left without removing it (it was killed) names no one and is removed. Every server is started here
on 127.0.0.1 (any free port) and stopped."""
import os


def test_a_second_server_on_a_store_names_the_first(start_serve, stories260k_path, tmp_path):
    store = tmp_path / "store"
    first = start_serve(stories260k_path, "--store", str(store))
    assert "in use by" not in first.output()
    assert (store / f"serve-{first.pid}.lock").exists()
    # A file left by a server that is gone: nobody holds its lock.
    (store / "serve-999999.lock").write_text("")
    second = start_serve(stories260k_path, "--store", str(store))
    assert f"the store {store} is in use by another orbit serve (pid {first.pid})" in second.output()
    assert "999999" not in second.output()
    assert not (store / "serve-999999.lock").exists()
    second.stop()
    assert not (store / f"serve-{second.pid}.lock").exists()
    first.stop()
    assert [p for p in os.listdir(store) if p.endswith(".lock")] == []
