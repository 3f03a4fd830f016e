"""Window.loss_by_instance: each approximate instance's own share of the window's fidelity loss, against a
numpy KL of the window's logits and a re-prefill's.

Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python (see conftest.py).
"""
import random

import numpy as np
import pytest

from window_helpers import make_chunks, random_tokens


def log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def test_loss_by_instance_attributes_the_window_loss(orbit, small_engine):
    engine = small_engine
    rng = random.Random(31)
    a, b = make_chunks(engine, rng, 2)
    q = random_tokens(rng, 3)
    w = engine.new_window(policy=orbit.Policy("blind"))
    w.admit(a)  # at position 0: exact
    w.admit(b)  # blind: approximate
    losses = w.loss_by_instance(q)
    assert len(losses) == 1
    (only,) = losses
    second = w.instances[1]
    assert only.instance == second.id and only.label == second.chunk.label and only.length == second.length
    assert only.formed_by == orbit.StepAction.blind and only.kv_change > 1e-3 and only.predicted_kl > 0
    # one approximate instance: its own loss is the window's
    lp = log_softmax(w.reference_logits(q, all_rows=True).astype(np.float64))
    lq = log_softmax(w.logits(q, all_rows=True).astype(np.float64))
    kl = float((np.exp(lp) * (lp - lq)).sum(-1).mean())
    assert only.measured_kl == pytest.approx(kl, rel=1e-3)
    assert "InstanceLoss(" in repr(only)
    exact = engine.new_window(policy=orbit.Policy("reprefill"))
    exact.admit(a)
    exact.admit(b)
    assert exact.loss_by_instance(q) == []
