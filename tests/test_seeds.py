"""Reproducible trials: each trial's own seed (tuner.search.seeds, trial.seed()) and `seed_trials: true`.

Pure tests of the derivation, and one spec whose trials report draws from random, numpy and
torch, run twice: through the real CLI and through tune_model."""

import random

import numpy as np
import pandas as pd
import pytest

from tuner import trial
from tuner.adapters.ray_internals import trial_creation_index
from tuner.search.seeds import config_digest, rank_seed, seed_everything, seed_of_trial, trial_seed


def test_trial_seed_is_numpys_seed_sequence_of_the_experiment_seed_and_the_index():
    seeds = [trial_seed(7, i) for i in range(1000)]
    assert seeds[3] == int(np.random.SeedSequence([7, 3]).generate_state(1)[0])
    assert all(0 <= s < 2 ** 32 for s in seeds) and len(set(seeds)) == 1000, "every trial its own seed"
    assert trial_seed(7, 3) == trial_seed(7, 3) and trial_seed(8, 3) != trial_seed(7, 3)
    assert trial_seed(8, 0) != trial_seed(7, 1), "not seed + index: experiments do not line up by an offset"
    assert 0 <= trial_seed(-1, 0) < 2 ** 32, "a negative experiment seed works (taken mod 2**64)"
    with pytest.raises(ValueError, match="index is >= 0"):
        trial_seed(7, -1)


def test_seed_of_a_trial_from_its_id_or_config():
    # random and grid search: the index in Ray's trial id
    assert trial_creation_index("84d73_00003") == 3 and trial_creation_index("84d73_123456") == 123456
    assert seed_of_trial(7, "84d73_00003", {"x": 1}) == trial_seed(7, 3) == seed_of_trial(7, "0aa99_00003", {})
    # bohb and optuna: random ids without an index; the seed follows the config the seeded searcher gives
    assert trial_creation_index("3f9a1c2e") is None and trial_creation_index("84d73_0003") is None
    a = seed_of_trial(7, "3f9a1c2e", {"x": 0.5, "opt": {"lr": 0.1, "name": "sgd"}})
    assert a == seed_of_trial(7, "77aa1c00", {"opt": {"name": "sgd", "lr": 0.1}, "x": 0.5}), "key order is no matter"
    assert a != seed_of_trial(7, "3f9a1c2e", {"x": 0.25, "opt": {"lr": 0.1, "name": "sgd"}})
    assert a != seed_of_trial(8, "3f9a1c2e", {"x": 0.5, "opt": {"lr": 0.1, "name": "sgd"}})
    assert len(config_digest({"x": 1})) == 4
    # no seed in the spec: from the trial id (kept by a resume), whatever the config
    assert seed_of_trial(None, "84d73_00003", {"x": 1}) == seed_of_trial(None, "84d73_00003", {"x": 2})
    assert seed_of_trial(None, "84d73_00003", {}) != seed_of_trial(None, "84d74_00003", {})
    assert rank_seed(5, 1) == 6 and rank_seed(2 ** 32 - 1, 1) == 0


def test_seed_everything_and_the_trial_api():
    import torch

    def draws():
        return random.random(), float(np.random.random()), float(torch.rand(1).item())

    seed_everything(11)
    first = draws()
    seed_everything(11)
    assert draws() == first
    seed_everything(12)
    assert draws() != first
    assert trial.seed() == 0 and trial.rank_seed() == 0, "outside a trial"
    try:
        trial.configure(trial.TrialOptions(seed=41))
        assert trial.seed() == trial.rank_seed() == 41, "one process: rank 0"
    finally:
        trial.configure(None)


def test_the_plan_says_the_trials_are_seeded(make_spec):
    from tuner.search.algorithms import describe_search
    from tuner.spec import load_spec

    assert not load_spec(make_spec()).seed_trials, "off by default"
    lines = describe_search(load_spec(make_spec(seed_trials=True)))
    assert lines[1] == ("seeding:    each trial's random, numpy and torch with its own seed (trial.seed(); + rank "
                        "in a DDP trial)")
    assert not any(line.startswith("seeding:") for line in describe_search(load_spec(make_spec())))


def _by_index(experiment) -> pd.DataFrame:
    df = pd.read_csv(experiment / "results.csv", dtype={"trial_id": str})
    df["index"] = [trial_creation_index(t) for t in df["trial_id"]]
    return df.sort_values("index").set_index("index")


SEEDED = """\
name: {name}
trainable: tests.trainables:seeded
metric: loss
mode: min
num_samples: 3
seed: 7
seed_trials: true
param_space: {{x: {{type: uniform, low: 0, high: 1}}, epochs: 2}}
reporting: {{cli: false, tensorboard: false}}
"""


@pytest.mark.slow
def test_the_same_seed_gives_the_same_metrics_for_every_trial(ray_local, tmp_path, run_cli, on_session_ray):
    """The same spec with seed 7 and seed_trials run twice, through the CLI and through tune_model in
    the session's Ray (other processes, trials in another order, on reused actors): each trial (by
    its creation index) reports the same draws from random, numpy and torch both times; the draws
    are those of the trial's own seed, trial_seed(7, index), which results.csv records (in the column
    after status), and differ from trial to trial."""
    from tuner import tune_model

    (tmp_path / "first.yaml").write_text(SEEDED.format(name="first"))
    proc = run_cli("run", tmp_path / "first.yaml", "--storage", tmp_path / "runs", env=on_session_ray)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (tmp_path / "second.yaml").write_text(SEEDED.format(name="second"))
    tune_model(tmp_path / "second.yaml", storage=str(tmp_path / "runs"))
    header = list(pd.read_csv(tmp_path / "runs" / "first" / "results.csv").columns)
    assert header[:4] == ["trial_id", "status", "trial_seed", "config/x"], "trial_seed comes after status"
    first, second = (_by_index(tmp_path / "runs" / name) for name in ("first", "second"))
    assert list(first.index) == [0, 1, 2]
    columns = ["config/x", "trial_seed", "seed_seen", "rank_seed_seen", "py", "np", "torch", "loss"]
    pd.testing.assert_frame_equal(first[columns], second[columns])
    assert first["trial_seed"].tolist() == [trial_seed(7, i) for i in range(3)]
    assert (first["seed_seen"] == first["trial_seed"]).all() and (first["rank_seed_seen"] == first["trial_seed"]).all()
    assert first["py"].nunique() == 3 and first["torch"].nunique() == 3, "each trial its own draws"
    for _, row in first.iterrows():  # the last of 2 iterations: the second draw from the trial's seed
        rng = random.Random(int(row["trial_seed"]))
        rng.random()
        assert row["py"] == rng.random()
