"""Start and stop `orbit serve` from Python (the tests and the serve benchmarks share it).

    from serve_process import ServeProcess, NoServe
    with ServeProcess(orbit, model, ["--audit", "1"]) as server:
        body = server.call("/v1/chat/completions", {...}, session="s1")

The server listens on 127.0.0.1 on a port the kernel picks (`--port 0`); the constructor returns once it
prints `listening on http://HOST:PORT`, and leaving the `with` block (or `stop()`) always stops it:
SIGTERM (a drain), then SIGKILL when it has not exited after `stop_timeout` seconds. What the server prints
is kept (`output()`) so that a failure to start names it. An orbit built without its HTTP server raises
`NoServe` (tests turn it into a skip). Standard library only.
"""
import json
import os
import re
import resource
import subprocess
import threading
import urllib.request

_LISTENING = re.compile(r"listening on (http://([\d.]+):(\d+))")


class NoServe(RuntimeError):
    """This orbit was built without `serve` (cpp-httplib missing)."""


class ServeProcess:
    def __init__(self, orbit, model, args=(), env=None, stop_timeout=60, file_size_limit=None):
        """`orbit serve --model MODEL --host 127.0.0.1 --port 0 ARGS...`; env: variables added to ours.
        file_size_limit: bytes, the server's RLIMIT_FSIZE (as `ulimit -f`): a write that would make a file
        larger fails as on a full disk, for root too."""
        command = [str(orbit), "serve", "--model", str(model), "--host", "127.0.0.1", "--port", "0",
                   *[str(a) for a in args]]
        self.stop_timeout = stop_timeout
        self._lines = []
        self._reader = None  # the thread that keeps what the server prints, from its listening line to its exit

        def limit_files():
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, resource.RLIM_INFINITY))

        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env={**os.environ, **(env or {})},
                                        preexec_fn=limit_files if file_size_limit is not None else None)
        try:
            self.url, self.host, self.port = self._wait_until_listening(command)
        except BaseException:
            self.stop()
            raise
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _wait_until_listening(self, command):
        for line in self.process.stdout:
            self._lines.append(line)
            match = _LISTENING.search(line)
            if match:
                return match.group(1), match.group(2), int(match.group(3))
        text = self.output()
        if "without cpp-httplib" in text:
            raise NoServe("this orbit was built without `serve` (cpp-httplib missing)")
        raise RuntimeError(f"orbit serve did not start ({' '.join(command)}):\n{text}")

    def _drain(self):
        for line in self.process.stdout:
            self._lines.append(line)

    def output(self):
        """Everything the server printed so far (stdout and stderr); after stop(), everything it printed."""
        return "".join(self._lines)

    @property
    def pid(self):
        return self.process.pid

    def call(self, path, body=None, session=None, timeout=300):
        """GET `path` (body None) or POST `body` as JSON; the decoded JSON answer (`/metrics`: its text).
        `session` goes in X-Orbit-Session. An HTTP error status raises urllib.error.HTTPError."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method="GET" if body is None else "POST")
        request.add_header("Content-Type", "application/json")
        if session:
            request.add_header("X-Orbit-Session", session)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read().decode()
        return raw if path == "/metrics" else json.loads(raw)

    def stop(self):
        """SIGTERM, then SIGKILL past stop_timeout; returns the exit status once the server exited and what it
        printed was read to its end (output() then holds its last lines: the process's exit does not mean the
        reading thread has taken them from the pipe yet). Safe to call twice."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._reader is not None:
            self._reader.join(timeout=self.stop_timeout)  # the pipe's end: every line it wrote is in _lines
        return self.process.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
