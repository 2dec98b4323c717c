"""The trial-side API in a plain process (world size 1): defaults, AMP switches, metric hygiene."""

import contextlib

import pytest
import torch
from torch.utils.data import DataLoader, SequentialSampler, TensorDataset

from tuner import trial


@pytest.fixture
def options():
    """Set TrialOptions for one test and reset them afterwards."""

    @contextlib.contextmanager
    def use(**kw):
        trial.configure(trial.TrialOptions(**kw))
        try:
            yield
        finally:
            trial.configure(None)

    return use


def test_single_process_defaults():
    assert (trial.world_size(), trial.rank(), trial.local_rank(), trial.is_main_process()) == (1, 0, 0, True)
    assert trial.device().type == "cpu"
    assert trial.get_checkpoint() is None


def test_prepare_data_loader_single_process(options):
    data = TensorDataset(torch.arange(10.0), torch.arange(10))
    with options(cpu=1, gpu=0):
        loader = trial.prepare_data_loader(DataLoader(data, batch_size=4, shuffle=False), resident=False)
        batches = list(loader)
    assert len(loader) == 3 and [len(b[0]) for b in batches] == [4, 4, 2] and loader.resident is False
    assert isinstance(loader.loader.sampler, SequentialSampler)
    assert loader.loader.num_workers == 0 and loader.loader.pin_memory is False
    assert torch.equal(torch.cat([b[1] for b in batches]), torch.arange(10))


def test_prepare_data_loader_keeps_user_settings(options):
    data = TensorDataset(torch.arange(8.0))
    with options(cpu=4, gpu=0):
        loader = trial.prepare_data_loader(DataLoader(data, batch_size=2), num_workers=1, pin_memory=False,
                                           resident=False)
    assert loader.loader.num_workers == 1


def test_prepare_data_loader_needs_batch_size():
    data = TensorDataset(torch.arange(8.0))
    with pytest.raises(ValueError, match="needs a DataLoader built with batch_size"):
        trial.prepare_data_loader(DataLoader(data, batch_size=None))


def test_prepare_model_moves_to_device():
    model = trial.prepare_model(torch.nn.Linear(2, 1))
    assert next(model.parameters()).device == trial.device()


def test_amp_off_is_a_no_op(options):
    with options(amp=False):
        with trial.autocast():
            y = torch.nn.Linear(4, 4)(torch.ones(2, 4))
        assert y.dtype == torch.float32
        assert not trial.scaler().is_enabled()


def test_amp_on_cpu_uses_bf16_without_scaling(options):
    with options(amp=True):
        with trial.autocast():
            y = torch.nn.Linear(4, 4)(torch.ones(2, 4))
        assert y.dtype == torch.bfloat16
        assert not trial.scaler().is_enabled(), "bf16 needs no GradScaler"
        assert trial.scaler() is trial.scaler(), "one scaler per trial"


def test_report_outside_ray_records_plain_numbers(capsys):
    before = len(trial.local_reports())
    trial.report({"loss": torch.tensor(0.5), "acc": 1})
    assert trial.local_reports()[before:] == [{"loss": 0.5, "acc": 1}]
    assert "[tuner.trial] report" in capsys.readouterr().out


def test_report_refuses_tensors_with_many_elements():
    with pytest.raises(TypeError, match="metric 'loss' must be a number or a string, but got Tensor"):
        trial.report({"loss": torch.ones(3)})


def test_extra_metrics_are_added(options):
    with options(extra_metrics={"batch_size_used": 16}):
        trial.report({"loss": 1.0})
    assert trial.local_reports()[-1] == {"loss": 1.0, "batch_size_used": 16}


def test_configure_sets_the_options_and_none_clears_them(options):
    assert trial.options() == trial.TrialOptions(gpu=float(torch.cuda.is_available())), "defaults outside a trial"
    with options(amp=True, cpu=4, checkpoint_frequency=3):
        assert trial.options() == trial.TrialOptions(amp=True, cpu=4, checkpoint_frequency=3)
    assert trial.options() == trial.TrialOptions(gpu=float(torch.cuda.is_available()))
    with pytest.raises(TypeError, match="configure takes a TrialOptions or None, not dict"):
        trial.configure({"amp": True})


def test_configure_keeps_the_latest_checkpoint_only_when_asked(tmp_path, monkeypatch):
    """The OOM back-off restarts the train function in the same process from its latest checkpoint."""
    monkeypatch.setattr(trial, "_latest_checkpoint", str(tmp_path))  # as report() keeps it with oom_param set
    try:
        trial.configure(trial.TrialOptions(oom_param="batch_size"), keep_checkpoint=True)
        assert trial.get_checkpoint() == str(tmp_path)
        trial.configure(trial.TrialOptions(oom_param="batch_size"))
        assert trial.get_checkpoint() is None, "a new trial starts from scratch"
    finally:
        trial.configure(None)


def test_a_report_without_torch_does_not_import_torch():
    """A train function that never imported torch (scikit-learn, plain Python) reports without paying
    torch's import (about 1.3 s in each trial process): there is no GPU metric to add then."""
    import subprocess
    import sys

    code = ("import sys\nfrom tuner import trial\ntrial.configure(trial.TrialOptions())\n"
            "trial.report({'loss': 1.0})\nprint('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "False"


def test_the_drivers_tensorboard_logging_does_not_import_torch(tmp_path):
    """tensorboardX imports torch when it can (1.3 s per `tuner run`); tuner's driver imports it without,
    its writer still logs numbers, and torch stays importable afterwards."""
    import subprocess
    import sys

    code = ("import sys\nfrom tuner.run.loggers import import_tensorboardx_without_torch\n"
            "import_tensorboardx_without_torch()\nfrom tensorboardX import SummaryWriter\n"
            f"w = SummaryWriter({str(tmp_path)!r})\nw.add_scalar('loss', 0.5, 1)\nw.close()\n"
            "print('torch' in sys.modules)\nimport torch\nprint(torch.tensor([1.0]).sum().item())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-2:] == ["False", "1.0"]
    assert list(tmp_path.glob("events.out.tfevents.*"))


# --------------------------------------------------------------------------- AMP: channels_last (issue 30)


def _net(*layers):
    return torch.nn.Sequential(*layers, torch.nn.Flatten(), torch.nn.LazyLinear(2))


@pytest.mark.parametrize("amp,device_type,layers,wanted", [
    (True, "cuda", [torch.nn.Conv2d(3, 8, 3)], True),
    (True, "cuda", [torch.nn.Sequential(torch.nn.ReLU(), torch.nn.ConvTranspose2d(3, 8, 3))], True),  # nested
    (False, "cuda", [torch.nn.Conv2d(3, 8, 3)], False),  # AMP off
    (True, "cpu", [torch.nn.Conv2d(3, 8, 3)], False),  # off CUDA
    (True, "cuda", [torch.nn.Linear(3, 8)], False),  # no convolution
    (True, "cuda", [torch.nn.Conv1d(3, 8, 3)], False),  # 3-D weights: no channels_last layout
    (True, "cuda", [torch.nn.Conv3d(3, 8, 3)], False),  # channels_last_3d: not measured, not turned on
    (True, "cuda", [torch.nn.LazyConv2d(8, 3)], False),  # weight not initialised yet: nothing to convert
])
def test_channels_last_is_wanted_only_under_amp_on_cuda_with_a_2d_convolution(amp, device_type, layers, wanted):
    assert trial._channels_last_wanted(amp, device_type, _net(*layers)) is wanted


def test_prepare_model_under_amp_on_the_cpu_changes_nothing(options):
    benchmark = torch.backends.cudnn.benchmark
    conv = torch.nn.Conv2d(8, 8, 3)
    with options(amp=True, gpu=0):
        model = trial.prepare_model(torch.nn.Sequential(conv))
        x = trial.to_device(torch.randn(2, 8, 5, 5))
    assert conv.weight.is_contiguous() and not conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert x.is_contiguous() and not x.is_contiguous(memory_format=torch.channels_last)
    assert torch.backends.cudnn.benchmark == benchmark
    assert model(x).shape == (2, 8, 3, 3)


def test_prepare_model_where_channels_last_is_wanted_converts_the_convolutions(options, monkeypatch):
    """Where the rule says so (AMP on CUDA with a 2-d convolution; decided here by the rule stubbed to yes, as this
    machine has no GPU): every 2-d convolution's weight goes channels_last (a Conv1d's stays), cudnn.benchmark is
    turned on, and to_device gives 4-D floating inputs in channels_last from then on (other tensors as they were)."""
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    monkeypatch.setattr(trial, "_channels_last", False)
    monkeypatch.setattr(trial, "_channels_last_wanted", lambda amp, device_type, model: True)
    conv, inner, flat = torch.nn.Conv2d(8, 8, 3), torch.nn.ConvTranspose2d(8, 8, 3), torch.nn.Conv1d(8, 8, 3)
    with options(amp=True, gpu=0):
        trial.prepare_model(torch.nn.ModuleList([conv, torch.nn.Sequential(inner), flat]))
        x = trial.to_device(torch.randn(2, 8, 5, 5))
        labels = trial.to_device(torch.ones(2, 8, 5, 5, dtype=torch.long))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last) and not conv.weight.is_contiguous()
    assert inner.weight.is_contiguous(memory_format=torch.channels_last) and not inner.weight.is_contiguous()
    assert flat.weight.is_contiguous()
    assert torch.backends.cudnn.benchmark is True
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    assert labels.is_contiguous(), "not floating: as it was"


# --------------------------------------------------------------------------- to_device (issue 30)


def test_to_device_moves_nested_batches_and_keeps_their_shape(options):
    from collections import namedtuple

    Pair = namedtuple("Pair", "x y")
    batch = {"img": torch.ones(2, 3, 4, 4), "pair": Pair(torch.zeros(2), [torch.arange(2), "name"]),
             "meta": (1, None)}
    with options(gpu=0):
        out = trial.to_device(batch)
    assert out.keys() == batch.keys() and isinstance(out["pair"], Pair) and isinstance(out["pair"].y, list)
    assert out["pair"].y[1] == "name" and out["meta"] == (1, None)
    assert out["img"].device.type == "cpu" and torch.equal(out["img"], batch["img"])
    assert out["img"].is_contiguous(), "channels_last only after prepare_model turned it on"


def test_channels_last_inputs_once_on_through_every_path(options, monkeypatch):
    """What prepare_model's conversion turns on (on CUDA) reaches to_device and both loaders of
    prepare_data_loader: one definition of the move. 4-D float tensors only; the values stay."""
    images = torch.randn(6, 3, 4, 5)
    data = TensorDataset(images, torch.arange(6), torch.ones(6, 2, 2, 2, dtype=torch.uint8))
    with options(gpu=0):
        monkeypatch.setattr(trial, "_channels_last", True)  # as prepare_model sets it on CUDA under AMP
        moved = trial.to_device([images, torch.ones(2, 3, 4)])
        loaders = [trial.prepare_data_loader(DataLoader(data, batch_size=4), resident=r) for r in (False, True)]
        batches = [next(iter(loader)) for loader in loaders]
    assert moved[0].is_contiguous(memory_format=torch.channels_last) and not moved[0].is_contiguous()
    assert moved[1].is_contiguous(), "3-D: no channels_last layout"
    for x, _, mask in batches:
        assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
        assert torch.equal(x, images[:4]) and mask.is_contiguous() and not mask.is_contiguous(
            memory_format=torch.channels_last), "integer 4-D tensors keep their layout"
    trial.configure(None)
    assert trial._channels_last is False, "a new trial starts without it"


# --------------------------------------------------------------------------- data_loader_kwargs (issue 30)


@pytest.mark.parametrize("cpu,gpu,workers", [
    (1, 0, 0), (4, 0, 0),  # CPU-only: torch's threads use the trial's CPUs
    (1, 1, 0), (2, 1, 1), (8, 1, 4), (16, 2, 8), (64, 4, 16),  # 4 per GPU, leaving the trial's own process a CPU
    (2, 0.25, 1), (8, 0.25, 1), (3, 0.5, 2), (8, 0.1, 1), (8, 0.3, 2),  # fractional GPUs
    (0.5, 0.25, 0), (2.5, 0.25, 1), (1.5, 1, 0),  # fractional CPUs: whole ones only
])
def test_data_loader_kwargs_fit_the_trials_own_share(options, cpu, gpu, workers):
    with options(cpu=cpu, gpu=gpu):
        kwargs = trial.data_loader_kwargs()
        assert trial.default_num_workers() == workers
    assert kwargs == {"num_workers": workers, "pin_memory": False, "persistent_workers": workers > 0}, \
        "pinned only when training on CUDA (this machine has no GPU)"


def test_data_loader_kwargs_build_a_working_loader(options):
    data = TensorDataset(torch.arange(12.0))
    with options(cpu=2, gpu=0.25):
        kwargs = trial.data_loader_kwargs()
        loader = DataLoader(data, batch_size=5, **kwargs)
        assert kwargs["num_workers"] == 1 and kwargs["persistent_workers"]
        for _ in range(2):  # the worker stays up between epochs
            assert torch.equal(torch.cat([b[0] for b in loader]), torch.arange(12.0))


# --------------------------------------------------------------------------- resident data (issue 30)


def _values(batches):
    return [[t.tolist() for t in batch] for batch in batches]


@pytest.mark.parametrize("n,batch,world_size,shuffle,drop_last", [
    (10, 4, 1, True, False), (10, 4, 1, False, True), (17, 3, 2, True, False), (17, 4, 3, True, True),
    (2, 2, 3, True, False), (16, 8, 2, False, False),
])
def test_resident_batches_are_those_of_a_distributed_sampler(n, batch, world_size, shuffle, drop_last):
    """Each rank gets the batches a DataLoader over a DistributedSampler with the same seed and epoch gives
    (padding included), epoch after epoch, from start_epoch on; the same len() and drop_last."""
    data = TensorDataset(torch.arange(n) * 10, torch.randn(n, 2, 3, 3))
    for rank in range(world_size):
        sampler = torch.utils.data.DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=7)
        reference = DataLoader(data, batch_size=batch, sampler=sampler, drop_last=drop_last)
        resident = trial._ResidentLoader(data, torch.device("cpu"), batch_size=batch, shuffle=shuffle,
                                         drop_last=drop_last, seed=7, start_epoch=2, world_size=world_size, rank=rank)
        assert len(resident) == len(reference)
        for epoch in (2, 3, 4):
            sampler.set_epoch(epoch)
            assert _values(resident) == _values(reference), (rank, epoch)


def test_a_small_tensor_dataset_is_resident_and_reshuffled_each_epoch(options):
    data = TensorDataset(torch.arange(10.0).reshape(10, 1), torch.arange(10))
    with options(cpu=1, gpu=0):
        loader = trial.prepare_data_loader(DataLoader(data, batch_size=4, shuffle=True, drop_last=True), seed=3)
        epochs = [[int(v) for _, y in loader for v in y] for _ in range(3)]
        resumed = trial.prepare_data_loader(DataLoader(data, batch_size=4, shuffle=True, drop_last=True), seed=3,
                                            start_epoch=1)
        other_seed = trial.prepare_data_loader(DataLoader(data, batch_size=4, shuffle=True, drop_last=True), seed=4)
        first = next(iter(loader))
    assert loader.resident and loader.dataset is data and len(loader) == 2 and isinstance(first, list), "a list, as default_collate makes it"
    assert first[0].shape == (4, 1) and first[1].dtype == torch.int64
    assert all(len(e) == 8 and len(set(e)) == 8 for e in epochs) and epochs[0] != epochs[1] != epochs[2]
    assert epochs == [trial._shard_order(10, 1, 0, True, 3, e)[:8].tolist() for e in range(3)], \
        "drawn on the CPU from seed + epoch: the same batches on every device"
    assert [[int(v) for _, y in resumed for v in y] for _ in range(2)] == epochs[1:]
    assert [int(v) for _, y in other_seed for v in y] != epochs[0]


def test_resident_sequential_batches_equal_the_dataloaders_and_are_new_tensors(options):
    data = TensorDataset(torch.randn(7, 1, 2, 2), torch.arange(7))
    with options(cpu=1, gpu=0):
        loader = trial.prepare_data_loader(DataLoader(data, batch_size=3))
        first = _values(loader)
        for x, _ in loader:
            x.add_(100)  # in place on a batch, as a user's prep may do
        again = _values(loader)
    assert loader.resident and first == _values(DataLoader(data, batch_size=3)) == again


def test_resident_auto_and_forced(options):
    small = TensorDataset(torch.zeros(8, 2))
    with options(cpu=1, gpu=0):
        def prepared(loader, **kw):
            return trial.prepare_data_loader(loader, **kw).resident

        assert prepared(DataLoader(small, batch_size=2)) is True
        assert prepared(DataLoader(small, batch_size=2), resident=False) is False
        weighted = torch.utils.data.WeightedRandomSampler([1.0] * 8, 8)
        assert prepared(DataLoader(small, batch_size=2, sampler=weighted)) is False, "its own sampler: a DataLoader"
        assert prepared(DataLoader(small, batch_size=2, collate_fn=lambda b: b)) is False
        own_shuffle = DataLoader(small, batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(1))
        assert prepared(own_shuffle) is False, "a loader with its own generator keeps its shuffle"
        assert prepared(own_shuffle, resident=True) is True
        # Over the budget: not resident unless forced (the tensor's pages are never touched).
        big = TensorDataset(torch.empty(trial.RESIDENT_MAX_BYTES + 1, dtype=torch.uint8))
        assert prepared(DataLoader(big, batch_size=2**20)) is False
        assert prepared(DataLoader(big, batch_size=2**20), resident=True) is True
        with pytest.raises(ValueError, match=r"resident=True\) cannot keep this loader's data on the device: its "
                                             r"dataset is a list, not a torch.utils.data.TensorDataset"):
            trial.prepare_data_loader(DataLoader([1, 2, 3], batch_size=2), resident=True)
        with pytest.raises(ValueError, match="it has its own collate_fn"):
            trial.prepare_data_loader(DataLoader(small, batch_size=2, collate_fn=lambda b: b), resident=True)
        with pytest.raises(ValueError, match="it has its own sampler"):
            trial.prepare_data_loader(DataLoader(small, batch_size=2, sampler=weighted), resident=True)


@pytest.mark.parametrize("nbytes,free,fits", [
    (trial.RESIDENT_MAX_BYTES, None, True), (trial.RESIDENT_MAX_BYTES + 1, None, False),  # the CPU: the budget only
    (100, 400, True), (101, 400, False),  # CUDA: at most a quarter of the free memory
    (trial.RESIDENT_MAX_BYTES + 1, 2**40, False),
])
def test_the_resident_budget(nbytes, free, fits):
    assert trial.RESIDENT_FREE_FRACTION == 0.25
    assert trial._fits_resident(nbytes, free) is fits


def _on_a_gpu(monkeypatch, bf16: bool) -> None:
    """This process as a single-process trial on a CUDA GPU sees it (none here: torch's CUDA queries faked)."""
    monkeypatch.setattr(trial, "device", lambda: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: bf16)


@pytest.mark.parametrize("bf16", [True, False])
def test_amp_on_a_gpu_uses_bf16_or_else_fp16_with_an_enabled_grad_scaler(options, monkeypatch, bf16):
    """README: AMP is bf16 where the GPU supports it (no scaling), else fp16 with an enabled GradScaler."""
    _on_a_gpu(monkeypatch, bf16)
    with options(amp=True, gpu=1):
        assert trial._amp_dtype() is (torch.bfloat16 if bf16 else torch.float16)
        assert trial.scaler().is_enabled() is not bf16
    with options(amp=False, gpu=1):
        assert not trial.scaler().is_enabled(), "AMP off: never scaled"


def test_every_result_on_a_gpu_carries_its_memory_peaks_and_utilization(options, monkeypatch):
    """README: on a GPU every result carries gpu_memory_peak_bytes (torch's allocated peak) and
    gpu_utilization_percent (NVML through torch), besides the reserved peak and the GPU's total; without NVML,
    the memory only. (report() adds these in a Tune trial and in each DDP worker; outside Ray it keeps the
    metrics as given, so the helper it calls is checked here.)"""
    from types import SimpleNamespace

    _on_a_gpu(monkeypatch, True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: 3 * 2**20)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda d: 4 * 2**20)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(total_memory=16 * 2**30))
    monkeypatch.setattr(torch.cuda, "utilization", lambda d: 87)
    with options(gpu=1):
        assert trial._gpu_metrics() == {"gpu_memory_peak_bytes": 3 * 2**20, "gpu_memory_reserved_bytes": 4 * 2**20,
                                        "gpu_memory_total_bytes": 16 * 2**30, "gpu_utilization_percent": 87}

    def no_nvml(d):
        raise ModuleNotFoundError("pynvml")

    monkeypatch.setattr(torch.cuda, "utilization", no_nvml)
    with options(gpu=1):
        assert trial._gpu_metrics() == {"gpu_memory_peak_bytes": 3 * 2**20, "gpu_memory_reserved_bytes": 4 * 2**20,
                                        "gpu_memory_total_bytes": 16 * 2**30}


def test_data_loader_kwargs_pin_memory_when_training_on_cuda(options, monkeypatch):
    """README: `resources: {cpu: 2, gpu: 0.25}` gives {"num_workers": 1, "pin_memory": true, "persistent_workers":
    true} (on CUDA: faked here)."""
    _on_a_gpu(monkeypatch, True)
    with options(cpu=2, gpu=0.25):
        assert trial.data_loader_kwargs() == {"num_workers": 1, "pin_memory": True, "persistent_workers": True}
    with options(cpu=1, gpu=0.25):
        assert trial.data_loader_kwargs() == {"num_workers": 0, "pin_memory": True, "persistent_workers": False}
