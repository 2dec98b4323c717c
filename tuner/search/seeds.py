"""Each trial's own seed, and seeding a trial's process with it; no Ray.

The spec's ``seed`` seeds the searcher (the same seed gives the same sampled configs); it
also gives each trial a seed of its own, :func:`seed_of_trial`, which the train function
reads as ``tuner.trial.seed()`` and which ``seed_trials: true`` uses to seed ``random``,
``numpy`` and ``torch`` in the trial's process (:func:`seed_everything`) before the train
function runs; each rank of a DDP trial gets ``seed + rank`` (:func:`rank_seed`).

A trial's seed is derived from the experiment's seed and the trial's creation index (the
n-th trial the searcher created), as Determined derives its trial seeds, with numpy's
``SeedSequence`` (numpy's version of M. E. O'Neill's ``seed_seq`` hashing, from the PCG
authors' randutils): the seeds of
neighbouring indexes are independent streams, not ``seed + index``. The index is the
number in Ray's trial id (:func:`tuner.adapters.ray_internals.trial_creation_index`), known inside
the trial's process and restored with the trial by a resume.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any
from collections.abc import Mapping

__all__ = ["SEED_BITS", "trial_seed", "seed_of_trial", "rank_seed", "seed_everything", "config_digest"]

#: Trial seeds are unsigned integers of this many bits (what ``numpy.random.seed`` accepts).
SEED_BITS = 32
_MASK64 = (1 << 64) - 1


def trial_seed(experiment_seed: int, index: int) -> int:
    """The seed of the trial created ``index``-th (from 0) in an experiment seeded ``experiment_seed``.

    ``numpy.random.SeedSequence([experiment_seed, index]).generate_state(1)[0]``: a hash of
    both numbers (numpy's ``SeedSequence``), so neighbouring indexes give independent seeds
    and no two experiments' seeds line up by an offset.

    Args:
        experiment_seed: The spec's ``seed``; a negative one is taken modulo 2**64.
        index: The trial's creation index, 0 for the first trial; >= 0.

    Returns:
        An integer in ``[0, 2**32)``.

    Raises:
        ValueError: If ``index`` is negative.
    """
    import numpy as np

    if index < 0:
        raise ValueError(f"a trial index is >= 0, but got {index}")
    return int(np.random.SeedSequence([experiment_seed & _MASK64, index]).generate_state(1)[0])


def config_digest(config: Mapping[str, Any]) -> list[int]:
    """A trial config as four 64-bit words (SHA-256 of its JSON with sorted keys), for seeding.

    Args:
        config: A plain config (nested mappings of JSON values; others are written with ``str``).

    Returns:
        Four integers in ``[0, 2**64)``.
    """
    text = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).digest()
    return [int.from_bytes(digest[i:i + 8], "little") for i in range(0, 32, 8)]


def seed_of_trial(experiment_seed: int | None, trial_id: str, config: Mapping[str, Any]) -> int:
    """The seed of a trial: what ``tuner.trial.seed()`` returns in it.

    * With a ``seed`` in the spec and a trial id that carries its creation index (random and
      grid search, the populations of ``pbt``/``pb2``): :func:`trial_seed`.
    * With a ``seed`` under ``bohb`` or ``optuna``: Ray names these trials with random ids,
      so the index is not known in the trial's process; the seed is derived from the
      experiment seed and the trial's config (:func:`config_digest`), which the seeded
      searcher gives again in a second run. Two trials with the same config get the same
      seed.
    * Without a ``seed``: derived from the trial id, which is unique, random and kept by a
      resume: each trial has its own seed, the same after ``tuner resume``, another in
      another run.

    Args:
        experiment_seed: The spec's ``seed``, or None.
        trial_id: Ray's trial id.
        config: The trial's config as the trial started (plain values).

    Returns:
        An integer in ``[0, 2**32)``.
    """
    import numpy as np

    from tuner.adapters.ray_internals import trial_creation_index

    index = trial_creation_index(trial_id)
    if experiment_seed is not None and index is not None:
        return trial_seed(experiment_seed, index)
    if experiment_seed is not None:
        entropy = [experiment_seed & _MASK64, *config_digest(config)]
    else:
        entropy = [int.from_bytes(hashlib.sha256(trial_id.encode()).digest()[:8], "little")]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def rank_seed(seed: int, rank: int) -> int:
    """The seed of one rank of a DDP trial: ``(seed + rank) mod 2**32``, so ranks differ.

    Args:
        seed: The trial's seed (:func:`seed_of_trial`).
        rank: The process's global rank, 0 to world size - 1.

    Returns:
        An integer in ``[0, 2**32)``.
    """
    return (seed + rank) % (1 << SEED_BITS)


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, numpy's global generator and torch (CPU and every CUDA device).

    ``random.seed``, ``numpy.random.seed`` and ``torch.manual_seed`` (which also seeds every
    CUDA device, ``torch.cuda.manual_seed_all``). torch is imported here (about 1.3 s the
    first time), so that a train function that imports it afterwards finds it seeded; where
    torch is not installed only ``random`` and numpy are seeded. Kernels that are not
    deterministic (some CUDA ones) still vary: see ``torch.use_deterministic_algorithms``.

    Args:
        seed: An integer in ``[0, 2**32)``.
    """
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    try:
        import torch
    except ImportError:
        return
    torch.manual_seed(seed)
