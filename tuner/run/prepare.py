"""Planning an experiment: a spec checked against everything it needs, before Ray Tune starts.

:func:`prepare` (``tuner run``, ``tune_model``) and :func:`prepare_resume` (``tuner resume``) turn a
spec, or an experiment folder, into a :class:`Prepared` run; :func:`plan` describes it (``tuner
validate``); :func:`save_run_record` writes what the experiment keeps of it (``spec.yaml``,
``tuner_run.json``). Nothing here starts Ray Tune: :mod:`tuner.run.engine` runs a Prepared.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Mapping

from tuner.errors import ClusterError, ExperimentError
from tuner.experiment.layout import REPLAY_POLICY, RUN_RECORD, SPEC_SNAPSHOT
from tuner.spec import (Spec, SpecError, SpecIssue, check_command, check_extras, check_trainable, command_cwd,
                        import_roots, load_spec, resolve_trainable, trainable_dirs, trainable_reference)

if TYPE_CHECKING:
    from tuner.resources.sizing import ClusterResources
    from tuner.search.warm_start import WarmStart

__all__ = ["Prepared", "prepare", "Replay", "check_replay", "spec_location", "check_cluster", "plan",
           "save_run_record", "prepare_resume"]


class Prepared:
    """A spec checked against everything it needs before Ray starts.

    Attributes:
        spec: The validated spec.
        trainable: The train function.
        experiment_path: ``<storage>/<name>``, absolute; for a cloud ``storage``, the
            experiment's local mirror (:mod:`tuner.experiment.storage`).
        location: Where Ray Tune and the trials keep the experiment: ``experiment_path``,
            or the cloud URI ``<storage>/<name>`` (with the storage's query, if any).
        cluster: The resources trials will run on.
        python_path: Folders the trial workers need on ``sys.path``.
        address: Ray cluster to connect to, or None for the embedded local Ray.
        num_cpus: CPUs of the local Ray, or None for all.
        num_gpus: GPUs of the local Ray, or None for the detected ones.
        resumed_num_samples: For a resume, the ``num_samples`` the experiment ran with
            so far (the spec's may be larger); None for a new run.
        renamed_from: The spec's name when its folder held an experiment already and this
            run got a fresh one (``name-2``); None otherwise.
        replay: For ``tuner run --replay``: the PBT schedule the run replays; None otherwise.
        warm_start: The earlier trials ``search.warm_start`` feeds to the searcher
            (:func:`tuner.search.warm_start.load_warm_start`); None without it, and for a resume.
    """

    def __init__(self, spec: Spec, trainable: Callable, experiment_path: Path, cluster, python_path: list[str],
                 address: str | None = None, num_cpus: float | None = None, num_gpus: float | None = None):
        self.spec = spec
        self.address = address
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.trainable = trainable
        self.experiment_path = experiment_path
        self.cluster = cluster
        self.python_path = python_path
        self.resumed_num_samples: int | None = None
        self.renamed_from: str | None = None
        self.replay: Replay | None = None
        self.warm_start: WarmStart | None = None
        self.location = spec_location(spec) if spec.remote_storage else str(experiment_path)

    @property
    def remote(self) -> bool:
        """Whether the experiment lives at a cloud URI (with a local mirror)."""
        return self.location != str(self.experiment_path)


def prepare(
    spec: str | os.PathLike | Mapping | Spec,
    *,
    trainable: Callable | None = None,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    address: str | None = None,
    replay: str | os.PathLike | None = None,
    _resume: bool = False,
    **overrides: Any,
) -> Prepared:
    """Load the spec, import the train function and check resources and the folder.

    Nothing is started and nothing is written.

    Args:
        spec: A YAML path, a mapping or a Spec.
        trainable: A callable that replaces ``spec.trainable``.
        num_cpus: CPUs of the local Ray (ignored when Ray is already running).
        num_gpus: GPUs of the local Ray (ignored when Ray is already running).
        address: Ray cluster to connect to; its resources are checked once connected.
        replay: ``EXPERIMENT[:TRIAL]``: replay that PBT/PB2 trial's schedule (default: the
            best trial) in a new experiment of one trial; see :func:`check_replay`.
        **overrides: Spec keys to replace, as in :func:`~tuner.spec.load_spec`.

    Returns:
        The Prepared run.

    Raises:
        SpecError: For any problem with the spec, the train function, the resources
            or the experiment folder.
        ClusterError: ``num_cpus``/``num_gpus`` together with a cluster's address.
        StorageError: A cloud ``storage`` that cannot be listed.
        ExperimentError: A ``replay`` that names no PBT/PB2 experiment, or a trial it lacks.
    """
    # First: a bad spec fails before Ray is even imported.
    spec = load_spec(spec, require_trainable=trainable is None, **overrides)
    explicit_name = overrides.get("name") is not None or spec.origin("name") is not None  # --name, name=
    spec, planned = _replayed(spec, replay, require_trainable=trainable is None, named=explicit_name)
    address = _check_address(spec, address, num_cpus, num_gpus)
    spec, fn = _the_trainable(spec, trainable)
    check_extras(spec)  # reporting.wandb / reporting.mlflow need their packages, before Ray starts
    # The earlier experiments of search.warm_start, checked against this spec (a resume's searcher has them).
    warm = None if _resume else _warm_start(spec)
    cluster = _check_resources(spec, address, num_cpus, num_gpus)
    spec, renamed_from = _experiment_name(spec, refuse=explicit_name, resume=_resume)
    prepared = Prepared(spec, fn, spec.storage_dir / spec.name, cluster, _python_path(spec, fn), address, num_cpus,
                        num_gpus)
    prepared.renamed_from = renamed_from
    prepared.replay = planned
    prepared.warm_start = warm
    return prepared


def _replayed(spec: Spec, replay: str | os.PathLike | None, *, require_trainable: bool,
              named: bool) -> tuple[Spec, Replay | None]:
    """For ``replay``: the replay's spec and its :class:`Replay` (:func:`check_replay`); else the spec and None."""
    if replay is None:
        return spec, None
    planned = check_replay(replay)
    return _replay_spec(spec, planned, require_trainable, named=named), planned


def _check_address(spec: Spec, address: str | None, num_cpus: float | None, num_gpus: float | None) -> str | None:
    """The Ray cluster to connect to (None: the local Ray), refused with local sizes or when it cannot be reached."""
    address, where = _resolve_address(address, spec)
    if address is not None and (num_cpus is not None or num_gpus is not None):
        flags = " and ".join(f for f, v in (("--num-cpus", num_cpus), ("--num-gpus", num_gpus)) if v is not None)
        verb = "size" if " and " in flags else "sizes"
        raise ClusterError(f"{flags} {verb} the local Ray that tuner starts, but this run connects to "
                           f"the Ray cluster at {address} (from {where}), whose own resources apply; drop "
                           f"{flags}, or drop the address to run locally.", spec.source or "tuner")
    if address is not None:
        from tuner.run.cluster import unreachable

        why = unreachable(address)
        if why is not None:
            raise ClusterError(f"cannot reach the Ray cluster at {address} (from {where}): {why}. Start it with "
                               f"`ray start --head`, or give the address that `ray start` printed.",
                               spec.source or "tuner")
    return address


def _the_trainable(spec: Spec, trainable: Callable | None) -> tuple[Spec, Callable]:
    """The train function (the one given, recorded in the spec by import path, or the spec's), checked."""
    if trainable is not None:
        if not callable(trainable):
            raise TypeError(f"trainable must be a function of config or a ray.tune.Trainable subclass, but got "
                            f"{type(trainable).__name__}")
        # What the experiment records (for `tuner resume`): the callable's import path, when it has one.
        ref = trainable_reference(trainable)
        spec = load_spec(spec, trainable=ref) if ref else spec.model_copy(update={"trainable": None})
    if trainable is None and spec.command is not None:
        from tuner.run.command import command_trainable

        check_command(spec)
        return spec, command_trainable(spec)
    fn = trainable if trainable is not None else resolve_trainable(spec)
    check_trainable(spec, fn)
    return spec, fn


def _warm_start(spec: Spec) -> WarmStart | None:
    """The earlier trials that ``search.warm_start`` feeds to the searcher (:mod:`tuner.search.warm_start`)."""
    from tuner.search.warm_start import load_warm_start

    return load_warm_start(spec)


def _check_resources(spec: Spec, address: str | None, num_cpus: float | None,
                     num_gpus: float | None) -> ClusterResources | None:
    """The resources trials will run on, the spec checked against them; None for a cluster not connected to yet."""
    import ray

    from tuner.run.cluster import cluster_resources
    from tuner.resources.sizing import check_fits, local_resources

    cluster = None
    if ray.is_initialized():
        cluster = cluster_resources()
    elif address is None:
        cluster = local_resources(num_cpus, num_gpus)
    if cluster is not None:
        check_fits(spec, cluster)
    return cluster


def _experiment_name(spec: Spec, *, refuse: bool, resume: bool) -> tuple[Spec, str | None]:
    """The spec under a free experiment name (:func:`_free_name`) and the name it replaced; a resume keeps its own."""
    renamed_from = None
    if not resume:
        free = _free_name(spec, refuse=refuse)
        if free != spec.name:
            renamed_from, spec = spec.name, load_spec(spec, name=free)
    elif spec.remote_storage:
        _check_remote(spec)
    return spec, renamed_from


def _python_path(spec: Spec, fn: Callable) -> list[str]:
    """Folders the trial workers need on ``sys.path``: the spec's trainable folders, then the function's roots."""
    if spec.command is not None:  # the program runs in its own process; tuner's own modules are installed
        return trainable_dirs(spec)
    return list(dict.fromkeys([*trainable_dirs(spec), *import_roots(fn)]))


class Replay:
    """A PBT/PB2 trial's schedule to replay (``tuner run SPEC --replay EXPERIMENT[:TRIAL]``).

    The replay runs one trial under Ray's ``PopulationBasedTrainingReplay`` (the PBT paper's
    schedule replay; Ray's ``ray.tune.schedulers.PopulationBasedTrainingReplay``), which
    starts it with the schedule's first config and, once the trial reports the iteration
    where the original's config changed, pauses it, checkpoints it and continues with the
    next config.

    Attributes:
        experiment: The PBT/PB2 experiment folder replayed.
        trial_id: The trial whose schedule is replayed.
        policy: The text of the trial's policy file (Ray's format; empty for a trial never
            perturbed: the replay then trains its config unchanged).
        schedule: :func:`tuner.search.schedule.trial_schedule`'s steps.
        seed: The replayed trial's seed (:func:`tuner.search.seeds.seed_of_trial`, from the replayed
            experiment's ``seed``), which the replay's trial gets as ``tuner.trial.seed()``.
    """

    def __init__(self, experiment: Path, trial_id: str, policy: str, schedule: list[dict], seed: int | None = None):
        self.experiment, self.trial_id, self.policy, self.schedule = experiment, trial_id, policy, schedule
        self.seed = seed

    @property
    def initial_config(self) -> dict:
        """The config the replay starts with (the schedule's first step)."""
        return self.schedule[0]["config"]

    def record(self) -> dict[str, Any]:
        """What ``tuner_run.json`` keeps of the replay (``replay``)."""
        return {"experiment": str(self.experiment), "trial_id": self.trial_id, "trial_seed": self.seed,
                "schedule": [{"from_iteration": s["from_iteration"], "config": s["config"]} for s in self.schedule]}


def _split_replay(replay: str) -> tuple[str, str | None]:
    """``EXPERIMENT[:TRIAL]`` -> (folder, trial id or None); a folder whose name holds ``:`` stays whole."""
    if ":" in replay and not Path(replay).expanduser().exists():
        folder, trial = replay.rsplit(":", 1)
        if trial and "/" not in trial:
            return folder, trial
    return replay, None


def check_replay(replay: str | os.PathLike) -> Replay:
    """Check ``--replay EXPERIMENT[:TRIAL]`` and read the schedule to replay; starts nothing.

    Args:
        replay: A PBT/PB2 experiment folder, optionally with ``:TRIAL`` (a trial id);
            default trial: the experiment's best (``summary.json``).

    Returns:
        The Replay.

    Raises:
        ExperimentError: No such folder, not a PBT/PB2 experiment, no best trial to default
            to, or a trial the experiment does not have (the message lists its trials).
    """
    import json

    from tuner.experiment.layout import PBT_GLOBAL, SUMMARY
    from tuner.search.schedule import is_pbt_experiment, policy_text, trial_schedule
    from tuner.adapters.state import read_state

    given = os.fspath(replay)
    folder, trial_id = _split_replay(given)
    path = Path(folder).expanduser()
    where = f"--replay {given}"
    if not path.is_dir():
        raise ExperimentError(f"{path} is not an experiment folder (no such folder); give the folder of a PBT or "
                              "PB2 experiment, e.g. --replay runs/mnist-pbt, or --replay runs/mnist-pbt:TRIAL_ID "
                              "for a trial other than the best.", where)
    if not is_pbt_experiment(path):
        raise ExperimentError(f"{path} is not a PBT or PB2 experiment (its spec.yaml's scheduler.type is neither "
                              f"pbt nor pb2, and it holds no {PBT_GLOBAL}), so it has no hyperparameter schedule "
                              "to replay; give the folder of an experiment run with scheduler: {type: pbt} or "
                              "{type: pb2}.", where)
    path = path.resolve()
    state = read_state(path)
    trials = sorted(t["trial_id"] for t in state.trials) if state is not None else []
    if trial_id is None:
        try:
            best = (json.loads((path / SUMMARY).read_text(encoding="utf-8")).get("best") or {}).get("trial_id")
        except (OSError, ValueError, AttributeError):
            best = None
        if best is None:
            raise ExperimentError(f"{path} has no best trial (its {SUMMARY} names none: the run did not finish, "
                                  "or no trial reported a finite metric); name the trial to replay: --replay "
                                  f"{folder}:TRIAL_ID, one of: {', '.join(trials) or '(no trials)'}.", where)
        trial_id = str(best)
    if trial_id not in trials:
        raise ExperimentError(f"{path} has no trial {trial_id!r}; its trials are: {', '.join(trials) or '(none)'} "
                              f"(`tuner report {folder}` lists them, best first).", where)
    schedule = trial_schedule(path, trial_id)
    if not schedule:
        raise ExperimentError(f"the config of trial {trial_id} of {path} cannot be read (its experiment state "
                              "lacks it), so there is no schedule to replay.", where)
    return Replay(path, trial_id, policy_text(path, trial_id), schedule, seed=_replayed_seed(path, trial_id, schedule))


def _replayed_seed(path: Path, trial_id: str, schedule: list[dict]) -> int:
    """The seed the replayed trial had: from its experiment's ``seed`` (its ``spec.yaml``), its id and
    its first config (:func:`tuner.search.seeds.seed_of_trial`)."""
    import yaml

    from tuner.experiment.layout import SPEC_SNAPSHOT
    from tuner.search.seeds import seed_of_trial

    try:
        original = yaml.safe_load((path / SPEC_SNAPSHOT).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        original = None
    seed = original.get("seed") if isinstance(original, dict) else None
    return seed_of_trial(seed if isinstance(seed, int) and not isinstance(seed, bool) else None, trial_id,
                         schedule[0]["config"])


def _replay_spec(spec: Spec, replay: Replay, require_trainable: bool, named: bool) -> Spec:
    """The spec of a replay: one trial, the schedule's first config as constants, no searcher or
    scheduler of its own (the replay's scheduler is Ray's ``PopulationBasedTrainingReplay``),
    named ``<name>-replay`` unless a name was given."""
    data = spec.model_dump(mode="json", exclude_unset=True)
    data.update(param_space=_constants(replay.initial_config), num_samples=1, search={"algorithm": "random"},
                scheduler={"type": "fifo"})
    if not named:
        data["name"] = f"{spec.name}-replay"
    return load_spec(data, require_trainable=require_trainable)


def _constants(config: dict) -> dict:
    """A config as ``param_space`` constants (a nested mapping stays a nested group)."""
    return {k: _constants(v) if isinstance(v, dict) else v for k, v in config.items()}


def _free_name(spec: Spec, refuse: bool) -> str:
    """The experiment name to use: ``spec.name``, or ``<name>-2``, ``-3``... when that folder
    already holds an experiment (as Ray Tune starts a fresh folder for a run that has one).

    Args:
        spec: The spec.
        refuse: Whether the name was given explicitly (``--name``, ``tune_model(name=...)``):
            an existing folder is then refused instead.

    Raises:
        SpecError: An explicit name whose folder exists.
        StorageError: An unreachable cloud storage.
    """
    from tuner.experiment.storage import display

    for n in range(1, 1000):
        name = spec.name if n == 1 else f"{spec.name}-{n}"
        if spec.remote_storage:
            taken = not _check_remote(load_spec(spec, name=name) if n > 1 else spec)
            where = display(spec_location(spec))
        else:
            folder = spec.storage_dir / name
            taken = folder.exists() and (not folder.is_dir() or any(folder.iterdir()))
            where = str(spec.storage_dir / spec.name)
        if not taken:
            return name
        if refuse:
            raise spec.error("name", f"the experiment folder {where} already exists; choose another name "
                             "(--name NAME), remove that folder, or continue it with `tuner resume " + where + "`.")
    raise spec.error("name", f"{spec.storage_dir / spec.name} and its numbered successors up to -999 all exist; "
                     "choose another name (--name NAME).")


def spec_location(spec: Spec) -> str:
    """``<storage>/<name>`` for a cloud ``storage`` URI, with its query kept at the end."""
    from tuner.experiment.storage import join

    return join(spec.storage, spec.name)


def _check_remote(spec: Spec) -> bool:
    """Reach a cloud ``storage`` before anything starts; returns whether the experiment's
    folder there is empty (or missing).

    Raises:
        StorageError: The bucket cannot be listed; the message points at ``storage`` in the
            spec (or the option that gave it), as a SpecError would.
    """
    from tuner.experiment.storage import CREDENTIALS_HINT, StorageError, is_empty

    try:
        return is_empty(spec_location(spec))
    except StorageError as err:
        raise StorageError(str(spec.error("storage", f"{err}. {CREDENTIALS_HINT}; every Ray node "
                                          "needs them too."))) from None


def _resolve_address(address: str | None, spec: Spec) -> tuple[str | None, str]:
    """The Ray cluster to use and where that came from: the argument, ``RAY_ADDRESS``, the spec."""
    if address:
        return address, "--address"
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
    if spec.ray.address:
        return spec.ray.address, "ray.address in the spec"
    return None, ""


def check_cluster(prepared: Prepared) -> None:
    """Connect to ``prepared.address`` and check the spec against the cluster's resources.

    Connecting starts nothing: the cluster already runs. ``prepared.cluster`` is set.

    Raises:
        SpecError: If a trial can never fit on the cluster.
        ClusterError: If the cluster cannot be reached.
    """
    from tuner.run.cluster import cluster_resources, ray_session
    from tuner.resources.sizing import check_fits

    try:
        with ray_session(address=prepared.address):
            prepared.cluster = cluster_resources(prepared.address)
    except ConnectionError as err:
        raise ClusterError(f"cannot reach the Ray cluster at {prepared.address}: {err}",
                           prepared.spec.source or "tuner") from None
    check_fits(prepared.spec, prepared.cluster)


def _where(prepared: Prepared) -> str:
    from tuner.experiment.storage import display

    if prepared.remote:
        return f"{display(prepared.location)} (local mirror: {prepared.experiment_path})"
    return str(prepared.experiment_path)


def plan(prepared: Prepared) -> str:
    """The run plan that ``tuner validate`` prints: trials, searcher, scheduler, resources, budget forecast.

    Returns:
        Several lines of text, one fact a line.
    """
    from tuner.search import forecast
    from tuner.search.algorithms import describe_search
    from tuner.resources.sizing import describe_resources
    from tuner.spec.conditions import sampled_params
    from tuner.search.space import grid_size

    spec = prepared.spec
    grid = grid_size(spec)
    trials = grid * spec.num_samples
    valid = " valid" if spec.conditional and spec.search.algorithm == "grid" else ""
    how = (f"{grid}{valid} grid point{'s' if grid != 1 else ''} x {spec.num_samples} repeat"
           f"{'s' if spec.num_samples != 1 else ''}") if grid > 1 or spec.search.algorithm == "grid" \
        else f"{spec.num_samples} sample{'s' if spec.num_samples != 1 else ''}"
    lines = [
        f"spec:       {spec.source or '<mapping>'} is valid",
        f"experiment: {spec.name} -> {_where(prepared)}",
        *([f"note:       {_rename_note(prepared)}"] if prepared.renamed_from else []),
        f"trainable:  {_describe_trainable(prepared.trainable)}",
        f"trials:     {trials} ({how})",
        f"parameters: {', '.join(sampled_params(spec)) or '(none sampled)'}",
        *_describe_space(spec),
        *_describe_objectives(spec),
        *_describe_checkpoints(spec),
    ]
    budget = []
    if spec.stop:
        budget.append("stop " + ", ".join(f"{k} {op} {v:g}" for k, op, v in spec.stop_criteria))
    if spec.time_budget_s:
        budget.append(f"time budget {spec.time_budget_s:g} s")
    if budget:
        lines.append(f"budget:     {'; '.join(budget)}")
    lines += describe_search(spec)
    if prepared.warm_start is not None:
        lines += prepared.warm_start.describe(spec)
    if prepared.cluster is not None:
        lines += describe_resources(spec, prepared.cluster)
    else:
        lines.append(f"cluster:    {prepared.address} (resources are checked once connected)")
    lines += forecast.describe(forecast.forecast_on(spec, prepared.cluster, trials)[0])
    return "\n".join(lines)


def _describe_space(spec: Spec) -> list[str]:
    """Plan lines for a conditional space: the tree of parents and children with their conditions."""
    if not spec.conditional:
        return []
    tree = spec.space.tree()
    return [f"space:      {tree[0]}", *(f"            {line}" for line in tree[1:])]


#: How the plan says what ``best.scope`` scores a trial by.
SCOPE_WORDS = {"last": "its last value", "all": "the best value it reported",
               "last-5-avg": "the mean of its last 5 values", "last-10-avg": "the mean of its last 10 values"}


def _describe_checkpoints(spec: Spec) -> list[str]:
    """The plan line of the checkpoints a trial keeps (:func:`tuner.run.trainable.kept_checkpoints`)."""
    keep, score = spec.checkpoint.num_to_keep, spec.checkpoint_score
    if keep is None:
        return ["checkpoint: every one kept" + (f"; the best by {score[0]} ({score[1]}) is exported" if score else "")]
    if score is None:
        return [f"checkpoint: the newest {keep} per trial"]
    return [f"checkpoint: the best {keep} by {score[0]} ({score[1]}) per trial, and the newest"]


def _describe_objectives(spec: Spec) -> list[str]:
    """Plan lines for the metric, or the objectives and which of them the scheduler compares, and the constraints."""
    lines = []
    if not spec.metric:
        lines.append("metric:     (none: no best trial)")
    elif not spec.multi_objective:
        lines.append(f"metric:     {spec.metric} ({spec.mode}); best trial by scope {spec.best.scope} "
                     f"({SCOPE_WORDS[spec.best.scope]})")
    else:
        objectives = spec.objectives or []
        lines.append(f"objectives: {', '.join(f'{o.metric} ({o.mode})' for o in objectives)}: the result is the "
                     "Pareto front of the feasible trials (summary.json, pareto_configs.yaml); best_config is the "
                     f"front's best on {objectives[0].metric}")
        ranked = spec.scheduler_objective
        if spec.scheduler.type != "fifo" and ranked is not None:
            why = "scheduler.metric" if getattr(spec.scheduler, "metric", None) else "the first objective; " \
                  "scheduler.metric names another"
            lines.append(f"            scheduler {spec.scheduler.type} compares trials by {ranked.metric} "
                         f"({ranked.mode}) only ({why})")
    for c in spec.constraints or []:
        lines.append(f"constraint: {c.describe()} (an infeasible trial is never the best nor on the front)")
    return lines


def _rename_note(prepared: Prepared) -> str:
    from tuner.experiment.storage import display, join

    old = display(join(prepared.spec.storage, prepared.renamed_from or ""))
    return (f"{old} holds an experiment already, so this run goes to {prepared.spec.name} "
            f"(--name NAME picks another; `tuner resume {old}` continues that one)")


def _describe_trainable(trainable: Any) -> str:
    from tuner.spec import is_class_trainable

    from tuner.run.command import CommandTrial

    if isinstance(trainable, CommandTrial):
        import shlex

        command = trainable.command
        return f"command {shlex.join(command.command)} (metrics: {command.metrics}; in {trainable.cwd})"
    where = f"{getattr(trainable, '__module__', '?')}:{getattr(trainable, '__name__', '?')}"
    return f"{where} (class trainable)" if is_class_trainable(trainable) else where



_RESUME_FIXED = ("trainable", "metric", "mode", "param_space", "search", "scheduler", "resources", "stop",
                 "amp", "oom_backoff", "min_batch_size", "seed", "seed_trials")


def save_run_record(prepared: Prepared) -> None:
    """Write ``spec.yaml`` (the spec as run) and ``tuner_run.json`` into the experiment folder.

    Called with the experiment's :class:`~tuner.run.failures.ExperimentLock` held, so that a
    run or resume refused by the lock changes nothing.
    """
    import json

    import yaml

    from tuner.run.results import atomic_write

    spec = prepared.spec
    path = prepared.experiment_path
    snapshot = spec.model_dump(mode="json", exclude_unset=True)
    if "storage" in snapshot:
        from tuner.experiment.storage import display

        snapshot["storage"] = display(snapshot["storage"])  # a URI's query and user info may hold keys
    header = ""
    if prepared.resumed_num_samples is not None and (path / SPEC_SNAPSHOT).is_file():
        # a resume keeps the comment the run wrote above the spec (a replay's: what it replays)
        lines = (path / SPEC_SNAPSHOT).read_text().splitlines(keepends=True)
        header = "".join(line for line in lines[:next((i for i, x in enumerate(lines) if not x.startswith("#")),
                                                          len(lines))])
    if prepared.replay is not None:
        header = (f"# A replay (tuner run --replay) of the PBT schedule of trial {prepared.replay.trial_id} of\n"
                  f"# {prepared.replay.experiment}: one trial, scheduled by Ray's PopulationBasedTrainingReplay\n"
                  f"# on {REPLAY_POLICY} ({RUN_RECORD}: replay), not by the scheduler below.\n")
    atomic_write(path / SPEC_SNAPSHOT, header + yaml.safe_dump(snapshot, sort_keys=False))
    record: dict[str, Any] = {
        "spec_source": str(Path(spec.source).resolve()) if spec.source else None,
        "python_path": prepared.python_path,
        "trainable": spec.command.model_dump(mode="json") if spec.command else spec.trainable,
        # where a command trial's program runs: `tuner resume` finds it there when the spec file is gone
        "command_cwd": str(command_cwd(spec)) if spec.command else None,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "time_budget_s": spec.time_budget_s,  # read by a restored ExperimentStopper
    }
    if prepared.replay is not None:
        record["replay"] = prepared.replay.record()
    record["forecast"] = _forecast_record(prepared)  # tuner report compares it with what was used
    if prepared.resumed_num_samples is not None and (path / RUN_RECORD).is_file():
        old = json.loads((path / RUN_RECORD).read_text())
        record = {**old, "python_path": prepared.python_path, "time_budget_s": spec.time_budget_s,
                  "resumed": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    atomic_write(path / RUN_RECORD, json.dumps(record, indent=2) + "\n")


def _forecast_record(prepared: Prepared) -> dict[str, Any]:
    """The budget forecast at run start (:func:`tuner.search.forecast.forecast`), with the trials that run at once
    (None when the cluster's resources are not known yet)."""
    from tuner.search.forecast import forecast_on

    fc, at_once = forecast_on(prepared.spec, prepared.cluster)
    return {**fc.as_dict(), "trials_at_once": at_once}


def _changed_fields(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in dict.fromkeys([*old, *new]):
            out += _changed_fields(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    return [] if old == new else [prefix.rstrip(".")]


def prepare_resume(
    experiment_path: str | os.PathLike,
    *,
    spec: str | os.PathLike | None = None,
    trainable: Callable | type | None = None,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    address: str | None = None,
) -> Prepared:
    """Check that an experiment can be resumed; nothing is started or written.

    The spec is the one saved in the experiment (``spec.yaml``), or ``spec`` when given
    (else the original file, when it still exists). A spec whose search space,
    searcher/scheduler or resources changed is refused, with the changed fields named.
    The budgets ``num_samples`` and ``time_budget_s`` may grow (not shrink); the extra
    trials and seconds are added when the experiment resumes.

    Args:
        experiment_path: The experiment folder (or its cloud URI).
        spec: A spec file to resume with; default as above.
        trainable: The train function or class trainable, for an experiment started with
            ``tune_model(trainable=...)`` whose trainable cannot be imported by name;
            default the spec's ``trainable``.
        num_cpus: CPUs of the local Ray.
        num_gpus: GPUs of the local Ray.
        address: A running Ray cluster to use instead.

    Raises:
        ExperimentError: If the folder is not a tuner experiment, its state cannot be read,
            or its trainable cannot be imported by name.
        StorageError: If a cloud experiment cannot be downloaded.
        SpecError: If the spec changed in a way a resume cannot honour.
    """
    import json

    from tuner.run.failures import check_state, time_budget_used

    from tuner.experiment.storage import StorageError, display, download, is_remote, mirror_dir, parent_and_name

    location = os.fspath(experiment_path)
    if is_remote(location):
        path = mirror_dir(location)
        try:
            download(location, path)  # Ray's state and tuner's records, not the checkpoints
        except StorageError as err:
            raise StorageError(f"{err}. Check the URI and this machine's credentials.", display(location)) from None
        storage, name = parent_and_name(location)
    else:
        path = Path(experiment_path).expanduser().resolve()
        storage, name = str(path.parent), path.name
    record_file = path / RUN_RECORD
    if not record_file.is_file() or not (path / SPEC_SNAPSHOT).is_file():
        raise ExperimentError(f"{path} is not a tuner experiment folder (no {RUN_RECORD} and "
                              f"{SPEC_SNAPSHOT}); give the folder `tuner run` created, e.g. runs/mnist-asha.",
                              str(path))
    record = json.loads(record_file.read_text())
    saved = load_spec(path / SPEC_SNAPSHOT, require_trainable=False)
    if saved.trainable is None and trainable is None:
        raise ExperimentError(f"this experiment was started from Python with tune_model(trainable=...), "
                              "given a callable that cannot be imported by name (a lambda, a local function, "
                              "a tune.with_parameters wrapper or one defined in __main__), so `tuner resume` "
                              "cannot find its trainable. Resume it from Python: tuner.run.engine.resume_prepared("
                              f"tuner.run.prepare.prepare_resume({str(path)!r}, trainable=...)).", str(path))
    source = spec or (record.get("spec_source") if record.get("spec_source") and
                      Path(record["spec_source"]).is_file() else None)
    current = load_spec(source) if source else saved
    old, new = saved.model_dump(mode="json"), current.model_dump(mode="json")
    changed = [f for key in _RESUME_FIXED for f in _changed_fields(old.get(key), new.get(key), key + ".")
               if f != "trainable.cwd"]  # a command's folder may move (a resume from the snapshot records it whole)
    for key in ("num_samples", "time_budget_s"):
        before, after = (float("inf") if v is None else v for v in (old.get(key), new.get(key)))
        if after < before:
            changed.append(f"{key} ({old.get(key)} -> {new.get(key)}: a budget may grow on resume, not shrink)")
    if changed:
        raise SpecError([SpecIssue("", f"the spec changed since this experiment started, so it cannot be resumed: "
                                   f"{', '.join(changed)}. Undo those changes, or start a new experiment "
                                   "with `tuner run --name NEW`.")], str(source))
    if source is None and current.command is not None and record.get("command_cwd"):
        # The snapshot's folder is the experiment's, not the spec's: the command runs where it ran.
        current = current.model_copy(update={"trainable": current.command.model_copy(
            update={"cwd": record["command_cwd"]})})
    current = load_spec(current, name=name, storage=storage)
    check_state(path)
    _refuse_an_unfinished_replay(path, record.get("replay"))
    used = time_budget_used(path)
    if current.time_budget_s is not None and used is not None and used >= current.time_budget_s:
        raise current.error("time_budget_s", f"the time budget of {current.time_budget_s:g} s is spent ({used:.1f} s "
                            "used so far), so the resumed experiment would stop at once; raise time_budget_s "
                            "in the spec to go on.")
    for folder in record.get("python_path", []):  # where the run found its trainable
        if folder not in sys.path:
            sys.path.append(folder)
    prepared = prepare(current, trainable=trainable, num_cpus=num_cpus, num_gpus=num_gpus, address=address,
                       _resume=True)
    prepared.python_path = list(dict.fromkeys([*record.get("python_path", []), *prepared.python_path]))
    prepared.resumed_num_samples = saved.num_samples
    return prepared


def _refuse_an_unfinished_replay(path: Path, replayed: Mapping[str, Any] | None) -> None:
    """Refuse to resume a replay (``tuner run --replay``) whose trial did not finish.

    Ray's ``PopulationBasedTrainingReplay`` keeps no record of how far through the schedule
    it got: ``Tuner.restore`` brings it back as it was at the start, so a resumed trial would
    go back to the schedule's first config and step through the changes again. A finished
    replay resumes like any finished experiment (nothing reruns).

    Raises:
        ExperimentError: Naming the replayed trial and the command that replays it again.
    """
    from tuner.adapters.state import read_state

    if not replayed:
        return
    state = read_state(path)
    unfinished = [str(t.get("trial_id")) for t in (state.trials if state is not None else [])
                  if t.get("status") != "TERMINATED"]
    if unfinished:
        again = f"{replayed.get('experiment')}:{replayed.get('trial_id')}"
        raise ExperimentError(f"{path} is a replay (tuner run --replay) of trial {replayed.get('trial_id')} of "
                              f"{replayed.get('experiment')}, and its trial {', '.join(unfinished)} did not finish. "
                              "A replay cannot be resumed: Ray's PopulationBasedTrainingReplay keeps no record of how "
                              "far through the schedule it got, so the resumed trial would go back to the schedule's "
                              f"first config. Replay it again as a new experiment: tuner run SPEC --replay {again} "
                              "--name NEW.", str(path))
