"""The report as one self-contained HTML page: inline CSS, the plots as base64 PNGs, no
script; the same plots are written as PNG files beside it.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import os
from pathlib import Path

import yaml

from tuner.experiment.files import atomic_write
from tuner.report.analysis import active_label, scheduler_rungs
from tuner.report.loading import Experiment
from tuner.report.plots import render_plots, save_pngs, x_attr
from tuner.report.text import display_frame, header_lines, pareto_frame, pareto_lines, pbt_lines

__all__ = ["write_html"]

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;max-width:1100px;
color:#222;background:#fff;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;
margin-top:1.8em}.facts{color:#444}.facts b{color:#222}img{max-width:100%;height:auto;display:block;
margin:.5em 0}table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ddd;padding:.25em .6em;
text-align:right}th{background:#f3f3f3}tr.best td{background:#ffe9e9;font-weight:bold}
td.id,th.id,td.status{text-align:left}pre{background:#f6f8fa;padding:.8em;border:1px solid #ddd;
overflow-x:auto}.note{color:#666;font-size:.9em}
"""


def _img(pngs: dict[str, bytes], name: str, alt: str) -> str:
    """The plot ``name`` as an inline base64 ``<img>``, or a note that it has not enough data."""
    if name not in pngs:
        return f'<p class="note">No {html.escape(alt)} plot: not enough data.</p>'
    data = base64.b64encode(pngs[name]).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def _table_html(exp: Experiment, top: int | None) -> str:
    """The trials table (:func:`tuner.report.text.display_frame`), the best trial's row highlighted."""
    frame = display_frame(exp, top)
    t = exp.trials.head(top) if top else exp.trials
    head = "".join(f'<th class="{"id" if c == "trial_id" else ""}">{html.escape(str(c))}</th>' for c in frame.columns)
    rows = []
    for (_, r), best in zip(frame.iterrows(), t["best"]):
        cells = "".join(f'<td class="{"id" if c == "trial_id" else "status" if c == "status" else ""}">'
                        f"{html.escape(str(v))}</td>" for c, v in r.items())
        rows.append(f'<tr class="{"best" if best else ""}">{cells}</tr>')
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _frame_html(frame) -> str:
    """A frame of strings as an HTML table (the trial id column left-aligned)."""
    head = "".join(f'<th class="{"id" if c == "trial_id" else ""}">{html.escape(str(c))}</th>' for c in frame.columns)
    rows = "".join("<tr>" + "".join(f'<td class="{"id" if c == "trial_id" else ""}">{html.escape(str(v))}</td>'
                                    for c, v in r.items()) + "</tr>" for _, r in frame.iterrows())
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _importances_html(facts: dict) -> str:
    """The importances as tables: over every trial; each conditional parameter over the trials
    where it is active; the parameters left out, with why."""
    e = html.escape
    out = []
    imp = facts["importances"]
    if imp:
        rows = "".join(f"<tr><td class='id'>{e(k)}</td><td>{v:.3f}</td></tr>" for k, v in imp.items())
        out.append(f"<table><thead><tr><th class='id'>parameter</th><th>importance</th></tr></thead>"
                   f"<tbody>{rows}</tbody></table>")
    within = facts["within_active"]
    if within:
        rows = "".join(f"<tr><td class='id'>{e(k)}</td><td class='id'>{e(w['when'] or '-')}</td><td>{w['trials']}</td>"
                       f"<td class='id'>{e(', '.join(w['among']) or '-')}</td><td>{w['importance']:.3f}</td></tr>"
                       for k, w in within.items())
        out.append("<p class=\"facts\">Conditional parameters, each over the trials where it is active (its share "
                   "among the parameters that vary there; not comparable with the table above):</p>"
                   "<table><thead><tr><th class='id'>parameter</th><th class='id'>active when</th><th>trials</th>"
                   f"<th class='id'>among</th><th>importance</th></tr></thead><tbody>{rows}</tbody></table>")
    if facts["left_out"]:
        items = "".join(f"<li>{e(x['name'])}: active in {x['active']} of the {x['of']} trials with a value, "
                        f"{e(x['reason'])}</li>" for x in facts["left_out"])
        out.append(f"<p class=\"facts\">Left out:</p><ul class=\"note\">{items}</ul>")
    return "\n".join(out)


def _pareto_section(exp: Experiment, pngs: dict[str, bytes], facts: dict | None) -> str:
    """The Pareto front section (several objectives), or a line of feasible trials (constraints only)."""
    e = html.escape
    lines = pareto_lines(exp, facts)
    if not lines:
        return ""
    if facts is None:  # one objective, constraints
        return f"<h2>Constraints</h2>\n<p class=\"facts\">{e(lines[0])}.</p>\n"
    facts_html = "<br>".join(e(line) for line in lines[:2] if line)
    table = _frame_html(pareto_frame(exp, facts)) if facts["front"] else \
        '<p class="note">No trial on the front yet.</p>'
    return (f"<h2>Pareto front</h2>\n<p class=\"facts\">{facts_html}</p>\n"
            f"{_img(pngs, 'pareto_front', 'Pareto front')}\n"
            "<p class=\"note\">Each trial's last reported values. A trial is on the front when it is feasible and "
            "no other feasible trial is at least as good on every objective and better on one; infeasible trials "
            "(grey x) are never on it. The hypervolume is the volume of objective space the front dominates up to "
            "the reference point.</p>\n"
            f"{table}\n"
            f"{_img(pngs, 'hypervolume', 'hypervolume')}\n"
            "<p class=\"note\">The hypervolume of the front of the first n trials, trials in the order they were "
            "created: how the search converged.</p>\n")


def _forecast_html(fc: dict | None) -> str:
    """The Budget section's forecast line: the forecast at run start against what was used."""
    if not fc:
        return ""
    unit = {"training_iteration": "trial-iterations", "time_total_s": "trial-seconds"}.get(fc["unit"],
                                                                                         f"trial-{fc['unit']}")
    if fc["expected"] is None:
        text = f"unbounded {unit} (no stop or max_t)"
    else:
        text = f"{fc['expected']:g} {unit} expected, at most {fc['max']:g} ({fc['rule']})"
        if fc["used"] is not None:
            text += f"; {fc['used']:g} used ({100 * (fc['used_of_expected'] or 0):.0f}% of the forecast)"
    if fc["wall_time_s_forecast"] is not None and fc["wall_time_s"] is not None:
        text += (f". Wall time at this run's {fc['seconds_per_iteration'] or 1:.3g} s per unit and "
                 f"{fc['trials_at_once']} trials at a time: {fc['wall_time_s_forecast']:.1f} s forecast, "
                 f"{fc['wall_time_s']:.1f} s taken")
    return f"<br>\n<b>Forecast at run start:</b> {html.escape(text)}."


def write_html(exp: Experiment, output: str | os.PathLike | None = None,
               top: int | None = None) -> tuple[Path, dict[str, Path]]:
    """Write the experiment's report as one self-contained HTML file, and its plots as PNGs.

    The page holds: the status and the best trial, its config as YAML, with several
    objectives the Pareto front (plot, table, hypervolume against trial count), the budget used
    against the same trials without early stopping, the learning curves of every trial
    with the scheduler's rungs and where trials were stopped, the metric against each
    parameter, for a PBT/PB2 run the best trial's schedule and the population's lineage,
    parallel coordinates of the top trials, parameter importances, and the trials table.
    Plots are embedded as base64 PNGs; the page has no script and loads
    nothing else.

    Args:
        exp: From :func:`load_experiment`.
        output: The HTML file; default ``<experiment>/report.html``.
        top: Trials in the table and the parallel-coordinates plot (default: every
            trial in the table, the 10 best in the plot).

    Returns:
        ``(html_file, {plot name: PNG file})``; the PNGs are in ``<output stem>_plots/``
        beside the HTML file.
    """
    output = Path(output) if output is not None else exp.path / "report.html"
    pngs, facts = render_plots(exp, top or 10)
    page = "".join([
        _head(exp),
        _best_section(exp),
        _pareto_section(exp, pngs, facts["pareto"]),
        _budget_section(facts["budget"], pngs),
        _curves_section(exp, pngs),
        _params_section(exp, pngs),
        _pbt_section(exp, pngs),
        _importances_section(facts, pngs),
        _trials_section(exp, top),
    ])
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(output, page)
    files = save_pngs(pngs, output.with_name(output.stem + "_plots"))
    return output, files


def _head(exp: Experiment) -> str:
    """The page's head, its title and the experiment's header lines (:func:`tuner.report.text.header_lines`)."""
    e = html.escape
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>tuner report: {e(exp.name)}</title>
<style>{_CSS}</style></head>
<body>
<h1>Experiment {e(exp.name)}</h1>
<p class="facts">{'<br>'.join(e(line) for line in header_lines(exp))}</p>
"""


def _best_section(exp: Experiment) -> str:
    """The best trial's config as YAML (with several objectives, the front's best on the first objective)."""
    e = html.escape
    best_cfg = exp.best_config
    best_yaml = yaml.safe_dump(best_cfg, sort_keys=False) if best_cfg is not None else "(no best trial yet)"
    best_title = f"Best config (on the Pareto front, the best {exp.metric})" if exp.multi_objective else "Best config"
    return f"""<h2>{e(best_title)}</h2>
<pre>{e(best_yaml)}</pre>
"""


def _saved(used: float, full: float) -> str:
    """`` (40% saved)``: what early stopping saved of ``full``; empty when ``full`` is 0."""
    return f" ({100 * (1 - used / full):.0f}% saved)" if full else ""


def _budget_section(b: dict, pngs: dict[str, bytes]) -> str:
    """The Budget section: trial-iterations, trial time and wall time against no early stopping, and the forecast."""
    wall = ("unknown" if b["wall_time_s"] is None else
            f"{b['wall_time_s']:.1f} s, against about {b['wall_time_s_without_early_stopping']:.1f} s"
            f"{_saved(b['wall_time_s'], b['wall_time_s_without_early_stopping'])}")
    return f"""<h2>Budget</h2>
<p class="facts"><b>Trial-iterations:</b> {b['trial_iterations']} used, against
{b['trial_iterations_without_early_stopping']} without early stopping\
{_saved(b['trial_iterations'], b['trial_iterations_without_early_stopping'])}
({b['stopped_early']} of {b['trials']} trials stopped early; the longest ran {b['full_iterations']}).<br>
<b>Trial time:</b> {b['trial_time_s']:.1f} s used, against about {b['trial_time_s_without_early_stopping']:.1f} s\
{_saved(b['trial_time_s'], b['trial_time_s_without_early_stopping'])}.<br>
<b>Wall time:</b> {wall}.{_forecast_html(b.get("forecast"))}</p>
{_img(pngs, "budget", "budget")}
<p class="note">Without early stopping, every trial that ended TERMINATED would have run as many iterations as
the longest trial; the missing iterations are costed at the median seconds per iteration, the wall time scaled
alike (same parallelism).</p>
"""


def _curves_section(exp: Experiment, pngs: dict[str, bytes]) -> str:
    """The learning curves, with a note on the scheduler's rungs and the trials stopped early."""
    rungs = scheduler_rungs(exp.spec)
    rung_note = (f"Dashed lines: the {exp.spec.scheduler.type} rungs at {', '.join(f'{r:g}' for r in rungs)} "
                 f"{x_attr(exp)}; x: where a trial was stopped early." if rungs else
                 "x: where a trial was stopped early (ended with fewer iterations than the longest trial).")
    return f"""<h2>Learning curves</h2>
{_img(pngs, "learning_curves", "learning curves")}
<p class="note">{html.escape(rung_note)}</p>
"""


def _params_section(exp: Experiment, pngs: dict[str, bytes]) -> str:
    """The metric against each parameter, with a note on the conditional parameters' trials."""
    e = html.escape
    conditional = exp.conditional_params
    params_note = ("<p class=\"note\">A conditional parameter's plot shows only the trials where it is active: "
                   + "; ".join(f"{e(name)} {e(str(active_label(exp, name)))}" for name in conditional)
                   + ".</p>") if conditional else ""
    return f"""<h2>{e(str(exp.metric))} against each parameter</h2>
{_img(pngs, "metric_vs_params", "metric against parameters")}
{params_note}
"""


def _pbt_section(exp: Experiment, pngs: dict[str, bytes]) -> str:
    """A PBT/PB2 run's best schedule and the population's lineage (:func:`tuner.report.text.pbt_lines`); else empty."""
    if not exp.pbt:
        return ""
    e = html.escape
    pbt = pbt_lines(exp)
    return (f"<h2>PBT schedule and lineage</h2>\n<p class=\"facts\">{e(pbt[0])}</p>\n"
            f"<pre>{e(chr(10).join(pbt[1:]) or '(no best trial yet)')}</pre>\n"
            f"{_img(pngs, 'pbt_schedule', 'PBT schedule')}\n"
            "<p class=\"note\">The best trial's hyperparameters by iteration: its weights were trained "
            "by the trial named at each step, whose checkpoint it (or its ancestor) copied "
            f"(best_schedule.yaml; `tuner run SPEC --replay {e(str(exp.path))}` retrains with it).</p>\n"
            f"{_img(pngs, 'pbt_lineage', 'PBT lineage')}\n"
            "<p class=\"note\">Each arrow: a trial of the bottom quantile copies the checkpoint of a trial "
            "of the top quantile (exploit) and trains on with a perturbed config (explore).</p>\n")


def _importances_section(facts: dict, pngs: dict[str, bytes]) -> str:
    """The parallel coordinates of the top trials and the parameter importances (plot, tables, note)."""
    return f"""<h2>Parallel coordinates of the top trials</h2>
{_img(pngs, "parallel_coordinates", "parallel coordinates")}
<h2>Parameter importances</h2>
{_img(pngs, "importances", "parameter importances")}
{_importances_html(facts["importance_facts"])}
<p class="note">{html.escape(facts['note'])}.</p>
"""


def _order_note(exp: Experiment) -> str:
    """How the trials table is sorted."""
    if exp.multi_objective:
        return (f"The trials on the Pareto front first, each group by the last reported {exp.metric}; "
                "infeasible trials and those without a result last, by id")
    if exp.constraints:
        return (f"Sorted by the last reported {exp.metric}; infeasible trials and those without a result "
                "last, by id")
    return f"Sorted by the last reported {exp.metric}"


def _trials_section(exp: Experiment, top: int | None) -> str:
    """The trials table, how it is sorted, and when and from where the page was generated; the page's end."""
    e = html.escape
    generated = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    return f"""<h2>Trials</h2>
{_table_html(exp, top)}
<p class="note">{e(_order_note(exp))}; the best trial is marked * and highlighted.
Generated by tuner on {e(generated)} from {e(str(exp.path))}.</p>
</body></html>
"""
