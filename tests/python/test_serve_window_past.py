"""What the windows of `orbit serve` keep as one contiguous copy of their KV between reads (the engine's
window_past, sdk/src/window/window_past.h): a session's `past_bytes` in GET /v1/sessions/{id}, and their sum over
the windows in memory as the /metrics gauge orbit_window_past_bytes. On stories260K; the server is started on
127.0.0.1 and always stopped."""
import json

from serve_wire import MODEL_NAME, ask, metric_value


def gauge(server):
    return metric_value(server, "orbit_window_past_bytes")


def session_past(server, session):
    status, body = ask(server, "GET", f"/v1/sessions/{session}")
    assert status == 200, body
    return json.loads(body)["window"]["past_bytes"]


def test_the_kept_pasts_are_reported_per_session_and_summed_in_metrics(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--audit", "0", "--deterministic")
    assert gauge(server) == 0  # no window yet
    for session in ("a", "b"):
        status, body = ask(server, "POST", "/v1/chat/completions", {
            "model": MODEL_NAME, "user": session, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": f"Once upon a time, {session} said hello to a cat."}]})
        assert status == 200, body
    a, b = session_past(server, "a"), session_past(server, "b")
    assert a > 0 and b > 0
    assert gauge(server) == a + b
