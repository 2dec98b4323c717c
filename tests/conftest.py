import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def ray_local():
    """A real local Ray with 2 CPUs, shared by the integration tests of this session."""
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    yield ray
    ray.shutdown()


def run_cli(*args, cwd=None, env=None, timeout=300, preexec_fn=None):
    """Run `python -m tuner ARGS` in a subprocess; returns CompletedProcess (text).

    ``preexec_fn`` runs in the child before it starts (e.g. ``resource.setrlimit``).
    """
    import subprocess

    full_env = {**os.environ, **(env or {})}
    full_env.pop("TUNER_DEBUG", None) if env is None or "TUNER_DEBUG" not in env else None
    return subprocess.run([sys.executable, "-m", "tuner", *map(str, args)], cwd=cwd or ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout, preexec_fn=preexec_fn)
