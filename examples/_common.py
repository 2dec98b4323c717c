"""Shared code for the example train functions: threads, paths, checkpoints, epoch loop.

The same code runs unchanged as a single process or as one rank of a DDP trial
(``resources.workers`` in the spec): the model comes from ``trial.prepare_model``
(device, ``channels_last`` under AMP on CUDA, ``DistributedDataParallel`` wrap), the
training batches from ``trial.prepare_data_loader`` (each rank trains on its shard of
every epoch; the examples' small tensor sets stay resident on the device), every rank
evaluates the full validation set (so the metrics rank 0 reports are those of the whole
model; its batches go through ``trial.to_device``), only rank 0 writes checkpoints, and
every rank restores them.

Only :mod:`tuner.trial` talks to Ray; nothing here imports ray.
"""

from __future__ import annotations

import math
import os
import shutil
import time
import tempfile
from collections.abc import Callable, Iterable

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
from torch.nn.parallel import DataParallel, DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, TensorDataset

from tuner import trial

CHECKPOINT_FILE = "checkpoint.pt"
EVAL_BATCH_SIZE = 1000
# Each optimizer's own parameters (beside "name" and "lr"), and their defaults when the config has none.
OPTIMIZER_PARAMS: dict[str, dict[str, float]] = {"sgd": {"momentum": 0.9}, "adam": {"beta2": 0.999}}
ADAM_BETA1 = 0.9
#: ``lr_schedule``'s values: ``constant`` keeps the config's ``lr``; ``cosine`` anneals it to 0 over the epochs.
LR_SCHEDULES = ("constant", "cosine")


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


def unwrap(model: nn.Module) -> nn.Module:
    """Return the network inside a ``DistributedDataParallel`` (or ``DataParallel``)
    wrapper, or ``model`` itself when it is not wrapped.

    Checkpoints hold the unwrapped network's ``state_dict`` (keys without the
    ``module.`` prefix), so they load the same into a single-process or a DDP trial.
    """
    return model.module if isinstance(model, (DistributedDataParallel, DataParallel)) else model


def save_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer, epoch: int) -> str:
    """Write model and optimizer state to a fresh temporary folder.

    Call it on the main process only (``trial.is_main_process()``): in a DDP trial the
    ranks hold the same weights, and only rank 0's checkpoint is kept.

    Args:
        model: The network, possibly DDP-wrapped (the unwrapped weights are saved).
        optimizer: Its optimizer (momentum buffers included).
        epoch: Number of epochs completed.

    Returns:
        The folder holding ``checkpoint.pt``.
    """
    folder = tempfile.mkdtemp(prefix="tuner-example-ckpt-")
    state = {"model": unwrap(model).state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
    torch.save(state, os.path.join(folder, CHECKPOINT_FILE))
    return folder


def load_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Restore from the trial's latest checkpoint, if any (on every rank).

    Tensors are loaded straight onto ``trial.device()``. A checkpoint saved from a
    DDP-wrapped model's own ``state_dict`` (keys prefixed ``module.``) loads too. The
    optimizer's state (momentum buffers) comes from the checkpoint, but its hyperparameters
    (``lr``, ``momentum``, ...) stay the ones it was built with from the config: under PBT/PB2
    a trial restarts from another trial's checkpoint with a new config, whose values must win.

    Args:
        model: The network, possibly DDP-wrapped; loaded in place.
        optimizer: Its optimizer, loaded in place.

    Returns:
        Number of epochs already completed (0 without a checkpoint).
    """
    folder = trial.get_checkpoint()
    if not folder:
        return 0
    state = torch.load(os.path.join(folder, CHECKPOINT_FILE), map_location=trial.device(), weights_only=True)
    consume_prefix_in_state_dict_if_present(state["model"], "module.")
    unwrap(model).load_state_dict(state["model"])
    hyperparameters = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    optimizer.load_state_dict(state["optimizer"])
    for group, kept in zip(optimizer.param_groups, hyperparameters):
        group.update(kept)
    return int(state["epoch"])


def _sum_over_ranks(*values: torch.Tensor) -> list[float]:
    """Sum scalar tensors over the ranks of a DDP trial (as is in a single process).

    Args:
        values: 0-d tensors on ``trial.device()``.

    Returns:
        The sums as Python floats, the same on every rank.
    """
    both = torch.stack([v.double() for v in values])
    if trial.world_size() > 1 and dist.is_available() and dist.is_initialized():
        dist.all_reduce(both, op=dist.ReduceOp.SUM)
    return both.tolist()


def train_epoch(
    model: nn.Module,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    prep: Callable | None = None,
    augment: Callable | None = None,
    on_step: Callable[[int], None] | None = None,
) -> float:
    """Train for one epoch (this rank's shard in a DDP trial).

    The forward pass runs under ``trial.autocast()`` and the backward pass through
    ``trial.scaler()``, so ``amp: true`` in the spec turns on mixed precision; without
    it both are pass-throughs.

    Args:
        model: Maps a batch of images (N, C, H, W) to logits (N, 10); possibly DDP-wrapped.
        loader: Yields ``(images, labels)`` already on ``trial.device()``, labels int64
            of shape (N,) (see ``trial.prepare_data_loader``).
        optimizer: Optimizer over ``model``'s parameters.
        prep: Optional function applied to each image batch (e.g. uint8 -> float).
        augment: Optional function applied to each training image batch after ``prep``
            (never to validation batches), e.g. :func:`random_shift`.
        on_step: Optional function called with the batch's index in the epoch (0-based)
            before each step, e.g. to set the learning rate (see :func:`lr_schedule`).

    Returns:
        Mean cross-entropy per sample over the epoch, over all ranks' samples.
    """
    model.train()
    scaler = trial.scaler()
    total = torch.zeros((), dtype=torch.float64, device=trial.device())  # summed on the device: no sync per step
    count = 0
    for step, (x, y) in enumerate(loader):
        x = prep(x) if prep else x
        x = augment(x) if augment else x
        if on_step:
            on_step(step)
        optimizer.zero_grad(set_to_none=True)
        with trial.autocast():
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        total += loss.detach().double() * len(y)
        count += len(y)
    total_sum, count_sum = _sum_over_ranks(total, torch.tensor(float(count), device=total.device))
    return total_sum / max(count_sum, 1)


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, prep: Callable | None = None) -> tuple[float, float]:
    """Compute loss and accuracy without gradients, on ``trial.device()``.

    In a DDP trial every rank evaluates the whole ``loader`` with the unwrapped
    network (no collective calls), so all ranks get the same numbers.

    Args:
        model: Maps images (N, C, H, W) to logits (N, 10); possibly DDP-wrapped.
        loader: Yields ``(images, labels)`` on any device; they are moved to
            ``trial.device()`` with ``trial.to_device``.
        prep: Optional function applied to each image batch.

    Returns:
        ``(mean cross-entropy per sample, accuracy in [0, 1])``.
    """
    net = unwrap(model)
    net.eval()
    target = trial.device()
    loss = torch.zeros((), dtype=torch.float64, device=target)
    correct = torch.zeros((), dtype=torch.int64, device=target)
    count = 0
    for batch in loader:
        x, y = trial.to_device(batch)  # non-blocking from pinned memory; channels_last images under AMP on CUDA
        with trial.autocast():
            logits = net(prep(x) if prep else x)
        logits = logits.float()  # the loss in float32 under AMP too
        loss += nn.functional.cross_entropy(logits, y, reduction="sum").double()
        correct += (logits.argmax(1) == y).sum()
        count += len(y)
    return loss.item() / max(count, 1), correct.item() / max(count, 1)


def random_shift(images: torch.Tensor, pixels: int, fill: float = 0.0) -> torch.Tensor:
    """Translate each image by its own random offset of up to ``pixels`` pixels on each axis.

    The usual light augmentation of digit images (a shift of 1-2 pixels keeps the label):
    each image is padded by ``pixels`` on every side with ``fill`` and cropped back to its
    size at an offset drawn uniformly from ``[0, 2 * pixels]`` per axis, from torch's
    global RNG (so the shifts follow the per-epoch seed of :func:`fit`).

    Args:
        images: Float images (N, C, H, W).
        pixels: Largest shift, >= 0; 0 returns ``images`` unchanged.
        fill: Value of the pixels shifted in (the background after normalisation).

    Returns:
        A new tensor (N, C, H, W) (or ``images`` itself when ``pixels`` is 0).
    """
    if pixels <= 0:
        return images
    n, _, h, w = images.shape
    padded = nn.functional.pad(images, (pixels, pixels, pixels, pixels), value=fill)
    offsets = torch.randint(0, 2 * pixels + 1, (n, 2), device=images.device)
    rows = (offsets[:, :1] + torch.arange(h, device=images.device))[:, None, :, None]  # (N, 1, H, 1)
    cols = (offsets[:, 1:] + torch.arange(w, device=images.device))[:, None, None, :]  # (N, 1, 1, W)
    batch = torch.arange(n, device=images.device)[:, None, None, None]
    channel = torch.arange(images.shape[1], device=images.device)[None, :, None, None]
    return padded[batch, channel, rows, cols]


def lr_schedule(optimizer: torch.optim.Optimizer, name: str, total_steps: int) -> Callable[[int], None] | None:
    """The learning-rate schedule a config names, as a function of the global step.

    ``cosine`` is SGDR's annealing without restarts (Loshchilov & Hutter, 2017): at step
    ``t`` of ``T`` each parameter group's rate is ``lr * (1 + cos(pi * t / T)) / 2``, from
    the config's ``lr`` at the first step down to near 0 at the last. It depends on the step
    alone (the rate each group has when this is called is its ``lr``), so a resumed trial,
    whose optimizer is rebuilt from the config, follows the same curve.

    Args:
        optimizer: Its param groups' ``lr`` are the rates at step 0.
        name: One of :data:`LR_SCHEDULES`.
        total_steps: ``T``: optimizer steps over all epochs (epochs x batches per epoch).

    Returns:
        None for ``constant``; else a function that sets each group's ``lr`` for global step ``t``.

    Raises:
        ValueError: An unknown name.
    """
    if name not in LR_SCHEDULES:
        raise ValueError(f"config lr_schedule: unknown schedule {name!r}; allowed: {' | '.join(LR_SCHEDULES)}")
    if name == "constant":
        return None
    base = [float(group["lr"]) for group in optimizer.param_groups]
    total = max(int(total_steps), 1)

    def set_lr(step: int) -> None:
        factor = 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))
        for group, lr in zip(optimizer.param_groups, base):
            group["lr"] = lr * factor

    return set_lr


def _epoch_seed(seed: int, epoch: int) -> int:
    """Seed of the global RNG (shuffling, dropout) for ``epoch`` on this rank.

    Rank 0 (and a single process) uses ``seed * 100_003 + epoch + 1``; other ranks
    are offset so that their dropout masks differ.
    """
    return seed * 100_003 + epoch + 1 + 7_919 * trial.rank()


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
    augment: Callable | None = None,
    schedule: str = "constant",
) -> None:
    """Run the epoch loop of a train function: resume, train, validate, report.

    Resumes after the epoch stored in ``trial.get_checkpoint()``. Each epoch reports
    ``val_loss``, ``val_accuracy``, ``train_loss``, ``epoch`` (epochs completed),
    ``params_count`` (the model's trainable parameters) and ``epoch_time_s`` (seconds the
    epoch's training and validation took: a cost objective beside accuracy), with a checkpoint (written by the main
    process only). The shuffle comes from ``(seed, epoch)`` (``trial.prepare_data_loader``) and the global RNG
    (dropout) is reseeded from them at each epoch, so a resumed trial gives the same numbers as an uninterrupted
    one.

    In a DDP trial each rank trains on its shard with ``batch_size // world_size``
    samples a step (``batch_size`` stays the global batch), then every rank evaluates
    the whole validation set and calls ``trial.report``.

    Args:
        model: The network, already initialised and passed through ``trial.prepare_model``.
        optimizer: Its optimizer.
        train_set: Training pairs ``(image, label)``.
        val_set: Validation pairs.
        epochs: Total number of epochs (the last reported ``epoch``).
        batch_size: Training batch size (global, over all ranks).
        seed: Base seed of the per-epoch RNG.
        prep: Optional function applied to each image batch.
        augment: Optional function applied to each training batch (see :func:`train_epoch`).
        schedule: The learning-rate schedule over all ``epochs``, one of :data:`LR_SCHEDULES`
            (see :func:`lr_schedule`).

    Raises:
        ValueError: An unknown ``schedule``.
    """
    start = load_checkpoint(model, optimizer)
    # The shuffle comes from (seed, epoch), resident or through a DistributedSampler: the same order after a resume.
    train_loader = trial.prepare_data_loader(DataLoader(train_set, batch_size=batch_size, shuffle=True),
                                             seed=seed, start_epoch=start)
    # Every rank evaluates the whole set: a plain DataLoader (not sharded), sized to the trial's CPUs and GPUs.
    val_loader = DataLoader(val_set, batch_size=EVAL_BATCH_SIZE, **trial.data_loader_kwargs())
    params_count = sum(p.numel() for p in unwrap(model).parameters() if p.requires_grad)
    per_epoch = len(train_loader)
    set_lr = lr_schedule(optimizer, schedule, epochs * per_epoch)  # after the resume: the config's lr at step 0
    for epoch in range(start, epochs):
        torch.manual_seed(_epoch_seed(seed, epoch))
        started = time.perf_counter()
        on_step = (lambda step, first=epoch * per_epoch: set_lr(first + step)) if set_lr else None
        train_loss = train_epoch(model, train_loader, optimizer, prep, augment, on_step)
        val_loss, val_accuracy = evaluate(model, val_loader, prep)
        epoch_time_s = time.perf_counter() - started
        folder = save_checkpoint(model, optimizer, epoch + 1) if trial.is_main_process() else None
        try:
            trial.report(
                {"val_loss": val_loss, "val_accuracy": val_accuracy, "train_loss": train_loss, "epoch": epoch + 1,
                 "params_count": params_count, "epoch_time_s": epoch_time_s},
                checkpoint_dir=folder,
            )
        finally:  # Ray has copied the files by now
            if folder:
                shutil.rmtree(folder, ignore_errors=True)


def make_optimizer(params: Iterable[nn.Parameter], cfg: dict) -> torch.optim.Optimizer:
    """Build the optimizer that ``cfg`` names, with its own hyperparameters.

    ``cfg["optimizer"]`` (default ``"sgd"``) is either a name or a mapping holding the name
    and that optimizer's own parameters, as a choice among sub-spaces in a conditional
    ``param_space`` samples it::

        {"optimizer": "adam", "lr": 1e-3, "beta2": 0.99}
        {"optimizer": {"name": "adam", "lr": 1e-3, "beta2": 0.99}}   # the same optimizer

    A key inside the mapping wins over the same top-level key. Each optimizer reads only
    its own keys, so a parameter of the other one may be absent (a conditional space leaves
    inactive parameters out of the config) and is ignored when present at the top level:

    - ``sgd``: ``torch.optim.SGD`` with ``lr`` and ``momentum`` (default 0.9).
    - ``adam``: ``torch.optim.Adam`` (Kingma & Ba, 2015) with ``lr`` and
      ``betas=(0.9, beta2)``; ``beta2`` (decay of the second-moment estimate) defaults to
      0.999, PyTorch's default. Adam usually wants a smaller ``lr`` than SGD (about 1e-3).

    Args:
        params: The model's parameters.
        cfg: The trial config merged with the example's defaults; ``lr`` is required
            (top-level or in the mapping).

    Returns:
        The optimizer over ``params``.

    Raises:
        ValueError: If the name is not ``sgd`` or ``adam``, or the mapping holds a key that
            is not ``name``, ``lr`` or one of that optimizer's own parameters.
    """
    choice = cfg.get("optimizer", "sgd")
    own = dict(choice) if isinstance(choice, dict) else {"name": choice}
    name = own.pop("name", None)
    if name not in OPTIMIZER_PARAMS:
        allowed = " | ".join(OPTIMIZER_PARAMS)
        raise ValueError(f"config optimizer: unknown optimizer {name!r}; allowed: {allowed} "
                         f"(a name, or a mapping {{name: sgd, lr: ..., momentum: ...}})")
    keys = {"lr", *OPTIMIZER_PARAMS[name]}
    if unknown := sorted(set(own) - keys):
        raise ValueError(f"config optimizer: {name} takes no {', '.join(map(repr, unknown))}; "
                         f"allowed keys in its mapping: name, {', '.join(sorted(keys))}")
    values = {**OPTIMIZER_PARAMS[name], **{k: cfg[k] for k in keys if k in cfg}, **own}
    if "lr" not in values:
        raise ValueError(f"config optimizer: {name} needs an lr (top-level or in its mapping)")
    lr = float(values["lr"])
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(ADAM_BETA1, float(values["beta2"])))
    return torch.optim.SGD(params, lr=lr, momentum=float(values["momentum"]))


def run_classifier(
    cfg: dict, data: tuple, build: Callable[[], nn.Module], prep: Callable | None = None,
    augment: Callable | None = None,
) -> None:
    """The body of an example train function: seed, build, prepare, then :func:`fit`.

    Args:
        cfg: The trial config merged with the example's defaults (``lr``, ``batch_size``,
            ``epochs``, ``seed``, ``limit_train``, ``limit_val``; ``optimizer`` and its own
            ``momentum`` / ``beta2``, see :func:`make_optimizer`; ``lr_schedule``, one of
            :data:`LR_SCHEDULES`, ``constant`` when absent).
        data: ``(x_train, y_train, x_val, y_val)`` tensors.
        build: Builds the network; called after seeding, so the weights depend on
            ``seed`` only.
        prep: Optional function applied to each image batch.
        augment: Optional function applied to each training batch (see :func:`train_epoch`).

    Raises:
        ValueError: See :func:`make_optimizer` and :func:`lr_schedule`.
    """
    x_tr, y_tr, x_val, y_val = data
    n_tr, n_val = cfg["limit_train"], cfg["limit_val"]
    torch.manual_seed(int(cfg["seed"]))
    model = trial.prepare_model(build())  # on trial.device(), DDP-wrapped in a DDP trial
    optimizer = make_optimizer(model.parameters(), cfg)
    fit(
        model,
        optimizer,
        TensorDataset(x_tr[:n_tr], y_tr[:n_tr]),
        TensorDataset(x_val[:n_val], y_val[:n_val]),
        epochs=int(cfg["epochs"]),
        batch_size=int(cfg["batch_size"]),
        seed=int(cfg["seed"]),
        prep=prep,
        augment=augment,
        schedule=str(cfg.get("lr_schedule", "constant")),
    )
