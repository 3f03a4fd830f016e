"""bench/replay/yardstick.py: the report scripts' one prefix-cache yardstick per trace. Every policy's yardstick
totals become those of the run that cost the radix cache least (all its fields together, the first listed among
equals), each policy's own kept as `<field>_own`; rewriting twice changes nothing; a second replay of the same
trace takes the first one's yardstick (`like`), rewritten first if it was not."""
import copy
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench" / "replay"))
from yardstick import neutral  # noqa: E402


def policy(name, radix, calls, blocks):
    return {"policy": name, "totals": {"radix_tokens": radix, "radix_call_tokens": calls,
                                       "block_cache_tokens": blocks, "critical_forward_tokens": 100}}


def report(*policies):
    return {"trace": "t", "policies": list(policies)}


def test_every_policy_reads_the_cheapest_run():
    r = neutral(report(policy("default", 500, 284, 636), policy("prefix", 456, 240, 588),
                       policy("blind", 456, 250, 590)))
    for p in r["policies"]:
        t = p["totals"]
        # prefix's run, all fields from it (blind ties on radix_tokens but comes later)
        assert (t["radix_tokens"], t["radix_call_tokens"], t["block_cache_tokens"]) == (456, 240, 588)
        assert t["yardstick_policy"] == "prefix"
        assert t["critical_forward_tokens"] == 100  # not a yardstick: untouched
    own = [(p["totals"]["radix_tokens_own"], p["totals"]["radix_call_tokens_own"]) for p in r["policies"]]
    assert own == [(500, 284), (456, 240), (456, 250)]


def test_rewriting_twice_changes_nothing():
    r = neutral(report(policy("default", 500, 284, 636), policy("prefix", 456, 240, 588)))
    again = neutral(copy.deepcopy(r))
    assert again == r


def test_a_second_replay_takes_the_first_ones_yardstick():
    first = report(policy("default", 500, 284, 636), policy("prefix", 456, 240, 588))
    sweep = neutral(report(policy("patch:16:kl=0.006", 520, 300, 650)), like=first)  # first not rewritten yet
    t = sweep["policies"][0]["totals"]
    assert (t["radix_tokens"], t["radix_call_tokens"], t["yardstick_policy"]) == (456, 240, "prefix")
    assert t["radix_tokens_own"] == 520
    assert first["policies"][0]["totals"]["radix_tokens"] == 456  # rewritten on the way


def test_a_report_without_yardsticks_is_returned_as_it_is():
    r = {"trace": "t", "policies": [{"policy": "default", "totals": {"critical_forward_tokens": 3}}]}
    assert neutral(copy.deepcopy(r)) == r
