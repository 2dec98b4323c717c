"""Every Ray internal that tuner/ touches is still there, with the shape tuner uses, and
only tuner/adapters/ray_internals.py touches them.

tuner reaches past Ray's public API in places (private modules and attributes, the
layout of the state files Ray saves, the names of Ray's nested functions), each behind
one entry of ``tuner/adapters/ray_internals.py``. pyproject.toml pins Ray to the minor version
tested; these checks say which internal moved, and which entry and tuner module depend on
it, when Ray is upgraded.

To add one: an entry in tuner/adapters/ray_internals.py (and its ``__all__``), and a row in
``INTERNALS`` whose ``via`` names it (checked by importing and inspecting Ray, without
starting it), or in ``CHECKED_ON_A_RUN`` with a check on the files and objects of a tiny
real run (the tests that take ``tiny_runs`` start Ray). A touch of Ray's private names in
any other module of tuner/ fails ``test_no_module_but_ray_internals_touches_a_ray_private_name``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from types import SimpleNamespace
from collections.abc import Callable

import pytest

# One xdist worker runs this file: its module-scoped fixture is built once (pyproject's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_ray_internals")

# --------------------------------------------------------------------------- checks


def exists(obj: Any) -> None:
    """Only that the name resolves."""


def params(*names: str) -> Callable[[Any], None]:
    """The callable takes these parameters (by these names)."""
    def check(obj: Any) -> None:
        have = inspect.signature(obj).parameters
        missing = [n for n in names if n not in have]
        assert not missing, f"no parameter {missing}; it takes {list(have)}"
    return check


def attrs(*names: str) -> Callable[[Any], None]:
    """The object (a class, a module, an instance) has these attributes."""
    def check(obj: Any) -> None:
        missing = [n for n in names if not hasattr(obj, n)]
        assert not missing, f"no attribute {missing}"
    return check


def equals(expected: Any) -> Callable[[Any], None]:
    def check(obj: Any) -> None:
        assert obj == expected, f"{obj!r} != {expected!r}"
    return check


def subset_of(container: Any) -> Callable[[Any], None]:
    """Every item of the object (a tuple, a set) is in ``container`` (tuner's Ray-free copy)."""
    def check(obj: Any) -> None:
        missing = sorted(set(obj) - set(container))
        assert not missing, f"Ray added {missing}; tuner's copy lacks them"
    return check


def source_has(*texts: str) -> Callable[[Any], None]:
    """The object's source code holds these texts (for nested functions and call sites)."""
    def check(obj: Any) -> None:
        source = inspect.getsource(obj)
        missing = [t for t in texts if t not in source]
        assert not missing, f"its source no longer holds {missing}"
    return check


def no_slots(cls: Any) -> None:
    """Instances take new attributes (tuner keeps one on them)."""
    assert not any("__slots__" in vars(k) for k in cls.__mro__ if k is not object), f"{cls} has __slots__"


def _qualname_owner(method: Any) -> Any:
    """The class a method (``Class.method``) is defined on."""
    module = importlib.import_module(method.__module__)
    return getattr(module, method.__qualname__.rsplit(".", 1)[0])


def _propagates_lean_train_env(names: Any) -> None:
    """Ray Train passes every variable :func:`tuner.adapters.ray_internals.lean_train_env` sets on to its controller."""
    from tuner.adapters.ray_internals import lean_train_env

    missing = sorted(set(lean_train_env(single_node=True)) - set(names))
    assert not missing, f"Ray Train no longer passes {missing} on to its controller"


def all_of(*checks: Callable[[Any], None]) -> Callable[[Any], None]:
    def check(obj: Any) -> None:
        for one in checks:
            one(obj)
    return check


def _source_in_order(*texts: str) -> Callable[[Any], None]:
    """The object's source code holds these texts, in this order."""
    def check(obj: Any) -> None:
        source = inspect.getsource(obj)
        at = [source.find(t) for t in texts]
        assert -1 not in at, f"its source no longer holds {[t for t, i in zip(texts, at) if i < 0]}"
        assert at == sorted(at), f"its source no longer has {list(texts)} in this order"
    return check


def _called(make: Callable[[Any], Any], then: Callable[[Any], None]) -> Callable[[Any], None]:
    """Check what ``make(obj)`` gives (an instance, a return value)."""
    def check(obj: Any) -> None:
        then(make(obj))
    return check


def _tuner(name: str) -> Any:
    """A name defined in tuner (``"tuner.run.cluster.HEAD_RESOURCE"``)."""
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def _wandb_callback(cls):
    pytest.importorskip("wandb")
    return cls(project="internals-check", mode="disabled")


def _newest_checkpoint_finds(storage_context) -> None:
    """tuner.run.trainable._newest_checkpoint picks the folder that Ray Train names a checkpoint."""
    import tempfile

    from tuner.run.trainable import _newest_checkpoint

    with tempfile.TemporaryDirectory() as run:
        name = storage_context.make_default_checkpoint_dir_name()
        Path(run, name).mkdir()
        Path(run, "checkpoint_tmp_snapshot").mkdir()
        assert _newest_checkpoint(run) == str(Path(run, name)), f"{name!r} is not seen as a checkpoint"


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Internal:
    """One Ray internal: its dotted name, the tuner code that uses it, and how to check its shape.

    ``via`` names the entry of ``tuner/adapters/ray_internals.py`` that reaches it ("" for a public
    Ray name that another module uses directly, checked here because tuner relies on
    undocumented behaviour behind it).
    """

    name: str
    used_by: str
    check: Callable[[Any], None] = exists
    via: str = ""


def _ri(name: str) -> Any:
    return _tuner(f"tuner.adapters.ray_internals.{name}")


def _tbx_callback(cls):
    pytest.importorskip("tensorboardX")
    return cls()


def _mixin_fits(mixin: str, *subclass_hooks: str) -> Callable[[Any], None]:
    """The Ray class has every private name the ray_internals mixin overrides or calls, and
    none of the public names the mixin and tuner's subclass add (they would replace Ray's)."""
    def check(ray_cls: Any) -> None:
        names = [n for n in vars(_ri(mixin)) if not n.startswith("__")]
        private = [n for n in names if n.startswith("_")]
        public = [n for n in names if not n.startswith("_")] + list(subclass_hooks)
        missing = [n for n in private if not hasattr(ray_cls, n)]
        assert not missing, f"no {missing} (tuner.adapters.ray_internals.{mixin} overrides or calls them)"
        import re

        assigned = set()
        for klass in ray_cls.__mro__:
            if klass.__module__.split(".")[0] == "ray":
                assigned.update(re.findall(r"self\.(\w+)\s*=", inspect.getsource(klass)))
        clash = [n for n in public if hasattr(ray_cls, n) or n in assigned]
        assert not clash, f"Ray now defines {clash}, which tuner.adapters.ray_internals.{mixin} and its subclass add"
    return check


def _signal_handler_is_seen(setup: Callable[[], Any]) -> None:
    """tune_run_catches_signals is True once Ray's handlers are in (run in the main thread)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGUSR1"):
        pytest.skip("Ray installs its handlers in the main thread only")
    saved = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGUSR1)
    try:
        assert not _ri("tune_run_catches_signals")()
        setup()
        assert _ri("tune_run_catches_signals")(), "Ray's SIGUSR1 handler is not recognised"
    finally:
        signal.signal(signal.SIGINT, saved[0])
        signal.signal(signal.SIGUSR1, saved[1])


def _bohb_state_is_read(cls) -> None:
    """bohb_state finds its parts in what a real TuneBOHB saves (its ``__dict__``)."""
    pytest.importorskip("hpbandster")
    from ray import tune

    searcher = cls(space={"x": tune.uniform(0, 1), "y": tune.choice([1, 2])}, metric="loss", mode="min")
    parts = _ri("bohb_state")(dict(vars(searcher)))
    assert parts is not None, "bohb_state does not recognise a TuneBOHB"
    known, names, paused = parts
    assert known == {} and names == {"x", "y"} and paused == set()


def _trial_ids_carry_the_creation_index(cls) -> None:
    """A real BasicVariantGenerator's trials, in creation order, read back as indexes 0, 1, 2; a searcher's
    trial id (``Trial.generate_id``) reads as no index."""
    from ray.tune.experiment import Experiment
    from ray.tune.experiment.trial import Trial

    generator = cls(random_state=0)
    generator.add_configurations([Experiment("x", lambda config: None, num_samples=3,
                                             config={"x": {"grid_search": [1]}})])
    trials = [generator.next_trial() for _ in range(3)]
    assert [_ri("trial_creation_index")(t.trial_id) for t in trials] == [0, 1, 2], [t.trial_id for t in trials]
    assert _ri("trial_creation_index")(Trial.generate_id()) is None


def _has_all(names: set[str], *wanted: str) -> None:
    missing = [n for n in wanted if n not in names]
    assert not missing, f"no field {missing}"


def _placement_group_round_trip(pg_id_cls) -> None:
    pg_id = pg_id_cls.from_random().hex()
    assert _ri("placement_group")(pg_id).id.hex() == pg_id


#: The mixins of tuner/adapters/ray_internals.py, the tuner class that puts each before Ray's, and the
#: methods that tuner class defines for the mixin to call.
ROUTED = {
    "CLIReporterHooks": ("tuner.run.console.TableReporter", ("table_best_trial", "edit_table")),
    "TBXLoggerHooks": ("tuner.run.loggers.HParamsTBXCallback", ("log_hparams",)),
    "WandbLoggerHooks": ("tuner.run.loggers.WandbCallback", ("init_kwargs", "actor_env")),
    "PBTCloneSourceHooks": ("tuner.search.population.TunerPBT", ()),
    "StagedResultFileHooks": ("tuner.run.loggers.JsonLogger", ()),
}

INTERNALS = [
    # the trial's process
    Internal("ray.train._internal.session.get_session", "tuner/run/trainable.py: _guard_reports (the NaN guard)",
             params(), via="tune_session"),
    Internal("ray.train._internal.session._TrainSession.report",
             "tuner/run/trainable.py: _guard_reports (the session's report is wrapped)",
             all_of(params("metrics", "checkpoint"), _called(_qualname_owner, no_slots)),
             via="guard_session_report"),
    Internal("ray.train._internal.session._TrainSession.report",
             "tuner/run/trainable.py: _drive_ddp under PBT/PB2 (the driver's report gets the Train checkpoint)",
             all_of(params("metrics", "checkpoint"), _called(_qualname_owner, no_slots)),
             via="report_train_checkpoints"),
    Internal("ray.train._internal.session._TrainSession._get_result_from_queues",
             "tuner/run/trainable.py: _drive_ddp under PBT/PB2 (Train's reports reach Tune through report(metrics))",
             source_has("self.report(inter_actor_item)"), via="report_train_checkpoints"),
    Internal("ray.tune.integration.ray_train.TuneReportCallback.after_report",
             "tuner/run/trainable.py: _drive_ddp under PBT/PB2 (only the checkpoint's path reaches Tune)",
             source_has("metrics[CHECKPOINT_PATH_KEY] = checkpoint.path"), via="report_train_checkpoints"),
    Internal("ray.tune.trainable.trainable_fn_utils.report", "tuner/run/trainable.py: _guard_reports (ray.tune.report "
             "goes through the session)", source_has("get_session().report("), via="guard_session_report"),
    Internal("ray.tune.trainable.function_trainable.wrap_function",
             "tuner/run/trainable.py: _guard_reports (a returned dict goes through the session)",
             source_has("get_session().report(output)"), via="guard_session_report"),
    Internal("ray.tune.result.TRIAL_INFO", "tuner/run/trainable.py: class_trainable", equals("__trial_info__"),
             via="trial_id_in_config"),
    Internal("ray.tune.experiment.trial._TrialInfo", "tuner/run/trainable.py: class_trainable (the trial id in its config)",
             attrs("trial_id"), via="trial_id_in_config"),
    Internal("ray.tune.experiment.trial._get_trainable_kwargs",
             "tuner/run/trainable.py: class_trainable (the trial id in its config)",
             source_has("trial_config[TRIAL_INFO] = _TrialInfo(trial)"), via="trial_id_in_config"),
    Internal("ray.tune.Trainable.__init__", "tuner/run/trainable.py: class_trainable (wraps setup via __init__)",
             all_of(params("config", "storage"), source_has("self.config.pop(TRIAL_INFO", "self.setup(")),
             via="trial_id_in_config"),
    Internal("ray.tune.Trainable.reset", "tuner/run/trainable.py: class_trainable (plain configs on reuse)",
             all_of(params("new_config"), source_has("self.reset_config(new_config)")), via="trial_id_in_config"),
    Internal("ray.tune.trainable.trainable_fn_utils._in_tune_session", "tuner/trial.py: in_tune", params(),
             via="in_tune_session"),
    Internal("ray.tune.result.STDOUT_FILE", "tuner/run/trainable.py: class_trainable (the trial's seed from its config)",
             equals("__stdout_file__"), via="trainable_config"),
    Internal("ray.tune.result.STDERR_FILE", "tuner/run/trainable.py: class_trainable (the trial's seed from its config)",
             equals("__stderr_file__"), via="trainable_config"),
    Internal("ray.tune.Trainable.__init__", "tuner/run/trainable.py: class_trainable (Ray's keys leave the config)",
             source_has("self.config.pop(TRIAL_INFO", "self.config.pop(STDOUT_FILE", "self.config.pop(STDERR_FILE"),
             via="trainable_config"),
    Internal("ray.tune.search.basic_variant._TrialIterator.create_trial",
             "tuner/search/seeds.py: seed_of_trial (the trial's index, in its process)",
             source_has('trial_id = self.uuid_prefix + ("%05d" % self.counter)', "self.counter += 1"),
             via="trial_creation_index"),
    Internal("ray.tune.search.BasicVariantGenerator.__init__",
             "tuner/search/seeds.py: seed_of_trial (one id prefix per generator)",
             source_has('self._uuid_prefix = str(uuid.uuid1().hex)[:5] + "_"'), via="trial_creation_index"),
    Internal("ray.tune.search.BasicVariantGenerator", "tuner/search/seeds.py: seed_of_trial (the trial's index)",
             _trial_ids_carry_the_creation_index, via="trial_creation_index"),
    Internal("ray.tune.search.search_generator.SearchGenerator.create_trial_if_possible",
             "tuner/search/seeds.py: seed_of_trial (a searcher's trial ids carry no index)",
             source_has("trial_id = Trial.generate_id()"), via="trial_creation_index"),
    Internal("ray.train.v2._internal.execution.storage.StorageContext",
             "tuner/run/trainable.py: _newest_checkpoint (Ray Train's checkpoint folder names)", _newest_checkpoint_finds,
             via="TRAIN_CHECKPOINT_DIR"),
    Internal("ray._raylet.PlacementGroupID", "tuner/run/trainable.py: remove_placement_groups",
             all_of(_called(lambda cls: cls(cls.from_random().binary()), attrs("hex")), _placement_group_round_trip),
             via="placement_group"),
    Internal("ray.util.placement_group.PlacementGroup", "tuner/run/trainable.py: remove_placement_groups",
             params("id"), via="placement_group"),
    Internal("ray._private.state.state", "tuner/run/failures.py: PlacementGroupReleaser (the sweep)",
             _called(lambda st: type(st)._connect_and_get_accessor, params("self")), via="orphaned_placement_groups"),
    Internal("ray.core.generated.gcs_pb2.PlacementGroupTableData", "tuner/run/failures.py: PlacementGroupReleaser",
             all_of(_called(lambda cls: {f.name for f in cls.DESCRIPTOR.fields},
                            lambda names: _has_all(names, "placement_group_id", "state", "creator_job_id",
                                                   "creator_actor_id", "creator_actor_dead", "is_detached")),
                    attrs("PENDING", "PREPARED", "CREATED", "RESCHEDULING", "FromString")),
             via="orphaned_placement_groups"),
    # a DDP trial's leaner Ray Train launch (what each leaves out: test_lean_trainer_leaves_out_only_what_it_names)
    Internal("ray.train.v2.api.data_parallel_trainer.DataParallelTrainer._create_default_callbacks",
             "tuner/run/trainable.py: _train_launcher (the controller callbacks)",
             source_has("DatasetsCallback(", "PlacementGroupCleanerCallback()"), via="lean_torch_trainer"),
    Internal("ray.train.v2.api.data_parallel_trainer.DataParallelTrainer.fit",
             "tuner/run/trainable.py: _train_launcher (the scaling policy reaches the controller as a keyword)",
             source_has("self._initialize_and_run_controller(", "scaling_policy=create_scaling_policy("),
             via="lean_torch_trainer"),
    Internal("ray.train.v2.api.data_parallel_trainer.DataParallelTrainer._initialize_and_run_controller",
             "tuner/run/trainable.py: _train_launcher", params("controller_init_kwargs"), via="lean_torch_trainer"),
    Internal("ray.train.v2._internal.callbacks.DatasetsCallback", "tuner/run/trainable.py: _train_launcher",
             source_has("RayDatasetShardProvider("), via="lean_torch_trainer"),
    Internal("ray.train.v2._internal.callbacks.placement_group_callback.PlacementGroupCleanerCallback",
             "tuner/run/trainable.py: _train_launcher", exists, via="lean_torch_trainer"),
    Internal("ray.train.v2._internal.execution.scaling_policy.FixedScalingPolicy",
             "tuner/run/trainable.py: _train_launcher (one node: no autoscaler requests)",
             all_of(attrs("after_controller_start", "_maybe_send_resource_request", "_cancel_resource_request"),
                    source_has("self._maybe_send_resource_request()")), via="lean_torch_trainer"),
    Internal("ray.train.v2._internal.execution.scaling_policy.ScalingPolicy.after_controller_start",
             "tuner/run/trainable.py: _train_launcher (the only place the coordinator client is made)",
             source_has("TrainAutoscalingCoordinatorClient(", "self._send_resource_request()"),
             via="lean_torch_trainer"),
    Internal("ray.train.v2._internal.execution.scaling_policy.ScalingPolicy._cancel_resource_request",
             "tuner/run/trainable.py: _train_launcher (no client: nothing to cancel)",
             source_has("if self._coordinator_client is None:"), via="lean_torch_trainer"),
    Internal("ray.train.v2._internal.execution.worker_group.worker.RayTrainWorker.poll_status",
             "tests/trainables.py: ddp_probe's crash waits until the controller took its report",
             source_has("execution_context.result_queue.get_nowait()", "execution_context.result_queue.task_done()"),
             via="train_reports_pending"),
    Internal("ray.train.v2._internal.constants.HEALTH_CHECK_INTERVAL_S_ENV_VAR", "tuner/run/trainable.py: _train_launcher",
             equals("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"), via="TRAIN_HEALTH_CHECK_INTERVAL_ENV"),
    Internal("ray.train.v2._internal.constants.ENABLE_PREEMPTION_WATCHER_ENV_VAR", "tuner/run/trainable.py: _train_launcher",
             equals("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"), via="TRAIN_PREEMPTION_WATCHER_ENV"),
    Internal("ray.train.v2._internal.constants.ENV_VARS_TO_PROPAGATE",
             "tuner/run/trainable.py: _train_launcher (set in the trial's driver, they reach the controller)",
             _propagates_lean_train_env, via="lean_train_env"),
    # Ray Tune's trials, experiment state and results (the values: test_run_objects_keep_the_attributes_tuner_uses)
    Internal("ray.train._internal.storage.StorageContext",
             "tuner/run/failures.py: ExperimentStopper, PlacementGroupReleaser; tuner/run/console.py: TableReporter",
             all_of(attrs("experiment_fs_path"), source_has("self.trial_dir_name = trial_dir_name")),
             via="trial_dir_name"),
    Internal("ray.tune.experiment.Trial.__init__", "tuner/run/failures.py: ExperimentStopper.on_experiment_end",
             source_has("self.storage = "), via="name_trial_dir"),
    Internal("ray.tune.experiment.Trial.init_local_path", "tuner/run/failures.py: ExperimentStopper.on_experiment_end",
             params(), via="name_trial_dir"),
    Internal("ray.train._internal.storage.StorageContext.experiment_fs_path",
             "tuner/run/console.py: TableReporter (the folder line)", via="experiment_fs_path"),
    Internal("ray.tune.ResultGrid.__init__", "tuner/run/results.py: _statuses",
             source_has("self._experiment_analysis = experiment_analysis"), via="result_grid_trials"),
    Internal("ray.tune.execution.tune_controller.TuneController.save_to_dir",
             "tuner/run/failures.py: _live_trials, _ended_trials; tuner/report/loading.py: _state_trials",
             source_has('"trial_data": list(self._get_trial_checkpoints().values())'), via="saved_trials"),
    Internal("ray.tune.execution.tune_controller.TuneController.save_to_dir", "tuner/run/failures.py: time_budget_used",
             source_has('"runner_data": self.__getstate__()'), via="saved_stopper"),
    Internal("ray.tune.execution.tune_controller.TuneController.__init__", "tuner/run/failures.py: time_budget_used",
             source_has("self._stopper = stopper"), via="saved_stopper"),
    Internal("ray.tune.utils.serialization.TuneFunctionDecoder", "tuner/run/failures.py: time_budget_used",
             params("allow_cloudpickle"), via="saved_stopper"),
    Internal("ray.train.constants.CHECKPOINT_DIR_NAME", "tuner/run/failures.py: fall_back_to_existing_checkpoints "
             "(the checkpoint a result.json line names)", equals(_ri("RESULT_CHECKPOINT_KEY")),
             via="RESULT_CHECKPOINT_KEY"),
    Internal("ray.train._internal.storage.StorageContext._make_checkpoint_dir_name",
             "tuner/run/failures.py: fall_back_to_existing_checkpoints (a trial's checkpoint folders)",
             _called(lambda make: make(3), lambda name: equals(True)(bool(_ri("TUNE_CHECKPOINT_DIR").match(name)))),
             via="TUNE_CHECKPOINT_DIR"),
    Internal("ray.tune.trainable.metadata._TrainingRunMetadata", "tuner/run/failures.py: fall_back_to_existing_checkpoints",
             all_of(attrs("from_json_state", "get_json_state", "invalidate_cache"),
                    _called(lambda cls: cls(), attrs("checkpoint_manager"))), via="SavedCheckpoints"),
    Internal("ray.tune.execution.tune_controller.TuneController.save_to_dir",
             "tuner/run/failures.py: fall_back_to_existing_checkpoints (trial_data: [trial JSON, run metadata JSON])",
             source_has('"trial_data": list(self._get_trial_checkpoints().values())'), via="saved_trial_entries"),
    Internal("ray.tune.execution.tune_controller.TuneController._get_trial_checkpoints",
             "tuner/run/failures.py: fall_back_to_existing_checkpoints (each entry: Trial.get_json_state())",
             source_has("trial.get_json_state()"), via="SavedCheckpoints"),
    Internal("ray.tune.experiment.trial.Trial.get_json_state", "tuner/run/failures.py: fall_back_to_existing_checkpoints",
             source_has("runtime_metadata_json = self.run_metadata.get_json_state()",
                        "return self._state_json, runtime_metadata_json"), via="SavedCheckpoints"),
    Internal("ray.train._internal.checkpoint_manager._CheckpointManager",
             "tuner/run/failures.py: fall_back_to_existing_checkpoints (the recorded checkpoints)",
             all_of(source_has("self._checkpoint_results: List[_TrainingResult] = []",
                               "self._latest_checkpoint_result: Optional[_TrainingResult] = None",
                               "key=self._get_checkpoint_score,"),
                    attrs("latest_checkpoint_result", "_get_checkpoint_score")), via="SavedCheckpoints"),
    Internal("ray.train._internal.session._TrainingResult", "tuner/run/failures.py: fall_back_to_existing_checkpoints",
             params("checkpoint", "metrics"), via="SavedCheckpoints"),
    Internal("ray.train._internal.storage.StorageContext", "tuner/run/failures.py: fall_back_to_existing_checkpoints "
             "(the trial's own folder, as recorded)",
             all_of(attrs("trial_fs_path"), source_has("self.storage_filesystem, self.storage_fs_path = get_fs_and_path(")),
             via="SavedCheckpoints"),
    Internal("ray.tune.experiment.trial.Trial.set_storage", "tuner/run/failures.py: fall_back_to_existing_checkpoints "
             "(a restore maps the trial's own checkpoints to its folder now)",
             source_has("original_storage.trial_fs_path, new_storage.trial_fs_path, 1"), via="SavedCheckpoints"),
    Internal("ray.tune.schedulers.pbt.PopulationBasedTraining._exploit", "tuner/run/failures.py: "
             "fall_back_to_existing_checkpoints (an exploited trial's latest checkpoint is another trial's)",
             source_has("trial.run_metadata.checkpoint_manager._latest_checkpoint_result = ("),
             via="SavedCheckpoints"),
    Internal("ray.tune.trainable.Trainable.restore", "tuner/run/failures.py: fall_back_to_existing_checkpoints (a "
             "restored trial's iteration count comes from its checkpoint's metrics)",
             source_has("self._iteration = checkpoint_metrics.get(TRAINING_ITERATION, 0)"), via="SavedCheckpoints"),
    Internal("ray.train._internal.storage.StorageContext.experiment_driver_staging_path",
             "tuner/run/failures.py: drop_stale_staging", via="experiment_staging_path"),
    Internal("ray.tune.execution.tune_controller.TuneController._restore_trials", "tuner/run/failures.py: "
             "drop_stale_staging (a restored run stages where its first run did)",
             source_has("self._storage._timestamp = trials[0].storage._timestamp",
                        "new_storage.experiment_dir_name = self._storage.experiment_dir_name"),
             via="experiment_staging_path"),
    Internal("ray.tune.utils.serialization._loads_with_cloudpickle", "tuner/run/failures.py: drop_stale_staging",
             via="experiment_staging_path"),
    Internal("ray.tune.execution.experiment_state._ExperimentCheckpointManager.sync_up_experiment_state",
             "tuner/run/failures.py: drop_stale_staging (the staging folder is copied whole to the experiment folder)",
             source_has("self._storage.syncer.sync_up(\n            driver_staging_path, self._storage.experiment_fs_path"),
             via="experiment_staging_path"),
    Internal("ray.tune.tune._setup_signal_catching",
             "tuner/run/failures.py: _pause_tune_run (the SIGUSR1 stop); tuner/run/engine.py: _InterruptWatch",
             all_of(source_has(f"def {_ri('_TUNE_SIGNAL_HANDLER')}(", "signal.SIGUSR1",
                               "signal.signal(signal.SIGINT, original_handler)"), _signal_handler_is_seen),
             via="tune_run_catches_signals"),
    # tuner replaces tag_callbacks in the module once a run has started: read Ray's from the source file.
    Internal("ray.air._internal.usage", "tuner/run/engine.py: before_ray_tune (replaces tag_callbacks)",
             source_has("def tag_callbacks(callbacks"), via="lean_callback_usage_tag"),
    Internal("ray.air._internal.usage._count_callbacks", "tuner/run/engine.py: before_ray_tune",
             via="lean_callback_usage_tag"),
    Internal("ray.air._internal.usage.record_extra_usage_tag", "tuner/run/engine.py: before_ray_tune",
             via="lean_callback_usage_tag"),
    Internal("ray.air._internal.usage.TagKey.AIR_CALLBACKS", "tuner/run/engine.py: before_ray_tune",
             via="lean_callback_usage_tag"),
    Internal("ray.tune.utils.callback.DEFAULT_CALLBACK_CLASSES", "tuner/run/engine.py: before_ray_tune",
             via="lean_callback_usage_tag"),
    Internal("ray.tune.tune.run", "tuner/run/engine.py: before_ray_tune (Ray calls the replaced function)",
             source_has("air_usage.tag_callbacks("), via="lean_callback_usage_tag"),
    # searcher state (the keys in real files: test_pickled_searcher_state_keeps_the_keys_tuner_rewrites)
    Internal("ray.tune.search.basic_variant.BasicVariantGenerator.__init__", "tuner/run/failures.py: reopen_searcher",
             source_has(*(f"self.{k} =" for k in ("_live_trials", "_total_samples", "_iterators", "_uuid_prefix",
                                                  "_constant_grid_search", "_random_state", "_finished"))),
             via="reopen_basic_variant_state"),
    Internal("ray.tune.search.basic_variant.BasicVariantGenerator.get_state", "tuner/run/failures.py: reopen_searcher",
             source_has("state = self.__dict__.copy()"), via="reopen_basic_variant_state"),
    Internal("ray.tune.search.basic_variant._TrialIterator", "tuner/run/failures.py: reopen_searcher (more samples)",
             all_of(params("uuid_prefix", "num_samples", "unresolved_spec", "constant_grid_search", "start",
                           "random_state"), source_has("self.unresolved_spec = unresolved_spec")),
             via="reopen_basic_variant_state"),
    Internal("ray.tune.search.basic_variant.BasicVariantGenerator.CKPT_FILE_TMPL",
             "tuner/experiment/layout.py: BASIC_VARIANT_STATE (tuner/run/failures.py: reopen_searcher)",
             equals(_tuner("tuner.experiment.layout.BASIC_VARIANT_STATE"))),
    Internal("ray.tune.search.search_generator.SearchGenerator.CKPT_FILE_TMPL",
             "tuner/experiment/layout.py: SEARCH_GEN_STATE (tuner/run/failures.py: reopen_searcher)",
             equals(_tuner("tuner.experiment.layout.SEARCH_GEN_STATE"))),
    Internal("ray.tune.search.search_generator.SearchGenerator.get_state", "tuner/run/failures.py: reopen_searcher",
             source_has('"counter": self._counter', '"total_samples": self._total_samples',
                        '"finished": self._finished'), via="reopen_search_generator_state"),
    Internal("ray.tune.search.search_generator.SearchGenerator.save_to_dir", "tuner/run/failures.py: reopen_searcher",
             source_has('search_alg_state["name:" + searcher_name] = searcher.get_state()'),
             via="reopen_search_generator_state"),
    Internal("ray.tune.search.ConcurrencyLimiter.__init__", "tuner/run/failures.py: reopen_searcher",
             source_has("self.live_trials = set()", "self.num_unfinished_live_trials = 0"),
             via="reopen_search_generator_state"),
    Internal("ray.tune.search.ConcurrencyLimiter.get_state", "tuner/run/failures.py: reopen_searcher",
             source_has("state = self.__dict__.copy()"), via="reopen_search_generator_state"),
    Internal("ray.tune.search.bohb.TuneBOHB", "tuner/run/failures.py: _remind_bohb_of_live_trials",
             all_of(source_has("self.trial_to_params = {}", "self.paused = set()", "self.bohber = BOHB(",
                               "self._space = "), _called(lambda cls: cls.save, source_has("self.__dict__")),
                    _bohb_state_is_read),
             via="bohb_state"),
    Internal("ray.tune.search.Searcher.CKPT_FILE_TMPL",
             "tuner/experiment/layout.py: SEARCHER_STATE (tuner/run/failures.py: _remind_bohb_of_live_trials)",
             equals(_tuner("tuner.experiment.layout.SEARCHER_STATE"))),
    Internal("ray.tune.utils.util._atomic_save", "tuner/run/failures.py: reopen_searcher, _remind_bohb_of_live_trials",
             params("state", "checkpoint_dir", "file_name", "tmp_file_name"), via="save_searcher_state"),
    Internal("ray.tune.search.optuna.OptunaSearch", "tuner/search/algorithms.py: _OptunaSearch (constraints set on the "
             "Optuna trial before Ray tells it)",
             all_of(_called(lambda cls: cls(), attrs("_ot_trials", "_completed_trials")),
                    _called(lambda cls: cls.on_trial_complete,
                            source_has("ot_trial = self._ot_trials[trial_id]", "self._ot_study.tell(ot_trial, val"))),
             via="optuna_trial_to_tell"),
    Internal("ray.tune.search.optuna.OptunaSearch", "tuner/search/algorithms.py: _OptunaSearch (warm start: earlier "
             "trials added to the study)",
             all_of(_called(lambda cls: cls._setup_study, source_has("self._ot_study = ot.study.create_study(")),
                    _called(lambda cls: cls.set_search_properties, source_has("self._setup_study("))),
             via="optuna_study"),
    Internal("ray.tune.search.bohb.TuneBOHB", "tuner/search/bohb.py: WarmBOHB (warm start: earlier trials told "
             "to hpbandster)",
             all_of(_called(lambda cls: cls._setup_bohb, source_has("self.bohber = BOHB(")),
                    _called(lambda cls: cls.on_trial_result, source_has("self.bohber.new_result("))),
             via="bohb_config_generator"),
    # schedulers and the Tune controller
    Internal("ray.tune.schedulers.HyperBandScheduler", "tuner/search/algorithms.py: _NeverWaitForever",
             _called(lambda cls: cls(), attrs("_trial_info")), via="hyperband_bracket"),
    Internal("ray.tune.schedulers.HyperBandScheduler.on_trial_add", "tuner/search/algorithms.py: _NeverWaitForever",
             source_has("self._trial_info[trial] = cur_bracket, self._state"), via="hyperband_bracket"),
    Internal("ray.tune.schedulers.HyperBandScheduler", "tuner/search/algorithms.py: _NeverWaitForever",
             _called(lambda cls: cls(), attrs("_trial_info")), via="hyperband_knows"),
    Internal("ray.tune.schedulers.HyperBandScheduler.on_trial_remove",
             "tuner/search/algorithms.py: _NeverWaitForever", params("tune_controller", "trial"), via="hyperband_bracket"),
    Internal("ray.tune.schedulers.hyperband._Bracket", "tuner/search/algorithms.py: _NeverWaitForever",
             attrs("finished", "current_trials"), via="finished_bracket_trials"),
    Internal("ray.tune.schedulers.HyperBandScheduler.choose_trial_to_run",
             "tuner/search/algorithms.py: _NeverWaitForever (unpauses a trial when none runs)",
             params("tune_controller")),
    Internal("ray.tune.schedulers.HyperBandScheduler._unpause_trial", "tuner/search/algorithms.py: _NeverWaitForever",
             params("tune_controller", "trial"), via="hyperband_unpause"),
    Internal("ray.tune.schedulers.HyperBandScheduler", "tuner/search/algorithms.py: _NeverWaitForever",
             _called(lambda cls: cls(time_attr="t"), lambda s: equals("t")(s._time_attr)), via="scheduler_time_attr"),
    Internal("ray.tune.execution.tune_controller.TuneController.get_trials",
             "tuner/search/algorithms.py: _NeverWaitForever", params(), via="controller_trials"),
    Internal("ray.tune.execution.tune_controller.TuneController.stop_trial",
             "tuner/search/algorithms.py: _NeverWaitForever", params("trial"), via="controller_stop_trial"),
    # `tuner run --replay` (tuner/run/engine.py: _replay_scheduler)
    Internal("ray.tune.execution.tune_controller.TuneController._schedule_trial_stop",
             "tuner/run/engine.py: _replay_scheduler (the STOP cached for a trial paused while saving)",
             source_has("self._cached_trial_decisions[trial.trial_id] = TrialScheduler.STOP"),
             via="drop_replay_stale_stop"),
    Internal("ray.tune.schedulers.PopulationBasedTrainingReplay.on_trial_result",
             "tuner/run/engine.py: _replay_scheduler (a config change saves, then pauses, and returns NOOP)",
             source_has("tune_controller._schedule_trial_save(trial, result=result)",
                        "tune_controller.pause_trial(trial, should_checkpoint=False)", "return TrialScheduler.NOOP"),
             via="drop_replay_stale_stop"),
    # the scheduler's state across a resume (tuner/search/scheduler_state.py)
    Internal("ray.tune.execution.tune_controller.TuneController.__getstate__",
             "tuner/search/scheduler_state.py (Ray drops the scheduler from the experiment state)",
             source_has('"_scheduler_alg"')),
    Internal("ray.tune.execution.tune_controller.TuneController.resume",
             "tuner/search/scheduler_state.py: KeepsState (callbacks restored before the trials are re-added)",
             source_has("self._callbacks.restore_from_dir(", "self._requeue_restored_trials(")),
    Internal("ray.tune.callback.CallbackList.CKPT_FILE_TMPL", "tuner/experiment/layout.py: CALLBACK_STATE",
             equals(_tuner("tuner.experiment.layout.CALLBACK_STATE"))),
    Internal("ray.tune.execution.tune_controller.TuneController._set_trial_status",
             "tuner/search/scheduler_state.py: KeepsState._restore", params("trial", "status"), via="controller_set_status"),
    Internal("ray.tune.experiment.Trial", "tuner/search/scheduler_state.py: _TrialsById", via="is_trial"),
    # gpu: auto (tuner/resources/gpu_packing.py)
    Internal("ray.tune.search.basic_variant.BasicVariantGenerator.next_trial",
             "tuner/resources/gpu_packing.py: PackingCallback (the searcher's limit, changed during the run)",
             source_has("self.max_concurrent"), via="set_concurrency_limit"),
    Internal("ray.tune.search.ConcurrencyLimiter.set_max_concurrency", "tuner/resources/gpu_packing.py: PackingCallback",
             params("max_concurrent"), via="set_concurrency_limit"),
    Internal("ray.tune.experiment.Trial.update_resources", "tuner/resources/gpu_packing.py: PackingCallback.on_trial_recover",
             params("resources"), via="set_trial_resources"),
    # PBT and PB2 (tuner/search/algorithms.py)
    Internal("ray.tune.schedulers.PopulationBasedTraining", "tests/test_pbt.py (the population after a resume)",
             _called(lambda cls: cls(hyperparam_mutations={"x": [1, 2]}), attrs("_trial_state", "_num_perturbations")),
             via="pbt_population"),
    Internal("ray.tune.schedulers.PopulationBasedTraining", "tests/test_pbt.py (the count of exploits)",
             _called(lambda cls: cls(hyperparam_mutations={"x": [1, 2]}), attrs("_num_perturbations")),
             via="pbt_perturbations"),
    Internal("ray.tune.schedulers.PopulationBasedTraining", "tuner/search/population.py: KeepsCloneSources",
             _mixin_fits("PBTCloneSourceHooks", "keep_clone_source"), via="PBTCloneSourceHooks"),
    Internal("ray.tune.schedulers.PopulationBasedTraining._checkpoint_or_exploit",
             "tuner/search/population.py: KeepsCloneSources (a top trial's clone source, kept in last_checkpoint)",
             all_of(params("trial", "tune_controller", "upper_quantile", "lower_quantile"),
                    source_has("state.last_checkpoint = tune_controller._schedule_trial_save(",
                               "state.last_checkpoint = trial.checkpoint", "last_checkpoint.resolve()")),
             via="PBTCloneSourceHooks"),
    Internal("ray.tune.schedulers.pbt._PBTTrialState", "tuner/search/population.py: KeepsCloneSources",
             _called(lambda cls: cls(SimpleNamespace(experiment_tag="t")), attrs("last_checkpoint", "last_result")), via="pbt_clone_sources"),
    Internal("ray.tune.schedulers.pbt._PBTTrialState", "tuner/search/population.py: KeepsCloneSources (an ended trial's "
             "clone source is forgotten, as Ray does for a trial that is not a top one)",
             _called(lambda cls: cls(SimpleNamespace(experiment_tag="t")), attrs("last_checkpoint")),
             via="drop_pbt_clone_source"),
    Internal("ray.tune.schedulers.PopulationBasedTraining._checkpoint_or_exploit",
             "tuner/search/population.py: KeepsCloneSources (Ray forgets the source of a trial that is not a top one)",
             source_has("state.last_checkpoint = None"), via="drop_pbt_clone_source"),
    Internal("ray.tune.experiment.Trial.latest_checkpoint_result", "tuner/search/population.py: KeepsCloneSources (the "
             "iteration a kept checkpoint was reported at names its copy)",
             lambda prop: source_has("self.run_metadata.checkpoint_manager.latest_checkpoint_result")(prop.fget),
             via="trial_checkpoint_metrics"),
    Internal("ray.train._internal.session._TrainingResult", "tuner/search/population.py: KeepsCloneSources (a checkpoint "
             "with the result it was reported with)", params("checkpoint", "metrics"), via="trial_checkpoint_metrics"),
    Internal("ray.tune.schedulers.PopulationBasedTraining._log_config_on_step",
             "tuner/adapters/ray_internals.py: PBTCloneSourceHooks (each exploit logged with the iterations of the results "
             "at the perturbation and of the kept checkpoint)",
             all_of(params("trial_state", "new_state", "trial", "trial_to_clone", "new_config"),
                    source_has("trial.last_result.get(TRAINING_ITERATION, 0),",
                               "trial_to_clone.last_result.get(TRAINING_ITERATION, 0),")),
             via="PBTCloneSourceHooks"),
    Internal("ray.tune.execution.tune_controller.TuneController._process_trial_result",
             "tuner/adapters/ray_internals.py: PBTCloneSourceHooks (Trial.last_result is updated after the scheduler's "
             "on_trial_result, so Ray's log read it one result early)",
             _source_in_order("self._scheduler_alg.on_trial_result(", "trial.update_last_result(result)"),
             via="PBTCloneSourceHooks"),
    Internal("ray.tune.schedulers.PopulationBasedTraining._exploit",
             "tuner/search/population.py: KeepsCloneSources (clones restore from the kept source)",
             source_has("copy.copy(new_state.last_checkpoint)"), via="PBTCloneSourceHooks"),
    Internal("ray.tune.schedulers.PopulationBasedTraining._checkpoint_or_exploit",
             "tuner/search/population.py: _SkippedExploitNote (the note when a top trial has no checkpoint)",
             source_has('f"[pbt]: no checkpoint for trial {trial_to_clone}."', '" Skip exploit for Trial {trial}"'),
             via="watch_skipped_exploits"),
    Internal("ray.tune.schedulers.pbt.logger", "tuner/search/population.py: _SkippedExploitNote (a filter on it)",
             lambda log: equals("ray.tune.schedulers.pbt")(log.name), via="watch_skipped_exploits"),
    Internal("ray.train._internal.session._FutureTrainingResult", "tuner/search/scheduler_state.py: _TrialsById",
             attrs("resolve"), via="is_checkpoint_in_flight"),
    # reporters and logger callbacks
    Internal("ray.tune.CLIReporter", "tuner/run/console.py: TableReporter",
             all_of(_mixin_fits("CLIReporterHooks", *ROUTED["CLIReporterHooks"][1], "progress", "location"),
                    _called(lambda cls: cls(), attrs("_metric", "_mode", "_total_samples", "_last_report_time"))),
             via="CLIReporterHooks"),
    Internal("ray.tune.progress_reporter.TuneReporterBase._progress_str", "tuner/run/console.py: TableReporter",
             params("trials", "done", "sys_info", "fmt", "delim"), via="CLIReporterHooks"),
    Internal("ray.tune.progress_reporter.TuneReporterBase._current_best_trial", "tuner/run/console.py: TableReporter",
             all_of(params("trials"), source_has("return best_trial, metric")), via="CLIReporterHooks"),
    Internal("ray.tune.progress_reporter.TuneReporterBase.should_report",
             "tuner/run/console.py: TableReporter.setup (the first table one period after the start)",
             source_has("self._last_report_time"), via="CLIReporterHooks"),
    Internal("ray.tune.logger.logger.LoggerCallback._restore_from_remote",
             "tuner/run/loggers.py: JsonLogger, CsvLogger (a trial's file is copied from the storage once a run)",
             all_of(params("file_name", "trial"),
                    source_has("if not trial.checkpoint:", "pyarrow.fs.copy_files(",
                               "remote_file = Path(trial.storage.trial_fs_path, file_name).as_posix()",
                               "source_filesystem=trial.storage.storage_filesystem")),
             via="StagedResultFileHooks"),
    Internal("ray.tune.logger.JsonLoggerCallback", "tuner/run/loggers.py: JsonLogger",
             all_of(_mixin_fits("StagedResultFileHooks"),
                    _called(lambda cls: cls.log_trial_start, source_has("self._restore_from_remote(EXPR_RESULT_FILE, "))),
             via="StagedResultFileHooks"),
    Internal("ray.tune.logger.CSVLoggerCallback", "tuner/run/loggers.py: CsvLogger",
             all_of(_mixin_fits("StagedResultFileHooks"),
                    _called(lambda cls: cls._setup_trial, source_has("self._restore_from_remote(EXPR_PROGRESS_FILE, "))),
             via="StagedResultFileHooks"),
    Internal("ray.tune.logger.TBXLoggerCallback", "tuner/run/loggers.py: HParamsTBXCallback",
             all_of(_mixin_fits("TBXLoggerHooks", *ROUTED["TBXLoggerHooks"][1]),
                    _called(_tbx_callback, attrs("_trial_result", "_trial_writer")),
                    _called(lambda cls: cls.log_trial_end, source_has("self._try_log_hparams(trial, "))),
             via="TBXLoggerHooks"),
    Internal("ray.air.integrations.wandb.WandbLoggerCallback._start_logging_actor",
             "tuner/run/loggers.py: WandbCallback", all_of(params("trial", "exclude_results", "wandb_init_kwargs"),
                                                          source_has("if not self._remote_logger_class:")),
             via="WandbLoggerHooks"),
    Internal("ray.air.integrations.wandb.WandbLoggerCallback", "tuner/run/loggers.py: WandbCallback",
             all_of(attrs("_logger_actor_cls"), _mixin_fits("WandbLoggerHooks", *ROUTED["WandbLoggerHooks"][1]),
                    _called(_wandb_callback, attrs("_remote_logger_class", "kwargs"))), via="WandbLoggerHooks"),
    Internal("ray.air.integrations.wandb._WandbLoggingActor", "tuner/run/loggers.py: WandbCallback",
             all_of(_called(lambda cls: cls.__init__, source_has("self._wandb = wandb")),
                    _called(lambda cls: cls.run, source_has("self._wandb.finish()"))),
             via="WandbLoggerHooks"),
    Internal("ray.air.util.node._force_on_current_node", "tuner/run/loggers.py: WandbCallback",
             # Called with nothing it returns the options dict tuner unpacks (calling it here would start a Ray).
             all_of(params("remote_func_or_actor_class"),
                    source_has("_force_on_node(current_node_id, remote_func_or_actor_class)")),
             via="WandbLoggerHooks"),
    Internal("ray.air.integrations.mlflow.MLflowLoggerCallback", "tuner/run/loggers.py: MLflowCallback.setup",
             _called(lambda cls: cls(tracking_uri="file:/tmp/x"), attrs("tracking_uri"))),
    # the Ray process, the cluster and its jobs
    Internal("ray._private.worker._global_node", "tuner/run/loggers.py: WandbCallback", via="ray_started_here"),
    Internal("ray._private.worker._global_node", "tuner/run/failures.py: drop_stale_staging (no node: Ray Client)",
             via="experiment_staging_path"),
    Internal("ray.train.constants._get_ray_train_session_dir", "tuner/run/failures.py: drop_stale_staging (the staging "
             "folder is in this Ray node's session folder)",
             source_has("ray._private.worker._global_node.get_session_dir_path()"), via="experiment_staging_path"),
    Internal("ray._private.accelerators.NvidiaGPUAcceleratorManager.get_current_node_num_accelerators",
             "tuner/resources/sizing.py: _nvidia_gpus", params(), via="nvidia_gpu_count"),
    Internal("ray._raylet.Config.initialize", "tuner/run/cluster.py: use_token_if_available (refresh the auth mode)",
             params("config_list"), via="refresh_auth_mode"),
    Internal("ray._private.node.Node._init_gcs_client", "tuner/run/cluster.py: ray_session (one try at an address)",
             source_has(f'os.environ.get("{_ri("GCS_CONNECT_TRIES_ENV")}")',
                        "num_retries = max(1, int(gcs_wait_override))", "for _ in range(num_retries):"),
             via="GCS_CONNECT_TRIES_ENV"),
    Internal("ray._private.worker", "tuner/run/cluster.py: ray_session (the error of an address Ray cannot connect to)",
             source_has('raise ConnectionError(\n                f"Failed to connect to Ray cluster at {gcs_address}"'),
             via="GCS_CONNECT_TRIES_ENV"),
    Internal("ray._private.node.Node.__init__", "tuner/run/cluster.py: start_local_ray (a second try at a start that "
             "timed out)", source_has(f'raise Exception(\n                        "{_ri("RAY_START_TIMED_OUT")}. This "'),
             via="RAY_START_TIMED_OUT"),
    Internal("ray._common.constants.HEAD_NODE_RESOURCE_NAME", "tuner/run/cluster.py: submit_job",
             equals(_ri("HEAD_RESOURCE")), via="HEAD_RESOURCE"),
    Internal("ray._private.runtime_env.constants.RAY_JOB_CONFIG_JSON_ENV_VAR",
             "tuner/run/cluster.py: ray_session; tuner/run/engine.py: _ship_user_packages (inside a job)",
             equals(_ri("RAY_JOB_CONFIG")), via="RAY_JOB_CONFIG"),
    *(Internal(f"{module}.logger", "tuner/run/cluster.py: job_client (quiets them)", attrs("setLevel"),
               via="JOBS_CLIENT_LOGGERS") for module in _ri("JOBS_CLIENT_LOGGERS") if module != "ray"),
    # public Ray names whose undocumented behaviour tuner relies on, used where they are needed
    Internal("ray.tune.experiment.Trial.error_file", "tuner/run/failures.py: _is_user_bug"),
    *(Internal(f"ray.exceptions.{name}", "tuner/run/failures.py: _NOT_BUGS (errors that are not the user's bug)")
      for name in ("RayActorError", "ActorDiedError", "NodeDiedError", "WorkerCrashedError", "ActorUnavailableError")),
    # Ray-free copies of Ray's names (tuner/core/params.py, tuner/experiment/layout.py)
    Internal("ray.tune.result.AUTO_RESULT_KEYS", "tuner/core/params.py: RAY_RESULT_KEYS (results.csv, tuner report)",
             subset_of(_tuner("tuner.core.params.RAY_RESULT_KEYS"))),
    Internal("ray.tune.execution.tune_controller.TuneController.CKPT_FILE_TMPL",
             "tuner/experiment/layout.py: EXPERIMENT_STATE (tuner/adapters/state.py, tuner/run/failures.py)",
             equals(_tuner("tuner.experiment.layout.EXPERIMENT_STATE"))),
    *(Internal(f"ray.air.constants.{ray_name}", f"tuner/experiment/layout.py: {name} (tuner/report/loading.py, tuner/run/results.py)",
               equals(_tuner(f"tuner.experiment.layout.{name}")))
      for ray_name, name in (("EXPR_PARAM_FILE", "PARAMS_FILE"), ("EXPR_RESULT_FILE", "RESULT_FILE"),
                             ("EXPR_ERROR_FILE", "ERROR_FILE"), ("EXPR_PROGRESS_FILE", "PROGRESS_FILE"))),
    # PBT's perturbation logs (tuner/search/schedule.py reads them; tests/test_schedule.py on a real run)
    Internal("ray.tune.schedulers.pbt.PopulationBasedTraining._log_config_on_step",
             "tuner/search/schedule.py: read_perturbations, trial_schedule (the lines of pbt_global.txt, pbt_policy_<id>.txt)",
             source_has("trial_name,", "trial_to_clone_name,", "trial.last_result.get(TRAINING_ITERATION, 0),",
                        "trial_to_clone.last_result.get(TRAINING_ITERATION, 0),", "trial_to_clone.config,",
                        "new_config,", "json.dumps(policy"), via="pbt_log_rows"),
    Internal("ray.tune.schedulers.pbt.PopulationBasedTraining._log_config_on_step",
             "tuner/experiment/layout.py: PBT_GLOBAL, PBT_POLICY (tuner/search/schedule.py)",
             source_has(f'"{_tuner("tuner.experiment.layout.PBT_GLOBAL")}"',
                        '"{}" + trial_id + "{}"'.format(*_tuner("tuner.experiment.layout.PBT_POLICY").split("{}")))),
    Internal("ray.tune.schedulers.pbt.PopulationBasedTrainingReplay._load_policy",
             "tuner/search/schedule.py: trial_schedule (reads a policy file as the replay does)",
             source_has("old_tag, new_tag, old_step, new_step, old_conf, new_conf", "old_tag != last_new_tag",
                        "policy.append((new_step, new_conf))"), via="pbt_log_rows"),
    Internal("ray.tune.schedulers.pbt._PBTTrialState.__init__", "tuner/search/schedule.py: the tags in PBT's logs",
             source_has("self.orig_tag = trial.experiment_tag"), via="pbt_orig_tag"),
    Internal("ray.tune.schedulers.pbt._make_experiment_tag", "tuner/search/schedule.py: a perturbed trial's original tag",
             source_has('"{}@perturbed[{}]"'), via="pbt_orig_tag"),
    Internal("ray.tune.experiment.trial.Trial.__init__",
             "tuner/search/schedule.py: the saved trial's experiment_tag, config and evaluated_params",
             source_has("self.experiment_tag = experiment_tag", "self.evaluated_params = evaluated_params or {}"),
             via="saved_trial_initial_config"),
    Internal("ray.tune.search.basic_variant._TrialIterator.create_trial",
             "tuner/report/loading.py: the order the trials were created in (random and grid search)",
             source_has("experiment_tag = str(self.counter)", 'experiment_tag += "_{}".format(',
                        "self.counter += 1"), via="saved_trial_creation_index"),
    Internal("ray.tune.search.search_generator.SearchGenerator.create_trial_if_possible",
             "tuner/report/loading.py: the order the trials were created in (a searcher)",
             source_has("self._counter += 1", 'tag = "{0}_{1}".format(str(self._counter),'),
             via="saved_trial_creation_index"),
    Internal("ray.tune.Trainable", "tuner/spec/trainable.py: is_class_trainable, implements (tell Ray's class by its "
             "name and module, without importing Ray)",
             lambda cls: equals(("Trainable", True))((cls.__name__, cls.__module__.startswith("ray.tune")))),
    Internal("ray.tune.Trainable.save_checkpoint", "tuner/spec/trainable.py: implements, check_trainable",
             source_has("raise NotImplementedError")),
    Internal("ray.tune.CheckpointConfig", "tuner/run/trainable.py: checkpoint_config (class trainables)",
             params("num_to_keep", "checkpoint_frequency", "checkpoint_at_end")),
]

#: Entries of tuner/adapters/ray_internals.py checked on a tiny real run (below) rather than in INTERNALS.
CHECKED_ON_A_RUN = {"saved_trials", "saved_stopper", "result_grid_trials", "trial_dir_name", "ray_started_here",
                    "reopen_basic_variant_state", "reopen_search_generator_state"}

#: Entries of tuner/adapters/ray_internals.py that name config keys of Ray's compiled raylet (checked below).
CHECKED_IN_THE_RAYLET = {"LOCAL_RAY_SYSTEM_CONFIG", "local_ray_options"}

#: Environment variables tuner sets for Ray (tuner/run/console.py: prepare_console): Ray's source reads them.
RAY_ENV_VARS = {
    "TUNE_GLOBAL_CHECKPOINT_S": "ray.tune.execution.tune_controller",
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "ray.tune.utils.callback",
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "ray.tune.execution.experiment_state",
    "RAY_AIR_NEW_OUTPUT": "ray.air.constants",
}


def _resolve(name: str) -> Any:
    """Import the longest module prefix of a dotted name, then follow the attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


@pytest.mark.parametrize("internal", INTERNALS, ids=lambda i: f"{i.name}[{i.via}]" if i.via else i.name)
def test_ray_internal_is_still_there(internal: Internal):
    try:
        obj = _resolve(internal.name)
        internal.check(obj)
    except (ImportError, AttributeError, AssertionError, TypeError, ValueError) as err:
        user = f"tuner.adapters.ray_internals.{internal.via} ({internal.used_by})" if internal.via else internal.used_by
        pytest.fail(f"{internal.name}, used by {user}, moved or changed: {type(err).__name__}: {err}")


@pytest.mark.parametrize("variable", RAY_ENV_VARS)
def test_ray_reads_the_environment_variable_tuner_sets(variable):
    module = importlib.import_module(RAY_ENV_VARS[variable])
    assert variable in inspect.getsource(module), \
        f"{module.__name__} no longer reads {variable}, which tuner/run/console.py: prepare_console sets"


def test_experiment_state_is_saved_every_2_s_unless_the_user_set_it(monkeypatch):
    """README "When things go wrong": Ray Tune saves the experiment state at least every 2 s: prepare_console sets
    TUNE_GLOBAL_CHECKPOINT_S to 2 where it is unset, and leaves a value the user set."""
    import os
    from unittest import mock

    from tuner.run.console import prepare_console

    with mock.patch.dict(os.environ):  # prepare_console's other variables are restored too
        monkeypatch.delenv("TUNE_GLOBAL_CHECKPOINT_S", raising=False)
        prepare_console()
        assert os.environ["TUNE_GLOBAL_CHECKPOINT_S"] == "2"
        monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "7")
        prepare_console()
        assert os.environ["TUNE_GLOBAL_CHECKPOINT_S"] == "7"


def test_a_preemption_watcher_setting_the_user_made_wins_over_tuners(monkeypatch):
    """README "Resources and DDP trials": a RAY_TRAIN_ENABLE_PREEMPTION_WATCHER you set wins over tuner's (0 on a
    one-node Ray): lean_train_env leaves it out, and a lean DDP trial's launcher keeps it (Ray's node list faked:
    one node, no Ray started)."""
    import os

    import ray

    from tuner.adapters.ray_internals import TRAIN_HEALTH_CHECK_INTERVAL_ENV, TRAIN_PREEMPTION_WATCHER_ENV, lean_train_env
    from tuner.run.trainable import _train_launcher

    monkeypatch.setenv(TRAIN_HEALTH_CHECK_INTERVAL_ENV, "")  # so that monkeypatch unsets it again after the test
    monkeypatch.delenv(TRAIN_HEALTH_CHECK_INTERVAL_ENV)
    monkeypatch.setenv(TRAIN_PREEMPTION_WATCHER_ENV, "1")
    assert lean_train_env(single_node=True) == {TRAIN_HEALTH_CHECK_INTERVAL_ENV: "0.5"}
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}])
    _train_launcher(lean=True)
    assert (os.environ[TRAIN_PREEMPTION_WATCHER_ENV], os.environ[TRAIN_HEALTH_CHECK_INTERVAL_ENV]) == ("1", "0.5")


def test_the_check_fails_on_a_moved_internal():
    with pytest.raises(AttributeError):
        _resolve("ray.tune.search.basic_variant._NoSuchIterator")
    with pytest.raises(AssertionError):
        params("no_such_parameter")(_resolve("ray.tune.utils.util._atomic_save"))


@pytest.mark.parametrize("mixin", ROUTED)
def test_tuner_classes_take_rays_hooks_through_the_mixins(mixin):
    """Ray calls the mixin's private hooks on tuner's class (the mixin comes first), and they find
    the methods tuner's class defines for them."""
    where, hooks = ROUTED[mixin]
    if mixin == "WandbLoggerHooks":
        pytest.importorskip("wandb")
    cls, hooks_cls = _tuner(where), _ri(mixin)
    assert hooks_cls in cls.__mro__
    for name in (n for n in vars(hooks_cls) if not n.startswith("__")):
        assert getattr(cls, name) is getattr(hooks_cls, name), f"{where}.{name} is not the mixin's"
    missing = [h for h in hooks if h not in vars(cls)]
    assert not missing, f"{where} does not define {missing}, which tuner.adapters.ray_internals.{mixin} calls"


def test_the_table_reporter_works_through_its_hooks():
    """Ray-free: the clock, the best trial and the table text of tuner's TableReporter go through Ray's hooks."""
    import time

    from tuner.run.console import TableReporter

    reporter = TableReporter(metric_columns=["loss"])
    reporter.setup(start_time=time.time(), total_samples=3, metric="loss", mode="min")
    assert reporter.reporter_metric == "loss" and reporter.reporter_mode == "min"
    assert reporter.reporter_total_samples == 3
    assert not reporter.should_report([], done=False), "the first table comes at once again"
    assert reporter._current_best_trial([]) == (None, "loss")
    assert "== Status ==" in reporter.table_text([], False)


# --------------------------------------------------------------------------- every entry of ray_internals is checked


def _defined_in_ray_internals() -> set[str]:
    """The public names tuner/adapters/ray_internals.py defines at its top level."""
    import ast

    tree = ast.parse(Path(_tuner("tuner.adapters.ray_internals.__file__")).read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    names.add(target.id)
    return {n for n in names if not n.startswith("_")}


def test_every_entry_of_ray_internals_is_listed_and_checked():
    from tuner.adapters import ray_internals

    exported = set(ray_internals.__all__)
    assert _defined_in_ray_internals() == exported, "tuner/adapters/ray_internals.py: __all__ must list every entry"
    vias = {i.via for i in INTERNALS if i.via}
    assert not vias - exported, f"INTERNALS names entries that tuner.adapters.ray_internals lacks: {sorted(vias - exported)}"
    assert not CHECKED_ON_A_RUN - exported
    unchecked = exported - vias - CHECKED_ON_A_RUN - CHECKED_IN_THE_RAYLET - {"CHECKED_RAY_VERSION"}
    assert not unchecked, f"no check of Ray for tuner.adapters.ray_internals.{sorted(unchecked)}: add rows to INTERNALS"


def test_the_local_ray_system_config_names_keys_of_rays_raylet(monkeypatch):
    """Each key tuner gives ``ray.init(_system_config=...)`` is a config name in Ray's raylet binary,
    and it is given only where ray.init starts a Ray (it refuses one when it connects)."""
    from ray._private.services import RAYLET_EXECUTABLE

    from tuner.adapters.ray_internals import LOCAL_RAY_SYSTEM_CONFIG, local_ray_options

    binary = Path(RAYLET_EXECUTABLE).read_bytes()
    for key in LOCAL_RAY_SYSTEM_CONFIG:
        assert key.encode() in binary, f"Ray's raylet no longer knows the config key {key!r} (tuner/run/cluster.py: ray_session)"
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert local_ray_options(None) == {"_system_config": LOCAL_RAY_SYSTEM_CONFIG}
    assert local_ray_options("auto") == local_ray_options("ray://head:10001") == {}
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    assert local_ray_options(None) == {}


def test_the_installed_ray_is_the_one_the_internals_were_checked_against():
    import ray

    from tuner.adapters.ray_internals import CHECKED_RAY_VERSION

    assert ray.__version__.split(".")[:2] == CHECKED_RAY_VERSION.split("."), \
        f"Ray {ray.__version__}: read every entry of tuner/adapters/ray_internals.py against it, then set CHECKED_RAY_VERSION"


# --------------------------------------------------------------------------- no other module touches Ray's private names

_TUNER = Path(__file__).resolve().parents[1] / "tuner"
_HOME = "adapters/ray_internals.py"


#: Names of Ray's that are not spelt private but are no public API either (attributes of Ray's
#: internal objects, keys of the state Ray saves, the name of Ray's signal handler): only
#: tuner/adapters/ray_internals.py uses them, as an attribute or as a whole string.
UNDOCUMENTED = frozenset({
    "trial_dir_name", "experiment_fs_path", "init_local_path", "get_trials", "stop_trial", "current_trials",
    "unresolved_spec", "signal_interrupt_tune_run", "trial_data", "runner_data", "bohber", "trial_to_params",
    "name:ConcurrencyLimiter", "live_trials", "num_unfinished_live_trials", "tag_callbacks", "all_processes",
    "get_current_node_num_accelerators",
})


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and not name.startswith("_tuner_")


def _private_module(dotted: str) -> bool:
    """``ray._private.worker``, ``ray.train._internal``, ``ray.tune.execution``, ``ray.train.v2``..."""
    parts = dotted.split(".")
    return parts[0] == "ray" and (any(_private(p) for p in parts) or dotted.startswith(
        ("ray.tune.execution", "ray.train.v2")))


@functools.cache
def _ray_vocabulary() -> frozenset:
    """Every ``_name`` in the installed Ray's source (tests left out)."""
    import re

    import ray

    found: set[str] = set()
    pattern = re.compile(r"\b(_[A-Za-z]\w*)")
    for file in Path(ray.__file__).parent.rglob("*.py"):
        if "tests" not in file.parts:
            found.update(pattern.findall(file.read_text(encoding="utf-8", errors="replace")))
    return frozenset(found)


def _imports(tree) -> dict[str, str]:
    """Local name -> what it was imported as (``ray.tune.CLIReporter``, ``os``), in any scope."""
    import ast

    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _dotted(node) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    import ast

    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _ray_classes(tree, imports: dict[str, str]) -> dict[str, list]:
    """Class name -> the Ray classes it extends, directly, through a class of the module, or as a
    mixin that a class of the module puts before one."""
    import ast

    classes = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    direct: dict[str, list] = {}

    def resolve(name: str, seen: frozenset = frozenset()) -> list:
        if name in seen:
            return []
        out = []
        for base in classes[name].bases:
            dotted = _dotted(base)
            if dotted is None:
                continue
            root, _, rest = dotted.partition(".")
            if root in classes and not rest:
                out += resolve(root, seen | {name})
            elif imports.get(root, "").split(".")[0] == "ray":
                out.append(_resolve(".".join(filter(None, [imports[root], rest]))))
        return out

    for name in classes:
        direct[name] = resolve(name)
    for name, node in classes.items():  # a mixin meets the Ray classes of the classes that use it
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                direct[base.id] = direct[base.id] + direct[name]
    return direct


@functools.cache
def _ray_class_names(cls: type) -> frozenset:
    """The ``_names`` of a Ray class: its attributes and the ``self._x`` its (Ray) classes set or read."""
    import re

    names = {n for n in dir(cls) if _private(n)}
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] == "ray":
            try:
                names.update(re.findall(r"self\.(_[A-Za-z]\w*)", inspect.getsource(klass)))
            except (OSError, TypeError):
                pass
    return frozenset(n for n in names if _private(n))


def _own_names(trees) -> set[str]:
    """``_names`` of attributes tuner itself defines: methods and class attributes of its
    classes, and the attributes it assigns (``self._x = ...``, ``spec._x = ...``)."""
    import ast

    own = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        own.add(item.name)
                    elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                        targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                        own.update(t.id for t in targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
    return {n for n in own if _private(n)}


def _touches(source: str, own: set[str]) -> list[str]:
    """Where a module's source reaches a Ray private name (``line: what``).

    * an import of a private Ray module (``_private``, ``_internal``, ``_raylet``, ...,
      ``ray.tune.execution``, ``ray.train.v2``) or of a ``_name`` from Ray;
    * a ``_name`` on an imported Ray module or class, and an assignment to any attribute
      of one (a monkeypatch);
    * in a class that extends a Ray class (or is a mixin of one): a ``self._name`` or a
      method ``_name`` that the Ray class has;
    * a ``_name`` of Ray's (one in Ray's source) on any other object, or as a string
      (``getattr``, a pickled state's key), unless tuner defines that name itself;
    * a name of :data:`UNDOCUMENTED`, as an attribute or a whole string.
    """
    import ast

    tree = ast.parse(source)
    imports = _imports(tree)
    ray_classes = _ray_classes(tree, imports)
    found = []

    def add(node, what):
        found.append(f"{getattr(node, 'lineno', '?')}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _private_module(a.name):
                    add(node, f"import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ray":
            for a in node.names:
                if _private_module(node.module) or _private(a.name):
                    add(node, f"from {node.module} import {a.name}")
    checked = set()
    for name, node in ((n.name, n) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        ray_names = set().union(*(_ray_class_names(c) for c in ray_classes[name] if isinstance(c, type)))
        for sub in ast.walk(node):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and sub in node.body and sub.name in ray_names:
                add(sub, f"{name}.{sub.name} overrides Ray's")
            elif isinstance(sub, ast.Attribute) and _private(sub.attr):
                owner = sub.value
                mine = isinstance(owner, ast.Name) and owner.id in ("self", "cls") or (
                    isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super")
                if mine:
                    checked.add(id(sub))
                    if sub.attr in ray_names:
                        add(sub, f"{name}: {ast.unparse(sub)} is Ray's")
    vocabulary = _ray_vocabulary()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node) or ""
            root = dotted.split(".")[0]
            origin = imports.get(root, "")
            if origin.split(".")[0] == "ray":
                if isinstance(node.ctx, ast.Store):
                    add(node, f"{dotted} = ... patches Ray")
                elif _private(node.attr) or _private_module(f"{origin}.{dotted.partition('.')[2]}"):
                    add(node, dotted)
            elif _private(node.attr) and id(node) not in checked and not origin \
                    and node.attr in vocabulary and node.attr not in own:
                add(node, f"{ast.unparse(node)}: Ray's {node.attr}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in UNDOCUMENTED:
            add(node, f"{ast.unparse(node)}: Ray's undocumented {node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in UNDOCUMENTED:
            add(node, f"the string {node.value!r}: Ray's undocumented name")
    for node in _key_strings(tree):
        if node.value.isidentifier() and _private(node.value) and node.value in vocabulary and node.value not in own:
            add(node, f"the string {node.value!r}: Ray's name")
    return sorted(set(found), key=lambda f: int(f.split(":")[0]) if f.split(":")[0].isdigit() else 0)


def _key_strings(tree) -> list:
    """The strings that name an attribute or a key: ``getattr(x, "_a")``, ``d["_a"]``,
    ``d.get("_a")`` (``setdefault``, ``pop``), ``"_a" in d``, ``{"_a": ...}``."""
    import ast

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            out.append(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) > 1 \
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr"):
            out.append(node.args[1])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args \
                and node.func.attr in ("get", "setdefault", "pop"):
            out.append(node.args[0])
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            out.append(node.left)
        elif isinstance(node, ast.Dict):
            out.extend(k for k in node.keys if k is not None)
    return [n for n in out if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _tuner_trees() -> dict[str, Any]:
    import ast

    return {p.relative_to(_TUNER).as_posix(): ast.parse(p.read_text(encoding="utf-8"))
            for p in sorted(_TUNER.rglob("*.py"))}


def test_no_module_but_ray_internals_touches_a_ray_private_name():
    trees = _tuner_trees()
    assert _HOME in trees
    own = _own_names(tree for name, tree in trees.items() if name != _HOME)
    found = {name: _touches((_TUNER / name).read_text(encoding="utf-8"), own) for name in trees if name != _HOME}
    found = {name: touches for name, touches in found.items() if touches}
    assert not found, ("Ray's private names outside tuner/adapters/ray_internals.py (put each behind an entry there, "
                       f"with a row here): {found}")


BAD_TOUCHES = {
    "private import": "from ray.tune.utils.util import _atomic_save\n",
    "private module": "import ray._private.worker as worker\n",
    "private module, from": "from ray.train._internal.session import get_session\n",
    "Tune's controller": "from ray.tune.execution.tune_controller import TuneController\n",
    "Ray Train v2": "def f():\n    from ray.train.v2.api.config import RunConfig\n",
    "attribute of a Ray object": "def f(grid):\n    return grid._experiment_analysis.trials\n",
    "getattr of a Ray name": "def f(grid):\n    return getattr(grid, '_experiment_analysis', None)\n",
    "a pickled state's key": "def f(state):\n    state['_live_trials'] = set()\n",
    "Ray's attribute in a subclass": ("from ray.tune import CLIReporter\n\nclass T(CLIReporter):\n"
                                      "    def setup(self):\n        self._last_report_time = 0\n"),
    "Ray's hook in a subclass": ("from ray.tune import CLIReporter\n\nclass T(CLIReporter):\n"
                                 "    def _progress_str(self, trials, done):\n        return ''\n"),
    "a mixin of a Ray class": ("from ray.tune.schedulers import HyperBandScheduler\n\nclass M:\n"
                               "    def f(self, t):\n        return self._trial_info[t]\n\n"
                               "class H(M, HyperBandScheduler):\n    pass\n"),
    "a monkeypatch": "import ray.tune.tune as tune_module\n\ntune_module.run = None\n",
    "a private module attribute": "import ray\n\ndef f():\n    return ray._private.worker\n",
    "an undocumented attribute": "def f(trial):\n    return trial.storage.trial_dir_name\n",
    "an undocumented key": "def f(state):\n    return state.get('runner_data', {})\n",
    "Ray's signal handler": "def f(handler):\n    return handler.__name__ == 'signal_interrupt_tune_run'\n",
}


@pytest.mark.parametrize("what", BAD_TOUCHES)
def test_the_scan_sees_a_touch(what):
    own = _own_names(tree for name, tree in _tuner_trees().items() if name != _HOME)
    assert _touches(BAD_TOUCHES[what], own), f"{what} was not seen"


def test_the_scan_leaves_tuners_own_names_alone():
    own = _own_names(tree for name, tree in _tuner_trees().items() if name != _HOME)
    source = ("import os\nfrom ray.tune import Callback\nfrom tuner import trial\n\nclass Mine(Callback):\n"
              "    def __init__(self):\n        self._paused = False\n    def _release(self):\n"
              "        trial.configure(None)\n        os._exit(1)\n")
    assert _touches(source, own) == []


# --------------------------------------------------------------------------- a tiny real run

#: Keys of the state files Ray pickles (file template, then the keys down to the value) that
#: tuner/run/failures.py: reopen_searcher reads and rewrites.
STATE_KEYS = [
    ("basic-variant-state-{}.json", ["_live_trials"]),
    ("basic-variant-state-{}.json", ["_total_samples"]),
    ("basic-variant-state-{}.json", ["_iterators"]),
    ("basic-variant-state-{}.json", ["_uuid_prefix"]),
    ("basic-variant-state-{}.json", ["_constant_grid_search"]),
    ("basic-variant-state-{}.json", ["_random_state"]),
    ("basic-variant-state-{}.json", ["_finished"]),
    ("search_gen_state-{}.json", ["total_samples"]),
    ("search_gen_state-{}.json", ["finished"]),
    ("search_gen_state-{}.json", ["counter"]),
    ("search_gen_state-{}.json", ["name:ConcurrencyLimiter", "live_trials"]),
    ("search_gen_state-{}.json", ["name:ConcurrencyLimiter", "num_unfinished_live_trials"]),
]


@pytest.fixture(scope="module")
def tiny_runs(ray_local, tmp_path_factory):
    """Two tiny runs through tuner on the test session's Ray: random search, and Optuna with a
    concurrency limit (Ray wraps it in a ConcurrencyLimiter).

    Yields ``{"random": path, "optuna": path, "grid": ResultGrid}``: the experiment folders,
    and the ``ResultGrid`` that ``Tuner.fit()`` gave the random run (seen on its way to
    ``tuner.run.results.collect_results``, which is called unchanged).
    """
    import tuner.run.results
    from tuner import tune_model

    storage = tmp_path_factory.mktemp("internals")
    base = {"trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min", "num_samples": 2,
            "param_space": {"x": {"type": "uniform", "low": 0, "high": 1}, "epochs": 1},
            "reporting": {"cli": False, "tensorboard": False}}
    grids = []
    collect = tuner.run.results.collect_results

    def seen(spec, grid, *args, **kwargs):
        grids.append(grid)
        return collect(spec, grid, *args, **kwargs)

    tuner.run.results.collect_results = seen
    try:
        runs = {"random": tune_model({**base, "name": "random"}, storage=str(storage)).experiment_path,
                "optuna": tune_model({**base, "name": "optuna", "search": {"algorithm": "optuna"},
                                      "max_concurrent_trials": 1}, storage=str(storage)).experiment_path}
    finally:
        tuner.run.results.collect_results = collect
    return {**runs, "grid": grids[0]}


@pytest.mark.parametrize("template,keys", STATE_KEYS, ids=lambda v: v if isinstance(v, str) else "/".join(v))
def test_pickled_searcher_state_keeps_the_keys_tuner_rewrites(tiny_runs, template, keys):
    from ray import cloudpickle

    run = "random" if template.startswith("basic") else "optuna"
    files = sorted(Path(tiny_runs[run]).glob(template.format("*")))
    assert files, f"Ray wrote no {template} (tuner/run/failures.py: reopen_searcher reads it)"
    state = cloudpickle.loads(files[-1].read_bytes())
    for depth, key in enumerate(keys):
        assert isinstance(state, dict) and key in state, \
            f"{template}: no {'/'.join(keys[:depth + 1])} (tuner/run/failures.py: reopen_searcher rewrites it)"
        state = state[key]


def test_experiment_state_file_keeps_what_tuner_reads(tiny_runs):
    """tuner.adapters.ray_internals.saved_trials and saved_stopper read Ray's experiment state, through
    tuner/adapters/state.py's read_state (for tuner/run/failures.py: reopen_searcher, time_budget_used; tuner/report/loading.py)."""
    from tuner.run.failures import ExperimentStopper
    from tuner.experiment.layout import EXPERIMENT_STATE_GLOB
    from tuner.adapters.ray_internals import saved_stopper, saved_trials
    from tuner.adapters.state import read_state

    path = Path(tiny_runs["random"])
    states = sorted(path.glob(EXPERIMENT_STATE_GLOB))
    assert states, f"no {EXPERIMENT_STATE_GLOB} in {sorted(p.name for p in path.iterdir())}"
    state = json.loads(states[-1].read_text())
    trials = saved_trials(state)
    assert len(trials) == 2 and all({"trial_id", "status", "config"} <= set(t) for t in trials)
    stopper = saved_stopper(state)
    assert isinstance(stopper, ExperimentStopper) and stopper.used_s >= 0
    read = read_state(path)
    assert read is not None and read.file == states[-1] and read.trials == trials



def test_the_saved_state_keeps_each_trial_small(tiny_runs):
    """What tuner adds to each trial in Ray's experiment state, a file Ray rewrites whole every few seconds
    (benchmarks/scale.py): the trial folder's name creator is pickled by reference (a lambda was pickled
    whole, 1.4 kB a trial), and a run without DDP trials has no placement-group releaser, whose step hook
    looks at every trial (tuner/run/engine.py: run_prepared)."""
    from ray import cloudpickle
    from ray.tune.utils.serialization import TuneFunctionDecoder

    from tuner.run.failures import PlacementGroupReleaser, StateSnapshots
    from tuner.experiment.layout import EXPERIMENT_STATE_GLOB, trial_folder_of
    from tuner.adapters.ray_internals import saved_trials

    path = Path(tiny_runs["random"])
    state = json.loads(sorted(path.glob(EXPERIMENT_STATE_GLOB))[-1].read_text())
    creators = [json.loads(json.dumps(t["trial_dirname_creator"]), cls=TuneFunctionDecoder, allow_cloudpickle=True)
                for t in saved_trials(state)]
    assert len(creators) == 2 and all(c is trial_folder_of for c in creators)
    run_config = cloudpickle.loads((path / "tuner.pkl").read_bytes())["_run_config"]
    kinds = {type(c) for c in run_config.callbacks}
    assert StateSnapshots in kinds and PlacementGroupReleaser not in kinds

def test_saved_searcher_states_reopen(tiny_runs):
    """tuner.adapters.ray_internals.reopen_*_state rewrite the states Ray saved (tuner/run/failures.py: reopen_searcher)."""
    from ray import cloudpickle

    from tuner.adapters.ray_internals import reopen_basic_variant_state, reopen_search_generator_state

    basic = cloudpickle.loads(sorted(Path(tiny_runs["random"]).glob("basic-variant-state-*.json"))[-1].read_bytes())
    before = basic["_total_samples"]
    reopen_basic_variant_state(basic, set(), 2, 3)
    assert basic["_total_samples"] == before * 3 // 2 and basic["_finished"] is False
    assert len(basic["_iterators"]) == 2
    searcher = cloudpickle.loads(sorted(Path(tiny_runs["optuna"]).glob("search_gen_state-*.json"))[-1].read_bytes())
    reopen_search_generator_state(searcher, set(searcher["name:ConcurrencyLimiter"]["live_trials"]), 3)
    assert searcher["total_samples"] == 3 and searcher["finished"] is False
    assert searcher["name:ConcurrencyLimiter"]["live_trials"] == set()


def test_run_objects_give_tuner_what_it_reads(tiny_runs):
    """tuner.adapters.ray_internals on a finished run's objects: the ResultGrid's trials and a trial's folder names
    (tuner/run/results.py: _statuses; tuner/run/failures.py; tuner/run/console.py), and whether Ray started here."""
    import ray._private.worker as worker

    from tuner.adapters import ray_internals

    grid = tiny_runs["grid"]
    trials = ray_internals.result_grid_trials(grid)
    assert trials is not None and len(trials) == len(grid) == 2
    experiment = Path(tiny_runs["random"])
    for trial in trials:
        assert (experiment / ray_internals.trial_dir_name(trial)).is_dir()
        assert Path(ray_internals.experiment_fs_path(trial)).resolve() == experiment.resolve()
        ray_internals.name_trial_dir(trial)  # named already: nothing changes
        assert (experiment / ray_internals.trial_dir_name(trial)).is_dir()
    assert ray_internals.ray_started_here() is bool(worker._global_node.all_processes)
