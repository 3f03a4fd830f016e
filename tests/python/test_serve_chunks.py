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


def test_one_window_serving_one_conversation_after_another_keeps_the_bound(start_serve, stories260k_path):
    # Anonymous requests reuse the server's anonymous windows: each new conversation evicts the last one's
    # message, and each window held every chunk it evicted for recall (1,024 per window), so orbit_chunks grew
    # by about one per request past --max-idle-chunks (8611 after 10,000 requests with the bound at 256).
    server = start_serve(stories260k_path, "--max-idle-chunks", "4", "--anonymous-windows", "1", "--no-anticipate")
    for i in range(40):
        post(server, story(i))
    assert chunks(server) <= 4 + 2  # the bound, and what the window holds placed


def test_metrics_show_the_engine_tables_and_their_bounds(start_serve, models_dir):
    # The engine's bounded tables (patch catalog, turn lengths, prefix ledger, radix yardstick, the tokenizer's
    # word cache, the exact-reuse index) had no gauge: under traffic they grew to their caps unseen.
    server = start_serve(models_dir / "tinystories-656k")
    for i in range(3):
        body = story(i)
        body["model"] = "tinystories-656k"
        post(server, body, session=f"s{i}")
    connection = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()

    def gauge(name, table, limit=False):
        labels = f'table="{table}"' + (',limit="max"' if limit else "")
        found = re.search(rf"^{name}{{{re.escape(labels)}}} (\d+)$", text, re.M)
        assert found, (name, labels, text[-3000:])
        return int(found.group(1))

    for table in ("patch_catalog", "turn_lengths", "prefix_ledger", "radix_yardstick", "tokenizer_cache",
                  "reuse_index"):
        gauge("orbit_engine_table_entries", table)
    assert gauge("orbit_engine_table_entries", "reuse_index", limit=True) == 65536
    assert gauge("orbit_engine_table_bytes", "reuse_index", limit=True) == 16 << 20
    # The chat requests' forwards were kept for exact reuse: some sequences, 4 bytes per token id.
    assert gauge("orbit_engine_table_entries", "reuse_index") > 0
    assert 0 < gauge("orbit_engine_table_bytes", "reuse_index") <= 16 << 20
    assert 0 < gauge("orbit_engine_table_entries", "tokenizer_cache") <= 10000
    assert gauge("orbit_engine_table_entries", "tokenizer_cache", limit=True) == 10000
    assert 0 < gauge("orbit_engine_table_bytes", "tokenizer_cache") <= 16 << 20
    assert gauge("orbit_engine_table_entries", "turn_lengths", limit=True) == 65536
    assert gauge("orbit_engine_table_entries", "prefix_ledger", limit=True) == 65536
    assert gauge("orbit_engine_table_entries", "radix_yardstick") > 0  # the three prompts and answers
    assert gauge("orbit_engine_table_bytes", "patch_catalog", limit=True) == 16 << 20
    server.stop()
