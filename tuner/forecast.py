"""The budget forecast: how many trial-iterations a spec will cost, before the run.

``tuner validate`` prints it (:func:`describe`); ``tuner run`` records it in the run
record so that ``tuner report`` can compare it with what was used
(:func:`tuner.report.analysis.budget`).

Two counts, in units of the scheduler's ``time_attr`` (iterations for the default
``training_iteration``; seconds for ``time_total_s``):

* the maximum: trials x the most a trial can run (``scheduler.max_t`` or
  ``stop.<time_attr>``, the smaller); unbounded when neither exists;
* the expected count under the scheduler's stopping pattern, where it is known:

  - ``asha``: Li et al., "A System for Massively Parallel Hyperparameter Tuning" (MLSys
    2020). Trials are shared among the brackets as Ray's ``AsyncHyperBandScheduler``
    draws them (bracket ``b`` with probability ``e**(rungs_b - max rungs)``, normalised);
    in a bracket, ``1/reduction_factor`` of the trials that reach a rung go on to the
    next, the rule of the paper's analysis. Ray promotes asynchronously (a trial goes on
    when it is in the top ``1/rf`` of those that reached the rung before it), which lets
    more trials through when few have reached a rung: the count is a lower estimate for
    small experiments (docs/benchmarks.md measures it).
  - ``hyperband``/``bohb``: Li et al., "Hyperband: A Novel Bandit-Based Approach to
    Hyperparameter Optimization" (JMLR 2018); Falkner et al., "BOHB: Robust and Efficient
    Hyperparameter Optimization at Scale" (ICML 2018). Successive halving in the brackets
    of Ray's ``HyperBandScheduler``/``HyperBandForBOHB``: the same bracket sizes
    (``ceil(s_max_1 / (s + 1) * rf**s)`` trials from ``int(max_t * rf**-s)`` iterations),
    filled in Ray's order (``s = 0, 1, ...`` for Hyperband, the reverse for BOHB), each
    rung keeping ``ceil(n / rf)`` of the bracket's size and its milestones growing as
    Ray's (``int(min(r * rf, max_t))``). Exact when no trial ends or errors on its own.
  - ``fifo`` and ``median``: the maximum (FIFO stops nothing; the median stopping rule
    has no stopping pattern known before the run).
  - ``pbt``/``pb2``: the maximum (a population scheduler perturbs trials but does not
    stop them).

Pure: no Ray at import (the trial count of a grid imports :mod:`tuner.space` when asked).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from tuner.spec import Spec

__all__ = ["Forecast", "Estimate", "forecast", "estimate", "describe", "describe_estimate", "trials_at_once",
           "ITERATIONS", "SECONDS"]

#: The default ``time_attr``: counts are trial-iterations (epochs when a trial reports once an epoch).
ITERATIONS = "training_iteration"
#: A ``time_attr`` whose counts are trial-seconds already.
SECONDS = "time_total_s"

_SOURCES = {
    "asha": "1/reduction_factor of the trials reaching each rung go on, as in the analysis of Li et al. 2020 "
            "(ASHA); Ray's asynchronous promotion lets more through when few trials have reached a rung",
    "hyperband": "successive halving in Ray's Hyperband brackets (Li et al. 2018), each rung keeping "
                 "ceil(n / reduction_factor)",
    "bohb": "successive halving in Ray's HyperBandForBOHB brackets (Falkner et al. 2018), each rung keeping "
            "ceil(n / reduction_factor)",
    "fifo": "fifo stops no trial early",
    "median": "the median stopping rule has no stopping pattern known before the run",
    "pbt": "pbt perturbs trials but does not stop them",
    "pb2": "pb2 perturbs trials but does not stop them",
}


#: The schedulers whose stopping pattern gives an expected count below the maximum.
_PATTERNED = ("asha", "hyperband", "bohb")


@dataclass(frozen=True)
class Forecast:
    """What a spec's experiment will cost, in units of the scheduler's ``time_attr``.

    Attributes:
        trials: Trials the experiment runs (grid points x ``num_samples``).
        unit: The scheduler's ``time_attr``: ``training_iteration`` (counts are
            trial-iterations), ``time_total_s`` (trial-seconds) or another reported key.
        per_trial: The most one trial runs, in ``unit``; None when unbounded.
        max_total: ``trials x per_trial``; None when unbounded.
        expected_total: The expected total under the scheduler's stopping pattern; equal
            to ``max_total`` where no pattern is known; None when unbounded.
        scheduler: The scheduler type.
        rule: How ``expected_total`` was worked out (and its source).
        notes: What else may end the run sooner (a metric in ``stop``, a time budget).
    """

    trials: int
    unit: str
    per_trial: float | None
    max_total: float | None
    expected_total: float | None
    scheduler: str
    rule: str
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The forecast as JSON-ready values (``notes`` a list)."""
        out = asdict(self)
        out["notes"] = list(self.notes)
        return out


@dataclass(frozen=True)
class Estimate:
    """The forecast turned into time, from a measured rate.

    Attributes:
        seconds_per_unit: Seconds per ``time_attr`` unit (per iteration), measured.
        trials_at_once: Trials that run at once.
        wall_time_s: Expected trial-units x seconds per unit / trials at once, in seconds.
        max_wall_time_s: The same for the maximum, or None when unbounded.
        gpu_hours: Expected trial-units x seconds per unit x GPUs per trial / 3600.
        gpus_per_trial: GPUs one trial holds (summed over its DDP workers).
        budget_fraction: ``time_budget_s / wall_time_s`` when the budget is shorter (the
            share of the forecast work done when it stops the run), else None.
    """

    seconds_per_unit: float
    trials_at_once: int
    wall_time_s: float
    max_wall_time_s: float | None
    gpu_hours: float
    gpus_per_trial: float
    budget_fraction: float | None


def forecast(spec: Spec, trials: int | None = None) -> Forecast:
    """The budget forecast of ``spec``: maximum and expected trial-iterations.

    Args:
        spec: The validated spec.
        trials: Trials the experiment runs; default: the grid size x ``num_samples``
            (:func:`tuner.space.grid_size`, which imports Ray Tune).

    Returns:
        The :class:`Forecast`; see the module's docstring for each scheduler's rule.
    """
    if trials is None:
        from tuner.space import grid_size

        trials = grid_size(spec) * spec.num_samples
    sched = spec.scheduler
    unit = sched.time_attr
    stop_cap = _ceil(unit, spec.stop[unit]) if spec.stop and unit in spec.stop else None
    max_t = _ceil(unit, spec.scheduler_max_t) if hasattr(sched, "max_t") else None
    stops_at_max_t = getattr(sched, "stop_last_trials", True)
    caps = [c for c in (stop_cap, max_t if stops_at_max_t else None) if c is not None]
    per_trial = min(caps) if caps else None
    notes = _notes(spec)
    rule = _SOURCES[sched.type]
    if per_trial is None:
        return Forecast(trials, unit, None, None, None, sched.type, rule, notes)
    max_total = trials * per_trial
    expected: float | None = max_total
    if sched.type == "asha":
        expected = _asha(spec, trials, per_trial)
    elif sched.type in ("hyperband", "bohb"):
        expected = _hyperband(spec, trials, per_trial, stop_cap)
    return Forecast(trials, unit, per_trial, max_total, expected, sched.type, rule, notes)


def _ceil(unit: str, value: float) -> float:
    """A threshold on ``training_iteration`` is reached at the first whole iteration at or above it."""
    return float(math.ceil(value - 1e-9)) if unit == ITERATIONS else float(value)


def _notes(spec: Spec) -> tuple[str, ...]:
    unit = spec.scheduler.time_attr
    others = [k for k in (spec.stop or {}) if k != unit]
    notes = []
    if others:
        notes.append(f"stop on {', '.join(others)} may end trials sooner")
    if spec.time_budget_s:
        notes.append(f"time_budget_s {spec.time_budget_s:g} s may end the run sooner")
    return tuple(notes)


def _asha(spec: Spec, trials: int, cap: float) -> float:
    """Expected trial-units under ASHA: per bracket, 1/rf of the trials reaching a rung go on."""
    from tuner.rungs import bracket_rungs

    s = spec.scheduler
    rf = float(s.reduction_factor)  # type: ignore[union-attr]
    brackets = bracket_rungs(spec)
    sizes = [len(b) for b in brackets]
    weights = [math.exp(n - max(sizes)) for n in sizes]  # Ray's AsyncHyperBandScheduler.on_trial_add
    total = 0.0
    for weight, rungs in zip(weights, brackets):
        share = trials * weight / sum(weights)
        reached, prev, work = 1.0, 0.0, 0.0
        for rung in rungs:
            milestone = _ceil(s.time_attr, rung)
            if milestone >= cap:
                break
            work += reached * (milestone - prev)
            reached, prev = reached / rf, milestone
        work += reached * (cap - prev)
        total += share * work
    return total


def _hyperband(spec: Spec, trials: int, cap: float, stop_cap: float | None) -> float | None:
    """Trial-units under Ray's synchronous Hyperband (or BOHB's) brackets, successive halving in each."""
    s = spec.scheduler
    eta = float(s.reduction_factor)  # type: ignore[union-attr]
    max_t = spec.scheduler_max_t
    s_max_1 = int(round(math.log(max_t) / math.log(eta))) + 1  # Ray's HyperBandScheduler.__init__

    def n0(b: int) -> int:
        return int(math.ceil(s_max_1 / (b + 1) * eta ** b))

    def r0(b: int) -> int:
        return int(max_t * eta ** (-b))

    order = list(range(s_max_1)) if s.type == "hyperband" else list(reversed(range(s_max_1)))
    if not any(r0(b) for b in order):
        return None
    last_goes_on = not getattr(s, "stop_last_trials", True)
    left, total = trials, 0.0
    while left > 0:
        for b in order:  # one band: one bracket per s, filled in Ray's order (a too-small bracket skipped)
            if left <= 0 or r0(b) == 0:
                continue
            live, size, r, prev = min(left, n0(b)), n0(b), r0(b), 0.0
            left -= live
            for halves in range(b, -1, -1):
                milestone = min(float(r), cap)
                total += live * (milestone - prev)
                prev = milestone
                if halves == 0:
                    break
                size = int(math.ceil(size / eta))
                live = min(live, size)
                r = int(min(r * eta, max_t))
            if last_goes_on:  # stop_last_trials: false: the last rung's trials run on to stop
                if stop_cap is None:
                    return None
                total += live * (stop_cap - prev)
    return total


def trials_at_once(spec: Spec, cluster: Any, trials: int) -> int:
    """Trials that run at once: ``min(max_concurrent_trials, what fits the cluster, trials)``.

    Args:
        spec: The validated spec.
        cluster: A :class:`tuner.resources.ClusterResources`.
        trials: Trials of the experiment.

    Returns:
        0 when one trial does not fit.
    """
    from tuner.resources import trials_that_fit

    fit = trials_that_fit(spec, cluster)
    caps = [fit, trials] + ([spec.max_concurrent_trials] if spec.max_concurrent_trials is not None else [])
    return max(0, min(caps))


def estimate(fc: Forecast, seconds_per_unit: float, at_once: int, gpus_per_trial: float,
             time_budget_s: float | None = None) -> Estimate | None:
    """Wall time and GPU-hours of the forecast at a measured rate.

    Wall time assumes the trials keep ``at_once`` slots busy all the run (no wait for a
    synchronous rung, no trial start-up between trials): ``expected x s / at_once``.

    Args:
        fc: From :func:`forecast`.
        seconds_per_unit: Seconds per ``time_attr`` unit (1 for ``time_total_s``).
        at_once: Trials that run at once (:func:`trials_at_once`).
        gpus_per_trial: GPUs one trial holds.
        time_budget_s: The spec's ``time_budget_s``, or None.

    Returns:
        The :class:`Estimate`, or None when the forecast is unbounded or no trial fits.
    """
    if fc.expected_total is None or at_once <= 0:
        return None
    wall = fc.expected_total * seconds_per_unit / at_once
    top = None if fc.max_total is None else fc.max_total * seconds_per_unit / at_once
    gpu_hours = fc.expected_total * seconds_per_unit * gpus_per_trial / 3600
    fraction = time_budget_s / wall if time_budget_s and wall > time_budget_s else None
    return Estimate(seconds_per_unit, at_once, wall, top, gpu_hours, gpus_per_trial, fraction)


def _unit_word(unit: str) -> str:
    return {ITERATIONS: "trial-iterations", SECONDS: "trial-seconds"}.get(unit, f"trial-{unit}")


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 1e-9 or x >= 100 else f"{x:.1f}"


def describe(fc: Forecast) -> list[str]:
    """Plan lines of the forecast (``tuner validate``).

    Returns:
        ``forecast:`` lines: the maximum (or "unbounded: set stop or max_t"), the expected
        count and its rule, and the notes.
    """
    word = _unit_word(fc.unit)
    if fc.per_trial is None:
        where = "stop or max_t" if fc.scheduler in _PATTERNED else f"stop.{fc.unit}"
        return [f"forecast:   unbounded: set {where} (no trial has an end in {fc.unit})"]
    lines = [f"forecast:   at most {_num(fc.max_total or 0)} {word} ({fc.trials} trial{'s' if fc.trials != 1 else ''}"
             f" x {_num(fc.per_trial)})"]
    if fc.expected_total is None:
        lines.append(f"            expected: unbounded (stop_last_trials: false without stop.{fc.unit})")
    elif fc.scheduler in _PATTERNED:
        lines.append(f"            expected {_num(fc.expected_total)} under {fc.scheduler}: {fc.rule}")
    else:
        lines.append(f"            expected the maximum: {fc.rule}")
    lines += [f"            ({n})" for n in fc.notes]
    return lines


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def describe_estimate(fc: Forecast, est: Estimate | None, time_budget_s: float | None = None) -> list[str]:
    """Plan lines of the wall time, GPU-hours and time budget at a measured rate.

    Args:
        fc: From :func:`forecast`.
        est: From :func:`estimate`, or None (unbounded, or nothing fits).
        time_budget_s: The spec's ``time_budget_s``, or None.
    """
    if est is None:
        why = "no trial fits the cluster" if fc.expected_total is not None else "the forecast is unbounded"
        return [f"wall time:  unknown: {why}"]
    top = f" (at most {_duration(est.max_wall_time_s)})" if est.max_wall_time_s not in (None, est.wall_time_s) \
        else ""
    lines = [f"wall time:  ~{_duration(est.wall_time_s)}{top} at {est.trials_at_once} trial"
             f"{'s' if est.trials_at_once != 1 else ''} at a time (expected {_unit_word(fc.unit)} x "
             f"{est.seconds_per_unit:.3g} s / {est.trials_at_once})"]
    if est.gpus_per_trial > 0:
        lines.append(f"GPU-hours:  {est.gpu_hours:.3g} ({est.gpus_per_trial:g} GPU per trial)")
    if time_budget_s:
        if est.budget_fraction is not None:
            lines.append(f"budget:     time_budget_s {time_budget_s:g} s will stop the run after ~"
                         f"{100 * est.budget_fraction:.0f}% of the forecast work")
        else:
            lines.append(f"budget:     fits time_budget_s {time_budget_s:g} s "
                         f"(~{100 * est.wall_time_s / time_budget_s:.0f}% of it)")
    return lines
