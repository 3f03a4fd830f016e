"""What `orbit serve` tells a client whose `store: true` answer its store cannot take (store_write.h).

A failing disk is made without privileges, for root as for anyone: the server runs under RLIMIT_FSIZE (a
write that would make a file larger fails with EFBIG, as on a full disk), and
  - an answer too large for what the limit leaves (n = 2 or 400 tokens with 20 top log probabilities each)
    fails its write after the run: it is answered all the same, with `Orbit-Stored: false` and the reason
    (a stream: in its last chunk, or in response.completed), counted in orbit_store_write_failures_total;
  - the store's file grown past the limit by another writer (this test, through SQLite, as a server sharing
    the store would) makes the check before the run fail: the request is a 507 naming `store`, and nothing
    runs (no token generated). Once that writer's rows are gone the store takes writes again;
  - an answer whose write failed is held (`Orbit-Store-Pending: true`): once the limit is lifted (prlimit on
    the running server) the next answer stored writes it before it is answered, and it survives a restart;
    one still unwritable at shutdown is named lost.
Every server is started here on 127.0.0.1 (any free port) and stopped."""
import http.client
import json
import re
import resource
import sqlite3

MODEL_NAME = "stories260K.bin"
# RLIMIT_FSIZE in bytes: a small answer's write fits, a large one's does not.
CHAT_LIMIT = 512 << 10
RESPONSES_LIMIT = 256 << 10
SMALL = {"model": MODEL_NAME, "store": True, "max_tokens": 4, "temperature": 0,
         "messages": [{"role": "user", "content": "Once upon a time"}]}
# About 1 KiB of log probabilities per token. Tokens 1 and 2 (either ends the text) are banned, so the answer
# runs to max_tokens: a chat body of about 900 KiB, a response of about 580 KiB.
NO_END = {"1": -100, "2": -100}
LARGE = dict(SMALL, max_tokens=400, n=2, logprobs=True, top_logprobs=20, logit_bias=NO_END, temperature=1.0)
RESPONSE = {"model": MODEL_NAME, "input": "Once upon a time", "max_output_tokens": 4, "temperature": 0}
LARGE_RESPONSE = dict(RESPONSE, max_output_tokens=440, temperature=1.0, top_logprobs=20, logit_bias=NO_END,
                      include=["message.output_text.logprobs"])


def request(server, method, path, body=None):
    """(status, headers, text) of one request."""
    connection = http.client.HTTPConnection(server.host, server.port, timeout=300)
    try:
        data = None if body is None else json.dumps(body).encode()
        connection.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode()
    finally:
        connection.close()


def metric(server, line_start):
    text = request(server, "GET", "/metrics")[2]
    return float(re.search("^" + re.escape(line_start) + r" (\S+)$", text, re.M).group(1))


def sse_data(text):
    """The data of each server-sent event, parsed ([DONE] left out)."""
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]


def fill(database, limit):
    """Grows `database`'s write-ahead log past `limit` with a committed row of another writer; returns its undo."""
    connection = sqlite3.connect(database, timeout=30)
    connection.execute("PRAGMA wal_autocheckpoint=0")
    connection.execute("INSERT INTO meta(name, value) VALUES('ballast', hex(randomblob(?)))", (limit,))
    connection.commit()

    def undo():
        connection.execute("DELETE FROM meta WHERE name = 'ballast'")
        connection.commit()
        busy, _, _ = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0
        connection.close()
    return undo


def refused_before_running(server, path, body, generated_before):
    status, _, text = request(server, "POST", path, body)
    assert status == 507, text
    error = json.loads(text)["error"]
    assert error["param"] == "store" and error["code"] == "store_unavailable" and error["type"] == "server_error"
    assert "cannot take a write" in error["message"] and "store false" in error["message"]
    assert metric(server, "orbit_completion_tokens_total") == generated_before  # nothing ran


def test_a_chat_completion_its_store_cannot_take_is_flagged_or_refused_before_it_runs(start_serve, stories260k_path,
                                                                                      tmp_path):
    store = tmp_path / "store"
    server = start_serve(stories260k_path, "--store", store, env={"OMP_NUM_THREADS": "1"},
                         file_size_limit=CHAT_LIMIT)
    status, headers, text = request(server, "POST", "/v1/chat/completions", SMALL)
    assert status == 200 and headers["orbit-stored"] == "true" and "orbit-store-error" not in headers
    assert request(server, "GET", "/v1/chat/completions/" + json.loads(text)["id"])[0] == 200

    # Written after the run, and too large: answered whole, flagged, not kept.
    status, headers, text = request(server, "POST", "/v1/chat/completions", LARGE)
    assert status == 200, text
    answer = json.loads(text)
    assert len(answer["choices"]) == 2 and all(c["message"]["content"] for c in answer["choices"])
    assert headers["orbit-stored"] == "false" and headers["orbit-store-pending"] == "true"
    assert "serve-chat-completions.sqlite" in headers["orbit-store-error"]
    assert request(server, "GET", "/v1/chat/completions/" + answer["id"])[0] == 404
    assert f"chat completion {answer['id']} is not stored" in server.output()
    assert metric(server, 'orbit_store_write_failures_total{store="chat_completions"}') == 1

    # Streamed: the headers went first, so the last chunk before [DONE] says it.
    status, _, text = request(server, "POST", "/v1/chat/completions", dict(LARGE, stream=True))
    assert status == 200
    chunks = sse_data(text)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert chunks[-1]["choices"] == [] and chunks[-1]["orbit"]["stored"] is False
    assert "serve-chat-completions.sqlite" in chunks[-1]["orbit"]["store_error"]
    assert all("orbit" not in c for c in chunks[:-1])
    assert metric(server, 'orbit_store_write_failures_total{store="chat_completions"}') == 2

    # A store that cannot take even a small write: refused before it runs, streamed or not; store false runs.
    undo = fill(store / "serve-chat-completions.sqlite", CHAT_LIMIT)
    generated = metric(server, "orbit_completion_tokens_total")
    refused_before_running(server, "/v1/chat/completions", SMALL, generated)
    refused_before_running(server, "/v1/chat/completions", dict(SMALL, stream=True), generated)
    status, headers, _ = request(server, "POST", "/v1/chat/completions", dict(SMALL, store=False))
    assert status == 200 and "orbit-stored" not in headers
    assert metric(server, 'orbit_requests_total{endpoint="chat",status="507"}') == 2
    undo()
    status, headers, text = request(server, "POST", "/v1/chat/completions", SMALL)
    assert status == 200 and headers["orbit-stored"] == "true"
    assert request(server, "GET", "/v1/chat/completions/" + json.loads(text)["id"])[0] == 200


def test_a_store_directory_moved_away_while_serving_takes_no_answer_until_it_is_back(start_serve, stories260k_path,
                                                                                      tmp_path):
    # The answer stores' open files followed the directory (moved) or outlived it (removed): answers were confirmed
    # stored (Orbit-Stored: true) into files no later start opens. Now a write checks the file is still the one
    # opened, and the store is refused before the run, as a full one is.
    store = tmp_path / "store"
    server = start_serve(stories260k_path, "--store", store, env={"OMP_NUM_THREADS": "1"})
    status, headers, text = request(server, "POST", "/v1/chat/completions", SMALL)
    assert status == 200 and headers["orbit-stored"] == "true"
    kept = json.loads(text)["id"]
    store.rename(tmp_path / "elsewhere")
    generated = metric(server, "orbit_completion_tokens_total")
    refused_before_running(server, "/v1/chat/completions", SMALL, generated)
    refused_before_running(server, "/v1/responses", RESPONSE, generated)
    status, headers, _ = request(server, "POST", "/v1/chat/completions", dict(SMALL, store=False))
    assert status == 200 and "orbit-stored" not in headers
    (tmp_path / "elsewhere").rename(store)  # back: the same files take writes again
    status, headers, text = request(server, "POST", "/v1/chat/completions", SMALL)
    assert status == 200 and headers["orbit-stored"] == "true"
    status, headers, _ = request(server, "POST", "/v1/responses", RESPONSE)
    assert status == 200 and headers["orbit-stored"] == "true"
    assert request(server, "GET", "/v1/chat/completions/" + json.loads(text)["id"])[0] == 200
    assert request(server, "GET", "/v1/chat/completions/" + kept)[0] == 200
    assert "was moved or removed while this server had it open" in server.output()


def test_a_response_its_store_cannot_take_is_flagged_or_refused_before_it_runs(start_serve, stories260k_path,
                                                                               tmp_path):
    store = tmp_path / "store"
    server = start_serve(stories260k_path, "--store", store, env={"OMP_NUM_THREADS": "1"},
                         file_size_limit=RESPONSES_LIMIT)
    status, headers, text = request(server, "POST", "/v1/responses", RESPONSE)
    assert status == 200 and headers["orbit-stored"] == "true"
    first = json.loads(text)

    # Too large for the disk: answered, flagged, held in memory for a retry (a chained request still finds it).
    status, headers, text = request(server, "POST", "/v1/responses",
                                    dict(LARGE_RESPONSE, previous_response_id=first["id"]))
    assert status == 200, text
    large = json.loads(text)
    assert large["output"][0]["content"][0]["text"]
    assert headers["orbit-stored"] == "false" and "serve-responses.sqlite" in headers["orbit-store-error"]
    assert headers["orbit-store-pending"] == "true"
    assert f"response {large['id']} is kept in memory only" in server.output()
    # Its row would continue the held one's, which is written with it: while that does not fit, neither does it.
    status, headers, text = request(server, "POST", "/v1/responses", dict(RESPONSE, previous_response_id=large["id"]))
    assert status == 200, text
    assert headers["orbit-stored"] == "false" and headers["orbit-store-pending"] == "true"

    # Streamed: response.completed's response says it.
    status, _, text = request(server, "POST", "/v1/responses", dict(LARGE_RESPONSE, stream=True))
    assert status == 200
    events = sse_data(text)
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    assert events[-1]["response"]["orbit"]["stored"] is False
    assert "serve-responses.sqlite" in events[-1]["response"]["orbit"]["store_error"]
    assert events[-1]["response"]["orbit"]["store_pending"] is True
    assert metric(server, 'orbit_store_write_failures_total{store="responses"}') == 3

    undo = fill(store / "serve-responses.sqlite", RESPONSES_LIMIT)
    generated = metric(server, "orbit_completion_tokens_total")
    refused_before_running(server, "/v1/responses", RESPONSE, generated)
    refused_before_running(server, "/v1/responses", dict(RESPONSE, stream=True), generated)
    undo()
    status, headers, _ = request(server, "POST", "/v1/responses", RESPONSE)
    assert status == 200 and headers["orbit-stored"] == "true"


def test_store_group_commit_takes_on_or_off_and_refuses_anything_else(start_serve, refused_serve, stories260k_path,
                                                                      tmp_path):
    stderr = refused_serve(stories260k_path, "--store-group-commit", "maybe")
    assert "--store-group-commit" in stderr and "on or off" in stderr
    # Without --store the answers are kept in memory: neither option would do anything.
    for option, value in (("--store-group-commit", "off"), ("--store-pending-mb", "8")):
        stderr = refused_serve(stories260k_path, option, value)
        assert f"argument '{option}' sets how --store's disk keeps stored answers, and no --store is given" in stderr
    server = start_serve(stories260k_path, "--store", tmp_path / "store", "--store-group-commit", "off")
    status, headers, text = request(server, "POST", "/v1/chat/completions", SMALL)
    assert status == 200 and headers["orbit-stored"] == "true"
    assert request(server, "GET", "/v1/chat/completions/" + json.loads(text)["id"])[0] == 200
    assert metric(server, "orbit_chat_completions_commits_total") == 1
    status, headers, text = request(server, "POST", "/v1/responses", RESPONSE)
    assert status == 200 and headers["orbit-stored"] == "true"
    assert request(server, "GET", "/v1/responses/" + json.loads(text)["id"])[0] == 200
    # The Responses store writes through the same group commit: off, one transaction per response.
    assert metric(server, "orbit_responses_stored_total") == 1
    assert metric(server, "orbit_responses_commits_total") == 1


def lift_file_size_limit(server):
    resource.prlimit(server.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def test_an_answer_whose_write_failed_lands_once_the_store_recovers_and_survives_a_restart(
        start_serve, stories260k_path, tmp_path):
    store = tmp_path / "store"
    server = start_serve(stories260k_path, "--store", store, env={"OMP_NUM_THREADS": "1"},
                         file_size_limit=RESPONSES_LIMIT)
    status, headers, text = request(server, "POST", "/v1/chat/completions", LARGE)
    assert status == 200 and headers["orbit-stored"] == "false" and headers["orbit-store-pending"] == "true"
    chat = json.loads(text)
    status, headers, text = request(server, "POST", "/v1/responses", LARGE_RESPONSE)
    assert status == 200 and headers["orbit-stored"] == "false" and headers["orbit-store-pending"] == "true"
    response = json.loads(text)
    # Held: the chat completion is not stored yet (404); the response is served, and chained, from memory.
    assert request(server, "GET", "/v1/chat/completions/" + chat["id"])[0] == 404
    assert json.loads(request(server, "GET", "/v1/responses/" + response["id"])[2])["output"] == response["output"]
    for name in ("chat_completions", "responses"):
        assert metric(server, f'orbit_store_pending{{store="{name}"}}') == 1
        assert metric(server, f'orbit_store_pending_bytes{{store="{name}"}}') > RESPONSES_LIMIT

    # The disk recovers; the server stops: what its retries have not written yet (they back off while a held
    # answer does not fit and smaller writes do) its shutdown writes, and says so.
    lift_file_size_limit(server)
    assert server.stop() == 0
    assert f"chat completion {chat['id']} is stored now" in server.output()
    assert f"response {response['id']} is stored now" in server.output()
    assert "lost at shutdown" not in server.output()

    # Both survive a restart, and a request continues the response; one held when the server stops, with the
    # disk still full, is named lost.
    server = start_serve(stories260k_path, "--store", store, env={"OMP_NUM_THREADS": "1"},
                         file_size_limit=RESPONSES_LIMIT)
    assert json.loads(request(server, "GET", "/v1/chat/completions/" + chat["id"])[2]) == dict(chat, metadata={})
    assert json.loads(request(server, "GET", "/v1/responses/" + response["id"])[2])["output"] == response["output"]
    status, headers, _ = request(server, "POST", "/v1/responses", dict(RESPONSE, previous_response_id=response["id"]))
    assert status == 200 and headers["orbit-stored"] == "true"
    status, headers, text = request(server, "POST", "/v1/chat/completions", LARGE)
    assert headers["orbit-store-pending"] == "true"
    lost = json.loads(text)["id"]
    assert server.stop() == 0
    assert f"chat completion {lost} is lost at shutdown" in server.output()
    assert "stored answers not written before shutdown: 1" in server.output()


def test_a_held_answer_survives_a_kill_in_its_journal_and_the_next_start_writes_it(start_serve, stories260k_path,
                                                                                   tmp_path):
    """The journal of held answers (held_journal.h): the store's write fails, the journal's does not (each file
    has its own size; the stores' logs are grown to the limit by another writer, a new journal starts empty), the
    server is killed with SIGKILL, and the next start writes what it held: a chat completion and a response chain."""
    store = tmp_path / "store"
    server = start_serve(stories260k_path, "--store", store, env={"OMP_NUM_THREADS": "1"})
    status, headers, text = request(server, "POST", "/v1/responses", RESPONSE)
    assert status == 200 and headers["orbit-stored"] == "true"
    first = json.loads(text)
    databases = [store / "serve-chat-completions.sqlite", store / "serve-responses.sqlite"]
    undo = [fill(database, 1 << 20) for database in databases]  # about 2 MiB of log each
    logs = [(database.parent / (database.name + "-wal")).stat().st_size for database in databases]
    # Room for the checks before each run (a page each), not for a large answer; a journal takes a 2 MiB one.
    resource.prlimit(server.pid, resource.RLIMIT_FSIZE, (max(logs) + (128 << 10), resource.RLIM_INFINITY))

    status, headers, text = request(server, "POST", "/v1/chat/completions", LARGE)
    assert status == 200 and headers["orbit-stored"] == "false", text
    assert headers["orbit-store-pending"] == "true" and headers["orbit-store-journaled"] == "true"
    chat = json.loads(text)
    status, headers, text = request(server, "POST", "/v1/responses",
                                    dict(LARGE_RESPONSE, previous_response_id=first["id"]))
    assert status == 200 and headers["orbit-store-journaled"] == "true", text
    second = json.loads(text)
    status, headers, text = request(server, "POST", "/v1/responses", dict(RESPONSE, previous_response_id=second["id"]))
    assert status == 200 and headers["orbit-store-journaled"] == "true", text  # carries the held one: too large
    third = json.loads(text)
    assert metric(server, 'orbit_store_pending_journaled{store="responses"}') == 2
    assert metric(server, 'orbit_store_pending_journaled{store="chat_completions"}') == 1

    server.process.kill()  # SIGKILL: no drain, no last retry
    server.process.wait()
    journals = sorted(p.name for p in store.iterdir() if ".held-" in p.name)
    assert journals == [f"serve-chat-completions.sqlite.held-{server.pid}", f"serve-responses.sqlite.held-{server.pid}"]
    for u in undo:
        u()

    server = start_serve(stories260k_path, "--store", store, env={"OMP_NUM_THREADS": "1"})
    output = server.output()
    assert f"chat completion {chat['id']} is recovered from the journal of held answers: stored" in output
    for response in (second, third):
        assert f"response {response['id']} is recovered from the journal of held answers: stored" in output
    assert json.loads(request(server, "GET", "/v1/chat/completions/" + chat["id"])[2]) == dict(chat, metadata={})
    assert json.loads(request(server, "GET", "/v1/responses/" + third["id"])[2])["output"] == third["output"]
    # The chain joins whole (its 440-token answer fills the context: counted, not continued).
    status, _, text = request(server, "POST", "/v1/responses/input_tokens",
                              {"model": MODEL_NAME, "input": "The end", "previous_response_id": third["id"]})
    assert status == 200 and json.loads(text)["input_tokens"] > 440, text
    assert metric(server, 'orbit_store_recovered_total{store="responses"}') == 2
    # What landed is released: the adopted journals are gone, and this server's holds nothing.
    assert not [p for p in store.iterdir() if ".held-" in p.name and str(server.pid) not in p.name]
    assert server.stop() == 0
    assert not [p for p in store.iterdir() if ".held-" in p.name]
