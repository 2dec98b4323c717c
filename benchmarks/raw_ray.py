"""Side B of the overhead and scale benchmarks: the plain Ray Tune script a Ray user writes.

The same train functions as side A (``benchmarks/workloads.py``), the same searcher and
scheduler settings, 1 CPU a trial on a local Ray of ``--num-cpus`` CPUs, actor reuse
on, ``verbose=0``; Ray's default loggers (JSON, CSV, TensorBoard) as any script gets.
Writes to ``$BENCH_TIMINGS`` the seconds ``Tuner.fit()`` took and the driver's peak RSS.

    python benchmarks/raw_ray.py --workload trivial --trials 200 --results 10 --search bohb
"""

from __future__ import annotations

import time

STARTED = time.time()

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=["trivial", "one_second"], default="trivial")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--results", type=int, default=10, help="reports per trivial trial")
    parser.add_argument("--search", choices=["random", "bohb"], default="random")
    parser.add_argument("--scheduler", choices=["fifo", "asha", "bohb"], default="fifo")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--no-reuse", action="store_true", help="reuse_actors=False (Ray's default)")
    parser.add_argument("--storage", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--stamp-dir", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, HyperBandForBOHB

    from benchmarks import workloads

    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})

    if args.workload == "trivial":
        fn = workloads.trivial
        space = {"x": tune.uniform(0, 1), "results": args.results}
        metric, mode, max_t = "loss", "min", args.results
    else:
        fn = workloads.one_second
        space = {"score": tune.uniform(0, 1), "num_iters": 1, "sleep_time": 1.0}
        metric, mode, max_t = "score", "max", None  # as Ray's release test: no stop criteria
    if args.stamp_dir:
        space["stamp_dir"] = args.stamp_dir

    search_alg = None
    if args.search == "bohb":
        from ray.tune.search.bohb import TuneBOHB

        search_alg = TuneBOHB(seed=args.seed)
    scheduler = {
        "fifo": lambda: FIFOScheduler(),
        "asha": lambda: ASHAScheduler(max_t=max_t or 100, grace_period=1, reduction_factor=3),
        "bohb": lambda: HyperBandForBOHB(max_t=max_t or 100, reduction_factor=3),
    }[args.scheduler]()

    tuner = tune.Tuner(
        tune.with_resources(fn, {"cpu": 1}),
        param_space=space,
        tune_config=tune.TuneConfig(metric=metric, mode=mode, num_samples=args.trials, search_alg=search_alg,
                                    scheduler=scheduler, reuse_actors=not args.no_reuse),
        run_config=tune.RunConfig(name=args.name, storage_path=args.storage, verbose=0,
                                  stop={"training_iteration": max_t} if max_t else None),
    )
    fit_start = time.time()
    grid = tuner.fit()
    fit_end = time.time()
    results = sum(int((r.metrics or {}).get("training_iteration", 0) or 0) for r in grid)
    errors = sum(r.error is not None for r in grid)
    ray.shutdown()

    from benchmarks._common import write_timings

    write_timings({"started": STARTED, "fit_start": fit_start, "fit_end": fit_end, "fit_s": fit_end - fit_start,
                   "trials": len(grid), "errors": errors, "last_iterations": results, "exit": time.time()})


if __name__ == "__main__":
    main()
