"""The models of the spec's sections: the searcher (``search``, told apart by ``algorithm``), the
scheduler (``scheduler``, told apart by ``type``), ``resources``, ``failure``, ``checkpoint``,
``reporting`` and ``ray``, each of which checks its own fields.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StrictFloat, field_validator, model_validator
from pydantic_core import PydanticCustomError

from tuner.core.best import Scope
from tuner.spec.distributions import Distribution
from tuner.spec.errors import _fail
from tuner.spec.fields import Float, Int, NonBlank, _Model


# Objectives and constraints -------------------------------------------------


class Objective(_Model):
    """One objective: a metric the train function reports, and whether lower or higher is better.

    A spec's objectives come from ``metric``/``mode`` (one string each, or two lists of the
    same length) or from ``objectives: [{metric, mode}, ...]``; see :attr:`tuner.spec.Spec.objectives`.

    Attributes:
        metric: A key the train function reports; each objective names a different one.
        mode: ``min`` (lower is better) or ``max`` (higher is better).
    """

    metric: NonBlank
    mode: Literal["min", "max"]


class Constraint(_Model):
    """A bound on a reported metric: a trial is *feasible* when its last result meets every constraint.

    An infeasible trial is never the best and never on the Pareto front. Under ``search: optuna``
    the bounds reach Optuna's samplers as ``constraints_func`` (a value ``<= 0`` is feasible), so
    the sampler learns to avoid infeasible regions (Optuna's constrained optimization: Gardner et
    al., "Bayesian Optimization with Inequality Constraints", ICML 2014, for TPE; Deb's
    constrained domination for NSGA-II/III).

    Attributes:
        metric: A key the train function reports (``a/b`` for a nested one).
        min: The smallest feasible value, or None.
        max: The largest feasible value, or None. At least one of ``min`` and ``max``.
    """

    metric: NonBlank
    min: Float | None = None
    max: Float | None = None

    @model_validator(mode="after")
    def _bounds(self):
        if self.min is None and self.max is None:
            raise _fail("metric", f"the constraint on {self.metric!r} needs `min:` and/or `max:` (the feasible "
                        "values), but has neither.")
        if self.min is not None and self.max is not None and not self.min <= self.max:
            raise _fail("max", f"the constraint on {self.metric!r} needs `min <= max`, but got (min={self.min:g}, "
                        f"max={self.max:g}).")
        return self

    def violation(self, value: Any) -> float:
        """How far a value is outside the bounds, in the metric's units: ``<= 0`` when feasible.

        Optuna's convention for ``constraints_func``. A value that is not a finite number (missing,
        NaN, a string) violates the constraint by ``inf``.
        """
        from tuner.core.best import is_finite_number

        if not is_finite_number(value):
            return float("inf")
        gaps = [*([float(value) - self.max] if self.max is not None else []),
                *([self.min - float(value)] if self.min is not None else [])]
        return max(gaps)

    def describe(self) -> str:
        """``"0 <= latency_ms <= 20"``, ``"gpu_memory_peak_bytes <= 8e+09"``."""
        low = f"{self.min:g} <= " if self.min is not None else ""
        high = f" <= {self.max:g}" if self.max is not None else ""
        return f"{low}{self.metric}{high}"


# Searchers -----------------------------------------------------------------


class _Search(_Model):
    """What every searcher but grid takes.

    Attributes:
        points_to_evaluate: Configs to run first, as given.
        warm_start: Earlier experiments (folders or cloud URIs, as ``tuner report`` takes them)
            whose finished trials are fed to the searcher before this run starts
            (:mod:`tuner.search.warm_start`); None for a cold start.
    """

    points_to_evaluate: list[dict[NonBlank, Any]] | None = None
    warm_start: list[NonBlank] | None = None

    @field_validator("warm_start")
    @classmethod
    def _some_sources(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise PydanticCustomError("tuner_spec", "warm_start must name at least one earlier experiment (a folder "
                                      "such as runs/mnist-asha, or a cloud URI), or be omitted.")
        return value


#: Earlier trials that random search re-evaluates first under ``warm_start``, unless ``warm_start_top_k`` says.
WARM_START_TOP_K = 3


class RandomSearch(_Search):
    """Random sampling (and grid parameters, if any): Ray's ``BasicVariantGenerator``.

    Attributes:
        warm_start_top_k: With ``warm_start``: how many of the earlier experiments' best trials
            run again first (after ``points_to_evaluate``), as points to evaluate; random search
            has no model, so the other earlier trials are not used. None: :data:`WARM_START_TOP_K`.
    """

    algorithm: Literal["random"]
    warm_start_top_k: Int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _top_k_needs_warm_start(self):
        if self.warm_start_top_k is not None and self.warm_start is None:
            raise _fail("warm_start_top_k", "warm_start_top_k says how many of the earlier experiments' best trials "
                        "run again first, but the spec has no `search.warm_start`; add it, or drop warm_start_top_k.")
        return self

    @property
    def top_k(self) -> int:
        """``warm_start_top_k``, else :data:`WARM_START_TOP_K`."""
        return self.warm_start_top_k or WARM_START_TOP_K


class GridSearch(_Model):
    """Every combination of ``grid`` and ``choice`` values (numeric ranges need ``grid_points``).

    ``warm_start`` is refused: a grid runs every point whatever earlier trials found.

    Attributes:
        warm_start: Refused when given: omit it (or null). Search random, optuna or bohb take it.
    """

    algorithm: Literal["grid"]
    warm_start: list[Any] | None = None

    @model_validator(mode="after")
    def _no_warm_start(self):
        if self.warm_start is not None:
            raise _fail("warm_start", "grid search runs every grid point whatever earlier trials found, so a warm "
                        "start would change nothing; use search random (it re-runs the earlier best trials first), "
                        "optuna or bohb (their models learn from every earlier trial), or drop warm_start.")
        return self


#: Optuna's samplers that ``search.sampler`` names: TPE (single- and multi-objective), NSGA-II, NSGA-III.
OPTUNA_SAMPLERS = ("tpe", "nsga2", "nsga3")


class OptunaSearch(_Search):
    """An Optuna sampler through ``ray.tune.search.optuna.OptunaSearch``.

    * ``tpe`` (the default): ``optuna.samplers.TPESampler``; Bergstra et al., "Algorithms for
      Hyper-Parameter Optimization", NeurIPS 2011; with several objectives, Ozaki et al.,
      "Multiobjective Tree-Structured Parzen Estimator", JAIR 2022.
    * ``nsga2``: ``optuna.samplers.NSGAIISampler``; Deb et al., "A fast and elitist multiobjective
      genetic algorithm: NSGA-II", IEEE TEC 2002.
    * ``nsga3``: ``optuna.samplers.NSGAIIISampler``; Deb and Jain, "An Evolutionary Many-Objective
      Optimization Algorithm Using Reference-Point-Based Nondominated Sorting Approach", IEEE TEC 2014.

    Attributes:
        sampler: One of :data:`OPTUNA_SAMPLERS`.
        n_startup_trials: TPE's random trials before its model is used (``tpe`` only).
        multivariate: TPE's multivariate kernel (``tpe`` only).
        population_size: The population of one NSGA generation, in trials (``nsga2``/``nsga3``
            only; Optuna's default is 50).
    """

    algorithm: Literal["optuna"]
    sampler: Literal["tpe", "nsga2", "nsga3"] = "tpe"
    n_startup_trials: Int = Field(default=10, ge=0)
    multivariate: bool = False
    population_size: Int | None = Field(default=None, ge=2)

    @model_validator(mode="after")
    def _options_of_sampler(self):
        if self.sampler == "tpe" and self.population_size is not None:
            raise _fail("population_size", "population_size sizes the generations of sampler nsga2 or nsga3; "
                        "sampler tpe has none. Set `sampler: nsga2` (or nsga3), or drop population_size.")
        if self.sampler != "tpe":
            for name in ("n_startup_trials", "multivariate"):
                if name in self.model_fields_set:
                    raise _fail(name, f"{name} is an option of sampler tpe, not of sampler {self.sampler}; drop "
                                "it, or set `sampler: tpe`.")
        return self


class BOHBSearch(_Search):
    """BOHB's model-based sampler through ``ray.tune.search.bohb.TuneBOHB`` (hpbandster).

    Falkner et al., "BOHB: Robust and Efficient Hyperparameter Optimization at Scale",
    ICML 2018. The options are hpbandster's ``BOHB`` keyword arguments. BOHB fits its model
    per budget (a rung's ``time_attr`` value) and samples from the largest budget with a model.

    Attributes:
        min_points_in_model: Finished trials a budget needs before BOHB fits its model there;
            None, or fewer than the number of parameters + 1: that number.
        top_n_percent: Percentage of a budget's trials, the best by the metric (at least
            ``min_points_in_model``), that make the "good" density; the rest the "bad" one.
        num_samples: Candidates drawn from the good density per new config, to maximise the
            good/bad ratio (expected improvement).
        random_fraction: Fraction of configs sampled at random, without the model (1/3 by default).
        bandwidth_factor: Factor that widens the good density's bandwidth for continuous
            parameters when candidates are drawn (more diverse candidates).
        min_bandwidth: Smallest kernel bandwidth, so a parameter on which all good trials agree
            is still varied.
    """

    algorithm: Literal["bohb"]
    min_points_in_model: Int | None = Field(default=None, ge=1)
    top_n_percent: Int = Field(default=15, ge=1, le=99)
    num_samples: Int = Field(default=64, ge=1)
    random_fraction: Float = Field(default=1 / 3, ge=0, le=1)
    bandwidth_factor: Float = Field(default=3, gt=0)
    min_bandwidth: Float = Field(default=1e-3, gt=0)


SearchConfig = Annotated[RandomSearch | GridSearch | OptunaSearch | BOHBSearch, Field(discriminator="algorithm")]
SEARCH_ALGORITHMS = ("grid", "random", "bohb", "optuna")


# Schedulers ----------------------------------------------------------------


def _reduction_factor(value: float) -> float:
    if not value > 1:
        raise PydanticCustomError(
            "tuner_spec",
            f"reduction_factor must be > 1 (each rung keeps 1/reduction_factor of its trials), but got {value}.",
        )
    return value


class _Sched(_Model):
    """What every scheduler takes.

    Attributes:
        time_attr: The reported key that measures a trial's progress, the unit of the
            scheduler's options (``training_iteration``: iterations, epochs in the examples;
            ``time_total_s``: seconds); it must grow with each report.
    """

    time_attr: NonBlank = "training_iteration"


class _RanksByMetric(_Sched):
    """A scheduler that compares trials by one metric.

    Attributes:
        metric: With several objectives, the one this scheduler compares trials by (its mode is
            the objective's); None: the first objective. A single-objective spec's metric.
    """

    metric: NonBlank | None = None

    @field_validator("reduction_factor", check_fields=False)  # the successive-halving schedulers' field
    @classmethod
    def _rf(cls, value: float) -> float:
        return _reduction_factor(value)


class FIFOScheduler(_Sched):
    """Run every trial to its end: Ray's ``FIFOScheduler``.

    Attributes:
        time_attr: The reported key that measures a trial's progress; fifo stops no trial by it
            (``tuner report`` draws learning curves against it).
    """

    type: Literal["fifo"]


class ASHAScheduler(_RanksByMetric):
    """Asynchronous Successive Halving: Ray's ``ASHAScheduler``.

    Li et al., "A System for Massively Parallel Hyperparameter Tuning", MLSys 2020.
    ``max_t`` and ``grace_period`` are in units of ``time_attr`` (epochs when that is
    ``training_iteration``). ``max_t`` defaults to ``stop.training_iteration``, else 100.

    Attributes:
        max_t: The most units of ``time_attr`` a trial runs (ASHA's largest budget); None:
            ``stop.<time_attr>``, else 100.
        grace_period: Units of ``time_attr`` a trial runs before it can be stopped: the first
            rung; ``<= max_t``.
        reduction_factor: Rungs lie at ``grace_period * reduction_factor**k`` below ``max_t``,
            and each rung lets the top 1/reduction_factor of its trials go on; > 1.
        brackets: Brackets of rungs; bracket ``s`` starts at ``grace_period *
            reduction_factor**s``, and each trial joins one. 1: plain successive halving.
        stop_last_trials: true: a trial is stopped at ``max_t``; false: it runs on past
            ``max_t`` (until ``stop``).
    """

    type: Literal["asha"]
    max_t: Int | None = Field(default=None, ge=1)
    grace_period: Int = Field(default=1, ge=1)
    reduction_factor: Float = 4
    brackets: Int = Field(default=1, ge=1)
    stop_last_trials: bool = True


class HyperBandScheduler(_RanksByMetric):
    """Synchronous Hyperband: Ray's ``HyperBandScheduler``.

    Li et al., "Hyperband: A Novel Bandit-Based Approach to Hyperparameter
    Optimization", JMLR 2018.

    Attributes:
        max_t: The most units of ``time_attr`` a trial runs, the budget of each bracket's last
            rung; None: ``stop.<time_attr>``, else 100.
        reduction_factor: Hyperband's eta: each rung keeps 1/reduction_factor of a bracket's
            trials, and bracket ``s`` starts at ``max_t * reduction_factor**-s``; > 1.
        stop_last_trials: true: a trial is stopped at ``max_t``; false: it runs on past
            ``max_t`` (until ``stop``).
    """

    type: Literal["hyperband"]
    max_t: Int | None = Field(default=None, ge=1)
    reduction_factor: Float = 3
    stop_last_trials: bool = True


class BOHBScheduler(HyperBandScheduler):
    """Hyperband brackets for BOHB: Ray's ``HyperBandForBOHB``. Pairs only with ``search: bohb``."""

    type: Literal["bohb"]  # type: ignore[assignment]


class MedianScheduler(_RanksByMetric):
    """Median stopping rule: Ray's ``MedianStoppingRule``.

    Golovin et al., "Google Vizier: A Service for Black-Box Optimization", KDD 2017.
    A trial whose best result by time ``t`` is worse than the median of the other trials'
    running means up to ``t`` is stopped.

    Attributes:
        grace_period: Units of ``time_attr`` before the rule can stop a trial; >= 0.
        min_samples_required: Other trials that reached the same ``time_attr`` needed for a
            median; with fewer, the trial goes on.
        hard_stop: true: a stopped trial ends; false: it is paused, and resumed (FIFO) once
            every other trial is done.
    """

    type: Literal["median"]
    grace_period: Float = Field(default=1, ge=0)
    min_samples_required: Int = Field(default=3, ge=1)
    hard_stop: bool = True


class _PopulationScheduler(_RanksByMetric):
    """What PBT and PB2 share: when a trial of the population is considered for a perturbation
    (every ``perturbation_interval`` units of ``time_attr``), and which quantile exploits which.

    Attributes:
        synch: false: each trial is perturbed on its own when it reaches the interval
            (asynchronous); true: the whole population at once, when every trial has reached it.
    """

    perturbation_interval: Float = Field(default=4, gt=0)
    quantile_fraction: Float = Field(default=0.25, ge=0, le=0.5)
    synch: bool = False


class PBTScheduler(_PopulationScheduler):
    """Population Based Training: Ray's ``PopulationBasedTraining``.

    Jaderberg et al., "Population Based Training of Neural Networks", arXiv:1711.09846, 2017.
    Every ``perturbation_interval`` units of ``time_attr`` (after ``burn_in_period``), a trial
    in the bottom ``quantile_fraction`` of the population by ``metric`` *exploits* a trial of
    the top quantile (it restarts from that trial's latest checkpoint, with its config) and
    *explores*: each parameter of ``mutations`` is resampled from its distribution with
    probability ``resample_probability``, else multiplied by 0.8 or 1.2 (a ``choice`` or
    ``grid`` moves to a neighbouring value instead). ``synch: true`` perturbs the whole
    population at once, when every trial has reached the interval (Appendix A.1 of the paper).

    Attributes:
        perturbation_interval: Units of ``time_attr`` (iterations by default) between two
            perturbations of a trial; > 0.
        burn_in_period: Units of ``time_attr`` before the first perturbation; >= 0.
        quantile_fraction: Fraction of the population in the bottom (and top) quantile, in
            [0, 0.5]; 0 exploits nothing.
        resample_probability: Probability of resampling a mutated parameter instead of
            perturbing it, in [0, 1].
        mutations: Parameter name (dotted for a nested one, as ``oom_backoff``) -> the
            distribution it is resampled from, with ``param_space``'s distribution types;
            None: every sampled parameter of ``param_space`` with its own distribution.
    """

    type: Literal["pbt"]
    burn_in_period: Float = Field(default=0, ge=0)
    resample_probability: Float = Field(default=0.25, ge=0, le=1)
    mutations: dict[NonBlank, Distribution] | None = None

    @field_validator("mutations")
    @classmethod
    def _some(cls, value: dict | None) -> dict | None:
        if value is not None and not value:
            raise PydanticCustomError("tuner_spec", "mutations must name at least one parameter, or be omitted "
                                      "(then every sampled parameter of param_space is mutated).")
        return value


class PB2Scheduler(_PopulationScheduler):
    """Population Based Bandits: Ray's ``PB2`` (needs scikit-learn).

    Parker-Holder et al., "Provably Efficient Online Hyperparameter Optimization with
    Population-Based Bandits", NeurIPS 2020. PBT's exploit step; the explore step picks the new
    config inside ``bounds`` with a time-varying Gaussian-process bandit (GP-UCB) fitted to
    the population's recent improvements, instead of random perturbations.

    Attributes:
        perturbation_interval: Units of ``time_attr`` between two perturbations of a trial.
        quantile_fraction: Fraction of the population in the bottom (and top) quantile.
        bounds: Parameter name (dotted for a nested one) -> ``[low, high]``, ``low < high``;
            numeric parameters only. None: every numeric range of ``param_space`` with its
            ``low`` and ``high``.
    """

    type: Literal["pb2"]
    bounds: dict[NonBlank, list[Float]] | None = None

    @field_validator("bounds")
    @classmethod
    def _pairs(cls, value: dict | None) -> dict | None:
        if value is None:
            return value
        if not value:
            raise PydanticCustomError("tuner_spec", "bounds must name at least one parameter, or be omitted "
                                      "(then every numeric range of param_space is bounded by its low and high).")
        for name, pair in value.items():
            if len(pair) != 2:
                raise _fail(name, f"bounds of {name!r} must be [low, high], two numbers, but got {pair}.")
            if not pair[0] < pair[1]:
                raise _fail(name, f"bounds of {name!r}: `low < high` must hold, but got (low={pair[0]:g}, "
                            f"high={pair[1]:g}).")
        return value


SchedulerConfig = Annotated[
    FIFOScheduler | ASHAScheduler | HyperBandScheduler | BOHBScheduler | MedianScheduler | PBTScheduler
    | PB2Scheduler,
    Field(discriminator="type"),
]
SCHEDULER_TYPES = ("fifo", "asha", "hyperband", "bohb", "median", "pbt", "pb2")
# Schedulers that exploit a population: a trial restarts from another trial's checkpoint.
POPULATION_SCHEDULERS = ("pbt", "pb2")
# Schedulers that compare a bracket's trials only while they are live together.
SYNCHRONOUS_HYPERBAND = ("hyperband", "bohb")


# Other sections -------------------------------------------------------------


#: ``resources.gpu: auto``: tuner finds each trial's GPU share from measurement (:mod:`tuner.resources.gpu_packing`).
AUTO_GPU = "auto"


_GPU_ALLOWED = ("gpu must be a number of GPUs (0, a fraction below 1, or a whole number) or auto (tuner finds "
                "each trial's share from measured memory and throughput)")


def _gpu_amount(value: Any) -> Any:
    """``resources.gpu``: a number >= 0, or ``auto``; a numpy scalar is its Python number."""
    value = _real_number(value)
    if isinstance(value, str):
        if value.strip().lower() == AUTO_GPU:
            return AUTO_GPU
        raise PydanticCustomError("tuner_spec", _GPU_ALLOWED + ", but got '{value}'.", {"value": value})
    if isinstance(value, bool) or value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        if isinstance(value, bool) or value is None:
            shown = {True: "true", False: "false"}.get(value, "null") if value is not None else "null"
        else:
            shown = repr(value) if isinstance(value, (int, float)) else type(value).__name__
        raise PydanticCustomError("tuner_spec", _GPU_ALLOWED + ", but got {shown}.", {"shown": shown})
    if value < 0:
        raise PydanticCustomError("tuner_spec", "gpu must be >= 0 (or auto), but got {value}.", {"value": value})
    return float(value)


def _real_number(value: Any) -> Any:
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        return value.item()
    return value


class GpuAuto(_Model):
    """How ``resources.gpu: auto`` packs trials onto GPUs (:class:`tuner.resources.gpu_packing.GpuPacker`).

    The first trial runs alone until its first result (the probe); then each trial's GPU share
    covers the GPU memory a trial of its config is expected to peak at (learned from the
    ``gpu_memory_reserved_bytes`` that trials report), plus ``margin``, and the number of
    trials on each GPU rises while the experiment's aggregate iterations per second grows.

    Attributes:
        margin: Headroom over a config's expected peak GPU memory, as a fraction of that peak
            (0.25: a trial expected to peak at 4 GiB is booked 5 GiB).
        max_per_gpu: The most trials on one GPU at once.
        start_per_gpu: Trials on each GPU after the probe; default: half of what the CPUs
            allow (``resources.cpu`` per trial), at least 1.
        min_gain: The step up in trials per GPU is kept only when it raised the aggregate
            iterations per second by at least this fraction (0.05: 5 %); else tuner steps back
            and holds.
        probe_share: The GPU share of the first trials, before any trial has reported its memory:
            None (the default) runs the first trial alone until its first result; a fraction
            (e.g. 0.25) starts ``1 / probe_share`` trials on each GPU at once, unmeasured (faster
            to start, at the risk of running out of memory on a big model).
    """

    margin: Float = Field(default=0.25, ge=0, le=4)
    probe_share: Float | None = Field(default=None, gt=0, le=1)
    max_per_gpu: Int = Field(default=16, ge=1, le=256)
    start_per_gpu: Int | None = Field(default=None, ge=1, le=256)
    min_gain: Float = Field(default=0.05, ge=0, le=10)

    @model_validator(mode="after")
    def _start_within_max(self):
        if self.start_per_gpu is not None and self.start_per_gpu > self.max_per_gpu:
            raise _fail("start_per_gpu", f"start_per_gpu must be <= max_per_gpu, but got (start_per_gpu="
                        f"{self.start_per_gpu}, max_per_gpu={self.max_per_gpu}).")
        return self


class Resources(_Model):
    """Resources of one trial: a single process, or a DDP group of ``workers`` processes.

    Attributes:
        cpu: CPUs of a single-process trial; fractional allowed.
        gpu: GPUs of a single-process trial; a fraction below 1 packs several trials on
            one GPU, above 1 it must be a whole number; ``auto``: tuner chooses each trial's
            share from measured GPU memory and throughput (:mod:`tuner.resources.gpu_packing`).
        gpu_auto: How ``gpu: auto`` packs (:class:`GpuAuto`); only with ``gpu: auto``.
        workers: World size of a DDP trial (Ray Train's ``ScalingConfig.num_workers``);
            omitted for a single-process trial.
        cpu_per_worker: CPUs of each DDP worker.
        gpu_per_worker: GPUs of each DDP worker: 0 or a whole number when
            ``workers > 1``.
        placement_strategy: How Ray places a trial's workers on nodes (a placement
            group strategy): PACK, SPREAD, STRICT_PACK or STRICT_SPREAD.
    """

    cpu: Float = Field(default=1, ge=0)
    gpu: Annotated[StrictFloat | Literal["auto"], BeforeValidator(_gpu_amount)] = 0.0
    gpu_auto: GpuAuto | None = None
    workers: Int | None = Field(default=None, ge=1)
    cpu_per_worker: Float = Field(default=1, ge=0)
    gpu_per_worker: Float = Field(default=0, ge=0)
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"

    @model_validator(mode="after")
    def _check(self):
        given = self.model_fields_set
        if "gpu_auto" in given and not self.auto_gpu:
            raise _fail("gpu_auto", "gpu_auto applies to `gpu: auto` only (it says how tuner packs trials onto "
                        f"GPUs); set gpu: auto, or remove gpu_auto (gpu is {self.gpu!r}).")
        if self.workers is None:
            for key in ("cpu_per_worker", "gpu_per_worker", "placement_strategy"):
                if key in given:
                    raise _fail(key, f"{key} applies to a DDP trial only; add `workers: N` "
                                "(the world size), or use cpu/gpu for a single-process trial.")
            if self.auto_gpu:
                return self
            if self.cpu == 0 and self.gpu == 0:
                raise _fail("cpu", "a trial needs cpu > 0 or gpu > 0, but got (cpu=0, gpu=0).")
            if self.gpu > 1 and self.gpu != int(self.gpu):
                raise _fail("gpu", f"gpu above 1 must be a whole number (a fraction only below 1), "
                            f"but got gpu={self.gpu}.")
            return self
        for key in ("cpu", "gpu"):
            if key in given:
                extra = " (gpu: auto packs single-process trials; a DDP worker takes a whole GPU)" \
                    if key == "gpu" and self.auto_gpu else ""
                raise _fail(key, f"with workers, give {key}_per_worker instead of {key} "
                            f"(each of the {self.workers} workers gets that much){extra}.")
        if self.cpu_per_worker == 0 and self.gpu_per_worker == 0:
            raise _fail("cpu_per_worker", "a worker needs cpu_per_worker > 0 or gpu_per_worker > 0, "
                        "but got (cpu_per_worker=0, gpu_per_worker=0).")
        g = self.gpu_per_worker
        if g != int(g) and (self.workers > 1 or g > 1):
            raise _fail("gpu_per_worker", f"gpu_per_worker must be 0 or a whole number when workers > 1 "
                        f"(NCCL needs a whole GPU per rank), but got (workers={self.workers}, gpu_per_worker={g}).")
        return self

    @property
    def distributed(self) -> bool:
        """Whether a trial is a DDP group launched through Ray Train."""
        return self.workers is not None

    @property
    def auto_gpu(self) -> bool:
        """Whether tuner chooses each trial's GPU share (``gpu: auto``)."""
        return self.gpu == AUTO_GPU

    @property
    def auto(self) -> GpuAuto:
        """The ``gpu_auto`` settings (their defaults when not given)."""
        return self.gpu_auto or GpuAuto()

    @property
    def total(self) -> dict[str, float]:
        """What one whole trial takes: ``{"cpu": ..., "gpu": ...}`` summed over its workers.

        Under ``gpu: auto`` the GPU share differs from trial to trial: ``gpu`` is 0 here (the
        CPUs alone bound the trials at once; :mod:`tuner.resources.gpu_packing` adds the GPU's bounds).
        """
        if self.workers is None:
            return {"cpu": float(self.cpu), "gpu": 0.0 if self.auto_gpu else float(self.gpu)}
        return {"cpu": self.workers * float(self.cpu_per_worker), "gpu": self.workers * float(self.gpu_per_worker)}


class Failure(_Model):
    """What happens when a trial raises.

    Attributes:
        max_failures: Retries of a failing trial from its latest checkpoint before it is
            marked ERROR (Ray Tune's ``FailureConfig.max_failures``; for a DDP trial also
            Ray Train's, which restarts the worker group).
        fail_fast: Stop the whole experiment at the first trial error.
        abort_on_first_error: Stop the experiment at once, with the traceback, when the
            very first trial fails before any trial has reported a result (a bug in the
            train function), instead of running every trial into the same error.
    """

    max_failures: Int = Field(default=0, ge=0)
    fail_fast: bool = False
    abort_on_first_error: bool = True


class Checkpointing(_Model):
    """How often trial checkpoints are kept, and which.

    Ray keeps a trial's best ``num_to_keep`` checkpoints by ``score`` and, besides them, always
    its newest one, which a resume and a retry after a failure start from (Ray's
    ``CheckpointConfig(num_to_keep, checkpoint_score_attribute, checkpoint_score_order)``; its
    ``_CheckpointManager`` never deletes the latest checkpoint). A PBT/PB2 clone starts from
    tuner's copy of the top trial's checkpoint (:class:`tuner.search.population.KeepsCloneSources`).

    Attributes:
        frequency: Keep the checkpoint given to ``trial.report`` every ``frequency``
            reports (iterations); the others are skipped.
        num_to_keep: Checkpoints kept per trial, the best by ``score``; None keeps all.
        score: The reported metric that ranks a trial's checkpoints (the value reported with
            the checkpoint); None: the spec's metric (the first objective), with its mode, or,
            without a metric, the newest checkpoints are kept.
        score_mode: ``min`` or ``max`` for ``score``; required when ``score`` is not the spec's
            metric (an objective), whose mode it takes otherwise.
    """

    frequency: Int = Field(default=1, ge=1)
    num_to_keep: Int | None = Field(default=2, ge=1)
    score: NonBlank | None = None
    score_mode: Literal["min", "max"] | None = None


class BestTrial(_Model):
    """How the best trial is chosen: which of a trial's reported values score it.

    Attributes:
        scope: ``last``: its last value; ``all``: the best value it ever reported (min or max
            by the mode); ``last-5-avg``/``last-10-avg``: the mean of its last 5 or 10 values.
            As Ray's ``ResultGrid.get_best_result(scope=...)``; the rule is :mod:`tuner.core.best`'s.
    """

    scope: Scope = "last"


class CLIReporting(_Model):
    """Ray's classic CLIReporter table.

    Attributes:
        enabled: Print the table (``cli: false`` turns it off).
        metric_columns: Metrics shown as columns; defaults to ``metric`` and
            ``training_iteration``.
        max_report_frequency: Seconds between two tables.
        progress: Print one overall progress line under the table, as often as the
            table: trials done / total, the time budget used, the best metric so far.
    """

    enabled: bool = True
    metric_columns: list[NonBlank] | None = None
    max_report_frequency: Int = Field(default=10, ge=1)
    progress: bool = True


class WandbReporting(_Model):
    """Weights & Biases logging through Ray's ``WandbLoggerCallback``; needs ``pip install tuner[wandb]``.

    One W&B run per trial, grouped by experiment. The API key comes only from the
    environment (``WANDB_API_KEY``) or ``wandb login``; the spec has no key field.

    Attributes:
        project: The W&B project.
        entity: The W&B team or user; None for the key's default entity.
        group: Group of the trials' runs; None for the experiment name.
        mode: ``online`` (upload), ``offline`` (write ``wandb/offline-run-*`` in each
            trial folder, to upload later with ``wandb sync``) or ``disabled``.
        tags: Tags for every run.
        upload_checkpoints: Upload the trials' checkpoints as W&B artifacts.
    """

    project: NonBlank
    entity: NonBlank | None = None
    group: NonBlank | None = None
    mode: Literal["online", "offline", "disabled"] = "online"
    tags: list[NonBlank] | None = None
    upload_checkpoints: bool = False


class MLflowReporting(_Model):
    """MLflow tracking through Ray's ``MLflowLoggerCallback``; needs ``pip install tuner[mlflow]``.

    One MLflow run per trial: the config as params, every result as metrics by
    iteration. A tracking token comes only from the environment (``MLFLOW_TRACKING_TOKEN``).

    Attributes:
        tracking_uri: Where runs go: ``file:./mlruns`` (a local file store), a database
            URI or a tracking server's ``http(s)://`` address; None for MLflow's default.
        experiment_name: The MLflow experiment; None for the experiment name.
        tags: Tags for every run.
        save_artifact: Also log each trial folder as the run's artifacts.
    """

    tracking_uri: NonBlank | None = None
    experiment_name: NonBlank | None = None
    tags: dict[NonBlank, str] | None = None
    save_artifact: bool = False


class Reporting(_Model):
    """Where progress shows: the CLIReporter table (``cli``), TensorBoard event files, W&B and MLflow.

    Attributes:
        cli: The console table (:class:`CLIReporting`); ``true``/``false`` is short for
            ``{enabled: true|false}``.
        tensorboard: Write TensorBoard event files (with the HParams dashboard) in each trial folder.
        wandb: Log to Weights & Biases (:class:`WandbReporting`); None: off.
        mlflow: Log to MLflow (:class:`MLflowReporting`); None: off.
    """

    cli: CLIReporting = Field(default_factory=CLIReporting)
    tensorboard: bool = True
    wandb: WandbReporting | None = None
    mlflow: MLflowReporting | None = None

    @field_validator("cli", mode="before")
    @classmethod
    def _cli_flag(cls, value: Any) -> Any:
        """``cli: true|false`` is short for ``cli: {enabled: true|false}``."""
        return {"enabled": value} if isinstance(value, bool) else value


_ADDRESS = re.compile(r"^(?:auto|ray://[^\s/:]+(?::\d+)?|[^\s/:]+:\d+)$")


class RayConfig(_Model):
    """Which Ray the experiment runs on.

    Attributes:
        address: A running Ray cluster to connect to: ``auto`` (the cluster this
            machine belongs to), ``host:port`` (the head's GCS port, 6379 by default) or
            ``ray://host:10001`` (Ray Client). None starts an embedded local Ray.
            ``--address`` and the ``RAY_ADDRESS`` environment variable take precedence.
    """

    address: str | None = None

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None and not _ADDRESS.match(value):
            hint = (" An http:// address is the dashboard's, for `tuner submit --address`; `tuner run` takes the "
                    "head's GCS address." if value.startswith(("http://", "https://")) else "")
            raise PydanticCustomError(
                "tuner_spec", f"address must be 'auto', 'host:port' or 'ray://host:port', but got {value!r}.{hint}")
        return value
