"""The fixtures live in tests/fixtures/, one module each; this file registers them."""

pytest_plugins = ["tests.fixtures.cli", "tests.fixtures.ray", "tests.fixtures.specs"]


def pytest_collection_modifyitems(items):
    """The slow (end-to-end) tests first, so that xdist's workers end together on the short ones
    instead of one worker finishing a long test alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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
