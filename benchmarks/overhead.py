"""Benchmark 1: the overhead of ``tuner run`` against a plain Ray Tune script.

The same workload runs through ``tuner run SPEC`` (side A: ``benchmarks/timed_cli.py``,
which is ``python -m tuner`` with ``Tuner.fit()`` timed) and through the plain Ray Tune
script a Ray user would write (side B: ``benchmarks/raw_ray.py``), each in its own
process, in turns A, B, A, B. Both use the same train function
(``benchmarks/workloads.py:trivial``: no work, ``--results`` reports), 1 CPU a trial on
a local Ray of ``--num-cpus`` CPUs, actor reuse on, and a quiet console (``reporting:
{cli: false}`` against ``verbose=0``); both keep Ray's JSON, CSV and TensorBoard logs.

Workloads: random search + FIFO, BOHB (TuneBOHB + HyperBandForBOHB), random + ASHA.

Per pair it reports the wall-time ratio A/B of the whole command (process start to exit,
Ray start-up and shutdown included) and of ``Tuner.fit()`` alone, and their medians; the
start-up time to the first trial (process start to the first train function call); and
the time ``tuner validate`` takes, checking that it starts no Ray.

    python benchmarks/overhead.py --trials 200 --results 10 --pairs 3 --output docs/benchmarks.md

This is a benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import load_average, machine_line, median, python, run_timed, write_section

HEADING = "Overhead against raw Ray Tune (`benchmarks/overhead.py`)"

WORKLOADS = {
    # name: (tuner search, tuner scheduler, raw --search, raw --scheduler)
    "random + FIFO": ({"algorithm": "random"}, {"type": "fifo"}, "random", "fifo"),
    "BOHB": ({"algorithm": "bohb"}, {"type": "bohb", "reduction_factor": 3}, "bohb", "bohb"),
    "random + ASHA": ({"algorithm": "random"}, {"type": "asha", "grace_period": 1, "reduction_factor": 3},
                      "random", "asha"),
}


def tuner_spec(name: str, storage: Path, trials: int, results: int, search: dict, scheduler: dict,
               stamp_dir: Path) -> dict:
    sched = dict(scheduler)
    if sched["type"] != "fifo":
        sched["max_t"] = results
    return {
        "name": name,
        "trainable": "benchmarks.workloads:trivial",
        "metric": "loss",
        "mode": "min",
        "num_samples": trials,
        "seed": 0,
        "stop": {"training_iteration": results},
        "param_space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0}, "results": results,
                        "stamp_dir": str(stamp_dir)},
        "search": search,
        "scheduler": sched,
        "resources": {"cpu": 1},
        "reporting": {"cli": False},
        "storage": str(storage),
    }


def _stamps(stamp_dir: Path, launched: float) -> tuple[float, int]:
    first = stamp_dir / "first_trial"
    t = float(first.read_text()) - launched if first.exists() else float("nan")
    return t, len(list(stamp_dir.glob("pid_*")))


def run_tuner(work: Path, tag: str, trials: int, results: int, search: dict, scheduler: dict,
              num_cpus: int) -> dict:
    import yaml

    stamp = work / f"stamp_{tag}"
    stamp.mkdir()
    spec_file = work / f"{tag}.yaml"
    spec_file.write_text(yaml.safe_dump(tuner_spec(tag, work / "runs", trials, results, search, scheduler, stamp)))
    load = load_average()
    t = run_timed([python(), "benchmarks/timed_cli.py", "run", str(spec_file), "--num-cpus", str(num_cpus)],
                  work / f"{tag}.json")
    t["load"] = load
    t["first_trial_s"], t["actors"] = _stamps(stamp, t["launched"])
    with open(work / "runs" / tag / "results.csv", newline="") as f:
        t["last_iterations"] = sum(int(float(r.get("training_iteration") or 0)) for r in csv.DictReader(f))
    return t


def run_raw(work: Path, tag: str, trials: int, results: int, search: str, scheduler: str, num_cpus: int) -> dict:
    stamp = work / f"stamp_{tag}"
    stamp.mkdir()
    load = load_average()
    t = run_timed([python(), "benchmarks/raw_ray.py", "--workload", "trivial", "--trials", str(trials),
                   "--results", str(results), "--search", search, "--scheduler", scheduler,
                   "--num-cpus", str(num_cpus), "--storage", str(work / "runs"), "--name", tag,
                   "--stamp-dir", str(stamp)], work / f"{tag}.json")
    t["load"] = load
    t["first_trial_s"], t["actors"] = _stamps(stamp, t["launched"])
    return t


def time_validate(work: Path, repeats: int) -> tuple[list[float], bool]:
    """Wall seconds of ``python -m tuner validate`` and whether Ray left any trace.

    ``RAY_TMPDIR`` points at an empty folder: a Ray that started would create its
    session folder (``ray/session_*``) there.
    """
    import yaml

    spec_file = work / "validate.yaml"
    spec_file.write_text(yaml.safe_dump(tuner_spec("validate", work / "runs", 200, 10, {"algorithm": "bohb"},
                                                   {"type": "bohb", "reduction_factor": 3}, work)))
    ray_tmp = work / "ray_tmp"
    ray_tmp.mkdir()
    times = []
    for i in range(repeats):
        t = run_timed([python(), "-m", "tuner", "validate", str(spec_file), "--num-cpus", "2"],
                      work / f"validate_{i}.json", env={"RAY_TMPDIR": str(ray_tmp)})
        times.append(t["wall_s"])
    started_ray = any(ray_tmp.iterdir())
    return times, started_ray


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200, help="trials per run (default 200)")
    parser.add_argument("--results", type=int, default=10, help="reports per trial (default 10)")
    parser.add_argument("--pairs", type=int, default=3, help="A, B pairs per workload (default 3)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated, of: {', '.join(WORKLOADS)}")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--validate-repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=None, help="Markdown file to write the section into")
    args = parser.parse_args(argv)
    chosen = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in chosen if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; choose from {list(WORKLOADS)}")

    load_before = load_average()
    rows, summary = [], []
    with tempfile.TemporaryDirectory(prefix="tuner-bench-overhead-") as tmp:
        work = Path(tmp)
        validate_times, started_ray = time_validate(work, args.validate_repeats)
        for w in chosen:
            search, sched, raw_search, raw_sched = WORKLOADS[w]
            wall_ratios, fit_ratios, cpu_ratios = [], [], []
            for p in range(args.pairs):
                key = f"{w.split()[-1].lower()}_{p}"
                a = run_tuner(work, f"a_{key}", args.trials, args.results, search, sched, args.num_cpus)
                b = run_raw(work, f"b_{key}", args.trials, args.results, raw_search, raw_sched, args.num_cpus)
                wall_ratios.append(a["wall_s"] / b["wall_s"])
                fit_ratios.append(a["fit_s"] / b["fit_s"])
                cpu_ratios.append(a["cpu_s"] / b["cpu_s"])
                rows.append((w, p + 1, a, b))
                print(f"{w} pair {p + 1}: tuner {a['wall_s']:.1f} s (fit {a['fit_s']:.1f}), "
                      f"Ray {b['wall_s']:.1f} s (fit {b['fit_s']:.1f}), ratio {wall_ratios[-1]:.3f}", flush=True)
            summary.append((w, median(wall_ratios), median(fit_ratios), median(cpu_ratios),
                            median([r[2]["first_trial_s"] for r in rows if r[0] == w]),
                            median([r[3]["first_trial_s"] for r in rows if r[0] == w])))

    lines = [
        machine_line(load_before),
        f"Command: `python benchmarks/overhead.py --trials {args.trials} --results {args.results} "
        f"--pairs {args.pairs} --num-cpus {args.num_cpus}`. "
        f"A = `tuner run` (`python -m tuner`, `reporting: {{cli: false}}`), B = the plain Ray Tune script "
        f"`benchmarks/raw_ray.py` (`verbose=0`); {args.trials} trials x {args.results} results of a train "
        f"function that does no work, 1 CPU a trial on {args.num_cpus} CPUs, actor reuse on in both, run in "
        "turns A, B, A, B. Wall = process start to exit (Ray start-up and shutdown included); fit = "
        "`Tuner.fit()` alone; first trial = process start to the first train function call; driver CPU = "
        "user + system seconds of the driver process (`getrusage`), which other load on the machine "
        "disturbs far less than wall time.",
        "",
        "| workload | pair | A wall (s) | B wall (s) | wall A/B | A fit (s) | B fit (s) | fit A/B | "
        "A driver CPU (s) | B driver CPU (s) | A first trial (s) | B first trial (s) | results A / B | "
        "trial actors A / B | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w, p, a, b in rows:
        lines.append(f"| {w} | {p} | {a['wall_s']:.1f} | {b['wall_s']:.1f} | {a['wall_s'] / b['wall_s']:.3f} | "
                     f"{a['fit_s']:.1f} | {b['fit_s']:.1f} | {a['fit_s'] / b['fit_s']:.3f} | "
                     f"{a['cpu_s']:.1f} | {b['cpu_s']:.1f} | "
                     f"{a['first_trial_s']:.2f} | {b['first_trial_s']:.2f} | "
                     f"{a['last_iterations']} / {b['last_iterations']} | {a['actors']} / {b['actors']} | "
                     f"{a['load']:.1f}, {b['load']:.1f} |")
    lines += ["", "| workload | median wall A/B | median fit A/B | median driver CPU A/B | median first trial A (s) | "
              "median first trial B (s) | target wall A/B <= 1.05 |", "|---|---|---|---|---|---|---|"]
    for w, wr, fr, cr, fa, fb in summary:
        lines.append(f"| {w} | {wr:.3f} | {fr:.3f} | {cr:.3f} | {fa:.2f} | {fb:.2f} | "
                     f"{'met' if wr <= 1.05 else 'NOT met'} |")
    lines += [
        "",
        f"`tuner validate` (BOHB spec, {args.validate_repeats} runs): median {median(validate_times):.2f} s "
        f"(min {min(validate_times):.2f}, max {max(validate_times):.2f}); "
        + ("it started **no** Ray (no session folder under `RAY_TMPDIR`)." if not started_ray
           else "**it started Ray** (a session folder appeared under `RAY_TMPDIR`)."),
        "",
        "Results A / B: the sum over trials of the last `training_iteration` (the reports the trials made "
        "and kept); trial actors: worker processes that ran a trial (at most one per CPU when actors are "
        "reused); load: the machine's 1-minute load average when each side started.",
    ]
    write_section(args.output, HEADING, "\n".join(lines))


if __name__ == "__main__":
    main()
