"""A percent-encoded slash (%2F) inside a path segment of `orbit serve` is part of that segment, never a boundary
(cli/serve/http/serve_http_route.h's routed_path, HttpServer::answer_slashed).

cpp-httplib decodes the whole path before it matches its routes, so GET /v1/chat/completions/ID%2Fmessages answered
ID's messages, GET /v1/sessions/a%2Fb "no such endpoint" instead of the unknown session, POST
/v1/responses/ID%2Fcancel reached ID's cancel, and POST /v1/chat%2Fcompletions ran a chat completion. No id holds a
'/', so a segment that does is an unknown id: the route's own 404, naming it as sent (decoded), as for any unknown
id; a path whose encoded slash is in no id's segment is no endpoint. A model's name may hold a '/':
/v1/models/NAME finds it encoded or not, as before. The server is started here on 127.0.0.1 and stopped."""
import http.client
import json

import pytest

from conftest import serving
from serve_wire import MODEL_NAME


@pytest.fixture(scope="module")
def server(orbit_cli, stories260k_path):
    with serving(orbit_cli, stories260k_path) as process:
        yield process


def send(server, method, path, body=None):
    """(status, headers, parsed body or None) of one request, its path sent as it is written here."""
    connection = http.client.HTTPConnection(server.host, server.port, timeout=120)
    try:
        data = None if body is None else json.dumps(body).encode()
        connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        text = response.read().decode()
        return response.status, dict(response.getheaders()), json.loads(text) if text else None
    finally:
        connection.close()


def error_of(result, status):
    got, _, body = result
    assert got == status, (got, body)
    return body["error"]


def stored_chat_completion(server):
    status, _, body = send(server, "POST", "/v1/chat/completions", {
        "model": MODEL_NAME, "store": True, "max_tokens": 2, "temperature": 0,
        "messages": [{"role": "user", "content": "hello"}]})
    assert status == 200, body
    return body["id"]


def stored_response(server):
    status, _, body = send(server, "POST", "/v1/responses", {
        "model": MODEL_NAME, "input": "hello", "max_output_tokens": 2, "temperature": 0})
    assert status == 200, body
    return body["id"]


def test_an_encoded_slash_in_a_chat_completion_id_is_that_unknown_id_not_another_route(server):
    cid = stored_chat_completion(server)
    status, _, listed = send(server, "GET", f"/v1/chat/completions/{cid}/messages")
    assert status == 200 and listed["object"] == "list", listed
    unknown = error_of(send(server, "GET", "/v1/chat/completions/nope"), 404)
    for sent in (f"{cid}%2Fmessages", f"{cid}%2fmessages"):
        error = error_of(send(server, "GET", "/v1/chat/completions/" + sent), 404)  # was 200: cid's messages
        assert f"'{cid}/messages'" in error["message"], error
        assert (error["type"], error["code"], error["param"]) == (unknown["type"], unknown["code"], unknown["param"])
    status, headers, body = send(server, "HEAD", f"/v1/chat/completions/{cid}%2Fmessages")
    assert status == 404 and body is None, (status, body)
    error = error_of(send(server, "POST", f"/v1/chat/completions/{cid}%2Fx", {"metadata": {"a": "b"}}), 404)
    assert f"'{cid}/x'" in error["message"], error
    error = error_of(send(server, "DELETE", f"/v1/chat/completions/{cid}%2Fx"), 404)
    assert f"'{cid}/x'" in error["message"], error
    assert send(server, "GET", f"/v1/chat/completions/{cid}")[0] == 200  # untouched


def test_an_encoded_slash_in_a_response_id_is_that_unknown_id_not_another_route(server):
    rid = stored_response(server)
    assert send(server, "GET", f"/v1/responses/{rid}/input_items")[0] == 200
    error = error_of(send(server, "GET", f"/v1/responses/{rid}%2Finput_items"), 404)  # was 200: rid's items
    assert f"'{rid}/input_items'" in error["message"] and error["code"] == "response_not_found", error
    # POST on /v1/responses/ID is no route (cancel is /v1/responses/ID/cancel): 405, as for any id.
    status, headers, body = send(server, "POST", f"/v1/responses/{rid}%2Fcancel", {})
    assert status == 405 and headers.get("Allow") == "GET, HEAD, DELETE", (status, headers, body)  # was 400: rid's cancel
    error = error_of(send(server, "DELETE", f"/v1/responses/{rid}%2Fx"), 404)
    assert f"'{rid}/x'" in error["message"] and error["code"] == "response_not_found", error
    assert send(server, "GET", f"/v1/responses/{rid}")[0] == 200  # untouched


def test_an_encoded_slash_in_a_session_id_is_that_unknown_session(server):
    for method in ("GET", "DELETE"):
        error = error_of(send(server, method, "/v1/sessions/abc%2Fdef"), 404)  # was "no such endpoint"
        assert error["message"] == "no session 'abc/def'" and error["code"] == "session_not_found", error


def test_an_encoded_slash_outside_an_id_is_no_endpoint(server):
    for method, path in (("POST", "/v1/chat%2Fcompletions"), ("POST", "/v1%2Fcompletions"),
                         ("GET", "/v1/chat%2Fcompletions"), ("GET", "/v1%2Fmodels")):
        body = {"model": MODEL_NAME, "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}
        error = error_of(send(server, method, path, body if method == "POST" else None), 404)  # POST: was a 200 answer
        assert error["message"] == "no such endpoint" and error["type"] == "not_found_error", (path, error)


def test_a_model_name_is_found_with_or_without_an_encoded_slash(server):
    status, _, body = send(server, "GET", "/v1/models/" + MODEL_NAME)
    assert status == 200 and body["id"] == MODEL_NAME, body
    status, _, body = send(server, "GET", "/v1/models/" + MODEL_NAME.replace(".", "%2E"))
    assert status == 200 and body["id"] == MODEL_NAME, body
    for sent in ("org%2Fother", "org/other"):
        error = error_of(send(server, "GET", "/v1/models/" + sent), 404)
        assert error["message"] == "the model 'org/other' does not exist", error
