"""Several windows decoded together from Python (orbit.generate_many, Window.generate_n: orbit/decode_batch.h):
each answer is the one Window.generate gives alone, options per request, forks for n answers, refusals."""
import threading

import pytest


@pytest.fixture
def windows(orbit, stories260k_path):
    engine = orbit.Engine(str(stories260k_path), pool_bytes=16 << 20)
    out = []
    for text in ["Once upon a time, there was a little girl.", "The dog ran to the park.", "Tom had a red boat."]:
        w = engine.new_window()
        w.add_turn(engine.tokenize(text, True))
        out.append(w)
    return engine, out


def test_generate_many_equals_generate_alone(orbit, windows):
    engine, ws = windows
    requests = [
        (ws[0], " She", {"max_tokens": 12}),
        (ws[1], engine.tokenize(" It", False), {"max_tokens": 20, "temperature": 0.8, "seed": 3, "logprobs": True}),
        (ws[2], " He"),
    ]
    alone = [w.generate(q, **(o[0] if o else {})) for w, q, *o in requests]
    together = orbit.generate_many(requests)
    assert [g.tokens for g in together] == [g.tokens for g in alone]
    assert [g.text for g in together] == [g.text for g in alone]
    assert len(together[2].tokens) == 32  # generate()'s default max_tokens
    for a, b in zip(together[1].logprobs, alone[1].logprobs):
        assert a.chosen.token == b.chosen.token
        assert a.chosen.logprob == pytest.approx(b.chosen.logprob, abs=1e-4)


def test_generate_n_forks_decode_together(windows):
    engine, ws = windows
    answers = ws[0].generate_n(" She", 4, max_tokens=10, temperature=1.0, seed=50)
    assert len(answers) == 4
    assert answers[0].prompt_forward_tokens > 0
    assert all(a.prompt_forward_tokens == 0 for a in answers[1:])  # the query forwarded once
    for i, a in enumerate(answers):
        assert a.tokens == ws[0].fork().generate(" She", max_tokens=10, temperature=1.0, seed=50 + i * 2**32).tokens
    assert len({tuple(a.tokens) for a in answers}) > 1
    # The next seed draws other answers, not these shifted by one.
    following = ws[0].generate_n(" She", 3, max_tokens=10, temperature=1.0, seed=51)
    assert following[0].tokens != answers[1].tokens and following[1].tokens != answers[2].tokens
    greedy = ws[0].generate_n(" She", 3, max_tokens=6)
    assert len({tuple(a.tokens) for a in greedy}) == 1


def test_generate_many_from_threads_and_refusals(orbit, windows):
    engine, ws = windows
    results = {}

    def run(i):
        results[i] = orbit.generate_many([(ws[i], " The", {"max_tokens": 8}), (ws[(i + 1) % 3], " A")])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 1, 2]
    with pytest.raises(TypeError, match="generate_many: requests\\[1\\]: generate\\(\\) has no argument 'max_token'"):
        orbit.generate_many([(ws[0], " A"), (ws[1], " B", {"max_token": 3})])
    with pytest.raises(orbit.OrbitError, match="top_p"):
        orbit.generate_many([(ws[0], " A", {"top_p": 1.5})])
    with pytest.raises(TypeError, match="must be \\(window, query\\)"):
        orbit.generate_many([ws[0]])
    with pytest.raises(orbit.OrbitError, match="n = 0 must be >= 1"):
        ws[0].generate_n(" A", 0)
    # Each answer is a fork made before the first step: n = 10**6 forks took over 20 GB (the process was
    # killed for memory) before n was bounded; it is refused at once, the window unchanged.
    for n in (1025, 10**6, 2**62):
        with pytest.raises(orbit.OrbitError, match=f"n = {n} must be <= 1024"):
            ws[0].generate_n(" A", n, max_tokens=1)
    assert len(ws[0].generate_n(" A", 2, max_tokens=1)) == 2
    assert orbit.generate_many([]) == []


def test_options_of_the_wrong_type_are_named(orbit, windows):
    # generate_n's and generate_many's options are converted as generate()'s signature converts them; a value
    # of the wrong type raised pybind11's bare "Unable to cast Python instance to C++ type" before.
    engine, ws = windows
    for key, value, expected in (("max_tokens", "8", "int, got str"), ("max_tokens", None, "int, got None"),
                                 ("max_tokens", True, "int, got bool"), ("temperature", "hot", "float, got str"),
                                 ("seed", 1.5, "int, got float"), ("logprobs", "yes", "bool, got str"),
                                 ("top_logprobs", 1.5, "int, got float")):
        with pytest.raises(TypeError, match=f"^generate_n: {key}: expected {expected}$"):
            ws[0].generate_n(" A", 2, **{key: value})
        with pytest.raises(TypeError, match=f"^generate_many: requests\\[0\\]: {key}: expected {expected}$"):
            orbit.generate_many([(ws[0], " A", {key: value})])
    # A seed out of range is a ValueError, as generate()'s.
    with pytest.raises(ValueError, match=r"^generate_n: seed = -1 is out of range: expected int in \[0, 2\*\*64\)$"):
        ws[0].generate_n(" A", 2, seed=-1)
    # requests is any sequence (a tuple too, as the stub's Sequence says), each naming a Window.
    together = orbit.generate_many(((ws[0], " A", {"max_tokens": 4}), [ws[1], " B", {"max_tokens": 4}]))
    assert [g.tokens for g in together] == [ws[0].generate(" A", max_tokens=4).tokens,
                                            ws[1].generate(" B", max_tokens=4).tokens]
    with pytest.raises(TypeError, match="generate_many: requests\\[0\\]\\[0\\] must be a Window, got str"):
        orbit.generate_many([("window", " A")])
    with pytest.raises(TypeError, match="generate_many: requests must be a list .* got str"):
        orbit.generate_many("ab")


def test_an_oversized_batch_is_refused_before_any_request_is_read(orbit, windows):
    # Each request becomes a sequence of one batch (its arguments, sampler and KV slot), all set up before the
    # first step: more than Window.generate_n's 1024 are refused at once, naming requests and the limit, before
    # any request is read (1025 Nones: no TypeError for requests[0]).
    engine, ws = windows
    limit = "generate_many: requests: 1025 requests, more than the 1024 one call takes"
    with pytest.raises(orbit.OrbitError, match=limit):
        orbit.generate_many([None] * 1025)
    with pytest.raises(orbit.OrbitError, match=limit):
        orbit.generate_many([(ws[0], " A", {"max_tokens": 1})] * 1025)
    answers = orbit.generate_many([(ws[0], " A", {"max_tokens": 1})] * 1024)  # the limit itself is taken
    assert len(answers) == 1024 and len({tuple(a.tokens) for a in answers}) == 1


def test_generate_many_holds_the_windows_it_was_given(orbit, windows):
    """The batch decodes without the GIL: the windows are held by the call, not only by the caller's request list.
    A sequence that makes its items as they are read (a fresh fork each time) drops each fork right after it is read,
    and another thread may empty the list the caller passed while the decode runs; before, both decoded freed windows
    (a crash, an abort or a hang)."""
    import collections.abc

    engine, ws = windows
    expected = ws[0].fork().generate(" She", max_tokens=12).tokens

    class Forks(collections.abc.Sequence):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            if not 0 <= i < 3:
                raise IndexError(i)
            return (ws[0].fork(), " She", {"max_tokens": 12})

    for answer in orbit.generate_many(Forks()):
        assert answer.tokens == expected
    # Another thread empties the caller's list once the call has read it (its last item read), while it decodes.
    items = [(ws[0].fork(), " She", {"max_tokens": 200, "ignore_eos": True}) for _ in range(4)]
    emptier = threading.Thread(target=items.clear)

    class Emptied(collections.abc.Sequence):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            if not 0 <= i < 4:
                raise IndexError(i)
            item = items[i]
            if i == 3:
                emptier.start()
            return item

    answers = orbit.generate_many(Emptied())
    emptier.join()
    assert len(answers) == 4 and all(len(a.tokens) == 200 for a in answers)
    assert engine.stats.windows == 3  # the forks went with the call
