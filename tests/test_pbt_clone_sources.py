"""PBT's clone sources outlive the top trials' num_to_keep, and go once no trial can restore from them
(tuner.search.population.KeepsCloneSources).

A population of 6 on 2 CPUs, each trial checkpointing every iteration with ``num_to_keep: 1``
(tests.trainables:clone_sources_member, whose score grows by its lr): by the time a bottom trial clones a
top trial, and again by the time the clone gets a CPU and restores, the top trial has saved newer
checkpoints and Ray has deleted the one PBT kept. Without tuner's copies most clones fail ("Could not
recover from checkpoint as it does not exist on storage anymore").

How many exploits the asynchronous population makes depends on the order its results arrive; the checks
go by the exploits the run recorded (Ray's ``pbt_global.txt``, as ``result.perturbations``), what each
trial reported it restored from, and the names each trial saw in ``pbt_clones/`` before each report.
"""

import json
from pathlib import Path

import pandas as pd
import pytest

from tuner import tune_model
from tuner.experiment.layout import CLONE_SOURCES_DIR, PROGRESS_FILE, RESULTS_CSV

POPULATION = 6
MAX_T = 24
INTERVAL = 3


@pytest.mark.slow
def test_clones_restore_from_kept_copies_that_go_when_no_trial_needs_them(ray_local, tmp_path, make_spec):
    experiment = tmp_path / "clones"
    clones, watch = experiment / CLONE_SOURCES_DIR, tmp_path / "watch.jsonl"
    spec = make_spec({
        "name": "clones",
        "trainable": "tests.trainables:clone_sources_member",
        "metric": "score",
        "mode": "max",
        "seed": 0,
        "num_samples": POPULATION,
        "stop": {"training_iteration": MAX_T},
        "param_space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 2e-2}, "max_t": MAX_T,
                        "clones": str(clones), "watch": str(watch)},
        "search": {"algorithm": "random"},
        "scheduler": {"type": "pbt", "perturbation_interval": INTERVAL, "quantile_fraction": 0.34,
                      "resample_probability": 0.25, "mutations": {"lr": {"type": "loguniform", "low": 1e-4,
                                                                          "high": 2e-2}}},
        "checkpoint": {"num_to_keep": 1},
        "resources": {"cpu": 1},
        "reporting": {"cli": False, "tensorboard": False},
    })
    result = tune_model(spec)
    assert result.errors == [], result.errors
    trials = pd.read_csv(experiment / RESULTS_CSV)
    assert list(trials["status"]) == ["TERMINATED"] * POPULATION and set(trials["training_iteration"]) == {MAX_T}

    exploits = result.perturbations
    assert exploits, "the population exploited (every run so far made several exploits)"
    # Each exploited trial restored from tuner's copy of the checkpoint it cloned, named <trial id>-<iteration>
    # after the trial that reported it and the iteration it was reported at (pbt_global.txt's
    # cloned_iteration), and went on from the iteration after it.
    rows = {}
    for folder in experiment.iterdir():
        if (folder / PROGRESS_FILE).is_file():
            frame = pd.read_csv(folder / PROGRESS_FILE, keep_default_na=False)
            rows[frame["trial_id"].iloc[0]] = frame.to_dict("records")
    restarts = {}  # trial -> [(copy, the first iteration it reported after restoring from it)], in order
    for trial_id, history in rows.items():
        for before, row in zip([None, *history], history):
            where = str(row["restored_from"])
            if f"/{CLONE_SOURCES_DIR}/" in where and (before is None or before["restored_from"] != where
                                                      or row["training_iteration"] != before["training_iteration"] + 1):
                assert Path(where).parent == clones, where
                restarts.setdefault(trial_id, []).append((Path(where).name, row["training_iteration"]))
    for trial_id in rows:
        own = [p for p in exploits if p["trial_id"] == trial_id]
        assert [first for _, first in restarts.get(trial_id, [])] == [p["cloned_iteration"] + 1 for p in own], \
            (trial_id, restarts.get(trial_id), own)
        for (name, _), p in zip(restarts.get(trial_id, []), own):
            owner, iteration, *_ = name.split("-")  # <trial id>-<iteration>[-<n> while that name was in use]
            assert int(iteration) == p["cloned_iteration"], (name, p)
            # every trial reports every iteration, so it reaches its perturbation points at multiples of the
            # interval (a clone goes on with the cloned trial's last perturbation time)
            assert p["iteration"] % INTERVAL == 0, p
            # the cloned trial's checkpoint, or the copy it had itself restored from (a clone not saved since)
            assert owner == p["cloned_from"] or name in [n for n, _ in restarts.get(p["cloned_from"], [])], (name, p)

    # Copies go while the run goes on: one that a trial saw before a report is missing from what a trial
    # saw later (tuner deleted it: no trial could restore from it any more).
    seen = [json.loads(line)["clones"] for line in watch.read_text().splitlines()]
    assert any(name in seen[i] and name not in later for i in range(len(seen)) for later in seen[i + 1:]
               for name in seen[i]), "no copy was deleted during the run"
    # After the run no trial restores from a copy: every trial's latest checkpoint is its own (each reported
    # one with every iteration, its last at MAX_T, after its last exploit), the population is cloned no more,
    # and the folder is gone.
    assert all(history[-1]["training_iteration"] == MAX_T for history in rows.values())
    assert not clones.exists(), f"copies no trial can restore from are deleted: {sorted(p.name for p in clones.iterdir())}"


def test_a_copy_name_still_in_use_gets_the_next_free_suffix(tmp_path):
    """A clone source is kept as ``<trial id>-<iteration>``, and as ``-2``, ``-3`` ... after it while a copy of
    that name is still in use (a clone took the trial back to an earlier iteration, which it reports again).
    An older copy of the free name that no trial can restore from is replaced; the copies in use stay.
    (The Ray look-ups of the experiment folder and of the copies in use are given here; the run above goes
    through them.)"""
    from types import SimpleNamespace

    from ray.tune import Checkpoint

    from tuner.search.population import KeepsCloneSources

    clones = tmp_path / CLONE_SOURCES_DIR
    in_use = {str(clones / "t1-5"), str(clones / "t1-5-2")}
    for name in ("t1-5", "t1-5-2", "t1-5-3"):  # t1-5-3: an older copy that no trial can restore from
        (clones / name).mkdir(parents=True)
        (clones / name / "state.json").write_text(json.dumps({"from": name}))
    source = tmp_path / "t1" / "checkpoint_000004"
    source.mkdir(parents=True)
    (source / "state.json").write_text(json.dumps({"from": "source"}))

    class Kept(KeepsCloneSources):
        def _clone_sources_folder(self, trial):
            return str(clones)

        def _clone_sources_in_use(self, besides=None):
            return set(in_use)

    kept = Kept().keep_clone_source(SimpleNamespace(trial_id="t1"), Checkpoint(str(source)), {"training_iteration": 5})
    assert kept.path == str(clones / "t1-5-3")
    assert json.loads((clones / "t1-5-3" / "state.json").read_text()) == {"from": "source"}, "the older copy replaced"
    assert {p.name: json.loads((p / "state.json").read_text())["from"] for p in clones.iterdir()} == \
        {"t1-5": "t1-5", "t1-5-2": "t1-5-2", "t1-5-3": "source"}, "the copies in use are kept as they were"
    in_use.discard(str(clones / "t1-5"))
    again = Kept().keep_clone_source(SimpleNamespace(trial_id="t1"), Checkpoint(str(source)), {"training_iteration": 5})
    assert again.path == str(clones / "t1-5"), "the plain name again once no trial restores from its copy"


def test_a_copy_stays_while_it_is_an_ended_trials_latest_checkpoint(tmp_path, monkeypatch):
    """A trial that ended before it saved a checkpoint of its own after an exploit: its latest checkpoint is the
    copy it was cloned from, which stays after the run (README); the other copies go, and the folder goes too
    once no trial's latest checkpoint is a copy. (Ray's population and clone sources are given here, as the
    run above reads them from Ray's PBT.)"""
    from ray.tune import Checkpoint

    import tuner.adapters.ray_internals as ray_internals
    from tuner.search.population import KeepsCloneSources

    clones = tmp_path / CLONE_SOURCES_DIR
    for name in ("t1-3", "t1-6"):
        (clones / name).mkdir(parents=True)
    own = tmp_path / "t1" / "checkpoint_000005"
    own.mkdir(parents=True)

    class Trial:  # a finished trial, as KeepsCloneSources reads it (hashable: Ray keys the clone sources by trial)
        def __init__(self, trial_id, checkpoint):
            self.trial_id, self.checkpoint = trial_id, Checkpoint(str(checkpoint))

        def is_finished(self):
            return True


    # t2 was cloned from t1's copy at iteration 6 and ended before its next checkpoint; t1 ended on its own.
    population = [Trial("t1", own), Trial("t2", clones / "t1-6")]
    sources = {population[1]: Checkpoint(str(clones / "t1-6"))}
    monkeypatch.setattr(ray_internals, "pbt_population", lambda scheduler: population)
    monkeypatch.setattr(ray_internals, "pbt_clone_sources", lambda scheduler: sources)
    monkeypatch.setattr(ray_internals, "drop_pbt_clone_source", lambda scheduler, t: sources.pop(t, None))

    class Kept(KeepsCloneSources):
        def _clone_sources_folder(self, trial):
            return str(clones)

    Kept()._trial_ended(population[1])
    assert sorted(p.name for p in clones.iterdir()) == ["t1-6"], "t2's latest checkpoint stays; t1-3 goes"
    assert not sources, "an ended trial is cloned no more"
    population[1].checkpoint = Checkpoint(str(tmp_path / "t2" / "checkpoint_000007"))  # had it saved its own
    Kept()._trial_ended(population[1])
    assert not clones.exists(), "no copy is any trial's latest checkpoint: the folder goes"
