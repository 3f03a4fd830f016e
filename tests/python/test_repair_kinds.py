"""bench/replay/repair_kinds.py and bench/fidelity/sensitivity_across.py on small hand-written inputs (no model).

repair_kinds: only the default policy's plan lines count (a baseline's prefill of the same instance is not
summed), each instance's forward tokens go to its action and reason, lines without forwards add nothing, and the
sensitivities of the lines that print one are summarised. sensitivity_across: the geometric means and the slope
between two sets are the ones the instances give (blind baseline only), and the default policy's
loss_agreement is pooled by instance count."""
import json
import math
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]

EXPLAIN = """\
  19 admit      reflect1 |     153    4.48  1.65e-04 2.9e-03 |     170    8.81  1.36e-12 0.0e+00
       [patch:16:kl=0.003:heal:prep=1:move=8:lists=3] admit [patch:16:kl=0.003:heal]: 9 steps, 57.0 forward tokens
         #11 c010-instruction @0: canonical, est 2.3e-06 s, KL~0.0e+00 — nothing precedes it: the canonical is exact
         #3 c002-question @19: form rank 16/16, 19.0 fwd, +0.0 fwd & SVD in background, est 6.9e-03 s, KL~0.0e+00 — context changed: chunk 'c010-instruction' inserted before it; prefill in context now
         #4 c003-thought @38: form rank 16/16, 18.0 fwd, +0.0 fwd & SVD in background, est 6.8e-03 s, KL~0.0e+00 — recall: fresh patch on its current earlier context; prefill in context now
         #6 c005-observation @76: keep, est 3.9e-07 s, KL~2.9e-03 (sensitivity 1.0e-01) — context changed: chunk 'c010-instruction' inserted before it; kept as-is
         #7 c006-thought @95: keep, est 3.9e-07 s, KL~2.9e-03 (sensitivity 3.0e-01) — context changed: chunk 'c001-examples' evicted; kept as-is
         #8 c007-action @116: form rank 16/16, 20.0 fwd, +20.0 fwd & SVD in background, est 7.0e-03 s, KL~0.0e+00 — prefill in context now; canonical + patch formed in the background
       [reprefill] admit [reprefill]: 9 steps, 153.0 forward tokens (+0.0 background)
         #3 c002-question @19: prefill, 19.0 fwd, est 6.9e-03 s, KL~0.0e+00 — context changed: chunk 'c010-instruction' inserted before it; patch miss: prefill in context
"""


def run(script, *args):
    return subprocess.run([sys.executable, str(REPO / script), *args], capture_output=True, text=True)


def test_repair_kinds_sums_the_default_plans_by_action_and_reason(tmp_path):
    (tmp_path / "a.txt").write_text(EXPLAIN)
    r = run("bench/replay/repair_kinds.py", str(tmp_path / "*.txt"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].endswith(": 57 forward tokens in the default's plans")  # 19 + 18 + 20, not the reprefill's 19
    rows = [" ".join(l.split()) for l in lines[1:-1]]
    assert rows == ["form first sight 20 tokens 1 instances", "form insert before 19 tokens 1 instances",
                    "form recall 18 tokens 1 instances"]
    assert lines[-1].strip() == "sensitivity of the kept instances shown: n 2, p10 0.1, median 0.3, p90 0.3"
    assert run("bench/replay/repair_kinds.py").returncode != 0  # no glob: the usage


def report(instances, agreement):
    steps = [{"instance_losses": instances}]
    return {"policies": [{"policy": "patch:16:kl=0.003", "steps": [], "totals": {"loss_agreement": agreement}},
                         {"policy": "blind", "steps": steps, "totals": {}}]}


def test_sensitivity_across_gives_the_slope_between_two_models(tmp_path):
    def inst(kv, measured, predicted, kind="blind"):
        return {"served_as": kind, "kv_change": kv, "measured_kl": measured, "predicted_kl": predicted}
    # set a: s = 0.01 (kv 0.1), measured / predicted 0.1; set b: s = 0.16 (kv 0.4), 0.8 -> slope log 8 / log 16
    (tmp_path / "a.json").write_text(json.dumps(report(
        [inst(0.1, 1e-4, 1e-3), inst(0.1, 2e-4, 2e-3), inst(0.1, 0.0, 1e-3)],
        [{"served_as": "kept over a context change", "compared": 3, "bias": 10.0}])))
    (tmp_path / "b.json").write_text(json.dumps(report(
        [inst(0.4, 8e-4, 1e-3), inst(0.4, 1.6e-3, 2e-3, "kept over a context change")],
        [{"served_as": "kept over a context change", "compared": 1, "bias": 40.0},
         {"served_as": "form", "compared": 0, "bias": None}])))
    r = run("bench/fidelity/sensitivity_across.py", "a=" + str(tmp_path / "a.json"), "b=" + str(tmp_path / "b*.json"))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "a        blind policy, blind                       n     2  median s 0.01  measured / predicted " \
           "(geometric mean) 0.100" in out  # the instance measured 0 is left out
    assert "b        blind policy, kept over a context change  n     1  median s 0.16" in out
    assert "a        default policy, kept over a context change n     3  predicted / measured (geometric mean) 10.00" \
        in out
    assert "a -> b, blind: measured / predicted ~ s^%.2f at factor 1" % (math.log(8) / math.log(16)) in out
    assert "kept over a context change: measured / predicted ~" not in out  # set a has no kept instance
    assert run("bench/fidelity/sensitivity_across.py", "a=x").returncode != 0  # one set: the usage
