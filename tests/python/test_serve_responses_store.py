"""The Responses API's stored responses in `orbit serve` (cli/serve/responses/responses_store.h), on stories260K.

With --store they are kept in the store directory and survive a restart: GET /v1/responses/{id} returns the
response as it was returned, and previous_response_id still names its whole conversation. DELETE forgets an
id while a response that continued it keeps its conversation; --max-responses bounds what is kept (the least
recently used are forgotten: 404). Every server is started here on 127.0.0.1 (any free port) and stopped."""
import json

from serve_wire import MODEL_NAME, ask


def request(server, method, path, body=None):
    """(status, parsed body) of one request on a fresh connection."""
    status, text = ask(server, method, path, body)
    return status, json.loads(text)


def respond(server, text, previous=None):
    body = {"model": MODEL_NAME, "input": text, "max_output_tokens": 6, "temperature": 0}
    if previous:
        body["previous_response_id"] = previous
    status, out = request(server, "POST", "/v1/responses", body)
    assert status == 200, out
    return out


def test_stored_responses_survive_a_restart_and_can_be_read_and_deleted(start_serve, stories260k_path, tmp_path):
    store = str(tmp_path / "store")
    server = start_serve(stories260k_path, "--store", store)
    first = respond(server, "Once upon a time")
    second = respond(server, "Then the cat", first["id"])
    assert request(server, "GET", "/v1/responses/" + first["id"]) == (200, first)
    server.stop()

    server = start_serve(stories260k_path, "--store", store)
    assert request(server, "GET", "/v1/responses/" + second["id"]) == (200, second)
    # The chain is whole after the restart: the third response reads both earlier turns.
    third = respond(server, "and the dog", second["id"])
    assert third["usage"]["input_tokens"] > second["usage"]["input_tokens"] + second["usage"]["output_tokens"]
    # Deleting the middle one: its id is gone, the third still continues the whole conversation.
    status, deleted = request(server, "DELETE", "/v1/responses/" + second["id"])
    assert (status, deleted) == (200, {"id": second["id"], "object": "response", "deleted": True})
    status, missing = request(server, "GET", "/v1/responses/" + second["id"])
    assert status == 404 and missing["error"]["code"] == "response_not_found"
    assert request(server, "DELETE", "/v1/responses/" + second["id"])[0] == 404
    status, refused = request(server, "POST", "/v1/responses", {"model": MODEL_NAME, "input": "x",
                                                                  "previous_response_id": second["id"]})
    assert status == 400 and refused["error"]["code"] == "previous_response_not_found"
    fourth = respond(server, "The end", third["id"])
    assert fourth["usage"]["input_tokens"] > third["usage"]["input_tokens"] + third["usage"]["output_tokens"]


def test_max_responses_forgets_the_least_recently_used(start_serve, stories260k_path):
    server = start_serve(stories260k_path, "--max-responses", "2")
    ids = [respond(server, f"Story {i}")["id"] for i in range(3)]
    assert request(server, "GET", "/v1/responses/" + ids[0])[0] == 404
    assert [request(server, "GET", "/v1/responses/" + i)[0] for i in ids[1:]] == [200, 200]
    status, refused = request(server, "POST", "/v1/responses/" + ids[1])
    assert status == 405
