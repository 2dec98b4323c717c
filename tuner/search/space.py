"""Search-space translation: the Spec's ``param_space`` -> Ray Tune sampling objects.

Each distribution type maps to the Ray Tune sampling function of the same name
(``ray.tune.uniform``, ``ray.tune.qrandint``, ...). Under ``search: {algorithm: grid}``
every ``choice`` and every range with ``grid_points`` becomes a ``tune.grid_search``,
so Ray's ``BasicVariantGenerator`` runs the full cross product.

A conditional space (:mod:`tuner.spec.conditions`) cannot be written as Ray sampling objects: Ray
would sample every parameter, and could not leave an inactive one out. There:

* grid and random search: the parameters that take part in a condition are drawn here
  (:func:`presets`: parents first, then only the active children, each with Ray's own
  sampler; or every valid grid combination once) and handed to Ray's ``BasicVariantGenerator``
  as its ``points_to_evaluate``; :func:`to_ray_space` leaves an empty placeholder at their
  keys (Ray needs the key to set a point's value), which the searcher drops from each
  trial's config when the parameter is inactive (:class:`tuner.search.algorithms._ConditionalVariants`).
  Every other parameter is Ray's, as without conditions.
* optuna and bohb: the searcher holds the whole space (a define-by-run function, a
  ConfigSpace with conditions; :mod:`tuner.search.algorithms`), and :func:`to_ray_space` gives Ray
  the constants only.
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Mapping

import numpy as np
from ray import tune

from tuner.core.params import flatten, nest
from tuner.spec import Spec, BaseDistribution
from tuner.spec.conditions import Param
from tuner.spec.distributions import SubspaceChoice

__all__ = ["to_ray_space", "mutation_domain", "grid_values", "grid_size", "plain", "presets", "ray_num_samples",
           "ray_domain", "PLACEHOLDER", "drop_inactive"]

#: The value :func:`to_ray_space` puts at a conditional parameter's key for grid and random search
#: (a point to evaluate sets it, else :func:`drop_inactive` removes it): an empty mapping, which Ray
#: neither samples nor puts in a trial's tag, and lets a point set (``_get_preset_variants``).
PLACEHOLDER: dict = {}


def grid_values(dist: BaseDistribution) -> list[Any]:
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


def _to_ray(dist: BaseDistribution, grid: bool) -> Any:
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


def ray_domain(dist: BaseDistribution) -> Any:
    """A distribution as its Ray Tune sampling object (``tune.uniform(...)``; ``grid`` as ``tune.choice``)."""
    if dist.type == "grid":
        return tune.choice(list(dist.values))
    return _to_ray(dist, grid=False)


def mutation_domain(dist: BaseDistribution) -> Any:
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
        ``tune.grid_search`` entries and plain constants, with the spec's nesting. For a
        conditional space: :data:`PLACEHOLDER` at the conditional parameters (grid and random
        search), or the constants only (optuna, bohb: their searcher holds the space).
    """
    grid = spec.search.algorithm == "grid"
    space = spec.space
    if space.conditional:
        whole = spec.search.algorithm in ("optuna", "bohb")
        involved = space.conditional_names
        out: dict[str, Any] = {}
        for name, value in flatten(spec.param_space).items():
            if isinstance(value, SubspaceChoice):
                if not whole:
                    out.update({p.key: PLACEHOLDER for p in space.params if p.key.startswith(name + "/")})
            elif isinstance(value, BaseDistribution):
                if not whole:
                    out[name] = PLACEHOLDER if name in involved else _to_ray(value, grid)
            else:
                out[name] = value
        return nest(out)

    def convert(space: Mapping[str, Any]) -> dict[str, Any]:
        return {
            key: convert(value) if isinstance(value, dict)
            else _to_ray(value, grid) if isinstance(value, BaseDistribution)
            else value
            for key, value in space.items()
        }

    return convert(spec.param_space)


def _conditional_grid(spec: Spec) -> list[dict[str, Any]]:
    """Every valid combination of the conditional parameters (flat), each once."""
    space = spec.space
    return [space.keyed(c) for c in space.enumerate(lambda p: grid_values(p.dist), names=space.conditional_names)]


def presets(spec: Spec, count: int | None = None, start: int = 0,
            points: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The configs of a conditional space's conditional parameters, for Ray's ``BasicVariantGenerator``.

    * grid: every valid combination (:meth:`tuner.spec.conditions.Space.enumerate`), the
      list repeated ``num_samples`` times;
    * random: ``search.points_to_evaluate`` first, each completed by drawing the active
      parameters it does not set, then fresh draws up to ``num_samples``. A draw takes the
      parents first, then only the children they make active, each with Ray's sampler for
      its type (``Domain.sample``), from one ``numpy.random.Generator`` seeded with
      ``spec.seed``.

    Args:
        spec: The validated spec, with a conditional space.
        count: Samples (random) or repeats of the grid to make; default ``spec.num_samples``.
        start: Samples or repeats made before (a resume that raises ``num_samples``): the draws
            continue from a different stream, and points to evaluate are not repeated.
        points: The points to evaluate; default ``search.points_to_evaluate`` (a warm start adds
            the earlier best configs to them: :func:`tuner.search.algorithms.build_searcher`).

    Returns:
        Nested partial configs (the conditional parameters of each trial), in trial order.
    """
    space = spec.space
    count = spec.num_samples if count is None else count
    if spec.search.algorithm == "grid":
        return [nest(c) for c in _conditional_grid(spec)] * count
    rng = np.random.default_rng(None if spec.seed is None else [spec.seed, start])
    involved = space.conditional_names

    def draw(p: Param) -> Any:
        return plain(ray_domain(p.dist).sample(random_state=rng))

    if points is None:
        points = getattr(spec.search, "points_to_evaluate", None)
    points = [] if start else list(points or [])
    out = []
    for point in points[:count]:
        flat = flatten(point)
        out.append(nest({**flat, **space.keyed(space.sample(draw, fixed=flat, names=involved))}))
    out += [nest(space.keyed(space.sample(draw, names=involved))) for _ in range(count - len(out))]
    return out


def drop_inactive(config: dict[str, Any], spec: Spec) -> dict[str, Any]:
    """Remove, in place, the :data:`PLACEHOLDER` left at the inactive parameters of a conditional
    space, and a sub-space group left empty; returns ``config``."""
    def prune(node: dict[str, Any], keys: list[str]) -> None:
        for key in keys:
            value = node[key]
            if isinstance(value, dict):
                prune(value, list(value))
                if not value:
                    del node[key]

    roots = {name.split("/", 1)[0] for name in spec.space.conditional_names}
    prune(config, [key for key in config if key in roots])
    return config


def ray_num_samples(spec: Spec) -> int:
    """``TuneConfig.num_samples`` for the spec: ``num_samples``, except for a conditional grid,
    where each valid combination is one of Ray's samples (:func:`presets`)."""
    if spec.conditional and spec.search.algorithm == "grid":
        return len(_conditional_grid(spec)) * spec.num_samples
    return spec.num_samples


def grid_size(spec: Spec) -> int:
    """Number of grid points (1 without grid parameters); trials = grid_size x num_samples.

    For a conditional grid, the valid combinations of the conditional parameters (each once)
    times the grid of the others.
    """
    grid = spec.search.algorithm == "grid"
    space = spec.space
    involved = space.conditional_names if space.conditional and grid else frozenset()
    sizes = [len(grid_values(p.dist)) for p in space.params if p.dist is not None and p.name not in involved
             and (p.dist.type == "grid" or grid and (p.dist.type == "choice" or p.dist.is_numeric_range))]
    if involved:
        sizes.append(len(_conditional_grid(spec)))
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
