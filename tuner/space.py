"""Search-space translation: the Spec's ``param_space`` -> Ray Tune sampling objects.

Each distribution type maps to the Ray Tune sampling function of the same name
(``ray.tune.uniform``, ``ray.tune.qrandint``, ...). Under ``search: {algorithm: grid}``
every ``choice`` and every range with ``grid_points`` becomes a ``tune.grid_search``,
so Ray's ``BasicVariantGenerator`` runs the full cross product.
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Mapping

import numpy as np
from ray import tune

from tuner.params import distributions
from tuner.spec import Spec, _Dist

__all__ = ["to_ray_space", "mutation_domain", "grid_values", "grid_size", "plain"]


def grid_values(dist: _Dist) -> list[Any]:
    """Enumerate a distribution for grid search.

    ``grid`` and ``choice`` give their values. A numeric range with ``grid_points: N``
    gives N points from ``low`` to ``high``: evenly spaced on a linear scale, or on a log
    scale for the log types. Integer types round and drop repeats; the exclusive upper
    bound of ``randint`` and ``lograndint`` is excluded (``high - 1`` is the last point);
    quantized types round to multiples of ``q``.

    Args:
        dist: A validated distribution.

    Returns:
        The values, as plain Python numbers or the given values.

    Raises:
        ValueError: For a distribution that cannot be enumerated (``randn``, or a range
            without ``grid_points``); the Spec refuses those first.
    """
    kind = dist.type
    if kind in ("grid", "choice"):
        return list(dist.values)
    n = getattr(dist, "grid_points", None)
    if not n:
        raise ValueError(f"{kind} cannot be enumerated without grid_points")
    low, high = dist.low, dist.high
    integer = kind.endswith("randint")
    if kind in ("randint", "lograndint") or (kind in ("qrandint", "qlograndint") and dist.q == 1):
        high = high - 1
    points = np.geomspace(low, high, n) if "log" in kind else np.linspace(low, high, n)
    q = getattr(dist, "q", None)
    if q:
        points = np.round(points / q) * q
    out: list[Any] = []
    for p in points:
        value = int(round(p)) if integer else float(round(p, 12))
        if value not in out:
            out.append(value)
    return out


def _to_ray(dist: _Dist, grid: bool) -> Any:
    if grid and dist.type != "grid" and (dist.type == "choice" or getattr(dist, "grid_points", None)):
        return tune.grid_search(grid_values(dist))
    d = dist
    builders = {
        "uniform": lambda: tune.uniform(d.low, d.high),
        "quniform": lambda: tune.quniform(d.low, d.high, d.q),
        "loguniform": lambda: tune.loguniform(d.low, d.high),
        "qloguniform": lambda: tune.qloguniform(d.low, d.high, d.q),
        "randn": lambda: tune.randn(d.mean, d.sd),
        "qrandn": lambda: tune.qrandn(d.mean, d.sd, d.q),
        "randint": lambda: tune.randint(d.low, d.high),
        "qrandint": lambda: tune.qrandint(d.low, d.high, d.q),
        "lograndint": lambda: tune.lograndint(d.low, d.high),
        "qlograndint": lambda: tune.qlograndint(d.low, d.high, d.q),
        "choice": lambda: tune.choice(list(d.values)),
        "grid": lambda: tune.grid_search(list(d.values)),
    }
    return builders[dist.type]()


def mutation_domain(dist: _Dist) -> Any:
    """A distribution as PBT's ``hyperparam_mutations`` value (Ray's ``PopulationBasedTraining``).

    ``choice`` and ``grid`` become a list of their values, which PBT perturbs by moving to a
    neighbouring value (and resamples from); Ray would treat a ``tune.choice`` as a number
    and multiply it by 0.8 or 1.2. Every other type is its Ray sampling object, as in
    :func:`to_ray_space` (resampled from; perturbed by a factor of 0.8 or 1.2, an integer one
    rounded).

    Args:
        dist: A validated distribution.

    Returns:
        A list, or a Ray ``Domain`` (``tune.loguniform(...)``, ...).
    """
    if dist.type in ("choice", "grid"):
        return list(dist.values)
    return _to_ray(dist, grid=False)


def to_ray_space(spec: Spec) -> dict[str, Any]:
    """Translate ``spec.param_space`` into a Ray Tune ``param_space``.

    Args:
        spec: The validated spec.

    Returns:
        A nested dict of Ray sampling objects (``tune.loguniform(...)``, ...),
        ``tune.grid_search`` entries and plain constants, with the spec's nesting.
    """
    grid = spec.search.algorithm == "grid"

    def convert(space: Mapping[str, Any]) -> dict[str, Any]:
        return {
            key: convert(value) if isinstance(value, dict)
            else _to_ray(value, grid) if isinstance(value, _Dist)
            else value
            for key, value in space.items()
        }

    return convert(spec.param_space)


def grid_size(spec: Spec) -> int:
    """Number of grid points (1 without grid parameters); trials = grid_size x num_samples."""
    grid = spec.search.algorithm == "grid"
    sizes = [
        len(grid_values(v)) for _, v in distributions(spec.param_space)
        if v.type == "grid" or (grid and (v.type == "choice" or getattr(v, "grid_points", None)))
    ]
    return math.prod(sizes) if sizes else 1


def plain(value: Any) -> Any:
    """Return ``value`` with numpy scalars and arrays turned into plain Python values.

    BOHB (through ConfigSpace) and others hand out ``np.str_``, ``np.float64`` and
    ``np.int64``; users get ``str``, ``float`` and ``int``.
    """
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value
