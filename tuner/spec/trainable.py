"""Finding the trainable that a spec names: importing it (:func:`resolve_trainable`) from the
folders it is looked up in (:func:`trainable_dirs`), telling a class trainable from a train
function without importing Ray (:func:`is_class_trainable`, :func:`implements`), refusing the
spec features that a class trainable cannot honour (:func:`check_trainable`), and naming the
user packages that trial workers must import it from (:func:`user_packages`,
:func:`import_roots`, :func:`trainable_reference`).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
from pathlib import Path
from typing import Any, TypeGuard
from collections.abc import Callable

from tuner.spec.errors import SpecError, _allowed, _closest
from tuner.spec.model import _TRAINABLE, Spec
from tuner.spec.sections import POPULATION_SCHEDULERS, SYNCHRONOUS_HYPERBAND


def is_class_trainable(obj: Any) -> TypeGuard[type]:
    """Whether ``obj`` is a class trainable: a subclass of ``ray.tune.Trainable``.

    Looks at the class's bases by name, so Ray is not imported for the answer.
    """
    return inspect.isclass(obj) and any(
        base.__name__ == "Trainable" and base.__module__.startswith("ray.tune") for base in obj.__mro__)


def trainable_dirs(spec: Spec) -> list[str]:
    """The folders ``spec.trainable`` is looked up in, in order; trial workers get them on ``sys.path``.

    The current folder; then, for a spec file, its folder and the nearest folder above it
    that holds the trainable's top-level package or file (so that
    ``search_spaces/mnist_asha.yaml`` with ``trainable: examples.mnist:train`` finds the
    ``examples`` package beside ``search_spaces/`` from any working directory).
    """
    dirs = [os.getcwd()]
    if spec.source:
        here = Path(spec.source).resolve().parent
        dirs.append(str(here))
        target = (spec.trainable_ref or "").rpartition(":")[0]
        if target:
            first = target if target.endswith(".py") else target.split(".")[0]
            for folder in (here, *here.parents):
                if (folder / first).exists() if target.endswith(".py") else \
                        ((folder / first).is_dir() or (folder / f"{first}.py").is_file()):
                    dirs.append(str(folder))
                    break
    return list(dict.fromkeys(dirs))


def user_packages(trainable: Any) -> dict[str, str]:
    """The top-level packages (or modules) of ``trainable`` that are not installed, and the
    folder each was imported from here.

    Workers unpickle a function or class by its module's name, so such a package must reach
    them: through ``sys.path`` (:func:`import_roots`, when tuner starts Ray) or pickled by
    value (when the user's Ray already runs). A wrapper such as ``tune.with_parameters`` is
    looked through: the functions and classes it closes over count too. ``__main__`` and
    file-path trainables are left out: Ray and tuner pickle those by value already.

    Returns:
        ``{"mypkg": "/home/me/project"}``, possibly empty.
    """
    import sysconfig

    paths = sysconfig.get_paths()
    installed = {os.path.realpath(paths[k]) for k in ("purelib", "platlib") if paths.get(k)}
    objects = [trainable, *(c.cell_contents for c in (getattr(trainable, "__closure__", None) or ())
                            if callable(getattr(c, "cell_contents", None)))]
    found: dict[str, str] = {}
    for obj in objects:
        name = getattr(obj, "__module__", None) or ""
        file = getattr(sys.modules.get(name), "__file__", None)
        if not file or name == "__main__" or name.startswith("tuner_user_"):
            continue
        root = Path(file).resolve().parent
        for _ in range(name.count(".") + (Path(file).name == "__init__.py")):
            root = root.parent
        if not any(str(root).startswith(prefix) for prefix in installed):
            found.setdefault(name.split(".")[0], str(root))
    return found


def import_roots(trainable: Any) -> list[str]:
    """Folders that trial workers need on ``sys.path`` to import ``trainable`` by module name
    (see :func:`user_packages`)."""
    return list(dict.fromkeys(user_packages(trainable).values()))


def resolve_trainable(spec: Spec) -> Callable[[dict], Any] | type:
    """Import the train function or class trainable named by ``spec.trainable``.

    ``pkg.module:name`` is imported as a module, with :func:`trainable_dirs` on
    ``sys.path`` (after what is there already). ``path/to/file.py:name`` is loaded from the
    file, looked up in the same folders.

    Args:
        spec: The validated spec, with a ``trainable``.

    Returns:
        The train function (a callable taking one argument, ``config``), or a class
        trainable (a ``ray.tune.Trainable`` subclass).

    Raises:
        SpecError: If the module or file cannot be found or imported, the name is not
            there, or it is neither a function of one argument nor a ``Trainable`` subclass.
    """
    if spec.trainable_ref is None:
        raise TypeError("resolve_trainable needs a `module:function` trainable; a command trial is built by "
                        "tuner.run.command.command_trainable")
    target, _, func_name = spec.trainable_ref.rpartition(":")
    dirs = trainable_dirs(spec)
    where = _allowed(dirs[:2]) + (" and the folders above it" if len(dirs) > 1 else "")
    try:
        if target.endswith(".py"):
            file = next((Path(d, target) for d in dirs if Path(d, target).is_file()), None)
            if file is None:
                raise spec.error("trainable", f"file '{target}' not found (looked in {where}).")
            module = _import_file(file.resolve())
        else:
            for d in reversed(dirs):
                if d not in sys.path:
                    sys.path.insert(0, d)
            try:
                module = importlib.import_module(target)
            except ModuleNotFoundError as exc:
                if exc.name and target.startswith(exc.name):
                    raise spec.error("trainable", f"module '{exc.name}' not found (looked on sys.path, including "
                                     f"{where}).") from None
                raise
    except SpecError:
        raise
    except Exception as exc:  # any error in user code at import time
        raise spec.error("trainable", f"importing '{target}' failed: {type(exc).__name__}: {exc}") from exc
    func = getattr(module, func_name, None)
    if func is None:
        names = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                 and getattr(v, "__module__", None) == module.__name__]
        hint = _closest(func_name, names)
        guess = f"; did you mean '{hint}'?" if hint else ""
        raise spec.error("trainable", f"'{target}' has no function '{func_name}'{guess}"
                         + (f" Functions there: {_allowed(sorted(names))}." if names else ""))
    if is_class_trainable(func):
        return func
    if inspect.isclass(func) or not callable(func):
        raise spec.error("trainable", f"'{spec.trainable}' is a {_kind(func)}, not a function of config or a "
                         "ray.tune.Trainable subclass.")
    try:
        params = [p for p in inspect.signature(func).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
        varargs = any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        params, varargs = [None], False
    if len(params) != 1 and not (varargs and not params):
        raise spec.error("trainable", f"'{spec.trainable}' must take one argument, config, but it takes "
                         f"{len(params)} required arguments.")
    return func


def _kind(obj: Any) -> str:
    return f"class ({obj.__name__}, not a ray.tune.Trainable subclass)" if inspect.isclass(obj) \
        else type(obj).__name__


def trainable_reference(obj: Any) -> str | None:
    """``"module:name"`` that imports ``obj`` again, or None (a lambda, a local or ``__main__`` object,
    a ``tune.with_parameters`` wrapper...). A spec records it for ``tuner resume``."""
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not module or module == "__main__" or not name or "." in name or "<" in name:
        return None
    try:
        found = getattr(importlib.import_module(module), name, None)
    except Exception:  # noqa: BLE001 - not importable by name
        return None
    ref = f"{module}:{name}"
    return ref if found is obj and _TRAINABLE.match(ref) else None


def check_trainable(spec: Spec, trainable: Any) -> None:
    """Refuse the spec features a class trainable cannot honour, before anything starts.

    A class trainable (``ray.tune.Trainable``) runs as one process and is checkpointed by
    Ray through its own ``save_checkpoint``, so:

    * ``resources.workers`` (DDP) needs a train function: tuner launches its worker group;
    * ``oom_backoff`` needs a train function: tuner restarts it with a smaller batch;
    * ``hyperband``/``bohb`` pause trials and resume them from a checkpoint, and ``pbt``/``pb2``
      restart a trial from another trial's checkpoint, so the class must implement
      ``save_checkpoint`` and ``load_checkpoint``.

    Raises:
        SpecError: Naming the field and why.
    """
    if not is_class_trainable(trainable):
        return
    name = trainable.__name__
    if spec.resources.distributed:
        raise spec.error("resources.workers", f"resources.workers makes each trial a DDP group of train-function "
                         f"processes, but {name} is a class trainable (ray.tune.Trainable), which runs as one "
                         "process; use a train function (see tuner.trial) or drop resources.workers.")
    if spec.oom_backoff:
        raise spec.error("oom_backoff", f"oom_backoff restarts a train function with a smaller batch, but {name} is "
                         "a class trainable (ray.tune.Trainable); catch torch.cuda.OutOfMemoryError in its step, or "
                         "drop oom_backoff.")
    if spec.scheduler.type in SYNCHRONOUS_HYPERBAND:
        missing = [m for m in ("save_checkpoint", "load_checkpoint") if not implements(trainable, m)]
        if missing:
            raise spec.error("scheduler.type", f"scheduler {spec.scheduler.type} pauses trials and resumes them from "
                             f"a checkpoint, but {name} does not implement {' and '.join(missing)}; implement "
                             "them, or use scheduler asha, which never pauses.")
    if spec.scheduler.type in POPULATION_SCHEDULERS:
        missing = [m for m in ("save_checkpoint", "load_checkpoint") if not implements(trainable, m)]
        if missing:
            raise spec.error("scheduler.type", f"scheduler {spec.scheduler.type} restarts a trial of the bottom "
                             "quantile from the checkpoint of a top trial (exploit), but "
                             f"{name} does not implement {' and '.join(missing)}, so it has no checkpoint to clone; "
                             "implement them.")


def implements(cls: type, method: str) -> bool:
    """Whether a class trainable implements ``method`` (``save_checkpoint``, ``reset_config``, ...)
    itself or in a base below ``ray.tune.Trainable``, whose versions do nothing or raise."""
    for base in cls.__mro__:
        if method in vars(base):
            return not (base.__name__ == "Trainable" and base.__module__.startswith("ray.tune"))
    return False


def command_cwd(spec: Spec) -> Path:
    """The working directory of a spec's command trial: ``trainable.cwd`` relative to the spec's folder
    (the current folder for a spec given as a mapping); that folder itself when ``cwd`` is not given."""
    base = Path(spec.source).resolve().parent if spec.source else Path.cwd()
    cwd = spec.command.cwd if spec.command else None
    return (base / cwd).resolve() if cwd else base


def check_command(spec: Spec) -> None:
    """Refuse a command trial whose program cannot start, before anything starts.

    Checks that the working directory exists; for ``python SCRIPT``, that the script is a file
    there (``python -m MODULE`` and ``-c`` are left to Python); for any other program, that it
    is a file there (a path) or on the ``PATH`` (of ``trainable.env``, else this process's).
    Words holding a placeholder are left alone.

    Raises:
        SpecError: Naming ``trainable.command.N`` or ``trainable.cwd``, and the folder looked in.
    """
    import shutil

    from tuner.spec.command import placeholders

    command = spec.command
    if command is None:
        return
    cwd = command_cwd(spec)
    if not cwd.is_dir():
        raise spec.error("trainable.cwd" if command.cwd else "trainable", f"the command's working directory {cwd} "
                         "is not a folder.")
    script = command.script
    if command.runs_python:
        if script is not None and not placeholders(script) and not (cwd / script).is_file():
            raise spec.error("trainable.command.1", f"script '{script}' not found in the command's working "
                             f"directory {cwd}; give its path relative to that folder (trainable.cwd, default: "
                             "the spec's folder).")
        return
    program = command.command[0]
    if placeholders(program):
        return
    if "/" in program:
        found = (cwd / program).is_file() and os.access(cwd / program, os.X_OK)
    else:
        found = shutil.which(program, path=command.env.get("PATH", os.environ.get("PATH"))) is not None
    if not found:
        where = f"in {cwd} (or not executable)" if "/" in program else "on the PATH"
        raise spec.error("trainable.command.0", f"command '{program}' not found {where}; give the program's path, "
                         "or start the command with python (tuner's own Python) for a Python script.")


def _import_file(file: Path):
    name = "tuner_user_" + re.sub(r"\W", "_", file.stem)
    module_spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return module
