"""W&B (offline) and MLflow (local file store) through Ray's own logger callbacks, in one real run;
WANDB_API_KEY stays out of every file the run leaves; a missing extra is refused before anything starts."""

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.paths import ROOT

# One xdist worker runs this file: its module-scoped fixture is built once (pyproject's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_integrations")

SECRET = "tunertestsecret0123456789abcdef0123456789"  # 40 characters, like a W&B key
SPEC = """\
name: integ
trainable: tests.trainables:steady
metric: loss
mode: min
num_samples: 2
seed: 0
param_space:
  x: {type: uniform, low: 0, high: 1}
  opt: {type: choice, values: [adam, sgd]}
  epochs: 3
  sleep: 0
scheduler: {type: asha, max_t: 3, grace_period: 1, reduction_factor: 2}
resources: {cpu: 1}
reporting:
  cli: false
  wandb: {project: tuner-test, mode: offline}
  mlflow: {tracking_uri: "file:./mlruns", experiment_name: integ-mlflow}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory, run_cli):
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    tmp = tmp_path_factory.mktemp("integ")
    (tmp / "integ.yaml").write_text(SPEC)
    # Relative tracking URI, as in the README: relative to the folder tuner runs in.
    env = {"WANDB_API_KEY": SECRET, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = run_cli("run", tmp / "integ.yaml", "--num-cpus", "2", "--storage", tmp / "runs", cwd=tmp, env=env)
    assert proc.returncode == 0, proc.stderr
    return type("Run", (), {"tmp": tmp, "exp": tmp / "runs" / "integ", "proc": proc})


def trial_results(exp: Path) -> dict[str, list[dict]]:
    out = {}
    for folder in sorted(p for p in exp.iterdir() if (p / "result.json").is_file()):
        lines = [json.loads(line) for line in (folder / "result.json").read_text().splitlines()]
        out[lines[0]["trial_id"]] = lines
    return out


def wandb_records(file: Path):
    """The protobuf records of a W&B run file (``run-*.wandb``): a LevelDB-style log of 32 KiB
    blocks after a 7-byte ``:W&B`` header, each chunk with a 7-byte header (crc, length, type)."""
    from wandb.proto import wandb_internal_pb2

    data = file.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):  # FULL or LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def test_wandb_offline_run_folder_holds_the_metrics(run):
    for trial_id, results in trial_results(run.exp).items():
        folders = list(run.exp.glob(f"*_{trial_id}/wandb/offline-run-*"))
        assert len(folders) == 1, f"one offline W&B run for {trial_id}"
        files = list(folders[0].glob("run-*.wandb"))
        assert len(files) == 1
        history, run_info, kinds = {}, None, []
        for record in wandb_records(files[0]):
            kind = record.WhichOneof("record_type")
            kinds.append(kind)
            if kind == "history":
                items = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item}
                history[items["training_iteration"]] = items
            elif kind == "run":
                run_info = record.run
        assert run_info is not None, (files[0].stat().st_size, kinds, run.proc.stderr[-3000:])
        assert run_info.project == "tuner-test" and run_info.run_id == trial_id
        assert run_info.run_group == "integ"
        assert sorted(history) == [r["training_iteration"] for r in results]
        for r in results:
            assert history[r["training_iteration"]]["loss"] == pytest.approx(r["loss"])


def test_wandb_and_mlflow_leave_stderr_empty(run):
    """Ray's W&B logging actor logged a Ray core error for its restart policy (ray-project/ray#53727),
    and Ray's ``WandbLoggerCallback.__del__`` raised at interpreter exit ("Exception ignored in")."""
    assert run.proc.stderr == ""


def test_mlflow_runs_and_metrics_read_back(run, monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri((run.tmp / "mlruns").as_uri())
    runs = mlflow.search_runs(experiment_names=["integ-mlflow"])
    results = trial_results(run.exp)
    assert len(runs) == len(results) == 2
    client = mlflow.MlflowClient()
    for _, row in runs.iterrows():
        trial_id = row["tags.trial_name"].split("_", 1)[1]
        reported = results[trial_id]
        assert row["status"] == "FINISHED"
        assert float(row["params.x"]) == pytest.approx(reported[0]["config"]["x"])
        assert row["params.opt"] == reported[0]["config"]["opt"]
        assert row["metrics.loss"] == pytest.approx(reported[-1]["loss"])
        history = {m.step: m.value for m in client.get_metric_history(row["run_id"], "loss")}
        assert history == pytest.approx({r["training_iteration"]: r["loss"] for r in reported})


def test_api_key_is_never_written(run):
    """WANDB_API_KEY is in the environment of the run; no file it leaves, and not the console, holds it."""
    assert SECRET not in run.proc.stdout + run.proc.stderr
    checked = 0
    for root in (run.exp, run.tmp / "mlruns"):
        for dirpath, _, files in os.walk(root):  # not into ray_logs: a link to Ray's own session logs
            for name in files:
                data = (Path(dirpath) / name).read_bytes()
                assert SECRET.encode() not in data, Path(dirpath) / name
                checked += 1
    assert checked > 20
    assert {"spec.yaml", "summary.json", "tuner.log", "results.csv", "tuner_run.json"} <= {
        p.name for p in run.exp.iterdir()}
    # Ray's session logs either: the key is not passed through a runtime_env the logs record.
    logs = run.exp / "ray_logs"
    if logs.is_dir():
        for file in logs.rglob("*"):
            if file.is_file():
                assert SECRET.encode() not in file.read_bytes(), file


@pytest.mark.parametrize("extra", ["wandb", "mlflow"])
def test_missing_extra_is_refused_before_anything_starts(tmp_path, extra):
    """Without the package, `tuner run` exits 2 naming `pip install tuner[...]`; Ray never starts."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    storage = tmp_path / "runs"
    # Block the import as if the package were not installed (sys.modules[name] = None).
    code = (f"import sys; sys.modules[{extra!r}] = None; from tuner.cli import main; "
            f"main(['run', {str(spec)!r}, '--num-cpus', '2', '--storage', {str(storage)!r}])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("tuner: error: ") and f"pip install tuner[{extra}]" in proc.stderr
    assert f"reporting.{extra}" in proc.stderr and "Traceback" not in proc.stderr
    assert not storage.exists(), "nothing written"
