"""A patch stored by an earlier engine is priced, after the store is reopened, by the residual and sensitivity
stored with it, as the engine that formed it priced it: not by the rank's stand-in and the engine's sensitivity
prior (the worst it has seen, which grows with the patches it reads, so a plan once took a form over the
stored patch after an earlier sync had read more sensitive ones)."""
import pytest

PAGE = 4
POOL = 8 << 20
POLICY = "patch:16:noreuse"  # truncated patches; no exact reuse of the forward (it would serve B first)


def _plan_b(engine, a, b):
    w = engine.new_window(policy=POLICY)
    w.admit(a)
    step = next(s for s in w.plan_admit(b).steps if s.chunk == b)
    w.close()
    return step


def test_reopened_store_prices_a_stored_patch_by_its_own_facts(orbit, stories260k_path, tmp_path):
    a_tokens = [(7 * i + 3) % 500 + 3 for i in range(48)]
    b_tokens = [(11 * i + 5) % 500 + 3 for i in range(40)]
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, store_dir=tmp_path,
                      background="inline") as first:
        a, b = first.add_tokens(a_tokens), first.add_tokens(b_tokens)
        w = first.new_window(policy=POLICY)
        w.admit(a)
        plan = w.plan_admit(b)
        assert plan.steps[-1].how == "form"  # first sight behind A: its patch formed and stored
        w.apply(plan)
        w.close()
        formed = _plan_b(first, a, b)  # this engine knows the patch's residual and B's sensitivity
        assert (formed.how, formed.match) == ("stored-patch", orbit.PatchMatch.exact)
        assert not formed.exact and formed.predicted_kl > 0  # rank 16: truncated, priced by its residual
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, store_dir=tmp_path,
                      background="inline") as second:
        a, b = second.add_tokens(a_tokens), second.add_tokens(b_tokens)
        stored = _plan_b(second, a, b)  # read from the store: nothing in this engine has seen B's patch
        assert (stored.how, stored.match, stored.patch_key) == ("stored-patch", orbit.PatchMatch.exact,
                                                                formed.patch_key)
        assert stored.predicted_kl == pytest.approx(formed.predicted_kl, rel=1e-6)
        assert second.stats.patches_formed == 0


STALE = "patch:16:noreuse:stale=0.9"  # a patch formed under another context is read when close enough


def _plan_b_behind(engine, before, b, policy=STALE):
    w = engine.new_window(policy=policy)
    for c in before:
        w.admit(c)
    step = next(s for s in w.plan_admit(b).steps if s.chunk == b)
    w.close()
    return step


def test_reopened_store_finds_a_stale_patch_an_earlier_engine_formed(orbit, stories260k_path, tmp_path):
    """The contexts a chunk's patches were formed under are kept in the store (the chunk's patch directory):
    before, an engine opened later found a patch only by its exact or orbit key, and formed the chunk again
    behind a context that differed by one chunk, where the engine that formed the patch read it as stale."""
    a_tokens = [(7 * i + 3) % 500 + 3 for i in range(48)]
    b_tokens = [(11 * i + 5) % 500 + 3 for i in range(40)]
    c_tokens = [(13 * i + 1) % 500 + 3 for i in range(8)]
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, store_dir=tmp_path,
                      background="inline") as first:
        a, b, c = (first.add_tokens(t) for t in (a_tokens, b_tokens, c_tokens))
        w = first.new_window(policy=STALE)
        w.admit(a)
        w.admit(b)  # formed behind A, its patch stored
        w.close()
        assert first.stats.patches_formed == 1
        here = _plan_b_behind(first, [a, c], b)
        assert (here.how, here.match) == ("stored-patch", orbit.PatchMatch.stale)
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, store_dir=tmp_path,
                      background="inline") as second:
        a, b, c = (second.add_tokens(t) for t in (a_tokens, b_tokens, c_tokens))
        later = _plan_b_behind(second, [a, c], b)
        assert (later.how, later.match, later.patch_key) == ("stored-patch", orbit.PatchMatch.stale, here.patch_key)
        assert later.divergence == pytest.approx(here.divergence, rel=1e-12)
        assert later.predicted_kl == pytest.approx(here.predicted_kl, rel=1e-6)
        w = second.new_window(policy=STALE)
        w.admit(a)
        w.admit(c)
        report = w.admit(b)
        assert report.patch_hits == 1 and report.patches_formed == 0
        w.close()
        assert second.stats.patches_formed == 0


def _tokens(seed, n):
    return [(seed * 31 + 17 * i) % 500 + 3 for i in range(n)]


def test_a_reopened_store_lists_sixteen_formations_of_a_chunk(orbit, stories260k_path, tmp_path):
    """A chunk's directory and its stale lookups count formations: each patch is stored under its exact and its
    orbit key, and both were listed, so only the newest 8 contexts of the 16 were kept."""
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, store_dir=tmp_path,
                      background="inline") as first:
        a, b, c = first.add_tokens(_tokens(1, 48)), first.add_tokens(_tokens(2, 40)), first.add_tokens(_tokens(3, 8))
        zs = [first.add_tokens(_tokens(10 + i, 8)) for i in range(12)]
        for z in zs:
            w = first.new_window(policy="patch:16:noreuse")
            for chunk in (a, z, b):
                w.admit(chunk)
            w.close()
        here = _plan_b_behind(first, [a, zs[1], c], b)  # the 11th newest context: A, Z1 (+ C)
    with orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, store_dir=tmp_path,
                      background="inline") as second:
        a, b, c = second.add_tokens(_tokens(1, 48)), second.add_tokens(_tokens(2, 40)), second.add_tokens(_tokens(3, 8))
        z1 = second.add_tokens(_tokens(11, 8))
        later = _plan_b_behind(second, [a, z1, c], b)
    # Behind A, Z1, C: the patch formed behind A, Z1 shares 56 of 64 tokens (divergence 1/8); any other, 48 of 72.
    assert here.match == later.match == orbit.PatchMatch.stale
    assert here.divergence == pytest.approx(0.125) and later.divergence == pytest.approx(0.125)
    assert later.patch_key == here.patch_key


def test_engines_open_on_one_store_keep_each_others_directory(orbit, stories260k_path, tmp_path):
    """Two engines on one store each form the chunk behind a context of their own: a third finds both patches.
    The second wrote the directory it had read before the first formed, so the first's context was lost to later
    engines."""
    def engine():
        return orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, store_dir=tmp_path,
                            background="inline")

    with engine() as one, engine() as two:
        # The second looks B up first (it reads B's directory: none yet), then the first forms B, then the second.
        _plan_b_behind(two, [two.add_tokens(_tokens(3, 8))], two.add_tokens(_tokens(2, 40)))
        for e, ctx in ((one, 4), (two, 5)):
            x, b = e.add_tokens(_tokens(ctx, 48)), e.add_tokens(_tokens(2, 40))
            w = e.new_window(policy="patch:16:noreuse")
            w.admit(x)
            w.admit(b)
            w.close()
    with engine() as third:
        b, c = third.add_tokens(_tokens(2, 40)), third.add_tokens(_tokens(3, 8))
        for ctx in (4, 5):
            step = _plan_b_behind(third, [third.add_tokens(_tokens(ctx, 48)), c], b)
            assert step.match == orbit.PatchMatch.stale
            assert step.divergence == pytest.approx(1 - 48 / 56)  # its own context: 48 of 56 tokens


def _form_b_behind_a(engine, policy, a, b):
    w = engine.new_window(policy=policy)
    w.admit(a)
    w.admit(b)  # formed behind A, its patch stored
    w.close()


@pytest.mark.parametrize("reopen", [False, True])
def test_a_stale_lookup_reads_no_patch_of_a_lower_rank(orbit, stories260k_path, tmp_path, reopen):
    """A stale patch is priced by its divergence alone, as a patch of the rank the plan asks for: a rank-4
    patch read by a rank-16 plan leaves out more of the deficit than that price says. It was read, before."""
    a_tokens = [(7 * i + 3) % 500 + 3 for i in range(48)]
    b_tokens = [(11 * i + 5) % 500 + 3 for i in range(40)]
    c_tokens = [(13 * i + 1) % 500 + 3 for i in range(8)]

    def engine():
        return orbit.Engine(stories260k_path, pool_bytes=POOL, page_size=PAGE, store_dir=tmp_path,
                            background="inline")

    def check(eng, a, b, c):
        low = _plan_b_behind(eng, [a, c], b, "patch:4:noreuse:stale=0.9")
        assert (low.how, low.match) == ("stored-patch", orbit.PatchMatch.stale)
        assert (low.rank_k, low.rank_v) == (4, 4)
        high = _plan_b_behind(eng, [a, c], b, STALE)  # rank 16
        assert high.match != orbit.PatchMatch.stale and high.how != "stored-patch"
        # A rank-16 patch serves a plan that asks for rank 4 (it leaves out less).
        _form_b_behind_a(eng, STALE, a, b)
        again = _plan_b_behind(eng, [a, c], b, "patch:4:noreuse:stale=0.9")
        assert (again.how, again.match) == ("stored-patch", orbit.PatchMatch.stale)
        assert again.patch_key != low.patch_key  # the same divergence: the newest, rank 16
        assert (again.rank_k, again.rank_v) == (16, 16)  # the ranks read, not the plan's
        assert _plan_b_behind(eng, [a, c], b, STALE).match == orbit.PatchMatch.stale

    with engine() as first:
        chunks = [first.add_tokens(t) for t in (a_tokens, b_tokens, c_tokens)]
        _form_b_behind_a(first, "patch:4:noreuse", chunks[0], chunks[1])
        assert first.stats.patches_formed == 1
        if not reopen:
            check(first, *chunks)
    if reopen:
        with engine() as second:
            check(second, *(second.add_tokens(t) for t in (a_tokens, b_tokens, c_tokens)))
