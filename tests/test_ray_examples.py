"""Ray Tune's own example trainables (shipped in the ray wheel, ray.tune.examples) run unchanged
from the YAML specs in search_spaces/ray_examples/, each with the searcher and scheduler it
was written for; sizes shrink through the same overrides a user has (tune_model keywords,
--set)."""

import json

import pytest

from tests.fixtures.paths import ROOT
from tuner import tune_model

EXAMPLES = ROOT / "search_spaces" / "ray_examples"

# spec file -> (overrides that keep the run small, the kind of trainable it is)
CASES = {
    "async_hyperband": ({"num_samples": 6, "param_space": {"steps": 8}, "scheduler": {"max_t": 8, "grace_period": 2}},
                        "function, ray.tune.report"),
    # Ray's Hyperband fills its bracket without rungs first (3 trials here), then one with a rung at 2.
    "hyperband_function": ({"num_samples": 6, "stop": {"training_iteration": 4},
                            "scheduler": {"max_t": 4, "reduction_factor": 2}},
                           "function, ray.tune.report with checkpoints"),
    "bohb": ({"num_samples": 4, "stop": {"training_iteration": 4}, "scheduler": {"max_t": 4}},
             "class, save_checkpoint/load_checkpoint"),
    "optuna": ({"num_samples": 4, "param_space": {"steps": 4}}, "function under Optuna"),
}


def test_every_ray_example_spec_is_tested():
    assert sorted(p.stem for p in EXAMPLES.glob("*.yaml")) == sorted([*CASES, "hyperband_class"])


@pytest.mark.parametrize("name", sorted(CASES))
def test_ray_example_runs_from_yaml(ray_local, tmp_path, name):
    overrides, _ = CASES[name]
    result = tune_model(EXAMPLES / f"{name}.yaml", storage=str(tmp_path), **overrides)
    df = result.dataframe
    assert len(df) == overrides["num_samples"]
    assert set(df["status"]) == {"TERMINATED"}, df[["trial_id", "status"]]
    metric, mode = result.summary["metric"], result.summary["mode"]
    best = df[metric].min() if mode == "min" else df[metric].max()
    assert result.best_metrics[metric] == pytest.approx(best)
    if name in ("async_hyperband", "hyperband_function", "bohb"):  # early stopping cut some trials short
        assert df["training_iteration"].min() < df["training_iteration"].max(), df["training_iteration"]
    if name == "hyperband_function":  # paused trials went on from the example's own checkpoints
        lasts = [json.loads((t / "result.json").read_text().splitlines()[-1])
                 for t in (tmp_path / "ray-hyperband-function").glob("train_func_*")]
        assert any(r["iterations_since_restore"] < r["training_iteration"] for r in lasts), lasts


@pytest.mark.slow
def test_ray_class_example_through_the_cli_from_another_folder(tmp_path, run_cli, on_session_ray):
    """`tuner run` of an example spec by its absolute path, from another folder, twice in a row:
    the second run gets a fresh folder.

    Small runs, as each class trial is an actor process of its own (the example has no
    reset_config): the first, 3 trials up to 4 iterations, fills one Hyperband bracket with a
    rung before max_t; the second, there for its folder, is 3 trials of 2 iterations (its best
    reward is above 0 unless every trial drew height 0; with 2 trials both once did). The first starts
    its own Ray, as a user's would; the second connects to the session's."""
    spec = EXAMPLES / "hyperband_class.yaml"

    def args(samples: int, iterations: int) -> tuple:
        return ("run", spec, "--num-samples", str(samples), "--set", f"stop.training_iteration={iterations}",
                "--set", f"scheduler.max_t={iterations}", "--set", "reporting.cli=false")

    first = run_cli(*args(3, 4), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = run_cli(*args(3, 2), cwd=tmp_path, env=on_session_ray)  # on the session's Ray: a Ray start less
    assert second.returncode == 0, second.stderr
    assert "runs/ray-hyperband holds an experiment already, so this run goes to ray-hyperband-2" in second.stdout
    for name, samples in (("ray-hyperband", 3), ("ray-hyperband-2", 3)):
        summary = json.loads((tmp_path / "runs" / name / "summary.json").read_text())
        assert summary["trials"]["by_status"] == {"TERMINATED": samples}
        assert summary["best"]["metrics"]["episode_reward_mean"] > 0
