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


@pytest.mark.parametrize("cpu,gpu,expected", [(1, 0, 0), (8, 1, 4), (2, 1, 2), (16, 2, 8), (3, 0.5, 2)])
def test_default_num_workers_is_min_of_4_per_gpu_and_cpus(options, cpu, gpu, expected):
    with options(cpu=cpu, gpu=gpu):
        assert trial.default_num_workers() == expected


def test_prepare_data_loader_single_process(options):
    data = TensorDataset(torch.arange(10.0), torch.arange(10))
    with options(cpu=1, gpu=0):
        loader = trial.prepare_data_loader(DataLoader(data, batch_size=4, shuffle=False))
        batches = list(loader)
    assert len(loader) == 3 and [len(b[0]) for b in batches] == [4, 4, 2]
    assert isinstance(loader.loader.sampler, SequentialSampler)
    assert loader.loader.num_workers == 0 and loader.loader.pin_memory is False
    assert torch.equal(torch.cat([b[1] for b in batches]), torch.arange(10))


def test_prepare_data_loader_keeps_user_settings(options):
    data = TensorDataset(torch.arange(8.0))
    with options(cpu=4, gpu=0):
        loader = trial.prepare_data_loader(DataLoader(data, batch_size=2), num_workers=1, pin_memory=False)
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

    code = ("import sys\nfrom tuner.reporting import import_tensorboardx_without_torch\n"
            "import_tensorboardx_without_torch()\nfrom tensorboardX import SummaryWriter\n"
            f"w = SummaryWriter({str(tmp_path)!r})\nw.add_scalar('loss', 0.5, 1)\nw.close()\n"
            "print('torch' in sys.modules)\nimport torch\nprint(torch.tensor([1.0]).sum().item())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-2:] == ["False", "1.0"]
    assert list(tmp_path.glob("events.out.tfevents.*"))
