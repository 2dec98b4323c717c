"""The live dashboard's cost and latency (`tuner dashboard`, issue 32).

1. **Read time at scale.** A real experiment of ``--trials`` trials (``benchmarks/workloads.py:trivial``,
   10 reports each; ``tuner.tune_model`` on a local Ray of ``--num-cpus`` CPUs), then on it, each the median of
   ``--repeats``: the first read of a dashboard (``tuner.report.dashboard.ExperimentStorage``: ``load_experiment``
   and the study's trials), a refresh when nothing changed (the newest write among the files), a refresh after
   one trial's ``result.json`` changed (a new report: the experiment read again), and the call the page polls
   (``GET /api/studies/<id>?after=0``) through the real server (``tuner.report.dashboard.make_server``).
2. **How soon a report shows.** A running ``tuner run`` of ``benchmarks/workloads.py:clock_reports`` trials
   (each report's metric is the wall-clock time it was made) and ``tuner dashboard`` on its storage; the
   benchmark polls the API the page polls every 50 ms, and for each report it first sees, the delay is the
   time then less the time in the report. The page adds its own poll period to that (optuna-dashboard 0.21:
   2 s on "Trials (List)" under 100 trials, 5 s under 500, 10 s on the other pages).

    python benchmarks/dashboard.py --trials 1000 --output docs/benchmarks.md

This is a benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import DOCS, ROOT, load_average, machine_line, write_section

HEADING = "The live dashboard's read time and delay (`benchmarks/dashboard.py`)"

SPEC = """\
name: {name}
trainable: benchmarks.workloads:{trainable}
metric: {metric}
mode: {mode}
num_samples: {trials}
seed: 0
param_space: {space}
reporting: {{cli: false, tensorboard: false}}
resources: {{cpu: 1}}
"""


def timed(fn, repeats: int) -> float:
    """The median seconds of ``repeats`` calls of ``fn``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def read_time(folder: Path, trials: int, num_cpus: int, repeats: int) -> dict:
    """Part 1: the experiment made, then the dashboard's reads of it timed."""
    from tuner import tune_model
    from tuner.report.dashboard import ExperimentStorage, make_server
    from tuner.experiment.layout import RESULT_FILE

    spec = folder / "scale.yaml"
    spec.write_text(SPEC.format(name="scale", trainable="trivial", metric="loss", mode="min", trials=trials,
                                space="{x: {type: uniform, low: 0, high: 1}, results: 10}"))
    start = time.perf_counter()
    tune_model(spec, storage=str(folder / "runs"), num_cpus=num_cpus)
    made_s = time.perf_counter() - start
    exp = folder / "runs" / "scale"

    first = timed(lambda: ExperimentStorage([exp]).get_all_trials(0), repeats)
    clock = [0.0]
    storage = ExperimentStorage([exp], clock=lambda: clock[0])

    def refresh() -> None:
        clock[0] += 10  # a read is due
        storage.get_all_trials(0)

    unchanged = timed(refresh, repeats)
    result = next(exp.glob(f"*/{RESULT_FILE}"))

    def changed() -> None:
        os.utime(result)  # a new report's write
        refresh()

    after_report = timed(changed, repeats)
    server = make_server(storage, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}/api/studies/0?after=0"

    def api() -> None:
        with urllib.request.urlopen(url, timeout=120) as response:
            assert len(json.loads(response.read())["trials"]) == trials

    poll = timed(api, repeats)
    server.shutdown()
    size = sum(p.stat().st_size for p in exp.rglob("*") if p.is_file())
    return {"trials": trials, "made_s": made_s, "first_read_s": first, "unchanged_refresh_s": unchanged,
            "refresh_after_a_report_s": after_report, "api_poll_s": poll, "folder_bytes": size}


def delay(folder: Path, trials: int, reports: int, interval_s: float, num_cpus: int) -> dict:
    """Part 2: a live run and the dashboard; the delay of each report, as the API shows it."""
    spec = folder / "live.yaml"
    spec.write_text(SPEC.format(name="live", trainable="clock_reports", metric="reported_at", mode="max",
                                trials=trials, space=f"{{reports: {reports}, interval_s: {interval_s}}}"))
    runs = folder / "live-runs"
    runs.mkdir()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    errors = folder / "dashboard.err"  # a file, not a pipe nobody reads while it runs
    with errors.open("w") as err:
        dash = subprocess.Popen([sys.executable, "-m", "tuner", "dashboard", str(runs), "--port", "0"], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    line = dash.stdout.readline() if dash.stdout else ""
    port = re.search(r":(\d+)/dashboard/", line)
    assert port, (line, errors.read_text())
    run = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(spec), "--storage", str(runs),
                            "--num-cpus", str(num_cpus)], cwd=ROOT, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env=env)
    seen: dict[tuple[int, int], float] = {}
    delays = []
    written: dict[tuple[str, int], float] = {}  # (result.json, iteration) -> when the benchmark first read it there
    file_delays = []
    base = f"http://127.0.0.1:{port.group(1)}/api"
    ended_at = None
    try:
        while len(seen) < trials * reports and (ended_at is None or time.monotonic() - ended_at < 10):
            if ended_at is None and run.poll() is not None:
                ended_at = time.monotonic()  # the last reports: up to 10 s more to show
            try:
                with urllib.request.urlopen(f"{base}/studies", timeout=60) as response:
                    studies = json.loads(response.read())["study_summaries"]
                for study in studies:
                    with urllib.request.urlopen(f"{base}/studies/{study['study_id']}?after=0", timeout=60) as r:
                        body = json.loads(r.read())
                    now = time.time()
                    for t in body["trials"]:
                        for point in t["intermediate_values"]:
                            key = (t["trial_id"], point["step"])
                            if key not in seen:
                                seen[key] = now
                                delays.append(now - float(point["value"]))
            except OSError:
                pass
            for result in runs.glob("*/*/result.json"):  # Ray's own write: how much of the delay is Ray's
                try:
                    rows = [json.loads(line) for line in result.read_text().splitlines()]
                except (OSError, ValueError):
                    continue
                for row in rows:
                    if (str(result), row["training_iteration"]) not in written:
                        written[(str(result), row["training_iteration"])] = time.time()
                        file_delays.append(time.time() - row["reported_at"])
            time.sleep(0.05)
    finally:
        run.wait()
        dash.send_signal(2)  # Ctrl-C
        try:
            dash.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            subprocess.run(["py-spy", "dump", "--pid", str(dash.pid)], check=False)
            dash.kill()
            print(f"the dashboard did not stop on Ctrl-C; its stderr: {errors.read_text()[-3000:]}", flush=True)
            raise
    delays.sort()
    return {"reports_seen": len(delays), "reports_made": trials * reports, "interval_s": interval_s,
            "file_median_s": statistics.median(file_delays) if file_delays else None,
            "median_s": statistics.median(delays) if delays else None,
            "p90_s": delays[int(0.9 * (len(delays) - 1))] if delays else None,
            "max_s": delays[-1] if delays else None}


def section(scale: dict, live: dict, machine: str) -> str:
    rows = [("the first read (a dashboard opened on it)", scale["first_read_s"]),
            ("a refresh, nothing changed", scale["unchanged_refresh_s"]),
            ("a refresh after one new report (the experiment read again)", scale["refresh_after_a_report_s"]),
            ("the call the page polls (`GET /api/studies/<id>?after=0`)", scale["api_poll_s"])]
    table = "\n".join(f"| {what} | {seconds * 1000:,.0f} ms |" for what, seconds in rows)
    return f"""`python benchmarks/dashboard.py --trials {scale['trials']}`. {machine}

**Read time at {scale['trials']:,} trials** (a real experiment of `benchmarks/workloads.py:trivial` trials, 10 reports
each, made in {scale['made_s']:.0f} s; its folder {scale['folder_bytes'] / 2**20:.1f} MiB; medians):

| read | time |
|---|---|
{table}

**How soon a report shows:** {live['reports_seen']} of {live['reports_made']} reports of a live run (each trial reports
its wall-clock time every {live['interval_s']:g} s) were seen through the API the page polls, polled every 50 ms:
median {live['median_s']:.2f} s after the report, 90th percentile {live['p90_s']:.2f} s, max {live['max_s']:.2f} s; of
that, Ray's own write of the report into the trial's `result.json` took a median {live['file_median_s']:.2f} s (read the
same way, every 50 ms). The page adds its own poll period (optuna-dashboard 0.21: 2 s on "Trials (List)" under
100 trials, 5 s under 500; 10 s on the other pages), so on "Trials (List)" a report shows a median
{live['median_s'] + 1:.1f} s after it was made, and within about {live['max_s'] + 2:.1f} s.
"""


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=1000, help="trials of the experiment read (default 1000)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--live-trials", type=int, default=4)
    parser.add_argument("--live-reports", type=int, default=15)
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None, help=f"Markdown file to update (e.g. {DOCS})")
    args = parser.parse_args(argv)
    load = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        scale = read_time(Path(tmp), args.trials, args.num_cpus, args.repeats)
        print(json.dumps(scale), flush=True)
        live = delay(Path(tmp), args.live_trials, args.live_reports, args.interval_s, args.num_cpus)
        print(json.dumps(live), flush=True)
    write_section(args.output, HEADING, section(scale, live, machine_line(load)))


if __name__ == "__main__":
    main()
