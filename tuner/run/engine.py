"""The Python API: ``tune_model(spec)`` turns a validated Spec into a Ray Tune run.

Data flows one way: YAML -> :class:`~tuner.spec.Spec` -> Ray objects (search space,
searcher, scheduler, resources, reporter) -> ``Tuner.fit()`` -> :class:`TuneResult`.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Mapping

from tuner.errors import ClusterError, ExperimentError
from tuner.experiment.layout import (BUDGET_SPENT, CORRUPT_SUFFIX, EVENTS_GLOB, LOG_FILE, REPLAY_POLICY, RUN_RECORD,
                                     SPEC_SNAPSHOT, TUNER_FILES, trial_folder_of)
from tuner.spec import (Spec, SpecError, SpecIssue, check_trainable, import_roots, load_spec, resolve_trainable,
                        trainable_dirs, trainable_reference)

if TYPE_CHECKING:
    from tuner.search.warm_start import WarmStart

__all__ = ["tune_model", "plan", "prepare"]


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
    planned = None
    if replay is not None:
        planned = check_replay(replay)
        spec = _replay_spec(spec, planned, trainable is None, named=explicit_name)
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
    if trainable is not None:
        if not callable(trainable):
            raise TypeError(f"trainable must be a function of config or a ray.tune.Trainable subclass, but got "
                            f"{type(trainable).__name__}")
        # What the experiment records (for `tuner resume`): the callable's import path, when it has one.
        ref = trainable_reference(trainable)
        spec = load_spec(spec, trainable=ref) if ref else spec.model_copy(update={"trainable": None})
    fn = trainable if trainable is not None else resolve_trainable(spec)
    check_trainable(spec, fn)
    from tuner.spec import check_extras

    check_extras(spec)  # reporting.wandb / reporting.mlflow need their packages, before Ray starts
    from tuner.search.warm_start import load_warm_start

    # The earlier experiments of search.warm_start, checked against this spec (a resume's searcher has them).
    warm = None if _resume else load_warm_start(spec)

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
    renamed_from = None
    if not _resume:
        free = _free_name(spec, refuse=explicit_name)
        if free != spec.name:
            renamed_from, spec = spec.name, load_spec(spec, name=free)
    elif spec.remote_storage:
        _check_remote(spec)
    experiment_path = spec.storage_dir / spec.name
    python_path = list(dict.fromkeys([*trainable_dirs(spec), *import_roots(fn)]))
    prepared = Prepared(spec, fn, experiment_path, cluster, python_path, address, num_cpus, num_gpus)
    prepared.renamed_from = renamed_from
    prepared.replay = planned
    prepared.warm_start = warm
    return prepared


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

    where = f"{getattr(trainable, '__module__', '?')}:{getattr(trainable, '__name__', '?')}"
    return f"{where} (class trainable)" if is_class_trainable(trainable) else where


class _InterruptWatch:
    """Tell whether Ray Tune's own SIGINT/SIGUSR1 handler fired during ``Tuner.fit()``.

    Ray Tune stops gracefully on the first Ctrl-C and returns normally, so the caller
    cannot see it. Its handler (``ray.tune.tune._setup_signal_catching``) puts back the
    SIGINT handler it replaced when it fires, so a sentinel installed here shows up
    again after an interrupt. SIGUSR1, which Ray always takes over, tells whether Ray
    installed its handlers at all.
    """

    def __enter__(self) -> _InterruptWatch:
        import signal

        self.interrupted = False
        self._active = threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGUSR1")
        if self._active:
            self._saved = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGUSR1))
            signal.signal(signal.SIGINT, self._sentinel)
            signal.signal(signal.SIGUSR1, self._sentinel)
        return self

    @staticmethod
    def _sentinel(sig, frame):
        raise KeyboardInterrupt

    def __exit__(self, *exc) -> None:
        import signal

        if not self._active:
            return
        ray_took_over = signal.getsignal(signal.SIGUSR1) is not self._sentinel
        self.interrupted = ray_took_over and signal.getsignal(signal.SIGINT) is self._sentinel
        signal.signal(signal.SIGINT, self._saved[0])
        signal.signal(signal.SIGUSR1, self._saved[1])


def tune_model(
    spec: str | os.PathLike | Mapping | Spec,
    *,
    trainable: Callable | None = None,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    address: str | None = None,
    replay: str | os.PathLike | None = None,
    **overrides: Any,
):
    """Run a tuning experiment described by a spec and return what it found.

    Starts an embedded local Ray unless this process is already connected to one
    (``ray.init`` called before), runs Ray Tune's ``Tuner.fit()``, then writes
    ``summary.json``, ``best_config.yaml`` and ``results.csv`` into
    ``<storage>/<name>/``.

    Args:
        spec: A YAML path, a mapping with the spec's keys, or a Spec.
        trainable: A train function that replaces ``spec.trainable``. An existing Ray
            Tune function trainable (one that calls ``ray.tune.report``) works as is.
        num_cpus: CPUs of the embedded local Ray; default all of this machine's.
        num_gpus: GPUs of the embedded local Ray; default the ones Ray detects.
        address: A running Ray cluster to use instead (``auto``, ``host:6379``,
            ``ray://host:10001``).
        replay: ``"EXPERIMENT[:TRIAL]"``: retrain with the hyperparameter schedule that a
            PBT/PB2 trial (default: the best) went through, in a new experiment
            ``<name>-replay`` of one trial, through Ray's ``PopulationBasedTrainingReplay``;
            the spec's search space, searcher and scheduler are not used.
        **overrides: Spec keys to replace, e.g. ``num_samples=4``, ``storage="/tmp/x"``.

    Returns:
        tuner.run.results.TuneResult: ``best_config``, ``best_metrics``,
        ``best_checkpoint``, ``experiment_path``, ``dataframe`` (one row per trial),
        ``errors`` and ``num_errors``. When some trials errored and the others went on,
        a warning naming them is logged (logger ``tuner``) and ``errors`` lists them.

    Raises:
        SpecError: If the spec, the train function, the resources or the experiment
            folder is wrong; raised before Ray starts, with nothing written.
        ExperimentError: A ``replay`` that names no PBT/PB2 experiment or a trial it lacks;
            raised before Ray starts, with nothing written.
        ClusterError, StorageError, ExperimentLocked: If the cluster at ``address``, the
            cloud ``storage`` or the experiment folder cannot be used; like SpecError, an
            :class:`~tuner.errors.InputError`.
        TrialError: If the very first trial failed with a bug in the train function
            before any trial reported a result, so the experiment stopped
            (``failure.abort_on_first_error``; ``tuner run`` exits 1 there). The trial's
            error is chained as ``__cause__``; the experiment's files are written and
            ``err.result`` holds its TuneResult.
        DiskFullError: If the disk holding the experiment filled up (or its quota did):
            the experiment stopped, resumable with ``error.resume_command`` once space
            is freed.
    """
    prepared = prepare(spec, trainable=trainable, num_cpus=num_cpus, num_gpus=num_gpus, address=address,
                       replay=replay, **overrides)
    result = run_prepared(prepared)
    if result.aborted:
        from tuner.errors import TrialError

        aborted = result.aborted
        raise TrialError(f"the first trial, {aborted['trial_id']}, failed before any trial reported a result, so "
                         "the experiment stopped (failure.abort_on_first_error: false turns this off); its error:\n"
                         f"{aborted['traceback']}\ntrial folder: {aborted['path']}",
                         trial_id=aborted["trial_id"], path=aborted["path"], traceback=aborted["traceback"],
                         result=result) from result.aborted_error
    if result.num_errors:
        import logging

        logging.getLogger("tuner").warning(
            "%d of %d trials errored (TuneResult.errors): %s", result.num_errors,
            result.summary["trials"]["total"],
            "; ".join(f"{e['trial_id']}: {e['error']} ({e['path']})" for e in result.errors))
    return result


def _resumable_on_full_disk(run: Callable) -> Callable:
    """Run or resume under a :class:`~tuner.run.reporting.DiskFullWatch`: a full disk ends it
    with one :class:`~tuner.errors.DiskFullError`.

    Wherever the full disk surfaced (a trial's checkpoint, Ray's experiment-state save or
    logger callbacks, a writer thread, tuner's own files), the Tune run stops at once
    (:class:`~tuner.run.reporting.StopOnFullDisk`), :func:`_finish` writes nothing more, and
    the caller gets the file that could not be written and the resume command. Any other
    error goes through unchanged, unless a full disk was noticed before it (then it is
    the full disk's consequence, chained as ``__cause__``).
    """

    @functools.wraps(run)
    def wrapper(prepared: Prepared, *args, **kwargs):
        from tuner.run import reporting
        from tuner.errors import DiskFullError

        with reporting.DiskFullWatch() as watch:
            try:
                return run(prepared, *args, **kwargs)
            except DiskFullError:
                raise
            except Exception as err:
                # After a full disk, a later error is its consequence (the traceback is chained).
                if not watch.note(err) and watch.error is None:
                    raise
                raise _disk_full_error(prepared, watch) from err

    return wrapper


def _disk_full_error(prepared: Prepared, watch):
    """The :class:`~tuner.errors.DiskFullError` for the full disk ``watch`` noticed."""
    import errno

    from tuner.errors import DiskFullError
    from tuner.run.failures import check_state
    from tuner.experiment.storage import display

    resumable = True
    if not prepared.remote:  # a cloud experiment's state is in the bucket, not on this disk
        try:
            check_state(prepared.experiment_path)
        except ExperimentError:
            resumable = False
    path, what = (watch.path, watch.what) if watch.path else (str(prepared.experiment_path), "into ")
    storage = str(prepared.experiment_path.parent)
    inside = os.path.commonpath([storage, os.path.abspath(path)]) == storage
    return DiskFullError(path, display(prepared.location), what=what, storage=storage if inside else None,
                         quota=watch.error.errno == errno.EDQUOT, resumable=resumable)


@_resumable_on_full_disk
def run_prepared(prepared: Prepared, *, echo: Callable[[str], None] | None = None):
    """Run a :class:`Prepared` experiment; see :func:`tune_model`.

    Args:
        prepared: From :func:`prepare`.
        echo: Where to print the TensorBoard hint and the best-trial line (the CLI
            passes ``click.echo``); None prints nothing.

    Raises:
        DiskFullError: If the disk holding the experiment filled up; see
            :func:`_resumable_on_full_disk`.
    """
    before_ray_tune(prepared)
    from ray import tune

    from tuner.run import reporting
    from tuner.search.algorithms import build_scheduler, build_searcher
    from tuner.run.cluster import cluster_resources, link_ray_logs, ray_session
    from tuner.run.failures import ExperimentLock, ExperimentStopper, PlacementGroupReleaser, StateSnapshots
    from tuner.resources.sizing import check_fits, one_live_trial_note, trials_that_fit
    from tuner.search.scheduler_state import KeepsState, SchedulerStateCallback
    from tuner.search.space import ray_num_samples, to_ray_space
    from tuner.run.trainable import build_trainable, checkpoint_config, driver_request, reuse_actors

    spec = prepared.spec
    path = prepared.experiment_path
    fn = prepared.trainable
    started = time.monotonic()
    if prepared.remote and path.exists():
        import shutil

        shutil.rmtree(path)  # a stale mirror: the cloud folder was checked to be empty
    abort = ExperimentStopper(spec.stop, spec.failure.abort_on_first_error, spec.time_budget_s, path / RUN_RECORD,
                              objectives=spec.objectives)
    # The lock first (it creates the folder): a second process refused by it writes nothing.
    with ExperimentLock(path), reporting.log_to_file(path / LOG_FILE), \
            ray_session(prepared.num_cpus, prepared.num_gpus, prepared.python_path, prepared.address) as session_dir:
        save_run_record(prepared)
        if prepared.remote:
            from tuner.experiment.storage import upload

            upload(path, prepared.location, (SPEC_SNAPSHOT, RUN_RECORD))
        if session_dir is None:
            _ship_user_packages(prepared)
        cluster = cluster_resources(prepared.address)
        if prepared.cluster is None:
            check_fits(spec, cluster)
        max_concurrent = spec.max_concurrent_trials
        if spec.resources.distributed:
            # A DDP trial's actor asks for no CPU: cap the drivers at the trials that fit,
            # so that no Train run waits for workers while holding a trial slot.
            fit = trials_that_fit(spec, cluster)
            max_concurrent = min(max_concurrent or fit, fit)
        if echo:
            _echo_where(echo, prepared, "Experiment")
            note = one_live_trial_note(spec, max_concurrent or 0)
            if note:
                echo(f"tuner: note: {note}")
            for line in prepared.warm_start.describe(spec) if prepared.warm_start is not None else []:
                echo(line)  # what the searcher learns from before its first suggestion, as the plan says
        auto = spec.resources.auto_gpu
        basic = spec.search.algorithm in ("grid", "random")
        searcher = build_searcher(spec, 1 if auto else max_concurrent, prepared.warm_start)
        packing = _gpu_auto(prepared, cluster, searcher, basic) if auto else None
        if packing is not None:
            searcher = packing.search_alg
        scheduler = build_scheduler(spec) if prepared.replay is None else _replay_scheduler(prepared)
        ranked = spec.scheduler_objective
        tuner = tune.Tuner(
            tune.with_resources(build_trainable(fn, spec, prepared.location, trial_seed=_fixed_seed(prepared)),
                                driver_request(spec) if packing is None else packing.request),
            param_space=to_ray_space(spec),
            tune_config=tune.TuneConfig(
                # The scheduler's objective: a Ray scheduler compares trials by one metric. An optuna
                # searcher with several objectives keeps its own (tuner.search.algorithms._OptunaSearch).
                metric=ranked.metric if ranked else None,
                mode=ranked.mode if ranked else None,
                search_alg=searcher,
                scheduler=scheduler,
                num_samples=ray_num_samples(spec),
                # A BasicVariantGenerator takes the limit itself (Ray ignores this one for it).
                max_concurrent_trials=None if basic or auto else max_concurrent,
                # No time_budget_s here: the ExperimentStopper keeps the budget, so that a
                # resume can raise it (Ray restores its own TimeoutStopper unchanged).
                reuse_actors=reuse_actors(fn, spec),
                trial_dirname_creator=trial_folder_of,
            ),
            run_config=tune.RunConfig(
                name=spec.name,
                storage_path=spec.storage if prepared.remote else str(path.parent),
                stop=abort,
                progress_reporter=reporting.build_reporter(spec),
                callbacks=[*reporting.build_callbacks(spec, path if prepared.remote else None), abort,
                           reporting.StopOnFullDisk(),
                           # Only DDP trials leave a placement group (its step hook looks at every trial).
                           *([PlacementGroupReleaser(prepared.location)] if spec.resources.distributed else []),
                           # The same scheduler object: it is saved with the experiment, for a resume.
                           *([SchedulerStateCallback(scheduler)] if isinstance(scheduler, KeepsState) else []),
                           # Torn-write snapshots of Ray's state, for a local disk (a cloud put is whole).
                           *([] if prepared.remote else [StateSnapshots(path)]),
                           *([packing.callback] if packing is not None else [])],
                verbose=1 if spec.reporting.cli.enabled else 0,
                log_to_file=True,
                sync_config=artifact_sync_config(),
                failure_config=tune.FailureConfig(max_failures=spec.failure.max_failures,
                                                  fail_fast=spec.failure.fail_fast),
                checkpoint_config=checkpoint_config(fn, spec),
            ),
        )
        grid, watch = _fit(tuner, packing)
        link_ray_logs(session_dir, path)
    aborted = abort.aborted_by.trial_id if abort.aborted_by is not None else None
    return _finish(prepared, grid, started, interrupted=watch.interrupted, aborted_by=aborted, echo=echo)


def artifact_sync_config() -> Any:
    """How Ray copies each trial's working folder into the trial's folder in the experiment.

    A trial's ``stdout`` and ``stderr`` (``log_to_file``) are written in its working folder
    under Ray's session. Ray Tune's ``SyncConfig(sync_artifacts=True)`` copies that folder's
    files with the trial's first result, then at most every ``sync_period`` (Ray's default,
    300 s: the README's "at most every 5 minutes"), and when a function trainable ends; not on
    each checkpoint (``sync_artifacts_on_checkpoint=False``: that copy would block the trial).

    Returns:
        ray.tune.SyncConfig: For the run's ``RunConfig``.
    """
    from ray import tune

    return tune.SyncConfig(sync_artifacts=True, sync_artifacts_on_checkpoint=False)


@dataclass
class _GpuAuto:
    """``gpu: auto`` for one session: the trainable's resource request, the searcher Tune gets (with the
    limit the packer moves) and the callback (:mod:`tuner.resources.gpu_packing`,
    :mod:`tuner.resources.gpu_callback`)."""

    key: str
    request: Any
    search_alg: Any
    callback: Any

    def close(self) -> None:
        from tuner.resources.gpu_packing import unregister

        unregister(self.key)


def _fit(tuner: Any, packing: _GpuAuto | None) -> tuple[Any, _InterruptWatch]:
    """``Tuner.fit()`` under an :class:`_InterruptWatch`; ``gpu: auto``'s packer is forgotten after it, however
    it ends. Returns the ``ResultGrid`` and the watch (``interrupted``)."""
    try:
        with _InterruptWatch() as watch:
            return tuner.fit(), watch
    finally:
        if packing is not None:
            packing.close()


def _gpu_auto(prepared: Prepared, cluster: Any, searcher: Any, basic: bool) -> _GpuAuto:
    """Set up ``gpu: auto``: a :class:`~tuner.resources.gpu_packing.GpuPacker` registered under the experiment's
    folder (continuing from ``gpu_packing.json`` on a resume), a ``ConcurrencyLimiter`` around a
    ``Searcher`` (a ``BasicVariantGenerator`` takes the limit itself), and the Tune callback."""
    from tuner.resources.gpu_callback import PackingCallback
    from tuner.resources.gpu_packing import load_packing, packer_for, register, request_for
    from tuner.search.scheduler_state import console_note

    spec, path = prepared.spec, prepared.experiment_path
    packer = packer_for(spec, cluster, note=console_note if spec.reporting.cli.enabled else None,
                        read=prepared.address is None and len(cluster.nodes) <= 1)
    saved = load_packing(path)
    if saved:
        packer.restore(saved)
    key = str(path)
    register(key, packer)
    search_alg = searcher
    if searcher is not None and not basic:
        from ray.tune.search import ConcurrencyLimiter

        # Tune reads the limit once for its pending trials: start at the most that may ever live.
        search_alg = ConcurrencyLimiter(searcher, max_concurrent=max(1, packer.top * max(packer.gpus, 1)))
    callback = PackingCallback(key, search_alg, path, spec.resources.cpu, spec.max_concurrent_trials, spec.oom_backoff)
    return _GpuAuto(key, request_for(key, spec.resources.cpu), search_alg, callback)


def _fixed_seed(prepared: Prepared) -> int | None:
    """The seed of every trial of a replay (the replayed trial's); None: each trial its own."""
    return prepared.replay.seed if prepared.replay is not None else None


def _replay_scheduler(prepared: Prepared):
    """Ray's ``PopulationBasedTrainingReplay`` on the replayed trial's policy, copied into the
    new experiment (``replay_policy.txt``) so that the replay's folder says what it replayed.

    Each config change drops the STOP that Ray's replay leaves behind
    (:func:`tuner.adapters.ray_internals.drop_replay_stale_stop`), so the trial trains the whole schedule.
    """
    from ray.tune.schedulers import PopulationBasedTrainingReplay, TrialScheduler

    from tuner.experiment.files import atomic_write
    from tuner.adapters.ray_internals import drop_replay_stale_stop

    class WholeReplay(PopulationBasedTrainingReplay):
        """Ray's replay, without the STOP its config changes leave behind."""

        def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
            decision = super().on_trial_result(tune_controller, trial, result)
            if decision == TrialScheduler.NOOP:  # a config change: the trial was paused
                drop_replay_stale_stop(tune_controller, trial)
            return decision

    assert prepared.replay is not None
    policy = prepared.experiment_path / REPLAY_POLICY
    atomic_write(policy, prepared.replay.policy)
    if prepared.remote:
        from tuner.experiment.storage import upload

        upload(prepared.experiment_path, prepared.location, (REPLAY_POLICY,))
    return WholeReplay(str(policy))


def before_ray_tune(prepared: Prepared) -> None:
    """What a run and a resume do before Ray Tune is imported and the Tuner is built.

    Quiet the console (before Ray Tune is imported), record Ray's callback usage tag
    without importing its integrations, and ship a file-path trainable's module by value
    (workers cannot import ``tuner_user_*`` modules by name).
    """
    from tuner.run import reporting
    from tuner.search.algorithms import quiet_schedulers, quiet_searchers
    from tuner.adapters.ray_internals import lean_callback_usage_tag

    reporting.prepare_console()
    quiet_searchers(prepared.spec.search.algorithm)  # a resumed searcher is unpickled, not built
    quiet_schedulers(prepared.spec.scheduler.type)
    lean_callback_usage_tag()
    module = sys.modules.get(getattr(prepared.trainable, "__module__", "") or "")
    if module is not None and module.__name__.startswith("tuner_user_"):
        from ray import cloudpickle

        cloudpickle.register_pickle_by_value(module)


def _ship_user_packages(prepared: Prepared) -> None:
    """On a Ray that this process did not start (the user's ``ray.init()``, a cluster), pickle
    the trainable's own packages by value.

    tuner cannot put their folders on the workers' ``PYTHONPATH`` there (a job's
    ``runtime_env`` is fixed when Ray starts), and workers unpickle a trainable by module
    name: a package reached only through this process's ``sys.path`` would fail to import
    in every trial ("No module named ..."). Inside a Ray Job the job's working_dir reaches
    every node already.
    """
    from ray import cloudpickle

    from tuner.adapters.ray_internals import RAY_JOB_CONFIG
    from tuner.spec import user_packages

    if RAY_JOB_CONFIG in os.environ:
        return
    for name in user_packages(prepared.trainable):
        module = sys.modules.get(name)
        if module is not None and name not in ("tuner", "ray"):
            cloudpickle.register_pickle_by_value(module)


def _finish(prepared: Prepared, grid, started: float, *, interrupted: bool, aborted_by: str | None = None,
            echo: Callable[[str], None] | None = None):
    """After ``Tuner.fit()``: collect and write the results, sync a cloud mirror, print the best trial.

    Args:
        prepared: The run or resume.
        grid: The ``ray.tune.ResultGrid``.
        started: ``time.monotonic()`` when the session began (for the wall time, seconds).
        interrupted: Whether Ctrl-C/SIGTERM ended the session.
        aborted_by: The trial id whose first error aborted the experiment, if any.
        echo: Where to print; None prints nothing.

    Returns:
        tuner.run.results.TuneResult.

    Raises:
        DiskFullError: When a full disk was noticed during the session; nothing is
            written then (the files would only be incomplete, and the disk is full).
    """
    from tuner.run.reporting import DiskFullWatch
    from tuner.run.results import best_line, collect_results

    watch = DiskFullWatch.active
    if watch is not None and watch.error is not None:
        raise _disk_full_error(prepared, watch)
    spec, path = prepared.spec, prepared.experiment_path
    spent = _take_budget_marker(path)
    _sync_down(prepared)
    result = collect_results(spec, grid, path, time.monotonic() - started, interrupted=interrupted and not spent,
                             aborted_by=aborted_by, location=prepared.location if prepared.remote else None,
                             trial_seed=_fixed_seed(prepared))
    _sync_up(prepared)
    if echo:
        echo(best_line(spec, result))
        if spent:
            echo(_budget_hint(spec, prepared))
    return result


def _echo_where(echo: Callable[[str], None], prepared: Prepared, what: str) -> None:
    from tuner.run import reporting

    echo(f"{what} {prepared.spec.name}: {_where(prepared)}")
    if prepared.renamed_from:
        echo(f"tuner: note: {_rename_note(prepared)}")
    echo(f"TensorBoard: {'after the run, ' if prepared.remote else ''}"
         f"{reporting.tensorboard_hint(prepared.experiment_path)}")


def _sync_down(prepared: Prepared) -> None:
    """A cloud experiment: copy what Ray Tune uploaded (but checkpoints) into the local mirror."""
    if prepared.remote:
        from tuner.experiment.storage import download

        download(prepared.location, prepared.experiment_path)


def _sync_up(prepared: Prepared) -> None:
    """A cloud experiment: upload tuner's own files from the local mirror, beside Ray's."""
    if prepared.remote:
        from tuner.experiment.storage import upload

        events = tuple(p.name for p in prepared.experiment_path.glob(EVENTS_GLOB))  # HParams summary
        upload(prepared.experiment_path, prepared.location, TUNER_FILES + events)


def _take_budget_marker(path: Path) -> bool:
    """Whether the ExperimentStopper ended this session on the time budget (marker removed)."""
    marker = path / BUDGET_SPENT
    if marker.exists():
        marker.unlink()
        return True
    return False


def _budget_hint(spec: Spec, prepared: Prepared) -> str:
    from tuner.experiment.storage import display

    return (f"tuner: the time budget of {spec.time_budget_s:g} s is spent. To go on, raise time_budget_s in the "
            f"spec and run: python -m tuner resume {display(prepared.location)}")


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
        "trainable": spec.trainable,
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
                              f"tuner.run.engine.prepare_resume({str(path)!r}, trainable=...)).", str(path))
    source = spec or (record.get("spec_source") if record.get("spec_source") and
                      Path(record["spec_source"]).is_file() else None)
    current = load_spec(source) if source else saved
    old, new = saved.model_dump(mode="json"), current.model_dump(mode="json")
    changed = [f for key in _RESUME_FIXED for f in _changed_fields(old.get(key), new.get(key), key + ".")]
    for key in ("num_samples", "time_budget_s"):
        before, after = (float("inf") if v is None else v for v in (old.get(key), new.get(key)))
        if after < before:
            changed.append(f"{key} ({old.get(key)} -> {new.get(key)}: a budget may grow on resume, not shrink)")
    if changed:
        raise SpecError([SpecIssue("", f"the spec changed since this experiment started, so it cannot be resumed: "
                                   f"{', '.join(changed)}. Undo those changes, or start a new experiment "
                                   "with `tuner run --name NEW`.")], str(source))
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


@_resumable_on_full_disk
def resume_prepared(prepared: Prepared, *, resume_errored: bool = False, restart_errored: bool = False,
                    echo: Callable[[str], None] | None = None):
    """Resume a stopped experiment with ``Tuner.restore``; see :func:`prepare_resume`.

    Finished trials stay as they are; unfinished ones continue from their latest
    checkpoints; the searcher and scheduler state come back from the experiment
    folder (the scheduler's: :mod:`tuner.search.scheduler_state`, which says when it cannot).
    ``resume_errored`` continues errored trials from their checkpoints, ``restart_errored``
    starts them over. A trial whose recorded checkpoint is gone goes on from its newest
    checkpoint that exists, with a note
    (:func:`tuner.run.failures.fall_back_to_existing_checkpoints`).

    Returns:
        tuner.run.results.TuneResult for the whole experiment.

    Raises:
        DiskFullError: If the disk is still (or again) full; see :func:`_resumable_on_full_disk`.
    """
    before_ray_tune(prepared)
    from ray import tune

    from tuner.run import reporting
    from tuner.run.cluster import link_ray_logs, ray_session
    from tuner.run.failures import (ExperimentLock, drop_stale_staging, fall_back_to_existing_checkpoints,
                                    reopen_searcher, restore_state_snapshot)
    from tuner.search.scheduler_state import saved_state_note
    from tuner.experiment.storage import display
    from tuner.search.space import presets, to_ray_space
    from tuner.run.trainable import build_trainable, driver_request

    spec, path = prepared.spec, prepared.experiment_path
    started = time.monotonic()
    with ExperimentLock(path), reporting.log_to_file(path / LOG_FILE), \
            ray_session(prepared.num_cpus, prepared.num_gpus, prepared.python_path, prepared.address) as session_dir:
        if session_dir is None:
            _ship_user_packages(prepared)
        restored_from, set_aside = ([], []) if prepared.remote else restore_state_snapshot(path)
        old = prepared.resumed_num_samples or spec.num_samples
        extra = None
        if spec.conditional and spec.search.algorithm in ("grid", "random") and spec.num_samples > old:
            extra = presets(spec, count=spec.num_samples - old, start=old)
        reopen_searcher(path, old, spec.num_samples, extra)
        fell_back = fall_back_to_existing_checkpoints(path, prepared.location)
        drop_stale_staging(path)
        save_run_record(prepared)  # the spec as resumed, and the time budget the stopper reads
        if prepared.remote:
            from tuner.experiment.storage import upload

            upload(path, prepared.location)  # the reopened searcher state and the run record
        if echo:
            echo(f"Resuming experiment {spec.name}: {display(prepared.location)}"
                 + (f" (local mirror: {path})" if prepared.remote else ""))
            if restored_from:
                echo(f"tuner: the newest saved state was unreadable (cut short by a kill); resumed from the "
                     f"snapshot {', '.join(restored_from)}")
            if set_aside:
                echo(f"tuner: note: the saved state {', '.join(set_aside)} was unreadable and has no snapshot; "
                     f"it is kept aside as {CORRUPT_SUFFIX}, and what it held starts afresh")
            lost = saved_state_note(path, spec.scheduler.type)
            if lost:
                echo(f"tuner: note: {lost}")
        for note in fell_back:
            if echo:
                echo(f"tuner: note: {note}")
            else:
                import logging

                logging.getLogger("tuner").warning(note)
        packing = None
        if spec.resources.auto_gpu:  # the callback and the searcher's limiter come back from Ray's saved state
            from tuner.run.cluster import cluster_resources

            packing = _gpu_auto(prepared, cluster_resources(prepared.address), None, True)
        tuner = tune.Tuner.restore(
            prepared.location,
            trainable=tune.with_resources(build_trainable(prepared.trainable, spec, prepared.location),
                                          driver_request(spec) if packing is None else packing.request),
            resume_unfinished=True,
            resume_errored=resume_errored,
            restart_errored=restart_errored,
            param_space=to_ray_space(spec),
        )
        grid, watch = _fit(tuner, packing)
        link_ray_logs(session_dir, path)
    return _finish(prepared, grid, started, interrupted=watch.interrupted, echo=echo)
