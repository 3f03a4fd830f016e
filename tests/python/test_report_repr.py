"""Every report and result the module returns names all its fields in its repr (field_repr.h): IdleReport's left
heal_planned and most of the heal's and check's fields out, ApplyReport its bytes and pages, the store's reports
all but two or three counts."""
POOL, PAGE = 8 << 20, 16


def fields(obj):
    """The properties obj's class defines (its fields, read-only), in the order it defines them."""
    return [name for name, attr in vars(type(obj)).items() if isinstance(attr, property)]


def assert_names_every_field(obj):
    text = repr(obj)
    assert text.startswith(type(obj).__name__ + "("), text
    missing = [name for name in fields(obj) if f"{name}=" not in text]
    assert fields(obj) and not missing, f"{type(obj).__name__}'s repr leaves out {missing}: {text}"


def test_window_reports_name_every_field(orbit, stories260k_path):
    with orbit.Engine(str(stories260k_path), pool_bytes=POOL, page_size=PAGE) as e:
        w = e.new_window(policy="default")
        doc = e.add_tokens(e.tokenize(" a little girl had a red ball", False), label="doc")
        applied = w.admit(doc)
        w.add_turn(e.tokenize(" She liked to play", False))
        query = e.tokenize(" One day", False)
        generation = w.generate(query, max_tokens=40, logprobs=True)
        reports = [applied, w.idle(), generation, w.disposable(applied.added[0], query, answer_tokens=2)]
        reports += w.loss_by_instance(query)[:1]
        sync = e.new_window().sync([{"role": "user", "content": "Once upon a time"}])
        reports.append(sync)
        for report in reports:
            assert_names_every_field(report)
        assert type(applied).__name__ == "ApplyReport" and "op=admit" in repr(applied)  # an enum by its name
        assert "heal_planned=" in repr(reports[1])
        assert f"reports=[{len(sync.reports)} ApplyReport]" in repr(sync)  # a list of objects by its length
        # A list of up to 32 numbers whole, a longer one by its length.
        n = len(generation.tokens)
        assert (f"tokens=[{n} int]" if n > 32 else f"tokens={generation.tokens!r}") in repr(generation)
        assert f"logprobs=[{n} StepLogprobs]" in repr(generation)


def test_store_reports_name_every_field(orbit, stories260k_path, tmp_path):
    store = tmp_path / "store"
    with orbit.Engine(str(stories260k_path), store_dir=str(store), pool_bytes=POOL, page_size=PAGE) as e:
        e.precompute(e.add_tokens([3, 14, 15, 92, 65, 35]))
    for report in (orbit.store_summary(store), orbit.store_verify(store), orbit.store_gc(store, dry_run=True),
                   orbit.store_repair(store), orbit.store_remote_summary("redis://127.0.0.1:1")):
        assert_names_every_field(report)


def test_calibration_report_names_every_field(orbit, stories260k_path):
    with orbit.Engine(str(stories260k_path), pool_bytes=POOL) as e:
        assert_names_every_field(e.calibrate_fidelity())
