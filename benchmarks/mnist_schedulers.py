"""Benchmark 4: a real training run, ASHA against FIFO on the MNIST CNN of ``examples/``.

The main job's spec (``search_spaces/mnist_asha.yaml``: the small CNN on the 5,000 MNIST
digits, 1 CPU a trial, 2 at a time), at ``--trials`` trials (16 by default; the spec itself
has 8) of up to ``--epochs`` epochs (10 by default; the spec has 6), runs with its ASHA
scheduler and with ``fifo`` (every trial trains all its epochs), for the same sampling
seeds (the same configurations for both), on one local Ray. The train function is
``examples/mnist.py:train`` unchanged, wrapped only to log the wall clock of each
report (``benchmarks/workloads.py:mnist_logged``).

Reports, per run: the wall time and the epochs spent (over all trials, in the order
results arrived) until the first ``val_accuracy >= --accuracy``, the whole run's time
and epochs, and the best final accuracy.

    python benchmarks/mnist_schedulers.py --seeds 0,1,2 --output docs/benchmarks.md

This is a benchmark, not a test: nothing here asserts a result.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import ROOT, load_average, local_ray, machine_line, write_section

HEADING = "A real training run: MNIST CNN, ASHA against FIFO (`benchmarks/mnist_schedulers.py`)"
BASE_SPEC = ROOT / "search_spaces" / "mnist_asha.yaml"


def run_one(scheduler: str, seed: int, trials: int, epochs: int, accuracy: float, storage: Path,
            limit_train: int | None) -> dict:
    from tuner import tune_model
    from tuner.spec import parse_yaml

    spec, _ = parse_yaml(BASE_SPEC.read_text())  # tuner's reading: 5e-3 is a float (PyYAML alone: a string)
    name = f"mnist_{scheduler}_{seed}"
    log = storage / f"{name}.log"
    spec.update(name=name, trainable="benchmarks.workloads:mnist_logged", num_samples=trials, seed=seed,
                storage=str(storage), stop={"training_iteration": epochs})
    spec["param_space"] = {**spec["param_space"], "epochs": epochs, "report_log": str(log)}
    if limit_train:
        spec["param_space"].update(limit_train=limit_train, limit_val=max(100, limit_train // 4))
    spec["reporting"] = {"cli": False, "tensorboard": True}
    if scheduler == "fifo":
        spec["scheduler"] = {"type": "fifo"}
    else:
        spec["scheduler"] = {**spec["scheduler"], "max_t": epochs}
    started = time.time()
    result = tune_model(spec)
    ended = time.time()
    reports = []
    for line in log.read_text().splitlines():
        t, trial_id, epoch, acc = line.split()
        reports.append((float(t), trial_id, int(epoch), float(acc)))
    reports.sort()
    reach_s = reach_epochs = math.nan
    for i, (t, _, _, acc) in enumerate(reports):
        if acc >= accuracy:
            reach_s, reach_epochs = t - started, i + 1
            break
    best = (result.best_metrics or {}).get("val_accuracy", math.nan)
    return {"scheduler": scheduler, "seed": seed, "wall_s": ended - started, "epochs": len(reports),
            "reach_s": reach_s, "reach_epochs": reach_epochs, "best": best,
            "trials": int(result.summary["trials"]["total"])}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2", help="sampling seeds, comma-separated (default 0,1,2)")
    parser.add_argument("--trials", type=int, default=16, help="trials per run (default 16, as the main job)")
    parser.add_argument("--epochs", type=int, default=10, help="max epochs per trial (default 10)")
    parser.add_argument("--accuracy", type=float, default=0.97, help="the accuracy to reach (default 0.97)")
    parser.add_argument("--limit-train", type=int, default=None, help="train on fewer digits (quick checks only)")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None, help="Markdown file to write the section into")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]

    load_before = load_average()
    runs = []
    with local_ray(args.num_cpus):
        with tempfile.TemporaryDirectory(prefix="tuner-bench-mnist-") as tmp:
            for i, seed in enumerate(seeds):
                # Alternate which scheduler goes first, so a slow spell of the machine hits both.
                order = ("asha", "fifo") if i % 2 == 0 else ("fifo", "asha")
                for scheduler in order:
                    r = run_one(scheduler, seed, args.trials, args.epochs, args.accuracy, Path(tmp),
                                args.limit_train)
                    runs.append(r)
                    print(f"{scheduler} seed {seed}: {r['wall_s']:.1f} s, {r['epochs']} epochs, reached "
                          f"{args.accuracy} after {r['reach_s']:.1f} s / {r['reach_epochs']} epochs, "
                          f"best {r['best']:.4f}", flush=True)

    def fmt(x, spec):
        return "not reached" if isinstance(x, float) and math.isnan(x) else format(x, spec)

    lines = [
        machine_line(load_before),
        f"Command: `python benchmarks/mnist_schedulers.py --seeds {args.seeds} --trials {args.trials} "
        f"--epochs {args.epochs}`"
        + (f" `--limit-train {args.limit_train}`" if args.limit_train else "")
        + f". `search_spaces/mnist_asha.yaml` ({args.trials} trials, up to {args.epochs} epochs, 1 CPU a trial "
        f"on {args.num_cpus} CPUs) with its ASHA (grace period 1, reduction factor 3) and with `fifo`; the same "
        "sampling seed gives both schedulers the same configurations. Times from the `tune_model` call "
        "(Ray already running); epochs counted over all trials in the order the results arrived.",
        "",
        f"| scheduler | seed | wall to val_accuracy >= {args.accuracy:g} (s) | epochs to it | "
        "whole run (s) | epochs in all | best final val_accuracy |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(runs, key=lambda r: (r["scheduler"], r["seed"])):
        lines.append(f"| {r['scheduler']} | {r['seed']} | {fmt(r['reach_s'], '.1f')} | "
                     f"{fmt(float(r['reach_epochs']), '.0f')} | {r['wall_s']:.1f} | {r['epochs']} | "
                     f"{r['best']:.4f} |")

    def med(s, key):
        vals = [r[key] for r in runs if r["scheduler"] == s and not math.isnan(float(r[key]))]
        return statistics.median(vals) if vals else math.nan

    lines += ["", "| scheduler | median wall to it (s) | median epochs to it | median whole run (s) | "
              "median epochs in all | median best accuracy | runs reaching it |", "|---|---|---|---|---|---|---|"]
    for s in ("asha", "fifo"):
        n = sum(1 for r in runs if r["scheduler"] == s and not math.isnan(r["reach_s"]))
        lines.append(f"| {s} | {fmt(med(s, 'reach_s'), '.1f')} | {fmt(med(s, 'reach_epochs'), '.0f')} | "
                     f"{med(s, 'wall_s'):.1f} | {med(s, 'epochs'):.0f} | {med(s, 'best'):.4f} | "
                     f"{n}/{sum(r['scheduler'] == s for r in runs)} |")
    a, f = med("asha", "wall_s"), med("fifo", "wall_s")
    lines += ["", f"ASHA / FIFO: whole run {a / f:.2f}, epochs {med('asha', 'epochs') / med('fifo', 'epochs'):.2f}"
              + (f", wall to the accuracy {med('asha', 'reach_s') / med('fifo', 'reach_s'):.2f}"
                 if not math.isnan(med("asha", "reach_s") / med("fifo", "reach_s")) else "") + "."]
    write_section(args.output, HEADING, "\n".join(lines))


if __name__ == "__main__":
    main()
