"""Servers sharing one --store directory announce it (cli/serve/store_share.h), on stories260K.

A server starting on a store another live server uses prints a note naming that server's pid; a lock file a
server left without removing it (it was killed) names no one and is removed. Every server is started here
on 127.0.0.1 (any free port) and stopped. Servers on one store also share what they store: stored chat
completions and responses, and their deletion."""
import json
import os
import re
import urllib.error
import urllib.request


def delete(server, path):
    """DELETE `path` on `server`: the decoded JSON answer (an HTTP error status raises HTTPError)."""
    request = urllib.request.Request(server.url + path, method="DELETE")
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read().decode())


def test_a_second_server_on_a_store_names_the_first(start_serve, stories260k_path, tmp_path):
    store = tmp_path / "store"
    first = start_serve(stories260k_path, "--store", str(store))
    assert "in use by" not in first.output()
    assert f"--store {store} did not exist: a new, empty store was created there" in first.output()
    assert (store / f"serve-{first.pid}.lock").exists()
    # A file left by a server that is gone: nobody holds its lock.
    (store / "serve-999999.lock").write_text("")
    second = start_serve(stories260k_path, "--store", str(store))
    assert f"the store {store} is in use by another orbit serve (pid {first.pid})" in second.output()
    assert "999999" not in second.output()
    assert "did not exist" not in second.output()
    assert not (store / "serve-999999.lock").exists()
    second.stop()
    assert not (store / f"serve-{second.pid}.lock").exists()
    first.stop()
    # Each server's lock file is gone (the journals' shared lock file, serve-*.sqlite.held.lock, stays).
    assert [p for p in os.listdir(store) if re.fullmatch(r"serve-\d+\.lock", p)] == []


def test_a_start_that_fails_takes_back_the_store_directories_it_made(refused_serve, tmp_path):
    model = tmp_path / "not-a-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    error = refused_serve(model, "--store", str(tmp_path / "new" / "nested" / "store"))
    assert "unsupported architecture" in error, error
    assert not (tmp_path / "new").exists()  # the store and the parents made for it: all empty, all gone
    refused_serve(model, "--store", str(tmp_path / "dotted" / "." / "store") + "/.")
    assert not (tmp_path / "dotted").exists()  # "." components name the same directories
    refused_serve(model, "--store", str(kept))
    assert (kept / "notes.txt").read_text() == "mine"  # a directory it did not make stays, as it was


def test_stored_answers_are_shared_and_a_delete_on_one_server_holds_on_the_other(start_serve, stories260k_path,
                                                                                  tmp_path):
    store = tmp_path / "store"
    first = start_serve(stories260k_path, "--store", str(store))
    second = start_serve(stories260k_path, "--store", str(store))
    model = "stories260K.bin"
    completion = first.call("/v1/chat/completions", {"model": model, "store": True, "max_tokens": 4,
                                                     "messages": [{"role": "user", "content": "A cat"}]})
    response = first.call("/v1/responses", {"model": model, "input": "A dog", "max_output_tokens": 4})
    assert second.call(f"/v1/chat/completions/{completion['id']}")["id"] == completion["id"]
    assert second.call(f"/v1/responses/{response['id']}")["id"] == response["id"]
    # Deleted on the second: the first, which holds the response in memory, no longer serves it either.
    for path in (f"/v1/chat/completions/{completion['id']}", f"/v1/responses/{response['id']}"):
        assert delete(second, path)["deleted"] is True
        try:
            first.call(path)
            raise AssertionError(f"GET {path} on the other server still answered after the delete")
        except urllib.error.HTTPError as e:
            assert e.code == 404, e.read()
