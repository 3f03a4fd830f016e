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
