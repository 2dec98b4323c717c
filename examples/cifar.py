"""The CNN of the PyTorch / Ray Tune CIFAR-10 tutorial: an example train function.

The data are not downloaded: point ``config["data_dir"]`` or the environment variable
``TUNER_CIFAR_DIR`` at the CIFAR-10 "python version" folder ``cifar-10-batches-py/``
(or its parent). That folder holds pickled ``data_batch_1`` .. ``data_batch_5`` and
``test_batch``, each a dict with ``b"data"`` (uint8, N x 3072: the red, green then blue
32 x 32 planes of each image) and ``b"labels"`` (N ints 0-9). As in the tutorial, the
50,000 training images are split 80/20 into train/validation with a fixed seed.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import numpy as np
import torch
from torch import nn

from examples import _common

DEFAULTS: dict[str, Any] = {
    "l1": 120,
    "l2": 84,
    "lr": 0.01,
    "momentum": 0.9,
    "batch_size": 32,
    "epochs": 10,
    "seed": 0,
    "data_dir": None,
    "limit_train": None,
    "limit_val": None,
}
FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]
SPLIT_SEED = 0
VAL_FRACTION = 0.2
FORMAT = (
    f"the CIFAR-10 python version ({FOLDER}/ with pickled data_batch_1..5 and test_batch, "
    'dicts of b"data" uint8 N x 3072 and b"labels")'
)

# Decoded uint8 images per folder, so trials reusing a worker read the pickles once.
_CACHE: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def find_data(data_dir: str | os.PathLike | None = None) -> str:
    """Locate the CIFAR-10 batches folder.

    Args:
        data_dir: ``cifar-10-batches-py/`` or its parent; when None, ``$TUNER_CIFAR_DIR``.

    Returns:
        The folder holding ``data_batch_1`` .. ``data_batch_5``.

    Raises:
        FileNotFoundError: If no such folder is found.
    """
    root = data_dir or os.environ.get("TUNER_CIFAR_DIR")
    if not root:
        raise FileNotFoundError(f"no CIFAR-10 folder given: set config['data_dir'] or TUNER_CIFAR_DIR to {FORMAT}")
    root = _common.resolve_dir(root)
    for folder in (root, os.path.join(root, FOLDER)):
        if all(os.path.isfile(os.path.join(folder, name)) for name in TRAIN_BATCHES):
            return folder
    raise FileNotFoundError(f"no CIFAR-10 data in {root} nor in {os.path.join(root, FOLDER)}; expected {FORMAT}")


def load_data(
    data_dir: str | os.PathLike | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Load and split the training batches (cached per process).

    Args:
        data_dir: See :func:`find_data`.

    Returns:
        ``(x_train, y_train, x_val, y_val)``: images uint8 of shape (N, 3, 32, 32)
        (see :func:`to_float`), labels int64 of shape (N,).

    Raises:
        FileNotFoundError: See :func:`find_data`.
    """
    folder = find_data(data_dir)
    if folder not in _CACHE:
        xs, ys = [], []
        for name in TRAIN_BATCHES:
            with open(os.path.join(folder, name), "rb") as f:
                batch = pickle.load(f, encoding="bytes")
            xs.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            ys.append(np.asarray(batch[b"labels"], dtype=np.int64))
        x, y = torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys))
        order = torch.from_numpy(np.random.default_rng(SPLIT_SEED).permutation(len(y)))
        n_val = max(1, round(len(y) * VAL_FRACTION))
        val, tr = order[:n_val], order[n_val:]
        _CACHE[folder] = (x[tr], y[tr], x[val], y[val])
    return _CACHE[folder]


def to_float(x: torch.Tensor) -> torch.Tensor:
    """Scale uint8 images (N, 3, 32, 32) to float32 in [-1, 1] (the tutorial's
    ``ToTensor`` + ``Normalize((0.5,) * 3, (0.5,) * 3))``."""
    return x.float().div_(127.5).sub_(1.0)


def build_model(l1: int = 120, l2: int = 84) -> nn.Sequential:
    """The tutorial CNN.

    Args:
        l1: Width of the first fully connected layer.
        l2: Width of the second fully connected layer.

    Returns:
        A module mapping images (N, 3, 32, 32) to logits (N, 10).
    """
    l1, l2 = int(l1), int(l2)
    return nn.Sequential(
        nn.Conv2d(3, 6, 5), nn.ReLU(), nn.MaxPool2d(2),  # (N, 6, 14, 14)
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),  # (N, 16, 5, 5)
        nn.Flatten(), nn.Linear(16 * 5 * 5, l1), nn.ReLU(), nn.Linear(l1, l2), nn.ReLU(), nn.Linear(l2, 10),
    )


def train(config: dict[str, Any]) -> None:
    """Train the tutorial CNN with SGD + momentum, reporting once per epoch.

    Each epoch reports ``val_loss``, ``val_accuracy``, ``train_loss`` and ``epoch``
    (epochs completed) with a checkpoint, and resumes from ``trial.get_checkpoint()``.
    Runs unchanged as a single process or as one rank of a DDP trial (see
    :func:`examples._common.fit`); ``amp: true`` in the spec turns on mixed precision.

    Args:
        config: Any of ``l1``, ``l2``, ``lr``, ``momentum``, ``batch_size`` (global over
            all ranks), ``epochs`` (total, default 10), ``seed``, ``data_dir`` (see
            :func:`find_data`), ``limit_train`` / ``limit_val`` (cap the number of
            samples), ``optimizer`` / ``beta2`` (Adam instead of SGD; see
            :func:`examples._common.make_optimizer`). Missing keys use :data:`DEFAULTS`.

    Raises:
        FileNotFoundError: If no CIFAR-10 folder is found.
        ValueError: An unknown optimizer name or key.
    """
    cfg = {**DEFAULTS, **config}
    _common.set_threads()
    _common.run_classifier(cfg, load_data(cfg["data_dir"]), lambda: build_model(cfg["l1"], cfg["l2"]), prep=to_float)


def make_fake_cifar(root: str | os.PathLike, n_per_batch: int = 20, seed: int = 0) -> str:
    """Write a tiny random CIFAR-10 folder in the python-version format (for tests).

    Args:
        root: Parent folder; ``root/cifar-10-batches-py/`` is created.
        n_per_batch: Images per batch file (5 training batches and ``test_batch``).
        seed: Seed of the random pixels and labels.

    Returns:
        The path of the ``cifar-10-batches-py`` folder.
    """
    rng = np.random.default_rng(seed)
    folder = os.path.join(os.fspath(root), FOLDER)
    os.makedirs(folder, exist_ok=True)
    for name in [*TRAIN_BATCHES, "test_batch"]:
        batch = {
            b"batch_label": f"fake {name}".encode(),
            b"labels": rng.integers(0, 10, n_per_batch).tolist(),
            b"data": rng.integers(0, 256, (n_per_batch, 3072), dtype=np.uint8),
            b"filenames": [f"fake_{i}.png".encode() for i in range(n_per_batch)],
        }
        with open(os.path.join(folder, name), "wb") as f:
            pickle.dump(batch, f, protocol=2)
    meta = {b"num_cases_per_batch": n_per_batch, b"label_names": [f"class_{i}".encode() for i in range(10)],
            b"num_vis": 3072}
    with open(os.path.join(folder, "batches.meta"), "wb") as f:
        pickle.dump(meta, f, protocol=2)
    return folder
