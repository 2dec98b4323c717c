"""The experiment folder's schema: the name of every file and folder in ``<storage>/<name>/``.

Each name is declared once, here; the code that writes a file and the code that reads
it both import its constant (as Syne Tune's ``syne_tune/constants.py`` does). Ray's own
files are named as Ray names them; ``tests/test_ray_internals.py`` checks that Ray's
constants still agree.

An experiment folder holds:

* tuner's records: :data:`SPEC_SNAPSHOT`, :data:`RUN_RECORD`, :data:`SUMMARY`,
  :data:`BEST_CONFIG`, :data:`RESULTS_CSV`, :data:`LOG_FILE`, :data:`PARETO_CONFIGS` (:data:`TUNER_FILES`);
* tuner's bookkeeping: :data:`LOCK_FILE`, :data:`STATE_SNAPSHOT_DIR`, the markers
  :data:`BUDGET_SPENT` and (in a trial folder) :data:`TIMEOUT_MARKER` and
  :data:`PLACEMENT_GROUP_FILE`, a command trial's :data:`COMMAND_STDOUT`, :data:`COMMAND_STDERR`,
  :data:`COMMAND_CONFIG` and :data:`TORCHRUN_LOGS`, the link :data:`RAY_LOGS_LINK`, TensorBoard's HParams
  summary (:data:`HPARAMS_EVENTS_PREFIX`);
* Ray Tune's state: :data:`EXPERIMENT_STATE` (and :data:`CORRUPT_SUFFIX`, a copy set
  aside), the searcher states :data:`BASIC_VARIANT_STATE`, :data:`SEARCH_GEN_STATE`,
  :data:`SEARCHER_STATE`;
* one folder per trial, :func:`trial_folder_name`, with Ray's :data:`PARAMS_FILE`,
  :data:`RESULT_FILE` and :data:`ERROR_FILE`.

``tuner export`` writes a folder of its own (:data:`EXPORT_FILES`).

No Ray here (``tuner report`` reads experiment folders without Ray).
"""

from __future__ import annotations

__all__ = ["SPEC_SNAPSHOT", "RUN_RECORD", "SUMMARY", "BEST_CONFIG", "RESULTS_CSV", "LOG_FILE", "TUNER_FILES",
           "LOCK_FILE", "CLONE_SOURCES_DIR",
           "STATE_SNAPSHOT_DIR", "BUDGET_SPENT", "TIMEOUT_MARKER", "PLACEMENT_GROUP_FILE",
           "COMMAND_STDOUT", "COMMAND_STDERR", "COMMAND_CONFIG", "TORCHRUN_LOGS",
           "RAY_LOGS_LINK", "HPARAMS_EVENTS_PREFIX", "HPARAMS_EVENTS_SUFFIX", "EVENTS_GLOB", "TMP_SUFFIX",
           "DOWNLOAD_SUFFIX", "EXPERIMENT_STATE", "EXPERIMENT_STATE_GLOB", "CORRUPT_SUFFIX", "BASIC_VARIANT_STATE",
           "SEARCH_GEN_STATE", "SEARCHER_STATE", "CALLBACK_STATE", "CALLBACK_STATE_GLOB", "PARAMS_FILE", "RESULT_FILE",
           "ERROR_FILE", "CHECKPOINT_PREFIX", "PROGRESS_FILE", "BEST_SCHEDULE", "REPLAY_POLICY", "PBT_GLOBAL",
           "PARETO_CONFIGS", "GPU_PACKING",
           "PBT_POLICY", "PBT_POLICY_GLOB", "EXPORT_MODEL_DIR", "EXPORT_CONFIG", "EXPORT_METRICS", "EXPORT_README",
           "EXPORT_SPEC", "EXPORT_FILES",
           "trial_folder_name", "trial_folder_of", "trial_id_of_folder", "train_run_name", "train_run_generation"]

# --------------------------------------------------------------------------- tuner's records

#: The spec as run (YAML; a cloud URI's query and user info left out); a resume and a report read it.
SPEC_SNAPSHOT = "spec.yaml"
#: The run record (JSON): ``spec_source``, ``python_path``, ``trainable``, ``created``, ``resumed``, ``time_budget_s``.
RUN_RECORD = "tuner_run.json"
#: The run's summary (JSON): metric, mode, best trial, trial counts, errors, wall time.
SUMMARY = "summary.json"
#: The best trial's config (plain YAML), written when there is a best trial.
BEST_CONFIG = "best_config.yaml"
#: One row per trial, best first (CSV).
RESULTS_CSV = "results.csv"
#: Ray's driver-side log lines, kept off the console.
LOG_FILE = "tuner.log"
#: A PBT/PB2 run: the best trial's hyperparameter schedule (YAML; :mod:`tuner.search.schedule`).
BEST_SCHEDULE = "best_schedule.yaml"
#: Several objectives: the Pareto front's trials (YAML list of ``trial_id``, ``objectives``, ``config``;
#: :mod:`tuner.search.pareto`), written when the spec has two or more objectives.
PARETO_CONFIGS = "pareto_configs.yaml"
#: A replay (``tuner run --replay``): the PBT policy it replays, copied from the replayed experiment
#: (Ray's policy-file format; an empty file for a trial that was never perturbed).
REPLAY_POLICY = "replay_policy.txt"
#: ``resources.gpu: auto``: each trial's GPU share and why, the levels tried, the memory learned
#: (JSON; :mod:`tuner.resources.gpu_packing`), rewritten on every change so that a resume continues from it.
GPU_PACKING = "gpu_packing.json"
#: tuner's own files in the experiment folder, uploaded beside Ray's for a cloud experiment.
TUNER_FILES = (SPEC_SNAPSHOT, RUN_RECORD, SUMMARY, BEST_CONFIG, RESULTS_CSV, LOG_FILE, BEST_SCHEDULE, REPLAY_POLICY,
               PARETO_CONFIGS, GPU_PACKING)

# --------------------------------------------------------------------------- tuner's bookkeeping

#: The experiment's lock: an exclusive ``flock`` held by the running ``tuner`` process (holds its pid).
LOCK_FILE = ".tuner.lock"
#: Folder of the last readable copy of Ray's experiment state (:class:`tuner.run.failures.StateSnapshots`).
STATE_SNAPSHOT_DIR = ".tuner_state"
#: Marker: the time budget ended the session (left by the stopper, taken by the run's caller).
BUDGET_SPENT = "time_budget_spent"
#: Marker in a trial folder: why ``trial_timeout_s`` ended the trial (one line).
TIMEOUT_MARKER = "trial_timeout.txt"
#: In a DDP trial's folder: the id of the placement group of Ray Train's workers, freed when the trial ends.
PLACEMENT_GROUP_FILE = ".train_placement_group"
#: In a command trial's folder: what its program printed on stdout (its metrics lines too), appended on each start.
COMMAND_STDOUT = "command_stdout.log"
#: In a command trial's folder: what its program printed on stderr, appended on each start.
COMMAND_STDERR = "command_stderr.log"
#: In a command trial's folder: the trial's config as YAML, for the program (``$TUNER_CONFIG``).
COMMAND_CONFIG = "tuner_config.yaml"
#: In the folder of a command trial run under ``torchrun``: each rank's output (torchrun's ``--log-dir``).
TORCHRUN_LOGS = "torchrun_logs"
#: Link to the Ray session's log folder (a local Ray only).
RAY_LOGS_LINK = "ray_logs"
#: TensorBoard's HParams experiment summary: ``events.out.tfevents.<time>.<host>.hparams``.
HPARAMS_EVENTS_PREFIX = "events"
#: The suffix of the HParams experiment summary's file name.
HPARAMS_EVENTS_SUFFIX = ".hparams"
#: TensorBoard event files directly in the experiment folder (the HParams summary).
EVENTS_GLOB = f"{HPARAMS_EVENTS_PREFIX}.out.tfevents.*"
#: PBT/PB2's clone sources: a copy of each top trial's checkpoint that a bottom trial may be cloned from,
#: ``<folder>/<trial id>-<iteration>`` (:class:`tuner.search.population.KeepsCloneSources`), so that it outlives
#: the top trial's ``num_to_keep``.
CLONE_SOURCES_DIR = "pbt_clones"
#: Suffix of a file being written (``tuner.experiment.files.atomic_write``: write, then rename).
TMP_SUFFIX = ".tmp"
#: Suffix of a file being downloaded into a cloud experiment's mirror.
DOWNLOAD_SUFFIX = ".part"

# --------------------------------------------------------------------------- Ray Tune's state

#: Ray Tune's experiment state (``TuneController.CKPT_FILE_TMPL``), ``{}`` the session's timestamp.
EXPERIMENT_STATE = "experiment_state-{}.json"
#: Every experiment state file in a folder (the newest sorts last).
EXPERIMENT_STATE_GLOB = EXPERIMENT_STATE.format("*")
#: Suffix of an unreadable experiment state set aside when a resume restores the snapshot.
CORRUPT_SUFFIX = ".corrupt"
#: ``grid``/``random`` searcher state (``BasicVariantGenerator.CKPT_FILE_TMPL``).
BASIC_VARIANT_STATE = "basic-variant-state-{}.json"
#: A searcher's wrapper state (``SearchGenerator.CKPT_FILE_TMPL``).
SEARCH_GEN_STATE = "search_gen_state-{}.json"
#: A searcher's own state, pickled (``Searcher.CKPT_FILE_TMPL``).
SEARCHER_STATE = "searcher-state-{}.pkl"
#: The callbacks' states, pickled (``CallbackList.CKPT_FILE_TMPL``); tuner's scheduler state is one
#: (:mod:`tuner.search.scheduler_state`).
CALLBACK_STATE = "callback-states-{}.pkl"
#: Every callback state file in a folder (the newest sorts last).
CALLBACK_STATE_GLOB = CALLBACK_STATE.format("*")
#: PBT/PB2 with ``log_config=True``: every perturbation of the population, one JSON list per line
#: (``PopulationBasedTraining._log_config_on_step``; read by :mod:`tuner.search.schedule`).
PBT_GLOBAL = "pbt_global.txt"
#: PBT/PB2: one trial's policy (the perturbations its weights went through), ``{}`` the trial id;
#: what Ray's ``PopulationBasedTrainingReplay`` replays.
PBT_POLICY = "pbt_policy_{}.txt"
#: Every trial's policy file in a folder.
PBT_POLICY_GLOB = PBT_POLICY.format("*")

# --------------------------------------------------------------------------- an exported model

#: ``tuner export``'s folder: the exported checkpoint's files, as the trial saved them.
EXPORT_MODEL_DIR = "model"
#: ``tuner export``'s folder: the trial's config (plain YAML).
EXPORT_CONFIG = "config.yaml"
#: ``tuner export``'s folder: the metric at the checkpoint and its iteration, the trial, the scope (JSON).
EXPORT_METRICS = "metrics.json"
#: ``tuner export``'s folder: what the folder holds and where it came from (Markdown).
EXPORT_README = "README.md"
#: ``tuner export``'s folder: the spec as run (the experiment's :data:`SPEC_SNAPSHOT`).
EXPORT_SPEC = SPEC_SNAPSHOT
#: Every file and folder ``tuner export`` writes, in the order its README lists them.
EXPORT_FILES = (EXPORT_MODEL_DIR, EXPORT_CONFIG, EXPORT_METRICS, EXPORT_SPEC, EXPORT_README)

# --------------------------------------------------------------------------- trial folders

#: A trial's config, as its train function saw it (Ray's ``EXPR_PARAM_FILE``).
PARAMS_FILE = "params.json"
#: A trial's results, one JSON object per line (Ray's ``EXPR_RESULT_FILE``).
RESULT_FILE = "result.json"
#: A trial's results as CSV, one row per result, nested names joined by ``/`` (Ray's ``EXPR_PROGRESS_FILE``);
#: it keeps rows that ``result.json`` loses when Ray restores a trial from a checkpoint (PBT).
PROGRESS_FILE = "progress.csv"
#: A trial's error and traceback (Ray's ``EXPR_ERROR_FILE``).
ERROR_FILE = "error.txt"
#: Prefix of a checkpoint folder's name, in a trial folder (Ray's and Ray Train's).
CHECKPOINT_PREFIX = "checkpoint_"


def trial_folder_name(trainable_name: str, trial_id: str) -> str:
    """A trial's folder in the experiment: ``<trainable name>_<trial id>``.

    Args:
        trainable_name: The trainable's name (Ray's ``Trial.trainable_name``).
        trial_id: Ray's trial id, e.g. ``1a2b3_00004``.
    """
    return f"{trainable_name}_{trial_id}"


def trial_folder_of(trial) -> str:
    """A Ray ``Trial``'s folder (:func:`trial_folder_name` of its ``trainable_name`` and ``trial_id``),
    as ``TuneConfig(trial_dirname_creator=...)`` takes it.

    A function of a module, not a lambda: Ray's experiment state keeps every trial's creator
    pickled, and pickles a module's function by its name (about 0.2 kB a trial) where it
    pickles a lambda whole (1.4 kB a trial, in a file Ray rewrites every few seconds).

    Args:
        trial: A ``ray.tune.experiment.Trial`` (its ``trainable_name`` and ``trial_id``).
    """
    return trial_folder_name(trial.trainable_name, trial.trial_id)


def train_run_name(trial_id: str, generation: int = 0) -> str:
    """The Ray Train run of a DDP trial, a folder in its trial folder: ``<trial id>``, and after the
    ``generation``-th time PBT/PB2 restarted the trial from another trial's checkpoint,
    ``<trial id>-pbt<generation>`` (a fresh run, which starts from that checkpoint).

    Args:
        trial_id: Ray's trial id.
        generation: 0 for the trial's first run, then 1, 2, ...
    """
    return trial_id if generation == 0 else f"{trial_id}-pbt{generation}"


def train_run_generation(folder_name: str, trial_id: str) -> int | None:
    """The generation of a DDP trial's Ray Train run folder (see :func:`train_run_name`), or None
    when the name is not one of the trial's runs."""
    if folder_name == trial_id:
        return 0
    head, sep, tail = folder_name.rpartition("-pbt")
    return int(tail) if sep and head == trial_id and tail.isdigit() and int(tail) > 0 else None


def trial_id_of_folder(folder_name: str) -> str:
    """The trial id in a trial folder's name (see :func:`trial_folder_name`).

    Ray's trial ids are ``<experiment id>_<5-digit index>``; a name that does not end
    so is given back whole.

    Args:
        folder_name: The folder's name, e.g. ``train_1a2b3_00004``.

    Returns:
        The trial id, e.g. ``1a2b3_00004``.
    """
    parts = folder_name.rsplit("_", 2)
    return "_".join(parts[-2:]) if len(parts) == 3 else folder_name
