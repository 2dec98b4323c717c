"""Searcher/scheduler factory: the right Ray objects, rung milestones and plan text."""

import pytest
from ray.tune.schedulers import (ASHAScheduler, FIFOScheduler, HyperBandForBOHB, HyperBandScheduler,
                                 MedianStoppingRule)
from ray.tune.search.basic_variant import BasicVariantGenerator
from ray.tune.search.bohb import TuneBOHB
from ray.tune.search.optuna import OptunaSearch

from tuner.algorithms import build_scheduler, build_searcher, describe_search, rungs
from tuner.spec import load_spec

BASE = {"trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min"}


def spec(**kw):
    return load_spec({**BASE, **kw})


@pytest.mark.parametrize("algo,cls", [("random", BasicVariantGenerator), ("grid", BasicVariantGenerator),
                                      ("optuna", OptunaSearch), ("bohb", TuneBOHB)])
def test_searchers(algo, cls):
    assert isinstance(build_searcher(spec(search={"algorithm": algo}, seed=1)), cls)


@pytest.mark.parametrize("kind,cls", [("fifo", FIFOScheduler), ("asha", ASHAScheduler),
                                      ("hyperband", HyperBandScheduler), ("median", MedianStoppingRule)])
def test_schedulers(kind, cls):
    assert isinstance(build_scheduler(spec(scheduler={"type": kind})), cls)


def test_bohb_scheduler():
    assert isinstance(build_scheduler(spec(search={"algorithm": "bohb"})), HyperBandForBOHB)


def test_asha_rungs_match_ray():
    s = spec(scheduler={"type": "asha", "max_t": 10, "grace_period": 1, "reduction_factor": 3})
    assert rungs(s) == [[1, 3, 9]]
    ray_rungs = sorted(m for m, _ in build_scheduler(s)._brackets[0]._rungs)
    assert ray_rungs == [1, 3, 9]


def test_asha_brackets_match_ray():
    s = spec(scheduler={"type": "asha", "max_t": 27, "grace_period": 1, "reduction_factor": 3, "brackets": 2})
    ours = rungs(s)
    ray = [sorted(m for m, _ in b._rungs) for b in build_scheduler(s)._brackets]
    assert ours == ray == [[1, 3, 9, 27], [3, 9, 27]]


def test_hyperband_brackets():
    s = spec(scheduler={"type": "hyperband", "max_t": 9, "reduction_factor": 3})
    assert rungs(s) == [[1, 3, 9], [3, 9], [9]]


def test_describe_mentions_rungs():
    text = "\n".join(describe_search(spec(seed=0, scheduler={"type": "asha", "max_t": 10, "reduction_factor": 3})))
    assert "random (BasicVariantGenerator), seed 0" in text
    assert "bracket 0: rungs at 1, 3, 9 iterations" in text


def test_hyperband_stops_trials_left_paused_in_a_finished_bracket():
    """Ray's Hyperband left them PAUSED forever (a hang) when the bracket's last trial ended on its own.
    (HyperBandForBOHB gets the same fix; its on_trial_result needs a whole Tune controller.)"""
    kind = "hyperband"
    from ray.tune.experiment import Trial

    sched = build_scheduler(load_spec({"trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min",
                                       "search": {"algorithm": "bohb" if kind == "bohb" else "random"},
                                       "scheduler": {"type": kind, "max_t": 9, "reduction_factor": 3}}))
    sched.set_search_properties("loss", "min")

    class Controller:  # the two calls Hyperband makes of Tune's controller here
        stopped: list = []

        def stop_trial(self, t):
            t.set_status(Trial.TERMINATED)
            self.stopped.append(t)
            sched.on_trial_remove(self, t)

    controller = Controller()
    trials = [Trial("f", stub=True) for _ in range(40)]
    for t in trials:
        sched.on_trial_add(controller, t)
    bracket = next(sched._trial_info[t][0] for t in trials if sched._trial_info[t][0]._halves == 0)
    *paused, last = [t for t in trials if sched._trial_info[t][0] is bracket]  # its trials run to max_t at once
    for i, t in enumerate(paused):
        t.set_status(Trial.RUNNING)
        assert sched.on_trial_result(controller, t, {"training_iteration": 9, "loss": 1.0 + i}) == "PAUSE"
        t.set_status(Trial.PAUSED)
    last.set_status(Trial.TERMINATED)  # its final result comes with done: on_trial_complete, not on_trial_result
    sched.on_trial_complete(controller, last, {"training_iteration": 9, "loss": 0.5, "done": True})
    assert [t.status for t in paused] == [Trial.TERMINATED] * len(paused)
