"""A minimal client of the OpenAI chat-completions wire protocol, on Python's standard library only, and a
helper that runs `orbit serve` on 127.0.0.1 for the length of a `with` block.

Why not the `openai` package: the samples run where PyPI may not be reachable (this project's build machines
have no `openai` wheel) and depend on nothing beyond numpy; the protocol is plain JSON over HTTP/1.1, so a
page of urllib speaks it exactly. What the client sends is what `openai` sends for
`client.chat.completions.create(model=..., messages=..., max_tokens=..., temperature=0, tools=...,
tool_choice=..., extra_headers={"X-Orbit-Session": session})` with `base_url=URL + "/v1"`: a POST of
{"model", "messages", "max_tokens", "temperature", "tools"?, "tool_choice"?} to URL/v1/chat/completions. The answer is OpenAI's
chat.completion object; `orbit serve` adds `usage.orbit` (forward_tokens, radix_cache_tokens, predicted_kl,
plan, idle_forward_tokens, session), which the `openai` package keeps as an extra field of its usage object.
The official `openai` npm client is what tests/node/serve_openai.mjs runs against the server.
"""
from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request


class ServerError(RuntimeError):
    """An HTTP error answer: status and the OpenAI error body's message."""

    def __init__(self, status: int, body: dict | str):
        self.status, self.body = status, body
        message = body.get("error", {}).get("message", "") if isinstance(body, dict) else str(body)
        super().__init__(f"HTTP {status}: {message}")

    @property
    def code(self) -> str:
        return (self.body.get("error", {}).get("code") or "") if isinstance(self.body, dict) else ""


class ChatClient:
    """Requests to one server (base URL without /v1); `session` goes in the X-Orbit-Session header."""

    def __init__(self, base_url: str, session: str | None = None, timeout: float = 120.0):
        self.base_url = base_url.rstrip("/")
        self.session = session
        self.timeout = timeout

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.session:
            headers["X-Orbit-Session"] = self.session
        request = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            raw = e.read().decode(errors="replace")
            try:
                raise ServerError(e.code, json.loads(raw)) from None
            except json.JSONDecodeError:
                raise ServerError(e.code, raw) from None
        except urllib.error.URLError as e:  # no answer at all (HTTPError, an answer, is handled above)
            raise ServerUnreachable(f"cannot reach the server at {self.base_url} ({e.reason}); start one, e.g. "
                                    "build/cli/orbit serve --model MODEL --chat-template "
                                    "samples/web-agent/chat_template.jinja, or use --serve") from None

    def models(self) -> list[dict]:
        """GET /v1/models: [{"id", "context_length", ...}]."""
        return self._request("GET", "/v1/models")["data"]

    def chat(self, model: str, messages: list[dict], max_tokens: int, temperature: float = 0.0,
             tools: list[dict] | None = None, tool_choice: str | dict | None = None) -> dict:
        """POST /v1/chat/completions (not streamed): the chat.completion object. With `tools` (OpenAI function
        tools) and `tool_choice` ("required", or {"type": "function", "function": {"name": ...}}) the answer's
        message holds tool_calls and finish_reason is "tool_calls"."""
        body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature}
        if tools is not None:
            body["tools"] = tools
        if tool_choice is not None:
            body["tool_choice"] = tool_choice
        return self._request("POST", "/v1/chat/completions", body)

    def metric_values(self, names) -> dict[str, float]:
        """GET /metrics (Prometheus text): the value of each unlabelled sample in `names`; a name the server
        does not report is an error (an older server)."""
        request = urllib.request.Request(self.base_url + "/metrics", method="GET")
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            text = response.read().decode()
        values = {}
        for name in names:
            m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
            if not m:
                raise ServerError(200, f"/metrics has no {name}")
            values[name] = float(m.group(1))
        return values

    def session_info(self) -> dict:
        """GET /v1/sessions/{session}: the session's window and its savings (forward vs radix tokens)."""
        return self._request("GET", f"/v1/sessions/{self.session}")


class ServerUnreachable(RuntimeError):
    """Nothing answers at the client's base URL (refused, unknown host, timed out)."""


class ServeUnavailable(RuntimeError):
    """The orbit binary was built without its HTTP server (cpp-httplib missing)."""


class OrbitServer:
    """`orbit serve --model M --host 127.0.0.1 --port 0` for a `with` block: waits for its 'listening on'
    line, gives its URL, and stops it with SIGTERM (it drains, then exits) at the end."""

    def __init__(self, orbit_binary: str, model: str, policy: str | None = None, start_timeout: float = 120.0,
                 chat_template: str | None = None, audit: float | None = None):
        self.command = [str(orbit_binary), "serve", "--model", str(model), "--host", "127.0.0.1", "--port", "0"]
        if policy:
            self.command += ["--policy", policy]
        if audit is not None:
            self.command += ["--audit", str(audit)]
        if chat_template:
            self.command += ["--chat-template", str(chat_template)]
        self.start_timeout = start_timeout
        self.output: list[str] = []
        self.url = ""
        self.process = None

    def __enter__(self) -> "OrbitServer":
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, bufsize=1)
        found = threading.Event()

        def read():
            for line in self.process.stdout:
                self.output.append(line)
                m = re.search(r"listening on (http://\S+)", line)
                if m and not found.is_set():
                    self.url = m.group(1)
                    found.set()
            found.set()  # the process ended

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + self.start_timeout
        while not found.wait(0.1):
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"orbit serve did not start in {self.start_timeout:.0f} s:\n{''.join(self.output)}")
        if not self.url:
            self.process.wait(timeout=10)
            text = "".join(self.output)
            if "without cpp-httplib" in text:
                raise ServeUnavailable(text.strip())
            raise RuntimeError(f"orbit serve exited with status {self.process.returncode}:\n{text}")
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __exit__(self, *exc) -> None:
        self.stop()
