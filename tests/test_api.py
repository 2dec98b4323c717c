"""The Python API as a user meets it: tune_model never fails silently, runs again and again,
and works inside the user's own Ray session."""

import logging
import subprocess
import sys
import textwrap

import pytest

from tests.fixtures.paths import ROOT
from tuner import tune_model
from tuner.errors import TrialError
from tuner.spec import SpecError


# The specs of this file: make_spec(API, **overrides), stored in the test's tmp_path.
API = {"name": "api", "trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min",
       "num_samples": 2, "seed": 0, "param_space": {"x": {"type": "uniform", "low": 0, "high": 1}, "epochs": 2},
       "reporting": {"cli": False, "tensorboard": False}}


def test_first_trial_bug_raises_trial_error_with_the_traceback(ray_local, tmp_path, make_spec):
    """Where `tuner run` exits 1 with the user's traceback, tune_model raises TrialError, the
    trial's own error chained, and the experiment's files are written."""
    with pytest.raises(TrialError) as info:
        tune_model(make_spec(API, trainable="tests.trainables:typo", num_samples=3, max_concurrent_trials=1))
    err = info.value
    assert "the first trial" in str(err) and "KeyError: 'learning_rate'" in str(err)
    assert 'return config["learning_rate"]' in err.traceback, err.traceback
    assert err.__cause__ is not None and "learning_rate" in str(err.__cause__)
    assert err.result.aborted["trial_id"] == err.trial_id
    assert (tmp_path / "api" / "summary.json").is_file() and err.path.startswith(str(tmp_path / "api"))


def test_errored_trials_are_in_the_result_and_the_warning_names_each(ray_local, make_spec):
    """README: "When some trials errored and the others went on, it returns the result with `errors` filled and
    logs one warning naming them (logger `tuner`)": each errored trial's id, the last line of its error, its folder."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logging.getLogger("tuner").addHandler(handler)
    try:
        # Seed 0 samples x = 0.64, 0.27, 0.04, 0.02: the first trial errors, the others do not.
        result = tune_model(make_spec(API, trainable="tests.trainables:fails_for_large_x", num_samples=4))
    finally:
        logging.getLogger("tuner").removeHandler(handler)
    errored = result.dataframe.loc[result.dataframe["status"] == "ERROR", "trial_id"]
    assert result.num_errors == len(errored) == len(result.errors) > 0
    assert {e["trial_id"] for e in result.errors} == set(errored)
    assert all("ValueError: x too large" in e["error"] for e in result.errors)
    assert len(records) == 1 and f"{result.num_errors} of 4 trials errored" in records[0].getMessage()
    named = records[0].getMessage().split(": ", 1)[1].split("; ")
    assert named == [f"{e['trial_id']}: {e['error']} ({e['path']})" for e in result.errors]
    assert sorted(n.split(":")[0] for n in named) == sorted(errored)
    assert result.best_config["x"] <= 0.5


def test_a_second_run_gets_a_fresh_folder_and_an_explicit_name_is_refused(ray_local, tmp_path, make_spec):
    """As Ray Tune does, a run whose experiment folder exists goes to a fresh one (name-2, -3);
    a name given explicitly (--name, tune_model(name=...)) that exists is refused."""
    first, second, third = (tune_model(make_spec(API, num_samples=1)) for _ in range(3))
    assert [r.experiment_path for r in (first, second, third)] == \
        [str(tmp_path / n) for n in ("api", "api-2", "api-3")]
    assert third.summary["name"] == "api-3"
    with pytest.raises(SpecError, match=r"name: the experiment folder .*/api already exists; choose another name "
                                        r"\(--name NAME\), remove that folder, or continue it with `tuner resume "):
        tune_model(make_spec(API), name="api")


def test_validate_notes_the_fresh_folder_and_run_refuses_an_existing_name(tmp_path, run_cli):
    """`tuner validate` tells where a run would go when the folder exists (a note, not an error);
    `tuner run --name` of an existing folder exits 2."""
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text("name: again\ntrainable: tests.trainables:quadratic\n")
    (tmp_path / "runs" / "again").mkdir(parents=True)
    (tmp_path / "runs" / "again" / "spec.yaml").write_text("x")
    proc = run_cli("validate", spec_file, "--storage", tmp_path / "runs", "--num-cpus", "2")
    assert proc.returncode == 0, proc.stderr
    assert f"note:       {tmp_path / 'runs' / 'again'} holds an experiment already, so this run goes to again-2" \
        in proc.stdout
    refused = run_cli("run", spec_file, "--storage", tmp_path / "runs", "--name", "again", "--num-cpus", "2")
    assert refused.returncode == 2 and "already exists" in refused.stderr and "Traceback" not in refused.stderr
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["again"], "nothing else was written"


def test_shipped_specs_validate_from_another_folder(tmp_path, run_cli):
    """A spec's trainable is found relative to the spec file, not only the working directory."""
    for rel in ("search_spaces/mnist_grid.yaml", "search_spaces/cifar_tutorial.yaml"):
        proc = run_cli("validate", ROOT / rel, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "is valid" in proc.stdout
    # README: resnet_gpu.yaml (gpu: auto) needs a GPU; without one it is refused, unless its trials go to the CPU.
    resnet = ROOT / "search_spaces" / "resnet_gpu.yaml"
    refused = run_cli("validate", resnet, "--num-gpus", "0", cwd=tmp_path)
    assert (refused.returncode, refused.stdout, refused.stderr) == (2, "", (
        f"tuner: error: {resnet}:29:26: resources.gpu: gpu: auto packs trials onto GPUs, but this machine "
        "(--num-cpus/--num-gpus) has 0 GPUs (no node has a whole one); run where there is a GPU (or give Ray logical "
        "GPUs with --num-gpus), or set gpu to a number (0 for CPU trials).\n"))
    on_cpu = run_cli("validate", resnet, "--num-gpus", "0", "--set", "resources.gpu=0", cwd=tmp_path)
    assert on_cpu.returncode == 0 and "is valid" in on_cpu.stdout, on_cpu.stderr


USER_SESSION = """
import sys
sys.path.insert(0, {pkg!r})             # the user's package is on this process's path only
import ray
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
from ray import tune
from tuner import tune_model
from mypkg.train import train, Model

common = dict(metric="loss", mode="min", num_samples=1, seed=0, storage={runs!r},
              param_space={{"x": {{"type": "uniform", "low": 0, "high": 1}}}},
              stop={{"training_iteration": 2}}, reporting={{"cli": False, "tensorboard": False}})
by_name = tune_model(dict(common, name="by-name", trainable="mypkg.train:train"))
by_fn = tune_model(dict(common, name="by-fn"), trainable=tune.with_parameters(train, offset=10.0))
by_class = tune_model(dict(common, name="by-class"), trainable=Model)
for r in (by_name, by_fn, by_class):
    print(r.summary["trials"]["by_status"], r.best_metrics["loss"])
assert ray.is_initialized(), "the user's Ray is left running"
"""

PACKAGE = '''
from ray import tune

from mypkg.helpers import loss_of


def train(config, offset=0.0):
    for _ in range(2):
        tune.report({"loss": loss_of(config["x"]) + offset})


class Model(tune.Trainable):
    def setup(self, config):
        self.x = config["x"]

    def step(self):
        return {"loss": loss_of(self.x)}
'''


def test_inside_the_users_own_ray_session_with_a_package_only_it_can_import(tmp_path):
    """After the user's own ray.init(), trainables from a package on the driver's sys.path only
    (by spec name, as a with_parameters function, as a class) run: the workers could not import
    the package by name, so tuner pickles it by value."""
    pkg = tmp_path / "src" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("def loss_of(x):\n    return (x - 0.3) ** 2\n")
    (pkg / "train.py").write_text(PACKAGE)
    script = USER_SESSION.format(pkg=str(tmp_path / "src"), runs=str(tmp_path / "runs"))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()[-3:]
    assert all(line.startswith("{'TERMINATED': 1}") for line in lines), proc.stdout
    assert float(lines[1].split()[-1]) >= 10.0, "with_parameters passed offset=10"


def test_a_short_run_prints_its_table_and_the_scheduler_line_once(ray_local, make_spec, capfd):
    """The first table comes one period after the start, not at once with every trial PENDING:
    a run shorter than reporting.cli.max_report_frequency prints one table, at its end. (A period of an
    hour, longer than the run under any load: with 30 s, the run outlasted it once under a load of 4 busy
    processes on 2 cores, and printed two.)"""
    result = tune_model(make_spec(API, num_samples=1,
                                  reporting={"cli": {"max_report_frequency": 3600}, "tensorboard": False}))
    out = capfd.readouterr().out
    assert out.count("== Status ==") == 1, out
    assert out.count("Using FIFO scheduling algorithm.") == 1, out
    assert "1 TERMINATED" in out and f"Experiment folder: {result.experiment_path}" in out


def test_the_readmes_tune_model_signature_is_the_codes():
    """docs/getting-started.md ("From Python", once the README's) gives tune_model's signature: the same parameters,
    defaults and order as the code."""
    import inspect

    parts = []
    for p in inspect.signature(tune_model).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        else:
            parts += ["*"] if p.kind is p.KEYWORD_ONLY and "*" not in parts else []
            parts.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    assert f"`tune_model({', '.join(parts)})`:" in (ROOT / "docs" / "getting-started.md").read_text()
