"""The best-trial rule, written once: ``summary.json``, ``results.csv``, ``tuner report`` and the console use it.

The best trial is the best by the last reported value of the metric among the trials
that did not error and are feasible (they meet the spec's constraints: :mod:`tuner.pareto`);
NaN, inf and values that are not numbers are skipped. Between two equal values the trial
with the smaller id wins (ids count up as trials are created).

Trials are ranked the same way, best first: the trials with a result (not errored,
feasible, a finite value) by their value, then every other trial (errored, infeasible,
or without a finite value) by id. With several objectives the metric is the first
objective, the Pareto front's trials (:mod:`tuner.pareto`) come first, and only they can
be the best.

Pure Python, no Ray import: ``tuner report`` reads experiment folders without Ray.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, TypeVar
from collections.abc import Callable, Iterable, Mapping

from tuner.params import NAME_SEP

__all__ = ["ERROR", "metric_value", "is_finite_number", "nan_to_none", "has_result", "is_candidate", "best_reported",
           "rank_key", "ranked", "best"]

ERROR = "ERROR"  # Ray Tune's status of a trial that errored

T = TypeVar("T")


def metric_value(result: Mapping[str, Any] | None, metric: str) -> Any:
    """The metric in one reported result, or None.

    Args:
        result: A trial's result (Ray's ``last_result``, a ``result.json`` line, a row).
        metric: The metric's name; ``a/b`` also finds ``{"a": {"b": ...}}``.
    """
    if not result:
        return None
    if metric in result:
        return result[metric]
    node: Any = result
    for part in metric.split(NAME_SEP):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def is_finite_number(value: Any) -> bool:
    """Whether ``value`` is a metric value: a real number (numpy's too), not a bool, not NaN or inf."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def nan_to_none(value: Any) -> Any:
    """``value``, with a NaN or infinite float as None (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def has_result(value: Any, status: str | None) -> bool:
    """Whether a trial can be the best: it did not error and its last value is a finite number.

    Args:
        value: The trial's last reported value of the metric.
        status: The trial's status (Ray's: ``RUNNING``, ``TERMINATED``, ``ERROR``, ...).
    """
    return str(status) != ERROR and is_finite_number(value)


def best_reported(values: Iterable[Any], mode: str | None) -> float:
    """The best of one trial's reported values of the metric (the best it reached, not its last).

    Args:
        values: The values, in any order; those that are not finite numbers are skipped.
        mode: ``min`` or ``max``.

    Returns:
        The smallest value for ``min``, else the largest; NaN when none is a finite number.
    """
    finite = [v for v in values if is_finite_number(v)]
    if not finite:
        return math.nan
    return min(finite) if mode == "min" else max(finite)


def is_candidate(value: Any, status: str | None, feasible: bool = True, on_front: bool = True) -> bool:
    """Whether a trial can be the best: it has a result (:func:`has_result`), it is feasible, and,
    with several objectives, it is on the Pareto front.

    Args:
        value: The trial's last reported value of the metric.
        status: The trial's status.
        feasible: Whether the trial meets the spec's constraints (:func:`tuner.pareto.feasible`).
        on_front: Several objectives: whether the trial is on the Pareto front; True otherwise.
    """
    return feasible and on_front and has_result(value, status)


def rank_key(value: Any, status: str | None, mode: str | None, trial_id: Any = "", feasible: bool = True,
             on_front: bool = True) -> tuple:
    """The sort key of a trial, best first (see the module's rule).

    Args:
        value: The trial's last reported value of the metric.
        status: The trial's status.
        mode: ``min`` or ``max``.
        trial_id: The trial's id, for ties and for the order of the trials without a result.
        feasible: Whether the trial meets the spec's constraints (:func:`tuner.pareto.feasible`).
        on_front: Several objectives: whether the trial is on the Pareto front (the front's trials
            come first); True otherwise.
    """
    tie = "" if trial_id is None else str(trial_id)
    if feasible and has_result(value, status):
        return (not on_front, 0, float(value) if mode == "min" else -float(value), tie)
    return (not on_front, 1, 0.0, tie)


def ranked(items: Iterable[T], mode: str | None, *, value: Callable[[T], Any], status: Callable[[T], Any],
           trial_id: Callable[[T], Any], feasible: Callable[[T], bool] | None = None,
           on_front: Callable[[T], bool] | None = None) -> list[T]:
    """The items (trials, rows, results) sorted best first.

    Args:
        items: One item per trial.
        mode: ``min`` or ``max``.
        value: The item's last reported value of the metric.
        status: The item's status (``ERROR`` for a trial that errored).
        trial_id: The item's trial id.
        feasible: Whether the item meets the spec's constraints; None: every item does.
        on_front: Several objectives: whether the item is on the Pareto front; None: one objective.

    Returns:
        A new list: the front's trials first (several objectives); within that, the trials with
        a result by their value, best first, then the others by id.
    """
    ok = feasible or (lambda item: True)
    front = on_front or (lambda item: True)
    return sorted(items, key=lambda item: rank_key(value(item), status(item), mode, trial_id(item), ok(item),
                                                   front(item)))


def best(items: Iterable[T], mode: str | None, *, value: Callable[[T], Any], status: Callable[[T], Any],
         trial_id: Callable[[T], Any], feasible: Callable[[T], bool] | None = None,
         on_front: Callable[[T], bool] | None = None) -> T | None:
    """The best item by the rule of this module, or None when no trial can be the best (:func:`is_candidate`).

    Args: as :func:`ranked`.
    """
    order = ranked(items, mode, value=value, status=status, trial_id=trial_id, feasible=feasible, on_front=on_front)
    if order and is_candidate(value(order[0]), status(order[0]), feasible is None or feasible(order[0]),
                              on_front is None or on_front(order[0])):
        return order[0]
    return None
