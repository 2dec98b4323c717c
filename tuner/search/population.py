"""The population schedulers: Ray's ``PopulationBasedTraining`` (Jaderberg et al., "Population Based
Training of Neural Networks", 2017) and ``PB2`` (Parker-Holder et al., "Provably Efficient Online
Hyperparameter Optimization with Population-Based Bandits", NeurIPS 2020), seeded, whose population
survives a resume (:mod:`tuner.search.scheduler_state`) and whose clone sources outlive ``num_to_keep``
(:class:`KeepsCloneSources`).

Imported only when ``scheduler.type`` is ``pbt`` or ``pb2`` (:func:`tuner.search.algorithms.build_scheduler`):
PB2 brings scikit-learn and scipy, about 1.8 CPU-s of imports that another scheduler never needs.
"""

from __future__ import annotations

from typing import Any

from ray.tune.schedulers import PopulationBasedTraining, TrialScheduler
from ray.tune.schedulers.pb2 import PB2

from tuner.adapters import ray_internals
from tuner.core.params import PATH_SEP, leaves
from tuner.search.scheduler_state import KeepsState
from tuner.search.space import mutation_domain
from tuner.spec import Spec

__all__ = ["population_scheduler", "population_mutations", "population_bounds", "KeepsCloneSources", "TunerPBT",
           "TunerPB2"]


def _nested(spec: Spec, flat: dict[str, Any]) -> dict[str, Any]:
    """``{"opt.lr": v}`` (names as the spec writes them) -> ``{"opt": {"lr": v}}``, with param_space's nesting."""
    keys = {PATH_SEP.join(k): k for k, _ in leaves(spec.param_space)}
    out: dict[str, Any] = {}
    for name, value in flat.items():
        *parents, last = keys.get(name, (name,))
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def population_mutations(spec: Spec) -> dict[str, Any]:
    """PBT's ``hyperparam_mutations`` for the spec: :attr:`tuner.spec.Spec.population_mutations`, each
    distribution as :func:`tuner.search.space.mutation_domain` makes it, nested as ``param_space``."""
    return _nested(spec, {k: mutation_domain(d) for k, d in spec.population_mutations.items()})


def population_bounds(spec: Spec) -> dict[str, Any]:
    """PB2's ``hyperparam_bounds`` for the spec: ``[low, high]`` per parameter, nested as ``param_space``."""
    return _nested(spec, {k: [lo, hi] for k, (lo, hi) in spec.population_bounds.items()})


def population_scheduler(spec: Spec) -> TrialScheduler:
    """PBT or PB2, seeded, with a note on the console when an exploit is skipped for want of a checkpoint.

    Seeds: Ray's PBT draws from Python's global ``random`` module in the driver (which top trial
    a bottom trial clones, resample or perturb, which perturbation factor, which neighbouring
    value); PB2 draws from it too, and from numpy's global ``RandomState`` (a GP-UCB start
    point). With ``spec.seed`` set, both are seeded here, once, when the scheduler is built:
    the same seed then gives the same decisions for the same sequence of results (which an
    asynchronous population's timing may still change; ``synch: true`` orders it).
    """
    import random

    s: Any = spec.scheduler  # a PBTScheduler or a PB2Scheduler
    if spec.seed is not None:
        random.seed(spec.seed)
        if s.type == "pb2":
            import numpy as np

            np.random.seed(spec.seed)
    ray_internals.watch_skipped_exploits(_SkippedExploitNote(s.type, s.perturbation_interval))
    if s.type == "pbt":
        return TunerPBT(
            time_attr=s.time_attr, perturbation_interval=s.perturbation_interval, burn_in_period=s.burn_in_period,
            hyperparam_mutations=population_mutations(spec), quantile_fraction=s.quantile_fraction,
            resample_probability=s.resample_probability, synch=s.synch, log_config=True)
    assert s.type == "pb2"
    # log_config=True: Ray logs every perturbation (pbt_global.txt, pbt_policy_<id>.txt), read by
    # tuner.search.schedule for summary.json, best_schedule.yaml, `tuner report` and `tuner run --replay`.
    return TunerPB2(time_attr=s.time_attr, perturbation_interval=s.perturbation_interval,
                hyperparam_bounds=population_bounds(spec), quantile_fraction=s.quantile_fraction, synch=s.synch,
                log_config=True)


class _SkippedExploitNote:
    """What the console says, once a run, when PBT/PB2 could not clone a top trial: it had no checkpoint."""

    def __init__(self, scheduler: str, interval: float):
        self.scheduler, self.interval, self.said = scheduler, interval, False

    def __call__(self, top: str, bottom: str) -> None:
        if self.said:
            return
        self.said = True
        from tuner.search.scheduler_state import console_note

        console_note(f"{self.scheduler} could not exploit trial {top} for trial {bottom}: {top} has no checkpoint yet, "
             f"so the bottom trial goes on with its own config. A train function must pass checkpoint_dir= to "
             f"tuner.trial.report at least every perturbation_interval ({self.interval:g}) iterations, and restore "
             "from tuner.trial.get_checkpoint(); a class trainable must implement save_checkpoint and "
             "load_checkpoint. (Said once a run.)")


class KeepsCloneSources(ray_internals.PBTCloneSourceHooks):
    """PBT and PB2 whose clone sources outlive the top trials' ``num_to_keep``.

    Ray's PBT keeps, at a top trial's perturbation point, a reference to that trial's checkpoint,
    and clones a bottom trial from it later. By then the top trial has trained on and saved
    newer checkpoints, and Ray deletes the old ones past ``checkpoint.num_to_keep``; a bottom
    trial that waits for a free CPU before it restores waits longer still. The clone then
    fails: "Could not recover from checkpoint as it does not exist on storage anymore".
    Measured: a population of 8 on 2 CPUs, a checkpoint every iteration, ``num_to_keep: 2``
    (benchmarks/pbt_schedule.py): 6 of 8 trials errored.

    Here each top trial's checkpoint is copied at its perturbation point, into
    ``<experiment>/pbt_clones/<trial id>-<iteration>`` (:data:`tuner.experiment.layout.CLONE_SOURCES_DIR`;
    the ``training_iteration`` the checkpoint was reported with, as ``cloned_iteration`` in
    ``pbt_global.txt``; ``-2``, ``-3`` ... after it while a copy of that name is still in use, as
    when a clone took the trial back to an earlier iteration); hard links on a local disk, so no
    extra space while the original lives; a copy in cloud storage. The clones restore from the
    copy. A copy is deleted once no trial can restore from it: when it is neither the clone source
    kept for a trial still running (finished trials are not cloned) nor any trial's latest
    checkpoint (a clone's latest checkpoint is the copy until it saves its own). This is checked
    whenever a copy is kept and whenever a trial ends, so after the run only the copies that are
    still some trial's latest checkpoint are left (a trial that ended before saving a checkpoint
    of its own after an exploit), and none when every trial saved after its last exploit; an
    interrupted run keeps what its resume needs.
    """

    def keep_clone_source(self, trial, checkpoint, metrics):
        from ray.tune import Checkpoint

        from tuner.experiment.storage import copy_tree, delete_tree

        folder = self._clone_sources_folder(trial)
        if folder is None or not getattr(checkpoint, "path", None):
            return checkpoint
        fs = checkpoint.filesystem
        source = checkpoint.path.rstrip("/")
        if source.startswith(folder + "/"):
            return checkpoint  # kept already
        iteration = metrics.get("training_iteration")
        base = f"{folder}/{trial.trial_id}-{iteration if iteration is not None else source.rsplit('/', 1)[-1]}"
        in_use = self._clone_sources_in_use(besides=trial)  # this trial's own source is being replaced
        kept, n = base, 1
        while kept in in_use:
            n += 1
            kept = f"{base}-{n}"
        # A copy of that name that no trial can restore from is an older one (or a half one, from a run killed
        # while it copied: the scheduler's state names a copy only once it is whole): made again.
        delete_tree(fs, kept)
        copy_tree(fs, source, kept)
        self._delete_clone_sources(fs, folder, in_use | {kept})
        return Checkpoint(kept, filesystem=fs)

    @staticmethod
    def _clone_sources_folder(trial) -> str | None:
        """``<experiment>/pbt_clones`` for ``trial``'s experiment (:data:`tuner.experiment.layout.CLONE_SOURCES_DIR`),
        or None when Ray has not placed the trial in one."""
        from tuner.experiment.layout import CLONE_SOURCES_DIR
        from tuner.adapters.ray_internals import experiment_fs_path

        experiment = experiment_fs_path(trial)
        return None if experiment is None else f"{experiment.rstrip('/')}/{CLONE_SOURCES_DIR}"

    def _clone_sources_in_use(self, besides: Any = None) -> set[str]:
        """The paths of the checkpoints a trial can still restore from: the clone sources kept for
        the trials still running (``besides`` counted as finished) and every trial's latest checkpoint."""
        needed = {c.path.rstrip("/") for t, c in ray_internals.pbt_clone_sources(self).items()
                  if t is not besides and not t.is_finished()}
        needed |= {t.checkpoint.path.rstrip("/") for t in ray_internals.pbt_population(self)
                   if t.checkpoint is not None and getattr(t.checkpoint, "path", None)}
        return needed

    @staticmethod
    def _delete_clone_sources(fs, folder: str, needed: set[str]) -> None:
        """Delete every copy in ``folder`` but ``needed``; the folder too once it is empty."""
        import pyarrow.fs as pafs

        from tuner.experiment.storage import delete_tree

        infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        for info in infos:
            if info.path.rstrip("/") not in needed:
                delete_tree(fs, info.path)
        if not any(i.path.rstrip("/") in needed for i in infos):
            delete_tree(fs, folder)

    def _trial_ended(self, trial) -> None:
        """Delete the copies no trial can restore from once ``trial`` has ended (it is cloned no more)."""
        folder = self._clone_sources_folder(trial)
        sources = ray_internals.pbt_clone_sources(self)
        for ended in [t for t in sources if t is trial or t.is_finished()]:
            ray_internals.drop_pbt_clone_source(self, ended)  # deleted below; a restarted trial gets a new one
        known = [*sources.values(),
                 *(t.checkpoint for t in ray_internals.pbt_population(self) if t.checkpoint is not None)]
        fs = next((c.filesystem for c in known if getattr(c, "filesystem", None) is not None), None)
        if folder is None or fs is None:
            return  # no checkpoint anywhere: nothing was kept
        self._delete_clone_sources(fs, folder, self._clone_sources_in_use(besides=trial))

    def on_trial_complete(self, tune_controller, trial, result) -> None:
        super().on_trial_complete(tune_controller, trial, result)  # type: ignore[misc]
        self._trial_ended(trial)

    def on_trial_error(self, tune_controller, trial) -> None:
        super().on_trial_error(tune_controller, trial)  # type: ignore[misc]
        self._trial_ended(trial)

    def on_trial_remove(self, tune_controller, trial) -> None:
        super().on_trial_remove(tune_controller, trial)  # type: ignore[misc]
        self._trial_ended(trial)


class TunerPBT(KeepsState, KeepsCloneSources, PopulationBasedTraining):
    """Ray's ``PopulationBasedTraining`` (Jaderberg et al., 2017), whose population (each trial's last score,
    last perturbation time and checkpoint, the count of perturbations) survives a resume
    (:mod:`tuner.search.scheduler_state`)."""


class TunerPB2(KeepsState, KeepsCloneSources, PB2):
    """Ray's ``PB2`` (Parker-Holder et al., NeurIPS 2020), whose population and GP data survive a resume
    (:mod:`tuner.search.scheduler_state`)."""
