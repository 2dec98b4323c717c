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


def console_reports(out: str) -> list[dict]:
    """The CLIReporter tables in a `tuner run`'s stdout, each with what is printed under it.

    Returns:
        One dict per ``== Status ==`` block: ``best`` (``(trial_id, metric, value text)`` of its
        ``Current best trial`` line, or None), ``folder`` (its ``Experiment folder`` line, or
        None), ``logdir`` (Ray's ``Result logdir`` lines), ``rows`` (trial id -> {column: cell}
        of the trials table) and ``progress`` (the ``Progress:`` line right under the table,
        or None).
    """
    import re

    blocks, current = [], None
    for line in out.splitlines():
        if line == "== Status ==":
            current = {"best": None, "folder": None, "logdir": [], "rows": {}, "progress": None, "_header": None,
                       "_last": ""}
            blocks.append(current)
            continue
        if current is None:
            continue
        if m := re.match(r"^Current best trial: (\S+) with last (\S+)=(\S+) and parameters=", line):
            current["best"] = m.groups()
        elif line.startswith("Current best trial: "):
            current["best"] = ("unparsed", line, "")
        elif line.startswith("Experiment folder: "):
            current["folder"] = line[len("Experiment folder: "):]
        elif line.startswith("Result logdir: "):
            current["logdir"].append(line)
        elif line.startswith("| Trial name") and "| status" in line:
            current["_header"] = [c.strip() for c in line.strip("|").split("|")]
        elif line.startswith("| ") and current["_header"]:
            cells = dict(zip(current["_header"], (c.strip() for c in line.strip("|").split("|"))))
            current["rows"]["_".join(cells["Trial name"].rsplit("_", 2)[-2:])] = cells
        elif line.startswith("+--") and current["_header"] and current["rows"]:
            current["_header"] = None  # the end of the trials table
        elif line.startswith("Progress: ") and current["progress"] is None and current["_last"].startswith("+--"):
            current["progress"] = line
        if line.strip():
            current["_last"] = line
    for block in blocks:
        del block["_header"], block["_last"]
    return blocks


def pytest_collection_modifyitems(items):
    """The slow (end-to-end) tests first, so that xdist's workers end together on the short ones
    instead of one worker finishing a long test alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
