"""ChunkOptions.pin keeps a chunk's canonical pinned in the store however the chunk reaches it (add_tokens,
find_media): pinned at its first add, added again with pin=True after an add without (the record keeps the first
add's options, and the pin was dropped), or read from the store where an earlier engine stored it unpinned (a pin
took effect only where this engine encoded the canonical). A re-add without pin leaves a pin in place."""
TOKENS = [8, 9, 10, 11, 12, 13]
OTHER = [20, 21, 22]


def _pinned(engine):
    """Pinned entries per tier, and the tiers' entries (host and disk)."""
    tiers = {t.tier.name: t for t in engine.stats.store.tiers}
    return {name: (tiers[name].entries, tiers[name].pinned_entries) for name in ("host", "disk")}


def _open(orbit, path, store):
    return orbit.Engine(path, store_dir=store, background="inline")


def test_pin_at_the_first_add(orbit, stories260k_path, tmp_path):
    with _open(orbit, stories260k_path, tmp_path) as e:
        e.precompute(e.add_tokens(TOKENS, pin=True))
        e.precompute(e.add_tokens(OTHER))
        assert _pinned(e) == {"host": (2, 1), "disk": (2, 1)}


def test_pin_at_a_second_add_before_and_after_the_canonical_is_stored(orbit, stories260k_path, tmp_path):
    with _open(orbit, stories260k_path, tmp_path) as e:
        c = e.add_tokens(TOKENS, label="first")
        e.precompute(c)
        assert _pinned(e) == {"host": (1, 0), "disk": (1, 0)}
        again = e.add_tokens(TOKENS, pin=True, label="second")
        assert again == c and again.label == "first"  # the first add's record, as documented
        assert _pinned(e) == {"host": (1, 1), "disk": (1, 1)}  # stored already: pinned there now
        e.add_tokens(TOKENS)  # a re-add without pin does not unpin
        assert _pinned(e) == {"host": (1, 1), "disk": (1, 1)}
    with _open(orbit, stories260k_path, tmp_path / "b") as e:
        c = e.add_tokens(OTHER)
        e.add_tokens(OTHER, pin=True)  # not stored yet: pinned when it is
        e.precompute(c)
        assert _pinned(e) == {"host": (1, 1), "disk": (1, 1)}


def test_pin_of_a_canonical_an_earlier_engine_stored(orbit, stories260k_path, tmp_path):
    with _open(orbit, stories260k_path, tmp_path) as first:
        first.precompute(first.add_tokens(TOKENS))
        assert _pinned(first)["disk"] == (1, 0)
    with _open(orbit, stories260k_path, tmp_path) as second:
        c = second.add_tokens(TOKENS, pin=True)
        second.precompute(c)  # read from the store, not encoded
        assert second.stats.forward_tokens == 0
        assert _pinned(second) == {"host": (1, 1), "disk": (1, 1)}


def test_find_media_with_pin_pins_a_chunk_registered_without(orbit, stories260k_path, tmp_path):
    import numpy as np

    with _open(orbit, stories260k_path, tmp_path) as e:
        rows = np.linspace(-1, 1, 4 * e.model_info.hidden_size, dtype=np.float32).reshape(4, -1)
        ref = e.add_embeddings(rows, media_digest="frame-3")
        e.precompute(ref)
        assert e.find_media("frame-3", rows=4) == ref  # registered here: found without a pin, none added
        host = {t.tier.name: t for t in e.stats.store.tiers}["host"]
        assert host.pinned_entries == 0
        assert e.find_media("frame-3", rows=4, pin=True) == ref
        host = {t.tier.name: t for t in e.stats.store.tiers}["host"]
        assert host.pinned_entries == 1  # the canonical (the embeddings' cache entry was stored unpinned)
