"""A cheap load client for the serve benchmarks: many streamed answers read by one thread over raw sockets.

    import raw_client
    run = raw_client.streams(host, port, opening_bodies, timed_bodies, sessions)
    # {"sequences", "tokens", "seconds", "gaps"}, as decode_load.streams

`decode_load.py`'s default client (one Python thread per session, urllib, a json.loads per event) spends
about as much CPU as the server's decode thread at 16 sessions on a 2-core machine, so there it measures
the client as much as the server. This one sends every request from one thread and reads every stream
through one `selectors` loop, without parsing: it counts the events with non-empty content by the pattern
`"content":"` (a quote inside the text is escaped, so the text cannot hold it) in the raw bytes, and reads
the usage off the stream's end. native_streams() does the same through bench_stream_client (C++, epoll),
which costs the client far less again. Each session's connection is opened by a non-streamed request first (its
opening body), then kept alive for the timed one. Standard library only.
"""
import json
import os
import re
import selectors
import socket
import subprocess
import tempfile
import time

_USAGE = re.compile(rb'"completion_tokens":(\d+)')
_CONTENT = b'"content":"'
_EMPTY_CONTENT = b'"content":""'
_LAST_CHUNK = b"\r\n0\r\n\r\n"  # the chunked body's end: a chunk of size 0 after the last one's CRLF


def _request(host, port, body, session):
    data = json.dumps(body).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"X-Orbit-Session: {session}\r\nContent-Length: {len(data)}\r\n\r\n")
    return head.encode() + data


def _read_whole(sock):
    """One non-streamed answer (Content-Length) off a kept-alive connection; raises on a status other than 200."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        got = sock.recv(65536)
        if not got:
            raise RuntimeError("the server closed the connection before its answer's head")
        buffer += got
    head, _, rest = buffer.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0]
    match = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    if b" 200 " not in status or not match:
        raise RuntimeError(f"opening request: {status.decode(errors='replace')}")
    length = int(match.group(1))
    while len(rest) < length:
        got = sock.recv(65536)
        if not got:
            raise RuntimeError("the server closed the connection inside an answer")
        rest += got
    return rest[:length]


class _Stream:
    """One streamed answer's state. The body is not de-chunked: the content pattern, the usage and the last
    chunk cannot hold chunk framing (a chunk holds whole events), so they are found in the raw bytes. Each
    pattern is counted in a recv's bytes behind the last len(pattern) - 1 bytes of the one before: one split
    between two recvs is counted once, in the later, and none lies wholly in the kept bytes."""

    def __init__(self):
        self.kept = b""  # the last bytes received (the head's, until it is whole)
        self.head_done = False
        self.done = False
        self.arrivals = []
        self.usage = None

    def feed(self, data, now):
        if not self.head_done:
            data = self.kept + data
            if b"\r\n\r\n" not in data:
                self.kept = data
                return
            head, _, data = data.partition(b"\r\n\r\n")
            if b" 200 " not in head.split(b"\r\n", 1)[0] or b"chunked" not in head.lower():
                raise RuntimeError(f"streamed request: {head[:200].decode(errors='replace')}")
            self.head_done, self.kept = True, b""
        found = _count(self.kept, data, _CONTENT) - _count(self.kept, data, _EMPTY_CONTENT)
        self.arrivals.extend([now] * found)
        window = self.kept + data
        if window.endswith(_LAST_CHUNK):
            self.done = True
            for match in _USAGE.finditer(window):  # the usage chunk is the last but one (then [DONE])
                self.usage = int(match.group(1))
        self.kept = window[-4096:]


def _count(kept, data, pattern):
    return (kept[len(kept) - len(pattern) + 1:] + data).count(pattern) if kept else data.count(pattern)


def streams(host, port, opening_bodies, timed_bodies, sessions, timeout=900):
    """Opens one connection per session (its opening body sent and read), then sends every timed (streamed)
    body at once and reads all the streams; {"sequences", "tokens", "seconds", "gaps"} as decode_load's."""
    socks = []
    try:
        for body, session in zip(opening_bodies, sessions):
            sock = socket.create_connection((host, port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks.append(sock)
            sock.sendall(_request(host, port, body, session))
            _read_whole(sock)
        requests = [_request(host, port, body, session) for body, session in zip(timed_bodies, sessions)]
        selector = selectors.DefaultSelector()
        states = {}
        t0 = time.perf_counter()
        for sock, request in zip(socks, requests):
            sock.sendall(request)
        for sock in socks:
            sock.setblocking(False)
            states[sock.fileno()] = _Stream()
            selector.register(sock, selectors.EVENT_READ)
        _read_all(selector, states, t0 + timeout)
        wall = time.perf_counter() - t0
        selector.close()
    finally:
        for sock in socks:
            sock.close()
    out = list(states.values())
    for i, s in enumerate(out):
        if s.usage is None:
            raise RuntimeError(f"session {sessions[i]}: the stream ended without usage")
    gaps = sorted(b - a for s in out for a, b in zip(s.arrivals, s.arrivals[1:]))
    return {"sequences": len(out), "tokens": sum(s.usage for s in out), "seconds": wall, "gaps": gaps}


def native_streams(client, host, port, opening_bodies, timed_bodies, sessions, timeout=900):
    """streams() through the native client (bench_stream_client, bench/serve/stream_client.cpp): the same
    requests and the same result, read by a C++ epoll loop instead of Python's."""
    with tempfile.NamedTemporaryFile(prefix="orbit-stream-requests-", delete=False) as f:
        for opening, timed, session in zip(opening_bodies, timed_bodies, sessions):
            for body in (opening, timed):
                request = _request(host, port, body, session)
                f.write(f"{len(request)}\n".encode() + request)
    try:
        done = subprocess.run([client, host, str(port), f.name], capture_output=True, text=True, timeout=timeout)
    finally:
        os.unlink(f.name)
    if done.returncode != 0:
        raise RuntimeError(f"{client} failed ({done.returncode}): {done.stderr.strip()}")
    lines = done.stdout.split("\n")
    wall = float(lines[0].split()[1])
    tokens, gaps = 0, []
    for line in lines[1:]:
        if not line:
            continue
        fields = line.split()
        tokens += int(fields[2])
        arrivals = [float(t) for t in fields[3:]]
        gaps.extend(b - a for a, b in zip(arrivals, arrivals[1:]))
    return {"sequences": len(sessions), "tokens": tokens, "seconds": wall, "gaps": sorted(gaps)}


def _read_all(selector, states, deadline):
    open_count = len(states)
    while open_count:
        ready = selector.select(timeout=max(0.0, deadline - time.perf_counter()))
        if not ready:
            raise RuntimeError("the streams did not end in time")
        now = time.perf_counter()
        for key, _ in ready:
            state = states[key.fd]
            data = key.fileobj.recv(262144)
            if not data:
                raise RuntimeError("the server closed a stream before its end")
            state.feed(data, now)
            if state.done:
                selector.unregister(key.fileobj)
                open_count -= 1
