"""What a report derives from a loaded experiment: the scheduler's rungs, the budget used
against the same trials without early stopping, the parameter importances (Optuna's
fANOVA over a study rebuilt from the trials), and with several objectives the Pareto front
and its hypervolume (:mod:`tuner.search.pareto`). No Ray, no matplotlib.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tuner.search import pareto
from tuner.core.best import ERROR, is_finite_number
from tuner.search.forecast import ITERATIONS, SECONDS
from tuner.experiment.layout import RUN_RECORD
from tuner.report.loading import Experiment, is_numeric, plain, read_json
from tuner.search.rungs import merged_rungs
from tuner.spec import Spec

__all__ = ["scheduler_rungs", "budget", "forecast_facts", "importances", "importance_facts", "MIN_ACTIVE_TRIALS",
           "active_label", "objective_points", "feasibility", "pareto_facts"]


def scheduler_rungs(spec: Spec | None) -> list[float]:
    """The milestones, in ``time_attr`` units, at which the spec's scheduler stops trials.

    The rungs ``tuner validate`` prints (:func:`tuner.search.rungs.bracket_rungs`), merged over
    brackets.

    Args:
        spec: The spec as run, or None.

    Returns:
        The sorted, distinct rungs below ``max_t``; empty for fifo, median and no spec.
    """
    return [] if spec is None else merged_rungs(spec)


def budget(exp: Experiment) -> dict[str, Any]:
    """What the experiment cost, against the same trials run without early stopping.

    Without early stopping, every trial that ended TERMINATED would have run as many
    iterations as the longest trial; errored and unfinished trials count as they are.
    The missing iterations are costed at the median seconds per iteration of all
    trials' iterations after their first (the first also pays for start-up), and the
    wall time is scaled by the same ratio as the trials' time (the same parallelism).

    Returns:
        ``trials``, ``full_iterations`` (the longest trial's), ``trial_iterations`` and
        ``trial_iterations_without_early_stopping``, ``trial_time_s`` and
        ``trial_time_s_without_early_stopping`` (summed over trials), ``wall_time_s`` and
        ``wall_time_s_without_early_stopping`` (None when unknown), ``stopped_early``
        (how many trials); and ``forecast`` (:func:`forecast_facts`) when the run recorded one.
    """
    t = exp.trials
    full = int(t.loc[t["status"] == "TERMINATED", "iterations"].max()) if (t["status"] == "TERMINATED").any() else 0
    used_it = int(t["iterations"].sum()) if not t.empty else 0
    # Seconds per iteration: the median of the later iterations (the first one also pays
    # for the trial's start-up), else each trial's own average.
    h = exp.history
    later = h.loc[h["training_iteration"] > 1, "time_this_iter_s"] if "time_this_iter_s" in h else pd.Series([])
    rate = float(later.median()) if later.notna().any() else None
    full_it, used_s, full_s = 0, 0.0, 0.0
    for _, row in t.iterrows():
        iters = int(row["iterations"])
        secs = float(row["time_total_s"]) if is_finite_number(row["time_total_s"]) else 0.0
        target = full if row["status"] == "TERMINATED" else iters
        full_it += target
        used_s += secs
        if iters and target > iters:
            full_s += secs + (target - iters) * (rate if rate is not None else secs / iters)
        else:
            full_s += secs
    wall = (exp.summary or {}).get("wall_time_s")
    record = read_json(exp.path / RUN_RECORD) or {}
    resumed = bool(record.get("resumed"))
    if wall is None or resumed:  # summary.json's wall time is the last session's only
        wall = _results_span(exp)
    used = {ITERATIONS: used_it, SECONDS: round(used_s, 3)}
    return {
        "trials": len(t),
        "stopped_early": int(t["stopped_early"].sum()) if not t.empty else 0,
        "full_iterations": full,
        "trial_iterations": used_it,
        "trial_iterations_without_early_stopping": full_it,
        "trial_time_s": round(used_s, 3),
        "trial_time_s_without_early_stopping": round(full_s, 3),
        "wall_time_s": None if wall is None else round(float(wall), 3),
        "wall_time_s_without_early_stopping": None if wall is None or not used_s else round(wall * full_s / used_s, 3),
        **({"forecast": forecast_facts(record["forecast"], used, exp, wall)} if record.get("forecast") else {}),
    }


def forecast_facts(recorded: dict[str, Any], used: dict[str, float], exp: Experiment,
                   wall: float | None) -> dict[str, Any]:
    """The budget forecast recorded at run start (:mod:`tuner.search.forecast`) against what was used.

    Args:
        recorded: ``tuner_run.json``'s ``forecast``.
        used: Trial-units used, by unit: ``training_iteration`` (the sum over trials of their
            last iteration) and ``time_total_s`` (their seconds).
        exp: The experiment (its results give the seconds per iteration).
        wall: The run's wall time, seconds, or None.

    Returns:
        ``unit``, ``max`` and ``expected`` (trial-units, None when unbounded), ``rule``,
        ``used`` (None for another ``time_attr``), ``used_of_expected`` (a ratio),
        ``trials_at_once``, ``seconds_per_iteration`` (the mean ``time_this_iter_s`` of the
        iterations after each trial's first, as ``tuner validate --from`` takes it),
        ``wall_time_s_forecast`` (expected x seconds per unit / trials at once: what the
        forecast gives at the rate this run measured) and ``wall_time_s`` (the run's).
    """
    unit = recorded.get("unit", ITERATIONS)
    expected = recorded.get("expected_total")
    got = used.get(unit)
    h = exp.history
    rate = None
    if unit == SECONDS:
        rate = 1.0
    elif unit == ITERATIONS and "time_this_iter_s" in h and h["time_this_iter_s"].notna().any():
        later = h.loc[h["training_iteration"] > 1, "time_this_iter_s"].dropna()
        rate = float(later.mean() if not later.empty else h["time_this_iter_s"].dropna().mean())
    at_once = recorded.get("trials_at_once")
    wall_forecast = None if expected is None or rate is None or not at_once else expected * rate / at_once
    return {
        "unit": unit,
        "max": recorded.get("max_total"),
        "expected": None if expected is None else round(float(expected), 3),
        "rule": recorded.get("rule"),
        "used": got,
        "used_of_expected": None if got is None or not expected else round(got / expected, 3),
        "trials_at_once": at_once,
        "seconds_per_iteration": None if rate is None or unit != ITERATIONS else round(rate, 6),
        "wall_time_s_forecast": None if wall_forecast is None else round(wall_forecast, 3),
        "wall_time_s": None if wall is None else round(float(wall), 3),
    }


def _results_span(exp: Experiment) -> float | None:
    """Seconds from the first trial's start to the last result, from the results' timestamps."""
    h = exp.history
    if h.empty or "timestamp" not in h or "time_this_iter_s" not in h:
        return None
    starts = h.groupby("trial_id").apply(lambda g: (g["timestamp"] - g["time_this_iter_s"]).min(), include_groups=False)
    return float(h["timestamp"].max() - starts.min())


def active_label(exp: Experiment, name: str) -> str | None:
    """``active in 3 of 8 trials (when optimizer = sgd)`` for a conditional parameter, else None."""
    if name not in exp.conditional_params:
        return None
    cond = exp.condition(name)
    return (f"active in {int(exp.active(name).sum())} of {len(exp.trials)} trials"
            + (f" (when {cond})" if cond else ""))


#: The fewest trials with a value of the metric, among those where a conditional parameter is
#: active, for its importance there; with fewer the report leaves the parameter out and says so.
MIN_ACTIVE_TRIALS = 5


def importances(exp: Experiment) -> tuple[dict[str, float], str]:
    """Parameter importances of the metric: Optuna's fANOVA over the trials.

    The importances over the parameters every trial has; :func:`importance_facts` also gives
    each conditional parameter's importance over the trials where it is active.

    Returns:
        ``({param: importance}, note)``: :func:`importance_facts`' ``importances`` and ``note``.
    """
    facts = importance_facts(exp)
    return facts["importances"], facts["note"]


def importance_facts(exp: Experiment) -> dict[str, Any]:
    """Parameter importances of the metric: Optuna's fANOVA (``FanovaImportanceEvaluator``) over the trials.

    The trials become an Optuna study (``optuna.trial.create_trial``): TERMINATED trials
    that ran to the end are COMPLETE with their last value, trials stopped early are
    PRUNED with their values by iteration, errored ones FAIL; Optuna's evaluators use
    the COMPLETE trials only, as for a study pruned by Optuna itself. With fewer than
    two such trials, every trial's value at the first iteration they all reached is used
    instead (the note says so). Parameter distributions are the observed ranges (log
    scale for the spec's log types), categorical for non-numbers.

    A conditional parameter (a ``when``, or a branch of a sub-space choice) is absent from
    the trials where it is inactive, and so from their Optuna trials (a define-by-run
    study's trials). Optuna's importances then cover the parameters every trial with a
    value has (``optuna.search_space.intersection_search_space``): ``importances``, summing
    to 1. Each other parameter is assessed over the trials where it is active, when at
    least :data:`MIN_ACTIVE_TRIALS` of them have a value: fANOVA over those trials and the
    parameters that vary among them (Optuna's ``params=``, which keeps the trials that have
    them all); its share of the variance there is ``within_active``, not comparable with
    ``importances`` (other trials, other parameters). Otherwise it is in ``left_out``, with why.

    Returns:
        ``importances`` (``{param: importance}``, highest first, summing to 1; empty when
        none could be worked out), ``note`` (how, or why not), ``trials`` (the trials with a
        value the importances used), ``within_active`` (``{param: {importance, trials,
        among, when}}``: the share of the variance among the ``trials`` where the
        parameter is active, ``among`` the other parameters that vary there, ``when`` its
        condition or None), ``left_out`` (``[{name, active, of, reason}]``: a parameter in
        no importance, active in ``active`` of the ``of`` trials with a value).
    """
    facts: dict[str, Any] = {"importances": {}, "note": "", "trials": 0, "within_active": {}, "left_out": []}
    if not exp.metric or not exp.params:
        facts["note"] = "no metric or no sampled parameter"
        return facts
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    values, over, use_pruned = _importance_values(exp)
    facts["trials"] = len(values)
    if len(values) < 2:
        facts["note"] = f"needs at least 2 trials with a finite {exp.metric}"
        return facts
    dists = _observed_distributions(exp, values, facts["left_out"])
    if not dists:
        facts["note"] = "no parameter varies between the trials"
        return facts
    study = _rebuilt_study(exp, dists, values, use_pruned)
    found = _fanova(study, None)
    if found is None:
        facts["note"] = f"the {exp.metric} is the same in every trial: no parameter explains any of its variance"
        return facts
    facts["importances"] = found
    _assess_conditional(exp, study, dists, facts)
    facts["note"] = f"fANOVA (Optuna) over {over}"
    if facts["within_active"] or any(e["reason"].startswith("too few") for e in facts["left_out"]):
        facts["note"] += (f"; the parameters every one of them has share the importances; each conditional "
                          f"parameter is assessed over the trials where it is active (at least "
                          f"{MIN_ACTIVE_TRIALS}), as its share among the parameters that vary there")
    return facts


def _importance_values(exp: Experiment) -> tuple[dict[str, Any], str, bool]:
    """The metric's value per trial id for the importances, how they were taken (for the note), and whether
    trials stopped early count as pruned: the trials that ran to the end, else with fewer than two of those
    every trial's value at the last iteration every trial that reported reached."""
    t = exp.trials
    last = exp.last_col
    complete = t[(t["status"] == "TERMINATED") & ~t["stopped_early"] & t[last].map(is_finite_number)]
    if len(complete) >= 2:
        return (dict(zip(complete["trial_id"], complete[last])),
                f"the {len(complete)} trials that ran to the end; trials stopped early count as pruned", True)
    ok = t[(t["status"] != "ERROR") & (t["iterations"] > 0)]
    level = int(ok["iterations"].min()) if not ok.empty else 0
    h = exp.history
    at = h[(h["training_iteration"] == level) & h["trial_id"].isin(ok["trial_id"])] if level else h.iloc[0:0]
    values = {tid: v for tid, v in zip(at["trial_id"], at.get(exp.metric, [])) if is_finite_number(v)}
    return (values, f"the {exp.metric} of {len(values)} trials at iteration {level}, the last one every trial that "
                    "reported reached: fewer than 2 trials ran to the end", False)


def _observed_distributions(exp: Experiment, values: dict[str, Any], left_out: list[dict]) -> dict[str, Any]:
    """Each parameter that varies: its Optuna distribution over the observed values (a float range, log for the
    spec's log types; categorical for non-numbers); each other parameter goes to ``left_out``, with why."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    t = exp.trials
    log_params = {name for name in exp.params if exp.log_scale(name)}
    with_value = t["trial_id"].isin(list(values))
    dists: dict[str, Any] = {}
    for name in exp.params:
        col = t.get(f"config/{name}")
        vals = [] if col is None else [v for v in map(plain, col.tolist()) if v is not None]
        if all(is_numeric(v) for v in vals) and vals:
            low, high = float(min(vals)), float(max(vals))
            if low < high:
                dists[name] = FloatDistribution(low, high, log=name in log_params and low > 0)
        elif len({str(v) for v in vals}) > 1:
            dists[name] = CategoricalDistribution(sorted({str(v) for v in vals}))
        if name not in dists:
            active = int((exp.active(name) & with_value).sum())
            reason = "takes one value in the trials that have it" if vals else "active in no trial"
            left_out.append({"name": name, "active": active, "of": len(values), "reason": reason})
    return dists


def _rebuilt_study(exp: Experiment, dists: dict[str, Any], values: dict[str, Any], use_pruned: bool) -> Any:
    """An Optuna study of the trials (:func:`importance_facts` says which trial becomes what)."""
    import optuna

    study = optuna.create_study(direction="minimize" if exp.mode == "min" else "maximize")
    for _, row in exp.trials.iterrows():
        _add_trial(study, exp, row, dists, values, use_pruned)
    return study


def _add_trial(study: Any, exp: Experiment, row: pd.Series, dists: dict[str, Any], values: dict[str, Any],
               use_pruned: bool) -> None:
    """Add a trial's row to the study: COMPLETE with its value, PRUNED (stopped early) or FAIL; others not."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    params = {}
    for name, dist in dists.items():
        v = plain(row[f"config/{name}"])
        if v is not None:  # a conditional parameter the trial does not have
            params[name] = str(v) if isinstance(dist, CategoricalDistribution) else float(v)
    outcome = _optuna_state(row, values, use_pruned)
    if outcome is None:
        return
    state, value = outcome
    inter = {}
    h = exp.history
    if state == TrialState.PRUNED and exp.metric in h:
        g = h[(h["trial_id"] == row["trial_id"])]
        inter = {int(i): float(v) for i, v in zip(g["training_iteration"], g[exp.metric]) if is_finite_number(v)}
    try:
        study.add_trial(create_trial(state=state, value=value, params=params,
                                     distributions={k: dists[k] for k in params}, intermediate_values=inter))
    except ValueError:
        return


def _optuna_state(row: pd.Series, values: dict[str, Any], use_pruned: bool) -> tuple[Any, float | None] | None:
    """A trial's Optuna state and value: COMPLETE with its value, PRUNED (stopped early), FAIL (errored), or None."""
    from optuna.trial import TrialState

    if row["trial_id"] in values:
        return TrialState.COMPLETE, float(values[row["trial_id"]])
    if use_pruned and row["stopped_early"]:
        return TrialState.PRUNED, None
    if row["status"] == "ERROR":
        return TrialState.FAIL, None
    return None


def _fanova(study: Any, params: list[str] | None) -> dict[str, float] | None:
    """Optuna's fANOVA; None when the metric is the same in every trial it uses (Optuna raises
    "zero total variance")."""
    import optuna

    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
    try:
        result = optuna.importance.get_param_importances(study, evaluator=evaluator, params=params,
                                                         normalize=True)
    except RuntimeError:
        return None
    return {k: float(v) for k, v in result.items()}


def _assess_conditional(exp: Experiment, study: Any, dists: dict[str, Any], facts: dict[str, Any]) -> None:
    """Each parameter without an importance: fANOVA over the trials where it is active (``within_active``),
    or into ``left_out``, with why."""
    from optuna.trial import TrialState

    done = [tr for tr in study.trials if tr.state == TrialState.COMPLETE]
    for name in dists:
        if name in facts["importances"]:
            continue
        here = [tr for tr in done if name in tr.params]
        if len(here) < MIN_ACTIVE_TRIALS:
            facts["left_out"].append({"name": name, "active": len(here), "of": len(done),
                                      "reason": f"too few: fANOVA over the trials where it is active needs at "
                                                f"least {MIN_ACTIVE_TRIALS}"})
            continue
        vary = [q for q in dists if all(q in tr.params for tr in here) and len({tr.params[q] for tr in here}) > 1]
        if name not in vary:
            facts["left_out"].append({"name": name, "active": len(here), "of": len(done),
                                      "reason": "takes one value in the trials where it is active"})
            continue
        share = _fanova(study, vary)
        if share is None:
            facts["left_out"].append({"name": name, "active": len(here), "of": len(done),
                                      "reason": f"the {exp.metric} is the same in the trials where it is active"})
            continue
        facts["within_active"][name] = {"importance": share[name], "trials": len(here),
                                        "among": [q for q in vary if q != name], "when": exp.condition(name)}


def objective_points(exp: Experiment) -> dict[str, list[float] | None]:
    """Each trial's last value of every objective, or None when it has no result.

    A trial *has a result* when it did not error and its last value of every objective is a
    finite number (as :func:`tuner.search.pareto.objective_values`).

    Returns:
        Trial id -> one float per objective (in :attr:`Experiment.objectives` order) or None,
        in :attr:`Experiment.trials` order.
    """
    out: dict[str, list[float] | None] = {}
    for _, row in exp.trials.iterrows():
        values = [plain(row.get(f"last_{o.metric}")) for o in exp.objectives]
        ok = row["status"] != ERROR and all(is_finite_number(v) for v in values)
        out[row["trial_id"]] = [float(v) for v in values] if ok else None
    return out


def feasibility(exp: Experiment) -> dict[str, int]:
    """How many trials with a result meet every constraint (:func:`tuner.search.pareto.feasible`).

    Returns:
        ``feasible``, ``infeasible`` (trials with a result, see :func:`objective_points`) and
        ``no_result`` (errored, or without a finite value of every objective yet). Without
        constraints every trial with a result is feasible.
    """
    points = objective_points(exp)
    feasible = dict(zip(exp.trials["trial_id"], exp.trials["feasible"])) if "feasible" in exp.trials else {}
    with_result = [t for t, p in points.items() if p is not None]
    n = sum(1 for t in with_result if feasible.get(t, True))
    return {"feasible": n, "infeasible": len(with_result) - n, "no_result": len(points) - len(with_result)}


def pareto_facts(exp: Experiment) -> dict[str, Any] | None:
    """The Pareto front and its hypervolume, for a report (:mod:`tuner.search.pareto`'s rules).

    The reference point is ``summary.json``'s (``hypervolume.reference``) when the summary
    describes the experiment as it is now, else :func:`tuner.search.pareto.reference_point` over the
    feasible trials with a result (each objective's worst value, 10% of its range further out).
    The hypervolume history adds the trials in the order they were created
    (:attr:`Experiment.created`).

    Returns:
        None with fewer than two objectives; else ``objectives`` (``[{metric, mode}]``),
        ``constraints`` (``["latency_ms <= 30", ...]``), ``front`` (one
        ``{trial_id, objectives: {metric: value}, config}`` per trial on the front, in
        :attr:`Experiment.trials` order), ``feasible`` and ``infeasible`` (how many trials with
        a result meet every constraint and how many do not), ``no_result`` (trials errored
        or without a finite value of every objective yet), ``hypervolume``
        (``{reference: [one per objective], value}``, None without a feasible result) and
        ``history`` (``{trial_ids: [...], hypervolume: [...]}`` in creation order).
    """
    if not exp.multi_objective:
        return None
    objectives = exp.objectives
    points = objective_points(exp)
    feasible = dict(zip(exp.trials["trial_id"], exp.trials["feasible"])) if "feasible" in exp.trials else {}
    ok = {t: p for t, p in points.items() if p is not None and feasible.get(t, True)}
    front_ids = exp.front
    front = [{"trial_id": t, "objectives": {o.metric: v for o, v in zip(objectives, points[t] or [])},
              "config": exp.config_of(t)} for t in front_ids]
    reference = None
    summary_hv = (exp.summary or {}).get("hypervolume")
    if isinstance(summary_hv, dict) and isinstance(summary_hv.get("reference"), list) \
            and len(summary_hv["reference"]) == len(objectives) \
            and all(is_finite_number(v) for v in summary_hv["reference"]):
        reference = [float(v) for v in summary_hv["reference"]]
    elif ok:
        reference = pareto.reference_point(list(ok.values()), objectives)
    order = [t for t in exp.created if t in points]
    hypervolume = None
    history: list[float] = []
    if reference is not None:
        value = pareto.hypervolume([points[t] for t in front_ids if points[t] is not None], objectives, reference)
        hypervolume = {"reference": reference, "value": value}
        history = pareto.hypervolume_history([ok.get(t) for t in order], objectives, reference)
    return {
        "objectives": [{"metric": o.metric, "mode": o.mode} for o in objectives],
        "constraints": [c.describe() for c in exp.constraints],
        "front": front,
        **feasibility(exp),
        "hypervolume": hypervolume,
        "history": {"trial_ids": order, "hypervolume": history},
    }
