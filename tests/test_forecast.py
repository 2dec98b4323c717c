"""The budget forecast (tuner.forecast): hand-computed counts per scheduler, and through the real CLI
`tuner validate` (with --measure and --from), `tuner run` (the forecast recorded) and `tuner report` (the
forecast against what was used, on a real Ray Hyperband run whose count the forecast gives exactly)."""

import json
import math
import os
import re

import pytest

from tuner.forecast import describe, describe_estimate, estimate, forecast
from tuner.spec import load_spec

# One xdist worker runs this file: its module-scoped run is built once (pyproject's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_forecast")


def _spec(scheduler=None, stop=None, num_samples=4, **extra):
    spec = {"name": "f", "trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min",
            "num_samples": num_samples, "param_space": {"x": {"type": "uniform", "low": 0, "high": 1}},
            "scheduler": scheduler or {"type": "fifo"}, **extra}
    if stop is not None:
        spec["stop"] = stop
    return load_spec(spec)


# --------------------------------------------------------------------------- counts, no Ray


def test_fifo_and_median_run_every_trial_to_stop_and_are_unbounded_without_it():
    fc = forecast(_spec(stop={"training_iteration": 9}))
    assert (fc.trials, fc.per_trial, fc.max_total, fc.expected_total) == (4, 9, 36, 36)
    assert "fifo stops no trial early" in fc.rule
    median = forecast(_spec({"type": "median"}, stop={"training_iteration": 9.5}))
    assert median.expected_total == median.max_total == 40  # stops at the first iteration >= 9.5
    assert "no stopping pattern known" in median.rule
    open_ended = forecast(_spec())
    assert open_ended.max_total is None and open_ended.expected_total is None
    assert describe(open_ended) == ["forecast:   unbounded: set stop.training_iteration (no trial has an end in "
                                    "training_iteration)"]


def test_population_schedulers_stop_no_trial():
    fc = forecast(_spec({"type": "pbt", "perturbation_interval": 2,
                         "mutations": {"x": {"type": "uniform", "low": 0, "high": 1}}},
                        stop={"training_iteration": 10}, num_samples=6))
    assert fc.expected_total == fc.max_total == 60 and "does not stop them" in fc.rule


def test_asha_keeps_one_in_rf_at_each_rung():
    # Rungs 1, 3 (9 is max_t): each trial runs 1, a third goes on to 3, a ninth to 9.
    fc = forecast(_spec({"type": "asha", "max_t": 9, "reduction_factor": 3}))
    assert fc.max_total == 36
    assert fc.expected_total == pytest.approx(4 * (1 + 2 / 3 + 6 / 9))
    assert "expected 9.3 under asha" in "\n".join(describe(fc))
    # stop below max_t caps every trial: rungs 1, 3, then 5.
    capped = forecast(_spec({"type": "asha", "max_t": 9, "reduction_factor": 3}, stop={"training_iteration": 5}))
    assert capped.per_trial == 5 and capped.expected_total == pytest.approx(4 * (1 + 2 / 3 + 2 / 9))
    # Two brackets, shared as Ray draws them: e**(rungs - max rungs), rungs [1, 3, 9] and [3, 9].
    two = forecast(_spec({"type": "asha", "max_t": 9, "reduction_factor": 3, "brackets": 2}, num_samples=10))
    p0 = 1 / (1 + math.exp(-1))
    assert two.expected_total == pytest.approx(10 * (p0 * (1 + 2 / 3 + 6 / 9) + (1 - p0) * (3 + 6 / 3)))


def test_hyperband_and_bohb_fill_rays_brackets_in_their_orders():
    # max_t 9, rf 3: s_max_1 = 3. Hyperband fills s = 0 (3 trials from 9) first, then s = 1 (5 trials
    # from 3, ceil(5 / 3) = 2 go on to 9): 3 * 9 + 5 * 3 + 2 * 6 = 54.
    hb = forecast(_spec({"type": "hyperband", "max_t": 9, "reduction_factor": 3}, num_samples=8))
    assert (hb.max_total, hb.expected_total) == (72, 54)
    # A partly filled bracket keeps min(live, ceil(n0 / rf)): 4 trials = 3 * 9 + 1 * 9.
    assert forecast(_spec({"type": "hyperband", "max_t": 9, "reduction_factor": 3})).expected_total == 36
    # BOHB fills s = 2 first (9 trials from 1): 8 trials run 1, 3 go on to 3, 1 to 9: 8 + 3 * 2 + 1 * 6.
    bohb = forecast(_spec({"type": "bohb", "max_t": 9, "reduction_factor": 3}, num_samples=8,
                          search={"algorithm": "bohb"}))
    assert (bohb.max_total, bohb.expected_total) == (72, 20)
    assert "Falkner et al. 2018" in bohb.rule


def test_grid_points_times_num_samples_and_other_time_attrs():
    grid = load_spec({"name": "g", "trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min",
                      "num_samples": 2, "search": {"algorithm": "grid"}, "stop": {"training_iteration": 5},
                      "param_space": {"x": {"type": "choice", "values": [0.1, 0.2, 0.3]},
                                      "y": {"type": "grid", "values": [1, 2]}}})
    assert forecast(grid).trials == 12 and forecast(grid).max_total == 60
    seconds = forecast(_spec({"type": "asha", "time_attr": "time_total_s", "max_t": 100, "grace_period": 10,
                              "reduction_factor": 10}, stop={"loss": 0.1}))
    assert seconds.unit == "time_total_s" and seconds.max_total == 400
    assert seconds.expected_total == pytest.approx(4 * (10 + 90 / 10))
    assert seconds.notes == ("stop on loss may end trials sooner",)
    assert describe(seconds)[0] == "forecast:   at most 400 trial-seconds (4 trials x 100)"


def test_estimate_gives_wall_time_gpu_hours_and_the_budgets_share():
    fc = forecast(_spec({"type": "asha", "max_t": 9, "reduction_factor": 3}, num_samples=9, time_budget_s=10))
    assert fc.expected_total == pytest.approx(21)
    est = estimate(fc, 2.0, 3, 0.5, time_budget_s=10)
    assert est.wall_time_s == pytest.approx(21 * 2 / 3) and est.max_wall_time_s == pytest.approx(81 * 2 / 3)
    assert est.gpu_hours == pytest.approx(21 * 2 * 0.5 / 3600)
    assert est.budget_fraction == pytest.approx(10 / 14)
    lines = describe_estimate(fc, est, 10)
    assert lines[0].startswith("wall time:  ~14 s (at most 54 s) at 3 trials at a time")
    assert lines[1] == "GPU-hours:  0.00583 (0.5 GPU per trial)"
    assert lines[2] == "budget:     time_budget_s 10 s will stop the run after ~71% of the forecast work"
    assert estimate(fc, 2.0, 0, 0.0) is None


def test_measure_and_from_exclude_each_other(capsys):
    from tuner.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["validate", "spec.yaml", "--measure", "2", "--from", "runs/x"])
    assert exit_info.value.code == 2
    assert "--measure and --from exclude each other" in capsys.readouterr().err


# --------------------------------------------------------------------------- the real CLI and Ray

# Hyperband, max_t 3, rf 3: s_max_1 = 2; bracket s = 0 runs 2 trials to 3, bracket s = 1 runs 3 trials to 1 and
# ceil(3 / 3) = 1 of them on to 3: 2 * 3 + 3 * 1 + 1 * 2 = 11 trial-iterations of at most 15. The trainable
# checkpoints each epoch, so a paused trial resumes where it stopped.
RUN_SPEC = """\
name: hb
trainable: tests.trainables:steady
metric: loss
mode: min
num_samples: 5
seed: 0
param_space:
  x: {type: uniform, low: 0, high: 1}
  epochs: 3
  sleep: 0.05
scheduler: {type: hyperband, max_t: 3, reduction_factor: 3}
reporting: {cli: false, tensorboard: false}
"""


@pytest.fixture(scope="module")
def hb_run(tmp_path_factory):
    from tests.fixtures.cli import run_spec

    tmp = tmp_path_factory.mktemp("forecast")
    return type("Run", (), {"tmp": tmp, "exp": run_spec(tmp, "hb", RUN_SPEC)})


@pytest.mark.slow
def test_run_records_the_forecast_and_report_compares_it(hb_run, run_cli):
    record = json.loads((hb_run.exp / "tuner_run.json").read_text())["forecast"]
    assert (record["trials"], record["max_total"], record["expected_total"], record["trials_at_once"]) == (5, 15, 11, 2)
    proc = run_cli("report", hb_run.exp, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    fc = json.loads(proc.stdout)["experiment"]["budget"]["forecast"]
    # Ray's HyperBandScheduler ran exactly the forecast's trial-iterations.
    assert (fc["expected"], fc["max"], fc["used"], fc["used_of_expected"]) == (11, 15, 11, 1.0)
    assert fc["seconds_per_iteration"] > 0.04 and fc["wall_time_s"] > fc["wall_time_s_forecast"] > 0
    from tuner.report.html import _forecast_html

    line = _forecast_html(fc)
    assert "11 trial-iterations expected, at most 15 (successive halving" in line
    assert "; 11 used (100% of the forecast). Wall time at this run" in line


@pytest.mark.slow
def test_validate_from_an_earlier_experiment(hb_run, run_cli, tmp_path):
    spec = tmp_path / "big.yaml"
    spec.write_text(RUN_SPEC.replace("num_samples: 5", "num_samples: 8").replace("max_t: 3", "max_t: 9")
                    + "time_budget_s: 1\nstorage: " + str(tmp_path / "runs") + "\n")
    proc = run_cli("validate", spec, "--num-cpus", "2", "--from", hb_run.exp)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "forecast:   at most 72 trial-iterations (8 trials x 9)" in lines
    assert any(line.startswith("            expected 54 under hyperband: successive halving") for line in lines)
    measured = next(line for line in lines if line.startswith("measured:"))
    assert f"of experiment {hb_run.exp}, first iterations of each trial left out" in measured
    rate = float(measured.split()[1])
    assert rate > 0.04  # each epoch sleeps 0.05 s
    wall = next(line for line in lines if line.startswith("wall time:"))
    assert wall.endswith(f"at 2 trials at a time (expected trial-iterations x {rate:.3g} s / 2)")
    assert "budget:     time_budget_s 1 s will stop the run after ~" in lines[-1]
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_validate_measure_runs_one_trial_and_writes_nothing(run_cli, tmp_path):
    """--measure 2 of a trial whose first epoch sleeps 3 s and the next 0.05 s: the mean is the second's alone
    (with the first it would be at least 1.5 s), and the temporary folder of the run is gone afterwards."""
    spec = tmp_path / "m.yaml"
    spec.write_text(RUN_SPEC.replace("num_samples: 5", "num_samples: 6").replace("epochs: 3", "epochs: 20")
                    .replace("  sleep: 0.05\n", "  sleep: 0.05\n  first_sleep: 3\n")
                    + "resources: {cpu: 1, gpu: 0.5}\nstop: {training_iteration: 20}\n"
                    + "storage: " + str(tmp_path / "runs") + "\n")
    temp = tmp_path / "temp"  # the subprocess's TMPDIR (Ray keeps its own folder where it was)
    temp.mkdir()
    proc = run_cli("validate", spec, "--num-cpus", "2", "--num-gpus", "1", "--measure", "2",
                   env={"TMPDIR": str(temp), "RAY_TMPDIR": os.environ.get("RAY_TMPDIR", "/tmp")})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    measured = next(line for line in lines if line.startswith("measured:"))
    first = re.search(r"; the first, (\S+) s with the trial's start-up, left out\)$", measured)
    assert "(mean of 1 iteration of one trial run for 2 iterations here; the first, " in measured and first
    assert float(first.group(1)) >= 3.0, "the first iteration slept 3 s"
    assert 0.04 < float(measured.split()[1]) < 1.5, "the mean counts the second iteration only"
    assert any(line.startswith("wall time:  ~") and "at 2 trials at a time" in line for line in lines)
    assert "GPU-hours:" in lines[-1] and "(0.5 GPU per trial)" in lines[-1]
    assert not (tmp_path / "runs").exists()
    assert not list(temp.glob("tuner-measure-*")), "the measured run's temporary folder is removed"


def test_from_leaves_each_trials_first_iteration_out(tmp_path):
    """--from an experiment whose trials' first iterations took 3 s and 5 s and the others 0.1 s to 0.4 s: the
    mean of the others only (with the firsts, 1.4 s)."""
    from tuner.measure import from_experiment

    exp = tmp_path / "earlier"
    exp.mkdir()
    (exp / "spec.yaml").write_text(RUN_SPEC)
    for trial_id, times in {"aaaaa_00000": [3.0, 0.1, 0.2], "aaaaa_00001": [5.0, 0.4]}.items():
        (exp / f"steady_{trial_id}").mkdir()
        (exp / f"steady_{trial_id}" / "result.json").write_text("".join(
            json.dumps({"trial_id": trial_id, "training_iteration": i, "time_this_iter_s": t, "loss": 1.0}) + "\n"
            for i, t in enumerate(times, 1)))
    measured = from_experiment(exp)
    assert (measured.iterations, measured.seconds_per_iteration) == (3, pytest.approx(0.7 / 3))
    assert measured.describe() == (f"measured:   0.233 s per iteration (mean of 3 iterations of experiment {exp}, "
                                   "first iterations of each trial left out)")


def test_the_plan_says_how_much_of_the_time_budget_the_run_takes():
    """A forecast wall time under time_budget_s: the plan gives its share of the budget."""
    fc = forecast(_spec({"type": "asha", "max_t": 9, "reduction_factor": 3}, num_samples=9, time_budget_s=60))
    est = estimate(fc, 2.0, 3, 0.0, time_budget_s=60)
    assert est.wall_time_s == pytest.approx(14) and est.budget_fraction is None
    assert describe_estimate(fc, est, 60) == [
        "wall time:  ~14 s (at most 54 s) at 3 trials at a time (expected trial-iterations x 2 s / 3)",
        "budget:     fits time_budget_s 60 s (~23% of it)"]
