"""Per-trial start-up cost: single-process trials, and DDP trials (Ray Train) launched with Ray
Train's defaults against tuner's lean launch, with where a DDP trial's start-up goes.

Each configuration runs N trials of a train function that does no work and reports once,
on one local Ray with ``--num-cpus`` CPUs. Start-up per trial = wall x trials at once / trials:
the seconds one trial slot spends before its first result.

DDP (2 workers x 1 CPU, gloo) runs in turns A, B, A, B (``--pairs``): A = Ray Train's defaults
(``TUNER_LEAN_DDP=0``), B = tuner's launch (:func:`tuner.run.trainable._train_launcher`). While they
run, ``/proc`` is sampled (as ``benchmarks/proc_cpu.py`` does) for every process that descends
from this one: each Ray worker process is named by its Ray process title (``ray::TrainController``),
so the breakdown counts, per role, the processes a trial starts and their CPU seconds, and times
the chain of one trial: its driver (Tune's trial actor) starts, then Ray Train's controller,
then the workers, then the train function runs (rank 0 records the time), then the next trial's
driver starts.

    python benchmarks/trial_startup.py --trials 6 --pairs 2 --num-cpus 2 --output docs/benchmarks.md

Writes its section of --output (replacing it) and prints it. Linux only (``/proc``).
This is a benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import load_average, machine_line, write_section  # noqa: E402
from benchmarks.proc_cpu import Tracker  # noqa: E402

HEADING = "Per-trial start-up cost (`benchmarks/trial_startup.py`)"
#: The roles of a DDP trial's processes, in the order they start (Ray 2.60's process titles).
ROLES = ("ImplicitFunc", "_QueueActor", "TrainController", "_AutoscalingCoordinatorActor", "PlacementGroupCleaner",
         "SynchronizationActor", "RayTrainWorker", "DatasetManager", "PreemptionWatcher")
ROLE_TEXT = {
    "ImplicitFunc": "the trial's driver (Tune's trial actor)",
    "_QueueActor": "Tune's report queue (TuneReportCallback)",
    "TrainController": "Ray Train's controller",
    "_AutoscalingCoordinatorActor": "Ray Data's autoscaling coordinator (once a Ray session)",
    "PlacementGroupCleaner": "Ray Train's placement group cleaner",
    "SynchronizationActor": "Ray Train's barrier actor",
    "RayTrainWorker": "the workers",
    "DatasetManager": "Ray Train's dataset manager (Ray Data)",
    "PreemptionWatcher": "Ray Train's preemption watcher",
}


def noop(config):
    """A train function that does no work: one report. Rank 0 appends its start time to ``config["log"]``."""
    from tuner import trial

    if config.get("log") and trial.rank() == 0:
        with open(config["log"], "a", encoding="utf-8") as f:
            f.write(f"{time.time():.3f}\n")
    trial.report({"loss": float(config.get("x", 0.0))})


class Sampler:
    """Samples ``/proc`` every 0.1 s in a thread: each descendant's CPU seconds, start time and Ray role."""

    def __init__(self):
        self.tracker = Tracker(os.getpid())
        self.names: dict[tuple[int, int], str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        while not self._stop.is_set():
            self.tracker.sample()
            for key in self.tracker.per_process:
                if self.names.get(key, "") in ("", "python", "IDLE"):  # Ray titles an actor once it is made
                    self.names[key] = _role(key[0])
            time.sleep(0.1)

    def processes(self) -> list[tuple[float, str, float]]:
        """``(start time in epoch seconds, role, CPU seconds)`` of every process seen, by start time."""
        boot = _boot_time()
        tick = os.sysconf("SC_CLK_TCK")
        return sorted((boot + start / tick, self.names.get((pid, start), ""), cpu)
                      for (pid, start), cpu in self.tracker.per_process.items())

    def stop(self):
        self._stop.set()
        self._thread.join()


def _role(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
    if cmd.startswith("ray::"):
        return cmd.split()[0][5:].split(".")[0]
    return "python"


def _boot_time() -> float:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("btime"):
                return float(line.split()[1])
    return 0.0


def run_once(resources: dict, trials: int, reuse: bool, storage: str, name: str, lean: bool = True,
             log: str | None = None) -> float:
    """Wall seconds of one tune_model run of ``trials`` no-op trials."""
    from tuner.run.engine import run_prepared
    from tuner.run.prepare import prepare

    space = {"x": {"type": "uniform", "low": 0, "high": 1}}
    if log:
        space["log"] = log
    spec = {
        "name": name,
        "trainable": "benchmarks.trial_startup:noop",
        "num_samples": trials,
        "param_space": space,
        "resources": resources,
        "reporting": {"cli": False, "tensorboard": False},
        "storage": storage,
    }
    prepared = prepare(spec)
    os.environ["TUNER_REUSE_ACTORS"] = "1" if reuse else "0"
    os.environ["TUNER_LEAN_DDP"] = "1" if lean else "0"
    start = time.perf_counter()
    run_prepared(prepared)
    return time.perf_counter() - start


def ddp_run(trials: int, storage: str, name: str, lean: bool, sampler: Sampler) -> dict:
    """One DDP run of ``trials`` no-op trials; what its processes did."""
    log = os.path.join(storage, f"{name}.starts")
    begin = time.time()
    wall = run_once({"workers": 2, "cpu_per_worker": 1}, trials, True, storage, name, lean=lean, log=log)
    end = time.time()
    time.sleep(1.0)  # the last processes' final samples
    procs = [p for p in sampler.processes() if begin <= p[0] <= end]
    with open(log, encoding="utf-8") as f:
        fn_starts = sorted(float(line) for line in f if line.strip())
    by_role: dict[str, list[float]] = collections.defaultdict(list)
    for _, role, cpu in procs:
        by_role[role or "other"].append(cpu)
    # The chain of each trial: its driver, controller, first worker, train function; the next driver.
    drivers = [t for t, role, _ in procs if role == "ImplicitFunc"]
    chains = []
    for i, d in enumerate(drivers[:len(fn_starts)]):
        nxt = drivers[i + 1] if i + 1 < len(drivers) else end
        ctrl = next((t for t, role, _ in procs if role == "TrainController" and t >= d), None)
        worker = next((t for t, role, _ in procs if role == "RayTrainWorker" and ctrl and t >= ctrl), None)
        fn = next((t for t in fn_starts if t >= d), None)
        if None in (ctrl, worker, fn):
            continue
        chains.append({"driver": ctrl - d, "controller": worker - ctrl, "workers": fn - worker, "end": nxt - fn})
    return {"lean": lean, "wall": wall, "trials": trials, "processes": len(procs),
            "cpu": sum(c for _, _, c in procs), "roles": {r: [len(v), sum(v)] for r, v in by_role.items()},
            "chains": chains}


def _median(xs):
    return statistics.median(xs) if xs else float("nan")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=6, help="trials per run (default 6)")
    parser.add_argument("--pairs", type=int, default=2, help="DDP runs A, B in turns (default 2 pairs)")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None, help="Markdown file whose section is replaced")
    parser.add_argument("--skip-ddp", action="store_true", help="single-process trials only (a quick check)")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw figures here")
    args = parser.parse_args(argv)

    import ray

    from benchmarks._common import start_local_ray

    load_before = load_average()
    start_local_ray(args.num_cpus)
    sampler = Sampler()
    single = []
    ddp = []
    with tempfile.TemporaryDirectory() as storage:
        for reuse in (False, True):
            wall = run_once({"cpu": 1}, args.trials, reuse, storage, f"single_{int(reuse)}")
            at_once = max(1, args.num_cpus)
            single.append((reuse, wall, wall * at_once / args.trials))
            print(f"single process reuse={reuse}: wall {wall:.1f} s", flush=True)
        if not args.skip_ddp:
            for pair in range(args.pairs):
                for lean in (False, True):
                    run = ddp_run(args.trials, storage, f"ddp_{pair}_{int(lean)}", lean, sampler)
                    ddp.append(run)
                    print(f"DDP lean={lean}: wall {run['wall']:.1f} s, {run['processes']} processes, "
                          f"{run['cpu']:.1f} CPU-s", flush=True)
    sampler.stop()
    ray.shutdown()
    if args.json:
        args.json.write_text(json.dumps({"single": single, "ddp": ddp}, indent=1))
    text = render(args, single, ddp, load_before)
    write_section(args.output, HEADING, text)


def render(args, single, ddp, load_before) -> str:
    n = args.trials
    lines = [
        machine_line(load_before, load_average()),
        f"Command: `python benchmarks/trial_startup.py --trials {n} --pairs {args.pairs} "
        f"--num-cpus {args.num_cpus}`. {n} trials of a train function that does no work and reports once, "
        "on one local Ray; start-up per trial = wall x trials at once / trials (the seconds one trial slot "
        "spends before its first result).", "",
        "| trial | launch | actor reuse | trials at once | wall (s) | start-up per trial (s) | processes per trial "
        "| CPU-s per trial |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for reuse, wall, startup in single:
        lines.append(f"| single process, 1 CPU | - | {'on' if reuse else 'off'} | {args.num_cpus} | {wall:.1f} "
                     f"| {startup:.2f} | | |")
    for run in ddp:
        launch = "tuner (lean)" if run["lean"] else "Ray Train defaults"
        lines.append(f"| DDP, 2 workers x 1 CPU (gloo) | {launch} | off (Ray Train) | 1 | {run['wall']:.1f} "
                     f"| {run['wall'] / n:.2f} | {run['processes'] / n:.1f} | {run['cpu'] / n:.1f} |")
    if not ddp:
        return "\n".join(lines) + "\n"
    a = [r for r in ddp if not r["lean"]]
    b = [r for r in ddp if r["lean"]]
    ratio = [rb["wall"] / ra["wall"] for ra, rb in zip(a, b)]
    lines += ["", f"DDP start-up per trial, median: Ray Train defaults {_median([r['wall'] / n for r in a]):.2f} s, "
              f"tuner {_median([r['wall'] / n for r in b]):.2f} s; B/A wall per pair: "
              + ", ".join(f"{x:.3f}" for x in ratio) + f" (median {_median(ratio):.3f}).", ""]
    lines += ["Where a DDP trial's processes go (per trial, summed over the runs of each launch; the "
              "first trial of a Ray session also starts Ray Data's autoscaling coordinator under the defaults):", "",
              "| process (Ray title) | what | defaults: processes | defaults: CPU-s | tuner: processes "
              "| tuner: CPU-s |",
              "|---|---|---|---|---|---|"]
    trials_a, trials_b = n * len(a), n * len(b)

    def per(runs, role, k, trials):
        return sum(r["roles"].get(role, [0, 0.0])[k] for r in runs) / trials

    for role in ROLES:
        lines.append(f"| `{role}` | {ROLE_TEXT[role]} | {per(a, role, 0, trials_a):.2f} "
                     f"| {per(a, role, 1, trials_a):.2f} | {per(b, role, 0, trials_b):.2f} "
                     f"| {per(b, role, 1, trials_b):.2f} |")
    other = sorted({role for r in ddp for role in r["roles"]} - set(ROLES))
    for role in other:
        lines.append(f"| `{role}` | other | {per(a, role, 0, trials_a):.2f} | {per(a, role, 1, trials_a):.2f} "
                     f"| {per(b, role, 0, trials_b):.2f} | {per(b, role, 1, trials_b):.2f} |")
    lines += ["", "The chain of one trial (median over the trials; seconds):", "",
              "| launch | driver start -> controller start | controller -> first worker process | "
              "worker process -> train function (imports, process group) | train function -> next trial's driver "
              "(report, shutdown, release) | sum |",
              "|---|---|---|---|---|---|"]
    for label, runs in (("Ray Train defaults", a), ("tuner (lean)", b)):
        chains = [c for r in runs for c in r["chains"]]
        parts = [_median([c[k] for c in chains]) for k in ("driver", "controller", "workers", "end")]
        lines.append(f"| {label} | " + " | ".join(f"{p:.2f}" for p in parts) + f" | {sum(parts):.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
