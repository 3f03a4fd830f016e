"""Python-side validation: values that used to be silently reinterpreted are refused with a message
naming the field. Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python."""
import pytest


@pytest.mark.parametrize("field", ["rank", "rank_k", "rank_v"])
def test_negative_rank_is_refused_not_read_as_full(orbit, field):
    with pytest.raises(ValueError, match=f"WindowPolicy.{field} = -1 must be a positive int or 'full'"):
        orbit.Policy("patch:8", **{field: -1})
    full = orbit.Policy("patch:8", **{field: "full"})
    assert full.rank_k == -1 or full.rank_v == -1  # 'full' still selects every singular direction
    assert orbit.Policy("patch:8", **{field: 3}) != full


def test_page_size_past_the_bound_is_an_error_not_a_crash(orbit, stories260k_path):
    # 2**62 tokens per page overflowed the page's byte size to 0, then divided by it (SIGFPE).
    with pytest.raises(orbit.OrbitError, match=r"EngineOptions::page_size must be <= 1048576 tokens"):
        orbit.Engine(stories260k_path, page_size=2**62)


@pytest.mark.parametrize("field", ["max_tokens", "note"])
def test_load_trace_refuses_deep_nesting_without_crashing(orbit, tmp_path, field):
    # The error message used to dump() the value, recursing once per level until the stack overflowed.
    deep = "[" * 100000 + "]" * 100000
    path = tmp_path / "deep.json"
    path.write_text('{"format": "orbit-trace/1", "probe": [1], "chunks": [], '
                    '"steps": [{"op": "generate", "%s": %s}]}' % (field, deep))
    with pytest.raises(orbit.OrbitError, match="JSON nests deeper than 128 levels"):
        orbit.load_trace(str(path))


def test_load_trace_reports_an_out_of_range_number(orbit, tmp_path):
    path = tmp_path / "big.json"
    path.write_text('{"format": "orbit-trace/1", "probe": [1e999], "chunks": [], "steps": []}')
    with pytest.raises(orbit.OrbitError, match="not valid JSON: a number is out of range"):
        orbit.load_trace(str(path))
