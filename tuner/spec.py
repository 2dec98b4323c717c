"""Spec loading and validation: YAML text -> a frozen, validated :class:`Spec`.

The spec is the contract of the project: everything a run needs is in it, and every
mistake in it is refused here, before Ray starts and before anything is written.

Loading is YAML 1.1 ``safe_load`` semantics with two fixes that users of PyYAML trip
over: ``1e-4`` is a float (YAML 1.2 reading), and a key given twice is an error instead
of a silent overwrite. What a hostile document can cost is bounded while it is read:
aliases expand to at most :data:`MAX_YAML_NODES` nodes, lists and mappings nest at most
:data:`MAX_NESTING` deep, a file holds at most :data:`MAX_SPEC_BYTES`. Values are strict
(a YAML boolean is no number, numbers are finite, names are not blank). Every error
carries ``file:line:col`` (or the ``--set`` that gave the value) and the field path, e.g.::

    space.yaml:7:21: param_space.lr.low: `low < high` must hold, but got (low=0.1, high=0.001).

Validation is pydantic v2. Distributions validate themselves when they are built (the
model of ``optuna/distributions.py``), and cross-field rules (searcher/scheduler pairs,
rung bounds) are checked by the :class:`Spec` itself.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeGuard, Union, get_args, get_origin
from collections.abc import Callable, Iterable, Mapping

import yaml
from pydantic import (
    BeforeValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    StrictFloat,
    StrictInt,
    StringConstraints,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from typing_extensions import TypeAliasType

from tuner.errors import InputError
from tuner.params import spec_paths

__all__ = [
    "Spec",
    "SpecError",
    "SpecIssue",
    "Override",
    "load_spec",
    "parse_set",
    "stop_operator",
    "MAX_YAML_NODES",
    "MAX_NESTING",
    "MAX_SPEC_BYTES",
    "resolve_trainable",
    "check_trainable",
    "is_class_trainable",
    "trainable_dirs",
    "trainable_reference",
    "import_roots",
    "user_packages",
    "implements",
    "check_extras",
    "DISTRIBUTION_TYPES",
    "SEARCH_ALGORITHMS",
    "SCHEDULER_TYPES",
]

# --------------------------------------------------------------------------- errors


@dataclass(frozen=True)
class SpecIssue:
    """One problem found in a spec.

    Attributes:
        path: Dotted field path, e.g. ``param_space.lr.low``; empty for the whole file.
        message: One sentence saying what is wrong and what is allowed.
        line: 1-based line in the spec file, or None for a spec given as a dict.
        col: 1-based column, or None.
        source: Where the faulty value came from when not from the spec file, e.g.
            ``--set scheduler.max_t=0``; None for the :class:`SpecError`'s own source.
    """

    path: str
    message: str
    line: int | None = None
    col: int | None = None
    source: str | None = None


class SpecError(InputError, ValueError):
    """A spec that cannot be run. ``str()`` gives one line per problem.

    Each line reads ``file:line:col: field.path: message``. Raised by :func:`load_spec`
    (and ``--set``), and wherever a spec field is checked against the train function, the
    resources, the cluster's nodes, the experiment folders (``name``) or, on resume, the
    experiment's own spec. The CLI prints it and exits with code 2 (an
    :class:`~tuner.errors.InputError`, also a ``ValueError``); nothing has been started or
    written when it is raised.

    Attributes:
        issues: The problems, in file order.
        source: The spec file, or None for a spec given as a mapping.
    """

    def __init__(self, issues: Iterable[SpecIssue], source: str | os.PathLike | None = None):
        self.issues = list(issues)
        self.source = os.fspath(source) if source is not None else None
        super().__init__(self.format())

    def format(self) -> str:
        """Return the error text: one ``file:line:col: path: message`` line per issue."""
        lines = []
        for issue in self.issues:
            where = issue.source or self.source or "<spec>"
            if issue.line is not None:
                where += f":{issue.line}:{issue.col}"
            head = f"{where}: {issue.path}: " if issue.path else f"{where}: "
            lines.append(head + issue.message)
        return "\n".join(lines)


def _fail(field: str, message: str) -> PydanticCustomError:
    """Build a validation error that points at ``field`` below the current model."""
    return PydanticCustomError("tuner_spec", message.replace("{", "{{").replace("}", "}}"), {"field": field})


def _closest(word: str, choices: Iterable[str]) -> str | None:
    match = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return match[0] if match else None


def _allowed(choices: Iterable[str]) -> str:
    return ", ".join(choices)


# --------------------------------------------------------------------------- field types

_NON_BLANK = r"\S"
NonBlank = Annotated[str, StringConstraints(pattern=_NON_BLANK)]


def _integral(value: Any) -> Any:
    """A whole number written as a float (``4.0``, ``1e3``) or a numpy scalar is that number;
    anything else (a bool, a string, ``4.5``) is left for the strict type to refuse."""
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _real(value: Any) -> Any:
    """A numpy scalar is its Python number; anything else is left for the strict type."""
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        return value.item()
    return value


# Numbers in the spec: never a bool (YAML's yes/no/on/off), never a string, never NaN or inf
# (ConfigDict(allow_inf_nan=False)); a whole float is fine where an integer is wanted.
Int = Annotated[StrictInt, BeforeValidator(_integral)]
Float = Annotated[StrictFloat, BeforeValidator(_real)]
"""A string with at least one non-space character: names, metrics, keys (never ``""``)."""

# Numbers are pydantic's strict types, so a YAML boolean (``yes``, ``on``, ``true``) is never
# read as 1, nor text as a number; and every float is finite (``allow_inf_nan=False`` below).


# --------------------------------------------------------------------------- models


class _Model(BaseModel):
    """Base of every spec section: frozen, and unknown keys are refused with a hint."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            known = sorted(cls.model_fields, key=lambda k: k not in ("type", "algorithm"))
            for key in data:
                if key not in cls.model_fields:
                    hint = _closest(key, known)
                    guess = f"; did you mean '{hint}'?" if hint else "."
                    raise PydanticCustomError(
                        "tuner_unknown_key",
                        f"unknown key '{key}'{guess} Allowed keys: {_allowed(known)}."
                        .replace("{", "{{").replace("}", "}}"),
                        {"field": str(key), "key": True},
                    )
        return data


def _check_multiple(name: str, value: float, q: float) -> None:
    if not math.isclose(value / q, round(value / q), rel_tol=1e-9, abs_tol=1e-12):
        raise _fail(name, f"{name} must be a multiple of q, but got ({name}={value}, q={q}).")


class _Dist(_Model):
    """Common base of the distributions: the same names and meanings as Ray Tune's."""

    @model_validator(mode="after")
    def _range(self):
        """Ranges: ``low < high``; quantized ones: ``low`` and ``high`` multiples of ``q``."""
        low, high = getattr(self, "low", None), getattr(self, "high", None)
        if low is None or high is None:
            return self
        if not low < high:
            raise _fail("low", f"`low < high` must hold, but got (low={low}, high={high}).")
        q = getattr(self, "q", None)
        if q is not None:
            _check_multiple("low", low, q)
            _check_multiple("high", high, q)
        return self

    @property
    def is_numeric_range(self) -> bool:
        """Whether the distribution is a numeric range (enumerated by ``grid_points``)."""
        return hasattr(self, "grid_points")

    if TYPE_CHECKING:  # the subclasses' fields (type, low, high, q, values, ...), read through the base
        def __getattr__(self, name: str) -> Any: ...


class _Range(_Dist):
    low: Float
    high: Float
    grid_points: Int | None = Field(default=None, ge=2)


class Uniform(_Range):
    """Float uniformly in ``[low, high)``; wraps ``tune.uniform``."""

    type: Literal["uniform"]


class QUniform(_Range):
    """Float uniformly in ``[low, high]`` rounded to a multiple of ``q``; ``tune.quniform``."""

    type: Literal["quniform"]
    q: Float = Field(gt=0)


class LogUniform(_Range):
    """Float log-uniformly in ``[low, high)``, ``low > 0``; ``tune.loguniform``.

    ``base`` is accepted for compatibility and has no effect: a log-uniform
    distribution is the same in every base.
    """

    type: Literal["loguniform"]
    base: Float = Field(default=10, gt=0)

    @model_validator(mode="after")
    def _positive(self):
        if self.low <= 0:
            raise _fail("low", f"low must be > 0 for a log scale, but got low={self.low}.")
        return self


class QLogUniform(LogUniform):
    """Float log-uniformly in ``[low, high]`` rounded to a multiple of ``q``; ``tune.qloguniform``."""

    type: Literal["qloguniform"]  # type: ignore[assignment]
    q: Float = Field(gt=0)


class RandN(_Dist):
    """Float from a normal distribution, unbounded; ``tune.randn``."""

    type: Literal["randn"]
    mean: Float = 0.0
    sd: Float = Field(default=1.0, gt=0)


class QRandN(RandN):
    """Normal float rounded to a multiple of ``q``; ``tune.qrandn``."""

    type: Literal["qrandn"]  # type: ignore[assignment]
    q: Float = Field(gt=0)


class _IntRange(_Dist):
    low: Int
    high: Int
    grid_points: Int | None = Field(default=None, ge=2)


class RandInt(_IntRange):
    """Integer uniformly in ``[low, high)`` (high exclusive); ``tune.randint``."""

    type: Literal["randint"]


class QRandInt(_IntRange):
    """Integer multiple of ``q`` in ``[low, high]`` (high inclusive, exclusive for q=1); ``tune.qrandint``."""

    type: Literal["qrandint"]
    q: Int = Field(default=1, ge=1)


class LogRandInt(_IntRange):
    """Integer log-uniformly in ``[low, high)``, ``low >= 1``; ``tune.lograndint``."""

    type: Literal["lograndint"]
    base: Float = Field(default=10, gt=0)

    @model_validator(mode="after")
    def _positive(self):
        if self.low < 1:
            raise _fail("low", f"low must be >= 1 for a log scale, but got low={self.low}.")
        return self


class QLogRandInt(LogRandInt):
    """Integer multiple of ``q`` log-uniformly in ``[low, high]``; ``tune.qlograndint``."""

    type: Literal["qlograndint"]  # type: ignore[assignment]
    q: Int = Field(default=1, ge=1)


class _Values(_Dist):
    values: list[Any]

    @field_validator("values")
    @classmethod
    def _non_empty(cls, values: list[Any]) -> list[Any]:
        if not values:
            raise PydanticCustomError("tuner_spec", "values must hold at least one value, but got [].")
        return values

    @property
    def is_numeric_range(self) -> bool:
        return False


class Choice(_Values):
    """One of ``values``, uniformly; ``tune.choice``. Enumerated under grid search."""

    type: Literal["choice"]


class Grid(_Values):
    """Every one of ``values`` in turn; ``tune.grid_search``."""

    type: Literal["grid"]


_DISTRIBUTIONS = (Uniform, QUniform, LogUniform, QLogUniform, RandN, QRandN,
                  RandInt, QRandInt, LogRandInt, QLogRandInt, Choice, Grid)
DISTRIBUTION_TYPES: tuple[str, ...] = tuple(
    c.model_fields["type"].annotation.__args__[0] for c in _DISTRIBUTIONS
)
"""Names allowed as a parameter's ``type``, as in Ray Tune's sampling functions."""

# A Union over a tuple is what lets pydantic discriminate on `type`; `X | Y` cannot be spread from a tuple.
Distribution = Annotated[Union[_DISTRIBUTIONS], Field(discriminator="type")]  # type: ignore[valid-type]  # noqa: UP007


def _param_kind(value: Any) -> str:
    if isinstance(value, _Dist):
        return "<dist>"
    if isinstance(value, Mapping):
        return "<dist>" if "type" in value else "<nested>"
    return "<const>"


if TYPE_CHECKING:  # a recursive pydantic alias that mypy cannot resolve
    ParamValue = Any
else:
    ParamValue = TypeAliasType(
        "ParamValue",
        Annotated[
            Annotated[Distribution, Tag("<dist>")]
            | Annotated[dict[str, "ParamValue"], Tag("<nested>")]
            | Annotated[Any, Tag("<const>")],
            Discriminator(_param_kind),
        ],
    )

_DIST_KEYS = {k for c in _DISTRIBUTIONS for k in c.model_fields}
_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


# Searchers -----------------------------------------------------------------


class _Search(_Model):
    points_to_evaluate: list[dict[NonBlank, Any]] | None = None


class RandomSearch(_Search):
    """Random sampling (and grid parameters, if any): Ray's ``BasicVariantGenerator``."""

    algorithm: Literal["random"]


class GridSearch(_Model):
    """Every combination of ``grid`` and ``choice`` values (numeric ranges need ``grid_points``)."""

    algorithm: Literal["grid"]


class OptunaSearch(_Search):
    """Optuna's TPE sampler through ``ray.tune.search.optuna.OptunaSearch``.

    Bergstra et al., "Algorithms for Hyper-Parameter Optimization", NeurIPS 2011.
    """

    algorithm: Literal["optuna"]
    n_startup_trials: Int = Field(default=10, ge=0)
    multivariate: bool = False


class BOHBSearch(_Search):
    """BOHB's model-based sampler through ``ray.tune.search.bohb.TuneBOHB`` (hpbandster).

    Falkner et al., "BOHB: Robust and Efficient Hyperparameter Optimization at Scale",
    ICML 2018. The options are hpbandster's ``BOHB`` keyword arguments.
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
    time_attr: NonBlank = "training_iteration"


class FIFOScheduler(_Sched):
    """Run every trial to its end: Ray's ``FIFOScheduler``."""

    type: Literal["fifo"]


class ASHAScheduler(_Sched):
    """Asynchronous Successive Halving: Ray's ``ASHAScheduler``.

    Li et al., "A System for Massively Parallel Hyperparameter Tuning", MLSys 2020.
    ``max_t`` and ``grace_period`` are in units of ``time_attr`` (epochs when that is
    ``training_iteration``). ``max_t`` defaults to ``stop.training_iteration``, else 100.
    """

    type: Literal["asha"]
    max_t: Int | None = Field(default=None, ge=1)
    grace_period: Int = Field(default=1, ge=1)
    reduction_factor: Float = 4
    brackets: Int = Field(default=1, ge=1)
    stop_last_trials: bool = True

    @field_validator("reduction_factor")
    @classmethod
    def _rf(cls, value: float) -> float:
        return _reduction_factor(value)


class HyperBandScheduler(_Sched):
    """Synchronous Hyperband: Ray's ``HyperBandScheduler``.

    Li et al., "Hyperband: A Novel Bandit-Based Approach to Hyperparameter
    Optimization", JMLR 2018.
    """

    type: Literal["hyperband"]
    max_t: Int | None = Field(default=None, ge=1)
    reduction_factor: Float = 3
    stop_last_trials: bool = True

    @field_validator("reduction_factor")
    @classmethod
    def _rf(cls, value: float) -> float:
        return _reduction_factor(value)


class BOHBScheduler(HyperBandScheduler):
    """Hyperband brackets for BOHB: Ray's ``HyperBandForBOHB``. Pairs only with ``search: bohb``."""

    type: Literal["bohb"]  # type: ignore[assignment]


class MedianScheduler(_Sched):
    """Median stopping rule: Ray's ``MedianStoppingRule``.

    Golovin et al., "Google Vizier: A Service for Black-Box Optimization", KDD 2017.
    """

    type: Literal["median"]
    grace_period: Float = Field(default=1, ge=0)
    min_samples_required: Int = Field(default=3, ge=1)
    hard_stop: bool = True


SchedulerConfig = Annotated[
    FIFOScheduler | ASHAScheduler | HyperBandScheduler | BOHBScheduler | MedianScheduler,
    Field(discriminator="type"),
]
SCHEDULER_TYPES = ("fifo", "asha", "hyperband", "bohb", "median")


# Other sections -------------------------------------------------------------


class Resources(_Model):
    """Resources of one trial: a single process, or a DDP group of ``workers`` processes.

    Attributes:
        cpu: CPUs of a single-process trial; fractional allowed.
        gpu: GPUs of a single-process trial; a fraction below 1 packs several trials on
            one GPU, above 1 it must be a whole number.
        workers: World size of a DDP trial (Ray Train's ``ScalingConfig.num_workers``);
            omitted for a single-process trial.
        cpu_per_worker: CPUs of each DDP worker.
        gpu_per_worker: GPUs of each DDP worker: 0 or a whole number when
            ``workers > 1``.
        placement_strategy: How Ray places a trial's workers on nodes (a placement
            group strategy): PACK, SPREAD, STRICT_PACK or STRICT_SPREAD.
    """

    cpu: Float = Field(default=1, ge=0)
    gpu: Float = Field(default=0, ge=0)
    workers: Int | None = Field(default=None, ge=1)
    cpu_per_worker: Float = Field(default=1, ge=0)
    gpu_per_worker: Float = Field(default=0, ge=0)
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"

    @model_validator(mode="after")
    def _check(self):
        given = self.model_fields_set
        if self.workers is None:
            for key in ("cpu_per_worker", "gpu_per_worker", "placement_strategy"):
                if key in given:
                    raise _fail(key, f"{key} applies to a DDP trial only; add `workers: N` "
                                "(the world size), or use cpu/gpu for a single-process trial.")
            if self.cpu == 0 and self.gpu == 0:
                raise _fail("cpu", "a trial needs cpu > 0 or gpu > 0, but got (cpu=0, gpu=0).")
            if self.gpu > 1 and self.gpu != int(self.gpu):
                raise _fail("gpu", f"gpu above 1 must be a whole number (a fraction only below 1), "
                            f"but got gpu={self.gpu}.")
            return self
        for key in ("cpu", "gpu"):
            if key in given:
                raise _fail(key, f"with workers, give {key}_per_worker instead of {key} "
                            f"(each of the {self.workers} workers gets that much).")
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
    def total(self) -> dict[str, float]:
        """What one whole trial takes: ``{"cpu": ..., "gpu": ...}`` summed over its workers."""
        if self.workers is None:
            return {"cpu": float(self.cpu), "gpu": float(self.gpu)}
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
    """How often trial checkpoints are kept, and how many.

    Attributes:
        frequency: Keep the checkpoint given to ``trial.report`` every ``frequency``
            reports (iterations); the others are skipped.
        num_to_keep: Checkpoints kept per trial (the newest); None keeps all
            (Ray's ``CheckpointConfig.num_to_keep``).
    """

    frequency: Int = Field(default=1, ge=1)
    num_to_keep: Int | None = Field(default=2, ge=1)


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
    """Where progress shows: the CLIReporter table (``cli``), TensorBoard event files, W&B and MLflow."""

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


_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
_TRAINABLE = re.compile(r"^(?:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*|[^:]+\.py):[A-Za-z_]\w*$")
_NEEDS_METRIC = {"asha", "hyperband", "bohb", "median"}
# Schedulers that compare a bracket's trials only while they are live together.
SYNCHRONOUS_HYPERBAND = ("hyperband", "bohb")


class Spec(_Model):
    """A validated, frozen tuning spec. Build it with :func:`load_spec`.

    See the README's "The spec" section for every field. Validation refuses wrong
    searcher/scheduler pairs, grid values under model-based searchers, schedulers
    without a metric, and rungs that cannot exist.
    """

    name: str = "experiment"
    trainable: str | None = None  # required unless tune_model(trainable=...) passes one
    metric: NonBlank | None = None
    mode: Literal["min", "max"] | None = None
    num_samples: Int = Field(default=1, ge=1)
    max_concurrent_trials: Int | None = Field(default=None, ge=1)
    time_budget_s: Float | None = Field(default=None, gt=0)
    stop: dict[NonBlank, Float] | None = None
    seed: Int | None = None
    param_space: dict[str, ParamValue] = Field(default_factory=dict)
    search: SearchConfig = Field(default_factory=lambda: RandomSearch(algorithm="random"))
    scheduler: SchedulerConfig = Field(default_factory=lambda: FIFOScheduler(type="fifo"))
    resources: Resources = Field(default_factory=Resources)
    reporting: Reporting = Field(default_factory=Reporting)
    storage: NonBlank = "runs"
    ray: RayConfig = Field(default_factory=RayConfig)
    failure: Failure = Field(default_factory=Failure)
    checkpoint: Checkpointing = Field(default_factory=Checkpointing)
    trial_timeout_s: Float | None = Field(default=None, gt=0)
    amp: bool = False
    oom_backoff: NonBlank | None = None
    min_batch_size: Int = Field(default=1, ge=1)

    _source: str | None = PrivateAttr(default=None)
    _marks: dict = PrivateAttr(default_factory=dict)
    _origins: dict = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _default_scheduler(cls, data: Any) -> Any:
        """No scheduler given: ``bohb`` under BOHB search, else ``fifo``.

        Under BOHB search a scheduler without ``type`` (``--set scheduler.max_t=9`` on a
        spec with no ``scheduler:``) is ``bohb`` too, the only one that pairs with it.
        """
        if not isinstance(data, Mapping):
            return data
        search = data.get("search")
        algo = search.get("algorithm") if isinstance(search, Mapping) else getattr(search, "algorithm", None)
        scheduler = data.get("scheduler")
        if scheduler is None:
            data = {**data, "scheduler": {"type": "bohb" if algo == "bohb" else "fifo"}}
        elif algo == "bohb" and isinstance(scheduler, Mapping) and "type" not in scheduler:
            data = {**data, "scheduler": {"type": "bohb", **scheduler}}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value) or set(value) == {"."}:
            raise PydanticCustomError(
                "tuner_spec",
                f"name may hold only letters, digits, '.', '_' and '-' (no '/', not '..'), but got {value!r}.",
            )
        return value

    @field_validator("storage")
    @classmethod
    def _storage(cls, value: str) -> str:
        from urllib.parse import urlsplit

        from tuner.storage import REMOTE_SCHEMES, scheme_of

        name = scheme_of(value)
        if name is None:
            return value
        if name == "file":
            if not value[len("file://"):].startswith("/"):
                raise PydanticCustomError("tuner_spec", f"a file:// URI needs an absolute path (file:///data/runs), "
                                          f"but got {value!r}.")
            return value
        if name not in REMOTE_SCHEMES:
            raise PydanticCustomError(
                "tuner_spec",
                f"storage takes a folder (local, or shared by every node), a file:// URI or a cloud URI with one of "
                f"the schemes {', '.join(s + '://' for s in REMOTE_SCHEMES)}, but got {value!r}.")
        if not urlsplit(value).netloc:
            raise PydanticCustomError("tuner_spec", f"storage {value!r} names no bucket (or host); "
                                      f"write {name}://BUCKET/PREFIX.")
        return value

    @property
    def remote_storage(self) -> bool:
        """Whether ``storage`` is a cloud URI (``s3://``, ``gs://``, ...; see :mod:`tuner.storage`)."""
        from tuner.storage import is_remote

        return is_remote(self.storage)

    @property
    def storage_dir(self) -> Path:
        """``storage`` as an absolute local folder (a ``file://`` URI becomes its path).

        For a cloud URI: the local mirror's parent (:func:`tuner.storage.mirror_dir`).
        """
        value = self.storage
        if self.remote_storage:
            from tuner.storage import mirror_dir

            return mirror_dir(value)
        if value.lower().startswith("file://"):
            from urllib.parse import unquote, urlparse

            value = unquote(urlparse(value).path)
        return Path(value).expanduser().resolve()

    @model_validator(mode="after")
    def _trainable_given(self, info: ValidationInfo):
        """``trainable`` is required, unless the caller passes the trainable itself (the context
        of :func:`load_spec`'s ``require_trainable=False``)."""
        if self.trainable is None and (info.context or {}).get("require_trainable", True):
            raise _fail("trainable", "required key 'trainable' is missing.")
        return self

    @field_validator("trainable")
    @classmethod
    def _trainable(cls, value: str | None) -> str | None:
        if value is not None and not _TRAINABLE.match(value):
            hint = ""
            if ":" not in value and value.endswith(".py"):
                hint = f"; name the function after a ':', e.g. '{value}:train'"
            elif ":" not in value and _TRAINABLE.match(":".join(value.rsplit(".", 1))):
                hint = f"; did you mean '{':'.join(value.rsplit('.', 1))}'? A ':' comes before the function"
            raise PydanticCustomError(
                "tuner_spec",
                f"trainable must be 'package.module:function' or 'path/to/file.py:function', but got {value!r}"
                f"{hint}.",
            )
        return value

    @field_validator("param_space")
    @classmethod
    def _param_names(cls, value: dict) -> dict:
        def walk(space: Mapping, prefix: str) -> None:
            for key, sub in space.items():
                if not _PARAM_NAME.match(key):
                    raise _fail(
                        prefix + key,
                        f"parameter names must start with a letter or '_' and hold only letters, digits, "
                        f"'_', '.' and '-', but got {key!r}.",
                    )
                if isinstance(sub, dict):
                    looks = set(sub) <= _DIST_KEYS and ({"low", "high"} <= set(sub) or "values" in sub)
                    if looks:
                        raise _fail(prefix + key, f"parameter {key!r} looks like a distribution but has no `type`; "
                                    f"add one of: {_allowed(DISTRIBUTION_TYPES)}.")
                    walk(sub, prefix + key + ".")

        walk(value, "")
        return value

    @model_validator(mode="after")
    def _cross_checks(self):
        algo, sched = self.search.algorithm, self.scheduler.type
        if self.metric is not None and self.mode is None:
            raise _fail("metric", f"metric {self.metric!r} needs a mode: add `mode: min` or `mode: max`.")
        if self.mode is not None and self.metric is None:
            raise _fail("mode", "mode needs a metric: add `metric: NAME`, a key your train function reports.")
        if algo == "bohb" and sched != "bohb":
            raise _fail("scheduler.type", f"search bohb needs scheduler bohb (HyperBandForBOHB), but got {sched!r}; "
                        "omit the scheduler to get it.")
        if sched == "bohb" and algo != "bohb":
            raise _fail("scheduler.type", f"scheduler bohb (HyperBandForBOHB) works only with search bohb, but got "
                        f"search {algo!r}; use asha or hyperband instead.")
        if self.metric is None and (sched in _NEEDS_METRIC or algo in ("bohb", "optuna")):
            what = f"scheduler {sched}" if sched in _NEEDS_METRIC else f"search {algo}"
            field = "scheduler.type" if sched in _NEEDS_METRIC else "search.algorithm"
            raise _fail(field, f"{what} compares trials by a metric, but the spec sets none; "
                               "add `metric:` and `mode:`.")
        if sched in SYNCHRONOUS_HYPERBAND and self.max_concurrent_trials == 1:
            # Ray's synchronous Hyperband processes a rung once every live trial of the bracket
            # reached it and keeps ceil(n/reduction_factor) >= 1 of them; the concurrency cap
            # counts PAUSED trials as live, so with a cap of 1 a rung never stops anyone.
            raise _fail("max_concurrent_trials", f"scheduler {sched} (synchronous Hyperband) compares the trials "
                        "of a bracket while they are live together, and max_concurrent_trials counts paused "
                        "trials, so with max_concurrent_trials=1 it would stop no trial early (every trial would "
                        f"run to max_t={self.scheduler_max_t}); use scheduler asha (asynchronous), or set "
                        "max_concurrent_trials >= 2, or omit it.")
        max_t = getattr(self.scheduler, "max_t", None)
        grace = getattr(self.scheduler, "grace_period", None)
        if sched == "asha" and grace is not None and grace > self.scheduler_max_t:
            field = "scheduler.max_t" if max_t is not None else "scheduler.grace_period"
            raise _fail(field, f"`grace_period <= max_t` must hold, but got (grace_period={grace}, "
                        f"max_t={self.scheduler_max_t}).")
        for path, dist in spec_paths(self.param_space):
            _check_param_for_search(path, dist, algo)
        if self.oom_backoff is not None:
            names = [p for p, _ in spec_paths(self.param_space, root=None)]
            if self.oom_backoff not in names:
                hint = _closest(self.oom_backoff, names)
                guess = f"; did you mean '{hint}'?" if hint else "."
                raise _fail("oom_backoff", f"oom_backoff names {self.oom_backoff!r}, which is not a parameter in "
                            f"param_space{guess} Parameters: {_allowed(names) or '(none)'}.")
        return self

    @property
    def scheduler_max_t(self) -> int:
        """``scheduler.max_t``, else ``stop.training_iteration``, else 100 (Ray's default)."""
        max_t = getattr(self.scheduler, "max_t", None)
        if max_t is not None:
            return max_t
        if self.stop and self.scheduler.time_attr in self.stop:
            return int(self.stop[self.scheduler.time_attr])
        return 100

    @property
    def source(self) -> str | None:
        """The spec file this Spec was loaded from, or None."""
        return self._source

    @property
    def stop_criteria(self) -> list[tuple[str, str, float]]:
        """``stop`` as ``(key, operator, threshold)`` triples; see :func:`stop_operator`."""
        return [(key, stop_operator(key, self.metric, self.mode), value) for key, value in (self.stop or {}).items()]

    def origin(self, path: str) -> str | None:
        """The command-line option (``--name X``, ``--set KEY=VALUE``) that gave the value at a
        dotted field path, or None for a value from the spec itself (or a default)."""
        return _origin_of(tuple(path.split(".")), self._origins) if path else None

    def mark(self, path: str) -> tuple[int, int] | None:
        """Return the 1-based ``(line, col)`` of a dotted field path in the spec file, or None."""
        return self._marks.get(tuple(path.split("."))) if path else None

    def error(self, path: str, message: str) -> SpecError:
        """Build a :class:`SpecError` for ``path``: at its position in the spec file, or
        naming the ``--set``/command-line option that gave its value."""
        origin = _origin_of(tuple(path.split(".")), self._origins) if path else None
        if origin is not None:
            return SpecError([SpecIssue(path, message, source=origin)], self._source)
        line_col = self.mark(path) or (None, None)
        return SpecError([SpecIssue(path, message, *line_col)], self._source)


def stop_operator(key: str, metric: str | None, mode: str | None) -> str:
    """How a trial's result is compared with its ``stop`` threshold: ``"<="`` or ``">="``.

    The spec's own ``metric`` under ``mode: min`` stops a trial once it is at or below
    the threshold (``stop: {val_loss: 0.05}`` means "good enough"); every other key
    (``training_iteration``, the metric under ``mode: max``, any other reported key)
    once it is at or above, as Ray Tune's dict form does.

    Args:
        key: A key of the spec's ``stop``.
        metric: The spec's ``metric``, or None.
        mode: The spec's ``mode`` (``"min"``, ``"max"``), or None.

    Returns:
        ``"<="`` or ``">="``.
    """
    return "<=" if key == metric and mode == "min" else ">="


def _origin_of(key: tuple, origins: Mapping[tuple, str]) -> str | None:
    """The ``--set``/option that gave the value at ``key`` or at a mapping above it, or None."""
    for i in range(len(key), 0, -1):
        if key[:i] in origins:
            return origins[key[:i]]
    return None


_BOHB_UNSUPPORTED = {"quniform", "qloguniform", "randn", "qrandn", "grid"}
_OPTUNA_UNSUPPORTED = {"qloguniform", "randn", "qrandn", "grid"}


def _check_param_for_search(path: str, dist: Any, algo: str) -> None:
    """Refuse distributions that a searcher cannot represent (instead of Ray's silent drop)."""
    if not isinstance(dist, _Dist):
        return
    rel = path.split(".", 1)[1]
    kind = dist.type
    q = getattr(dist, "q", None)
    if algo in ("bohb", "optuna"):
        bad = _BOHB_UNSUPPORTED if algo == "bohb" else _OPTUNA_UNSUPPORTED
        quantized_int = kind in ("qrandint", "qlograndint") and q and q > 1
        if algo == "optuna" and kind == "qrandint":
            quantized_int = False  # Optuna's IntDistribution has a step
        if kind in bad or quantized_int:
            hint = "use choice instead" if kind == "grid" else "use an unquantized range or choice instead"
            raise _fail(f"param_space.{rel}.type", f"search {algo} cannot sample {kind} parameters; {hint}. "
                        f"It supports: {_allowed(t for t in DISTRIBUTION_TYPES if t not in bad)}.")
    if algo == "grid" and dist.is_numeric_range and dist.grid_points is None:
        raise _fail(f"param_space.{rel}", f"grid search enumerates {kind} only with `grid_points: N` "
                    "(N >= 2 points from low to high); add it, or use grid/choice values.")
    if algo == "grid" and kind in ("randn", "qrandn"):
        raise _fail(f"param_space.{rel}.type", f"grid search cannot enumerate an unbounded {kind}; use grid or "
                    "choice values, or a range with grid_points.")


# --------------------------------------------------------------------------- YAML

MAX_YAML_NODES = 100_000
"""The most YAML nodes (keys, values, lists, mappings) a spec may hold, each alias counted in full."""
MAX_NESTING = 32
"""The deepest a spec may nest lists and mappings; the top-level mapping is level 1."""
MAX_SPEC_BYTES = 1 << 20
"""The largest spec file read, in bytes (1 MiB): PyYAML reads about 0.3 MB a second."""

_MERGE_TAG = "tag:yaml.org,2002:merge"
_TOO_DEEP = f"nest lists and mappings more than {MAX_NESTING} levels deep here; a spec may nest at most {MAX_NESTING}."


class _YAMLIssue(Exception):
    """A problem found while reading YAML, before the caller knows the source to name."""

    def __init__(self, issue: SpecIssue):
        super().__init__(issue.message)
        self.issue = issue


def _at(mark: yaml.Mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _dotted(path: Iterable) -> str:
    return ".".join(str(p) for p in path if p is not None)


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that reads YAML 1.2 floats such as ``1e-4``, with aliases and nesting bounded.

    While it composes the node graph, it keeps every node's size with each alias expanded
    and its height (levels of lists and mappings), memoised per node. So a document of
    aliases of aliases (a "billion laughs") is refused at the alias that takes it past
    :data:`MAX_YAML_NODES`, nesting past :data:`MAX_NESTING` where it happens (PyYAML's
    composer recurses once per level), and an alias inside its own anchor as a cycle: all
    before anything walks, constructs or validates the expanded graph.

    Raises:
        _YAMLIssue: From ``get_single_node``, for any of those.
    """

    def __init__(self, stream: str):
        super().__init__(stream)
        self._expanded: dict[int, tuple[int, int]] = {}  # id(node) -> (size, height); nodes outlive the loader's use
        self._total = 0  # nodes composed so far, each alias counted in full
        self._depth = 0  # lists and mappings open around the node being composed
        self._path: list = []  # the keys and indexes down to it; None for a mapping's key

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if isinstance(parent, yaml.MappingNode):
            self._path.append(index.value if isinstance(index, yaml.ScalarNode) else None)
        elif isinstance(parent, yaml.SequenceNode):
            self._path.append(index)
        try:
            if self.check_event(yaml.AliasEvent):
                return self._compose_alias(parent, index)
            return self._compose_new(parent, index)
        finally:
            if parent is not None:
                self._path.pop()

    def _compose_new(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        collection = isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent))
        if collection and self._depth >= MAX_NESTING:
            self._refuse(f"the spec would {_TOO_DEEP}", event.start_mark)
        self._count(1, event.start_mark, None)
        self._depth += collection
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= collection
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        else:
            children = node.value if isinstance(node, yaml.SequenceNode) else []
        sizes = [self._expanded[id(child)] for child in children]
        self._expanded[id(node)] = (1 + sum(size for size, _ in sizes),
                                    collection + max((height for _, height in sizes), default=0))
        return node

    def _compose_alias(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        node = super().compose_node(parent, index)  # the anchored node; refuses an undefined alias
        expanded = self._expanded.get(id(node))
        if expanded is None:  # its anchor is still being composed: the alias lies inside it
            kind = getattr(node, "id", "node")  # "mapping" or "sequence"
            self._refuse(f"the alias *{event.anchor} lies inside the {kind} it names (a cycle); a spec cannot "
                         "hold one.", event.start_mark)
        size, height = expanded
        if self._depth + height > MAX_NESTING:
            self._refuse(f"the alias *{event.anchor} would {_TOO_DEEP}", event.start_mark)
        self._count(size, event.start_mark, event.anchor)
        return node

    def _count(self, size: int, mark: yaml.Mark, alias: str | None) -> None:
        self._total += size
        if self._total <= MAX_YAML_NODES:
            return
        if alias is None:
            self._refuse(f"the spec holds more than {MAX_YAML_NODES:,} YAML nodes (keys, values, lists and "
                         f"mappings) by here; a spec may hold at most {MAX_YAML_NODES:,}.", mark)
        self._refuse(f"the alias *{alias} expands the spec to more than {MAX_YAML_NODES:,} YAML nodes (keys, "
                     f"values, lists and mappings, each alias counted in full); a spec may hold at most "
                     f"{MAX_YAML_NODES:,}, so use fewer or smaller aliases.", mark)

    def _refuse(self, message: str, mark: yaml.Mark) -> None:
        raise _YAMLIssue(SpecIssue(_dotted(self._path), message, mark.line + 1, mark.column + 1))


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _collect_marks(node: yaml.Node, path: tuple, marks: dict) -> None:
    """Record ``path -> (line, col)`` for every node, refusing duplicate keys.

    The keys a merge (``<<: *base``) brings into a mapping are recorded where the merged
    mapping gives them, unless the mapping sets them itself (as PyYAML merges).
    """
    marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, yaml.Node] = {}
        merged = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merged.append(value_node)
                continue
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            if key in seen:
                first = seen[key].start_mark
                raise _YAMLIssue(SpecIssue(
                    _dotted(path + (key,)), f"duplicate key '{key}' (first given on line {first.line + 1}); "
                    "a key may appear once in a mapping.",
                    key_node.start_mark.line + 1, key_node.start_mark.column + 1))
            seen[key] = key_node
            _collect_entry(key, key_node, value_node, path, marks)
        _collect_merged(merged, path, seen, marks)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _collect_marks(item, path + (i,), marks)


def _collect_entry(key: Any, key_node: yaml.Node, value_node: yaml.Node, path: tuple, marks: dict) -> None:
    marks[("<key>",) + path + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
    _collect_marks(value_node, path + (key,), marks)


def _collect_merged(values: list[yaml.Node], path: tuple, seen: dict, marks: dict) -> None:
    """Marks of the keys merged into the mapping at ``path`` from ``<<`` values (a mapping or a list of them)."""
    for value_node in values:
        for source in value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]:
            if not isinstance(source, yaml.MappingNode):
                continue  # the constructor refuses it ("expected a mapping for merging")
            inner = []
            for key_node, sub in source.value:
                if key_node.tag == _MERGE_TAG:
                    inner.append(sub)
                    continue
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
                if key not in seen:
                    seen[key] = key_node
                    _collect_entry(key, key_node, sub, path, marks)
            _collect_merged(inner, path, seen, marks)


_CONSTRUCTS = {"simple key": "key", "quoted scalar": "quoted string", "double-quoted scalar": "double-quoted string",
               "block collection": "block sequence"}
_NOT_CLOSED = ("expected ',' or", "found unexpected end of stream", "found unexpected document separator")


def _syntax_message(exc: yaml.MarkedYAMLError, here: bool = True) -> tuple[str, yaml.Mark | None]:
    """One sentence for a PyYAML error, naming where the broken construct began and where
    the parser gave up, and the mark to report it at.

    Args:
        exc: The error (``context``/``context_mark``: the construct being read;
            ``problem``/``problem_mark``: what was wrong, where).
        here: Whether the returned mark is shown before the sentence (``file:line:col:``),
            so the sentence may say "here" for it.

    Returns:
        ``(sentence, mark)``; the mark is None when PyYAML gives none.
    """
    problem = (exc.problem or "").strip().replace(", but got ", ", but found ")
    context = (exc.context or "").strip()
    pmark, cmark = exc.problem_mark, exc.context_mark
    if "could not determine a constructor" in problem:
        tag = problem.split("tag", 1)[-1].strip().replace("tag:yaml.org,2002:", "!!")
        return f"tag {tag} is not allowed; a spec holds only plain YAML values (safe_load).", pmark
    if problem == "found character '\\t' that cannot start any token":
        return "found a tab, which YAML does not allow for indentation; indent with spaces.", pmark
    alias = re.match(r"found undefined alias '(.+)'$", problem)
    if alias:
        return f"the alias *{alias.group(1)} names no anchor; define &{alias.group(1)} before it.", pmark
    two_places = cmark is not None and pmark is not None and (cmark.line, cmark.column) != (pmark.line, pmark.column)
    if two_places and context.startswith("while ") and len(context.split(" ", 2)) == 3:
        what = context.split(" ", 2)[2]
        what = what.split(" ", 1)[1] if what.startswith(("a ", "an ")) else what
        what = _CONSTRUCTS.get(what, what)
        start = f"here ({_at(cmark)})" if here else f"at {_at(cmark)}"
        if problem.startswith(_NOT_CLOSED):
            return f"the {what} that starts {start} is not closed: {problem} at {_at(pmark)}.", cmark
        if problem == "could not find expected ':'":
            return f"the {what} that starts {start} has no ':' after it (the parser looked for one up to " \
                   f"{_at(pmark)}).", cmark
        return f"{problem} {'here' if here else 'at ' + _at(pmark)}, in the {what} that starts at {_at(cmark)}.", pmark
    if two_places and context == "expected a single document in the stream":
        return (f"a spec is a single YAML document, but a second one starts {'here' if here else 'at ' + _at(pmark)} "
                f"(the first starts at {_at(cmark)}); remove the '---' or '...' line.", pmark)
    anchor = re.match(r"found duplicate anchor '(.+)'; first occurrence$", context)
    if two_places and anchor:
        return (f"the anchor &{anchor.group(1)} is defined twice, {'here' if here else 'at ' + _at(pmark)} and at "
                f"{_at(cmark)}; give each anchor its own name.", pmark)
    text = f"{context}, {problem}" if context and problem else (problem or context or "invalid YAML")
    return f"{text}.", pmark or cmark


def _load(text: str) -> tuple[Any, dict]:
    """Compose, mark and construct one YAML document (see :func:`parse_yaml`).

    Raises:
        _YAMLIssue: A duplicate key, or a document past the alias and nesting bounds.
        yaml.YAMLError: Whatever PyYAML refuses.
    """
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        marks: dict = {}
        _collect_marks(node, (), marks)
        return loader.construct_document(node), marks
    finally:
        loader.dispose()


def parse_yaml(text: str, source: str | None = None) -> tuple[Any, dict]:
    """Parse YAML text with safe-load semantics, ``1e-4`` floats and no duplicate keys.

    Anchors, aliases and merge keys (``<<: *base``) work as in PyYAML, within bounds: a
    document that holds more than :data:`MAX_YAML_NODES` nodes once its aliases are
    expanded, or nests lists and mappings deeper than :data:`MAX_NESTING`, is refused
    while it is read, at the alias or node that crosses the bound.

    Args:
        text: The YAML document.
        source: File name used in error messages.

    Returns:
        ``(data, marks)``: the plain Python data and a map of path tuples to 1-based
        ``(line, col)``.

    Raises:
        SpecError: On a syntax error (naming where the broken construct began and where
            the parser gave up), a tag other than the standard ones (for example
            ``!!python/object``), a duplicate key, more than one document, an alias
            inside its own anchor, or a document past the bounds above.
    """
    try:
        return _load(text)
    except _YAMLIssue as exc:
        raise SpecError([exc.issue], source) from None
    except yaml.MarkedYAMLError as exc:
        message, mark = _syntax_message(exc)
        line_col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        raise SpecError([SpecIssue("", f"YAML syntax error: {message}", *line_col)], source) from None
    except yaml.YAMLError as exc:  # reader errors (control characters) carry an offset
        line_col = _line_col(text, getattr(exc, "position", None))
        raise SpecError([SpecIssue("", f"YAML syntax error: {_reader_message(exc)}.", *line_col)], source) from None


def _reader_message(exc: yaml.YAMLError) -> str:
    """What PyYAML's reader refused (a character YAML does not allow), without a trailing period."""
    char = getattr(exc, "character", None)
    char = chr(char) if isinstance(char, int) else char
    shown = f" {char!r}" if isinstance(char, str) else ""
    return f"the character{shown} is not allowed in YAML" if getattr(exc, "position", None) is not None else str(exc)


def _line_col(text: str, offset: int | None) -> tuple[int | None, int | None]:
    """1-based line and column of a character offset in ``text``."""
    if offset is None:
        return None, None
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


# --------------------------------------------------------------------------- loading

_PATH_SKIP_TAGS = {"<dist>", "<nested>", "<const>"}


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _issue_from_pydantic(err: Mapping[str, Any], data: Any, marks: dict,
                         origins: Mapping[tuple, str] | None = None) -> SpecIssue:
    """Convert one pydantic error into a SpecIssue with a field path and a position.

    The position is the value's ``line:col`` in the file, or, for a value given by a
    ``--set`` or a command-line option, that option (``origins``: path -> option).
    """
    path: list = []
    node = data
    for part in err["loc"]:
        if isinstance(node, Mapping) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path.append(part)
            node = node[part]
        # else: a union tag or validator name that pydantic puts in the location
    ctx = err.get("ctx") or {}
    etype = err["type"]
    extra = ctx.get("field")
    loc = list(err["loc"])
    # A mapping's key is wrong, not its value (pydantic's location ends "..., key, '[key]'").
    bad_key = "[key]" in loc and loc.index("[key]") > 0 and path[-1:] == [loc[loc.index("[key]") - 1]]
    key_mark = bad_key
    if extra:
        path.extend(extra.split("."))
        key_mark = bool(ctx.get("key"))
    msg = err["msg"]
    value = err.get("input")
    if etype == "missing":
        missing = err["loc"][-1]
        path.append(missing)
        msg = f"required key '{missing}' is missing."
    elif etype in ("union_tag_invalid", "union_tag_not_found"):
        disc = ctx.get("discriminator", "").strip("'")
        tags = [t.strip().strip("'") for t in ctx.get("expected_tags", "").split(",") if t.strip()]
        kind = {"algorithm": "search algorithm", "type": "scheduler type" if path[:1] == ["scheduler"]
                else "distribution type"}.get(disc, disc)
        if etype == "union_tag_not_found":
            path.append(disc)
            tags = tags or list({"algorithm": SEARCH_ALGORITHMS, "type": SCHEDULER_TYPES}.get(disc, ()))
            msg = f"missing '{disc}'; allowed: {_allowed(tags)}."
        else:
            tag = ctx.get("tag")
            path.append(disc)
            hint = _closest(tag, tags)
            guess = f"; did you mean '{hint}'?" if hint else "."
            msg = f"unknown {kind} '{tag}'{guess} Allowed: {_allowed(tags)}."
    elif etype == "literal_error":
        msg = f"must be one of {ctx.get('expected')}, but got {value!r}."
    elif etype.startswith("tuner_"):
        pass
    elif etype == "string_pattern_mismatch" and ctx.get("pattern") == _NON_BLANK:
        msg = f"must not be empty or blank, but got {value!r}."
    elif etype in ("model_type", "model_attributes_type", "dict_type"):
        msg = f"must be a mapping (key: value), but got {type(value).__name__} {value!r}."
    else:
        msg = msg.replace("Input should be", "must be").split(", got ")[0].split(", unable to")[0]
        if not isinstance(value, (Mapping, list)) and not (etype == "model_type"):
            msg += f", but got {value!r} ({type(value).__name__})."
        else:
            msg += f", but got a {type(value).__name__}." if etype.endswith("_type") else "."
        if isinstance(value, bool) and etype in ("int_type", "float_type"):
            msg = msg[:-1] + "; YAML reads yes, no, on, off, true and false as booleans, so write a number."
        elif isinstance(value, str) and etype in ("int_type", "float_type") and _looks_numeric(value):
            msg = msg[:-1] + ("; write the number unquoted (PyYAML's own safe_load also reads 1e-4 as a string: "
                              "give tuner the file, or tuner.spec.parse_yaml's result).")
    if bad_key:
        msg = f"a key {msg}"
    dotted = ".".join(str(p) for p in (path[:-1] if bad_key else path))
    key = tuple(path)
    origin = _origin_of(key, origins or {})
    if origin is not None:
        return SpecIssue(dotted, msg, source=origin)
    pos = marks.get(("<key>",) + key) if key_mark else None
    while pos is None and key:
        pos = marks.get(key)
        key = key[:-1]
    pos = pos or marks.get(())
    return SpecIssue(dotted, msg, *(pos or (None, None)))


def _validate(data: Any, marks: dict, source: str | None, origins: Mapping[tuple, str] | None = None,
              require_trainable: bool = True) -> Spec:
    if data is None:
        raise SpecError([SpecIssue("", "the spec is empty; it must be a mapping with at least `trainable:`.",
                                   *((1, 1) if source else (None, None)))], source)
    if not isinstance(data, Mapping):
        pos = marks.get(()) or (None, None)
        raise SpecError([SpecIssue("", f"the spec must be a mapping (key: value lines), but got a "
                                   f"{type(data).__name__}.", *pos)], source)
    try:
        spec = Spec.model_validate(data, context={"require_trainable": require_trainable})
    except ValidationError as exc:
        issues = [_issue_from_pydantic(e, data, marks, origins) for e in exc.errors()]
        issues.sort(key=lambda i: (i.source is not None, i.line or 0, i.col or 0))
        raise SpecError(issues, source) from None
    spec._source = source
    spec._marks = {k: v for k, v in marks.items() if k[:1] != ("<key>",)}
    spec._origins = dict(origins or {})
    return spec


@dataclass(frozen=True)
class Override:
    """One spec value given outside the spec file: a ``--set KEY=VALUE`` or a command-line option.

    Attributes:
        path: The field path, split at its dots: ``("scheduler", "max_t")``.
        value: The value (a ``--set`` VALUE read as YAML).
        origin: What error messages name as the value's source, e.g.
            ``--set scheduler.max_t=5`` or ``--num-samples 4``.
    """

    path: tuple[str, ...]
    value: Any
    origin: str


def parse_set(item: str) -> Override:
    """Read one ``--set KEY=VALUE``: KEY a dotted field path, VALUE read as YAML.

    Args:
        item: The ``KEY=VALUE`` text, e.g. ``scheduler.max_t=5`` or
            ``param_space.lr={type: loguniform, low: 1e-4, high: 1e-2}``; an empty VALUE
            is the empty string.

    Returns:
        The :class:`Override`, whose origin is ``--set KEY=VALUE``.

    Raises:
        SpecError: Naming the ``--set`` item, for one without ``=``, a KEY with an empty
            part, or a VALUE that is not valid YAML (or past :func:`parse_yaml`'s bounds).
    """
    key, sep, raw = item.partition("=")
    parts = tuple(key.strip().split("."))
    if parts == ("storage",):  # a URI's query and user info (endpoints, keys) stay out of messages
        from tuner.storage import display

        origin = f"--set {key}={display(raw.strip())}"
    else:
        origin = f"--set {item}"
    usage = "--set takes KEY=VALUE with a dotted KEY such as scheduler.max_t=5"
    if not sep:
        raise SpecError([SpecIssue("", f"{usage}, but this one has no '='.")], origin)
    if not all(parts):
        raise SpecError([SpecIssue("", f"{usage}, but its KEY {key!r} has an empty part.")], origin)
    try:
        data, _ = _load(f"v: {raw}" if raw.strip() else "v: ''")
    except _YAMLIssue as exc:
        problem = exc.issue.message
    except yaml.MarkedYAMLError as exc:
        for mark in {id(m): m for m in (exc.context_mark, exc.problem_mark) if m is not None}.values():
            if mark.line == 0:
                mark.column -= len("v: ")  # positions within the VALUE
        problem = "YAML syntax error: " + _syntax_message(exc, here=False)[0]
    except yaml.YAMLError as exc:
        problem = f"YAML syntax error: {_reader_message(exc)}."
    else:
        if isinstance(data, dict) and list(data) == ["v"]:
            return Override(parts, data["v"], origin)
        problem = "it holds more than one value; quote it, or give a flow mapping {key: value, ...}."
    raise SpecError([SpecIssue(".".join(parts), f"the value cannot be read as YAML: {problem}")], origin)


def _section_models(annotation: Any) -> list[type[BaseModel]]:
    """The spec sections a field's annotation takes; ``[]`` for a free-form mapping or a plain value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) in (dict, list):
        return []
    return [model for arg in get_args(annotation) for model in _section_models(arg)]


def _override_path_issue(data: Mapping, parts: tuple) -> SpecIssue | None:
    """Why ``parts`` is no path to set in ``data``, or None.

    A path may end in a new key, and may pass through a spec section or field that the
    spec leaves out (``scheduler.max_t`` on a spec without ``scheduler:``), but may not
    create a mapping on the way under a mapping the spec gives: ``param_space.lrr.low``
    on a spec with ``param_space.lr`` is a typo, not a new group.
    """
    node: Any = data
    models: list[type[BaseModel]] = [Spec]
    given = True  # whether node is a mapping of the spec (rather than one the path creates)
    for i, part in enumerate(parts[:-1]):
        here = ".".join(parts[: i + 1])
        known = {name for model in models for name in model.model_fields}
        child = node.get(part) if isinstance(node, Mapping) else None
        if child is not None and not isinstance(child, Mapping):
            return SpecIssue(here, f"{here} is {child!r} ({type(child).__name__}), not a mapping, so it has no key "
                             f"'{parts[i + 1]}'; set {here} itself instead (--set {here}={{...}}).")
        if given and part not in known and not (isinstance(node, Mapping) and part in node):
            where = ".".join(parts[:i]) or "the spec"
            keys = sorted({str(k) for k in node} | known)
            hint = _closest(part, keys)
            guess = f"; did you mean '{hint}'?" if hint else "."
            return SpecIssue(here, f"{where} has no key '{part}'{guess} A --set path may end in a new key, but not "
                             f"create a mapping on the way; the keys in {where}: {_allowed(keys) or '(none)'}.")
        models = [sub for model in models if part in model.model_fields
                  for sub in _section_models(model.model_fields[part].annotation)]
        node, given = child, isinstance(child, Mapping)
    return None


def _apply_override(data: Mapping, override: Override, marks: dict, origins: dict) -> dict:
    """``data`` with ``override`` set (a mapping value is merged into a mapping there).

    ``marks`` lose the positions below its path, and ``origins`` gain the path (and the
    mappings it creates on the way), so that an error in what it set, or in a mapping it
    merged into, names the option instead of a line of the file.

    Raises:
        SpecError: If the path cannot be set (see :func:`_override_path_issue`).
    """
    parts, origin = override.path, override.origin
    issue = _override_path_issue(data, parts)
    if issue is not None:
        raise SpecError([issue], origin)
    out = dict(data)
    node = out
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if isinstance(child, Mapping):
            child = dict(child)
        else:  # absent or null: the path creates it
            child = {}
            _record_origin(parts[: i + 1], origin, marks, origins)
        node[part] = child
        node = child
    old = node.get(parts[-1])
    merge = isinstance(override.value, Mapping) and isinstance(old, Mapping)
    node[parts[-1]] = _deep_merge(old, override.value) if merge else override.value
    _record_origin(parts, origin, marks, origins)
    return out


def _record_origin(path: tuple, origin: str, marks: dict, origins: dict) -> None:
    """The value at ``path`` (and all below it) now comes from ``origin``, not the file."""
    n = len(path)
    for table in (marks, origins):
        for key in [k for k in table if k[:n] == path or (k[:1] == ("<key>",) and k[1:n + 1] == path)]:
            del table[key]
    origins[path] = origin


def _deep_merge(base: Mapping, extra: Mapping) -> dict:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load_spec(spec: str | os.PathLike | Mapping | Spec, *, sets: Iterable[Override] = (),
              require_trainable: bool = True, **overrides: Any) -> Spec:
    """Load and validate a spec from a YAML file, a mapping or a Spec.

    Args:
        spec: Path of a YAML file, a mapping with the same keys, or a Spec.
        sets: Values set by dotted path, in order (``--set`` items from
            :func:`parse_set`, and command-line options); an error in one names it
            instead of a line of the file.
        require_trainable: Whether the spec must name its ``trainable``; False when the
            caller passes the trainable itself (``tune_model(spec, trainable=fn)``).
        **overrides: Top-level keys that replace the spec's (mappings are merged
            key by key), e.g. ``num_samples=4`` or ``scheduler={"max_t": 2}``.
            ``None`` values are ignored.

    Returns:
        The validated, frozen Spec.

    Raises:
        SpecError: For a missing or unreadable file, invalid YAML, a ``sets`` path that
            goes through a key the spec does not have, or any field that fails
            validation. Nothing has been started or written.
    """
    overrides = {k: v for k, v in overrides.items() if v is not None}
    sets = tuple(sets)
    source: str | None = None
    marks: dict = {}
    origins: dict = {}
    if isinstance(spec, Spec):
        if not overrides and not sets:
            return spec
        require_trainable = False  # validated already, with or without one
        data: Any = spec.model_dump(exclude_unset=True)
        source, marks, origins = spec._source, dict(spec._marks), dict(spec._origins)
    elif isinstance(spec, Mapping):
        data = dict(spec)
    else:
        source = os.fspath(spec)
        path = Path(source)
        if not path.is_file():
            why = "is a folder, not a file" if path.is_dir() else "not found"
            raise SpecError([SpecIssue("", f"spec file {why}; give the path of a YAML spec, "
                                       "e.g. search_spaces/mnist_asha.yaml.")], source)
        size = path.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise SpecError([SpecIssue("", f"the file holds {size:,} bytes; a spec may hold at most "
                                       f"{MAX_SPEC_BYTES:,} (it is a short YAML text file).")], source)
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            head = raw[: exc.start].decode("utf-8", "replace")
            raise SpecError([SpecIssue("", f"the file is not UTF-8 text (byte 0x{raw[exc.start]:02x}); "
                                       "a spec is a YAML text file.", *_line_col(head, len(head)))], source) from None
        if "\x00" in text:
            raise SpecError([SpecIssue("", "the file holds NUL bytes (binary data); a spec is a YAML text file.",
                                       *_line_col(text, text.index("\x00")))], source)
        data, marks = parse_yaml(text, source)
    if isinstance(data, Mapping):
        for override in sets:
            data = _apply_override(data, override, marks, origins)
        if overrides:
            data = _deep_merge(data, overrides)
    _check_nesting(data, source, origins)
    return _validate(data, marks, source, origins, require_trainable)


def _check_nesting(data: Any, source: str | None, origins: Mapping[tuple, str]) -> None:
    """Refuse data that nests lists and mappings deeper than :data:`MAX_NESTING`.

    YAML is bounded as it is read (:func:`parse_yaml`); this bounds a spec given as a
    mapping, and ``**overrides``, alike (a mapping that holds itself nests forever).
    Shared values are walked once per depth, not once per reference.

    Raises:
        SpecError: At the first list or mapping past the bound (naming the ``--set``
            that put it there, if one did).
    """
    deepest: dict[int, int] = {}
    stack: list[tuple[Any, int, tuple]] = [(data, 1, ())]
    while stack:
        value, depth, path = stack.pop()
        if not isinstance(value, (Mapping, list, tuple)) or deepest.get(id(value), 0) >= depth:
            continue
        if depth > MAX_NESTING:
            raise SpecError([SpecIssue(_dotted(path), f"the spec would {_TOO_DEEP}",
                                       source=_origin_of(path, origins))], source)
        deepest[id(value)] = depth
        items = value.items() if isinstance(value, Mapping) else enumerate(value)
        stack.extend((sub, depth + 1, path + (key,)) for key, sub in items)


# --------------------------------------------------------------------------- trainable


def is_class_trainable(obj: Any) -> TypeGuard[type]:
    """Whether ``obj`` is a class trainable: a subclass of ``ray.tune.Trainable``.

    Looks at the class's bases by name, so Ray is not imported for the answer.
    """
    return inspect.isclass(obj) and any(
        base.__name__ == "Trainable" and base.__module__.startswith("ray.tune") for base in obj.__mro__)


def trainable_dirs(spec: Spec) -> list[str]:
    """The folders ``spec.trainable`` is looked up in, in order; trial workers get them on ``sys.path``.

    The current folder; then, for a spec file, its folder and the nearest folder above it
    that holds the trainable's top-level package or file (so that
    ``search_spaces/mnist_asha.yaml`` with ``trainable: examples.mnist:train`` finds the
    ``examples`` package beside ``search_spaces/`` from any working directory).
    """
    dirs = [os.getcwd()]
    if spec.source:
        here = Path(spec.source).resolve().parent
        dirs.append(str(here))
        target = (spec.trainable or "").rpartition(":")[0]
        if target:
            first = target if target.endswith(".py") else target.split(".")[0]
            for folder in (here, *here.parents):
                if (folder / first).exists() if target.endswith(".py") else \
                        ((folder / first).is_dir() or (folder / f"{first}.py").is_file()):
                    dirs.append(str(folder))
                    break
    return list(dict.fromkeys(dirs))


def user_packages(trainable: Any) -> dict[str, str]:
    """The top-level packages (or modules) of ``trainable`` that are not installed, and the
    folder each was imported from here.

    Workers unpickle a function or class by its module's name, so such a package must reach
    them: through ``sys.path`` (:func:`import_roots`, when tuner starts Ray) or pickled by
    value (when the user's Ray already runs). A wrapper such as ``tune.with_parameters`` is
    looked through: the functions and classes it closes over count too. ``__main__`` and
    file-path trainables are left out: Ray and tuner pickle those by value already.

    Returns:
        ``{"mypkg": "/home/me/project"}``, possibly empty.
    """
    import sysconfig

    paths = sysconfig.get_paths()
    installed = {os.path.realpath(paths[k]) for k in ("purelib", "platlib") if paths.get(k)}
    objects = [trainable, *(c.cell_contents for c in (getattr(trainable, "__closure__", None) or ())
                            if callable(getattr(c, "cell_contents", None)))]
    found: dict[str, str] = {}
    for obj in objects:
        name = getattr(obj, "__module__", None) or ""
        file = getattr(sys.modules.get(name), "__file__", None)
        if not file or name == "__main__" or name.startswith("tuner_user_"):
            continue
        root = Path(file).resolve().parent
        for _ in range(name.count(".") + (Path(file).name == "__init__.py")):
            root = root.parent
        if not any(str(root).startswith(prefix) for prefix in installed):
            found.setdefault(name.split(".")[0], str(root))
    return found


def import_roots(trainable: Any) -> list[str]:
    """Folders that trial workers need on ``sys.path`` to import ``trainable`` by module name
    (see :func:`user_packages`)."""
    return list(dict.fromkeys(user_packages(trainable).values()))


def resolve_trainable(spec: Spec) -> Callable[[dict], Any] | type:
    """Import the train function or class trainable named by ``spec.trainable``.

    ``pkg.module:name`` is imported as a module, with :func:`trainable_dirs` on
    ``sys.path`` (after what is there already). ``path/to/file.py:name`` is loaded from the
    file, looked up in the same folders.

    Args:
        spec: The validated spec, with a ``trainable``.

    Returns:
        The train function (a callable taking one argument, ``config``), or a class
        trainable (a ``ray.tune.Trainable`` subclass).

    Raises:
        SpecError: If the module or file cannot be found or imported, the name is not
            there, or it is neither a function of one argument nor a ``Trainable`` subclass.
    """
    target, _, func_name = spec.trainable.rpartition(":")
    dirs = trainable_dirs(spec)
    where = _allowed(dirs[:2]) + (" and the folders above it" if len(dirs) > 1 else "")
    try:
        if target.endswith(".py"):
            file = next((Path(d, target) for d in dirs if Path(d, target).is_file()), None)
            if file is None:
                raise spec.error("trainable", f"file '{target}' not found (looked in {where}).")
            module = _import_file(file.resolve())
        else:
            for d in reversed(dirs):
                if d not in sys.path:
                    sys.path.insert(0, d)
            try:
                module = importlib.import_module(target)
            except ModuleNotFoundError as exc:
                if exc.name and target.startswith(exc.name):
                    raise spec.error("trainable", f"module '{exc.name}' not found (looked on sys.path, including "
                                     f"{where}).") from None
                raise
    except SpecError:
        raise
    except Exception as exc:  # any error in user code at import time
        raise spec.error("trainable", f"importing '{target}' failed: {type(exc).__name__}: {exc}") from exc
    func = getattr(module, func_name, None)
    if func is None:
        names = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                 and getattr(v, "__module__", None) == module.__name__]
        hint = _closest(func_name, names)
        guess = f"; did you mean '{hint}'?" if hint else ""
        raise spec.error("trainable", f"'{target}' has no function '{func_name}'{guess}"
                         + (f" Functions there: {_allowed(sorted(names))}." if names else ""))
    if is_class_trainable(func):
        return func
    if inspect.isclass(func) or not callable(func):
        raise spec.error("trainable", f"'{spec.trainable}' is a {_kind(func)}, not a function of config or a "
                         "ray.tune.Trainable subclass.")
    try:
        params = [p for p in inspect.signature(func).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
        varargs = any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        params, varargs = [None], False
    if len(params) != 1 and not (varargs and not params):
        raise spec.error("trainable", f"'{spec.trainable}' must take one argument, config, but it takes "
                         f"{len(params)} required arguments.")
    return func


def _kind(obj: Any) -> str:
    return f"class ({obj.__name__}, not a ray.tune.Trainable subclass)" if inspect.isclass(obj) \
        else type(obj).__name__


def trainable_reference(obj: Any) -> str | None:
    """``"module:name"`` that imports ``obj`` again, or None (a lambda, a local or ``__main__`` object,
    a ``tune.with_parameters`` wrapper...). A spec records it for ``tuner resume``."""
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not module or module == "__main__" or not name or "." in name or "<" in name:
        return None
    try:
        found = getattr(importlib.import_module(module), name, None)
    except Exception:  # noqa: BLE001 - not importable by name
        return None
    ref = f"{module}:{name}"
    return ref if found is obj and _TRAINABLE.match(ref) else None


def check_trainable(spec: Spec, trainable: Any) -> None:
    """Refuse the spec features a class trainable cannot honour, before anything starts.

    A class trainable (``ray.tune.Trainable``) runs as one process and is checkpointed by
    Ray through its own ``save_checkpoint``, so:

    * ``resources.workers`` (DDP) needs a train function: tuner launches its worker group;
    * ``oom_backoff`` needs a train function: tuner restarts it with a smaller batch;
    * ``hyperband``/``bohb`` pause trials and resume them from a checkpoint, so the class
      must implement ``save_checkpoint`` and ``load_checkpoint``.

    Raises:
        SpecError: Naming the field and why.
    """
    if not is_class_trainable(trainable):
        return
    name = trainable.__name__
    if spec.resources.distributed:
        raise spec.error("resources.workers", f"resources.workers makes each trial a DDP group of train-function "
                         f"processes, but {name} is a class trainable (ray.tune.Trainable), which runs as one "
                         "process; use a train function (see tuner.trial) or drop resources.workers.")
    if spec.oom_backoff:
        raise spec.error("oom_backoff", f"oom_backoff restarts a train function with a smaller batch, but {name} is "
                         "a class trainable (ray.tune.Trainable); catch torch.cuda.OutOfMemoryError in its step, or "
                         "drop oom_backoff.")
    if spec.scheduler.type in SYNCHRONOUS_HYPERBAND:
        missing = [m for m in ("save_checkpoint", "load_checkpoint") if not implements(trainable, m)]
        if missing:
            raise spec.error("scheduler.type", f"scheduler {spec.scheduler.type} pauses trials and resumes them from "
                             f"a checkpoint, but {name} does not implement {' and '.join(missing)}; implement "
                             "them, or use scheduler asha, which never pauses.")


def implements(cls: type, method: str) -> bool:
    """Whether a class trainable implements ``method`` (``save_checkpoint``, ``reset_config``, ...)
    itself or in a base below ``ray.tune.Trainable``, whose versions do nothing or raise."""
    for base in cls.__mro__:
        if method in vars(base):
            return not (base.__name__ == "Trainable" and base.__module__.startswith("ray.tune"))
    return False


def _import_file(file: Path):
    name = "tuner_user_" + re.sub(r"\W", "_", file.stem)
    module_spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- optional extras

_EXTRAS = {"wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow")}  # spec key -> (module, extra)


def check_extras(spec: Spec) -> None:
    """Check that the packages of the integrations the spec enables are installed.

    ``reporting.wandb`` needs ``wandb`` (``pip install tuner[wandb]``), ``reporting.mlflow``
    needs ``mlflow`` (``pip install tuner[mlflow]``). Nothing is imported: a missing
    package is found before Ray starts.

    Args:
        spec: The validated spec.

    Raises:
        SpecError: Naming the first missing package and the command that installs it.
    """
    for key, (module, extra) in _EXTRAS.items():
        if getattr(spec.reporting, key) is None:
            continue
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken or blocked package
            found = False
        if not found:
            raise spec.error(f"reporting.{key}", f"reporting.{key} needs the {module} package, which is not "
                             f"installed; install it with `pip install tuner[{extra}]` (or `pip install -e "
                             f"\".[{extra}]\"` in a checkout), or remove reporting.{key} from the spec.")
