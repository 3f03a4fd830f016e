"""orbit.aio.generate_many takes its requests in any sequence, as orbit.generate_many does: AsyncWindows in a
sequence that is neither a list nor a tuple are unwrapped and locked as in a list (they were refused as 'must be a
Window')."""
import asyncio
import collections.abc

from conftest import STORY  # the `engine` fixture is conftest's


class Requests(collections.abc.Sequence):
    """generate_many's requests in a sequence that is neither a list nor a tuple."""

    def __init__(self, items):
        self._items = items

    def __getitem__(self, i):
        return self._items[i]

    def __len__(self):
        return len(self._items)


def test_aio_generate_many_takes_any_sequence_of_requests(orbit, engine):
    from orbit import aio

    query = engine.tokenize(" She", False)
    windows = []
    for _ in range(2):
        w = engine.new_window()
        w.add_turn(engine.tokenize(STORY, True))
        windows.append(w)

    async def main():
        a, b = aio.AsyncWindow(windows[0]), aio.AsyncWindow(windows[1])
        listed = await aio.generate_many([(a, query, {"max_tokens": 6}), (b, query, {"max_tokens": 4})])
        sequenced = await aio.generate_many(Requests([(a, query, {"max_tokens": 6}), (b, query, {"max_tokens": 4})]))
        return listed, sequenced

    listed, sequenced = asyncio.run(main())
    assert [list(g.tokens) for g in sequenced] == [list(g.tokens) for g in listed]
    assert all(len(g.tokens) > 0 for g in listed)
    for w in windows:
        w.close()
