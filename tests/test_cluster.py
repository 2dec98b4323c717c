"""Against a real multi-node Ray cluster: `ray start` head + worker node on this machine.

The fixture starts the nodes with `ray start --block` on free ports, in their own temp
folder, and stops exactly the processes it started (their pids and children), never a
broad `ray stop`.
"""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.fixtures.paths import ROOT

# One xdist worker runs this file: its module-scoped fixture is built once (pyproject's --dist loadgroup).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_cluster")]

SPEC = """\
name: {name}
trainable: tests.trainables:where
metric: loss
mode: min
num_samples: {num_samples}
seed: 0
param_space:
  x: {{type: uniform, low: 0, high: 1}}
  epochs: {epochs}
  sleep: {sleep}
resources: {{cpu: 1}}
failure: {{max_failures: 3}}
reporting: {{cli: false}}
"""


#: The `ray` command of the Python that runs the tests (its venv need not be activated).
RAY_CLI = str(Path(sys.executable).with_name("ray")) if Path(sys.executable).with_name("ray").exists() else "ray"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RayNode:
    """One `ray start --block` process and the Ray processes under it."""

    def __init__(self, args: list[str], log: Path, env: dict):
        # Several nodes on one machine: each needs its own agent ports (the HTTP one
        # defaults to 52365 for every node, and a second node's Jobs agent would fail).
        args = [*args, "--dashboard-agent-listen-port", str(free_port()), "--metrics-export-port",
                str(free_port()), "--runtime-env-agent-port", str(free_port())]
        self.log = log
        # Up to twice more after a start that fails: on a loaded 2-core machine a node's registration with
        # the GCS can miss Ray's own timeouts ("registration may not be complete before the timeout"; "The
        # current node timed out during startup", after a fixed 30 s in ray._private.node.Node), which is
        # Ray's start-up, not what these tests check. Under three whole suite runs at once on 2 cores (a load
        # average near 40), the head missed it twice in a row.
        for attempt in (1, 2, 3):
            self.proc = subprocess.Popen([RAY_CLI, "start", "--block", *args], env=env,
                                         stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.monotonic() + 120
            while "Ray runtime started" not in log.read_text():
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            else:
                return
            failed = log.read_text()
            self.kill()
            if attempt == 3:
                raise RuntimeError(f"ray start failed:\n{failed}")

    def node_id(self, timeout: float = 60) -> str:
        """This node's Ray node id, as its raylet logged it (``Setting node ID node_id=…``)."""
        raylet = self.log.parent / "session_latest" / "logs" / "raylet.out"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if raylet.is_file():
                for line in raylet.read_text().splitlines():
                    if "Setting node ID node_id=" in line:
                        return line.rsplit("node_id=", 1)[1].strip()
            time.sleep(0.3)
        raise RuntimeError(f"no node id in {raylet}")

    def kill(self, sig=signal.SIGKILL) -> None:
        """Kill this node: the `ray start` process and every process under it.

        `ray start` ran in a session of its own, so its process group (id = its pid)
        holds exactly the Ray processes of this node: gcs/raylet/dashboard and workers.
        """
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                break
            self.proc.poll()
            time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster():
    """A head (1 CPU) and one worker node (1 CPU, resource worker_node) on free ports.

    The head's temp folder is ``<temp>/ray``, where ``ray start`` records the cluster's
    address (``ray_current_cluster``): a client with ``RAY_TMPDIR=<temp>`` finds it as
    ``auto`` (and not another Ray of this machine).
    """
    temp = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))  # short: Ray's socket paths have a length limit
    # Token auth, as a real cluster should run: the nodes and every client read the token
    # from RAY_AUTH_TOKEN_PATH; Ray sends it only with RAY_AUTH_MODE=token.
    token = temp / "auth_token"
    token.write_text(secrets.token_hex(32))
    # The nodes run a job's `python` from PATH: the tests' own Python first, venv activated or not.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    port, dash = free_port(), free_port()
    (temp / "ray").mkdir()
    head = RayNode(["--head", "--port", str(port), "--dashboard-host",
                    "127.0.0.1", "--dashboard-port", str(dash), "--num-cpus", "1", "--temp-dir", str(temp / "ray"),
                    "--disable-usage-stats"], temp / "ray" / "head.log", env)
    address = f"127.0.0.1:{port}"
    nodes = [head]
    try:
        nodes.append(add_worker(address, temp, env))
        yield {"address": address, "dashboard": f"http://127.0.0.1:{dash}", "temp": temp, "env": env,
               "head": head, "worker": nodes[1]}
    finally:
        for node in reversed(nodes):
            node.kill()
        shutil.rmtree(temp, ignore_errors=True)


def add_worker(address: str, temp: Path, env: dict) -> RayNode:
    # A temp folder of its own: nodes that share one on a machine also share the unpacked
    # runtime_env packages, and one node's agent deletes the folder another's job runs in.
    own = Path(tempfile.mkdtemp(prefix="rw", dir=temp))
    return RayNode(["--address", address, "--num-cpus", "1", "--resources", '{"worker_node": 1}',
                    "--temp-dir", str(own), "--disable-usage-stats"], own / "node.log", env)


def client_env(cluster) -> dict:
    """A client's environment: the token's path, and no RAY_AUTH_MODE (tuner sets it)."""
    return {"RAY_AUTH_TOKEN_PATH": cluster["env"]["RAY_AUTH_TOKEN_PATH"], "RAY_AUTH_MODE": ""}


def write_spec(folder: Path, name: str, num_samples=4, epochs=2, sleep=1.0) -> Path:
    spec = folder / f"{name}.yaml"
    spec.write_text(SPEC.format(name=name, num_samples=num_samples, epochs=epochs, sleep=sleep))
    return spec


def test_run_with_address_uses_both_nodes(cluster, tmp_path, run_cli):
    """The trials meet on both nodes before they train (tests.trainables:where with meet_dir): the
    run shows that tuner reaches the worker node, not how fast a cold node starts its worker."""
    spec = write_spec(tmp_path, "on-cluster")
    spec.write_text(spec.read_text().replace("  epochs:", f"  meet_dir: {tmp_path / 'met'}\n  meet_nodes: 2\n  epochs:"))
    env = client_env(cluster)
    plan = run_cli("validate", spec, "--address", cluster["address"], env=env)
    assert plan.returncode == 0, plan.stderr
    assert f"cluster:    2 CPU, 0 GPU on the Ray cluster at {cluster['address']} (2 nodes)" in plan.stdout
    assert "fit:        2 trials at a time" in plan.stdout
    # 2 CPUs in all, but one trial's actor must live on one node: refused, not queued forever.
    big = run_cli("validate", spec, "--address", cluster["address"], "--set", "resources.cpu=2", env=env)
    assert big.returncode == 2
    assert ("resources.cpu: one trial asks for 2 CPU, 0 GPU on one node, but no node of the Ray cluster at "
            f"{cluster['address']} (2 nodes) can hold it (the largest has 1 CPU, 0 GPU; 2 CPU, 0 GPU in all)") \
        in big.stderr
    refused = run_cli("run", spec, "--address", cluster["address"], "--num-cpus", "2", env=env)
    assert refused.returncode == 2 and "drop --num-cpus" in refused.stderr
    proc = run_cli("run", spec, "--address", cluster["address"], "--storage", tmp_path / "runs", env=env)
    assert proc.returncode == 0, proc.stderr
    df = pd.read_csv(tmp_path / "runs" / "on-cluster" / "results.csv")
    assert len(df) == 4 and set(df["status"]) == {"TERMINATED"}
    assert df["node"].nunique() == 2, "trials ran on the head and on the worker node"


def _trial_nodes(exp: Path) -> set[str]:
    """The Ray node ids that the trials of an experiment reported, over all their results."""
    return {row["node"] for f in exp.glob("*/result.json") for row in _whole_rows(f)}


def test_ray_address_the_spec_and_auto_reach_the_cluster_in_their_order(cluster, tmp_path, run_cli):
    """--address > RAY_ADDRESS > ray.address in the spec, and each of them runs the trials on the cluster.

    In every run the addresses of lower rank name ports where nothing listens, so a run
    that took one of them could not end well; the trials report the node they ran on,
    which must be a node of the cluster (an embedded Ray would be a node of its own).
    """
    nodes = {cluster["head"].node_id(), cluster["worker"].node_id()}
    flag, from_env, in_spec = (f"127.0.0.1:{free_port()}" for _ in range(3))
    spec = write_spec(tmp_path, "addressed", num_samples=1, epochs=1, sleep=0.1)
    spec.write_text(spec.read_text() + f"ray: {{address: '{in_spec}'}}\n")
    env = {**client_env(cluster), "RAY_ADDRESS": ""}

    # Where the address came from, as the refusal of --num-cpus names it (before connecting).
    for extra_env, args, expected in [
        ({"RAY_ADDRESS": from_env}, ["--address", flag], f"the Ray cluster at {flag} (from --address)"),
        ({"RAY_ADDRESS": from_env}, [], f"the Ray cluster at {from_env} (from RAY_ADDRESS)"),
        ({}, [], f"the Ray cluster at {in_spec} (from ray.address in the spec)"),
    ]:
        refused = run_cli("run", spec, *args, "--num-cpus", "1", env={**env, **extra_env})
        assert refused.returncode == 2 and expected in refused.stderr, refused.stderr

    # RAY_ADDRESS over the spec's address.
    runs = tmp_path / "runs"
    proc = run_cli("run", spec, "--storage", runs, "--name", "by-env", env={**env, "RAY_ADDRESS": cluster["address"]})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The spec's address alone, through the Python API.
    on_cluster = spec.with_name("on-cluster.yaml")
    on_cluster.write_text(spec.read_text().replace(in_spec, cluster["address"]))
    code = "import sys; from tuner import tune_model; tune_model(sys.argv[1], storage=sys.argv[2], name='by-spec')"
    proc = subprocess.run([sys.executable, "-c", code, str(on_cluster), str(runs)], cwd=ROOT, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # --address auto over RAY_ADDRESS: the cluster that `ray start` recorded under RAY_TMPDIR.
    proc = run_cli("run", spec, "--address", "auto", "--storage", runs, "--name", "by-auto",
                   env={**env, "RAY_ADDRESS": from_env, "RAY_TMPDIR": str(cluster["temp"])})
    assert proc.returncode == 0, proc.stdout + proc.stderr

    for name in ("by-env", "by-spec", "by-auto"):
        df = pd.read_csv(runs / name / "results.csv")
        assert len(df) == 1 and set(df["status"]) == {"TERMINATED"}, name
        ran_on = _trial_nodes(runs / name)
        assert ran_on and ran_on <= nodes, f"{name}: the trials ran on {ran_on}, not on the cluster's nodes {nodes}"


def _jobs_api(cluster, expression: str, *args: str):
    """What ``expression`` gives (JSON) on ``client``, a ``JobSubmissionClient`` of the cluster's dashboard (Ray's
    Jobs API, in a subprocess with the cluster's token); ``args`` reach it as ``argv``."""
    code = ("import json, sys; from ray.job_submission import JobSubmissionClient; "
            f"client, argv = JobSubmissionClient(sys.argv[1]), sys.argv[2:]; print(json.dumps({expression}))")
    proc = subprocess.run([sys.executable, "-c", code, cluster["dashboard"], *args], env=cluster["env"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _job_ids(cluster) -> set[str]:
    """The submission ids of every job the cluster knows."""
    return set(_jobs_api(cluster, "[job.submission_id for job in client.list_jobs()]"))


def test_submit_refuses_a_job_that_would_fail_and_submits_nothing(cluster, tmp_path, run_cli):
    env = client_env(cluster)
    dash = cluster["dashboard"]
    good = ROOT / "tests" / "specs" / "cluster_steady.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text().replace("num_samples: 2", "num_samples: 0"))
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "train.py").write_text("def train(config):\n    pass\n")
    beside = tmp_path / "beside.yaml"  # its trainable lies beside it, outside the working dir
    beside.write_text(good.read_text().replace("tests.trainables:where", "helpers/train.py:train"))
    shared = ["--storage", str(tmp_path / "shared")]
    before = _job_ids(cluster)
    cases = [
        (["submit", bad, "--address", dash, *shared], f"tuner: error: {bad}:6:14: num_samples:"),
        (["submit", good, "--address", dash, *shared, "--set", "num_samples=0"], "num_samples"),
        (["submit", good, "--address", dash, *shared, "--num-samples", "0"],
         "tuner: error: --num-samples 0: num_samples: must be greater than or equal to 1"),
        (["submit", good, "--address", dash, *shared, "--name", "a/b"], "tuner: error: --name a/b: name: name may hold"),
        (["submit", good, "--address", dash, "--storage", "runs"], "storage 'runs' is relative"),
        (["submit", beside, "--address", dash, "--working-dir", work, *shared],
         f"the file 'helpers/train.py' is not in the working directory {work}"),
        (["submit", good, "--address", cluster["address"], *shared],
         "the Ray Jobs API needs the head's dashboard address, --address http://HEAD:8265"),
        (["submit", good, "--address", f"http://127.0.0.1:{free_port()}", *shared],
         "cannot reach the Ray Jobs API at http://127.0.0.1:"),
        (["submit", good, "--address", dash, *shared, "--num-cpus", "2"], "No such option '--num-cpus'"),
    ]
    for args, expected in cases:
        proc = run_cli(*args, env=env)
        assert proc.returncode == 2 and expected in proc.stderr, (args, proc.stdout + proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
    assert _job_ids(cluster) == before, "a refused submit sent a job"


def _tiny_wheel(folder: Path) -> Path:
    """A pure-Python wheel of one module, ``tuner_pip_probe`` (``VALUE = 42``), built here: nothing to download."""
    import base64
    import hashlib
    import zipfile

    name, version = "tuner_pip_probe", "0.1"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": "VALUE = 42\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(text.encode())}" for path, text in files.items()]
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


GATED_TRAINABLE = """\
import os
import time

import tuner_pip_probe  # installed by the job's --pip only

from tuner import trial


def train(config):
    for _ in range(3000):  # until the test opens the gate (10 minutes at most)
        if os.path.exists(config["gate"]):
            break
        time.sleep(0.2)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the job's copy of the working dir
    trial.report({"loss": config["x"], "probe": tuner_pip_probe.VALUE,
                  "kept": os.path.exists(os.path.join(here, "notes.txt")),
                  "ignored_shipped": os.path.exists(os.path.join(here, "ignored.txt"))})
"""

OUTSIDE_SPEC = """\
name: outside
trainable: trainables/gated.py:train   # relative to the working directory
metric: loss
mode: min
num_samples: 1
param_space: {x: 0.5}
resources: {cpu: 1}
reporting: {cli: false}
"""


def test_submit_follow_pip_and_a_spec_from_outside_the_working_dir(cluster, tmp_path, run_cli):
    """One job shows four things of `tuner submit`.

    * A spec outside the working directory travels with the job, and its relative trainable
      path resolves against the working directory there.
    * ``--pip`` reaches the job's runtime_env: the job's driver and its trial import a
      package that only a local wheel given to ``--pip`` holds.
    * The working directory travels less what its ``.gitignore`` lists. It is the default one, the current
      folder (no ``--working-dir``: the command runs in it).
    * ``--follow`` streams: the job's own first line arrives while the job is RUNNING
      (its trial waits for a gate file that the test creates only then), and the
      command ends with the job, on its final status.
    """
    env = client_env(cluster)
    work = tmp_path / "work"
    (work / "trainables").mkdir(parents=True)
    (work / "trainables" / "gated.py").write_text(GATED_TRAINABLE)
    (work / ".gitignore").write_text("ignored.txt\n")  # README: the working directory, less what .gitignore lists
    (work / "ignored.txt").write_text("stays behind")
    (work / "notes.txt").write_text("travels")
    (tmp_path / "specs").mkdir()
    spec = tmp_path / "specs" / "outside.yaml"
    spec.write_text(OUTSIDE_SPEC)
    wheel = _tiny_wheel(tmp_path)
    gate = tmp_path / "gate"
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "submit", str(spec), "--address", cluster["dashboard"],
                             "--pip", str(wheel), "--storage", str(tmp_path / "shared"),
                             "--set", f"param_space.gate={gate}", "--follow"], cwd=work, env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watchdog = threading.Timer(600, proc.kill)
    watchdog.start()
    lines, job_id, status_while_open = [], None, None
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("Submitted job "):
                job_id = line.split()[2]
            if line.startswith("Experiment ") and status_while_open is None:  # the job's first line
                status = run_cli("jobs", "status", job_id, "--address", cluster["dashboard"], env=env)
                status_while_open = status.stdout.strip()
                gate.touch()
        proc.wait()
    finally:
        watchdog.cancel()
        gate.touch()  # never leave the job waiting
        if proc.poll() is None:
            proc.kill()
        if job_id and proc.returncode != 0:
            run_cli("jobs", "stop", job_id, "--address", cluster["dashboard"], env=env)
    out = "\n".join(lines)
    assert proc.returncode == 0, out
    assert status_while_open.startswith(f"{job_id}: RUNNING"), f"the job's output did not stream while it ran:\n{out}"
    assert lines[-1] == f"Job {job_id}: SUCCEEDED", out
    first = next(i for i, line in enumerate(lines) if line.startswith("Experiment "))
    assert lines[first].startswith(f"Experiment outside: {tmp_path / 'shared' / 'outside'}"), out
    assert any(line.startswith("Best trial") for line in lines[first:]), out
    df = pd.read_csv(tmp_path / "shared" / "outside" / "results.csv")
    assert list(df["status"]) == ["TERMINATED"] and list(df["probe"]) == [42], df.to_dict("records")
    assert (list(df["kept"]), list(df["ignored_shipped"])) == ([True], [False]), "a .gitignore'd file stays behind"


HELD_TRAINABLE = """\
import os
import time


def train(config):
    with open(config["pid_file"], "w") as f:
        f.write(str(os.getpid()))
    for _ in range(3000):  # 10 minutes at most: the test stops the job long before
        time.sleep(0.2)
"""


def test_jobs_stop_ends_the_job_and_its_trial(cluster, tmp_path, run_cli):
    """`tuner jobs stop` on a running job: it prints "stop requested", the job ends STOPPED, and its trial's
    process is gone (the trial records its pid, then waits 10 minutes unless stopped)."""
    env = client_env(cluster)
    work = tmp_path / "work"
    work.mkdir()
    (work / "held.py").write_text(HELD_TRAINABLE)
    pid_file = tmp_path / "trial.pid"
    spec = work / "held.yaml"
    spec.write_text(f"name: held\ntrainable: held.py:train\nmetric: loss\nmode: min\nnum_samples: 1\n"
                    f"param_space: {{pid_file: {pid_file}}}\nresources: {{cpu: 1}}\nreporting: {{cli: false}}\n")
    proc = run_cli("submit", spec, "--address", cluster["dashboard"], "--storage", tmp_path / "shared",
                   env=env, cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job_id = proc.stdout.split()[2]

    def jobs(command: str, *args, timeout: float = 900):
        return run_cli("jobs", command, job_id, "--address", cluster["dashboard"], *args, env=env, timeout=timeout)

    stop = None
    try:
        for i in range(3000):  # the gate: the trial is running (10 minutes at most)
            if pid_file.is_file() and pid_file.read_text():
                break
            if i % 50 == 49:  # every 10 s: a job that ended without its trial fails the test now
                status = jobs("status").stdout
                assert status.startswith((f"{job_id}: RUNNING", f"{job_id}: PENDING")), jobs("logs").stdout
            time.sleep(0.2)
        pid = int(pid_file.read_text())
        stop = jobs("stop")
        assert stop.returncode == 0 and stop.stdout == f"{job_id}: stop requested\n", stop.stdout + stop.stderr
    finally:
        if stop is None:
            jobs("stop")  # never leave the job running
    jobs("logs", "--follow", timeout=120)  # ends with the job (2 minutes at most)
    status = jobs("status").stdout
    assert status.startswith(f"{job_id}: STOPPED"), status
    for _ in range(600):  # the trial's process ends with the job (2 minutes at most)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the stopped job's trial (pid {pid}) still runs")


def test_submit_wait_succeeds_and_writes_the_summary_to_storage(cluster, tmp_path, run_cli):
    """`--wait` ends with the job's SUCCEEDED. Run from another folder, `--working-dir` sends the repository,
    whose `tests.trainables` the job's trials import (the current folder has none)."""
    specs = ROOT / "tests" / "specs"
    storage = f"file://{tmp_path / 'shared'}"
    proc = run_cli("submit", specs / "cluster_steady.yaml", "--address", cluster["dashboard"],
                   "--working-dir", ROOT, "--storage", storage, "--name", "submitted", "--wait", timeout=400,
                   env=client_env(cluster), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job_id = proc.stdout.split()[2]
    assert proc.stdout.splitlines()[:4] == [
        f"Submitted job {job_id} to {cluster['dashboard']}",
        f"  follow: tuner jobs logs {job_id} --address {cluster['dashboard']} --follow",
        f"  status: tuner jobs status {job_id} --address {cluster['dashboard']}",
        f"  stop:   tuner jobs stop {job_id} --address {cluster['dashboard']}"]
    assert f"Job {job_id}: SUCCEEDED" in proc.stdout
    assert (tmp_path / "shared" / "submitted" / "summary.json").is_file()
    status = run_cli("jobs", "status", job_id, "--address", cluster["dashboard"], env=client_env(cluster))
    assert status.stdout.startswith(f"{job_id}: SUCCEEDED")
    logs = run_cli("jobs", "logs", job_id, "--address", cluster["dashboard"], env=client_env(cluster))
    assert "Best trial" in logs.stdout


def test_submit_wait_exits_1_when_the_job_fails_and_the_driver_ran_on_the_head(cluster, tmp_path, run_cli):
    """README: `--wait` exits 0 only if the job SUCCEEDED; the job's driver runs on the head node. A job whose
    trial fails (tests.trainables:typo) ends FAILED, and `tuner submit --wait` exits 1; Ray's record of the
    job names the head as its driver's node."""
    specs = ROOT / "tests" / "specs"
    proc = run_cli("submit", specs / "cluster_steady.yaml", "--address", cluster["dashboard"], "--working-dir", ROOT,
                   "--storage", tmp_path / "shared", "--name", "failing", "--set", "trainable=tests.trainables:typo",
                   "--num-samples", "1", "--wait", timeout=400, env=client_env(cluster))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    job_id = proc.stdout.split()[2]
    assert f"Job {job_id}: FAILED" in proc.stdout
    driver_node = _jobs_api(cluster, "client.get_job_info(argv[0]).driver_node_id", job_id)
    assert driver_node == cluster["head"].node_id() != cluster["worker"].node_id()


def test_plain_ray_job_submit_runs_tuner(cluster, tmp_path):
    env = cluster["env"]  # the Ray CLI sends the token with RAY_AUTH_MODE=token
    proc = subprocess.run([RAY_CLI, "job", "submit", "--address", cluster["dashboard"],
                           "--working-dir", str(ROOT), "--entrypoint-resources",
                           '{"node:__internal_head__": 0.001}', "--", "python", "-m", "tuner", "run",
                           "tests/specs/cluster_steady.yaml", "--storage", str(tmp_path / "shared"),
                           "--name", "plain"], env=env, capture_output=True, text=True, timeout=400, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "succeeded" in proc.stdout + proc.stderr
    assert (tmp_path / "shared" / "plain" / "summary.json").is_file()


def _whole_rows(path: Path) -> list[dict]:
    """The results in a trial's result.json, without a last line still being written."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def test_losing_a_worker_node_mid_run_loses_no_trial(cluster, tmp_path, run_cli):
    """A node dies under a trial mid-way: the trial goes on elsewhere from its checkpoint.

    The trial on the extra node stops for good after 2 epochs (tests.trainables:
    held_on_node_gated), so the kill always finds it mid-way, however slow the machine; the
    trials on the other nodes wait at their epoch 2 until it is held, so they cannot end and
    free an actor that Ray would reuse for the third trial before the cold extra node has
    started its own (seen under load with 2 s epochs, and on an idle machine with 0.5 s ones,
    before the gate: the extra node got no trial). Before
    the kill the test also waits until Ray has copied those 2 results into the
    experiment's ``result.json``: Ray writes results in the driver's staging folder and
    copies it to the storage every few seconds, and a trial restarted from a checkpoint
    starts again from the storage's copy (``JsonLoggerCallback._restore_from_remote``),
    so results not yet copied would vanish from the trial's record. (Before the hold, the
    test killed the node when the storage's copy showed the trial mid-way; under load that
    copy lagged the trial by several epochs, the trial had already finished on the extra
    node, and nothing moved.)
    """
    extra = add_worker(cluster["address"], cluster["temp"], cluster["env"])
    extra_id = extra.node_id()
    # Short epochs: the gate of held_on_node_gated, not the epochs' length, keeps the trials on the
    # warm nodes running until the extra node's trial is held.
    spec = write_spec(tmp_path, "node-loss", num_samples=3, epochs=6, sleep=0.5)
    spec.write_text(spec.read_text().replace("tests.trainables:where", "tests.trainables:held_on_node_gated"))
    # One trial a node: the run starts only once the cluster counts the extra node (under load
    # it joined after the trials were placed, and all three ran on the other two nodes).
    deadline = time.monotonic() + 120  # a hang guard, not a timing check
    while "(3 nodes)" not in (plan := run_cli("validate", spec, "--address", cluster["address"],
                                              env=client_env(cluster))).stdout:
        assert time.monotonic() < deadline, f"the extra node {extra_id} never joined: {plan.stdout}{plan.stderr}"
        time.sleep(1)
    held = tmp_path / "held"
    exp = tmp_path / "runs" / "node-loss"
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(spec), "--address", cluster["address"],
                             "--storage", str(tmp_path / "runs"), "--set", f"param_space.hold_node={extra_id}",
                             "--set", "param_space.hold_at=2", "--set", f"param_space.hold_file={held}"],
                            cwd=ROOT, env={**os.environ, **client_env(cluster)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300  # a hang guard, not a timing check
        while not (held.is_file() and any(len([r for r in _whole_rows(f) if r["node"] == extra_id]) == 2
                                           for f in exp.glob("*/result.json"))):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the trial on the extra node {extra_id} was not seen held after 2 epochs "
                                     f"(held file: {held.is_file()})")
            time.sleep(0.2)
    except BaseException:
        proc.kill()
        out, err = proc.communicate()
        print(out, err)
        extra.kill()
        raise
    extra.kill()  # the node dies: its raylet, workers and the trial on it
    out, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, out + err
    df = pd.read_csv(exp / "results.csv")
    assert len(df) == 3 and set(df["status"]) == {"TERMINATED"}
    assert (df["training_iteration"] == 6).all() and (df["epoch"] == 5).all()
    rows = {f.parent.name: [(r["epoch"], r["node"]) for r in _whole_rows(f)] for f in exp.glob("*/result.json")}
    moved = {name: trial for name, trial in rows.items() if any(node == extra_id for _, node in trial)}
    assert len(moved) == 1, f"one trial ran on the extra node {extra_id}: {rows}"
    (name, trial), = moved.items()
    assert [epoch for epoch, _ in trial] == list(range(6)), f"{name} lost or repeated epochs: {trial}"
    assert [node == extra_id for _, node in trial] == [True, True, False, False, False, False], \
        f"{name} ran epochs 0-1 on the lost node and went on elsewhere from its checkpoint: {trial}"
    for name, trial in rows.items():
        assert [epoch for epoch, _ in trial] == list(range(6)), f"{name}: {trial}"


WANDB_KEY_PROBE = """\
import json, sys
from tuner.run.cluster import ray_session
import tuner.run.loggers as reporting

address = sys.argv[1] if len(sys.argv) > 1 else None
with ray_session(num_cpus=None if address else 1, address=address):
    cls = reporting.WandbCallback
    print("ENVS " + json.dumps([cls(project="p", mode=mode).actor_env() for mode in ("online", "offline", "disabled")]))
"""


def test_the_wandb_key_travels_only_for_an_online_run_on_a_cluster_tuner_did_not_start(cluster, tmp_path):
    """README: "tuner passes the W&B key to Ray only for an online run on a cluster it did not start". The
    logging actor's runtime_env (WandbCallback.actor_env) on this cluster: the key for mode online, none
    offline or disabled; on a local Ray that tuner starts (whose workers inherit the environment): none."""
    pytest.importorskip("wandb")
    key = "k" * 40
    probe = tmp_path / "probe.py"
    probe.write_text(WANDB_KEY_PROBE)
    env = {**os.environ, **client_env(cluster), "WANDB_API_KEY": key, "PYTHONPATH": str(ROOT)}
    seen = {}
    for where, args in (("cluster", [cluster["address"]]), ("local", [])):
        proc = subprocess.run([sys.executable, str(probe), *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        # The probe's own line: Ray may print to the driver's stdout too (under load, once, a paragraph on the
        # raylet's "lagging heartbeats" after it).
        (line,) = [line for line in proc.stdout.splitlines() if line.startswith("ENVS ")]
        seen[where] = json.loads(line[len("ENVS "):])
    assert seen == {"cluster": [{"WANDB_API_KEY": key}, {}, {}], "local": [{}, {}, {}]}


MEETING_SCRIPT = """\
import json, os, sys, time

meet, x = sys.argv[1], sys.argv[2]
os.makedirs(meet, exist_ok=True)
open(os.path.join(meet, os.environ["TUNER_TRIAL_ID"]), "w").close()
for _ in range(3000):  # until both trials run at once (10 minutes at most): one on each node
    if len(os.listdir(meet)) >= 2:
        break
    time.sleep(0.2)
print(json.dumps({"loss": float(x), "cwd": os.getcwd(), "here": os.path.isfile("meet.py")}), flush=True)
"""

COMMAND_SPEC = """\
name: command-job
trainable:
  command: [python, meet.py, "{meet}", "{x}"]
metric: loss
mode: min
num_samples: 2
param_space:
  x: {type: uniform, low: 0, high: 1}
  meet: MEET
resources: {cpu: 1}
reporting: {cli: false}
"""


def test_submit_a_command_trial_runs_the_script_from_each_nodes_copy_of_the_working_dir(cluster, tmp_path, run_cli):
    """A command trial's script travels with the job's working directory: the two trials meet, one on each node,
    and each runs the script in its own node's unpacked copy (two different folders, each holding meet.py). A spec
    outside the working directory, or a script outside it, is refused before anything is sent."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "meet.py").write_text(MEETING_SCRIPT)
    spec = work / "spec.yaml"
    spec.write_text(COMMAND_SPEC.replace("MEET", str(tmp_path / "met")))
    outside = tmp_path / "outside.yaml"
    outside.write_text(spec.read_text())
    (tmp_path / "beside.py").write_text(MEETING_SCRIPT)
    script_outside = work / "script_outside.yaml"
    script_outside.write_text(spec.read_text().replace("python, meet.py", "python, ../beside.py"))
    env, dash = client_env(cluster), cluster["dashboard"]
    shared = ["--storage", str(tmp_path / "shared")]
    before = _job_ids(cluster)
    for args, expected in [
        ((outside, "--working-dir", work), f"the spec lies outside the working directory {work}"),
        ((script_outside, "--working-dir", work), f"the command's script {tmp_path / 'beside.py'} is outside"),
    ]:
        proc = run_cli("submit", *args, "--address", dash, *shared, env=env)
        assert proc.returncode == 2 and expected in proc.stderr, proc.stdout + proc.stderr
    assert _job_ids(cluster) == before, "a refused submit sent a job"
    proc = run_cli("submit", spec, "--address", dash, "--working-dir", work, *shared, "--wait", timeout=400,
                   env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    df = pd.read_csv(tmp_path / "shared" / "command-job" / "results.csv")
    assert list(df["status"]) == ["TERMINATED"] * 2
    rows = [row for f in (tmp_path / "shared" / "command-job").glob("*/result.json") for row in _whole_rows(f)]
    assert len({row["cwd"] for row in rows}) == 2 and all(row["here"] for row in rows), rows
