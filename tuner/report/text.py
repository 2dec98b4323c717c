"""The report as text: the console table, CSV and JSON of ``tuner report``, and the
experiments table of ``tuner list``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from tuner.report.analysis import active_label, budget, feasibility, importance_facts, pareto_facts
from tuner.report.loading import Experiment, ReportError, is_experiment, plain, load_experiment

__all__ = ["render", "list_experiments", "render_list", "pbt_lines", "pareto_lines", "pareto_frame", "parameter_lines",
           "parameters", "header_lines", "display_frame", "FORMATS"]

FORMATS = ("table", "csv", "json", "html")


def _fmt(v: Any) -> str:
    v = plain(v)
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def header_lines(exp: Experiment) -> list[str]:
    """The report's header: the experiment's status, its trials by status, the metric or objectives
    (and constraints), and the best trial with its value.

    Args:
        exp: From :func:`load_experiment`.

    Returns:
        Two lines, three with a best trial; no newlines.
    """
    t = exp.trials
    counts = t["status"].value_counts()
    by_status = ", ".join(f"{n} {s}" for s, n in counts.items()) or "none yet"
    lines = [f"Experiment {exp.name} ({exp.path}): {exp.status}"
             + (f", started {exp.started}" if exp.started else "")]
    metric = f"metric {exp.metric} ({exp.mode})" if exp.metric else "no metric"
    if exp.multi_objective:
        metric = "objectives " + ", ".join(f"{o.metric} ({o.mode})" for o in exp.objectives)
    if exp.constraints:
        metric += "; constraints " + ", ".join(c.describe() for c in exp.constraints)
    if exp.metric and not exp.multi_objective:
        metric += f"; best trial by scope {exp.scope}"
    lines.append(f"{len(t)} trials ({by_status}); {metric}")
    if exp.best_trial is not None:
        row = t.loc[t["trial_id"] == exp.best_trial].iloc[0]
        if exp.multi_objective:
            values = ", ".join(f"{o.metric}={_fmt(row[f'last_{o.metric}'])}" for o in exp.objectives)
            lines.append(f"Best trial {exp.best_trial} (*): {values} (the front's best on {exp.metric})")
        else:
            score = "" if exp.scope == "last" else f", {exp.scope} {_fmt(row[f'score_{exp.metric}'])}"
            lines.append(f"Best trial {exp.best_trial} (*): {exp.metric}={_fmt(row[exp.last_col])}{score}")
    return lines


def parameter_lines(exp: Experiment) -> list[str]:
    """The conditional parameters section: each one's condition and how many trials have it.

    Returns:
        Lines of text (``momentum: active in 3 of 8 trials (when optimizer = sgd)``); empty
        when no parameter is conditional.
    """
    names = exp.conditional_params
    if not names:
        return []
    return ["Conditional parameters (a trial has one only where its condition holds; '-' where it does not):",
            *(f"  {name}: {active_label(exp, name)}" for name in names)]


def parameters(exp: Experiment) -> list[dict[str, Any]]:
    """The sampled parameters, for ``--format json``.

    Returns:
        One ``{name, type, active_trials}`` per parameter, in :attr:`Experiment.params`
        order: ``type`` the spec's distribution (``uniform | loguniform`` for a key that
        branches define each their own way; absent without a spec), ``active_trials``
        how many trials have the parameter; a conditional parameter adds ``when``, its
        condition as text (``optimizer = sgd``).
    """
    out = []
    for name in exp.params:
        entry: dict[str, Any] = {"name": name}
        kind = exp.param_type(name)
        if kind is not None:
            entry["type"] = kind
        entry["active_trials"] = int(exp.active(name).sum())
        cond = exp.condition(name)
        if cond is not None:
            entry["when"] = cond
        out.append(entry)
    return out


def _objective_label(metric: str, mode: str) -> str:
    return f"{metric} ({mode})"


def pareto_frame(exp: Experiment, facts: dict[str, Any] | None = None) -> pd.DataFrame:
    """The Pareto front as a table: one row per trial on it, in :attr:`Experiment.trials` order.

    Args:
        exp: From :func:`load_experiment`, with several objectives.
        facts: :func:`tuner.report.analysis.pareto_facts` of ``exp``, if already worked out.

    Returns:
        Columns ``trial_id``, ``<metric> (<mode>)`` per objective (the last value) and each
        sampled parameter, values formatted as text; empty with one objective.
    """
    facts = facts if facts is not None else pareto_facts(exp)
    if facts is None:
        return pd.DataFrame()
    by_id = exp.trials.set_index("trial_id")
    rows = []
    for entry in facts["front"]:
        row = {"trial_id": entry["trial_id"]}
        for o in exp.objectives:
            row[_objective_label(o.metric, o.mode)] = _fmt(entry["objectives"].get(o.metric))
        for name in exp.params:
            col = f"config/{name}"
            row[name] = _fmt(by_id.at[entry["trial_id"], col]) if col in by_id else "-"
        rows.append(row)
    columns = ["trial_id", *(_objective_label(o.metric, o.mode) for o in exp.objectives), *exp.params]
    return pd.DataFrame(rows, columns=columns)


def _reference_text(exp: Experiment, reference: list[float]) -> str:
    return ", ".join(f"{o.metric}={_fmt(v)}" for o, v in zip(exp.objectives, reference))


def pareto_lines(exp: Experiment, facts: dict[str, Any] | None = None) -> list[str]:
    """The Pareto front section: its size, the feasible and infeasible trials, the hypervolume
    and its reference point, and the front as a table; with one objective and constraints,
    one line of feasible and infeasible trials.

    Args:
        exp: From :func:`load_experiment`.
        facts: :func:`tuner.report.analysis.pareto_facts` of ``exp``, if already worked out.

    Returns:
        Lines of text; empty with one objective and no constraint.
    """
    if not exp.multi_objective:
        if not exp.constraints:
            return []
        f = feasibility(exp)
        return [f"Feasible: {f['feasible']} of {f['feasible'] + f['infeasible']} trials with a result "
                f"({', '.join(c.describe() for c in exp.constraints)}); an infeasible trial is never the best"]
    facts = facts if facts is not None else pareto_facts(exp)
    assert facts is not None
    n = len(facts["front"])
    with_result = facts["feasible"] + facts["infeasible"]
    lines = [f"Pareto front: {n} of the {facts['feasible']} feasible trials"
             + (f"; {facts['infeasible']} of {with_result} trials with a result are infeasible "
                f"({', '.join(facts['constraints'])})" if exp.constraints else "")
             + (f"; {facts['no_result']} without a result" if facts["no_result"] else "")]
    hv = facts["hypervolume"]
    if hv is not None:
        lines.append(f"Hypervolume {_fmt(hv['value'])} (reference point {_reference_text(exp, hv['reference'])})")
    if n:
        lines += ["", pareto_frame(exp, facts).to_string(index=False)]
    return lines


def pbt_lines(exp: Experiment) -> list[str]:
    """The PBT/PB2 section: how many perturbations, and the best trial's schedule step by step.

    Returns:
        Lines of text; empty when the run was not PBT/PB2.
    """
    if not exp.pbt:
        return []
    n = len(exp.perturbations)
    lines = [f"PBT: {n} perturbation{'s' if n != 1 else ''} of the population"]
    schedule = exp.schedule or {}
    if schedule.get("schedule"):
        changed = schedule.get("changed") or []
        lines.append(f"Schedule of the best trial {schedule['trial_id']}"
                     + (f" ({', '.join(changed)} change{'s' if len(changed) == 1 else ''}):" if changed else
                        " (never changed):"))
        from tuner.core.params import flatten

        for step in schedule["schedule"]:
            config = flatten(step["config"])
            shown = {k: config[k] for k in changed if k in config} if changed else config
            lines.append(f"  from iteration {step['from_iteration']}: "
                         f"{', '.join(f'{k}={_fmt(v)}' for k, v in shown.items())} (trained by {step['trial_id']})")
    return lines


def display_frame(exp: Experiment, top: int | None) -> pd.DataFrame:
    """The trials table as shown (console and HTML): one row per trial, best first, every value formatted.

    Args:
        exp: From :func:`load_experiment`.
        top: Only the ``top`` best trials; None or 0 for every trial.

    Returns:
        A frame of strings: a first column ``*`` for the best trial, ``trial_id``, ``status``,
        ``iter``, the sampled parameters, the metric's last and best values (and its score under
        another ``best.scope``), or with several objectives each one's last value, constrained
        metrics' last values, ``feasible`` and ``pareto`` where present; ``-`` for no value.
    """
    t = exp.trials.head(top) if top else exp.trials
    cols = ["trial_id", "status", "iterations"] + [f"config/{p}" for p in exp.params if f"config/{p}" in t]
    if exp.multi_objective:  # every objective's last value
        cols += [f"last_{o.metric}" for o in exp.objectives]
    elif exp.metric:
        cols += [exp.last_col, exp.best_col] + ([f"score_{exp.metric}"] if exp.scope != "last" else [])
    shown = {o.metric for o in exp.objectives}
    cols += [f"last_{c.metric}" for c in exp.constraints if c.metric not in shown and f"last_{c.metric}" in t]
    cols += [c for c in ("feasible", "pareto") if c in t]
    out = pd.DataFrame({"": ["*" if b else "" for b in t["best"]]}, index=t.index)
    for c in cols:
        name = c[len("config/"):] if c.startswith("config/") else c
        if c == exp.best_col:
            name = f"{exp.metric} (best)"
        elif c == f"score_{exp.metric}":
            name = f"{exp.metric} ({exp.scope})"
        elif c.startswith("last_"):
            name = f"{c[len('last_'):]} (last)"
        elif c == "iterations":
            name = "iter"
        out[name] = [_fmt(v) for v in t[c]]
    return out


def render(exp: Experiment, fmt: str = "table", top: int | None = None) -> str:
    """Render the trials as text.

    Args:
        exp: From :func:`load_experiment`.
        fmt: ``table`` (a header and the trials, best marked ``*``), ``csv`` (every
            column of :attr:`Experiment.trials`) or ``json`` (``experiment``: status,
            best trial and config, budget, ``parameters`` (:func:`parameters`),
            ``importances`` (:func:`tuner.report.analysis.importance_facts`), for a
            PBT/PB2 run ``perturbations`` and
            ``best_schedule``, with several objectives or constraints ``objectives``,
            ``constraints`` and the feasible/infeasible counts under ``trials``, with
            several objectives ``pareto_front``, ``hypervolume`` and
            ``hypervolume_history``; ``trials``: one object per trial, without the
            ``config/<param>`` of a conditional parameter the trial does not have). A
            table with conditional parameters has the :func:`parameter_lines` under its
            header; a PBT/PB2 run's, the :func:`pbt_lines`; one with several
            objectives or constraints, the :func:`pareto_lines`.
        top: Only the ``top`` best trials.

    Returns:
        The text, ending with a newline.
    """
    t = exp.trials.head(top) if top else exp.trials
    if fmt == "table":
        lines = header_lines(exp)
        conditional = parameter_lines(exp)
        if conditional:
            lines += ["", *conditional]
        pbt = pbt_lines(exp)
        if pbt:
            lines += ["", *pbt]
        front = pareto_lines(exp)
        if front:
            lines += ["", *front]
        if t.empty:
            lines.append("(no trials yet)")
        else:
            lines += ["", display_frame(exp, top).to_string(index=False)]
        return "\n".join(lines) + "\n"
    if fmt == "csv":
        return t.to_csv(index=False)
    if fmt == "json":
        trials = json.loads(t.to_json(orient="records", double_precision=15))
        absent = [f"config/{k}" for k in exp.conditional_keys]
        for record in trials:  # a parameter a trial does not have is absent from its record, as from its config
            for key in absent:
                if record.get(key, 0) is None:
                    del record[key]
        doc = {"experiment": _facts(exp), "trials": trials}
        return json.dumps(doc, indent=2, default=str) + "\n"
    raise ValueError(f"unknown format {fmt!r}; allowed: table, csv, json (html: write_html)")


def _facts(exp: Experiment) -> dict[str, Any]:
    best_value = None
    if exp.best_trial is not None:
        best_value = plain(exp.trials.loc[exp.trials["trial_id"] == exp.best_trial, exp.last_col].iloc[0])
    return {
        "name": exp.name, "path": str(exp.path), "status": exp.status, "started": exp.started,
        "metric": exp.metric, "mode": exp.mode, "scope": exp.scope,
        "trials": {"total": len(exp.trials), "by_status": {str(k): int(v) for k, v in
                                                           exp.trials["status"].value_counts().items()},
                   **(feasibility(exp) if exp.multi_objective or exp.constraints else {})},
        "best": None if exp.best_trial is None else {"trial_id": exp.best_trial, "value": best_value,
                                                    "config": exp.best_config},
        "budget": budget(exp),
        "parameters": parameters(exp),
        "importances": importance_facts(exp),
        **({"perturbations": exp.perturbations, "best_schedule": exp.schedule} if exp.pbt else {}),
        **_pareto_facts_json(exp),
    }


def _pareto_facts_json(exp: Experiment) -> dict[str, Any]:
    """With several objectives or constraints: ``objectives``, ``constraints``, and with several
    objectives ``pareto_front`` and ``hypervolume`` (as summary.json's) and ``hypervolume_history``."""
    if not exp.multi_objective and not exp.constraints:
        return {}
    out: dict[str, Any] = {
        "objectives": [{"metric": o.metric, "mode": o.mode} for o in exp.objectives],
        "constraints": [c.model_dump(exclude_none=True) for c in exp.constraints],
    }
    facts = pareto_facts(exp)
    if facts is not None:
        out["pareto_front"] = facts["front"]
        out["hypervolume"] = facts["hypervolume"]
        out["hypervolume_history"] = facts["history"]
    return out


def list_experiments(storage: str | os.PathLike = "runs") -> pd.DataFrame:
    """One row per experiment in a storage folder, oldest first.

    Args:
        storage: The parent folder of the experiments (a spec's ``storage``).

    Returns:
        Columns ``name``, ``status``, ``trials`` (count, with the errored ones),
        ``best`` (``metric=value``), ``started`` and ``path``.

    Raises:
        ReportError: If ``storage`` is not a folder.
    """
    root = Path(storage).expanduser()
    if not root.is_dir():
        raise ReportError(f"{root} is not a folder; give the storage folder that holds the experiments "
                          "(a spec's `storage:`, `runs` by default).")
    rows = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not is_experiment(folder):
            continue
        exp = load_experiment(folder)
        t = exp.trials
        errored = int((t["status"] == "ERROR").sum())
        trials = f"{len(t)}" + (f" ({errored} errored)" if errored else "")
        best = "-"
        if exp.best_trial is not None:
            best = f"{exp.metric}={_fmt(t.loc[t['trial_id'] == exp.best_trial, exp.last_col].iloc[0])}"
        rows.append({"name": exp.name, "status": exp.status, "trials": trials, "best": best,
                     "started": exp.started or "-", "path": str(exp.path)})
    frame = pd.DataFrame(rows, columns=["name", "status", "trials", "best", "started", "path"])
    return frame.sort_values(["started", "name"], kind="stable").reset_index(drop=True)


def render_list(frame: pd.DataFrame) -> str:
    """The table ``tuner list`` prints: one line per experiment (without the path column)."""
    if frame.empty:
        return "(no experiments)\n"
    return frame.drop(columns=["path"]).to_string(index=False) + "\n"
