"""`orbit logits` against an independent numpy implementation of llama2.c's forward.

The reference reads the llama2.c `.bin` itself (7 little-endian int32 header, float32 tensors in the
documented order, unused RoPE tables skipped, classifier shared unless vocab is negative) and runs the
whole sequence at once in float64 with a causal mask:

  x = embed[tokens]
  per layer:  h = x + Wo attn(rope(Wq n(x)), rope(Wk n(x)), Wv n(x))    (GQA: q head i uses kv head i // group)
              x = h + W2 (silu(W1 n(h)) * W3 n(h))
  logits = Wcls n(x)           n = RMSNorm(eps 1e-5), rope = interleaved pairs, theta 10000
"""
import json
import subprocess

import numpy as np
import pytest

# Its module-scoped fixture is expensive: under pytest-xdist (--dist loadgroup) this file runs on one worker.
pytestmark = pytest.mark.xdist_group("test_cli_reference")

# Max |cli − numpy| allowed. The reference is float64 and the runtime float32, whose own rounding noise
# on this model reaches 1.1e-4 at 64 tokens and 1.3e-4 at 512 (plain float32 numpy and torch forwards
# against float64); real mistakes are far above it (rms eps 1e-6 instead of 1e-5 moves logits by 2e-2).
TOLERANCE = 2.5e-4
BOS = 1


class Llama2cReference:
    """A llama2.c checkpoint and its forward pass, in numpy."""

    def __init__(self, path):
        raw = path.read_bytes()
        dim, hidden, layers, heads, kv_heads, vocab, seq_len = (int(v) for v in np.frombuffer(raw[:28], "<i4"))
        self.shared_classifier = vocab > 0
        vocab = abs(vocab)
        self.dim, self.hidden, self.layers, self.heads, self.kv_heads = dim, hidden, layers, heads, kv_heads
        self.vocab, self.seq_len = vocab, seq_len
        self.head_size = dim // heads
        kv_dim = kv_heads * self.head_size
        floats = np.frombuffer(raw, "<f4", offset=28).astype(np.float64)
        cursor = 0

        def take(*shape):
            nonlocal cursor
            count = int(np.prod(shape))
            assert cursor + count <= floats.size, "checkpoint shorter than its header says"
            out = floats[cursor:cursor + count].reshape(shape)
            cursor += count
            return out

        self.embed = take(vocab, dim)
        self.rms_att = take(layers, dim)
        self.wq = take(layers, dim, dim)
        self.wk = take(layers, kv_dim, dim)
        self.wv = take(layers, kv_dim, dim)
        self.wo = take(layers, dim, dim)
        self.rms_ffn = take(layers, dim)
        self.w1 = take(layers, hidden, dim)
        self.w2 = take(layers, dim, hidden)
        self.w3 = take(layers, hidden, dim)
        self.rms_final = take(dim)
        take(2, seq_len * self.head_size // 2)  # unused RoPE tables
        self.classifier = self.embed if self.shared_classifier else take(vocab, dim)
        assert cursor == floats.size, "bytes left over after the classifier"

    @staticmethod
    def _rmsnorm(x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5) * weight

    def _rope(self, x, positions):
        """x: [T, heads, head_size]; rotates pairs (2i, 2i+1) by position * 10000^(-2i/head_size)."""
        freq = 10000.0 ** (-np.arange(0, self.head_size, 2) / self.head_size)
        angle = positions[:, None, None] * freq[None, None, :]
        even, odd = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = even * np.cos(angle) - odd * np.sin(angle)
        out[..., 1::2] = even * np.sin(angle) + odd * np.cos(angle)
        return out

    def forward(self, tokens, positions=None):
        """Logits [T, vocab] (float64) at every position of `tokens`; rotary positions default to 0..T-1.
        Order, not position, decides causality: token t attends to tokens 0..t."""
        tokens = np.asarray(tokens, dtype=np.int64)
        T, hs = tokens.size, self.head_size
        positions = np.arange(T, dtype=np.float64) if positions is None else np.asarray(positions, np.float64)
        causal = np.triu(np.ones((T, T), dtype=bool), k=1)  # [query, key]: key after query
        x = self.embed[tokens]
        for l in range(self.layers):
            xn = self._rmsnorm(x, self.rms_att[l])
            q = self._rope((xn @ self.wq[l].T).reshape(T, self.heads, hs), positions)
            k = self._rope((xn @ self.wk[l].T).reshape(T, self.kv_heads, hs), positions)
            v = (xn @ self.wv[l].T).reshape(T, self.kv_heads, hs)
            group = self.heads // self.kv_heads
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
            scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hs)
            scores[:, causal] = -np.inf
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            weights = scores / scores.sum(axis=-1, keepdims=True)
            attn = np.einsum("hqk,khd->qhd", weights, v).reshape(T, self.dim)
            x = x + attn @ self.wo[l].T
            xn = self._rmsnorm(x, self.rms_ffn[l])
            gate, up = xn @ self.w1[l].T, xn @ self.w3[l].T
            x = x + (gate / (1.0 + np.exp(-gate)) * up) @ self.w2[l].T
        return self._rmsnorm(x, self.rms_final) @ self.classifier.T

    def greedy(self, prompt, length):
        tokens = list(prompt)
        while len(tokens) < length:
            tokens.append(int(np.argmax(self.forward(tokens)[-1])))
        return tokens


@pytest.fixture(scope="module")
def reference(stories260k_path):
    return Llama2cReference(stories260k_path)


def random_tokens(seed, length, bos_first=True):
    tokens = np.random.RandomState(seed).randint(0, 512, size=length).tolist()
    if bos_first:
        tokens[0] = BOS
    return tokens


def run_cli(cli, *args):
    return subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True, timeout=120)


def cli_logits(cli, model, tokens, all_positions=True, positions=None):
    args = ["logits", "--model", model, "--tokens", ",".join(map(str, tokens))]
    if positions is not None:
        args += ["--positions", ",".join(map(str, positions))]
    if all_positions:
        args.append("--all-positions")
    result = run_cli(cli, *args)
    assert result.returncode == 0, f"orbit {' '.join(map(str, args))} failed:\n{result.stderr}"
    output = json.loads(result.stdout)
    assert output["tokens"] == list(tokens)
    return np.asarray(output["logits"], dtype=np.float64)


def assert_close(actual, expected, label):
    diff = np.abs(actual - expected)
    position = int(np.unravel_index(np.argmax(diff), diff.shape)[0])
    print(f"{label}: max |cli - numpy| = {diff.max():.3e} at position {position}")
    assert diff.max() <= TOLERANCE, f"{label}: max abs diff {diff.max():.3e} at position {position}"


# ---- the reference itself ----------------------------------------------------------------------------


def test_reference_reads_stories260k(reference):
    assert (reference.dim, reference.hidden, reference.layers) == (64, 172, 5)
    assert (reference.heads, reference.kv_heads, reference.vocab, reference.seq_len) == (8, 4, 512, 512)
    assert reference.shared_classifier
    logits = reference.forward([BOS])[0]
    assert np.all(np.isfinite(logits)) and np.ptp(logits) > 5.0  # a trained model: a confident guess


def test_reference_is_causal_and_position_sensitive(reference):
    tokens = random_tokens(5, 20)
    full = reference.forward(tokens)
    # A prefix's logits do not depend on what follows it.
    np.testing.assert_allclose(reference.forward(tokens[:9]), full[:9], atol=1e-12)
    # RoPE is relative: a uniform shift changes nothing beyond rounding ...
    np.testing.assert_allclose(reference.forward(tokens, np.arange(20) + 50), full, atol=1e-9)
    # ... but a gap in the positions changes every logit after it.
    gapped = np.arange(20) + np.where(np.arange(20) >= 10, 37, 0)
    moved = reference.forward(tokens, gapped)
    np.testing.assert_allclose(moved[:10], full[:10], atol=1e-12)
    assert np.abs(moved[10:] - full[10:]).max(axis=1).min() > 1e-3


# ---- the CLI against the reference -------------------------------------------------------------------

SEQUENCES = {
    "bos-only": [BOS],
    "bos-fixed-7": [BOS, 5, 9, 300, 17, 42, 511],
    "random-64": random_tokens(64, 64, bos_first=False),
    "bos-random-300": random_tokens(300, 300),
}


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_cli_all_positions_match_reference(orbit_cli, stories260k_path, reference, name):
    tokens = SEQUENCES[name]
    actual = cli_logits(orbit_cli, stories260k_path, tokens)
    expected = reference.forward(tokens)
    assert actual.shape == expected.shape == (len(tokens), 512)
    assert_close(actual, expected, name)


def test_cli_greedy_text_matches_reference(orbit_cli, stories260k_path, reference):
    tokens = reference.greedy([BOS], 60)
    assert len(set(tokens)) > 10  # model-like text, not a loop on one token
    assert_close(cli_logits(orbit_cli, stories260k_path, tokens), reference.forward(tokens), "greedy-60")


def test_cli_last_position_only(orbit_cli, stories260k_path, reference):
    tokens = random_tokens(11, 33)
    actual = cli_logits(orbit_cli, stories260k_path, tokens, all_positions=False)
    assert actual.shape == (1, 512)
    assert_close(actual, reference.forward(tokens)[-1:], "last-position-33")


def test_cli_explicit_positions_match_reference(orbit_cli, stories260k_path, reference):
    tokens = random_tokens(17, 40)
    gapped = [t if t < 20 else t + 100 for t in range(40)]  # a gap changes relative distances
    actual = cli_logits(orbit_cli, stories260k_path, tokens, positions=gapped)
    assert_close(actual, reference.forward(tokens, gapped), "gapped-positions-40")
    assert np.abs(actual[20:] - reference.forward(tokens)[20:]).max() > 1e-2  # the positions were used


# ---- bad input: a non-zero exit and a message naming what is wrong -----------------------------------


def assert_fails_naming(result, *names):
    assert result.returncode != 0, f"expected failure, got exit 0 with stdout:\n{result.stdout[:500]}"
    assert result.stderr.strip(), "failure without a message on stderr"
    for name in names:
        assert name in result.stderr, f"stderr does not name {name!r}:\n{result.stderr}"
    assert "Traceback" not in result.stderr and "terminate called" not in result.stderr


def test_cli_rejects_non_numeric_token(orbit_cli, stories260k_path):
    assert_fails_naming(run_cli(orbit_cli, "logits", "--model", stories260k_path, "--tokens", "1,x"), "--tokens")


def test_cli_rejects_token_out_of_vocab(orbit_cli, stories260k_path):
    result = run_cli(orbit_cli, "logits", "--model", stories260k_path, "--tokens", "1,512", "--all-positions")
    assert_fails_naming(result, "512")
    assert "--tokens" in result.stderr or "token" in result.stderr.lower()


def test_cli_rejects_missing_model(orbit_cli, tmp_path):
    missing = tmp_path / "no_such_model.bin"
    assert_fails_naming(run_cli(orbit_cli, "logits", "--model", missing, "--tokens", "1,5"), str(missing))


def test_cli_rejects_position_past_the_limit(orbit_cli, stories260k_path):
    result = run_cli(orbit_cli, "logits", "--model", stories260k_path, "--tokens", "1,5", "--positions", "0,512")
    assert_fails_naming(result, "positions", "512")
