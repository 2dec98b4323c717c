"""Searcher and scheduler factory: the Spec's ``search`` and ``scheduler`` -> Ray objects.

Searchers (which configurations to try):
    * ``grid`` and ``random``: ``ray.tune.search.basic_variant.BasicVariantGenerator``.
    * ``optuna``: ``ray.tune.search.optuna.OptunaSearch`` with Optuna's ``TPESampler``
      (Bergstra et al., NeurIPS 2011).
    * ``bohb``: ``ray.tune.search.bohb.TuneBOHB`` (hpbandster; Falkner et al., ICML 2018).

Schedulers (which trials to stop early):
    * ``fifo``: ``FIFOScheduler``; ``asha``: ``ASHAScheduler`` (Li et al., MLSys 2020);
      ``hyperband``: ``HyperBandScheduler`` (Li et al., JMLR 2018); ``bohb``:
      ``HyperBandForBOHB``; ``median``: ``MedianStoppingRule`` (Golovin et al., KDD 2017).

``metric`` and ``mode`` are given to Ray's ``TuneConfig`` only, which hands them on to
the searcher and the scheduler.
"""

from __future__ import annotations

import logging

from ray.tune.schedulers import (
    ASHAScheduler,
    FIFOScheduler,
    HyperBandForBOHB,
    HyperBandScheduler,
    MedianStoppingRule,
    TrialScheduler,
)
from ray.tune.search import Searcher
from ray.tune.search.basic_variant import BasicVariantGenerator

from tuner.rungs import bracket_rungs
from tuner.scheduler_state import KeepsState
from tuner.spec import Spec

__all__ = ["build_searcher", "build_scheduler", "describe_search"]


def build_searcher(spec: Spec, max_concurrent: int | None = None) -> Searcher | BasicVariantGenerator:
    """Build the Ray searcher for ``spec.search``.

    Args:
        spec: The validated spec. ``spec.seed`` seeds the sampler, so the same seed
            gives the same first configurations.
        max_concurrent: Trials in flight at most. Ray applies ``TuneConfig``'s
            ``max_concurrent_trials`` to a Searcher (with a ``ConcurrencyLimiter``) but
            ignores it for a ``BasicVariantGenerator`` instance, so grid and random
            searches get it here.

    Returns:
        A ``BasicVariantGenerator`` (grid, random), ``OptunaSearch`` or ``TuneBOHB``.
    """
    search = spec.search
    points = getattr(search, "points_to_evaluate", None)
    if search.algorithm in ("grid", "random"):
        return BasicVariantGenerator(points_to_evaluate=points, random_state=spec.seed,
                                     max_concurrent=max_concurrent or 0)
    if search.algorithm == "optuna":
        from optuna.samplers import TPESampler
        from ray.tune.search.optuna import OptunaSearch

        quiet_searchers("optuna")
        sampler = TPESampler(seed=spec.seed, n_startup_trials=search.n_startup_trials,
                             multivariate=search.multivariate)
        return OptunaSearch(sampler=sampler, points_to_evaluate=points)
    from ray.tune.search.bohb import TuneBOHB

    quiet_searchers("bohb")
    config = search.model_dump(exclude={"algorithm", "points_to_evaluate"}, exclude_none=True)
    return TuneBOHB(bohb_config=config, seed=spec.seed, points_to_evaluate=points)


def quiet_searchers(algorithm: str) -> None:
    """Keep a searcher's library off the console, for a run and a resume alike.

    Optuna logs every new study at INFO, and warns when a trial resumed from an older
    checkpoint reports a step again (the repeat is expected; Optuna keeps the first value).
    hpbandster logs at INFO; its KDE (statsmodels
    ``KDEMultivariate``) draws from numpy's global RandomState, which TuneBOHB's seed
    sets, and statsmodels 0.15 warns on every BOHB run that this default changes "after
    0.17 or January 2028" (the seed test in tests/test_engine.py shows when it does). A
    resumed searcher is unpickled, not built, so this runs before every Tune session.

    Args:
        algorithm: The spec's ``search.algorithm``.
    """
    import warnings

    if algorithm == "optuna":
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        # A trial resumed from a checkpoint older than its last result reports those steps
        # again; Optuna keeps the first value and warns on each repeat (optuna.trial.Trial.report).
        warnings.filterwarnings("ignore", message="The reported value is ignored because this `step",
                                category=UserWarning)
    elif algorithm == "bohb":
        for name in ("hpbandster", "hpbandster.optimizers.config_generators.bohb"):
            logging.getLogger(name).setLevel(logging.WARNING)
        warnings.filterwarnings("ignore", message="After 0.17 or January 2028", category=FutureWarning)


def build_scheduler(spec: Spec) -> TrialScheduler:
    """Build the Ray trial scheduler for ``spec.scheduler``.

    Args:
        spec: The validated spec; ``max_t`` defaults to ``stop.training_iteration``.

    Returns:
        Ray's ``FIFOScheduler``, or a subclass of Ray's ``ASHAScheduler``, ``HyperBandScheduler``,
        ``HyperBandForBOHB`` or ``MedianStoppingRule`` whose state survives ``tuner resume``
        (:class:`tuner.scheduler_state.KeepsState`; pass it to a
        :class:`tuner.scheduler_state.SchedulerStateCallback`).
    """
    s = spec.scheduler
    if s.type == "fifo":
        return FIFOScheduler()
    if s.type == "asha":
        return _ASHA(time_attr=s.time_attr, max_t=spec.scheduler_max_t, grace_period=s.grace_period,
                     reduction_factor=s.reduction_factor, brackets=s.brackets, stop_last_trials=s.stop_last_trials)
    if s.type == "hyperband" or s.type == "bohb":
        cls = _HyperBand if s.type == "hyperband" else _HyperBandForBOHB
        return cls(time_attr=s.time_attr, max_t=spec.scheduler_max_t, reduction_factor=s.reduction_factor,
                   stop_last_trials=s.stop_last_trials)
    return _MedianStoppingRule(time_attr=s.time_attr, grace_period=s.grace_period,
                               min_samples_required=s.min_samples_required, hard_stop=s.hard_stop)


class _ASHA(KeepsState, ASHAScheduler):
    """Ray's ``ASHAScheduler`` (Li et al., MLSys 2020), whose rungs survive a resume (:mod:`tuner.scheduler_state`)."""


class _MedianStoppingRule(KeepsState, MedianStoppingRule):
    """Ray's ``MedianStoppingRule`` (Golovin et al., KDD 2017), whose history survives a resume
    (:mod:`tuner.scheduler_state`)."""


class _NeverWaitForever:
    """Ray 2.60's synchronous Hyperband, less two hangs.

    * When the last running trial of a bracket ends on its own at ``max_t`` (its final
      result comes with ``done``, so Tune calls ``on_trial_complete``, not
      ``on_trial_result``), ``HyperBandScheduler.on_trial_remove`` skips a finished
      bracket, and the bracket's other trials, PAUSED at ``max_t``, are never stopped:
      the experiment waits forever ("No trial is running and no new trial has been
      started"). Seen in tests/test_engine.py's Hyperband test under load. This stops
      them, as ``_process_bracket`` does for a finished bracket.
    * When Ray's own choice finds no trial to run while none runs (before tuner kept the
      scheduler's state across a resume, a resumed experiment's PAUSED trials sat in new
      brackets with nothing to unpause them; a folder from that tuner still resumes so),
      the paused trial with the fewest iterations goes on from its checkpoint, so the
      experiment always progresses (to its next rung, or its end).

    The brackets, the controller and the unpausing are Ray's internals
    (:mod:`tuner.ray_internals`).
    """

    def on_trial_remove(self, tune_controller, trial) -> None:
        from ray.tune.experiment import Trial

        from tuner import ray_internals

        bracket = ray_internals.hyperband_bracket(self, trial)
        super().on_trial_remove(tune_controller, trial)  # type: ignore[misc]  # a mixin before Ray's HyperBand
        for other in ray_internals.finished_bracket_trials(bracket):
            if other.status == Trial.PAUSED:
                ray_internals.controller_stop_trial(tune_controller, other)

    def choose_trial_to_run(self, tune_controller, *args, **kwargs):
        from ray.tune.experiment import Trial

        from tuner import ray_internals

        chosen = super().choose_trial_to_run(tune_controller, *args, **kwargs)
        if chosen is not None:
            return chosen
        trials = ray_internals.controller_trials(tune_controller)
        if any(t.status in (Trial.RUNNING, Trial.PENDING) for t in trials):
            return None
        paused = [t for t in trials if t.status == Trial.PAUSED and ray_internals.hyperband_knows(self, t)]
        if not paused:
            return None
        time_attr = ray_internals.scheduler_time_attr(self)
        chosen = min(paused, key=lambda t: ((t.last_result or {}).get(time_attr, 0), t.trial_id))
        ray_internals.hyperband_unpause(self, tune_controller, chosen)
        return chosen


class _HyperBand(KeepsState, _NeverWaitForever, HyperBandScheduler):
    """Ray's ``HyperBandScheduler`` (Li et al., JMLR 2018); see the base class for the fixes."""


class _HyperBandForBOHB(KeepsState, _NeverWaitForever, HyperBandForBOHB):
    """Ray's ``HyperBandForBOHB`` (Falkner et al., ICML 2018); see the base class for the fixes."""


def _num(x: float) -> str:
    return f"{x:g}"


def describe_search(spec: Spec) -> list[str]:
    """Plan lines for the searcher and the scheduler, e.g. the ASHA rungs."""
    s = spec.scheduler
    search = {
        "grid": "grid (BasicVariantGenerator): every grid point",
        "random": "random (BasicVariantGenerator)",
        "optuna": "optuna (TPE sampler)",
        "bohb": "bohb (TuneBOHB, hpbandster)",
    }[spec.search.algorithm]
    seed = f", seed {spec.seed}" if spec.seed is not None else ""
    lines = [f"searcher:   {search}{seed}"]
    target = f"{s.time_attr}" if s.time_attr != "training_iteration" else "iterations"
    if s.type == "fifo":
        lines.append("scheduler:  fifo (every trial runs to its stop criteria)")
    elif s.type == "median":
        lines.append(f"scheduler:  median stopping rule after {_num(s.grace_period)} {target}, "
                     f"once {s.min_samples_required} trials have results")
    else:
        name = {"asha": "asha (ASHAScheduler)", "hyperband": "hyperband (HyperBandScheduler)",
                "bohb": "bohb (HyperBandForBOHB)"}[s.type]
        brackets = bracket_rungs(spec)
        lines.append(f"scheduler:  {name}, max_t {spec.scheduler_max_t} {target}, "
                     f"reduction factor {_num(s.reduction_factor)}, {len(brackets)} bracket(s)")
        for i, r in enumerate(brackets):
            lines.append(f"            bracket {i}: rungs at {', '.join(_num(x) for x in r)} {target}")
    return lines
