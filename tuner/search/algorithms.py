"""Searcher and scheduler factory: the Spec's ``search`` and ``scheduler`` -> Ray objects.

Searchers (which configurations to try):
    * ``grid`` and ``random``: ``ray.tune.search.basic_variant.BasicVariantGenerator``.
    * ``optuna``: ``ray.tune.search.optuna.OptunaSearch`` with Optuna's ``TPESampler``
      (Bergstra et al., NeurIPS 2011; multi-objective: Ozaki et al., JAIR 2022), ``NSGAIISampler``
      (Deb et al., IEEE TEC 2002) or ``NSGAIIISampler`` (Deb and Jain, IEEE TEC 2014). Several
      objectives and the constraints reach Optuna itself (:class:`_OptunaSearch`).
    * ``bohb``: ``ray.tune.search.bohb.TuneBOHB`` (hpbandster; Falkner et al., ICML 2018).

Schedulers (which trials to stop early):
    * ``fifo``: ``FIFOScheduler``; ``asha``: ``ASHAScheduler`` (Li et al., MLSys 2020);
      ``hyperband``: ``HyperBandScheduler`` (Li et al., JMLR 2018); ``bohb``:
      ``HyperBandForBOHB``; ``median``: ``MedianStoppingRule`` (Golovin et al., KDD 2017).

Population schedulers (which change the configs of running trials):
    * ``pbt``: ``PopulationBasedTraining`` (Jaderberg et al., "Population Based Training of
      Neural Networks", 2017); ``pb2``: ``PB2`` (Parker-Holder et al., "Provably Efficient
      Online Hyperparameter Optimization with Population-Based Bandits", NeurIPS 2020).

``metric`` and ``mode`` are given to Ray's ``TuneConfig`` only, which hands them on to
the searcher and the scheduler: the scheduler's objective (:attr:`tuner.spec.Spec.scheduler_objective`).
With several objectives, Optuna's searcher is built with all of them instead, and keeps them.
"""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Any

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
from ray.tune.search.optuna import OptunaSearch

from tuner.adapters import ray_internals
from tuner.search.rungs import bracket_rungs
from tuner.search.scheduler_state import KeepsState
from tuner.spec import Spec
from tuner.spec.sections import POPULATION_SCHEDULERS

if TYPE_CHECKING:
    from tuner.search.warm_start import EarlierTrial, WarmStart

__all__ = ["build_searcher", "build_scheduler", "describe_search", "quiet_searchers", "quiet_schedulers",
           "DefineByRun", "optuna_distributions"]


def build_searcher(spec: Spec, max_concurrent: int | None = None,
                   warm: WarmStart | None = None) -> Searcher | BasicVariantGenerator:
    """Build the Ray searcher for ``spec.search``.

    Args:
        spec: The validated spec. ``spec.seed`` seeds the sampler, so the same seed
            gives the same first configurations.
        max_concurrent: Trials in flight at most. Ray applies ``TuneConfig``'s
            ``max_concurrent_trials`` to a Searcher (with a ``ConcurrencyLimiter``) but
            ignores it for a ``BasicVariantGenerator`` instance, so grid and random
            searches get it here.
        warm: The earlier trials of ``search.warm_start`` (:func:`tuner.search.warm_start.load_warm_start`),
            or None: random search runs the best ``warm_start_top_k`` of them first (after
            ``points_to_evaluate``); Optuna adds them all to its study as completed trials; BOHB tells
            them all to its model.

    Returns:
        A ``BasicVariantGenerator`` (grid, random), ``OptunaSearch`` or ``TuneBOHB``.
    """
    search = spec.search
    points = getattr(search, "points_to_evaluate", None)
    conditional = spec.conditional
    if search.algorithm in ("grid", "random"):
        if warm is not None and search.algorithm == "random":
            from tuner.search.warm_start import nested_configs

            points = [*(points or []), *nested_configs(warm.best(warm.top_k(spec), spec.mode), spec)] or None
        if conditional:
            from tuner.search.space import presets

            return _ConditionalVariants(spec, points_to_evaluate=presets(spec, points=points), random_state=spec.seed,
                                        max_concurrent=max_concurrent or 0)
        return BasicVariantGenerator(points_to_evaluate=points, random_state=spec.seed,
                                     max_concurrent=max_concurrent or 0)
    if search.algorithm == "optuna":
        from optuna.samplers import TPESampler

        quiet_searchers("optuna")
        sampler: Any
        if search.sampler == "tpe":
            sampler = TPESampler(seed=spec.seed, n_startup_trials=search.n_startup_trials,
                                 multivariate=search.multivariate)
        else:
            from optuna.samplers import NSGAIIISampler, NSGAIISampler

            cls = NSGAIISampler if search.sampler == "nsga2" else NSGAIIISampler
            size: dict[str, Any] = {} if search.population_size is None else {"population_size": search.population_size}
            sampler = cls(seed=spec.seed, **size)
        return _OptunaSearch(sampler, points, spec, space=DefineByRun(spec) if conditional else None,
                             warm=warm.trials if warm is not None else None)
    # BOHB (hpbandster, statsmodels, scipy.stats) costs about 1.3 CPU-s to import: only where it is chosen.
    from tuner.search.bohb import ConditionalBOHB, WarmBOHB

    quiet_searchers("bohb")
    config = search.model_dump(exclude={"algorithm", "points_to_evaluate", "warm_start"}, exclude_none=True)
    earlier = warm.trials if warm is not None else None
    if conditional:
        return ConditionalBOHB(spec, bohb_config=config, seed=spec.seed, points_to_evaluate=points, warm=earlier)
    return WarmBOHB(bohb_config=config, seed=spec.seed, points_to_evaluate=points, warm=earlier)


class _ConditionalVariants(BasicVariantGenerator):
    """Ray's ``BasicVariantGenerator`` for a conditional space (grid and random search).

    It runs :func:`tuner.search.space.presets` as its points to evaluate (the conditional parameters of
    each trial, drawn parents first), and Ray samples or enumerates the other parameters as
    without conditions. Each new trial's config loses the placeholders of the parameters its
    point leaves inactive (:func:`tuner.search.space.drop_inactive`): an inactive parameter is absent.

    Args:
        spec: The validated spec.
        **kwargs: ``BasicVariantGenerator``'s (``points_to_evaluate``, ``random_state``,
            ``max_concurrent``).
    """

    def __init__(self, spec: Spec, **kwargs: Any):
        super().__init__(**kwargs)
        self.tuner_spec = spec

    def next_trial(self):
        from tuner.search.space import drop_inactive

        trial = super().next_trial()
        if trial is not None:
            drop_inactive(trial.config, self.tuner_spec)
        return trial


class DefineByRun:
    """A conditional space as an Optuna define-by-run function, for Ray's ``OptunaSearch(space=...)``.

    Called with an Optuna trial, it suggests the parameters parents first, and a child only
    when its conditions hold (Optuna's define-by-run spaces: Akiba et al., KDD 2019), each
    with the Optuna distribution Ray's ``OptunaSearch.convert_search_space`` makes of its
    Ray sampling object; it returns the constants of the branches taken. Picklable (the
    searcher is saved with the experiment).

    Args:
        spec: The validated spec, with a conditional space.
    """

    def __init__(self, spec: Spec):
        self.space = spec.space
        self.distributions = optuna_distributions(spec)

    def __call__(self, trial: Any) -> dict[str, Any]:
        from optuna.distributions import CategoricalDistribution, IntDistribution

        config: dict[str, Any] = {}
        constants: dict[str, Any] = {}
        for p in self.space.order:
            if not self.space.is_active(p, config):
                continue
            if p.dist is None:
                config[p.name] = constants[p.name] = p.value
                continue
            d = self.distributions[p.name]
            if isinstance(d, CategoricalDistribution):
                config[p.name] = trial.suggest_categorical(p.name, d.choices)
            elif isinstance(d, IntDistribution):
                config[p.name] = trial.suggest_int(p.name, d.low, d.high, step=d.step, log=d.log)
            else:
                config[p.name] = trial.suggest_float(p.name, d.low, d.high, step=d.step, log=d.log)
        return constants


def optuna_distributions(spec: Spec) -> dict[str, Any]:
    """Each sampled parameter's Optuna distribution, by parameter name (``opt/lr``, ``optimizer/lr@adam``):
    what Ray's ``OptunaSearch.convert_search_space`` makes of its Ray sampling object, as for the study."""
    from tuner.core.params import nest
    from tuner.search.space import ray_domain

    sampled = {p.name: ray_domain(p.dist) for p in spec.space.params if p.dist is not None}
    return OptunaSearch.convert_search_space(nest(sampled))


class _OptunaSearch(OptunaSearch):
    """Ray's ``OptunaSearch`` that keeps the spec's objectives and tells Optuna the constraints.

    * Several objectives: the study is built with every objective's direction, and Tune's
      ``TuneConfig`` metric (the scheduler's objective, one name) does not replace them.
    * Constraints: before a finished trial is told to Optuna, each constraint's violation
      (:meth:`tuner.spec.sections.Constraint.violation`, ``<= 0`` feasible) is set on it with
      Optuna's ``Trial.set_constraint``, which TPE and NSGA-II/III read (Optuna 5's replacement
      of ``constraints_func``), and which ``Study.best_trials`` honours.

    * A conditional space: the study suggests through :class:`DefineByRun`, given here with
      the objectives (Tune gives neither to a searcher that has its own space).

    Args:
        sampler: The Optuna sampler.
        points: ``search.points_to_evaluate``, or None.
        spec: The validated spec.
        space: A conditional space's define-by-run function, or None (Tune converts ``param_space``).
    """

    def __init__(self, sampler: Any, points: list | None, spec: Spec, space: DefineByRun | None = None,
                 warm: list[EarlierTrial] | None = None):
        objectives = spec.objectives or []
        several = len(objectives) > 1
        self.tuner_constraints = list(spec.constraints or [])
        self.tuner_warm = list(warm or [])
        self.tuner_warm_told = False
        self.tuner_distributions = optuna_distributions(spec) if warm else {}
        self.tuner_several = several
        # A space given here (a conditional one) keeps Tune from setting the metric later: give it now.
        own = several or space is not None
        super().__init__(space=space, sampler=sampler, points_to_evaluate=points,
                         metric=([o.metric for o in objectives] if several else objectives[0].metric) if own else None,
                         mode=([o.mode for o in objectives] if several else objectives[0].mode) if own else None)
        self.tuner_define_by_run = space
        self.tell_earlier_trials()

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        if isinstance(self.metric, list):  # several objectives: keep them
            metric, mode = None, None
        done = super().set_search_properties(metric, mode, config, **spec)
        if done:
            self.tell_earlier_trials()
        return done

    def tell_earlier_trials(self) -> None:
        """Add the earlier trials of ``search.warm_start`` to the study as completed trials, once, as soon as
        the study exists: Optuna's ``Study.add_trial(optuna.trial.create_trial(...))`` with each trial's
        parameters (those it has), every objective's value, and the constraints' violations (all ``<= 0``:
        only feasible earlier trials are fed)."""
        study = ray_internals.optuna_study(self)
        if not self.tuner_warm or self.tuner_warm_told or study is None:
            return
        import optuna

        for t in self.tuner_warm:
            values = {"values": list(t.values)} if self.tuner_several else {"value": t.values[0]}
            constraints = {c.metric: 0.0 for c in self.tuner_constraints} or None
            study.add_trial(optuna.trial.create_trial(
                params=dict(t.config), distributions={name: self.tuner_distributions[name] for name in t.config},
                constraints=constraints, user_attrs={"tuner_warm_start": f"{t.source}:{t.trial_id}"}, **values))
        self.tuner_warm_told = True

    def suggest(self, trial_id: str) -> dict | None:
        config = super().suggest(trial_id)
        if isinstance(config, dict) and isinstance(self.tuner_define_by_run, DefineByRun):
            from tuner.core.params import flatten, nest

            # Optuna names a branch's own version of a shared key `<key>@<branch>`: the config has the key.
            return nest(self.tuner_define_by_run.space.keyed(flatten(config)))
        return config

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        ot_trial = ray_internals.optuna_trial_to_tell(self, trial_id)
        if result and ot_trial is not None:
            from tuner.search.pareto import violations

            for c, gap in zip(self.tuner_constraints, violations(result, self.tuner_constraints)):
                ot_trial.set_constraint(c.metric, gap)
        super().on_trial_complete(trial_id, result, error)


def quiet_searchers(algorithm: str) -> None:
    """Keep a searcher's library off the console, for a run and a resume alike.

    Optuna logs every new study at INFO, and warns when a trial resumed from an older
    checkpoint reports a step again (the repeat is expected; Optuna keeps the first value).
    hpbandster logs at INFO; its KDE (statsmodels
    ``KDEMultivariate``) draws from numpy's global RandomState, which TuneBOHB's seed
    sets, and statsmodels 0.15 warns on every BOHB run that this default changes "after
    0.17 or January 2028" (the seed test in tests/test_engine.py shows when it does). Optuna
    warns that its NSGA-III sampler is experimental whenever one is built. A resumed searcher is
    unpickled, not built, so this runs before every Tune session.

    Args:
        algorithm: The spec's ``search.algorithm``.
    """
    if algorithm == "optuna":
        import optuna
        from optuna.exceptions import ExperimentalWarning

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", message="NSGAIIISampler is experimental", category=ExperimentalWarning)
        # A trial resumed from a checkpoint older than its last result reports those steps
        # again; Optuna keeps the first value and warns on each repeat (optuna.trial.Trial.report).
        warnings.filterwarnings("ignore", message="The reported value is ignored because this `step",
                                category=UserWarning)
    elif algorithm == "bohb":
        for name in ("hpbandster", "hpbandster.optimizers.config_generators.bohb"):
            logging.getLogger(name).setLevel(logging.WARNING)
        warnings.filterwarnings("ignore", message="After 0.17 or January 2028", category=FutureWarning)


def quiet_schedulers(scheduler_type: str) -> None:
    """Keep Ray's PBT hints that do not apply to tuner off the console, for a run and a resume alike.

    * "Using `CheckpointConfig.num_to_keep <= 2` with PBT can lead to restoration problems":
      tuner keeps each clone source itself (:class:`tuner.search.population.KeepsCloneSources`), so any
      ``num_to_keep`` is safe.
    * "Consider boosting PBT performance by enabling `reuse_actors`": tuner reuses actors
      wherever it can (``tuner.run.trainable.reuse_actors``); where it does not (a DDP trial, whose
      worker group restarts anyway; a class trainable, which Ray 2.60 sometimes ended early on
      a reused actor after an exploit), the hint has nothing to offer.

    Args:
        scheduler_type: The spec's ``scheduler.type``.
    """
    if scheduler_type in POPULATION_SCHEDULERS:
        warnings.filterwarnings("ignore", message="Using `CheckpointConfig.num_to_keep <= 2` with PBT",
                                category=UserWarning)
        warnings.filterwarnings("ignore", message="Consider boosting PBT performance by enabling `reuse_actors`",
                                category=UserWarning)


def build_scheduler(spec: Spec) -> TrialScheduler:
    """Build the Ray trial scheduler for ``spec.scheduler``.

    Args:
        spec: The validated spec; ``max_t`` defaults to ``stop.training_iteration``.

    Returns:
        Ray's ``FIFOScheduler``, or a subclass of Ray's ``ASHAScheduler``, ``HyperBandScheduler``,
        ``HyperBandForBOHB``, ``MedianStoppingRule``, ``PopulationBasedTraining`` or ``PB2`` whose
        state survives ``tuner resume`` (:class:`tuner.search.scheduler_state.KeepsState`; pass it to a
        :class:`tuner.search.scheduler_state.SchedulerStateCallback`).
    """
    s = spec.scheduler
    if s.type == "fifo":
        return FIFOScheduler()
    if s.type in POPULATION_SCHEDULERS:
        # PB2 (scikit-learn, scipy) costs about 1.8 CPU-s to import: only where a population is chosen.
        from tuner.search.population import population_scheduler

        return population_scheduler(spec)
    if s.type == "asha":
        return _ASHA(time_attr=s.time_attr, max_t=spec.scheduler_max_t, grace_period=s.grace_period,
                     reduction_factor=s.reduction_factor, brackets=s.brackets, stop_last_trials=s.stop_last_trials)
    if s.type == "hyperband" or s.type == "bohb":
        cls = _HyperBand if s.type == "hyperband" else _HyperBandForBOHB
        return cls(time_attr=s.time_attr, max_t=spec.scheduler_max_t, reduction_factor=s.reduction_factor,
                   stop_last_trials=s.stop_last_trials)
    assert s.type == "median"
    return _MedianStoppingRule(time_attr=s.time_attr, grace_period=s.grace_period,
                               min_samples_required=s.min_samples_required, hard_stop=s.hard_stop)


class _ASHA(KeepsState, ASHAScheduler):
    """Ray's ``ASHAScheduler`` (Li et al., MLSys 2020), whose rungs survive a resume
    (:mod:`tuner.search.scheduler_state`)."""


class _MedianStoppingRule(KeepsState, MedianStoppingRule):
    """Ray's ``MedianStoppingRule`` (Golovin et al., KDD 2017), whose history survives a resume
    (:mod:`tuner.search.scheduler_state`)."""


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
    (:mod:`tuner.adapters.ray_internals`).
    """

    def on_trial_remove(self, tune_controller, trial) -> None:
        from ray.tune.experiment import Trial

        from tuner.adapters import ray_internals

        bracket = ray_internals.hyperband_bracket(self, trial)
        super().on_trial_remove(tune_controller, trial)  # type: ignore[misc]  # a mixin before Ray's HyperBand
        for other in ray_internals.finished_bracket_trials(bracket):
            if other.status == Trial.PAUSED:
                ray_internals.controller_stop_trial(tune_controller, other)

    def choose_trial_to_run(self, tune_controller, *args, **kwargs):
        from ray.tune.experiment import Trial

        from tuner.adapters import ray_internals

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


def _describe_dist(d: Any) -> str:
    if d.type in ("choice", "grid"):
        return f"{d.type} {list(d.values)} (neighbouring value, or resampled)"
    if d.is_numeric_range:
        return f"{d.type} [{_num(d.low)}, {_num(d.high)}] (x0.8 or x1.2, or resampled)"
    return f"{d.type} (x0.8 or x1.2, or resampled)"


def _describe_optuna(spec: Spec) -> str:
    sampler = getattr(spec.search, "sampler", "tpe")
    name = {"tpe": "TPE", "nsga2": "NSGA-II", "nsga3": "NSGA-III"}.get(sampler, sampler)
    several = f", {len(spec.objectives or [])} objectives" if spec.multi_objective else ""
    constrained = f", {len(spec.constraints or [])} constraint(s)" if spec.constraints else ""
    size = getattr(spec.search, "population_size", None)
    population = f", population {size}" if size else ""
    return f"optuna ({name} sampler{several}{constrained}{population})"


def describe_search(spec: Spec) -> list[str]:
    """Plan lines for the searcher and the scheduler, e.g. the ASHA rungs, PBT's mutations."""
    s: Any = spec.scheduler
    search = {
        "grid": "grid (BasicVariantGenerator): every grid point",
        "random": "random (BasicVariantGenerator)",
        "optuna": _describe_optuna(spec),
        "bohb": "bohb (TuneBOHB, hpbandster)",
    }[spec.search.algorithm]
    seed = f", seed {spec.seed}" if spec.seed is not None else ""
    if spec.conditional:
        seed += {"grid": ", only the valid combinations of the conditional parameters",
                 "random": ", conditional parameters drawn parents first",
                 "optuna": ", a define-by-run space from the conditions",
                 "bohb": ", a ConfigSpace with the conditions"}[spec.search.algorithm]
    lines = [f"searcher:   {search}{seed}"]
    if spec.seed_trials:
        lines.append("seeding:    each trial's random, numpy and torch with its own seed (trial.seed(); "
                     "+ rank in a DDP trial)")
    target = f"{s.time_attr}" if s.time_attr != "training_iteration" else "iterations"
    if s.type == "fifo":
        lines.append("scheduler:  fifo (every trial runs to its stop criteria)")
    elif s.type in POPULATION_SCHEDULERS:
        name = {"pbt": "pbt (PopulationBasedTraining)", "pb2": "pb2 (PB2, GP-UCB explore)"}[s.type]
        burn = getattr(s, "burn_in_period", 0)
        lines.append(f"scheduler:  {name}, {'synchronous' if s.synch else 'asynchronous'}, perturbation every "
                     f"{_num(s.perturbation_interval)} {target}" + (f" after {_num(burn)}" if burn else "")
                     + f", quantile {_num(s.quantile_fraction)}"
                     + (f", resample probability {_num(s.resample_probability)}" if s.type == "pbt" else ""))
        if s.type == "pbt":
            for name_, d in spec.population_mutations.items():
                lines.append(f"            mutate {name_}: {_describe_dist(d)}")
        else:
            for name_, (lo, hi) in spec.population_bounds.items():
                lines.append(f"            bound {name_}: [{_num(lo)}, {_num(hi)}]")
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
