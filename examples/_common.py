"""Shared code for the example train functions: threads, paths, checkpoints, epoch loop.

Only :mod:`tuner.trial` talks to Ray; nothing here imports ray.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Callable

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from tuner import trial

CHECKPOINT_FILE = "checkpoint.pt"
EVAL_BATCH_SIZE = 1000


def set_threads() -> None:
    """Use ``$OMP_NUM_THREADS`` torch threads when that variable is set (Ray sets it to
    the trial's CPU count); otherwise keep torch's default."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        torch.set_num_threads(int(value))


def resolve_dir(path: str | os.PathLike) -> str:
    """Expand ``~`` and make a relative path absolute.

    Ray Tune runs trials inside the trial folder, so a relative path is taken from
    the directory the job was started in (``$TUNE_ORIG_WORKING_DIR``) when known.

    Args:
        path: A folder given by the user.

    Returns:
        The absolute folder path.
    """
    path = os.path.expanduser(os.fspath(path))
    if not os.path.isabs(path):
        path = os.path.join(os.environ.get("TUNE_ORIG_WORKING_DIR", os.getcwd()), path)
    return os.path.normpath(path)


def save_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer, epoch: int) -> str:
    """Write model and optimizer state to a fresh temporary folder.

    Args:
        model: The network.
        optimizer: Its optimizer (momentum buffers included).
        epoch: Number of epochs completed.

    Returns:
        The folder holding ``checkpoint.pt``.
    """
    folder = tempfile.mkdtemp(prefix="tuner-example-ckpt-")
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
    torch.save(state, os.path.join(folder, CHECKPOINT_FILE))
    return folder


def load_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Restore from the trial's latest checkpoint, if any.

    Args:
        model: The network, loaded in place.
        optimizer: Its optimizer, loaded in place.

    Returns:
        Number of epochs already completed (0 without a checkpoint).
    """
    folder = trial.get_checkpoint()
    if not folder:
        return 0
    state = torch.load(os.path.join(folder, CHECKPOINT_FILE), map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["epoch"])


def train_epoch(
    model: nn.Module, loader: DataLoader, optimizer: torch.optim.Optimizer, prep: Callable | None = None
) -> float:
    """Train for one epoch.

    Args:
        model: Maps a batch of images (N, C, H, W) to logits (N, 10).
        loader: Yields ``(images, labels)`` with labels int64 of shape (N,).
        optimizer: Optimizer over ``model``'s parameters.
        prep: Optional function applied to each image batch (e.g. uint8 -> float).

    Returns:
        Mean cross-entropy per sample over the epoch.
    """
    model.train()
    total, count = 0.0, 0
    for x, y in loader:
        x = prep(x) if prep else x
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)
        count += len(y)
    return total / max(count, 1)


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, prep: Callable | None = None) -> tuple[float, float]:
    """Compute loss and accuracy without gradients.

    Args:
        model: Maps images (N, C, H, W) to logits (N, 10).
        loader: Yields ``(images, labels)``.
        prep: Optional function applied to each image batch.

    Returns:
        ``(mean cross-entropy per sample, accuracy in [0, 1])``.
    """
    model.eval()
    loss, correct, count = 0.0, 0, 0
    for x, y in loader:
        logits = model(prep(x) if prep else x)
        loss += nn.functional.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        count += len(y)
    return loss / max(count, 1), correct / max(count, 1)


def fit(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    train_set: Dataset,
    val_set: Dataset,
    *,
    epochs: int,
    batch_size: int,
    seed: int,
    prep: Callable | None = None,
) -> None:
    """Run the epoch loop of a train function: resume, train, validate, report.

    Resumes after the epoch stored in ``trial.get_checkpoint()``. Each epoch reports
    ``val_loss``, ``val_accuracy``, ``train_loss`` and ``epoch`` (epochs completed)
    with a checkpoint. The RNG (shuffling, dropout) is reseeded from ``(seed, epoch)``
    at each epoch, so a resumed trial gives the same numbers as an uninterrupted one.

    Args:
        model: The network, already initialised.
        optimizer: Its optimizer.
        train_set: Training pairs ``(image, label)``.
        val_set: Validation pairs.
        epochs: Total number of epochs (the last reported ``epoch``).
        batch_size: Training batch size.
        seed: Base seed of the per-epoch RNG.
        prep: Optional function applied to each image batch.
    """
    start = load_checkpoint(model, optimizer)
    val_loader = DataLoader(val_set, batch_size=EVAL_BATCH_SIZE)
    for epoch in range(start, epochs):
        torch.manual_seed(seed * 100_003 + epoch + 1)
        train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True)
        train_loss = train_epoch(model, train_loader, optimizer, prep)
        val_loss, val_accuracy = evaluate(model, val_loader, prep)
        folder = save_checkpoint(model, optimizer, epoch + 1)
        try:
            trial.report(
                {"val_loss": val_loss, "val_accuracy": val_accuracy, "train_loss": train_loss, "epoch": epoch + 1},
                checkpoint_dir=folder,
            )
        finally:  # Ray has copied the files by now
            shutil.rmtree(folder, ignore_errors=True)
