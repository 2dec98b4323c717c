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
from typing import Any
from collections.abc import Iterable, Iterator

import ray

from tuner.experiment.layout import RAY_LOGS_LINK
from tuner.adapters.ray_internals import (GCS_CONNECT_TRIES_ENV, HEAD_RESOURCE, JOBS_CLIENT_LOGGERS, RAY_JOB_CONFIG,
                                          RAY_START_TIMED_OUT, local_ray_options)
from tuner.resources.sizing import ClusterResources

__all__ = ["ray_session", "start_local_ray", "cluster_resources"]


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


def unreachable(address: str, timeout_s: float = 5.0) -> str | None:
    """Why nothing answers at a cluster's ``host:port`` address, or None when something does.

    ``ray.init`` retries an address where nothing listens for minutes (and logs each
    try); one TCP connection to the head's GCS port tells at once. Other forms of address
    (``auto``, ``local``, ``ray://...``, the dashboard's ``http://...``) are left to Ray.

    Args:
        address: The cluster's address, as ``--address`` gives it.
        timeout_s: How long the connection may take, in seconds.

    Returns:
        The reason (e.g. ``connection refused``), or None.
    """
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or not host or "/" in address or not port.isdigit():
        return None
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as err:
        return (err.strerror or str(err) or type(err).__name__).lower()
    return None


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
        # Ray reads the mode into its config when it is imported; refresh it.
        from tuner.adapters.ray_internals import refresh_auth_mode

        refresh_auth_mode()
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
        address: A running cluster to connect to instead of starting one; ``auto``
            is the one ``ray start`` last started on this machine, even when
            ``RAY_ADDRESS`` names another. Ray gets one try at it (its
            ``RAY_gcs_server_port_wait_time_s``, 20 tries by default, unless set), so an
            address where something listens that is not a Ray head fails in about 40 s
            (``RAY_py_gcs_connect_timeout_s`` and a few seconds), not 13 minutes.

    Yields:
        Ray's session folder when this call started Ray, else None.

    Raises:
        ClusterError: Ray cannot connect to the cluster at ``address``.
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
    elif os.environ.get("RAY_AUTH_MODE") == "":
        # Ray takes an empty RAY_AUTH_MODE as set, to something else than "token", and starts
        # the local Ray without authentication; empty means unset here, as for a cluster, so
        # Ray's default holds: token authentication (with ~/.ray/auth_token, written if missing).
        del os.environ["RAY_AUTH_MODE"]
    # Ray resolves "auto" to RAY_ADDRESS whenever that is set; a caller that chose "auto"
    # (--address auto, or the spec's when RAY_ADDRESS is unset) means this machine's cluster.
    hidden = os.environ.pop("RAY_ADDRESS", None) if address == "auto" else None
    bounded = address is not None and GCS_CONNECT_TRIES_ENV not in os.environ
    if bounded:
        os.environ[GCS_CONNECT_TRIES_ENV] = "1"
    try:
        context = (ray.init if address is not None else start_local_ray)(
            address=address,
            num_cpus=num_cpus,  # type: ignore[arg-type]  # annotated int; the CLI's --num-cpus is a float
            num_gpus=num_gpus,  # type: ignore[arg-type]
            include_dashboard=False if address is None else None,
            log_to_driver=False,
            logging_level=logging.WARNING,
            runtime_env={"env_vars": env} if env else None,
            **local_ray_options(address),
        )
    except ConnectionError as err:
        if address is None:
            raise
        from tuner.errors import ClusterError

        raise ClusterError(f"cannot connect to the Ray cluster at {address}: {err}, though something listens "
                           "there. Give the address that `ray start --head` printed (the head's GCS port, 6379 "
                           "by default; not the dashboard's 8265), and check that this machine runs the cluster's "
                           "Ray version.") from None
    finally:
        if hidden is not None:
            os.environ["RAY_ADDRESS"] = hidden
        if bounded:
            os.environ.pop(GCS_CONNECT_TRIES_ENV, None)
    try:
        # A ray:// address gives a ClientContext, which has no address_info (and no local session).
        info = getattr(context, "address_info", None)
        yield info.get("session_dir") if info else None
    finally:
        ray.shutdown()


def start_local_ray(**init_args) -> Any:
    """``ray.init`` that starts the embedded local Ray, with a second try when the first does not come up.

    Ray 2.60 gives its own start-up fixed deadlines: the raylet aborts when its dashboard agent has
    not written its port within 15 s, and ``ray.init`` then raises "The current node timed out during
    startup" (:data:`tuner.adapters.ray_internals.RAY_START_TIMED_OUT`). On a loaded 2-core machine the agent's
    imports can take longer. The processes the failed try left (its GCS, log monitor, dashboard) are
    ended, a note goes to stderr, and Ray is started once more. Any other error is raised as is.

    Args:
        **init_args: ``ray.init``'s keyword arguments (``address`` None).

    Returns:
        ``ray.init``'s context.

    Raises:
        Exception: Whatever ``ray.init`` raises, the second time for a start that timed out twice.
    """
    import sys

    import psutil

    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    try:
        return ray.init(**init_args)
    except Exception as err:
        if RAY_START_TIMED_OUT not in str(err):
            raise
        left = [p for p in me.children(recursive=True) if p.pid not in before]
    ray.shutdown()
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=30)
    print("tuner: note: Ray's local start timed out (its processes did not come up within Ray's fixed "
          "deadlines: is the machine busy?); starting it once more.", file=sys.stderr, flush=True)
    return ray.init(**init_args)


def link_ray_logs(session_dir: str | None, experiment_path: str | os.PathLike) -> None:
    """Link Ray's log folder into the experiment folder as ``ray_logs`` (best effort)."""
    if not session_dir:
        return
    link = Path(experiment_path) / RAY_LOGS_LINK
    try:
        if not link.exists():
            link.symlink_to(Path(session_dir) / "logs", target_is_directory=True)
    except OSError:
        pass


# --------------------------------------------------------------------------- Ray Jobs

TERMINAL_JOB_STATES = ("SUCCEEDED", "FAILED", "STOPPED")
#: The job's environment variable that carries a submitted spec from outside the working directory.
SUBMITTED_SPEC_ENV = "TUNER_SUBMITTED_SPEC"
#: Where such a job writes that spec, under its working directory.
SUBMITTED_SPEC_DIR = ".tuner_submitted"


def _dashboard_url(address: str | None) -> str:
    """The Jobs API address: the argument, else ``RAY_ADDRESS`` when it is an http(s) URL."""
    address = address or os.environ.get("RAY_ADDRESS", "")
    if not address.startswith(("http://", "https://")):
        from tuner.errors import ClusterError

        got = f", but got {address!r}" if address else ""
        raise ClusterError(f"the Ray Jobs API needs the head's dashboard address, --address http://HEAD:8265{got}.",
                           "--address")
    return address.rstrip("/")


def job_client(address: str | None):
    """A ``ray.job_submission.JobSubmissionClient`` for the cluster's dashboard.

    The token, when this machine has one, is sent (:func:`use_token_if_available`).

    Args:
        address: ``http://HEAD:8265``; None takes ``RAY_ADDRESS``.

    Raises:
        ClusterError: If the address is not an http(s) URL, the dashboard cannot be
            reached, or it refuses the token.
    """
    from ray.job_submission import JobSubmissionClient

    from tuner.errors import ClusterError

    url = _dashboard_url(address)
    use_token_if_available()
    # Ray logs each packaging step and the end of a log stream at INFO on the console; keep
    # the console to tuner's lines.
    for logger in JOBS_CLIENT_LOGGERS:
        logging.getLogger(logger).setLevel(logging.WARNING)
    try:
        return JobSubmissionClient(url)
    except Exception as err:  # noqa: BLE001 - Ray raises ConnectionError/RuntimeError with its own text
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        hint = (" The cluster wants a token: put it in ~/.ray/auth_token (or RAY_AUTH_TOKEN) and set "
                "RAY_AUTH_MODE=token." if "401" in text or "nauthori" in text else
                " Is the head running, with ray[default] (the dashboard) listening on that port?")
        raise ClusterError(f"cannot reach the Ray Jobs API at {url}: {text}.{hint}", "--address") from None


def submit_job(
    spec_path: str | os.PathLike,
    address: str | None,
    *,
    run_args: list[str],
    working_dir: str | os.PathLike | None = None,
    pip: list[str] | None = None,
    storage: str | None = None,
    name: str | None = None,
    stage_command: str,
    sets: Iterable = (),
) -> tuple[str, str]:
    """Submit ``python -m tuner run SPEC`` to a Ray cluster as a Ray Job.

    The working directory (default: the current one; ``.gitignore``'d files stay
    behind, as Ray does) is uploaded with the job in its ``runtime_env``, and becomes
    the job's current directory on the head node. A spec inside it is read from there;
    a spec outside it travels as text in the job's ``runtime_env`` (``env_vars``), and
    the job writes it into its working directory before running it
    (:func:`stage_submitted_spec`). Either way a relative ``path/to/file.py:function``
    trainable resolves against the working directory, so its file must lie inside.
    Results go to ``storage``, which must be a folder every node shares (or a
    ``file://`` URI, or a cloud URI): the job's own working directory is temporary.

    Args:
        spec_path: The spec.
        address: The head's dashboard, ``http://HEAD:8265``.
        run_args: Extra ``tuner run`` arguments (``--name``, ``--set`` ...).
        working_dir: The folder to upload.
        pip: Packages the job and its workers install (``runtime_env["pip"]``).
        storage: Overrides ``spec.storage``.
        name: Overrides ``spec.name``.
        stage_command: The hidden ``tuner jobs`` command that writes a spec from outside the working
            directory, then runs it (``tuner.cli.STAGE_COMMAND``, which the CLI passes: this module
            does not import the CLI).
        sets: The :class:`~tuner.spec.Override` s that ``run_args``, ``storage`` and ``name``
            give the job (``--set``, ``--num-samples``, ...), so that the spec is checked
            here as the job will run it, and an error names the option.

    Returns:
        ``(submission_id, dashboard_url)``.

    Raises:
        SpecError: If the spec is invalid, its storage is a relative path, or its
            ``path/to/file.py`` trainable lies outside the working directory.
        ClusterError: If ``working_dir`` is not a folder, or the cluster cannot be
            reached. Nothing is submitted then.
    """
    import shlex
    import time
    import uuid

    from tuner.errors import ClusterError
    from tuner.spec import load_spec

    spec = load_spec(spec_path, sets=sets)
    workdir = Path(working_dir or os.getcwd()).resolve()
    if not workdir.is_dir():
        raise ClusterError(f"--working-dir {workdir} is not a folder.", "--working-dir")
    if not spec.storage.lower().startswith("file://") and not spec.remote_storage \
            and not Path(spec.storage).expanduser().is_absolute():
        raise spec.error("storage", f"storage {spec.storage!r} is relative, so the results would land in the job's "
                         "temporary working directory on the head node; give --storage an absolute folder that "
                         "every node shares, a file:// URI or a cloud URI (s3://, gs://, ...).")
    submission_id = f"tuner-{spec.name}-{uuid.uuid4().hex[:8]}"
    spec_file = Path(spec_path).resolve()
    runtime_env: dict = {"working_dir": str(workdir)}
    if spec_file.is_relative_to(workdir):
        job_spec = spec_file.relative_to(workdir).as_posix()
        command = ["run", job_spec]
    else:  # the spec travels as text and lands in the job's working directory
        job_spec = f"{SUBMITTED_SPEC_DIR}/{submission_id}/{spec_file.name}"
        runtime_env["env_vars"] = {SUBMITTED_SPEC_ENV: spec_file.read_text(encoding="utf-8")}
        command = ["jobs", stage_command, job_spec]
    _check_trainable_file_travels(spec, workdir, (workdir / job_spec).parent)
    if pip:
        runtime_env["pip"] = list(pip)
    client = job_client(address)
    entry = ["python", "-m", "tuner", *command, *run_args]
    if storage:
        entry += ["--storage", storage]
    if name:
        entry += ["--name", name]
    # The tuner process (the Tune driver) runs on the head node: it needs little, and the
    # head is the node that surely sees the storage and serves the job's logs.
    deadline = time.monotonic() + 60
    while True:
        try:
            job_id = client.submit_job(entrypoint=shlex.join(entry), runtime_env=runtime_env,
                                       submission_id=submission_id, metadata={"tuner_spec": job_spec},
                                       entrypoint_resources={HEAD_RESOURCE: 0.001})
            break
        except RuntimeError as err:  # a head that has just started: its Jobs agent is not up yet
            if "No available agent" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(2)
    return job_id, _dashboard_url(address)


def _check_trainable_file_travels(spec, workdir: Path, spec_dir_in_job: Path) -> None:
    """Refuse a relative ``path/to/file.py`` trainable that would not be in the job's working directory.

    In the job, :func:`tuner.spec.resolve_trainable` looks for the file in the working
    directory, then beside the spec (``spec_dir_in_job``, here). A module trainable, or an
    absolute path (a shared folder, perhaps), is left to the cluster.
    """
    if spec.command is not None:
        _check_command_travels(spec, workdir, spec_dir_in_job)
        return
    target = (spec.trainable_ref or "").rpartition(":")[0]
    if not target.endswith(".py") or Path(target).is_absolute():
        return
    for folder in dict.fromkeys([workdir, spec_dir_in_job]):
        file = (folder / target).resolve()
        if file.is_file() and file.is_relative_to(workdir):
            return
    raise spec.error("trainable", f"the file {target!r} is not in the working directory {workdir} (relative paths "
                     "resolve against it in the job), so it would not reach the cluster; move it there, or pass "
                     "--working-dir.")


def _check_command_travels(spec, workdir: Path, spec_dir_in_job: Path) -> None:
    """Refuse a command trial whose working directory or script would not be in the job's working directory.

    The command runs in ``trainable.cwd`` relative to the spec's folder, so the spec must lie in the
    uploaded working directory (a spec that travels as text lands in a folder of its own there), and so
    must the command's folder and a ``python SCRIPT``'s script.
    """
    from tuner.spec import command_cwd

    if spec_dir_in_job != Path(spec.source).resolve().parent:
        raise spec.error("trainable", f"a command trial runs its command relative to the spec's folder, but the spec "
                         f"lies outside the working directory {workdir}, so that folder would not reach the "
                         "cluster; move the spec into the working directory, or pass --working-dir.")
    cwd = command_cwd(spec)
    script = cwd / spec.command.script if spec.command.script is not None else None
    for what, path, field in (("working directory", cwd, "trainable.cwd" if spec.command.cwd else "trainable"),
                              ("script", script, "trainable.command.1")):
        if path is not None and not path.resolve().is_relative_to(workdir):
            raise spec.error(field, f"the command's {what} {path.resolve()} is outside the working directory "
                             f"{workdir} (it is uploaded with the job), so it would not reach the cluster; move it "
                             "there, or pass --working-dir.")


def stage_submitted_spec(job_spec: str | os.PathLike) -> Path:
    """In a job sent by :func:`submit_job`: write the spec that travelled in its runtime_env.

    The spec came from outside the uploaded working directory as the text of
    ``$TUNER_SUBMITTED_SPEC``; it is written to ``job_spec``, a path relative to the
    job's working directory (the current one), so that it is read as a spec inside it.

    Args:
        job_spec: ``.tuner_submitted/<submission id>/<file name>``.

    Returns:
        The spec file.

    Raises:
        ClusterError: Outside such a job (no ``$TUNER_SUBMITTED_SPEC``), or for a path
            that leaves the working directory.
    """
    from tuner.errors import ClusterError

    text = os.environ.get(SUBMITTED_SPEC_ENV)
    target = (Path.cwd() / job_spec).resolve()
    if text is None or not target.is_relative_to(Path.cwd().resolve() / SUBMITTED_SPEC_DIR):
        raise ClusterError(f"this command runs in a job sent by `tuner submit` only (it writes the "
                           f"spec of ${SUBMITTED_SPEC_ENV} under {SUBMITTED_SPEC_DIR}/).", str(job_spec))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target


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
