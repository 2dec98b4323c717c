"""The best-trial rule, written once: ``summary.json``, ``results.csv``, ``tuner report`` and the console use it.

The best trial is the best by its *score* among the trials that did not error and are
feasible (they meet the spec's constraints: :mod:`tuner.search.pareto`);
NaN, inf and values that are not numbers are skipped. Between two equal values the trial
with the smaller id wins (as strings: under grid and random search Ray's ids count up as trials
are created, so the first created wins; under BOHB and Optuna the ids are random).

A trial's score is :func:`scope_value` of its reported values of the metric under the spec's
``best.scope``, as Ray's ``ResultGrid.get_best_result(scope=...)`` defines the scopes
(``ray/tune/analysis/experiment_analysis.py``, from ``Trial.metric_analysis``): ``last``, its
last value (the default); ``all``, the best value it reported (min or max by the mode);
``last-5-avg``/``last-10-avg``, the mean of its last 5 or 10 values. The functions below take
that score as the trial's "value".

A trial's best checkpoint (:func:`best_checkpoint`) is the one whose reported ``checkpoint.score``
is best; between equal scores the newest wins, as in Ray's checkpoint manager.

Trials are ranked the same way, best first: the trials with a result (not errored,
feasible, a finite value) by their value, then every other trial (errored, infeasible,
or without a finite value) by id. With several objectives the metric is the first
objective, the Pareto front's trials (:mod:`tuner.search.pareto`) come first, and only they can
be the best.

Pure Python, no Ray import: ``tuner report`` reads experiment folders without Ray.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Literal, TypeVar, get_args
from collections.abc import Callable, Iterable, Mapping, Sequence

from tuner.core.params import NAME_SEP

__all__ = ["ERROR", "Scope", "SCOPES", "scope_value", "analysis_value", "best_checkpoint", "metric_value",
           "is_finite_number", "nan_to_none", "has_result", "is_candidate", "best_reported",
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


#: ``best.scope``'s type (Ray's scopes but ``avg``): the spec's field (:class:`tuner.spec.sections.BestTrial`) is of it.
Scope = Literal["last", "all", "last-5-avg", "last-10-avg"]
#: ``best.scope``'s values, in that order.
SCOPES: tuple[str, ...] = get_args(Scope)


def scope_value(values: Sequence[Any], scope: str, mode: str | None) -> Any:
    """A trial's score under a scope, from its reported values of the metric.

    Args:
        values: The values the trial reported, oldest first (one per result that holds the metric).
        scope: One of :data:`SCOPES`.
        mode: ``min`` or ``max``.

    Returns:
        ``last``: the last value as reported (None when there is none); ``all``: the best finite
        value (:func:`best_reported`); ``last-N-avg``: the mean of the last N values, NaN when one
        of them is not a finite number (as Ray's mean would be) or there is none.

    Raises:
        ValueError: An unknown scope.
    """
    if scope == "last":
        return values[-1] if len(values) else None
    if scope == "all":
        return best_reported(values, mode)
    if scope in ("last-5-avg", "last-10-avg"):
        tail = list(values)[-int(scope.split("-")[1]):]
        if not tail or not all(is_finite_number(v) for v in tail):
            return math.nan
        return sum(float(v) for v in tail) / len(tail)
    raise ValueError(f"unknown scope {scope!r}; one of: {', '.join(SCOPES)}")


def analysis_value(analysis: Mapping[str, Any] | None, scope: str, mode: str | None) -> Any:
    """A trial's score under a scope from Ray's running summary of a metric (``Trial.metric_analysis[metric]``:
    ``last``, ``min``, ``max``, ``avg``, ``last-5-avg``, ``last-10-avg``), for a live trial whose history
    is not at hand; it agrees with :func:`scope_value` on finite values.

    Args:
        analysis: The metric's entry of ``Trial.metric_analysis``, or None (never reported).
        scope: One of :data:`SCOPES`.
        mode: ``min`` or ``max``.
    """
    if not analysis:
        return None
    return analysis.get(mode if scope == "all" else scope)


def best_checkpoint(checkpoints: Sequence[tuple[T, Mapping[str, Any] | None]], score: str | None,
                    mode: str | None) -> tuple[T, Mapping[str, Any] | None] | None:
    """A trial's best checkpoint by its score, as Ray's checkpoint manager ranks them
    (``CheckpointConfig.checkpoint_score_attribute``/``checkpoint_score_order``).

    Args:
        checkpoints: ``(checkpoint, metrics reported with it)`` pairs, oldest first (Ray's
            ``Result.best_checkpoints``, or the rows of a DDP trial's history that name one).
        score: The metric that ranks them; None: the newest is the best.
        mode: ``min`` or ``max``.

    Returns:
        The pair whose ``score`` value is best, the newest between equals; the newest pair when
        none has a finite value; None when there is no checkpoint.
    """
    if not checkpoints:
        return None
    scored = [(i, float(v)) for i, (_, m) in enumerate(checkpoints)
              for v in [metric_value(m, score) if score else None] if is_finite_number(v)]
    if not scored:
        return checkpoints[-1]
    sign = 1.0 if mode == "min" else -1.0
    index = min(scored, key=lambda iv: (sign * iv[1], -iv[0]))[0]
    return checkpoints[index]


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
        feasible: Whether the trial meets the spec's constraints (:func:`tuner.search.pareto.feasible`).
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
        feasible: Whether the trial meets the spec's constraints (:func:`tuner.search.pareto.feasible`).
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
