"""``tuner convert``: W&B sweep configurations and Katib Experiments as tuner specs.

Each input of ``tests/data/convert/`` (written in its tool's documented format) is converted by the real
command line, and the spec it prints and the notes on stderr are compared with the golden files of
``tests/golden/convert/`` text for text. Each bad input of ``tests/data/convert/bad/`` exits 2 with the
golden message of ``tests/golden/convert/bad/`` and writes nothing. Each converted spec validates
with ``python -m tuner validate`` (scripts the command names are created beside it).

To regenerate the golden files after an intended change (then read the diff before committing)::

    cd tests/data/convert
    for f in *.yaml; do python -m tuner convert $f > ../../golden/convert/$f 2> ../../golden/convert/${f%.yaml}.notes; done
    for f in bad/*.yaml; do python -m tuner convert $f 2> ../../golden/convert/${f%.yaml}.txt; done
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fixtures.paths import ROOT

DATA = ROOT / "tests" / "data" / "convert"
GOLDEN = ROOT / "tests" / "golden" / "convert"
SOURCES = sorted(p.name for p in DATA.glob("*.yaml"))
BAD = sorted(p.name for p in (DATA / "bad").glob("*.yaml"))
#: The scripts each converted command names (created beside the spec for `tuner validate`).
SCRIPTS = {"wandb_random_hyperband.yaml": ["train.py"], "wandb_grid.yaml": ["train.py"],
           "wandb_bayes_nested.yaml": ["scripts/train.py"], "katib_random_medianstop.yaml": ["mnist.py"],
           "katib_tpe_file.yaml": ["mnist.py"]}


def tuner(*args: str, cwd: Path = DATA) -> subprocess.CompletedProcess:
    """``python -m tuner ARGS`` in ``cwd``, with the repository importable."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUNER_DEBUG": ""}
    return subprocess.run([sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


def test_every_source_has_its_golden_files_and_scripts():
    assert len(SOURCES) >= 5 and len(BAD) >= 8
    assert set(SCRIPTS) == set(SOURCES)
    for name in SOURCES:
        assert (GOLDEN / name).is_file() and (GOLDEN / name.replace(".yaml", ".notes")).is_file(), name
    for name in BAD:
        assert (GOLDEN / "bad" / name.replace(".yaml", ".txt")).is_file(), name


@pytest.mark.parametrize("name", SOURCES)
def test_conversion_matches_the_golden_spec_and_notes(name):
    out = tuner("convert", name)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (GOLDEN / name).read_text()
    assert out.stderr == (GOLDEN / name.replace(".yaml", ".notes")).read_text()
    # Every note is both a comment of the spec and a line of stderr.
    notes = [line for line in out.stderr.splitlines() if line.startswith("tuner convert: note: ")]
    assert notes and len(notes) == out.stderr.count("\n")


@pytest.mark.parametrize("name", SOURCES)
def test_the_converted_spec_validates(name, tmp_path):
    """`tuner validate` takes the spec written beside a copy of its source (the scripts it names exist there)."""
    shutil.copy(DATA / name, tmp_path / name)
    for script in SCRIPTS[name]:
        (tmp_path / script).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / script).write_text("print('a stand-in: tuner validate only checks that the script exists')\n")
    made = tuner("convert", name, "-o", "spec.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert made.stderr.endswith(f"Spec: spec.yaml ({made.stderr.count('tuner convert: note:')} notes)\n")
    assert (tmp_path / "spec.yaml").read_text() == (GOLDEN / name).read_text()
    checked = tuner("validate", "spec.yaml", "--num-cpus", "8", "--num-gpus", "0", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]


@pytest.mark.parametrize("name", BAD)
def test_bad_input_exits_2_with_the_golden_message_and_writes_nothing(name, tmp_path):
    out = tuner("convert", f"bad/{name}", "-o", str(tmp_path / "spec.yaml"))
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == ""
    assert out.stderr == (GOLDEN / "bad" / name.replace(".yaml", ".txt")).read_text()
    assert not (tmp_path / "spec.yaml").exists()
    assert "Traceback" not in out.stderr


def test_bad_input_names_file_line_col_and_the_key_path():
    """The golden messages point at the source's key (file:line:col: the.key.path: ...)."""
    expected = {
        "wandb_log_normal.txt": "bad/wandb_log_normal.yaml:6:5: parameters.lr.distribution: log_normal has no tuner",
        "wandb_missing_max.txt": "bad/wandb_missing_max.yaml:4:3: parameters.dropout.max: is missing",
        "katib_enas.txt": "bad/katib_enas.yaml:10:5: spec.algorithm.algorithmName: algorithm 'enas'",
        "neither.txt": "bad/neither.yaml:2:1: the file is neither a W&B sweep configuration",
    }
    for golden, start in expected.items():
        assert (GOLDEN / "bad" / golden).read_text().startswith(f"tuner: error: {start}"), golden
    assert "allowed: random, grid, tpe" in (GOLDEN / "bad" / "katib_enas.txt").read_text()


def test_an_existing_output_is_kept_unless_force(tmp_path):
    out = tmp_path / "spec.yaml"
    out.write_text("# mine\n")
    refused = tuner("convert", "wandb_grid.yaml", "-o", str(out))
    assert refused.returncode == 2
    assert "the file exists; tuner convert does not overwrite it (give --force" in refused.stderr
    assert out.read_text() == "# mine\n"
    forced = tuner("convert", "wandb_grid.yaml", "-o", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert out.read_text().startswith("# Converted by `tuner convert` from wandb_grid.yaml")


def test_trainable_replaces_the_command_and_the_spec_validates(tmp_path):
    out = tmp_path / "spec.yaml"
    made = tuner("convert", "wandb_random_hyperband.yaml", "--trainable", "examples.mnist:train", "-o", str(out))
    assert made.returncode == 0, made.stderr
    spec = yaml.safe_load(out.read_text())
    assert spec["trainable"] == "examples.mnist:train"
    assert "program: dropped: --trainable examples.mnist:train is the trial instead." in made.stderr
    checked = tuner("validate", str(out), "--num-cpus", "8", "--num-gpus", "0", cwd=ROOT)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]


def test_a_trainable_that_is_no_reference_exits_2_naming_the_option(tmp_path):
    out = tuner("convert", "wandb_grid.yaml", "--trainable", "train.py", "-o", str(tmp_path / "spec.yaml"))
    assert out.returncode == 2
    assert out.stderr.startswith("tuner: error: --trainable train.py: trainable must be 'package.module:function'")
    assert not (tmp_path / "spec.yaml").exists()


def test_the_text_reads_back_as_the_spec_and_every_note_is_a_comment():
    from tuner.convert import convert

    for name in SOURCES:
        converted = convert(DATA / name)
        assert yaml.safe_load(converted.text) == converted.spec, name
        comments = " ".join(line.strip().lstrip("#").strip() for line in converted.text.splitlines()
                            if line.lstrip().startswith("#"))
        for note in converted.notes:
            assert " ".join(note.text().split()) in comments, (name, note.text())


def test_convert_takes_text_and_sets_cwd_for_an_output_elsewhere(tmp_path):
    from tuner.convert import ConvertError, convert

    text = "program: train.py\nmethod: grid\nparameters:\n  lr: {values: [0.1, 0.01]}\n"
    converted = convert(text)
    assert converted.format == "wandb"
    assert converted.spec["trainable"] == {"command": ["python", "train.py", "--lr={lr}"], "metrics": "json"}
    assert converted.spec["param_space"] == {"lr": {"type": "choice", "values": [0.1, 0.01]}}
    (tmp_path / "out").mkdir()
    elsewhere = convert(DATA / "wandb_grid.yaml", out_dir=tmp_path / "out")
    assert elsewhere.spec["trainable"]["cwd"] == str(DATA)
    beside = convert(DATA / "wandb_grid.yaml", out_dir=DATA)
    assert "cwd" not in beside.spec["trainable"]
    with pytest.raises(ConvertError, match=r"^<text>:1:1: the file is neither"):
        convert("foo: 1\n")
    with pytest.raises(ConvertError, match="file not found"):
        convert("no/such/sweep.yaml")


@pytest.mark.parametrize(("distribution", "expected"), [
    ("{distribution: log_uniform, min: 0, max: 1}", {"type": "loguniform", "low": 1.0, "high": 2.71828182846}),
    ("{distribution: inv_log_uniform, min: 0, max: 1}",
     {"type": "loguniform", "low": 0.367879441171, "high": 1.0}),
    ("{distribution: q_log_uniform_values, min: 1, max: 100, q: 5}",
     {"type": "qlograndint", "low": 5, "high": 100, "q": 5}),
    ("{distribution: q_uniform, min: 0, max: 1, q: 0.25}", {"type": "quniform", "low": 0, "high": 1.0, "q": 0.25}),
    ("{min: 1, max: 8}", {"type": "randint", "low": 1, "high": 9}),
    ("{distribution: q_normal, mu: 0, sigma: 2, q: 0.5}", {"type": "qrandn", "mean": 0, "sd": 2, "q": 0.5}),
])
def test_wandb_distributions(distribution, expected):
    from tuner.convert import convert

    text = f"program: t.py\nmethod: random\nrun_cap: 3\nparameters:\n  x: {distribution}\n"
    assert convert(text).spec["param_space"]["x"] == expected


@pytest.mark.slow
def test_a_converted_sweep_runs_the_example_script(tmp_path):
    """A W&B sweep of examples/train_script.py (random search, hyperband), converted, runs: 3 trials end
    TERMINATED, the best with the val_accuracy the script printed (about 25 s on 2 CPUs, hence slow)."""
    shutil.copy(ROOT / "examples" / "train_script.py", tmp_path / "train_script.py")
    (tmp_path / "sweep.yaml").write_text(
        "program: train_script.py\nname: script sweep\nmethod: random\nrun_cap: 3\n"
        "metric: {name: val_accuracy, goal: maximize}\n"
        "parameters:\n  lr: {distribution: log_uniform_values, min: 0.01, max: 0.3}\n"
        "  hidden: {values: [32, 64]}\n  epochs: {value: 3}\n"
        "early_terminate: {type: hyperband, min_iter: 1, eta: 3}\n")
    made = tuner("convert", "sweep.yaml", "-o", "spec.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    ran = tuner("run", "spec.yaml", "--storage", str(tmp_path / "runs"), "--num-cpus", "2", "--set", "seed=0",
                cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    summary = yaml.safe_load((tmp_path / "runs" / "script-sweep" / "summary.json").read_text())
    assert summary["trials"]["total"] == 3
    assert set(summary["trials"]["by_status"]) == {"TERMINATED"}
    assert summary["metric"] == "val_accuracy" and summary["mode"] == "max"
    assert 0.0 < summary["best"]["metrics"]["val_accuracy"] <= 1.0
    assert summary["best"]["config"]["hidden"] in (32, 64) and summary["best"]["config"]["epochs"] == 3


KATIB_RUN = """\
apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata: {name: script-katib}
spec:
  objective: {type: maximize, objectiveMetricName: val_accuracy, additionalMetricNames: [val_loss]}
  algorithm: {algorithmName: random}
  parallelTrialCount: 2
  maxTrialCount: 3
  earlyStopping:
    algorithmName: medianstop
    algorithmSettings: [{name: min_trials_required, value: "2"}, {name: start_step, value: "1"}]
  parameters:
    - {name: lr, parameterType: double, feasibleSpace: {min: "0.01", max: "0.3", distribution: logUniform}}
    - {name: hidden, parameterType: categorical, feasibleSpace: {list: ["32", "64"]}}
  metricsCollectorSpec: {collector: {kind: StdOut}}
  trialTemplate:
    primaryContainerName: training
    trialParameters:
      - {name: learningRate, reference: lr}
      - {name: hidden, reference: hidden}
    trialSpec:
      apiVersion: batch/v1
      kind: Job
      spec:
        template:
          spec:
            containers:
              - name: training
                image: docker.io/me/digits:latest
                command: [python3, /opt/train_script.py, "--lr=${trialParameters.learningRate}",
                          "--hidden=${trialParameters.hidden}", --epochs=3, --metrics-format=kv]
            restartPolicy: Never
"""


@pytest.mark.slow
def test_a_converted_katib_experiment_runs_the_example_script(tmp_path):
    """A Katib Experiment (random search, medianstop, the StdOut collector's name=value lines) of
    examples/train_script.py, converted, runs: its image's script becomes the one beside the spec, and 3 trials end
    TERMINATED with the val_accuracy the script printed as kv pairs."""
    shutil.copy(ROOT / "examples" / "train_script.py", tmp_path / "train_script.py")
    (tmp_path / "experiment.yaml").write_text(KATIB_RUN)
    made = tuner("convert", "experiment.yaml", "-o", "spec.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    spec = yaml.safe_load((tmp_path / "spec.yaml").read_text())
    assert spec["trainable"]["metrics"] == "kv" and spec["scheduler"]["type"] == "median"
    ran = tuner("run", "spec.yaml", "--storage", str(tmp_path / "runs"), "--num-cpus", "2", "--set", "seed=0",
                cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    summary = yaml.safe_load((tmp_path / "runs" / "script-katib" / "summary.json").read_text())
    assert summary["trials"]["total"] == 3 and set(summary["trials"]["by_status"]) == {"TERMINATED"}
    assert summary["metric"] == "val_accuracy" and summary["mode"] == "max"
    assert 0.0 < summary["best"]["metrics"]["val_accuracy"] <= 1.0 and "val_loss" in summary["best"]["metrics"]


KATIB_HEAD = ("apiVersion: kubeflow.org/v1beta1\nkind: Experiment\nmetadata: {name: k}\nspec:\n"
              "  objective: {type: minimize, objectiveMetricName: loss}\n  algorithm: {algorithmName: ALGO}\n"
              "  trialTemplate:\n    trialSpec: {spec: {template: {spec: {containers: [{name: c, image: i, "
              "command: [python3, /app/t.py, '--x=${trialParameters.x}']}]}}}}\n"
              "    trialParameters: [{name: x, reference: x}]\n  parameters:\n")


@pytest.mark.parametrize(("algo", "param", "expected"), [
    ("random", "{name: x, parameterType: double, feasibleSpace: {min: '0.15', max: '0.5', step: '0.1'}}",
     {"type": "choice", "values": [0.15, 0.25, 0.35, 0.45]}),
    ("random", "{name: x, parameterType: int, feasibleSpace: {min: '2', max: '10', step: '2'}}",
     {"type": "qrandint", "low": 2, "high": 10, "q": 2}),
    ("random", "{name: x, parameterType: int, feasibleSpace: {min: '1', max: '64', distribution: logUniform}}",
     {"type": "lograndint", "low": 1, "high": 65}),
    ("grid", "{name: x, parameterType: double, feasibleSpace: {min: '0.1', max: '0.3', step: '0.1'}}",
     {"type": "choice", "values": [0.1, 0.2, 0.3]}),
    ("tpe", "{name: x, parameterType: discrete, feasibleSpace: {list: ['1', '2.5']}}",
     {"type": "choice", "values": [1, 2.5]}),
])
def test_katib_parameters(algo, param, expected):
    from tuner.convert import convert

    converted = convert(KATIB_HEAD.replace("ALGO", algo) + f"    - {param}\n")
    assert converted.spec["param_space"]["x"] == expected
    assert converted.spec["trainable"]["command"] == ["python3", "t.py", "--x={x}"]


@pytest.mark.parametrize(("text", "message"), [
    ("program: t.py\nparameters:\n  lr: {values: [1]}\n", "<text>:1:1: method: is missing; it is required"),
    ("program: t.py\nmethod: random\nparameters:\n  'a b': {values: [1]}\n",
     "<text>:4:3: parameters.a b: 'a b' is not a parameter name"),
    ("program: t.py\nmethod: bayes\nparameters:\n  lr: {values: [1]}\n", "<text>:1:1: metric: is missing; method: bayes"),
    ("program: t.py\nmethod: grid\nparameters:\n  lr: {min: 0.1, max: 0.2}\n",
     "<text>:4:3: parameters.lr: method grid enumerates only values"),
    (KATIB_HEAD.replace("ALGO", "grid") + "    - {name: x, parameterType: double, feasibleSpace: {min: '0', max: '1'}}\n",
     "spec.parameters.0.feasibleSpace: has no step; Katib's grid needs one"),
])
def test_convert_errors(text, message):
    from tuner.convert import ConvertError, convert

    with pytest.raises(ConvertError) as err:
        convert(text)
    assert message in str(err.value)
