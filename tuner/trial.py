"""Trial-side helpers: the only calls a train function needs.

The same train function runs unchanged as a single process, as a DDP group of
``resources.workers`` processes per trial (launched by Ray Train's ``TorchTrainer``),
or as a plain Python call outside Ray (handy for debugging)::

    from tuner import trial

    def train(config):
        model = trial.prepare_model(build(config))          # device (+ channels_last under AMP) + DDP wrap
        loader = trial.prepare_data_loader(DataLoader(ds, batch_size=config["batch_size"], shuffle=True),
                                           seed=trial.seed())  # resident on the device when small
        opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
        start = load(trial.get_checkpoint()) if trial.get_checkpoint() else 0
        for epoch in range(start, config["epochs"]):
            for x, y in loader:                             # already on trial.device()
                with trial.autocast():                      # AMP when the spec says amp: true
                    loss = loss_fn(model(x), y)
                opt.zero_grad()
                trial.scaler().scale(loss).backward()
                trial.scaler().step(opt)
                trial.scaler().update()
            trial.report({"val_loss": ...}, checkpoint_dir=save(...) if trial.is_main_process() else None)

Practices built in (from the course notes on PyTorch multi-GPU training):
``DistributedSampler`` with the global batch split as ``batch_size // world_size``;
checkpoints written by rank 0 only and restored on every rank; ``pin_memory`` on GPU;
DataLoader workers sized to the trial's own CPU and GPU share (:func:`data_loader_kwargs`);
a small ``TensorDataset`` kept resident on the device (:func:`prepare_data_loader`); AMP
with bf16 where supported, else fp16 with a ``GradScaler``, and under AMP a conv net in
``channels_last`` with ``cudnn.benchmark`` (:func:`prepare_model`); metrics as plain
numbers, never tensors.

:func:`configure` and :func:`options` are tuner's side, not the train function's: its
trainable (:mod:`tuner.run.trainable`) sets each trial process's options before the train
function runs.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterator, Mapping, Sequence

__all__ = [
    "report", "get_checkpoint", "world_size", "rank", "local_rank", "is_main_process", "device",
    "prepare_model", "prepare_data_loader", "to_device", "data_loader_kwargs", "autocast", "scaler", "in_tune",
    "local_reports", "seed", "rank_seed",
]

# prepare_data_loader(resident=None) keeps a TensorDataset on the trial's device when its tensors total at most this
# many bytes (and, on CUDA, at most RESIDENT_FREE_FRACTION of the GPU's free memory): MNIST's 60,000 float32 digits
# are 188 MB, CIFAR-10's 50,000 uint8 images 154 MB; a few such trials still share one GPU (gpu: 0.25).
RESIDENT_MAX_BYTES = 256 * 2**20
RESIDENT_FREE_FRACTION = 0.25
# DataLoader worker processes per GPU (the course notes' rule for a whole machine), capped by the trial's own CPUs.
WORKERS_PER_GPU = 4


@dataclass
class TrialOptions:
    """What the engine tells each trial process (or DDP worker) about its trial.

    Attributes:
        amp: Whether :func:`autocast` and :func:`scaler` are on (``amp: true``).
        cpu: CPUs of this process (``resources.cpu`` or ``cpu_per_worker``).
        gpu: GPUs of this process (``resources.gpu`` or ``gpu_per_worker``).
        distributed: Whether this process is a Ray Train worker of a DDP trial.
        oom_param: The parameter halved on CUDA out-of-memory (``oom_backoff``).
        extra_metrics: Added to every report, e.g. ``{"batch_size_used": 32}``.
        metric: The spec's metric, or its objectives' metrics (a tuple); a NaN or inf value of
            any of them fails the trial.
        checkpoint_frequency: Keep a checkpoint every this many reports.
        resume_checkpoint: For a DDP worker group restarted after an out-of-memory
            back-off: the newest checkpoint folder (path or URI) the previous group
            uploaded; used when Ray Train's own record is older or empty (see
            :func:`get_checkpoint`).
        seed: The trial's seed (:func:`tuner.search.seeds.seed_of_trial`), what :func:`seed` returns;
            None outside a trial.
        seed_trials: Whether tuner seeds ``random``, numpy and torch in this process with
            :func:`rank_seed` before the train function runs (``seed_trials: true``).
    """

    amp: bool = False
    cpu: float = 1.0
    gpu: float = 0.0
    distributed: bool = False
    oom_param: str | None = None
    extra_metrics: dict[str, Any] = field(default_factory=dict)
    metric: str | tuple[str, ...] | None = None
    checkpoint_frequency: int = 1
    resume_checkpoint: str | None = None
    seed: int | None = None
    seed_trials: bool = False


_options: TrialOptions | None = None
_latest_checkpoint: str | None = None  # kept for in-process restarts (OOM backoff)
_scaler = None
_channels_last = False  # prepare_model put a conv net in channels_last: to_device converts 4-D float inputs
_reports = 0  # reports made by this process for this trial
_LOCAL_REPORTS: list[dict[str, Any]] = []


def configure(options: TrialOptions | None, *, keep_checkpoint: bool = False) -> None:
    """Set the options of this process's trial, before its train function runs.

    Called by tuner's trainable (:mod:`tuner.run.trainable`), not by user code: in a
    single-process trial before the train function (and again after each out-of-memory
    back-off), in each DDP worker, and before a class trainable's ``setup``. Starts the
    trial afresh in this process: the AMP :func:`scaler` is rebuilt on its next use, inputs
    are no longer turned ``channels_last`` until :func:`prepare_model` says so again, and
    the count of reports that ``checkpoint_frequency`` keeps every n-th of starts at 0.

    Args:
        options: The trial's options (CPUs and GPUs of this process, in processors,
            fractions allowed; ``checkpoint_frequency`` in reports; see
            :class:`TrialOptions`), or None to clear them: then :func:`options` gives the
            defaults, with one GPU when CUDA is available.
        keep_checkpoint: Keep the local copy of the trial's latest checkpoint (kept when
            ``oom_param`` is set), so that :func:`get_checkpoint` returns it: for a train
            function restarted in the same process after an out-of-memory back-off.
            False (a new trial) forgets it.

    Raises:
        TypeError: If ``options`` is neither a :class:`TrialOptions` nor None.
    """
    global _options, _scaler, _latest_checkpoint, _reports, _channels_last
    if options is not None and not isinstance(options, TrialOptions):
        raise TypeError(f"configure takes a TrialOptions or None, not {type(options).__name__}")
    latest = _latest_checkpoint if keep_checkpoint else None
    _options, _scaler, _latest_checkpoint, _reports, _channels_last = options, None, latest, 0, False


def options() -> TrialOptions:
    """The options this process's trial runs with (set by :func:`configure`).

    Returns:
        The :class:`TrialOptions` given to :func:`configure`; outside a trial (plain
        Python, or after ``configure(None)``) the defaults, with one GPU when CUDA is
        available.
    """
    return _options or TrialOptions(gpu=float(_cuda_available()))


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def in_tune() -> bool:
    """Whether the caller runs inside a Ray Tune trial (not a DDP worker, not plain Python)."""
    try:
        from tuner.adapters.ray_internals import in_tune_session

        return in_tune_session()
    except Exception:  # noqa: BLE001 - no Ray, or Ray moved it: not in a trial
        return False


def _distributed() -> bool:
    return _options is not None and _options.distributed


def seed() -> int:
    """This trial's own seed: the same on every rank of a DDP trial, and after a resume.

    Derived from the spec's ``seed`` and the trial's creation index with numpy's
    ``SeedSequence`` (:func:`tuner.search.seeds.seed_of_trial` says how, also without a ``seed`` in
    the spec, and under ``bohb``/``optuna``). With ``seed_trials: true`` tuner has already
    seeded ``random``, numpy and torch with :func:`rank_seed`; without it, seed your own
    generators with it (``torch.Generator().manual_seed(trial.seed())``).

    Returns:
        An integer in ``[0, 2**32)``; outside a trial (plain Python) 0.
    """
    opts = options()
    return 0 if opts.seed is None else opts.seed


def rank_seed() -> int:
    """This process's seed: :func:`seed` plus :func:`rank` (mod 2**32), so DDP ranks differ.

    What ``seed_trials: true`` seeds ``random``, numpy and torch with in each process; the
    same as :func:`seed` in a single-process trial.
    """
    from tuner.search.seeds import rank_seed as of_rank

    return of_rank(seed(), rank())


def world_size() -> int:
    """Number of processes of this trial: ``resources.workers``, or 1."""
    if _distributed():
        import ray.train

        return ray.train.get_context().get_world_size()
    return 1


def rank() -> int:
    """Global rank of this process in its trial's DDP group (0 for a single process)."""
    if _distributed():
        import ray.train

        return ray.train.get_context().get_world_rank()
    return 0


def local_rank() -> int:
    """Rank of this process among its trial's processes on the same node."""
    if _distributed():
        import ray.train

        return ray.train.get_context().get_local_rank()
    return 0


def is_main_process() -> bool:
    """Whether this is rank 0, the process that writes checkpoints and files."""
    return rank() == 0


def device():
    """The ``torch.device`` this process trains on.

    A DDP worker gets its own GPU (``ray.train.torch.get_device``); a single-process
    trial with GPUs gets ``cuda:0`` (Ray sets ``CUDA_VISIBLE_DEVICES`` to the GPUs
    assigned to the trial); otherwise ``cpu``.
    """
    import torch

    if _distributed():
        import ray.train.torch

        return ray.train.torch.get_device()
    if torch.cuda.is_available() and options().gpu > 0:
        return torch.device("cuda", 0)
    return torch.device("cpu")


def _is_conv2d(module) -> bool:
    """Whether ``module`` is a 2-d convolution: a ``_ConvNd`` whose weight is 4-D (``Conv2d``, ``ConvTranspose2d``).

    A lazy convolution not yet run (its weight uninitialised) does not count.
    """
    from torch.nn.modules.conv import _ConvNd
    from torch.nn.parameter import UninitializedParameter

    weight = getattr(module, "weight", None)
    return isinstance(module, _ConvNd) and not isinstance(weight, UninitializedParameter) and weight.dim() == 4


def _channels_last_wanted(amp: bool, device_type: str, model) -> bool:
    """Whether :func:`prepare_model` turns ``model`` channels_last: AMP on, on CUDA, and a 2-d convolution in it.

    Args:
        amp: The trial's ``amp`` option.
        device_type: ``torch.device.type`` of the trial's device (``"cuda"``, ``"cpu"``, ...).
        model: A ``torch.nn.Module``.

    Returns:
        True only when all three hold. Conv1d (3-D weights) has no channels_last layout, and
        Conv3d's (``torch.channels_last_3d``) gain was not measured, so neither counts.
    """
    return bool(amp) and device_type == "cuda" and any(_is_conv2d(m) for m in model.modules())


def prepare_model(model):
    """Move a model to :func:`device`; under AMP on CUDA make a conv net channels_last; wrap it for DDP.

    With ``amp: true`` on a CUDA device, a model holding a 2-d convolution (a ``_ConvNd``
    with a 4-D weight: ``Conv2d``, ``ConvTranspose2d``) gets its convolution weights in
    ``torch.channels_last`` memory format, ``torch.backends.cudnn.benchmark`` is turned on
    for the process (it stays on), and :func:`to_device` and :func:`prepare_data_loader`
    give 4-D floating inputs in ``channels_last`` from then on in this trial. bf16/fp16
    convolutions run on the tensor cores in NHWC, and a conv net in NCHW pays a layout
    change around each of them: measured on an H200 (torch 2.11; ResNet-18, 32x32, batch
    1024), bf16 alone was 1.13x as fast as fp32, bf16 with channels_last 2.76x (PyTorch's "Channels Last
    Memory Format" tutorial; ``cudnn.benchmark`` picks the fastest algorithm for each new
    input shape, ``torch.backends.cudnn`` docs). Conv1d has no such layout and Conv3d's
    (``channels_last_3d``) was not measured: neither counts. Off CUDA, with AMP off, or
    without a 2-d convolution, the model is only moved (the rule:
    :func:`_channels_last_wanted`).

    In a DDP worker the model is converted first, then wrapped by
    ``ray.train.torch.prepare_model`` (which moves it and keeps the memory format).

    Args:
        model: A ``torch.nn.Module``.

    Returns:
        The model on its device; a ``DistributedDataParallel`` wrapper when
        ``world_size() > 1``.
    """
    global _channels_last
    import torch

    target = device()
    if _channels_last_wanted(options().amp, target.type, model):
        for module in model.modules():
            if _is_conv2d(module):  # per module: a whole-model .to(channels_last) fails on a 5-D weight
                module.to(memory_format=torch.channels_last)
        torch.backends.cudnn.benchmark = True
        _channels_last = True
    if _distributed():
        import ray.train.torch

        return ray.train.torch.prepare_model(model)
    return model.to(target)


def _move(batch, target, channels_last: bool):
    """The one definition of moving a batch to ``target``: see :func:`to_device`."""
    import torch

    if isinstance(batch, torch.Tensor):
        non_blocking = target.type == "cuda" and batch.device.type == "cpu" and batch.is_pinned()
        if channels_last and batch.dim() == 4 and batch.is_floating_point():
            return batch.to(target, non_blocking=non_blocking, memory_format=torch.channels_last)
        return batch.to(target, non_blocking=non_blocking)
    if isinstance(batch, (list, tuple)):
        moved = [_move(b, target, channels_last) for b in batch]
        # a list or tuple takes an iterable; a namedtuple (a tuple subclass) takes its fields one by one
        return type(batch)(moved) if type(batch) in (list, tuple) or isinstance(batch, list) else type(batch)(*moved)
    if isinstance(batch, Mapping):
        return {k: _move(v, target, channels_last) for k, v in batch.items()}
    if hasattr(batch, "to"):  # e.g. a tokenizer's BatchEncoding
        return batch.to(target)
    return batch


def to_device(batch):
    """Move a batch to :func:`device`: a tensor, or a tuple / list / dict of them, nested.

    A tensor in pinned (page-locked) host memory is copied with ``non_blocking=True``, so
    the copy overlaps the GPU's work (PyTorch's "pin_memory and non_blocking" tutorial);
    after :func:`prepare_model` turned the model ``channels_last`` (AMP on CUDA), each 4-D
    floating tensor (an image batch, N x C x H x W) comes out ``torch.channels_last`` in the
    same copy. Integer tensors (labels, uint8 images) keep their layout. Other objects with
    a ``to`` method are moved with it; anything else is returned as it is. Batches of
    :func:`prepare_data_loader` already went through it.

    Args:
        batch: A tensor, a (named) tuple, list or mapping of them (nested), or any value.

    Returns:
        The same structure on the device (a mapping comes back as a ``dict``); a tensor
        already there, in the wanted layout, is returned as it is.
    """
    return _move(batch, device(), _channels_last)


def _num_workers(cpu: float, gpu: float) -> int:
    """DataLoader worker processes for one process of a trial with ``cpu`` CPUs and ``gpu`` GPUs.

    ``min(ceil(4 x gpu), floor(cpu) - 1)``, at least 0: see :func:`data_loader_kwargs`.
    """
    wanted = math.ceil(WORKERS_PER_GPU * gpu - 1e-9) if gpu > 0 else 0
    return max(0, min(wanted, math.floor(cpu + 1e-9) - 1))


def default_num_workers() -> int:
    """DataLoader worker processes for this process: ``data_loader_kwargs()["num_workers"]``."""
    opts = options()
    return _num_workers(opts.cpu, opts.gpu)


def data_loader_kwargs() -> dict[str, Any]:
    """Keyword arguments for a ``torch.utils.data.DataLoader`` that fit this process's share.

    ``num_workers = min(ceil(4 x GPUs), floor(CPUs) - 1)``, never below 0, with the GPUs and
    CPUs of this process (``resources.gpu``/``cpu``, or ``gpu_per_worker``/``cpu_per_worker``
    in a DDP trial). The course notes' "4 workers per GPU" is a rule for a whole machine; on
    a shared node a trial owns only its CPUs, and its own process needs one of them to run
    the training loop (and launch the GPU's kernels), so the workers get the rest. A
    fractional GPU (``gpu: 0.25``: four trials on one GPU) still gets one worker when a CPU
    is free for it, so that loading overlaps the GPU's work. A CPU-only trial gets 0: its
    torch threads already use all its CPUs (Ray sets ``OMP_NUM_THREADS`` to them), so a
    worker would only take cores from the computation. Examples: cpu 1 (any gpu) -> 0;
    cpu 2, gpu 0.25 -> 1; cpu 8, gpu 1 -> 4; cpu 16, gpu 2 -> 8; cpu 4, gpu 0 -> 0.

    Returns:
        ``{"num_workers": int, "pin_memory": bool, "persistent_workers": bool}``:
        ``pin_memory`` True when training on CUDA (host-to-GPU copies from page-locked
        memory, asynchronous with :func:`to_device`), ``persistent_workers`` True when
        there are workers (they stay up between epochs instead of restarting each epoch).
    """
    workers = default_num_workers()
    return {"num_workers": workers, "pin_memory": device().type == "cuda", "persistent_workers": workers > 0}


class _DeviceLoader:
    """Iterates a DataLoader, moving batches to the device and advancing the sampler's epoch."""

    resident = False

    def __init__(self, loader, target, start_epoch: int = 0):
        self.loader, self.device = loader, target
        self.epoch = start_epoch

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str):
        return getattr(self.loader, name)

    def _move(self, batch):
        return _move(batch, self.device, _channels_last)

    def __iter__(self) -> Iterator:
        sampler = getattr(self.loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.epoch)  # a new shuffle each epoch, the same on every rank
        self.epoch += 1
        for batch in self.loader:
            yield self._move(batch)


def _shard_order(n: int, world_size: int, rank: int, shuffle: bool, seed: int, epoch: int):
    """The sample indices rank ``rank`` of ``world_size`` takes in ``epoch``, as ``DistributedSampler`` gives them.

    The same draws as ``torch.utils.data.DistributedSampler(shuffle=shuffle, seed=seed,
    drop_last=False)`` after ``set_epoch(epoch)``: a ``torch.randperm`` from a CPU
    generator seeded with ``seed + epoch`` (so the same on every device), padded by
    repeating its start to a multiple of ``world_size``, then every ``world_size``-th
    index from ``rank``.

    Returns:
        An int64 CPU tensor of ``ceil(n / world_size)`` indices.
    """
    import torch

    if shuffle:
        generator = torch.Generator()
        generator.manual_seed(seed + epoch)
        order = torch.randperm(n, generator=generator)
    else:
        order = torch.arange(n)
    per_rank = math.ceil(n / world_size)
    if per_rank * world_size > n:
        order = order.repeat(math.ceil(per_rank * world_size / n))[:per_rank * world_size]
    return order[rank::world_size]


class _ResidentLoader:
    """Batches of a ``TensorDataset`` whose tensors sit on the device, indexed there (no workers, no collate)."""

    resident = True

    def __init__(self, dataset, target, *, batch_size: int, shuffle: bool, drop_last: bool, seed: int,
                 start_epoch: int = 0, world_size: int = 1, rank: int = 0):
        self.dataset = dataset  # the TensorDataset, as a DataLoader's (len() counts every rank's samples)
        self.tensors = [t.to(target) for t in dataset.tensors]  # once; on the CPU no copy
        self.device, self.batch_size, self.shuffle, self.drop_last = target, batch_size, shuffle, drop_last
        self.seed, self.epoch, self.world_size, self.rank = seed, start_epoch, world_size, rank
        self.samples = len(self.tensors[0])
        self.per_rank = math.ceil(self.samples / world_size)

    def __len__(self) -> int:
        if self.drop_last:
            return self.per_rank // self.batch_size
        return math.ceil(self.per_rank / self.batch_size)

    def __iter__(self) -> Iterator:
        order = _shard_order(self.samples, self.world_size, self.rank, self.shuffle, self.seed, self.epoch)
        self.epoch += 1
        order = order.to(self.device)  # 8 bytes a sample, once an epoch
        for i in range(len(self)):
            index = order[i * self.batch_size:(i + 1) * self.batch_size]
            # index_select makes new tensors, as collate does: an in-place op on a batch leaves the data as it is
            yield _move([t.index_select(0, index) for t in self.tensors], self.device, _channels_last)


def _resident_refusal(loader) -> str | None:
    """Why ``loader`` cannot be batched resident on the device, or None when it can."""
    from torch.utils.data import RandomSampler, SequentialSampler, TensorDataset, default_collate

    dataset, sampler = loader.dataset, loader.sampler
    if not isinstance(dataset, TensorDataset):
        return f"its dataset is a {type(dataset).__name__}, not a torch.utils.data.TensorDataset"
    if loader.collate_fn is not default_collate:
        return "it has its own collate_fn (resident batches are indexed from the tensors, never collated)"
    plain_shuffle = type(sampler) is RandomSampler and not sampler.replacement and \
        sampler.num_samples == len(dataset)
    if type(sampler) is not SequentialSampler and not plain_shuffle:
        return f"it has its own sampler ({type(sampler).__name__}), not shuffle=True or False"
    return None


def _fits_resident(nbytes: int, free_bytes: int | None) -> bool:
    """Whether ``nbytes`` of tensors stay resident under ``resident=None``: at most :data:`RESIDENT_MAX_BYTES`,
    and at most :data:`RESIDENT_FREE_FRACTION` of the device's ``free_bytes`` (None: no such limit, the CPU)."""
    return nbytes <= RESIDENT_MAX_BYTES and (free_bytes is None or nbytes <= RESIDENT_FREE_FRACTION * free_bytes)


def prepare_data_loader(loader, *, seed: int = 0, start_epoch: int = 0, num_workers: int | None = None,
                        pin_memory: bool | None = None, resident: bool | None = None):
    """Rebuild a DataLoader for this trial: sampler, per-worker batch, workers, pinning, or resident data.

    * In a DDP trial the global batch is split: each worker loads
      ``batch_size // world_size`` samples a step from its shard, chosen as a
      ``DistributedSampler`` chooses it (shuffled when the loader shuffled, from
      ``seed + epoch``), and the epoch advances at each pass, so every epoch reshuffles.
    * **Resident**: a small ``TensorDataset`` is copied to :func:`device` once and batched
      there by indexing its tensors: no worker processes, no collate, no host-to-GPU copy
      per batch. The shuffle is a ``torch.randperm`` from a CPU generator seeded with
      ``seed + epoch`` (the ``DistributedSampler``'s draws, for one process too), so a
      run on the CPU gets the same batches as one on CUDA from the same seed; in a DDP
      trial each rank takes its shard as ``DistributedSampler`` (``drop_last=False``)
      would. The number of batches and ``drop_last`` are those of the DataLoader it
      replaces; each batch is a list of new tensors (as the DataLoader collates a
      ``TensorDataset``). On the CPU it only saves the DataLoader's per-sample
      indexing and collate.
    * Otherwise ``num_workers`` defaults to :func:`default_num_workers` unless the loader
      set it, and ``pin_memory`` to True when training on CUDA (see
      :func:`data_loader_kwargs`).
    * Batches come out on :func:`device` through :func:`to_device` (4-D float images in
      ``channels_last`` after :func:`prepare_model` turned it on).

    Args:
        loader: A ``torch.utils.data.DataLoader`` with a map-style dataset and a
            ``batch_size`` (the global batch of the trial).
        seed: Seed of the shuffle (the same on every rank); used by the ``DistributedSampler``
            of a DDP trial and by the resident batches. A single-process DataLoader keeps
            its own sampler.
        start_epoch: The epoch the first pass is, e.g. the epoch a resumed trial starts
            at, so that it sees the same shards and order as an uninterrupted one.
        num_workers: Loader worker processes; overrides the default (not used when resident).
        pin_memory: Page-locked host memory; overrides the default (not used when resident).
        resident: None (auto): resident when the dataset is a ``TensorDataset`` batched by
            the default collate with ``shuffle=True`` or ``False`` (no sampler, generator or
            ``collate_fn`` of its own) and its tensors total at most
            :data:`RESIDENT_MAX_BYTES` (256 MiB) and, on CUDA, at most
            :data:`RESIDENT_FREE_FRACTION` of ``torch.cuda.mem_get_info()``'s free bytes.
            True: resident whatever its size (its shuffle then comes from ``seed``, not from
            a ``generator`` of the loader). False: never.

    Returns:
        An iterable of batches on the device, with ``len()`` in batches (of this rank), the
        loader's ``dataset``, and ``resident`` (bool) telling which way it batches.

    Raises:
        ValueError: If the loader has no ``batch_size`` (a custom ``batch_sampler``), or
            ``resident=True`` and its dataset is not a ``TensorDataset`` or it has its own
            sampler or ``collate_fn``.
    """
    from torch.utils.data import DataLoader, DistributedSampler, SequentialSampler

    if loader.batch_size is None:
        raise ValueError("prepare_data_loader needs a DataLoader built with batch_size (not batch_sampler).")
    target = device()
    ws = world_size()
    shuffle = not isinstance(loader.sampler, SequentialSampler)
    if resident is not False:
        refusal = _resident_refusal(loader)
        if resident and refusal:
            raise ValueError(f"prepare_data_loader(resident=True) cannot keep this loader's data on the device: "
                             f"{refusal}. Pass resident=None to fall back to a DataLoader then.")
        if resident is None and not refusal and loader.generator is None:
            import torch

            nbytes = sum(t.numel() * t.element_size() for t in loader.dataset.tensors)
            free = torch.cuda.mem_get_info(target)[0] if target.type == "cuda" else None
            resident = _fits_resident(nbytes, free)
        if resident:
            return _ResidentLoader(loader.dataset, target, batch_size=max(1, loader.batch_size // ws),
                                   shuffle=shuffle, drop_last=loader.drop_last, seed=seed, start_epoch=start_epoch,
                                   world_size=ws, rank=rank())
    sampler = loader.sampler
    if ws > 1:
        sampler = DistributedSampler(loader.dataset, num_replicas=ws, rank=rank(), shuffle=shuffle, seed=seed)
    workers = num_workers if num_workers is not None else (loader.num_workers or default_num_workers())
    pin = pin_memory if pin_memory is not None else (loader.pin_memory or target.type == "cuda")
    rebuilt = DataLoader(
        loader.dataset,
        batch_size=max(1, loader.batch_size // ws),
        sampler=sampler,
        num_workers=workers,
        collate_fn=loader.collate_fn,
        pin_memory=pin,
        drop_last=loader.drop_last,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        generator=loader.generator,
        persistent_workers=workers > 0,
    )
    return _DeviceLoader(rebuilt, target, start_epoch=start_epoch)


def _amp_dtype():
    import torch

    target = device()
    if target.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16


def autocast():
    """Mixed-precision context for the forward pass: on with ``amp: true`` in the spec.

    bf16 where the device supports it (CPUs, Ampere and newer GPUs), else fp16; pair
    fp16 with :func:`scaler`. Wraps ``torch.autocast``.

    Returns:
        A context manager (a no-op when AMP is off).
    """
    import torch

    if not options().amp:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device().type, dtype=_amp_dtype())


def scaler():
    """The trial's ``torch.amp.GradScaler``: enabled only for fp16 AMP, else a pass-through.

    Always safe to use: ``scaler().scale(loss).backward(); scaler().step(opt);
    scaler().update()`` is plain ``backward``/``step`` when scaling is off.
    """
    global _scaler
    if _scaler is None:
        import torch

        enabled = options().amp and device().type == "cuda" and _amp_dtype() == torch.float16
        _scaler = torch.amp.GradScaler(device().type, enabled=enabled)
    return _scaler


def _gpu_metrics() -> dict[str, Any]:
    """Peak GPU memory (bytes: torch's allocated and reserved peaks, and the GPU's total) and utilisation
    (percent) of this process's GPU; ``gpu: auto`` learns each config's footprint from the reserved peak.

    Empty when the train function never imported torch (it cannot have used a GPU then), so
    a trial of scikit-learn, XGBoost or plain Python does not pay torch's import (~1.3 s).
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    target = device()
    if target.type != "cuda":
        return {}
    out: dict[str, Any] = {"gpu_memory_peak_bytes": int(torch.cuda.max_memory_allocated(target)),
                           "gpu_memory_reserved_bytes": int(torch.cuda.max_memory_reserved(target)),
                           "gpu_memory_total_bytes": int(torch.cuda.get_device_properties(target).total_memory)}
    try:
        out["gpu_utilization_percent"] = int(torch.cuda.utilization(target))  # nvidia-ml-py
    except Exception:  # noqa: BLE001 - no NVML: memory only
        pass
    return out


def reports_made() -> int:
    """The reports this process made for the current trial (:func:`report` calls; 0 after :func:`configure`)."""
    return _reports


def report(metrics: Mapping[str, Any], checkpoint_dir: str | os.PathLike | None = None) -> None:
    """Report one result (usually one epoch) of the current trial.

    In a single-process trial this wraps ``ray.tune.report``; in a DDP trial
    ``ray.train.report``, which every rank must call (rank 0's metrics reach Tune,
    and only rank 0's checkpoint is kept). The scheduler (ASHA, Hyperband, ...) sees
    each result, and ``training_iteration`` grows by one per call. Outside Ray the
    metrics are printed and kept in :func:`local_reports`. On a GPU the trial's peak
    GPU memory (bytes) and utilisation (percent) are added.

    Args:
        metrics: Metric name to value, e.g. ``{"val_loss": 0.31, "val_accuracy": 0.91}``.
            Values must be plain numbers (call ``.item()`` on tensors, so that no
            tensor or autograd graph is kept alive by a running sum).
        checkpoint_dir: Optional folder whose files form a checkpoint of this
            iteration. Ray copies it into the experiment's storage during the call;
            the folder may be deleted afterwards. Ignored on ranks other than 0, and
            between the reports that ``checkpoint.frequency`` keeps.

    Raises:
        TypeError: If a metric value is a tensor with more than one element or
            another non-scalar type.
    """
    global _latest_checkpoint, _reports
    clean = leaving_result({str(k): _scalar(k, v) for k, v in metrics.items()})
    _reports += 1
    if _reports % options().checkpoint_frequency:
        checkpoint_dir = None  # checkpoint.frequency: keep every n-th
    if _distributed():
        import ray.train

        clean.update(_gpu_metrics())
        ckpt = ray.train.Checkpoint.from_directory(os.fspath(checkpoint_dir)) \
            if checkpoint_dir and is_main_process() else None
        ray.train.report(clean, checkpoint=ckpt)
        return
    if not in_tune():
        _LOCAL_REPORTS.append(clean)
        print(f"[tuner.trial] report {len(_LOCAL_REPORTS)}: {clean}", flush=True)
        return
    from ray import tune

    clean.update(_gpu_metrics())
    checkpoint = None
    if checkpoint_dir:
        if options().oom_param:  # keep a copy to restart from after an out-of-memory error
            keep = tempfile.mkdtemp(prefix="tuner-latest-ckpt-")
            shutil.copytree(checkpoint_dir, keep, dirs_exist_ok=True)
            if _latest_checkpoint:
                shutil.rmtree(_latest_checkpoint, ignore_errors=True)
            _latest_checkpoint = keep
        checkpoint = tune.Checkpoint.from_directory(os.fspath(checkpoint_dir))
    tune.report(clean, checkpoint=checkpoint)


class NonFiniteMetricError(FloatingPointError):
    """The tuned metric was NaN or inf: the trial is failed, never the best."""


def leaving_result(metrics: Mapping[str, Any]) -> dict:
    """One result as it leaves the trial: ``metrics`` with the trial's extra metrics added
    (:attr:`TrialOptions.extra_metrics`, e.g. ``batch_size_used``), refused when the tuned
    metric is not finite (:func:`check_finite`).

    Called by :func:`report`, and for a Ray Tune function trainable's own ``ray.tune.report``
    by the trial's guarded Ray session (``tuner.run.trainable._guard_reports``).

    Args:
        metrics: One result, metric name to value; left as it was.

    Returns:
        A new dict: ``metrics`` and the extra metrics.

    Raises:
        NonFiniteMetricError: When the tuned metric (any objective's) is NaN or +-inf.
    """
    out = {**metrics, **options().extra_metrics}
    check_finite(out, options().metric)
    return out


def check_finite(metrics: Mapping[str, Any], name: str | Sequence[str] | None) -> None:
    """Refuse a result whose tuned metric (any objective's) is NaN or infinite.

    Called on every result of every kind of trainable before it leaves the trial's
    process (``tuner.trial.report``, a raw ``ray.tune.report``, a class trainable's
    ``step``), so a non-finite value never reaches the scheduler's rungs.

    Args:
        metrics: One result, metric name to value.
        name: The spec's metric, or the objectives' metrics; None checks nothing.

    Raises:
        NonFiniteMetricError: When ``metrics[name]`` is a number that is NaN or +-inf.
    """
    for one in ([name] if isinstance(name, str) else name or ()):
        value = metrics.get(one)
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isfinite(float(value)):
            raise NonFiniteMetricError(
                f"metric {one!r} is {float(value)}; a NaN or inf result fails the trial, so it is never the best "
                "and never moves a scheduler's rung cutoffs (check the learning rate, or clip gradients)."
            )


def get_checkpoint() -> str | None:
    """Return the folder of the trial's latest checkpoint, or None.

    A trial has a checkpoint when it resumes: after a failure, after a pause by a
    scheduler, after ``tuner resume``, or after an out-of-memory back-off. In a DDP
    trial every rank gets the same folder.

    Returns:
        A local folder holding the files given to :func:`report` as
        ``checkpoint_dir``, or None when the trial starts from scratch.
    """
    if _distributed():
        import ray.train

        from tuner.experiment.storage import display

        ckpt = ray.train.get_checkpoint()
        fallback = _options.resume_checkpoint if _options is not None else None
        # Ray Train registers a reported checkpoint when its controller polls the workers; a
        # group that fails right after a report can be restarted without it. The engine then
        # passes the newest uploaded folder (names are checkpoint_<timestamp>, in time order).
        if fallback and (ckpt is None or os.path.basename(ckpt.path.rstrip("/")) <
                         os.path.basename(display(fallback))):
            ckpt = ray.train.Checkpoint(fallback)
    elif _latest_checkpoint:
        return _latest_checkpoint
    elif in_tune():
        from ray import tune

        ckpt = tune.get_checkpoint()
    else:
        return None
    if ckpt is None:
        return None
    if ckpt.filesystem is not None and ckpt.filesystem.type_name == "local":
        return ckpt.path
    return ckpt.to_directory(tempfile.mkdtemp(prefix="tuner-ckpt-"))


def local_reports() -> list[dict[str, Any]]:
    """Return the metrics reported so far outside Ray (a copy, oldest first)."""
    return list(_LOCAL_REPORTS)


def _scalar(name: Any, value: Any) -> Any:
    """Turn a metric value into a plain Python number or string."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    item = getattr(value, "item", None)
    if callable(item):
        numel = getattr(value, "numel", None) or getattr(value, "size", None)
        size = numel() if callable(numel) else numel
        if size in (None, 1):
            if hasattr(value, "detach"):
                value = value.detach()
            return value.item()
    raise TypeError(
        f"metric {name!r} must be a number or a string, but got {type(value).__name__}: "
        f"{value!r:.80}"
    )
