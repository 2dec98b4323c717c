"""Best checkpoints (``checkpoint.score``), the best-trial scope (``best.scope``) and ``tuner export``.

One real ``tuner run`` of two crafted trials (tests.trainables:peaks, a checkpoint at every
epoch): ``peak`` reaches 0.95 at epoch 2 and ends at 0.5, and dies once at epoch 4;
``steady`` climbs to 0.7. Under ``best.scope: all`` the best trial is ``peak`` (under ``last``
it would be ``steady``), its best checkpoint is epoch 2's, it keeps the best 2 checkpoints and
the newest, and its restart after the crash went on from the newest checkpoint, not the best.
The pure rules of :mod:`tuner.core.best` are tested without Ray.
"""

import json
import math
from typing import get_args
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.fixtures.cli import imported_modules
from tuner.core.best import SCOPES, analysis_value, best_checkpoint, scope_value
from tuner.experiment.layout import (CHECKPOINT_PREFIX, EXPORT_CONFIG, EXPORT_FILES, EXPORT_METRICS, EXPORT_MODEL_DIR,
                                     EXPORT_README, EXPORT_SPEC, RESULTS_CSV, SPEC_SNAPSHOT, SUMMARY)
from tuner.spec import load_spec
from tuner.spec.sections import BestTrial

# One xdist worker runs this file: its module-scoped run is made once (pyproject's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_best_checkpoints")

PEAK = [0.5, 0.9, 0.95, 0.6, 0.55, 0.5]  # best at epoch 2 (iteration 3); last 0.5
STEADY = [0.3, 0.4, 0.5, 0.6, 0.65, 0.7]  # last 0.7: the best under scope last

SPEC = f"""\
name: peaks
trainable: tests.trainables:peaks
metric: val_accuracy
mode: max
param_space:
  run:
    type: grid
    values:
      - {{label: peak, curve: {PEAK}, fail_at_epoch: 4}}
      - {{label: steady, curve: {STEADY}}}
  fail_dir: FAIL_DIR
best: {{scope: all}}
checkpoint: {{num_to_keep: 2}}
failure: {{max_failures: 1}}
resources: {{cpu: 1}}
reporting: {{cli: false, tensorboard: false}}
"""


@pytest.fixture(scope="module")
def peaks_run(tmp_path_factory, run_cli, on_session_ray):
    """The run: (its process, the experiment folder, summary.json, {label: trial id})."""
    tmp = tmp_path_factory.mktemp("peaks")
    (tmp / "fail").mkdir()
    spec = tmp / "peaks.yaml"
    spec.write_text(SPEC.replace("FAIL_DIR", str(tmp / "fail")))
    proc = run_cli("run", spec, "--storage", tmp / "runs", env=on_session_ray)
    assert proc.returncode == 0, proc.stderr[-3000:]
    exp = tmp / "runs" / "peaks"
    summary = json.loads((exp / SUMMARY).read_text())
    labels = {entry["config"]["run"]["label"]: trial_id for trial_id, entry in summary["checkpoints"].items()}
    return proc, exp, summary, labels


def _epoch(checkpoint) -> int:
    return json.loads((checkpoint / "state.json").read_text())["epoch"]


def _kept_epochs(exp, trial_id) -> set[int]:
    folder = next(p for p in exp.iterdir() if p.name.endswith(trial_id))
    return {_epoch(c) for c in folder.iterdir() if c.name.startswith(CHECKPOINT_PREFIX)}


@pytest.mark.slow
def test_scope_all_picks_the_peak_and_its_best_checkpoint(peaks_run):
    proc, exp, summary, labels = peaks_run
    assert f"Best trial {labels['peak']}: val_accuracy=0.5 (scope all: 0.95) config=" in proc.stdout
    assert summary["scope"] == "all"
    assert summary["checkpoint_score"] == {"metric": "val_accuracy", "mode": "max"}
    best = summary["best"]
    assert best["trial_id"] == labels["peak"]
    assert best["score"] == 0.95 and best["metrics"]["val_accuracy"] == 0.5  # scored by its peak, not its last
    assert best["checkpoint_metrics"] == {"metric": "val_accuracy", "value": 0.95, "training_iteration": 3}
    assert _epoch(Path(best["checkpoint"])) == 2  # TuneResult.best_checkpoint: the peak's, not the newest
    # results.csv: ranked by the score, which it shows; the last values alone would rank steady first.
    csv = pd.read_csv(exp / RESULTS_CSV)
    assert list(csv["trial_id"]) == [labels["peak"], labels["steady"]]
    assert list(csv["val_accuracy@all"]) == [0.95, 0.7]
    assert csv["val_accuracy"].iloc[1] > csv["val_accuracy"].iloc[0]
    assert summary["checkpoints"][labels["steady"]]["metrics"] == {"metric": "val_accuracy", "value": 0.7,
                                                                   "training_iteration": 6}


@pytest.mark.slow
def test_the_best_n_and_the_newest_checkpoint_are_kept_and_a_restart_uses_the_newest(peaks_run):
    _, exp, _, labels = peaks_run
    assert _kept_epochs(exp, labels["peak"]) == {1, 2, 5}  # the best 2 (0.9, 0.95) and the newest
    assert _kept_epochs(exp, labels["steady"]) == {4, 5}  # the best 2, the newest among them
    # peak died at epoch 4 when its checkpoints were epochs 1, 2 (the best) and 3 (the newest): it went
    # on from epoch 3's, as a retry and `tuner resume` do (Ray restores a trial's latest checkpoint).
    rows = [json.loads(line) for line in next(p for p in exp.iterdir() if p.name.endswith(labels["peak"]))
            .joinpath("result.json").read_text().splitlines()]
    assert [r["start"] for r in rows if r["epoch"] >= 4] == [4, 4]


@pytest.mark.slow
def test_report_says_the_scope(peaks_run, run_cli):
    _, exp, _, labels = peaks_run
    text = run_cli("report", exp).stdout
    lines = text.splitlines()
    assert lines[1] == "2 trials (2 TERMINATED); metric val_accuracy (max); best trial by scope all"
    assert lines[2] == f"Best trial {labels['peak']} (*): val_accuracy=0.5, all 0.95"
    assert "val_accuracy (all)" in text


@pytest.mark.slow
def test_export_writes_a_self_contained_folder(peaks_run, run_cli, tmp_path):
    _, exp, summary, labels = peaks_run
    out = tmp_path / "best"
    proc = run_cli("export", exp, "--to", out, env={"PYTHONPROFILEIMPORTTIME": "1"})  # -X importtime
    assert proc.returncode == 0, proc.stderr
    imported = imported_modules(proc.stderr)
    assert "yaml" in imported and not [m for m in imported if m == "ray" or m.startswith("ray.")], \
        "export reads summary.json only: Ray is never imported"
    assert proc.stdout == (f"Exported trial {labels['peak']}'s checkpoint: val_accuracy=0.95 at iteration 3 to "
                           f"{out} ({', '.join(EXPORT_FILES)})\n")
    assert sorted(p.name for p in out.iterdir()) == sorted(EXPORT_FILES)
    assert _epoch(out / EXPORT_MODEL_DIR) == 2
    assert yaml.safe_load((out / EXPORT_CONFIG).read_text()) == summary["best"]["config"]
    assert json.loads((out / EXPORT_METRICS).read_text()) == {
        "trial_id": labels["peak"], "metric": "val_accuracy", "value": 0.95, "mode": "max", "training_iteration": 3,
        "best_trial": True, "scope": "all", "experiment": str(exp), "checkpoint": summary["best"]["checkpoint"]}
    assert (out / EXPORT_SPEC).read_text() == (exp / SPEC_SNAPSHOT).read_text()
    readme = (out / EXPORT_README).read_text()
    assert readme.startswith(f"# peaks: trial {labels['peak']}\n")
    assert "its checkpoint at iteration 3, where val_accuracy = 0.95" in readme

    # --trial: that trial's best checkpoint.
    other = tmp_path / "steady"
    assert run_cli("export", exp, "--trial", labels["steady"], "--to", other).returncode == 0
    assert _epoch(other / EXPORT_MODEL_DIR) == 5
    assert json.loads((other / EXPORT_METRICS).read_text())["best_trial"] is False

    # Refusals: exit 2, one paragraph, nothing written.
    before = sorted(p.name for p in out.iterdir())
    refused = run_cli("export", exp, "--to", out)
    assert refused.returncode == 2
    assert refused.stderr == (f"tuner: error: --to: {out} exists and is not an empty folder; give a new folder "
                              "(or an empty one), so that nothing in it is overwritten.\n")
    assert sorted(p.name for p in out.iterdir()) == before
    bogus = run_cli("export", exp, "--trial", "nope_00009", "--to", tmp_path / "bogus")
    assert bogus.returncode == 2 and "trial 'nope_00009' has no checkpoint recorded" in bogus.stderr
    assert not (tmp_path / "bogus").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging folder left


# --------------------------------------------------------------------------- the pure rules


def test_scope_values_follow_rays_definitions():
    values = [1.0, 5.0, 2.0, 3.0, 4.0, 2.0]
    assert scope_value(values, "last", "max") == 2.0
    assert scope_value(values, "all", "max") == 5.0 and scope_value(values, "all", "min") == 1.0
    assert scope_value(values, "last-5-avg", "max") == pytest.approx(16 / 5)
    assert scope_value(values, "last-10-avg", "min") == pytest.approx(17 / 6)  # fewer than 10: all of them
    assert scope_value([1.0, float("nan")], "all", "max") == 1.0
    assert math.isnan(scope_value([1.0, float("nan")], "last-5-avg", "max"))
    assert scope_value([], "last", "max") is None and math.isnan(scope_value([], "all", "max"))
    with pytest.raises(ValueError, match="unknown scope 'median'"):
        scope_value(values, "median", "max")
    assert SCOPES == get_args(BestTrial.model_fields["scope"].annotation) == ("last", "all", "last-5-avg", "last-10-avg")


def test_scope_from_rays_running_summary_matches_the_history():
    """Ray's Trial.metric_analysis (what the console reads) and the history give the same score."""
    from ray.tune.experiment import Trial

    values = [0.5, 0.9, 0.95, 0.6, 0.55, 0.5, 0.4]
    trial = Trial("toy", stub=True, config={})
    for step, v in enumerate(values, 1):
        trial.update_last_result({"acc": v, "training_iteration": step})
    for scope in SCOPES:
        for mode in ("min", "max"):
            assert analysis_value(trial.metric_analysis["acc"], scope, mode) == pytest.approx(
                scope_value(values, scope, mode)), (scope, mode)
    assert analysis_value(None, "all", "max") is None


def test_best_checkpoint_is_the_best_score_newest_between_equals():
    pairs = [("a", {"acc": 0.5}), ("b", {"acc": 0.9}), ("c", {"acc": 0.9}), ("d", {"acc": float("nan")})]
    assert best_checkpoint(pairs, "acc", "max")[0] == "c"
    assert best_checkpoint(pairs, "acc", "min")[0] == "a"
    assert best_checkpoint(pairs, None, None)[0] == "d"  # no score: the newest
    assert best_checkpoint([("x", {}), ("y", None)], "acc", "max")[0] == "y"  # no finite score: the newest
    assert best_checkpoint([], "acc", "max") is None


def test_checkpoint_score_defaults_to_the_metric_or_first_objective(tmp_path):
    def spec(text):
        path = tmp_path / "s.yaml"
        path.write_text("trainable: tests.trainables:quadratic\n" + text)
        return load_spec(path)

    assert spec("metric: loss\nmode: min\n").checkpoint_score == ("loss", "min")
    assert spec("metric: [acc, size]\nmode: [max, min]\n").checkpoint_score == ("acc", "max")
    assert spec("metric: [acc, size]\nmode: [max, min]\ncheckpoint: {score: size}\n").checkpoint_score == \
        ("size", "min")
    assert spec("metric: loss\nmode: min\ncheckpoint: {score: acc, score_mode: max}\n").checkpoint_score == \
        ("acc", "max")
    assert spec("num_samples: 1\n").checkpoint_score is None
    assert spec("metric: loss\nmode: min\n").best.scope == "last"


def test_the_plan_says_the_scope_and_the_kept_checkpoints(tmp_path):
    from tuner.run.prepare import _describe_checkpoints, _describe_objectives

    path = tmp_path / "s.yaml"
    path.write_text(SPEC.replace("FAIL_DIR", str(tmp_path)))
    spec = load_spec(path)
    assert _describe_objectives(spec) == ["metric:     val_accuracy (max); best trial by scope all (the best value "
                                          "it reported)"]
    assert _describe_checkpoints(spec) == ["checkpoint: the best 2 by val_accuracy (max) per trial, and the newest"]
    path.write_text("trainable: tests.trainables:quadratic\ncheckpoint: {num_to_keep: 3}\n")
    assert _describe_checkpoints(load_spec(path)) == ["checkpoint: the newest 3 per trial"]


@pytest.mark.slow
def test_export_takes_an_empty_folder(peaks_run, run_cli, tmp_path):
    """--to an existing empty folder is accepted: it is filled (and stays where it was)."""
    _, exp, _, labels = peaks_run
    out = tmp_path / "empty"
    out.mkdir()
    proc = run_cli("export", exp, "--to", out)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(EXPORT_FILES)
    assert json.loads((out / EXPORT_METRICS).read_text())["trial_id"] == labels["peak"]


def test_export_refuses_an_experiment_without_summary_json(run_cli, tmp_path):
    """An experiment folder with no summary.json (its run has not ended): exit 2, one paragraph, nothing written."""
    exp = tmp_path / "unfinished"
    exp.mkdir()
    (exp / SPEC_SNAPSHOT).write_text("trainable: tests.trainables:quadratic\n")
    proc = run_cli("export", exp, "--to", tmp_path / "out")
    assert proc.returncode == 2
    assert proc.stderr == (f"tuner: error: {exp} has no summary.json: it is not a tuner experiment, or its run has "
                           "not ended (a run writes it when it ends; `tuner resume` finishes a stopped one).\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unfinished"], "nothing written"


def test_export_leaves_no_staging_folder_after_a_failure(tmp_path, monkeypatch):
    """README: the export folder "must be new or empty (else exit 2, and nothing is written; the folder is built
    beside it and renamed)": a copy that fails half-way leaves neither the folder nor the one built beside it."""
    import shutil
    import socket

    from tuner.errors import ExperimentError
    from tuner.experiment.export import export

    exp = tmp_path / "runs" / "e"
    checkpoint = exp / "e_00000" / "checkpoint_000001"
    checkpoint.mkdir(parents=True)
    (checkpoint / "weights.bin").write_bytes(b"w" * 1000)
    monkeypatch.chdir(checkpoint)  # a short relative name: a socket's path is at most 107 bytes
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("unreadable.sock")  # copied after weights.bin is, and no file can be read from a socket
    entry = {"dir": "e_00000/checkpoint_000001", "checkpoint": str(checkpoint), "config": {"x": 0.5},
             "metrics": {"metric": "loss", "value": 0.1, "training_iteration": 1}}
    (exp / SUMMARY).write_text(json.dumps({"name": "e", "metric": "loss", "mode": "min", "best": {"trial_id": "t0"},
                                           "checkpoints": {"t0": entry}}))
    out = tmp_path / "exports"
    out.mkdir()
    try:
        with pytest.raises(shutil.Error, match="unreadable.sock"):
            export(exp, out / "best")
    finally:
        sock.close()
    assert list(out.iterdir()) == [], "neither the export folder nor the folder built beside it"
    # A checkpoint gone before the copy: the same.
    (exp / SUMMARY).write_text(json.dumps({"name": "e", "best": {"trial_id": "t0"}, "checkpoints": {
        "t0": {**entry, "dir": "e_00000/gone", "checkpoint": str(tmp_path / "gone")}}}))
    with pytest.raises(ExperimentError, match="is gone"):
        export(exp, out / "best")
    assert list(out.iterdir()) == []
