"""Text through the Python API: tokenize/detokenize/piece, add_text, and str accepted wherever token ids go
(chunks, turns, logits, generate), pinned against the committed tokenizer references."""
import pytest

from window_helpers import PAGE, POOL


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


def test_a_tokenizer_given_explicitly(orbit, stories260k_path, tmp_path):
    # The model alone has no tokenizer beside it; tokenizer= names llama2.c's (a path or a str).
    alone = tmp_path / "alone.bin"
    alone.write_bytes(stories260k_path.read_bytes())
    tok = stories260k_path.parent / "tok512.bin"
    with orbit.Engine(alone, pool_bytes=POOL, page_size=PAGE) as e:
        assert not e.has_tokenizer and e.options.tokenizer == ""
    with orbit.Engine(alone, pool_bytes=POOL, page_size=PAGE, tokenizer=tok) as e:
        assert e.has_tokenizer
        assert e.tokenize("Once upon a time") == [1, 403, 407, 261, 378]  # tests/data/tokenizer/tok512.json
        assert e.model_info.tokenizer == str(tok) and e.options.tokenizer == str(tok)
    with orbit.Engine(str(alone), pool_bytes=POOL, page_size=PAGE, tokenizer=str(tok)) as e:
        assert e.detokenize([1, 403, 407, 261, 378]) == "Once upon a time"


def test_a_bad_tokenizer_argument_names_it(orbit, stories260k_path, tmp_path):
    missing = tmp_path / "missing.bin"
    with pytest.raises(orbit.OrbitError, match=rf"^Engine: tokenizer = '{missing}': no such file"):
        orbit.Engine(stories260k_path, tokenizer=missing)
    with pytest.raises(orbit.OrbitError, match=r"^Engine: tokenizer = '.*': a directory with no tokenizer.json"):
        orbit.Engine(stories260k_path, tokenizer=tmp_path)
    with pytest.raises(TypeError, match=r"Engine: tokenizer: expected a str or os.PathLike, got int"):
        orbit.Engine(stories260k_path, tokenizer=5)
    # The model is required: None is a wrong type (an OrbitError said "no model path given").
    with pytest.raises(TypeError, match=r"^Engine: model: expected a str or os.PathLike, got None$"):
        orbit.Engine(None)
    short = tmp_path / "short.bin"
    short.write_bytes(b"\x07\x00\x00\x00")  # not a tokenizer: the loader's error names the file
    with pytest.raises(orbit.OrbitError, match="short.bin"):
        orbit.Engine(stories260k_path, tokenizer=short)
