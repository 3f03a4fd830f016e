"""Window.generate's logit processors and log probabilities from Python (presence_penalty, frequency_penalty,
logit_bias, logprobs, top_logprobs), checked against numpy recomputations from Window.logits."""
import numpy as np
import pytest


@pytest.fixture
def story(orbit, stories260k_path):
    engine = orbit.Engine(str(stories260k_path), pool_bytes=16 << 20)
    window = engine.new_window()
    window.add_turn(engine.tokenize("Once upon a time, there was a little girl.", True))
    return engine, window, engine.tokenize(" She", False)


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def test_logprobs_match_the_logits_and_bias_and_penalties_act(story):
    engine, window, query = story
    g = window.generate(query, max_tokens=12, logprobs=True, top_logprobs=3, logit_bias={"261": 2.0})
    assert len(g.logprobs) == len(g.tokens) == 12
    rows = window.logits(query + list(g.tokens), all_rows=True)
    for i, step in enumerate(g.logprobs):
        logits = rows[len(query) - 1 + i].astype(np.float64)
        logits[261] += 2.0
        ref = log_softmax(logits)
        assert step.token == g.tokens[i] == int(np.argmax(logits))  # greedy on the biased logits
        assert step.logprob == pytest.approx(ref[step.token], abs=1e-3)
        assert [t.token for t in step.top][0] == step.token
        assert [t.logprob for t in step.top] == sorted((t.logprob for t in step.top), reverse=True)
        assert all(isinstance(t.bytes, bytes) for t in step.top)
    assert b"".join(s.chosen.bytes for s in g.logprobs).decode() == g.text

    plain = window.generate(query, max_tokens=40)
    banned = window.generate(query, max_tokens=40, logit_bias={plain.tokens[0]: -100})
    assert plain.tokens[0] not in banned.tokens
    forced = window.generate(query, max_tokens=4, logit_bias={300: 100})
    assert list(forced.tokens) == [300] * 4
    repeats = lambda t: len(t) - len(set(t))
    less = window.generate(query, max_tokens=40, frequency_penalty=2.0)
    more = window.generate(query, max_tokens=40, presence_penalty=-2.0)
    assert repeats(list(less.tokens)) < repeats(list(plain.tokens)) < repeats(list(more.tokens))
    assert window.generate(query, max_tokens=3).logprobs == []


def test_bad_values_name_the_argument(orbit, story):
    _, window, query = story
    for kwargs, field in [
        ({"presence_penalty": 3.0}, "presence_penalty"),
        ({"frequency_penalty": -2.5}, "frequency_penalty"),
        ({"logit_bias": {5: 150}}, "logit_bias[5]"),
        ({"logit_bias": {9999: 1}}, "logit_bias"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
    ]:
        with pytest.raises(orbit.OrbitError, match=field.replace("[", r"\[")):
            window.generate(query, max_tokens=2, **kwargs)
    with pytest.raises(ValueError, match="logit_bias key 'x'"):
        window.generate(query, logit_bias={"x": 1})
    with pytest.raises(TypeError, match="logit_bias"):
        window.generate(query, logit_bias=[1, 2])


@pytest.mark.parametrize("temperature", [1e-308, 5e-324, 1e-12])
def test_a_temperature_too_small_for_the_logits_over_it_draws_the_largest(story, temperature):
    # A logit over 1e-308 passes a double's range: the softmax was inf - inf = NaN and every draw token 0.
    _, window, query = story
    greedy = window.generate(query, max_tokens=12)
    cold = window.generate(query, max_tokens=12, temperature=temperature, seed=3)
    assert list(cold.tokens) == list(greedy.tokens)
    assert 0 not in cold.tokens
