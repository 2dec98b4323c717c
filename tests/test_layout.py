"""One home for each shared concept, without Ray: the experiment folder's names (tuner.experiment.layout),
Ray's experiment state read once (tuner.adapters.state), parameter names and Ray's result keys
(tuner.core.params), and `tuner report` reading a folder built from those names alone."""

import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.fixtures.paths import ROOT
from tuner.experiment import layout
from tuner.core.best import best_reported, is_finite_number, nan_to_none
from tuner.core.params import PROGRESS_KEYS, RAY_RESULT_KEYS, flatten, leaves, nest, spec_paths
from tuner.spec.conditions import sampled_params
from tuner.spec import load_spec
from tuner.adapters.state import load_state_file, read_state


def test_each_file_name_is_declared_once_in_tuner():
    """Every name of tuner.experiment.layout appears as a string literal in tuner/ only where layout.py declares it."""
    names = [v for k, v in vars(layout).items() if k.isupper() and isinstance(v, str) and len(v) >= 4]
    sources = {p.relative_to(ROOT).as_posix(): p.read_text() for p in (ROOT / "tuner").rglob("*.py")
               if p.relative_to(ROOT).as_posix() != "tuner/experiment/layout.py"}
    for name in names:
        for file, text in sources.items():
            assert not re.search(rf"[\"']{re.escape(name)}[\"']", text), f"{file} spells {name!r}; use tuner.experiment.layout"


def test_trial_folder_name_round_trip():
    for trainable, trial_id in [("train", "1a2b3_00004"), ("my_train_fn", "abc_00012")]:
        assert layout.trial_id_of_folder(layout.trial_folder_name(trainable, trial_id)) == trial_id
    assert layout.trial_id_of_folder("odd") == "odd"


def _state(trials, stopper=None) -> str:
    return json.dumps({"trial_data": [[json.dumps(t), "{}"] for t in trials],
                       "runner_data": {"_stopper": stopper}})


def test_the_state_read_is_the_newest_readable_else_the_snapshot_else_an_older_one(tmp_path):
    snapshots = tmp_path / layout.STATE_SNAPSHOT_DIR
    snapshots.mkdir()
    old = tmp_path / layout.EXPERIMENT_STATE.format("2026-01-01_00-00-00")
    new = tmp_path / layout.EXPERIMENT_STATE.format("2026-01-02_00-00-00")
    copy = snapshots / new.name
    assert read_state(tmp_path) is None
    old.write_text(_state([{"trial_id": "a_00000", "status": "TERMINATED"}]))
    new.write_text(_state([{"trial_id": "a_00000", "status": "TERMINATED"},
                           {"trial_id": "a_00001", "status": "RUNNING"}], stopper={"x": 1}))
    state = read_state(tmp_path)
    assert state.file == new and [t["trial_id"] for t in state.trials] == ["a_00000", "a_00001"]
    assert state.mtime == new.stat().st_mtime
    copy.write_text(new.read_text())
    new.write_text(new.read_text()[:40])  # truncated by a driver killed mid-write
    assert load_state_file(new) is None
    assert read_state(tmp_path).file == copy
    copy.write_text("[]")  # parses, but is not a state
    assert read_state(tmp_path).file == old
    old.write_text(json.dumps({"trial_data": [["not json"], [json.dumps({"status": "PENDING"})],
                                              [json.dumps({"trial_id": "b_00000"})]]}))
    assert [t["trial_id"] for t in read_state(tmp_path).trials] == ["b_00000"]


def test_one_walk_two_spellings():
    tree = {"opt": {"lr": 0.1, "betas": {"b1": 0.9}}, "x": 1, "empty": {}}
    assert list(leaves(tree)) == [(("opt", "lr"), 0.1), (("opt", "betas", "b1"), 0.9), (("x",), 1)]
    assert flatten(tree) == {"opt/lr": 0.1, "opt/betas/b1": 0.9, "x": 1}
    assert flatten(tree, "config/") == {"config/opt/lr": 0.1, "config/opt/betas/b1": 0.9, "config/x": 1}
    assert nest(flatten(tree)) == {"opt": {"lr": 0.1, "betas": {"b1": 0.9}}, "x": 1}
    spec = load_spec({"trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min",
                      "param_space": {"epochs": 3, "opt": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1},
                                                           "batch": {"type": "choice", "values": [16, 32]}}}})
    assert [p for p, _ in spec_paths(spec.param_space)] == ["param_space.epochs", "param_space.opt.lr",
                                                           "param_space.opt.batch"]
    assert [p for p, _ in spec_paths(spec.param_space, root=None)] == ["epochs", "opt.lr", "opt.batch"]
    assert sampled_params(spec) == ["opt/lr", "opt/batch"]


def test_ray_result_keys_hold_the_progress_keys():
    assert PROGRESS_KEYS < RAY_RESULT_KEYS
    assert {"done", "trial_id", "config", "checkpoint_dir_name"} <= RAY_RESULT_KEYS - PROGRESS_KEYS


def test_finite_numbers_and_the_best_value():
    assert [is_finite_number(v) for v in (1, 0.5, np.float32(2), np.int64(3))] == [True] * 4
    assert not any(is_finite_number(v) for v in (math.nan, math.inf, True, None, "1"))
    assert nan_to_none(math.nan) is None and nan_to_none(math.inf) is None and nan_to_none(1.5) == 1.5
    assert best_reported([3, math.nan, 1, None, 2], "min") == 1 and best_reported([3, 1, 2], "max") == 3
    assert math.isnan(best_reported([math.nan, None], "min"))


# --------------------------------------------------------------------------- a report from files alone


def _experiment(root: Path) -> Path:
    """An experiment folder written from tuner.experiment.layout's names: what `tuner report` reads."""
    exp = root / "runs" / "made"
    exp.mkdir(parents=True)
    spec = {"name": "made", "trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min",
            "num_samples": 3, "param_space": {"x": {"type": "uniform", "low": 0, "high": 1}, "epochs": 2}}
    (exp / layout.SPEC_SNAPSHOT).write_text(yaml.safe_dump(spec))
    (exp / layout.RUN_RECORD).write_text(json.dumps({"created": "2026-01-01T00:00:00+0000"}))
    trials = []
    for i, (x, losses, status) in enumerate([(0.5, [0.4, 0.3], "TERMINATED"), (0.1, [0.2, math.nan], "TERMINATED"),
                                            (0.9, [0.05], "ERROR")]):
        trial_id = f"abc_{i:05d}"
        folder = exp / layout.trial_folder_name("quadratic", trial_id)
        folder.mkdir()
        (folder / layout.PARAMS_FILE).write_text(json.dumps({"x": x, "epochs": 2}))
        lines = [json.dumps({"loss": v, "training_iteration": it + 1, "trial_id": trial_id, "done": False,
                             "time_total_s": it + 1.0, "pid": 1})
                 for it, v in enumerate(losses)]
        (folder / layout.RESULT_FILE).write_text("\n".join(lines) + "\n")
        if status == "ERROR":
            (folder / layout.ERROR_FILE).write_text("ValueError: x too large\n")
        trials.append({"trial_id": trial_id, "status": status, "relative_logdir": folder.name,
                       "config": {"x": x, "epochs": 2}})
    state = exp / layout.EXPERIMENT_STATE.format("2026-01-01_00-00-00")
    state.write_text(_state(trials))
    os.utime(state, (1, 1))
    return exp


def test_report_reads_an_experiment_folder_by_the_layout(tmp_path):
    from tuner.report import list_experiments, load_experiment, render

    exp = load_experiment(_experiment(tmp_path))
    assert exp.status == "stopped" and exp.started == "2026-01-01T00:00:00+0000"
    assert exp.params == ["x"] and exp.best_trial == "abc_00000"  # abc_00001's last loss is NaN
    t = exp.trials
    assert list(t["trial_id"]) == ["abc_00000", "abc_00001", "abc_00002"]
    assert list(t["status"]) == ["TERMINATED", "TERMINATED", "ERROR"]
    assert t["best_loss"].tolist() == [0.3, 0.2, 0.05] and math.isnan(t["last_loss"][1])
    assert "pid" not in exp.history and "time_total_s" in exp.history and "done" not in exp.history
    assert exp.best_config == {"x": 0.5, "epochs": 2}
    assert "Best trial abc_00000 (*): loss=0.3" in render(exp)
    assert list(list_experiments(tmp_path / "runs")["name"]) == ["made"]


def test_report_names_the_files_of_an_experiment_folder(tmp_path):
    from tuner.report import ReportError, load_experiment

    with pytest.raises(ReportError, match=re.escape(f"(no {layout.RUN_RECORD}, {layout.SPEC_SNAPSHOT} or "
                                                    f"{layout.EXPERIMENT_STATE_GLOB})")):
        load_experiment(tmp_path)


def test_report_takes_the_rows_result_json_lost_from_progress_csv_and_top_k(tmp_path):
    """README: a restore can leave result.json without rows that progress.csv kept; `tuner report` takes the lost
    rows from progress.csv (in iteration order). `--top K` shows the K best trials only."""
    from tuner.report import load_experiment, render

    exp = _experiment(tmp_path)
    folder = exp / layout.trial_folder_name("quadratic", "abc_00000")
    (folder / layout.PROGRESS_FILE).write_text("loss,training_iteration,time_total_s,trial_id,done\n"
                                               "0.4,1,1.0,abc_00000,False\n0.35,2,1.5,abc_00000,False\n")
    lines = [json.dumps({"loss": v, "training_iteration": it, "trial_id": "abc_00000", "done": False,
                         "time_total_s": float(it)}) for it, v in ((1, 0.4), (3, 0.3))]
    (folder / layout.RESULT_FILE).write_text("\n".join(lines) + "\n")  # iteration 2 lost, 3 after the restore
    report = load_experiment(exp)
    rows = report.history[report.history["trial_id"] == "abc_00000"]
    assert list(zip(rows["training_iteration"], rows["loss"])) == [(1, 0.4), (2, 0.35), (3, 0.3)]
    table = render(report, top=2)
    assert "abc_00000" in table and "abc_00001" in table and "abc_00002" not in table
    assert "abc_00002" in render(report)
