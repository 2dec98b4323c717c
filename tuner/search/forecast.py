"""The budget forecast: how many trial-iterations a spec will cost, before the run.

``tuner validate`` prints it (:func:`describe`); ``tuner run`` records it in the run
record so that ``tuner report`` can compare it with what was used
(:func:`tuner.report.analysis.budget`).

Two counts, in units of the scheduler's ``time_attr`` (iterations for the default
``training_iteration``; seconds for ``time_total_s``):

* the maximum: trials x the most a trial can run (``scheduler.max_t`` or
  ``stop.<time_attr>``, the smaller); unbounded when neither exists;
* the expected count under the scheduler's stopping pattern, where it is known:

  - ``asha``: a seeded simulation of Ray's ``AsyncHyperBandScheduler`` (Li et al., "A
    System for Massively Parallel Hyperparameter Tuning", MLSys 2020, as Ray 2.60's
    ``ray/tune/schedulers/async_hyperband.py`` implements it), :func:`simulate_asha`.
    The expected count is the median of :data:`SIMULATIONS` simulated runs, with their
    10th and 90th percentiles as its range. The paper's rule (1/rf of the trials that
    reach a rung go on) holds only in the limit of many trials: Ray compares a trial with
    the trials recorded at the rung before it, so the first trials at each rung go on,
    and the fewer the trials the more the run uses beyond the paper's count. Above
    :data:`MAX_SIMULATED_TRIALS` trials the count is the paper's rule (:func:`asha_paper`),
    which the simulation tends to.
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

Pure: no Ray at import (the trial count of a grid imports :mod:`tuner.search.space` when asked).
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from dataclasses import asdict, dataclass
from typing import Any

from tuner.spec import Spec

__all__ = ["Forecast", "Estimate", "forecast", "forecast_on", "estimate", "describe", "describe_estimate",
           "trials_at_once",
           "simulate_asha", "asha_evaluations", "asha_paper", "simulation_runs", "MAX_SIMULATED_TRIALS",
           "ITERATIONS", "SECONDS", "SIMULATIONS", "SEED", "SPEED_SPREAD"]

#: The default ``time_attr``: counts are trial-iterations (epochs when a trial reports once an epoch).
ITERATIONS = "training_iteration"
#: A ``time_attr`` whose counts are trial-seconds already.
SECONDS = "time_total_s"

#: Simulated runs behind ASHA's expected count (fewer for large experiments: about
#: :data:`_SIMULATED_TRIALS` trials in all, at least :data:`_MIN_SIMULATIONS` runs).
SIMULATIONS = 200
_SIMULATED_TRIALS = 20_000
_MIN_SIMULATIONS = 5
#: Above this many trials ASHA's count is the paper's rule, the simulation's limit (:func:`asha_paper`),
#: so that the plan stays fast.
MAX_SIMULATED_TRIALS = _SIMULATED_TRIALS // _MIN_SIMULATIONS
#: The simulation's seed: the same spec and trials at once give the same forecast.
SEED = 0
#: Standard deviation of the log of a trial's seconds per ``time_attr`` unit in the
#: simulation: trials run at different speeds (batch sizes, model sizes), which sets the
#: order in which they reach each rung.
SPEED_SPREAD = 0.5

_SOURCES = {
    "asha": "Ray's asynchronous successive halving (Li et al. 2020) simulated {runs} times at {at_once} trial{s} at "
            "a time, trials of random rank",
    "asha-paper": "1/reduction_factor of the trials reaching each rung go on, the analysis of Li et al. 2020 (ASHA), "
                  "which Ray's asynchronous promotion tends to with many trials (over {limit:,} trials: not "
                  "simulated; a lower estimate)",
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
        expected_low: The 10th percentile of the simulated runs (``asha``); None where
            the count has no spread.
        expected_high: Their 90th percentile; None where the count has no spread.
        at_once: Trials at a time that the simulation assumed (``asha``), else None.
    """

    trials: int
    unit: str
    per_trial: float | None
    max_total: float | None
    expected_total: float | None
    scheduler: str
    rule: str
    notes: tuple[str, ...] = ()
    expected_low: float | None = None
    expected_high: float | None = None
    at_once: int | None = None

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


def forecast(spec: Spec, trials: int | None = None, at_once: int | None = None, *,
             seed: int = SEED) -> Forecast:
    """The budget forecast of ``spec``: maximum and expected trial-iterations.

    Args:
        spec: The validated spec.
        trials: Trials the experiment runs; default: the grid size x ``num_samples``
            (:func:`tuner.search.space.grid_size`, which imports Ray Tune).
        at_once: Trials that run at once (:func:`trials_at_once`), which ASHA's count
            depends on; default (the cluster not known): ``max_concurrent_trials``, else 1.
        seed: The seed of ASHA's simulation (:func:`simulate_asha`).

    Returns:
        The :class:`Forecast`; see the module's docstring for each scheduler's rule.
    """
    if trials is None:
        from tuner.search.space import grid_size

        trials = grid_size(spec) * spec.num_samples
    sched = spec.scheduler
    unit = sched.time_attr
    per_trial, stop_cap = _caps(spec)
    notes = _notes(spec)
    rule = _SOURCES[sched.type]
    slots = max(1, at_once if at_once is not None else spec.max_concurrent_trials or 1)
    runs = simulation_runs(trials)
    if sched.type == "asha" and trials > MAX_SIMULATED_TRIALS:
        rule = _SOURCES["asha-paper"].format(limit=MAX_SIMULATED_TRIALS)
    elif sched.type == "asha":
        rule = rule.format(runs=runs, at_once=slots, s="s" if slots != 1 else "")
    if per_trial is None:
        return Forecast(trials, unit, None, None, None, sched.type, rule, notes)
    max_total = trials * per_trial
    expected: float | None = max_total
    if sched.type == "asha" and trials > MAX_SIMULATED_TRIALS:
        return Forecast(trials, unit, per_trial, max_total, asha_paper(spec, trials, per_trial), sched.type, rule,
                        notes)
    if sched.type == "asha":
        totals = sorted(simulate_asha(spec, trials, slots, runs=runs, seed=seed))
        return Forecast(trials, unit, per_trial, max_total, _percentile(totals, 0.5), sched.type, rule, notes,
                        _percentile(totals, 0.1), _percentile(totals, 0.9), slots)
    if sched.type in ("hyperband", "bohb"):
        expected = _hyperband(spec, trials, per_trial, stop_cap)
    return Forecast(trials, unit, per_trial, max_total, expected, sched.type, rule, notes)


def _caps(spec: Spec) -> tuple[float | None, float | None]:
    """``(per_trial, stop_cap)``: the most one trial runs (``scheduler.max_t`` where the scheduler stops
    trials there, or ``stop``'s threshold, the smaller; None without either) and ``stop``'s threshold
    alone (None without one), in ``time_attr`` units."""
    sched = spec.scheduler
    unit = sched.time_attr
    stop_cap = _ceil(unit, spec.stop[unit]) if spec.stop and unit in spec.stop else None
    max_t = _ceil(unit, spec.scheduler_max_t) if hasattr(sched, "max_t") else None
    caps = [c for c in (stop_cap, max_t if getattr(sched, "stop_last_trials", True) else None) if c is not None]
    return (min(caps) if caps else None), stop_cap


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


def asha_paper(spec: Spec, trials: int, cap: float) -> float:
    """Trial-units under the rule of the ASHA paper's analysis: in each bracket, 1/rf of the trials reaching a
    rung go on (Li et al. 2020); trials shared among the brackets as Ray draws them. Ray's ASHA uses more
    with few trials (:func:`simulate_asha`) and tends to this with many.

    Args:
        spec: The validated spec, with an ``asha`` scheduler.
        trials: Trials of the experiment.
        cap: The most one trial runs (:attr:`Forecast.per_trial`).
    """
    from tuner.search.rungs import bracket_rungs

    s = spec.scheduler
    rf = float(s.reduction_factor)  # type: ignore[union-attr]
    brackets = bracket_rungs(spec)
    sizes = [len(b) for b in brackets]
    weights = [math.exp(n - max(sizes)) for n in sizes]  # Ray's AsyncHyperBandScheduler.on_trial_add
    total = 0.0
    for weight, rungs in zip(weights, brackets):
        reached, prev, work = 1.0, 0.0, 0.0
        for rung in rungs:
            milestone = _ceil(s.time_attr, rung)
            if milestone >= cap:
                break
            work += reached * (milestone - prev)
            reached, prev = reached / rf, milestone
        work += reached * (cap - prev)
        total += trials * weight / sum(weights) * work
    return total


def simulation_runs(trials: int) -> int:
    """Simulated runs of ASHA for an experiment of ``trials`` trials: :data:`SIMULATIONS`, fewer for large
    experiments (about 20,000 simulated trials in all, and at least 5 runs)."""
    return max(_MIN_SIMULATIONS, min(SIMULATIONS, _SIMULATED_TRIALS // max(1, trials)))


def _percentile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of ascending ``ordered``, interpolated linearly (numpy's default method)."""
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    if lo + 1 >= len(ordered):
        return ordered[lo]
    return ordered[lo] + (pos - lo) * (ordered[lo + 1] - ordered[lo])


def asha_evaluations(milestones: list[float], cap: float, whole: bool, stop_last_trials: bool = True
                     ) -> list[tuple[float, int]]:
    """Where Ray's ASHA compares a trial that is never stopped: ``(report, rung)`` pairs.

    Ray's ``_Bracket.on_result`` looks, at each result, for the highest rung at or below
    the result's ``time_attr`` that the trial has no value in yet (or, with
    ``stop_last_trials: false``, for none once the highest such rung has its value), and
    compares the trial there. With whole iterations and rungs a whole iteration apart this is
    each rung at its first iteration at or above it; rungs closer than one iteration are
    skipped and filled by later results, as Ray does. Reports at or after ``cap`` are not
    compared: the trial ends there (``max_t`` stops it before the bracket sees it; a
    ``stop`` criterion ends it before the scheduler decides).

    Args:
        milestones: The bracket's rungs, ascending, in ``time_attr`` units, as Ray computes
            them (``grace_period * reduction_factor**(k + s)``, floats).
        cap: The most one trial runs (:attr:`Forecast.per_trial`).
        whole: True when ``time_attr`` counts whole iterations (results at 1, 2, ...);
            else results are taken to come at every rung exactly.
        stop_last_trials: The scheduler's ``stop_last_trials``.

    Returns:
        ``[(time_attr value of the result, index into milestones), ...]`` in order.
    """
    if not whole:
        return [(m, i) for i, m in enumerate(milestones) if m < cap]
    out: list[tuple[float, int]] = []
    recorded: set[int] = set()
    last = min(int(cap) - 1, math.ceil(max(milestones, default=0)) + len(milestones))
    for t in range(1, last + 1):
        for i in reversed(range(len(milestones))):  # Ray keeps its rungs highest first
            if t >= milestones[i] and i in recorded and not stop_last_trials:
                break
            if t < milestones[i] or i in recorded:
                continue
            recorded.add(i)
            out.append((float(t), i))
            break
    return out


def simulate_asha(spec: Spec, trials: int, at_once: int, *, runs: int = SIMULATIONS, seed: int = SEED,
                  trace: list[tuple[int, int, float, float, bool]] | None = None) -> list[float]:
    """Trial-units used by simulated runs of Ray's ``AsyncHyperBandScheduler`` on ``spec``.

    What is simulated, as Ray 2.60 does it (``ray/tune/schedulers/async_hyperband.py``):

    * each trial is put in bracket ``b`` with probability ``e**(rungs_b - max rungs)``,
      normalised, when it is created; trials start in the order they are created, each as
      soon as one of ``at_once`` slots is free (a stopped or finished trial frees its slot);
    * when a trial reaches a rung (:func:`asha_evaluations`), its metric is compared with
      the values recorded at that rung of its bracket so far: it stops if it is below their
      ``(1 - 1/reduction_factor)`` percentile (numpy's linear interpolation), and goes on
      when it is not or when no value is recorded yet; its value is recorded either way;
    * a trial that is not stopped runs to ``cap`` (``max_t`` or ``stop``, the smaller).

    What is not known before the run is drawn at random (a noise model in which trials
    are exchangeable): each trial's quality is a standard normal draw and sets its metric
    at every rung (the learning curves of two trials do not cross, so its rank among the
    trials is the same at every rung: random, as the searcher's draws are unknown); each
    trial's seconds per ``time_attr`` unit are ``exp(SPEED_SPREAD * z)``, ``z`` standard
    normal, independent of its quality, which sets the order in which trials reach the
    rungs. Trial start-up time is not modelled, nor trials that end or error on their own.

    With ``at_once = 1`` and two trials, the first runs to ``cap`` (it is first at every
    rung) and the second stops at the first rung or runs to ``cap``, as it is worse or
    better than the first. With many trials the share that goes on at each rung tends to
    ``1/reduction_factor``, the rule of the paper's analysis.

    Args:
        spec: The validated spec, with an ``asha`` scheduler.
        trials: Trials of the experiment.
        at_once: Trials that run at once (at least 1).
        runs: Simulated runs.
        seed: Seed of the runs' random draws (:class:`random.Random`): the same seed gives
            the same totals.
        trace: If given, each comparison at a rung is appended to it as ``(run, trial,
            time_attr value, metric, stopped)``; trials are numbered from 0 in creation order.

    Returns:
        One total per run: the sum over trials of the ``time_attr`` units each ran.

    Raises:
        ValueError: When no trial has an end (no ``stop`` and ``stop_last_trials: false``).
    """
    from tuner.search.rungs import bracket_rungs

    s = spec.scheduler
    unit = s.time_attr
    last = getattr(s, "stop_last_trials", True)
    cap = _caps(spec)[0]
    if cap is None:
        raise ValueError("no trial has an end: the spec has no stop and the scheduler's stop_last_trials is false")
    brackets = bracket_rungs(spec)
    sizes = [len(b) for b in brackets]
    weights = [math.exp(n - max(sizes)) for n in sizes]  # Ray's AsyncHyperBandScheduler.on_trial_add
    points = [asha_evaluations(rungs, cap, unit == ITERATIONS, last) for rungs in brackets]
    share = 1.0 - 1.0 / float(s.reduction_factor)  # type: ignore[union-attr]
    rng = random.Random(seed)
    return [_asha_run(points, weights, cap, share, trials, max(1, at_once), rng, trace, r) for r in range(runs)]


def _asha_run(points: list[list[tuple[float, int]]], weights: list[float], cap: float, share: float, trials: int,
              at_once: int, rng: random.Random, trace: list[tuple[int, int, float, float, bool]] | None,
              run: int) -> float:
    """One simulated run of :func:`simulate_asha`: the trial-units it used."""
    recorded: list[dict[int, list[float]]] = [{} for _ in points]
    bracket = rng.choices(range(len(points)), weights=weights, k=trials) if len(points) > 1 else [0] * trials
    running: list[tuple[float, int, int, float, float]] = []  # (time, trial, next evaluation, speed, quality)
    created, total = 0, 0.0

    def start(now: float) -> None:
        nonlocal created
        speed, quality = math.exp(SPEED_SPREAD * rng.gauss(0.0, 1.0)), rng.gauss(0.0, 1.0)
        first = points[bracket[created]][0][0] if points[bracket[created]] else cap
        heapq.heappush(running, (now + first * speed, created, 0, speed, quality))
        created += 1

    for _ in range(min(at_once, trials)):
        start(0.0)
    while running:
        now, i, j, speed, quality = heapq.heappop(running)
        evals = points[bracket[i]]
        if j == len(evals):  # ran to cap
            total += cap
        else:
            t, rung = evals[j]
            values = recorded[bracket[i]].setdefault(rung, [])
            stopped = bool(values) and quality < _percentile(values, share)
            bisect.insort(values, quality)
            if trace is not None:
                trace.append((run, i, t, quality, stopped))
            if not stopped:
                following = evals[j + 1][0] if j + 1 < len(evals) else cap
                heapq.heappush(running, (now + (following - t) * speed, i, j + 1, speed, quality))
                continue
            total += t
        if created < trials:
            start(now)
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
        cluster: A :class:`tuner.resources.sizing.ClusterResources`.
        trials: Trials of the experiment.

    Returns:
        0 when one trial does not fit.
    """
    from tuner.resources.sizing import trials_that_fit

    fit = trials_that_fit(spec, cluster)
    caps = [fit, trials] + ([spec.max_concurrent_trials] if spec.max_concurrent_trials is not None else [])
    return max(0, min(caps))


def forecast_on(spec: Spec, cluster: Any | None, trials: int | None = None) -> tuple[Forecast, int | None]:
    """The forecast at the trials that run at once on ``cluster``, and that count.

    Args:
        spec: The validated spec.
        cluster: A :class:`tuner.resources.sizing.ClusterResources`, or None when it is not known
            yet (an address not connected to).
        trials: Trials the experiment runs, when the caller has counted them; default: the
            grid size x ``num_samples`` (:func:`tuner.search.space.grid_size`).

    Returns:
        ``(forecast(spec, trials, at_once), at_once)``, with ``at_once`` from
        :func:`trials_at_once` (None without a cluster).
    """
    if trials is None:
        from tuner.search.space import grid_size

        trials = grid_size(spec) * spec.num_samples
    at_once = None if cluster is None else trials_at_once(spec, cluster, trials)
    return forecast(spec, trials, at_once), at_once


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
        count (with its 10th to 90th percentile where it has a spread) and its rule, and
        the notes.
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
        spread = "" if fc.expected_low is None or fc.expected_high is None else \
            f" (10th-90th percentile {_num(fc.expected_low)} to {_num(fc.expected_high)})"
        lines.append(f"            expected {_num(fc.expected_total)}{spread} under {fc.scheduler}: {fc.rule}")
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
