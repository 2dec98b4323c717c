"""Running an experiment: a :class:`~tuner.run.prepare.Prepared` run through Ray Tune's ``Tuner.fit()``.

Data flows one way: YAML -> :class:`~tuner.spec.Spec` -> :class:`~tuner.run.prepare.Prepared`
(:mod:`tuner.run.prepare`) -> Ray objects (search space, searcher, scheduler, resources,
reporter) -> ``Tuner.fit()`` -> :class:`~tuner.run.results.TuneResult`. Here: :func:`tune_model`,
:func:`run_prepared` (``tuner run``), :func:`resume_prepared` (``tuner resume``), ``gpu: auto``,
a cloud experiment's syncing and a full disk's :class:`~tuner.errors.DiskFullError`.
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

from tuner.errors import ExperimentError
from tuner.experiment.layout import (BUDGET_SPENT, CORRUPT_SUFFIX, EVENTS_GLOB, LOG_FILE, REPLAY_POLICY, RUN_RECORD,
                                     SPEC_SNAPSHOT, TUNER_FILES, trial_folder_of)
from tuner.run.prepare import Prepared, _rename_note, _where, prepare, save_run_record
from tuner.spec import Spec

if TYPE_CHECKING:
    from tuner.run.failures import ExperimentStopper

__all__ = ["tune_model", "run_prepared", "resume_prepared", "before_ray_tune", "artifact_sync_config"]


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
    """Run or resume under a :class:`~tuner.run.console.DiskFullWatch`: a full disk ends it
    with one :class:`~tuner.errors.DiskFullError`.

    Wherever the full disk surfaced (a trial's checkpoint, Ray's experiment-state save or
    logger callbacks, a writer thread, tuner's own files), the Tune run stops at once
    (:class:`~tuner.run.console.StopOnFullDisk`), :func:`_finish` writes nothing more, and
    the caller gets the file that could not be written and the resume command. Any other
    error goes through unchanged, unless a full disk was noticed before it (then it is
    the full disk's consequence, chained as ``__cause__``).
    """

    @functools.wraps(run)
    def wrapper(prepared: Prepared, *args, **kwargs):
        from tuner.errors import DiskFullError
        from tuner.run.console import DiskFullWatch

        with DiskFullWatch() as watch:
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
    """Run a :class:`~tuner.run.prepare.Prepared` experiment; see :func:`tune_model`.

    Args:
        prepared: From :func:`~tuner.run.prepare.prepare`.
        echo: Where to print the TensorBoard hint and the best-trial line (the CLI
            passes ``click.echo``); None prints nothing.

    Raises:
        DiskFullError: If the disk holding the experiment filled up; see
            :func:`_resumable_on_full_disk`.
    """
    before_ray_tune(prepared)  # before Ray Tune is imported
    from tuner.run.cluster import cluster_resources, link_ray_logs, ray_session
    from tuner.run.console import log_to_file
    from tuner.run.failures import ExperimentLock

    path = prepared.experiment_path
    started = time.monotonic()
    _drop_stale_mirror(prepared)
    abort = _stopper(prepared.spec, path)
    # The lock first (it creates the folder): a second process refused by it writes nothing.
    with ExperimentLock(path), log_to_file(path / LOG_FILE), \
            ray_session(prepared.num_cpus, prepared.num_gpus, prepared.python_path, prepared.address) as session_dir:
        _write_run_record(prepared)
        if session_dir is None:
            _ship_user_packages(prepared)
        cluster = cluster_resources(prepared.address)
        max_concurrent = _trials_at_once(prepared, cluster)
        if echo:
            _echo_start(echo, prepared, max_concurrent)
        searcher, scheduler, packing = _search(prepared, cluster, max_concurrent)
        tuner = _new_tuner(prepared, searcher, scheduler, packing, max_concurrent, abort)
        grid, watch = _fit(tuner, packing)
        link_ray_logs(session_dir, path)
    aborted = abort.aborted_by.trial_id if abort.aborted_by is not None else None
    return _finish(prepared, grid, started, interrupted=watch.interrupted, aborted_by=aborted, echo=echo)


def _drop_stale_mirror(prepared: Prepared) -> None:
    """A cloud experiment: remove a stale local mirror (the cloud folder was checked to be empty)."""
    if prepared.remote and prepared.experiment_path.exists():
        import shutil

        shutil.rmtree(prepared.experiment_path)


def _stopper(spec: Spec, path: Path) -> ExperimentStopper:
    """The run's stopper: the spec's ``stop``, the first trial's error and the time budget (``tuner_run.json``)."""
    from tuner.run.failures import ExperimentStopper

    return ExperimentStopper(spec.stop, spec.failure.abort_on_first_error, spec.time_budget_s, path / RUN_RECORD,
                             objectives=spec.objectives)


def _write_run_record(prepared: Prepared) -> None:
    """Write the spec as run and ``tuner_run.json`` (:func:`~tuner.run.prepare.save_run_record`); upload a cloud's."""
    save_run_record(prepared)
    if prepared.remote:
        from tuner.experiment.storage import upload

        upload(prepared.experiment_path, prepared.location, (SPEC_SNAPSHOT, RUN_RECORD))


def _trials_at_once(prepared: Prepared, cluster: Any) -> int | None:
    """The most trials to run at once (None: as many as fit), once the spec is checked against the cluster."""
    from tuner.resources.sizing import check_fits, trials_that_fit

    spec = prepared.spec
    if prepared.cluster is None:
        check_fits(spec, cluster)
    max_concurrent = spec.max_concurrent_trials
    if spec.ray_train_ddp:
        # A DDP trial's actor asks for no CPU: cap the drivers at the trials that fit,
        # so that no Train run waits for workers while holding a trial slot.
        fit = trials_that_fit(spec, cluster)
        max_concurrent = min(max_concurrent or fit, fit)
    return max_concurrent


def _echo_start(echo: Callable[[str], None], prepared: Prepared, max_concurrent: int | None) -> None:
    """Print where the experiment goes, a note on trials that cannot run side by side, and the warm start."""
    from tuner.resources.sizing import one_live_trial_note

    spec = prepared.spec
    _echo_where(echo, prepared, "Experiment")
    note = one_live_trial_note(spec, max_concurrent or 0)
    if note:
        echo(f"tuner: note: {note}")
    for line in prepared.warm_start.describe(spec) if prepared.warm_start is not None else []:
        echo(line)  # what the searcher learns from before its first suggestion, as the plan says


def _search(prepared: Prepared, cluster: Any, max_concurrent: int | None) -> tuple[Any, Any, _GpuAuto | None]:
    """The searcher (behind ``gpu: auto``'s limit), the scheduler (a replay's own) and ``gpu: auto``'s packing."""
    from tuner.search.algorithms import build_scheduler, build_searcher

    spec = prepared.spec
    auto = spec.resources.auto_gpu
    basic = spec.search.algorithm in ("grid", "random")
    searcher = build_searcher(spec, 1 if auto else max_concurrent, prepared.warm_start)
    packing = _gpu_auto(prepared, cluster, searcher, basic) if auto else None
    if packing is not None:
        searcher = packing.search_alg
    scheduler = build_scheduler(spec) if prepared.replay is None else _replay_scheduler(prepared)
    return searcher, scheduler, packing


def _new_tuner(prepared: Prepared, searcher: Any, scheduler: Any, packing: _GpuAuto | None,
               max_concurrent: int | None, abort: ExperimentStopper) -> Any:
    """Ray Tune's ``Tuner`` of a new run: the trainable with its resources, the search space, both configs."""
    from ray import tune

    from tuner.run.trainable import build_trainable, driver_request
    from tuner.search.space import to_ray_space

    spec = prepared.spec
    return tune.Tuner(
        tune.with_resources(build_trainable(prepared.trainable, spec, prepared.location,
                                            trial_seed=_fixed_seed(prepared)),
                            driver_request(spec) if packing is None else packing.request),
        param_space=to_ray_space(spec),
        tune_config=_tune_config(prepared, searcher, scheduler, max_concurrent),
        run_config=_run_config(prepared, abort, scheduler, packing),
    )


def _tune_config(prepared: Prepared, searcher: Any, scheduler: Any, max_concurrent: int | None) -> Any:
    """The run's ``TuneConfig``: the scheduler's objective, searcher and scheduler, the trials and how many at once."""
    from ray import tune

    from tuner.run.trainable import reuse_actors
    from tuner.search.space import ray_num_samples

    spec = prepared.spec
    ranked = spec.scheduler_objective
    basic = spec.search.algorithm in ("grid", "random")
    return tune.TuneConfig(
        # The scheduler's objective: a Ray scheduler compares trials by one metric. An optuna
        # searcher with several objectives keeps its own (tuner.search.algorithms._OptunaSearch).
        metric=ranked.metric if ranked else None,
        mode=ranked.mode if ranked else None,
        search_alg=searcher,
        scheduler=scheduler,
        num_samples=ray_num_samples(spec),
        # A BasicVariantGenerator takes the limit itself (Ray ignores this one for it).
        max_concurrent_trials=None if basic or spec.resources.auto_gpu else max_concurrent,
        # No time_budget_s here: the ExperimentStopper keeps the budget, so that a
        # resume can raise it (Ray restores its own TimeoutStopper unchanged).
        reuse_actors=reuse_actors(prepared.trainable, spec),
        trial_dirname_creator=trial_folder_of,
    )


def _run_config(prepared: Prepared, abort: ExperimentStopper, scheduler: Any, packing: _GpuAuto | None) -> Any:
    """The run's ``RunConfig``: where the experiment goes, the stopper, the table, the callbacks, syncing, failures."""
    from ray import tune

    from tuner.run.console import build_reporter
    from tuner.run.trainable import checkpoint_config

    spec, path = prepared.spec, prepared.experiment_path
    return tune.RunConfig(
        name=spec.name,
        storage_path=spec.storage if prepared.remote else str(path.parent),
        stop=abort,
        progress_reporter=build_reporter(spec),
        callbacks=_callbacks(prepared, abort, scheduler, packing),
        verbose=1 if spec.reporting.cli.enabled else 0,
        log_to_file=True,
        sync_config=artifact_sync_config(),
        failure_config=tune.FailureConfig(max_failures=spec.failure.max_failures,
                                          fail_fast=spec.failure.fail_fast),
        checkpoint_config=checkpoint_config(prepared.trainable, spec),
    )


def _callbacks(prepared: Prepared, abort: ExperimentStopper, scheduler: Any, packing: _GpuAuto | None) -> list:
    """The run's Tune callbacks: the loggers, the stopper, the full disk's stop, and those the spec's features need."""
    from tuner.run.console import StopOnFullDisk
    from tuner.run.failures import PlacementGroupReleaser, StateSnapshots
    from tuner.run.loggers import build_callbacks
    from tuner.search.scheduler_state import KeepsState, SchedulerStateCallback

    spec, path = prepared.spec, prepared.experiment_path
    return [*build_callbacks(spec, path if prepared.remote else None), abort,
            StopOnFullDisk(),
            # Only DDP trials leave a placement group (its step hook looks at every trial).
            *([PlacementGroupReleaser(prepared.location)] if spec.ray_train_ddp else []),
            # The same scheduler object: it is saved with the experiment, for a resume.
            *([SchedulerStateCallback(scheduler)] if isinstance(scheduler, KeepsState) else []),
            # Torn-write snapshots of Ray's state, for a local disk (a cloud put is whole).
            *([] if prepared.remote else [StateSnapshots(path)]),
            *([packing.callback] if packing is not None else [])]


def artifact_sync_config() -> Any:
    """How Ray copies each trial's working folder into the trial's folder in the experiment.

    A trial's ``stdout`` and ``stderr`` (``log_to_file``) are written in its working folder
    under Ray's session. Ray Tune's ``SyncConfig(sync_artifacts=True)`` copies that folder's
    files with the trial's first result, then at most every ``sync_period`` (Ray's default,
    300 s: docs/guides/results.md's "at most every 5 minutes"), and when a function trainable ends; not on
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
    from tuner.run.console import prepare_console
    from tuner.search.algorithms import quiet_schedulers, quiet_searchers
    from tuner.adapters.ray_internals import lean_callback_usage_tag

    prepare_console()
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
    from tuner.run.console import DiskFullWatch
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
    from tuner.run.console import tensorboard_hint

    echo(f"{what} {prepared.spec.name}: {_where(prepared)}")
    if prepared.renamed_from:
        echo(f"tuner: note: {_rename_note(prepared)}")
    echo(f"TensorBoard: {'after the run, ' if prepared.remote else ''}"
         f"{tensorboard_hint(prepared.experiment_path)}")


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


@_resumable_on_full_disk
def resume_prepared(prepared: Prepared, *, resume_errored: bool = False, restart_errored: bool = False,
                    echo: Callable[[str], None] | None = None):
    """Resume a stopped experiment with ``Tuner.restore``; see :func:`~tuner.run.prepare.prepare_resume`.

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

    from tuner.run.cluster import link_ray_logs, ray_session
    from tuner.run.console import log_to_file
    from tuner.run.failures import (ExperimentLock, drop_stale_staging, fall_back_to_existing_checkpoints,
                                    reopen_searcher, restore_state_snapshot)
    from tuner.search.scheduler_state import saved_state_note
    from tuner.experiment.storage import display
    from tuner.search.space import presets, to_ray_space
    from tuner.run.trainable import build_trainable, driver_request

    spec, path = prepared.spec, prepared.experiment_path
    started = time.monotonic()
    with ExperimentLock(path), log_to_file(path / LOG_FILE), \
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
