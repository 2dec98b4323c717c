"""Offline experiment reports: an experiment folder's files -> a table, CSV, JSON or an HTML page.

Everything is read from files, so a report works on a finished, a running and an
interrupted experiment alike, and starts no Ray (this package never imports it):

* ``spec.yaml`` (the spec as run: metric, mode, scheduler and its rungs, the sampled
  parameters), ``tuner_run.json`` (start time), ``summary.json`` (when it describes the
  experiment as it is now);
* the newest readable ``experiment_state-*.json`` (or its copy in ``.tuner_state/``):
  every trial's id, status and folder, pending trials included;
* each trial folder's ``params.json`` (config) and ``result.json`` (one line per result).

The HTML page is one self-contained file: inline CSS, plots as base64 PNGs (matplotlib),
no script. The same plots are written as PNG files beside it. Parameter importances
are Optuna's fANOVA (``optuna.importance.FanovaImportanceEvaluator``) over a study
rebuilt from the trials. With a conditional search space, an inactive parameter is absent
(None in :attr:`Experiment.trials`, left out of plots, importances and JSON records), and
a conditional parameter's importance is assessed over the trials where it is active
(:func:`importance_facts`).

The modules, each importing only those above it:

* :mod:`tuner.report.loading`: an experiment folder -> :class:`Experiment`
  (:func:`load_experiment`, :class:`ReportError`);
* :mod:`tuner.report.analysis`: what is derived from it (:func:`scheduler_rungs`,
  :func:`budget`, :func:`importances` and :func:`importance_facts`, and with several
  objectives :func:`pareto_facts`:
  the Pareto front, its hypervolume and the hypervolume against trial count);
* :mod:`tuner.report.text`: the text of ``tuner report`` and ``tuner list``
  (:func:`render`, :func:`list_experiments`, :func:`render_list`);
* :mod:`tuner.report.plots`: the matplotlib plots as PNGs (:func:`write_plots`);
* :mod:`tuner.report.html`: the HTML page (:func:`write_html`).
"""

from tuner.report.analysis import budget, importance_facts, importances, pareto_facts, scheduler_rungs
from tuner.report.html import write_html
from tuner.report.loading import Experiment, ReportError, load_experiment
from tuner.report.plots import write_plots
from tuner.report.text import FORMATS, list_experiments, render, render_list

__all__ = ["Experiment", "ReportError", "load_experiment", "render", "write_html", "write_plots",
           "list_experiments", "render_list", "scheduler_rungs", "budget", "importances", "importance_facts",
           "pareto_facts", "FORMATS"]
