"""The module paths of tuner 0.1 that moved into the layer packages, kept as aliases.

Until 0.1 every module sat at the top of ``tuner/`` (``tuner.engine``, ``tuner.storage``,
...). They now live in the layer packages (``tuner.run.engine``, ``tuner.experiment.storage``,
...). An old path still imports: it names the same module object as the new one, so code
written against 0.1 keeps working, and so do experiments saved by 0.1, whose ``tuner.pkl``
pickles classes by their old module paths (``tuner.trainable``, ``tuner.population``, ...)
and which ``tuner resume`` unpickles.

A module that was split in two (:data:`SPLIT`) is an alias module of its own: each name is
looked up in the new modules in turn, so ``tuner.engine.prepare_resume`` is
``tuner.run.prepare.prepare_resume`` and ``tuner.reporting.TableReporter`` is
``tuner.run.console.TableReporter``: the same objects, in a module object that is neither.

The rule for pickled classes. Ray pickles tuner's objects by module path and name, and
``tuner resume`` must find each again. An experiment's ``tuner.pkl`` holds the Tuner's
``run_config``: the progress reporter (:class:`~tuner.run.console.TableReporter`, its
:class:`~tuner.run.console.ProgressLine` and :class:`~tuner.run.console.BestRule`) and the
callbacks (:class:`~tuner.run.loggers.JsonLogger`, :class:`~tuner.run.loggers.CsvLogger`,
:class:`~tuner.run.loggers.HParamsTBXCallback`, ``tuner.run.loggers.WandbCallback`` and
``MLflowCallback``, :class:`~tuner.run.console.StopOnFullDisk`, those of :mod:`tuner.run.failures`
and :mod:`tuner.search.scheduler_state`); also the scheduler (:mod:`tuner.search.algorithms`),
the spec's objectives (:mod:`tuner.spec.sections`) and ``trial_folder_of``
(:mod:`tuner.experiment.layout`). The experiment state holds the stopper
(:mod:`tuner.run.failures`), the searcher's state file the searcher. Ray writes ``tuner.pkl``
once, when the experiment starts: a resumed experiment names the old paths for good. So:

* a class or function that Ray pickles keeps its name (and its attributes' meaning);
* when its module moves, the old path goes into :data:`MOVED` (the whole module moved) or
  :data:`SPLIT` (its names went to several modules, each name defined in only one of them),
  and stays there.

``tuner.reporting`` is in :data:`SPLIT` for that reason: experiments saved by 0.1 name their
reporter (now in :mod:`tuner.run.console`) and their logger callbacks (now in
:mod:`tuner.run.loggers`) by it.

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

__all__ = ["MOVED", "SPLIT", "install"]

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
        "trainable": "run.trainable",
        "failures": "run.failures", "results": "run.results", "cluster": "run.cluster", "measure": "run.measure",
        "dashboard": "report.dashboard",
    }.items()
}
#: Old module path -> the new modules its names went to, looked up in this order (a module split in two).
SPLIT = {
    "tuner.engine": ("tuner.run.engine", "tuner.run.prepare"),
    "tuner.reporting": ("tuner.run.console", "tuner.run.loggers"),
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


class _SplitAlias(importlib.abc.Loader):
    """Loads an old path of :data:`SPLIT` as a module whose names are those of its new modules."""

    def __init__(self, targets: Sequence[str]) -> None:
        self.targets = tuple(targets)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return ModuleType(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        """Give the alias module the names of its new modules (imported now), looked up when asked for."""
        modules = [importlib.import_module(target) for target in self.targets]

        def __getattr__(name: str):  # a module's __getattr__ (PEP 562)
            for new in modules:
                try:
                    return getattr(new, name)
                except AttributeError:
                    continue
            raise AttributeError(f"module {module.__name__!r} (now {' and '.join(self.targets)}) has no "
                                 f"attribute {name!r}")

        def __dir__() -> list[str]:
            return sorted({name for new in modules for name in dir(new)})

        module.__dict__.update(
            __getattr__=__getattr__, __dir__=__dir__,
            __all__=[name for new in modules for name in getattr(new, "__all__", ())],
            __doc__=f"tuner's old module path {module.__name__}: now {' and '.join(self.targets)}.")


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED` and :data:`SPLIT`, and no other."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is not None:
            return importlib.util.spec_from_loader(fullname, _Alias(new))
        if fullname in SPLIT:
            return importlib.util.spec_from_loader(fullname, _SplitAlias(SPLIT[fullname]))
        return None


def install() -> None:
    """Put the old paths' finder on :data:`sys.meta_path` (once; later calls do nothing)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
