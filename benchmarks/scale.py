"""Benchmark 2: bookkeeping at scale, Ray's own release test scaled to this machine.

Ray's ``tune_scalability_bookkeeping_overhead`` release test runs 10,000 one-second
trials that report once a second on 16 CPUs (``timed_tune_run(num_samples=10000,
results_per_second=1, trial_length_s=1, max_runtime=800)``): ideal 625 s, allowed
800 s, reported 715 s (1.14 x ideal). Here: for each size in ``--trials`` (``200,1000``),
N such trials (``benchmarks/workloads.py:one_second``: one report, then one second of
sleep), 1 CPU a trial on ``--num-cpus`` CPUs, through ``tuner run`` (A) and through the
plain Ray Tune script (B), in turns A, B at each size, smallest size first.

At each size it reports wall time over the theoretical minimum (N x 1 s / CPUs) for
``Tuner.fit()`` (what Ray's test times) and for the whole command, the driver's CPU time
and peak RSS, the experiment folder's size and file count broken down by what writes the
files (:func:`folder_breakdown`), and the time ``tuner report`` takes on the experiment A
made (table: median of ``--report-repeats``; ``--format json`` likewise; ``--format html``
once). Then how each figure grows from the smallest size to the largest: the ratio, and
the exponent k of a power law ``figure ~ N^k`` through the two points (0 flat, 1 linear).

    python benchmarks/scale.py --trials 200,1000 --output docs/benchmarks.md

``--save-runs FILE`` keeps the measurements as JSON; ``--load-runs FILE`` writes the section
again from them without running anything.

This is a benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (
    ROOT, code_version, load_average, machine_line, python, run_timed, write_section)
from tuner.experiment import layout

HEADING = "Bookkeeping at scale (`benchmarks/scale.py`)"
TARGET = 1.10  # wall / ideal and fit / ideal, tuner's side
REPORT_TARGET_S = 5.0
REPORT_FORMATS = ("table", "json", "html")  # `tuner report --format`; html once, the others --report-repeats
RAY_FIGURE = ("Ray's own figure for this test: 715 s for 10,000 trials on 16 CPUs, ideal 625 s (1.14 x ideal), "
              "allowed 800 s (1.28 x).")
MIB = 2**20

# The parts of an experiment folder, in the order the tables list them. A trial folder's
# parts are indented under "trial folders".
TRIALS = "trial folders"
TRIAL_RESULTS = f"- results ({layout.RESULT_FILE}, {layout.PROGRESS_FILE})"
TRIAL_EVENTS = "- TensorBoard events"
TRIAL_CHECKPOINTS = f"- checkpoints ({layout.CHECKPOINT_PREFIX}*)"
TRIAL_OTHER = f"- config ({layout.PARAMS_FILE} and its pickle) and other"
RAY_STATE = f"Ray's experiment state ({layout.EXPERIMENT_STATE_GLOB})"
RAY_SEARCH = "Ray's searcher and callback states"
TUNER_SNAPSHOT = f"tuner's copies of Ray's states ({layout.STATE_SNAPSHOT_DIR}/)"
TUNER_RECORDS = "tuner's records (results.csv, summary.json, spec, run record, log, HParams summary, lock)"
OTHER = "other"
PARTS = (TRIALS, TRIAL_RESULTS, TRIAL_EVENTS, TRIAL_CHECKPOINTS, TRIAL_OTHER, RAY_STATE, RAY_SEARCH,
         TUNER_SNAPSHOT, TUNER_RECORDS, OTHER)
TOTAL = "whole folder"

_RAY_SEARCH_GLOBS = tuple(name.format("*") for name in (layout.BASIC_VARIANT_STATE, layout.SEARCH_GEN_STATE,
                                                        layout.SEARCHER_STATE, layout.CALLBACK_STATE))
_TUNER_TOP = (*layout.TUNER_FILES, layout.LOCK_FILE, layout.BUDGET_SPENT)
_EVENTS_GLOB = layout.HPARAMS_EVENTS_PREFIX + ".out.tfevents.*"  # every TensorBoard event file's name


def _part(parts: tuple[str, ...], top_dirs: set[str]) -> str:
    """Which part of the experiment folder a file is (see :data:`PARTS`), from its path's parts."""
    name = parts[-1]
    if len(parts) == 1:
        if fnmatch.fnmatch(name, layout.EXPERIMENT_STATE_GLOB):
            return RAY_STATE
        if any(fnmatch.fnmatch(name, glob) for glob in _RAY_SEARCH_GLOBS):
            return RAY_SEARCH
        if name in _TUNER_TOP or fnmatch.fnmatch(name, layout.EVENTS_GLOB):
            return TUNER_RECORDS
        return OTHER
    if parts[0] == layout.STATE_SNAPSHOT_DIR:
        return TUNER_SNAPSHOT
    if parts[0] not in top_dirs:
        return OTHER
    if any(p.startswith(layout.CHECKPOINT_PREFIX) for p in parts[1:-1]):
        return TRIAL_CHECKPOINTS
    if name in (layout.RESULT_FILE, layout.PROGRESS_FILE):
        return TRIAL_RESULTS
    if fnmatch.fnmatch(name, _EVENTS_GLOB):
        return TRIAL_EVENTS
    return TRIAL_OTHER


def folder_breakdown(path: str | os.PathLike) -> dict:
    """Bytes and files of an experiment folder, by part (links are not followed: ``ray_logs``
    points at Ray's session logs, outside the folder).

    Args:
        path: The experiment folder.

    Returns:
        ``{"parts": {part: [bytes, files]}, "trial_folders": n, "other_names": [...],
        "total": [bytes, files], "disk_bytes": n}``: every part of :data:`PARTS` (``trial folders`` is the sum of
        the ``- ...`` parts under it); ``other_names`` are the names of the top-level files and
        folders counted as ``other``; bytes are the files' sizes, ``disk_bytes`` the blocks they take
        on disk (at least 4 KiB a file on most file systems). A trial folder is any folder at the top but tuner's
        snapshot folder and PBT's clone sources.
    """
    root = Path(path)
    top_dirs = {p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink()} - {
        layout.STATE_SNAPSHOT_DIR, layout.CLONE_SOURCES_DIR}
    parts = {part: [0, 0] for part in PARTS}
    other_names: set[str] = set()
    disk = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
        for file in files:
            full = os.path.join(folder, file)
            st = os.lstat(full)
            if os.path.islink(full):
                continue
            rel = Path(full).relative_to(root).parts
            part = _part(rel, top_dirs)
            if part == OTHER:
                other_names.add(rel[0])
            parts[part][0] += st.st_size
            parts[part][1] += 1
            disk += st.st_blocks * 512
    trial_parts = [p for p in PARTS if p.startswith("- ")]
    parts[TRIALS] = [sum(parts[p][i] for p in trial_parts) for i in (0, 1)]
    total = [sum(parts[p][i] for p in PARTS if p != TRIALS and not p.startswith("- ")) + parts[TRIALS][i]
             for i in (0, 1)]
    return {"parts": parts, "trial_folders": len(top_dirs), "other_names": sorted(other_names), "total": total,
            "disk_bytes": disk}


def time_report(experiment: Path, repeats: int, fmt: str = "table") -> list[float]:
    """Seconds ``python -m tuner report EXPERIMENT [--format FMT]`` takes, each of ``repeats`` runs
    (a fresh process each: interpreter, imports and reading the folder). An html page and its
    plots go to a temporary folder, not into the experiment."""
    times = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="tuner-bench-report-") as out:
            cmd = [python(), "-m", "tuner", "report", str(experiment), "--format", fmt]
            if fmt == "html":
                cmd += ["--output", str(Path(out) / "report.html")]
            start = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
            times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return times


def _spec(trials: int, storage: Path) -> dict:
    return {
        "name": f"scale_{trials}", "trainable": "benchmarks.workloads:one_second", "metric": "score",
        "mode": "max", "num_samples": trials, "seed": 0,
        "param_space": {"score": {"type": "uniform", "low": 0.0, "high": 1.0}, "num_iters": 1, "sleep_time": 1.0},
        "resources": {"cpu": 1}, "reporting": {"cli": False}, "storage": str(storage),
    }


def measure_size(work: Path, trials: int, num_cpus: int, report_repeats: int, skip_raw: bool,
                 formats: tuple[str, ...] = REPORT_FORMATS) -> dict:
    """Side A, then side B, at one size; the folders and the report times. Returns the figures."""
    import yaml

    ideal = trials * 1.0 / num_cpus
    timeout = max(600, 20 * ideal)
    runs = work / "runs"
    spec = _spec(trials, runs)
    spec_file = work / f"scale_{trials}.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    load_a = load_average()
    a = run_timed([python(), "benchmarks/timed_cli.py", "run", str(spec_file), "--num-cpus", str(num_cpus)],
                  work / f"a_{trials}.json", timeout=timeout)
    a["load"] = load_a
    experiment = runs / spec["name"]
    a["folder"] = folder_breakdown(experiment)
    print(f"{trials} trials, tuner: fit {a['fit_s']:.1f} s, wall {a['wall_s']:.1f} s, ideal {ideal:.0f} s, "
          f"load {load_a:.2f}", flush=True)
    b = None
    if not skip_raw:
        name = f"scale_raw_{trials}"
        load_b = load_average()
        b = run_timed([python(), "benchmarks/raw_ray.py", "--workload", "one_second", "--trials", str(trials),
                       "--num-cpus", str(num_cpus), "--storage", str(runs), "--name", name],
                      work / f"b_{trials}.json", timeout=timeout)
        b["load"] = load_b
        b["folder"] = folder_breakdown(runs / name)
        print(f"{trials} trials, Ray: fit {b['fit_s']:.1f} s, wall {b['wall_s']:.1f} s, load {load_b:.2f}",
              flush=True)
    reports = {fmt: time_report(experiment, 1 if fmt == "html" else report_repeats, fmt) for fmt in formats}
    print(f"{trials} trials, tuner report: " + ", ".join(f"{k} {statistics.median(v):.2f} s"
                                                          for k, v in reports.items()), flush=True)
    return {"trials": trials, "ideal_s": ideal, "a": a, "b": b, "reports": reports}


# --------------------------------------------------------------------------- the section


def _mib(kb: float) -> str:
    return f"{kb / 1024:.0f}"


def _size(nbytes: float) -> str:
    if nbytes >= MIB:
        return f"{nbytes / MIB:.1f} MiB"
    if nbytes >= 1024:
        return f"{nbytes / 1024:.1f} KiB"
    return f"{nbytes:.0f} B"


def _side_row(label: str, t: dict, ideal: float) -> str:
    wall, fit = t["wall_s"] / ideal, t["fit_s"] / ideal
    return (f"| {label} | {t['load']:.2f} | {t['fit_s']:.1f} | {fit:.3f} | {t['wall_s']:.1f} | {wall:.3f} | "
            f"{t['cpu_s']:.1f} | {_mib(t['maxrss_kb'])} | {'met' if wall <= TARGET else 'NOT met'} |")


def size_section(run: dict, num_cpus: int) -> list[str]:
    """The tables of one size: times, the folder, the report times."""
    n, ideal, a, b = run["trials"], run["ideal_s"], run["a"], run["b"]
    lines = [
        f"### {n:,} trials (ideal {ideal:.0f} s)", "",
        "| side | load at start | fit (s) | fit / ideal | wall (s) | wall / ideal | driver CPU (s) | "
        f"driver peak RSS (MiB) | wall / ideal <= {TARGET:.2f} |",
        "|---|---|---|---|---|---|---|---|---|",
        _side_row("A: tuner run", a, ideal),
    ]
    if b is not None:
        lines.append(_side_row("B: plain Ray Tune", b, ideal))
        lines += ["", f"A/B: fit {a['fit_s'] / b['fit_s']:.3f}, wall {a['wall_s'] / b['wall_s']:.3f}, "
                      f"driver CPU {a['cpu_s'] / b['cpu_s']:.3f}, peak RSS {a['maxrss_kb'] / b['maxrss_kb']:.3f}."]
    sides = [("A", a)] + ([("B", b)] if b is not None else [])
    lines += ["", "| part of the experiment folder | " + " | ".join(f"{s}: bytes | {s}: files" for s, _ in sides)
              + " |", "|---|" + "---|---|" * len(sides)]
    for part in (*PARTS, TOTAL):
        cells = []
        for _, side in sides:
            nbytes, files = side["folder"]["total"] if part == TOTAL else side["folder"]["parts"][part]
            cells += [_size(nbytes), f"{files:,}"]
        label = f"**{part}**" if part == TOTAL else part
        if part == TRIALS:
            label = f"{part} ({', '.join(str(s['folder']['trial_folders']) for _, s in sides)})"
        if part == OTHER:
            names = sorted({name for _, s in sides for name in s["folder"]["other_names"]})
            label = f"other ({', '.join(names)})" if names else "other"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if all("disk_bytes" in side["folder"] for _, side in sides):
        lines.append("| whole folder, on disk (allocated blocks) | "
                     + " | ".join(f"{_size(side['folder']['disk_bytes'])} | " for _, side in sides) + " |")
    rep = run["reports"]
    table = rep["table"]
    text = (f"`tuner report` on experiment A: median {statistics.median(table):.2f} s over {len(table)} runs "
            f"(min {min(table):.2f}, max {max(table):.2f}); target at most {REPORT_TARGET_S:.0f} s: "
            f"{'met' if statistics.median(table) <= REPORT_TARGET_S else 'NOT met'}")
    if "json" in rep:
        text += f"; `--format json` median {statistics.median(rep['json']):.2f} s over {len(rep['json'])}"
    if "html" in rep:
        text += f"; `--format html` (the page and its plots) {statistics.median(rep['html']):.2f} s"
    return [*lines, "", text + "."]


def growth_kind(ratio: float, size_ratio: float) -> tuple[float, str]:
    """The exponent k of ``figure ~ N^k`` through two sizes, and its name.

    Args:
        ratio: The figure at the larger size over the figure at the smaller one.
        size_ratio: The larger size over the smaller one (> 1).

    Returns:
        ``(k, kind)``: kind is ``flat`` (k < 0.2), ``sublinear`` (< 0.8), ``linear`` (<= 1.2) or
        ``superlinear``.
    """
    k = math.log(ratio) / math.log(size_ratio) if ratio > 0 else float("-inf")
    kind = "flat" if k < 0.2 else "sublinear" if k < 0.8 else "linear" if k <= 1.2 else "superlinear"
    return k, kind


# Why each figure grows as it does: one sentence a figure, filled in with the measured figures
# (tuner's side; Ray's in brackets where it has one).
WHY = {
    "wall": "the trials run back to back in {cpus} slots, so the ideal grows as N; on top of it a fixed part "
            "outside `Tuner.fit()` (Python, Ray's start-up and shutdown, tuner's plan and results: {fixed1:.1f} s "
            "at {n1:,}, {fixed2:.1f} s at {n2:,}) and a part per trial inside it (next rows).",
    "wall_ratio": "the fixed part weighs {r:g} x less at {n2:,} trials ({fixed_share1:.3f} -> {fixed_share2:.3f} "
                  "of the ideal) while the part per trial changes as fit / ideal does.",
    "fit_ratio": "each trial costs its 1 s plus {fit_ms1:.0f} ms of a slot at {n1:,}, {fit_ms2:.0f} ms at {n2:,} "
                 "(Ray alone: {b_fit_ms1:.0f} and {b_fit_ms2:.0f} ms): the result, the trial's end, the next "
                 "config sent to the reused actor, and the driver's loop over every trial at each step, which "
                 "grows with N.",
    "cpu": "{cpu_ms1:.0f} ms of driver CPU a trial at {n1:,}, {cpu_ms2:.0f} ms at {n2:,} (Ray alone: {b_cpu_ms1:.0f} "
           "and {b_cpu_ms2:.0f}): the work per result is fixed, but each save of Ray's experiment state rewrites "
           "every trial, and tuner has Ray save every 2 s (`TUNE_GLOBAL_CHECKPOINT_S=2`, for resumes; Ray alone "
           "every 10 s or more) and copies the state to `.tuner_state/`: a cost per save that grows with N, at a "
           "fixed rate, so superlinear in total.",
    "rss": "{rss_kib:.0f} KiB more a trial (Ray alone: {b_rss_kib:.0f}) on a fixed Python + Ray footprint: the "
           "driver keeps every Trial object, with its last result and metric analysis, to the end.",
    "folder": "one trial folder a trial ({per_trial_kib:.1f} KiB of files at {n2:,}) plus Ray's experiment state "
              "({state_kib:.1f} KiB a trial) and tuner's copies of Ray's states in `.tuner_state/` (about as much "
              "again).",
    "files": "{files_per_trial:.0f} files a trial folder; the experiment's own files are a fixed few.",
    "state": "every trial's serialized Trial (config, last result, metric analysis, pickled storage and "
             "checkpoint manager), {state_kib:.1f} KiB a trial ({b_state_kib:.1f} for Ray alone).",
    "report": "a fixed {report_fixed:.2f} s (Python, pandas, tuner's modules) and {report_ms:.2f} ms a trial: "
              "reading the trials' files adds too little to show beside the start.",
    "json": "the table's reading plus parameter importances (Optuna's fANOVA, 64 trees over the trials): "
            "{json_fixed:.2f} s fixed plus {json_ms:.2f} ms a trial.",
    "html": "the json's figures plus the plots drawn over every trial: {html_fixed:.2f} s fixed plus "
            "{html_ms:.2f} ms a trial.",
}


def growth_section(first: dict, last: dict, num_cpus: int) -> list[str]:
    """The growth table: each figure at the smallest and the largest size, their ratio, the exponent."""
    n1, n2 = first["trials"], last["trials"]
    r = n2 / n1
    a1, a2 = first["a"], last["a"]
    b1, b2 = first["b"], last["b"]

    def fit_ms(t, run):  # the slot time a trial takes over its 1 s, inside Tuner.fit()
        return (t["fit_s"] - run["ideal_s"]) / run["trials"] * num_cpus * 1000 if t else float("nan")

    def state_bytes(t):
        return t["folder"]["parts"][RAY_STATE][0]

    def line(fmt):  # intercept (s) and slope (ms a trial) of the report's time through the two sizes
        t1, t2 = statistics.median(first["reports"][fmt]), statistics.median(last["reports"][fmt])
        slope = (t2 - t1) / (n2 - n1)
        return t1 - slope * n1, slope * 1000

    fill = {
        "cpus": num_cpus, "n1": n1, "n2": n2, "r": r,
        "fixed1": a1["wall_s"] - a1["fit_s"], "fixed2": a2["wall_s"] - a2["fit_s"],
        "fixed_share1": (a1["wall_s"] - a1["fit_s"]) / first["ideal_s"],
        "fixed_share2": (a2["wall_s"] - a2["fit_s"]) / last["ideal_s"],
        "fit_ms1": fit_ms(a1, first), "fit_ms2": fit_ms(a2, last),
        "b_fit_ms1": fit_ms(b1, first), "b_fit_ms2": fit_ms(b2, last),
        "cpu_ms1": a1["cpu_s"] / n1 * 1000, "cpu_ms2": a2["cpu_s"] / n2 * 1000,
        "b_cpu_ms1": b1["cpu_s"] / n1 * 1000 if b1 else float("nan"),
        "b_cpu_ms2": b2["cpu_s"] / n2 * 1000 if b2 else float("nan"),
        "rss_kib": (a2["maxrss_kb"] - a1["maxrss_kb"]) / (n2 - n1),
        "b_rss_kib": (b2["maxrss_kb"] - b1["maxrss_kb"]) / (n2 - n1) if b1 and b2 else float("nan"),
        "per_trial_kib": a2["folder"]["parts"][TRIALS][0] / max(1, a2["folder"]["trial_folders"]) / 1024,
        "state_kib": state_bytes(a2) / n2 / 1024,
        "b_state_kib": state_bytes(b2) / n2 / 1024 if b2 else float("nan"),
        "files_per_trial": a2["folder"]["parts"][TRIALS][1] / max(1, a2["folder"]["trial_folders"]),
    }
    for fmt, key in (("table", "report"), ("json", "json"), ("html", "html")):
        fixed, ms = line(fmt) if fmt in first["reports"] and fmt in last["reports"] else (float("nan"),) * 2
        fill[f"{key}_fixed"], fill[f"{key}_ms"] = fixed, ms

    def med(run, fmt):
        return statistics.median(run["reports"][fmt])

    rows = [
        ("wall (s)", a1["wall_s"], a2["wall_s"], b1 and b1["wall_s"], b2 and b2["wall_s"], "wall", "{:.1f}", True),
        ("wall / ideal", a1["wall_s"] / first["ideal_s"], a2["wall_s"] / last["ideal_s"],
         b1 and b1["wall_s"] / first["ideal_s"], b2 and b2["wall_s"] / last["ideal_s"], "wall_ratio", "{:.3f}", False),
        ("fit / ideal", a1["fit_s"] / first["ideal_s"], a2["fit_s"] / last["ideal_s"],
         b1 and b1["fit_s"] / first["ideal_s"], b2 and b2["fit_s"] / last["ideal_s"], "fit_ratio", "{:.3f}", False),
        ("driver CPU (s)", a1["cpu_s"], a2["cpu_s"], b1 and b1["cpu_s"], b2 and b2["cpu_s"], "cpu", "{:.1f}", True),
        ("driver peak RSS (MiB)", a1["maxrss_kb"] / 1024, a2["maxrss_kb"] / 1024, b1 and b1["maxrss_kb"] / 1024,
         b2 and b2["maxrss_kb"] / 1024, "rss", "{:.0f}", True),
        ("experiment folder (MiB)", a1["folder"]["total"][0] / MIB, a2["folder"]["total"][0] / MIB,
         b1 and b1["folder"]["total"][0] / MIB, b2 and b2["folder"]["total"][0] / MIB, "folder", "{:.1f}", True),
        ("experiment folder (files)", a1["folder"]["total"][1], a2["folder"]["total"][1],
         b1 and b1["folder"]["total"][1], b2 and b2["folder"]["total"][1], "files", "{:,}", True),
        ("Ray's experiment state (KiB)", state_bytes(a1) / 1024, state_bytes(a2) / 1024,
         b1 and state_bytes(b1) / 1024, b2 and state_bytes(b2) / 1024, "state", "{:.0f}", True),
        ("`tuner report` (s)", med(first, "table"), med(last, "table"), None, None, "report", "{:.2f}", True),
    ]
    rows += [(f"`tuner report --format {fmt}` (s)", med(first, fmt), med(last, fmt), None, None, fmt, "{:.2f}", True)
             for fmt in ("json", "html") if fmt in first["reports"] and fmt in last["reports"]]
    lines = [f"### Growth from {n1:,} to {n2:,} trials ({r:g} x)", "",
             f"Ratio: the figure at {n2:,} trials over the figure at {n1:,}; k: the exponent of a power law "
             f"through the two (figure ~ N^k: 0 flat, 1 linear); for a ratio to the ideal, a growth ratio of 1 "
             "means the time grows as the ideal does (linearly). Raw Ray (B) in brackets.", "",
             f"| figure | {n1:,} | {n2:,} | {n2:,} / {n1:,} | k | grows | why |", "|---|---|---|---|---|---|---|"]
    for label, v1, v2, w1, w2, why, fmt, absolute in rows:
        ratio = v2 / v1 if v1 else float("nan")
        if absolute:
            k, kind = growth_kind(ratio, r)
            k_text = f"{k:.2f}"
        else:
            k_text, kind = "", "flat" if abs(ratio - 1) <= 0.05 else "grows" if ratio > 1 else "falls"
        cells = [fmt.format(v1), fmt.format(v2), f"{ratio:.2f}"]
        if w1 is not None and w2:
            cells = [f"{fmt.format(v1)} ({fmt.format(w1)})", f"{fmt.format(v2)} ({fmt.format(w2)})",
                     f"{ratio:.2f} ({w2 / w1:.2f})"]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {k_text} | {kind} | {WHY[why].format(**fill)} |")
    return lines


def render(data: dict) -> str:
    """The section's body from the measurements (:func:`main`'s ``--save-runs`` JSON)."""
    runs, cpus = data["runs"], data["num_cpus"]
    sizes = ",".join(str(run["trials"]) for run in runs)
    lines = [
        machine_line(data["load_before"], data["load_after"], data["version"]),
        f"Command: `python benchmarks/scale.py --trials {sizes} --num-cpus {cpus}`. "
        f"N trials of Ray's release-test trial (report once, sleep 1 s), 1 CPU a trial on {cpus} CPUs, actor "
        f"reuse on; A = `tuner run`, B = the plain Ray Tune script, in turns A, B at each size. "
        f"Ideal = N x 1 s / {cpus} CPUs. Wall: the whole command (Python, Ray's start-up and shutdown, "
        "tuner's results); fit: `Tuner.fit()` alone, what Ray's test times. Load: the 1-minute load average "
        f"when the side started. Whole run {data['total_s'] / 60:.1f} min.",
    ]
    for run in runs:
        lines += [""] + size_section(run, cpus)
    if len(runs) >= 2:
        lines += [""] + growth_section(runs[0], runs[-1], cpus)
    lines += ["", RAY_FIGURE]
    return "\n".join(lines)


def parse_sizes(text: str) -> list[int]:
    """``200,1000`` -> ``[200, 1000]`` (sorted, each at least 1)."""
    try:
        sizes = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--trials takes whole numbers separated by commas, not {text!r}") from None
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"--trials takes sizes of at least 1 trial, not {text!r}")
    return sizes


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=parse_sizes, default=[200, 1000],
                        help="sizes, comma-separated: N one-second trials each (default 200,1000)")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--report-repeats", type=int, default=3)
    parser.add_argument("--skip-raw", action="store_true", help="tuner side only")
    parser.add_argument("--reports", default=",".join(REPORT_FORMATS),
                        help=f"`tuner report` formats to time, of {', '.join(REPORT_FORMATS)} (table always)")
    parser.add_argument("--output", type=Path, default=None, help="Markdown file to write the section into")
    parser.add_argument("--save-runs", type=Path, default=None, help="save the measurements as JSON here")
    parser.add_argument("--load-runs", type=Path, default=None,
                        help="write the section from a --save-runs file instead of running")
    args = parser.parse_args(argv)

    formats = ("table", *(f for f in REPORT_FORMATS[1:] if f in args.reports.split(",")))
    if args.load_runs:
        data = json.loads(args.load_runs.read_text())
    else:
        load_before, started, version = load_average(), time.perf_counter(), code_version()
        runs: list[dict] = []
        with tempfile.TemporaryDirectory(prefix="tuner-bench-scale-") as tmp:
            for n in args.trials:
                runs.append(measure_size(Path(tmp), n, args.num_cpus, args.report_repeats, args.skip_raw, formats))
                data = {"runs": runs, "num_cpus": args.num_cpus, "load_before": load_before,
                        "load_after": load_average(), "version": version, "total_s": time.perf_counter() - started}
                if args.save_runs:  # after each size: a later failure keeps the sizes measured
                    args.save_runs.write_text(json.dumps(data, indent=1))
    write_section(args.output, HEADING, render(data))


if __name__ == "__main__":
    main()
