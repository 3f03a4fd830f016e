"""Text through the Python API: tokenize/detokenize/piece, add_text, and str accepted wherever token ids go
(chunks, turns, logits, generate), pinned against the committed tokenizer references."""
import pytest

PAGE = 4
POOL = 8 << 20


@pytest.fixture
def engine(orbit, stories260k_path):
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE) as e:
        yield e


def test_text_wherever_tokens_go(orbit, engine):
    assert engine.has_tokenizer
    assert engine.tokenize("Once upon a time") == [1, 403, 407, 261, 378]  # tests/data/tokenizer/tok512.json
    assert engine.detokenize([1, 403, 407, 261, 378]) == "Once upon a time"
    assert engine.piece(403) == " Once"
    intro = engine.add_text("Once upon a time, there was a little girl named Lily.", bos=True)
    assert intro == engine.add_tokens(engine.tokenize("Once upon a time, there was a little girl named Lily."))
    assert engine.add_tokens("She liked to play.") == engine.add_tokens(engine.tokenize("She liked to play.", bos=False))
    w = engine.new_window()
    w.admit(intro)
    w.add_turn("She loved to play outside.")
    g = w.generate(" One day", max_tokens=10)
    assert g.tokens == w.generate(engine.tokenize(" One day", bos=False), max_tokens=10).tokens
    assert g.text == engine.detokenize(g.tokens, engine.tokenize(" One day", bos=False)[-1]) and len(g.text) > 5
    assert (w.logits("She saw") == w.logits(engine.tokenize("She saw", bos=False))).all()
