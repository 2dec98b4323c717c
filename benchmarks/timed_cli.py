"""Side A of the overhead and scale benchmarks: ``python -m tuner ARGS``, timed.

Runs the tuner command line exactly as ``python -m tuner`` does (``tuner.cli.main``), in
this process, and writes to ``$BENCH_TIMINGS`` the seconds ``Tuner.fit()`` took (the one
place it is instrumented: a wrapper around ``ray.tune.Tuner.fit``) and the peak RSS of
this driver process.

    python benchmarks/timed_cli.py run SPEC.yaml --num-cpus 2
"""

from __future__ import annotations

import time

STARTED = time.time()

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str]) -> None:
    from benchmarks._common import write_timings

    timings: dict = {"started": STARTED}
    if argv and argv[0] == "run":
        import ray.tune

        original = ray.tune.Tuner.fit

        def fit(self):
            timings["fit_start"] = time.time()
            try:
                return original(self)
            finally:
                timings["fit_end"] = time.time()
                timings["fit_s"] = timings["fit_end"] - timings["fit_start"]

        ray.tune.Tuner.fit = fit
    code = 0
    try:
        from tuner.cli import main as tuner_main

        tuner_main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        timings["exit"] = time.time()
        write_timings(timings)
    sys.exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
