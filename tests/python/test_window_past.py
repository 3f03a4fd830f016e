"""Engine(window_past=...): a window keeps its KV as one contiguous past between reads (counted in
Window.stats().past_bytes) or gathers it at every read; the answers are the same either way."""

CHUNKS = [[5, 17, 42, 99, 100], [7, 8, 9, 10], [11, 12, 13, 14, 15, 16], [20, 21, 22]]


def replay(orbit, model, window_past):
    with orbit.Engine(str(model), pool_bytes=8 << 20, page_size=4, background="inline",
                      window_past=window_past) as engine:
        assert engine.options.window_past is window_past
        window = engine.new_window()
        refs = [engine.add_tokens(t) for t in CHUNKS]
        out = []
        for ref in refs:
            window.admit(ref)
            out.append(window.logits([3, 4], all_rows=True).tolist())
        window.evict(window.instances[1].id)
        out.append(window.logits([3, 4]).tolist())
        fork = window.fork()
        fork.admit(refs[1])
        out.append(list(fork.generate([3, 4], max_tokens=6).tokens))
        out.append(list(window.generate([3, 4], max_tokens=6).tokens))
        kept = window.stats.past_bytes
        assert "past_bytes=" in repr(window.stats)
        return out, kept


def test_a_kept_past_reads_what_a_gathered_one_reads(orbit, stories260k_path):
    kept, kept_bytes = replay(orbit, stories260k_path, True)
    gathered, gathered_bytes = replay(orbit, stories260k_path, False)
    assert kept == gathered
    assert kept_bytes > 0 and gathered_bytes == 0
