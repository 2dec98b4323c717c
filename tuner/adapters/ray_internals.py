"""Ray internals that tuner touches, each behind one name here, checked against Ray 2.60.

Ray Tune offers no public hook for these; each entry says what it reaches and why tuner
needs it. No other module of tuner touches a private name of Ray (a ``_``-name of Ray's
modules, classes or objects, ``ray._private``, ``ray.tune.execution``, ``ray.train.v2``,
the keys of the state Ray pickles): they call these instead. A Ray upgrade that moves one
fails ``tests/test_ray_internals.py`` (which checks every entry here against the
installed Ray, and that no other module reaches past them) instead of a user's run.

Importing this module imports no Ray (``tuner report`` and ``tuner validate`` use it
without Ray); each entry imports what it needs when called.
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

from tuner.experiment.layout import CHECKPOINT_PREFIX

__all__ = [
    "CHECKED_RAY_VERSION",
    # the trial's process
    "tune_session", "guard_session_report", "report_train_checkpoints", "trial_id_in_config", "in_tune_session",
    "trainable_config", "trial_creation_index", "TRAIN_CHECKPOINT_DIR",
    "placement_group", "orphaned_placement_groups", "train_reports_pending", "lean_torch_trainer", "lean_train_env",
    "TRAIN_HEALTH_CHECK_INTERVAL_ENV",
    "TRAIN_PREEMPTION_WATCHER_ENV",
    # Ray Tune's trials, experiment state and results
    "trial_dir_name", "name_trial_dir", "experiment_fs_path", "result_grid_trials", "saved_trials",
    "saved_stopper", "tune_run_catches_signals", "lean_callback_usage_tag", "RESULT_CHECKPOINT_KEY",
    "TUNE_CHECKPOINT_DIR", "saved_trial_entries", "SavedCheckpoints", "experiment_staging_path",
    # searcher state that tuner rewrites for a resume
    "reopen_basic_variant_state", "reopen_search_generator_state", "bohb_state", "save_searcher_state",
    "optuna_trial_to_tell", "optuna_study", "bohb_config_generator",
    # schedulers and the Tune controller
    "hyperband_bracket", "hyperband_knows", "finished_bracket_trials", "hyperband_unpause", "scheduler_time_attr",
    "controller_trials", "controller_stop_trial", "controller_set_status", "is_trial", "is_checkpoint_in_flight",
    "drop_replay_stale_stop",
    # gpu: auto (tuner/resources/gpu_packing.py): the searcher's concurrency limit and a retried trial's resources
    "set_concurrency_limit", "set_trial_resources",
    "pbt_population", "pbt_perturbations", "watch_skipped_exploits", "PBTCloneSourceHooks", "pbt_clone_sources",
    "trial_checkpoint_metrics", "drop_pbt_clone_source",
    # PBT's perturbation logs (pbt_global.txt, pbt_policy_<trial id>.txt)
    "pbt_log_rows", "pbt_orig_tag", "saved_trial_initial_config",
    # the order Ray created the trials in (tuner report's hypervolume against trial count)
    "saved_trial_creation_index",
    # reporters and logger callbacks: Ray's private hooks under tuner's names
    "CLIReporterHooks", "TBXLoggerHooks", "WandbLoggerHooks", "StagedResultFileHooks",
    # the Ray process, the cluster and its jobs
    "ray_started_here", "nvidia_gpu_count", "refresh_auth_mode", "LOCAL_RAY_SYSTEM_CONFIG", "local_ray_options",
    "RAY_START_TIMED_OUT",
    "GCS_CONNECT_TRIES_ENV",
    "HEAD_RESOURCE", "RAY_JOB_CONFIG", "JOBS_CLIENT_LOGGERS",
]

#: The Ray version every entry here was read against (pyproject.toml allows Ray 2.60 only).
CHECKED_RAY_VERSION = "2.60"


# --------------------------------------------------------------------------- the trial's process


def tune_session() -> Any:
    """The Ray session of the function trainable running in this process, or None.

    ``ray.train._internal.session.get_session`` (Ray 2.60): ``ray.tune.report``, and a
    function trainable's returned dict, go through this object's ``report``, which
    :func:`guard_session_report` wraps to refuse a NaN metric before it leaves the trial.
    """
    from ray.train._internal.session import get_session

    return get_session()


def guard_session_report(check: Callable[[dict], dict]) -> None:
    """Make this trial's Ray session report ``check(metrics)`` in place of each ``metrics``.

    Replaces the ``report`` method of the :func:`tune_session` object (Ray 2.60's
    ``_TrainSession.report(metrics, checkpoint=...)``, which ``ray.tune.report`` and a
    returned dict go through), so that tuner's NaN guard and extra metrics
    (:func:`tuner.run.trainable._guard_reports`) cover a raw Ray Tune trainable: ``check`` raises
    to refuse a result, or returns the metrics to report (a new dict; the caller's is left as
    it was). The session is per actor and kept between trials of a reused actor: the original
    ``report`` is kept on it (``_tuner_unguarded_report``) and wrapped once, with the latest
    ``check``. Nothing happens outside a trial.
    """
    session = tune_session()
    if session is None:
        return
    original = getattr(session, "_tuner_unguarded_report", None) or session.report

    def report(metrics, *args, **kwargs):
        return original(check(metrics), *args, **kwargs)

    session._tuner_unguarded_report = original
    session.report = report


def report_train_checkpoints(filesystem: Any = None) -> None:
    """Make the Ray Train checkpoints of this DDP trial's driver Tune checkpoints too.

    Ray 2.60's ``ray.tune.integration.ray_train.TuneReportCallback`` hands Tune only the
    metrics of a Train report, with the checkpoint's path under ``checkpoint_path``
    (``CHECKPOINT_PATH_KEY``), and the driver's session reports them through
    ``_TrainSession.report(metrics)``: the Tune trial then has no checkpoint, and PBT/PB2 cannot
    clone it. This wraps the session's ``report`` (as :func:`guard_session_report` does) so that
    such metrics are reported with ``Checkpoint(path, filesystem)``, which Tune copies into the
    trial's folder. Once per session; nothing happens outside a trial.

    Args:
        filesystem: The ``pyarrow.fs`` filesystem of the experiment's storage; None for a local one.
    """
    from ray.tune import Checkpoint
    from ray.tune.integration.ray_train import CHECKPOINT_PATH_KEY

    session = tune_session()
    if session is None or getattr(session, "_tuner_reports_train_checkpoints", False):
        return
    original = session.report

    def report(metrics, checkpoint=None):
        path = metrics.get(CHECKPOINT_PATH_KEY) if checkpoint is None else None
        if path:
            checkpoint = Checkpoint(path, filesystem=filesystem) if filesystem is not None else Checkpoint(path)
        return original(metrics, checkpoint=checkpoint)

    session._tuner_reports_train_checkpoints = True
    session.report = report


def trial_id_in_config(config: Any) -> str | None:
    """The trial id Ray Tune passes a class trainable inside its config, or None.

    Ray 2.60's ``Trainable.__init__``/``reset`` pop ``ray.tune.result.TRIAL_INFO``
    (``"__trial_info__"``, a ``ray.tune.experiment.trial._TrialInfo`` with ``.trial_id``) from
    the config; tuner reads it first, to name the trial's folder while ``setup`` runs and to
    give the trial its seed.
    """
    from ray.tune.result import TRIAL_INFO

    info = config.get(TRIAL_INFO) if isinstance(config, dict) else None
    return getattr(info, "trial_id", None)


def trainable_config(config: Any) -> Any:
    """A class trainable's config without the keys Ray adds for the trainable itself.

    Ray 2.60 passes ``ray.tune.result.TRIAL_INFO``, ``STDOUT_FILE`` and ``STDERR_FILE``
    (``"__trial_info__"``, ``"__stdout_file__"``, ``"__stderr_file__"``) in the config it
    gives ``Trainable.__init__``/``reset``, which pop them; tuner reads the config before
    that (:func:`tuner.search.seeds.seed_of_trial`, for the trial's seed).
    """
    from ray.tune.result import STDERR_FILE, STDOUT_FILE, TRIAL_INFO

    if not isinstance(config, dict):
        return config
    return {k: v for k, v in config.items() if k not in (TRIAL_INFO, STDOUT_FILE, STDERR_FILE)}


#: Ray 2.60's trial id from random and grid search: ``<5 hex digits>_<creation counter, 5+ digits>``.
_INDEXED_TRIAL_ID = re.compile(r"^[0-9a-f]{5}_(\d{5,})$")


def trial_creation_index(trial_id: str) -> int | None:
    """The creation index that Ray 2.60 writes into a trial id, or None when the id has none.

    ``BasicVariantGenerator`` (random and grid search, and so the populations of PBT and
    PB2, and a ``--replay``) names its trials ``<prefix>_<counter>``: a 5-hex-digit prefix
    per generator (``str(uuid.uuid1().hex)[:5] + "_"``, kept in its saved state, so trials
    that a resume adds share it) and the counter as ``%05d``, from 0
    (``basic_variant._TrialIterator.create_trial``). The trial keeps its id for life: a PBT
    exploit changes its config, not its id, and a resume restores the ids. A searcher's
    trials (``SearchGenerator``: ``bohb``, ``optuna``) get ``Trial.generate_id()``, 8 random
    hex digits, which carry no index: None. The trial's process knows its id
    (``ray.tune.get_context().get_trial_id()``), so it knows its index. Imports no Ray.
    """
    match = _INDEXED_TRIAL_ID.match(trial_id)
    return int(match.group(1)) if match else None


def in_tune_session() -> bool:
    """Whether this process runs a Ray Tune trial (not a Ray Train worker, not plain Python).

    ``ray.tune.trainable.trainable_fn_utils._in_tune_session`` (Ray 2.60): the check Ray's
    own ``TuneReportCallback`` uses; asking ``tune.get_context()`` for a trial id instead
    logs a warning outside a trial. Used by :func:`tuner.trial.in_tune`.
    """
    from ray.tune.trainable.trainable_fn_utils import _in_tune_session

    return bool(_in_tune_session())


#: The name Ray Train gives a checkpoint folder (``checkpoint_<date>_<time>``, not the
#: ``checkpoint_tmp_*`` snapshots): Ray 2.60's ``ray.train.v2._internal.execution.storage.
#: StorageContext.make_default_checkpoint_dir_name``. :func:`tuner.run.trainable._newest_checkpoint`
#: finds a DDP trial's newest checkpoint by it after an out-of-memory back-off.
TRAIN_CHECKPOINT_DIR = re.compile(rf"{CHECKPOINT_PREFIX}\d{{4}}-\d\d-\d\d_")


def placement_group(pg_id: str) -> Any:
    """The ``ray.util.placement_group.PlacementGroup`` of a hex placement group id.

    Ray has no public way from an id back to its group: this builds it from
    ``ray._raylet.PlacementGroupID`` (Ray 2.60), so that
    :func:`tuner.run.trainable.release_placement_groups` can remove the group that Ray Train
    made for a DDP trial's workers (rank 0 records its ``id.hex()``).
    """
    from ray._raylet import PlacementGroupID
    from ray.util.placement_group import PlacementGroup

    return PlacementGroup(PlacementGroupID(bytes.fromhex(pg_id)))


def orphaned_placement_groups() -> list[str]:
    """The hex ids of this job's placement groups that outlived the actor that made them.

    A placement group an actor makes (Ray Train V2's controller makes one for each worker
    group it starts) is not removed when that actor dies: its lifetime is the job's. Ray
    Train's own ``PlacementGroupCleaner`` watches the controller through the State API
    (which needs the dashboard); here the GCS's own table says it: Ray 2.60 keeps
    ``creator_actor_id`` and ``creator_actor_dead`` in each ``PlacementGroupTableData``
    (``ray._private.state.state``'s accessor, ``get_placement_group_table()``), which
    ``ray.util.placement_group_table`` leaves out. A group the driver made has no creator
    actor (a nil id, marked dead) and is never listed; nor is a detached one, nor another
    job's.

    Returns:
        The ids of the pending, prepared, created or rescheduling groups whose creator actor
        is dead.
    """
    import ray
    from ray._private.state import state
    from ray.core.generated import gcs_pb2

    table_data: Any = gcs_pb2.PlacementGroupTableData  # type: ignore[attr-defined]  # generated protobuf
    live = {table_data.PENDING, table_data.PREPARED, table_data.CREATED, table_data.RESCHEDULING}
    job = bytes.fromhex(ray.get_runtime_context().get_job_id())
    out = []
    for raw in state._connect_and_get_accessor().get_placement_group_table():
        pg = table_data.FromString(raw)
        nil_creator = not pg.creator_actor_id or set(pg.creator_actor_id) == {0xFF}
        if (pg.state in live and pg.creator_actor_dead and not nil_creator and not pg.is_detached
                and pg.creator_job_id == job):
            out.append(pg.placement_group_id.hex())
    return out


def train_reports_pending() -> int:
    """Reports this Ray Train V2 worker made that the controller has not taken yet (0 outside one).

    ``ray.train.report`` only queues a report on the worker
    (``ray.train.v2._internal.execution.context.get_train_context().execution_context.result_queue``,
    Ray 2.60); the controller takes it at its next poll of the worker group, and consolidates a
    round once every rank's report is in. A worker that fails before then loses the round: the
    group restarts from the checkpoint before it. The tests' DDP trainables wait for 0 before a
    simulated crash (the crash lands after its checkpoint, as the tests mean it to).
    """
    try:
        from ray.train.v2._internal.execution.context import get_train_context

        return get_train_context().execution_context.result_queue.unfinished_tasks
    except Exception:  # noqa: BLE001 - not in a Ray Train V2 worker
        return 0


#: Ray Train V2's controller reads these environment variables (``ray.train.v2._internal.constants``,
#: Ray 2.60), and passes the ones set in the process that calls ``TorchTrainer.fit`` on to the
#: controller and the workers. tuner sets them in a DDP trial's driver unless the user did
#: (:func:`lean_train_env`).
TRAIN_HEALTH_CHECK_INTERVAL_ENV = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"
TRAIN_PREEMPTION_WATCHER_ENV = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"


def lean_train_env(single_node: bool) -> dict[str, str]:
    """Ray Train controller settings for a DDP trial, where the user has not set them.

    - ``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=0.5`` (Ray's default 2 s): the controller polls the
      workers this often, so a finished train function, a report and a failed worker are seen
      up to 2 s sooner. A trial's start and end each wait for one poll.
    - ``RAY_TRAIN_ENABLE_PREEMPTION_WATCHER=0`` on a one-node Ray only: the watcher is an actor
      per worker group (a Python process of its own) that watches other nodes being drained;
      with one node there are none, and losing it ends the whole run anyway.

    Args:
        single_node: Whether the Ray cluster has one node.

    Returns:
        The variables to set (name to value), leaving out any already in ``os.environ``.
    """
    import os

    wanted = {TRAIN_HEALTH_CHECK_INTERVAL_ENV: "0.5"}
    if single_node:
        wanted[TRAIN_PREEMPTION_WATCHER_ENV] = "0"
    return {k: v for k, v in wanted.items() if k not in os.environ}


def lean_torch_trainer(single_node: bool) -> type:
    """``ray.train.torch.TorchTrainer`` without the controller work a tuner DDP trial does not use.

    Two controller callbacks each start an actor, so a Python process, for every worker
    group (Ray 2.60, ``DataParallelTrainer._create_default_callbacks``):

    - ``DatasetsCallback`` starts a ``DatasetManager`` actor, which imports Ray Data, even
      when the trainer has no ``datasets`` (tuner's never has: the train function loads its
      own data). Left out only when there are no datasets.
    - ``PlacementGroupCleanerCallback`` starts a detached ``PlacementGroupCleaner`` that
      removes the workers' placement group if the controller dies. tuner does that itself
      (:class:`tuner.run.failures.PlacementGroupReleaser`, from the id rank 0 records), also
      where Ray's cleaner gives up (it asks the State API, which fails with several Ray
      instances on one machine).

    On a one-node Ray, the fixed scaling policy (``FixedScalingPolicy``, the one Ray builds
    for a ``ScalingConfig`` without elasticity) also leaves out its resource requests to
    Ray Data's autoscaling coordinator: the first request starts that actor (another
    process, which imports Ray Data), and the controller waits for each request and each
    cancel (up to 5 s each; ``AUTOSCALING_REQUESTS_GET_TIMEOUT_S``). They ask an autoscaler
    for nodes, and a one-node Ray has no autoscaler to ask.

    Everything else (the controller, its failure handling, the process group, checkpoints,
    the report path to Tune) is Ray Train's own.

    Args:
        single_node: Whether the Ray cluster has one node.

    Returns:
        A subclass of ``TorchTrainer``, taking the same arguments.
    """
    from ray.train.torch import TorchTrainer
    from ray.train.v2._internal.callbacks import DatasetsCallback
    from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback
    from ray.train.v2._internal.execution.scaling_policy import FixedScalingPolicy

    class OneNodeScalingPolicy(FixedScalingPolicy):
        """Ray Train's fixed scaling policy, without its resource requests to the autoscaler."""

        def after_controller_start(self, train_run_context):
            pass

        def _maybe_send_resource_request(self):
            pass

    class LeanTorchTrainer(TorchTrainer):
        def _create_default_callbacks(self):
            unused: tuple[type, ...] = (PlacementGroupCleanerCallback,)
            if not self.datasets:
                unused += (DatasetsCallback,)
            return [cb for cb in super()._create_default_callbacks() if not isinstance(cb, unused)]

        def _initialize_and_run_controller(self, **controller_init_kwargs):
            policy = controller_init_kwargs.get("scaling_policy")
            if single_node and type(policy) is FixedScalingPolicy:
                controller_init_kwargs["scaling_policy"] = OneNodeScalingPolicy(self.scaling_config)
            return super()._initialize_and_run_controller(**controller_init_kwargs)

    return LeanTorchTrainer


# --------------------------------------------------------------------------- Tune's trials, state and results


def trial_dir_name(trial: Any) -> str | None:
    """A Ray Tune ``Trial``'s folder name in the experiment, or None before Ray named it.

    ``Trial.storage`` (a ``ray.train._internal.storage.StorageContext`` in Ray 2.60)
    ``.trial_dir_name``. Used by :class:`tuner.run.failures.PlacementGroupReleaser`.
    """
    return trial.storage.trial_dir_name


def name_trial_dir(trial: Any) -> None:
    """Give a trial that Ray never started its folder name (``Trial.init_local_path``).

    Ray 2.60 builds the ``ResultGrid`` from every trial's folder, and raises ("Should not
    access trial_fs_path without setting trial_dir_name") for a trial the searcher had
    just created when a stop ended the experiment; tuner's
    ``ExperimentStopper.on_experiment_end`` names them first.
    """
    if not trial.storage.trial_dir_name:
        trial.init_local_path()


def experiment_fs_path(trial: Any) -> str | None:
    """The experiment folder of a trial, as Ray Tune stores it, or None for an object without one.

    ``Trial.storage.experiment_fs_path`` (Ray 2.60). The table's ``Experiment folder`` line
    and the progress line's time budget (:mod:`tuner.run.console`).
    """
    storage = getattr(trial, "storage", None)
    return storage.experiment_fs_path if storage is not None else None


def result_grid_trials(grid: Any) -> list | None:
    """The ``Trial`` objects (with their status) behind a ``ResultGrid``, or None.

    Ray 2.60 keeps them on ``ResultGrid._experiment_analysis.trials``; a ``Result`` has no
    status. :func:`tuner.run.results._statuses` reads them (and falls back without them).
    """
    return getattr(getattr(grid, "_experiment_analysis", None), "trials", None)


def saved_trials(state: Any) -> list[dict]:
    """The trials of a parsed ``experiment_state-*.json``, as Ray saved them.

    Ray 2.60's ``TuneController.save_to_dir`` writes ``trial_data``: a list of
    ``[trial JSON text, runtime metadata]``; each trial's JSON holds ``trial_id``,
    ``status``, ``config``, ``relative_logdir`` ... Items that do not parse are left out.
    Read by :mod:`tuner.run.failures` (the trials a resume goes on with) and
    :mod:`tuner.report` (without Ray).
    """
    import json

    out = []
    for item in (state or {}).get("trial_data", []) if isinstance(state, dict) else []:
        try:
            trial = json.loads(item[0]) if isinstance(item, list) and item and isinstance(item[0], str) else {}
        except ValueError:
            continue
        out.append(trial if isinstance(trial, dict) else {})
    return out


def saved_trial_entries(state: dict) -> list:
    """The trials of a parsed ``experiment_state-*.json`` as Ray saved them: its ``trial_data`` list
    itself, one ``[trial JSON text, run metadata JSON text]`` per trial (Ray 2.60's
    ``TuneController.save_to_dir``), for :func:`tuner.run.failures.fall_back_to_existing_checkpoints`
    to rewrite an entry's run metadata in place (:class:`SavedCheckpoints`). Empty when it has none.
    """
    entries = state.get("trial_data") if isinstance(state, dict) else None
    return entries if isinstance(entries, list) else []


def saved_stopper(state: dict) -> Any:
    """The stopper that a parsed ``experiment_state-*.json`` holds, unpickled.

    Ray 2.60's ``TuneController`` saves its ``__getstate__`` as ``runner_data``, the
    stopper under ``_stopper`` in Ray's JSON encoding (``TuneFunctionEncoder``, cloudpickle
    inside). Only for tuner's own experiment folders (the pickle is trusted): tuner's
    :func:`tuner.run.failures.time_budget_used` reads the budget its ``ExperimentStopper`` used.

    Raises:
        Exception: Whatever Ray's decoder raises for an older or foreign state.
    """
    import json

    from ray.tune.utils.serialization import TuneFunctionDecoder

    stopper = state.get("runner_data", {}).get("_stopper")
    return json.loads(json.dumps(stopper), cls=TuneFunctionDecoder, allow_cloudpickle=True)


#: The key of a result that names the checkpoint reported with it (Ray 2.60's
#: ``ray.train.constants.CHECKPOINT_DIR_NAME``), in each line of a trial's ``result.json``.
RESULT_CHECKPOINT_KEY = "checkpoint_dir_name"
#: The name of a Tune checkpoint folder in a trial's folder, ``checkpoint_000003`` (Ray 2.60's
#: ``ray.train._internal.storage.StorageContext._make_checkpoint_dir_name``: the trial's 0-based count
#: of checkpoints).
TUNE_CHECKPOINT_DIR = re.compile(rf"^{CHECKPOINT_PREFIX}\d{{6}}$")


class SavedCheckpoints:
    """A trial's checkpoints as an experiment state records them, to be pointed elsewhere.

    Ray 2.60 saves each trial as ``[trial JSON, run metadata JSON]`` in ``trial_data``
    (:func:`saved_trial_entries`); the run metadata
    (``ray.tune.trainable.metadata._TrainingRunMetadata``, Ray's JSON encoding with
    cloudpickle inside) holds the trial's ``_CheckpointManager``: its kept checkpoints
    (``_checkpoint_results``, best last) and the latest (``_latest_checkpoint_result``), each a
    ``_TrainingResult`` of a ``Checkpoint`` and the metrics reported with it. A resumed trial
    restores the latest (``Trainable.restore`` takes ``training_iteration`` and
    ``time_total_s`` from its metrics); under PBT/PB2 the latest may be another trial's (an
    exploit sets it). The trial JSON's ``storage`` (a ``StorageContext``) gives the trial's own
    folder as it was recorded, which a restore maps to the folder's place now
    (``Trial.set_storage``). :func:`tuner.run.failures.fall_back_to_existing_checkpoints` points
    the latest at a checkpoint that still exists. Only for tuner's own experiment folders (the
    pickles are trusted).

    Args:
        entry: One ``trial_data`` entry; :meth:`point_at` rewrites its run metadata in place.
    """

    def __init__(self, entry: list):
        from ray.tune.trainable.metadata import _TrainingRunMetadata

        self._entry = entry
        self._meta = _TrainingRunMetadata.from_json_state(entry[1])
        self._manager = self._meta.checkpoint_manager
        self._storage: Any = None

    def _trial_storage(self) -> Any:
        if self._storage is None:
            from ray.tune.utils.serialization import _loads_with_cloudpickle

            self._storage = _loads_with_cloudpickle(self._entry[0])["storage"]
        return self._storage

    @staticmethod
    def _split(result: Any) -> tuple[str, str]:
        folder, _, name = result.checkpoint.path.rstrip("/").rpartition("/")
        return folder, name

    def _own(self, result: Any) -> bool:
        return self._split(result)[0] == self._trial_storage().trial_fs_path.rstrip("/")

    def _latest(self) -> Any:
        return self._manager.latest_checkpoint_result if self._manager is not None else None

    @property
    def latest(self) -> str | None:
        """The folder name of the checkpoint a resume restores, or None."""
        latest = self._latest()
        return self._split(latest)[1] if latest is not None else None

    def latest_exists(self, own_present: set[str]) -> bool:
        """Whether the checkpoint a resume restores exists (True without one).

        Args:
            own_present: The checkpoint folders in the trial's own folder now (where a restore
                looks for the trial's own checkpoints, the folder moved or not).
        """
        import pyarrow.fs

        latest = self._latest()
        if latest is None:
            return True
        if self._own(latest):
            return self._split(latest)[1] in own_present
        checkpoint = latest.checkpoint  # another trial's (a PBT exploit): where it was recorded
        return checkpoint.filesystem.get_file_info(checkpoint.path).type != pyarrow.fs.FileType.NotFound

    def _recorded(self) -> dict[str, Any]:
        """The trial's own recorded checkpoints (kept and latest): folder name -> its ``_TrainingResult``."""
        if self._manager is None:
            return {}
        results = [*self._manager._checkpoint_results, self._latest()]
        return {self._split(r)[1]: r for r in results if r is not None and self._own(r)}

    def known(self) -> dict[str, dict]:
        """The trial's own recorded checkpoints (kept and latest): folder name -> the metrics reported with it."""
        return {name: dict(r.metrics) for name, r in self._recorded().items()}

    def point_at(self, name: str | None, present: set[str], metrics: dict | None = None) -> None:
        """Make the trial's own checkpoint ``name`` the latest (None: no checkpoint, the trial starts over),
        forget the recorded checkpoints of its own not in ``present``, and rewrite the entry's run metadata.

        Args:
            name: A checkpoint folder of the trial; one not recorded needs ``metrics``.
            present: The trial's checkpoint folders that exist.
            metrics: The result reported with ``name``, when it is not recorded.
        """
        from ray.train import Checkpoint
        from ray.train._internal.session import _TrainingResult

        manager = self._manager
        recorded = self._recorded()
        manager._checkpoint_results = [r for r in manager._checkpoint_results
                                       if not self._own(r) or self._split(r)[1] in present]
        chosen = None
        if name is not None:
            chosen = recorded.get(name)
            if chosen is None:
                storage = self._trial_storage()
                chosen = _TrainingResult(checkpoint=Checkpoint(path=f"{storage.trial_fs_path.rstrip('/')}/{name}",
                                                               filesystem=storage.storage_filesystem),
                                         metrics=dict(metrics or {}))
            if chosen not in manager._checkpoint_results:
                manager._checkpoint_results.append(chosen)
                manager._checkpoint_results.sort(key=manager._get_checkpoint_score)  # stable: by time among ties
        manager._latest_checkpoint_result = chosen
        self._meta.invalidate_cache()
        self._entry[1] = self._meta.get_json_state()


def experiment_staging_path(state: dict, experiment_name: str) -> str | None:
    """The folder where a resume of this experiment in this Ray session stages its files, or None.

    Ray 2.60 writes the experiment's files (its state, searcher state, and each trial's
    ``result.json``, ``progress.csv``, ``params.json``) into a driver staging folder in the
    Ray session's folder, ``<session>/artifacts/<timestamp>/<experiment>/driver_artifacts``
    (``StorageContext.experiment_driver_staging_path``), and copies it whole to the
    experiment folder every few seconds. A restored run reuses its first run's timestamp
    (``TuneController._restore_trials``), so a resume in the Ray session that ran the
    experiment before finds that session's old copies there. Needs Ray initialized.

    Args:
        state: A parsed ``experiment_state-*.json`` (its first trial's storage context).
        experiment_name: The experiment folder's name.

    Returns:
        The folder, or None when the state holds no trial, or this process has no Ray node of its
        own (a Ray Client connection, ``ray://``: its Tune run stages on the cluster).
    """
    import copy

    import ray._private.worker as worker
    from ray.tune.utils.serialization import _loads_with_cloudpickle

    trial_data = saved_trial_entries(state)
    if not trial_data or getattr(worker, "_global_node", None) is None:
        return None
    storage = copy.copy(_loads_with_cloudpickle(trial_data[0][0])["storage"])
    storage.experiment_dir_name = experiment_name  # as the restore sets it (the folder may have moved)
    return storage.experiment_driver_staging_path


#: The name of the handler Ray Tune's run installs for SIGINT and SIGUSR1.
_TUNE_SIGNAL_HANDLER = "signal_interrupt_tune_run"


def tune_run_catches_signals() -> bool:
    """Whether Ray Tune's own SIGUSR1 handler is installed in this process now.

    Ray 2.60's ``ray.tune.tune._setup_signal_catching`` installs the nested function
    ``signal_interrupt_tune_run`` for SIGINT and SIGUSR1 when the run is in the main
    thread; either signal then ends the run as Ctrl-C does (unfinished trials stay
    resumable). tuner's time budget sends SIGUSR1 only when this holds
    (``tuner.run.failures._pause_tune_run``).
    """
    import signal

    if not hasattr(signal, "SIGUSR1"):
        return False
    return getattr(signal.getsignal(signal.SIGUSR1), "__name__", "") == _TUNE_SIGNAL_HANDLER


def lean_callback_usage_tag() -> None:
    """Make Ray Tune's callback usage tag count callbacks by class name alone.

    ``ray.tune.run`` calls ``ray.air._internal.usage.tag_callbacks`` whenever callbacks
    are passed (tuner always passes some), and Ray's version imports its W&B, MLflow,
    Comet and Aim integrations only to compare class names: with ``wandb`` and ``mlflow``
    installed that is 1.3 s of driver start-up (0.4 s + 0.9 s here), paid even when the
    spec uses neither (docs/benchmarks.md). This replaces that module attribute with a
    function that records the same tag (the same counts under the same keys, through
    ``record_extra_usage_tag(TagKey.AIR_CALLBACKS, ...)``) without those imports. Left as
    it is if Ray's function moves (Ray 2.60 has ``_count_callbacks`` beside it).
    """
    try:
        import ray.air._internal.usage as air_usage
        from ray.tune.utils.callback import DEFAULT_CALLBACK_CLASSES
    except ImportError:  # pragma: no cover - a Ray without it
        return
    if getattr(air_usage.tag_callbacks, "_tuner_lean", False) or not hasattr(air_usage, "_count_callbacks"):
        return
    builtin = {"WandbLoggerCallback", "MLflowLoggerCallback", "CometLoggerCallback", "AimLoggerCallback",
               *(cls.__name__ for cls in DEFAULT_CALLBACK_CLASSES)}

    def tag_callbacks(callbacks) -> bool:
        import json
        from collections import Counter

        from ray.tune import Callback
        from ray.tune.logger import LoggerCallback

        if not callbacks:
            return False
        counts: Counter = Counter()
        for callback in callbacks:
            if not isinstance(callback, Callback):
                continue
            name = type(callback).__name__
            key = name if name in builtin else (
                "CustomLoggerCallback" if isinstance(callback, LoggerCallback) else "CustomCallback")
            counts[key] += 1
        if counts:
            air_usage.record_extra_usage_tag(air_usage.TagKey.AIR_CALLBACKS, json.dumps(dict(counts)))
        return bool(counts)

    tag_callbacks._tuner_lean = True  # type: ignore[attr-defined]
    air_usage.tag_callbacks = tag_callbacks


# --------------------------------------------------------------------------- searcher state


def reopen_basic_variant_state(state: dict, ended: set[str], old: int, new: int, points: list | None = None) -> None:
    """Reopen a ``BasicVariantGenerator``'s saved state (in place), up to ``new`` samples.

    Ray 2.60 pickles the generator's ``__dict__`` into ``basic-variant-state-*.json``;
    this rewrites its ``_live_trials`` (less the ``ended`` trial ids), ``_finished``
    (False), and for ``new > old`` appends one ``ray.tune.search.basic_variant._TrialIterator``
    for the extra samples (numbered after ``_total_samples``, drawing from the same
    ``_random_state``, with the ``_uuid_prefix``, ``_constant_grid_search`` and the
    ``unresolved_spec`` of the last of ``_iterators``), which runs ``points`` first when given
    (a conditional space's :func:`tuner.search.space.presets`: one of its samples each). For
    :func:`tuner.run.failures.reopen_searcher`.
    """
    from ray.tune.search.basic_variant import _TrialIterator

    state["_live_trials"] = set(state["_live_trials"]) - ended
    if new > old:
        per_sample = state["_total_samples"] // old  # grid points
        state["_iterators"].append(_TrialIterator(
            uuid_prefix=state["_uuid_prefix"], num_samples=len(points) if points else new - old,
            unresolved_spec=state["_iterators"][-1].unresolved_spec,
            constant_grid_search=state["_constant_grid_search"], start=state["_total_samples"],
            random_state=state["_random_state"], points_to_evaluate=list(points or [])))
        state["_total_samples"] += per_sample * (new - old)
    state["_finished"] = False


def reopen_search_generator_state(state: dict, ended: set[str], new: int) -> None:
    """Reopen a ``SearchGenerator``'s saved state (in place), up to ``new`` samples.

    Ray 2.60 pickles the generator's state into ``search_gen_state-*.json``: its
    ``total_samples`` becomes ``new`` and ``finished`` holds while ``counter >= new``;
    a ``ConcurrencyLimiter``'s state (under ``name:ConcurrencyLimiter``) drops the
    ``ended`` trials from ``live_trials`` and ``num_unfinished_live_trials``. For
    :func:`tuner.run.failures.reopen_searcher`.
    """
    state["total_samples"] = new
    state["finished"] = state["counter"] >= new
    limiter = state.get("name:ConcurrencyLimiter")
    if limiter:
        stale = set(limiter["live_trials"]) & ended
        limiter["live_trials"] = set(limiter["live_trials"]) - stale
        limiter["num_unfinished_live_trials"] = max(0, limiter["num_unfinished_live_trials"] - len(stale))


def bohb_state(state: Any) -> tuple[dict, set, set] | None:
    """The parts of a saved ``TuneBOHB`` that tuner completes for a resume, or None.

    Ray 2.60's ``TuneBOHB.save`` pickles its ``__dict__``: ``trial_to_params`` (trial id ->
    flattened config, mutable here), the searched space ``_space`` (its parameter names
    are returned) and ``paused`` (a set of trial ids, mutable here); ``bohber`` tells it
    from another searcher. For ``tuner.run.failures._remind_bohb_of_live_trials``.

    Returns:
        ``(trial_to_params, parameter names, paused)``, or None for another searcher.
    """
    known = state.get("trial_to_params") if isinstance(state, dict) else None
    space = state.get("_space") if isinstance(state, dict) else None
    if known is None or space is None or "bohber" not in state:
        return None
    return known, set(space.keys()), state["paused"]


def save_searcher_state(state: Any, folder: str, file_name: str) -> None:
    """Write a searcher state back where Ray reads it, atomically (``tmp-<name>``, then renamed).

    ``ray.tune.utils.util._atomic_save`` (Ray 2.60), the way Ray saves it.
    """
    from ray.tune.utils.util import _atomic_save

    _atomic_save(state, str(folder), file_name, f"tmp-{file_name}")


# --------------------------------------------------------------------------- schedulers and the controller


def hyperband_bracket(scheduler: Any, trial: Any) -> Any:
    """The bracket of a trial in a ``HyperBandScheduler`` (Ray 2.60: ``_trial_info[trial][0]``,
    a ``ray.tune.schedulers.hyperband._Bracket``). For ``tuner.search.algorithms._NeverWaitForever``."""
    return scheduler._trial_info[trial][0]


def hyperband_knows(scheduler: Any, trial: Any) -> bool:
    """Whether a ``HyperBandScheduler`` holds a trial in a bracket (``trial in _trial_info``, Ray 2.60)."""
    return trial in scheduler._trial_info


def finished_bracket_trials(bracket: Any) -> list:
    """A finished bracket's trials (``_Bracket.finished()``, ``current_trials()``, Ray 2.60); [] while it runs."""
    return list(bracket.current_trials()) if bracket.finished() else []


def hyperband_unpause(scheduler: Any, tune_controller: Any, trial: Any) -> None:
    """Let a PAUSED trial go on: ``HyperBandScheduler._unpause_trial(tune_controller, trial)`` (Ray 2.60)."""
    scheduler._unpause_trial(tune_controller, trial)


def pbt_population(scheduler: Any) -> dict:
    """A PBT or PB2 scheduler's population: ``{trial: state}`` with ``last_score``,
    ``last_perturbation_time``, ``last_checkpoint``, ... (``_trial_state`` of Ray 2.60's
    ``PopulationBasedTraining``, whose values are ``_PBTTrialState``)."""
    return scheduler._trial_state


def pbt_perturbations(scheduler: Any) -> int:
    """How many exploits a PBT or PB2 scheduler has made (``_num_perturbations`` in Ray 2.60)."""
    return scheduler._num_perturbations


def optuna_trial_to_tell(searcher: Any, trial_id: str) -> Any:
    """The Optuna trial that Ray's ``OptunaSearch`` is about to tell for a finished Tune trial, or None
    (unknown, or told already). Ray 2.60 keeps them in ``_ot_trials`` and ``_completed_trials``."""
    if trial_id in searcher._completed_trials:
        return None
    return searcher._ot_trials.get(trial_id)


def optuna_study(searcher: Any) -> Any:
    """The ``optuna.Study`` of Ray's ``OptunaSearch``, or None before it has a space (Ray 2.60's
    ``_ot_study``, made by ``_setup_study`` in ``__init__`` when a space is given, else in
    ``set_search_properties``). For :mod:`tuner.search.warm_start`: earlier trials are added to it with
    Optuna's public ``Study.add_trial`` (Ray's ``add_evaluated_point`` takes neither a define-by-run
    space nor several objectives)."""
    return getattr(searcher, "_ot_study", None)


def bohb_config_generator(searcher: Any) -> Any:
    """hpbandster's ``BOHB`` config generator of Ray's ``TuneBOHB``, or None before it has a space
    (Ray 2.60's ``bohber``, made by ``_setup_bohb``). For :mod:`tuner.search.warm_start`: earlier trials are
    told to it with hpbandster's public ``new_result``, as ``TuneBOHB.on_trial_result`` does."""
    return getattr(searcher, "bohber", None)


class PBTCloneSourceHooks:
    """Mixin before Ray's ``PopulationBasedTraining`` (or ``PB2``): the checkpoint a top trial is cloned
    from goes through ``self.keep_clone_source(trial, checkpoint, metrics) -> checkpoint`` (Ray 2.60),
    ``metrics`` being the result the checkpoint was reported with.

    At a top trial's perturbation point ``PopulationBasedTraining._checkpoint_or_exploit`` keeps
    its checkpoint for later clones in ``_trial_state[trial].last_checkpoint``: a save still in
    flight (``_FutureTrainingResult``), which Ray resolves only when a bottom trial clones it, or
    the trial's checkpoint. Here a save in flight is resolved at once (Ray's own exploit blocks on
    it the same way); a save that gives no checkpoint (Ray asks none of a trial without an actor,
    and a function trainable whose function has returned saves none) falls back to the trial's
    latest checkpoint, as Ray does for a PAUSED top trial; and what the subclass returns for the
    checkpoint is kept instead. A top trial that was not in the top quantile at its own last
    perturbation point has no checkpoint kept, and Ray would skip the exploit of a bottom trial
    that picks it ("no checkpoint for trial"): its latest checkpoint is kept for it first. The
    kept state's ``last_result`` is the result reported with the kept checkpoint (Ray gives it to
    the clone with the checkpoint).

    Ray's log of each exploit (``_log_config_on_step``: ``pbt_global.txt``, ``pbt_policy_<id>.txt``)
    reads both trials' iterations from ``Trial.last_result``, which the controller updates only
    after the scheduler has seen a result: the trial whose result triggered the perturbation is
    logged one iteration early (always under ``synch: false``; under ``synch: true`` when that
    trial is a bottom or top one), and a top trial that trained on after its checkpoint was kept
    is logged at its newer iteration. Here the log gets the iteration of the exploiting trial's
    result at the perturbation and that of the kept checkpoint's result (the state Ray keeps of
    each), so ``cloned_iteration + 1`` is the first iteration trained with the new config, as
    ``PopulationBasedTrainingReplay`` replays it.
    """

    if TYPE_CHECKING:
        def keep_clone_source(self, trial: Any, checkpoint: Any, metrics: dict) -> Any: ...

    def _checkpoint_or_exploit(self, trial: Any, tune_controller: Any, upper_quantile: list,
                               lower_quantile: list) -> None:
        from ray.train._internal.session import _FutureTrainingResult

        if trial in lower_quantile:  # a top trial that was not top at its own last perturbation point
            for top in upper_quantile:  # kept no checkpoint: Ray would skip the exploit
                state = self._trial_state[top]  # type: ignore[attr-defined]
                if state.last_checkpoint is None and top.checkpoint is not None:
                    state.last_result = trial_checkpoint_metrics(top) or state.last_result
                    state.last_checkpoint = self.keep_clone_source(top, top.checkpoint, state.last_result or {})
        super()._checkpoint_or_exploit(trial, tune_controller, upper_quantile,  # type: ignore[misc]
                                       lower_quantile)
        if trial not in upper_quantile:
            return
        state = self._trial_state[trial]  # type: ignore[attr-defined]
        source = state.last_checkpoint
        if isinstance(source, _FutureTrainingResult):
            result = source.resolve()
            source = result.checkpoint if result else None
            if result:
                state.last_result = result.metrics
        else:
            source = None  # Ray's paused top trial: its latest checkpoint, as below
        if source is None:  # no save (the trial was between actors, or its function had returned):
            source = trial.checkpoint  # its latest reported checkpoint, as for a PAUSED top trial
            if source is not None:
                state.last_result = trial_checkpoint_metrics(trial) or state.last_result
        state.last_checkpoint = self.keep_clone_source(trial, source, state.last_result or {}) \
            if source is not None else None

    def _log_config_on_step(self, trial_state: Any, new_state: Any, trial: Any, trial_to_clone: Any,
                            new_config: dict) -> None:
        super()._log_config_on_step(  # type: ignore[misc]
            trial_state, new_state, _WithLastResult(trial, trial_state.last_result),
            _WithLastResult(trial_to_clone, new_state.last_result), new_config)


class _WithLastResult:
    """A Ray ``Trial`` seen through another ``last_result`` (for ``_log_config_on_step``)."""

    def __init__(self, trial: Any, result: dict | None):
        self._trial, self.last_result = trial, result if result is not None else trial.last_result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trial, name)


def trial_checkpoint_metrics(trial: Any) -> dict:
    """The result a trial's latest checkpoint was reported with (empty when it has none): Ray 2.60's
    ``Trial.latest_checkpoint_result`` (a ``_TrainingResult``) and its ``metrics``. For a clone that has
    not saved yet, the result PBT gave it with the cloned checkpoint."""
    latest = trial.latest_checkpoint_result
    return dict(latest.metrics or {}) if latest is not None else {}


def pbt_clone_sources(scheduler: Any) -> dict:
    """The checkpoints a PBT or PB2 scheduler keeps for its next clones, by the trial each was kept for:
    ``{trial: checkpoint}`` (each trial state's ``last_checkpoint`` that is a checkpoint, not a save in
    flight; Ray 2.60)."""
    from ray.tune import Checkpoint

    return {t: s.last_checkpoint for t, s in scheduler._trial_state.items()
            if isinstance(s.last_checkpoint, Checkpoint)}


def drop_pbt_clone_source(scheduler: Any, trial: Any) -> None:
    """Forget the clone source a PBT or PB2 scheduler keeps for ``trial`` (its state's ``last_checkpoint``,
    Ray 2.60), as Ray does for a trial that is not in the top quantile: until its next perturbation point
    it has none, and a bottom trial that picks it gets its latest checkpoint kept first
    (:class:`PBTCloneSourceHooks`)."""
    scheduler._trial_state[trial].last_checkpoint = None


#: What Ray 2.60's ``PopulationBasedTraining._checkpoint_or_exploit`` logs (INFO, logger
#: ``ray.tune.schedulers.pbt``) when the top trial to clone has no checkpoint and the exploit is skipped.
_SKIPPED_EXPLOIT = re.compile(r"^\[pbt\]: no checkpoint for trial (\S+)\. Skip exploit for Trial (\S+)")


class _SkippedExploits:
    """A ``logging.Filter`` on Ray's PBT logger that hands each skipped exploit to ``note``."""

    def __init__(self, note: Callable[[str, str], None]):
        self.note = note

    def filter(self, record: Any) -> bool:
        found = _SKIPPED_EXPLOIT.match(record.getMessage())
        if found:
            self.note(found.group(1), found.group(2))
        return True


def watch_skipped_exploits(note: Callable[[str, str], None]) -> None:
    """Call ``note(top_trial, bottom_trial)`` whenever PBT (or PB2) skips an exploit because the trial
    it would clone has no checkpoint (Ray only logs it, at INFO, in ``ray.tune.schedulers.pbt``).

    Replaces the note of an earlier call (one per driver process). The logger's level is set to
    INFO where it was higher, so that Ray creates the record.
    """
    import logging

    log = logging.getLogger("ray.tune.schedulers.pbt")
    for old in [f for f in log.filters if isinstance(f, _SkippedExploits)]:
        log.removeFilter(old)
    log.addFilter(_SkippedExploits(note))
    if log.getEffectiveLevel() > logging.INFO:
        log.setLevel(logging.INFO)


def scheduler_time_attr(scheduler: Any) -> str:
    """A Hyperband scheduler's ``time_attr`` (kept as ``_time_attr`` in Ray 2.60)."""
    return scheduler._time_attr


def pbt_log_rows(text: str) -> list[dict]:
    """The perturbations in one of PBT's logs, oldest first: ``pbt_global.txt`` or ``pbt_policy_<id>.txt``.

    Ray 2.60's ``PopulationBasedTraining._log_config_on_step`` (with ``log_config=True``, PB2
    too) appends one JSON list per exploit: ``[target trial tag, cloned trial tag, target
    training_iteration, cloned training_iteration, cloned trial's config, new config]``, the
    tags being each trial's ``experiment_tag`` when PBT first saw it. A trial's policy file is
    its clone's file at the exploit plus that line (``PopulationBasedTrainingReplay._load_policy``
    reads it back). A line that does not parse (a half-written last line) is skipped.

    Returns:
        One dict a line: ``trial_tag``, ``cloned_tag``, ``iteration``, ``cloned_iteration``
        (ints), ``cloned_config`` and ``new_config`` (dicts).
    """
    import json

    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not (isinstance(row, list) and len(row) == 6 and isinstance(row[4], dict) and isinstance(row[5], dict)):
            continue
        rows.append({"trial_tag": str(row[0]), "cloned_tag": str(row[1]), "iteration": int(row[2] or 0),
                     "cloned_iteration": int(row[3] or 0), "cloned_config": row[4], "new_config": row[5]})
    return rows


#: What ``ray.tune.schedulers.pbt._make_experiment_tag`` appends to a perturbed trial's tag.
_PERTURBED_TAG = "@perturbed["


def pbt_orig_tag(saved_trial: dict) -> str | None:
    """The tag PBT's logs name a trial by, from the trial as the experiment state saved it.

    Ray 2.60 keeps ``experiment_tag`` in each saved trial (:func:`saved_trials`); an exploit
    sets it to ``<original tag>@perturbed[<new values>]`` (``pbt._make_experiment_tag``), and
    the logs use the original tag (PBT's ``_PBTTrialState.orig_tag``).
    """
    tag = saved_trial.get("experiment_tag")
    return tag.split(_PERTURBED_TAG, 1)[0] if isinstance(tag, str) and tag else None


def saved_trial_initial_config(saved_trial: dict) -> dict:
    """A saved trial's config as it started, before any perturbation.

    Ray 2.60's saved trial holds ``config`` (the current one: PBT's ``Trial.set_config``
    replaces it) and ``evaluated_params`` (the sampled values, flat names joined by ``/``,
    set once when the trial was created); the first overlaid on the second gives the start.
    """
    import copy

    config = copy.deepcopy(saved_trial.get("config")) if isinstance(saved_trial.get("config"), dict) else {}
    params = saved_trial.get("evaluated_params")
    for name, value in (params.items() if isinstance(params, dict) else ()):
        keys, node = str(name).split("/"), config
        for key in keys[:-1]:
            node = node.setdefault(key, {}) if isinstance(node.get(key, {}), dict) else {}
        node[keys[-1]] = value
    return config


def saved_trial_creation_index(saved_trial: dict) -> int | None:
    """The number Ray's trial generator gave a trial as it created it, from the trial as the
    experiment state saved it (:func:`saved_trials`); trials created later have larger numbers.

    Ray 2.60 starts each trial's ``experiment_tag`` with a counter: ``<counter>_<sampled values>``,
    from 0 under random and grid search (``basic_variant._TrialIterator.create_trial``), from 1
    under a searcher (``SearchGenerator.create_trial_if_possible``, whose trial ids are random
    and so say nothing of the order). The experiment state lists the trials in no such order.

    Returns:
        The counter, or None when the saved trial has no tag that starts with one.
    """
    tag = saved_trial.get("experiment_tag")
    head = tag.split("_", 1)[0] if isinstance(tag, str) else ""
    return int(head) if head.isdigit() else None


def controller_trials(tune_controller: Any) -> list:
    """All trials of the run: ``ray.tune.execution.tune_controller.TuneController.get_trials()`` (Ray 2.60),
    the controller Ray passes a scheduler."""
    return tune_controller.get_trials()


def controller_stop_trial(tune_controller: Any, trial: Any) -> None:
    """Stop a trial for good: ``TuneController.stop_trial(trial)`` (Ray 2.60), as Ray's schedulers do."""
    tune_controller.stop_trial(trial)


def drop_replay_stale_stop(tune_controller: Any, trial: Any) -> None:
    """Forget the STOP that Ray 2.60's ``PopulationBasedTrainingReplay`` leaves behind at a config change.

    At each change of config the replay saves the trial (``_schedule_trial_save``, resolved at once)
    and pauses it, while the save is still marked in flight: ``TuneController._schedule_trial_stop``
    then caches a STOP decision for the trial (``_cached_trial_decisions``, "Scheduling STOP after
    save resolved") and drops the save's future, so nothing ever pops it. The restored trial
    carries it, and the first save after the restore executes it: the replay ended TERMINATED one
    checkpoint after its first config change, whatever the schedule. Called by tuner's replay
    scheduler right after the change (the trial is PAUSED; a real STOP of a paused trial is not cached).

    Args:
        tune_controller: The ``TuneController`` Ray passes the scheduler.
        trial: The replayed trial, just paused for its new config.
    """
    from ray.tune.schedulers import TrialScheduler

    decisions = tune_controller._cached_trial_decisions
    if decisions.get(trial.trial_id) == TrialScheduler.STOP:
        del decisions[trial.trial_id]


def controller_set_status(tune_controller: Any, trial: Any, status: str) -> None:
    """Set a trial's status the way the controller tracks it: ``TuneController._set_trial_status`` (Ray 2.60;
    whitelisted for schedulers, PBT uses it). For :class:`tuner.search.scheduler_state.KeepsState` (a trial that
    was PAUSED when the state was saved, which ``TuneController._requeue_restored_trials`` re-adds as PENDING)."""
    tune_controller._set_trial_status(trial, status)


def set_concurrency_limit(search_alg: Any, limit: int) -> None:
    """Change how many trials the searcher lets live at once, during a run (Ray 2.60).

    A ``BasicVariantGenerator`` reads its ``max_concurrent`` attribute (its constructor's argument) on each
    ``next_trial``; a ``ConcurrencyLimiter`` takes ``set_max_concurrency`` (public), and a searcher that
    limits itself (``TuneBOHB``: ``set_max_concurrency`` returns True) takes it too. Tune creates a trial,
    and so calls its resource request, only when the searcher gives one: for
    :class:`tuner.resources.gpu_packing.PackingCallback`, which sets the limit before each step of the controller.
    """
    from ray.tune.search import ConcurrencyLimiter

    if isinstance(search_alg, ConcurrencyLimiter):
        search_alg.set_max_concurrency(int(limit))
        search_alg.searcher.set_max_concurrency(int(limit))  # BOHB keeps its own limit
    else:
        search_alg.max_concurrent = int(limit)


def set_trial_resources(trial: Any, resources: Any) -> None:
    """Give a trial that is not running new resources: ``Trial.update_resources`` (Ray 2.60, marked
    experimental; Ray's ``ResourceChangingScheduler`` uses it). For a trial that ran out of GPU memory
    under ``gpu: auto`` and is requeued for a retry (``on_trial_recover``: it is PENDING, not yet placed)."""
    trial.update_resources(resources)


def is_trial(obj: Any) -> bool:
    """Whether ``obj`` is a Ray Tune ``Trial`` (``ray.tune.experiment.Trial``, Ray 2.60)."""
    from ray.tune.experiment import Trial

    return isinstance(obj, Trial)


def is_checkpoint_in_flight(obj: Any) -> bool:
    """Whether ``obj`` is a checkpoint still being saved: ``ray.train._internal.session._FutureTrainingResult``
    (Ray 2.60), which PBT keeps as a trial's ``last_checkpoint`` until it resolves. For
    :mod:`tuner.search.scheduler_state` (it holds an object reference, which cannot be saved)."""
    from ray.train._internal.session import _FutureTrainingResult

    return isinstance(obj, _FutureTrainingResult)


# --------------------------------------------------------------------------- reporters and logger callbacks


class _BestTrialView:
    """The best trial as Ray's ``_best_trial_str`` reads it (``trial_id``, ``last_result``), with a
    None for each parameter column its config lacks: Ray's lookup raises ``KeyError`` on a
    parameter that a conditional space left out. :meth:`tuner.run.console.TableReporter.edit_table`
    then lists only the parameters the trial has."""

    def __init__(self, trial: Any, columns: Any):
        from tuner.core.params import flatten, nest

        self.trial_id = trial.trial_id
        result = trial.last_result or {}
        flat = flatten(result.get("config") or {})
        for name in (columns or []):
            flat.setdefault(name, None)
        self.last_result = {**result, "config": nest(flat)}


class CLIReporterHooks:
    """Mixin before Ray's ``CLIReporter``: its private hooks under tuner's names (Ray 2.60).

    ``TuneReporterBase`` builds the table in ``_progress_str`` and picks the table's best
    trial in ``_current_best_trial``; its settings are ``_metric``, ``_mode`` and
    ``_total_samples``, its clock ``_last_report_time``, and ``CLIReporter._print`` prints.
    A subclass (:class:`tuner.run.console.TableReporter`) defines ``table_best_trial(trials)``
    (``(trial, metric)``, as Ray's) and ``edit_table(text, trials, delim)``.
    """

    if TYPE_CHECKING:  # Ray's attribute, and what the subclass defines
        _last_report_time: Any

        def table_best_trial(self, trials: list) -> tuple: ...

        def edit_table(self, text: str, trials: list, delim: str) -> str: ...

    def _current_best_trial(self, trials: list):
        trial, metric = self.table_best_trial(trials)
        if trial is None:
            return trial, metric
        return _BestTrialView(trial, self._parameter_columns), metric  # type: ignore[attr-defined]

    def _progress_str(self, trials: list, done: bool, *sys_info: str, fmt: str = "psql", delim: str = "\n"):
        text = super()._progress_str(trials, done, *sys_info, fmt=fmt, delim=delim)  # type: ignore[misc]
        return self.edit_table(text, trials, delim)

    def table_text(self, trials: list, done: bool, *sys_info: str) -> str:
        """The table, as Ray's ``report`` prints it (with the edits)."""
        return self._progress_str(trials, done, *sys_info)

    def print_text(self, text: str) -> None:
        self._print(text)  # type: ignore[attr-defined]

    def restart_report_clock(self) -> None:
        """The next table comes one period from now (Ray's clock starts at 0: a table at once)."""
        import time

        self._last_report_time = time.time()

    @property
    def reporter_metric(self) -> str | None:
        return self._metric  # type: ignore[attr-defined]

    @property
    def reporter_mode(self) -> str | None:
        return self._mode  # type: ignore[attr-defined]

    @property
    def reporter_total_samples(self) -> int:
        return self._total_samples or 0  # type: ignore[attr-defined]


class TBXLoggerHooks:
    """Mixin before Ray's ``TBXLoggerCallback``: its private parts under tuner's names (Ray 2.60).

    Ray writes a trial's HParams summary in ``_try_log_hparams(trial, result)`` (a subclass
    defines ``log_hparams`` instead), keeps each trial's last scalars in ``_trial_result``
    and its ``SummaryWriter`` in ``_trial_writer``. For
    :class:`tuner.run.loggers.HParamsTBXCallback`.
    """

    if TYPE_CHECKING:  # what the subclass defines
        def log_hparams(self, trial, result: dict) -> None: ...

    def _try_log_hparams(self, trial, result: dict) -> None:
        self.log_hparams(trial, result)

    def trial_scalar_tags(self, trial) -> list:
        """The scalar tags (``ray/tune/<metric>``) of the trial's last result."""
        return list(self._trial_result.get(trial, {}))  # type: ignore[attr-defined]

    def trial_file_writer(self, trial) -> Any:
        """The trial's tensorboardX event file writer."""
        return self._trial_writer[trial].file_writer  # type: ignore[attr-defined]


class WandbLoggerHooks:
    """Mixin before Ray's ``WandbLoggerCallback``: its logging actor, with tuner's kwargs and env.

    Ray 2.60's ``_start_logging_actor(trial, exclude_results, **wandb_init_kwargs)`` builds
    the actor class once (``_remote_logger_class``, from ``_logger_actor_cls``, on the
    driver's node through ``ray.air.util.node._force_on_current_node``) with
    ``WANDB_API_KEY`` in its ``runtime_env``. Here the subclass
    (:class:`tuner.run.loggers.WandbCallback`) first adds to the ``wandb.init`` kwargs
    (``init_kwargs(trial, kwargs)``), and the class is built as Ray's own but with the
    subclass's ``actor_env()``, and with no restarts: Ray's ``max_restarts=-1`` made Ray's core
    log an error into the console for each trial (its constructor arguments are in the object
    store, so a restart could fail: ray-project/ray#53727; the argument is the trial's queue).
    The cost: a logging actor whose process dies is not restarted, so W&B misses the rest of
    that trial's results; the experiment's own files still hold them.

    The actor also waits for W&B's service process to write everything out
    (``wandb.teardown()``) before its ``run`` returns. ``wandb.finish()`` returns before
    that service has closed the run's file, and Ray kills each finished actor (at the
    trial's end or at the experiment's end), which took the service down with it: under
    load, an offline ``run-*.wandb`` kept only its 7-byte header.
    """

    def _start_logging_actor(self, trial, exclude_results, **wandb_init_kwargs):
        self.init_kwargs(trial, wandb_init_kwargs)
        if not self._remote_logger_class:
            import ray
            from ray.air.util.node import _force_on_current_node

            # As Ray's own, but with that env and no restarts.
            self._remote_logger_class = ray.remote(
                num_cpus=0, **_force_on_current_node(), runtime_env={"env_vars": self.actor_env()},
                max_restarts=0)(_flushing_logger_actor(self._logger_actor_cls))
        return super()._start_logging_actor(trial, exclude_results, **wandb_init_kwargs)

    def __del__(self):
        # Ray's ``__del__`` stops leftover actors, and at interpreter exit it raised into the console
        # (``ray`` is already None there: "Exception ignored in ... __del__"). The actors are gone by
        # then: ``on_experiment_end`` waits for each, and Ray's shutdown ends them all.
        if not sys.is_finalizing():
            super().__del__()


def _flushing_logger_actor(base: type) -> type:
    """Ray's W&B logging actor class whose ``run`` returns only once W&B has written everything."""

    class FlushingWandbLoggingActor(base):
        def run(self):
            try:
                super().run()
            finally:
                self._wandb.teardown()  # Ray's actor holds the wandb module (tuner declares no wandb)

    return FlushingWandbLoggingActor


class StagedResultFileHooks:
    """Mixin before Ray's ``JsonLoggerCallback`` or ``CSVLoggerCallback``: the driver's copy of a
    trial's ``result.json`` / ``progress.csv`` is the one it goes on writing, within a run.

    Ray 2.60's loggers write these files in the driver's staging folder, which Ray copies to the
    storage every ``TUNE_GLOBAL_CHECKPOINT_S`` (2 s under tuner) or so; and
    ``LoggerCallback._restore_from_remote(file_name, trial)`` copies the storage's copy back over
    the staging one, if the trial has a checkpoint, each time the logger (re)opens the file:
    ``JsonLoggerCallback.log_trial_start`` (every start of a trial, an unpause too) and
    ``CSVLoggerCallback._setup_trial`` (the first result after the file was closed, e.g. after a
    failed trial's restart). That copy is for a resumed experiment, whose driver starts with no
    staging copy (Ray PR 38598). In the run itself it is a race: a trial that Hyperband paused and
    resumed, or a failed trial restarted from its checkpoint, lost the results it had reported
    since the last copy to the storage (seen: a Hyperband trial's ``result.json`` without its first
    3 results, in 2 runs of 80).

    Here the copy runs only the first time this callback opens a trial's file; after that the
    staging copy is this callback's own and the newest, and it is kept. The record of opened files
    is not pickled, so a callback restored with the experiment copies again. And that first copy is
    made whenever the storage has the file, checkpoint or not: Ray's rule left out a resumed trial
    without a Tune checkpoint (a DDP trial's checkpoints are Ray Train's, and its Train run goes on
    from them), whose staging copy then started empty and, copied to the storage, replaced the
    results it had reported before the resume. A trial that starts over appends to its earlier
    results, as it does when it fails and starts over within a run.
    """

    def _restore_from_remote(self, file_name: str, trial) -> None:
        opened = self.__dict__.setdefault("_tuner_opened", set())
        if (file_name, trial.trial_id) in opened:
            return
        opened.add((file_name, trial.trial_id))
        if trial.checkpoint:
            super()._restore_from_remote(file_name, trial)  # type: ignore[misc]  # a mixin before Ray's logger
            return
        import pyarrow.fs

        storage = trial.storage
        remote = f"{storage.trial_fs_path}/{file_name}"
        if storage.storage_filesystem.get_file_info(remote).type == pyarrow.fs.FileType.File:
            pyarrow.fs.copy_files(remote, f"{trial.local_path}/{file_name}",
                                  source_filesystem=storage.storage_filesystem)

    def __getstate__(self) -> dict:
        return {k: v for k, v in vars(self).items() if k != "_tuner_opened"}


# --------------------------------------------------------------------------- the Ray process and the cluster


def ray_started_here() -> bool:
    """Whether this process started the Ray it uses (its workers then inherit its environment).

    Ray 2.60's ``ray._private.worker._global_node`` is this driver's ``Node``; its
    ``all_processes`` is empty when the driver only connected to a running Ray. For
    :class:`tuner.run.loggers.WandbCallback` (whether a key must travel in a ``runtime_env``).
    """
    import ray._private.worker as worker

    node = getattr(worker, "_global_node", None)
    return node is not None and bool(getattr(node, "all_processes", None))


def nvidia_gpu_count() -> int:
    """NVIDIA GPUs on this machine through NVML, as Ray's own node start-up counts them.

    ``ray._private.accelerators.NvidiaGPUAcceleratorManager.get_current_node_num_accelerators``
    (Ray 2.60): no torch import in the driver (1.3-1.8 s). Raises when NVML is missing;
    :func:`tuner.resources.sizing._nvidia_gpus` counts that as no GPU.
    """
    from ray._private.accelerators import NvidiaGPUAcceleratorManager

    return int(NvidiaGPUAcceleratorManager.get_current_node_num_accelerators())


def refresh_auth_mode() -> None:
    """Make Ray read ``RAY_AUTH_MODE`` again after tuner set it.

    Ray reads the mode into its config when it is imported; Ray 2.60's
    ``authentication_token_setup._enable_token_auth`` refreshes it with
    ``ray._raylet.Config.initialize("")``, and so does
    :func:`tuner.run.cluster.use_token_if_available`.
    """
    from ray._raylet import Config  # type: ignore[attr-defined]  # a Cython class

    Config.initialize("")


#: The environment variable of Ray 2.60's connect window: ``ray.init(address=...)`` makes this many tries
#: at the head's GCS (``ray._private.node.Node._init_gcs_client``; 20 by default, about 40 s each where
#: something listens that is not a Ray head, each try's wait ``RAY_py_gcs_connect_timeout_s``, 30 s by
#: default), then raises ``ConnectionError``. :func:`tuner.run.cluster.ray_session` makes it 1 unless set.
GCS_CONNECT_TRIES_ENV = "RAY_gcs_server_port_wait_time_s"


#: ``ray.init(_system_config=...)`` for the local Ray tuner starts (Ray 2.60's raylet config keys):
#:
#: * no default workers prestarted for the first driver. Tuner's trials run with a runtime_env
#:   (the spec's PYTHONPATH), so Ray starts workers of their own for them and never used the
#:   two prestarted ones: each cost about 0.35 CPU-s and 80 MB per run;
#: * no metrics collection (each process logs "Disabled stats."). The local Ray has no
#:   dashboard to show Ray's metrics, and a worker's OpenTelemetry metric reader thread
#:   crashed it once in the suite (SIGSEGV in ``TemporalMetricStorage::buildMetrics`` while the
#:   actor was created: the trial errored). A Ray of your own (``ray start``, ``--address``)
#:   keeps its metrics.
#: * 180 s, not Ray's 60, for a worker process to register with the raylet
#:   (``worker_register_timeout_seconds``). A trial's actor waits for a worker, and Ray gives up
#:   after 5 workers that did not register in time ("worker startup repeatedly failed"): on a
#:   2-core machine under load, a worker's ``import ray`` took longer than 60 s, and a DDP
#:   trial errored so (``docs/benchmarks.md``). A worker that fails at start-up still fails at once.
LOCAL_RAY_SYSTEM_CONFIG = {"prestart_worker_first_driver": False, "enable_metrics_collection": False,
                           "worker_register_timeout_seconds": 180}

#: What Ray 2.60's ``ray.init`` raises (a bare ``Exception``, ``ray._private.node.Node``) when the node
#: it starts does not come up in time. Under load that is most often the raylet, which waits a fixed
#: 15 s for its dashboard agent's port file (not configurable in Ray 2.60) and aborts
#: ("Check failed ... Timed out waiting for file .../metrics_agent_port_..."); ``ray_session`` then
#: starts the local Ray once more.
RAY_START_TIMED_OUT = "The current node timed out during startup"


def local_ray_options(address: str | None) -> dict[str, Any]:
    """Keyword arguments for ``ray.init`` that apply only where it starts a Ray of its own.

    Ray 2.60's ``ray.init`` starts one when neither ``address`` nor ``RAY_ADDRESS`` names a
    running Ray, and refuses a ``_system_config`` when it connects to one.

    Args:
        address: The ``address`` given to ``ray.init``.

    Returns:
        ``{"_system_config": LOCAL_RAY_SYSTEM_CONFIG}``, or ``{}`` when Ray will connect.
    """
    import os

    if address is None and not os.environ.get("RAY_ADDRESS"):
        return {"_system_config": dict(LOCAL_RAY_SYSTEM_CONFIG)}
    return {}


#: Ray's resource of the head node (Ray 2.60: ``ray._common.constants.HEAD_NODE_RESOURCE_NAME``):
#: ``tuner submit`` puts a job's driver on the head.
HEAD_RESOURCE = "node:__internal_head__"
#: The environment variable Ray sets in a submitted job's driver (Ray 2.60:
#: ``ray._private.runtime_env.constants.RAY_JOB_CONFIG_JSON_ENV_VAR``): tuner runs inside a Ray Job.
RAY_JOB_CONFIG = "RAY_JOB_CONFIG_JSON_ENV_VAR"
#: Ray's loggers that a Jobs API client (``tuner submit``, ``tuner jobs``) quiets to warnings: Ray's
#: own, and its Jobs SDK modules (Ray 2.60), which set theirs to INFO.
JOBS_CLIENT_LOGGERS = ("ray", "ray.dashboard.modules.dashboard_sdk", "ray.dashboard.modules.job.sdk")
