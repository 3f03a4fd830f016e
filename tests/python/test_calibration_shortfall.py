"""Dynamic-NTK RoPE's shortfall in the Python bindings, on tinystories-656k copied with dynamic scaling anchored
at 32 tokens (factor 4): Engine.calibrate_fidelity() measures the model's own shortfall coefficient
(CalibrationReport.shortfall_samples, shortfall_coefficient; 0.0042 measured, 70x below the default 0.29), a plan's
step names the window its loaded rows were formed at (PlanStep.reused_tokens, reused_formed_window: a read's query
and answer sent back with the next turn), and the shipped model calibrates no shortfall."""
import json
import re
import shutil


def dynamic_copy(models_dir, tmp_path):
    path = tmp_path / "tinystories-dynamic"
    shutil.copytree(models_dir / "tinystories-656k", path)
    config = json.loads((path / "config.json").read_text())
    config["max_position_embeddings"] = 32
    config["rope_scaling"] = {"type": "dynamic", "factor": 4.0}
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_a_dynamic_model_calibrates_its_shortfall_and_loads_a_reads_rows(orbit, models_dir, tmp_path):
    engine = orbit.Engine(str(dynamic_copy(models_dir, tmp_path)), pool_bytes=8 << 20)
    report = engine.calibrate_fidelity()
    assert report.shortfall_samples > 0
    assert 0 < report.shortfall_coefficient < 0.029, report
    assert "shortfall" in report.fidelity_model
    window = engine.new_window(policy="default")
    window.add_turn(engine.tokenize("Once upon a time there was a little girl named Lily. She loved to play outside."))
    loaded = []
    for text in [" One day, Lily found a big red ball in the park.", " Tom was sad because he lost his toy car.",
                 " The sun went down and the sky turned orange."]:
        query = engine.tokenize("\n", False)
        answer = window.generate(query, max_tokens=12)
        back = query + list(answer.tokens)
        plan = window.plan_add_turn(back + engine.tokenize(text, False))
        window.apply(plan)
        step = plan.steps[-1]
        assert plan.predicted_kl <= plan.policy.kl_budget
        if step.reused_tokens == len(back):
            loaded.append(step.reused_formed_window)
    assert loaded and all(formed > 0 for formed in loaded), loaded


def test_a_model_without_dynamic_scaling_calibrates_no_shortfall(orbit, models_dir):
    report = orbit.Engine(str(models_dir / "tinystories-656k"), pool_bytes=8 << 20).calibrate_fidelity()
    assert report.shortfall_samples == 0 and report.shortfall_coefficient == 0
    assert "shortfall" not in report.fidelity_model
    # Every model's calibration measures what KV read back from int8 rows loses.
    assert re.search(r"quantized \S+ \(fitted\)", report.fidelity_model), report.fidelity_model
