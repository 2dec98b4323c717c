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
from html import unescape
from pathlib import Path

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


def page_text(url: str, profile: Path, shot: Path | None = None) -> str:
    """The visible text of a page as headless chromium renders it (its scripts run for up to 20 s of virtual
    time), or, with ``shot``, a screenshot of it (and "")."""
    args = [chromium(), "--headless", "--disable-gpu", "--no-sandbox", f"--user-data-dir={profile}",
            "--virtual-time-budget=20000", "--window-size=1280,1400"]
    args += [f"--screenshot={shot}"] if shot else ["--dump-dom"]
    proc = subprocess.run([*args, url], capture_output=True, text=True, timeout=180)
    if shot:
        return ""
    body = re.sub(r"<script.*?</script>|<style.*?</style>", " ", proc.stdout, flags=re.S)
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", body)))


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

    def __init__(self, *paths, host: str = "127.0.0.1", env: dict | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "tuner", "dashboard", *map(str, paths), "--port", "0",
                                      "--host", host], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, **(env or {})})
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
        status, body = get(f"{self.url}/api/studies/{study_id}?after=0")
        assert status == 200
        return json.loads(body)["trials"]

    def stop(self) -> tuple[int, str, str]:
        """Ctrl-C: returns the exit code, and the rest of stdout and stderr."""
        self.proc.send_signal(signal.SIGINT)
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


def test_a_run_shows_live_its_trials_rise_and_the_page_draws_them(served, tmp_path, on_session_ray):
    """A `tuner run` started after the dashboard: its study appears, a held trial shows RUNNING beside the finished
    one, and the count of finished trials rises to 3 when the run goes on; the page (headless chromium) shows the
    study, its best trial and the learning curves. Serving changes nothing in the experiment's folder."""
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
        if chromium():
            text = page_text(f"{dash.url}/dashboard/studies/{study['study_id']}", tmp_path / "profile")
            assert "live" in text and "Best Trial" in text and "Intermediate values" in text, text[:2000]
    finally:
        gate.write_text("go")
        out, err = run.communicate(timeout=900)
    assert run.returncode == 0, err
    states = wait_for(lambda: (s := [t["state"] for t in dash.trials(study["study_id"])]).count("Complete") == 3
                      and s, "the three finished trials")
    assert len(states) == 3
    exp = runs / "live"
    before = folder_state(exp)
    assert len(dash.trials(study["study_id"])) == 3 and dash.studies()["live"]["directions"] == ["minimize"]
    assert folder_state(exp) == before, "the dashboard writes nothing into the experiment"
    if chromium():
        shot = tmp_path / "dashboard.png"
        page_text(f"{dash.url}/dashboard/studies/{study['study_id']}", tmp_path / "profile", shot)
        assert shot.stat().st_size > 10_000
        if os.environ.get("TUNER_DASHBOARD_SCREENSHOT"):  # the README's picture: `docs/img/dashboard.png`
            shutil.copyfile(shot, os.environ["TUNER_DASHBOARD_SCREENSHOT"])


def test_several_objectives_show_their_pareto_front(served, ray_local, tmp_path, make_spec):
    """A 2-objective experiment is a 2-direction study whose finished trials carry both values and their
    constraint's violation; the page draws its Pareto front."""
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
    if chromium():
        text = page_text(f"{dash.url}/dashboard/studies/{study['study_id']}", tmp_path / "profile")
        assert "Pareto Front" in text, text[:2000]


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
    dash = Dashboard(tmp_path, host="0.0.0.0")
    assert dash.lines[0].startswith("tuner: note: the dashboard has no authentication"), dash.lines
    code, out, err = dash.stop()
    assert code == 0 and err == "", err


def test_a_missing_folder_or_a_missing_extra_exits_2_before_serving(tmp_path, run_cli):
    proc = run_cli("dashboard", tmp_path / "nowhere")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"tuner: error: tuner dashboard: {tmp_path / 'nowhere'} is not a folder; give experiment "
                           "folders or the storage folders that hold them (a spec's `storage:`, `runs` by default).\n")
    proc = run_cli("dashboard", "s3://bucket/runs")
    assert proc.returncode == 2 and "a cloud storage is not served yet" in proc.stderr, proc.stderr
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "optuna_dashboard.py").write_text("raise ImportError('not installed')\n")
    proc = run_cli("dashboard", tmp_path, env={"PYTHONPATH": f"{stub}{os.pathsep}{ROOT}"})
    assert proc.returncode == 2 and proc.stdout == ""
    assert 'pip install -e ".[dashboard]"' in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
