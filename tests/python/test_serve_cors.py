"""`orbit serve --allow-origin` (cli/serve/http/cors.h): pages in a browser may call the server from the origins
listed (or any, `*`). A preflight (OPTIONS with Origin and Access-Control-Request-Method) on a path the server
serves is granted 204 with the path's methods and the headers asked for; every answer to an allowed origin,
JSON, streamed, an error, or one the connection front writes itself (/health, 413, 415), carries
Access-Control-Allow-Origin; an origin not listed is served without those fields (and its preflight is 403);
without the option nothing changes (OPTIONS is 405, no CORS field), and a malformed origin stops the start
naming the argument. Servers run on 127.0.0.1 (any free port) on stories260K and are always stopped."""
import http.client
import json
import subprocess

import pytest
from conftest import serving

PAGE = "http://localhost:5173"
OTHER_PAGE = "https://app.example"
STRANGER = "http://evil.test"
CHAT = {"model": "stories260K.bin", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
# What the openai npm client asks a preflight for (tests/node/node_modules/openai/client.js).
CLIENT_HEADERS = "authorization,content-type,openai-organization,openai-project,x-stainless-arch,x-stainless-os"


@pytest.fixture(scope="module")
def serve_built(orbit_cli):
    """Skips the tests that ask for it when this orbit was built without its HTTP server (refused_serve would fail
    them: `orbit serve` then exits 1 whatever it is given, saying so)."""
    probe = subprocess.run([str(orbit_cli), "serve", "--help"], capture_output=True, text=True, timeout=120)
    if "without cpp-httplib" in probe.stderr:
        pytest.skip("this orbit was built without `serve`")


@pytest.fixture(scope="module")
def listed(orbit_cli, stories260k_path):
    """(host, port) of a server that lets PAGE and OTHER_PAGE call it; bodies over 1 KiB are 413."""
    with serving(orbit_cli, stories260k_path, "--allow-origin", f"{PAGE},{OTHER_PAGE}", "--max-body-kb", "1") as server:
        yield server.host, server.port


@pytest.fixture(scope="module")
def any_origin(orbit_cli, stories260k_path):
    with serving(orbit_cli, stories260k_path, "--allow-origin", "*") as server:
        yield server.host, server.port


def ask(server, method, path, headers=None, body=None, connection=None):
    """(status, headers, body text) of one request; `body` a dict is sent as JSON."""
    own = connection is None
    connection = connection or http.client.HTTPConnection(*server, timeout=120)
    try:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        sent = dict(headers or {})
        if data is not None:
            sent.setdefault("Content-Type", "application/json")
        connection.request(method, path, body=data, headers=sent)
        response = connection.getresponse()
        return response.status, response.headers, response.read().decode()
    finally:
        if own:
            connection.close()


def preflight(server, path, origin, method="POST", requested=CLIENT_HEADERS, connection=None):
    headers = {"Origin": origin, "Access-Control-Request-Method": method}
    if requested is not None:
        headers["Access-Control-Request-Headers"] = requested
    return ask(server, "OPTIONS", path, headers, connection=connection)


def listed_set(value):
    return {item.strip() for item in (value or "").split(",") if item.strip()}


def cors_fields(headers):
    return {name.lower() for name in headers if name.lower().startswith("access-control-")}


def assert_granted(headers, origin, credentials=True):
    assert headers["Access-Control-Allow-Origin"] == origin, headers
    assert headers.get("Access-Control-Allow-Credentials") == ("true" if credentials else None), headers
    assert "Origin" in listed_set(", ".join(headers.get_all("Vary") or [])), headers
    assert {"Orbit-Stored", "Orbit-Store-Error", "Orbit-Store-Pending"} <= listed_set(
        headers.get("Access-Control-Expose-Headers")), headers


@pytest.mark.parametrize("path,methods", [
    ("/v1/chat/completions", {"GET", "HEAD", "POST"}),
    ("/v1/completions", {"POST"}),
    ("/v1/responses", {"POST"}),
    ("/v1/chat/completions/chatcmpl-x", {"GET", "HEAD", "POST", "DELETE"}),
    ("/v1/responses/resp-x/cancel", {"POST"}),
    ("/v1/models", {"GET", "HEAD"}),
    ("/health", {"GET", "HEAD"}),
])
def test_a_preflight_from_a_listed_origin_is_granted_the_paths_methods(listed, path, methods):
    status, headers, body = preflight(listed, path, PAGE)
    assert status == 204, body
    assert body == ""
    assert headers.get("Content-Length") is None  # a 204 has no body and says none
    assert_granted(headers, PAGE)
    assert listed_set(headers["Access-Control-Allow-Methods"]) == methods
    assert headers["Access-Control-Allow-Headers"] == CLIENT_HEADERS  # what the preflight asked, as asked
    assert int(headers["Access-Control-Max-Age"]) > 0
    assert listed_set(headers["Allow"]) == methods | {"OPTIONS"}


def test_a_preflight_that_names_no_headers_is_granted_the_clients_ones(listed):
    status, headers, _ = preflight(listed, "/v1/chat/completions", OTHER_PAGE, requested=None)
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == OTHER_PAGE
    granted = {h.lower() for h in listed_set(headers["Access-Control-Allow-Headers"])}
    assert {"authorization", "content-type", "openai-organization", "openai-project", "x-stainless-os",
            "x-stainless-package-version", "x-stainless-retry-count", "x-orbit-session"} <= granted


def test_a_browser_calls_after_its_preflight_on_the_same_connection(listed):
    # The page's fetch: preflight, then the POST with the headers it was granted, both answered with the grant.
    connection = http.client.HTTPConnection(*listed, timeout=120)
    try:
        status, headers, _ = preflight(listed, "/v1/chat/completions", PAGE, connection=connection)
        assert status == 204
        status, headers, body = ask(listed, "POST", "/v1/chat/completions",
                                    {"Origin": PAGE, "Authorization": "Bearer x", "X-Stainless-OS": "MacOS"},
                                    dict(CHAT, store=True), connection=connection)
    finally:
        connection.close()
    assert status == 200, body
    assert json.loads(body)["object"] == "chat.completion"
    assert_granted(headers, PAGE)
    assert headers["Orbit-Stored"] == "true"  # set, and exposed to the page by the grant


def test_a_streamed_answer_carries_the_grant(listed):
    status, headers, body = ask(listed, "POST", "/v1/chat/completions", {"Origin": PAGE},
                                dict(CHAT, stream=True))
    assert status == 200, body
    assert headers["Content-Type"].startswith("text/event-stream")
    assert_granted(headers, PAGE)
    assert body.rstrip().endswith("data: [DONE]")


@pytest.mark.parametrize("case", ["bad json", "unknown path", "other method", "unknown model", "health",
                                  "too large", "compressed"])
def test_errors_and_the_fronts_own_answers_carry_the_grant(listed, case):
    # A page must read why it was refused: 400, 404, 405 (routes), /health, 413 and 415 (the connection front).
    method, path, headers, body, expected = {
        "bad json": ("POST", "/v1/chat/completions", {}, b"{", 400),
        "unknown path": ("GET", "/v1/nothing", {}, None, 404),
        "other method": ("PUT", "/v1/chat/completions", {}, None, 405),
        "unknown model": ("GET", "/v1/models/nope", {}, None, 404),
        "health": ("GET", "/health", {}, None, 200),
        "too large": ("POST", "/v1/chat/completions", {}, b"x" * 4096, 413),
        "compressed": ("POST", "/v1/chat/completions", {"Content-Encoding": "gzip"}, b"{}", 415),
    }[case]
    status, answer_headers, answer = ask(listed, method, path, {"Origin": PAGE, **headers}, body)
    assert status == expected, answer
    assert_granted(answer_headers, PAGE)
    if case == "other method":
        assert "OPTIONS" in listed_set(answer_headers["Allow"])
    if status >= 400:
        assert "error" in json.loads(answer)


def test_an_origin_not_listed_is_served_without_a_grant(listed):
    status, headers, body = preflight(listed, "/v1/chat/completions", STRANGER)
    assert status == 403, body
    assert json.loads(body)["error"]["code"] == "origin_not_allowed"
    assert STRANGER in json.loads(body)["error"]["message"]
    assert cors_fields(headers) == set()
    # CORS is not authentication: the request itself is answered as before, without the fields a browser
    # needs to hand the answer to the page; so is a request with no Origin (curl, a server-side client).
    for origin in (STRANGER, "http://localhost:5174", "https://localhost:5173", None):
        status, headers, body = ask(listed, "POST", "/v1/chat/completions", {"Origin": origin} if origin else {},
                                    CHAT)
        assert status == 200, body
        assert cors_fields(headers) == set(), origin
        assert "Origin" in listed_set(headers.get("Vary")), origin  # a cache keeps answers apart by Origin


def test_an_origin_is_compared_as_sent_not_percent_decoded(listed):
    # cpp-httplib 0.11 percent-decodes header values: "http://localhost%3A5173" reached the routes as PAGE.
    for origin in ("http://localhost%3A5173", "http%3A//localhost:5173"):
        status, headers, body = ask(listed, "POST", "/v1/chat/completions", {"Origin": origin}, CHAT)
        assert status == 200, body
        assert cors_fields(headers) == set(), origin
        status, headers, body = preflight(listed, "/v1/chat/completions", origin)
        assert status == 403, body
        assert origin in json.loads(body)["error"]["message"]


def test_a_plain_options_answers_allow(listed):
    status, headers, body = ask(listed, "OPTIONS", "/v1/completions")
    assert status == 204, body
    assert listed_set(headers["Allow"]) == {"POST", "OPTIONS"}
    status, _, _ = preflight(listed, "/v1/nothing", PAGE)
    assert status == 404  # no path, nothing to grant


def test_any_origin_is_granted_star_without_credentials(any_origin):
    for origin in (PAGE, STRANGER, "null"):
        status, headers, _ = preflight(any_origin, "/v1/chat/completions", origin)
        assert status == 204
        assert_granted(headers, "*", credentials=False)
        assert listed_set(headers["Access-Control-Allow-Methods"]) == {"GET", "HEAD", "POST"}
    status, headers, body = ask(any_origin, "POST", "/v1/completions", {"Origin": STRANGER},
                                {"model": "stories260K.bin", "prompt": "Once", "max_tokens": 2, "stream": True})
    assert status == 200, body
    assert_granted(headers, "*", credentials=False)


def test_without_the_option_no_page_may_call(stories_server):
    # Off by default: OPTIONS is 405 (the message says what a preflight needs) and no answer carries a grant.
    status, headers, body = preflight(stories_server, "/v1/chat/completions", PAGE)
    assert status == 405, body
    assert listed_set(headers["Allow"]) == {"GET", "HEAD", "POST"}
    assert "--allow-origin" in json.loads(body)["error"]["message"]
    assert cors_fields(headers) == set()
    for method, path, body in [("GET", "/v1/models", None), ("POST", "/v1/chat/completions", CHAT),
                               ("GET", "/health", None), ("GET", "/v1/nothing", None)]:
        _, headers, _ = ask(stories_server, method, path, {"Origin": PAGE}, body)
        assert cors_fields(headers) == set(), path
        assert headers.get("Vary") is None, path


@pytest.mark.parametrize("value,says", [
    ("localhost:5173", "item 1 'localhost:5173' is not an origin (scheme://host[:port], or * for any): it has no "
                       "scheme"),
    ("http://localhost:5173/", "ends in '/'"),
    ("http://localhost:5173,http://a.test/app", "item 2 'http://a.test/app' is not an origin"),
    ("http://a.test:70000", "'70000' is not a port"),
    ("null", "allow those with *"),
    ("http://a.test,", "item 2 is empty"),
    ("*,http://a.test", "* allows every origin already"),
])
def test_a_malformed_origin_stops_the_start_naming_it(serve_built, refused_serve, stories260k_path, value, says):
    stderr = refused_serve(stories260k_path, "--allow-origin", value)
    assert "serve: argument '--allow-origin'" in stderr
    assert says in stderr


def test_origins_are_matched_as_browsers_write_them(orbit_cli, stories260k_path):
    # A default port and capitals in the option still match the Origin a browser sends (http://localhost).
    with serving(orbit_cli, stories260k_path, "--allow-origin", "HTTP://LocalHost:80") as server:
        assert "pages from http://localhost may call this server" in server.output()
        status, headers, _ = preflight((server.host, server.port), "/v1/models", "http://localhost", method="GET")
        assert status == 204
        assert headers["Access-Control-Allow-Origin"] == "http://localhost"


def requests_counted(server):
    """From /metrics: orbit_requests_total as {(endpoint, status): count}, and orbit_request_seconds_count as
    {endpoint: count}."""
    status, _, text = ask(server, "GET", "/metrics")
    assert status == 200
    counted, timed = {}, {}
    for line in text.splitlines():
        if line.startswith("orbit_requests_total{"):
            labels, value = line[len("orbit_requests_total{") :].split("} ")
            fields = dict(item.split("=") for item in labels.split(","))
            counted[(fields["endpoint"].strip('"'), int(fields["status"].strip('"')))] = int(value)
        elif line.startswith('orbit_request_seconds_count{endpoint="'):
            endpoint, value = line[len('orbit_request_seconds_count{endpoint="') :].split('"} ')
            timed[endpoint] = int(value)
    return counted, timed


def test_preflights_are_counted_in_metrics_by_endpoint_and_status(listed):
    before, timed_before = requests_counted(listed)
    assert preflight(listed, "/v1/chat/completions", PAGE)[0] == 204
    assert preflight(listed, "/v1/chat/completions", PAGE)[0] == 204
    assert preflight(listed, "/v1/responses", OTHER_PAGE)[0] == 204
    assert preflight(listed, "/v1/chat/completions", STRANGER)[0] == 403
    assert ask(listed, "OPTIONS", "/v1/models")[0] == 204  # a plain OPTIONS (no preflight) too
    after, timed_after = requests_counted(listed)
    grown = {key: n - before.get(key, 0) for key, n in after.items() if n != before.get(key, 0)}
    # ("other", 200): the /metrics read before them, counted as every answer is.
    assert grown == {("chat", 204): 2, ("responses", 204): 1, ("chat", 403): 1, ("other", 204): 1, ("other", 200): 1}
    # Not in the endpoints' latency histograms: a preflight runs none of their work.
    assert timed_after == timed_before
