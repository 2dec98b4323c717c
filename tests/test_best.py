"""One best-trial rule (tuner.core.best) for summary.json, results.csv, `tuner report` and the console:
errored trials and trials without a finite value are never the best and sort after every trial
with a result; `tuner list` names finished-with-errors and aborted experiments."""

import json
import math
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tests.fixtures.paths import ROOT, doc_text, readme_and_docs
from tuner import tune_model
from tuner.core.best import best, has_result, ranked
from tuner.errors import TunerError
from tuner.report import load_experiment, render

# One xdist worker runs this file: its module-scoped fixture is built once (pyproject's --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_best")

TRIALS = [  # (trial_id, status, last value)
    ("a_00004", "TERMINATED", 0.30),
    ("a_00001", "ERROR", 0.01),  # the best value, but it errored
    ("a_00002", "RUNNING", 0.20),
    ("a_00003", "TERMINATED", math.nan),
    ("a_00000", "TERMINATED", 0.20),  # ties with a_00002: the smaller id wins
    ("a_00005", "TERMINATED", math.inf),
    ("a_00006", "PENDING", None),
    ("a_00007", "TERMINATED", True),  # a bool is not a metric value
    ("a_00008", "TERMINATED", np.float32(0.25)),
]


def pick(rows, mode):
    return best(rows, mode, value=lambda r: r[2], status=lambda r: r[1], trial_id=lambda r: r[0])


def test_the_rule_skips_errors_and_non_finite_values_and_breaks_ties_by_id():
    order = ranked(TRIALS, "min", value=lambda r: r[2], status=lambda r: r[1], trial_id=lambda r: r[0])
    assert [r[0] for r in order] == ["a_00000", "a_00002", "a_00008", "a_00004",
                                     "a_00001", "a_00003", "a_00005", "a_00006", "a_00007"]
    assert pick(TRIALS, "min")[0] == "a_00000"
    assert pick(TRIALS, "max")[0] == "a_00004"
    assert pick([r for r in TRIALS if not has_result(r[2], r[1])], "max") is None
    assert pick([], "min") is None


#: Modules that import no Ray: the pure rules (the best trial, the experiment folder's names, Ray's
#: experiment state, parameter names, rungs) and `tuner report`, which reads experiment folders with them.
RAY_FREE = ("core.best", "experiment.layout", "adapters.state", "core.params", "search.rungs", "experiment.files",
            "experiment.storage", "spec", "report")


def readme_layout() -> dict[str, str]:
    """The "Layout" table of docs/architecture.md (once the README's): path -> what."""
    text = doc_text("architecture.md").split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    return {row.split("`")[1]: row.split(" | ", 1)[1] for row in rows}


def test_the_readmes_layout_lists_every_module_and_each_path_exists():
    """docs/architecture.md "Layout": every path it lists exists, and every module of tuner/ (each file, in a
    package or not, but ``__init__.py`` and ``__main__.py``) and each package folder is listed."""
    layout = readme_layout()
    assert [path for path in layout if not (ROOT / path).exists()] == []
    tuner = ROOT / "tuner"
    modules = {p.relative_to(ROOT).as_posix() for p in tuner.rglob("*.py")
               if p.name not in ("__init__.py", "__main__.py") and "__pycache__" not in p.parts}
    modules |= {f"{p.relative_to(ROOT).as_posix()}/" for p in tuner.rglob("*") if (p / "__init__.py").is_file()}
    assert sorted(modules - set(layout)) == []


#: The repository's top folders: a path the README names in backticks under one of them is a file or folder here
#: (not one of an experiment's folder, such as `pbt_clones/`).
TOP_FOLDERS = ("benchmarks", "docker", "docs", "examples", "schema", "search_spaces", "tests", "tuner")


def test_every_repository_path_and_benchmarks_section_the_readme_names_exists():
    """README.md and every docs page, throughout: every repository path they name in backticks exists
    (`examples/_common.py:load_checkpoint` the file and a function or class of that name in it), and every
    section of docs/benchmarks.md they quote (`docs/benchmarks.md`, "Per-trial start-up cost") is the start of a
    heading there."""
    text = "\n".join(readme_and_docs().values())
    named = {m for m in re.findall(r"`([\w./-]+(?::\w+)?)`", text) if m.split("/", 1)[0] in TOP_FOLDERS and "/" in m}
    assert len(named) > 50, "the pages' paths are found"
    assert sorted(p for p in named if not (ROOT / p.split(":")[0]).exists()) == []
    for path, name in (p.split(":") for p in sorted(named) if ":" in p):
        assert re.search(rf"^(def|class) {name}\b", (ROOT / path).read_text(), re.M), f"{path}:{name}"
    quoted = re.findall(r'`docs/benchmarks\.md`, "([^"]+)"', " ".join(text.split()))
    assert len(quoted) >= 4, "the pages' quoted sections are found"
    headings = [line.lstrip("#").strip() for line in (ROOT / "docs" / "benchmarks.md").read_text().splitlines()
                if line.startswith("#")]
    assert [title for title in quoted if not any(h.startswith(title) for h in headings)] == []


def test_the_rule_is_written_once_and_report_stays_ray_free():
    """run/results.py, report/ and run/console.py import tuner.core.best; the modules of RAY_FREE import no Ray."""
    # docs/architecture.md's Layout names these as importing no Ray too.
    named = tuple(path.removeprefix("tuner/").removesuffix("/").removesuffix(".py").replace("/", ".")
                  for path, what in readme_layout().items() if path.startswith("tuner/") and "no Ray" in what)
    assert {"spec.conditions", "search.seeds", "experiment.export", "search.schedule", "search.forecast",
            "search.pareto"} <= set(named)
    code = ("import importlib, sys\n"
            f"for name in {RAY_FREE + named!r}:\n"
            "    importlib.import_module('tuner.' + name)\n"
            "    if any(m == 'ray' or m.startswith('ray.') for m in sys.modules):\n"
            "        print(name)\n"
            "        break\n"
            "else:\n"
            "    print('none')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "none", f"tuner.{out.stdout.strip()} imports Ray"
    for module in ("run/results", "report", "run/console"):
        package = ROOT / "tuner" / module  # tuner/report/ is a package: its modules together
        files = sorted(package.rglob("*.py")) if package.is_dir() else [package.with_suffix(".py")]
        assert "from tuner.core.best import" in "".join(f.read_text() for f in files), module


def base(storage, name, **kw):
    return {"name": name, "trainable": "tests.trainables:fails_for_large_x", "metric": "loss", "mode": "min",
            "num_samples": 8, "seed": 0, "param_space": {"x": {"type": "uniform", "low": 0, "high": 1}},
            "resources": {"cpu": 1}, "reporting": {"cli": False, "tensorboard": False}, "storage": str(storage),
            **kw}


#: The errored experiment's x values, in trial order: errored (x > 0.5) and finished trials interleaved.
ERRORED_X = [0.7, 0.2, 0.9, 0.4, 0.6]


@pytest.fixture(scope="module")
def errored(ray_local, tmp_path_factory):
    """Trials with x > 0.5 report loss x (in (0.5, 1]) once and error; the others end at x + 2 (>= 2).
    A grid of the x of ERRORED_X: 3 errored trials (each costs a trial process), 2 finished."""
    storage = tmp_path_factory.mktemp("best") / "runs"
    result = tune_model(base(storage, "errored", num_samples=1,
                             param_space={"x": {"type": "grid", "values": ERRORED_X}}))
    return storage, result


def test_errored_trials_sort_after_every_trial_with_a_result(errored):
    storage, result = errored
    exp = storage / "errored"
    frame = result.dataframe
    failed = frame["status"] == "ERROR"
    assert sorted(frame.loc[failed, "config/x"]) == sorted(x for x in ERRORED_X if x > 0.5)
    assert sorted(frame.loc[~failed, "config/x"]) == sorted(x for x in ERRORED_X if x <= 0.5)
    assert frame.loc[failed, "loss"].max() < frame.loc[~failed, "loss"].min(), \
        "the errored trials' last values are the better ones (the case the rule is for)"
    csv = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    for table in (frame, csv):
        n = int((~failed).sum())
        assert (table["status"].iloc[:n] != "ERROR").all() and (table["status"].iloc[n:] == "ERROR").all()
        assert table["loss"].iloc[:n].is_monotonic_increasing
        assert table["trial_id"].iloc[0] == result.best_trial_id
    assert list(csv["trial_id"]) == list(frame["trial_id"])
    summary = json.loads((exp / "summary.json").read_text())
    assert summary["best"]["trial_id"] == result.best_trial_id
    assert summary["best"]["metrics"]["loss"] == frame.loc[~failed, "loss"].min()

    report = load_experiment(exp)
    assert list(report.trials["trial_id"]) == list(csv["trial_id"]), "tuner report lists them in the same order"
    assert report.best_trial == result.best_trial_id
    lines = render(report).splitlines()
    header = next(i for i, line in enumerate(lines) if "trial_id" in line)
    rows = [line.split() for line in lines[header + 1:]]
    assert rows[0][:2] == ["*", result.best_trial_id]
    assert [r[0] for r in rows[1:]] == list(csv["trial_id"].iloc[1:])
    assert [r[1] for r in rows[1:]] == list(csv["status"].iloc[1:])


def test_list_names_finished_with_errors_and_aborted(errored, run_cli):
    """`tuner list`: an experiment whose trials errored, and one stopped by the first trial's bug."""
    storage, result = errored
    try:
        aborted = tune_model(base(storage, "aborted", trainable="tests.trainables:typo", max_concurrent_trials=1))
    except TunerError as err:  # tune_model may raise for the first-trial abort; the files are written
        aborted = getattr(err, "result", None)
    assert json.loads((storage / "aborted" / "summary.json").read_text())["aborted"], aborted
    proc = run_cli("list", storage)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()[1:]}
    errors = result.num_errors
    assert rows["errored"].split()[1:5] == ["finished", "with", "errors", str(len(ERRORED_X))]
    assert f"{len(ERRORED_X)} ({errors} errored)" in rows["errored"]
    assert f"loss={result.best_metrics['loss']:.6g}" in rows["errored"]
    assert rows["aborted"].split()[1] == "aborted", rows["aborted"]


def test_best_config_is_none_without_a_metric(tmp_path):
    """README: `TuneResult.best_config` is "the best trial's config ... (None without a metric or a finished
    trial)": the same finished trials give a best config with a metric, and none without one."""
    from ray.tune import Result

    from tuner.run.results import collect_results
    from tuner.spec import load_spec

    def trials(folder):  # Ray's own Result of each of two finished trials, as Tuner.fit() gives them
        return [Result(metrics={"loss": loss, "trial_id": f"a_0000{i}", "training_iteration": 2,
                                "config": {"x": 0.5 + i}},
                       checkpoint=None, error=None, path=str(folder / f"t_a_0000{i}"), metrics_dataframe=None)
                for i, loss in enumerate([0.3, 0.1])]

    base = {"name": "b", "trainable": "tests.trainables:quadratic", "param_space": {"x": 0.5},
            "reporting": {"cli": False, "tensorboard": False}}
    ranked = collect_results(load_spec({**base, "metric": "loss", "mode": "min"}), trials(tmp_path / "m"),
                             tmp_path / "m", 1.0)
    assert ranked.best_config == {"x": 1.5} and ranked.best_trial_id == "a_00001"  # the check can tell
    plain = collect_results(load_spec(base), trials(tmp_path / "n"), tmp_path / "n", 1.0)
    assert plain.best_config is None and plain.best_trial_id is None and plain.summary["best"] is None
    assert not (tmp_path / "n" / "best_config.yaml").exists()
