"""ResNet-18 on 32x32 images: a GPU-bound example train function for ``tuner``.

The network is ResNet-18 (He et al., 2016, "Deep Residual Learning for Image
Recognition", CVPR) with the usual stem for 32x32 inputs: a 3x3 first convolution and no
max-pool, so the four stages work at 32, 16, 8 and 4 pixels. It is built from
``torch.nn`` alone (torchvision is not needed). At width 64 it has 11.2 M parameters and
a training step at batch 256 takes about 11-13 ms on an NVIDIA H200 under bf16 autocast
(``docs/benchmarks.md``): unlike the MNIST CNN, the GPU, not the CPU, sets the pace.

Data:

- ``config["data_dir"]`` set: the CIFAR-10 "python version" folder, read and split by
  :func:`examples.cifar.load_data` (40,000 training / 10,000 validation images). Unlike
  ``examples/cifar.py``, ``$TUNER_CIFAR_DIR`` is not read: without ``data_dir`` the images
  are synthetic, so a run's data never depend on the environment.
- otherwise **synthetic** images (:func:`synthetic_data`): a fixed-seed set of
  class-dependent colour patterns, shifted and drowned in noise, so that accuracy can rise
  above chance (0.1) but does not reach 1 at once. They need no download and are what
  ``benchmarks/gpu_suite.py`` measures throughput on; every figure made on them says
  "synthetic". By default 15,360 training images: one epoch is 60 steps at batch 256.

Either way the images are uint8 (N, 3, 32, 32), scaled to [-1, 1] on the device
(:func:`examples.cifar.to_float`), so a batch crosses to the GPU at a quarter of its
float32 size.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from examples import _common, cifar

DEFAULTS: dict[str, Any] = {
    "optimizer": "sgd",
    "lr": 0.05,
    "momentum": 0.9,
    "beta2": 0.999,
    "batch_size": 256,
    "width": 64,
    "epochs": 4,
    "seed": 0,
    "data_dir": None,
    "n_train": 15_360,  # synthetic images: 60 steps an epoch at batch 256
    "n_val": 2_048,
    "limit_train": None,
    "limit_val": None,
}
NUM_CLASSES = 10
DATA_SEED = 0  # the synthetic set does not depend on the trial's seed: every trial sees the same images
PATTERN_SIZE = 4  # each class's pattern: random 3 x 4 x 4 colours, upsampled to 32 x 32
MAX_SHIFT = 8  # pixels: each image is its pattern rolled by up to this much in each direction
SIGNAL, NOISE = 0.2, 1.0  # pattern amplitude and per-pixel Gaussian noise, before the uint8 scale
SCALE = 40.0  # uint8 value = 127.5 + SCALE * (signal + noise), clipped to 0..255
_CHUNK = 4_096  # images generated at a time (a float32 chunk is 48 MiB)

# Generated images per (n_train, n_val), so trials reusing a worker make them once.
_CACHE: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def build_model(width: int = 64, num_classes: int = NUM_CLASSES) -> nn.Sequential:
    """ResNet-18 for 32x32 images (He et al., 2016; the CIFAR stem: 3x3 first convolution, no max-pool).

    Eight basic blocks (two 3x3 convolutions with batch norm, an identity shortcut, or a
    1x1 convolution where the shape changes), two per stage, at ``width``, 2, 4 and 8 times
    ``width`` channels and strides 1, 2, 2, 2; then global average pooling and a linear
    classifier.

    Args:
        width: Channels of the first stage (64 in the paper).
        num_classes: Outputs.

    Returns:
        A module mapping images (N, 3, 32, 32) to logits (N, ``num_classes``); 11.2 M
        parameters at width 64, 2.8 M at width 32.
    """
    width = int(width)

    class Block(nn.Module):
        def __init__(self, c_in: int, c_out: int, stride: int):
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True),
                nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), nn.BatchNorm2d(c_out))
            self.skip = nn.Identity() if stride == 1 and c_in == c_out else nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.relu(self.body(x) + self.skip(x))

    layers: list[nn.Module] = [nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
    c_in = width
    for c_out, stride in ((width, 1), (2 * width, 2), (4 * width, 2), (8 * width, 2)):
        layers += [Block(c_in, c_out, stride), Block(c_out, c_out, 1)]
        c_in = c_out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, int(num_classes))]
    return nn.Sequential(*layers)


def synthetic_data(n_train: int = DEFAULTS["n_train"], n_val: int = DEFAULTS["n_val"]
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Synthetic 32x32 images whose class shows in them (cached per process).

    Each of the 10 classes has a smooth colour pattern (random 3 x 4 x 4 values, upsampled
    bilinearly to 32 x 32); an image is its class's pattern times :data:`SIGNAL`, rolled by
    up to :data:`MAX_SHIFT` pixels in each direction, plus Gaussian noise of std
    :data:`NOISE`, stored as uint8 (``127.5 + SCALE * value``, clipped). Labels are
    balanced and shuffled. Everything is drawn from :data:`DATA_SEED`, so for given sizes
    the set is the same in every process and trial; the first ``n_train`` images train,
    the next ``n_val`` validate.

    Args:
        n_train: Training images.
        n_val: Validation images.

    Returns:
        ``(x_train, y_train, x_val, y_val)``: images uint8 of shape (N, 3, 32, 32) (see
        :func:`examples.cifar.to_float`), labels int64 of shape (N,).

    Raises:
        ValueError: If ``n_train`` or ``n_val`` is below 1.
    """
    n_train, n_val = int(n_train), int(n_val)
    if n_train < 1 or n_val < 1:
        raise ValueError(f"config n_train / n_val: synthetic images need at least 1 of each, got {n_train} / {n_val}")
    key = (n_train, n_val)
    if key not in _CACHE:
        gen = torch.Generator().manual_seed(DATA_SEED)
        coarse = torch.rand(NUM_CLASSES, 3, PATTERN_SIZE, PATTERN_SIZE, generator=gen) * 2 - 1
        patterns = nn.functional.interpolate(coarse, size=(32, 32), mode="bilinear", align_corners=False)
        patterns = patterns / patterns.flatten(1).std(1).view(-1, 1, 1, 1)  # unit std each: SIGNAL sets the contrast
        n = n_train + n_val
        labels = (torch.arange(n) % NUM_CLASSES)[torch.randperm(n, generator=gen)]
        offsets = range(-MAX_SHIFT, MAX_SHIFT + 1)
        # Every class's pattern at every shift (10 x 17 x 17 clean images, 34 MiB), indexed once per image.
        bank = torch.stack([patterns.roll((dy, dx), dims=(2, 3)) for dy in offsets for dx in offsets], 1).flatten(0, 1)
        pick = labels * len(offsets) ** 2 + torch.randint(0, len(offsets) ** 2, (n,), generator=gen)
        images = torch.empty(n, 3, 32, 32, dtype=torch.uint8)
        for start in range(0, n, _CHUNK):
            stop = min(n, start + _CHUNK)
            x = torch.randn(stop - start, 3, 32, 32, generator=gen).mul_(NOISE)
            x.add_(bank[pick[start:stop]], alpha=SIGNAL)
            images[start:stop] = x.mul_(SCALE).add_(127.5).round_().clamp_(0, 255).to(torch.uint8)
        _CACHE[key] = (images[:n_train], labels[:n_train], images[n_train:], labels[n_train:])
    return _CACHE[key]


def data_label(config: dict[str, Any]) -> str:
    """What a run of :func:`train` with ``config`` trains on, for the tables that report it.

    Returns:
        ``"CIFAR-10 (<folder>)"``, or ``"synthetic 32x32 images (<n> train / <n> val, ...)"``.
    """
    cfg = {**DEFAULTS, **config}
    if cfg["data_dir"]:
        return f"CIFAR-10 ({_common.resolve_dir(cfg['data_dir'])})"
    n_train, n_val = (int(cfg[k]) if cfg[lim] is None else min(int(cfg[k]), int(cfg[lim]))
                      for k, lim in (("n_train", "limit_train"), ("n_val", "limit_val")))
    return (f"synthetic 32x32 images ({n_train:,} train / {n_val:,} val; class-dependent patterns + noise, "
            f"seed {DATA_SEED})")


def load_data(config: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The images a trial trains on: CIFAR-10 when ``data_dir`` is set, else :func:`synthetic_data`.

    Args:
        config: The trial config merged with :data:`DEFAULTS` (``data_dir``, ``n_train``, ``n_val``).

    Returns:
        ``(x_train, y_train, x_val, y_val)``: uint8 images (N, 3, 32, 32), int64 labels (N,).

    Raises:
        FileNotFoundError: ``data_dir`` holds no CIFAR-10 data (:func:`examples.cifar.find_data`).
        ValueError: See :func:`synthetic_data`.
    """
    if config["data_dir"]:
        return cifar.load_data(os.fspath(config["data_dir"]))
    return synthetic_data(config["n_train"], config["n_val"])


def train(config: dict[str, Any]) -> None:
    """Train ResNet-18 with SGD + momentum (or Adam), reporting once per epoch.

    Each epoch (one pass over the training images; 60 steps at batch 256 on the default
    synthetic set) reports ``val_loss``, ``val_accuracy``, ``train_loss``, ``epoch``,
    ``params_count`` and ``epoch_time_s`` (seconds) with a checkpoint, and resumes from
    ``trial.get_checkpoint()`` (:func:`examples._common.fit`). ``amp: true`` in the spec
    turns on mixed precision; the model goes through ``trial.prepare_model`` and the
    batches through ``trial.prepare_data_loader``, so it runs unchanged on CPU, on a GPU
    or a share of one, and as one rank of a DDP trial.

    Args:
        config: Any of ``lr``, ``momentum`` (SGD), ``optimizer`` / ``beta2`` (see
            :func:`examples._common.make_optimizer`), ``batch_size`` (global over all
            ranks), ``width`` (channels of the first stage, see :func:`build_model`),
            ``epochs`` (total, default 4), ``seed`` (weight init and shuffling),
            ``data_dir`` (a CIFAR-10 folder; None: synthetic images), ``n_train`` /
            ``n_val`` (synthetic set size), ``limit_train`` / ``limit_val`` (cap the
            number of samples). Missing keys use :data:`DEFAULTS`.

    Raises:
        FileNotFoundError: ``data_dir`` holds no CIFAR-10 data.
        ValueError: An unknown optimizer name or key, or an empty synthetic set.
    """
    cfg = {**DEFAULTS, **config}
    _common.set_threads()
    _common.run_classifier(cfg, load_data(cfg), lambda: build_model(cfg["width"]), prep=cifar.to_float)
