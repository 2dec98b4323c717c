"""Tiny train functions for the integration tests (importable by Ray workers as tests.trainables)."""

import math

import numpy as np

from tuner import trial


def quadratic(config):
    """Loss falls each iteration toward (x - 0.3)^2; reports loss and score = -loss."""
    x = config.get("x", 0.0)
    for i in range(int(config.get("epochs", 3))):
        loss = (x - 0.3) ** 2 + 1.0 / (i + 1)
        trial.report({"loss": loss, "score": -loss})


def typed(config):
    """Reports the Python type names of the config values it was given."""
    names = {k: type(v).__name__ for k, v in config.items()}
    for _ in range(int(config.get("epochs", 2))):
        trial.report({"loss": float(config.get("x", 0.0)), "numpy_free": float(not any(
            isinstance(v, np.generic) for v in config.values())), "types": ",".join(f"{k}={v}" for k, v in sorted(names.items()))})


def raw_ray(config):
    """An existing Ray Tune function trainable: calls ray.tune.report itself."""
    from ray import tune

    for i in range(3):
        tune.report({"loss": config["x"] + 1.0 / (i + 1)})


def fails_for_large_x(config):
    """Raises for x > 0.5 on its second iteration."""
    for i in range(3):
        if i == 1 and config["x"] > 0.5:
            raise ValueError(f"x too large: {config['x']}")
        trial.report({"loss": config["x"] + i})


def nan_metric(config):
    """Reports NaN for x > 0.5."""
    for _ in range(2):
        trial.report({"loss": math.nan if config["x"] > 0.5 else config["x"]})


def checkpointing(config):
    """Writes a checkpoint each iteration and resumes from the last one."""
    import json
    import os
    import tempfile

    start = 0
    ckpt = trial.get_checkpoint()
    if ckpt:
        with open(os.path.join(ckpt, "state.json")) as f:
            start = json.load(f)["i"] + 1
    for i in range(start, int(config.get("epochs", 3))):
        d = tempfile.mkdtemp()
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump({"i": i}, f)
        trial.report({"loss": config["x"] / (i + 1)}, checkpoint_dir=d)


def slow(config):
    """Reports every 0.5 s for a long time (for interrupt tests)."""
    import time

    for i in range(int(config.get("epochs", 200))):
        time.sleep(0.5)
        trial.report({"loss": config.get("x", 0.0) + 1.0 / (i + 1)})
