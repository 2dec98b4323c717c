"""The :class:`Spec` itself: its top-level fields, and the cross-field rules that no single section
can check (searcher/scheduler pairs, a metric for what compares trials, rung bounds, the
distributions a searcher cannot sample, the ``oom_backoff`` parameter), with :func:`stop_operator`.
Validation is pydantic v2: the distributions and sections validate themselves when they are
built, and the :class:`Spec` checks what spans them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal
from collections.abc import Iterable, Mapping

from pydantic import Discriminator, Field, PrivateAttr, Tag, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from tuner.core.params import flatten, spec_paths
from tuner.spec.command import CommandTrainable
from tuner.spec.conditions import Space, expand
from tuner.spec.distributions import (_DIST_KEYS, DISTRIBUTION_TYPES, PARAM_NAME, ParamValue, SubspaceChoice,
                                      BaseDistribution)
from tuner.spec.errors import SpecError, SpecIssue, _allowed, _closest, _fail
from tuner.spec.fields import Float, Int, NonBlank, _Model
from tuner.spec.sections import (POPULATION_SCHEDULERS, SYNCHRONOUS_HYPERBAND, BestTrial, Checkpointing, Constraint,
                                 Failure, FIFOScheduler, Objective, RandomSearch, RayConfig, Reporting, Resources,
                                 SchedulerConfig, SearchConfig)


_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def _trainable_kind(value: Any) -> str:
    """``trainable``'s form: a mapping (or a CommandTrainable) is a command trial, anything else a reference."""
    return "<command>" if isinstance(value, (Mapping, CommandTrainable)) else "<ref>"


_TRAINABLE = re.compile(r"^(?:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*|[^:]+\.py):[A-Za-z_]\w*$")
_NEEDS_METRIC = {"asha", "hyperband", "bohb", "median", "pbt", "pb2"}
#: checkpoint.num_to_keep under PBT/PB2 when the spec does not set it: Ray warns at <= 2 (a checkpoint can be
#: deleted before a trial of the bottom quantile restores from it).
POPULATION_NUM_TO_KEEP = 4


class Spec(_Model):
    """A validated, frozen tuning spec. Build it with :func:`load_spec`.

    The spec reference (``docs/reference/spec.md``) lists every field. Validation refuses wrong
    searcher/scheduler pairs, grid values under model-based searchers, schedulers
    without a metric, and rungs that cannot exist.

    Attributes:
        name: The experiment's name and folder under ``storage``: letters, digits, ``.``,
            ``_`` and ``-`` only.
        trainable: ``package.module:function`` or ``path/to/file.py:function``: a train
            function of ``config``, or a ``ray.tune.Trainable`` class; or ``{command: [...]}``, a
            program run as a process per trial (:class:`~tuner.spec.command.CommandTrainable`).
        metric: A key the train function reports; a list of two or more for several objectives.
        mode: ``min`` or ``max``; a list of as many modes as metrics.
        objectives: Several objectives as ``[{metric, mode}, ...]`` (instead of metric and mode lists).
        constraints: Bounds on reported metrics (``{metric, min, max}``); only feasible trials count.
        num_samples: Trials to sample; under grid search, repeats of each grid point.
        max_concurrent_trials: Trials running at once (default: as many as fit).
        time_budget_s: Seconds for the whole experiment.
        stop: Reported key -> threshold that ends a trial (``training_iteration``, ``time_total_s``, ...).
        seed: Seed of the searcher (the same seed samples the same configs), and of each trial's own
            seed (``trial.seed()``).
        seed_trials: Seed ``random``, numpy and torch in each trial with its own seed (plus the rank in
            a DDP trial) before the train function runs; needs ``seed``.
        param_space: Parameter names -> a distribution (a mapping with ``type``), a constant or a group.
        search: The searcher: ``algorithm`` grid, random, bohb or optuna, and its options.
        scheduler: The scheduler that stops or perturbs trials: ``type`` fifo, asha, hyperband, bohb,
            median, pbt or pb2, and its options.
        resources: CPUs and GPUs per trial, or ``workers`` for a DDP trial.
        reporting: The console table (``cli``), TensorBoard, W&B and MLflow.
        storage: The folder (or cloud URI) the experiment folder goes in.
        ray: ``address`` of a running Ray cluster; none starts a local Ray.
        failure: Retries of a failing trial, and when to stop the experiment on errors.
        checkpoint: How often trial checkpoints are kept, and how many.
            By ``score`` (default: the metric), a trial's best ``num_to_keep`` and its newest are kept.
        best: How a trial is scored to pick the best: ``scope`` last, all, last-5-avg or last-10-avg.
        trial_timeout_s: Seconds after which a trial is ended, hung or not.
        amp: Mixed precision through ``trial.autocast()`` and ``trial.scaler()``.
        oom_backoff: The parameter (dotted for a nested one) halved on CUDA out-of-memory.
        min_batch_size: The smallest value ``oom_backoff`` halves to.
    """

    name: str = "experiment"
    # required unless tune_model(trainable=...) passes one; a mapping is a command trial (its errors only)
    trainable: Annotated[Annotated[str, Tag("<ref>")] | Annotated[CommandTrainable, Tag("<command>")],
                         Discriminator(_trainable_kind)] | None = None
    metric: NonBlank | None = None
    mode: Literal["min", "max"] | None = None
    objectives: list[Objective] | None = None
    constraints: list[Constraint] | None = None
    num_samples: Int = Field(default=1, ge=1)
    max_concurrent_trials: Int | None = Field(default=None, ge=1)
    time_budget_s: Float | None = Field(default=None, gt=0)
    stop: dict[NonBlank, Float] | None = None
    seed: Int | None = None
    seed_trials: bool = False
    param_space: dict[str, ParamValue] = Field(default_factory=dict)
    search: SearchConfig = Field(default_factory=lambda: RandomSearch(algorithm="random"))
    scheduler: SchedulerConfig = Field(default_factory=lambda: FIFOScheduler(type="fifo"))
    resources: Resources = Field(default_factory=Resources)
    reporting: Reporting = Field(default_factory=Reporting)
    storage: NonBlank = "runs"
    ray: RayConfig = Field(default_factory=RayConfig)
    failure: Failure = Field(default_factory=Failure)
    checkpoint: Checkpointing = Field(default_factory=Checkpointing)
    best: BestTrial = Field(default_factory=BestTrial)
    trial_timeout_s: Float | None = Field(default=None, gt=0)
    amp: bool = False
    oom_backoff: NonBlank | None = None
    min_batch_size: Int = Field(default=1, ge=1)

    _source: str | None = PrivateAttr(default=None)
    _marks: dict = PrivateAttr(default_factory=dict)
    _origins: dict = PrivateAttr(default_factory=dict)
    _space: Space | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _objective_lists(cls, data: Any) -> Any:
        """``metric: [a, b]`` with ``mode: [max, min]`` is ``objectives: [{metric: a, mode: max}, ...]``.

        The lists are checked here, where their positions in the file are still known: the same
        length, two or more, each metric a name given once, each mode ``min`` or ``max``.
        """
        if not isinstance(data, Mapping):
            return data
        metric, mode = data.get("metric"), data.get("mode")
        if not isinstance(metric, list) and not isinstance(mode, list):
            return data
        if "objectives" in data:
            raise _fail("objectives", "give the objectives once: either as `metric:` and `mode:` lists or as "
                        "`objectives:`, not both.")
        if not isinstance(metric, list):
            raise _fail("metric", f"mode is a list of {len(mode)} modes, one per objective, so metric must be a list "
                        f"of as many metrics, e.g. metric: [val_accuracy, params_count], but got {metric!r}.")
        if not isinstance(mode, list):
            example = ", ".join("max" if i == 0 else "min" for i in range(max(len(metric), 2)))
            got = "no mode" if mode is None else repr(mode)
            raise _fail("mode" if mode is not None else "metric", f"metric lists {len(metric)} objectives, so mode "
                        f"must be a list of as many modes (min or max, in the same order), e.g. mode: [{example}], "
                        f"but got {got}.")
        if len(metric) < 2:
            raise _fail("metric", f"a metric list holds two or more objectives, but got {metric!r}; for one "
                        "objective write `metric: NAME` and `mode: min|max`.")
        if len(mode) != len(metric):
            modes = f"{len(mode)} mode{'s' if len(mode) != 1 else ''}"
            raise _fail("mode", f"metric lists {len(metric)} objectives ({', '.join(map(str, metric))}) but mode "
                        f"lists {modes}; give one mode (min or max) per metric, in the same order.")
        for i, (m, d) in enumerate(zip(metric, mode)):
            if not isinstance(m, str) or not m.strip():
                raise _fail(f"metric.{i}", f"each metric must be the name of a reported metric, but got {m!r}.")
            if d not in ("min", "max"):
                raise _fail(f"mode.{i}", f"each mode must be 'min' or 'max', but got {d!r}.")
            if m in metric[:i]:
                raise _fail(f"metric.{i}", f"metric {m!r} is listed twice; each objective is a different metric.")
        rest = {k: v for k, v in data.items() if k not in ("metric", "mode")}
        return {**rest, "objectives": [{"metric": m, "mode": d} for m, d in zip(metric, mode)]}

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
        stype = scheduler.get("type") if isinstance(scheduler, Mapping) else getattr(scheduler, "type", None)
        checkpoint = data.get("checkpoint")
        if stype in POPULATION_SCHEDULERS and (checkpoint is None or (
                isinstance(checkpoint, Mapping) and "num_to_keep" not in checkpoint)):
            data = {**data, "checkpoint": {**(checkpoint or {}), "num_to_keep": POPULATION_NUM_TO_KEEP}}
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

        from tuner.experiment.storage import REMOTE_SCHEMES, scheme_of

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
        """Whether ``storage`` is a cloud URI (``s3://``, ``gs://``, ...; see :mod:`tuner.experiment.storage`)."""
        from tuner.experiment.storage import is_remote

        return is_remote(self.storage)

    @property
    def storage_dir(self) -> Path:
        """``storage`` as an absolute local folder (a ``file://`` URI becomes its path).

        For a cloud URI: the local mirror's parent (:func:`tuner.experiment.storage.mirror_dir`).
        """
        value = self.storage
        if self.remote_storage:
            from tuner.experiment.storage import mirror_dir

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

    @field_validator("trainable", mode="before")
    @classmethod
    def _trainable_form(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, (str, Mapping, CommandTrainable)):
            raise PydanticCustomError("tuner_spec", f"trainable is 'package.module:function', "
                                      f"'path/to/file.py:function' or a command trial's mapping "
                                      f"{{command: [python, train.py, ...]}}, but got {value!r}.")
        return value

    @field_validator("trainable")
    @classmethod
    def _trainable(cls, value: str | CommandTrainable | None) -> str | CommandTrainable | None:
        if isinstance(value, str) and not _TRAINABLE.match(value):
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
                if not PARAM_NAME.match(key):
                    raise _fail(
                        prefix + key,
                        f"parameter names must start with a letter or '_' and hold only letters, digits, "
                        f"'_', '.' and '-', but got {key!r}.",
                    )
                if key == "when" and isinstance(sub, dict):
                    raise _fail(prefix + key, "`when` goes on a parameter (a mapping with `type`) to say when it "
                                "exists; a group of parameters cannot have one: put `when` on each of them, or make "
                                "the group a branch of a choice among sub-spaces.")
                if isinstance(sub, dict):
                    looks = set(sub) <= _DIST_KEYS and ({"low", "high"} <= set(sub) or "values" in sub)
                    if looks:
                        raise _fail(prefix + key, f"parameter {key!r} looks like a distribution but has no `type`; "
                                    f"add one of: {_allowed(DISTRIBUTION_TYPES)}.")
                    walk(sub, prefix + key + ".")
                elif isinstance(sub, SubspaceChoice):  # each branch is a space of its own
                    for i, branch in enumerate(sub.values):
                        walk({k: v for k, v in branch.items() if k != "name"}, f"{prefix}{key}.values.{i}.")

        walk(value, "")
        return value

    @model_validator(mode="after")
    def _cross_checks(self):
        algo, sched = self.search.algorithm, self.scheduler.type
        self._check_objectives()
        if self.metric is not None and self.mode is None:
            raise _fail("metric", f"metric {self.metric!r} needs a mode: add `mode: min` or `mode: max`.")
        if self.mode is not None and self.metric is None:
            raise _fail("mode", "mode needs a metric: add `metric: NAME`, a key your train function reports.")
        if self.seed_trials and self.seed is None:
            raise _fail("seed_trials", "seeding each trial's random, numpy and torch needs the experiment's "
                        "`seed`, from which each trial's seed is derived, but the spec sets none; add `seed: N` (an "
                        "integer), or drop seed_trials (default false).")
        if sched in POPULATION_SCHEDULERS and algo not in ("random", "grid"):
            self._check_population()  # the population's searcher first: its message says why
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
        if self.metric is None and getattr(self.search, "warm_start", None):
            raise _fail("search.warm_start", "warm_start feeds earlier trials to the searcher by their metric (random "
                        "search re-runs the best of them), but the spec sets none; add `metric:` and `mode:`.")
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
        for param in self.space.params:
            _check_param_for_search(param.path, param.dist, algo)
        self._check_conditions()
        if algo == "bohb":
            self._check_bohb_points()
        if sched in POPULATION_SCHEDULERS:
            self._check_population()
        self._check_checkpoint_score()
        if self.command is not None:
            self._check_command(self.command)
        if self.oom_backoff is not None:
            names = self._parameter_names()
            if self.oom_backoff not in names:
                hint = _closest(self.oom_backoff, names)
                guess = f"; did you mean '{hint}'?" if hint else "."
                raise _fail("oom_backoff", f"oom_backoff names {self.oom_backoff!r}, which is not a parameter in "
                            f"param_space{guess} Parameters: {_allowed(names) or '(none)'}.")
        return self

    def _parameter_names(self) -> list[str]:
        """Every parameter's name, dotted for a nested one (as ``oom_backoff`` and a placeholder name one)."""
        return [p.dotted for p in self.space.params if p.dist is not None] + \
            [p for p, v in spec_paths(self.param_space, root=None) if not isinstance(v, BaseDistribution)]

    def _check_command(self, command: CommandTrainable) -> None:
        """A command trial's placeholders name parameters, and ``oom_backoff`` (a function's) is not set."""
        names = self._parameter_names()
        for i, name in command.placeholder_names():
            if name not in names:
                hint = _closest(name, names)
                guess = f"; did you mean '{{{hint}}}'?" if hint else "."
                raise _fail(f"trainable.command.{i}", f"placeholder {{{name}}} names no parameter of param_space"
                            f"{guess} Parameters: {_allowed(names) or '(none)'}; tuner's own: "
                            "{tuner.trial_dir}, {tuner.checkpoint_dir}, {tuner.restore_dir}, {tuner.config_file}, "
                            "{tuner.trial_id}, {tuner.metrics_file}.")
        if self.oom_backoff is not None:
            raise _fail("oom_backoff", "oom_backoff halves a parameter when a train function raises CUDA's "
                        "out-of-memory error, which tuner cannot see in a command trial's process; catch "
                        "torch.cuda.OutOfMemoryError in the script, or drop oom_backoff.")
        if self.amp:
            raise _fail("amp", "amp turns on mixed precision through tuner.trial.autocast() in a train function; "
                        "a command trial's script sets up its own (torch.autocast), so drop amp.")
        if self.resources.auto_gpu:
            raise _fail("resources.gpu", "gpu: auto learns each config's GPU memory from the train function's own "
                        "process, and a command trial's program is another process; give the trial a GPU share "
                        "instead (gpu: 1, or a fraction such as 0.5 to pack two trials on a GPU).")
        if self.resources.distributed and not command.runs_python:
            raise _fail("trainable.command.0", f"resources.workers runs the command under torchrun, which starts "
                        f"a Python script, but the command starts with {command.command[0]!r}; write it as "
                        "[python, SCRIPT, ...] or [python, -m, MODULE, ...], or drop resources.workers.")
        if self.resources.distributed and self.resources.placement_strategy != "PACK":
            raise _fail("resources.placement_strategy", "a command trial's workers are torchrun's processes on "
                        "one node, so placement_strategy does not apply; drop it.")
        if self.resources.distributed and len(command.command) < 2:
            raise _fail("trainable.command", "resources.workers runs `python SCRIPT ...` under torchrun, but the "
                        "command names no script.")

    @property
    def command(self) -> CommandTrainable | None:
        """The command trial's section, or None when ``trainable`` is a function or a class."""
        return self.trainable if isinstance(self.trainable, CommandTrainable) else None

    @property
    def ray_train_ddp(self) -> bool:
        """Whether a trial is a DDP group that Ray Train launches: ``resources.workers`` with a train
        function. A command trial's workers are ``torchrun``'s processes in the trial's own."""
        return self.resources.distributed and self.command is None

    @property
    def trainable_ref(self) -> str | None:
        """``trainable`` when it is ``module:function`` (or ``file.py:function``); None for a command or none."""
        return self.trainable if isinstance(self.trainable, str) else None

    def _check_checkpoint_score(self) -> None:
        """``checkpoint.score``: a metric other than the objectives needs ``score_mode``; ``best.scope``
        other than ``last`` needs one objective."""
        ck = self.checkpoint
        names = [o.metric for o in self.objectives or []]
        if ck.score is not None and ck.score not in names and ck.score_mode is None:
            spec_metric = ("the spec's metric (none is set)" if not names else f"the spec's metric ({names[0]})"
                           if len(names) == 1 else f"an objective ({_allowed(names)})")
            raise _fail("checkpoint.score", f"checkpoint.score {ck.score!r} is not {spec_metric}, so tuner cannot "
                        f"know whether lower or higher is better; add `checkpoint.score_mode: min` or "
                        f"`checkpoint.score_mode: max`.")
        if ck.score_mode is not None and ck.score is None:
            raise _fail("checkpoint.score_mode", "checkpoint.score_mode goes with checkpoint.score (without it the "
                        "checkpoints are ranked by the spec's metric, with its mode); add `checkpoint.score: NAME`, "
                        "a key your train function reports, or drop score_mode.")
        scope = self.best.scope
        if scope != "last" and self.metric is None:
            raise _fail("best.scope", f"best.scope {scope!r} scores trials by a metric, but the spec sets none; "
                        "add `metric:` and `mode:`.")
        if scope != "last" and self.multi_objective:
            raise _fail("best.scope", f"best.scope {scope!r} applies to one objective, but the spec has "
                        f"{len(names)} (the Pareto front compares each trial's last values); use best.scope last, "
                        "or one metric.")

    @property
    def checkpoint_score(self) -> tuple[str, str] | None:
        """``(metric, mode)`` that ranks a trial's checkpoints (:class:`Checkpointing`): ``checkpoint.score``
        with its mode, else the spec's metric (the first objective) and mode; None: no metric, the newest
        checkpoints are kept."""
        ck = self.checkpoint
        if ck.score is not None:
            mode = ck.score_mode or next(o.mode for o in self.objectives or [] if o.metric == ck.score)
            return ck.score, mode
        if self.metric is not None and self.mode is not None:
            return self.metric, self.mode
        return None

    def _check_objectives(self) -> None:
        """``objectives`` (two or more, each metric once, not with ``metric``/``mode``), a searcher and a
        scheduler that can take them, constraints on distinct metrics; then the derived fields:
        ``metric``/``mode`` are the first objective's, ``objectives`` lists the one of a
        single-objective spec. Derived values are not *set* (``model_fields_set``), so a dump with
        ``exclude_unset=True`` (the experiment's spec.yaml, a resume) reads back as written."""
        objectives = self.objectives
        if objectives is not None:
            if self.metric is not None or self.mode is not None:
                raise _fail("objectives", "give the objectives once: either as `metric:` and `mode:` (one each, "
                            "or lists) or as `objectives:`, not both.")
            if len(objectives) < 2:
                raise _fail("objectives", "objectives holds two or more objectives; for one write `metric: NAME` "
                            "and `mode: min|max`.")
            names = [o.metric for o in objectives]
            for i, name in enumerate(names):
                if name in names[:i]:
                    raise _fail(f"objectives.{i}.metric", f"metric {name!r} is listed twice; each objective is a "
                                "different metric.")
            object.__setattr__(self, "metric", objectives[0].metric)
            object.__setattr__(self, "mode", objectives[0].mode)
        elif self.metric is not None and self.mode is not None:
            object.__setattr__(self, "objectives", [Objective(metric=self.metric, mode=self.mode)])
        seen: list[str] = []
        for i, c in enumerate(self.constraints or []):
            if c.metric in seen:
                raise _fail(f"constraints.{i}.metric", f"{c.metric!r} has two constraints; give both bounds in one: "
                            f"{{metric: {c.metric}, min: LOW, max: HIGH}}.")
            seen.append(c.metric)
        if self.constraints is not None and not self.constraints:
            raise _fail("constraints", "constraints must hold at least one {metric, min and/or max}, or be omitted.")
        if self.constraints and self.metric is None:
            raise _fail("constraints", "constraints decide which trials count (feasible ones), but the spec sets no "
                        "metric to compare them by; add `metric:` and `mode:`.")
        ranked = getattr(self.scheduler, "metric", None)
        sched, algo = self.scheduler.type, self.search.algorithm
        if ranked is not None:
            names = [o.metric for o in self.objectives or []]
            if ranked not in names:
                hint = _closest(ranked, names)
                guess = f"; did you mean '{hint}'?" if hint else "."
                raise _fail("scheduler.metric", f"scheduler.metric names {ranked!r}, which is not an objective"
                            f"{guess} The scheduler compares trials by one of the objectives: "
                            f"{_allowed(names) or '(none: add metric and mode)'}.")
        if not self.multi_objective:
            return
        if algo == "bohb" or sched == "bohb":
            raise _fail("search.algorithm" if algo == "bohb" else "scheduler.type",
                        f"BOHB optimises one objective (its kernel density model splits trials into good and bad "
                        f"by one value), but the spec has {len(self.objectives or [])} objectives; use search "
                        "optuna (multi-objective TPE, or sampler nsga2/nsga3) with scheduler asha or hyperband, or "
                        "search random.")

    @property
    def space(self) -> Space:
        """``param_space`` expanded: every parameter with its conditions (:mod:`tuner.spec.conditions`)."""
        if self._space is None:
            self._space = expand(self.param_space)
        return self._space

    @property
    def conditional(self) -> bool:
        """Whether ``param_space`` has a condition (a ``when``, or a choice among sub-spaces)."""
        return self.space.conditional

    def _check_bohb_points(self) -> None:
        """BOHB runs a point to evaluate as given (Ray's ``TuneBOHB`` samples nothing for it), so each
        point sets every parameter that its own values make active."""
        missing_value = object()
        space = self.space
        for i, point in enumerate(getattr(self.search, "points_to_evaluate", None) or []):
            drawn = space.sample(lambda p: missing_value, fixed=flatten(point))
            missing = [space.get(name).dotted for name, v in drawn.items() if v is missing_value]
            if missing:
                raise _fail(f"search.points_to_evaluate.{i}", f"search bohb runs a point to evaluate as given and "
                            f"samples none of its parameters, but this point lacks {', '.join(missing)}; give every "
                            "parameter it uses a value (a conditional one only where the point's values make it "
                            "active).")

    def _check_conditions(self) -> None:
        """What a conditional space asks of the searcher: random search samples a grid parameter only as a
        plain one; points to evaluate set only parameters their other values make active."""
        space = self.space
        if not space.conditional:
            return
        involved = space.conditional_names
        if self.search.algorithm == "random":
            for p in space.params:
                if p.dist is not None and p.dist.type == "grid" and p.name in involved:
                    raise _fail(p.path + ".type", f"{p.dotted} is a grid parameter that takes part in a condition, "
                                "but random search enumerates grid values only across the whole space, which a "
                                "condition splits; use type choice (sampled), or search grid (every valid "
                                "combination once).")
        keys = {p.name: p.key for p in space.params}
        for i, point in enumerate(getattr(self.search, "points_to_evaluate", None) or []):
            flat = flatten(point)
            for key in flat:
                versions = [p for p in space.params if p.key == key and p.conditions]
                if not versions or not all(keys[c.parent] in flat for p in versions for c in p.conditions):
                    continue  # unconditional, or a parent left to the searcher
                if any(all(c.holds(flat[keys[c.parent]]) for c in p.conditions) for p in versions):
                    continue
                p = versions[0]
                has = ", ".join(f"{keys[c.parent].replace('/', '.')} {flat[keys[c.parent]]!r}" for c in p.conditions)
                raise _fail(f"search.points_to_evaluate.{i}.{p.dotted}", f"this point sets {p.dotted}, which "
                            f"exists only when {' and '.join(c.describe() for c in p.conditions)}, but the point "
                            f"has {has}; drop {p.dotted} from the point.")

    @property
    def multi_objective(self) -> bool:
        """Whether the spec has two or more objectives."""
        return len(self.objectives or []) > 1

    @property
    def scheduler_objective(self) -> Objective | None:
        """The objective the scheduler compares trials by: ``scheduler.metric``'s, else the first; None
        without a metric. A single-objective spec's is its metric and mode."""
        ranked = getattr(self.scheduler, "metric", None)
        for objective in self.objectives or []:
            if ranked is None or objective.metric == ranked:
                return objective
        return None

    def _check_population(self) -> None:
        """PBT/PB2: a random or grid population, mutations and bounds of parameters that exist (numeric
        ones for PB2), a perturbation inside the run, a checkpoint at every perturbation."""
        s: Any = self.scheduler  # a PBTScheduler or a PB2Scheduler
        algo = self.search.algorithm
        if algo not in ("random", "grid"):
            raise _fail("search.algorithm", f"scheduler {s.type} seeds its population with random or grid search "
                        f"and then changes the configs itself, but got search {algo!r} (Ray refuses a model-based "
                        "searcher under a population scheduler); use search random or grid.")
        params = dict(spec_paths(self.param_space, root=None))
        field = "mutations" if s.type == "pbt" else "bounds"
        given = getattr(s, field)
        conditional = self._conditional_dotted()
        for name in given or {}:
            if name in conditional:
                raise _fail(f"scheduler.{field}.{name}", f"{name} takes part in a condition (a `when`, or a choice "
                            f"among sub-spaces), and {s.type} would perturb it in every trial, where it may not "
                            f"exist or would change which parameters exist; {s.type} mutates only unconditional "
                            "parameters, so drop it from " + field + ".")
            if name not in params:
                hint = _closest(name, params)
                guess = f"; did you mean '{hint}'?" if hint else "."
                raise _fail(f"scheduler.{field}.{name}", f"{field} names {name!r}, which is not a parameter in "
                            f"param_space{guess} Parameters: {_allowed(params) or '(none)'}.")
            if s.type == "pb2" and not _numeric(params[name]):
                raise _fail(f"scheduler.{field}.{name}", f"pb2 bounds only numeric parameters (its Gaussian process "
                            f"models a number), but {name!r} is {_describe(params[name])}; drop it from bounds, or "
                            "use scheduler pbt, which moves a choice to a neighbouring value.")
        if given is None and not (self.population_mutations if s.type == "pbt" else self.population_bounds):
            what = "sampled" if s.type == "pbt" else "numeric range (uniform, loguniform, randint, ...)"
            raise _fail("scheduler.type", f"scheduler {s.type} changes parameters during training, but param_space "
                        f"has no {what} parameter to default `{field}` to; add `scheduler.{field}`.")
        run = (self.stop or {}).get(s.time_attr)
        first = max(s.perturbation_interval, getattr(s, "burn_in_period", 0))
        if run is not None and first >= run:
            key = "scheduler.perturbation_interval" if first == s.perturbation_interval else "scheduler.burn_in_period"
            raise _fail(key, f"the first perturbation comes at {s.time_attr}={first:g}, but the run stops at "
                        f"stop.{s.time_attr}={run:g}, so no trial would ever be perturbed; `max(perturbation_interval, "
                        f"burn_in_period) < stop.{s.time_attr}` must hold.")
        freq = self.checkpoint.frequency
        if s.time_attr == "training_iteration" and s.perturbation_interval % freq:
            raise _fail("checkpoint.frequency", f"scheduler {s.type} clones the latest checkpoint of a top trial at "
                        f"every perturbation (each {s.perturbation_interval:g} iterations), but checkpoint.frequency="
                        f"{freq} keeps a checkpoint only every {freq} reports, so a clone would restart from an older "
                        "state than the score it was chosen for; make perturbation_interval a multiple of "
                        "checkpoint.frequency.")

    @property
    def population_mutations(self) -> dict[str, Any]:
        """PBT's mutations: ``scheduler.mutations``, else every sampled parameter of ``param_space`` that
        takes part in no condition (PBT would perturb it in trials where it is inactive).

        Returns:
            Parameter name (dotted, as ``oom_backoff``) -> its distribution; empty for other schedulers.
        """
        if self.scheduler.type != "pbt":
            return {}
        if self.scheduler.mutations is not None:
            return dict(self.scheduler.mutations)
        conditional = self._conditional_dotted()
        return {name: d for name, d in spec_paths(self.param_space, root=None)
                if isinstance(d, BaseDistribution) and name not in conditional}

    def _conditional_dotted(self) -> set[str]:
        """Dotted names of the parameters that take part in a condition: never perturbed by PBT/PB2."""
        involved = self.space.conditional_names
        return {p.dotted for p in self.space.params if p.name in involved}

    @property
    def population_bounds(self) -> dict[str, tuple[float, float]]:
        """PB2's bounds: ``scheduler.bounds``, else every numeric range of ``param_space`` (``[low, high]``)
        that takes part in no condition.

        Returns:
            Parameter name (dotted) -> ``(low, high)``; empty for other schedulers.
        """
        if self.scheduler.type != "pb2":
            return {}
        if self.scheduler.bounds is not None:
            return {k: (float(v[0]), float(v[1])) for k, v in self.scheduler.bounds.items()}
        conditional = self._conditional_dotted()
        return {name: (float(d.low), float(d.high)) for name, d in spec_paths(self.param_space, root=None)
                if isinstance(d, BaseDistribution) and d.is_numeric_range and name not in conditional}

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
        return [(key, stop_operator(key, self.objectives), value) for key, value in (self.stop or {}).items()]

    def origin(self, path: str) -> str | None:
        """The command-line option (``--name X``, ``--set KEY=VALUE``) that gave the value at a
        dotted field path, or None for a value from the spec itself (or a default)."""
        return _origin_of(tuple(path.split(".")), self._origins) if path else None

    def mark(self, path: str) -> tuple[int, int] | None:
        """Return the 1-based ``(line, col)`` of a dotted field path in the spec file, or None."""
        if not path:
            return None
        key = tuple(path.split("."))  # a list's items are marked by their int index
        return self._marks.get(key) or self._marks.get(tuple(int(p) if p.isdigit() else p for p in key))

    def error(self, path: str, message: str) -> SpecError:
        """Build a :class:`SpecError` for ``path``: at its position in the spec file, or
        naming the ``--set``/command-line option that gave its value."""
        origin = _origin_of(tuple(path.split(".")), self._origins) if path else None
        if origin is not None:
            return SpecError([SpecIssue(path, message, source=origin)], self._source)
        parts = path.split(".")
        # A part of a value written whole (an argument of a command given as one string): the value's position.
        marks = (self.mark(".".join(parts[:n])) for n in range(len(parts), 0, -1))
        line_col = next((m for m in marks if m is not None), None) or (None, None)
        return SpecError([SpecIssue(path, message, *line_col)], self._source)


def stop_operator(key: str, objectives: Iterable[Objective] | None) -> str:
    """How a trial's result is compared with its ``stop`` threshold: ``"<="`` or ``">="``.

    An objective under ``mode: min`` stops a trial once it is at or below the threshold
    (``stop: {val_loss: 0.05}`` means "good enough"); every other key (``training_iteration``,
    an objective under ``mode: max``, any other reported key) once it is at or above, as
    Ray Tune's dict form does.

    Args:
        key: A key of the spec's ``stop``.
        objectives: The spec's objectives (:attr:`Spec.objectives`), or None.

    Returns:
        ``"<="`` or ``">="``.
    """
    return "<=" if any(o.metric == key and o.mode == "min" for o in objectives or ()) else ">="


def _origin_of(key: tuple, origins: Mapping[tuple, str]) -> str | None:
    """The ``--set``/option that gave the value at ``key`` or at a mapping above it, or None."""
    for i in range(len(key), 0, -1):
        if key[:i] in origins:
            return origins[key[:i]]
    return None


def _numeric(value: Any) -> bool:
    """Whether a ``param_space`` entry only takes numbers (a range, randn, a choice of numbers, a number)."""
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if isinstance(value, BaseDistribution):
        values = getattr(value, "values", None)
        return all(number(v) for v in values) if values is not None else True
    return number(value)


def _describe(value: Any) -> str:
    if isinstance(value, BaseDistribution):
        values = getattr(value, "values", None)
        return f"a {value.type} of {values}" if values is not None else f"a {value.type}"
    return f"the constant {value!r}"


_BOHB_UNSUPPORTED = {"quniform", "qloguniform", "randn", "qrandn", "grid"}
_OPTUNA_UNSUPPORTED = {"qloguniform", "randn", "qrandn", "grid"}


def _check_param_for_search(path: str, dist: Any, algo: str) -> None:
    """Refuse distributions that a searcher cannot represent (instead of Ray's silent drop)."""
    if not isinstance(dist, BaseDistribution):
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
            what = f"{kind} parameters" if kind in bad else f"{kind} parameters with q > 1 (got q={q:g})"
            supports = _allowed(t for t in DISTRIBUTION_TYPES if t not in bad)
            if kind not in bad:
                supports += f" ({kind} with q: 1 only)"
            raise _fail(f"param_space.{rel}.type", f"search {algo} cannot sample {what}; {hint}. "
                        f"It supports: {supports}.")
    if algo == "grid" and dist.is_numeric_range and dist.grid_points is None:
        raise _fail(f"param_space.{rel}", f"grid search enumerates {kind} only with `grid_points: N` "
                    "(N >= 2 points from low to high); add it, or use grid/choice values.")
    if algo == "grid" and kind in ("randn", "qrandn"):
        raise _fail(f"param_space.{rel}.type", f"grid search cannot enumerate an unbounded {kind}; use grid or "
                    "choice values, or a range with grid_points.")
