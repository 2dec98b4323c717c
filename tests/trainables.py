"""Tiny train functions for the integration tests (importable by Ray workers as tests.trainables)."""

import json
import os
import tempfile

import numpy as np

from tuner import trial


def _start_epoch() -> int:
    """The epoch after the one in the trial's latest checkpoint (0 without a checkpoint)."""
    ckpt = trial.get_checkpoint()
    if not ckpt:
        return 0
    with open(os.path.join(ckpt, "state.json")) as f:
        return json.load(f)["epoch"] + 1


def _epoch_checkpoint(epoch: int):
    """A checkpoint folder holding ``epoch``, written by the main process only (None elsewhere)."""
    if not trial.is_main_process():
        return None
    folder = tempfile.mkdtemp()
    with open(os.path.join(folder, "state.json"), "w") as f:
        json.dump({"epoch": epoch}, f)
    return folder


def quadratic(config):
    """Loss falls each iteration toward (x - 0.3)^2; reports loss and score = -loss."""
    x = config.get("x", 0.0)
    for i in range(int(config.get("epochs", 3))):
        loss = (x - 0.3) ** 2 + 1.0 / (i + 1)
        trial.report({"loss": loss, "score": -loss})


def typed(config):
    """Reports the Python type names of the config values it was given."""
    names = {k: type(v).__name__ for k, v in config.items()}
    for _ in range(int(config.get("epochs", 2))):
        trial.report({"loss": float(config.get("x", 0.0)), "numpy_free": float(not any(
            isinstance(v, np.generic) for v in config.values())), "types": ",".join(f"{k}={v}" for k, v in sorted(names.items()))})


def seeded(config):
    """Reports draws from ``random``, numpy's and torch's global generators each iteration, with
    ``trial.seed()`` and ``trial.rank_seed()`` (``seed_seen``, ``rank_seed_seen``): under
    ``seed_trials: true`` a trial's draws follow from its seed alone. ``loss`` is their sum plus ``x``."""
    import random

    import torch

    for _ in range(int(config.get("epochs", 2))):
        draws = {"py": random.random(), "np": float(np.random.random()), "torch": float(torch.rand(1).item())}
        trial.report({**draws, "loss": sum(draws.values()) + float(config.get("x", 0.0)),
                      "seed_seen": trial.seed(), "rank_seed_seen": trial.rank_seed()})


def raw_ray(config):
    """An existing Ray Tune function trainable: calls ray.tune.report itself."""
    from ray import tune

    for i in range(3):
        tune.report({"loss": config["x"] + 1.0 / (i + 1)})


def raw_ray_oom_until_small(config):
    """A Ray Tune function trainable (``ray.tune.report``, ``ray.tune.get_checkpoint``) that raises a simulated
    CUDA out-of-memory error at epoch 2 while batch_size > config['fits']; each epoch's checkpoint holds the
    epoch, and a start goes on from ``ray.tune.get_checkpoint()`` (``start``: the first epoch it ran)."""
    import torch
    from ray import tune

    ckpt, start = tune.get_checkpoint(), 0
    if ckpt is not None:
        with ckpt.as_directory() as folder, open(os.path.join(folder, "state.json")) as f:
            start = json.load(f)["epoch"] + 1
    for epoch in range(start, 4):
        if epoch == 2 and config["batch_size"] > config["fits"]:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (simulated) at batch_size={config['batch_size']}")
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump({"epoch": epoch}, f)
            tune.report({"loss": 1.0 / (epoch + 1), "epoch": epoch, "start": start,
                         "batch_size_seen": config["batch_size"]}, checkpoint=tune.Checkpoint.from_directory(folder))


def two_objectives(config):
    """Two objectives with a known Pareto front (ZDT1's shape): f1 = x and f2 = 1 + y - sqrt(x), both
    minimized, over ``epochs`` iterations (f2 falls to its final value); the front is every trial
    with y = 0. Also reports ``size`` = x + y, for a constraint: left out when ``config["size_as"]`` is
    ``"missing"``, NaN when it is ``"nan"``."""
    x, y = float(config["x"]), float(config.get("y", 0.0))
    epochs = int(config.get("epochs", 2))
    size = {"missing": None, "nan": float("nan")}.get(config.get("size_as", "value"), x + y)
    for i in range(epochs):
        trial.report({"f1": x, "f2": 1.0 + y - x ** 0.5 + (epochs - 1 - i) * 0.1,
                      **({"size": size} if size is not None else {})})


def raw_ray_two_objectives(config):
    """An existing Ray Tune function trainable reporting several metrics with ray.tune.report."""
    from ray import tune

    for i in range(2):
        tune.report({"acc": config["x"] * (i + 1) / 2, "cost": config["x"] ** 2 + config["y"], "epoch": i})


def fails_for_large_x(config):
    """Raises for x > 0.5 on its second iteration; says its x on stdout and stderr first."""
    import sys

    print(f"x is {config['x']}")
    print(f"x on stderr is {config['x']}", file=sys.stderr)
    for i in range(3):
        if i == 1 and config["x"] > 0.5:
            raise ValueError(f"x too large: {config['x']}")
        trial.report({"loss": config["x"] + i})


def nan_metric(config):
    """Reports NaN for x > 0.5."""
    for _ in range(2):
        trial.report({"loss": float(config.get("bad_value", "nan")) if config["x"] > 0.5 else config["x"]})


def checkpointing(config):
    """Writes a checkpoint each iteration and resumes from the last one."""
    import json
    import os
    import tempfile

    start = 0
    ckpt = trial.get_checkpoint()
    if ckpt:
        with open(os.path.join(ckpt, "state.json")) as f:
            start = json.load(f)["i"] + 1
    for i in range(start, int(config.get("epochs", 3))):
        d = tempfile.mkdtemp()
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump({"i": i}, f)
        trial.report({"loss": config["x"] / (i + 1)}, checkpoint_dir=d)


def slow(config):
    """Reports every 0.5 s for a long time (for interrupt tests)."""
    import time

    for i in range(int(config.get("epochs", 200))):
        time.sleep(0.5)
        trial.report({"loss": config.get("x", 0.0) + 1.0 / (i + 1)})


def ddp_probe(config):
    """Trains a tiny linear model under DDP; reports what each rank sees and resumes from checkpoints."""
    import json

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset

    import random

    seeds = [trial.seed(), trial.rank_seed(), random.random()]  # seed_trials: random seeded with rank_seed()
    start = _start_epoch()
    model = trial.prepare_model(torch.nn.Linear(4, 1))
    data = TensorDataset(torch.arange(64, dtype=torch.float32).reshape(16, 4), torch.arange(16, dtype=torch.float32))
    loader = trial.prepare_data_loader(DataLoader(data, batch_size=8, shuffle=True))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    for epoch in range(start, int(config.get("epochs", 2))):
        seen = []
        for x, y in loader:
            seen.extend(int(v) for v in y.tolist())
            batch = len(y)
            with trial.autocast():
                loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
            opt.zero_grad()
            trial.scaler().scale(loss).backward()
            trial.scaler().step(opt)
            trial.scaler().update()
        # Gather what every rank saw, so rank 0's report shows the split.
        gathered = [None] * trial.world_size()
        starts = [None] * trial.world_size()
        rank_seeds = [None] * trial.world_size()
        if trial.world_size() > 1:
            dist.all_gather_object(gathered, sorted(seen))
            dist.all_gather_object(starts, start)
            dist.all_gather_object(rank_seeds, seeds)
        else:
            gathered, starts, rank_seeds = [sorted(seen)], [start], [seeds]
        folder = _epoch_checkpoint(epoch)
        trial.report({
            "loss": float(loss.item()), "epoch": epoch, "start": start, "world_size": trial.world_size(),
            "rank": trial.rank(), "per_worker_batch": batch, "shards": json.dumps(gathered), "starts": json.dumps(starts),
            "device": str(trial.device()), "x": config.get("x", 0.0), "seeds": json.dumps(rank_seeds),
        }, checkpoint_dir=folder)
        if config.get("fail_at_epoch") == epoch:
            _crash_after_the_report(config["fail_marker"])


def _crash_after_the_report(marker: str) -> None:
    """Every rank of a DDP trial fails once (the first time any reaches here), after the controller
    took every rank's last report: the group then restarts from that report's checkpoint. (Failing
    at once would race Ray Train: a rank that fails before rank 0's checkpoint upload is queued
    loses the round, and the group restarts from the checkpoint before.)"""
    import time

    import torch.distributed as dist

    from tuner.adapters.ray_internals import train_reports_pending

    crash = not os.path.exists(marker)
    if trial.world_size() > 1:
        dist.barrier()  # every rank has decided before rank 0 writes the marker
    if not crash:
        return
    waited = time.monotonic()
    while train_reports_pending() and time.monotonic() - waited < 300:  # a gate: the controller's next poll
        time.sleep(0.05)
    if trial.world_size() > 1:
        dist.barrier()
    if trial.is_main_process():
        open(marker, "w").close()
    raise RuntimeError("simulated worker crash")


def _marked(folder: str, prefix: str = "") -> int:
    """How many marks (files whose names start with ``prefix``) ``folder`` holds."""
    return sum(1 for name in os.listdir(folder) if name.startswith(prefix))


def _wait_for_marks(folder: str, count: int, prefix: str = "", timeout_s: float = 300, step_s: float = 0.1) -> None:
    """Wait until ``count`` trials have marked ``folder`` (:func:`_marked`): that many ran at once.

    Raises:
        RuntimeError: After ``timeout_s`` seconds with fewer marks: fewer trials ever ran at once.
    """
    import time

    for _ in range(round(timeout_s / step_s)):
        if _marked(folder, prefix) >= count:
            return
        time.sleep(step_s)
    raise RuntimeError(f"fewer than {count} trials ever ran at once")


def gpu_probe(config):
    """Reports the GPU ids and CUDA_VISIBLE_DEVICES Ray gave this trial, and who shared its GPU.

    Gated on files in the folder ``config["gate"]``: a trial marks itself live on its GPU
    (``live-<gpu ids>-<n>``), then started (``started-<n>``), and waits until ``config["together"]``
    trials have started (up to 5 minutes, then fails: they never ran at once). Then it counts the
    trials live on its GPU, itself included (``gpu_peers``), marks itself passed (``passed-<n>``)
    and, once ``together`` trials have passed, unmarks itself live. So each of the first
    ``together`` trials counts every trial that shares its GPU among them.
    """
    import os

    import ray

    gpus = ",".join(str(g) for g in ray.get_gpu_ids())
    gate = config["gate"]
    number = 0
    while True:  # claim a number of its own
        try:
            os.close(os.open(os.path.join(gate, f"claimed-{number}"), os.O_CREAT | os.O_EXCL))
            break
        except FileExistsError:
            number += 1
    live = os.path.join(gate, f"live-{gpus}-{number}")
    open(live, "w").close()
    open(os.path.join(gate, f"started-{number}"), "w").close()
    _wait_for_marks(gate, int(config["together"]), "started-")
    peers = _marked(gate, f"live-{gpus}-")
    open(os.path.join(gate, f"passed-{number}"), "w").close()
    _wait_for_marks(gate, int(config["together"]), "passed-")
    os.remove(live)
    trial.report({"gpu_ids": gpus, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                  "gpu_peers": peers, "loss": config.get("x", 0.0)})


def oom_until_small(config):
    """Raises a simulated CUDA out-of-memory error while batch_size > config['fits']; reports the trial's
    seed (``seed_seen``)."""
    import torch

    start = _start_epoch()
    for epoch in range(start, 4):
        if epoch == 2 and config["batch_size"] > config["fits"]:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (simulated) at batch_size={config['batch_size']}")
        folder = _epoch_checkpoint(epoch)
        trial.report({"loss": 1.0 / (epoch + 1), "epoch": epoch, "batch_size_seen": config["batch_size"],
                      "seed_seen": trial.seed()}, checkpoint_dir=folder)


def ddp_oom_until_small(config):
    """DDP: every rank raises a simulated CUDA OOM at epoch 1 while batch_size > config['fits']; rank 0 reports
    the trial's seed (``seed_seen``)."""
    import torch

    start = _start_epoch()
    for epoch in range(start, 3):
        if epoch == 1 and config["batch_size"] > config["fits"]:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (simulated) at batch_size={config['batch_size']}")
        folder = _epoch_checkpoint(epoch)
        trial.report({"loss": 1.0 / (epoch + 1), "epoch": epoch, "start": start,
                      "batch_size_seen": config["batch_size"], "seed_seen": trial.seed()}, checkpoint_dir=folder)


def typo(config):
    """A train function with a bug: every trial fails on its first iteration."""
    return config["learning_rate"]  # the spec calls it lr


def steady(config):
    """Checkpoints every epoch and resumes; each epoch takes config['sleep'] seconds (the first epoch
    config['first_sleep'], when given)."""
    import time

    start = _start_epoch()
    for epoch in range(start, int(config["epochs"])):
        time.sleep(config.get("first_sleep", config.get("sleep", 0.3)) if epoch == 0 else config.get("sleep", 0.3))
        folder = _epoch_checkpoint(epoch)
        trial.report({"loss": config["x"] + 1.0 / (epoch + 1), "epoch": epoch, "start": start},
                     checkpoint_dir=folder)


def hangs_after_one_report(config):
    """Reports once, then, for x > 0.5, stops reporting (a hang) for ``hang_s`` seconds (default an hour)."""
    import time

    trial.report({"loss": config.get("x", 0.0)})
    if config.get("x", 0.0) > 0.5:
        time.sleep(config.get("hang_s", 3600))
    trial.report({"loss": config.get("x", 0.0)})


def where(config):
    """Reports the Ray node it runs on; checkpoints each epoch (the cluster tests).

    With ``meet_dir`` and ``meet_nodes``, it first records its node there and waits (up to 10
    minutes, then fails) until trials have started on ``meet_nodes`` nodes: a trial holds its
    node's CPU meanwhile, so the next trial must go to another node, however slowly that node
    starts its worker (without it, under load, Ray reused the first node's freed actor for every
    trial before the cold node had one).
    """
    import time
    from pathlib import Path

    import ray

    node = ray.get_runtime_context().get_node_id()
    if config.get("meet_dir"):
        meet = Path(config["meet_dir"])
        meet.mkdir(parents=True, exist_ok=True)
        (meet / node).write_text(node)
        for _ in range(3000):
            if len(list(meet.iterdir())) >= int(config["meet_nodes"]):
                break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"trials did not start on {config['meet_nodes']} nodes")
    start = _start_epoch()
    for epoch in range(start, int(config.get("epochs", 2))):
        time.sleep(config.get("sleep", 1.0))
        trial.report({"loss": config["x"] + 1.0 / (epoch + 1), "epoch": epoch, "node": node},
                     checkpoint_dir=_epoch_checkpoint(epoch))


def crashes_once(config):
    """Like ``steady``, but the process dies once at epoch ``fail_at_epoch`` (a marker file per
    config under ``fail_dir`` remembers it); with ``max_failures`` it resumes from its checkpoint."""
    import time

    start = _start_epoch()
    marker = os.path.join(config["fail_dir"], f"crashed-{config['x']!r}")
    for epoch in range(start, int(config["epochs"])):
        time.sleep(config.get("sleep", 0))
        if epoch == config.get("fail_at_epoch", 1) and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)  # the worker process dies, as on a lost node
        trial.report({"loss": config["x"] + 1.0 / (epoch + 1), "epoch": epoch, "start": start},
                     checkpoint_dir=_epoch_checkpoint(epoch))


def peaks(config):
    """Reports ``val_accuracy`` from ``config["run"]["curve"]`` (one value per epoch), with a checkpoint
    of the epoch each time, and ``start`` (the epoch it started from). With ``run.fail_at_epoch`` the
    process dies once there (a marker under ``fail_dir``), so ``max_failures`` restarts it from a
    checkpoint: which one shows in ``start``."""
    run = config["run"]
    start = _start_epoch()
    marker = os.path.join(config["fail_dir"], f"crashed-{run['label']}")
    for epoch in range(start, len(run["curve"])):
        if epoch == run.get("fail_at_epoch") and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)  # the worker process dies
        trial.report({"val_accuracy": run["curve"][epoch], "epoch": epoch, "start": start},
                     checkpoint_dir=_epoch_checkpoint(epoch))


# --------------------------------------------------------------------------- class trainables

from ray import tune as _tune  # noqa: E402 - the class trainables below subclass ray.tune.Trainable


class Counter(_tune.Trainable):
    """A class trainable: ``loss`` falls toward ``(x - 0.3)^2``; checkpoints its step.

    Reports what the tests check: the step, the step it was restored from, how often its
    actor was reset for another trial (actor reuse), its pid, the type of ``x``, and
    whether ``tuner.trial``'s AMP context is on.
    """

    def setup(self, config):
        import random

        self.x = config.get("x", 0.0)
        self.step_no = 0
        self.restored_from = -1
        self.resets = 0
        self.draw = random.random()  # seed_trials: seeded with the trial's seed before setup
        if config.get("fail_dir"):
            self.marker = os.path.join(config["fail_dir"], f"failed-{self.x!r}")

    def step(self):
        import time

        time.sleep(self.config.get("sleep", 0))
        self.step_no += 1
        if self.config.get("fail_at") == self.step_no and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError("Counter failed on purpose")
        loss = (self.x - 0.3) ** 2 + 1.0 / self.step_no
        if self.config.get("nan_above") is not None and self.x > self.config["nan_above"]:
            loss = float(self.config.get("bad_value", "nan"))
        return {"loss": loss, "step_no": self.step_no, "restored_from": self.restored_from,
                "resets": self.resets, "process": os.getpid(), "x_type": type(self.config.get("x")).__name__,
                "amp": float(trial.options().amp), "seed_seen": trial.seed(), "setup_draw": self.draw}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "state.json"), "w") as f:
            json.dump({"step_no": self.step_no}, f)

    def load_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "state.json")) as f:
            self.step_no = self.restored_from = json.load(f)["step_no"]

    def reset_config(self, new_config):
        import random

        self.x = new_config.get("x", 0.0)
        self.step_no, self.restored_from = 0, -1
        self.resets += 1
        self.draw = random.random()  # seed_trials: seeded with the new trial's seed before reset_config
        return True


class NoCheckpoints(_tune.Trainable):
    """A class trainable without save_checkpoint/load_checkpoint/reset_config."""

    def setup(self, config):
        self.x = config.get("x", 0.0)

    def step(self):
        return {"loss": self.x}


def returns_metrics(config):
    """A Ray Tune function trainable that returns its last result instead of reporting it."""
    bad = config.get("nan_above") is not None and config["x"] > config["nan_above"]
    return {"loss": float(config.get("bad_value", "nan")) if bad else config["x"]}


def raw_ray_nan(config):
    """A Ray Tune function trainable (ray.tune.report) that reports a NaN/inf loss for large x."""
    from ray import tune

    for i in range(3):
        bad = config["x"] > config["nan_above"]
        tune.report({"loss": float(config.get("bad_value", "nan")) if bad else config["x"] + 1.0 / (i + 1)})


def with_data(config, data):
    """For tune.with_parameters: reports facts about ``data`` (a numpy array from the object store)."""
    trial.report({"loss": float(data[:10].sum()) + config.get("x", 0.0), "nbytes": int(data.nbytes),
                  "writeable": float(data.flags.writeable), "process": os.getpid()})


def bulky(config):
    """Like ``steady``, with ``config['ckpt_kb']`` KB of random bytes in each checkpoint (the full-disk test).

    A trial with ``x > config['hold_above']`` holds before epoch ``config['hold_at']`` (its
    checkpoints of the epochs before written) until the file ``config['go']`` exists, and
    says so by creating ``holding-<x>`` beside it.
    """
    import shutil
    import time

    start = _start_epoch()
    for epoch in range(start, int(config["epochs"])):
        if config.get("go") and config["x"] > config.get("hold_above", 1) and epoch == config.get("hold_at"):
            open(os.path.join(os.path.dirname(config["go"]), f"holding-{config['x']}"), "w").close()
            while not os.path.exists(config["go"]):
                time.sleep(0.05)
        time.sleep(config.get("sleep", 0))
        folder = _epoch_checkpoint(epoch)
        if folder is not None:
            with open(os.path.join(folder, "weights.bin"), "wb") as f:
                f.write(os.urandom(int(config.get("ckpt_kb", 200)) * 1024))
        trial.report({"loss": config["x"] + 1.0 / (epoch + 1), "epoch": epoch, "start": start},
                     checkpoint_dir=folder)
        if folder is not None:
            shutil.rmtree(folder)  # persisted by the report; don't fill the worker's /tmp


def fails_first(config):
    """Fails before its first result as config['fail'] says: ``nan`` (NaN in the first report), ``oom``
    (a simulated CUDA out-of-memory, no oom_backoff), ``exit`` (the process dies); ``none`` reports twice."""
    import torch

    kind = config["fail"]
    if kind == "nan":
        trial.report({"loss": float("nan")})
    elif kind == "oom":
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated) before the first report")
    elif kind == "exit":
        os._exit(1)
    for i in range(2):
        trial.report({"loss": float(i)})


def slow_unless_failing(config):
    """Reports every config['sleep'] s for config['epochs'] epochs; with config['fail'], raises after its
    first report. With config['gate'] (a file path), a trial that does not fail writes that file after its
    first report, and a failing one waits for it (up to 2 minutes) before it raises, so a trial running
    beside the failing one has always reported once, however late its process started; the failing one
    writes ``<gate>.failing`` just before it raises, and the other waits for that (up to 2 minutes) before
    its second epoch, so it is still running, with all but one epoch ahead, when the error comes."""
    import time
    from pathlib import Path

    gate = Path(config["gate"]) if config.get("gate") else None
    for i in range(int(config["epochs"])):
        trial.report({"loss": config.get("x", 0.0) + 1.0 / (i + 1)})
        if config.get("fail"):
            for _ in range(600 if gate else 0):
                if gate.exists():
                    break
                time.sleep(0.2)
            if gate:
                gate.with_name(gate.name + ".failing").write_text("failing")
            raise RuntimeError("this trial fails on purpose")
        if gate and i == 0:
            gate.write_text("reported")
            failing = gate.with_name(gate.name + ".failing")
            for _ in range(600):
                if failing.exists():
                    break
                time.sleep(0.2)
        time.sleep(config.get("sleep", 0.2))


def amp_probe(config):
    """Reports whether trial.autocast() turned autocast on, its dtype, and a Linear layer's output dtype."""
    import torch

    kind = trial.device().type
    with trial.autocast():
        on = torch.is_autocast_enabled(kind)
        dtype = str(torch.get_autocast_dtype(kind)) if on else ""
        out = torch.nn.Linear(4, 2)(torch.ones(1, 4))
    trial.report({"loss": 0.0, "autocast": float(on), "autocast_dtype": dtype, "output_dtype": str(out.dtype)})


def fails_per_attempt(config):
    """Checkpoints every epoch and resumes; when config['x'] > 0.5, its k-th attempt (counted by marker
    files in config['fail_dir']) raises at epoch config['fail_at'][k]. Each result carries the attempt,
    the epoch the attempt started at and the trial's seed (``seed_seen``: tuner.trial.seed())."""
    start = _start_epoch()
    prefix = os.path.join(config["fail_dir"], f"failed-{config['x']!r}-")
    attempt = sum(os.path.exists(f"{prefix}{k}") for k in range(len(config["fail_at"])))
    for epoch in range(start, int(config["epochs"])):
        if config["x"] > 0.5 and attempt < len(config["fail_at"]) and epoch == config["fail_at"][attempt]:
            open(f"{prefix}{attempt}", "w").close()
            raise RuntimeError(f"attempt {attempt} fails at epoch {epoch}")
        trial.report({"loss": config["x"] + 1.0 / (epoch + 1), "epoch": epoch, "start": start, "attempt": attempt,
                      "seed_seen": trial.seed()}, checkpoint_dir=_epoch_checkpoint(epoch))


def held_on_node_gated(config):
    """``tests.cluster_trainables.held_on_node`` whose trials elsewhere wait for the held one.

    On the node ``hold_node`` it stops for good at epoch ``hold_at`` (writing ``hold_file``), as
    ``held_on_node`` does. On any other node, it waits at epoch ``hold_at`` until ``hold_file``
    exists (up to 10 minutes, then fails), so the trials on the other nodes cannot end, and free an
    actor that Ray would reuse, before a trial has started on ``hold_node`` and reached its hold,
    however slowly that node starts its worker. A trial restarted elsewhere after the hold finds
    the file and goes on.
    """
    import time
    from pathlib import Path

    import ray

    node = ray.get_runtime_context().get_node_id()
    held = Path(config["hold_file"])
    start = _start_epoch()
    for epoch in range(start, int(config["epochs"])):
        if epoch == config["hold_at"]:
            if node == config["hold_node"]:
                held.write_text(node)
                for _ in range(600):
                    time.sleep(1)
                raise RuntimeError(f"the node {node} was not killed")
            for _ in range(3000):
                if held.exists():
                    break
                time.sleep(0.2)
            else:
                raise RuntimeError(f"no trial was held on the node {config['hold_node']}")
        time.sleep(config.get("sleep", 0.5))
        trial.report({"loss": config["x"] + 1.0 / (epoch + 1), "epoch": epoch, "node": node},
                     checkpoint_dir=_epoch_checkpoint(epoch))


def _say_held(gate: str, iteration: int) -> None:
    """Add ``<trial id> <results reported so far>`` as a line to ``<gate>.held`` (the test's gate)."""
    from ray import tune

    with open(gate + ".held", "a") as f:
        f.write(f"{tune.get_context().get_trial_id()} {iteration}\n")


def held_until_gate(config):
    """steady's checkpoints without its sleep, and one trial held: the ``config['hold']``-th trial to
    start afresh (from 0; each claims its number with a file ``<config['gate']>.start<N>``) adds its id
    to ``<gate>.held`` (:func:`_say_held`), then waits for the file ``config['gate']`` before its first
    epoch. (By start order, not by trial id: a searcher's trial ids are random.) loss = x + 1/(epoch + 1)."""
    import time

    start = _start_epoch()
    if start == 0 and not os.path.exists(config["gate"]):
        number = 0
        while True:
            try:
                os.close(os.open(f"{config['gate']}.start{number}", os.O_CREAT | os.O_EXCL))
                break
            except FileExistsError:
                number += 1
        if number == int(config["hold"]):
            _say_held(config["gate"], 0)
            while not os.path.exists(config["gate"]):
                time.sleep(0.1)
    for epoch in range(start, int(config["epochs"])):
        trial.report({"loss": config["x"] + 1.0 / (epoch + 1), "epoch": epoch}, checkpoint_dir=_epoch_checkpoint(epoch))


# --------------------------------------------------------------------------- PBT toys (tests/test_pbt.py)


def _pbt_state() -> dict:
    """The state in the trial's checkpoint: ``{"epoch", "total", "x"}`` (x: the config of the trial that
    wrote it), or a fresh one with ``epoch`` -1 and ``x`` None."""
    ckpt = trial.get_checkpoint()
    if not ckpt:
        return {"epoch": -1, "total": 0.0, "x": None}
    with open(os.path.join(ckpt, "state.json")) as f:
        return json.load(f)


def _pbt_checkpoint(state: dict):
    if not trial.is_main_process():
        return None
    folder = tempfile.mkdtemp()
    with open(os.path.join(folder, "state.json"), "w") as f:
        json.dump(state, f)
    return folder


def _pbt_hold(config: dict, epoch: int) -> None:
    """With ``config['gate']``: before epoch ``config['hold_at']``, add the trial to ``<gate>.held``
    (:func:`_say_held`; an epoch a result) and wait for the file ``<gate>``."""
    import time

    gate = config.get("gate")
    if gate and epoch == int(config.get("hold_at", -1)) and not os.path.exists(gate):
        _say_held(gate, epoch)
        while not os.path.exists(gate):
            time.sleep(0.1)


def _restored_from() -> dict:
    """Where the trial's checkpoint lies, as Ray names it: ``restored_from`` (the folder's path in its
    filesystem, "" without a checkpoint) and ``restored_inode`` (the inode of its ``state.json`` on a local
    disk, else -1), so a test can tell a PBT clone's source and whether it is a hard link."""
    from ray import tune

    ckpt = tune.get_checkpoint()
    if ckpt is None:
        return {"restored_from": "", "restored_inode": -1}
    local = ckpt.filesystem is not None and ckpt.filesystem.type_name == "local"
    inode = os.stat(os.path.join(ckpt.path, "state.json")).st_ino if local else -1
    return {"restored_from": ckpt.path.rstrip("/"), "restored_inode": inode}


def accumulates(config):
    """PBT's toy: ``score`` grows by ``config['x']`` each iteration, and the running total is the state
    kept in the checkpoint (with the x of the trial that wrote it). A trial restored from a checkpoint
    reports what it restored: ``restored_x`` (-1 without) and ``restored_total``, and where that checkpoint
    lay (:func:`_restored_from`); so after an exploit the bottom trial shows the top trial's x and total,
    and its own new x."""
    state = _pbt_state()
    restored_x = -1.0 if state["x"] is None else state["x"]
    restored_total = state["total"]
    total = state["total"]
    where = _restored_from()
    for epoch in range(state["epoch"] + 1, int(config["epochs"])):
        _pbt_hold(config, epoch)
        total += config["x"]
        trial.report({"score": total, "epoch": epoch, "x": config["x"], "restored_x": restored_x,
                      "restored_total": restored_total, "seed_seen": trial.seed(), **where},
                     checkpoint_dir=_pbt_checkpoint({"epoch": epoch, "total": total, "x": config["x"]}))


def clone_sources_member(config):
    """A PBT population member that watches PBT's clone sources: ``score`` grows by ``lr`` each iteration
    (a checkpoint every iteration, holding the iteration and the score), ``max_t`` iterations. It reports
    where its checkpoint lay (:func:`_restored_from`), and before each report appends a JSON line to the
    file ``config['watch']``: ``{"trial", "iteration", "clones"}``, the names in the folder
    ``config['clones']`` then (one line per write, appended: the lines are in the order they were seen)."""
    from ray import tune

    trial_id = tune.get_context().get_trial_id()
    state = {"iteration": 0, "score": 0.0}
    ckpt = trial.get_checkpoint()
    if ckpt:
        with open(os.path.join(ckpt, "state.json")) as f:
            state = json.load(f)
    where = _restored_from()
    for i in range(state["iteration"] + 1, int(config["max_t"]) + 1):
        state = {"iteration": i, "score": state["score"] + float(config["lr"])}
        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, "state.json"), "w") as f:
            json.dump(state, f)
        clones = sorted(os.listdir(config["clones"])) if os.path.isdir(config["clones"]) else []
        with open(config["watch"], "a") as f:
            f.write(json.dumps({"trial": trial_id, "iteration": i, "clones": clones}) + "\n")
        trial.report({"score": state["score"], "lr": float(config["lr"]), "iteration": i, **where},
                     checkpoint_dir=folder)


def accumulates_ddp(config):
    """:func:`accumulates` as a DDP trial: every rank keeps the total, restores it from the checkpoint, and
    rank 0 reports what each rank holds (``ranks``: JSON ``[[x, restored_x, restored_total], ...]``) and the
    state of every placement group of the Ray cluster when the worker group started (``groups``: JSON
    ``{group id: state}``, from ``ray.util.placement_group_table``)."""
    import ray
    import torch.distributed as dist

    groups = json.dumps({pg_id: row["state"] for pg_id, row in ray.util.placement_group_table().items()})

    state = _pbt_state()
    restored_x = -1.0 if state["x"] is None else state["x"]
    restored_total = state["total"]
    total = state["total"]
    for epoch in range(state["epoch"] + 1, int(config["epochs"])):
        total += config["x"]
        mine = [config["x"], restored_x, restored_total]
        ranks = [None] * trial.world_size()
        if trial.world_size() > 1:
            dist.all_gather_object(ranks, mine)
        else:
            ranks = [mine]
        trial.report({"score": total, "epoch": epoch, "x": config["x"], "restored_x": restored_x,
                      "restored_total": restored_total, "world_size": trial.world_size(),
                      "ranks": json.dumps(ranks), "groups": groups},
                     checkpoint_dir=_pbt_checkpoint({"epoch": epoch, "total": total, "x": config["x"]}))


class Accumulates(_tune.Trainable):
    """:func:`accumulates` as a class trainable, with ``reset_config`` (so PBT reuses its actor) and
    ``resets`` reported: how often its actor was reset for a new config."""

    def setup(self, config):
        self.state = {"epoch": -1, "total": 0.0, "x": None}
        self.restored_x, self.restored_total, self.resets = -1.0, 0.0, 0

    def step(self):
        x = self.config["x"]
        self.state = {"epoch": self.state["epoch"] + 1, "total": self.state["total"] + x, "x": x}
        return {"score": self.state["total"], "epoch": self.state["epoch"], "x": x, "restored_x": self.restored_x,
                "restored_total": self.restored_total, "resets": self.resets}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "state.json"), "w") as f:
            json.dump(self.state, f)

    def load_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "state.json")) as f:
            self.state = json.load(f)
        self.restored_x, self.restored_total = self.state["x"], self.state["total"]

    def reset_config(self, new_config):
        resets = self.resets
        self.setup(new_config)
        self.resets = resets + 1
        return True


def pbt_member(config):
    """A PBT population member: ``score`` grows by ``lr`` each iteration (so a larger lr is better).

    Checkpoints every iteration and continues from the checkpoint it is given (its own after a
    pause, the cloned trial's after an exploit); reports ``lr`` and ``opt.width`` (as ``width``, 0
    without one) too, so a test sees when they changed.
    """
    state = {"i": 0, "score": 0.0}
    ckpt = trial.get_checkpoint()
    if ckpt:
        with open(os.path.join(ckpt, "state.json")) as f:
            state = json.load(f)
    for i in range(state["i"], int(config.get("epochs", 8))):
        state = {"i": i + 1, "score": state["score"] + float(config["lr"])}
        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, "state.json"), "w") as f:
            json.dump(state, f)
        trial.report({"score": state["score"], "lr": float(config["lr"]), "seed_seen": trial.seed(),
                      "width": int((config.get("opt") or {}).get("width", 0))}, checkpoint_dir=folder)


def accuracy_cost(config):
    """Two objectives with a known Pareto front: ``accuracy`` (max) against ``cost`` (min).

    At the last iteration ``accuracy = x - y / 2`` and ``cost = x ** 2 + y / 2`` (the earlier
    iterations report half the accuracy). A trial with ``y > 0`` is dominated by one with ``y = 0``
    and ``x' = x - y / 2`` (same accuracy, lower cost), so the true front is ``y = 0``: cost =
    accuracy ** 2. ``latency_ms = 40 x`` is a third metric to constrain (``latency_ms <= 30``
    is ``x <= 0.75``).
    """
    x, y = float(config["x"]), float(config["y"])
    epochs = int(config.get("epochs", 2))
    for i in range(epochs):
        scale = 1.0 if i == epochs - 1 else 0.5
        trial.report({"accuracy": (x - y / 2) * scale, "cost": x ** 2 + y / 2, "latency_ms": 40.0 * x})


def _config_keys(config: dict) -> str:
    """A config's parameter names as a train function sees them: ``/``-joined, sorted, comma-separated."""
    def names(tree: dict, prefix: str = ""):  # every key, an empty mapping too (flatten would skip one)
        for k, v in tree.items():
            if isinstance(v, dict) and v:
                yield from names(v, f"{prefix}{k}/")
            else:
                yield f"{prefix}{k}"

    return ",".join(sorted(names(config)))


def _branchy_loss(config: dict) -> float:
    if config.get("optimizer") in ("sgd", "rmsprop"):
        loss = (float(config["momentum"]) - 0.9) ** 2
    else:
        loss = 0.05 + (float(config["beta2"]) - 0.99) ** 2
    model = config.get("model")
    if isinstance(model, dict):
        loss += abs(int(model["channels"]) - 32) / 100 if model["name"] == "cnn" else 0.1
    return loss


def branchy(config):
    """A conditional space's toy: the loss depends on the branch taken (sgd or rmsprop with momentum, adam with beta2; a cnn
    with channels, an mlp with hidden) and falls over ``epochs`` iterations. Reports ``keys``, the config's
    parameter names as the train function saw them (``/``-joined, sorted), so a test can see an inactive one."""
    keys, loss = _config_keys(config), _branchy_loss(config)
    for i in range(int(config.get("epochs", 2))):
        trial.report({"loss": loss + 1.0 / (i + 1), "keys": keys})


def branchy_pbt(config):
    """:func:`branchy` with a checkpoint every iteration, for PBT: the checkpoint holds the iteration and the
    ``keys`` of the config that wrote it, and a trial restored from one reports them as ``restored_keys``
    ("" when it started afresh), so a test sees whose checkpoint a clone went on from."""
    keys, loss = _config_keys(config), _branchy_loss(config)
    state = {"iteration": 0, "keys": ""}
    ckpt = trial.get_checkpoint()
    if ckpt:
        with open(os.path.join(ckpt, "state.json")) as f:
            state = json.load(f)
    restored = state["keys"]
    for i in range(state["iteration"], int(config.get("epochs", 2))):
        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, "state.json"), "w") as f:
            json.dump({"iteration": i + 1, "keys": keys}, f)
        trial.report({"loss": loss + 1.0 / (i + 1), "keys": keys, "restored_keys": restored}, checkpoint_dir=folder)


def gpu_footprint(config):
    """A trial as ``gpu: auto`` sees it on Ray's logical GPUs: each report carries a simulated GPU footprint
    (``gpu_memory_reserved_bytes = batch_size x bytes_per_sample``) and the GPU's memory
    (``gpu_memory_total_bytes = gpu_bytes``), with the GPU share Ray gave the trial (``share_seen``).
    With ``oom_share_below``, a trial whose share is below it raises a simulated CUDA out-of-memory error
    at its second report (the first attempt only: ``oom_once_dir`` holds a marker per trial).
    With ``together_file``, once that file exists (it holds a number N), a trial marks its start in
    ``<together_file>.d`` and, after its first report, waits until N trials have marked theirs: N ran at
    once, or the trials fail after 10 minutes."""
    import time

    import ray
    import torch

    share = float(ray.get_runtime_context().get_assigned_resources().get("GPU", 0.0))
    trial_id = ray.tune.get_context().get_trial_id()
    together = config.get("together_file")
    n_together = int(open(together).read()) if together and os.path.exists(together) else 0
    if n_together:
        os.makedirs(together + ".d", exist_ok=True)
        open(os.path.join(together + ".d", trial_id), "w").close()

    def log(event: str) -> None:  # "<event> <time> <trial id>" lines: which trials ran at once
        if config.get("log"):
            with open(config["log"], "a") as f:
                f.write(f"{event} {time.time()!r} {trial_id}\n")

    log("start")
    start = _start_epoch()
    for epoch in range(start, int(config.get("epochs", 3))):
        if n_together and epoch == 1:
            _wait_for_marks(together + ".d", n_together, timeout_s=600)
        below = config.get("oom_share_below")
        if below and epoch == 1 and share < below:
            marker = os.path.join(config["oom_once_dir"], trial_id)
            if not os.path.exists(marker):
                open(marker, "w").close()
                raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (simulated) at a share of {share}")
        log("report")  # before the call: a trial stopped at this result never returns from it
        trial.report({"loss": 1.0 / (epoch + 1) + float(config.get("x", 0.0)), "share_seen": share,
                      "gpu_memory_reserved_bytes": int(config["batch_size"]) * int(config["bytes_per_sample"]),
                      "gpu_memory_total_bytes": int(config["gpu_bytes"])}, checkpoint_dir=_epoch_checkpoint(epoch))
