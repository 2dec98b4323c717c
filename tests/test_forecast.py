"""The budget forecast (tuner.search.forecast): hand-computed counts per scheduler, and through the real CLI
`tuner validate` (with --measure and --from), `tuner run` (the forecast recorded) and `tuner report` (the
forecast against what was used, on a real Ray Hyperband run whose count the forecast gives exactly)."""

import json
import math
import os
import re
import statistics

import pytest

from tuner.search.forecast import (MAX_SIMULATED_TRIALS, SEED, SIMULATIONS, asha_evaluations, asha_paper, describe,
                                   _duration, describe_estimate, estimate, forecast, simulate_asha, simulation_runs)
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


MAIN_LIKE = {"type": "asha", "max_t": 10, "reduction_factor": 3}  # rungs 1, 3, 9; max_t stops at 10


def test_asha_forecast_is_the_median_and_spread_of_seeded_simulations():
    spec = _spec(MAIN_LIKE, num_samples=16)
    fc = forecast(spec, at_once=2)
    assert fc.max_total == 160 and fc.at_once == 2
    totals = sorted(simulate_asha(spec, 16, 2, runs=SIMULATIONS, seed=SEED))
    assert fc.expected_total == statistics.median(totals)
    assert fc.expected_low == pytest.approx(statistics.quantiles(totals, n=10, method="inclusive")[0])
    assert fc.expected_high == pytest.approx(statistics.quantiles(totals, n=10, method="inclusive")[-1])
    assert fc.expected_low < fc.expected_total < fc.expected_high <= fc.max_total
    # Deterministic under a seed; another seed draws other runs.
    assert forecast(spec, at_once=2) == fc
    assert simulate_asha(spec, 16, 2, runs=50, seed=7) == simulate_asha(spec, 16, 2, runs=50, seed=7)
    assert simulate_asha(spec, 16, 2, runs=50, seed=7) != simulate_asha(spec, 16, 2, runs=50, seed=8)
    line = describe(fc)[1]
    assert line.startswith(f"            expected {fc.expected_total:.0f} (10th-90th percentile ")
    assert "under asha: Ray's asynchronous successive halving (Li et al. 2020) simulated 200 times at 2 trials " \
           "at a time, trials of random rank" in line
    # Without the cluster, max_concurrent_trials, else one at a time.
    assert forecast(spec).at_once == 1
    assert forecast(_spec(MAIN_LIKE, num_samples=16, max_concurrent_trials=3)).at_once == 3



def test_asha_is_simulated_200_times_and_fewer_above_100_trials():
    """README "Budget forecast": ASHA's expected count comes from 200 simulated runs; above 100 trials from fewer
    (about 20,000 simulated trials in all, at least 5 runs), and the plan line names the real count."""
    assert [simulation_runs(n) for n in (1, 16, 100)] == [200, 200, 200]
    assert [simulation_runs(n) for n in (101, 1000, 10**6)] == [198, 20, 5]
    fc = forecast(_spec(MAIN_LIKE, num_samples=1000), at_once=2)
    assert "simulated 20 times at 2 trials at a time" in describe(fc)[1]


def test_asha_first_trial_at_a_rung_goes_on_so_small_experiments_run_above_the_papers_rule():
    # One trial: first at every rung, it runs to max_t.
    assert set(simulate_asha(_spec(MAIN_LIKE, num_samples=1), 1, 1, runs=20)) == {10}
    # Two trials, one or two at a time: the first to reach rung 1 goes on to 10; the other goes on (to 10, as
    # it is better at every rung) if it is better than the first, else stops at 1: 11 or 20, each about half.
    for at_once in (1, 2):
        totals = simulate_asha(_spec(MAIN_LIKE, num_samples=2), 2, at_once, runs=200)
        assert set(totals) == {11, 20} and 70 < totals.count(20) < 130
    # One at a time, each trial's comparisons come before the next one's; three at a time, they interleave,
    # the first at rung 1 by one of the first three trials.
    spec = _spec(MAIN_LIKE, num_samples=12)
    for at_once in (1, 3):
        trace = []
        simulate_asha(spec, 12, at_once, runs=10, seed=1, trace=trace)
        orders = [[(i, t) for r, i, t, _, _ in trace if r == run] for run in range(10)]
        if at_once == 1:
            assert all(order == sorted(order) and order[:3] == [(0, 1), (0, 3), (0, 9)] for order in orders)
        else:
            assert all(order[0] in [(0, 1), (1, 1), (2, 1)] for order in orders)
            assert sum(order != sorted(order) for order in orders) >= 5
    # The paper's rule, 1/3 of the trials that reach a rung go on: 1 + 2/3 + 6/9 + 1/27 iterations a trial.
    paper = 1 + 2 / 3 + 6 / 9 + 1 / 27
    small = forecast(_spec(MAIN_LIKE, num_samples=16), at_once=2)
    assert small.expected_total > 1.3 * 16 * paper
    # Many trials: the first trials at each rung weigh little, and the count tends to the paper's.
    many = forecast(_spec(MAIN_LIKE, num_samples=3000), at_once=2)
    assert 1.0 < many.expected_total / (3000 * paper) < 1.05


def test_the_plan_and_the_time_lines_simulate_asha_at_the_trials_that_fit(tmp_path):
    from tuner.run.prepare import plan, prepare
    from tuner.search.forecast import trials_at_once
    from tuner.run.measure import Measurement, time_lines

    raw = {"name": "p", "trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min",
           "num_samples": 16, "param_space": {"x": {"type": "uniform", "low": 0, "high": 1}},
           "scheduler": MAIN_LIKE, "storage": str(tmp_path)}
    prepared = prepare(raw, num_cpus=3)
    # The trials that fit: 3 of --num-cpus 3, or the CPUs of a Ray this xdist worker already
    # started (an earlier test's session; Ray then ignores num_cpus).
    at_once = trials_at_once(prepared.spec, prepared.cluster, 16)
    assert at_once == int(prepared.cluster.per_node[0][0])
    fc = forecast(load_spec(raw), 16, at_once)
    assert fc.at_once == at_once and describe(fc)[1] in plan(prepared).splitlines()
    assert f"simulated 200 times at {at_once} trials at a time" in describe(fc)[1]
    wall = time_lines(prepared, Measurement(2.0, 1, None, "test"))[-1]
    assert wall.startswith(f"wall time:  ~{fc.expected_total * 2 / at_once:.3g} s")


def test_asha_papers_rule_keeps_one_in_rf_at_each_rung_and_serves_above_the_simulated_trials():
    # Rungs 1, 3 (9 is max_t): each trial runs 1, a third goes on to 3, a ninth to 9.
    spec = _spec({"type": "asha", "max_t": 9, "reduction_factor": 3})
    assert asha_paper(spec, 4, 9) == pytest.approx(4 * (1 + 2 / 3 + 6 / 9))
    # stop below max_t caps every trial: rungs 1, 3, then 5.
    assert asha_paper(spec, 4, 5) == pytest.approx(4 * (1 + 2 / 3 + 2 / 9))
    # Two brackets, shared as Ray draws them: e**(rungs - max rungs), rungs [1, 3, 9] and [3, 9].
    two = _spec({"type": "asha", "max_t": 9, "reduction_factor": 3, "brackets": 2})
    p0 = 1 / (1 + math.exp(-1))
    assert asha_paper(two, 10, 9) == pytest.approx(10 * (p0 * (1 + 2 / 3 + 6 / 9) + (1 - p0) * (3 + 6 / 3)))
    big = forecast(spec, MAX_SIMULATED_TRIALS + 1, 8)
    assert big.expected_total == pytest.approx(asha_paper(spec, MAX_SIMULATED_TRIALS + 1, 9))
    assert big.expected_low is None and big.at_once is None and "not simulated; a lower estimate" in big.rule
    assert describe(big)[1].startswith(f"            expected {big.expected_total:.0f} under asha: 1/reduction_factor")


def test_asha_evaluations_follow_rays_rungs():
    assert asha_evaluations([1, 3, 9], 10, True) == [(1, 0), (3, 1), (9, 2)]
    assert asha_evaluations([1, 3, 9], 9, True) == [(1, 0), (3, 1)]  # max_t 9 stops before rung 9
    # Rungs closer than an iteration (rf 1.2: 1, 1.2, 1.44, 1.728, 2.07): Ray compares at the highest rung
    # not yet filled (1.728 at 2, 2.07 at 3), and fills a skipped one at a later iteration (1.44 at 4), but
    # not with stop_last_trials: false.
    rungs = [1.2 ** k for k in range(5)]
    assert asha_evaluations(rungs, 5, True) == [(1, 0), (2, 3), (3, 4), (4, 2)]
    assert asha_evaluations(rungs, 5, True, stop_last_trials=False) == [(1, 0), (2, 3), (3, 4)]
    assert asha_evaluations([10.0, 100.0], 150, False) == [(10.0, 0), (100.0, 1)]


@pytest.mark.parametrize("scheduler,stop", [
    (MAIN_LIKE, None),
    ({"type": "asha", "max_t": 9, "reduction_factor": 2}, None),
    ({"type": "asha", "max_t": 5, "reduction_factor": 1.2}, None),  # rungs closer than an iteration
    ({"type": "asha", "max_t": 9, "reduction_factor": 3, "stop_last_trials": False}, {"training_iteration": 12}),
    ({"type": "asha", "time_attr": "time_total_s", "max_t": 100, "grace_period": 10, "reduction_factor": 3},
     None),
])
def test_the_simulation_decides_as_rays_asha_scheduler(scheduler, stop):
    """Each simulated run, replayed result by result through Ray's own ASHAScheduler (built as `tuner run`
    builds it), gets Ray's decision at every result and leaves Ray's values at every rung."""
    from types import SimpleNamespace

    from ray.tune.schedulers import TrialScheduler

    from tuner.search.algorithms import build_scheduler

    spec = _spec(scheduler, stop=stop, num_samples=14)
    unit = spec.scheduler.time_attr
    whole = unit == "training_iteration"
    trace = []
    simulate_asha(spec, 14, 3, runs=6, seed=3, trace=trace)
    assert trace and any(stopped for *_, stopped in trace) and not all(stopped for *_, stopped in trace)
    cap = forecast(spec).per_trial
    for run in range(6):
        ray_asha = build_scheduler(spec)
        ray_asha.set_search_properties("loss", "min")
        trials, reached, last, values = {}, {}, {}, []
        for _, i, t, quality, stopped in (e for e in trace if e[0] == run):
            if i not in trials:
                trials[i] = SimpleNamespace(trial_id=f"t{i}")
                ray_asha.on_trial_add(None, trials[i])
            # Every result up to this comparison (each iteration; in seconds, the rungs): loss = -quality.
            steps = range(int(reached.get(i, 0)) + 1, int(t) + 1) if whole else [t]
            for step in steps:
                decision = ray_asha.on_trial_result(None, trials[i], {unit: step, "loss": -quality})
                assert decision == (TrialScheduler.STOP if stopped and step == t else TrialScheduler.CONTINUE)
            reached[i], last[i] = t, (quality, stopped)
            values.append(quality)  # Ray records metric_op * loss: -1 * loss under mode min
        for i, (quality, stopped) in last.items():  # the trials that went on: no comparison left before cap
            if not stopped and whole:
                for step in range(int(reached[i]) + 1, int(cap)):
                    assert ray_asha.on_trial_result(None, trials[i], {unit: step, "loss": -quality}) == \
                        TrialScheduler.CONTINUE
        recorded = [v for _, rung in ray_asha._brackets[0]._rungs for v in rung.values()]
        assert sorted(recorded) == sorted(values), "Ray recorded a value at each comparison, and only there"


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


@pytest.mark.parametrize("stop_last_trials", [True, False])
def test_hyperband_max_t_caps_a_trial_only_where_rays_scheduler_stops_it_there(stop_last_trials):
    """README: the forecast's "at most" counts `max_t` "only where the scheduler stops a trial there: not under
    ASHA's or Hyperband's `stop_last_trials: false`": one trial, replayed through Ray's own HyperBandScheduler (built
    as `tuner run` builds it), ends where the forecast says, at max_t 4 or at stop 10."""
    from ray.tune.schedulers import TrialScheduler

    from tuner.search.algorithms import build_scheduler

    spec = _spec({"type": "hyperband", "max_t": 4, "stop_last_trials": stop_last_trials},
                 stop={"training_iteration": 10}, num_samples=1)
    fc = forecast(spec)
    assert (fc.per_trial, fc.max_total) == ((4, 4) if stop_last_trials else (10, 10))
    hyperband = build_scheduler(spec)
    hyperband.set_search_properties("loss", "min")
    trial = type("Trial", (), {"trial_id": "t0", "status": "RUNNING"})()  # what Ray's scheduler reads of a trial
    hyperband.on_trial_add(None, trial)
    iteration = 0
    for iteration in range(1, 11):  # stop.training_iteration 10 ends it there, whatever the scheduler says
        if hyperband.on_trial_result(None, trial, {"training_iteration": iteration, "loss": 1.0}) == \
                TrialScheduler.STOP:
            break
    assert iteration == fc.per_trial


def test_grid_points_times_num_samples_and_other_time_attrs():
    grid = load_spec({"name": "g", "trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min",
                      "num_samples": 2, "search": {"algorithm": "grid"}, "stop": {"training_iteration": 5},
                      "param_space": {"x": {"type": "choice", "values": [0.1, 0.2, 0.3]},
                                      "y": {"type": "grid", "values": [1, 2]}}})
    assert forecast(grid).trials == 12 and forecast(grid).max_total == 60
    seconds_spec = _spec({"type": "asha", "time_attr": "time_total_s", "max_t": 100, "grace_period": 10,
                          "reduction_factor": 10}, stop={"loss": 0.1})
    seconds = forecast(seconds_spec)
    assert seconds.unit == "time_total_s" and seconds.max_total == 400
    # Rung 10 s only (100 s is max_t): the first trial runs 100 s, each other one 10 s or 100 s.
    assert set(simulate_asha(seconds_spec, 4, 1, runs=50)) == {100 + 100 * k + 10 * (3 - k) for k in range(4)}
    assert seconds.notes == ("stop on loss may end trials sooner",)
    assert describe(seconds)[0] == "forecast:   at most 400 trial-seconds (4 trials x 100)"


def test_estimate_gives_wall_time_gpu_hours_and_the_budgets_share():
    fc = forecast(_spec({"type": "hyperband", "max_t": 9, "reduction_factor": 3}, num_samples=8, time_budget_s=10))
    assert (fc.expected_total, fc.max_total) == (54, 72)
    est = estimate(fc, 2.0, 3, 0.5, time_budget_s=10)
    assert est.wall_time_s == pytest.approx(54 * 2 / 3) and est.max_wall_time_s == pytest.approx(72 * 2 / 3)
    assert est.gpu_hours == pytest.approx(54 * 2 * 0.5 / 3600)
    assert est.budget_fraction == pytest.approx(10 / 36)
    lines = describe_estimate(fc, est, 10)
    assert lines[0].startswith("wall time:  ~36 s (at most 48 s) at 3 trials at a time")
    assert lines[1] == "GPU-hours:  0.015 (0.5 GPU per trial)"
    assert lines[2] == "budget:     time_budget_s 10 s will stop the run after ~28% of the forecast work"
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
def hb_run(tmp_path_factory, on_session_ray):
    from tests.fixtures.cli import run_spec

    tmp = tmp_path_factory.mktemp("forecast")
    return type("Run", (), {"tmp": tmp, "exp": run_spec(tmp, "hb", RUN_SPEC, on_session_ray)})


@pytest.mark.slow
def test_run_records_the_forecast_and_report_compares_it(hb_run, run_cli):
    record = json.loads((hb_run.exp / "tuner_run.json").read_text())["forecast"]
    assert (record["trials"], record["max_total"], record["expected_total"], record["trials_at_once"]) == (5, 15, 11, 2)
    from tests.test_cli import readme_forecast_keys

    assert set(record) == readme_forecast_keys(), "the keys the README lists"
    assert (record["expected_low"], record["expected_high"], record["at_once"]) == (None, None, None), \
        "a range only for ASHA's simulation"
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


def test_measure_runs_its_trial_under_fifo_whatever_the_spec_scheduler(ray_local, tmp_path):
    """README: "`--measure N` runs the first trial the searcher draws for N iterations here, through Ray Tune (a
    FIFO scheduler, ...)": under a spec whose ASHA would stop every trial at max_t 1, the trial runs 3 iterations."""
    from tuner.run.prepare import prepare
    from tuner.run.measure import measure

    spec = {"name": "m", "trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min", "num_samples": 4,
            "param_space": {"x": {"type": "uniform", "low": 0, "high": 1}, "epochs": 5},
            "scheduler": {"type": "asha", "max_t": 1}, "storage": str(tmp_path / "runs"),
            "reporting": {"cli": False, "tensorboard": False}}
    prepared = prepare(spec)
    assert forecast(prepared.spec).per_trial == 1, "the spec's scheduler stops a trial at iteration 1"
    measured = measure(prepared, 3)
    assert measured.source == "one trial run for 3 iterations here" and measured.iterations == 2
    assert not (tmp_path / "runs").exists()


def test_from_leaves_each_trials_first_iteration_out(tmp_path):
    """--from an experiment whose trials' first iterations took 3 s and 5 s and the others 0.1 s to 0.4 s: the
    mean of the others only (with the firsts, 1.4 s)."""
    from tuner.run.measure import from_experiment

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
    wall = fc.expected_total * 2.0 / 3
    assert 0 < wall < 54, "the expected run (2 s an iteration, 3 at a time) is under the 54-s maximum"
    assert est.wall_time_s == pytest.approx(wall) and est.budget_fraction is None
    assert describe_estimate(fc, est, 60) == [
        f"wall time:  ~{_duration(wall)} (at most 54 s) at 3 trials at a time (expected trial-iterations x 2 s / 3)",
        f"budget:     fits time_budget_s 60 s (~{wall / 60:.0%} of it)"]


def test_the_readmes_forecast_figures_are_what_the_forecast_gives():
    """docs/guides/budget-forecast.md quotes the forecast for the main job as it is (25) and its example line for
    16 trials, rungs 1, 3 and 9, 2 at a time (63, 40 to 83.5): both are seeded, so a change to the simulation or
    to the main job's spec that moves them must change the page too."""
    from tests.fixtures.paths import ROOT, doc_text

    readme = doc_text("guides/budget-forecast.md")
    main = forecast(load_spec(ROOT / "search_spaces" / "mnist_asha.yaml"), 8, 2)
    assert f"it forecasts {main.expected_total:g}:" in readme
    assert f"expected {main.expected_total:g} (10th-90th percentile {main.expected_low:.3g} to " \
           f"{main.expected_high:.3g})" in describe(main)[1]
    example = forecast(_spec(MAIN_LIKE, num_samples=16), 16, 2)
    line = (f"expected {example.expected_total:g} (10th-90th percentile {example.expected_low:g} to "
            f"{example.expected_high:g}) under asha")
    assert line in readme, line
