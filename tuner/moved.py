"""The module paths of tuner 0.1 that moved into the layer packages, kept as aliases.

Until 0.1 every module sat at the top of ``tuner/`` (``tuner.engine``, ``tuner.storage``,
...). They now live in the layer packages (``tuner.run.engine``, ``tuner.experiment.storage``,
...). An old path still imports: it names the same module object as the new one, so code
written against 0.1 keeps working, and so do experiments saved by 0.1, whose ``tuner.pkl``
pickles classes by their old module paths (``tuner.trainable``, ``tuner.population``, ...)
and which ``tuner resume`` unpickles.

The aliases are a :class:`importlib.abc.MetaPathFinder` that :mod:`tuner` installs when it
is imported (every ``tuner.*`` import imports ``tuner`` first). New code imports the new
paths; ``tests/test_layers.py`` checks that no module of tuner, its tests or benchmarks uses
an old one.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from collections.abc import Sequence

__all__ = ["MOVED", "install"]

#: Old module path -> new module path.
MOVED = {
    f"tuner.{old}": f"tuner.{new}" for old, new in {
        "params": "core.params", "best": "core.best",
        "layout": "experiment.layout", "files": "experiment.files", "storage": "experiment.storage",
        "export": "experiment.export",
        "ray_internals": "adapters.ray_internals", "state": "adapters.state",
        "gpu_packing": "resources.gpu_packing", "gpu_callback": "resources.gpu_callback",
        "space": "search.space", "algorithms": "search.algorithms", "bohb": "search.bohb",
        "population": "search.population", "warm_start": "search.warm_start", "schedule": "search.schedule",
        "scheduler_state": "search.scheduler_state", "pareto": "search.pareto", "rungs": "search.rungs",
        "forecast": "search.forecast", "seeds": "search.seeds",
        "engine": "run.engine", "trainable": "run.trainable", "reporting": "run.reporting",
        "failures": "run.failures", "results": "run.results", "cluster": "run.cluster", "measure": "run.measure",
        "dashboard": "report.dashboard",
    }.items()
}
# ``tuner.resources`` is a package now (``tuner.resources.sizing`` holds what the module held): the
# old path is the package, and its names are read from the module it re-exports (tuner/resources/__init__.py).


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new path (the same object, not a copy)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the new module ran when it was imported."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED`, and no other."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Put the old paths' finder on :data:`sys.meta_path` (once; later calls do nothing)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
