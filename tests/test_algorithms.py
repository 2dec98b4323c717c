"""Searcher/scheduler factory: the right Ray objects, rung milestones and plan text."""

import pytest
from ray.tune.schedulers import (ASHAScheduler, FIFOScheduler, HyperBandForBOHB, HyperBandScheduler,
                                 MedianStoppingRule)
from ray.tune.search.basic_variant import BasicVariantGenerator
from ray.tune.search.bohb import TuneBOHB
from ray.tune.search.optuna import OptunaSearch

from tuner.search.algorithms import build_scheduler, build_searcher, describe_search
from tuner.search.rungs import bracket_rungs as rungs
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


def readme_defaults(table: str) -> dict[str, dict[str, str]]:
    """``{row name: {option: default text}}`` of the searcher or scheduler table in docs/guides/searchers-and-schedulers.md
    (options shown as ``name`` (default)); a row that says "as `other`" takes the other row's defaults."""
    import re

    from tests.fixtures.paths import doc_text

    page = doc_text("guides/searchers-and-schedulers.md")
    section = page.split(f"\n## {table}\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and (name := re.fullmatch(r"`(\w+)`( \(default\))?", cells[0])):
            same = re.match(r"as `(\w+)`", cells[2])
            rows[name.group(1)] = dict(rows[same.group(1)]) if same else dict(re.findall(r"`(\w+)` \(([^)]+)\)",
                                                                                        cells[2]))
    return rows


def parse_default(text: str):
    if text in ("true", "false"):
        return text == "true"
    if "/" in text:
        a, b = text.split("/")
        return float(a) / float(b)
    try:
        return float(text)
    except ValueError:
        return text


def _built_searcher(algo):
    from tuner.search.space import to_ray_space

    s = spec(search={"algorithm": algo}, param_space={"x": {"type": "uniform", "low": 0, "high": 1}})
    searcher = build_searcher(s)
    if algo == "bohb":  # TuneBOHB builds hpbandster's BOHB once it knows the space
        searcher.set_search_properties("loss", "min", to_ray_space(s))
        return searcher.bohber
    return searcher


# The attribute of the built Ray (or Optuna, hpbandster) object that holds each documented option.
SEARCHER_OPTIONS = {
    ("optuna", "sampler"): lambda s: {"TPESampler": "tpe", "NSGAIISampler": "nsga2",
                                      "NSGAIIISampler": "nsga3"}[type(s._sampler).__name__],
    ("optuna", "n_startup_trials"): lambda s: s._sampler._n_startup_trials,
    ("optuna", "multivariate"): lambda s: s._sampler._multivariate,
    ("bohb", "top_n_percent"): lambda b: b.top_n_percent,
    ("bohb", "num_samples"): lambda b: b.num_samples,
    ("bohb", "random_fraction"): lambda b: b.random_fraction,
    ("bohb", "bandwidth_factor"): lambda b: b.bw_factor,
    ("bohb", "min_bandwidth"): lambda b: b.min_bandwidth,
}
SCHEDULER_OPTIONS = {
    "time_attr": lambda s: s._time_attr,
    "grace_period": lambda s: s._brackets[0]._rungs[-1][0] if hasattr(s, "_brackets") else s._grace_period,
    "reduction_factor": lambda s: s._reduction_factor if hasattr(s, "_reduction_factor") else s._eta,
    "brackets": lambda s: len(s._brackets),
    "stop_last_trials": lambda s: s._stop_last_trials,
    "min_samples_required": lambda s: s._min_samples_required,
    "hard_stop": lambda s: s._hard_stop,
    "perturbation_interval": lambda s: s._perturbation_interval,
    "burn_in_period": lambda s: s._burn_in_period,
    "quantile_fraction": lambda s: s._quantile_fraction,
    "resample_probability": lambda s: s._resample_probability,
    "synch": lambda s: s._synch,
}


def test_every_documented_searcher_default_is_the_built_searchers():
    documented = readme_defaults("Searchers")
    assert set(documented) == {"random", "grid", "optuna", "bohb"}
    checked = 0
    for algo, options in documented.items():
        for option, text in options.items():
            assert (algo, option) in SEARCHER_OPTIONS, f"README documents {algo}'s {option} ({text}): check it here"
            assert SEARCHER_OPTIONS[algo, option](_built_searcher(algo)) == pytest.approx(parse_default(text)), \
                (algo, option)
            checked += 1
    assert checked == len(SEARCHER_OPTIONS), documented  # the table parsed


@pytest.mark.parametrize("sampler", ["nsga2", "nsga3"])
def test_nsga_population_size_defaults_to_optunas_50(sampler):
    """README "Searchers": `population_size` for nsga2/nsga3 is by default Optuna's 50, and a given one is used.
    Building either warns nothing (Optuna's "NSGAIIISampler is experimental" reached a run's console)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = build_searcher(spec(search={"algorithm": "optuna", "sampler": sampler}, seed=0))
    assert [str(w.message) for w in caught] == []
    assert built._sampler._population_size == 50
    built = build_searcher(spec(search={"algorithm": "optuna", "sampler": sampler, "population_size": 8}, seed=0))
    assert built._sampler._population_size == 8


def test_every_documented_scheduler_default_is_the_built_schedulers():
    documented = readme_defaults("Schedulers")
    assert set(documented) == {"fifo", "asha", "hyperband", "bohb", "median", "pbt", "pb2"}
    checked = 0
    for kind, options in documented.items():
        search = {"algorithm": "bohb"} if kind == "bohb" else {"algorithm": "random"}
        space = {"x": {"type": "uniform", "low": 0, "high": 1}} if kind in ("pbt", "pb2") else {}
        built = build_scheduler(spec(search=search, scheduler={"type": kind}, param_space=space))
        for option, text in options.items():
            assert option in SCHEDULER_OPTIONS, f"README documents {kind}'s {option} ({text}): check it here"
            assert SCHEDULER_OPTIONS[option](built) == pytest.approx(parse_default(text)), (kind, option)
            checked += 1
    # asha, hyperband, bohb (as hyperband), median, pbt, pb2: the table parsed
    assert checked == 5 + 1 + 1 + 3 + 5 + 3, documented
    # "max_t defaults to stop.training_iteration, else 100"
    assert build_scheduler(spec(scheduler={"type": "asha"}))._max_t == 100
    assert build_scheduler(spec(scheduler={"type": "asha"}, stop={"training_iteration": 7}))._max_t == 7
    assert build_scheduler(spec(scheduler={"type": "hyperband"}, stop={"training_iteration": 7}))._max_t_attr == 7
