"""Ray Tune's logger callbacks of a run: each trial's JSON and CSV, TensorBoard with HParams, W&B, MLflow.

* Each trial's ``result.json`` and ``progress.csv``, which Ray's result analysis reads:
  :class:`JsonLogger`, :class:`CsvLogger`.
* TensorBoard event files are written per trial by Ray's ``TBXLoggerCallback``
  (tensorboardX), beside the JSON and CSV logs.
* TensorBoard's HParams dashboard: each trial folder holds its session (config and
  end status); the experiment folder holds the one experiment summary (every sampled
  parameter with its domain, every metric), written when the experiment ends. Until
  then TensorBoard builds the summary from the sessions.
* W&B and MLflow (optional extras) are Ray's own ``WandbLoggerCallback`` and
  ``MLflowLoggerCallback``. API keys and tokens come only from the environment.

:func:`build_callbacks` builds them from the spec's ``reporting`` section. What the console
shows during a run is :mod:`tuner.run.console`'s.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback

from tuner.core.params import RAY_RESULT_KEYS, flatten
from tuner.experiment.layout import HPARAMS_EVENTS_PREFIX, HPARAMS_EVENTS_SUFFIX
from tuner.adapters.ray_internals import StagedResultFileHooks, TBXLoggerHooks
from tuner.run.console import DiskFullWatch, keep_off_console
from tuner.search.space import plain
from tuner.spec import Spec
from tuner.spec.conditions import param_distributions, sampled_params

__all__ = ["build_callbacks", "import_tensorboardx_without_torch", "JsonLogger", "CsvLogger",
           "HParamsTBXCallback", "write_hparams_experiment"]


def import_tensorboardx_without_torch() -> None:
    """Import tensorboardX in the driver without the torch import it makes when it can.

    tensorboardX 2.6's ``writer`` imports torch only to accept torch tensors as values (its
    ``numpy_compatible``); Ray's ``TBXLoggerCallback`` and tuner's HParams summary log plain
    numbers, so the driver need not pay torch's import (1.3 CPU-s per ``tuner run``; a train
    function's own torch is imported in the trial processes). Where torch or tensorboardX is
    already imported, this changes nothing.
    """
    if "tensorboardX" in sys.modules or "torch" in sys.modules:
        return
    sys.modules["torch"] = None  # makes `import torch` raise ImportError
    try:
        import tensorboardX  # noqa: F401
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]


class JsonLogger(StagedResultFileHooks, JsonLoggerCallback):
    """Ray's ``JsonLoggerCallback`` (each trial's ``result.json``), which keeps a paused or restarted
    trial's earlier results (see :class:`tuner.adapters.ray_internals.StagedResultFileHooks`)."""


class CsvLogger(StagedResultFileHooks, CSVLoggerCallback):
    """Ray's ``CSVLoggerCallback`` (each trial's ``progress.csv``), which keeps a restarted trial's
    earlier rows (see :class:`tuner.adapters.ray_internals.StagedResultFileHooks`)."""


def build_callbacks(spec: Spec, experiment_path: str | os.PathLike | None = None) -> list:
    """Ray callbacks for the spec's ``reporting`` section.

    JSON and CSV logs always; TensorBoard with the HParams dashboard when
    ``reporting.tensorboard``; W&B and MLflow when configured (their packages are
    checked before by :func:`tuner.spec.check_extras`). (The progress line is printed
    by the table's reporter, :func:`tuner.run.console.build_reporter`.)

    Args:
        spec: The spec that runs.
        experiment_path: The local experiment folder for the HParams summary (the mirror
            of a cloud experiment); default the trials' parent folder.

    Returns:
        The callbacks, for ``RunConfig(callbacks=...)``.
    """
    rep = spec.reporting
    callbacks: list = [JsonLogger(), CsvLogger()]
    if rep.tensorboard:
        import_tensorboardx_without_torch()
        callbacks.append(HParamsTBXCallback(spec, experiment_path))
    if rep.wandb is not None:
        w = rep.wandb
        kwargs = {k: v for k, v in {"entity": w.entity, "tags": w.tags}.items() if v is not None}
        callbacks.append(_integration_class("WandbCallback")(
            project=w.project, group=w.group or spec.name, upload_checkpoints=w.upload_checkpoints,
            mode=w.mode, **kwargs))
    if rep.mlflow is not None:
        m = rep.mlflow
        callbacks.append(_integration_class("MLflowCallback")(
            tracking_uri=m.tracking_uri, experiment_name=m.experiment_name or spec.name, tags=m.tags,
            save_artifact=m.save_artifact))
    return callbacks


# --------------------------------------------------------------------------- TensorBoard HParams


def _hparam_value(value: Any) -> Any:
    """A config value as TensorBoard's HParams takes it: a number, a string or a bool."""
    value = plain(value)
    if isinstance(value, (bool, int, float, str)):
        return value
    return None if value is None else str(value)


def _domain(versions: list, when: str | None) -> dict[str, Any]:
    """A sampled parameter's domain for the HParams summary: its distribution as a dict
    (``type``, ``low``/``high`` or ``values``), and for a conditional parameter ``when``, its
    conditions as text (``optimizer = sgd``, ``model/name = cnn``), not the spec's raw ``when``.

    A config key that branches of a sub-space choice define each their own way
    (``optimizer/lr`` and ``optimizer/lr@adam``) gets the union of its versions' domains (the
    values of all, or the lowest ``low`` to the highest ``high``; unbounded when they mix),
    and their conditions joined by ``or``.

    Args:
        versions: The :class:`tuner.spec.conditions.Param` s of the key (``Space.versions``),
            those with a distribution.
        when: When the key is present (``Space.condition``), or None.
    """
    dumps = [p.dist.model_dump(exclude={"when"}) for p in versions if p.dist is not None]
    domain = dumps[0]
    if len(dumps) > 1:
        if all("values" in d for d in dumps):
            domain = {"type": "choice", "values": [v for d in dumps for v in d["values"]]}
        elif all("low" in d and "high" in d for d in dumps):
            domain = {"type": " | ".join(dict.fromkeys(d["type"] for d in dumps)),
                      "low": min(d["low"] for d in dumps), "high": max(d["high"] for d in dumps)}
        else:
            domain = {"type": " | ".join(dict.fromkeys(d["type"] for d in dumps))}
    if when is not None:
        domain["when"] = when
    return domain


class HParamsTBXCallback(TBXLoggerHooks, TBXLoggerCallback):
    """Ray's ``TBXLoggerCallback`` with one HParams experiment for the whole run.

    Ray's logger writes scalars as ``ray/tune/<metric>`` by ``training_iteration``, and
    at each trial's end a full HParams summary into the trial's folder: TensorBoard
    then takes the first trial's summary for the whole experiment, so a ``choice``
    parameter shows only that trial's value in the dashboard's filters, and the other
    trials' rows can be hidden. Here each trial folder gets its session only (its
    sampled config and its end status), and :meth:`on_experiment_end` writes the one
    experiment summary into the experiment folder: every sampled parameter with its
    domain from the spec, and every metric the trials reported.

    A conditional parameter (a ``when``, or a branch's parameter of a sub-space choice, and
    the choice's branch name ``model/name``) has its domain like any other, and its
    conditions as the description; a trial's session holds only the parameters the trial
    has (an inactive one is left out, as from its config: TensorBoard shows it blank).

    Args:
        spec: The spec that runs.
        folder: Where the experiment summary goes; default the trials' parent folder.
            For a cloud experiment tuner passes the local mirror (uploaded after the run).
    """

    def __init__(self, spec: Spec, folder: str | os.PathLike | None = None):
        super().__init__()
        self._folder = folder
        self._params = sampled_params(spec)
        self._domains = {name: _domain(spec.space.versions(name), spec.space.condition(name))
                         for name, _ in param_distributions(spec.param_space)}
        self._metric = spec.metric
        self._metrics: dict[str, None] = {}
        self._failed = False

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        super().log_trial_result(iteration, trial, result)
        for tag in self.trial_scalar_tags(trial):
            self._metrics.setdefault(tag, None)

    def log_trial_end(self, trial, failed: bool = False) -> None:
        self._failed = failed
        if self._params and not trial.evaluated_params and self.trial_scalar_tags(trial):
            # Ray writes the session only for a trial with ``evaluated_params`` (what its variant
            # generator sampled); a config given whole, as a conditional space's random and grid
            # trials are (presets), has none: written here, before Ray closes the writer.
            self.log_hparams(trial, {})
        super().log_trial_end(trial, failed)

    def log_hparams(self, trial, result: dict) -> None:
        from tensorboardX.proto.api_pb2 import Status
        from tensorboardX.summary import hparams

        flat = flatten(trial.config or {})
        values = {name: _hparam_value(flat[name]) for name in self._params if name in flat}
        values = {k: v for k, v in values.items() if v is not None}
        try:
            _, session_start, session_end = hparams(hparam_dict=values, metric_dict={})
            if self._failed:
                from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData

                data = HParamsPluginData.FromString(session_end.value[0].metadata.plugin_data.content)
                data.session_end_info.status = Status.Value("STATUS_FAILURE")
                session_end.value[0].metadata.plugin_data.content = data.SerializeToString()
            writer = self.trial_file_writer(trial)
            writer.add_summary(session_start)
            writer.add_summary(session_end)
        except Exception:  # TensorBoard extras must never fail a trial
            logging.getLogger(__name__).exception("could not write the HParams session of %s", trial)

    def on_experiment_end(self, trials: list, **info) -> None:
        super().on_experiment_end(trials, **info)
        # trial.path is the trial folder in the experiment (local_path is Ray's staging copy).
        folders = {Path(self._folder)} if self._folder else {Path(t.path).parent for t in trials if t.path}
        if len(folders) != 1 or not next(iter(folders)).is_dir():
            return
        if DiskFullWatch.active is not None and DiskFullWatch.active.error is not None:
            return  # the disk is full: written at the end of the resume
        folder = folders.pop()
        try:
            write_hparams_experiment(folder, self._domains, self._metric, list(self._metrics))
        except Exception as err:
            if not keep_off_console(err, f"the HParams experiment summary in {folder}"):
                logging.getLogger(__name__).exception("could not write the HParams experiment summary")



def write_hparams_experiment(folder: str | os.PathLike, domains: dict[str, dict], metric: str | None,
                             metrics: list[str]) -> None:
    """Write TensorBoard's HParams experiment summary into the experiment folder.

    Args:
        folder: The experiment folder (the trials' parent, TensorBoard's ``--logdir``).
        domains: Sampled parameter name -> its distribution from the spec, as a dict
            (``type``, ``low``/``high`` or ``values``; ``when``, a conditional parameter's
            conditions as text, becomes the description: ``active when optimizer = sgd``).
        metric: The spec's metric, listed first.
        metrics: Scalar tags the trials wrote, e.g. ``ray/tune/loss``; Ray's bookkeeping
            ones (``done``, ``time_this_iter_s``, ...) are left out.
    """
    from google.protobuf.struct_pb2 import ListValue
    from tensorboardX.event_file_writer import EventsWriter
    from tensorboardX.proto.api_pb2 import DataType, Experiment, HParamInfo, Interval, MetricInfo, MetricName
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata

    infos = []
    for name, dist in domains.items():
        about = {"description": f"active when {dist['when']}"} if dist.get("when") else {}
        if "values" in dist:
            values = [_hparam_value(v) for v in dist["values"]]
            kinds = {type(v) for v in values}
            if kinds <= {int, float} and bool not in kinds:
                dtype = "DATA_TYPE_FLOAT64"
                values = [float(v) for v in values]
            elif kinds == {bool}:
                dtype = "DATA_TYPE_BOOL"
            else:
                dtype, values = "DATA_TYPE_STRING", [str(v) for v in values]
            domain = ListValue()
            domain.extend(list(dict.fromkeys(values)))
            infos.append(HParamInfo(name=name, type=DataType.Value(dtype), domain_discrete=domain, **about))
        elif "low" in dist and "high" in dist:
            infos.append(HParamInfo(name=name, type=DataType.Value("DATA_TYPE_FLOAT64"),
                                    domain_interval=Interval(min_value=float(dist["low"]),
                                                             max_value=float(dist["high"])), **about))
        else:  # randn: unbounded
            infos.append(HParamInfo(name=name, type=DataType.Value("DATA_TYPE_FLOAT64"), **about))
    first = [f"ray/tune/{metric}"] if metric and f"ray/tune/{metric}" in metrics else []
    # Scalars Ray adds to every result (tuner.core.params.RAY_RESULT_KEYS) stay in the scalars, out of the columns.
    tags = first + sorted(t for t in metrics if t not in first and t.removeprefix("ray/tune/") not in RAY_RESULT_KEYS)
    experiment = Experiment(hparam_infos=infos, metric_infos=[MetricInfo(name=MetricName(tag=t)) for t in tags],
                            time_created_secs=time.time())
    content = HParamsPluginData(experiment=experiment, version=0).SerializeToString()
    summary = Summary(value=[Summary.Value(tag="_hparams_/experiment", metadata=SummaryMetadata(
        plugin_data=SummaryMetadata.PluginData(plugin_name="hparams", content=content)))])
    # Written here, not by a SummaryWriter: its writer thread and exit hook would outlive
    # a write that failed (a full disk) and print tracebacks when the process ends.
    writer = EventsWriter(os.path.join(os.fspath(folder), HPARAMS_EVENTS_PREFIX), HPARAMS_EVENTS_SUFFIX)
    try:
        writer.write_event(Event(summary=summary, wall_time=time.time()))
        writer.flush()
    finally:
        writer.close()


# --------------------------------------------------------------------------- W&B and MLflow

_INTEGRATIONS: dict[str, type] = {}


def _integration_class(name: str) -> type:
    """Build (once) the W&B or MLflow callback class; their modules import the packages.

    The classes are module attributes (see ``__getattr__``), so that Ray's saved
    ``tuner.pkl`` refers to them by name and a resume rebuilds them.
    """
    if name in _INTEGRATIONS:
        return _INTEGRATIONS[name]
    if name == "WandbCallback":
        from ray.air.integrations.wandb import WandbLoggerCallback

        from tuner.adapters.ray_internals import WandbLoggerHooks

        class WandbCallback(WandbLoggerHooks, WandbLoggerCallback):
            """Ray's ``WandbLoggerCallback``, with offline runs that need no key and keep it out of logs.

            * Ray checks for an API key unless the ``WANDB_MODE`` environment variable
              says offline or disabled; the spec's ``mode`` counts the same here, without
              changing this process's environment for good.
            * Ray hands ``WANDB_API_KEY`` to each trial's logging actor in its
              ``runtime_env``, and Ray's runtime-env agent writes that into its session
              log (linked from the experiment as ``ray_logs``). The key is passed that
              way only when it is needed: an online run on a Ray that this process did
              not start (on an embedded local Ray the workers inherit the environment).
            * Ray's logging actor writes into the trial's staging folder, which Ray copies
              into the experiment before the actors finish: the last trials' offline
              runs were left behind in ``/tmp/ray``. Here W&B writes into the trial's
              folder in the experiment itself (``wandb.init(dir=...)``; the actor runs on
              the driver's node).
            """

            def init_kwargs(self, trial, wandb_init_kwargs: dict) -> None:
                if trial.path and "dir" not in self.kwargs:
                    os.makedirs(trial.path, exist_ok=True)
                    wandb_init_kwargs["dir"] = trial.path

            def actor_env(self) -> dict:
                from tuner.adapters.ray_internals import ray_started_here

                env = {}
                key = os.environ.get("WANDB_API_KEY")
                if key and self.kwargs.get("mode", "online") == "online" and not ray_started_here():
                    env["WANDB_API_KEY"] = key
                return env

            def setup(self, *args, **kwargs):
                mode = self.kwargs.get("mode")
                if mode not in ("offline", "disabled") or os.environ.get("WANDB_MODE") == mode:
                    return super().setup(*args, **kwargs)
                saved = os.environ.get("WANDB_MODE")
                os.environ["WANDB_MODE"] = mode
                try:
                    return super().setup(*args, **kwargs)
                finally:
                    if saved is None:
                        os.environ.pop("WANDB_MODE", None)
                    else:
                        os.environ["WANDB_MODE"] = saved

        cls: type = WandbCallback
    elif name == "MLflowCallback":
        from ray.air.integrations.mlflow import MLflowLoggerCallback

        class MLflowCallback(MLflowLoggerCallback):
            """Ray's ``MLflowLoggerCallback``; a file store in the spec is allowed.

            MLflow 3 refuses a ``file:`` tracking URI unless ``MLFLOW_ALLOW_FILE_STORE``
            is set; a spec that names one asks for it, so it is set (unless the
            environment already says otherwise).
            """

            def setup(self, *args, **kwargs):
                uri = self.tracking_uri or ""
                if uri.startswith("file:") or (uri and "://" not in uri and ":" not in uri.split("/")[0]):
                    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
                return super().setup(*args, **kwargs)

        cls = MLflowCallback
    else:
        raise AttributeError(name)
    cls.__module__ = __name__
    cls.__qualname__ = name
    _INTEGRATIONS[name] = cls
    return cls


def __getattr__(name: str) -> Any:
    if name in ("WandbCallback", "MLflowCallback"):
        return _integration_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
