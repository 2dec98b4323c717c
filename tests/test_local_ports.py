"""The TCP ports a local run opens, as the README's security paragraph names them.

An embedded Ray is started the way ``tuner run`` starts it (``tuner.run.cluster.ray_session``,
in tests/local_ray_probe.py), and every listening socket of its processes is read from
``/proc``: each must be one the README names, bound where the README says. Then the
dashboard agent's HTTP API (on the machine's address) is asked, without the token, to
list jobs: it must answer 401.
"""

import json
import os
import secrets
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.paths import ROOT

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads sockets from Linux's /proc")

ALL = "all interfaces"
#: What the README's security paragraph says of each port: where it listens.
README_PORTS = {
    "GCS": ALL,
    "raylet": ALL,
    "object manager": ALL,
    "dashboard agent gRPC": ALL,
    "dashboard metrics": ALL,
    "autoscaler metrics": ALL,
    "worker gRPC": ALL,
    "runtime env agent": "the machine's address",
    "dashboard agent HTTP": "the machine's address and 127.0.0.1",
}
#: Ray's fixed port of the dashboard agent's HTTP API, named in the README.
AGENT_HTTP_PORT = 52365
#: Ray's fixed metrics ports, named in the README: (environment variable, default, what).
#: The dashboard process runs even without a dashboard (for Ray's usage stats).
METRICS_PORTS = [("DASHBOARD_METRIC_PORT", 44227, "dashboard metrics", "ray.dashboard.consts"),
                 ("AUTOSCALER_METRIC_PORT", 44217, "autoscaler metrics", "ray.autoscaler._private.constants")]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _process_tree(root: int) -> dict[int, str]:
    """``{pid: command line}`` of ``root`` and every process under it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        try:
            tree[pid] = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ").strip()
        except OSError:
            continue
        todo += children.get(pid, [])
    return tree


def _listening(pids) -> list[tuple[str, int, int]]:
    """``(address, port, pid)`` of every listening TCP socket the processes hold."""
    owner = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:  # a busy process (the GCS) closes connections' fds while they are read: skip only that fd
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                owner[link[8:-1]] = pid
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in owner:  # 0A: LISTEN
                continue
            hex_ip, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_ip)
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # host-order words
            found.append((socket.inet_ntop(family, raw), int(hex_port, 16), owner[fields[9]]))
    return found


def _status(url: str, token: str | None = None, data: bytes | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def test_a_local_run_listens_only_where_the_readme_says_and_the_agent_wants_the_token(tmp_path):
    token = secrets.token_hex(32)
    (tmp_path / "auth_token").write_text(token)
    # Ports of this Ray's own for Ray's fixed ones (another Ray of the machine may hold those),
    # and an empty RAY_AUTH_MODE, which Ray alone takes as "no authentication".
    agent_port = _free_port()
    metrics = {variable: _free_port() for variable, *_ in METRICS_PORTS}
    env = {**os.environ, "RAY_AUTH_TOKEN_PATH": str(tmp_path / "auth_token"), "RAY_ADDRESS": "",
           "RAY_AUTH_MODE": "", **{variable: str(port) for variable, port in metrics.items()}}
    probe = subprocess.Popen([sys.executable, "-m", "tests.local_ray_probe", str(agent_port)], cwd=ROOT, env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = probe.stdout.readline()
        assert line, "the probe did not start Ray"
        info = json.loads(line)
        node = info["node"]
        ip = node["NodeManagerAddress"]
        assert node["DashboardAgentListenPort"] == agent_port
        kinds = {int(info["gcs"].rsplit(":", 1)[1]): "GCS", node["NodeManagerPort"]: "raylet",
                 node["ObjectManagerPort"]: "object manager", node["MetricsAgentPort"]: "dashboard agent gRPC",
                 node["MetricsExportPort"]: "metrics", node["RuntimeEnvAgentPort"]: "runtime env agent",
                 agent_port: "dashboard agent HTTP",
                 **{metrics[variable]: what for variable, _, what, _ in METRICS_PORTS}}
        tree = _process_tree(info["pid"])
        assert info["worker_pid"] in tree
        seen: dict[str, set[str]] = {}
        for address, port, pid in _listening(tree):
            kind = kinds.get(port)
            if kind is None and (pid == info["pid"] or tree[pid].startswith("ray::")):
                kind = "worker gRPC"  # the driver's and each worker's core worker server
            assert kind is not None, f"{tree[pid]!r} listens on {address}:{port}, which the README does not name"
            seen.setdefault(kind, set()).add(address)
        where = {kind: ALL if addresses <= {"0.0.0.0", "::"} else
                 "the machine's address" if addresses == {ip} else
                 "the machine's address and 127.0.0.1" if addresses == {ip, "127.0.0.1"} else str(addresses)
                 for kind, addresses in seen.items()}
        assert where == README_PORTS

        # The agent's HTTP API (it runs jobs) and the runtime env agent want the token.
        jobs = f"http://{ip}:{agent_port}/api/job_agent/jobs/"
        assert _status(jobs) == 401
        assert _status(jobs, token) == 405, "with the token the agent gets past authentication (GET is not allowed)"
        assert _status(f"http://{ip}:{node['RuntimeEnvAgentPort']}/get_or_create_runtime_env", data=b"{}") == 401
        # The metrics pages do not (the README says so). The dashboard agent's is gone: tuner's local Ray collects no
        # metrics (LOCAL_RAY_SYSTEM_CONFIG), so nothing listens at the node's metrics export port.
        with pytest.raises(OSError):
            socket.create_connection((ip, node["MetricsExportPort"]), timeout=5).close()
        for port in metrics.values():
            assert _status(f"http://{ip}:{port}/metrics") == 200
    finally:
        probe.stdin.close()
        try:
            probe.wait(timeout=60)
        except subprocess.TimeoutExpired:
            probe.kill()


def test_rays_fixed_ports_are_the_ones_the_readme_names():
    import inspect

    from ray._private.parameter import RayParams

    readme = (ROOT / "docs" / "guides" / "failures-and-resume.md").read_text()  # its "Security" section
    assert inspect.signature(RayParams.__init__).parameters["dashboard_agent_listen_port"].default == AGENT_HTTP_PORT
    assert f"at port {AGENT_HTTP_PORT}" in readme
    for variable, default, _, module in METRICS_PORTS:
        code = f"import {module} as m; print(m.{variable})"
        ray_default = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                                     env={k: v for k, v in os.environ.items() if k != variable})
        assert ray_default.stdout.split() == [str(default)], ray_default.stderr
        assert f"{default} (`{variable}`)" in readme


def test_an_explicit_ray_auth_mode_is_left_alone(tmp_path, monkeypatch):
    """README: `RAY_AUTH_MODE=disabled` turns authentication off. tuner turns token mode on only where the mode is
    unset or empty and a token is at hand; `disabled` (any case) stays as set, with a token file there, and is
    what Ray then reads (Ray's own: no token is sent). No Ray is started here."""
    from tuner.run.cluster import use_token_if_available

    (tmp_path / "auth_token").write_text("0123abcd")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "auth_token"))
    for mode in ("disabled", "DISABLED"):
        monkeypatch.setenv("RAY_AUTH_MODE", mode)
        assert use_token_if_available() is False
        assert os.environ["RAY_AUTH_MODE"] == mode
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert use_token_if_available() is True and os.environ["RAY_AUTH_MODE"] == "token"
    # Unset, with no token anywhere: nothing to send, and the mode stays unset.
    monkeypatch.delenv("RAY_AUTH_MODE")
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert use_token_if_available() is False and "RAY_AUTH_MODE" not in os.environ
