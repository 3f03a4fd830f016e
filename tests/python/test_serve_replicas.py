"""Two `orbit serve` replicas share one Redis remote tier; one is killed (SIGKILL) in the middle of an agent's
conversation, and the client's retry continues it on the other, which rebuilds the session's window from the
shared tier: no request fails after its retry, and the first request served by the survivor forwards at most
a third of what re-prefilling its prompt would. Redis and both servers are started here on 127.0.0.1 (free
ports) and always stopped."""
import http.client
import json
import shutil
import signal
import socket
import subprocess
import time

import pytest

MODEL = "tinystories-656k"
WORDS = ("the little cat saw a big dog and they played in the park all day long until the sun went down "
         "then a bird sang to them from a tall tree near the river where a small boat waited").split()


def words(seed, n):
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(n))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def processes():
    """Processes started by the test; each is killed at the end."""
    started = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def start_redis(processes, tmp_path):
    server = shutil.which("redis-server")
    if server is None:  # never skipped silently: scripts/common.sh installs it
        pytest.fail("redis-server is not installed (apt install redis-server redis-tools)")
    port = free_port()
    processes.append(subprocess.Popen([server, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                                       "--dir", str(tmp_path)], stdout=subprocess.DEVNULL))
    for _ in range(500):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return f"redis://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.02)
    pytest.fail("redis-server did not start")


def redis_keys(remote):
    port = int(remote.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"DBSIZE\r\n")
        return int(s.recv(64).strip()[1:])


def wait_for_quiet_tier(remote):
    """Until the shared tier's key count has not changed for a second (what the replica formed in the
    background and queued for the remote has arrived), at most a minute."""
    last, quiet, deadline = -1, 0, time.monotonic() + 60
    while quiet < 10 and time.monotonic() < deadline:
        keys = redis_keys(remote)
        quiet = quiet + 1 if keys == last else 0
        last = keys
        time.sleep(0.1)
    return last


def start_replica(start_serve, models_dir, remote):
    """A replica on 127.0.0.1 (stopped after the test): the ServeProcess and its port."""
    remote_args = ["--remote", remote] if remote else []
    server = start_serve(models_dir / MODEL, "--audit", "0", *remote_args,
                         env={"OMP_NUM_THREADS": "1", "ORBIT_REMOTE_SECRET": "replica-test-secret"})
    return server.process, server.port


def chat(port, messages, session):
    """The response body of one chat request on `port`; raises OSError when the replica is gone."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        body = json.dumps({"model": MODEL, "messages": messages, "max_tokens": 6, "temperature": 0})
        connection.request("POST", "/v1/chat/completions", body=body,
                           headers={"Content-Type": "application/json", "X-Orbit-Session": session})
        response = connection.getresponse()
        data = json.loads(response.read())
        assert response.status == 200, data
        return data
    finally:
        connection.close()


def test_a_session_moves_to_the_other_replica_when_one_is_killed(processes, start_serve, models_dir, tmp_path):
    remote = start_redis(processes, tmp_path)
    first, port_a = start_replica(start_serve, models_dir, remote)
    _, port_b = start_replica(start_serve, models_dir, remote)
    replicas = [port_a, port_b]
    history = [{"role": "system", "content": "You tell short stories about " + words(1, 12) + "."}]
    failed, retried, served_by = 0, 0, []
    for turn in range(8):
        history.append({"role": "user", "content": words(turn + 2, 12)})
        if turn == 5:  # the agent's replica dies while its tool runs
            assert wait_for_quiet_tier(remote) > 0
            first.send_signal(signal.SIGKILL)
            first.wait()
            moved_request = list(history)
        for attempt, port in enumerate(replicas):
            try:
                body = chat(port, history, "agent")
                break
            except (OSError, http.client.HTTPException):
                retried += 1
                if attempt == len(replicas) - 1:
                    failed += 1
                    raise
        else:
            pytest.fail("no replica answered")
        if port != replicas[0]:
            replicas = [port] + [p for p in replicas if p != port]
        served_by.append(port)
        usage = body["usage"]
        history.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
        if turn == 5:
            moved = usage
    assert failed == 0 and retried == 1
    assert served_by[:5] == [port_a] * 5 and served_by[5:] == [port_b] * 3
    # The survivor rebuilt the session from the shared tier: the first request it served forwarded at most a
    # third of a re-prefill of its prompt.
    forward, prompt = moved["orbit"]["forward_tokens"], moved["prompt_tokens"]
    # The same request on a replica without the shared tier re-prefills it.
    _, port_c = start_replica(start_serve, models_dir, None)
    alone = chat(port_c, moved_request, "agent")["usage"]
    print(f"after the move: forward {forward} of a {prompt}-token prompt ({forward / prompt:.2f}x a re-prefill); "
          f"a replica without the tier: {alone['orbit']['forward_tokens']}")
    assert alone["prompt_tokens"] == prompt and alone["orbit"]["forward_tokens"] == prompt
    assert forward <= prompt / 3, moved
