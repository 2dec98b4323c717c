"""`tuner dashboard`: optuna-dashboard over the experiment folders, live as a run goes, read-only, in a real
headless browser (Debian's chromium) and through its HTTP API."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from tests.fixtures.paths import ROOT

# One xdist worker runs this file: the dashboard process and the runs it serves are built once.
pytestmark = [pytest.mark.xdist_group("test_dashboard")]

LIVE = """\
name: live
trainable: tests.trainables:held_until_gate
metric: loss
mode: min
num_samples: 3
seed: 0
max_concurrent_trials: 1
param_space: {{x: {{type: uniform, low: 0, high: 1}}, epochs: 3, hold: 1, gate: "{gate}"}}
reporting: {{cli: false, tensorboard: false}}
resources: {{cpu: 1}}
"""

PARETO = {
    "name": "pareto", "trainable": "tests.trainables:two_objectives", "metric": ["f1", "f2"], "mode": ["min", "min"],
    "constraints": [{"metric": "size", "max": 1.0}], "num_samples": 4, "seed": 0, "max_concurrent_trials": 1,
    "param_space": {"x": {"type": "uniform", "low": 0.05, "high": 1}, "y": {"type": "choice", "values": [0.0, 0.5]},
                    "epochs": 2},
    "reporting": {"cli": False, "tensorboard": False}, "resources": {"cpu": 1},
}


def chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium, headless, driven by Playwright (``executable_path``: no browser is downloaded)."""
    if not chromium():
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium): no browser to open the page")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (the test extra) drives the browser")
    sync_api.expect.set_options(timeout=300_000)  # a gate on what the page shows, not a speed: the run sets the pace
    with sync_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        yield launched
        launched.close()


def open_study(browser, dash: "Dashboard", name: str):
    """A new page at the dashboard's study list, then the study ``name`` opened by its link (as a user clicks)."""
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.goto(f"{dash.url}/dashboard/")
    link = page.get_by_role("link", name=re.compile(rf"^\d+\. {re.escape(name)}\b"))
    expect(link).to_be_visible()
    link.click()
    expect(page.get_by_text(re.compile(rf"^{re.escape(name)} \(id=\d+\)$"))).to_be_visible()
    return page


def get(url: str, method: str = "GET") -> tuple[int, bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def wait_for(check, what: str, timeout_s: float = 300):
    """Poll ``check`` (a gate: the dashboard re-reads the folders every 2 s) until it returns a true value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)


class Dashboard:
    """A `tuner dashboard` subprocess; ``url`` is the one it printed."""

    def __init__(self, *paths, host: str = "127.0.0.1", env: dict | None = None, sigint_ignored: bool = False):
        """``sigint_ignored``: start it as a script's ``&`` job is started, SIGINT ignored (inherited)."""
        self.proc = subprocess.Popen([sys.executable, "-m", "tuner", "dashboard", *map(str, paths), "--port", "0",
                                      "--host", host], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, **(env or {})},
                                     preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
                                     if sigint_ignored else None)
        self.lines = []
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("Dashboard: "):
                break
        found = re.search(r"http://\S+?:(\d+)/dashboard/", self.lines[-1] if self.lines else "")
        assert found, (self.lines, self.proc.stderr.read() if self.proc.poll() is not None else "")
        self.url = f"http://127.0.0.1:{found.group(1)}"

    def studies(self) -> dict[str, dict]:
        status, body = get(f"{self.url}/api/studies")
        assert status == 200
        return {s["study_name"]: s for s in json.loads(body)["study_summaries"]}

    def trials(self, study_id: int) -> list[dict]:
        return self.study(study_id)["trials"]

    def study(self, study_id: int) -> dict:
        status, body = get(f"{self.url}/api/studies/{study_id}?after=0")
        assert status == 200
        return json.loads(body)

    def stop(self, sig: int = signal.SIGINT) -> tuple[int, str, str]:
        """Ctrl-C (or ``sig``): returns the exit code, and the rest of stdout and stderr."""
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, out, err


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`tuner dashboard` over an empty storage folder, started before any run; stopped (Ctrl-C) at the end."""
    runs = tmp_path_factory.mktemp("dashboard") / "runs"
    runs.mkdir()
    dash = Dashboard(runs)
    yield runs, dash
    if dash.proc.poll() is None:
        dash.stop()


def folder_state(path: Path) -> dict[str, tuple[int, float]]:
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime) for p in path.rglob("*") if p.is_file()}


def test_a_run_shows_live_its_trials_rise_and_the_page_draws_them(served, browser, tmp_path, on_session_ray):
    """A `tuner run` started after the dashboard: its study appears, a held trial shows RUNNING beside the finished
    one; in the browser the study's page shows its best trial and the learning curves, its trial list 2 trials,
    and, with no reload (the page's own live update), 3 once the run goes on. Serving changes nothing in the
    experiment's folder."""
    from playwright.sync_api import expect

    runs, dash = served
    gate = tmp_path / "gate"
    spec = tmp_path / "live.yaml"
    spec.write_text(LIVE.format(gate=gate))
    run = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(spec), "--storage", str(runs)], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, **on_session_ray})
    try:
        wait_for(lambda: Path(f"{gate}.held").exists() or run.poll() is not None, "the second trial to be held")
        assert run.poll() is None, run.communicate()
        study = wait_for(lambda: dash.studies().get("live"), "the live study")
        states = wait_for(lambda: (s := sorted(t["state"] for t in dash.trials(study["study_id"])))
                          and s.count("Complete") == 1 and "Running" in s and s, "one finished and one running trial")
        assert states == ["Complete", "Running"]
        finished = [t for t in dash.trials(study["study_id"]) if t["state"] == "Complete"][0]
        assert len(finished["intermediate_values"]) == 3 and finished["values"]
        assert [p["name"] for p in finished["params"]] == ["x"], "the sampled parameters only"
        attrs = {a["key"]: a["value"] for a in finished["user_attrs"]}
        assert set(attrs) == {"trial_id", "status", "iterations", "folder", "seed"} and attrs["iterations"] == "3"
        seed_while_running = (attrs["trial_id"], attrs["seed"])  # from the spec's seed, before results.csv exists

        page = open_study(browser, dash, "live")
        expect(page.get_by_text("Best Trial").first).to_be_visible()
        expect(page.get_by_text("Intermediate values")).to_be_visible()  # the learning curves' plot
        page.get_by_role("link", name="Trials (List)").click()
        expect(page.get_by_text(re.compile(r"^2 Trials$"))).to_be_visible()
        expect(page.get_by_text("Running", exact=True).first).to_be_visible()
    finally:
        gate.write_text("go")
        out, err = run.communicate(timeout=900)
    assert run.returncode == 0, err
    expect(page.get_by_text(re.compile(r"^3 Trials$"))).to_be_visible()  # no reload: the page polls
    # The run's end: the study says so, and names tuner's best trial (its lock released after its last write).
    attrs = wait_for(lambda: (a := {x["key"]: x["value"] for x in dash.study(study["study_id"])["user_attrs"]})
                     and a["status"] == "finished" and a, "the study's status: finished")
    assert attrs["best_trial"] == json.loads((runs / "live" / "summary.json").read_text())["best"]["trial_id"]
    trials = dash.trials(study["study_id"])
    assert [t["state"] for t in trials] == ["Complete"] * 3
    exp = runs / "live"
    before = folder_state(exp)
    attrs = [{a["key"]: a["value"] for a in t["user_attrs"]} for t in trials]
    summary = json.loads((exp / "summary.json").read_text())
    assert all(a["best_checkpoint"] == summary["checkpoints"][a["trial_id"]]["checkpoint"] for a in attrs)
    table = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    seeds = {t: str(v) for t, v in zip(table["trial_id"], table["trial_seed"])}
    assert {a["trial_id"]: a["seed"] for a in attrs} == seeds and seeds[seed_while_running[0]] == seed_while_running[1]
    assert dash.studies()["live"]["directions"] == ["minimize"]
    assert folder_state(exp) == before, "the dashboard writes nothing into the experiment"
    page.get_by_role("link", name="History").click()
    expect(page.get_by_text("Intermediate values")).to_be_visible()
    page.wait_for_load_state("networkidle")
    shot = tmp_path / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if os.environ.get("TUNER_DASHBOARD_SCREENSHOT"):  # the README's picture: `docs/img/dashboard.png`
        shutil.copyfile(shot, os.environ["TUNER_DASHBOARD_SCREENSHOT"])
    page.close()


def test_several_objectives_show_their_pareto_front(served, browser, ray_local, tmp_path, make_spec):
    """A 2-objective experiment is a 2-direction study whose finished trials carry both values and their
    constraint's violation; the page draws its Pareto front."""
    from playwright.sync_api import expect

    from tuner import tune_model

    runs, dash = served
    result = tune_model(make_spec(PARETO, storage=str(runs)))
    study = wait_for(lambda: dash.studies().get("pareto"), "the pareto study")
    assert study["directions"] == ["minimize", "minimize"]
    trials = wait_for(lambda: (t := dash.trials(study["study_id"])) and len(t) == 4 and t, "4 trials")
    assert all(t["state"] == "Complete" and len(t["values"]) == 2 for t in trials)
    front = {t["trial_id"] for t in result.pareto_front}
    attrs = [{a["key"]: a["value"] for a in t["user_attrs"]} for t in trials]
    assert front and front <= {a["trial_id"] for a in attrs} and {a["status"] for a in attrs} == {"TERMINATED"}
    assert all(Path(a["folder"]).parent == runs / "pareto" and a["folder"].endswith(a["trial_id"]) for a in attrs)
    page = open_study(browser, dash, "pareto")
    expect(page.get_by_text("Pareto Front").first).to_be_visible()
    page.close()


def test_the_dashboard_is_read_only_and_serves_no_other_file(served):
    runs, dash = served
    before = dash.studies()
    for method, path in [("DELETE", "/api/studies/0"), ("POST", "/api/studies"), ("PUT", "/api/studies/0/note"),
                         ("POST", "/api/trials/0/tell")]:
        status, body = get(dash.url + path, method)
        assert status == 405 and b"read-only" in body, (method, path, status)
    status, body = get(dash.url + "/static/../../../../../../etc/passwd")
    assert status != 200 or b"root:" not in body
    assert dash.studies() == before, "no study was deleted or changed"


def test_ctrl_c_stops_it_cleanly_and_another_host_warns(tmp_path):
    """Ctrl-C stops it with exit 0, also when it inherited SIGINT ignored (a job a script starts with `&`: such a
    dashboard once served on after Ctrl-C); so does `kill` (SIGTERM). Another host than this machine's warns."""
    dash = Dashboard(tmp_path, host="0.0.0.0")
    assert dash.lines[0].startswith("tuner: note: the dashboard has no authentication"), dash.lines
    code, out, err = dash.stop()
    assert code == 0 and err == "", err
    code, out, err = Dashboard(tmp_path, sigint_ignored=True).stop()
    assert code == 0 and err == "", err
    code, out, err = Dashboard(tmp_path).stop(signal.SIGTERM)
    assert code == 0 and err == "", err


def test_a_missing_folder_or_a_missing_extra_exits_2_before_serving(tmp_path, run_cli):
    proc = run_cli("dashboard", tmp_path / "nowhere")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"tuner: error: tuner dashboard: {tmp_path / 'nowhere'} is not a folder; give experiment "
                           "folders or the storage folders that hold them (a spec's `storage:`, `runs` by default).\n")
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "optuna_dashboard.py").write_text("raise ImportError('not installed')\n")
    proc = run_cli("dashboard", tmp_path, env={"PYTHONPATH": f"{stub}{os.pathsep}{ROOT}"})
    assert proc.returncode == 2 and proc.stdout == ""
    assert 'pip install -e ".[dashboard]"' in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_a_changed_experiment_is_read_again_after_three_times_its_last_read(ray_local, tmp_path, make_spec):
    """The dashboard's cost rule (tuner.report.dashboard.READ_WAIT_FACTOR): an experiment whose files changed is read again
    once 3 times its last read's seconds have passed, so a large live one takes at most a quarter of a core. The
    storage's clock is the test's: each refresh reads it once, and each read of the experiment twice more."""
    from tuner import tune_model
    from tuner.report.dashboard import ExperimentStorage
    from tuner.experiment.layout import RESULT_FILE

    tune_model(make_spec({**PARETO, "num_samples": 1}, storage=str(tmp_path / "runs")))
    exp = tmp_path / "runs" / "pareto"
    result = next(exp.glob(f"*/{RESULT_FILE}"))
    readings = iter([0.0, 0.0, 10.0])  # the first refresh; its read of the experiment takes 10 s

    def clock() -> float:
        reading = next(readings, None)
        assert reading is not None, "the clock was read once more than the test says: a read the rule forbids"
        return reading

    def refresh(*times: float) -> None:
        nonlocal readings
        readings = iter(times)
        storage.get_all_studies()
        assert next(readings, None) is None, "the clock was read as often as the test says"

    def report() -> None:  # a new write in the trial's result.json
        mtime = result.stat().st_mtime + 1
        os.utime(result, (mtime, mtime))

    storage = ExperimentStorage([exp], clock=clock)
    assert next(readings, None) is None
    report()
    refresh(11.0)  # 11 s after a read of 10 s: not yet
    refresh(29.0)
    refresh(30.0, 30.0, 30.5)  # 30 s after it: read again, in 0.5 s
    report()
    refresh(31.0)  # 1 s after it: under 3 x 0.5 s
    refresh(32.0, 32.0, 32.0)
    refresh(40.0)  # nothing changed: no read
