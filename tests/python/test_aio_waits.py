"""orbit.aio against a window a synchronous call on another thread holds: the AsyncWindow's call waits for the
native lock on a pool thread, and asyncio.wait_for's timeout (which cancels its token) ends that wait at once
(py_window.h's lock_unless), not after the other call's whole answer."""
import asyncio
import threading

import pytest

pytestmark = pytest.mark.xdist_group("test_aio")


def test_a_timeout_ends_a_call_waiting_for_another_threads_call(orbit, engine, story):
    # A synchronous call on another thread holds the window (paused in its on_text until the end): the
    # AsyncWindow's call waits for the native lock on a pool thread. asyncio.wait_for's timeout cancels its
    # token, and the call gives up waiting at once; before, the task waited for the other call's whole answer
    # (here: until `release`, which only comes after wait_for returned).
    from orbit import aio

    window, query, _ = story
    holding, release = threading.Event(), threading.Event()

    def hold(piece):
        holding.set()
        assert release.wait(60)
        return False

    holder = threading.Thread(target=lambda: window.generate(query, max_tokens=400, on_text=hold))
    holder.start()
    assert holding.wait(60)

    async def main():
        w = aio.AsyncWindow(window)
        try:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(w.generate(query, max_tokens=400), 0.2)
            return holder.is_alive()
        finally:
            release.set()

    assert asyncio.run(main()) is True  # the timeout came while the other call still held the window
    holder.join(60)
