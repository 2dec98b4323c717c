"""The CLI through real subprocesses: validate, run, exit codes, golden errors, clean console.

One `tuner run` (the ``toy_run`` fixture) serves the tests that only look at what it left. The whole
bad-spec corpus, and the golden refusals of `tuner run` (``golden_runs``), are each run in one subprocess,
one ``tuner.cli.main`` call per spec (``main_calls``); a sample of the corpus goes through `python -m tuner`."""

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.fixtures.paths import ROOT
from tests.fixtures.console import console_reports

# One xdist worker runs this file: its module-scoped fixture is built once (pyproject's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_cli")

TOY = """\
name: toy
trainable: tests.trainables:quadratic
metric: loss
mode: min
num_samples: 4
seed: 0
param_space:
  x: {type: uniform, low: 0, high: 1}
  opt: {type: choice, values: [adam, sgd]}
  epochs: 3
scheduler: {type: asha, max_t: 3, grace_period: 1, reduction_factor: 3}
resources: {cpu: 1}
reporting: {cli: {metric_columns: [loss], max_report_frequency: 1}, tensorboard: true}
"""


def test_validate_prints_the_plan(tmp_path, run_cli, make_spec):
    spec = make_spec(TOY, file="toy.yaml")
    ray_tmp = tmp_path / "ray_tmp"  # where a Ray started by this process would make its session folder
    ray_tmp.mkdir()
    proc = run_cli("validate", spec, "--num-cpus", "2", "--storage", tmp_path / "runs",
                   env={"RAY_TMPDIR": str(ray_tmp)})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"spec:       {spec} is valid" in out
    assert "trials:     4 (4 samples)" in out
    assert "searcher:   random (BasicVariantGenerator), seed 0" in out
    assert "scheduler:  asha (ASHAScheduler), max_t 3 iterations, reduction factor 3, 1 bracket(s)" in out
    assert "bracket 0: rungs at 1, 3 iterations" in out
    assert "resources:  1 CPU, 0 GPU per trial" in out
    assert "fit:        2 trials at a time" in out
    assert not (tmp_path / "runs").exists(), "validate writes nothing"
    assert not any(ray_tmp.iterdir()), "validate starts no Ray"


def test_validate_grid_plan_and_gpu_packing(make_spec, run_cli):
    spec = make_spec(TOY.replace("resources: {cpu: 1}", "resources: {cpu: 0.5, gpu: 0.5}").replace(
        "x: {type: uniform, low: 0, high: 1}", "x: {type: grid, values: [0.1, 0.5, 0.9]}"), file="toy.yaml")
    proc = run_cli("validate", spec, "--num-cpus", "2", "--num-gpus", "2")
    assert proc.returncode == 0, proc.stderr
    assert "trials:     12 (3 grid points x 4 repeats)" in proc.stdout
    assert "fit:        4 trials at a time" in proc.stdout


def test_validate_notes_a_hyperband_that_cannot_compare_ddp_trials(make_spec, run_cli):
    spec = make_spec(TOY.replace("resources: {cpu: 1}", "resources: {workers: 2, cpu_per_worker: 1}")
                     .replace("scheduler: {type: asha, max_t: 3, grace_period: 1, reduction_factor: 3}",
                              "scheduler: {type: hyperband, max_t: 3}"), file="toy.yaml")
    one = run_cli("validate", spec, "--num-cpus", "2")
    assert one.returncode == 0, one.stderr
    assert "fit:        1 trial at a time\nnote:       scheduler hyperband will stop no trial early here" in one.stdout
    two = run_cli("validate", spec, "--num-cpus", "4")
    assert "fit:        2 trials at a time" in two.stdout and "note:" not in two.stdout


def test_dry_run_is_validate(make_spec, run_cli):
    """`tuner run --dry-run` prints what `tuner validate` prints: the plan, and the wall-time lines of a forecast
    in seconds (an ASHA on time_total_s needs no measurement for them)."""
    for text in (TOY, TOY.replace("scheduler: {type: asha, max_t: 3,", "scheduler: {type: asha, time_attr: "
                                  "time_total_s, max_t: 30,")):
        spec = make_spec(text, file="toy.yaml")
        a = run_cli("validate", spec, "--num-cpus", "2")
        b = run_cli("run", spec, "--dry-run", "--num-cpus", "2")
        assert a.returncode == b.returncode == 0 and a.stdout == b.stdout, (a.stderr, b.stderr)
    assert "wall time:" in b.stdout, b.stdout


# Runs `tuner.cli.main(ARGV)` once per call in one process, as separate `python -m tuner ARGV` processes would:
# argv[1] is a JSON list of [ARGV, PATH]. The process's state that a call could change (sys.path, os.environ,
# the warnings already shown) is restored before each call, and each call's stdout and stderr are its own (file
# descriptors 1 and 2 point at a fresh file, so anything a library writes there directly is caught too). Writes,
# to argv[2], per call: the exit code, stdout and stderr (bytes as latin-1), whether `ray` is in sys.modules and
# whether PATH exists after the call.
MAIN_DRIVER = """\
import json, os, sys, tempfile, traceback, warnings
from tuner.cli import main

path, environ, filters, out = list(sys.path), dict(os.environ), list(warnings.filters), []
for argv, watched in json.loads(sys.argv[1]):
    sys.path[:] = path
    os.environ.clear()
    os.environ.update(environ)
    warnings.resetwarnings()
    warnings.filters[:] = filters
    warnings.onceregistry.clear()
    files, saved = [tempfile.TemporaryFile() for _ in range(2)], [os.dup(1), os.dup(2)]
    for fd, f in zip((1, 2), files):
        os.dup2(f.fileno(), fd)
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, s in zip((1, 2), saved):
        os.dup2(s, fd)
        os.close(s)
    stdout, stderr = [(f.seek(0), f.read().decode("latin-1"))[1] for f in files]
    out.append({"argv": argv, "code": code, "stdout": stdout, "stderr": stderr, "ray": "ray" in sys.modules,
                "written": os.path.exists(watched)})
with open(sys.argv[2], "w") as f:
    json.dump(out, f)
"""


def main_calls(calls: list[tuple[list[str], Path]], report: Path) -> list[dict]:
    """Run ``tuner.cli.main(argv)`` for each ``(argv, watched path)`` of ``calls`` in one real subprocess
    (MAIN_DRIVER, cwd the repository root, without TUNER_DEBUG); ``report`` is where it writes its findings.

    Returns:
        Per call, in order: ``code`` (the exit code), ``stdout`` and ``stderr`` (decoded as
        ``subprocess.run(text=True)`` decodes a process's output), ``ray`` (whether Ray was imported by
        then) and ``written`` (whether the watched path existed after the call).
    """
    import io
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "TUNER_DEBUG"}  # as run_cli: no tracebacks
    proc = subprocess.run([sys.executable, "-c", MAIN_DRIVER, json.dumps([[argv, str(w)] for argv, w in calls]),
                           str(report)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-3000:]
    results = json.loads(report.read_text())
    assert [r["argv"] for r in results] == [argv for argv, _ in calls]
    for r in results:
        for stream in ("stdout", "stderr"):
            r[stream] = io.TextIOWrapper(io.BytesIO(r[stream].encode("latin-1"))).read()
    return results


GOLDEN = [
    ("num_samples: 4", "num_samples: 0",
     "{f}:5:14: num_samples: must be greater than or equal to 1, but got 0 (int)."),
    ("mode: min", "mode: minimise", "{f}:4:7: mode: must be one of 'min' or 'max', but got 'minimise'."),
    ("scheduler: {type: asha, ", "scheduler: {type: ashha, ",
     "{f}:11:19: scheduler.type: unknown scheduler type 'ashha'; did you mean 'asha'? "
     "Allowed: fifo, asha, hyperband, bohb, median, pbt, pb2."),
    ("tests.trainables:quadratic", "tests.no_such_module:train",
     "{f}:2:12: trainable: module 'tests.no_such_module' not found (looked on sys.path, including {cwd}, {d} and the folders above it)."),
    ("tests.trainables:quadratic", "tests.named_functions:trian",
     "{f}:2:12: trainable: 'tests.named_functions' has no function 'trian'; did you mean 'train'? "
     "Functions there: evaluate, train."),
    ("tests.trainables:quadratic", "missing/file.py:train",
     "{f}:2:12: trainable: file 'missing/file.py' not found (looked in {cwd}, {d} and the folders above it)."),
    ("resources: {cpu: 1}", "resources: {cpu: 4}",
     "{f}:12:18: resources.cpu: one trial asks for 4 CPU, but this machine (--num-cpus/--num-gpus) has 2; "
     "lower resources.cpu or give Ray more (--num-cpus, or a cluster with --address)."),
]


@pytest.fixture(scope="module")
def golden_runs(tmp_path_factory):
    """`tuner run` of TOY with each GOLDEN change, each spec in a folder of its own, all in one subprocess
    (main_calls). Returns {the change's new text: (result, spec file, its folder)}."""
    cases = {}
    for i, (old, new, _) in enumerate(GOLDEN):
        folder = tmp_path_factory.mktemp(f"golden{i}")
        spec = folder / "toy.yaml"
        spec.write_text(TOY.replace(old, new))
        cases[new] = (spec, folder)
    calls = [(["run", str(spec), "--num-cpus", "2", "--storage", str(folder / "runs")], folder / "runs")
             for spec, folder in cases.values()]
    results = main_calls(calls, tmp_path_factory.mktemp("golden") / "results.json")
    return {new: (result, *where) for (new, where), result in zip(cases.items(), results)}


@pytest.mark.parametrize("old,new,expected", GOLDEN, ids=[g[1] for g in GOLDEN])
def test_bad_input_exits_2_with_golden_message(old, new, expected, golden_runs):
    """`tuner run` of a bad spec (through tuner.cli.main, in golden_runs): exit 2, the golden message."""
    assert old in TOY
    proc, spec, folder = golden_runs[new]
    assert proc["code"] == 2
    message = expected.format(f=spec, cwd=ROOT, d=folder)
    assert proc["stderr"] == f"tuner: error: {message}\n"
    assert proc["stdout"] == ""
    assert "Traceback" not in proc["stderr"]
    assert not proc["written"] and not (folder / "runs").exists(), "nothing is written for bad input"


def test_bad_spec_corpus_through_the_cli(tmp_path, run_cli):
    """A sample of the golden corpus gives the same text through the CLI, exit 2, no Ray."""
    for name in ["duplicate_key", "python_object_tag", "bohb_with_asha", "grace_above_max_t", "binary_junk",
                 "empty_file", "name_traversal", "yaml_syntax"]:
        rel = f"tests/bad_specs/{name}.yaml"
        proc = run_cli("validate", rel, timeout=60, env={"RAY_TMPDIR": str(tmp_path)})
        assert proc.returncode == 2, name
        assert not any(tmp_path.iterdir()), f"{name}: Ray started"
        assert proc.stderr == "tuner: error: " + (ROOT / rel).with_suffix(".err").read_text(), name


def test_missing_spec_file(tmp_path, run_cli):
    proc = run_cli("validate", tmp_path / "nope.yaml")
    assert proc.returncode == 2
    assert proc.stderr == (f"tuner: error: {tmp_path / 'nope.yaml'}: spec file not found; give the path of a "
                           "YAML spec, e.g. search_spaces/mnist_asha.yaml.\n")


def test_traceback_only_with_tuner_debug(make_spec, run_cli):
    spec = make_spec(TOY.replace("num_samples: 4", "num_samples: 0"), file="toy.yaml")
    quiet = run_cli("validate", spec)
    loud = run_cli("validate", spec, env={"TUNER_DEBUG": "1"})
    assert quiet.returncode == loud.returncode == 2
    assert "Traceback" not in quiet.stderr and "Traceback" in loud.stderr


def test_usage_error_exits_2(run_cli):
    proc = run_cli("run")
    assert proc.returncode == 2 and "Missing argument 'SPEC'" in proc.stderr


def test_set_overrides(make_spec, run_cli):
    spec = make_spec(TOY, file="toy.yaml")
    proc = run_cli("validate", spec, "--num-cpus", "2", "--set", "scheduler.max_t=9", "--set", "num_samples=2")
    assert proc.returncode == 0, proc.stderr
    assert "max_t 9 iterations" in proc.stdout and "trials:     2 (2 samples)" in proc.stdout


SECRET = "wandb-secret-value-7f3a9c"


# TOY searched by Optuna (its TPE model takes over after 10 trials: 12 trials).
TOY_OPTUNA = TOY.replace("num_samples: 4", "num_samples: 12").replace("seed: 0\n", "seed: 0\nsearch: {algorithm: optuna}\n")


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory, run_cli):
    """One `tuner run` of TOY_OPTUNA through the CLI, with a secret in two environment variables, shared by
    test_run_end_to_end, test_model_based_searchers_leave_stderr_empty and
    test_secrets_in_the_environment_never_reach_files_or_console.

    Returns:
        ``(proc, exp)``: the finished process (text) and the experiment folder.
    """
    tmp = tmp_path_factory.mktemp("toy")
    spec = tmp / "toy.yaml"
    spec.write_text(TOY_OPTUNA)
    proc = run_cli("run", spec, "--num-cpus", "2", "--storage", tmp / "runs",
                   env={"WANDB_API_KEY": SECRET, "MY_TOKEN": SECRET})
    return proc, tmp / "runs" / "toy"


def test_run_end_to_end(toy_run):
    """`tuner run` (toy_run: TOY under Optuna) prints the classic table, the best trial and where the files
    are, writes them, and keeps the console clean."""
    proc, exp = toy_run
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr + out
    assert f"TensorBoard: tensorboard --logdir {exp}" in out
    assert "== Status ==" in out, "the classic CLIReporter table"
    header = [line for line in out.splitlines() if line.startswith("| Trial name")][-1]  # the last table
    assert [c.strip() for c in header.strip("|").split("|")] == ["Trial name", "status", "loc", "x", "opt", "loss", "iter"]
    summary = json.loads((exp / "summary.json").read_text())
    best = summary["best"]
    assert re.search(rf"^Best trial {best['trial_id']}: loss=[0-9.e-]+ config=\{{.*'opt': '(adam|sgd)'.*\}}$", out, re.M)
    assert summary["trials"]["total"] == 12
    assert (exp / "results.csv").exists() and (exp / "best_config.yaml").exists()
    # ray_logs: a link to the embedded Ray's own session logs.
    assert (exp / "ray_logs").is_symlink() and (exp / "ray_logs" / "raylet.out").is_file()
    # A clean console: no Ray warnings, no actor logs, no tracebacks.
    for noise in ("WARNING", "Traceback", "(pid=", "INFO"):
        assert noise not in out and noise not in proc.stderr, noise


def readme_forecast_keys() -> set[str]:
    """The keys of tuner_run.json's ``forecast`` that docs/guides/budget-forecast.md lists ("records the forecast
    in `tuner_run.json` (`forecast`: `trials`, ... `trials_at_once`)")."""
    text = " ".join((ROOT / "docs" / "guides" / "budget-forecast.md").read_text().split())
    start = text.index("records the forecast in `tuner_run.json` (`forecast`:")
    part = text[start:text.index("and `tuner report`'s", start)]
    return set(re.findall(r"`(\w+)`", part)) - {"tuner_run", "forecast", "json"}


def test_run_records_the_asha_forecast_with_its_range(toy_run):
    """tuner_run.json's forecast of toy_run (12 trials of 3 iterations under ASHA, 2 at a time): the keys the
    README lists, the simulated range around the expected total, and the trials at once it assumed."""
    _, exp = toy_run
    record = json.loads((exp / "tuner_run.json").read_text())["forecast"]
    assert set(record) == readme_forecast_keys()
    assert (record["trials"], record["unit"], record["per_trial"], record["max_total"], record["scheduler"]) == \
        (12, "training_iteration", 3, 36, "asha")
    assert record["expected_low"] <= record["expected_total"] <= record["expected_high"] <= record["max_total"]
    assert record["at_once"] == record["trials_at_once"] == 2 and "simulated" in record["rule"]
    assert isinstance(record["notes"], list)

def test_model_based_searchers_leave_stderr_empty(tmp_path, run_cli, toy_run, on_session_ray):
    """No library warning reaches the console: none of Optuna's (toy_run searches with Optuna, 12 trials,
    more than its 10 random start-up trials), nor statsmodels' FutureWarning under BOHB (it did, once
    its KDE model is fit: enough trials for that)."""
    optuna, _ = toy_run
    assert optuna.returncode == 0, optuna.stderr
    assert optuna.stderr == ""
    spec = tmp_path / "s.yaml"
    spec.write_text("""\
name: quiet
trainable: tests.trainables:quadratic
metric: loss
mode: min
num_samples: 12
seed: 0
search: {algorithm: bohb}
scheduler: {type: bohb, max_t: 3, reduction_factor: 3}
param_space: {x: {type: uniform, low: 0, high: 1}, epochs: 3}
resources: {cpu: 1}
""")
    proc = run_cli("run", spec, "--storage", tmp_path / "runs", env=on_session_ray)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


ELAPSED = re.compile(r"^Progress: (\d+)/4 trials done(?: \((\d+) errored\))? \| (\d+) s elapsed \| "
                     r"(?:best trial (?P<trial>\S+), last loss=(?P<value>\S+)|no loss reported yet)$")


def test_errored_trials_exit_1_and_the_console_never_shows_them_best(tmp_path, run_cli, make_spec, on_session_ray):
    """Exit 1 naming the errored trials. On the console (the classic CLIReporter through a real
    `tuner run`), the table's `Current best trial` and the progress line under it name the same
    trial, never an errored one though errored trials have better last values (the rule of
    summary.json), both label the value `last`, and the folder line is the experiment's, not
    Ray's staging folder under /tmp/ray. Without time_budget_s the line shows the seconds elapsed."""
    spec = make_spec(TOY.replace("tests.trainables:quadratic", "tests.trainables:fails_for_large_x")
                     .replace("scheduler: {type: asha, max_t: 3, grace_period: 1, reduction_factor: 3}",
                              "scheduler: {type: fifo}"), file="toy.yaml")  # ASHA could stop the failing trials first
    # Seed 0 samples x = 0.64, 0.04, 0.02, 0.91: two of the 4 trials error.
    proc = run_cli("run", spec, "--storage", tmp_path / "runs", env={"RAY_AIR_NEW_OUTPUT": "0", **on_session_ray})
    assert proc.returncode == 1, proc.stderr
    exp = tmp_path / "runs" / "toy"
    summary = json.loads((exp / "summary.json").read_text())
    errored = [e["trial_id"] for e in summary["errors"]]
    assert errored and summary["trials"]["by_status"]["ERROR"] == len(errored)
    for trial_id in errored:
        # The closing line names the trial, its error's last line and its folder, which holds the traceback
        # (error.txt) and the trial's output (stdout, stderr).
        (folder,) = re.findall(rf"^tuner: trial {trial_id} errored: ValueError: x too large: [0-9.]+ \(log: (.+)\)$",
                               proc.stderr, re.M)
        folder = Path(folder)
        assert folder.parent == exp and folder.name.endswith(trial_id)
        assert "ValueError: x too large" in (folder / "error.txt").read_text()
        x = json.loads((folder / "params.json").read_text())["x"]
        assert f"x is {x}\n" in (folder / "stdout").read_text()
        assert f"x on stderr is {x}\n" in (folder / "stderr").read_text()
    assert f"tuner: {len(errored)} of 4 trials errored." in proc.stderr
    # Ray's driver-side log lines (its ERROR for each failed trial, with the traceback) go to tuner.log only.
    log = (exp / "tuner.log").read_text()
    for trial_id in errored:
        assert re.search(rf"\tERROR tune_controller\.py:\d+ -- Trial task failed for trial \w+_{trial_id}\n", log), log
    assert "Trial task failed" not in proc.stdout + proc.stderr and "Traceback" not in proc.stdout + proc.stderr

    reports = console_reports(proc.stdout)
    assert reports and reports[-1]["rows"], proc.stdout[-3000:]
    elapsed = []
    for report in reports:
        assert report["logdir"] == [] and report["folder"] == str(exp), report
        line = ELAPSED.match(report["progress"] or "")
        assert line, (report["progress"], proc.stdout[-3000:])
        elapsed.append(int(line.group(3)))
        if report["best"] is None:
            assert line.group("trial") is None
            continue
        trial_id, metric, shown = report["best"]
        assert (trial_id, metric, shown) == (line.group("trial"), "loss", line.group("value")), report
        rows = report["rows"]
        assert rows[trial_id]["status"] != "ERROR", report
        finished = [float(r["loss"]) for r in rows.values() if r["status"] != "ERROR" and r["loss"]]
        assert float(shown) == pytest.approx(min(finished), rel=1e-5)
    assert elapsed == sorted(elapsed)
    final = reports[-1]
    best = summary["best"]
    assert final["best"][0] == best["trial_id"]
    assert float(final["best"][2]) == pytest.approx(best["metrics"]["loss"], rel=1e-5)
    assert ELAPSED.match(final["progress"]).group(1, 2) == ("4", str(len(errored)))
    errored_values = [float(r["loss"]) for r in final["rows"].values() if r["status"] == "ERROR"]
    assert min(errored_values) < best["metrics"]["loss"], "an errored trial had a better last value (Ray's pick)"


@pytest.fixture(scope="module")
def file_path_run(ray_local, tmp_path_factory):
    """One in-process run (tune_model) of TOY with `mytrain.py:train`, a file beside the spec, shared by the
    two tests below. The slow one resumes the experiment, so the fast one looks only at the returned result
    and the spec file. Returns ``(result, spec)``."""
    from tuner import tune_model

    tmp = tmp_path_factory.mktemp("file_path")
    (tmp / "mytrain.py").write_text(
        "from tuner import trial\n\ndef train(config):\n    trial.report({'loss': config['x']})\n")
    spec = tmp / "toy.yaml"
    spec.write_text(TOY.replace("tests.trainables:quadratic", "mytrain.py:train"))
    return tune_model(spec, storage=str(tmp / "runs"), reporting={"cli": False}), spec


def test_file_path_trainable_runs_and_the_console_script_validates(file_path_run):
    """`path/to/file.py:function`, relative to the spec's folder, runs (the fast subset's share of the
    slow test below); the `tuner` console script is installed and reads the spec."""
    result, spec = file_path_run
    assert len(result.dataframe) == 4 and set(result.dataframe["status"]) == {"TERMINATED"}
    assert result.best_metrics["loss"] == pytest.approx(result.best_config["x"])
    exe = shutil.which("tuner", path=str(Path(sys.executable).parent))
    assert exe, "the tuner console script is installed"
    import subprocess

    proc = subprocess.run([exe, "validate", str(spec), "--num-cpus", "2"], cwd=spec.parent.parent,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"spec:       {spec} is valid" in proc.stdout and "trials:     4 (4 samples)" in proc.stdout


@pytest.mark.slow
def test_file_path_trainable_and_console_script(file_path_run):
    """`path/to/file.py:function` works, relative to the spec's folder, through the `tuner` script:
    the run of file_path_run (in-process; that part is not what this test is about) resumed by
    `tuner resume` with more trials, which ships the file's module to the new trials' workers."""
    first, spec = file_path_run
    assert first.summary["trials"]["by_status"] == {"TERMINATED": 4}
    exe = shutil.which("tuner", path=str(Path(sys.executable).parent))
    assert exe, "the tuner console script is installed"
    import subprocess

    # Resumed with more trials (a spec beside the first asks for 6; the first stays as the fast test reads it),
    # through the console script from another folder: the new trials' workers get the file's module too.
    more = spec.with_name("toy6.yaml")
    more.write_text(spec.read_text().replace("num_samples: 4", "num_samples: 6"))
    exp = spec.parent / "runs" / "toy"
    proc = subprocess.run([exe, "resume", str(exp), "--spec", str(more), "--num-cpus", "2"],
                          cwd=spec.parent.parent, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Best trial" in proc.stdout
    import pandas as pd

    df = pd.read_csv(exp / "results.csv")
    assert len(df) == 6 and set(df["status"]) == {"TERMINATED"}


def test_ctrl_c_exits_130_with_partial_results(tmp_path, run_cli, make_spec):
    """SIGINT (Ctrl-C) stops the run cleanly: exit 130, the results so far are written; `tuner list`
    says interrupted."""
    import os
    import signal
    import subprocess
    import time

    spec = make_spec(TOY.replace("tests.trainables:quadratic", "tests.trainables:slow")
                     .replace("epochs: 3", "epochs: 200").replace("max_t: 3", "max_t: 200"), file="toy.yaml")
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(spec), "--num-cpus", "2",
                             "--storage", str(tmp_path / "runs")], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    from tuner.adapters.state import read_state

    exp = tmp_path / "runs" / "toy"

    def going() -> bool:  # a trial has reported, and Ray's saved state holds all 4 trials
        state = read_state(exp) if list(exp.glob("*/progress.csv")) else None
        return state is not None and len(state.trials) == 4

    deadline = time.monotonic() + 600  # generous: the gate is the run's own files, not a time
    while not going():
        assert proc.poll() is None and time.monotonic() < deadline, "the run did not get going"
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert f"tuner: interrupted; the state is saved. Resume with:\n  tuner resume {exp}\n" in err
    summary = json.loads((exp / "summary.json").read_text())
    assert summary["trials"]["total"] == 4
    assert summary["interrupted"] is True
    import pandas as pd

    assert (pd.read_csv(exp / "results.csv")["training_iteration"].fillna(0) < 200).all(), "stopped early"
    listed = run_cli("list", tmp_path / "runs")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[:3] == ["toy", "interrupted", "4"]


def test_first_trial_error_aborts_with_traceback(tmp_path, run_cli, make_spec, on_session_ray):
    """A bug that fails the first trial before any result stops the run, instead of burning the budget."""
    spec = make_spec(TOY.replace("tests.trainables:quadratic", "tests.trainables:typo")
                     .replace("num_samples: 4", "num_samples: 20"), file="toy.yaml")
    proc = run_cli("run", spec, "--storage", tmp_path / "runs", env=on_session_ray)
    assert proc.returncode == 1
    assert "failed before any trial reported a result, so the experiment stopped" in proc.stderr
    assert "Traceback" in proc.stderr and "KeyError: 'learning_rate'" in proc.stderr
    assert 'return config["learning_rate"]  # the spec calls it lr' in proc.stderr
    summary = json.loads((tmp_path / "runs" / "toy" / "summary.json").read_text())
    assert summary["aborted"]["trial_id"]
    assert summary["trials"]["by_status"].get("TERMINATED", 0) + summary["trials"]["by_status"].get("ERROR", 0) \
        + summary["trials"]["by_status"].get("PENDING", 0) == 20
    assert summary["trials"]["by_status"].get("ERROR", 0) <= 2, "at most the trials already running fail"


def test_first_error_abort_can_be_turned_off(tmp_path, run_cli, make_spec, on_session_ray):
    spec = make_spec(TOY.replace("tests.trainables:quadratic", "tests.trainables:typo")
                     + "failure: {abort_on_first_error: false}\n", file="toy.yaml")
    proc = run_cli("run", spec, "--storage", tmp_path / "runs", env=on_session_ray)
    assert proc.returncode == 1
    summary = json.loads((tmp_path / "runs" / "toy" / "summary.json").read_text())
    assert summary["aborted"] is None and summary["trials"]["by_status"] == {"ERROR": 4}


def test_whole_bad_spec_corpus_exits_2_without_ray(tmp_path):
    """Every malformed spec: exit 2, the golden message (no traceback), nothing on stdout, Ray never imported,
    nothing written.

    One real subprocess calls tuner.cli.main once per spec (main_calls), each call with its own
    stdout/stderr and the process state a call could change restored; `test_bad_spec_corpus_through_the_cli`
    runs a sample of the corpus through `python -m tuner` itself, one process each."""
    paths = sorted((ROOT / "tests" / "bad_specs").glob("*.yaml"))
    assert len(paths) > 100
    # --storage keeps anything from landing in the repo, except where storage is the fault.
    calls = [(["validate", p.relative_to(ROOT).as_posix(), *([] if "storage:" in p.read_text(errors="replace")
                                                             else ["--storage", str(tmp_path / "runs")])],
              tmp_path / "runs") for p in paths]
    for path, r in zip(paths, main_calls(calls, tmp_path / "corpus.json")):
        rel = r["argv"][1]
        assert r["code"] == 2, (rel, r["code"], r["stderr"])
        assert r["stderr"] == "tuner: error: " + path.with_suffix(".err").read_text(), rel
        assert r["stdout"] == "", rel
        assert not r["ray"], f"{rel}: Ray imported"
        assert not r["written"], f"{rel}: wrote {tmp_path / 'runs'}"
    assert not (tmp_path / "runs").exists()


def test_secrets_in_the_environment_never_reach_files_or_console(toy_run):
    """The secret in WANDB_API_KEY and MY_TOKEN of the run's environment (toy_run) is in no file of the
    experiment and not on the console."""
    proc, exp = toy_run
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout and SECRET not in proc.stderr
    checked = 0
    for path in exp.rglob("*"):  # rglob does not follow the ray_logs link into Ray's own session logs
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
            checked += 1
    assert checked > 10, "the experiment's files were read"


def _limit_memory_to_1_5_gb():
    """preexec_fn: an address-space limit, so that an alias expansion fails instead of swapping."""
    import resource

    limit = 1536 * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


_LAUGHS = "[" + ", ".join(f"&l{i} [{', '.join([f'*l{i - 1}' if i else 'lol'] * 9)}]" for i in range(9)) + "]"
HOSTILE = [  # (what, spec, extra arguments, the error's first words after "tuner: error: ")
    ("billion-laughs", "tests/bad_specs/alias_billion_laughs.yaml", [], None),
    ("64-nested-lists", "tests/bad_specs/nesting_64_lists.yaml", [], None),
    ("yes-as-a-number", "tests/bad_specs/num_samples_yes.yaml", [], None),
    ("laughs-in-a-set", "search_spaces/mnist_asha.yaml", ["--set", f"param_space.x={_LAUGHS}"],
     "--set param_space.x=[&l0 [lol, "),
]


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("what,spec,extra,head", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_specs_exit_2_with_one_paragraph_in_bounded_memory(tmp_path, command, what, spec, extra, head, run_cli):
    """A billion laughs, deep nesting, a YAML boolean for a number: exit 2 under a 1.5 GB address-space limit,
    the golden paragraph on stderr, nothing on stdout, nothing written (the timeout only guards against a hang)."""
    proc = run_cli(command, spec, "--storage", tmp_path / "runs", *extra, timeout=60,
                   preexec_fn=_limit_memory_to_1_5_gb)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    if head is None:
        assert proc.stderr == "tuner: error: " + (ROOT / spec).with_suffix(".err").read_text()
    else:
        assert proc.stderr.startswith("tuner: error: " + head)
        assert "the alias *l4 expands the spec to more than 100,000 YAML nodes" in proc.stderr
    assert not (tmp_path / "runs").exists(), "nothing is written for bad input"


def test_set_errors_come_from_the_command_line(tmp_path, run_cli, make_spec):
    spec = make_spec(TOY, file="toy.yaml")
    typo = run_cli("validate", spec, "--set", "param_space.xx.low=0.5", timeout=60)
    assert typo.returncode == 2 and typo.stderr == (
        "tuner: error: --set param_space.xx.low=0.5: param_space.xx: param_space has no key 'xx'; did you mean 'x'? "
        "A --set path may end in a new key, but not create a mapping on the way; the keys in param_space: epochs, opt, "
        "x.\n")
    bad = run_cli("run", spec, "--set", "scheduler.max_t=0", "--storage", tmp_path / "runs", timeout=60)
    assert bad.returncode == 2 and bad.stderr == (
        "tuner: error: --set scheduler.max_t=0: scheduler.max_t: must be greater than or equal to 1, but got 0 (int).\n")
    assert not (tmp_path / "runs").exists()
    # --name and --num-samples are checked as the spec's fields are, and the error names the flag.
    for args, error in ((["--num-samples", "0"], "--num-samples 0: num_samples: must be greater than or equal to 1, "
                                                   "but got 0 (int)."),
                        (["--name", "a/b"], "--name a/b: name: name may hold only letters, digits, '.', '_' and '-' "
                                            "(no '/', not '..'), but got 'a/b'.")):
        flag = run_cli("run", spec, *args, "--storage", tmp_path / "runs", timeout=60)
        assert (flag.returncode, flag.stdout, flag.stderr) == (2, "", f"tuner: error: {error}\n"), args
    assert not (tmp_path / "runs").exists()
    ok = run_cli("validate", spec, "--num-cpus", "2", "--set", "param_space.data_dir=/data", "--set", "resources.gpu=0",
                 "--set", "stop.loss=0.5", timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "budget:     stop loss <= 0.5" in ok.stdout  # the spec's metric under mode: min stops at <=
