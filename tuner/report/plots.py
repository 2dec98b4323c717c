"""The report's plots, drawn with matplotlib (no pyplot) and rendered to PNG: learning
curves with the scheduler's rungs, the metric against each parameter, parallel
coordinates of the top trials, parameter importances and the budget; for a PBT/PB2 run
also the best trial's hyperparameter schedule and the population's lineage; with several
objectives the Pareto front and the hypervolume against trial count.
"""

from __future__ import annotations

import io
import itertools
import math
import os
import textwrap
from pathlib import Path
from typing import Any

from tuner.core.best import has_result, is_finite_number
from tuner.experiment.files import atomic_write
from tuner.core.params import flatten
from tuner.report.analysis import (active_label, budget, importance_facts, objective_points, pareto_facts,
                                   scheduler_rungs)
from tuner.report.loading import Experiment, is_numeric, plain

__all__ = ["write_plots", "render_plots", "save_pngs", "x_attr"]


def _figure(width: float, height: float):
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", facecolor="white")
    return buf.getvalue()


def x_attr(exp: Experiment) -> str:
    """The x axis of the learning curves: the scheduler's ``time_attr`` where the results have it.

    Args:
        exp: From :func:`tuner.report.loading.load_experiment`.

    Returns:
        The spec's ``scheduler.time_attr`` when it is a column of :attr:`Experiment.history`,
        else ``training_iteration``.
    """
    attr = exp.spec.scheduler.time_attr if exp.spec else "training_iteration"
    return attr if attr in exp.history.columns else "training_iteration"


def _colors(n: int):
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(i / max(1, n - 1) * 0.9) for i in range(n)]


def _plot_curves(exp: Experiment):
    h, metric = exp.history, exp.metric
    if not metric or metric not in h:
        return None
    x = x_attr(exp)
    fig = _figure(9, 5)
    ax = fig.add_subplot()
    order = list(exp.trials["trial_id"])  # best first: darkest
    colors = dict(zip(order, _colors(len(order))))
    early = set(exp.trials.loc[exp.trials["stopped_early"], "trial_id"])
    stopped_label = False
    for trial_id in reversed(order):
        g = h[h["trial_id"] == trial_id].sort_values(x)
        g = g[g[metric].map(is_finite_number)]
        if g.empty:
            continue
        best = trial_id == exp.best_trial
        ax.plot(g[x], g[metric], color="crimson" if best else colors[trial_id], lw=2.6 if best else 1.2,
                alpha=1 if best else 0.8, marker="o" if len(g) < 30 else None, ms=3,
                label=f"best: {trial_id}" if best else None, zorder=3 if best else 2)
        if trial_id in early:
            ax.plot(g[x].iloc[-1], g[metric].iloc[-1], "x", color="black", ms=8, mew=2, zorder=4,
                    label=None if stopped_label else "stopped early")
            stopped_label = True
    rungs = scheduler_rungs(exp.spec)
    if rungs and x == (exp.spec.scheduler.time_attr if exp.spec else x):
        for i, r in enumerate(rungs):
            ax.axvline(r, color="grey", ls="--", lw=1, zorder=1,
                       label=f"{exp.spec.scheduler.type} rungs" if i == 0 else None)
    ax.set_xlabel(x)
    ax.set_ylabel(metric)
    ax.set_title(f"Learning curves: {metric} of {len(order)} trials ({exp.mode})")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    return fig


def _param_values(exp: Experiment, name: str) -> tuple[list, bool, list | None]:
    """Values of a parameter per trial (in trials order; None where the trial does not have it:
    a conditional parameter, inactive), whether numeric, and category labels."""
    vals = [plain(v) for v in exp.trials[f"config/{name}"]]
    if all(v is None or is_numeric(v) for v in vals):
        return vals, True, None
    labels = sorted({str(v) for v in vals if v is not None})
    return [None if v is None else labels.index(str(v)) for v in vals], False, labels



def _log_param(exp: Experiment, name: str, vals: list) -> bool:
    log = exp.log_scale(name)
    if log is not None:  # the spec's distribution
        return log
    pos = [v for v in vals if v is not None and v > 0]
    return len(pos) == len(vals) and bool(pos) and max(pos) / min(pos) > 100


def _plot_params(exp: Experiment):
    if not exp.metric or not exp.params or exp.trials.empty:
        return None
    params = [p for p in exp.params if f"config/{p}" in exp.trials]
    n = len(params)
    if not n:
        return None
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig = _figure(4.2 * cols, 3.4 * rows)
    y = [plain(v) for v in exp.trials[exp.last_col]]
    early = list(exp.trials["stopped_early"])
    best = list(exp.trials["best"])
    for i, name in enumerate(params):
        ax = fig.add_subplot(rows, cols, i + 1)
        xs, numeric, labels = _param_values(exp, name)
        for group, style in ((False, dict(color="tab:blue", s=30, label="ran to the end")),
                             (True, dict(facecolors="none", edgecolors="grey", s=30, label="stopped early"))):
            pts = [(x, v) for x, v, e, b in zip(xs, y, early, best) if e == group and not b and x is not None
                   and v is not None]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], **style)
        for x, v, b in zip(xs, y, best):
            if b and x is not None and v is not None:
                ax.scatter([x], [v], marker="*", s=180, color="crimson", zorder=3, label="best")
        if numeric and _log_param(exp, name, [v for v in xs if v is not None]):
            ax.set_xscale("log")
        if labels is not None:
            ax.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 4 else 0)
        ax.set_xlabel(name)
        ax.set_ylabel(f"{exp.metric} (last)")
        active = active_label(exp, name)
        if active:  # its points: only the trials that have it
            ax.set_title(textwrap.fill(active, 60), fontsize=8)
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize=7)
    conditional = " (a conditional parameter: the trials where it is active only)" if exp.conditional_params else ""
    fig.suptitle(f"{exp.metric} (last reported) against each parameter{conditional}")
    return fig


#: Where a trial without a conditional parameter meets that parameter's axis, below its range [0, 1].
_INACTIVE = -0.3


def _plot_parallel(exp: Experiment, top: int):
    if not exp.metric or not exp.params:
        return None
    t = exp.trials[[has_result(v, s) for v, s in zip(exp.trials[exp.last_col], exp.trials["status"])]].head(top)
    params = [p for p in exp.params if f"config/{p}" in t]
    if t.empty or not params:
        return None
    # (label, values in [0, 1] or INACTIVE, tick labels low/high)
    axes_cols: list[tuple[str, list[float], list[str]]] = []
    for name in params:
        vals, numeric, labels = _param_values(exp, name)
        idx = [exp.trials.index.get_loc(i) for i in t.index]
        vals = [vals[i] for i in idx]
        if all(v is None for v in vals):
            axes_cols.append((name, [_INACTIVE] * len(vals), ["", ""]))
        elif numeric:
            log = _log_param(exp, name, [v for v in vals if v is not None])
            scaled = [None if v is None else math.log10(v) if log and v > 0 else float(v) for v in vals]
            present = [v for v in scaled if v is not None]
            lo, hi = min(present), max(present)
            norm = [_INACTIVE if v is None else (v - lo) / (hi - lo) if hi > lo else 0.5 for v in scaled]
            lo_v, hi_v = (10 ** lo, 10 ** hi) if log else (lo, hi)
            axes_cols.append((name, norm, [f"{lo_v:.3g}", f"{hi_v:.3g}"]))
        else:
            assert labels is not None
            k = max(1, len(labels) - 1)
            axes_cols.append((name, [_INACTIVE if v is None else v / k if len(labels) > 1 else 0.5 for v in vals],
                              [labels[0], labels[-1]]))
    m = [float(v) for v in t[exp.last_col]]
    lo, hi = min(m), max(m)
    axes_cols.append((f"{exp.metric} (last)", [(v - lo) / (hi - lo) if hi > lo else 0.5 for v in m],
                      [f"{lo:.4g}", f"{hi:.4g}"]))
    fig = _figure(max(6, 1.8 * len(axes_cols)), 4.5)
    ax = fig.add_subplot()
    xs = list(range(len(axes_cols)))
    colors = _colors(len(t))
    for j in reversed(range(len(t))):
        best = t["trial_id"].iloc[j] == exp.best_trial
        ax.plot(xs, [c[1][j] for c in axes_cols], color="crimson" if best else colors[j], lw=2.6 if best else 1.3,
                alpha=1 if best else 0.85, zorder=3 if best else 2, marker="o", ms=3)
    inactive = any(_INACTIVE in c[1] for c in axes_cols)
    for x, (_label, norm, ticks) in zip(xs, axes_cols):
        ax.plot([x, x], [-0.02, 1.02], color="black", lw=1, zorder=1)
        ax.text(x, -0.06, ticks[0], ha="center", va="top", fontsize=8)
        ax.text(x, 1.06, ticks[1], ha="center", va="bottom", fontsize=8)
        if _INACTIVE in norm:  # a conditional parameter: the trials without it meet its axis below, apart
            ax.plot([x], [_INACTIVE], "s", color="lightgrey", ms=9, zorder=1)
            ax.text(x + 0.06, _INACTIVE, "inactive", ha="left", va="center", fontsize=7, style="italic",
                    color="dimgrey")
    ax.set_xticks(xs, [c[0] for c in axes_cols])
    ax.set_yticks([])
    ax.set_ylim(_INACTIVE - 0.1 if inactive else -0.18, 1.18)
    ax.set_xlim(-0.3, len(axes_cols) - 0.7)
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"Parallel coordinates of the top {len(t)} trials (best in red; darker = better)"
                 + ("\n'inactive': below a conditional parameter's axis, the trials that do not have it" if inactive
                    else ""))
    return fig


def _plot_importances(facts: dict[str, Any]):
    """The importances as bars; a conditional parameter's share over the trials where it is
    active in a second panel (another set of trials: not comparable with the first)."""
    imp, within = facts["importances"], facts["within_active"]
    if not imp and not within:
        return None
    panels = [p for p in ((imp, "tab:blue", f"importance over the {facts['trials']} trials (sums to 1)",
                           "Parameter importances (fANOVA)"),
                          ({n: w["importance"] for n, w in within.items()}, "tab:purple",
                           "share of the variance among the trials where it is active",
                           "Conditional parameters, over the trials where each is active")) if p[0]]
    heights = [0.5 * len(p[0]) + 1.4 for p in panels]
    fig = _figure(7, sum(heights))
    grid = fig.add_gridspec(len(panels), 1, height_ratios=heights)
    for k, (values, color, xlabel, title) in enumerate(panels):
        ax = fig.add_subplot(grid[k])
        names = list(values)[::-1]
        labels = [f"{n} ({within[n]['trials']} trials)" if values is not imp else n for n in names]
        ax.barh(labels, [values[n] for n in names], color=color)
        for i, n in enumerate(names):
            ax.text(values[n], i, f" {values[n]:.2f}", va="center", fontsize=9)
        ax.set_xlim(0, 1.1)
        ax.set_xlabel(xlabel)
        ax.set_title(title)
    return fig


def _plot_budget(b: dict[str, Any]):
    fig = _figure(8, 3.2)
    pairs = [("trial-iterations", b["trial_iterations"], b["trial_iterations_without_early_stopping"]),
             ("trial time (s)", b["trial_time_s"], b["trial_time_s_without_early_stopping"])]
    if b["wall_time_s"] is not None and b["wall_time_s_without_early_stopping"] is not None:
        pairs.append(("wall time (s)", b["wall_time_s"], b["wall_time_s_without_early_stopping"]))
    for i, (label, used, full) in enumerate(pairs):
        ax = fig.add_subplot(1, len(pairs), i + 1)
        bars = ax.bar(["used", "without\nearly stopping"], [used, full], color=["tab:green", "lightgrey"],
                      edgecolor="black")
        for bar, v in zip(bars, (used, full)):
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{v:.4g}", ha="center", va="bottom",
                    fontsize=9)
        ax.set_title(label)
        ax.set_ylim(0, max(used, full, 1e-9) * 1.2)
    fig.suptitle(f"Budget of {b['trials']} trials ({b['stopped_early']} stopped early)")
    return fig


def _schedule_params(exp: Experiment) -> list[str]:
    """The hyperparameters the best trial's schedule shows: those that change along it, else
    the sampled ones its configs hold."""
    schedule = exp.schedule or {}
    if schedule.get("changed"):
        return list(schedule["changed"])
    names = set().union(*(flatten(step["config"]) for step in schedule.get("schedule", [])))
    return [p for p in exp.params if p in names] or sorted(names)


def _plot_pbt_schedule(exp: Experiment):
    """The best trial's hyperparameters against training_iteration, a step plot per hyperparameter."""
    steps = (exp.schedule or {}).get("schedule") or []
    params = _schedule_params(exp)
    if not steps or not params:
        return None
    h = exp.history[exp.history["trial_id"] == exp.best_trial] if not exp.history.empty else exp.history
    last = int(h["training_iteration"].max()) if not h.empty else max(s["from_iteration"] for s in steps)
    shown = [s for s in steps if s["from_iteration"] <= last]
    fig = _figure(9, 1.0 + 2.2 * len(params))
    for i, name in enumerate(params):
        ax = fig.add_subplot(len(params), 1, i + 1)
        values = [flatten(s["config"]).get(name) for s in shown]
        numeric = all(is_numeric(v) for v in values)
        labels = None if numeric else sorted({str(v) for v in values})
        ys = values if numeric else [labels.index(str(v)) for v in values]
        xs = [s["from_iteration"] for s in shown]
        ax.step(xs + [last + 1], ys + ys[-1:], where="post", color="crimson", lw=2)
        for x, y, s in zip(xs, ys, shown):
            ax.plot([x], [y], "o", color="crimson", ms=4)
            ax.annotate(str(s["trial_id"]), (x, y), textcoords="offset points", xytext=(3, 4), fontsize=7,
                        color="dimgrey")
        if numeric and all(v > 0 for v in values) and max(values) / min(values) > 100:
            ax.set_yscale("log")
        if labels is not None:
            ax.set_yticks(range(len(labels)), labels)
        ax.set_ylabel(name)
        ax.set_xlim(0.5, last + 1)
        ax.grid(alpha=0.3)
        if i == len(params) - 1:
            ax.set_xlabel("training_iteration (the config applies from the step on; label: the trial that trained)")
    fig.suptitle(f"PBT schedule of the best trial {exp.best_trial}")
    return fig


def _plot_pbt_lineage(exp: Experiment):
    """Which trial cloned which, against time: a row per trial, an arrow per exploit from the
    cloned trial's checkpoint to the trial that copied it; the best trial's lineage in red."""
    if not exp.perturbations or exp.trials.empty:
        return None
    order = list(exp.trials["trial_id"])  # best first, at the top
    extra = [t for p in exp.perturbations for t in (p["trial_id"], p["cloned_from"]) if t not in order]
    order += list(dict.fromkeys(extra))
    row = {t: len(order) - 1 - i for i, t in enumerate(order)}
    fig = _figure(9, 1.2 + 0.45 * len(order))
    ax = fig.add_subplot()
    iters = dict(zip(exp.trials["trial_id"], exp.trials["iterations"]))
    for t in order:
        ax.plot([0.5, max(1, iters.get(t, 0) or 0) + 0.5], [row[t]] * 2, color="lightgrey", lw=6,
                solid_capstyle="butt", zorder=1)
    best_links = set()
    for s in (exp.schedule or {}).get("schedule", [])[1:]:  # the exploits the best trial's weights came through
        best_links.add((s["trial_id"], s["from_iteration"] - 1))
    for p in exp.perturbations:
        on_path = (p["trial_id"], p["cloned_iteration"]) in best_links
        ax.annotate("", xy=(p["iteration"] + 0.5, row[p["trial_id"]]),
                    xytext=(p["cloned_iteration"] + 0.5, row[p["cloned_from"]]),
                    arrowprops=dict(arrowstyle="->", color="crimson" if on_path else "tab:blue",
                                    lw=2 if on_path else 1, alpha=1 if on_path else 0.6), zorder=3 if on_path else 2)
    ax.set_yticks([row[t] for t in order], [f"{t} *" if t == exp.best_trial else t for t in order], fontsize=8)
    ax.set_xlabel("training_iteration (arrow: a trial copies the checkpoint of the trial it points from)")
    ax.set_title(f"PBT lineage: {len(exp.perturbations)} perturbations of {len(order)} trials "
                 "(red: the best trial's lineage)")
    ax.grid(axis="x", alpha=0.3)
    return fig


def _axis_label(metric: str, mode: str) -> str:
    return f"{metric} ({mode})"


def _plot_pareto(exp: Experiment, facts: dict[str, Any] | None):
    """The trials' last objective values with the Pareto front: for two objectives one scatter
    with the front as a step line (the boundary of the region it dominates), for three or more a
    scatter per pair of objectives. Infeasible trials are grey x, the best trial a red star."""
    if facts is None:
        return None
    points = objective_points(exp)
    if not any(p is not None for p in points.values()):
        return None
    feasible = dict(zip(exp.trials["trial_id"], exp.trials["feasible"])) if "feasible" in exp.trials else {}
    front = set(exp.front)
    objectives = exp.objectives
    pairs = list(itertools.combinations(range(len(objectives)), 2))
    cols = min(3, len(pairs))
    rows = math.ceil(len(pairs) / cols)
    fig = _figure(8, 6) if len(pairs) == 1 else _figure(4.4 * cols, 3.8 * rows)
    groups = {
        "infeasible": [p for t, p in points.items() if p is not None and not feasible.get(t, True)],
        "dominated": [p for t, p in points.items() if p is not None and feasible.get(t, True) and t not in front],
        "front": [points[t] for t in exp.front if points.get(t) is not None],
    }
    best = points.get(exp.best_trial) if exp.best_trial is not None else None
    reference = (facts.get("hypervolume") or {}).get("reference")
    for k, (i, j) in enumerate(pairs):
        ax = fig.add_subplot(rows, cols, k + 1)
        if groups["dominated"]:
            ax.scatter([p[i] for p in groups["dominated"]], [p[j] for p in groups["dominated"]], s=30,
                       color="tab:blue", alpha=0.7, label="feasible, dominated", zorder=2)
        if groups["infeasible"]:
            ax.scatter([p[i] for p in groups["infeasible"]], [p[j] for p in groups["infeasible"]], marker="x",
                       s=40, color="grey", label="infeasible", zorder=2)
        if groups["front"]:
            ax.scatter([p[i] for p in groups["front"]], [p[j] for p in groups["front"]], s=46, color="tab:orange",
                       edgecolors="black", linewidths=0.6, label="Pareto front", zorder=3)
            if len(pairs) == 1:  # the front's attainment line: a step through its points, sorted by x
                line = sorted((p[i], p[j]) for p in groups["front"])
                # With x maximised a point covers what lies left of it, so the step rises at the point
                # before (``pre``); with x minimised, at the point itself (``post``).
                ax.step([q[0] for q in line], [q[1] for q in line], color="tab:orange", lw=1.6, zorder=2,
                        where="pre" if objectives[i].mode == "max" else "post")
        if best is not None:
            ax.scatter([best[i]], [best[j]], marker="*", s=220, color="crimson", edgecolors="black", linewidths=0.5,
                       zorder=4, label=f"best ({exp.metric}): {exp.best_trial}")
        if reference is not None and len(pairs) == 1:
            ax.scatter([reference[i]], [reference[j]], marker="+", s=80, color="black", zorder=2,
                       label="reference point")
        ax.set_xlabel(_axis_label(objectives[i].metric, objectives[i].mode))
        ax.set_ylabel(_axis_label(objectives[j].metric, objectives[j].mode))
        ax.grid(alpha=0.3)
        if k == 0:
            ax.legend(fontsize=8 if len(pairs) == 1 else 7, loc="best")
    infeasible = f", {facts['infeasible']} infeasible" if exp.constraints else ""
    title = (f"Pareto front: {len(front)} of {facts['feasible']} feasible trials{infeasible} "
             "(last reported values)")
    if len(pairs) == 1:
        fig.axes[0].set_title(title)
    else:
        fig.suptitle(title + ", each pair of objectives")
    return fig


def _plot_hypervolume(exp: Experiment, facts: dict[str, Any] | None):
    """The hypervolume of the front of the first n trials against n (creation order)."""
    if facts is None or facts["hypervolume"] is None or not facts["history"]["hypervolume"]:
        return None
    history = facts["history"]["hypervolume"]
    xs = list(range(1, len(history) + 1))
    fig = _figure(8, 4)
    ax = fig.add_subplot()
    ax.step(xs, history, where="post", color="tab:green", lw=2)
    ax.plot(xs, history, "o", color="tab:green", ms=3)
    ax.set_xlabel("trials (in the order they were created)")
    ax.set_ylabel("hypervolume")
    ax.set_xlim(0.5, len(history) + 0.5)
    ax.grid(alpha=0.3)
    reference = ", ".join(f"{o.metric}={v:.4g}" for o, v in zip(exp.objectives, facts["hypervolume"]["reference"]))
    ax.set_title(f"Hypervolume against trial count: {facts['hypervolume']['value']:.4g} after {len(history)} trials\n"
                 f"reference point {reference}", fontsize=11)
    return fig


def render_plots(exp: Experiment, top: int) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Render every plot that applies to PNG bytes; also return the facts shown beside them.

    Args:
        exp: From :func:`tuner.report.loading.load_experiment`.
        top: Trials in the parallel-coordinates plot.

    Returns:
        ``({plot name: PNG bytes}, facts)``: the plots of :func:`write_plots` that have data;
        ``facts`` holds ``importances`` and ``note`` (:func:`tuner.report.analysis.importances`),
        ``importance_facts`` (:func:`tuner.report.analysis.importance_facts`), ``budget``
        (:func:`tuner.report.analysis.budget`) and ``pareto``
        (:func:`tuner.report.analysis.pareto_facts`, None with one objective).
    """
    imp = importance_facts(exp)
    b = budget(exp)
    front = pareto_facts(exp)
    figs = {
        "learning_curves": _plot_curves(exp),
        "metric_vs_params": _plot_params(exp),
        "parallel_coordinates": _plot_parallel(exp, top),
        "importances": _plot_importances(imp),
        "budget": _plot_budget(b) if not exp.trials.empty else None,
        "pbt_schedule": _plot_pbt_schedule(exp) if exp.pbt else None,
        "pbt_lineage": _plot_pbt_lineage(exp) if exp.pbt else None,
        "pareto_front": _plot_pareto(exp, front),
        "hypervolume": _plot_hypervolume(exp, front),
    }
    return ({k: _png(f) for k, f in figs.items() if f is not None},
            {"importances": imp["importances"], "note": imp["note"], "importance_facts": imp, "budget": b,
             "pareto": front})


def write_plots(exp: Experiment, folder: str | os.PathLike, top: int = 10) -> dict[str, Path]:
    """Write the report's plots as PNG files (matplotlib), readable without a browser.

    Args:
        exp: From :func:`load_experiment`.
        folder: Where the PNGs go; created if missing.
        top: Trials in the parallel-coordinates plot.

    Returns:
        Plot name -> PNG file: ``learning_curves``, ``metric_vs_params``,
        ``parallel_coordinates``, ``importances``, ``budget``, for a PBT/PB2 run
        ``pbt_schedule`` and ``pbt_lineage``, and with several objectives ``pareto_front``
        (the trials' last objective values, the front drawn, infeasible trials marked; a
        scatter per pair of objectives for three or more) and ``hypervolume`` (against
        trial count) (those that apply). The learning curves, the metric against the
        parameters, the parallel coordinates and the importances show the first objective.
    """
    pngs, _ = render_plots(exp, top)
    return save_pngs(pngs, Path(folder))


def save_pngs(pngs: dict[str, bytes], folder: Path) -> dict[str, Path]:
    """Write each PNG as ``<folder>/<name>.png`` (atomically), creating ``folder`` if missing.

    Args:
        pngs: Plot name -> PNG bytes (:func:`render_plots`).
        folder: Where the PNGs go.

    Returns:
        Plot name -> PNG file.
    """
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, data in pngs.items():
        atomic_write(folder / f"{name}.png", data)
        out[name] = folder / f"{name}.png"
    return out
