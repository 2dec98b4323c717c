"""The driver side of ``resources.gpu: auto``: Ray Tune's events to the experiment's
:class:`~tuner.resources.gpu_packing.GpuPacker` (:mod:`tuner.resources.gpu_packing` holds the policy and
says it in full).
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from ray.tune import Callback

from tuner.resources.gpu_packing import READ_EVERY_S, GpuPacker, fingerprint, lookup

__all__ = ["PackingCallback"]

logger = logging.getLogger("tuner")


def _is_oom_text(text: str) -> bool:
    return "OutOfMemoryError" in text or "CUDA out of memory" in text


def _error_text(trial: Any) -> str:
    """The end of a trial's ``error.txt`` (Ray writes each failure into it), or ""."""
    try:
        path = trial.error_file
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()[-4000:]
    except (OSError, TypeError, AttributeError):
        return ""


def _gpu_share(trial: Any) -> float | None:
    try:
        return float(trial.placement_group_factory.required_resources.get("GPU", 0.0))
    except AttributeError:
        return None


class PackingCallback(Callback):
    """The driver side of ``gpu: auto``: feeds Ray Tune's events to the experiment's :class:`GpuPacker`,
    sets the searcher's concurrency limit before each step of the Tune controller, and writes
    ``gpu_packing.json``.

    Pickled with the experiment (Ray saves the run's callbacks): it holds the packer's key, not the
    packer, which :func:`register` makes known in the driver.

    Args:
        key: The experiment's key (:func:`register`).
        search_alg: The searcher object passed to Tune (a ``BasicVariantGenerator`` or a ``ConcurrencyLimiter``).
        folder: The experiment folder, where ``gpu_packing.json`` is written (its local mirror for the cloud).
        cpu: ``resources.cpu`` (a retried trial's new request keeps it).
        limit: ``max_concurrent_trials``, or None.
        oom_param: ``oom_backoff``'s parameter: a trial's ``<param>_used`` is what it trained with.
    """

    SAVE_EVERY_S = 2.0

    def __init__(self, key: str, search_alg: Any, folder: str | os.PathLike, cpu: float, limit: int | None = None,
                 oom_param: str | None = None):
        self.key, self.search_alg, self.folder, self.cpu = key, search_alg, str(folder), float(cpu)
        self.limit, self.oom_param = limit, oom_param
        self._saved_at: float | None = None
        self._dirty = False
        self._reconciled_at = -math.inf

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_saved_at", "_dirty", "_reconciled_at")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._saved_at, self._dirty, self._reconciled_at = None, False, -math.inf

    @property
    def packer(self) -> GpuPacker | None:
        return lookup(self.key)

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        from tuner.adapters.ray_internals import set_concurrency_limit

        packer = self.packer
        if packer is None:
            return
        now = packer.clock()
        if now - self._reconciled_at >= READ_EVERY_S:  # a paused trial frees its GPU; an unpaused one takes it
            self._reconciled_at = now
            running = {t.trial_id: t for t in trials if t.status == "RUNNING"}
            for trial_id in [i for i in packer.live if i not in running]:
                packer.ended(trial_id)
            for trial_id, trial in running.items():
                if trial_id not in packer.live:
                    packer.started(trial_id, trial.config, _gpu_share(trial))
        allowed = packer.allowed()
        if self.limit is not None:
            allowed = min(allowed, self.limit)
        set_concurrency_limit(self.search_alg, allowed)
        self._save(packer)

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        packer = self.packer
        if packer is not None:
            packer.started(trial.trial_id, trial.config, _gpu_share(trial))
            self._dirty = True

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        packer = self.packer
        if packer is None:
            return
        used = None
        if self.oom_param and f"{self.oom_param}_used" in result:
            used = _dotted(self.oom_param, result[f"{self.oom_param}_used"])
        levels = len(packer.levels)
        packer.result(trial.trial_id, trial.config, result, used)
        self._dirty = True
        if len(packer.levels) != levels:
            self._save(packer, force=True)

    def _end(self, trial: Any) -> None:
        packer = self.packer
        if packer is not None:
            packer.ended(trial.trial_id)
            self._dirty = True

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        packer = self.packer
        if packer is not None and _is_oom_text(_error_text(trial)):
            packer.out_of_memory(trial.trial_id, trial.config)
            packer.pending.pop(fingerprint(trial.config), None)  # no retry follows
        self._end(trial)
        if packer is not None:
            self._save(packer, force=True)

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        from ray.tune import PlacementGroupFactory

        from tuner.adapters.ray_internals import set_trial_resources

        packer = self.packer
        if packer is None:
            return
        if _is_oom_text(_error_text(trial)):
            decision = packer.out_of_memory(trial.trial_id, trial.config)
            set_trial_resources(trial, PlacementGroupFactory([{"CPU": self.cpu, "GPU": decision.share}]))
        else:
            packer.ended(trial.trial_id)
        self._save(packer, force=True)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        packer = self.packer
        if packer is not None:
            self._save(packer, force=True)

    def _save(self, packer: GpuPacker, force: bool = False) -> None:
        from tuner.experiment.files import atomic_write
        from tuner.experiment.layout import GPU_PACKING

        now = packer.clock()
        if not force and (not self._dirty or (self._saved_at is not None and now - self._saved_at < self.SAVE_EVERY_S)):
            return
        try:
            atomic_write(Path(self.folder) / GPU_PACKING, json.dumps(packer.state(), indent=1, default=str) + "\n")
        except OSError as err:  # a full disk is the DiskFullWatch's to report; the packing goes on
            logger.warning("could not write %s: %s", GPU_PACKING, err)
            return
        self._saved_at, self._dirty = now, False


def _dotted(name: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``"a.b"``: a nested parameter as the config holds it."""
    out: dict[str, Any] = {}
    node = out
    parts = name.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out
