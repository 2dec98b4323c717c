"""The work of ``benchmarks/command_overhead.py``'s trials, as a plain training script (no tuner import).

As a command trial it runs as a process per trial and prints one JSON line per report::

    python benchmarks/command_workload.py --reports 5 --x 0.3 [--torch]

As a function trial, ``benchmarks.command_overhead:function_trial`` calls :func:`reports` in the trial's
worker process. The computation is trivial (a loss falling with the report's index towards
``(x - 0.5) ** 2``), so what is measured is what a trial costs around it. ``--torch`` imports torch first,
as a real training script does.

The first report also carries three wall-clock stamps (``time.time()``, seconds): ``t_started``, when the
script's (or function's) first line ran; ``t_imported``, after its imports; ``t_sent``, just before the
report was made.
"""

import time

STARTED = time.time()

import argparse  # noqa: E402
import json  # noqa: E402


def reports(x: float, count: int, started: float, imported: float):
    """The ``count`` reports of a trial with parameter ``x``: ``{"loss": float}`` dicts, the first with the stamps."""
    for i in range(count):
        values = {"loss": (x - 0.5) ** 2 + 1.0 / (i + 1)}
        if i == 0:
            values.update(t_started=started, t_imported=imported, t_sent=time.time())
        yield values


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="One trial of benchmarks/command_overhead.py: JSON lines.")
    parser.add_argument("--reports", type=int, default=5)
    parser.add_argument("--x", type=float, default=0.5)
    parser.add_argument("--torch", action="store_true", help="import torch first, as a training script does")
    args = parser.parse_args(argv)
    if args.torch:
        import torch  # noqa: F401
    imported = time.time()
    for values in reports(args.x, args.reports, STARTED, imported):
        print(json.dumps(values), flush=True)


if __name__ == "__main__":
    main()
