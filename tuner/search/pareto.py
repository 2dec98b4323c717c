"""Several objectives: which trials are feasible, which form the Pareto front, and the hypervolume.

The rules, written once (``summary.json``, ``results.csv``, ``pareto_configs.yaml``,
:class:`~tuner.run.results.TuneResult`, ``tuner report`` and the console's progress line use them):

* A trial is *feasible* when its last result meets every constraint of the spec
  (:meth:`tuner.spec.sections.Constraint.violation` ``<= 0``); a missing, NaN or non-numeric
  constraint metric is infeasible. A spec without constraints makes every trial feasible.
* A trial *has a result* when it did not error and its last value of every objective is a
  finite number (:func:`tuner.core.best.has_result`, per objective).
* The *Pareto front* is the set of feasible trials with a result that no other such trial
  dominates: ``b`` dominates ``a`` when ``b`` is at least as good on every objective and better
  on one (Optuna's ``Study.best_trials``, which this module calls on an in-memory study).
* The *hypervolume* is the volume of objective space that the front dominates, bounded by a
  reference point (Zitzler and Thiele, "Multiobjective Optimization Using Evolutionary
  Algorithms: A Comparative Case Study", PPSN 1998; computed by Optuna's WFG implementation,
  While et al., "A Fast Way of Calculating Exact Hypervolumes", IEEE TEC 2012). The reference
  point is the worst feasible value of each objective, moved 10% of its range further out
  (:func:`reference_point`), unless the caller gives one.

No Ray import: ``tuner report`` reads experiment folders without Ray.
"""

from __future__ import annotations

from typing import Any, TypeVar
from collections.abc import Callable, Iterable, Mapping, Sequence

from tuner.core.best import ERROR, is_finite_number, metric_value

__all__ = ["feasible", "violations", "objective_values", "pareto_front", "reference_point", "hypervolume",
           "hypervolume_history", "to_losses"]

T = TypeVar("T")

Objectives = Sequence[Any]  # items with .metric and .mode (tuner.spec.sections.Objective), or (metric, mode) pairs
Constraints = Sequence[Any]  # tuner.spec.sections.Constraint


def _pairs(objectives: Objectives) -> list[tuple[str, str]]:
    return [(o.metric, o.mode) if hasattr(o, "metric") else (str(o[0]), str(o[1])) for o in objectives]


def violations(result: Mapping[str, Any] | None, constraints: Constraints | None) -> list[float]:
    """How far one result is outside each constraint, in the metric's units; ``<= 0`` is within.

    Args:
        result: A trial's last result (metric name to value; ``a/b`` finds a nested one).
        constraints: The spec's constraints, or None.

    Returns:
        One value per constraint, in order; ``inf`` for a missing or non-finite metric.
    """
    return [c.violation(metric_value(result, c.metric)) for c in constraints or ()]


def feasible(result: Mapping[str, Any] | None, constraints: Constraints | None) -> bool:
    """Whether a trial's last result meets every constraint (True without constraints)."""
    return all(v <= 0 for v in violations(result, constraints))


def objective_values(result: Mapping[str, Any] | None, objectives: Objectives) -> list[float] | None:
    """A result's value of each objective, as floats, or None when one is missing or not finite."""
    values = [metric_value(result, metric) for metric, _ in _pairs(objectives)]
    if not all(is_finite_number(v) for v in values):
        return None
    return [float(v) for v in values]


def to_losses(values: Sequence[float], objectives: Objectives) -> list[float]:
    """Objective values as losses (lower is better): a ``max`` objective's value is negated."""
    return [-v if mode == "max" else v for v, (_, mode) in zip(values, _pairs(objectives))]


def pareto_front(items: Iterable[T], objectives: Objectives, *, result: Callable[[T], Mapping[str, Any] | None],
                 status: Callable[[T], Any], constraints: Constraints | None = None) -> list[T]:
    """The items (trials, rows) on the Pareto front, in their given order.

    Args:
        items: One item per trial.
        objectives: The spec's objectives (:attr:`tuner.spec.Spec.objectives`; 1 or more).
        result: The item's last result (metric name to value).
        status: The item's status (``ERROR`` for a trial that errored).
        constraints: The spec's constraints, or None.

    Returns:
        The feasible items with a result on every objective that no other such item dominates
        (Optuna's ``Study.best_trials``); equal value vectors are all on the front. With one
        objective: every item that ties for the best value.
    """
    import optuna
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    pairs = _pairs(objectives)
    candidates: list[tuple[T, list[float]]] = []
    for item in items:
        res = result(item)
        if str(status(item)) == ERROR or not feasible(res, constraints):
            continue
        values = objective_values(res, pairs)
        if values is not None:
            candidates.append((item, values))
    if not candidates:
        return []
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["minimize" if mode == "min" else "maximize" for _, mode in pairs])
    # A parameter named by the item's index carries it through Optuna, which renumbers trials.
    index = FloatDistribution(0, max(len(candidates) - 1, 1))
    study.add_trials([create_trial(values=values, state=TrialState.COMPLETE, params={"i": float(i)},
                                   distributions={"i": index}) for i, (_, values) in enumerate(candidates)])
    on_front = {int(t.params["i"]) for t in study.best_trials}
    return [item for i, (item, _) in enumerate(candidates) if i in on_front]


def reference_point(points: Sequence[Sequence[float]], objectives: Objectives, margin: float = 0.1) -> list[float]:
    """The hypervolume's reference point for objective values: each objective's worst value, moved
    ``margin`` of its range (1.0 where the range is 0) further out.

    Args:
        points: Objective values of the feasible trials, shape ``(n_trials, n_objectives)``; n >= 1.
        objectives: The spec's objectives.
        margin: The fraction of each objective's range added beyond its worst value.

    Returns:
        One value per objective, in the objectives' own units and directions.
    """
    out = []
    for j, (_, mode) in enumerate(_pairs(objectives)):
        column = [float(p[j]) for p in points]
        lo, hi = min(column), max(column)
        span = (hi - lo) or 1.0
        out.append(lo - margin * span if mode == "max" else hi + margin * span)
    return out


def hypervolume(points: Sequence[Sequence[float]], objectives: Objectives, reference: Sequence[float]) -> float:
    """The hypervolume that ``points`` dominate up to ``reference``, in the product of the objectives' units.

    Args:
        points: Objective values, shape ``(n, n_objectives)``, in the objectives' own directions
            (dominated points are allowed; they add nothing).
        objectives: The spec's objectives.
        reference: The reference point (:func:`reference_point`), in the same units; a point not
            strictly better than it on every objective adds nothing.

    Returns:
        The hypervolume (0.0 for no point), computed by Optuna's WFG implementation.
    """
    import numpy as np
    from optuna._hypervolume import compute_hypervolume  # Optuna's WFG; no public entry point in Optuna 5.0

    ref = np.asarray(to_losses(reference, objectives), dtype=float)
    losses = np.asarray([to_losses(p, objectives) for p in points], dtype=float).reshape(-1, len(ref))
    losses = losses[np.all(losses < ref, axis=1)]
    if not len(losses):
        return 0.0
    return float(compute_hypervolume(losses, ref))


def hypervolume_history(points: Sequence[Sequence[float] | None], objectives: Objectives,
                        reference: Sequence[float]) -> list[float]:
    """The hypervolume after each trial, in trial order: how the front converged.

    Args:
        points: One entry per trial in the order they were created: its objective values, or None
            for a trial that is infeasible, errored or has no result (it adds nothing).
        objectives: The spec's objectives.
        reference: The reference point.

    Returns:
        ``len(points)`` hypervolumes, non-decreasing.
    """
    history, seen, last = [], [], 0.0
    for p in points:
        if p is not None:
            seen.append(p)
            last = hypervolume(seen, objectives, reference)
        history.append(last)
    return history
