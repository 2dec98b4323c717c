"""Names of parameters and metrics: the one walk over a nested tree, and Ray's own result keys.

A nested key has two spellings, each with its own functions:

* a *name*, parts joined by ``/`` (:data:`NAME_SEP`): ``opt/lr``. ``results.csv``'s
  ``config/<name>`` columns, ``tuner report``, TensorBoard's HParams and a nested
  metric use it (:func:`flatten`, :func:`nest`; a space's sampled parameters by name:
  :func:`tuner.spec.conditions.param_distributions`);
* a spec *path*, parts joined by ``.`` (:data:`PATH_SEP`): ``param_space.opt.lr``, as
  errors name a field of the spec and as ``oom_backoff`` names a parameter
  (:func:`spec_paths`).

Both come from one walk, :func:`leaves`. :data:`RAY_RESULT_KEYS` are the keys Ray adds
to every result (bookkeeping, not metrics), :data:`PROGRESS_KEYS` those of them that
count a trial's progress (a report's x axes).

No Ray here (``tuner report`` uses this module).
"""

from __future__ import annotations

from typing import Any
from collections.abc import Iterator, Mapping

__all__ = ["NAME_SEP", "PATH_SEP", "RAY_RESULT_KEYS", "PROGRESS_KEYS", "leaves", "flatten", "nest", "spec_paths"]

#: Joins the parts of a parameter's or a metric's name: ``opt/lr``.
NAME_SEP = "/"
#: Joins the parts of a field's path in the spec: ``param_space.opt.lr``.
PATH_SEP = "."

#: Keys Ray adds to every result, not metrics: Ray's ``AUTO_RESULT_KEYS`` (checked by
#: tests/test_ray_internals.py) and the ones its trainables and tuner's DDP trials add.
RAY_RESULT_KEYS = frozenset({
    "training_iteration", "time_total_s", "time_this_iter_s", "timestamp",  # PROGRESS_KEYS
    "done", "should_checkpoint", "trial_id", "experiment_tag", "experiment_id", "date", "pid", "hostname", "node_ip",
    "config", "time_since_restore", "iterations_since_restore", "timesteps_since_restore", "timesteps_total",
    "episodes_total", "checkpoint_dir_name", "checkpoint_path",
})
#: Ray's keys that count a trial's progress: its iterations and its clock (a report's x axes).
PROGRESS_KEYS = frozenset({"training_iteration", "time_total_s", "time_this_iter_s", "timestamp"})


def leaves(tree: Mapping[str, Any], keys: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Walk a nested mapping (a ``param_space``, a config, a result): every leaf with its keys.

    Args:
        tree: The mapping; a value that is a mapping is walked into, any other is a leaf.
        keys: The keys above ``tree``.

    Yields:
        ``(("opt", "lr"), value)`` pairs, in the mapping's order.
    """
    for key, value in tree.items():
        if isinstance(value, Mapping):
            yield from leaves(value, (*keys, key))
        else:
            yield (*keys, key), value


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"opt": {"lr": 0.1}, "x": 1}`` -> ``{"opt/lr": 0.1, "x": 1}`` (nested keys joined by ``/``).

    Args:
        tree: A nested mapping.
        prefix: Put before every name (e.g. ``"config/"``).
    """
    return {prefix + NAME_SEP.join(map(str, keys)): value for keys, value in leaves(tree)}


def nest(flat: Mapping[str, Any]) -> dict:
    """``{"opt/lr": 0.1, "x": 1}`` -> ``{"opt": {"lr": 0.1}, "x": 1}``: the inverse of :func:`flatten`."""
    out: dict = {}
    for key, value in flat.items():
        node = out
        parts = key.split(NAME_SEP)
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def spec_paths(space: Mapping[str, Any], root: str | None = "param_space") -> Iterator[tuple[str, Any]]:
    """Every leaf of a parameter space with its path in the spec: ``("param_space.opt.lr", dist)``.

    Args:
        space: A ``param_space`` mapping.
        root: The path of ``space`` itself; None for paths relative to it (``opt.lr``,
            as ``oom_backoff`` names a parameter).
    """
    for keys, value in leaves(space):
        yield PATH_SEP.join(map(str, (root, *keys) if root else keys)), value
