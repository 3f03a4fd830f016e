"""Engine(remote=URL) pings the remote tier once as it opens, as `orbit serve --remote` does: a server that does
not answer (nothing on the port, a refused password) is named in an orbit.RemoteUnreachableWarning with its URL
(password redacted) and the cause, and the engine still opens on its local tiers; a server that answers gives
no warning. Redis is started on 127.0.0.1 (a free port) by conftest's redis_port fixture and always stopped."""
import warnings

import pytest
from conftest import free_port  # and the redis_port fixture

POOL = 8 << 20


def open_engine(orbit, model, url):
    """Engine(model, remote=url) and the RemoteUnreachableWarnings its opening issued."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine = orbit.Engine(model, remote=url, remote_secret="s", pool_bytes=POOL, page_size=4)
    return engine, [w for w in caught if issubclass(w.category, orbit.RemoteUnreachableWarning)]


def test_an_unreachable_remote_is_named_once_at_open_and_the_engine_works(orbit, stories260k_path, capfd):
    url = f"redis://127.0.0.1:{free_port()}"  # nothing listens there
    engine, caught = open_engine(orbit, stories260k_path, url)
    # Its queued write cannot be delivered: the close says so (the local tiers keep the entry).
    with pytest.warns(orbit.OrbitWarning, match="closed with 1 queued write .* not delivered"), engine:
        assert len(caught) == 1
        message = str(caught[0].message)
        assert message.startswith(f"Engine: remote {url} is unreachable at open (")
        assert "cannot connect" in message
        assert caught[0].filename == __file__  # attributed to the line that opened the engine
        assert issubclass(orbit.RemoteUnreachableWarning, RuntimeWarning)
        engine.new_window().admit(engine.add_tokens([1, 2, 3, 4]))  # served on the local tiers
        assert engine.stats.canonicals_encoded == 1
        remote = engine.stats.store.remote
        assert remote.errors >= 1 and "cannot connect" in remote.last_error  # the tier met the same cause
    assert "cannot connect" not in capfd.readouterr().err  # and did not say it again on stderr


def test_a_wrong_password_is_named_with_the_url_redacted_and_the_right_one_is_quiet(orbit, stories260k_path,
                                                                                    redis_port):
    engine, caught = open_engine(orbit, stories260k_path, f"redis://:hunter2@127.0.0.1:{redis_port}")
    remote = engine.stats.store.remote  # the open's check counts on the tier at once, before any use of it
    engine.close()
    assert not remote.available and remote.outages == 1 and remote.errors == 1 and "AUTH" in remote.last_error
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"Engine: remote redis://:***@127.0.0.1:{redis_port} is unreachable at open" in message
    assert "AUTH" in message
    assert "hunter2" not in message  # the password is never shown
    engine, caught = open_engine(orbit, stories260k_path, f"redis://:right@127.0.0.1:{redis_port}")
    engine.close()
    assert caught == []


def test_the_warning_made_an_error_refuses_to_open(orbit, stories260k_path):
    url = f"redis://127.0.0.1:{free_port()}"
    with warnings.catch_warnings():
        warnings.simplefilter("error", orbit.RemoteUnreachableWarning)
        with pytest.raises(orbit.RemoteUnreachableWarning, match="is unreachable at open"):
            orbit.Engine(stories260k_path, remote=url, remote_secret="s", pool_bytes=POOL, page_size=4)


@pytest.mark.parametrize("name", ["OrbitWarning", "RuntimeWarning"])
def test_an_orbit_warning_filter_and_a_runtime_warning_filter_both_take_it(orbit, stories260k_path, name):
    # An OrbitWarning filter takes every warning orbit issues, this one included; a RuntimeWarning filter (what
    # it was first) still does.
    assert issubclass(orbit.RemoteUnreachableWarning, orbit.OrbitWarning)
    assert issubclass(orbit.RemoteUnreachableWarning, RuntimeWarning)
    category = {"OrbitWarning": orbit.OrbitWarning, "RuntimeWarning": RuntimeWarning}[name]
    url = f"redis://127.0.0.1:{free_port()}"
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=category)
        with pytest.raises(orbit.RemoteUnreachableWarning, match="is unreachable at open"):
            orbit.Engine(stories260k_path, remote=url, remote_secret="s", pool_bytes=POOL, page_size=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=category)
        orbit.Engine(stories260k_path, remote=url, remote_secret="s", pool_bytes=POOL, page_size=4).close()
    assert [w for w in caught if issubclass(w.category, orbit.RemoteUnreachableWarning)] == []
