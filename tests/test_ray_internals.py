"""Every Ray internal that tuner/ touches is still there, with the shape tuner uses.

tuner reaches past Ray's public API in places (private modules and attributes, the
layout of the state files Ray pickles, the names of Ray's nested functions). pyproject.toml
pins Ray to the minor version tested; these checks say which internal moved, and which
tuner module depends on it, when Ray is upgraded.

To add one: a row in ``INTERNALS`` (checked by importing and inspecting Ray), or in
``STATE_KEYS`` / ``RUN_INTERNALS`` (checked on the files and objects of a tiny real run).
"""

from __future__ import annotations

import importlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

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


def all_of(*checks: Callable[[Any], None]) -> Callable[[Any], None]:
    def check(obj: Any) -> None:
        for one in checks:
            one(obj)
    return check


def _called(make: Callable[[Any], Any], then: Callable[[Any], None]) -> Callable[[Any], None]:
    """Check what ``make(obj)`` gives (an instance, a return value)."""
    def check(obj: Any) -> None:
        then(make(obj))
    return check


def _tuner(name: str) -> Any:
    """A name defined in tuner (``"tuner.cluster.HEAD_RESOURCE"``)."""
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def _wandb_callback(cls):
    pytest.importorskip("wandb")
    return cls(project="internals-check", mode="disabled")


def _newest_checkpoint_finds(storage_context) -> None:
    """tuner.trainable._newest_checkpoint picks the folder that Ray Train names a checkpoint."""
    import tempfile

    from tuner.trainable import _newest_checkpoint

    with tempfile.TemporaryDirectory() as run:
        name = storage_context.make_default_checkpoint_dir_name()
        Path(run, name).mkdir()
        Path(run, "checkpoint_tmp_snapshot").mkdir()
        assert _newest_checkpoint(run) == str(Path(run, name)), f"{name!r} is not seen as a checkpoint"


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Internal:
    """One Ray internal: its dotted name, the tuner code that uses it, and how to check its shape."""

    name: str
    used_by: str
    check: Callable[[Any], None] = exists


INTERNALS = [
    # tuner/cluster.py
    Internal("ray._raylet.Config.initialize", "tuner/cluster.py: use_token_if_available (refresh the auth mode)",
             params("config_list")),
    Internal("ray._common.constants.HEAD_NODE_RESOURCE_NAME", "tuner/cluster.py: HEAD_RESOURCE (submit_job)",
             equals(_tuner("tuner.cluster.HEAD_RESOURCE"))),
    Internal("ray._private.runtime_env.constants.RAY_JOB_CONFIG_JSON_ENV_VAR",
             "tuner/cluster.py: RAY_JOB_CONFIG (ray_session inside a job)", equals(_tuner("tuner.cluster.RAY_JOB_CONFIG"))),
    *(Internal(f"{module}.logger", "tuner/cluster.py: JOBS_CLIENT_LOGGERS (job_client quiets them)",
               attrs("setLevel")) for module in _tuner("tuner.cluster.JOBS_CLIENT_LOGGERS") if module != "ray"),
    # tuner/engine.py
    # tuner replaces tag_callbacks in the module once a run has started: read Ray's from the source file.
    Internal("ray.air._internal.usage", "tuner/engine.py: _lean_callback_usage_tag (replaces tag_callbacks)",
             source_has("def tag_callbacks(callbacks")),
    Internal("ray.air._internal.usage._count_callbacks", "tuner/engine.py: _lean_callback_usage_tag"),
    Internal("ray.air._internal.usage.record_extra_usage_tag", "tuner/engine.py: _lean_callback_usage_tag"),
    Internal("ray.air._internal.usage.TagKey.AIR_CALLBACKS", "tuner/engine.py: _lean_callback_usage_tag"),
    Internal("ray.tune.utils.callback.DEFAULT_CALLBACK_CLASSES", "tuner/engine.py: _lean_callback_usage_tag"),
    Internal("ray.tune.tune.run", "tuner/engine.py: _lean_callback_usage_tag (Ray calls the replaced function)",
             source_has("air_usage.tag_callbacks(")),
    Internal("ray.tune.tune._setup_signal_catching",
             "tuner/engine.py: _InterruptWatch; tuner/failures.py: the SIGUSR1 stop (handler name)",
             source_has("def signal_interrupt_tune_run(", "signal.SIGUSR1")),
    # tuner/failures.py
    Internal("ray.tune.experiment.Trial.init_local_path", "tuner/failures.py: ExperimentStopper.on_experiment_end"),
    Internal("ray.tune.experiment.Trial.error_file", "tuner/failures.py: _is_user_bug"),
    *(Internal(f"ray.exceptions.{name}", "tuner/failures.py: _NOT_BUGS (errors that are not the user's bug)")
      for name in ("RayActorError", "ActorDiedError", "NodeDiedError", "WorkerCrashedError", "ActorUnavailableError")),
    Internal("ray.tune.search.basic_variant._TrialIterator", "tuner/failures.py: reopen_searcher (more samples)",
             params("uuid_prefix", "num_samples", "unresolved_spec", "constant_grid_search", "start", "random_state")),
    Internal("ray.tune.search.basic_variant.BasicVariantGenerator.CKPT_FILE_TMPL",
             "tuner/layout.py: BASIC_VARIANT_STATE (tuner/failures.py: reopen_searcher)",
             equals(_tuner("tuner.layout.BASIC_VARIANT_STATE"))),
    Internal("ray.tune.search.search_generator.SearchGenerator.CKPT_FILE_TMPL",
             "tuner/layout.py: SEARCH_GEN_STATE (tuner/failures.py: reopen_searcher)",
             equals(_tuner("tuner.layout.SEARCH_GEN_STATE"))),
    Internal("ray.tune.search.Searcher.CKPT_FILE_TMPL",
             "tuner/layout.py: SEARCHER_STATE (tuner/failures.py: _remind_bohb_of_live_trials)",
             equals(_tuner("tuner.layout.SEARCHER_STATE"))),
    Internal("ray.tune.utils.util._atomic_save", "tuner/failures.py: reopen_searcher",
             params("state", "checkpoint_dir", "file_name", "tmp_file_name")),
    Internal("ray.tune.utils.serialization.TuneFunctionDecoder", "tuner/failures.py: time_budget_used",
             params("allow_cloudpickle")),
    # tuner/reporting.py
    Internal("ray.air.util.node._force_on_current_node", "tuner/reporting.py: WandbCallback._start_logging_actor",
             # Called with nothing it returns the options dict tuner unpacks (calling it here would start a Ray).
             all_of(params("remote_func_or_actor_class"), source_has("_force_on_node(current_node_id, remote_func_or_actor_class)"))),
    Internal("ray._private.worker._global_node", "tuner/reporting.py: _ray_started_here"),
    Internal("ray.air.integrations.wandb.WandbLoggerCallback._start_logging_actor",
             "tuner/reporting.py: WandbCallback", params("trial", "exclude_results")),
    Internal("ray.air.integrations.wandb.WandbLoggerCallback", "tuner/reporting.py: WandbCallback",
             all_of(attrs("_logger_actor_cls"), _called(_wandb_callback, attrs("_remote_logger_class", "kwargs")))),
    Internal("ray.air.integrations.mlflow.MLflowLoggerCallback", "tuner/reporting.py: MLflowCallback.setup",
             _called(lambda cls: cls(tracking_uri="file:/tmp/x"), attrs("tracking_uri"))),
    # tuner/resources.py
    Internal("ray._private.accelerators.NvidiaGPUAcceleratorManager.get_current_node_num_accelerators",
             "tuner/resources.py: _nvidia_gpus", params()),
    # tuner/params.py, tuner/layout.py (Ray-free copies of Ray's names)
    Internal("ray.tune.result.AUTO_RESULT_KEYS", "tuner/params.py: RAY_RESULT_KEYS (results.csv, tuner report)",
             subset_of(_tuner("tuner.params.RAY_RESULT_KEYS"))),
    Internal("ray.tune.execution.tune_controller.TuneController.CKPT_FILE_TMPL",
             "tuner/layout.py: EXPERIMENT_STATE (tuner/state.py, tuner/failures.py)",
             equals(_tuner("tuner.layout.EXPERIMENT_STATE"))),
    *(Internal(f"ray.air.constants.{ray_name}", f"tuner/layout.py: {name} (tuner/report.py, tuner/results.py)",
               equals(_tuner(f"tuner.layout.{name}")))
      for ray_name, name in (("EXPR_PARAM_FILE", "PARAMS_FILE"), ("EXPR_RESULT_FILE", "RESULT_FILE"),
                             ("EXPR_ERROR_FILE", "ERROR_FILE"))),
    # tuner/trainable.py
    Internal("ray._raylet.PlacementGroupID", "tuner/trainable.py: release_placement_groups",
             _called(lambda cls: cls(cls.from_random().binary()), attrs("hex"))),
    Internal("ray.train.v2._internal.execution.storage.StorageContext",
             "tuner/trainable.py: _newest_checkpoint (Ray Train's checkpoint folder names)", _newest_checkpoint_finds),
    # tuner/ray_internals.py (used by tuner/trainable.py)
    Internal("ray.train._internal.session.get_session", "tuner/ray_internals.py: tune_session (the NaN guard)",
             params()),
    Internal("ray.train._internal.session._TrainSession.report",
             "tuner/trainable.py: _guard_reports (wraps the session's report)", params("metrics", "checkpoint")),
    Internal("ray.tune.trainable.trainable_fn_utils.report", "tuner/trainable.py: _guard_reports (ray.tune.report "
             "goes through the session)", source_has("get_session().report(")),
    Internal("ray.tune.trainable.function_trainable.wrap_function",
             "tuner/trainable.py: _guard_reports (a returned dict goes through the session)",
             source_has("get_session().report(output)")),
    Internal("ray.tune.result.TRIAL_INFO", "tuner/ray_internals.py: trial_id_in_config", equals("__trial_info__")),
    Internal("ray.tune.Trainable.__init__", "tuner/trainable.py: class_trainable (wraps setup via __init__)",
             all_of(params("config", "storage"), source_has("self.config.pop(TRIAL_INFO", "self.setup("))),
    Internal("ray.tune.Trainable.reset", "tuner/trainable.py: class_trainable (plain configs on reuse)",
             all_of(params("new_config"), source_has("self.reset_config(new_config)"))),
    Internal("ray.tune.Trainable.save_checkpoint", "tuner/spec.py: implements, check_trainable",
             source_has("raise NotImplementedError")),
    Internal("ray.tune.CheckpointConfig", "tuner/trainable.py: checkpoint_config (class trainables)",
             params("num_to_keep", "checkpoint_frequency", "checkpoint_at_end")),
    Internal("ray.tune.progress_reporter.TuneReporterBase.should_report",
             "tuner/reporting.py: TableReporter.setup (the first table one period after the start)",
             source_has("self._last_report_time")),
    # tuner/trial.py
    Internal("ray.tune.trainable.trainable_fn_utils._in_tune_session", "tuner/trial.py: in_tune", params()),
    # tuner/algorithms.py
    Internal("ray.tune.schedulers.HyperBandScheduler", "tuner/algorithms.py: _NeverWaitForever",
             _called(lambda cls: cls(), attrs("_trial_info"))),
    Internal("ray.tune.schedulers.HyperBandScheduler.on_trial_remove",
             "tuner/algorithms.py: _NeverWaitForever", params("tune_controller", "trial")),
    Internal("ray.tune.schedulers.hyperband._Bracket", "tuner/algorithms.py: _NeverWaitForever",
             attrs("finished", "current_trials")),
    Internal("ray.tune.schedulers.HyperBandScheduler.choose_trial_to_run",
             "tuner/algorithms.py: _NeverWaitForever (unpauses a trial when none runs)",
             params("tune_controller")),
    Internal("ray.tune.schedulers.HyperBandScheduler._unpause_trial", "tuner/algorithms.py: _NeverWaitForever",
             params("tune_controller", "trial")),
    Internal("ray.tune.execution.tune_controller.TuneController.stop_trial",
             "tuner/algorithms.py: _NeverWaitForever", params("trial")),
]

#: Environment variables tuner sets for Ray (tuner/reporting.py: prepare_console): Ray's source reads them.
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


@pytest.mark.parametrize("internal", INTERNALS, ids=lambda i: i.name)
def test_ray_internal_is_still_there(internal: Internal):
    try:
        obj = _resolve(internal.name)
        internal.check(obj)
    except (ImportError, AttributeError, AssertionError, TypeError, ValueError) as err:
        pytest.fail(f"{internal.name}, used by {internal.used_by}, moved or changed: {type(err).__name__}: {err}")


@pytest.mark.parametrize("variable", RAY_ENV_VARS)
def test_ray_reads_the_environment_variable_tuner_sets(variable):
    module = importlib.import_module(RAY_ENV_VARS[variable])
    assert variable in inspect.getsource(module), \
        f"{module.__name__} no longer reads {variable}, which tuner/reporting.py: prepare_console sets"


def test_the_check_fails_on_a_moved_internal():
    with pytest.raises(AttributeError):
        _resolve("ray.tune.search.basic_variant._NoSuchIterator")
    with pytest.raises(AssertionError):
        params("no_such_parameter")(_resolve("ray.tune.utils.util._atomic_save"))


# --------------------------------------------------------------------------- a tiny real run

#: Keys of the state files Ray pickles (file template, then the keys down to the value) that
#: tuner/failures.py: reopen_searcher reads and rewrites.
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
    ``tuner.results.collect_results``, which is called unchanged).
    """
    import tuner.results
    from tuner import tune_model

    storage = tmp_path_factory.mktemp("internals")
    base = {"trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min", "num_samples": 2,
            "param_space": {"x": {"type": "uniform", "low": 0, "high": 1}, "epochs": 1},
            "reporting": {"cli": False, "tensorboard": False}}
    grids = []
    collect = tuner.results.collect_results

    def seen(spec, grid, *args, **kwargs):
        grids.append(grid)
        return collect(spec, grid, *args, **kwargs)

    tuner.results.collect_results = seen
    try:
        runs = {"random": tune_model({**base, "name": "random"}, storage=str(storage)).experiment_path,
                "optuna": tune_model({**base, "name": "optuna", "search": {"algorithm": "optuna"},
                                      "max_concurrent_trials": 1}, storage=str(storage)).experiment_path}
    finally:
        tuner.results.collect_results = collect
    return {**runs, "grid": grids[0]}


@pytest.mark.parametrize("template,keys", STATE_KEYS, ids=lambda v: v if isinstance(v, str) else "/".join(v))
def test_pickled_searcher_state_keeps_the_keys_tuner_rewrites(tiny_runs, template, keys):
    from ray import cloudpickle

    run = "random" if template.startswith("basic") else "optuna"
    files = sorted(Path(tiny_runs[run]).glob(template.format("*")))
    assert files, f"Ray wrote no {template} (tuner/failures.py: reopen_searcher reads it)"
    state = cloudpickle.loads(files[-1].read_bytes())
    for depth, key in enumerate(keys):
        assert isinstance(state, dict) and key in state, \
            f"{template}: no {'/'.join(keys[:depth + 1])} (tuner/failures.py: reopen_searcher rewrites it)"
        state = state[key]


def test_experiment_state_file_keeps_what_tuner_reads(tiny_runs):
    """tuner/state.py reads Ray's experiment state (for tuner/failures.py and tuner/report.py)."""
    from tuner.layout import EXPERIMENT_STATE_GLOB
    from tuner.state import read_state

    path = Path(tiny_runs["random"])
    states = sorted(path.glob(EXPERIMENT_STATE_GLOB))
    assert states, f"no {EXPERIMENT_STATE_GLOB} in {sorted(p.name for p in path.iterdir())}"
    state = json.loads(states[-1].read_text())
    trials = [json.loads(item[0]) for item in state["trial_data"]]
    assert trials and all({"trial_id", "status"} <= set(t) for t in trials)
    assert "_stopper" in state["runner_data"]
    read = read_state(path)
    assert read is not None and read.file == states[-1] and read.trials == trials
    assert read.stopper == state["runner_data"]["_stopper"]


#: Attributes of a finished run's objects that tuner uses: (where, attribute path, user).
RUN_INTERNALS = [
    ("grid", "_experiment_analysis.trials", "tuner/results.py: _statuses"),
    ("trial", "storage.trial_dir_name", "tuner/failures.py: ExperimentStopper, PlacementGroupReleaser"),
    ("node", "all_processes", "tuner/reporting.py: _ray_started_here"),
]


@pytest.mark.parametrize("where,path,user", RUN_INTERNALS, ids=[f"{w}.{p}" for w, p, _ in RUN_INTERNALS])
def test_run_objects_keep_the_attributes_tuner_uses(tiny_runs, where, path, user):
    import ray._private.worker as worker

    grid = tiny_runs["grid"]
    obj = {"grid": lambda: grid, "trial": lambda: grid._experiment_analysis.trials[0],
           "node": lambda: worker._global_node}[where]()
    for attr in path.split("."):
        assert hasattr(obj, attr), f"{where}.{path}: no {attr} ({user})"
        obj = getattr(obj, attr)
    if path.endswith("trials"):
        assert len(obj) == len(grid) == 2
    if path.endswith("trial_dir_name"):
        assert (Path(tiny_runs["random"]) / obj).is_dir()
