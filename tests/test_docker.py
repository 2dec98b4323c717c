"""Static checks of docker/: the image, the compose cluster and the KubeRay manifests.

Docker and Kubernetes cannot run here or in CI, so these tests read the files: the
Dockerfile's ARG/FROM/COPY/USER lines against pyproject.toml and constraints.txt, and the
compose file and the k8s manifests as YAML. The Python the files run is exercised too: the
build's version check is compiled, the compose health checks run against a fake Ray head,
and the installed Ray is asked which token it sends with the compose file's environment.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.fixtures.paths import ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

DOCKER = ROOT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
COMPOSE = DOCKER / "docker-compose.yml"
K8S = DOCKER / "k8s"
MAIN_SPEC = "search_spaces/mnist_asha.yaml"
TESTED_PYTHON = "3.11"  # the Python the project is tested with (CI and developers' machines)
APP_DIR = "/app"  # where the image keeps its copy of the project (WORKDIR)


# ---------------------------------------------------------------- helpers


def _constraints() -> dict[str, str]:
    """Read the exact pins of constraints.txt.

    Returns:
        Package name (lower case) -> pinned version, for every ``name==version`` line.
    """
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"constraints.txt should pin exactly: {line}"
            pins[req.name.lower()] = spec.version
    return pins


def _pyproject() -> dict:
    """Parse pyproject.toml.

    Returns:
        The TOML document as a dict.
    """
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _dependency(name: str) -> Requirement:
    """Find one of the project's dependencies in pyproject.toml.

    Args:
        name: The distribution name, e.g. ``ray``.

    Returns:
        The requirement as written in ``[project] dependencies``.
    """
    for dep in _pyproject()["project"]["dependencies"]:
        req = Requirement(dep)
        if req.name.lower() == name:
            return req
    raise AssertionError(f"pyproject.toml does not depend on {name}")


def _instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """Split a Dockerfile into its instructions, as Docker reads them.

    Comment lines are dropped (also inside a continued instruction) and lines ending
    with a backslash are joined to the next one.

    Args:
        path: The Dockerfile.

    Returns:
        ``(INSTRUCTION, arguments)`` pairs in order, the instruction upper-cased.
    """
    out, current = [], ""
    for raw in path.read_text().splitlines():
        if raw.strip().startswith("#") or (not raw.strip() and not current):
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1]
            continue
        current += raw
        keyword, _, args = current.strip().partition(" ")
        out.append((keyword.upper(), args.strip()))
        current = ""
    assert not current, "the Dockerfile ends inside a continued line"
    return out


def _arg_defaults() -> dict[str, str]:
    """Collect the default of every ``ARG NAME=default`` in the Dockerfile.

    Returns:
        Build argument -> its default value.
    """
    defaults = {}
    for keyword, args in _instructions():
        if keyword == "ARG" and "=" in args:
            name, _, value = args.partition("=")
            defaults[name.strip()] = value.strip().strip('"')
    return defaults


def _expand(text: str, values: dict[str, str]) -> str:
    """Replace ``${NAME}`` and ``$NAME`` with their values, as Docker and the shell do.

    Args:
        text: A Dockerfile argument string.
        values: Variable -> value.

    Returns:
        The text with every known variable replaced.
    """
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m[1] or m[2], m[0]), text)


def _copy_sources() -> list[str]:
    """List the build-context paths the Dockerfile copies (``COPY --from`` excluded).

    Returns:
        Each COPY source as written, in order.
    """
    sources = []
    for keyword, args in _instructions():
        if keyword not in ("COPY", "ADD"):
            continue
        parts = json.loads(args) if args.startswith("[") else shlex.split(args)
        flags = [p for p in parts if p.startswith("--")]
        if any(f.startswith("--from") for f in flags):
            continue
        paths = [p for p in parts if not p.startswith("--")]
        assert len(paths) >= 2, f"COPY needs a source and a destination: {args}"
        sources += paths[:-1]
    return sources


def _compose() -> dict:
    """Parse docker/docker-compose.yml (YAML merge keys resolved by safe_load).

    Returns:
        The compose document.
    """
    return yaml.safe_load(COMPOSE.read_text())


def _argv(service: dict) -> list[str]:
    """The command line a compose service runs: its entrypoint followed by its command.

    Args:
        service: One entry of the compose file's ``services``.

    Returns:
        The argv, each ``--flag=value`` left as one item.
    """
    def as_list(value) -> list[str]:
        if value is None:
            return []
        return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]

    return as_list(service.get("entrypoint")) + as_list(service.get("command"))


def _option(argv: list[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE`` in an argv.

    Args:
        argv: The command line.
        name: The option, with its dashes.

    Returns:
        The value, or None when the option is absent.
    """
    for i, item in enumerate(argv):
        if item == name and i + 1 < len(argv):
            return argv[i + 1]
        if item.startswith(name + "="):
            return item.split("=", 1)[1]
    return None


def _k8s_documents() -> list[tuple[Path, dict]]:
    """Load every YAML document under docker/k8s.

    Returns:
        ``(file, document)`` pairs; empty documents are skipped.
    """
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [(path, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def _k8s(kind: str) -> list[dict]:
    """The docker/k8s documents of one kind.

    Args:
        kind: ``RayJob``, ``RayCluster``, ``PersistentVolumeClaim`` ...

    Returns:
        The documents of that kind.
    """
    return [doc for _, doc in _k8s_documents() if doc.get("kind") == kind]


def _ray_cluster_specs() -> list[tuple[str, dict]]:
    """The RayCluster specs of the manifests: the RayJob's ``rayClusterSpec`` and each RayCluster's spec.

    Returns:
        ``(label, spec)`` pairs.
    """
    specs = [(f"RayJob {d['metadata']['name']}", d["spec"]["rayClusterSpec"]) for d in _k8s("RayJob")]
    specs += [(f"RayCluster {d['metadata']['name']}", d["spec"]) for d in _k8s("RayCluster")]
    return specs


def _pod_templates(cluster_spec: dict) -> list[dict]:
    """The pod specs of a RayCluster spec: the head's, then each worker group's.

    Args:
        cluster_spec: A ``RayClusterSpec``.

    Returns:
        The ``template.spec`` of every group.
    """
    groups = [cluster_spec["headGroupSpec"], *cluster_spec.get("workerGroupSpecs", [])]
    return [group["template"]["spec"] for group in groups]


def _gpu_limit(pod: dict) -> int:
    """The ``nvidia.com/gpu`` limit of a pod's first (Ray) container.

    Args:
        pod: A pod spec.

    Returns:
        The limit, 0 when there is none.
    """
    limits = pod["containers"][0].get("resources", {}).get("limits", {})
    return int(limits.get("nvidia.com/gpu", 0))


def _repo_path(spec_arg: str) -> Path:
    """Map a spec path as a container sees it (relative to /app, or under /app) to the repository.

    Args:
        spec_arg: The SPEC argument of ``tuner run``.

    Returns:
        The same file in this checkout.
    """
    prefix = APP_DIR + "/"
    return ROOT / (spec_arg[len(prefix):] if spec_arg.startswith(prefix) else spec_arg)


def _tuner_run_spec(argv: list[str]) -> str:
    """The SPEC of a ``tuner run SPEC ...`` or ``python -m tuner run SPEC ...`` command line.

    Args:
        argv: The command line.

    Returns:
        The SPEC argument.
    """
    for i in range(1, len(argv) - 1):
        if argv[i - 1] == "tuner" and argv[i] == "run":
            return argv[i + 1]
    raise AssertionError(f"no `tuner run SPEC` in {argv}")


# ---------------------------------------------------------------- Dockerfile


def test_image_python_is_the_tested_one_and_allowed_by_pyproject():
    defaults = _arg_defaults()
    froms = [args for keyword, args in _instructions() if keyword == "FROM"]
    assert len(froms) == 1, "one stage: the image that runs"
    image = _expand(froms[0].split()[0], defaults)
    match = re.fullmatch(r"python:(\d+\.\d+)(-slim\S*)?", image)
    assert match, f"the base image should be the official python image with a pinned minor version, not {image}"
    assert match[1] == TESTED_PYTHON
    assert Version(match[1] + ".0") in SpecifierSet(_pyproject()["project"]["requires-python"])


def test_image_ray_and_torch_versions_are_the_pinned_ones():
    defaults, pins = _arg_defaults(), _constraints()
    assert defaults["RAY_VERSION"] == pins["ray"]
    assert defaults["TORCH_VERSION"] == pins["torch"]
    # ... and those pins satisfy pyproject's ranges, so `pip install -c constraints.txt .` resolves.
    assert Version(pins["ray"]) in _dependency("ray").specifier
    assert Version(pins["torch"]) in _dependency("torch").specifier


def test_image_installs_through_constraints_with_torch_from_the_pytorch_index():
    defaults = _arg_defaults()
    runs = [args for keyword, args in _instructions() if keyword == "RUN"]
    pip_installs = [cmd for run in runs for cmd in run.split("&&") if "pip install" in cmd]
    assert pip_installs, "the image installs nothing"
    for cmd in pip_installs:
        assert "-c constraints.txt" in cmd, f"every install goes through constraints.txt: {cmd.strip()}"
    torch_install = [cmd for cmd in pip_installs if "download.pytorch.org" in cmd]
    assert len(torch_install) == 1 and re.search(r"\btorch\b", torch_install[0])
    index = re.search(r"--index-url\s+\"?(\S+?)\"?(\s|$)", torch_install[0])[1]
    assert _expand(index, defaults) == "https://download.pytorch.org/whl/cpu", "the default image is the CPU one"
    assert re.search(r"\bcu12\d\b", DOCKERFILE.read_text()), "the Dockerfile names the CUDA variant to build"
    assert any(re.search(r"pip install -c constraints.txt \.\s*$", cmd) for cmd in pip_installs), \
        "the project itself is installed as the README does: pip install -c constraints.txt ."
    # ray[default]: the dashboard and the Jobs API that `tuner submit` and the compose cluster use.
    assert "default" in _dependency("ray").extras


def test_image_build_check_is_valid_python():
    # The RUN that asserts the installed versions: compile it as the shell would hand it to python.
    runs = [args for keyword, args in _instructions() if keyword == "RUN" and "python -c" in args]
    assert runs, "the build checks the installed Python, Ray and torch versions"
    code = re.search(r'python -c "(.*)"', runs[-1])[1]
    values = {**_arg_defaults(), "PYTHON_VERSION": TESTED_PYTHON}
    code = _expand(code, values)
    compile(code, "Dockerfile version check", "exec")
    for name in ("PYTHON_VERSION", "RAY_VERSION", "TORCH_VERSION", "TORCH_VARIANT"):
        assert values[name] in code, f"the build check compares against {name}"


def test_every_copied_path_exists_and_reaches_the_build_context():
    sources = _copy_sources()
    assert sources
    for source in sources:
        assert source not in (".", "./", "*"), "COPY explicit paths, not the whole context"
        assert (ROOT / source).exists(), f"COPY {source}: no such path in the repository"
    ignore = [line.strip() for line in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*", "the ignore file keeps everything out, then lets the copied paths in"
    for source in sources:
        assert "!" + source.rstrip("/") in ignore, f"{source} is copied but left out of the build context"


def test_image_copies_what_the_package_build_needs():
    sources = {s.rstrip("/") for s in _copy_sources()}
    project = _pyproject()
    needed = {"pyproject.toml", "constraints.txt", project["project"]["readme"]}
    needed |= {pattern.rstrip("*") for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    needed |= {str(Path(MAIN_SPEC).parent), "examples"}  # the jobs' specs and train functions
    assert needed <= sources, f"not copied: {sorted(needed - sources)}"


def test_image_runs_as_a_non_root_user():
    users = [args for keyword, args in _instructions() if keyword == "USER"]
    assert users, "no USER: the container would run as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    assert user.isdigit(), "a numeric USER lets Kubernetes' runAsNonRoot verify it"
    created = re.search(r"useradd\b[^&]*--uid\s+(\d+)", DOCKERFILE.read_text())
    assert created and created[1] == user, "USER is the user the image creates"
    # The k8s pods run as that same uid.
    for label, spec in _ray_cluster_specs():
        for pod in _pod_templates(spec):
            context = pod.get("securityContext", {})
            assert context.get("runAsNonRoot") is True, label
            assert str(context.get("runAsUser")) == user, label


def test_image_entry_point_is_tuner():
    entrypoints = [args for keyword, args in _instructions() if keyword == "ENTRYPOINT"]
    assert entrypoints and json.loads(entrypoints[-1])[0] == "tuner"
    assert "tuner" in _pyproject()["project"]["scripts"]
    workdirs = [args for keyword, args in _instructions() if keyword == "WORKDIR"]
    assert workdirs[-1] == APP_DIR


# ---------------------------------------------------------------- docker-compose.yml


def _services() -> dict[str, dict]:
    """The compose file's services.

    Returns:
        Service name -> its definition.
    """
    return _compose()["services"]


def _head() -> tuple[str, dict]:
    """The one compose service that runs ``ray start --head``.

    Returns:
        ``(name, service)``.
    """
    heads = [(name, svc) for name, svc in _services().items() if "--head" in _argv(svc)]
    assert len(heads) == 1, "one Ray head"
    return heads[0]


def test_compose_head_starts_ray_with_the_dashboard_open_inside_the_network():
    _, head = _head()
    argv = _argv(head)
    assert argv[:2] == ["ray", "start"]
    assert _option(argv, "--port") == "6379"
    assert _option(argv, "--dashboard-host") == "0.0.0.0"
    assert _option(argv, "--num-cpus") is not None
    assert "--block" in argv


def test_compose_publishes_only_the_dashboard_and_only_on_loopback():
    published = []
    for name, svc in _services().items():
        for port in svc.get("ports", []):
            if isinstance(port, dict):
                host_ip, target = port.get("host_ip"), str(port["target"])
            else:
                parts = str(port).split(":")
                host_ip, target = (parts[0] if len(parts) == 3 else None), parts[-1]
            assert host_ip == "127.0.0.1", f"{name} publishes {port} beyond the host's loopback"
            published.append((name, target))
    assert published == [(_head()[0], "8265")]


def test_compose_has_two_workers_joining_the_head():
    head_name, _ = _head()
    workers = {name: svc for name, svc in _services().items()
               if _option(_argv(svc), "--address") == f"{head_name}:6379"}
    assert workers, "no service runs `ray start --address=<head>:6379`"
    count = 0
    for name, svc in workers.items():
        argv = _argv(svc)
        assert argv[:2] == ["ray", "start"] and "--block" in argv, name
        assert svc["depends_on"][head_name]["condition"] == "service_healthy", name
        count += int(svc.get("deploy", {}).get("replicas", 1))
    assert count == 2


def test_compose_submit_service_submits_the_main_spec_and_waits():
    head_name, head = _head()
    submits = [(name, svc) for name, svc in _services().items() if _argv(svc)[:2] == ["tuner", "submit"]]
    assert len(submits) == 1
    name, submit = submits[0]
    argv = _argv(submit)
    assert argv[2] == MAIN_SPEC and (ROOT / MAIN_SPEC).is_file()
    assert _option(argv, "--address") == f"http://{head_name}:8265"
    assert _option(argv, "--working-dir") == APP_DIR
    assert "--wait" in argv
    assert submit.get("restart", "no") == "no", "a one-shot service"
    assert submit["depends_on"][head_name]["condition"] == "service_healthy"
    assert head["healthcheck"]["test"], "the head needs a health check for service_healthy"


def test_compose_results_land_on_a_volume_every_node_shares():
    compose = _compose()
    head_name, _ = _head()
    submit = next(svc for svc in _services().values() if _argv(svc)[:2] == ["tuner", "submit"])
    storage = _option(_argv(submit), "--storage")
    assert storage and storage.startswith("/"), "--storage must be absolute (the job's cwd is temporary)"
    mounts = {}
    for name, svc in _services().items():
        for volume in svc.get("volumes", []):
            source, target = (volume["source"], volume["target"]) if isinstance(volume, dict) \
                else volume.split(":")[:2]
            if storage == target or storage.startswith(target.rstrip("/") + "/"):
                mounts[name] = source
    assert set(mounts) == set(_services()), f"not every service mounts {storage}: {sorted(mounts)}"
    (volume,) = set(mounts.values())
    assert volume in compose.get("volumes", {}), "a named volume, declared at the top level"


class _FakeRayHead(http.server.BaseHTTPRequestHandler):
    """Answers the two endpoints the health checks ask, as a Ray head with token auth does."""

    token = "0123abcd"
    seen: list[str] = []

    def do_GET(self):
        """Answer 200 for the raylet health check, and for /api/version with the right token only."""
        self.seen.append(self.path)
        if self.path == "/api/local_raylet_healthz":
            status = 200  # public, like Ray's health endpoints
        elif self.path == "/api/version":
            auth = self.headers.get("Authorization")
            status = 200 if auth == f"Bearer {self.token}" else 401 if auth is None else 403
        else:
            status = 404
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b"success" if status == 200 else b"no")

    def log_message(self, *args):
        """Keep the test output quiet."""


def _run_health_check(code: str, port: int, token: str) -> int:
    """Run a compose health check's Python against the fake head.

    Args:
        code: The ``python -c`` code of the health check.
        port: The fake head's port, put in place of the dashboard's and the agent's.
        token: The ``RAY_AUTH_TOKEN`` the container would have.

    Returns:
        The exit code: 0 is healthy.
    """
    code = re.sub(r"127\.0\.0\.1:(8265|52365)\b", f"127.0.0.1:{port}", code)
    env = {**os.environ, "RAY_AUTH_TOKEN": token}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60).returncode


def test_compose_health_checks_pass_on_a_healthy_head_with_the_token():
    head_name, _ = _head()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeRayHead)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        checked = set()
        for name, svc in _services().items():
            test = svc.get("healthcheck", {}).get("test")
            if not test:
                continue
            assert test[:3] == ["CMD", "python", "-c"], f"{name}: the image has python, not curl"
            _FakeRayHead.seen.clear()
            assert _run_health_check(test[3], server.server_port, _FakeRayHead.token) == 0, name
            assert "/api/local_raylet_healthz" in _FakeRayHead.seen, f"{name} does not check its raylet"
            if name == head_name:
                assert "/api/version" in _FakeRayHead.seen, "the head's check does not ask the Jobs API"
                assert _run_health_check(test[3], server.server_port, "wrong") != 0, \
                    "the head's check passes with a wrong token"
            checked.add(name)
        assert head_name in checked and len(checked) >= 2
    finally:
        server.shutdown()
        server.server_close()


def test_compose_gives_every_service_the_token_from_the_environment():
    for name, svc in _services().items():
        env = svc["environment"]
        assert env["RAY_AUTH_MODE"] == "token", name
        # Interpolated from docker/.env, never written in the file.
        assert str(env["RAY_AUTH_TOKEN"]).startswith("${RAY_AUTH_TOKEN"), name


def test_compose_builds_the_image_from_docker_dockerfile():
    for name, svc in _services().items():
        build = svc["build"]
        context = (COMPOSE.parent / build["context"]).resolve()
        assert context == ROOT, name
        assert (context / build["dockerfile"]).resolve() == DOCKERFILE, name


def test_ray_sends_the_token_the_compose_environment_gives(tmp_path):
    # With the environment every compose service gets (RAY_AUTH_MODE=token and RAY_AUTH_TOKEN),
    # the installed Ray puts that token in its HTTP header, ahead of RAY_AUTH_TOKEN_PATH and
    # ~/.ray/auth_token; without RAY_AUTH_MODE it sends nothing (the cluster answers 401).
    compose_env = _head()[1]["environment"]
    wrong = tmp_path / "wrong_token"
    wrong.write_text("not-the-token")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(tmp_path), RAY_AUTH_TOKEN_PATH=str(wrong),
               RAY_AUTH_MODE=compose_env["RAY_AUTH_MODE"], RAY_AUTH_TOKEN="0123abcd")
    code = ("from ray._raylet import AuthenticationTokenLoader as L; "
            "print(L.instance().get_token_for_http_header())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str({"authorization": "Bearer 0123abcd"})
    del env["RAY_AUTH_MODE"]
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "{}"


# ---------------------------------------------------------------- KubeRay manifests


def test_k8s_manifests_parse_and_name_their_kind():
    docs = _k8s_documents()
    assert {doc["kind"] for _, doc in docs} >= {"RayJob", "RayCluster", "PersistentVolumeClaim"}
    for path, doc in docs:
        assert doc.get("apiVersion") and doc.get("metadata", {}).get("name"), path.name
        if doc["kind"] in ("RayJob", "RayCluster"):
            assert doc["apiVersion"] == "ray.io/v1", path.name


def test_rayjob_runs_tuner_run_on_a_spec_that_exists_with_shared_storage():
    (job,) = _k8s("RayJob")
    argv = shlex.split(job["spec"]["entrypoint"])
    spec = _tuner_run_spec(argv)
    assert spec == MAIN_SPEC and _repo_path(spec).is_file()
    storage = _option(argv, "--storage")
    assert storage, "the RayJob names where results land"
    if not re.match(r"^[a-z][a-z0-9+.-]*://", storage):
        assert storage.startswith("/"), "a folder every node sees, absolute"
        for pod in _pod_templates(job["spec"]["rayClusterSpec"]):
            mounts = [m["mountPath"] for m in pod["containers"][0].get("volumeMounts", [])]
            assert any(storage.startswith(m.rstrip("/") + "/") for m in mounts), \
                f"{storage} is not on a volume mounted in every pod"


def test_k8s_clusters_have_a_head_and_a_gpu_worker_group_on_the_cuda_image():
    pins = _constraints()
    specs = _ray_cluster_specs()
    assert {label.split()[0] for label, _ in specs} == {"RayJob", "RayCluster"}
    for label, spec in specs:
        assert spec["rayVersion"] == pins["ray"], label
        assert spec["headGroupSpec"]["template"]["spec"]["containers"], label
        gpu_groups = [g for g in spec.get("workerGroupSpecs", []) if _gpu_limit(g["template"]["spec"]) > 0]
        assert gpu_groups, f"{label}: no worker group with an nvidia.com/gpu limit"
        for group in gpu_groups:
            pod = group["template"]["spec"]
            assert group["rayStartParams"]["num-gpus"] == str(_gpu_limit(pod)), \
                f"{label}: num-gpus differs from the pod's nvidia.com/gpu limit"
            assert re.search(r":cu12\d$", pod["containers"][0]["image"]), f"{label}: GPU group on the CUDA image"


def test_k8s_clusters_use_token_auth_and_the_shared_claim():
    claims = {doc["metadata"]["name"]: doc for doc in _k8s("PersistentVolumeClaim")}
    for label, spec in _ray_cluster_specs():
        assert spec.get("authOptions", {}).get("mode") == "token", label
        for pod in _pod_templates(spec):
            used = [v["persistentVolumeClaim"]["claimName"] for v in pod.get("volumes", [])
                    if "persistentVolumeClaim" in v]
            assert used, f"{label}: a pod without the results volume"
            for name in used:
                assert name in claims, f"{label}: claim {name} is not defined in docker/k8s"
                assert "ReadWriteMany" in claims[name]["spec"]["accessModes"], name


# ---------------------------------------------------------------- docs and secrets


def test_docker_readme_names_only_files_that_exist():
    text = (DOCKER / "README.md").read_text()
    named = set(re.findall(r"\bdocker/[\w./-]*\w", text))
    assert {"docker/Dockerfile", "docker/docker-compose.yml", "docker/k8s/rayjob.yaml"} <= named
    for path in named:
        assert (ROOT / path).exists() or path == "docker/.env", f"docker/README.md names {path}, which is missing"


@pytest.mark.parametrize("path", sorted(p for p in DOCKER.rglob("*") if p.is_file() and p.name != ".env"),
                         ids=lambda p: str(p.relative_to(DOCKER)))
def test_no_token_is_written_in_docker_files(path):
    text = path.read_text(errors="replace")
    assert not re.search(r"RAY_AUTH_TOKEN\s*[:=]\s*['\"]?[0-9A-Za-z+/_-]{16,}", text), path
