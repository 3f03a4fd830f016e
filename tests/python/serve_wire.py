"""What the orbit serve tests share below ServeProcess: one request on a fresh connection (or its bytes, for a raw
socket; or its text, where it must answer 200), the request counts and gauges read from /metrics, and a client that stops reading its streams (to stall
the server's writes)."""
import http.client
import json
import socket

MODEL_NAME = "stories260K.bin"


def ask(server, method, path, body=None, raw=None):
    """(status, body text) of one request on a fresh connection (a stream read to its end); `raw` bytes are
    sent as the body as they are, else `body` as JSON."""
    connection = http.client.HTTPConnection(server.host, server.port, timeout=120)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        connection.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def answered(server, method, path, body=None):
    """The body text of one request sent as `ask` sends it, which must answer 200 (else the text is the failure)."""
    status, text = ask(server, method, path, body)
    assert status == 200, text
    return text


def metric_value(server, sample):
    """The value of one /metrics sample named in full, labels included ('orbit_sessions{state="known"}')."""
    status, text = ask(server, "GET", "/metrics")
    assert status == 200, text
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    raise AssertionError(f"/metrics has no {sample}:\n{text}")


def post_bytes(path, data):
    """The bytes of one HTTP/1.1 POST of `data` (JSON bytes) to `path`, for a raw socket to send."""
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def request_counts(metrics_text):
    """({(endpoint, status): n} of orbit_requests_total, {endpoint: n} of orbit_request_seconds_count) in a
    /metrics text."""
    answered, timed = {}, {}
    for line in metrics_text.splitlines():
        if line.startswith("orbit_requests_total{"):
            labels, value = line[len("orbit_requests_total{"):].split("} ")
            fields = dict(item.split("=") for item in labels.split(","))
            answered[(fields["endpoint"].strip('"'), int(fields["status"].strip('"')))] = int(value)
        elif line.startswith('orbit_request_seconds_count{endpoint="'):
            endpoint, value = line[len('orbit_request_seconds_count{endpoint="'):].split('"} ')
            timed[endpoint] = int(value)
    return answered, timed


def counts(server):
    """request_counts of the server's /metrics (this read is counted too, as ("other", 200), once it ended)."""
    status, text = ask(server, "GET", "/metrics")
    assert status == 200
    return request_counts(text)


def in_flight(server):
    """{endpoint: n} of orbit_requests_in_flight."""
    status, text = ask(server, "GET", "/metrics")
    assert status == 200
    prefix = 'orbit_requests_in_flight{endpoint="'
    return {line[len(prefix):].split('"')[0]: int(line.split()[-1]) for line in text.splitlines()
            if line.startswith(prefix)}


def grown(before, after):
    """The counts that changed from `before` to `after`, by how much."""
    return {key: n - before.get(key, 0) for key, n in after.items() if n != before.get(key, 0)}


def unread_streams(host, port, count):
    """A connection that asks, pipelined, for `count` long streamed chat answers (every token with 20 log
    probabilities: about 600 KiB of events each) and never reads them: a receive buffer of a few KiB fills,
    then the server's send buffer (at most net.ipv4.tcp_wmem's 4 MiB), and its writes wait."""
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect((host, port))
    body = json.dumps({"model": MODEL_NAME, "messages": [{"role": "user", "content": "Once upon a time"}],
                       "max_tokens": 400, "stream": True, "logprobs": True, "top_logprobs": 20,
                       "logit_bias": {"1": -100, "2": -100}}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    client.sendall((head + body) * count)
    return client


def send_queue(server_port, client_port):
    """Bytes the server's end of the connection holds unsent or unacknowledged (/proc/net/tcp's tx_queue),
    or None when the connection is not listed."""
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            local, remote, queues = fields[1], fields[2], fields[4]
            if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == client_port:
                return int(queues.split(":")[0], 16)
    return None
