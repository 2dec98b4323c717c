"""Helpers shared by the benchmark scripts: the machine line, Markdown sections,
timed subprocesses, and the interquartile mean with its bootstrap interval."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
IMG = ROOT / "docs" / "img"


def start_local_ray(num_cpus: int) -> None:
    """Start the benchmark's own local Ray, as the tests' ``ray_local`` fixture does: ``num_cpus`` CPUs,
    no dashboard, the workers' output kept off the console, this checkout on the workers' path, and
    Ray's classic table output (``RAY_AIR_NEW_OUTPUT=0``). The caller shuts it down (``ray.shutdown()``)."""
    import ray

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})


@contextmanager
def local_ray(num_cpus: int):
    """The Ray a benchmark runs on: the one this process already has, left running (a test's session Ray,
    ``ray_local``, where the test runs the script's ``main`` in-process), or else a new local one
    (:func:`start_local_ray`, ``num_cpus`` CPUs), shut down at the end."""
    import ray

    if ray.is_initialized():
        yield
        return
    start_local_ray(num_cpus)
    try:
        yield
    finally:
        ray.shutdown()


def run_on_local_ray(num_cpus: int, prefix: str, jobs) -> tuple[list[dict], float]:
    """Run experiments one after the other on one local Ray (:func:`local_ray`), in one temporary folder.

    Args:
        num_cpus: CPUs of the local Ray.
        prefix: The temporary folder's name prefix (``tuner-bench-<name>-``).
        jobs: An iterable of ``job(tmp: Path) -> (run, line)``: ``run`` (a dict) is collected, ``line``
            printed as the job ends.

    Returns:
        The runs in order, and the seconds it all took (Ray's start included).
    """
    import tempfile

    started = time.perf_counter()
    runs = []
    with local_ray(num_cpus), tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for job in jobs:
            run, line = job(Path(tmp))
            runs.append(run)
            print(line, flush=True)
    return runs, time.perf_counter() - started


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_model() -> str:
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout.strip()
            if out:
                return "; ".join(line.split(" (UUID")[0] for line in out.splitlines())
        except (OSError, subprocess.SubprocessError):
            pass
    return "no GPU"


def load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def code_version() -> str:
    """``tuner <commit>``, noting uncommitted changes under ``tuner/`` (what was measured)."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "tuner"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "tuner (version unknown)"
    if not sha:
        return "tuner (version unknown)"
    return f"tuner {sha}" + (" with uncommitted changes in tuner/" if dirty else "")


def add_budget_options(parser, *, seeds: int, budget: int, max_t: int, methods, per: str, logs: str) -> None:
    """The options of a benchmark that runs methods at an equal budget of iterations, several seeds each
    (``multiobjective.py``, ``conditional.py``): ``--seeds``, ``--budget``, ``--max-t``, ``--methods``,
    ``--num-cpus``, ``--output``, ``--img-dir``, ``--save-runs`` and ``--load-runs``.

    Args:
        parser: The script's ``argparse.ArgumentParser``.
        seeds, budget, max_t: The defaults (seeds, iterations an experiment, steps a trial).
        methods: The method names (the default, and the help's list).
        per: What the seeds repeat, for the help (``method``).
        logs: What ``--save-runs`` saves of a run, for the help (``step log``).
    """
    methods = list(methods)
    parser.add_argument("--seeds", type=int, default=seeds, help=f"seeds per {per} (default {seeds})")
    parser.add_argument("--budget", type=int, default=budget,
                        help=f"training iterations per experiment (default {budget})")
    parser.add_argument("--max-t", type=int, default=max_t, help=f"steps of a trial (default {max_t})")
    parser.add_argument("--methods", default=",".join(methods), help=f"comma-separated, of: {', '.join(methods)}")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None, help="Markdown file to write the section into")
    parser.add_argument("--img-dir", type=Path, default=IMG, help="folder for the plot (default docs/img)")
    parser.add_argument("--save-runs", type=Path, default=None, help=f"save every run's {logs} as JSON here")
    parser.add_argument("--load-runs", type=Path, default=None,
                        help="re-render the table and plot from a --save-runs file instead of running")


def parse_budget_args(parser, argv, known) -> tuple:
    """Parse a budget benchmark's options (:func:`add_budget_options`) and check them.

    Returns:
        ``(args, methods)``: the parsed options, and ``--methods`` as a list. ``parser.error``
        (exit 2) on a method not in ``known`` or a ``--budget`` below one full trial (``--max-t``).
    """
    args = parser.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in known]
    if unknown:
        parser.error(f"unknown method(s) {unknown}; choose from {list(known)}")
    if args.budget < args.max_t:
        parser.error(f"--budget {args.budget} is less than one full trial ({args.max_t} iterations)")
    return args, methods


def budget_runs(args, run) -> tuple[list, float, float, float | None, str | None]:
    """The runs of a budget benchmark: read from ``--load-runs`` (which also sets ``args.budget``,
    ``max_t`` and ``seeds`` to the saved ones), else made by ``run()`` (``(runs, seconds)``) and
    written to ``--save-runs`` if given.

    Returns:
        ``(runs, total seconds, load average before, load average after, code version)``.
    """
    load_before = load_average()
    if args.load_runs:
        saved = json.loads(args.load_runs.read_text())
        args.budget, args.max_t, args.seeds = saved["budget"], saved["max_t"], saved["seeds"]
        return (saved["runs"], saved["total_s"], saved["load_before"], saved.get("load_after"),
                saved.get("version"))
    runs, total_s = run()
    load_after, version = load_average(), code_version()
    if args.save_runs:
        args.save_runs.write_text(json.dumps({"runs": runs, "total_s": total_s, "load_before": load_before,
                                               "load_after": load_after, "version": version,
                                               "budget": args.budget, "max_t": args.max_t, "seeds": args.seeds}))
    return runs, total_s, load_before, load_after, version


def machine_line(load_before: float | None = None, load_after: float | None = None, version: str | None = None) -> str:
    """``Machine: 2 cores, AMD EPYC, no GPU, 23 GiB; Python ..., Ray ..., tuner ...; load ...``.

    ``load_after`` defaults to the load now, ``version`` to :func:`code_version` now.
    """
    import ray

    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        mem_text = f", {mem:.0f} GiB RAM"
    except (ValueError, OSError):
        mem_text = ""
    after = load_average() if load_after is None else load_after
    load = f"; 1-minute load average {load_before:.2f} at the start, {after:.2f} at the end" \
        if load_before is not None else ""
    return (f"Machine: {os.cpu_count()} cores, {cpu_model()}, {gpu_model()}{mem_text}; Python "
            f"{platform.python_version()}, Ray {ray.__version__}, {version or code_version()}{load}.")


def write_section(path: Path | None, heading: str, body: str) -> None:
    """Put ``## heading`` + body into the Markdown file: replace the section with the
    same heading (up to the next ``## ``), or append it."""
    text = f"## {heading}\n\n{body.rstrip()}\n"
    print(text, flush=True)
    if path is None:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^## {re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(old):
        new = pattern.sub(lambda _: text + "\n", old, count=1).rstrip() + "\n"
    else:
        new = old.rstrip() + "\n\n" + text
    path.write_text(new, encoding="utf-8")


def run_timed(cmd: list[str], timings_file: Path, env: dict | None = None, timeout: float = 3600,
              cwd: Path = ROOT) -> dict:
    """Run a benchmark side in a subprocess; return its timings.

    The parent's clock starts just before the process is created and stops when it has
    exited: ``wall_s`` is the whole command as a user sees it (interpreter, imports,
    Ray start-up and shutdown included). The child writes its own figures (``fit_s``,
    ``maxrss_kb`` ...) as JSON to ``timings_file`` (``BENCH_TIMINGS`` in its environment).
    """
    full_env = {**os.environ, **(env or {}), "BENCH_TIMINGS": str(timings_file)}
    full_env.setdefault("PYTHONPATH", str(ROOT))
    launched = time.time()
    proc = subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
    ended = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
                           f"{proc.stderr[-3000:]}")
    data = json.loads(Path(timings_file).read_text()) if Path(timings_file).exists() else {}
    data.update({"launched": launched, "ended": ended, "wall_s": ended - launched})
    return data


def write_timings(extra: dict) -> None:
    """Child side of :func:`run_timed`: write figures to ``$BENCH_TIMINGS``."""
    import resource

    path = os.environ.get("BENCH_TIMINGS")
    if not path:
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    extra = {**extra, "maxrss_kb": usage.ru_maxrss, "cpu_s": usage.ru_utime + usage.ru_stime}
    Path(path).write_text(json.dumps(extra))


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def iqm(values, axis=0):
    """Interquartile mean: the mean of the middle 50 % (``scipy.stats.trim_mean(x, 0.25)``)."""
    import numpy as np

    try:
        from scipy.stats import trim_mean

        return trim_mean(values, 0.25, axis=axis)
    except ImportError:  # the same: sort, drop a quarter at each end, average
        a = np.sort(np.asarray(values, dtype=float), axis=axis)
        n = a.shape[axis]
        k = int(0.25 * n)
        return np.take(a, range(k, n - k), axis=axis).mean(axis=axis)


def iqm_bootstrap(values, reps: int = 1000, seed: int = 0):
    """IQM over seeds (axis 0) with a 95 % percentile bootstrap interval (seeds resampled
    with replacement), as Syne Tune's ``iqm_bootstrap`` aggregation.

    Args:
        values: Array (seeds, points).

    Returns:
        ``(iqm, low, high)``, each of shape (points,).
    """
    return _bootstrap(values, iqm, reps, seed)


def median_bootstrap(values, reps: int = 1000, seed: int = 0):
    """Median over seeds (axis 0) with a 95 % percentile bootstrap interval (seeds resampled
    with replacement), as :func:`iqm_bootstrap`.

    Args:
        values: Array (seeds, points).

    Returns:
        ``(median, low, high)``, each of shape (points,).
    """
    import numpy as np

    return _bootstrap(values, lambda a, axis: np.median(a, axis=axis), reps, seed)


def _bootstrap(values, stat, reps: int, seed: int):
    import numpy as np

    a = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.shape[0], size=(reps, a.shape[0]))
    boots = np.stack([stat(a[i], axis=0) for i in idx])
    return stat(a, axis=0), np.percentile(boots, 2.5, axis=0), np.percentile(boots, 97.5, axis=0)


def have_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def python() -> str:
    return sys.executable
