"""The cost of a command trial: a training script run as a process per trial, against a function trial
doing the same work.

Both sides run ``--trials`` trials of ``benchmarks/command_workload.py``'s trivial computation, each
making ``--reports`` reports, through :func:`tuner.tune_model` on one local Ray of ``--num-cpus`` CPUs
(1 CPU a trial, actor reuse on as tuner sets it): as a *function trial* (``function_trial`` below, in
Ray's trial worker process, which Ray reuses from trial to trial) and as a *command trial*
(``trainable: {command: [python, benchmarks/command_workload.py, ...]}``: per trial a leader process,
``tuner/run/command_leader.py``, and the script's own Python process, its JSON lines read as reports).
The ``+ torch`` variants import torch first, as a real training script does: a command trial pays that
import in every trial, a function trial once per worker process.

Per trial, from Ray's results (``result.json``): the seconds in the trainable (``time_total_s`` at the
last report), the time to the first report (its ``time_this_iter_s``: from the trial's first step to the
first report), and the seconds per later report (median ``time_this_iter_s``). The first report carries
the workload's stamps, which split the time to it into the part before the script's (or function's)
first line, its imports, and the rest. Per run: the wall time of ``tune_model`` (Ray's start excluded:
the runs share one Ray), and the slot seconds per trial (wall x trials at once / trials: everything a
trial costs, its process start and end and Tune's bookkeeping included). Then, alone and outside Ray:
``python -c pass``, ``python -c "import torch"``, the workload script, and one command trial of it (the
train function ``tune_model`` builds, called in this process: the leader, the script, its lines read),
each ``--startup-runs`` times in turns after one warm-up.

    python benchmarks/command_overhead.py --trials 8 --reports 5 --repeats 2 --output docs/benchmarks.md

``--quick`` is the smoke test's size (3 trials, 2 reports, no torch, one start-up run each). Writes its
section of --output (replacing it) and prints it. A benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import load_average, local_ray, machine_line, median, python, write_section  # noqa: E402
from benchmarks.command_workload import reports  # noqa: E402

HEADING = "Command trials against function trials (`benchmarks/command_overhead.py`)"
SCRIPT = ROOT / "benchmarks" / "command_workload.py"
#: name: (a command trial?, import torch?)
VARIANTS = {
    "function": (False, False),
    "command": (True, False),
    "function + torch": (False, True),
    "command + torch": (True, True),
}


def function_trial(config: dict) -> None:
    """The function trial: :func:`benchmarks.command_workload.reports` in the trial's worker process,
    torch imported first when ``config["torch"]`` (once per process: Python keeps the module)."""
    from tuner import trial

    started = time.time()
    if config["torch"]:
        import torch  # noqa: F401
    imported = time.time()
    for values in reports(float(config["x"]), int(config["reports"]), started, imported):
        trial.report(values)


def variant_spec(variant: str, trials: int, count: int, storage: str, name: str) -> dict:
    """The spec of one run of ``variant`` (a key of :data:`VARIANTS`): ``trials`` trials of ``count`` reports."""
    command, torch = VARIANTS[variant]
    space: dict = {"x": {"type": "uniform", "low": 0.0, "high": 1.0}, "reports": count}
    if command:
        trainable: object = {"command": ["python", str(SCRIPT), "--reports", "{reports}", "--x", "{x}"]
                             + (["--torch"] if torch else []), "metrics": "json", "cwd": str(ROOT)}
    else:
        trainable = "benchmarks.command_overhead:function_trial"
        space["torch"] = torch
    return {"name": name, "trainable": trainable, "metric": "loss", "mode": "min", "num_samples": trials,
            "seed": 0, "param_space": space, "resources": {"cpu": 1},
            "reporting": {"cli": False, "tensorboard": False}, "storage": storage}


def trial_figures(experiment: Path) -> list[dict]:
    """Per trial of a finished experiment, from its ``result.json``: ``reports``, ``total_s``, ``first_s``,
    ``before_s`` (to the first line of the script or function), ``imports_s`` and ``per_report_s``."""
    out = []
    for path in sorted(experiment.glob("*/result.json")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        rows.sort(key=lambda r: r["training_iteration"])
        first = rows[0]
        work_s = first["t_sent"] - first["t_started"]
        out.append({"reports": len(rows), "total_s": rows[-1]["time_total_s"], "first_s": first["time_this_iter_s"],
                    "before_s": first["time_this_iter_s"] - work_s,
                    "imports_s": first["t_imported"] - first["t_started"],
                    "per_report_s": median([r["time_this_iter_s"] for r in rows[1:]]),
                    "pid": first["pid"], "start": first["t_sent"] - first["time_this_iter_s"]})
    return out


def cycles(trials: list[dict]) -> list[float]:
    """Seconds from one trial's start to the next one's on the same worker process (Ray's ``pid``): all a
    trial costs a reused worker (its run, its program's exit, Tune's reset), without the worker's own start."""
    out = []
    for pid in {t["pid"] for t in trials}:
        starts = sorted(t["start"] for t in trials if t["pid"] == pid)
        out += [b - a for a, b in zip(starts, starts[1:])]
    return out


def run_variant(storage: str, variant: str, trials: int, count: int, num_cpus: int, key: str) -> dict:
    """One ``tune_model`` run of ``variant``: its wall seconds, the load when it started, and its trials' figures.

    Raises:
        RuntimeError: A trial did not finish (errored, or made fewer reports than ``count``).
    """
    from tuner import tune_model

    load = load_average()
    began = time.perf_counter()
    result = tune_model(variant_spec(variant, trials, count, storage, key))
    wall = time.perf_counter() - began
    figures = trial_figures(Path(result.experiment_path))
    if result.num_errors or len(figures) != trials or any(f["reports"] != count for f in figures):
        raise RuntimeError(f"{variant}: {result.num_errors} errors, {[f['reports'] for f in figures]} reports "
                           f"({result.experiment_path})")
    return {"variant": variant, "wall_s": wall, "load": load, "slot_s": wall * min(num_cpus, trials) / trials,
            "cycles": cycles(figures), "trials": figures}


def startup_commands(with_torch: bool, count: int, work: str) -> dict[str, list[str] | Callable[[], None]]:
    """What is timed alone: name to an argument list (a process), or to a call: one command trial of the
    workload run outside Ray (:class:`tuner.run.command.CommandTrial` as ``tune_model`` builds it: the leader,
    the script, its lines read as reports), its trial folder under ``work``."""
    py = python()
    commands: dict[str, list[str] | Callable[[], None]] = {
        "`python -c pass`": [py, "-c", "pass"],
        f"`python benchmarks/command_workload.py --reports {count}`": [py, str(SCRIPT), "--reports", str(count)],
        f"a command trial of it outside Ray (`--reports {count}`)": command_trial_call("command", count, work)}
    if with_torch:
        commands['`python -c "import torch"`'] = [py, "-c", "import torch"]
        commands[f"`python benchmarks/command_workload.py --reports {count} --torch`"] = [
            py, str(SCRIPT), "--reports", str(count), "--torch"]
        commands[f"a command trial of it outside Ray (`--reports {count} --torch`)"] = command_trial_call(
            "command + torch", count, work)
    return commands


def command_trial_call(variant: str, count: int, work: str) -> Callable[[], None]:
    """One command trial of ``variant`` outside Ray, as a call: the train function ``tune_model`` builds from
    the spec, on the trial's default options (``tuner.trial.configure``), its reports printed to nowhere."""
    import contextlib
    import io
    import tempfile

    from tuner import trial
    from tuner.run.prepare import prepare

    train = prepare(variant_spec(variant, 1, count, work, "alone")).trainable

    def call() -> None:
        trial.configure(trial.TrialOptions())
        old, tempfile.tempdir = tempfile.tempdir, work  # the trial's folder outside Ray: a temporary one
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                train({"x": 0.5, "reports": count})
        finally:
            tempfile.tempdir = old
            trial.configure(None)

    return call


def time_startups(commands: dict[str, list[str] | Callable[[], None]], runs: int) -> dict[str, dict[str, list[float]]]:
    """Each command ``runs`` times in turns after one warm-up round (not counted): ``wall`` (seconds from start
    to exit) and, for a process, ``cpu`` (its user + system seconds and its waited-for children's, from
    ``wait4``) and, when it prints, ``exit`` (seconds from its last line read to its exit: the interpreter's
    shutdown, torch's teardown included)."""
    times: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": [], "exit": []} for name in commands}
    for round_ in range(runs + 1):
        for name, cmd in commands.items():
            began = time.perf_counter()
            if callable(cmd):
                cmd()
                if round_:
                    times[name]["wall"].append(time.perf_counter() - began)
                continue
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            last = None
            for _ in proc.stdout:  # type: ignore[union-attr]
                last = time.perf_counter()
            _, status, usage = os.wait4(proc.pid, 0)
            ended = time.perf_counter()
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode != 0:
                raise RuntimeError(f"{cmd} exited {proc.returncode}")
            if round_:
                times[name]["wall"].append(ended - began)
                times[name]["cpu"].append(usage.ru_utime + usage.ru_stime)
                if last is not None:
                    times[name]["exit"].append(ended - last)
    return times

def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=8, help="trials per run (default 8)")
    parser.add_argument("--reports", type=int, default=5, help="reports per trial (default 5)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each variant, in turns (default 2)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {', '.join(VARIANTS)}")
    parser.add_argument("--startup-runs", type=int, default=5, help="timed runs of each process alone (default 5)")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--quick", action="store_true",
                        help="the smoke test's size: 3 trials, 2 reports, 1 repeat, no torch, 1 start-up run")
    parser.add_argument("--output", type=Path, default=None, help="Markdown file whose section is replaced")
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.reports, args.repeats, args.startup_runs = 3, 2, 1, 1
        args.variants = "function,command"
    names = {v.replace(" ", ""): v for v in VARIANTS}  # "function+torch" and "function + torch" alike
    asked = [v.replace(" ", "") for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in asked if v not in names]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    chosen = [names[v] for v in asked]
    if args.reports < 2:
        parser.error("--reports must be at least 2 (the seconds per report are the later reports')")

    import tempfile

    load_before = load_average()
    runs = []
    began = time.perf_counter()
    with local_ray(args.num_cpus), tempfile.TemporaryDirectory(prefix="tuner-bench-command-") as storage:
        for rep in range(args.repeats):
            for i, variant in enumerate(chosen):
                run = run_variant(storage, variant, args.trials, args.reports, args.num_cpus, f"r{rep}_v{i}")
                runs.append(run)
                print(f"{variant} run {rep + 1}: wall {run['wall_s']:.1f} s, per trial "
                      f"{median([t['total_s'] for t in run['trials']]):.2f} s", flush=True)
    total_s = time.perf_counter() - began
    startups = {}
    if args.startup_runs:
        with tempfile.TemporaryDirectory(prefix="tuner-bench-command-alone-") as work:
            startups = time_startups(startup_commands(any(VARIANTS[v][1] for v in chosen), args.reports, work),
                                     args.startup_runs)
    write_section(args.output, HEADING, render(args, chosen, runs, startups, load_before, total_s))


def render(args, chosen: list[str], runs: list[dict], startups: dict[str, dict[str, list[float]]],
           load_before: float, total_s: float) -> str:
    """The section's Markdown: the command, the trial table, the start-up table."""
    loads = ", ".join(f"{r['load']:.1f}" for r in runs)
    lines = [
        machine_line(load_before),
        f"Command: `python benchmarks/command_overhead.py --trials {args.trials} --reports {args.reports} "
        f"--repeats {args.repeats} --variants {','.join(chosen).replace(' ', '')} "
        f"--startup-runs {args.startup_runs} --num-cpus {args.num_cpus}` ({total_s:.0f} s of trials, "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}). {args.trials} trials x {args.reports} reports of a trivial "
        f"computation, 1 CPU a trial on a local Ray of {args.num_cpus} CPUs, actor reuse on; each variant "
        f"{args.repeats} time(s), in turns. The 1-minute load average when each run started: {loads}.",
        "",
        "| trial | wall per run (s) | slot s per trial | trial to trial on one worker (s) | s per trial in the "
        "trainable | first report (s) | of which before the first line (s) | of which imports (s), median (max) "
        "| s per later report |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for variant in chosen:
        mine = [r for r in runs if r["variant"] == variant]
        trials = [t for r in mine for t in r["trials"]]

        def med(key, trials=trials):
            return median([t[key] for t in trials])

        walls = ", ".join(f"{r['wall_s']:.1f}" for r in mine)
        cycle = median([c for r in mine for c in r["cycles"]])
        lines.append(f"| {variant} | {walls} | {median([r['slot_s'] for r in mine]):.2f} | {cycle:.3f} "
                     f"| {med('total_s'):.3f} | {med('first_s'):.3f} | {med('before_s'):.3f} "
                     f"| {med('imports_s'):.3f} ({max(t['imports_s'] for t in trials):.3f}) "
                     f"| {med('per_report_s'):.4f} |")
    lines += [
        "",
        "Each figure but the wall is the median over the trials of all runs of the variant. Wall: `tune_model` "
        "from call to return (spec checks, Tune, results files; the local Ray was started before). Slot s per "
        "trial: wall x trials at once / trials (the worker processes' own start included). Trial to trial: from "
        "one trial's start (its first step) to the next one's on the same reused worker process (Ray's `pid`), "
        "all a trial costs a warm worker: its run, its program's exit, Tune's reset. In the trainable: Ray's "
        "`time_total_s` at the last report. First report: its `time_this_iter_s` (from the trial's first step); "
        "before the first line: that minus the "
        "workload's own time to the report (a command trial: the leader's and the script's Python start-up; a "
        "function trial: Tune's thread start); imports: the workload's (`import torch` for `+ torch`; a function "
        "trial pays it in the first trial of each worker process only: near 0 in the median, the max shows it).",
    ]
    differences = [difference(runs, fn, cmd, args) for fn, cmd in (("function", "command"),
                                                                      ("function + torch", "command + torch"))
                   if fn in chosen and cmd in chosen]
    if differences:
        lines += ["", "A command trial's extra cost over the function trial: " + "; ".join(differences) + "."]
    if startups:
        lines += ["", f"Alone, outside Ray (wall seconds, {args.startup_runs} run(s) each in turns after a warm-up; "
                      "CPU seconds of a process and its waited-for children):", "",
                  "| process | median (s) | min (s) | max (s) | CPU s, median | last line to exit, median (s) |",
                  "|---|---|---|---|---|---|"]
        for name, times in startups.items():
            wall, exit_ = times["wall"], times["exit"]
            cpu = f"{median(times['cpu']):.3f}" if times["cpu"] else "-"
            lines.append(f"| {name} | {median(wall):.3f} | {min(wall):.3f} | {max(wall):.3f} | {cpu} "
                         f"| {f'{median(exit_):.3f}' if exit_ else '-'} |")
    return "\n".join(lines) + "\n"


def difference(runs: list[dict], function: str, command: str, args) -> str:
    """``command`` against ``function``: the medians' difference of the seconds in the trainable and of the trial
    to trial seconds on one worker, and the slot seconds per trial from the two runs' wall times (the runs of one
    repeat paired)."""
    fn = [r for r in runs if r["variant"] == function]
    cmd = [r for r in runs if r["variant"] == command]

    def gap(pick):
        return median([x for r in cmd for x in pick(r)]) - median([x for r in fn for x in pick(r)])

    in_trainable = gap(lambda r: [t["total_s"] for t in r["trials"]])
    cycle = gap(lambda r: r["cycles"])
    at_once = min(args.num_cpus, args.trials)
    slots = [(c["wall_s"] - f["wall_s"]) * at_once / args.trials for f, c in zip(fn, cmd)]
    return (f"`{command}` {in_trainable:+.3f} s a trial in the trainable, {cycle:+.3f} s trial to trial on one "
            f"worker, {median(slots):+.2f} s a trial slot (wall difference x {at_once} / {args.trials}; per repeat "
            + ", ".join(f"{s:+.2f}" for s in slots) + ")")

if __name__ == "__main__":
    main()
