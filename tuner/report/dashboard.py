"""``tuner dashboard``: optuna-dashboard over tuner's experiment folders, read live from their files.

Every experiment is one Optuna study, whatever its searcher (grid, random, BOHB, TPE, PBT): the
dashboard reads the experiment's own files (:func:`tuner.report.load_experiment`, as ``tuner report``
does), so a run records nothing more and costs nothing more, an older experiment shows as it is, and a
running or resumed one shows each new report at the next refresh (every :data:`REFRESH_S` seconds).
Nothing is written into the experiment folders. A cloud storage (``s3://...``) is served through its
local mirror (:class:`CloudMirror`), synced every :data:`CLOUD_REFRESH_S` seconds.

:class:`ExperimentStorage` is a read-only Optuna storage (``optuna.storages.BaseStorage``, Optuna 5)
over the folders; :func:`serve` hands it to ``optuna_dashboard.wsgi`` (optuna-dashboard 0.21) behind a
filter that answers every request but GET and HEAD with 405, so no study can be deleted or edited
from the page. The web UI is optuna-dashboard's own.
"""

from __future__ import annotations

import copy
import datetime
import math
import os
import threading
import time
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.study._frozen import FrozenStudy
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import InputError, StorageError

__all__ = ["ExperimentStorage", "CloudMirror", "find_experiments", "study_trials", "serve", "DashboardError", "INSTALL"]

#: Seconds between two reads of an experiment's files: a new report shows within this, plus the page's own poll.
REFRESH_S = 1.0
#: An experiment whose files changed is read again once this many times its last read's seconds have passed
#: (and REFRESH_S): reading a large live experiment takes at most a quarter of a core (1.6 s a read at 1,000
#: trials, docs/benchmarks.md), and its reports show that much later.
READ_WAIT_FACTOR = 3.0
#: Seconds between two syncs of a cloud storage's local mirror (each lists the cloud folder's files).
CLOUD_REFRESH_S = 10.0
#: A trial's id in the dashboard: its study's id times this, plus its number.
TRIAL_ID_STRIDE = 10**6
#: The study system attribute that ``optuna.Study.set_metric_names`` sets (Optuna 5), which the dashboard
#: shows as the objectives' names.
METRIC_NAMES_ATTR = "study:metric_names"
#: The install command the dashboard needs.
INSTALL = 'pip install -e ".[dashboard]"'

#: Ray's trial status -> the Optuna state the dashboard shows (TERMINATED: COMPLETE, or PRUNED when a
#: scheduler stopped the trial early; a trial left RUNNING by a driver that is gone shows as FAIL).
_STATES = {"ERROR": TrialState.FAIL, "RUNNING": TrialState.RUNNING, "PAUSED": TrialState.RUNNING,
           "PENDING": TrialState.WAITING, "UNFINISHED": TrialState.FAIL}


class DashboardError(InputError):
    """``tuner dashboard`` cannot start as given (the extra is missing, a folder does not exist); exit code 2."""


def find_experiments(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The experiment folders under ``paths``, in order: a path that is an experiment, or each
    experiment directly inside a storage folder (as ``tuner list`` finds them), sorted by name.

    Raises:
        DashboardError: If a path does not exist, is not a folder, or is a cloud URI (:class:`CloudMirror`'s).
    """
    from tuner.report.loading import is_experiment
    from tuner.experiment.storage import display, is_remote

    found: list[Path] = []
    for raw in paths:
        if is_remote(str(raw)):  # ExperimentStorage serves a cloud storage through its local mirror
            raise DashboardError(f"{display(str(raw))}: a cloud URI is served through its local mirror "
                                 "(ExperimentStorage), not listed here.", "tuner dashboard")
        path = Path(raw).expanduser()
        if not path.is_dir():
            raise DashboardError(f"{path} is not a folder; give experiment folders or the storage folders that "
                                 "hold them (a spec's `storage:`, `runs` by default).", "tuner dashboard")
        inside = [path] if is_experiment(path) else sorted(
            p for p in path.iterdir() if not p.name.startswith(".") and is_experiment(p))
        found.extend(p.resolve() for p in inside if p.resolve() not in found)
    return found


def _distributions(exp: Any) -> dict[str, BaseDistribution]:
    """One distribution per sampled parameter, over the values the trials took (the spec's log scale kept):
    an integer range, a float range, or the choices. Every trial's value lies in it, as Optuna requires."""
    from tuner.report.loading import plain

    dists: dict[str, BaseDistribution] = {}
    for name in exp.params:
        col = exp.trials.get(f"config/{name}")
        values = [] if col is None else [v for v in map(plain, col.tolist()) if v is not None]
        if not values:
            continue
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        if numbers and all(math.isfinite(v) for v in values) and min(values) < max(values):
            low, high = min(values), max(values)
            log = bool(exp.log_scale(name)) and low > 0
            if all(isinstance(v, int) for v in values):
                dists[name] = IntDistribution(int(low), int(high), log=log and low >= 1)
            else:
                dists[name] = FloatDistribution(float(low), float(high), log=log)
        else:
            dists[name] = CategoricalDistribution(sorted({_choice(v) for v in values}, key=str))
    return dists


def _choice(value: Any) -> Any:
    """A value as an Optuna choice (None, bool, int, float or str; anything else as its text)."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def _time(text: str | None) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def study_trials(exp: Any, study_id: int) -> list[FrozenTrial]:
    """An experiment's trials as Optuna's, in the order they were created.

    Args:
        exp: The experiment (:class:`tuner.report.Experiment`).
        study_id: Its study's id: trial ``n``'s id is ``study_id * TRIAL_ID_STRIDE + n``.

    Returns:
        One ``FrozenTrial`` per trial: its active parameters with their distributions; its state
        (TERMINATED is COMPLETE, or PRUNED for a trial a scheduler stopped early; ERROR is FAIL;
        RUNNING and PAUSED are RUNNING); a COMPLETE trial's value, or one value per objective, by the
        experiment's ``best.scope``; the first objective's value at each iteration as its intermediate
        values; user attributes ``trial_id``, ``status`` (Ray's), ``iterations``, ``folder``, ``seed``
        (``tuner.trial.seed()``, with a spec's ``seed``) and ``best_checkpoint`` (``summary.json``'s,
        once the run wrote it); with constraints, their
        violations (``<= 0`` feasible) under the ``constraints`` system attribute, which
        optuna-dashboard reads. A COMPLETE trial with a value that is not a finite number shows as FAIL.
    """
    from tuner.report.loading import plain, trial_folders

    objectives = [o.metric for o in exp.objectives] or ([exp.metric] if exp.metric else [])
    columns = [f"score_{m}" if f"score_{m}" in exp.trials else f"last_{m}" for m in objectives]
    dists = _distributions(exp)
    rows = {row["trial_id"]: row for _, row in exp.trials.iterrows()}
    created = set(exp.created)
    order = [t for t in exp.created if t in rows] + [t for t in rows if t not in created]
    history = exp.history
    started = _time(exp.started) or datetime.datetime.fromtimestamp(exp.path.stat().st_mtime)
    folders = trial_folders(exp.path)
    checkpoints = (exp.summary or {}).get("checkpoints") or {}
    out = []
    for number, trial_id in enumerate(order):
        row = rows[trial_id]
        status = str(row["status"])
        state = _STATES.get(status, TrialState.COMPLETE)
        values: list[float] | None = None
        if status == "TERMINATED":
            if bool(row.get("stopped_early", False)) and len(objectives) < 2:
                state = TrialState.PRUNED
            else:
                values = [plain(row.get(c)) for c in columns]
                if not objectives or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
                    state, values = TrialState.FAIL, None
        params = {}
        for name, dist in dists.items():
            value = plain(row.get(f"config/{name}"))
            if value is not None:  # an inactive conditional parameter is left out
                params[name] = _choice(value) if isinstance(dist, CategoricalDistribution) else value
        inter: dict[int, float] = {}
        if objectives and objectives[0] in history:
            mine = history[history["trial_id"] == trial_id]
            inter = {int(i): float(v) for i, v in zip(mine["training_iteration"], mine[objectives[0]])
                     if isinstance(v, (int, float)) and math.isfinite(v)}
        system: dict[str, Any] = {}
        if exp.constraints:
            system["constraints"] = [c.violation(plain(row.get(f"last_{c.metric}"))) for c in exp.constraints]
        seconds = plain(row.get("time_total_s"))
        start = _created(folders.get(trial_id)) or started
        attrs = {"trial_id": trial_id, "status": status, "iterations": int(plain(row.get("iterations")) or 0),
                 "folder": str(folders[trial_id]) if trial_id in folders else ""}
        seed = _seed(exp, trial_id, plain(row.get("trial_seed")), folders.get(trial_id))
        if seed is not None:
            attrs["seed"] = seed
        if (checkpoints.get(trial_id) or {}).get("checkpoint"):
            attrs["best_checkpoint"] = checkpoints[trial_id]["checkpoint"]
        out.append(FrozenTrial(
            number=number, state=state, value=None, values=values,
            datetime_start=None if state == TrialState.WAITING else start,
            datetime_complete=start + datetime.timedelta(seconds=float(seconds or 0)) if state.is_finished() else None,
            params=params, distributions={k: dists[k] for k in params},
            user_attrs=attrs,
            system_attrs=system, intermediate_values=inter, trial_id=study_id * TRIAL_ID_STRIDE + number))
    return out


def _seed(exp: Any, trial_id: str, recorded: Any, folder: Path | None) -> int | None:
    """A trial's seed (``tuner.trial.seed()``) as ``results.csv`` records it: that column once the run wrote it;
    while it runs, :func:`tuner.search.seeds.seed_of_trial` of the spec's ``seed`` and the config the trial started
    with (its ``params.json``); None without a ``seed`` in the spec (``results.csv`` has no column then)."""
    import json

    from tuner.experiment.layout import PARAMS_FILE
    from tuner.search.seeds import seed_of_trial

    if recorded is not None:
        return int(recorded)
    if exp.spec is None or exp.spec.seed is None or folder is None:
        return None
    try:
        config = json.loads((folder / PARAMS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return seed_of_trial(exp.spec.seed, trial_id, config) if isinstance(config, dict) else None


def _created(folder: Path | None) -> datetime.datetime | None:
    """When a trial started: its folder's ``params.json`` (Ray writes it as the trial starts), or None."""
    from tuner.experiment.layout import PARAMS_FILE

    try:
        return datetime.datetime.fromtimestamp((folder / PARAMS_FILE).stat().st_mtime) if folder else None
    except OSError:
        return None


def _signature(path: Path) -> tuple:
    """What changes when an experiment's files do: the newest write among its state, summary and results, and
    whether a run holds its lock (a run that ends releases it after its last write)."""
    from tuner.experiment.layout import EXPERIMENT_STATE_GLOB, LOCK_FILE, RESULT_FILE, RESULTS_CSV, SUMMARY
    from tuner.report.loading import is_running

    newest = 0.0
    for file in [*path.glob(EXPERIMENT_STATE_GLOB), *path.glob(f"*/{RESULT_FILE}"), path / SUMMARY,
                 path / RESULTS_CSV, path / LOCK_FILE]:
        try:
            newest = max(newest, file.stat().st_mtime)
        except OSError:
            continue
    return newest, is_running(path)


class CloudMirror:
    """A cloud storage folder (``s3://``, ``gs://``, ...) as the dashboard serves it: its local mirror
    (:func:`tuner.experiment.storage.mirror_dir`, the folder ``tuner report`` downloads into), synced at most every
    :data:`CLOUD_REFRESH_S` seconds. The location is an experiment, or a storage folder whose
    experiments are each downloaded; checkpoints are not (:func:`tuner.experiment.storage.download`), and a file
    already in the mirror with the cloud object's size and time is not copied again.

    Args:
        location: The cloud URI (its query, e.g. ``endpoint_override``, as in a spec's ``storage``).
    """

    def __init__(self, location: str):
        from tuner.experiment.storage import mirror_dir

        self.location = location
        self.path = mirror_dir(location)
        self._synced_at = -math.inf

    def sync(self, now: float) -> None:
        """Download what changed, unless the last sync is under :data:`CLOUD_REFRESH_S` seconds old.

        Raises:
            tuner.experiment.storage.StorageError: The location cannot be listed or read (no credentials, no network).
        """
        from tuner.report.loading import is_experiment
        from tuner.experiment.storage import download, experiments_mirror, join

        if now - self._synced_at < CLOUD_REFRESH_S:
            return
        self._synced_at = now
        download(self.location, self.path, top_level=True)
        self.path.mkdir(parents=True, exist_ok=True)  # an empty storage shows no experiment yet, as a local one
        if is_experiment(self.path):
            download(self.location, self.path)
            return
        experiments_mirror(self.location)  # each folder's top-level files: which of them are experiments
        for folder in sorted(self.path.iterdir()):
            if not folder.name.startswith(".") and is_experiment(folder):
                download(join(self.location, folder.name), folder)


@dataclass
class _Study:
    path: Path
    study: FrozenStudy
    signature: tuple = ()
    trials: list[FrozenTrial] = field(default_factory=list)
    read_at: float = -math.inf  # the clock when it was last read
    read_s: float = 0.0  # seconds that read took


class ExperimentStorage(BaseStorage):
    """A read-only Optuna storage over tuner's experiment folders: one study per experiment.

    The studies are the experiments :func:`find_experiments` finds under ``paths``, read again at most
    every :data:`REFRESH_S` seconds (a new experiment is added; one whose files changed is read again, once
    :data:`READ_WAIT_FACTOR` times its last read's seconds have passed).
    A study's id is its place in the order the experiments were found, and stays; its name is the
    experiment's name (``<storage>/<name>`` where two share one). Every write raises.

    Args:
        paths: Experiment folders, or storage folders that hold them; a cloud URI is served from its local mirror.
        clock: Seconds, for the refresh period and the reads' durations (``time.monotonic``).

    Raises:
        DashboardError: If a path does not exist or is not a folder.
        DashboardError: If a cloud URI cannot be read at the start (its mirror's first sync).
    """

    def __init__(self, paths: Sequence[str | os.PathLike], clock: Callable[[], float] = time.monotonic):
        from tuner.experiment.storage import is_remote

        self._paths = list(paths)
        self._mirrors = {i: CloudMirror(str(p)) for i, p in enumerate(self._paths) if is_remote(str(p))}
        self._clock = clock
        self._lock = threading.Lock()
        self._studies: list[_Study] = []
        self._read_at = -math.inf
        self._refresh()  # refuses a missing folder now (find_experiments)

    # ------------------------------------------------------------------ reading the folders

    def _refresh(self) -> None:
        from tuner.report import load_experiment
        from tuner.report.loading import ReportError
        from tuner.experiment.storage import CREDENTIALS_HINT

        with self._lock:
            now = self._clock()
            if now - self._read_at < REFRESH_S:
                return
            first, self._read_at = self._read_at == -math.inf, now
            for mirror in self._mirrors.values():
                try:
                    mirror.sync(now)
                except StorageError as err:
                    if first:  # before serving: the one-paragraph error, exit 2
                        raise DashboardError(f"{err}. {CREDENTIALS_HINT}.", "tuner dashboard") from None
                    # later: the last mirror is served until the cloud answers again
            local = [self._mirrors[i].path if i in self._mirrors else p for i, p in enumerate(self._paths)]
            known = {s.path for s in self._studies}
            for path in find_experiments(local):
                if path not in known:
                    self._studies.append(_Study(path, FrozenStudy(path.name, StudyDirection.MINIMIZE, {}, {},
                                                                  len(self._studies))))
            names = [s.path.name for s in self._studies]
            for study_id, s in enumerate(self._studies):
                signature = _signature(s.path)
                if signature == s.signature or now - s.read_at < READ_WAIT_FACTOR * s.read_s:
                    continue  # unchanged, or read a moment ago: a large one waits longer, read at the next refresh
                started = self._clock()
                try:
                    exp = load_experiment(s.path)
                except (ReportError, OSError, ValueError):
                    continue
                modes: list[str] = [o.mode for o in exp.objectives] or [exp.mode or "min"]
                directions = [StudyDirection.MAXIMIZE if m == "max" else StudyDirection.MINIMIZE for m in modes]
                name = s.path.name if names.count(s.path.name) == 1 else f"{s.path.parent.name}/{s.path.name}"
                metrics = [o.metric for o in exp.objectives] or [exp.metric or "value"]
                s.study = FrozenStudy(name, None, {"path": str(s.path), "status": exp.status,
                                                      "best_trial": exp.best_trial},
                                      {METRIC_NAMES_ATTR: metrics}, study_id, directions=directions)
                s.trials = study_trials(exp, study_id)
                s.signature = signature
                s.read_at, s.read_s = now, self._clock() - started

    def _study(self, study_id: int) -> _Study:
        self._refresh()
        if not 0 <= study_id < len(self._studies):
            raise KeyError(f"no study with id {study_id}")
        return self._studies[study_id]

    # ------------------------------------------------------------------ Optuna's reads

    def get_all_studies(self) -> list[FrozenStudy]:
        self._refresh()
        return [copy.deepcopy(s.study) for s in self._studies]

    def get_study_id_from_name(self, study_name: str) -> int:
        self._refresh()
        for s in self._studies:
            if s.study.study_name == study_name:
                return s.study._study_id
        raise KeyError(f"no study named {study_name!r}")

    def get_study_name_from_id(self, study_id: int) -> str:
        return self._study(study_id).study.study_name

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return list(self._study(study_id).study.directions)

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return dict(self._study(study_id).study.user_attrs)

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return dict(self._study(study_id).study.system_attrs)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        study_id, number = divmod(trial_id, TRIAL_ID_STRIDE)
        trials = self._study(study_id).trials
        if not 0 <= number < len(trials):
            raise KeyError(f"no trial with id {trial_id}")
        return copy.deepcopy(trials[number])

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        trials = [t for t in self._study(study_id).trials if states is None or t.state in states]
        return copy.deepcopy(trials) if deepcopy else list(trials)

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        return self.get_trial(study_id * TRIAL_ID_STRIDE + trial_number)._trial_id

    # ------------------------------------------------------------------ writes: refused

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("tuner dashboard is read-only: the experiments' own files are the record")

    create_new_study = delete_study = set_study_user_attr = set_study_system_attr = _read_only
    create_new_trial = set_trial_param = set_trial_state_values = set_trial_intermediate_value = _read_only
    set_trial_user_attr = set_trial_system_attr = _read_only


def read_only(app: Callable) -> Callable:
    """A WSGI app that passes GET and HEAD requests to ``app`` and answers any other with 405."""

    def wrapped(environ: dict, start_response: Callable) -> Any:
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Content-Type", "text/plain"), ("Allow", "GET, HEAD")])
            return [b"tuner dashboard is read-only\n"]
        return app(environ, start_response)

    return wrapped


def make_server(storage: ExperimentStorage, host: str = "127.0.0.1", port: int = 8080) -> Any:
    """optuna-dashboard's WSGI app over an :class:`ExperimentStorage`, read-only, on a threaded server.

    Args:
        storage: The experiments to serve.
        host: The address to bind.
        port: The port; 0 picks a free one (``server.server_port`` tells which).

    Returns:
        A ``wsgiref`` server, bound, not yet serving (``serve_forever``; ``shutdown`` and ``server_close``).

    Raises:
        DashboardError: If optuna-dashboard is not installed.
    """
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer
    from wsgiref.simple_server import make_server as wsgi_server

    try:
        from optuna_dashboard import wsgi
    except ImportError:
        raise DashboardError(f"the dashboard needs optuna-dashboard; install it with {INSTALL} "
                             "(or pip install 'tuner[dashboard]').", "tuner dashboard") from None

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    app = read_only(wsgi(storage))
    return wsgi_server(host, port, app, server_class=Server, handler_class=QuietHandler)


def serve(paths: Sequence[str | os.PathLike], host: str, port: int, echo: Callable[[str], Any] = print) -> None:
    """Serve the dashboard until Ctrl-C (SIGINT, or SIGTERM), then stop cleanly.

    Raises:
        DashboardError: If a path is not a folder (:func:`find_experiments`), or as :func:`make_server`.
    """
    import signal

    from tuner.experiment.storage import display

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        # Ctrl-C and `kill` stop it, also when it inherited SIGINT ignored (a job a script starts with `&`).
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, stop)
    storage = ExperimentStorage(paths)
    server = make_server(storage, host, port)
    studies = len(storage.get_all_studies())
    shown = "[" + host + "]" if ":" in host else host
    if host not in ("127.0.0.1", "localhost", "::1"):
        echo(f"tuner: note: the dashboard has no authentication: anyone who can reach {shown}:{server.server_port} "
             "can read every experiment it serves.")
    try:  # the URL printed inside: a Ctrl-C as soon as it shows stops the dashboard cleanly too
        echo(f"Dashboard: http://{shown}:{server.server_port}/dashboard/ ({studies} experiment"
             f"{'s' if studies != 1 else ''} in {', '.join(display(str(p)) for p in paths)}; Ctrl-C stops it)")
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
