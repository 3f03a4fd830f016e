#!/usr/bin/env python3
"""One short end-to-end run of `orbit serve` built with TSan (scripts/sanitize.sh thread runs it).

    scripts/tsan_serve.py ORBIT MODEL

ORBIT is a TSan build of the CLI, MODEL a small model (the stage gives stories260K). The server starts on
127.0.0.1 with a store directory (its journal and group commit threads run too), then clients on several
threads at once send, in rounds:
  - chat completions: whole, streamed to the end, streamed and left after the first chunk, stored (then read
    back with GET), and in a named session (X-Orbit-Session) twice, the second continuing the first;
  - responses: whole, chained by previous_response_id, streamed to the end, streamed and left midway;
  - GET /metrics while the answers decode.
Then SIGTERM (the drain). The run fails when the server printed a ThreadSanitizer report, exited with a status
other than 0 (TSan's exitcode, 66 by default, once it reported anything), or a request got an answer other
than the one asked for. Every report is printed whole. TSAN_OPTIONS comes from the caller (sanitize.sh:
halt_on_error=0 here, so that one run shows every race, not the first). Standard library only.
"""
import concurrent.futures
import http.client
import json
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
from serve_process import ServeProcess  # noqa: E402  (starts and always stops `orbit serve`)

MAX_TOKENS = 12  # each answer short: TSan at -O0 decodes several times slower
ROUNDS = 4


def request(server, method, path, body=None, headers=None):
    """(status, parsed JSON) of one request read to its end."""
    connection = http.client.HTTPConnection(server.host, server.port, timeout=600)
    try:
        data = None if body is None else json.dumps(body).encode()
        connection.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        raw = response.read().decode()
        return response.status, (raw if path == "/metrics" else json.loads(raw))
    finally:
        connection.close()


def stream(server, path, body, leave_after=None):
    """The `data:` lines of a streamed answer; leave_after N: the connection is closed after N of them (a
    client that leaves midway), without reading on."""
    connection = http.client.HTTPConnection(server.host, server.port, timeout=600)
    try:
        connection.request("POST", path, body=json.dumps({**body, "stream": True}).encode(),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            raise AssertionError(f"{path} streamed: status {response.status}: {response.read()!r}")
        lines = []
        for raw in response:
            line = raw.decode().strip()
            if line.startswith("data:"):
                lines.append(line)
                if leave_after is not None and len(lines) >= leave_after:
                    break
        return lines
    finally:
        connection.close()  # midway: the server sees the client leave while it decodes


def chat_body(text, **extra):
    return {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": MAX_TOKENS, **extra}


def responses_body(text, **extra):
    return {"model": "m", "input": text, "max_output_tokens": MAX_TOKENS, **extra}


def expect(status, body, what):
    if status != 200:
        raise AssertionError(f"{what}: status {status}: {body}")
    return body


def chat_whole(server, i):
    expect(*request(server, "POST", "/v1/chat/completions", chat_body(f"Once upon a time {i}")), "chat")


def chat_streamed(server, i):
    lines = stream(server, "/v1/chat/completions", chat_body(f"The cat {i}"))
    if lines[-1] != "data: [DONE]":
        raise AssertionError(f"chat stream did not end with [DONE]: {lines[-3:]}")


def chat_left(server, i):
    stream(server, "/v1/chat/completions", chat_body(f"The dog {i}", max_tokens=64), leave_after=1)


def chat_stored(server, i):
    body = expect(*request(server, "POST", "/v1/chat/completions", chat_body(f"A bird {i}", store=True)), "stored")
    expect(*request(server, "GET", f"/v1/chat/completions/{body['id']}"), "GET a stored chat completion")


def chat_session(server, i):
    headers = {"X-Orbit-Session": f"tsan-{i}"}
    first = chat_body(f"Lily went {i}")
    answer = expect(*request(server, "POST", "/v1/chat/completions", first, headers), "session")
    follow = first["messages"] + [answer["choices"][0]["message"], {"role": "user", "content": "And then?"}]
    expect(*request(server, "POST", "/v1/chat/completions", {**first, "messages": follow}, headers), "session 2")


def responses_chained(server, i):
    first = expect(*request(server, "POST", "/v1/responses", responses_body(f"Tom saw {i}")), "responses")
    expect(*request(server, "POST", "/v1/responses",
                    responses_body("And then?", previous_response_id=first["id"])), "chained responses")


def responses_streamed(server, i):
    lines = stream(server, "/v1/responses", responses_body(f"The sun {i}"))
    # Its last event ends it: completed, or incomplete where max_output_tokens cut the answer.
    if not any(end in lines[-1] for end in ('"response.completed"', '"response.incomplete"')):
        raise AssertionError(f"responses stream did not end: {lines[-2:]}")


def responses_left(server, i):
    stream(server, "/v1/responses", responses_body(f"The moon {i}", max_output_tokens=64), leave_after=2)


def metrics(server, i):
    expect(*request(server, "GET", "/metrics"), "metrics")


CLIENTS = [chat_whole, chat_streamed, chat_left, chat_stored, chat_session, responses_chained, responses_streamed,
           responses_left, metrics]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: scripts/tsan_serve.py ORBIT MODEL")
    orbit, model = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="orbit-tsan-serve-") as store:
        # OMP_NUM_THREADS=1: libgomp is not built with TSan, so its barriers are invisible to it and every
        # parallel kernel's workers were reported racing with the thread that started them (256 reports in one
        # run with 2 OpenMP threads, all inside at::parallel_for); the server's own threads are what is checked.
        server = ServeProcess(orbit, model, ["--name", "m", "--store", store], env={"OMP_NUM_THREADS": "1"},
                              stop_timeout=300)
        failures = []
        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(CLIENTS)) as pool:
                futures = [pool.submit(client, server, r * 100 + k) for r in range(ROUNDS)
                           for k, client in enumerate(CLIENTS)]
                for future in futures:
                    try:
                        future.result()
                    except Exception as e:  # noqa: BLE001  (every client's failure is reported)
                        failures.append(repr(e))
        finally:
            status = server.stop()
        output = server.output()
    reports = output.count("WARNING: ThreadSanitizer")
    if reports or status != 0 or failures:
        print(output)
        print(f"tsan_serve: {reports} ThreadSanitizer report(s), exit status {status}, "
              f"{len(failures)} failed request(s)", file=sys.stderr)
        for failure in failures:
            print("  " + failure, file=sys.stderr)
        sys.exit(1)
    print(f"tsan_serve: {ROUNDS * len(CLIENTS)} clients on {len(CLIENTS)} threads, no ThreadSanitizer report")


if __name__ == "__main__":
    main()
