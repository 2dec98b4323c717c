"""The error taxonomy (tuner.errors): each class's exit code, and the CLI's one catch site that maps it.

No Ray starts here: the errors come from monkeypatched loaders in-process, or from real raise sites
that refuse before Ray starts (RAY_TMPDIR stays empty).
"""

import json
import os
import re
import socket

import pytest

from tuner import cli, errors
from tuner.errors import (ClusterError, DiskFullError, ExperimentError, ExperimentLocked, InputError, StorageError,
                          TrialError, TunerError)
from tuner.adapters.ray_internals import GCS_CONNECT_TRIES_ENV
from tuner.report.dashboard import DashboardError
from tuner.report import ReportError
from tuner.spec import SpecError, SpecIssue

EXIT_CODES = {TunerError: 1, InputError: 2, SpecError: 2, StorageError: 2, ExperimentError: 2, ExperimentLocked: 2,
              ClusterError: 2, ReportError: 2, TrialError: 1, DiskFullError: 75}


def test_each_error_class_has_its_documented_exit_code():
    for cls, code in EXIT_CODES.items():
        assert cls.exit_code == code, cls
        assert issubclass(cls, TunerError), cls
        assert (code == 2) == issubclass(cls, InputError), cls
        assert re.search(rf"exits? (with )?code {code}\b", " ".join(cls.__doc__.split()), re.I), cls  # documented
    assert set(errors.__all__) <= {cls.__name__ for cls in EXIT_CODES}
    assert issubclass(ExperimentLocked, ExperimentError)
    # The classes keep the builtin bases they had, for callers that catch those.
    assert issubclass(SpecError, ValueError) and issubclass(ReportError, ValueError)
    assert issubclass(StorageError, RuntimeError) and issubclass(ExperimentLocked, RuntimeError)
    # One class each, wherever it is imported from.
    from tuner.experiment import storage

    assert storage.StorageError is StorageError


def _errors():
    return [
        SpecError([SpecIssue("num_samples", "must be greater than or equal to 1, but got 0 (int).", 5, 14)], "s.yaml"),
        StorageError("cannot list s3://bucket/runs/x: no route", "--storage s3://bucket/runs"),
        ExperimentError("/runs/x is not a tuner experiment folder", "/runs/x"),
        ExperimentLocked("the experiment folder /runs/x is in use by pid 7; wait for that run to end (or stop it) "
                         "and try again."),
        ClusterError("the Ray Jobs API needs the head's dashboard address, --address http://HEAD:8265.", "--address"),
        ReportError("/runs/x does not exist; give an experiment folder"),
        InputError("--resume-errored and --restart-errored exclude each other; choose one."),
        TrialError("the first trial, t_00000, failed before any trial reported a result"),
        DiskFullError("/runs/x/summary.json", "/runs/x"),
    ]


@pytest.mark.parametrize("error", _errors(), ids=lambda e: type(e).__name__)
def test_the_cli_maps_each_error_to_one_paragraph_and_its_exit_code(monkeypatch, capsys, error):
    """Whatever command meets it, main() prints `tuner: error: <message>` and exits with the class's code."""
    def fail(*args, **kwargs):
        raise error

    monkeypatch.delenv("TUNER_DEBUG", raising=False)
    monkeypatch.setattr(cli, "_parse_sets", fail)  # what `validate` calls first
    with pytest.raises(SystemExit) as info:
        cli.main(["validate", "s.yaml"])
    assert info.value.code == type(error).exit_code
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"tuner: error: {error}\n")
    # TUNER_DEBUG=1: the traceback, then the same paragraph.
    monkeypatch.setenv("TUNER_DEBUG", "1")
    with pytest.raises(SystemExit) as info:
        cli.main(["validate", "s.yaml"])
    assert info.value.code == type(error).exit_code
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.endswith(f"tuner: error: {error}\n")


def _tuner_exception_classes() -> set[type]:
    """Every exception class defined in the tuner package (each of its modules imported)."""
    import importlib
    import pkgutil

    import tuner

    for module in pkgutil.walk_packages(tuner.__path__, "tuner."):
        importlib.import_module(module.name)
    found, todo = set(), [BaseException]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.split(".")[0] == "tuner":
                found.add(sub)
    return found


def _examples() -> dict[str, BaseException]:
    """One instance of each of tuner's exception classes, built as its raise sites build it (every argument)."""
    from tuner.convert.source import ConvertError
    from tuner.run.command import CommandFailedError
    from tuner.spec.yaml_positions import _YAMLIssue
    from tuner.run.trainable import OutOfMemoryBackoffError, TrialTimeoutError
    from tuner.trial import NonFiniteMetricError

    issue = SpecIssue("num_samples", "must be greater than or equal to 1, but got 0 (int).", 5, 14, "--set x=1")
    made = [
        TunerError("a tuner error"),
        InputError("options exclude each other", "--resume-errored"),
        SpecError([issue, SpecIssue("", "the spec is empty")], "s.yaml"),
        StorageError("cannot list s3://bucket/runs/x: no route", "--storage s3://bucket/runs"),
        ExperimentError("/runs/x is not a tuner experiment folder", "/runs/x"),
        ExperimentLocked("the experiment folder /runs/x is in use by pid 7"),
        ClusterError("cannot reach the Ray cluster at 10.0.0.1:6379", "s.yaml"),
        ReportError("/runs/x does not exist", "/runs/x"),
        DashboardError("the dashboard needs optuna-dashboard", "tuner dashboard"),
        TrialError("the first trial failed", trial_id="t_00000", path="/runs/x/t_00000", traceback="Traceback ..."),
        DiskFullError("/runs/x/t/checkpoint_000001", "/runs/x", storage="/runs", quota=True,
                      what="a checkpoint of trial t into ", resumable=False),
        _YAMLIssue(issue),
        OutOfMemoryBackoffError("batch_size 1 cannot be halved"),
        TrialTimeoutError("the trial ran longer than trial_timeout_s"),
        NonFiniteMetricError("loss is nan"),
        CommandFailedError("the command exited with code 1: python train.py\nlast 1 lines of its stderr:\nboom"),
        ConvertError("unknown distribution 'beta'", "sweep.yaml", "parameters.lr.distribution", 4, 19),
    ]
    return {f"{type(e).__module__}.{type(e).__qualname__}": e for e in made}


def test_every_tuner_exception_survives_pickling():
    """Ray carries errors between processes by pickling them: each of tuner's exception classes (found by
    walking the package, so a new one needs an example here) comes back with its type, message, args and
    attributes, through pickle's protocols and Ray's cloudpickle (DiskFullError's constructor needs two
    arguments and failed; SpecError's rebuilt its issues from the message's characters)."""
    import pickle

    from ray import cloudpickle

    examples = _examples()
    assert {f"{c.__module__}.{c.__qualname__}" for c in _tuner_exception_classes()} == set(examples)
    for name, error in examples.items():
        for dumps, loads in [*((lambda e, p=p: pickle.dumps(e, protocol=p), pickle.loads)
                               for p in range(2, pickle.HIGHEST_PROTOCOL + 1)),
                             (cloudpickle.dumps, cloudpickle.loads)]:
            back = loads(dumps(error))
            assert type(back) is type(error), name
            assert (str(back), back.args, vars(back)) == (str(error), error.args, vars(error)), name
            if isinstance(error, TunerError):
                assert back.exit_code == error.exit_code


def test_an_unexpected_error_exits_1_and_names_its_type(monkeypatch, capsys):
    def fail(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.delenv("TUNER_DEBUG", raising=False)
    monkeypatch.setattr(cli, "_parse_sets", fail)
    with pytest.raises(SystemExit) as info:
        cli.main(["validate", "s.yaml"])
    assert info.value.code == 1
    assert capsys.readouterr().err == "tuner: error: RuntimeError: boom\ntuner: set TUNER_DEBUG=1 to see the traceback.\n"


SPEC = """\
name: locked
trainable: tests.trainables:quadratic
metric: loss
mode: min
num_samples: 1
param_space: {x: 0.5}
resources: {cpu: 1}
"""


def _refused(run_cli, ray_tmp, *args, env=None):
    """`tuner ARGS` refused with exit 2 and one paragraph, before any Ray started."""
    proc = run_cli(*args, timeout=120, env={"RAY_TMPDIR": str(ray_tmp), **(env or {})})
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not any(ray_tmp.iterdir()), "Ray started"
    return proc.stderr


def test_real_input_errors_exit_2_before_ray_starts(tmp_path, run_cli):
    ray_tmp = tmp_path / "ray"
    ray_tmp.mkdir()
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    # ClusterError: a local Ray's size with a cluster's address.
    assert _refused(run_cli, ray_tmp, "validate", spec, "--address", "127.0.0.1:1", "--num-cpus", "2") == (
        f"tuner: error: {spec}: --num-cpus sizes the local Ray that tuner starts, but this run connects to the Ray "
        "cluster at 127.0.0.1:1 (from --address), whose own resources apply; drop --num-cpus, or drop the address "
        "to run locally.\n")
    assert _refused(run_cli, ray_tmp, "run", spec, "--address", "127.0.0.1:1", "--num-gpus", "1") == (
        f"tuner: error: {spec}: --num-gpus sizes the local Ray that tuner starts, but this run connects to the Ray "
        "cluster at 127.0.0.1:1 (from --address), whose own resources apply; drop --num-gpus, or drop the address "
        "to run locally.\n")
    # ClusterError: nothing answers at the address (Ray's own connect retried for minutes, then exit 1).
    with socket.socket() as sock:  # a port where nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    exp = tmp_path / "runs" / "locked"  # an experiment to resume (its state is read before the address)
    exp.mkdir(parents=True)
    (exp / "spec.yaml").write_text(SPEC)
    (exp / "tuner_run.json").write_text(json.dumps({"spec_source": None, "python_path": [], "created": "now"}))
    (exp / "experiment_state-2026-01-01_00-00-00.json").write_text("{}")
    in_spec = tmp_path / "in_spec.yaml"
    in_spec.write_text(SPEC + f"ray: {{address: '127.0.0.1:{port}'}}\n")
    before = sorted(tmp_path.rglob("*"))
    for command in ("validate", "run"):
        assert _refused(run_cli, ray_tmp, command, spec, "--address", f"127.0.0.1:{port}") == (
            f"tuner: error: {spec}: cannot reach the Ray cluster at 127.0.0.1:{port} (from --address): connection "
            "refused. Start it with `ray start --head`, or give the address that `ray start` printed.\n")
    # The same from RAY_ADDRESS, and for a resume.
    assert _refused(run_cli, ray_tmp, "run", spec, env={"RAY_ADDRESS": f"127.0.0.1:{port}"}) == (
        f"tuner: error: {spec}: cannot reach the Ray cluster at 127.0.0.1:{port} (from RAY_ADDRESS): connection "
        "refused. Start it with `ray start --head`, or give the address that `ray start` printed.\n")
    # The same from the spec's ray.address.
    assert _refused(run_cli, ray_tmp, "run", in_spec) == (
        f"tuner: error: {in_spec}: cannot reach the Ray cluster at 127.0.0.1:{port} (from ray.address in the spec): "
        "connection refused. Start it with `ray start --head`, or give the address that `ray start` printed.\n")
    assert _refused(run_cli, ray_tmp, "resume", exp, "--address", f"127.0.0.1:{port}").endswith(
        f": cannot reach the Ray cluster at 127.0.0.1:{port} (from --address): connection refused. Start it with "
        "`ray start --head`, or give the address that `ray start` printed.\n")
    assert sorted(tmp_path.rglob("*")) == before, "nothing is written"
    # ClusterError: the Jobs API wants the dashboard's URL (`jobs logs --follow` exited 1 with "SpecError: ..." once).
    for command in (["jobs", "status", "j1"], ["jobs", "logs", "j1", "--follow"]):
        assert _refused(run_cli, ray_tmp, *command, "--address", "127.0.0.1:6379") == (
            "tuner: error: --address: the Ray Jobs API needs the head's dashboard address, --address "
            "http://HEAD:8265, but got '127.0.0.1:6379'.\n")
    # InputError: options that exclude each other.
    assert _refused(run_cli, ray_tmp, "resume", tmp_path, "--resume-errored", "--restart-errored") == (
        "tuner: error: --resume-errored and --restart-errored exclude each other; choose one.\n")
    # ExperimentError: not an experiment folder.
    assert _refused(run_cli, ray_tmp, "resume", spec.parent).startswith(
        f"tuner: error: {tmp_path}: {tmp_path} is not a tuner experiment folder (no tuner_run.json and spec.yaml)")


def test_an_address_where_no_ray_head_answers_fails_after_one_try(tmp_path, run_cli):
    """Something listens at the address but is no Ray head (here a socket that never answers): Ray's own
    connect would try 20 times, about 40 s each by default; tuner gives it one try (Ray's
    RAY_gcs_server_port_wait_time_s), then refuses the command with one paragraph naming the address
    (after Ray's own warning lines), exit 2, and no experiment folder. The tries are counted by the
    connections the listener accepts, not timed. The user's Ray settings shorten each try here
    (RAY_py_gcs_connect_timeout_s, RAY_gcs_rpc_server_connect_timeout_s), and a user's own
    RAY_gcs_server_port_wait_time_s is left as they set it (3 tries open more than twice one try's connections)."""
    import threading

    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    quick = {"RAY_py_gcs_connect_timeout_s": "2", "RAY_gcs_rpc_server_connect_timeout_s": "1"}
    with socket.socket() as sock:  # on every interface: Ray dials the node's own address for 127.0.0.1
        sock.bind(("0.0.0.0", 0))
        sock.listen(16)
        port = sock.getsockname()[1]
        accepted: list = []
        threading.Thread(target=lambda: [accepted.append(sock.accept()) for _ in iter(int, 1)], daemon=True).start()
        seen, counts = 0, []
        # The user's own RAY_gcs_server_port_wait_time_s wins: 3 tries, as they asked.
        for command, tries_env in (("validate", {}), ("run", {}), ("validate", {GCS_CONNECT_TRIES_ENV: "3"})):
            proc = run_cli(command, spec, "--address", f"127.0.0.1:{port}", "--storage", tmp_path / "runs",
                           timeout=600, env={**quick, **tries_env})
            assert proc.returncode == 2, proc.stderr[-3000:]
            assert proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr[-3000:]
            tries, seen = len(accepted) - seen, len(accepted)
            counts.append(tries)
            # Each of Ray's tries opens connections of its own (4 here): 20 tries would open 20 at least.
            assert 1 < tries < 20 or tries_env, f"{tries} connections: Ray tried more than once"
            last = proc.stderr.splitlines()[-1]
            assert last.startswith(f"tuner: error: cannot connect to the Ray cluster at 127.0.0.1:{port}: Failed to "
                                   "connect to Ray cluster at "), proc.stderr[-3000:]
            assert last.endswith(", though something listens there. Give the address that `ray start --head` "
                                 "printed (the head's GCS port, 6379 by default; not the dashboard's 8265), and "
                                 "check that this machine runs the cluster's Ray version."), last
    assert accepted, "the command reached the listener"
    assert counts[2] > 2 * max(counts[:2]), f"connections per command {counts}: the user's 3 tries were not made"
    assert not (tmp_path / "runs").exists(), "no experiment folder"


def test_a_locked_experiment_folder_exits_2_before_ray_starts(tmp_path, run_cli):
    from tuner.run.failures import ExperimentLock

    ray_tmp = tmp_path / "ray"
    ray_tmp.mkdir()
    exp = tmp_path / "runs" / "locked"
    exp.mkdir(parents=True)
    (exp / "spec.yaml").write_text(SPEC)
    (exp / "tuner_run.json").write_text(json.dumps({"spec_source": None, "python_path": [], "created": "now"}))
    (exp / "experiment_state-2026-01-01_00-00-00.json").write_text("{}")
    with ExperimentLock(exp):  # held by this process: the resume's own flock is refused
        stderr = _refused(run_cli, ray_tmp, "resume", exp, "--num-cpus", "1")
    assert stderr == (f"tuner: error: the experiment folder {exp} is in use by pid {os.getpid()}; wait for that run "
                      "to end (or stop it) and try again.\n")


def test_a_used_up_quota_is_a_full_disk_and_a_disk_full_before_any_state_says_there_is_nothing_to_resume():
    """README: "no space left" and "quota exceeded" (ENOSPC, EDQUOT) get the full-disk treatment, found through
    Ray's wrapping (RayTaskError.cause) and `raise ... from`; nothing else does. A disk full before Ray Tune saved
    any state: the message says there is nothing to resume, to remove the folder and run again."""
    import errno

    from tuner.experiment.files import disk_full

    quota = OSError(errno.EDQUOT, "Disk quota exceeded")
    wrapped = RuntimeError("the trial failed")
    wrapped.cause = quota  # as ray.exceptions.RayTaskError carries the trial's error
    try:
        raise ValueError("writing result.json") from wrapped
    except ValueError as err:
        assert disk_full(err) is quota
    assert disk_full(OSError(errno.ENOSPC, "No space left on device")).errno == errno.ENOSPC
    assert disk_full(OSError(errno.EACCES, "Permission denied")) is None and disk_full(None) is None
    error = DiskFullError("/runs/x/t/checkpoint_000001", "/runs/x", quota=True)
    assert str(error).startswith("the disk quota is used up: could not write /runs/x/t/checkpoint_000001 (quota "
                                 "exceeded on the filesystem of /runs/x/t)")
    early = DiskFullError("/runs/x/summary.json", "/runs/x", resumable=False)
    assert early.resume_command is None and "tuner resume" not in str(early)
    assert str(early).endswith("The experiment stopped before any trial state was saved, so there is nothing to "
                               "resume. Free some space there, remove /runs/x and start the run again.")
