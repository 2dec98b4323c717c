"""Cloud storage (``storage: s3://...``) against a real S3 API: moto's server on localhost.

Ray Tune keeps the experiment in the bucket (through pyarrow's S3 filesystem, from the
trial workers too); tuner's own files go beside Ray's; resume and report read from it.
"""

import json
import logging
import os
import socket

import pandas as pd
import pytest
import yaml

from tuner.experiment.layout import EXPORT_METRICS, EXPORT_MODEL_DIR

# One xdist worker runs this file: its module-scoped fixture is built once (pyproject's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_cloud_storage")

moto_server = pytest.importorskip("moto.server", reason="moto[server] (the test extra) is needed for an S3 API")

SPEC = """\
name: cloud
trainable: tests.trainables:crashes_once
metric: loss
mode: min
num_samples: 2
seed: 0
param_space:
  x: {type: uniform, low: 0, high: 1}
  epochs: 3
  fail_at_epoch: 1
  fail_dir: FAIL_DIR
resources: {cpu: 1}
failure: {max_failures: 1}
reporting: {cli: false}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server with one bucket; yields (storage URI, env for the tuner subprocesses)."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "TUNER_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))}
    query = f"?endpoint_override=http://127.0.0.1:{port}&region=us-east-1"
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        import pyarrow.fs as pafs

        fs, _ = pafs.FileSystem.from_uri("s3://tuner-test" + query + "&allow_bucket_creation=true")
        fs.create_dir("tuner-test")
        yield "s3://tuner-test/runs" + query, env, fs
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


def _files(fs, prefix):
    import pyarrow.fs as pafs

    return {i.path[len(prefix) + 1:]: i for i in fs.get_file_info(pafs.FileSelector(prefix, recursive=True,
                                                                                     allow_not_found=True))}


def _read(fs, path) -> str:
    with fs.open_input_stream(path) as f:
        return f.read().decode()


def keyed(storage: str) -> str:
    """The storage URI with the bucket's keys in its user info (``s3://KEY:SECRET@bucket/...``, which pyarrow
    reads), for a run on the session's Ray, whose processes never saw the keys in the environment."""
    return storage.replace("s3://", "s3://testing:testing@", 1)


@pytest.mark.slow
def test_s3_storage_run_resume_report_list(s3, tmp_path, run_cli, on_session_ray):
    """Each trial's process dies once and the trial goes on from its checkpoint in the bucket."""
    storage, env, fs = s3
    spec = tmp_path / "cloud.yaml"
    body = SPEC.replace("FAIL_DIR", str(tmp_path))
    spec.write_text(body)
    proc = run_cli("run", spec, "--num-cpus", "2", "--storage", storage, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Experiment cloud: s3://tuner-test/runs/cloud (local mirror: " in proc.stdout
    assert "Results: s3://tuner-test/runs/cloud (summary.json, results.csv, best_config.yaml; local mirror: " \
        in proc.stdout
    files = _files(fs, "tuner-test/runs/cloud")
    for name in ("spec.yaml", "tuner_run.json", "summary.json", "results.csv", "best_config.yaml", "tuner.log",
                 "tuner.pkl"):
        assert name in files, f"{name} not in the bucket: {sorted(files)}"
    assert any(n.startswith("experiment_state-") for n in files)
    trials = {n.split("/")[0] for n in files if n.startswith("crashes_once_")}
    assert len(trials) == 2
    for t in trials:  # Ray's per-trial files and every checkpoint, uploaded by the trial workers
        assert {f"{t}/result.json", f"{t}/progress.csv", f"{t}/checkpoint_000002/state.json"} <= set(files)
    summary = json.loads(_read(fs, "tuner-test/runs/cloud/summary.json"))
    assert summary["location"] == "s3://tuner-test/runs/cloud"
    assert summary["trials"]["by_status"] == {"TERMINATED": 2}
    assert summary["best"]["checkpoint"].startswith("s3://tuner-test/runs/cloud/crashes_once_")
    assert summary["best"]["checkpoint"].endswith("/checkpoint_000002")
    first = pd.read_csv(fs.open_input_stream("tuner-test/runs/cloud/results.csv"))
    assert list(first["start"]) == [1, 1] and list(first["epoch"]) == [2, 2], \
        "each trial crashed at epoch 1 and went on from the checkpoint of epoch 0, read from the bucket"
    assert len(list(tmp_path.glob("crashed-*"))) == 2
    for name in ("tuner_run.json", "summary.json", "spec.yaml"):  # the URI's query (endpoint, keys) stays out
        assert "endpoint_override" not in _read(fs, f"tuner-test/runs/cloud/{name}"), name

    # The same name again, given explicitly: refused before anything starts.
    again = run_cli("run", spec, "--num-cpus", "2", "--storage", storage, "--name", "cloud", env=env)
    assert again.returncode == 2
    assert "the experiment folder s3://tuner-test/runs/cloud already exists" in again.stderr
    # Without --name it would go on as cloud-2, as on a local disk (`tuner validate` plans it, from the bucket).
    plan = run_cli("validate", spec, "--num-cpus", "2", "--storage", storage, env=env)
    assert plan.returncode == 0, plan.stderr
    assert "s3://tuner-test/runs/cloud holds an experiment already, so this run goes to cloud-2" in plan.stdout

    # Resume from the URI with a larger budget: Tuner.restore reads the bucket, adds one trial. (On the session's
    # Ray, the keys in the URI: the run above showed the environment's keys reaching the trials.)
    spec.write_text(body.replace("num_samples: 2", "num_samples: 3"))
    location = storage.replace("/runs?", "/runs/cloud?")
    proc = run_cli("resume", keyed(location), "--spec", spec, env={**env, **on_session_ray})
    assert proc.returncode == 0, proc.stderr
    files_after = _files(fs, "tuner-test/runs/cloud")
    assert len({n.split("/")[0] for n in files_after if n.startswith("crashes_once_")}) == 3
    for t in trials:  # the finished trials were not run again
        assert files_after[f"{t}/result.json"].size == files[f"{t}/result.json"].size
    results = pd.read_csv(fs.open_input_stream("tuner-test/runs/cloud/results.csv"))
    assert len(results) == 3 and set(results["status"]) == {"TERMINATED"} and list(results["start"]) == [1] * 3
    assert yaml.safe_load(_read(fs, "tuner-test/runs/cloud/spec.yaml"))["num_samples"] == 3

    # report and list read the bucket (through the local mirror).
    rep = run_cli("report", location, "--format", "json", env=env)
    assert rep.returncode == 0, rep.stderr
    assert len(json.loads(rep.stdout)["trials"]) == 3
    listed = run_cli("list", storage, env=env)
    assert listed.returncode == 0, listed.stderr
    assert "cloud" in listed.stdout
    # dashboard serves the bucket through the same local mirror: the experiment's study and its 3 trials.
    from tests.test_dashboard import Dashboard

    dash = Dashboard(storage, env=env)
    try:
        assert "1 experiment in s3://tuner-test/runs;" in dash.lines[-1], dash.lines  # the URI's query left out
        study = dash.studies()["cloud"]
        assert sorted(t["state"] for t in dash.trials(study["study_id"])) == ["Complete"] * 3
    finally:
        code, _, err = dash.stop()
    assert code == 0, err

    # export copies the best trial's best checkpoint from the bucket (loss falls: epoch 2's).
    out = tmp_path / "exported"
    exported = run_cli("export", location, "--to", out, env=env)
    assert exported.returncode == 0, exported.stderr
    assert json.loads((out / EXPORT_MODEL_DIR / "state.json").read_text()) == {"epoch": 2}
    metrics = json.loads((out / EXPORT_METRICS).read_text())
    best = json.loads(_read(fs, "tuner-test/runs/cloud/summary.json"))["best"]
    assert (metrics["trial_id"], metrics["metric"], metrics["training_iteration"]) == (best["trial_id"], "loss", 3)
    assert metrics["experiment"] == "s3://tuner-test/runs/cloud" and metrics["checkpoint"] == best["checkpoint"]


def test_unreachable_bucket_is_a_clear_error_before_anything_starts(s3, tmp_path, run_cli):
    from tuner.experiment.storage import join, mirror_dir

    _, env, _ = s3
    spec = tmp_path / "cloud.yaml"
    spec.write_text(SPEC.replace("FAIL_DIR", str(tmp_path)))
    port = _free_port()  # nothing listens there (pyarrow retries for about 6 s)
    storage = f"s3://tuner-test/runs?endpoint_override=http://127.0.0.1:{port}&region=us-east-1"
    # A name of its own: the local mirror of s3://tuner-test/runs/unreachable is this test's alone.
    mirror = mirror_dir(join(storage, "unreachable"))
    assert str(mirror).startswith(env["TUNER_CACHE_DIR"])
    proc = run_cli("run", spec, "--storage", storage, "--name", "unreachable", env=env)
    assert proc.returncode == 2
    first = proc.stderr.splitlines()[0]
    # The --storage option is named without its query (the endpoint): URIs' options stay out of messages.
    assert first.startswith("tuner: error: --storage s3://tuner-test/runs: storage: cannot list "
                            "s3://tuner-test/runs/unreachable: "), first
    assert "Could not connect to server" in first
    assert first.endswith("Check the URI and the credentials of this machine (AWS_* variables, "
                          "GOOGLE_APPLICATION_CREDENTIALS, ...); every Ray node needs them too.")
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    # An option pyarrow does not know: its own words, before anything starts.
    proc = run_cli("run", spec, "--storage", storage + "&request_timeout=1", "--name", "unreachable", env=env)
    assert proc.returncode == 2
    assert ("storage: cannot open s3://tuner-test/runs/unreachable: Unexpected query parameter in S3 URI: "
            "'request_timeout'.") in proc.stderr
    # Nothing written: the run records, the lock and the mirror go under TUNER_CACHE_DIR.
    assert not mirror.exists(), sorted(str(p.relative_to(mirror)) for p in mirror.rglob("*"))
    # tuner dashboard on the unreachable bucket: the same one paragraph, exit 2, before it serves; no mirror. (A
    # folder of its own: the mirror of s3://tuner-test/runs is the other tests'.)
    storage = storage.replace("/runs?", "/dashboard-unreachable?")
    proc = run_cli("dashboard", storage, "--port", "0", env=env)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.startswith("tuner: error: tuner dashboard: cannot download s3://tuner-test/dashboard-unreachable: "), \
        proc.stderr
    assert proc.stderr.endswith("Could not connect to server. Check the URI and the credentials of this machine "
                                "(AWS_* variables, GOOGLE_APPLICATION_CREDENTIALS, ...).\n"), proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert not mirror_dir(storage).exists()


@pytest.mark.slow
def test_s3_storage_ddp_trial_checkpoints_into_the_bucket(s3, tmp_path, run_cli, on_session_ray):
    """A DDP trial's Ray Train run keeps its checkpoints in the bucket, under the trial's folder,
    and after a worker crash the new worker group goes on from the checkpoint there. (A group of one
    worker: that every rank restores is test_ddp's; here each worker would cost a process start. On the
    session's Ray, the keys in the URI: that the environment's keys reach the trials is the first test's.)"""
    storage, env, fs = s3
    spec = tmp_path / "ddp.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "cloud-ddp", "trainable": "tests.trainables:ddp_probe", "metric": "loss", "mode": "min",
        "num_samples": 1, "param_space": {"x": 0.5, "epochs": 3, "fail_at_epoch": 0,
                                          "fail_marker": str(tmp_path / "crashed-once")},
        "failure": {"max_failures": 1},
        "resources": {"workers": 1, "cpu_per_worker": 1}, "reporting": {"cli": False, "tensorboard": False}}))
    proc = run_cli("run", spec, "--storage", keyed(storage), env={**env, **on_session_ray})
    assert proc.returncode == 0, proc.stderr
    files = _files(fs, "tuner-test/runs/cloud-ddp")
    summary = json.loads(_read(fs, "tuner-test/runs/cloud-ddp/summary.json"))
    assert summary["trials"]["by_status"] == {"TERMINATED": 1}
    assert (tmp_path / "crashed-once").exists(), "the worker crashed once"
    assert json.loads(summary["best"]["metrics"]["starts"]) == [1], "the new group restored epoch 0's checkpoint"
    best = summary["best"]["checkpoint"]
    assert best.startswith("s3://tuner-test/runs/cloud-ddp/ddp_probe_"), best
    trial = best[len("s3://tuner-test/runs/cloud-ddp/"):].split("/")[0]
    assert f"{trial}/.train_placement_group" in files, "rank 0 recorded its placement group in the bucket"
    for name in ("tuner_run.json", "summary.json", "spec.yaml"):  # the URI's keys stay out, as its query does
        assert "testing:testing" not in _read(fs, f"tuner-test/runs/cloud-ddp/{name}"), name
    assert "testing:testing" not in proc.stdout + proc.stderr
    assert any(n.startswith(f"{trial}/") and "/checkpoint_" in n for n in files), sorted(files)


def test_warm_start_reads_an_earlier_experiment_from_the_bucket(s3):
    """search.warm_start names a cloud URI: its spec.yaml and results.csv are read from the bucket (no Ray)."""
    from tests.fixtures.paths import ROOT
    from tuner.experiment.layout import RESULTS_CSV, SPEC_SNAPSHOT
    from tuner.spec import SpecError, load_spec
    from tuner.search.warm_start import load_warm_start

    storage, _, fs = s3
    base, query = storage.split("?", 1)
    folder = base[len("s3://"):] + "/warm-earlier"
    for name in (SPEC_SNAPSHOT, RESULTS_CSV):
        with fs.open_output_stream(f"{folder}/{name}") as f:
            f.write((ROOT / "tests" / "warm_start" / "earlier" / name).read_bytes())
    spec = {"trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min",
            "param_space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0}, "epochs": 2},
            "search": {"algorithm": "optuna", "warm_start": [f"{base}/warm-earlier?{query}"]}}
    warm = load_warm_start(load_spec(spec))
    assert [t.trial_id for t in warm.trials] == ["a0000001", "a0000002", "a0000003", "a0000004", "a0000007"]
    assert warm.sources[0].where == f"{base}/warm-earlier"  # shown without the query
    spec["search"]["warm_start"] = [f"{base}/nowhere?{query}"]
    with pytest.raises(SpecError, match="holds no tuner experiment: no spec.yaml there"):
        load_warm_start(load_spec(spec))


@pytest.mark.slow
def test_s3_storage_pbt_clones_from_a_copy_in_the_bucket(s3, tmp_path, run_cli, on_session_ray):
    """PBT on cloud storage: the bottom trial restores from tuner's copy of the top trial's checkpoint in the
    bucket's pbt_clones/ (a copy: the bucket has no hard links), and the copy is gone after the run. (On the
    session's Ray, the keys in the URI.)"""
    from tests.test_pbt import SPEC as PBT

    storage, env, fs = s3
    spec = tmp_path / "pbt.yaml"
    spec.write_text(yaml.safe_dump({**PBT, "name": "cloud-pbt"}))
    proc = run_cli("run", spec, "--storage", keyed(storage), env={**env, **on_session_ray})
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(_read(fs, "tuner-test/runs/cloud-pbt/summary.json"))
    assert summary["trials"]["by_status"] == {"TERMINATED": 2}
    (exploit,) = summary["perturbations"]
    files = _files(fs, "tuner-test/runs/cloud-pbt")
    rows = {}
    for name in files:
        if name.endswith("/result.json"):
            history = [json.loads(line) for line in _read(fs, f"tuner-test/runs/cloud-pbt/{name}").splitlines()]
            rows[history[0]["trial_id"]] = history
    after = [r for r in rows[exploit["trial_id"]] if r["training_iteration"] > 2]
    copy = f"tuner-test/runs/cloud-pbt/pbt_clones/{exploit['cloned_from']}-2"
    assert after and {(r["restored_from"], r["restored_inode"]) for r in after} == {(copy, -1)}, after
    assert all(r["restored_x"] == 1.0 and r["restored_total"] == pytest.approx(2.0) for r in after), after
    assert not [n for n in files if n.startswith("pbt_clones")], "the copy is deleted after the run"
