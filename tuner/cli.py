"""The command line: ``tuner run|validate SPEC`` (also ``python -m tuner``).

Exit codes: 0 every trial ended well; 1 some trials errored (named in the summary);
2 bad input (nothing started, nothing written); 130 interrupted.

Errors are one compact paragraph; ``TUNER_DEBUG=1`` shows the full traceback.
"""

from __future__ import annotations

import os
import sys
import traceback

import click

from tuner.spec import SpecError

EXIT_OK, EXIT_TRIALS_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def _debug() -> bool:
    return os.environ.get("TUNER_DEBUG", "") not in ("", "0")


def _bad_input(err: Exception) -> None:
    if _debug():
        traceback.print_exception(err)
    click.echo(f"tuner: error: {err}", err=True)
    sys.exit(EXIT_BAD_INPUT)


_run_options = [
    click.option("--storage", type=str, default=None, help="Parent folder of the experiment (overrides spec.storage)."),
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


def _parse_sets(sets: tuple[str, ...]) -> dict:
    """``("a.b=1", "c=x")`` -> ``{"a": {"b": 1}, "c": "x"}``, values read as YAML."""
    from tuner.spec import SpecIssue, parse_yaml

    out: dict = {}
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip() or any(not part for part in key.split(".")):
            raise SpecError([SpecIssue("", f"--set takes KEY=VALUE with a dotted KEY such as scheduler.max_t=5, "
                                       f"but got {item!r}.")], "--set")
        value, _ = parse_yaml(f"v: {raw}" if raw.strip() else "v: ''", "--set")
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SpecError([SpecIssue(key, "--set gives a value and a nested value for the same key.")], "--set")
        node[parts[-1]] = value["v"]
    return out


def _prepare(spec_path, storage, name, num_samples, num_cpus, num_gpus, sets=(), address=None):
    from tuner.engine import prepare

    try:
        overrides = _parse_sets(sets)
        overrides.update({k: v for k, v in {"storage": storage, "name": name, "num_samples": num_samples}.items()
                          if v is not None})
        return prepare(spec_path, num_cpus=num_cpus, num_gpus=num_gpus, address=address, **overrides)
    except SpecError as err:
        _bad_input(err)


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=True))
@_with_run_options
def validate(spec_path, storage, name, num_samples, num_cpus, num_gpus, sets) -> None:
    """Check SPEC and print the plan; starts nothing, writes nothing."""
    from tuner.engine import plan

    prepared = _prepare(spec_path, storage, name, num_samples, num_cpus, num_gpus, sets)
    click.echo(plan(prepared))


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=True))
@_with_run_options
@click.option("--address", type=str, default=None,
              help="Connect to this Ray cluster (auto, host:6379, ray://host:10001) instead of starting one.")
@click.option("--dry-run", is_flag=True, help="Validate and print the plan, as `tuner validate`.")
def run(spec_path, storage, name, num_samples, num_cpus, num_gpus, sets, address, dry_run) -> None:
    """Run the tuning experiment described by SPEC."""
    from tuner.engine import plan, run_prepared
    from tuner.failures import ExperimentLocked

    prepared = _prepare(spec_path, storage, name, num_samples, num_cpus, num_gpus, sets, address)
    if dry_run:
        click.echo(plan(prepared))
        return
    try:
        result = run_prepared(prepared, echo=click.echo)
    except (SpecError, ExperimentLocked) as err:  # checked once connected / once the folder is locked
        _bad_input(err)
    except KeyboardInterrupt:
        _interrupted(prepared.experiment_path)
    _finish(result)


def _interrupted(path) -> None:
    click.echo(f"tuner: interrupted; the state is saved. Resume with:\n  tuner resume {path}", err=True)
    sys.exit(EXIT_INTERRUPTED)


def _finish(result) -> None:
    """Print the closing lines of a run and exit with its code."""
    click.echo(f"Results: {result.experiment_path} (summary.json, results.csv"
               f"{', best_config.yaml' if result.best_config is not None else ''})")
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
@click.argument("experiment", metavar="EXPERIMENT_DIR", type=click.Path(file_okay=False))
@click.option("--spec", "spec_path", type=click.Path(dir_okay=False), default=None,
              help="The spec to resume with (default: its original file if it still exists, else the copy "
                   "saved in the experiment). It must match the experiment's.")
@click.option("--resume-errored", is_flag=True, help="Continue errored trials from their latest checkpoints.")
@click.option("--restart-errored", is_flag=True, help="Start errored trials over from scratch.")
@click.option("--num-cpus", type=float, default=None, help="CPUs of the local Ray (default: all).")
@click.option("--num-gpus", type=float, default=None, help="GPUs of the local Ray (default: detected).")
@click.option("--address", type=str, default=None, help="Connect to this Ray cluster instead of starting one.")
def resume(experiment, spec_path, resume_errored, restart_errored, num_cpus, num_gpus, address) -> None:
    """Resume a stopped or crashed experiment (Ray Tune's Tuner.restore)."""
    from tuner.engine import prepare_resume, resume_prepared
    from tuner.failures import ExperimentLocked

    if resume_errored and restart_errored:
        _bad_input(click.UsageError("--resume-errored and --restart-errored exclude each other; choose one."))
    try:
        prepared = prepare_resume(experiment, spec=spec_path, num_cpus=num_cpus, num_gpus=num_gpus, address=address)
        result = resume_prepared(prepared, resume_errored=resume_errored, restart_errored=restart_errored,
                                 echo=click.echo)
    except (SpecError, ExperimentLocked) as err:
        _bad_input(err)
    except KeyboardInterrupt:
        _interrupted(experiment)
    _finish(result)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``tuner`` console script and ``python -m tuner``."""
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
    except Exception as err:  # noqa: BLE001 - compact by default, traceback on request
        if _debug():
            traceback.print_exception(err)
        click.echo(f"tuner: error: {type(err).__name__}: {err}", err=True)
        if not _debug():
            click.echo("tuner: set TUNER_DEBUG=1 to see the traceback.", err=True)
        sys.exit(EXIT_TRIALS_FAILED)
