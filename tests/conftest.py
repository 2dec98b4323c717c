"""The fixture modules live in tests/fixtures/, one module each; this file registers them, spreads the slow tests
over two xdist lanes, and compiles the bytecode once."""

import pytest

pytest_plugins = ["tests.fixtures.cli", "tests.fixtures.ray", "tests.fixtures.specs"]

#: The xdist groups the slow (end-to-end) tests run in: two, so at most two of them run at once.
SLOW_LANES = ("slow-lane-1", "slow-lane-2")

#: Modules whose tests share a module-scoped fixture (their own ``xdist_group``) and are mostly slow runs: each
#: goes whole into one lane, which keeps its tests on one worker as its own group did.
WHOLE_MODULES_IN_A_LANE = ("test_cluster.py", "test_cloud_storage.py", "test_scheduler_state.py")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    """Spread the slow tests over two xdist groups (``SLOW_LANES``), so that pytest-xdist's three workers run at
    most two of them at once and the third runs the short tests beside them.

    Each slow test starts Ray's processes (trial actors, Ray Train's worker groups, a Ray of its own). Three of
    them at once on 2 cores spent about 25 % more CPU than two at once (``-n 2``: the same 688 tests took 2,032
    CPU-s instead of 2,542, docs/benchmarks.md), as each waited longer for the CPU while Ray's processes went on
    polling; but with only two workers the short tests, which mostly wait on a subprocess, left the cores idle.
    A lane keeps collection order, so a module's tests stay together (its module-scoped fixtures start once).
    The two lanes are filled in turn by the count of slow tests each holds. Outside pytest-xdist's
    ``--dist loadgroup`` the marks change nothing.
    """
    units: dict[str, list] = {}  # a whole module, or one slow test; in collection order
    for item in items:
        module = item.path.name
        if module in WHOLE_MODULES_IN_A_LANE:
            units.setdefault(module, []).append(item)
        elif item.get_closest_marker("slow") is not None and item.get_closest_marker("xdist_group") is None:
            units[item.nodeid] = [item]
    for module in {item.getparent(pytest.Module) for unit in units.values() for item in unit}:
        # The module's own group gives way to the lane (xdist joins every group name a test has into one).
        module.own_markers[:] = [mark for mark in module.own_markers if mark.name != "xdist_group"]
    load = dict.fromkeys(SLOW_LANES, 0)
    for unit in units.values():
        lane = min(SLOW_LANES, key=load.__getitem__)
        load[lane] += sum(item.get_closest_marker("slow") is not None for item in unit) or 1
        for item in unit:
            item.add_marker(pytest.mark.xdist_group(lane), append=False)


def pytest_configure(config):
    """Compile tuner's, the tests' and the benchmarks' modules to bytecode once, in the run's first
    process (xdist's controller, or the only one), before any worker starts.

    Ray's worker processes and the CLI's subprocesses each import tuner's modules: with
    ``PYTHONDONTWRITEBYTECODE=1`` set, as on this project's machines, each of them compiled those
    modules from source again. This writes ``__pycache__`` folders (ignored by git) even then.
    """
    if hasattr(config, "workerinput"):  # an xdist worker: the controller has compiled them
        return
    import compileall
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for folder in ("tuner", "tests", "benchmarks"):
        compileall.compile_dir(root / folder, quiet=1)
