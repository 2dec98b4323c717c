"""Cluster: start the embedded local Ray, or use the one already running.

The local Ray is started quietly: no dashboard, workers' output kept out of the
console (``log_to_driver=False``; trial output goes to each trial's folder), and
Ray's own logs stay in its session folder, linked from the experiment folder.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import ray

from tuner.resources import ClusterResources

__all__ = ["ray_session", "cluster_resources"]

RAY_JOB_CONFIG = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray in a submitted job's driver


def cluster_resources(address: str | None = None) -> ClusterResources:
    """Totals and per-node resources of the Ray cluster this process is connected to.

    Args:
        address: The cluster's address, named in the plan; None for "the running Ray".
    """
    res = ray.cluster_resources()
    alive = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
    nodes = len(alive)
    where = f"the Ray cluster at {address}" if address else "the running Ray cluster"
    return ClusterResources(float(res.get("CPU", 0)), float(res.get("GPU", 0)),
                            f"{where} ({nodes} node{'s' if nodes != 1 else ''})",
                            tuple((float(n.get("CPU", 0)), float(n.get("GPU", 0))) for n in alive))


def use_token_if_available() -> bool:
    """Send this machine's Ray token to clusters, as the Ray CLI does with ``RAY_AUTH_MODE=token``.

    Ray 2.60 clusters use token authentication whenever their head found a token at
    start (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``; a local
    ``ray.init()`` writes the last one) or was started with ``RAY_AUTH_MODE=token``. A
    client then sends the token only in token mode, and is refused otherwise. When
    ``RAY_AUTH_MODE`` is unset (or empty) and a token is at hand in one of those places,
    token mode is turned on for this process and its children. An explicit
    ``RAY_AUTH_MODE`` is left alone.

    Returns:
        Whether token mode is on.
    """
    if os.environ.get("RAY_AUTH_MODE"):
        return os.environ["RAY_AUTH_MODE"].lower() == "token"
    token_file = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    if os.environ.get("RAY_AUTH_TOKEN") or token_file.is_file():
        os.environ["RAY_AUTH_MODE"] = "token"
        # Ray reads the mode into its config when it is imported; refresh it, as Ray's own
        # authentication_token_setup._enable_token_auth does.
        from ray._raylet import Config

        Config.initialize("")
        return True
    return False


@contextmanager
def ray_session(
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    python_path: list[str] | None = None,
    address: str | None = None,
) -> Iterator[str | None]:
    """Use the running Ray, or start an embedded local one for the duration.

    Args:
        num_cpus: CPUs of the local Ray (default: all of this machine's).
        num_gpus: GPUs of the local Ray (default: the ones Ray detects).
        python_path: Folders that the trial workers need on ``sys.path`` to import the
            train function (workers unpickle it by its module name); they are given
            to the workers through ``PYTHONPATH`` in the job's ``runtime_env``.
        address: A running cluster to connect to instead of starting one.

    Yields:
        Ray's session folder when this call started Ray, else None.
    """
    if ray.is_initialized():
        yield None
        return
    env = {}
    if python_path and RAY_JOB_CONFIG not in os.environ:
        # Inside a Ray Job the job's working_dir already reaches every node; a
        # PYTHONPATH of this node's folders would only shadow it.
        parts = [*python_path, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    if address is not None:
        use_token_if_available()
    context = ray.init(
        address=address,
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        include_dashboard=False if address is None else None,
        log_to_driver=False,
        logging_level=logging.WARNING,
        runtime_env={"env_vars": env} if env else None,
    )
    try:
        yield context.address_info.get("session_dir")
    finally:
        ray.shutdown()


def link_ray_logs(session_dir: str | None, experiment_path: str | os.PathLike) -> None:
    """Link Ray's log folder into the experiment folder as ``ray_logs`` (best effort)."""
    if not session_dir:
        return
    link = Path(experiment_path) / "ray_logs"
    try:
        if not link.exists():
            link.symlink_to(Path(session_dir) / "logs", target_is_directory=True)
    except OSError:
        pass


# --------------------------------------------------------------------------- Ray Jobs

TERMINAL_JOB_STATES = ("SUCCEEDED", "FAILED", "STOPPED")
HEAD_RESOURCE = "node:__internal_head__"  # Ray's resource of the head node


def _dashboard_url(address: str | None) -> str:
    """The Jobs API address: the argument, else ``RAY_ADDRESS`` when it is an http(s) URL."""
    address = address or os.environ.get("RAY_ADDRESS", "")
    if not address.startswith(("http://", "https://")):
        from tuner.spec import SpecError, SpecIssue

        got = f", but got {address!r}" if address else ""
        raise SpecError([SpecIssue("", f"the Ray Jobs API needs the head's dashboard address, "
                                   f"--address http://HEAD:8265{got}.")], "--address")
    return address.rstrip("/")


def job_client(address: str | None):
    """A ``ray.job_submission.JobSubmissionClient`` for the cluster's dashboard.

    The token, when this machine has one, is sent (:func:`use_token_if_available`).

    Args:
        address: ``http://HEAD:8265``; None takes ``RAY_ADDRESS``.

    Raises:
        SpecError: If the address is not an http(s) URL, the dashboard cannot be
            reached, or it refuses the token.
    """
    from ray.job_submission import JobSubmissionClient

    from tuner.spec import SpecError, SpecIssue

    url = _dashboard_url(address)
    use_token_if_available()
    try:
        return JobSubmissionClient(url)
    except Exception as err:  # noqa: BLE001 - Ray raises ConnectionError/RuntimeError with its own text
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        hint = (" The cluster wants a token: put it in ~/.ray/auth_token (or RAY_AUTH_TOKEN) and set "
                "RAY_AUTH_MODE=token." if "401" in text or "nauthori" in text else
                " Is the head running, with ray[default] (the dashboard) listening on that port?")
        raise SpecError([SpecIssue("", f"cannot reach the Ray Jobs API at {url}: {text}.{hint}")],
                        "--address") from None


def submit_job(
    spec_path: str | os.PathLike,
    address: str | None,
    *,
    run_args: list[str],
    working_dir: str | os.PathLike | None = None,
    pip: list[str] | None = None,
    storage: str | None = None,
    name: str | None = None,
) -> tuple[str, str]:
    """Submit ``python -m tuner run SPEC`` to a Ray cluster as a Ray Job.

    The working directory (default: the current one; ``.gitignore``'d files stay
    behind, as Ray does) is uploaded with the job in its ``runtime_env``, and the spec
    must lie inside it. Results go to ``storage``, which must be a folder every node
    shares (or a ``file://`` URI): the job's own working directory is temporary.

    Args:
        spec_path: The spec, inside ``working_dir``.
        address: The head's dashboard, ``http://HEAD:8265``.
        run_args: Extra ``tuner run`` arguments (``--name``, ``--set`` ...).
        working_dir: The folder to upload.
        pip: Packages the job's workers install (``runtime_env["pip"]``).
        storage: Overrides ``spec.storage``.
        name: Overrides ``spec.name``.

    Returns:
        ``(submission_id, dashboard_url)``.

    Raises:
        SpecError: If the spec is invalid, lies outside the working directory, its
            storage is a relative path, or the cluster cannot be reached. Nothing is
            submitted then.
    """
    import shlex
    import uuid

    from tuner.spec import SpecError, SpecIssue, load_spec

    overrides = {k: v for k, v in {"storage": storage, "name": name}.items() if v is not None}
    spec = load_spec(spec_path, **overrides)
    workdir = Path(working_dir or os.getcwd()).resolve()
    if not workdir.is_dir():
        raise SpecError([SpecIssue("", f"--working-dir {workdir} is not a folder.")], "--working-dir")
    spec_file = Path(spec_path).resolve()
    try:
        relative = spec_file.relative_to(workdir)
    except ValueError:
        raise SpecError([SpecIssue("", f"the spec {spec_file} lies outside the working directory {workdir}, so it "
                                   "would not reach the cluster; put it inside, or pass --working-dir.")],
                        str(spec_path)) from None
    if not spec.storage.lower().startswith("file://") and not spec.remote_storage \
            and not Path(spec.storage).expanduser().is_absolute():
        raise spec.error("storage", f"storage {spec.storage!r} is relative, so the results would land in the job's "
                         "temporary working directory on the head node; give --storage an absolute folder that "
                         "every node shares, a file:// URI or a cloud URI (s3://, gs://, ...).")
    client = job_client(address)
    entry = ["python", "-m", "tuner", "run", relative.as_posix(), *run_args]
    # Ray logs each packaging step at INFO on the console; keep the console to tuner's lines.
    logging.getLogger("ray").setLevel(logging.WARNING)
    logging.getLogger("ray.dashboard").setLevel(logging.WARNING)
    if storage:
        entry += ["--storage", storage]
    if name:
        entry += ["--name", name]
    runtime_env: dict = {"working_dir": str(workdir)}
    if pip:
        runtime_env["pip"] = list(pip)
    submission_id = f"tuner-{spec.name}-{uuid.uuid4().hex[:8]}"
    # The tuner process (the Tune driver) runs on the head node: it needs little, and the
    # head is the node that surely sees the storage and serves the job's logs.
    import time

    deadline = time.monotonic() + 60
    while True:
        try:
            job_id = client.submit_job(entrypoint=shlex.join(entry), runtime_env=runtime_env,
                                       submission_id=submission_id, metadata={"tuner_spec": relative.as_posix()},
                                       entrypoint_resources={HEAD_RESOURCE: 0.001})
            break
        except RuntimeError as err:  # a head that has just started: its Jobs agent is not up yet
            if "No available agent" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(2)
    return job_id, _dashboard_url(address)


def wait_for_job(address: str | None, job_id: str, *, follow: bool = False, echo=print,
                 poll_s: float = 1.0) -> str:
    """Wait until a Ray Job ends; with ``follow``, print its log lines as they come.

    Returns:
        The final status: ``SUCCEEDED``, ``FAILED`` or ``STOPPED``.
    """
    import time

    client = job_client(address)
    if follow:
        import asyncio

        async def tail() -> None:
            async for lines in client.tail_job_logs(job_id):
                echo(lines.rstrip("\n"))

        asyncio.run(tail())
    while True:
        status = str(client.get_job_status(job_id).value)
        if status in TERMINAL_JOB_STATES:
            return status
        time.sleep(poll_s)
