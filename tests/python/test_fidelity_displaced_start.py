"""A chunk admitted or recalled in front of the window's first instance: that instance was formed alone at
position 0 (it held the attention sink) and, kept, is served blind behind content. The fidelity model prices it
at planner::kDisplacedStartFactor times the blind loss at its recency weight; before, at 1x, plans predicted
1e-3 to 2e-3 here and the window measured 0.06 to 0.14 (tinystories-656k), far past the 3e-3 budget.

The statistic is the one predicted_kl predicts: the next-token KL against a re-prefill (reference_logits),
mean over the rows of a text query read after the window (planner/fidelity_model.h).

Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python (see conftest.py).
"""
import numpy as np
import pytest

PAGE = 4
POOL = 8 << 20
FIRST = " Once upon a time, there was a little girl named Lily. She lived in a small house near a big green hill."
PAGES = [
    " One day, Tom found a red ball under an old tree. The ball was shiny and round.",
    " Ben had a toy car that he loved very much. His sister Sue wanted to play too.",
    " A little bird sat on the fence and sang a song. The sun was warm and the flowers were pretty.",
]
TURN = " They laughed and played together all day."
QUERY = " Lily went to the park and saw"


def mean_kl(w, query):
    a = w.logits(query, all_rows=True).astype(np.float64)
    b = w.reference_logits(query, all_rows=True).astype(np.float64)
    la = a - a.max(-1, keepdims=True)
    la -= np.log(np.exp(la).sum(-1, keepdims=True))
    lb = b - b.max(-1, keepdims=True)
    lb -= np.log(np.exp(lb).sum(-1, keepdims=True))
    return float((np.exp(lb) * (lb - la)).sum(-1).mean())


@pytest.mark.parametrize("fork", [False, True])
def test_a_recall_in_front_of_the_first_chunk_is_priced_by_what_it_loses(orbit, models_dir, fork):
    # tinystories-656k: stories260K's keep measured within the budget before too (its ratio is ~10x lower).
    with orbit.Engine(str(models_dir / "tinystories-656k"), pool_bytes=POOL, page_size=PAGE, background="inline") as e:
        first = e.add_text(FIRST, bos=True)
        pages = [e.add_text(t) for t in PAGES]
        w = e.new_window()  # the default policy, its 3e-3 budget
        w.admit(first)
        for p in pages:
            w.admit(p)
        w.add_turn(e.tokenize(TURN, bos=False))
        w.evict([i for i in w.instances if not i.is_turn and i.chunk == pages[0]][0].id)
        if fork:
            w = w.fork()
        plan = w.plan_recall(pages[0], before=w.instances[0].id)
        (kept,) = [s for s in plan if not s.is_turn and s.chunk == first]
        w.apply(plan)
        measured = mean_kl(w, e.tokenize(QUERY, bos=False))
        budget = w.policy.kl_budget
        # The first chunk, kept, would carry what the budget does not allow: the plan re-forms it behind the
        # recalled one instead, and the window holds the budget it predicted.
        assert plan.predicted_kl <= budget
        assert measured <= budget, (measured, plan.predicted_kl, kept)


# A recall in front of a window of short chunks and a turn, where the budget repairs the displaced first chunk
# by a recompute (held-out seeds 1 and 10 of the displaced-start probe, tinystories-656k text): its first
# chunk was priced as a CacheBlend recompute at the blind loss of the tokens left canonical, without the
# displaced start's factor and at the reference sensitivity (nothing measured a chunk formed at position 0),
# and the window measured 5.2e-3 and 5.2e-3 past the 3e-3 budget (predicted 2.0e-3 and 1.2e-4).
RECOMPUTED = {
    "seed1": ([' Mom said, "Time for lunch!"', " Then the string broke and the kite flew away.",
               " They laughed and played together all day.",
               " They laughed and played together all day. The old man smiled and waved at the children."],
              " His sister Sue wanted to play too.", " Lily went to the park and saw"),
    "seed10": ([" His sister Sue wanted to play too.",
                ' Mom said, "Time for lunch!" Once upon a time, there was a little girl named Lily.',
                " At first Ben said no, but then he shared his car.",
                " Then the string broke and the kite flew away. The old man smiled and waved at the children."],
               " The wind was strong and the kite went up high.", ' Then Tom said, "Let us'),
}


def recall_in_front(orbit, e, texts, turn):
    chunks = [e.add_text(t, bos=(i == 0)) for i, t in enumerate(texts)]
    w = e.new_window()  # the default policy, its 3e-3 budget
    for c in chunks:
        w.admit(c)
    w.add_turn(e.tokenize(turn, bos=False))
    w.evict(w.instances[1].id)
    return w, chunks, w.plan_recall(chunks[1], before=w.instances[0].id)


@pytest.mark.parametrize("case", sorted(RECOMPUTED))
def test_a_recompute_of_the_displaced_first_chunk_keeps_the_budget(orbit, models_dir, case):
    texts, turn, query = RECOMPUTED[case]
    with orbit.Engine(str(models_dir / "tinystories-656k"), pool_bytes=POOL, page_size=PAGE, background="inline") as e:
        w, chunks, plan = recall_in_front(orbit, e, texts, turn)
        w.apply(plan)
        measured = mean_kl(w, e.tokenize(query, bos=False)[:8])
        budget = w.policy.kl_budget
        assert plan.predicted_kl <= budget
        assert measured <= budget, (measured, plan.predicted_kl, [(s.how, s.predicted_kl) for s in plan])


def test_a_chunk_nothing_measured_is_priced_at_the_worst_sensitivity_measured(orbit, models_dir):
    # The first chunk, formed at position 0, has no patch and so no sensitivity of its own; the chunks admitted
    # behind it were formed as patches and measured. Its prediction is scaled by the largest of theirs, not
    # by the reference (factor 1): tinystories-656k's chunks measure 9-25x the reference sensitivity.
    texts, turn, _ = RECOMPUTED["seed1"]
    with orbit.Engine(str(models_dir / "tinystories-656k"), pool_bytes=POOL, page_size=PAGE, background="inline") as e:
        w, chunks, plan = recall_in_front(orbit, e, texts, turn)
        steps = {s.chunk: s for s in plan if not s.is_turn}
        measured = [steps[c].sensitivity for c in chunks[2:] if steps[c].sensitivity >= 0]
        assert measured, [(s.how, s.sensitivity) for s in plan]
        assert steps[chunks[0]].sensitivity >= max(measured), [(s.how, s.sensitivity) for s in plan]
