"""Command trials, the core behaviours: a training script (any program) as the trial.

Fast, without Ray: the placeholder rule (:func:`tuner.spec.command.render_command`), the metrics
lines (:func:`tuner.run.command.parse_line`), the merge rule and the failure text (a
:class:`~tuner.run.command.CommandTrial` called outside Ray, whose reports go to
``tuner.trial.local_reports``), :class:`~tuner.spec.command.CommandTrainable`'s validation, and the
CLI's golden errors (``python -m tuner validate``: exit 2, ``file:line:col``, nothing written).

End to end (real Ray, ``tuner run`` subprocesses started from ``tmp_path``, not the repository): a
Katib-style ``name=value`` script under BOHB, paused and resumed from its checkpoint; ``metrics:
FILE`` with a conditional parameter and ``{tuner.config_file}``; a NaN line, a failing and a hanging
script; no process outliving its trial. The scripts are in tests/data/command_scripts/ (``t1_*``).
"""

import json
import math
import os
import signal
from pathlib import Path

import psutil
import pytest
import yaml

from tests.fixtures.paths import ROOT
from tuner import trial
from tuner.experiment.layout import (COMMAND_CONFIG, COMMAND_STDERR, COMMAND_STDOUT, ERROR_FILE, RESULT_FILE,
                                     SUMMARY)
from tuner.run.command import STDERR_TAIL_LINES, CommandFailedError, CommandTrial, parse_line
from tuner.spec import SpecError, load_spec
from tuner.spec.command import CommandTrainable, render_command

SCRIPTS = ROOT / "tests" / "data" / "command_scripts"
BAD_SPECS = ROOT / "tests" / "bad_specs"

# --------------------------------------------------------------------------- render_command

RENDER = [
    # (command, config, builtins, argv)
    (["python", "t.py", "--lr", "{lr}", "--lr2={lr}x"], {"lr": 0.001}, None, ["python", "t.py", "--lr", "0.001",
                                                                             "--lr2=0.001x"]),
    (["--lr", "{lr}", "--bs", "{bs}"], {"lr": 1e-05, "bs": 64}, None, ["--lr", "1e-05", "--bs", "64"]),
    (["--x={opt.lr}/{opt.name}"], {"opt": {"lr": 0.1, "name": "sgd"}}, None, ["--x=0.1/sgd"]),
    (["--x", "{opt.lr}"], {"opt.lr": 0.5}, None, ["--x", "0.5"]),  # a flat dotted key
    (["{{literal}}", "a}}b", "{{ {lr} }}"], {"lr": 2}, None, ["{literal}", "a}b", "{ 2 }"]),
    (["--layers", "{layers}", "--opts", "{opts}"], {"layers": [64, 32], "opts": {"a": "b"}}, None,
     ["--layers", "[64, 32]", "--opts", '{"a": "b"}']),
    (["--flag", "{flag}", "--off", "{off}"], {"flag": True, "off": False}, None,
     ["--flag", "True", "--off", "False"]),
    # An inactive parameter: its argument and the flag before it are left out ...
    (["python", "t.py", "--momentum", "{momentum}", "--lr", "{lr}"], {"lr": 0.1}, None,
     ["python", "t.py", "--lr", "0.1"]),
    # ... but not a positional argument before it, a negative number, or an argument that is a value itself.
    (["python", "t.py", "{momentum}"], {}, None, ["python", "t.py"]),
    (["--shift", "-1", "{momentum}"], {}, None, ["--shift", "-1"]),
    (["--shift", "-1.5e-3", "{momentum}", "-.5", "{momentum}"], {}, None, ["--shift", "-1.5e-3", "-.5"]),
    (["--lr", "{lr}", "{momentum}"], {"lr": 0.1}, None, ["--lr", "0.1"]),
    # An argument holding its own flag is dropped whole, and one placeholder missing of two drops it too.
    (["python", "t.py", "--x={a}", "--y", "{b}"], {"b": 1}, None, ["python", "t.py", "--y", "1"]),
    (["--pair={a}:{b}"], {"a": 1}, None, []),
    # {tuner.restore_dir}: None on a fresh start, so [--resume, {tuner.restore_dir}] vanishes.
    (["python", "t.py", "--resume", "{tuner.restore_dir}", "--out", "{tuner.trial_dir}"], {},
     {"tuner.restore_dir": None, "tuner.trial_dir": "/t/d"}, ["python", "t.py", "--out", "/t/d"]),
    (["--resume", "{tuner.restore_dir}"], {}, {"tuner.restore_dir": "/ck/1"}, ["--resume", "/ck/1"]),
    (["--resume", "{tuner.restore_dir}"], {}, None, []),
]


@pytest.mark.parametrize("command,config,builtins,argv", RENDER, ids=[str(i) for i in range(len(RENDER))])
def test_render_command(command, config, builtins, argv):
    assert render_command(command, config, builtins) == argv


def test_render_command_leaves_its_inputs_alone():
    command, config = ["--m", "{m}", "{lr}"], {"lr": [1, 2]}
    render_command(command, config)
    assert command == ["--m", "{m}", "{lr}"] and config == {"lr": [1, 2]}


def test_a_placeholder_right_inside_literal_braces():
    assert render_command(["--hp", '{{"lr": {lr}}}', "{{{lr}}}"], {"lr": 0.1}) == ["--hp", '{"lr": 0.1}', "{0.1}"]


def test_an_argument_with_its_own_flag_leaves_the_flag_before_it():
    assert render_command(["python", "t.py", "--verbose", "--momentum={momentum}"], {}) == \
        ["python", "t.py", "--verbose"]


# --------------------------------------------------------------------------- parse_line

PARSE = [
    # (line, how, expected); NAN stands for a NaN value
    ('{"loss": 0.5, "epoch": 2}', "json", {"loss": 0.5, "epoch": 2}),
    ('  {"loss": 0.5}\n', "json", {"loss": 0.5}),
    ('[default0]:{"loss": 0.25}', "json", {"loss": 0.25}),  # torchrun --tee's rank prefix
    ('[default0]: accuracy=0.9', "kv", {"accuracy": 0.9}),
    ("Epoch 3/10: accuracy=0.97 loss = 1e-3 step=12 ok=true", "kv",
     {"accuracy": 0.97, "loss": 0.001, "step": 12, "ok": True}),
    ("Validation-accuracy=0.81 val|loss=-2", "kv", {"Validation-accuracy": 0.81, "val|loss": -2}),
    ("loss=nan", "kv", {"loss": "NAN"}),
    ("loss=inf", "kv", {"loss": math.inf}),
    ('{"loss": NaN}', "json", {"loss": "NAN"}),
    ('{"loss": 0.5}', "file", {"loss": 0.5}),
    ("loss=0.5", "file", {"loss": 0.5}),
    # Not metrics lines.
    ("training...", "json", None),
    ("loss=0.5", "json", None),
    ('{"loss": 0.5}', "kv", None),
    ("{}", "json", None),
    ("[1, 2]", "json", None),
    ('{"loss": 0.5', "json", None),
    ("", "kv", None),
    ("name=resnet version=1.2.3", "kv", None),
    ("Downloading 10%", "file", None),
]


@pytest.mark.parametrize("line,how,expected", PARSE, ids=[f"{i}-{p[1]}" for i, p in enumerate(PARSE)])
def test_parse_line(line, how, expected):
    found = parse_line(line, how)
    if expected is None:
        assert found is None
        return
    assert found is not None and found.keys() == expected.keys()
    for key, value in expected.items():
        if value == "NAN":
            assert isinstance(found[key], float) and math.isnan(found[key]), found
        else:
            assert found[key] == value and type(found[key]) is type(value), (key, found)


# --------------------------------------------------------------------------- a CommandTrial outside Ray


def _local_trial(tmp_path, monkeypatch, args, objectives=("accuracy",), **section) -> list[dict]:
    """Run ``python t1_lines.py ARGS`` as a command trial outside Ray (the spec's metrics ``objectives``, its
    ``trainable`` section ``section``); returns its reports."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its trial folder and checkpoint folder
    command = CommandTrainable(command=["python", "t1_lines.py", *args], **section)
    before = len(trial.local_reports())
    CommandTrial(command, str(SCRIPTS), objectives, None, "t1_lines")({})
    return trial.local_reports()[before:]


def test_a_line_without_the_metric_adds_its_values_to_the_next_report(tmp_path, monkeypatch, capsys):
    reports = _local_trial(tmp_path, monkeypatch, ["loss=0.5 lr=0.1", "training...", "epoch=1 accuracy=0.9",
                                                   "loss=0.3", "loss=0.2", "epoch=2 accuracy=0.95",
                                                   "accuracy=0.97", "loss=0.1"], metrics="kv")
    assert reports == [{"loss": 0.5, "lr": 0.1, "epoch": 1, "accuracy": 0.9},
                       {"loss": 0.2, "epoch": 2, "accuracy": 0.95},  # the later value wins
                       {"accuracy": 0.97}]  # the last line lacks the metric: not reported
    assert "training..." not in capsys.readouterr().out  # the program's stdout goes to its log only


def test_without_a_metric_every_metrics_line_is_a_report(tmp_path, monkeypatch):
    reports = _local_trial(tmp_path, monkeypatch, ["a=1", "noise", "b=2.5"], objectives=None, metrics="kv")
    assert reports == [{"a": 1}, {"b": 2.5}]


def test_a_failed_program_shows_the_last_lines_of_its_stderr(tmp_path, monkeypatch):
    lines = [f"err:line {i:02d}" for i in range(1, 26)]
    with pytest.raises(CommandFailedError) as info:
        _local_trial(tmp_path, monkeypatch, ["accuracy=0.5", *lines, "err:RuntimeError: boom", "exit:3"],
                     metrics="kv")
    text = str(info.value)
    head, tail = text.split("\n", 1)
    assert head.startswith("the command exited with code 3: ") and "t1_lines.py" in head
    shown = tail.splitlines()
    assert shown[0] == f"last {STDERR_TAIL_LINES} lines of its stderr:"
    assert shown[1:] == [f"line {i:02d}" for i in range(7, 26)] + ["RuntimeError: boom"]


def test_a_program_that_reports_nothing_fails(tmp_path, monkeypatch):
    with pytest.raises(CommandFailedError, match=r"the command exited 0 without a metrics line carrying "
                                                 r"accuracy; print one a line \(\{\"accuracy\": 0.5\}\)"):
        _local_trial(tmp_path, monkeypatch, ["all done"])


# --------------------------------------------------------------------------- CommandTrainable's validation

BASE = {"name": "c", "metric": "loss", "mode": "min",
        "param_space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1}, "opt": {"lr": 0.1}}}


def _command(command, **section):
    return load_spec({**BASE, "trainable": {"command": command, **section}}).command


def test_a_string_command_is_split_as_a_shell_splits_it():
    assert _command("python train.py --lr {lr} --name 'a b' --x=\"{opt.lr}\"").command == \
        ["python", "train.py", "--lr", "{lr}", "--name", "a b", "--x={opt.lr}"]
    assert _command(["python", "t.py", "--epochs", 3, "--p", 0.5]).command == \
        ["python", "t.py", "--epochs", "3", "--p", "0.5"]
    section = _command(["train", "{lr}"], env={"N": 2, "S": "x"})
    assert section.env == {"N": "2", "S": "x"} and section.metrics == "json" and section.stop_grace_s == 10.0
    assert not section.runs_python and _command(["python3", "t.py"]).runs_python


def _refused(command, **section) -> str:
    with pytest.raises(SpecError) as info:
        _command(command, **section)
    return str(info.value)


@pytest.mark.parametrize("command,section,message", [
    (["python", "t.py", "{}"], {}, "trainable.command.2: {} is not a placeholder: one names a parameter, e.g. {lr} "
     "or {optimizer.lr}; write {{ and }} for literal braces."),
    (["python", "t.py", "--x={a b}"], {}, "trainable.command.2: {a b} is not a placeholder"),
    (["python", "t.py", "{tuner.x}"], {}, "trainable.command.2: {tuner.x} is not one of tuner's placeholders: "
     "{tuner.trial_id}, {tuner.trial_dir}, {tuner.config_file}, {tuner.checkpoint_dir}, {tuner.restore_dir}, "
     "{tuner.metrics_file}."),
    (["python", "t.py", "{tuner.metrics_file}"], {}, "trainable.command.2: {tuner.metrics_file} has a value with "
     "`metrics: FILE` only, but metrics is 'json'."),
    (["python", "t.py", "{tuner.metrics_file}"], {"metrics": "kv"}, "but metrics is 'kv'."),
    (["python", "t.py", True], {}, "trainable.command.2: each argument of the command is text (or a number), but "
     "got True; quote it."),
    ("python 'train.py", {}, "trainable.command: command \"python 'train.py\" cannot be split into arguments as a "
     "shell would: No closing quotation; write it as a list."),
    ("  ", {}, "trainable.command: command is empty"),
    (["python", "t.py", "{lrr}"], {}, "trainable.command.2: placeholder {lrr} names no parameter of "
     "param_space; did you mean '{lr}'? Parameters: lr, opt.lr; tuner's own: {tuner.trial_dir}"),
    (["python", "t.py", "{opt.lrr}"], {}, "did you mean '{opt.lr}'?"),
    (["python", "t.py"], {"stop_grace_s": -1}, "trainable.stop_grace_s: must be greater than or equal to 0"),
], ids=["empty", "space", "tuner-unknown", "metrics-file-json", "metrics-file-kv", "bool", "unbalanced-quote",
        "blank", "no-parameter", "no-nested-parameter", "grace"])
def test_a_bad_command_is_refused(command, section, message):
    assert message in _refused(command, **section)


def test_metrics_file_placeholder_with_a_file():
    section = _command(["python", "t.py", "--m", "{tuner.metrics_file}", "{tuner.trial_id}", "{tuner.config_file}",
                        "{tuner.checkpoint_dir}", "{tuner.restore_dir}", "{tuner.trial_dir}"], metrics="out/m.jsonl")
    assert section.metrics_file == "out/m.jsonl" and section.line_format == "file"
    assert section.placeholder_names() == []


def test_a_bad_placeholder_is_one_issue():
    message = _refused(["python", "t.py", "{}"])
    assert "must be a valid string" not in message and message.count("\n") == 0, message


# --------------------------------------------------------------------------- golden CLI errors

GOLDEN = ["command_placeholder_unknown", "command_oom_backoff", "command_workers_not_python",
          "command_placement_strategy"]


def _validate_refused(run_cli, tmp_path, spec, cwd=None) -> str:
    """`tuner validate SPEC`: exit 2, one paragraph on stderr, nothing on stdout or on disk, no Ray."""
    ray_tmp = tmp_path / "ray"
    ray_tmp.mkdir(exist_ok=True)
    proc = run_cli("validate", spec, "--storage", tmp_path / "runs", cwd=cwd, timeout=120,
                   env={"RAY_TMPDIR": str(ray_tmp)})
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "runs").exists() and not any(ray_tmp.iterdir()), "nothing is written, Ray never starts"
    return proc.stderr


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_command_errors_through_the_cli(name, run_cli, tmp_path):
    """The command specs of the bad-spec corpus (tests/bad_specs/command_*) through `python -m tuner validate`."""
    rel = f"tests/bad_specs/{name}.yaml"
    assert _validate_refused(run_cli, tmp_path, rel) == "tuner: error: " + (ROOT / rel).with_suffix(".err").read_text()


def test_golden_error_names_the_closest_parameter():
    assert "did you mean '{learning_rate}'?" in (BAD_SPECS / "command_placeholder_unknown.err").read_text()


def test_a_missing_script_or_program_is_refused_before_start(run_cli, tmp_path):
    """check_command: the script is looked for in the command's working directory, a program on the PATH."""
    spec = tmp_path / "s.yaml"
    spec.write_text("name: script\ntrainable:\n  command: [python, no_such_train.py, --lr, \"{lr}\"]\n"
                    "metric: loss\nmode: min\nparam_space:\n  lr: 0.1\n")
    assert _validate_refused(run_cli, tmp_path, spec) == (
        f"tuner: error: {spec}:3:21: trainable.command.1: script 'no_such_train.py' not found in the command's "
        f"working directory {tmp_path}; give its path relative to that folder (trainable.cwd, default: the spec's "
        "folder).\n")
    spec.write_text("name: script\ntrainable:\n  command: [t1-no-such-program, --lr, \"{lr}\"]\n"
                    "metric: loss\nmode: min\nparam_space:\n  lr: 0.1\n")
    assert _validate_refused(run_cli, tmp_path, spec) == (
        f"tuner: error: {spec}:3:13: trainable.command.0: command 't1-no-such-program' not found on the PATH; give "
        "the program's path, or start the command with python (tuner's own Python) for a Python script.\n")
    # Relative to trainable.cwd, from another folder: the spec's folder is the base of a relative cwd.
    spec.write_text(f"name: script\ntrainable:\n  command: [python, t1_katib.py]\n  cwd: {SCRIPTS}\n"
                    "metric: loss\nmode: min\n")
    proc = run_cli("validate", spec, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr


# --------------------------------------------------------------------------- end to end


def _run(run_cli, folder: Path, name: str, spec: dict, env: dict | None, *extra, code: int = 0):
    """`tuner run` of ``spec`` (written to ``folder/<name>.yaml``) started from ``folder``; returns
    ``(proc, experiment folder, summary)``."""
    spec = {"name": name, "reporting": {"tensorboard": False}, "resources": {"cpu": 1}, **spec}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = run_cli("run", path.name, "--storage", "runs", *extra, cwd=folder, env=env, timeout=600)
    assert proc.returncode == code, proc.stdout[-3000:] + proc.stderr[-3000:]
    exp = folder / "runs" / name
    return proc, exp, json.loads((exp / SUMMARY).read_text())


def _trials(exp: Path) -> dict[str, tuple[dict, list[dict]]]:
    """Each trial folder's name: (its config, its results from result.json)."""
    out = {}
    for folder in sorted(exp.iterdir()):
        if (folder / "params.json").is_file():
            results = [json.loads(line) for line in (folder / RESULT_FILE).read_text().splitlines()] \
                if (folder / RESULT_FILE).is_file() else []
            out[folder.name] = (json.loads((folder / "params.json").read_text()), results)
    return out


@pytest.mark.slow
def test_katib_kv_script_under_bohb_resumes_a_paused_trial(run_cli, on_session_ray, tmp_path):
    """A Katib-style script (name=value lines, `checkpoint=1`) under BOHB: Hyperband's bracket of 3 pauses the
    first two trials at iteration 1; the best (the first to start, by the script's rule) goes on from its
    checkpoint (its script starts at epoch 2); the others end. Every result matches its config and iteration,
    and each carries the loss of the line before it (the merge rule)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    spec = {"trainable": {"command": "python t1_katib.py --lr {lr} --epochs {epochs}", "metrics": "kv",
                          "cwd": str(SCRIPTS),
                          "env": {"T1_SHARED": str(shared), "T1_EXPERIMENT": str(tmp_path / "runs" / "bohb")}},
            "metric": "accuracy", "mode": "max", "num_samples": 3, "seed": 0, "search": {"algorithm": "bohb"},
            "scheduler": {"max_t": 3, "reduction_factor": 3},
            "param_space": {"lr": {"type": "uniform", "low": 0.001, "high": 0.01}, "epochs": 3}}
    proc, exp, summary = _run(run_cli, tmp_path, "bohb", spec, on_session_ray)
    assert summary["trials"]["by_status"] == {"TERMINATED": 3}, summary
    trials = _trials(exp)
    assert len(trials) == 3
    lengths = {}
    for name, (config, results) in trials.items():
        rank = results[0]["rank"]
        lengths[rank] = len(results)
        for r in results:
            assert r["epoch"] == r["training_iteration"], (name, results)
            assert r["accuracy"] == pytest.approx(0.9 - 0.1 * rank + config["lr"] * r["epoch"], abs=2e-6)
            assert r["loss"] == pytest.approx(1 / r["epoch"], abs=1e-4)
        starts = (shared / f"starts_{results[0]['trial_id']}.txt").read_text().split()
        assert starts == (["1", "2"] if rank == 0 else ["1"]), (name, starts)
        if rank == 0:  # command_stdout.log is appended to on each start: both starts' lines are there
            printed = [line.split()[0] for line in (exp / name / COMMAND_STDOUT).read_text().splitlines()
                       if line.startswith("epoch=")]
            assert printed[0] == "epoch=1" and printed[-2:] == ["epoch=2", "epoch=3"], printed
    assert lengths == {0: 3, 1: 1, 2: 1}, "the best trial ran on to max_t, the others stopped at the rung"
    assert summary["best"]["metrics"]["accuracy"] == max(r["accuracy"] for _, rs in trials.values() for r in rs)


@pytest.mark.slow
def test_metrics_file_conditional_flag_and_config_file(run_cli, on_session_ray, tmp_path):
    """`metrics: FILE` (JSON lines appended to $TUNER_METRICS_FILE; stdout's JSON does not count); an inactive
    `when:` parameter leaves its flag out of argv; {tuner.config_file} and $TUNER_CONFIG hold the trial's config
    as YAML; [--resume, {tuner.restore_dir}] is left out of a fresh start. The script path is absolute and the
    cwd the spec's folder (tmp_path)."""
    spec = {"trainable": {"command": ["python", str(SCRIPTS / "t1_metrics_file.py"), "--opt", "{opt}",
                                      "--momentum", "{momentum}", "--config", "{tuner.config_file}",
                                      "--resume", "{tuner.restore_dir}", "--id={tuner.trial_id}"],
                          "metrics": "logs/metrics.jsonl"},
            "metric": "score", "mode": "max", "num_samples": 1, "search": {"algorithm": "grid"},
            "param_space": {"opt": {"type": "grid", "values": ["sgd", "adam"]},
                            "momentum": {"type": "grid", "values": [0.9], "when": {"opt": "sgd"}}}}
    proc, exp, summary = _run(run_cli, tmp_path, "mfile", spec, on_session_ray)
    assert summary["trials"]["by_status"] == {"TERMINATED": 2}, summary
    seen = {}
    for name, (config, results) in _trials(exp).items():
        folder = exp / name
        trial_id = results[0]["trial_id"]
        argv = json.loads((folder / "t1_argv.json").read_text())
        momentum = ["--momentum", "0.9"] if config["opt"] == "sgd" else []
        config_file = Path(argv[-2])  # in the trial's local folder (under Ray's session), copied into exp
        assert argv == ["--opt", config["opt"], *momentum, "--config", str(config_file), f"--id={trial_id}"], argv
        assert (config_file.name, config_file.parent.name) == (COMMAND_CONFIG, name)
        assert yaml.safe_load((folder / "t1_config_seen.yaml").read_text()) == config
        assert yaml.safe_load((folder / COMMAND_CONFIG).read_text()) == config
        bonus = 1 if momentum else 0
        assert [(r["epoch"], r["score"]) for r in results] == [(1, 10 + bonus), (2, 20 + bonus)], results
        assert (folder / "logs" / "metrics.jsonl").read_text().count("\n") == 2
        assert '{"score": -1}' in (folder / COMMAND_STDOUT).read_text()
        seen[config["opt"]] = config
    assert seen == {"sgd": {"opt": "sgd", "momentum": 0.9}, "adam": {"opt": "adam"}}
    assert summary["best"]["metrics"]["score"] == 21


@pytest.mark.slow
def test_nan_failing_and_hanging_scripts(run_cli, on_session_ray, tmp_path):
    """Three trials that go wrong: a NaN metric line (NonFiniteMetricError), a script that exits 1 (its error.txt
    holds the last 20 lines of its stderr, the console's summary line its last one), a script that hangs past
    trial_timeout_s (TrialTimeoutError). The scripts' stdout never reaches the console."""
    spec = {"trainable": {"command": ["python", "t1_fails.py", "{mode}"], "cwd": str(SCRIPTS), "stop_grace_s": 1},
            "metric": "loss", "mode": "min", "num_samples": 1, "search": {"algorithm": "grid"},
            "param_space": {"mode": {"type": "grid", "values": ["nan", "exit1", "hang"]}},
            "trial_timeout_s": 3, "failure": {"abort_on_first_error": False}}
    proc, exp, summary = _run(run_cli, tmp_path, "fails", spec, on_session_ray, code=1)
    assert summary["trials"]["by_status"] == {"ERROR": 3}, summary
    errors = {Path(e["path"]).name: e["error"] for e in summary["errors"]}
    by_mode = {config["mode"]: name for name, (config, _) in _trials(exp).items()}
    assert errors[by_mode["nan"]].startswith("tuner.trial.NonFiniteMetricError: metric 'loss' is nan")
    assert errors[by_mode["hang"]].startswith("tuner.run.trainable.TrialTimeoutError: the trial ran longer than "
                                              "trial_timeout_s=3 s")
    assert errors[by_mode["exit1"]] == "ValueError: t1 went wrong"
    failed = exp / by_mode["exit1"]
    error_txt = (failed / ERROR_FILE).read_text()
    assert "CommandFailedError: the command exited with code 1: " in error_txt
    tail = error_txt.split(f"last {STDERR_TAIL_LINES} lines of its stderr:\n", 1)[1].splitlines()
    assert tail[:STDERR_TAIL_LINES] == [f"t1 stderr line {i:02d}" for i in range(12, 31)] + \
        ["ValueError: t1 went wrong"]
    assert "t1 stderr line 11" not in error_txt
    assert "t1 stderr line 01" in (failed / COMMAND_STDERR).read_text()
    trial_id = _trials(exp)[by_mode["exit1"]][1][0]["trial_id"]
    assert f"tuner: trial {trial_id} errored: ValueError: t1 went wrong (log: {failed})" in proc.stderr
    for name in by_mode.values():
        assert "T1-STDOUT-MARKER" in (exp / name / COMMAND_STDOUT).read_text()
    assert "T1-STDOUT-MARKER" not in proc.stdout + proc.stderr
    assert "t1 stderr line" not in proc.stdout + proc.stderr


def _recorded_pids(exp: Path) -> dict[str, int]:
    return {f"{folder.name}/{f.name}": int(f.read_text()) for folder in exp.iterdir() if folder.is_dir()
            for f in folder.glob("t1_*.pid")}


def _still_running(pids: dict[str, int], bound_s: float) -> dict[str, str]:
    """The recorded processes still running (not zombies) after up to ``bound_s`` seconds (a failure bound)."""
    procs = {}
    for what, pid in pids.items():
        try:
            procs[what] = psutil.Process(pid)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(list(procs.values()), timeout=bound_s)
    left = {}
    for what, p in procs.items():
        if p in alive:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    left[what] = " ".join(p.cmdline())[:80]
            except psutil.NoSuchProcess:
                pass
    return left


def _kill(pids: dict[str, int]) -> None:
    for pid in pids.values():  # the recorded processes this test's trials started
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.slow
def test_no_process_outlives_a_trial_that_timed_out(run_cli, on_session_ray, tmp_path):
    """Scripts that report twice and never exit, each with a child, ended by trial_timeout_s: after `tuner run`
    returns, every recorded process is gone: a child in the script's group, one that left it with os.setsid()
    (the leader is a subreaper), and a script and child that ignore SIGTERM (SIGKILLed after stop_grace_s)."""
    spec = {"trainable": {"command": ["python", "t1_tree.py", "{child}"], "cwd": str(SCRIPTS), "stop_grace_s": 1},
            "metric": "step", "mode": "max", "num_samples": 1, "search": {"algorithm": "grid"},
            "param_space": {"child": {"type": "grid", "values": ["plain", "setsid", "ignore"]}},
            "trial_timeout_s": 3}
    _, exp, summary = _run(run_cli, tmp_path, "timeout", spec, on_session_ray, code=1)
    pids = _recorded_pids(exp)
    try:
        assert summary["trials"]["by_status"] == {"ERROR": 3}, summary
        assert all(e["error"].startswith("tuner.run.trainable.TrialTimeoutError") for e in summary["errors"])
        assert len(pids) == 6, pids
        assert all(len(results) == 2 for _, results in _trials(exp).values())
        assert _still_running(pids, bound_s=10) == {}
    finally:
        _kill(pids)


@pytest.mark.slow
def test_no_process_outlives_a_trial_that_stop_ended(run_cli, tmp_path):
    """`stop: {training_iteration: 2}` ends trials whose script reports twice and never exits; after `tuner run`
    (its own local Ray) returns, the scripts and their children are gone: in the script's group, out of it
    (os.setsid()), and ignoring SIGTERM (SIGKILLed after stop_grace_s). Ray's worker SIGKILLs its direct
    children as it exits, which the leader's keeper is not (before ec98a36 all three scripts could survive)."""
    spec = {"trainable": {"command": ["python", "t1_tree.py", "{child}"], "cwd": str(SCRIPTS), "stop_grace_s": 3},
            "metric": "step", "mode": "max", "num_samples": 1, "search": {"algorithm": "grid"},
            "param_space": {"child": {"type": "grid", "values": ["plain", "setsid", "ignore"]}},
            "stop": {"training_iteration": 2}}
    _, exp, summary = _run(run_cli, tmp_path, "stopped", spec, None, "--num-cpus", "2")
    pids = _recorded_pids(exp)
    try:
        assert summary["trials"]["by_status"] == {"TERMINATED": 3} and len(pids) == 6, (summary, pids)
        assert all(len(results) == 2 for _, results in _trials(exp).values())
        assert _still_running(pids, bound_s=10) == {}
    finally:
        _kill(pids)
