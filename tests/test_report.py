"""Seeing the results: `tuner report` and `tuner list` on a real experiment, the HTML in a real
headless Chromium, TensorBoard's event files read back with TensorBoard's own EventAccumulator,
and the progress line under the CLIReporter table.

One ASHA experiment (6 trials, some stopped early) is run once for the module, through the real
CLI; `tuner report` is also run while it is still running. Its HTML report is also made once for the
module (the ``html`` fixture), for the tests that look at the page.
"""

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.fixtures.cli import imported_modules
from tests.fixtures.paths import ROOT
from tests.test_resume import start

# One xdist worker runs this file: its module-scoped fixture is built once (pyproject's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_report")

SPEC = """\
name: steady
trainable: tests.trainables:steady
metric: loss
mode: min
num_samples: 6
seed: 0
time_budget_s: 600
param_space:
  x: {type: uniform, low: 0, high: 1}
  opt: {type: choice, values: [adam, sgd]}
  epochs: 6
  sleep: 0.3
scheduler: {type: asha, max_t: 6, grace_period: 1, reduction_factor: 2}
resources: {cpu: 1}
reporting: {cli: {max_report_frequency: 1}}
"""

PROGRESS = re.compile(r"^Progress: (\d+)/6 trials done \| (\d+)/600 s of time budget \| "
                      r"(?:best trial (?P<trial>\S+), last loss=(?P<best>\S+)|no loss reported yet)$")


@pytest.fixture(scope="module")
def run(tmp_path_factory, run_cli, on_session_ray):
    """Run the experiment (on the session's Ray); report on it once while it runs. Returns a namespace of what it left."""
    tmp = tmp_path_factory.mktemp("report")
    spec = tmp / "steady.yaml"
    spec.write_text(SPEC)
    storage = tmp / "runs"
    exp = storage / "steady"
    proc = start("run", spec, "--storage", storage, env=on_session_ray)
    # The gate: a report, taken while the run goes on, that shows a trial's result. Its input lags the
    # trials (Ray copies results into the experiment every few seconds), so it is taken again until then;
    # a run that ends first leaves its last report (or, with no result written, a finished one) to refuse.
    live, shown = None, False
    while proc.poll() is None and not shown:
        if sum(len(p.read_text().splitlines()) for p in exp.glob("*/result.json")) >= 2:
            live = run_cli("report", exp, "--format", "json")
            shown = live.returncode == 0 and any(t["iterations"] >= 1 for t in json.loads(live.stdout)["trials"])
        if not shown:
            time.sleep(0.2)
    if live is None:  # the run ended before any result was written
        live = run_cli("report", exp, "--format", "json")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return type("Run", (), {"exp": exp, "storage": storage, "tmp": tmp, "stdout": out, "stderr": err,
                            "live": live})


@pytest.fixture(scope="module")
def html(run, tmp_path_factory):
    """`tuner report --format html` of the experiment, once for the module, under `python -X importtime`
    (so that test_report_starts_no_ray sees what it imported). Returns a namespace: ``proc`` (text) and
    ``page``, the HTML file, with its PNGs in ``report_plots/`` beside it."""
    page = tmp_path_factory.mktemp("html") / "report.html"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "tuner", "report", str(run.exp), "--format",
                           "html", "--output", str(page)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    return type("Html", (), {"proc": proc, "page": page})


def results(run):
    return pd.read_csv(run.exp / "results.csv", dtype={"trial_id": str})


def summary(run):
    return json.loads((run.exp / "summary.json").read_text())


def test_report_of_a_running_experiment(run):
    assert run.live.returncode == 0, run.live.stderr
    doc = json.loads(run.live.stdout)
    assert doc["experiment"]["status"] == "running"
    assert 1 <= doc["experiment"]["trials"]["total"] <= 6
    assert any(t["iterations"] >= 1 for t in doc["trials"])


def test_report_table_sorts_by_the_metric_and_marks_the_best(run, run_cli):
    proc = run_cli("report", run.exp)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    best = summary(run)["best"]["trial_id"]
    assert lines[0].startswith(f"Experiment steady ({run.exp.resolve()}): finished, started ")
    assert lines[1] == "6 trials (6 TERMINATED); metric loss (min); best trial by scope last"
    header = next(i for i, line in enumerate(lines) if "trial_id" in line)
    for column in ("status", "iter", "x", "opt", "loss (last)", "loss (best)"):
        assert column in lines[header]
    rows = [line.split() for line in lines[header + 1:]]
    assert len(rows) == 6
    assert rows[0][0] == "*" and rows[0][1] == best and sum(r[0] == "*" for r in rows) == 1
    csv = results(run).set_index("trial_id")
    shown = [(r[1] if r[0] == "*" else r[0], float(r[-2])) for r in rows]
    assert [v for _, v in shown] == sorted(v for _, v in shown), "sorted by the last loss, best first"
    for trial_id, last in shown:
        assert last == pytest.approx(csv.loc[trial_id, "loss"], rel=1e-5)


def test_report_csv_and_json_agree_with_results_csv(run, run_cli):
    csv = results(run).set_index("trial_id")
    proc = run_cli("report", run.exp, "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    rep = pd.read_csv(pd.io.common.StringIO(proc.stdout), dtype={"trial_id": str}).set_index("trial_id")
    assert set(rep.index) == set(csv.index)
    for trial_id, row in rep.iterrows():
        assert row["status"] == csv.loc[trial_id, "status"]
        assert row["iterations"] == csv.loc[trial_id, "training_iteration"]
        assert row["last_loss"] == pytest.approx(csv.loc[trial_id, "loss"])
        assert row["config/x"] == pytest.approx(csv.loc[trial_id, "config/x"])
        assert row["config/opt"] == csv.loc[trial_id, "config/opt"]
        assert row["stopped_early"] == (row["iterations"] < 6)
    assert rep["stopped_early"].any() and not rep["stopped_early"].all(), "ASHA stopped some trials, not all"

    proc = run_cli("report", run.exp, "--format", "json", "--top", "2")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert len(doc["trials"]) == 2
    exp = doc["experiment"]
    assert exp["best"]["trial_id"] == summary(run)["best"]["trial_id"]
    assert exp["best"]["config"] == yaml.safe_load((run.exp / "best_config.yaml").read_text())
    b = exp["budget"]
    assert b["trial_iterations"] == csv["training_iteration"].sum()
    assert b["trial_iterations_without_early_stopping"] == 6 * 6
    assert b["stopped_early"] == int((csv["training_iteration"] < 6).sum())
    assert b["trial_time_s"] < b["trial_time_s_without_early_stopping"]
    assert b["wall_time_s"] == pytest.approx(summary(run)["wall_time_s"], abs=0.01)
    # The forecast recorded at run start: ASHA's simulation (tuner.search.forecast) at the 2 trials that fit 2 CPUs.
    from tuner.search.forecast import forecast
    from tuner.spec import load_spec

    fc = forecast(load_spec(yaml.safe_load(SPEC)), 6, 2)
    assert (b["forecast"]["expected"], b["forecast"]["max"], b["forecast"]["trials_at_once"]) == \
        (round(fc.expected_total, 3), 36, 2)
    recorded = json.loads((run.exp / "tuner_run.json").read_text())["forecast"]
    assert (recorded["expected_low"], recorded["expected_high"], recorded["at_once"]) == \
        (fc.expected_low, fc.expected_high, 2)
    assert b["forecast"]["used"] == b["trial_iterations"]

    out = run.tmp / "top.csv"
    proc = run_cli("report", run.exp, "--format", "csv", "--top", "3", "--output", out)
    assert proc.returncode == 0 and len(pd.read_csv(out)) == 3


def test_learning_curves_dash_the_rungs_and_mark_each_trial_stopped_early(run):
    """The page's learning curves (the figure its PNG is rendered from): a dashed grey line at each ASHA rung
    (1, 2, 4), and a black cross at the last result of each trial that ASHA stopped early, and of no other."""
    from tuner.report import load_experiment
    from tuner.report.plots import _plot_curves

    exp = load_experiment(run.exp)
    ax = _plot_curves(exp).axes[0]
    rungs = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert sorted(float(line.get_xdata()[0]) for line in rungs) == [1.0, 2.0, 4.0]
    crosses = sorted((float(line.get_xdata()[0]), float(line.get_ydata()[0]))
                     for line in ax.get_lines() if line.get_marker() == "x")
    early = exp.trials[exp.trials["stopped_early"]]
    last = exp.history.sort_values("training_iteration").groupby("trial_id").tail(1).set_index("trial_id")
    assert crosses == sorted((float(last.loc[t, "training_iteration"]), float(last.loc[t, "loss"]))
                             for t in early["trial_id"]) and crosses


def test_report_starts_no_ray(run, html):
    """The CLI (every format) and the Python API read files only: Ray is never imported."""
    proc = html.proc  # the html report, the format that imports the most
    assert proc.returncode == 0, proc.stderr
    imported = imported_modules(proc.stderr)
    assert "pandas" in imported and "matplotlib" in imported, "-X importtime lists the imports"
    assert not [m for m in imported if m == "ray" or m.startswith("ray.")]
    code = ("import sys; from tuner.report import load_experiment, render, list_experiments; "
            f"e = load_experiment({str(run.exp)!r}); render(e); render(e, 'json'); "
            f"list_experiments({str(run.storage)!r}); print('ray' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


@pytest.mark.parametrize("target", ["missing", "not_an_experiment"])
def test_report_bad_input_exits_2_without_traceback(tmp_path, target, run_cli):
    path = tmp_path / target
    if target == "not_an_experiment":
        path.mkdir()
        (path / "notes.txt").write_text("hello")
    proc = run_cli("report", path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("tuner: error: ") and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    debug = run_cli("report", path, env={"TUNER_DEBUG": "1"})
    assert debug.returncode == 2 and "Traceback" in debug.stderr


def test_html_report_is_self_contained_with_pngs(run, html):
    assert html.proc.returncode == 0, html.proc.stderr
    page = html.page.read_text()
    imgs = re.findall(r'<img src="([^"]*)"', page)
    assert len(imgs) == 5 and all(src.startswith("data:image/png;base64,") for src in imgs)
    assert not re.search(r'(?:src|href)="(?!data:)', page), "nothing loaded from elsewhere"
    assert "<script" not in page and "http://" not in page and "https://" not in page
    best = yaml.safe_load((run.exp / "best_config.yaml").read_text())
    pre = re.search(r"<h2>Best config</h2>\s*<pre>(.*?)</pre>", page, re.S).group(1)
    assert yaml.safe_load(pre.replace("&#x27;", "'").replace("&quot;", '"')) == best
    assert "the asha rungs at 1, 2, 4 training_iteration" in page
    assert page.count('<tr class="best">') == 1 and summary(run)["best"]["trial_id"] in page
    assert "fANOVA (Optuna) over the" in page

    from PIL import Image

    pngs = sorted((html.page.parent / "report_plots").glob("*.png"))
    assert [p.stem for p in pngs] == sorted(["learning_curves", "metric_vs_params", "parallel_coordinates",
                                             "importances", "budget"])
    for png in pngs:
        with Image.open(png) as img:
            assert img.width >= 400 and img.height >= 200
            assert len(img.convert("RGB").getcolors(maxcolors=1 << 16) or range(1 << 16)) > 20, png.name


def test_rungs_match_the_plan_of_tuner_validate(tmp_path):
    """The report draws the rungs that `tuner validate` prints (tuner.search.rungs.bracket_rungs), computed without Ray."""
    from tuner.report import scheduler_rungs
    from tuner.search.rungs import bracket_rungs as rungs
    from tuner.spec import load_spec

    base = {"trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min"}
    for scheduler in [{"type": "asha", "max_t": 6, "grace_period": 1, "reduction_factor": 2},
                      {"type": "asha", "max_t": 81, "grace_period": 1, "reduction_factor": 3, "brackets": 3},
                      {"type": "asha", "max_t": 10, "grace_period": 2, "reduction_factor": 4},
                      {"type": "hyperband", "max_t": 27, "reduction_factor": 3},
                      {"type": "median"}, {"type": "fifo"}]:
        spec = load_spec({**base, "scheduler": scheduler})
        expected = sorted({r for bracket in rungs(spec) for r in bracket if r < spec.scheduler_max_t})
        assert scheduler_rungs(spec) == expected, scheduler


def chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


def browse(page: Path, shot: Path | None = None) -> tuple[list[str], subprocess.CompletedProcess]:
    """Load a page in headless Chromium; returns its console messages (and takes a screenshot)."""
    args = [chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr", "--v=0",
            "--window-size=1200,3000", f"--user-data-dir={page.parent / 'chromium-profile'}"]
    args += [f"--screenshot={shot}"] if shot else ["--dump-dom"]
    proc = subprocess.run([*args, page.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    return console, proc


_PROBE = """<script>window.addEventListener("load", () => {
  const imgs = [...document.images];
  const broken = imgs.filter(i => !(i.complete && i.naturalWidth > 0));
  console.log("tuner-probe images=" + imgs.length + " broken=" + broken.length);
});</script>"""


@pytest.mark.skipif(not chromium(), reason="Debian's chromium is not installed (apt-get install -y chromium)")
def test_html_report_in_headless_chromium(html, tmp_path):
    # The check can fail: a page with a script error is caught.
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><p>x</p><script>undefinedFunction();</script></body></html>")
    console, _ = browse(bad)
    assert any("Uncaught ReferenceError" in line for line in console), console

    assert html.proc.returncode == 0, html.proc.stderr
    page = tmp_path / "report.html"  # the page alone, without the PNGs beside it: it embeds them
    shutil.copyfile(html.page, page)
    shot = tmp_path / "shot.png"
    console, proc = browse(page, shot)
    assert console == [], console
    assert shot.is_file(), proc.stderr[-2000:]
    from PIL import Image

    with Image.open(shot) as img:
        rgb = img.convert("RGB")
        colors = rgb.getcolors(maxcolors=1 << 20)
        assert colors is not None and len(colors) > 200, "the screenshot is not blank"
        white = max(colors)[0] / (rgb.width * rgb.height)
        assert white < 0.97

    # Every embedded plot decodes in the browser.
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
    console, _ = browse(probe)
    assert any("tuner-probe images=5 broken=0" in line for line in console), console
    assert not [line for line in console if "tuner-probe" not in line], console


def test_list_shows_finished_running_and_stopped_experiments(run, tmp_path, run_cli):
    import fcntl

    storage = tmp_path / "runs"
    shutil.copytree(run.exp, storage / "a-finished", symlinks=True)
    stopped = shutil.copytree(run.exp, storage / "b-stopped", symlinks=True)
    (stopped / "summary.json").unlink()  # a driver killed before the end writes no summary
    (stopped / "results.csv").unlink()
    running = shutil.copytree(run.exp, storage / "c-running", symlinks=True)
    (storage / "not-an-experiment").mkdir()
    with open(running / ".tuner.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as `tuner run` holds it
        proc = run_cli("list", storage)
        default = run_cli("list", cwd=tmp_path)  # the storage folder `runs` of the working directory
        live = run_cli("report", running)
    assert default.returncode == 0 and default.stdout == proc.stdout, default.stderr
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["name", "status", "trials", "best", "started"]
    best = summary(run)["best"]["metrics"]["loss"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert sorted(rows) == ["a-finished", "b-stopped", "c-running"]
    started = json.loads((run.exp / "tuner_run.json").read_text())["created"]
    for name, status in (("a-finished", "finished"), ("b-stopped", "stopped"), ("c-running", "running")):
        assert rows[name].split()[:3] == [name, status, "6"]
        assert f"loss={best:.6g}" in rows[name] and rows[name].endswith(started)
    assert live.returncode == 0 and ": running, started" in live.stdout.splitlines()[0]
    assert run_cli("report", stopped).stdout.splitlines()[0].split(": ")[1].startswith("stopped")
    bad = run_cli("list", tmp_path / "nowhere")
    assert bad.returncode == 2 and bad.stderr.startswith("tuner: error: ")
    # Without --output, the HTML page goes into the experiment, its PNGs into report_plots/ beside it.
    page = run_cli("report", storage / "a-finished", "--format", "html")
    assert page.returncode == 0, page.stderr
    assert (storage / "a-finished" / "report.html").stat().st_size > 0
    assert sorted((storage / "a-finished" / "report_plots").glob("*.png"))


def test_progress_line_under_the_table(run):
    lines = run.stdout.splitlines()
    progress = [(i, PROGRESS.match(line)) for i, line in enumerate(lines) if line.startswith("Progress:")]
    assert len(progress) >= 2, run.stdout[-3000:]
    assert all(m is not None for _, m in progress), [lines[i] for i, m in progress if m is None]
    tables = [i for i, line in enumerate(lines) if line == "== Status =="]
    assert len(tables) >= len(progress), "the table is still printed"
    for i, _ in progress:  # each line comes right after a whole table, never inside one
        before = [line for line in lines[:i] if line.strip()]
        assert before[-1].startswith("+--"), lines[i - 5:i + 1]
    done = [int(m.group(1)) for _, m in progress]
    used = [int(m.group(2)) for _, m in progress]
    assert done == sorted(done) and used == sorted(used) and used[-1] <= summary(run)["wall_time_s"] + 2
    best = [float(m.group("best")) for _, m in progress if m.group("best")]
    assert best and best == sorted(best, reverse=True), "the best so far only improves"
    assert best[-1] >= summary(run)["best"]["metrics"]["loss"] - 1e-6


def test_no_progress_line_without_the_table(tmp_path):
    """reporting.cli.progress: false drops the line, not the table; cli: false drops both."""
    from tuner.run.console import ProgressLine, TableReporter, build_reporter
    from tuner.spec import load_spec

    base = yaml.safe_load(SPEC)
    assert isinstance(build_reporter(load_spec(base)).progress, ProgressLine)
    table_only = build_reporter(load_spec({**base, "reporting": {"cli": {"progress": False}}}))
    assert isinstance(table_only, TableReporter) and table_only.progress is None
    assert build_reporter(load_spec({**base, "reporting": {"cli": False}})) is None


def test_tensorboard_scalars_and_hparams_match_results_csv(run):
    """Read the event files back with TensorBoard's own EventAccumulator."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    def load(folder):
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        try:
            return acc, acc.PluginTagToContent("hparams")
        except KeyError:
            return acc, {}

    csv = results(run).set_index("trial_id")
    experiment_tags = 0
    folders = sorted(p for p in run.exp.iterdir() if (p / "params.json").is_file())
    for folder in folders:
        trial_id = json.loads((folder / "result.json").read_text().splitlines()[0])["trial_id"]
        acc, hparams = load(folder)
        assert "ray/tune/loss" in acc.Tags()["scalars"]
        steps = {e.step: e.value for e in acc.Scalars("ray/tune/loss")}
        reported = {json.loads(line)["training_iteration"]: json.loads(line)["loss"]
                    for line in (folder / "result.json").read_text().splitlines()}
        assert steps.keys() == reported.keys() and max(steps) == csv.loc[trial_id, "training_iteration"]
        for step, value in reported.items():
            assert steps[step] == pytest.approx(value, rel=1e-6)
        assert steps[max(steps)] == pytest.approx(csv.loc[trial_id, "loss"], rel=1e-6)
        # The trial's HParams session: its config and its end.
        experiment_tags += metadata.EXPERIMENT_TAG in hparams
        start = metadata.parse_session_start_info_plugin_data(hparams[metadata.SESSION_START_INFO_TAG])
        assert set(start.hparams) == {"x", "opt"}
        assert start.hparams["x"].number_value == pytest.approx(csv.loc[trial_id, "config/x"])
        assert start.hparams["opt"].string_value == csv.loc[trial_id, "config/opt"]
        end = metadata.parse_session_end_info_plugin_data(hparams[metadata.SESSION_END_INFO_TAG])
        assert end.status == 1  # STATUS_SUCCESS
    # The one experiment summary, in the experiment folder: the whole domain of every parameter.
    _, hparams = load(run.exp)
    assert experiment_tags == 0 and metadata.EXPERIMENT_TAG in hparams
    experiment = metadata.parse_experiment_plugin_data(hparams[metadata.EXPERIMENT_TAG])
    infos = {h.name: h for h in experiment.hparam_infos}
    assert set(infos) == {"x", "opt"}
    assert [v.string_value for v in infos["opt"].domain_discrete.values] == ["adam", "sgd"]
    assert (infos["x"].domain_interval.min_value, infos["x"].domain_interval.max_value) == (0, 1)
    metrics = [m.name.tag for m in experiment.metric_infos]
    assert metrics[0] == "ray/tune/loss" and "ray/tune/epoch" in metrics and "ray/tune/done" not in metrics
    assert len(folders) == 6


def test_report_leaves_out_a_trial_the_experiment_dropped(run, tmp_path):
    """A trial folder the experiment state does not list: older than the state, it is a trial the
    experiment dropped (`--restart-errored` starts an errored trial over as a new one) and is left out;
    newer, it is a trial the state does not list yet, and is shown."""
    import os

    from tuner.report import load_experiment

    exp = shutil.copytree(run.exp, tmp_path / "steady", symlinks=True)
    trial = next(p for p in exp.iterdir() if (p / "result.json").is_file())
    state_time = max(p.stat().st_mtime for p in exp.glob("experiment_state-*.json"))
    for name, when in (("dropped", state_time - 60), ("new", state_time + 60)):
        copy = shutil.copytree(trial, exp / f"steady_{name}_00009")
        lines = (copy / "result.json").read_text().splitlines()
        (copy / "result.json").write_text("".join(line.replace(json.loads(line)["trial_id"], f"{name}_00009") + "\n"
                                                  for line in lines))
        (copy / "error.txt").write_text("RuntimeError: it failed\n")
        for f in copy.iterdir():
            os.utime(f, (when, when))
    report = load_experiment(exp)
    assert "dropped_00009" not in set(report.trials["trial_id"])
    assert "new_00009" in set(report.trials["trial_id"]) and len(report.trials) == 7


def _hand_made_experiment(path, trials: list[dict], history: list[dict], **fields):
    """An Experiment built from hand-made rows (no run, no Ray): what load_experiment would give."""
    from tuner.report.loading import Experiment

    base = dict(path=path, name=path.name, spec=None, metric="loss", mode="min", status="finished", started=None,
                summary=None, trials=pd.DataFrame(trials), history=pd.DataFrame(history), best_trial=None,
                params=["x", "y"])
    return Experiment(**{**base, **fields})


def test_importances_count_trials_stopped_early_as_pruned(tmp_path, monkeypatch):
    """README: parameter importances are Optuna's fANOVA "over the trials that ran to the end": a trial the
    scheduler stopped early is a PRUNED Optuna trial (its values by iteration), never a COMPLETE one."""
    import optuna

    from tuner.report.analysis import importance_facts

    # Six trials ran to the end, their loss set by x alone; four were stopped early at iteration 1, their loss
    # set by y alone: counted as COMPLETE, they would give y most of the importance.
    xs, ys = [0.1, 0.3, 0.5, 0.7, 0.9, 0.2], [0.5, 0.2, 0.8, 0.4, 0.6, 0.1]
    trials, history = [], []
    for i, (x, y) in enumerate(zip(xs, ys)):
        trials.append({"trial_id": f"t_{i:05d}", "status": "TERMINATED", "iterations": 4, "stopped_early": False,
                       "config/x": x, "config/y": y, "last_loss": x})
        history += [{"trial_id": f"t_{i:05d}", "training_iteration": it, "loss": x + 1 / it} for it in range(1, 5)]
    for i, (x, y) in enumerate(zip([0.15, 0.45, 0.65, 0.85], [0.9, 0.05, 0.7, 0.3]), start=6):
        trials.append({"trial_id": f"t_{i:05d}", "status": "TERMINATED", "iterations": 1, "stopped_early": True,
                       "config/x": x, "config/y": y, "last_loss": 100 * y})
        history.append({"trial_id": f"t_{i:05d}", "training_iteration": 1, "loss": 100 * y})
    exp = _hand_made_experiment(tmp_path, trials, history)
    studies = []
    create_study = optuna.create_study

    def keep(*args, **kwargs):  # Optuna's own study, kept to read its trials back
        studies.append(create_study(*args, **kwargs))
        return studies[-1]

    monkeypatch.setattr(optuna, "create_study", keep)
    facts = importance_facts(exp)
    assert facts["trials"] == 6 and "trials stopped early count as pruned" in facts["note"]
    states = [(t.state, t.value, t.intermediate_values) for t in studies[0].trials]
    ran = [(optuna.trial.TrialState.COMPLETE, x, {}) for x in xs]
    early = [(optuna.trial.TrialState.PRUNED, None, {1: 100 * y}) for y in [0.9, 0.05, 0.7, 0.3]]
    assert states == ran + early
    assert facts["importances"]["x"] > facts["importances"]["y"]


def test_importances_fall_back_to_the_last_iteration_every_trial_reached(tmp_path):
    """README: with fewer than 2 trials that ran to the end, the importances are taken "at the last iteration
    all trials reached": here one trial ran to iteration 4, six were stopped at iteration 2 (and one errored
    at iteration 1, left out). At iteration 2 the loss is set by y alone; at the end by x alone."""
    from tuner.report.analysis import importance_facts

    trials = [{"trial_id": "t_00000", "status": "TERMINATED", "iterations": 4, "stopped_early": False,
               "config/x": 0.5, "config/y": 0.5, "last_loss": 0.5}]
    history = [{"trial_id": "t_00000", "training_iteration": it, "loss": 5.0} for it in range(1, 5)]
    xs, ys = [0.1, 0.9, 0.3, 0.7, 0.4, 0.6], [0.8, 0.2, 0.6, 0.1, 0.95, 0.35]
    for i, (x, y) in enumerate(zip(xs, ys), start=1):
        trials.append({"trial_id": f"t_{i:05d}", "status": "TERMINATED", "iterations": 2, "stopped_early": True,
                       "config/x": x, "config/y": y, "last_loss": 10 * y})
        history += [{"trial_id": f"t_{i:05d}", "training_iteration": 1, "loss": x},
                    {"trial_id": f"t_{i:05d}", "training_iteration": 2, "loss": 10 * y}]
    trials.append({"trial_id": "t_00007", "status": "ERROR", "iterations": 1, "stopped_early": False,
                   "config/x": 0.2, "config/y": 0.3, "last_loss": 7.0})
    history.append({"trial_id": "t_00007", "training_iteration": 1, "loss": 7.0})
    facts = importance_facts(_hand_made_experiment(tmp_path, trials, history))
    assert facts["trials"] == 7
    assert "at iteration 2, the last one every trial that reported reached" in facts["note"], facts["note"]
    assert facts["importances"]["y"] > facts["importances"]["x"]


def test_tensorboard_hparams_domain_is_written_only_when_the_experiment_ends(ray_local, tmp_path):
    """README: the HParams dashboard shows "each parameter's whole domain from the spec (written when the
    experiment ends; before that TensorBoard infers it from the trials)": while trials run, neither the
    experiment folder nor a trial's folder holds an HParams experiment; at the end the experiment folder does,
    with the spec's whole domain (both choices, though the trial drew one)."""
    pytest.importorskip("tensorboard")
    from ray.train._internal.storage import StorageContext
    from ray.tune.experiment import Trial
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    from tuner.run.loggers import HParamsTBXCallback
    from tuner.spec import load_spec

    def hparams(folder):
        acc = EventAccumulator(str(folder))
        acc.Reload()
        try:
            return acc.PluginTagToContent("hparams")
        except KeyError:
            return {}

    spec = load_spec(yaml.safe_load(SPEC), require_trainable=False)
    exp = tmp_path / "steady"
    storage = StorageContext(storage_path=str(tmp_path), experiment_dir_name="steady", trial_dir_name="steady_t0")
    config = {"x": 0.25, "opt": "adam", "epochs": 6, "sleep": 0.3}
    trial = Trial("__fake", config=config, trial_id="t0", stub=True, storage=storage,
                  evaluated_params={"x": 0.25, "opt": "adam"})  # Ray's own Trial, as Tune hands it to callbacks
    callback = HParamsTBXCallback(spec, exp)
    callback.setup()
    callback.log_trial_start(trial)
    for i in (1, 2):
        callback.log_trial_result(i, trial, {"loss": 1 / i, "training_iteration": i, "trial_id": "t0",
                                             "config": config})
    callback.log_trial_end(trial)
    session = hparams(trial.local_path)
    assert metadata.SESSION_START_INFO_TAG in session and metadata.EXPERIMENT_TAG not in session
    assert metadata.EXPERIMENT_TAG not in hparams(exp), "no HParams experiment before the end"
    callback.on_experiment_end([trial])
    experiment = metadata.parse_experiment_plugin_data(hparams(exp)[metadata.EXPERIMENT_TAG])
    infos = {h.name: h for h in experiment.hparam_infos}
    assert [v.string_value for v in infos["opt"].domain_discrete.values] == ["adam", "sgd"]
    assert (infos["x"].domain_interval.min_value, infos["x"].domain_interval.max_value) == (0, 1)
