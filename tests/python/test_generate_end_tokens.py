"""A run ends at the tokenizer's end tokens (its EOS, and its BOS, with which a llama2.c model begins its next
story), as `orbit generate` and `orbit serve` end, unless ignore_eos=True; every generate call takes it."""
import asyncio

import pytest


@pytest.fixture(scope="module")
def story_engine(orbit, models_dir):
    with orbit.Engine(str(models_dir / "tinystories-656k")) as engine:
        yield engine


def test_a_run_ends_at_the_eos_and_ignore_eos_goes_on_past_it(orbit, story_engine):
    eos = story_engine.model_info.eos_token
    assert eos == 2  # tokenizer_config.json's <|end_story|>
    w = story_engine.new_window()
    query = story_engine.tokenize("Once upon a time")
    ended = w.generate(query, max_tokens=200)
    assert ended.stop_reason == "stop_token"
    assert ended.tokens[-1] == eos and eos not in ended.tokens[:-1]
    assert len(ended.tokens) < 200
    on = w.generate(query, max_tokens=200, ignore_eos=True)
    assert on.stop_reason == "max_tokens" and len(on.tokens) == 200
    assert on.tokens[: len(ended.tokens)] == ended.tokens  # the same greedy run, continued past the EOS
    assert on.text.startswith(ended.text) and len(on.text) > len(ended.text)
    # The end token writes no text.
    assert story_engine.detokenize([eos]) == ""

    # generate_n, stream, generate_many and the asyncio window take it the same way.
    assert [g.tokens for g in w.generate_n(query, 2, max_tokens=200)] == [ended.tokens] * 2
    assert w.generate_n(query, 1, max_tokens=200, ignore_eos=True)[0].tokens == on.tokens
    stream = w.stream(query, max_tokens=200)
    assert "".join(stream) == ended.text and stream.generation.tokens == ended.tokens
    both = orbit.generate_many([(w, query, {"max_tokens": 200}), (w, query, {"max_tokens": 200, "ignore_eos": True})])
    assert [g.tokens for g in both] == [ended.tokens, on.tokens]

    from orbit import aio

    async def run():
        aw = aio.AsyncWindow(w)
        return await aw.generate(query, max_tokens=200, ignore_eos=True)

    assert asyncio.run(run()).tokens == on.tokens
    # stop_tokens add to the end tokens.
    extra = w.generate(query, max_tokens=200, stop_tokens=[on.tokens[len(ended.tokens) + 5]])
    assert extra.tokens == ended.tokens


def test_a_llama2c_model_ends_at_the_bos_that_begins_its_next_story(orbit, stories260k_path):
    with orbit.Engine(str(stories260k_path)) as engine:
        bos = engine.model_info.bos_token
        assert bos == 1
        w = engine.new_window()
        query = engine.tokenize("Lily and Tom")
        on = w.generate(query, max_tokens=300, ignore_eos=True)
        assert bos in on.tokens  # the model begins another story (greedy, at 220 tokens on stories260K)
        ended = w.generate(query, max_tokens=300)
        assert ended.stop_reason == "stop_token"
        assert ended.tokens == on.tokens[: on.tokens.index(bos) + 1]


def test_ignore_eos_is_a_bool(orbit, story_engine):
    w = story_engine.new_window()
    for call in (
        lambda: w.generate([1], ignore_eos="yes"),
        lambda: w.generate_n([1], 2, ignore_eos=1),
        lambda: w.stream([1], ignore_eos=None),
    ):
        with pytest.raises(TypeError, match="ignore_eos"):
            call()


def test_plan_calls_name_themselves_in_their_errors(orbit, stories260k_path):
    with orbit.Engine(str(stories260k_path)) as engine:
        chunk = engine.add_text("Lily went to the park.")
        w = engine.new_window()
        w.add_turn("Once")
        w.admit(chunk)
        for name, call in (
            ("plan_slide", lambda: w.plan_slide(-1)),
            ("plan_evict", lambda: w.plan_evict(99)),
            ("plan_recall", lambda: w.plan_recall(chunk)),
            ("plan_reorder", lambda: w.plan_reorder([9])),
            ("plan_admit", lambda: w.plan_admit(chunk, before=99)),
        ):
            with pytest.raises(orbit.OrbitError, match=f"^{name}: "):
                call()
        with pytest.raises(orbit.OrbitError, match="^slide: "):  # the operation itself keeps its own name
            w.slide(-1)
