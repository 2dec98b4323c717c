"""DDP trials and Ray Tune's actor reuse (``tuner.run.trainable.reuse_actors``), without Ray."""

import pytest

from tuner.spec import load_spec
from tuner.run.trainable import reuse_actors

SPEC = {"name": "ddp", "trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min", "num_samples": 2,
        "param_space": {"x": {"type": "uniform", "low": 0, "high": 1}, "epochs": 2}}


@pytest.mark.parametrize("name", ["quadratic", "returns_metrics"])
def test_ddp_trials_never_reuse_an_actor(monkeypatch, name):
    """README: "actor reuse between trials (never for DDP)": with resources.workers set, Ray Tune gets
    reuse_actors=False, for a tuner.trial function and a Ray Tune function (a class trainable is refused DDP)."""
    import tests.trainables

    monkeypatch.delenv("TUNER_REUSE_ACTORS", raising=False)
    trainable = getattr(tests.trainables, name)
    single = load_spec(SPEC, require_trainable=False)
    ddp = load_spec({**SPEC, "resources": {"workers": 2, "cpu_per_worker": 1}}, require_trainable=False)
    assert reuse_actors(trainable, single), "without workers the trainable reuses its actor (the check can tell)"
    assert reuse_actors(trainable, ddp) is False
