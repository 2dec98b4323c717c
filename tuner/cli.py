"""The command line: ``tuner run|validate|submit SPEC``, ``resume``, ``jobs``, ``schema`` (also ``python -m tuner``).

Exit codes: 0 every trial ended well; 1 some trials errored (named in the summary);
2 bad input (nothing started, nothing written); 75 the disk holding the experiment is
full (``EX_TEMPFAIL``: the state is saved; free space, then ``tuner resume``); 130 interrupted.

Errors are one compact paragraph; ``TUNER_DEBUG=1`` shows the full traceback. One catch
site, :func:`main`, decides the message and the exit code of every command, from the
error's class (:mod:`tuner.errors`); the commands catch nothing but Ctrl-C.
"""

from __future__ import annotations

import os
import sys
import traceback

import click

from tuner.errors import InputError, TrialError, TunerError
from tuner.experiment.layout import BEST_CONFIG, PARETO_CONFIGS, RESULTS_CSV, SUMMARY

EXIT_OK, EXIT_TRIALS_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, TrialError.exit_code, InputError.exit_code, 130


def _debug() -> bool:
    return os.environ.get("TUNER_DEBUG", "") not in ("", "0")


_run_options = [
    click.option("--storage", type=str, default=None, help="Parent folder of the experiment, or a cloud URI such as "
                 "s3://bucket/runs (overrides spec.storage)."),
    click.option("--name", type=str, default=None, help="Experiment name (overrides spec.name)."),
    click.option("--num-samples", type=int, default=None, help="Trials to sample (overrides spec.num_samples)."),
    click.option("--num-cpus", type=float, default=None, help="CPUs of the local Ray (default: all)."),
    click.option("--num-gpus", type=float, default=None, help="GPUs of the local Ray (default: detected)."),
    click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                 help="Override a spec field by its dotted path, e.g. --set param_space.data_dir=/data "
                      "or --set scheduler.max_t=5 (VALUE is read as YAML). Repeatable."),
]


def _with_run_options(func):
    for option in reversed(_run_options):
        func = option(func)
    return func


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tuner")
def cli() -> None:
    """Tune a PyTorch train function from a YAML spec, on Ray Tune."""


def _parse_sets(sets: tuple[str, ...], storage=None, name=None, num_samples=None) -> list:
    """The ``--set KEY=VALUE`` items (values read as YAML), then ``--storage``, ``--name`` and
    ``--num-samples``, as :class:`~tuner.spec.Override` s that name their option in errors.

    Raises:
        SpecError: For a ``--set`` item that is not KEY=VALUE or whose VALUE is not YAML.
    """
    from tuner.spec import Override, parse_set

    from tuner.experiment.storage import display

    # A storage URI's query and user info (endpoints, keys) stay out of messages.
    options = [Override((key,), value, f"{flag} {display(value) if key == 'storage' else value}")
               for key, flag, value in (
        ("storage", "--storage", storage), ("name", "--name", name), ("num_samples", "--num-samples", num_samples))
        if value is not None]
    return [*(parse_set(item) for item in sets), *options]


def _prepare(spec_path, storage, name, num_samples, num_cpus, num_gpus, sets=(), address=None, replay=None):
    from tuner.run.prepare import prepare
    from tuner.spec import load_spec

    # Loaded here, so that a --set whose path or value is wrong is named as the culprit.
    spec = load_spec(spec_path, sets=_parse_sets(sets, storage, name, num_samples))
    return prepare(spec, num_cpus=num_cpus, num_gpus=num_gpus, address=address, replay=replay)


_ADDRESS_HELP = ("Use this running Ray cluster (auto, host:6379, ray://host:10001) instead of a local Ray; "
                 "default: RAY_ADDRESS, else the spec's ray.address.")


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=True))
@_with_run_options
@click.option("--address", type=str, default=None, help=_ADDRESS_HELP + " Checks the plan against its resources.")
@click.option("--measure", type=click.IntRange(min=1), default=None, metavar="N",
              help="Run the first trial for N iterations here (in a temporary folder, removed after) and forecast "
                   "the wall time and GPU-hours from its seconds per iteration (the first iteration, with the "
                   "trial's start-up, left out when N > 1).")
@click.option("--from", "from_experiment", type=click.Path(), default=None, metavar="EXPERIMENT",
              help="Forecast the wall time and GPU-hours from the mean seconds per iteration of an earlier "
                   "experiment's trials.")
def validate(spec_path, storage, name, num_samples, num_cpus, num_gpus, sets, address, measure,
             from_experiment) -> None:
    """Check SPEC, print the plan and its budget forecast; starts nothing but --measure's trial, writes nothing."""
    if measure is not None and from_experiment is not None:
        raise InputError("--measure and --from exclude each other; choose one.")
    prepared = _prepare(spec_path, storage, name, num_samples, num_cpus, num_gpus, sets, address)
    _check_cluster(prepared)
    from tuner.run import measure as timing

    # A bad --from fails before the plan is printed.
    measured = timing.from_experiment(_local_copy(from_experiment)) if from_experiment is not None else None
    _echo_plan(prepared, measured, measure)


def _check_cluster(prepared) -> None:
    """With an address: check the plan against the cluster's resources (connected, or refused) before anything
    is printed or made; without one, nothing (a local Ray's resources are known from the options)."""
    if prepared.address is not None:
        from tuner.run.prepare import check_cluster

        check_cluster(prepared)


def _echo_plan(prepared, measured=None, measure: int | None = None) -> None:
    """Print the plan and its forecast in time, as `tuner validate` (and `tuner run --dry-run`) show them.

    Args:
        prepared: A :class:`tuner.run.prepare.Prepared`, its cluster checked (:func:`_check_cluster`).
        measured: A measurement from ``--from``, or None.
        measure: ``--measure N``: run the first trial for N iterations after the plan is printed; None: no run.
    """
    from tuner.run import measure as timing
    from tuner.run.prepare import plan

    click.echo(plan(prepared))
    if measure is not None:
        measured = timing.measure(prepared, measure)
    for line in timing.time_lines(prepared, measured):
        click.echo(line)


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=True))
@_with_run_options
@click.option("--address", type=str, default=None, help=_ADDRESS_HELP)
@click.option("--dry-run", is_flag=True, help="Validate and print the plan, as `tuner validate`.")
@click.option("--replay", metavar="EXPERIMENT[:TRIAL]", type=str, default=None,
              help="Retrain one trial with the hyperparameter schedule of a PBT/PB2 experiment's trial (default: "
                   "its best), through Ray's PopulationBasedTrainingReplay, as a new experiment <name>-replay; "
                   "SPEC gives the trainable, stop and resources.")
def run(spec_path, storage, name, num_samples, num_cpus, num_gpus, sets, address, dry_run, replay) -> None:
    """Run the tuning experiment described by SPEC."""
    from tuner.run.engine import run_prepared

    prepared = _prepare(spec_path, storage, name, num_samples, num_cpus, num_gpus, sets, address, replay)
    _check_cluster(prepared)  # connected (or refused) before the experiment folder is made
    if dry_run:  # what `tuner validate` prints (without --measure or --from)
        _echo_plan(prepared)
        return
    try:
        result = run_prepared(prepared, echo=click.echo)
    except KeyboardInterrupt:
        _interrupted(prepared.experiment_path)
    _finish(result)


def _interrupted(path) -> None:
    click.echo(f"tuner: interrupted; the state is saved. Resume with:\n  tuner resume {path}", err=True)
    sys.exit(EXIT_INTERRUPTED)


def _finish(result) -> None:
    """Print the closing lines of a run and exit with its code."""
    where, mirror = result.experiment_path, ""
    if result.summary.get("location"):
        where, mirror = result.summary["location"], f"; local mirror: {result.experiment_path}"
    click.echo(f"Results: {where} ({SUMMARY}, {RESULTS_CSV}"
               f"{', ' + BEST_CONFIG if result.best_config is not None else ''}"
               f"{', ' + PARETO_CONFIGS if 'pareto_front' in result.summary else ''}{mirror})")
    if result.interrupted:
        _interrupted(result.experiment_path)
    if result.aborted:
        click.echo(f"tuner: the first trial, {result.aborted['trial_id']}, failed before any trial reported a "
                   "result, so the experiment stopped instead of running every trial into the same error "
                   "(failure.abort_on_first_error: false turns this off). Its error:", err=True)
        click.echo(result.aborted["traceback"], err=True)
        click.echo(f"tuner: trial folder: {result.aborted['path']}", err=True)
        sys.exit(EXIT_TRIALS_FAILED)
    if result.num_errors:
        for err in result.summary.get("errors", []):
            click.echo(f"tuner: trial {err['trial_id']} errored: {err['error']} (log: {err['path']})", err=True)
        click.echo(f"tuner: {result.num_errors} of {result.summary['trials']['total']} trials errored.", err=True)
        sys.exit(EXIT_TRIALS_FAILED)


@cli.command()
@click.argument("experiment", metavar="EXPERIMENT_DIR", type=str)
@click.option("--spec", "spec_path", type=click.Path(dir_okay=False), default=None,
              help="The spec to resume with (default: its original file if it still exists, else the copy "
                   "saved in the experiment). It must match the experiment's.")
@click.option("--resume-errored", is_flag=True, help="Continue errored trials from their latest checkpoints.")
@click.option("--restart-errored", is_flag=True, help="Start errored trials over from scratch.")
@click.option("--num-cpus", type=float, default=None, help="CPUs of the local Ray (default: all).")
@click.option("--num-gpus", type=float, default=None, help="GPUs of the local Ray (default: detected).")
@click.option("--address", type=str, default=None, help=_ADDRESS_HELP)
def resume(experiment, spec_path, resume_errored, restart_errored, num_cpus, num_gpus, address) -> None:
    """Resume a stopped or crashed experiment (Ray Tune's Tuner.restore)."""
    from tuner.run.engine import resume_prepared
    from tuner.run.prepare import prepare_resume

    if resume_errored and restart_errored:
        raise InputError("--resume-errored and --restart-errored exclude each other; choose one.")
    try:
        prepared = prepare_resume(experiment, spec=spec_path, num_cpus=num_cpus, num_gpus=num_gpus, address=address)
        result = resume_prepared(prepared, resume_errored=resume_errored, restart_errored=restart_errored,
                                 echo=click.echo)
    except KeyboardInterrupt:
        _interrupted(experiment)
    _finish(result)


#: The hidden `tuner jobs` command that a job sent by `tuner submit` runs for a spec from outside its working
#: directory (given to tuner.run.cluster.submit_job, which builds the job's command line).
STAGE_COMMAND = "run-submitted-spec"

_JOBS_ADDRESS = click.option("--address", type=str, default=None,
                              help="The head's dashboard, http://HEAD:8265 (default: RAY_ADDRESS).")


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False, exists=True))
@_JOBS_ADDRESS
@click.option("--working-dir", type=click.Path(file_okay=False, exists=True), default=None,
              help="Folder uploaded with the job, its current folder there (default: the current folder). A SPEC "
                   "outside it travels with the job too; relative paths in SPEC resolve against this folder.")
@click.option("--pip", "pip", multiple=True, metavar="PACKAGE",
              help="A package the job and its trials install (the job's runtime_env pip). Repeatable.")
@click.option("--storage", type=str, default=None,
              help="Where results land: a folder every node shares, a file:// URI or a cloud URI "
                   "(s3://, gs://, ...; overrides spec.storage).")
@click.option("--name", type=str, default=None, help="Experiment name (overrides spec.name).")
@click.option("--num-samples", type=int, default=None, help="Trials to sample (overrides spec.num_samples).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="As for `tuner run`. Repeatable.")
@click.option("--wait", is_flag=True, help="Wait for the job to end; exit 0 only if it SUCCEEDED.")
@click.option("--follow", is_flag=True, help="Print the job's output as it runs, then wait for its end.")
def submit(spec_path, address, working_dir, pip, storage, name, num_samples, sets, wait, follow) -> None:
    """Submit `tuner run SPEC` to a Ray cluster as a Ray Job (Ray's JobSubmissionClient)."""
    from tuner.run.cluster import submit_job, wait_for_job

    run_args = [arg for item in sets for arg in ("--set", item)]
    if num_samples is not None:
        run_args += ["--num-samples", str(num_samples)]
    job_id, url = submit_job(spec_path, address, run_args=run_args, working_dir=working_dir, pip=list(pip),
                             storage=storage, name=name, stage_command=STAGE_COMMAND,
                             sets=_parse_sets(sets, storage, name, num_samples))  # checked as the job applies them
    click.echo(f"Submitted job {job_id} to {url}")
    click.echo(f"  follow: tuner jobs logs {job_id} --address {url} --follow")
    click.echo(f"  status: tuner jobs status {job_id} --address {url}")
    click.echo(f"  stop:   tuner jobs stop {job_id} --address {url}")
    if wait or follow:
        status = wait_for_job(url, job_id, follow=follow, echo=click.echo)
        click.echo(f"Job {job_id}: {status}")
        if status != "SUCCEEDED":
            client = _jobs_client(url)
            message = client.get_job_info(job_id).message
            tail = "\n".join(client.get_job_logs(job_id).rstrip("\n").splitlines()[-20:])
            click.echo(f"tuner: job {job_id} ended {status}" + (f": {message}" if message else ""), err=True)
            if tail and not follow:
                click.echo(f"tuner: the end of its output:\n{tail}", err=True)
        sys.exit(EXIT_OK if status == "SUCCEEDED" else EXIT_TRIALS_FAILED)


@cli.group()
def jobs() -> None:
    """Follow and stop jobs sent by `tuner submit` (Ray's Jobs API)."""


def _jobs_client(address):
    from tuner.run.cluster import job_client

    return job_client(address)


@jobs.command("status")
@click.argument("job_id")
@_JOBS_ADDRESS
def jobs_status(job_id, address) -> None:
    """Print a job's status and message."""
    info = _jobs_client(address).get_job_info(job_id)
    click.echo(f"{job_id}: {info.status.value}" + (f" ({info.message})" if info.message else ""))


@jobs.command("logs")
@click.argument("job_id")
@_JOBS_ADDRESS
@click.option("--follow", is_flag=True, help="Keep printing until the job ends.")
def jobs_logs(job_id, address, follow) -> None:
    """Print a job's output."""
    from tuner.run.cluster import wait_for_job

    if follow:
        wait_for_job(address, job_id, follow=True, echo=click.echo)
    else:
        click.echo(_jobs_client(address).get_job_logs(job_id), nl=False)


@jobs.command("stop")
@click.argument("job_id")
@_JOBS_ADDRESS
def jobs_stop(job_id, address) -> None:
    """Stop a running job (its trials stop; `tuner resume` can go on later)."""
    stopped = _jobs_client(address).stop_job(job_id)
    click.echo(f"{job_id}: {'stop requested' if stopped else 'not running'}")


@jobs.command(STAGE_COMMAND, hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("job_spec")
@click.argument("run_args", nargs=-1, type=click.UNPROCESSED)
def jobs_run_submitted_spec(job_spec, run_args) -> None:
    """In a job sent by `tuner submit`: write the spec that travelled in the job's runtime_env, then run it.

    The spec came from outside the working directory (tuner.run.cluster.stage_submitted_spec);
    RUN_ARGS are `tuner run`'s options.
    """
    from tuner.run.cluster import stage_submitted_spec

    stage_submitted_spec(job_spec)
    cli.main(args=["run", job_spec, *run_args], prog_name="tuner", standalone_mode=False)


@cli.command()
@click.argument("experiment", metavar="EXPERIMENT_DIR", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "html"]), default="table",
              show_default=True, help="table, csv and json print to stdout (or --output); html writes a page "
                                      "with plots, and the plots as PNGs beside it.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write here instead (html: default EXPERIMENT_DIR/report.html).")
@click.option("--top", type=click.IntRange(min=1), default=None,
              help="Only the K best trials (html: in the table and the parallel coordinates; default 10 there).")
def report(experiment, fmt, output, top) -> None:
    """Report on an experiment: table, csv, json or an HTML page.

    Reads the experiment's files only (starts no Ray), so it works on a finished, running or
    interrupted experiment.
    """
    from tuner.report import load_experiment, render, write_html

    exp = load_experiment(_local_copy(experiment))
    if fmt == "html":
        page, pngs = write_html(exp, output, top)
        click.echo(f"Report: {page} (open it in a browser)")
        if pngs:
            click.echo(f"Plots:  {next(iter(pngs.values())).parent}/ ({', '.join(p.name for p in pngs.values())})")
        return
    text = render(exp, fmt, top)
    if output:
        from tuner.experiment.files import atomic_write

        atomic_write(output, text)
        click.echo(f"Report: {output}")
    else:
        click.echo(text, nl=False)


@cli.command("export")
@click.argument("experiment", metavar="EXPERIMENT_DIR", type=str)
@click.option("--to", "to", required=True, type=click.Path(), metavar="DIR",
              help="The export folder: new, or empty.")
@click.option("--trial", "trial_id", type=str, default=None, metavar="ID",
              help="Export this trial's best checkpoint (default: the best trial's).")
def export_command(experiment, to, trial_id) -> None:
    """Copy the best trial's best checkpoint into a self-contained folder.

    The folder holds the checkpoint's files, the trial's config, the metric at the checkpoint
    and its iteration, the spec and a README. EXPERIMENT_DIR may be a cloud URI.
    """
    from tuner.experiment.export import export
    from tuner.experiment.layout import EXPORT_FILES

    done = export(experiment, to, trial_id)
    value = f": {done.metric}={done.value} at iteration {done.training_iteration}" if done.metric else ""
    click.echo(f"Exported trial {done.trial_id}'s checkpoint{value} to {done.path} ({', '.join(EXPORT_FILES)})")


def _local_copy(experiment: str) -> str:
    """A cloud experiment URI: download it (but checkpoints) into its local mirror and give that."""
    from tuner.experiment.storage import download, is_remote, mirror_dir

    if not is_remote(experiment):
        return experiment
    mirror = mirror_dir(experiment)
    download(experiment, mirror)
    return str(mirror)


@cli.command("list")
@click.argument("storage", metavar="[STORAGE]", type=click.Path(), default="runs")
def list_command(storage) -> None:
    """List the experiments in STORAGE (default: runs).

    One line each: name, status, trials, best metric, start time.
    """
    from tuner.report import list_experiments, render_list
    from tuner.experiment.storage import experiments_mirror, is_remote

    if is_remote(storage):
        storage = experiments_mirror(storage)
    click.echo(render_list(list_experiments(storage)), nl=False)


@cli.command()
@click.argument("paths", nargs=-1, metavar="[PATH]...", type=click.Path())
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="The port (0: a free one).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to serve on; another than this machine's own serves without authentication.")
def dashboard(paths, port, host) -> None:
    """Serve a live web dashboard (optuna-dashboard) of every experiment under PATH (default: runs).

    PATH is an experiment folder, a storage folder that holds experiments, or a cloud storage URI
    (s3://..., served from its local mirror, synced every 10 s). Each experiment is one
    study, whatever its searcher; the page reads the experiments' own files, so a running one shows
    each report within seconds, and nothing is written. Read-only. Needs pip install -e ".[dashboard]".
    """
    from tuner.report.dashboard import serve

    serve(list(paths) or ["runs"], host, port, echo=click.echo)
    # Ctrl-C stopped it, and nothing is left to write: exit now. A request thread may still hold pyarrow's S3
    # client or thread pool, whose teardown at the interpreter's exit can deadlock (apache/arrow#50188, #50482).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@cli.command("convert")
@click.argument("source", metavar="SOURCE", type=click.Path(exists=True, dir_okay=False))
@click.option("--trainable", metavar="REF", default=None,
              help="module:function (or path/file.py:function): this train function is the trial, instead of "
                   "the source's program or container command.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, metavar="OUT",
              help="Write the spec to OUT (a new file; see --force) instead of printing it.")
@click.option("--force", is_flag=True, help="Overwrite OUT if it exists.")
def convert_command(source, trainable, output, force) -> None:
    """Convert a W&B sweep configuration or a Katib Experiment (SOURCE) into a tuner spec.

    The spec goes to stdout, or to OUT. Whatever does not map exactly is named in a comment in
    the spec and on stderr, with the equivalent used. Nothing is written for a SOURCE that
    cannot be converted (exit 2).
    """
    from tuner.convert import convert
    from tuner.experiment.files import atomic_write

    if output and os.path.exists(output) and not force:
        raise InputError("the file exists; tuner convert does not overwrite it (give --force to replace it, or "
                         "another -o).", output)
    if output and not os.path.isdir(os.path.dirname(output) or "."):
        raise InputError("its folder does not exist; create it first.", output)
    converted = convert(source, trainable, out_dir=os.path.dirname(output) or "." if output else None)
    for note in converted.notes:
        where = f"{source}:{note.line}" if note.line else source
        click.echo(f"tuner convert: note: {where}: {note.text()}", err=True)
    if output:
        atomic_write(output, converted.text)
        click.echo(f"Spec: {output} ({len(converted.notes)} notes)", err=True)
    else:
        click.echo(converted.text, nl=False)


@cli.command("schema")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write the schema to this file instead of printing it, e.g. schema/tuner-spec.schema.json.")
def schema_command(output) -> None:
    """Print the JSON Schema (draft-07) of the spec, for completion and checks in an editor.

    Generated from the spec's pydantic models (tuner.spec.schema). A spec whose first line is
    `# yaml-language-server: $schema=PATH` gets them in VS Code's YAML extension (and any
    editor with yaml-language-server).
    """
    from tuner.experiment.files import atomic_write
    from tuner.spec import schema_text

    text = schema_text()
    if output:
        atomic_write(output, text)
        click.echo(f"Schema: {output}")
    else:
        click.echo(text, nl=False)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``tuner`` console script and ``python -m tuner``: the one place that
    turns an error into its message and exit code (as Hydra's ``run_and_report``).

    * A :class:`~tuner.errors.TunerError` (a bad spec, storage, experiment folder or
      cluster address; a trial that ended the experiment; a full disk): ``tuner: error:
      <message>`` and its ``exit_code`` (2 for an :class:`~tuner.errors.InputError`, 1 for
      a :class:`~tuner.errors.TrialError`, 75 for a :class:`~tuner.errors.DiskFullError`).
    * A command-line usage error (click's): its message and usage, exit 2.
    * Ctrl-C: exit 130 (``tuner run``/``resume`` first print how to resume).
    * Anything else is unexpected: ``tuner: error: <type>: <message>``, then
      ``tuner: set TUNER_DEBUG=1 to see the traceback.``, exit 1.

    ``TUNER_DEBUG=1`` prints the traceback before the message of an error.
    """
    try:
        cli.main(args=argv, prog_name="tuner", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("tuner: interrupted.", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as err:
        err.show()
        sys.exit(EXIT_BAD_INPUT)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        click.echo("tuner: interrupted.", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except TunerError as err:  # one paragraph that says what to do, e.g. a SpecError or a full disk's DiskFullError
        if _debug():
            traceback.print_exception(err)
        click.echo(f"tuner: error: {err}", err=True)
        sys.exit(err.exit_code)
    except Exception as err:  # noqa: BLE001 - compact by default, traceback on request
        if _debug():
            traceback.print_exception(err)
        click.echo(f"tuner: error: {type(err).__name__}: {err}", err=True)
        if not _debug():
            click.echo("tuner: set TUNER_DEBUG=1 to see the traceback.", err=True)
        sys.exit(EXIT_TRIALS_FAILED)
