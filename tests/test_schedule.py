"""What a PBT run gives back (tuner/search/schedule.py): the perturbations in summary.json, best_schedule.yaml,
the report's PBT plots, and `tuner run --replay`, on one real PBT run through a tuner spec (4 trials of
tests.trainables:pbt_member, synchronous, 6 iterations, a perturbation every 2) made once for the module.
"""

import base64
import csv
import json
import shutil
from pathlib import Path

import matplotlib.colors as mcolors
import pytest
import yaml

from tuner.core.params import flatten
from tuner.adapters.state import newest_state_file
from tuner.experiment.layout import (BEST_SCHEDULE, PBT_GLOBAL, PROGRESS_FILE, REPLAY_POLICY, RESULTS_CSV, RUN_RECORD, SPEC_SNAPSHOT,
                                     SUMMARY)

pytestmark = pytest.mark.xdist_group("test_schedule")

SPEC = """\
name: pbt
trainable: tests.trainables:pbt_member
metric: score
mode: max
seed: 1
stop: {training_iteration: 6}
param_space:
  lr: {type: grid, values: [0.1, 0.2, 0.4, 0.8]}
  opt:
    width: {type: randint, low: 10, high: 100}
scheduler:
  type: pbt
  perturbation_interval: 2
  quantile_fraction: 0.5
  resample_probability: 0
  synch: true
  mutations:
    lr: {type: choice, values: [0.1, 0.2, 0.4, 0.8]}
    opt.width: {type: randint, low: 10, high: 100}
reporting: {cli: {enabled: false}}
"""


def _lr_by_iteration(trial_folder: Path) -> dict[int, float]:
    with open(trial_folder / PROGRESS_FILE, newline="") as f:
        return {int(r["training_iteration"]): float(r["lr"]) for r in csv.DictReader(f)}


def _trial_folder(exp: Path, trial_id: str) -> Path:
    return next(p for p in exp.iterdir() if p.is_dir() and p.name.endswith(trial_id))


@pytest.fixture(scope="module")
def pbt(tmp_path_factory, ray_local):
    """The PBT run: (spec file, TuneResult)."""
    from tuner.run.engine import tune_model

    root = tmp_path_factory.mktemp("pbt")
    spec = root / "pbt.yaml"
    spec.write_text(SPEC + f"storage: {root / 'runs'}\n")
    return spec, tune_model(spec)


@pytest.mark.slow
def test_perturbations_are_read_from_rays_logs(pbt):
    """summary.json's perturbations: one per line of Ray's pbt_global.txt, trial ids (not tags), and the
    trial trained on with the new config right after the exploit."""
    _, result = pbt
    exp = Path(result.experiment_path)
    summary = json.loads((exp / SUMMARY).read_text())
    lines = (exp / PBT_GLOBAL).read_text().splitlines()
    assert summary["perturbations"] == result.perturbations
    assert len(result.perturbations) == len(lines) >= 2
    ids = set(result.dataframe["trial_id"])
    assert len(ids) == 4, "a PBT trial must keep its own id in results.csv"
    for p in result.perturbations:
        assert {p["trial_id"], p["cloned_from"]} <= ids
        # Synchronous: every trial waits at the perturbation point, so each exploit is at a multiple of the
        # interval and copies the top trial's checkpoint of that same iteration, whichever trial's result came
        # last (Ray's own log said one iteration less for that trial; it failed this test once under load).
        assert p["time"] == p["iteration"] and p["iteration"] % 2 == 0 and p["cloned_iteration"] == p["iteration"]
        assert p["cloned_config"]["lr"] in (0.1, 0.2, 0.4, 0.8) and p["new_config"]["lr"] in (0.1, 0.2, 0.4, 0.8)
        lr = _lr_by_iteration(_trial_folder(exp, p["trial_id"]))
        if p["iteration"] + 1 in lr:  # an exploit at the last iteration has nothing after it
            assert lr[p["iteration"] + 1] == p["new_config"]["lr"], p
    firsts = {}
    for p in result.perturbations:  # the old config is the trial's own: its sampled lr, then the last new one
        firsts.setdefault(p["trial_id"], p)
    for trial_id, p in firsts.items():
        assert p["old_config"]["lr"] == _lr_by_iteration(_trial_folder(exp, trial_id))[1]


@pytest.mark.slow
def test_mutations_move_a_choice_to_a_neighbour_and_round_an_integer(pbt):
    """``resample_probability: 0``: a ``choice`` moves to a neighbouring value of its list (or stays, at an
    end of it); a ``randint``, named with a dot (``opt.width``: nested in param_space), is multiplied by 0.8
    or 1.2 and rounded to an integer; and the trial trains on with them."""
    _, result = pbt
    values = [0.1, 0.2, 0.4, 0.8]
    assert result.perturbations, "a synchronous population of 4 with quantile 0.5 exploits at iteration 2"
    for p in result.perturbations:
        i = values.index(p["cloned_config"]["lr"])
        assert p["new_config"]["lr"] in {values[max(i - 1, 0)], values[min(i + 1, len(values) - 1)]}, p
        width, new = p["cloned_config"]["opt"]["width"], p["new_config"]["opt"]["width"]
        assert type(new) is int and new in {round(width * 0.8), round(width * 1.2)} and new != width, p
        assert set(flatten(p["new_config"])) == set(flatten(p["cloned_config"])), p
    last = {}
    for p in result.perturbations:
        last[p["trial_id"]] = p
    for trial_id, p in last.items():  # each exploited trial ends with the config of its last exploit
        row = result.dataframe[result.dataframe["trial_id"] == trial_id].iloc[0]
        assert (row["config/lr"], row["config/opt/width"]) == (p["new_config"]["lr"], p["new_config"]["opt"]["width"])


@pytest.mark.slow
def test_pbt_keeps_four_checkpoints_a_trial_by_default(pbt):
    """``checkpoint.num_to_keep`` is 4 under pbt/pb2 when the spec does not set it: each trial of 6 iterations,
    a checkpoint every iteration, keeps its best 4 (score grows: the newest 4)."""
    spec, result = pbt
    assert "checkpoint" not in yaml.safe_load(spec.read_text())
    exp = Path(result.experiment_path)
    for trial_id in result.dataframe["trial_id"]:
        kept = sorted(p.name for p in _trial_folder(exp, trial_id).glob("checkpoint_*"))
        assert len(kept) == 4, (trial_id, kept)


def _changed(steps: list[dict]) -> list[str]:
    """What ``changed`` must say for a schedule of this run: ``opt/width`` changes at every perturbation (x0.8 or
    x1.2, rounded), ``lr`` when a step moved it (at an end of its list it may stay)."""
    lr_moved = any(a["config"]["lr"] != b["config"]["lr"] for a, b in zip(steps, steps[1:]))
    return ["lr"] * lr_moved + ["opt/width"] * (len(steps) > 1)


@pytest.mark.slow
def test_best_schedule_yaml_matches_the_perturbations(pbt):
    from tuner.search.schedule import best_schedule

    _, result = pbt
    exp = Path(result.experiment_path)
    written = yaml.safe_load((exp / BEST_SCHEDULE).read_text())
    assert written == result.best_schedule and written["trial_id"] == result.best_trial_id
    assert written["schedule"][0]["from_iteration"] == 1
    # the last step's config is the one the best trial ended with; a schedule of more than one step is that
    # of a perturbed trial
    assert written["schedule"][-1]["config"] == result.best_config
    own = [p for p in result.perturbations if p["trial_id"] == result.best_trial_id]
    assert (len(written["schedule"]) > 1) == bool(own), (written, own)
    assert written["changed"] == _changed(written["schedule"]), written
    # every perturbed trial's schedule: its steps after the first are its lineage's exploits
    for trial_id in {p["trial_id"] for p in result.perturbations}:
        schedule = best_schedule(exp, trial_id)
        steps = schedule["schedule"]
        assert schedule["policy_file"] is not None and len(steps) >= 2
        assert schedule["changed"] == _changed(steps), schedule
        own = [p for p in result.perturbations if p["trial_id"] == trial_id]
        assert steps[-1] == {"from_iteration": own[-1]["cloned_iteration"] + 1, "trial_id": trial_id,
                             "config": own[-1]["new_config"]}
        for step in steps[1:]:
            assert any(p["trial_id"] == step["trial_id"] and p["new_config"] == step["config"]
                       and p["cloned_iteration"] + 1 == step["from_iteration"] for p in result.perturbations)


@pytest.mark.slow
def test_report_draws_the_schedule_and_the_lineage(pbt, run_cli, tmp_path):
    _, result = pbt
    table = run_cli("report", result.experiment_path)
    assert table.returncode == 0, table.stderr
    assert f"PBT: {len(result.perturbations)} perturbations of the population" in table.stdout
    assert f"Schedule of the best trial {result.best_trial_id}" in table.stdout
    facts = run_cli("report", result.experiment_path, "--format", "json")
    assert facts.returncode == 0, facts.stderr
    facts = json.loads(facts.stdout)["experiment"]
    assert len(facts["perturbations"]) == len(result.perturbations) > 0
    assert facts["best_schedule"]["trial_id"] == result.best_trial_id
    assert facts["best_schedule"]["schedule"] == json.loads(json.dumps(result.best_schedule["schedule"]))
    page = tmp_path / "r.html"
    html = run_cli("report", result.experiment_path, "--format", "html", "--output", page)
    assert html.returncode == 0, html.stderr
    plots = page.with_name("r_plots")
    text = page.read_text()
    assert "PBT schedule and lineage" in text
    for name, alt in (("pbt_schedule", "PBT schedule"), ("pbt_lineage", "PBT lineage")):  # the page shows the PNGs
        data = base64.b64encode((plots / f"{name}.png").read_bytes()).decode("ascii")
        assert f'<img src="data:image/png;base64,{data}" alt="{alt}">' in text, name
    check_pbt_plots(result)


def check_pbt_plots(result) -> None:
    """What the report's PBT plots draw (the figures the PNGs are rendered from): ``pbt_schedule``, one step
    line per hyperparameter through the best trial's schedule; ``pbt_lineage``, one arrow per perturbation
    from the cloned trial's row at its checkpoint's iteration to the exploiting trial's row at the exploit,
    red where the best trial's weights went through it."""
    from tuner.report import load_experiment
    from tuner.report.plots import _plot_pbt_lineage, _plot_pbt_schedule

    exp = load_experiment(result.experiment_path)
    steps = result.best_schedule["schedule"]
    last = int(exp.history[exp.history["trial_id"] == result.best_trial_id]["training_iteration"].max())
    shown = [s for s in steps if s["from_iteration"] <= last]
    names = result.best_schedule["changed"] or ["lr", "opt/width"]  # never perturbed: the sampled ones
    fig = _plot_pbt_schedule(exp)
    assert [ax.get_ylabel() for ax in fig.axes] == names
    for ax, name in zip(fig.axes, names):
        values = [flatten(s["config"])[name] for s in shown]
        line = ax.get_lines()[0]
        assert list(line.get_xdata()) == [s["from_iteration"] for s in shown] + [last + 1], name
        assert list(line.get_ydata()) == pytest.approx(values + values[-1:]), name
    assert result.best_trial_id in fig.texts[0].get_text()

    ax = _plot_pbt_lineage(exp).axes[0]
    row = {label.get_text().rstrip(" *"): y for label, y in zip(ax.get_yticklabels(), ax.get_yticks())}
    assert set(row) == set(result.dataframe["trial_id"])
    arrows = sorted((a.xyann, a.xy, a.arrow_patch.get_edgecolor()[:3]) for a in ax.texts)
    on_path = {(s["trial_id"], s["from_iteration"] - 1) for s in steps[1:]}
    red, blue = mcolors.to_rgb("crimson"), mcolors.to_rgb("tab:blue")
    assert arrows == sorted(((p["cloned_iteration"] + 0.5, row[p["cloned_from"]]), (p["iteration"] + 0.5, row[p["trial_id"]]),
                             red if (p["trial_id"], p["cloned_iteration"]) in on_path else blue)
                            for p in result.perturbations)


def test_the_report_of_other_schedulers_has_no_pbt_section(tmp_path):
    """An ASHA experiment's report has no PBT section; the same folder with a pbt spec.yaml has one."""
    from tuner.report import load_experiment, render

    asha = SPEC.split("scheduler:")[0] + "scheduler: {type: asha, max_t: 6, grace_period: 2}\n"
    (tmp_path / SPEC_SNAPSHOT).write_text(asha)
    exp = load_experiment(tmp_path)
    assert exp.spec.scheduler.type == "asha"
    assert not exp.pbt and "PBT" not in render(exp)
    (tmp_path / SPEC_SNAPSHOT).write_text(SPEC)
    assert load_experiment(tmp_path).pbt and "PBT: 0 perturbations" in render(load_experiment(tmp_path))


@pytest.mark.slow
def test_replay_changes_the_config_at_the_same_iterations(pbt, run_cli, on_session_ray):
    """A replay of a perturbed trial: one trial, started with the schedule's first config, whose lr
    changes at each step of the schedule (progress.csv) and that trains every iteration of ``stop``
    (Ray 2.60's replay alone ended the trial one iteration after its first change), in <name>-replay
    with the policy it replayed and a tuner_run.json that names the experiment and the schedule."""
    from tuner.search.schedule import best_schedule

    spec, result = pbt
    exp = Path(result.experiment_path)
    schedules = {t: best_schedule(exp, t)["schedule"] for t in sorted({p["trial_id"] for p in result.perturbations})}
    # a trial whose config changes (a replay that never switched config would not pass), the latest change
    # first: its lr or its width (every exploit may keep lr: the top trial's 0.8 mutates to 0.8 or 0.4)
    def changes(steps: list[dict]) -> bool:
        return len({(s["config"]["lr"], s["config"]["opt"]["width"]) for s in steps}) > 1

    switching = sorted((t for t, steps in schedules.items() if changes(steps)),
                       key=lambda t: (-schedules[t][-1]["from_iteration"], t))
    assert switching, schedules
    trial_id = switching[0]
    steps = schedules[trial_id]
    proc = run_cli("run", spec, "--replay", f"{exp}:{trial_id}", env=on_session_ray)
    assert proc.returncode == 0, proc.stderr
    replay = exp.with_name("pbt-replay")
    assert (replay / REPLAY_POLICY).read_text() == (exp / f"pbt_policy_{trial_id}.txt").read_text()
    record = json.loads((replay / RUN_RECORD).read_text())["replay"]
    assert record["trial_id"] == trial_id and record["experiment"] == str(exp)
    assert record["schedule"] == [{"from_iteration": s["from_iteration"], "config": s["config"]} for s in steps]
    assert (replay / SPEC_SNAPSHOT).read_text().startswith("# A replay (tuner run --replay)")
    folders = [p for p in replay.iterdir() if p.is_dir() and (p / PROGRESS_FILE).is_file()]
    assert len(folders) == 1
    with open(folders[0] / PROGRESS_FILE, newline="") as f:
        seen = {int(r["training_iteration"]): (float(r["lr"]), int(r["width"])) for r in csv.DictReader(f)}
    config = {i: [s for s in steps if s["from_iteration"] <= i][-1]["config"] for i in range(1, 7)}
    assert seen == {i: (c["lr"], c["opt"]["width"]) for i, c in config.items()}, \
        "the replay left the schedule, or ended before stop.training_iteration"
    # the replayed trial's seed (results.csv), also inside the replay's trial (trial.seed())
    with open(exp / RESULTS_CSV, newline="") as f:
        seeds = {r["trial_id"]: int(r["trial_seed"]) for r in csv.DictReader(f)}
    assert len(set(seeds.values())) == 4
    assert record["trial_seed"] == seeds[trial_id]
    with open(folders[0] / PROGRESS_FILE, newline="") as f:
        assert {int(r["seed_seen"]) for r in csv.DictReader(f)} == {seeds[trial_id]}
    with open(replay / RESULTS_CSV, newline="") as f:
        assert [int(r["trial_seed"]) for r in csv.DictReader(f)] == [seeds[trial_id]]

    # `tuner resume` of the finished replay reruns nothing, and keeps what says it is a replay
    header = (replay / SPEC_SNAPSHOT).read_text().split("\nname:")[0]
    progress = (folders[0] / PROGRESS_FILE).read_text()
    resumed = run_cli("resume", replay, env=on_session_ray)
    assert resumed.returncode == 0, resumed.stderr
    assert (replay / SPEC_SNAPSHOT).read_text().startswith(header + "\nname:"), "the replay's comment is kept"
    assert json.loads((replay / RUN_RECORD).read_text())["replay"] == record
    assert (folders[0] / PROGRESS_FILE).read_text() == progress, "nothing reran"
    # A replay whose trial did not finish is refused before anything starts: Ray's replay scheduler would
    # come back as it was at the start and take the trial back to the schedule's first config. Forced on a
    # copy whose experiment state has the trial PAUSED, as a killed replay leaves it.
    unfinished = replay.with_name("pbt-replay-unfinished")
    shutil.copytree(replay, unfinished, symlinks=True)
    state_file = newest_state_file(unfinished)
    state = json.loads(state_file.read_text())
    for entry in state["trial_data"]:
        trial = json.loads(entry[0])
        entry[0] = json.dumps({**trial, "status": "PAUSED"})
    state_file.write_text(json.dumps(state))
    before = sorted((str(f.relative_to(unfinished)), f.stat().st_mtime_ns) for f in unfinished.rglob("*"))
    refused = run_cli("resume", unfinished)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr == (f"tuner: error: {unfinished}: {unfinished} is a replay (tuner run --replay) of trial "
                              f"{trial_id} of {exp}, and its trial {trial['trial_id']} did not finish. A replay cannot "
                              "be resumed: Ray's PopulationBasedTrainingReplay keeps no record of how far through the "
                              "schedule it got, so the resumed trial would go back to the schedule's first config. "
                              f"Replay it again as a new experiment: tuner run SPEC --replay {exp}:{trial_id} "
                              "--name NEW.\n")
    assert sorted((str(f.relative_to(unfinished)), f.stat().st_mtime_ns) for f in unfinished.rglob("*")) == before


@pytest.mark.slow
def test_replay_defaults_to_the_best_trial(pbt):
    """--replay EXPERIMENT without :TRIAL replays the trial summary.json names best (its schedule and seed)."""
    from tuner.run.prepare import prepare
    from tuner.search.schedule import trial_schedule

    spec, result = pbt
    exp = Path(result.experiment_path)
    best = json.loads((exp / SUMMARY).read_text())["best"]["trial_id"]
    assert best == result.best_trial_id
    replay = prepare(spec, replay=str(exp)).replay
    assert replay is not None and replay.trial_id == best
    assert replay.schedule == trial_schedule(exp, best)
    assert replay.seed == prepare(spec, replay=f"{exp}:{best}").replay.seed


@pytest.mark.parametrize("name", [None, "mine"])
def test_replay_is_named_name_replay_unless_a_name_is_given(name, monkeypatch, tmp_path):
    """README "Running": the replay is a new experiment, `<name>-replay` unless `--name` (`name=`) is given; the
    replayed experiment is a stand-in here (check_replay reads a real one), and nothing starts."""
    from tuner.run import prepare as engine

    schedule = [{"from_iteration": 0, "config": {"lr": 0.2, "opt": {"width": 30}}}]
    replayed = engine.Replay(tmp_path / "pbt", "t1", "", schedule)
    monkeypatch.setattr(engine, "check_replay", lambda replay: replayed)
    spec = yaml.safe_load(SPEC) | {"storage": str(tmp_path / "runs")}
    prepared = engine.prepare(spec, replay=str(tmp_path / "pbt"), name=name)
    assert prepared.spec.name == (name or "pbt-replay")
    assert prepared.replay is replayed and prepared.spec.param_space == {"lr": 0.2, "opt": {"width": 30}}


@pytest.mark.slow
@pytest.mark.parametrize("case", ["missing", "not_pbt", "unknown_trial", "no_best"])
def test_replay_errors(case, pbt, run_cli, tmp_path):
    """Bad --replay: one paragraph, exit 2, nothing started or written."""
    import shutil

    spec, result = pbt
    exp = Path(result.experiment_path)
    if case == "no_best":  # a copy of the experiment whose summary.json names no best trial
        target = tmp_path / "nobest"
        shutil.copytree(exp, target, symlinks=True)
        summary = json.loads((target / SUMMARY).read_text())
        (target / SUMMARY).write_text(json.dumps({**summary, "best": None}))
        ids = ", ".join(sorted(result.dataframe["trial_id"]))
        expected = (f"tuner: error: --replay {target}: {target} has no best trial (its summary.json names none: "
                    "the run did not finish, or no trial reported a finite metric); name the trial to replay: "
                    f"--replay {target}:TRIAL_ID, one of: {ids}.")
    elif case == "missing":
        target, expected = tmp_path / "nowhere", (
            f"tuner: error: --replay {tmp_path / 'nowhere'}: {tmp_path / 'nowhere'} is not an experiment folder "
            "(no such folder); give the folder of a PBT or PB2 experiment, e.g. --replay runs/mnist-pbt, or "
            "--replay runs/mnist-pbt:TRIAL_ID for a trial other than the best.")
    elif case == "not_pbt":
        target = tmp_path / "asha"
        target.mkdir()
        (target / SPEC_SNAPSHOT).write_text("scheduler: {type: asha}\n")
        expected = (f"tuner: error: --replay {target}: {target} is not a PBT or PB2 experiment (its spec.yaml's "
                    "scheduler.type is neither pbt nor pb2, and it holds no pbt_global.txt), so it has no "
                    "hyperparameter schedule to replay; give the folder of an experiment run with scheduler: "
                    "{type: pbt} or {type: pb2}.")
    else:
        target = f"{exp}:nope"
        ids = ", ".join(sorted(result.dataframe["trial_id"]))
        expected = (f"tuner: error: --replay {target}: {exp} has no trial 'nope'; its trials are: {ids} "
                    f"(`tuner report {exp}` lists them, best first).")
    before = sorted(p.name for p in exp.parent.iterdir())
    proc = run_cli("run", spec, "--replay", target, "--name", f"replay-{case}")
    assert proc.returncode == 2
    assert proc.stderr.strip() == expected
    assert sorted(p.name for p in exp.parent.iterdir()) == before


def test_pbt_schedule_labels_each_step_with_the_trial_that_trained_it(tmp_path):
    """README: the `pbt_schedule` plot is "a step plot, each step labelled with the trial that trained it", and
    the report's PBT section gives the best trial's schedule step by step, with who trained each step."""
    import pandas as pd

    from tuner.report.loading import Experiment
    from tuner.report.plots import _plot_pbt_schedule
    from tuner.report.text import pbt_lines

    steps = [{"from_iteration": 1, "trial_id": "pbt_00000", "config": {"lr": 0.1, "opt": {"width": 10}}},
             {"from_iteration": 3, "trial_id": "pbt_00002", "config": {"lr": 0.4, "opt": {"width": 10}}},
             {"from_iteration": 5, "trial_id": "pbt_00001", "config": {"lr": 0.2, "opt": {"width": 10}}}]
    history = pd.DataFrame([{"trial_id": "pbt_00001", "training_iteration": i, "score": float(i)} for i in range(1, 7)])
    trials = pd.DataFrame([{"trial_id": f"pbt_0000{i}", "status": "TERMINATED", "iterations": 6,
                            "stopped_early": False, "config/lr": 0.1 * (i + 1), "last_score": 6.0} for i in range(3)])
    exp = Experiment(path=tmp_path, name="pbt", spec=None, metric="score", mode="max", status="finished",
                     started=None, summary=None, trials=trials, history=history, best_trial="pbt_00001",
                     params=["lr", "opt/width"], pbt=True, perturbations=[],
                     schedule={"trial_id": "pbt_00001", "policy_file": None, "changed": ["lr"], "schedule": steps})
    fig = _plot_pbt_schedule(exp)
    assert [ax.get_ylabel() for ax in fig.axes] == ["lr"]
    labels = [(text.get_text(), tuple(map(float, text.xy))) for text in fig.axes[0].texts]
    assert labels == [("pbt_00000", (1.0, 0.1)), ("pbt_00002", (3.0, 0.4)), ("pbt_00001", (5.0, 0.2))]
    assert pbt_lines(exp)[1:] == ["Schedule of the best trial pbt_00001 (lr changes):",
                                  "  from iteration 1: lr=0.1 (trained by pbt_00000)",
                                  "  from iteration 3: lr=0.4 (trained by pbt_00002)",
                                  "  from iteration 5: lr=0.2 (trained by pbt_00001)"]
