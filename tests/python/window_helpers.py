"""What the Python API tests on the bundled model share: a small engine's page and pool sizes, random token
lists and chunks of them, and how far a window's logits are from a re-prefill's."""
import numpy as np

PAGE = 4  # tokens per page of the tests' small engines
POOL = 8 << 20  # bytes of their KV pool


def random_tokens(rng, n, vocab=512):
    """`n` token ids drawn by `rng` (a random.Random) from 1 to vocab - 1 (0 left out)."""
    return [rng.randrange(1, vocab) for _ in range(n)]


def make_chunks(engine, rng, count):
    """`count` chunks of 5 to 10 random tokens each, labelled c0, c1, ..."""
    return [engine.add_tokens(random_tokens(rng, rng.randrange(5, 11)), label=f"c{i}") for i in range(count)]


def window_error(window, query):
    """The largest absolute difference between `window`'s logits for `query` (every row) and a re-prefill's."""
    return float(np.max(np.abs(window.logits(query, all_rows=True) - window.reference_logits(query, all_rows=True))))
