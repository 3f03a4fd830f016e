"""`orbit serve` runs every forward on one compute thread (cli/serve/compute/compute_thread.h), on stories260K.

libtorch's OpenMP keeps a team of threads per thread that runs a parallel region: with forwards on whichever
HTTP worker took the request, the process grew a team per worker (64 workers x (threads - 1)). With two
intra-op threads the thread count must stay flat over many requests. Linux only (/proc). Every server is
started here on 127.0.0.1 (any free port) and stopped."""
import http.client
import json
import os
import pathlib

import pytest

MODEL_NAME = "stories260K.bin"


def threads(pid):
    return len(os.listdir(f"/proc/{pid}/task"))


@pytest.mark.skipif(not pathlib.Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_forwards_do_not_grow_a_thread_team_per_worker(start_serve, stories260k_path):
    server = start_serve(stories260k_path, env={**os.environ, "OMP_NUM_THREADS": "2"})
    body = json.dumps({"model": MODEL_NAME, "max_tokens": 2, "temperature": 0,
                       "messages": [{"role": "user", "content": "Once upon a time"}]}).encode()

    def ask(i):
        connection = http.client.HTTPConnection(server.host, server.port, timeout=60)  # a new connection each
        try:
            connection.request("POST", "/v1/chat/completions", body=body.replace(b"time", b"time %d" % i),
                               headers={"Content-Type": "application/json"})
            assert connection.getresponse().status == 200
        finally:
            connection.close()

    ask(0)
    before = threads(server.pid)
    for i in range(1, 80):
        ask(i)
    assert threads(server.pid) <= before + 2
