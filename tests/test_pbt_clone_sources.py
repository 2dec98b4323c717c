"""PBT's clone sources outlive the top trials' num_to_keep (tuner.algorithms.KeepsCloneSources).

A population of 6 on 2 CPUs, each trial checkpointing every iteration with ``num_to_keep: 1``
(benchmarks.workloads:schedule_objective, Ray's PBT toy made deterministic): by the time a bottom trial
clones a top trial, and again by the time the clone gets a CPU and restores, the top trial has saved
newer checkpoints and Ray has deleted the one PBT kept. Without tuner's copies most clones fail ("Could
not recover from checkpoint as it does not exist on storage anymore").
"""

import pytest

from tuner import tune_model
import pandas as pd

from tuner.layout import CLONE_SOURCES_DIR, PBT_GLOBAL, RESULTS_CSV

POPULATION = 6


@pytest.mark.slow
def test_clones_restore_after_the_top_trials_checkpoint_is_deleted(ray_local, tmp_path, make_spec):
    spec = make_spec({
        "name": "clones",
        "trainable": "benchmarks.workloads:schedule_objective",
        "metric": "accuracy",
        "mode": "max",
        "seed": 0,
        "num_samples": POPULATION,
        "stop": {"training_iteration": 24},
        "param_space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 2e-2}, "max_t": 24, "seed": 0,
                        "budget_file": str(tmp_path / "steps"), "budget": 10_000},
        "search": {"algorithm": "random"},
        "scheduler": {"type": "pbt", "perturbation_interval": 3, "quantile_fraction": 0.34,
                      "resample_probability": 0.25, "mutations": {"lr": {"type": "loguniform", "low": 1e-4,
                                                                          "high": 2e-2}}},
        "checkpoint": {"num_to_keep": 1},
        "resources": {"cpu": 1},
        "reporting": {"cli": False, "tensorboard": False},
    })
    result = tune_model(spec)
    experiment = tmp_path / "clones"
    exploits = (experiment / PBT_GLOBAL).read_text().splitlines()
    assert len(exploits) >= 3, "the run exploited"
    assert result.errors == [], result.errors
    trials = pd.read_csv(experiment / RESULTS_CSV)
    assert list(trials["status"]) == ["TERMINATED"] * POPULATION and set(trials["training_iteration"]) == {24}
    kept = list((experiment / CLONE_SOURCES_DIR).iterdir())
    assert 0 < len(kept) <= 2 * POPULATION, f"copies no trial can restore from are deleted: {len(kept)} kept"
