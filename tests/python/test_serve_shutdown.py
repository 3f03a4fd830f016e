"""`orbit serve` stopping: SIGTERM with a client that stopped reading its streamed answer, and kill -9 under
load (what was answered as stored is there after a restart, and the chunk store checks clean).

The server starts on 127.0.0.1 (a free port) through the start_serve fixture, which always stops it.
"""
import http.client
import json
import subprocess
import threading
import time

import pytest
from serve_wire import MODEL_NAME, send_queue, unread_streams


def wait_until_stalled(server_port, client, seconds=120):
    """Until the server's send queue to `client` holds at least 256 KiB and has not moved for 2 s (a stream
    writes each token as it comes: a queue that stands still is a write waiting for room); True when it
    did within `seconds`."""
    client_port = client.getsockname()[1]
    deadline = time.monotonic() + seconds
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        queued = send_queue(server_port, client_port)
        if queued != last:
            last, since = queued, time.monotonic()
        elif queued is not None and queued >= 256 << 10 and time.monotonic() - since >= 2:
            return True
        time.sleep(0.1)
    return False


def test_sigterm_with_a_client_that_stopped_reading_exits_promptly_and_keeps_the_store(
        start_serve, orbit_cli, stories260k_path, tmp_path):
    store = tmp_path / "store"
    server = start_serve(stories260k_path, "--store", store, env={"OMP_NUM_THREADS": "1"})
    stored = server.call("/v1/chat/completions", {"model": MODEL_NAME, "store": True, "max_tokens": 8,
                                                  "messages": [{"role": "user", "content": "A cat"}]})
    client = unread_streams(server.host, server.port, 12)
    try:
        assert wait_until_stalled(server.port, client), "the server's writes never waited:\n" + server.output()
        started = time.monotonic()
        server.process.terminate()
        try:
            status = server.process.wait(timeout=30)  # the write timeout outside a drain is 60 s
        except subprocess.TimeoutExpired:
            pytest.fail("the server was still running 30 s after SIGTERM:\n" + server.output())
        took = time.monotonic() - started
    finally:
        client.close()
    assert status == 0, server.output()
    assert "orbit serve: stopped" in server.output()
    # What was committed is there: the store checks clean and a server on it finds the stored completion.
    verify = subprocess.run([str(orbit_cli), "store", "verify", "--store", str(store)], capture_output=True, text=True,
                            timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    again = start_serve(stories260k_path, "--store", store, env={"OMP_NUM_THREADS": "1"})
    assert again.call(f"/v1/chat/completions/{stored['id']}")["id"] == stored["id"]
    print(f"exit {took:.1f} s after SIGTERM")


def store_answers(server, worker, answered, stop):
    """Stores answers on `server` until `stop` is set: chat completions with store true and responses,
    streamed or not, appending ("chat" | "response", id) for each whole answer with status 200."""
    for turn in range(1000):
        if stop.is_set():
            return
        stream = turn % 2 == 1
        try:
            if (worker + turn) % 2 == 0:
                body = {"model": MODEL_NAME, "store": True, "max_tokens": 8, "stream": stream,
                        "messages": [{"role": "user", "content": f"story {worker} {turn}"}]}
                path, kind = "/v1/chat/completions", "chat"
            else:
                body = {"model": MODEL_NAME, "input": f"tell {worker} {turn}", "max_output_tokens": 8,
                        "stream": stream}
                path, kind = "/v1/responses", "response"
            connection = http.client.HTTPConnection(server.host, server.port, timeout=60)
            connection.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            answer = connection.getresponse()
            text = answer.read().decode()
            connection.close()
        except (OSError, http.client.HTTPException):
            return  # the server was killed (mid-answer: IncompleteRead)
        if answer.status != 200:
            continue
        if not stream:
            answered.append((kind, json.loads(text)["id"]))
        elif kind == "chat" and text.endswith("data: [DONE]\n\n"):
            answered.append((kind, json.loads(text.split("data: ", 2)[1].split("\n")[0])["id"]))
        elif kind == "response" and "response.completed" in text:
            done = [line for line in text.splitlines() if line.startswith("data: ") and "response.completed" in line]
            answered.append((kind, json.loads(done[0][len("data: "):])["response"]["id"]))


def test_every_answer_stored_before_a_kill_9_is_there_after_a_restart(start_serve, orbit_cli, stories260k_path,
                                                                      tmp_path):
    store = tmp_path / "store"
    answered = []
    for _ in range(2):  # killed twice, restarted on the same directory each time
        server = start_serve(stories260k_path, "--store", store, env={"OMP_NUM_THREADS": "1"})
        for kind, id in answered:  # what the runs before stored
            assert server.call(f"/v1/{'chat/completions' if kind == 'chat' else 'responses'}/{id}")["id"] == id
        stop = threading.Event()
        before = len(answered)
        clients = [threading.Thread(target=store_answers, args=(server, worker, answered, stop)) for worker in range(4)]
        for client in clients:
            client.start()
        deadline = time.monotonic() + 120
        while len(answered) < before + 12 and time.monotonic() < deadline:
            time.sleep(0.01)
        server.process.kill()  # in the middle of the clients' requests
        server.process.wait()
        stop.set()
        for client in clients:
            client.join(timeout=60)
        assert len(answered) >= before + 12, server.output()
        verify = subprocess.run([str(orbit_cli), "store", "verify", "--store", str(store)], capture_output=True,
                                text=True, timeout=120)
        assert verify.returncode == 0, verify.stdout + verify.stderr
    server = start_serve(stories260k_path, "--store", store, env={"OMP_NUM_THREADS": "1"})
    for kind, id in answered:
        assert server.call(f"/v1/{'chat/completions' if kind == 'chat' else 'responses'}/{id}")["id"] == id
