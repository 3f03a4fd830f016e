"""A request whose window the KV pool cannot hold beside the sessions `orbit serve` keeps
(cli/serve/run/request_path.h's engine_failure) is refused saying so once and naming --pool-mb. It said "sync:
sync refused after 0 operations were applied (a later sync resumes): sync refused: the KV pool is full ...; evict,
slide or close windows": the refusal twice, and the SDK's advice, which a client cannot follow. The server is
started here on 127.0.0.1 (any free port) and stopped."""
import json

from serve_wire import MODEL_NAME, ask


def test_a_request_the_kv_pool_cannot_hold_is_refused_once_naming_pool_mb(start_serve, stories260k_path):
    # 1 MiB holds 51 pages of stories260K's KV; a 400-token prompt needs about 25: the second session's (its own
    # text: no chunk to share) cannot fit beside the first one's window.
    server = start_serve(stories260k_path, "--pool-mb", "1")
    refusals = []
    for user in ("first", "second", "third"):
        status, text = ask(server, "POST", "/v1/chat/completions",
                          {"model": MODEL_NAME, "user": user, "max_tokens": 2,
                           "messages": [{"role": "user", "content": user + " once upon a time" * 80}]})
        if status != 200:
            refusals.append(json.loads(text)["error"]["message"])
    assert refusals, "every session fitted: the pool no longer fills here"
    for message in refusals:
        assert message.count("the KV pool is full") == 1, message
        assert message.count("refused") == 1, message
        assert "--pool-mb 1)" in message and "larger --pool-mb" in message, message
        assert "evict, slide or close windows" not in message, message
