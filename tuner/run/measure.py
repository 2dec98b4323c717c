"""Seconds per iteration for the budget forecast (:mod:`tuner.search.forecast`): measured on one
trial (``tuner validate --measure N``), or read from an earlier experiment (``--from``).

``--measure N`` runs the spec's first trial (the first config its searcher draws) for N
iterations through Ray Tune, with the spec's trainable, resources and searcher but a FIFO
scheduler, in a temporary folder that is removed afterwards: ``tuner validate`` writes
nothing into the experiment's storage.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from typing import Any

from tuner.errors import TrialError

__all__ = ["Measurement", "measure", "from_experiment"]


@dataclass(frozen=True)
class Measurement:
    """Seconds per iteration and where they come from.

    Attributes:
        seconds_per_iteration: Mean of Ray's ``time_this_iter_s`` over the counted
            iterations, in seconds.
        iterations: How many iterations were counted.
        first_iteration_s: The first iteration's ``time_this_iter_s`` (it includes the
            trial's start-up) when it was left out of the mean, else None.
        source: Where the figure comes from, for the plan line.
        config: The measured trial's config (``--measure``), else None.
    """

    seconds_per_iteration: float
    iterations: int
    first_iteration_s: float | None
    source: str
    config: dict[str, Any] | None = None

    def describe(self) -> str:
        """The plan line: ``measured:   0.51 s per iteration (...)``."""
        first = "" if self.first_iteration_s is None else \
            f"; the first, {self.first_iteration_s:.3g} s with the trial's start-up, left out"
        return (f"measured:   {self.seconds_per_iteration:.3g} s per iteration (mean of {self.iterations} "
                f"iteration{'s' if self.iterations != 1 else ''} of {self.source}{first})")


def _mean_later(times: list[tuple[int, float]]) -> tuple[float, int, float | None]:
    """Mean seconds of the iterations after the first (all when there is only the first).

    Args:
        times: ``(training_iteration, time_this_iter_s)`` pairs, NaN dropped.

    Returns:
        ``(mean, counted, first or None)``.
    """
    later = [t for i, t in times if i > 1]
    firsts = [t for i, t in times if i <= 1]
    if later:
        return sum(later) / len(later), len(later), (sum(firsts) / len(firsts) if firsts else None)
    return sum(t for _, t in times) / len(times), len(times), None


def measure(prepared: Any, iterations: int) -> Measurement:
    """Run the spec's first trial for ``iterations`` iterations and time them.

    Ray's ``time_this_iter_s`` of each iteration; for ``iterations > 1`` the first is left
    out of the mean (it includes the trial's start-up). The trial runs through
    ``ray.tune.Tuner`` with the spec's searcher (limited to one trial at a time) and a
    ``MaximumIterationStopper`` whose ``stop_all`` ends the experiment once the trial
    reached ``iterations``, so the searcher's first config is the one measured.

    Args:
        prepared: A :class:`tuner.run.prepare.Prepared` (from ``tuner validate``).
        iterations: N >= 1.

    Returns:
        The :class:`Measurement`.

    Raises:
        TrialError: The trial errored, or reported no ``time_this_iter_s``.
    """
    from ray import tune
    from ray.tune.stopper import MaximumIterationStopper

    from tuner.search.algorithms import build_searcher
    from tuner.run.cluster import ray_session
    from tuner.run.engine import before_ray_tune
    from tuner.experiment.layout import trial_folder_of
    from tuner.run.loggers import JsonLogger
    from tuner.search.space import ray_num_samples, to_ray_space
    from tuner.run.trainable import build_trainable, checkpoint_config, driver_request

    class _Times(tune.Callback):
        """Ray's ``time_this_iter_s`` of each result, as the trial reports it."""

        def __init__(self) -> None:
            self.times: list[tuple[int, float]] = []
            self.config: dict[str, Any] = {}
            self.trial_id: str | None = None

        def on_trial_result(self, iteration, trials, trial, result, **info):
            self.trial_id = self.trial_id or trial.trial_id
            if trial.trial_id != self.trial_id:
                return
            self.times.append((int(result["training_iteration"]), float(result["time_this_iter_s"])))
            self.config = dict(trial.config)

    class _FirstTrialStopper(MaximumIterationStopper):
        """Stop the trial at ``max_iter``, and the experiment with it."""

        done = False

        def __call__(self, trial_id: str, result: dict) -> bool:
            stop = super().__call__(trial_id, result)
            self.done = self.done or stop
            return stop

        def stop_all(self) -> bool:
            return self.done

    spec = prepared.spec
    before_ray_tune(prepared)
    ranked = spec.scheduler_objective
    basic = spec.search.algorithm in ("grid", "random")
    times = _Times()
    with tempfile.TemporaryDirectory(prefix="tuner-measure-") as tmp:
        location = os.path.join(tmp, spec.name)
        with ray_session(prepared.num_cpus, prepared.num_gpus, prepared.python_path, prepared.address):
            tuner = tune.Tuner(
                tune.with_resources(build_trainable(prepared.trainable, spec, location), driver_request(spec)),
                param_space=to_ray_space(spec),
                tune_config=tune.TuneConfig(
                    metric=ranked.metric if ranked else None, mode=ranked.mode if ranked else None,
                    search_alg=build_searcher(spec, 1), num_samples=ray_num_samples(spec),
                    max_concurrent_trials=None if basic else 1, reuse_actors=False,
                    trial_dirname_creator=trial_folder_of),
                run_config=tune.RunConfig(
                    name=spec.name, storage_path=tmp, stop=_FirstTrialStopper(iterations), verbose=0,
                    callbacks=[times, JsonLogger()], checkpoint_config=checkpoint_config(prepared.trainable, spec)),
            )
            grid = tuner.fit()
        result = grid[0]
        if result.error is not None:
            raise TrialError(f"the trial measured for --measure failed: {type(result.error).__name__}: "
                             f"{result.error}", path=result.path)
    measured = [(i, t) for i, t in times.times if not math.isnan(t)]
    if not measured:
        raise TrialError("the trial measured for --measure reported no result (no time_this_iter_s)")
    mean, counted, first = _mean_later(measured)
    reached = max(i for i, _ in measured)
    source = f"one trial run for {reached} iteration{'s' if reached != 1 else ''} here"
    return Measurement(mean, counted, first, source, times.config)


def from_experiment(path: str | os.PathLike) -> Measurement:
    """Seconds per iteration measured in an earlier experiment (``tuner validate --from``).

    The mean of ``time_this_iter_s`` over every trial's iterations after its first (each
    trial's first includes its start-up), as :func:`tuner.report.load_experiment` reads
    them from the trials' ``result.json``.

    Args:
        path: The experiment folder.

    Returns:
        The :class:`Measurement`.

    Raises:
        ReportError: ``path`` is not an experiment folder, or none of its trials reported.
    """
    from tuner.report.loading import ReportError, load_experiment

    exp = load_experiment(path)
    h = exp.history
    if h.empty or "time_this_iter_s" not in h:
        raise ReportError(f"{exp.path} has no reported iterations to time (no time_this_iter_s in its trials' "
                          "results); give an experiment whose trials reported, or use --measure N.")
    times = [(int(i), float(t)) for i, t in zip(h["training_iteration"], h["time_this_iter_s"])
             if not math.isnan(float(t))]
    mean, counted, _ = _mean_later(times)
    return Measurement(mean, counted, None, f"experiment {exp.path}, first iterations of each trial left out"
                       if any(i > 1 for i, _ in times) else f"experiment {exp.path}")


def time_lines(prepared: Any, measurement: Measurement | None) -> list[str]:
    """Plan lines of the forecast in time: the measurement, wall time, GPU-hours, time budget.

    Args:
        prepared: A :class:`tuner.run.prepare.Prepared` whose ``cluster`` is known (else no lines).
        measurement: From :func:`measure` or :func:`from_experiment`; None without one (a
            forecast in ``time_total_s`` needs none).

    Returns:
        Lines for ``tuner validate``; empty when there is nothing to turn into time.
    """
    from tuner.search.forecast import ITERATIONS, SECONDS, describe_estimate, estimate, forecast_on

    spec = prepared.spec
    fc, at_once = forecast_on(spec, prepared.cluster)
    lines = [measurement.describe()] if measurement is not None else []
    if fc.unit == SECONDS:
        rate = 1.0
    elif fc.unit == ITERATIONS and measurement is not None:
        rate = measurement.seconds_per_iteration
    else:
        if measurement is not None:
            lines.append(f"wall time:  unknown: the forecast counts {fc.unit}, not iterations")
        return lines
    if at_once is None:
        return lines + ["wall time:  unknown: the cluster's resources are not known"]
    est = estimate(fc, rate, at_once, float(spec.resources.total["gpu"]), spec.time_budget_s)
    return lines + describe_estimate(fc, est, spec.time_budget_s)
