"""A conversation that outlives its server: `orbit serve --store DIR`, on stories260K.

The store keeps every chunk's KV on disk, so after a restart a session's next request (which sends its whole
conversation again, as chat clients do) is served from the store: only what the store cannot give (the new
turn, and what the policy repairs) is forwarded. Without --store the restarted server has nothing and
forwards the whole prompt. The answers are the same either way under an exact policy. Every server is started
here on 127.0.0.1 (any free port) and stopped."""
import http.client
import json

MODEL_NAME = "stories260K.bin"
ANIMALS = ["cat", "dog", "bird", "fox", "frog"]


def post(server, messages):
    connection = http.client.HTTPConnection(server.host, server.port, timeout=120)
    try:
        body = {"model": MODEL_NAME, "messages": messages, "max_tokens": 8, "temperature": 0}
        connection.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                           headers={"Content-Type": "application/json", "X-Orbit-Session": "story"})
        response = connection.getresponse()
        out = json.loads(response.read().decode())
        assert response.status == 200, out
        return out
    finally:
        connection.close()


def converse(server):
    """Five turns of one session; returns the conversation with its answers."""
    messages = [{"role": "system", "content": "You tell short stories about animals and children."}]
    for animal in ANIMALS:
        messages.append({"role": "user", "content": f"Tell me about the {animal} who found a red ball in the "
                                                    f"garden and what happened next with the girl named Lily."})
        messages.append(post(server, messages)["choices"][0]["message"])
    messages.append({"role": "user", "content": "And what did the cat do with the red ball then?"})
    return messages


def next_turn_after_restart(start_serve, model, store_args):
    server = start_serve(model, "--policy", "patch:16:exact", "--no-anticipate", *store_args)
    messages = converse(server)
    server.stop()
    server = start_serve(model, "--policy", "patch:16:exact", "--no-anticipate", *store_args)
    out = post(server, messages)
    server.stop()
    return out


def test_a_session_continues_from_the_store_after_a_restart(start_serve, stories260k_path, tmp_path):
    stored = next_turn_after_restart(start_serve, stories260k_path, ("--store", str(tmp_path / "store")))
    cold = next_turn_after_restart(start_serve, stories260k_path, ())
    prompt = stored["usage"]["prompt_tokens"]
    assert prompt == cold["usage"]["prompt_tokens"] > 200
    # Without a store, the restarted server forwards the whole prompt; with one, the new turn and what the
    # exact policy re-forms over the restored chunks, far less than the prompt.
    assert cold["usage"]["orbit"]["forward_tokens"] == prompt
    assert stored["usage"]["orbit"]["forward_tokens"] < prompt / 2
    assert stored["usage"]["prompt_tokens_details"]["cached_tokens"] > prompt / 2
    assert stored["choices"][0]["message"] == cold["choices"][0]["message"]
