"""Side A of the overhead and scale benchmarks: ``python -m tuner ARGS``, timed.

Runs the tuner command line exactly as ``python -m tuner`` does (``tuner.cli.main``), in
this process, and writes to ``$BENCH_TIMINGS`` the seconds ``Tuner.fit()`` took (the one
place it is instrumented: a wrapper around ``ray.tune.Tuner.fit``) and the peak RSS of
this driver process.

    python benchmarks/timed_cli.py run SPEC.yaml --num-cpus 2

With ``BENCH_SIMULATE_FIXES=1`` it first applies, from outside, the two driver-side fixes
that docs/benchmarks.md proposes for tuner, so that their effect can be measured before
tuner has them: ``import torch`` fails in this driver (tuner then counts no GPU
instead of importing torch, 1.3-1.8 s here, to count them), and Ray's callback usage tag
(``ray.air._internal.usage.tag_callbacks``, which imports the wandb, MLflow, Comet and
Aim integrations, about 2 s here, whenever callbacks are passed) does nothing.
"""

from __future__ import annotations

import time

STARTED = time.time()

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str]) -> None:
    from benchmarks._common import write_timings

    import os

    timings: dict = {"started": STARTED}
    if os.environ.get("BENCH_SIMULATE_FIXES") == "1":
        sys.modules["torch"] = None  # type: ignore[assignment]  # "import torch" raises ImportError
        import ray.air._internal.usage as air_usage

        air_usage.tag_callbacks = lambda callbacks: False
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
