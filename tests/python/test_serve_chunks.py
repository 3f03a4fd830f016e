"""`orbit serve --max-idle-chunks N` (EngineOptions::max_idle_chunks), on stories260K.

Every long message becomes a chunk; a server that sees ever new messages keeps only the N most recently used
that no window holds (orbit_chunks in /metrics), and a message whose chunk was forgotten is served again the
same: under an exact policy its answer equals a fresh server's. Every server is started here on 127.0.0.1 (any
free port) and stopped."""
import http.client
import json
import re

MODEL_NAME = "stories260K.bin"


def post(server, body, session=None):
    connection = http.client.HTTPConnection(server.host, server.port, timeout=120)
    try:
        headers = {"Content-Type": "application/json"}
        if session:
            headers["X-Orbit-Session"] = session
        connection.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(), headers=headers)
        response = connection.getresponse()
        assert response.status == 200
        return json.loads(response.read().decode())
    finally:
        connection.close()


def chunks(server):
    connection = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        connection.request("GET", "/metrics")
        return int(re.search(r"^orbit_chunks (\d+)$", connection.getresponse().read().decode(), re.M).group(1))
    finally:
        connection.close()


def story(i):
    return {"model": MODEL_NAME, "max_tokens": 5, "temperature": 0,
            "messages": [{"role": "user", "content": f"Story {i}: once upon a time there was a little dog named "
                                                     f"Spot {i} who lived in a big house with a girl and her cat."}]}


def test_forgotten_chunks_stay_bounded_and_come_back_the_same(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--policy", "prefix", "--max-idle-chunks", "2", "--no-anticipate",
                         "--session-budget-mb", "0")
    first = post(server, story(0), session="s0")
    for i in range(1, 12):
        post(server, story(i), session=f"s{i}")
    # Idle sessions leave memory at once (--session-budget-mb 0): only the 2 most recent chunks stay.
    held = chunks(server)
    assert held <= 3
    again = post(server, story(0), session="fresh")
    assert again["choices"][0]["message"] == first["choices"][0]["message"]
    assert again["usage"]["prompt_tokens"] == first["usage"]["prompt_tokens"]
    server.stop()

    unbounded = start_serve(stories260k_path, "--policy", "prefix", "--no-anticipate")
    for i in range(12):
        post(unbounded, story(i), session=f"s{i}")
    assert chunks(unbounded) >= 12
