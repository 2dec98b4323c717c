"""`tuner report` and TensorBoard on a conditional search space: only the trials where a parameter is active.

One real experiment is run once for the module through the CLI: ``tests.trainables:branchy`` with
``momentum`` only under ``optimizer: sgd``, ``beta2`` only under ``adam``, and the sub-space choice
``model`` (``cnn`` with ``channels``, ``mlp`` with ``hidden`` and the constant ``act``, and each its own
``lr``: one config key, two versions), and a categorical ``schedule`` under ``sgd`` too (branchy ignores
``lr`` and ``schedule``), random search,
8 trials of 2 iterations. ``tuner report`` is run on it in every format. The trials each parameter is
active in are read from the trials' own ``params.json`` (an inactive parameter is absent from it),
and every check compares the report with those.
"""

import io
import json
import math
import shutil

import pandas as pd
import pytest

from tests.fixtures.cli import run_spec
from tuner.core.params import flatten

# One xdist worker runs this file: its module-scoped fixture is built once (pyproject's --dist loadgroup).
pytestmark = [pytest.mark.xdist_group("test_report_conditional"), pytest.mark.slow]

SPEC = """\
name: cond
trainable: tests.trainables:branchy
metric: loss
mode: min
num_samples: 8
seed: 3
param_space:
  optimizer: {type: choice, values: [sgd, adam]}
  momentum:  {type: uniform, low: 0.5, high: 0.99, when: {optimizer: sgd}}
  beta2:     {type: uniform, low: 0.9, high: 0.999, when: {optimizer: adam}}
  epochs: 2
  model:
    type: choice
    values:
      - {name: cnn, channels: {type: randint, low: 8, high: 65}, lr: {type: uniform, low: 0.01, high: 0.1}}
      - {name: mlp, hidden: {type: lograndint, low: 32, high: 1025}, act: relu,
         lr: {type: loguniform, low: 0.0001, high: 0.001}}
  schedule:  {type: choice, values: [step, cosine], when: {optimizer: sgd}}
resources: {cpu: 1}
"""

SAMPLED = ["optimizer", "momentum", "beta2", "model/name", "model/channels", "model/lr", "model/hidden", "schedule"]
CONDITIONS = {"momentum": "optimizer = sgd", "beta2": "optimizer = adam", "model/channels": "model/name = cnn",
              "model/lr": "model/name = cnn or model/name = mlp", "model/hidden": "model/name = mlp",
              "schedule": "optimizer = sgd"}


@pytest.fixture(scope="module")
def exp(tmp_path_factory, run_cli, on_session_ray):
    """The experiment folder, and `tuner report` of it in every format. Returns a namespace."""
    tmp = tmp_path_factory.mktemp("conditional")
    path = run_spec(tmp, "cond", SPEC, on_session_ray)
    reports = {fmt: run_cli("report", path, "--format", fmt) for fmt in ("table", "csv", "json")}
    reports["html"] = run_cli("report", path, "--format", "html", "--output", tmp / "html" / "report.html")
    for fmt, r in reports.items():
        assert r.returncode == 0, (fmt, r.stderr[-3000:])
    configs = {}  # trial id -> its flat config, as the train function saw it
    for folder in path.iterdir():
        if (folder / "params.json").is_file():
            trial_id = json.loads((folder / "result.json").read_text().splitlines()[0])["trial_id"]
            configs[trial_id] = flatten(json.loads((folder / "params.json").read_text()))
    return type("Exp", (), {"path": path, "tmp": tmp, "reports": reports, "configs": configs,
                            "html": tmp / "html" / "report.html"})


def active(exp, name) -> set[str]:
    """The ids of the trials whose config has ``name``."""
    return {t for t, c in exp.configs.items() if name in c}


def test_the_experiment_has_both_branches_of_each_condition(exp):
    assert len(exp.configs) == 8
    for name in CONDITIONS:
        assert 0 < len(active(exp, name)) < 8 or name == "model/lr", name
    assert len(active(exp, "model/lr")) == 8  # in either branch
    assert active(exp, "momentum").isdisjoint(active(exp, "beta2"))
    assert active(exp, "model/act") == active(exp, "model/hidden")


def test_table_says_how_many_trials_have_each_conditional_parameter(exp):
    out = exp.reports["table"].stdout
    for name, cond in CONDITIONS.items():
        assert f"  {name}: active in {len(active(exp, name))} of 8 trials (when {cond})" in out.splitlines()
    for name in ("optimizer", "model/name"):
        assert f"  {name}: active" not in out
    # An inactive parameter shows as '-', never as a number.
    header, *rows = out.split("\n\n")[-1].strip().splitlines()
    cols = header.split()
    for row in rows:
        cells = row.lstrip("* ").split()
        trial = dict(zip(cols, cells))
        for name in CONDITIONS:
            assert (trial[name] != "-") == (name in exp.configs[trial["trial_id"]]), (name, row)


def test_csv_and_json_leave_an_inactive_parameter_out(exp):
    csv = pd.read_csv(io.StringIO(exp.reports["csv"].stdout), dtype={"trial_id": str}, keep_default_na=False)
    doc = json.loads(exp.reports["json"].stdout)
    records = {r["trial_id"]: r for r in doc["trials"]}
    for _, row in csv.iterrows():
        config = exp.configs[row["trial_id"]]
        record = records[row["trial_id"]]
        for name in [*SAMPLED, "model/act"]:
            if name in config:
                assert str(row[f"config/{name}"]) == str(config[name])  # an integer stays an integer: 17, not 17.0
                want = config[name] if isinstance(config[name], str) else pytest.approx(config[name], rel=1e-12)
                assert record[f"config/{name}"] == want  # floats with 15 digits in json
                assert type(record[f"config/{name}"]) is type(config[name])
            else:
                assert row[f"config/{name}"] == ""
                assert f"config/{name}" not in record  # absent, as from the config: not null
    params = {p["name"]: p for p in doc["experiment"]["parameters"]}
    assert list(params) == SAMPLED
    assert params["model/hidden"]["type"] == "lograndint" and params["model/name"]["type"] == "choice"
    assert params["model/lr"]["type"] == "uniform | loguniform"  # one key, a version per branch
    for name in SAMPLED:
        assert params[name]["active_trials"] == len(active(exp, name))
        assert params[name].get("when") == CONDITIONS.get(name)  # no `when` on an unconditional parameter


def test_importances_use_only_the_trials_where_a_parameter_is_active(exp):
    """The parameters every trial has share the importances; each conditional one is assessed over
    the trials where it is active, or left out (too few such trials), and says so."""
    from tuner.report.analysis import MIN_ACTIVE_TRIALS

    facts = json.loads(exp.reports["json"].stdout)["experiment"]["importances"]
    everywhere = [n for n in SAMPLED if len(active(exp, n)) == 8]
    assert set(facts["importances"]) == set(everywhere) == {"optimizer", "model/name", "model/lr"}
    assert math.isclose(sum(facts["importances"].values()), 1.0)
    assert facts["trials"] == 8
    within, left_out = facts["within_active"], {x["name"]: x for x in facts["left_out"]}
    assert set(within) | set(left_out) | set(everywhere) == set(SAMPLED) and not set(within) & set(left_out)
    # seed 3 draws 2 sgd and 6 adam, 6 cnn and 2 mlp: both sides of MIN_ACTIVE_TRIALS (5)
    assert within and left_out
    for name, w in within.items():
        assert w["trials"] == len(active(exp, name)) >= MIN_ACTIVE_TRIALS
        assert w["when"] == CONDITIONS[name] and 0 <= w["importance"] <= 1 and math.isfinite(w["importance"])
        assert name not in w["among"] and set(w["among"]) <= set(SAMPLED)
        for other in w["among"]:  # the parameters that vary among those trials, each there in all of them
            values = [exp.configs[t].get(other) for t in active(exp, name)]
            assert None not in values and len(set(values)) > 1
    for name, x in left_out.items():
        assert x["active"] == len(active(exp, name)) and x["of"] == 8
        values = {exp.configs[t][name] for t in active(exp, name)}
        if len(values) == 1:  # seed 3: schedule is step in both sgd trials
            assert x["reason"] == "takes one value in the trials that have it"
        else:
            assert x["active"] < MIN_ACTIVE_TRIALS and x["reason"].startswith("too few")
    page = exp.html.read_text()
    for name, x in left_out.items():
        assert f"<li>{name}: active in {x['active']} of the 8 trials with a value, {x['reason']}</li>" in page
    for name in within:
        assert f"<td class='id'>{name}</td><td class='id'>{CONDITIONS[name]}</td>" in page


def test_plots_of_a_parameter_show_only_the_trials_where_it_is_active(exp):
    from tuner.report import load_experiment
    from tuner.report.plots import _INACTIVE, _plot_parallel, _plot_params

    report = load_experiment(exp.path)
    fig = _plot_params(report)
    axes = {ax.get_xlabel(): ax for ax in fig.axes}
    assert set(axes) == set(SAMPLED)
    for name, ax in axes.items():
        points = [p for c in ax.collections for p in c.get_offsets().tolist()]
        assert len(points) == len(active(exp, name)), name  # one point per trial that has it
        assert all(math.isfinite(v) for p in points for v in p)
        if name in CONDITIONS:
            title = ax.get_title().replace("\n", " ")  # wrapped when long
            assert title == f"active in {len(active(exp, name))} of 8 trials (when {CONDITIONS[name]})"
            xs = sorted(exp.configs[t][name] for t in active(exp, name))
            if name != "schedule":  # a category is drawn at its index
                assert sorted(p[0] for p in points) == pytest.approx(xs)
        else:
            assert ax.get_title() == ""
    assert [t.get_text() for t in axes["model/name"].get_xticklabels()] == ["cnn", "mlp"]
    labels = [t.get_text() for t in axes["schedule"].get_xticklabels()]  # no category for the trials without it
    assert labels == sorted({exp.configs[t]["schedule"] for t in active(exp, "schedule")})
    # The scale comes from the spec's distribution, a branch's parameter's too.
    assert axes["model/hidden"].get_xscale() == "log" and axes["model/channels"].get_xscale() == "linear"
    assert axes["model/lr"].get_xscale() == "linear"  # log only if every version of the key is
    # Parallel coordinates: a trial without a parameter meets its axis at the 'inactive' mark, no NaN.
    ax = _plot_parallel(report, 10).axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    lines = [tuple(line.get_ydata()) for line in ax.get_lines() if len(line.get_xdata()) == len(ticks)]
    assert len(lines) == 8
    ids = list(report.trials["trial_id"])
    by_trial = {}
    for ys in lines:
        assert all(math.isfinite(y) for y in ys)
        missing = {ticks[i] for i, y in enumerate(ys) if y == _INACTIVE}
        by_trial[frozenset(missing)] = by_trial.get(frozenset(missing), 0) + 1
    expected = {}
    for t in ids:
        missing = frozenset(n for n in SAMPLED if n not in exp.configs[t])
        expected[missing] = expected.get(missing, 0) + 1
    assert by_trial == expected
    plots = {p.stem for p in (exp.tmp / "html" / "report_plots").glob("*.png")}
    assert {"metric_vs_params", "parallel_coordinates", "importances"} <= plots


def test_report_without_a_spec_tells_inactive_from_the_configs(exp, tmp_path):
    from tuner.report import load_experiment, render

    copy = tmp_path / "cond"
    shutil.copytree(exp.path, copy, ignore=shutil.ignore_patterns("ray_logs"))
    (copy / "spec.yaml").unlink()
    report = load_experiment(copy)
    assert report.spec is None
    # Without the spec: the config keys that some trials lack (model/lr is in every trial's, model/act in some)
    keys = {k for c in exp.configs.values() for k in c}
    assert set(report.conditional_params) == {k for k in keys if 0 < sum(k in c for c in exp.configs.values()) < 8}
    assert {"momentum", "beta2", "model/channels", "model/hidden", "schedule"} <= set(report.conditional_params)
    doc = json.loads(render(report, "json"))
    for record in doc["trials"]:
        config = exp.configs[record["trial_id"]]
        assert {k[len("config/"):] for k in record if k.startswith("config/")} == set(config)


def test_tensorboard_hparams_cover_every_parameter_and_log_only_the_active_ones(exp):
    """Read the event files back with TensorBoard's own EventAccumulator."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    def hparams(folder):
        acc = EventAccumulator(str(folder))
        acc.Reload()
        return acc.PluginTagToContent("hparams")

    experiment = metadata.parse_experiment_plugin_data(hparams(exp.path)[metadata.EXPERIMENT_TAG])
    infos = {h.name: h for h in experiment.hparam_infos}
    assert list(infos) == SAMPLED
    assert [v.string_value for v in infos["model/name"].domain_discrete.values] == ["cnn", "mlp"]
    assert (infos["model/channels"].domain_interval.min_value, infos["model/channels"].domain_interval.max_value) \
        == (8, 65)
    assert (infos["model/hidden"].domain_interval.min_value, infos["model/hidden"].domain_interval.max_value) \
        == (32, 1025)
    # one key, two versions (uniform [0.01, 0.1) under cnn, loguniform [0.0001, 0.001) under mlp): both
    assert (infos["model/lr"].domain_interval.min_value, infos["model/lr"].domain_interval.max_value) \
        == (0.0001, 0.1)
    for name in SAMPLED:
        assert infos[name].description == (f"active when {CONDITIONS[name]}" if name in CONDITIONS else "")
    sessions = 0
    for folder in exp.path.iterdir():
        if not (folder / "params.json").is_file():
            continue
        trial_id = json.loads((folder / "result.json").read_text().splitlines()[0])["trial_id"]
        config = exp.configs[trial_id]
        content = hparams(folder)
        start = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
        assert set(start.hparams) == {n for n in SAMPLED if n in config}  # an inactive one left out, not faked
        for name, value in start.hparams.items():
            got = value.string_value if isinstance(config[name], str) else value.number_value
            assert got == pytest.approx(config[name])
        end = metadata.parse_session_end_info_plugin_data(content[metadata.SESSION_END_INFO_TAG])
        assert end.status == 1  # STATUS_SUCCESS
        sessions += 1
    assert sessions == 8


def test_importances_when_the_metric_does_not_vary(exp, tmp_path):
    """fANOVA has no variance to share out (Optuna raises): among the trials where a parameter is
    active, it is left out saying why; in every trial, the importances are empty saying why."""
    from tuner.report import load_experiment
    from tuner.report.analysis import importance_facts

    copy = tmp_path / "cond"
    shutil.copytree(exp.path, copy, ignore=shutil.ignore_patterns("ray_logs"))

    def set_loss(which):
        for result in copy.glob("*/result.json"):
            rows = [json.loads(line) for line in result.read_text().splitlines()]
            if which(exp.configs[rows[0]["trial_id"]]):
                result.write_text("".join(json.dumps({**r, "loss": 1.0}) + "\n" for r in rows))

    set_loss(lambda config: config["optimizer"] == "adam")
    facts = importance_facts(load_experiment(copy))
    assert "beta2" not in facts["within_active"] and facts["importances"]
    beta2 = next(x for x in facts["left_out"] if x["name"] == "beta2")
    assert beta2 == {"name": "beta2", "active": len(active(exp, "beta2")), "of": 8,
                     "reason": "the loss is the same in the trials where it is active"}
    set_loss(lambda config: True)
    facts = importance_facts(load_experiment(copy))
    assert facts["importances"] == {} and facts["within_active"] == {}
    assert facts["note"] == "the loss is the same in every trial: no parameter explains any of its variance"
