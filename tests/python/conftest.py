"""Shared fixtures for orbit's Python tests.

Environment:
  ORBIT_CLI         path to the built `orbit` executable (tests that need it skip when unset)
  ORBIT_MODELS_DIR  directory holding the bundled models (default: <repo>/models)
  ORBIT_PYTHON_PATH directory holding the built `orbit` package, e.g. build/bindings/python (tests that need
                    it skip when unset and `import orbit` fails)
"""
import contextlib
import fcntl
import http.client
import importlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tools"))  # serve_process.py, shared with the serve benchmarks
# pytest-xdist's controller rebuilds each warning a worker reports by importing its class's module: an
# orbit.OrbitWarning from a worker needs `orbit` importable here too, not only in the `orbit` fixture below.
if os.environ.get("ORBIT_PYTHON_PATH"):
    sys.path.insert(0, str(pathlib.Path(os.environ["ORBIT_PYTHON_PATH"]).resolve()))

from serve_process import NoServe, ServeProcess  # noqa: E402


def pytest_configure(config):
    # pytest-xdist's marker, declared here too so that runs without xdist do not warn about it.
    config.addinivalue_line("markers", "xdist_group(name): run these tests on one xdist worker (--dist loadgroup)")


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def models_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("ORBIT_MODELS_DIR", REPO_ROOT / "models"))


@pytest.fixture(scope="session")
def stories260k_path(models_dir) -> pathlib.Path:
    path = models_dir / "stories260K" / "stories260K.bin"
    if not path.is_file():
        pytest.fail(f"bundled model missing: {path} (set ORBIT_MODELS_DIR to the models directory)")
    return path


@pytest.fixture(scope="session")
def orbit_cli() -> pathlib.Path:
    value = os.environ.get("ORBIT_CLI")
    if not value:
        pytest.skip("ORBIT_CLI is not set: point it at the built `orbit` executable (e.g. build/cli/orbit)")
    path = pathlib.Path(value)
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(f"ORBIT_CLI={value} is not an executable file")
    return path


@pytest.fixture(scope="session")
def orbit():
    """The `orbit` Python module: from ORBIT_PYTHON_PATH when set, else wherever it is installed."""
    value = os.environ.get("ORBIT_PYTHON_PATH")
    if value:
        path = pathlib.Path(value).resolve()
        if not (path / "orbit" / "__init__.py").is_file():
            pytest.fail(f"ORBIT_PYTHON_PATH={value} holds no orbit/__init__.py (build with -DORBIT_PYTHON=ON)")
        sys.path.insert(0, str(path))
    try:
        module = importlib.import_module("orbit")
    except ImportError as e:
        if value:
            pytest.fail(f"import orbit from ORBIT_PYTHON_PATH={value} failed: {e}")
        pytest.skip(f"orbit is not importable ({e}): set ORBIT_PYTHON_PATH to <build>/bindings/python")
    return module


@pytest.fixture
def start_serve(orbit_cli):
    """start(model, *args, env=None, file_size_limit=None) -> ServeProcess: `orbit serve` on 127.0.0.1 (a
    free port) with the given model and arguments (file_size_limit: its RLIMIT_FSIZE in bytes); every server
    a test started is stopped after it. Skips when this orbit was built without its HTTP server."""
    started = []

    def start(model, *args, env=None, file_size_limit=None):
        try:
            server = ServeProcess(orbit_cli, model, args, env=env, file_size_limit=file_size_limit)
        except NoServe as e:
            pytest.skip(str(e))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def refused_serve(orbit_cli):
    """refuse(model, *args) -> stderr: `orbit serve` on `model` with `args` (127.0.0.1, a free port), which must be
    refused at start: exit status 1, never listening. Returns its stderr (what names the argument at fault)."""

    def refuse(model, *args):
        result = subprocess.run([str(orbit_cli), "serve", "--model", str(model), "--host", "127.0.0.1", "--port", "0",
                                 *args], capture_output=True, text=True, timeout=120)
        assert result.returncode == 1, result.stderr
        assert "listening on" not in result.stdout + result.stderr
        return result.stderr

    return refuse


@contextlib.contextmanager
def serving(orbit_cli, model, *args):
    """The ServeProcess of `orbit serve` on `model` with `args` (127.0.0.1, a free port), stopped on exit; for a
    module's fixture (start_serve's servers live for one test). Skips when this orbit was built without its HTTP
    server."""
    try:
        process = ServeProcess(orbit_cli, model, args)
    except NoServe as e:
        pytest.skip(str(e))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def stories_server(orbit_cli, stories260k_path):
    """(host, port) of one `orbit serve` on stories260K (127.0.0.1, a free port, no other argument), shared by a
    module's tests and stopped after them. Skips when this orbit was built without its HTTP server."""
    with serving(orbit_cli, stories260k_path) as process:
        yield process.host, process.port


def post_json(address, path, body, headers=None, timeout=120):
    """(status, parsed JSON answer) of one POST to `path` on `address`, (host, port): `body` a dict, sent as JSON, or
    bytes, sent as they are, with Content-Type application/json and `headers`. An error status is returned too."""
    connection = http.client.HTTPConnection(*address, timeout=timeout)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        connection.request("POST", path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        return response.status, json.loads(response.read().decode())
    finally:
        connection.close()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 when asked (nothing listens there)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def redis_server(port, directory, password="right"):
    """A redis-server on 127.0.0.1:port that wants `password`, answering when entered and stopped on exit (never
    skipped silently: scripts/common.sh installs redis-server)."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail("redis-server is not installed (apt install redis-server redis-tools)")
    process = subprocess.Popen([server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--dir",
                                str(directory), "--requirepass", password], stdout=subprocess.DEVNULL)
    try:
        for _ in range(500):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"AUTH " + password.encode() + b"\r\nPING\r\n")
                    if b"+PONG" in s.recv(64):
                        break
            except OSError:
                time.sleep(0.02)
        else:
            pytest.fail("redis-server did not start")
        yield
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def redis_port(tmp_path):
    """The port of a redis_server() with the password 'right', stopped after the test."""
    port = free_port()
    with redis_server(port, tmp_path):
        yield port


# The story test_cancel and test_aio decode after (the `story` fixture's window holds it).
STORY = "Once upon a time, there was a little girl."


@pytest.fixture(scope="module")
def engine(orbit, stories260k_path):
    """An engine on the bundled model (32 MiB pool), one per test module that asks for it (a module may define
    an `engine` of its own instead), closed after the module's last test."""
    engine = orbit.Engine(str(stories260k_path), pool_bytes=32 << 20)
    yield engine
    engine.close()


@pytest.fixture
def as_unprivileged():
    """The command prefix that runs a process as an unprivileged user (nobody), so that a permission a test
    closes holds for it: root reads and writes anywhere. [] when not root; skips as root without setpriv."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv (util-linux): no user a directory can be closed to")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture
def story_max_tokens():
    """max_tokens of the `story` fixture's answer; a module overrides it (test_cancel asks for the whole answer)."""
    return 60


@pytest.fixture
def story_ignore_eos():
    """ignore_eos of the `story` fixture's answer; test_cancel's whole answer goes on to the position limit."""
    return False


@pytest.fixture
def story(engine, story_max_tokens, story_ignore_eos):
    """A window of `engine` holding STORY (BOS first), the query after it (" She") and its greedy answer of at
    most story_max_tokens tokens; the window is closed after the test."""
    window = engine.new_window()
    window.add_turn(engine.tokenize(STORY, True))
    query = engine.tokenize(" She", False)
    yield window, query, window.generate(query, max_tokens=story_max_tokens, ignore_eos=story_ignore_eos)
    window.close()


@pytest.fixture
def waiting_for_room(orbit, monkeypatch):
    """waiting_for_room(windows) -> a threading.Event per window. Makes the stream decodes (Window.stream and
    orbit.aio's) on those windows wait for a reader that stops reading for an hour (READER_GONE_S), and sets a
    window's Event when its decode asks for room it cannot have: the piece after AHEAD + 1 once the reader took
    one piece and stopped (the room it gave back for that piece included). Only a cancel or a close wakes it."""

    def arm(windows):
        monkeypatch.setattr(orbit._stream, "READER_GONE_S", 3600.0)
        waiting = {id(w): threading.Event() for w in windows}
        original = orbit.Window.generate

        def generate(self, query, **kwargs):
            on_text, pieces = kwargs.get("on_text"), []
            if on_text is None or id(self) not in waiting:
                return original(self, query, **kwargs)

            def counted(piece):
                pieces.append(piece)
                if len(pieces) == orbit._stream.AHEAD + 2:
                    waiting[id(self)].set()
                return on_text(piece)

            kwargs["on_text"] = counted
            return original(self, query, **kwargs)

        monkeypatch.setattr(orbit.Window, "generate", generate)
        return [waiting[id(w)] for w in windows]

    return arm


@pytest.fixture
def small_engine(orbit, stories260k_path):
    """An engine on the bundled model with a small pool (8 MiB) and 4-token pages, closed after the test."""
    with orbit.Engine(stories260k_path, pool_bytes=8 << 20, page_size=4) as e:
        yield e


# The policies of the shared replays: the default, the executing radix baseline and the throughput preset.
SHARED_REPLAY_POLICIES = ("default", "prefix", "throughput")


@pytest.fixture(scope="session")
def shared_replay(orbit_cli, stories260k_path, tmp_path_factory):
    """replay(trace) -> the report of `orbit replay TRACE --policy default,prefix,throughput --no-fidelity --json`
    on the bundled model, computed once per test run: test_dominance and test_yardstick read the same replays.
    Under pytest-xdist the workers share the cache directory (a lock file per trace: one computes, the other
    waits for it)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # <base>/popen-gwN: the parent is the run's, shared by its workers
    cache = root / "shared-replays"
    cache.mkdir(exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")

    def replay(trace: pathlib.Path) -> dict:
        out = cache / (trace.stem + ".replay.json")
        with open(cache / (trace.stem + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not out.exists():
                partial = out.with_suffix(".partial")
                subprocess.run([str(orbit_cli), "replay", str(trace), "--model", str(stories260k_path), "--policy",
                                ",".join(SHARED_REPLAY_POLICIES), "--no-fidelity", "--json", str(partial), "--quiet"],
                               check=True, env=env, stdout=subprocess.DEVNULL)
                partial.rename(out)
        with open(out) as f:
            return json.load(f)

    return replay
