"""Policies from Python: spec strings and keyword arguments, their round trip through `name`, the errors
that name a bad field, and a window's policy property.

Needs the built module: ORBIT_PYTHON_PATH=<build>/bindings/python (see conftest.py).
"""
import copy
import random

import pytest

def test_policy_spec_and_keyword_arguments(orbit):
    p = orbit.Policy("patch:16")
    assert p.name == "patch:16" and p.rank_k == 16 and p.on_miss == orbit.MissAction.form
    assert orbit.Policy() != p and orbit.WindowPolicy is orbit.Policy
    d = orbit.Policy()  # the default policy: patch:16 with a per-step KL budget; 'default' names it
    assert d == orbit.Policy("default") and d.kl_budget > 0 and p.kl_budget == 0 and d.rank_k == 16
    # idle time: test_idle.py
    assert d.replace(kl_budget=0, heal_when_idle=False, prepare_recalls=0, prepare_moves=0, prepare_lists=0) == p
    # read-through (the share of a fresh instance's weight a kept one is priced by): a field and a spec modifier
    assert d.read_through == 0.3 and d.replace(read_through=0) != d
    assert orbit.Policy("patch:16:kl=0.003:through=0.5").read_through == 0.5
    assert d.replace(read_through=0.5).name.endswith(":through=0.5")
    with pytest.raises(ValueError, match="read_through"):
        d.replace(read_through=1.5)
    # the last query's attention as a floor under a kept instance's weight: a field and a spec modifier
    assert d.attention_weight == 1.0 and d.replace(attention_weight=0) != d
    assert orbit.Policy("patch:16:kl=0.003:attend=3").attention_weight == 3
    assert d.replace(attention_weight=3).name.endswith(":attend=3")
    with pytest.raises(ValueError, match="attention_weight"):
        d.replace(attention_weight=-1)
    # the content matches of the window's last tokens as a floor under a kept instance's weight (off by default)
    assert d.content_weight == 0.0 and d.replace(content_weight=1) != d
    assert orbit.Policy("patch:16:kl=0.003:match=2").content_weight == 2
    assert d.replace(content_weight=2).name.endswith(":match=2")
    with pytest.raises(ValueError, match="content_weight"):
        d.replace(content_weight=-1)
    # the read's own attention, looked at before its plan (off by default; needs a budget)
    assert d.read_attention_weight == 0.0 and d.replace(read_attention_weight=1) != d
    assert orbit.Policy("patch:16:kl=0.003:look=2").read_attention_weight == 2
    assert d.replace(read_attention_weight=2).name.endswith(":look=2")
    assert orbit.Policy(orbit.Policy("throughput:look=0.5").name).read_attention_weight == 0.5
    with pytest.raises(ValueError, match="read_attention_weight"):
        d.replace(read_attention_weight=-1)
    with pytest.raises(orbit.OrbitError, match="look"):
        orbit.Policy("patch:16:kl=0.003:look=-1")
    with pytest.raises(orbit.OrbitError, match="read_attention_weight = 1 has no effect"):
        orbit.Policy("patch:16:look=1")
    # the look re-serving only what it weighs above its own weight (off by default; needs the look)
    only = orbit.Policy("patch:16:kl=0.003:look=1:lookonly")
    assert not d.read_attention_raised_only and only.read_attention_raised_only and only != only.replace(
        read_attention_raised_only=False)
    assert only.name.endswith(":look=1:lookonly") and orbit.Policy(only.name) == only
    assert d.replace(read_attention_weight=1, read_attention_raised_only=True).name.endswith(":lookonly")
    with pytest.raises(orbit.OrbitError, match="read_attention_raised_only = true has no effect"):
        orbit.Policy("patch:16:kl=0.003:lookonly")
    with pytest.raises(ValueError, match="read_attention_raised_only"):
        d.replace(read_attention_raised_only=True)
    full = orbit.Policy("patch:full:exact")
    assert full.rank_k == -1 and full.survivors == orbit.SurvivorAction.recondition
    q = orbit.Policy("patch:8", survivors="recondition", stale=orbit.StalePatch.accept, max_divergence=0.5)
    assert q.rank_k == 8 and q.survivors == orbit.SurvivorAction.recondition and q.max_divergence == 0.5
    k = orbit.Policy(on_miss="token-recompute", recompute_ratio=0.3, rank="full", kl_budget=0)
    assert k.on_miss == orbit.MissAction.token_recompute and k.rank_v == -1 and str(k.on_miss) == "token-recompute"
    r = p.replace(on_miss="blind", reuse_stored=False)
    assert r.on_miss == orbit.MissAction.blind and p.on_miss == orbit.MissAction.form
    c = copy.deepcopy(q)
    c.first_k = 4
    assert c.first_k == 4 and q.first_k != 4
    assert orbit.Policy(q) == q and repr(q).startswith("Policy('patch:8")
    assert "patch" in orbit.policy_help()
    with pytest.raises(orbit.OrbitError, match="unknown policy 'bogus'"):
        orbit.Policy("bogus")
    with pytest.raises(orbit.OrbitError, match="rank must be a positive integer"):
        orbit.Policy("patch:0")
    with pytest.raises(TypeError, match="unknown option 'bogus'"):
        orbit.Policy(bogus=1)
    with pytest.raises(ValueError, match="unknown value 'nope'.*form, blind"):
        orbit.Policy(on_miss="nope")
    with pytest.raises(ValueError, match="max_divergence = 2 must be in"):
        orbit.Policy(max_divergence=2)
    with pytest.raises(ValueError, match="positive int or 'full'"):
        orbit.Policy(rank=0)
    with pytest.raises(TypeError, match="expected bool"):
        orbit.Policy(deep_only="yes")
    with pytest.raises(TypeError, match="spec must be a string"):
        orbit.Policy(16)
    with pytest.raises(ValueError):
        p.recompute_ratio = 0.0


def test_window_policy_property(orbit, stories260k_path):
    with orbit.Engine(stories260k_path, pool_bytes=8 << 20, page_size=4) as engine:
        w = engine.new_window()
        assert w.policy == orbit.Policy()
        w.policy = "reprefill"
        assert w.policy.name == "reprefill"
        w.policy = orbit.Policy("blind")
        assert w.policy.on_miss == orbit.MissAction.blind


@pytest.mark.parametrize("spec, options, field", [
    ("blind", {"first_k": 5}, "first_k = 5"),
    ("blind", {"recompute_ratio": 0.5}, "recompute_ratio = 0.5"),
    ("patch:16", {"first_k": 5}, "first_k = 5"),
    ("patch:16", {"deep_energy": 0.5}, "deep_energy = 0.5"),
    ("reprefill", {"stale": "accept"}, "stale = accept"),
    ("patch:16", {"max_divergence": 0.5}, "max_divergence = 0.5"),
    ("patch:16", {"heal_min_kl": 0.1}, "heal_min_kl = 0.1"),
    (None, {"heal_when_idle": False, "heal_min_kl": 0.1}, "heal_min_kl = 0.1"),
    (None, {"heal_when_idle": False, "self_check": True}, "self_check = true"),
    ("patch:16:noreuse", {"prepare_lists": 2}, "prepare_lists = 2"),
    ("patch:16", {"trust_hints": 3}, "trust_hints = 3"),
    # Under a kl_budget each miss takes the action the budget prices best, and a changed context is kept while the
    # budget holds: these two are read only without one.
    (None, {"on_miss": "blind"}, "on_miss = blind"),
    ("default:eager", {"on_miss": "first_k"}, "on_miss = first-k"),
    (None, {"on_miss": "token_recompute"}, "on_miss = token-recompute"),
    (None, {"survivors": "recondition"}, "survivors = recondition"),
])
def test_policy_fields_the_strategy_never_reads_are_refused(orbit, spec, options, field):
    p = orbit.Policy(spec)
    with pytest.raises(ValueError, match=rf"WindowPolicy: {field} has no effect with strategy '.*' \(it applies to"):
        orbit.Policy(spec, **options)
    with pytest.raises(ValueError, match=field):
        p.replace(**options)


@pytest.mark.parametrize("field, enum", [("on_miss", "MissAction"), ("survivors", "SurvivorAction"),
                                         ("stale", "StalePatch")])
def test_an_enum_field_refuses_an_int_that_is_no_member(orbit, field, enum):
    # pybind11's enums took any int (MissAction(7)), which the policy would carry into C++ (its name printed '?',
    # or read as another member). The enum refuses it as it is made, so no policy field can hold one; a plain int
    # is refused by the field as any other wrong type is.
    with pytest.raises(ValueError, match=rf"{enum}\(value\): 7 is not a {enum} \(members: "):
        getattr(orbit, enum)(7)
    p = orbit.Policy()
    with pytest.raises((TypeError, ValueError), match=f"WindowPolicy.{field}"):
        setattr(p, field, 7)
    assert getattr(p, field) == getattr(orbit.Policy(), field)


def test_policy_fields_are_checked_on_the_whole_policy(orbit, stories260k_path):
    # Where the strategy reads a field, or the field keeps its default, it is accepted.
    assert orbit.Policy(first_k=5).first_k == 5  # the default policy's budget weighs first-k recomputes
    assert orbit.Policy("firstk:8", first_k=4).name == "firstk:4"
    assert orbit.Policy("patch:16:deep", deep_energy=0.5).deep_energy == 0.5
    assert orbit.Policy("blind", first_k=16, rank=4).on_miss == orbit.MissAction.blind
    assert orbit.Policy(reuse_computed=False).prepare_lists == 3
    # trust_hints (':hinted=N'): 2 unless given, printed when it differs, 0 never skips the learned lists
    assert orbit.Policy().trust_hints == 2 and orbit.Policy("patch:16:lists=3:hinted=0").trust_hints == 0
    assert orbit.Policy(trust_hints=0).name.endswith(":lists=3:hinted=0")
    with pytest.raises(orbit.OrbitError, match="':hinted=N' has no effect without ':lists=N' or ':move=N'"):
        orbit.Policy("patch:16:hinted=1")
    # replace() checks the policy it builds, not each step: switching strategy and its field together works
    firstk = orbit.Policy("blind").replace(first_k=4, on_miss="first_k")
    assert firstk.name == "firstk:4"
    with pytest.raises(ValueError, match="first_k = 4 has no effect with strategy 'blind'"):
        firstk.replace(on_miss="blind")
    with pytest.raises(orbit.OrbitError, match="':check' has no effect without ':heal'"):
        orbit.Policy("patch:16:check")
    # A field assigned on its own is checked when a window takes the policy.
    p = orbit.Policy("blind")
    p.first_k = 5
    with orbit.Engine(stories260k_path, pool_bytes=8 << 20, page_size=4) as engine:
        with pytest.raises(orbit.OrbitError, match="first_k = 5 has no effect with strategy 'blind'"):
            engine.new_window(policy=p)
        w = engine.new_window()
        with pytest.raises(orbit.OrbitError, match="first_k = 5 has no effect"):
            w.policy = p
        assert w.policy == orbit.Policy()


@pytest.mark.parametrize("spec, options", [
    ("patch:16", {"rank_k": 32, "rank_v": 8}),
    ("patch:16", {"rank_k": "full", "rank_v": 4}),
    ("patch:16", {"survivors": "recondition"}),
    ("patch:16", {"on_miss": "blind"}),
    ("default", {"reuse_stored": False, "cascade_on_recall": True}),
    ("prefix", {}),
    ("cacheblend:0.3", {}),
    ("default:through=0", {}),
])
def test_a_policy_name_parses_and_its_repr_evaluates_back(orbit, spec, options):
    # name wrote 'patch:32/8' for unequal ranks, which Policy() refused; repr listed a fixed set of fields, so
    # Policy('default', on_miss='blind') looked like plain 'blind'. The name parses back to the preset it spells,
    # and repr adds every field that differs from that preset.
    p = orbit.Policy(spec, **options)
    preset = orbit.Policy(p.name)
    assert preset.name == p.name
    assert eval(repr(p), {"Policy": orbit.Policy}) == p, repr(p)
    if not options:
        assert preset == p and repr(p) == f"Policy({p.name!r})"


@pytest.mark.parametrize("number", ["0x10", "inf", "nan", "1e-3x"])
def test_a_spec_number_is_decimal(orbit, number):
    # strtod alone read "0x10" as 16; the names print decimals, and a spec reads only those.
    with pytest.raises(orbit.OrbitError, match=f"kl budget '{number}' is not a number"):
        orbit.Policy(f"default:kl={number}")
    assert orbit.Policy("default:kl=1e-3").kl_budget == 1e-3


def test_the_cost_model_policy_is_reachable_from_a_spec_and_keywords(orbit):
    # cost_aware / expected_reuse were documented and checked in C++ but no spec, keyword or CLI flag set them.
    p = orbit.Policy("patch:16:cost=2.5")
    assert p.cost_aware and p.expected_reuse == 2.5 and p.name == "patch:16:cost=2.5"
    assert orbit.Policy(p.name) == p and eval(repr(p), {"Policy": orbit.Policy}) == p
    q = orbit.Policy("patch:16", cost_aware=True)
    assert q.name == "patch:16:cost" and q.expected_reuse == 1.0 and orbit.Policy("patch:16:cost") == q
    assert q != orbit.Policy("patch:16") and q.replace(expected_reuse=4).name == "patch:16:cost=4"
    # the budget chooses by predicted KL, not by the cost model: refused beside one, naming the field
    with pytest.raises(orbit.OrbitError, match="cost_aware = true has no effect"):
        orbit.Policy("default:cost")
    with pytest.raises(ValueError, match="expected_reuse = 3 has no effect"):
        orbit.Policy("patch:16", expected_reuse=3)
    with pytest.raises(orbit.OrbitError, match=r"cost=R: R \(the uses expected after this one\) must be in"):
        orbit.Policy("patch:16:cost=-1")
    with pytest.raises(TypeError, match="cost_aware"):
        orbit.Policy("patch:16", cost_aware=1)
    assert ":cost[=R]" in orbit.policy_help()


def test_a_cost_model_policy_prefills_what_it_expects_no_reuse_of(orbit, stories260k_path):
    # A miss forms a patch (a background SVD) only where the calibrated cost model expects it to pay back: with no
    # reuse expected (:cost=0) it plainly prefills; with much reuse expected it forms, as patch:16 does.
    rng = random.Random(1)
    with orbit.Engine(str(stories260k_path), background="inline") as e:
        e.calibrate()
        a, b = (e.add_tokens([rng.randrange(1, 500) for _ in range(40)]) for _ in range(2))
        hows = {}
        for spec in ("patch:16", "patch:16:cost=0", "patch:16:cost=1000"):
            w = e.new_window(policy=spec)
            w.admit(a)
            hows[spec] = [s.how for s in w.plan_admit(b).steps]
    assert hows == {"patch:16": ["keep", "form"], "patch:16:cost=0": ["keep", "prefill"],
                    "patch:16:cost=1000": ["keep", "form"]}
