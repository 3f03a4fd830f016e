"""bench/replay/crit_split.py on two tiny generated traces (orbit.make_trace: coding and browse, 3 steps each)
replayed on the bundled stories260K under the default policy and blind (orbit.replay, the report `orbit replay
--json` writes): about a second per replay.

The script splits the default policy's critical tokens into the blind floor, repairs and queries. Checked: the
table lists the traces every directory holds, side by side, each number as the report gives it; each directory's
summary adds its traces up; the repairs listed by op add up to the repairs (the report's totals are its steps'
sums: the split per step and the split of the totals agree); the probed and within-budget step counts and the
measured / predicted count are the report's; --help prints the usage; bad arguments exit with an error naming
them."""
import json
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.xdist_group("test_crit_split")

BUDGET = 0.003
NUMBER = r"(-?\d+)"


@pytest.fixture(scope="module")
def replays(orbit, stories260k_path, tmp_path_factory):
    """Directories a (coding, browse) and b (coding only), and the reports by trace name."""
    out = tmp_path_factory.mktemp("crit_split")
    reports = {}
    for kind in ("coding", "browse"):
        trace = orbit.make_trace(kind=kind, steps=3, seed=1)
        reports[kind] = orbit.replay(trace, str(stories260k_path), policies=["default", "blind"], baselines=False)
    a, b = out / "a", out / "b"
    a.mkdir()
    b.mkdir()
    for kind, report in reports.items():
        (a / f"{kind}.replay.json").write_text(json.dumps(report))
    (b / "coding.replay.json").write_text(json.dumps(reports["coding"]))
    (b / "notes.json").write_text("{}")  # not a *.replay.json: not read
    return a, b, reports


def crit_split(repo_root, *dirs):
    return subprocess.run([sys.executable, str(repo_root / "bench" / "replay" / "crit_split.py"), *map(str, dirs)],
                          capture_output=True, text=True, timeout=60)


def expected(report):
    """The split, read off the report directly: the default policy (patch:16:kl=...) against blind."""
    d = next(p for p in report["policies"] if p["policy"].startswith("patch:16:kl="))
    b = next(p for p in report["policies"] if p["policy"] == "blind")
    t, bt = d["totals"], b["totals"]
    floor = bt["critical_forward_tokens"] - bt["query_forward_tokens"]
    queries = t["query_forward_tokens"]
    kls = [s["fidelity"]["kl"] for s in d["steps"] if s.get("fidelity")]
    # One yardstick per trace (bench/replay/yardstick.py): the radix cache over the run that cost it least.
    radix = min(p["totals"]["radix_tokens"] for p in report["policies"])
    return dict(radix=radix, crit=t["critical_forward_tokens"], floor=floor, queries=queries,
                repairs=t["critical_forward_tokens"] - queries - floor, probed=len(kls),
                within=sum(k <= BUDGET for k in kls),
                predicted=sum(1 for s in d["steps"] if s.get("fidelity") and (s.get("predicted_kl") or 0) > 1e-6))


def test_the_table_lists_the_common_traces_side_by_side(repo_root, replays):
    a, b, reports = replays
    run = crit_split(repo_root, a, b)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert re.fullmatch(r"trace\s+" + r" \|\s+radix\s+crit\s+floor\s+repair\s+query\s+c/rdx" * 2, lines[0]), lines[0]
    rows = [line for line in lines[1:] if "|" in line]
    assert [row.split()[0] for row in rows] == ["coding"]  # browse is in a only
    e = expected(reports["coding"])
    group = rf" \|\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+([\d.]+)"
    m = re.fullmatch(r"coding\s+" + group + group, rows[0])
    assert m, rows[0]
    for side in (0, 6):  # a's group, then b's: the same report
        radix, crit, floor, repairs, queries = (int(m.group(side + i)) for i in range(1, 6))
        assert (radix, crit, floor, repairs, queries) == (e["radix"], e["crit"], e["floor"], e["repairs"],
                                                          e["queries"])
        assert float(m.group(side + 6)) == pytest.approx(crit / radix, abs=5e-4)
    assert e["crit"] > 0 and e["floor"] > 0 and e["probed"] > 0  # a replay that measured something


def summary(stdout, directory):
    """The three lines after a directory's summary line: totals, repairs by op, measured / predicted."""
    lines = stdout.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(f"{directory} ("))
    return lines[i:i + 3]


def test_each_summary_adds_up_its_traces_and_the_repairs_by_op_add_up_to_the_repairs(repo_root, replays):
    a, b, reports = replays
    run = crit_split(repo_root, a, b)
    assert run.returncode == 0, run.stderr
    for directory, names in ((a, ["coding", "browse"]), (b, ["coding"])):
        total, by_op, ratios = summary(run.stdout, directory)
        e = [expected(reports[n]) for n in names]
        m = re.match(rf"^{re.escape(str(directory))} \((\d+) traces\): radix {NUMBER}, crit {NUMBER} \([\d.]+x\) = "
                     rf"floor {NUMBER} \([-\d.]+x\) \+ repairs {NUMBER} \([-\d.]+x\) \+ queries {NUMBER} "
                     rf"\([\d.]+x\); within 3e-03 on (\d+) of (\d+) probed steps, mean KL \S+$", total)
        assert m, total
        got = [int(g) for g in m.groups()]
        sums = {k: sum(x[k] for x in e) for k in ("radix", "crit", "floor", "repairs", "queries", "within", "probed")}
        assert got == [len(names), sums["radix"], sums["crit"], sums["floor"], sums["repairs"], sums["queries"],
                       sums["within"], sums["probed"]]
        assert by_op.startswith("  repairs by the op of the step that paid them: ")
        ops = re.findall(rf"(\w+) {NUMBER}", by_op.split(": ", 1)[1])
        assert ops and sum(int(v) for _, v in ops) == sums["repairs"], by_op
        predicted = sum(x["predicted"] for x in e)
        if predicted:
            assert ratios.startswith(f"  measured / predicted KL, {predicted} steps predicted above 1e-6: median ")
        else:
            assert not ratios.startswith("  measured / predicted KL")


def test_help_prints_the_usage_and_reads_no_directory(repo_root):
    run = crit_split(repo_root, "--help")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: crit_split.py [-h] DIR [DIR ...]")
    assert "Where the default policy's critical tokens go" in run.stdout and run.stderr == ""


def test_bad_arguments_exit_with_an_error_naming_them(repo_root, tmp_path):
    run = crit_split(repo_root)
    assert run.returncode == 2 and "the following arguments are required: DIR" in run.stderr
    run = crit_split(repo_root, "--bogus", tmp_path)
    assert run.returncode == 2 and "unrecognized arguments: --bogus" in run.stderr
    run = crit_split(repo_root, tmp_path / "missing")
    assert run.returncode == 1
    assert run.stderr.strip() == f"crit_split: DIR '{tmp_path / 'missing'}' is not a directory"
    run = crit_split(repo_root, tmp_path)
    assert run.returncode == 1
    assert run.stderr.strip() == f"crit_split: no *.replay.json in directory '{tmp_path}'"
