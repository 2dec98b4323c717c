"""Train functions and objectives shared by the benchmarks.

They live in a real module (not in the scripts) because Ray's workers import a train
function by its module name: run the benchmarks from the repository root.

* :func:`trivial`: no work, ``config["results"]`` reports (overhead, benchmark 1).
* :func:`one_second`: Ray's bookkeeping release test trial: report, then sleep 1 s
  (``ray.tune.utils.release_test_util.function_trainable``; benchmark 2).
* :func:`search_objective`: one of three analytic multi-fidelity objectives, one
  report per fidelity step, charged against a global iteration budget (benchmark 3):

  - ``mfh6``: MF-Hartmann 6-D, the generator of mf-prior-bench
    (``mfpbench/synthetic/hartmann/generators.py``, ``MFHartmann6``; default preset
    bias 0.5, noise 0.1), fidelity z = 1..100; at z = 100 it is the Hartmann 6-D
    function, minimum -3.32237 at (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573).
  - ``counting_ones``: the toy of the BOHB paper (Falkner, Klein & Hutter, ICML 2018,
    "counting ones"): 8 binary categorical and 8 continuous parameters in [0, 1];
    f(x) = -(sum of the categoricals + sum over the continuous x_j of E[Bernoulli(x_j)]),
    the expectation estimated from b samples per parameter, the budget. Budgets 9..729
    samples as in the paper: step t = 1..81 uses 9 t samples. Minimum -16.
  - ``lc_toy``: Ray Tune's learning-curve toy (``ray/tune/examples/tune_basic_example.py``
    and ``optuna_example.py``: ``evaluation_fn(step, width, height) =
    (0.1 + width * step / 100) ** -1 + height * 0.1``, 100 steps, width in [0, 20],
    height in [-100, 100], minimised). Minimum at step 99, width 20, height -100:
    1 / 19.9 - 10 = -9.949749.

* :func:`zdt1_objective`: ZDT1 (two objectives) as a multi-fidelity learning curve
  (:func:`zdt1_fidelity`), for the multi-objective benchmark.

Every objective is cheap and sleeps nowhere; the value at step t is a pure function of
the config and t, so a paused and resumed trial (Hyperband, BOHB) continues from the
step in its checkpoint and sees the same values.
"""

from __future__ import annotations

import json
import math
import os
import struct
import time
import warnings
import zlib
from typing import Any

import numpy as np

# --------------------------------------------------------------------------- overhead


def _stamp(config: dict) -> None:
    """Record when the first trial started and which worker process ran it.

    ``<stamp_dir>/first_trial`` holds the wall clock of the first trial's start (created
    once, by whichever trial comes first); ``<stamp_dir>/pid_<pid>`` marks each process
    that ran a trial, so the number of files is the number of trial actors (1 per slot
    when actors are reused).
    """
    folder = config.get("stamp_dir")
    if not folder:
        return
    now = time.time()
    try:
        fd = os.open(os.path.join(folder, "first_trial"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        pass
    else:
        os.write(fd, repr(now).encode())
        os.close(fd)
    pid_file = os.path.join(folder, f"pid_{os.getpid()}")
    if not os.path.exists(pid_file):
        open(pid_file, "w").close()


def trivial(config: dict) -> None:
    """A trial that does no work: ``config["results"]`` reports of a made-up loss."""
    from ray import tune

    _stamp(config)
    x = float(config.get("x", 0.0))
    for i in range(int(config.get("results", 10))):
        tune.report({"loss": (x - 0.3) ** 2 + 1.0 / (i + 1)})


def one_second(config: dict) -> None:
    """Ray's release-test trial (``trial_length_s=1``, ``results_per_second=1``):
    one report, then one second of sleep."""
    from ray import tune

    _stamp(config)
    for i in range(int(config.get("num_iters", 1))):
        tune.report({"score": i + float(config.get("score", 0.0))})
        time.sleep(float(config.get("sleep_time", 1.0)))


# --------------------------------------------------------------------------- objectives

HARTMANN6_OPTIMUM_X = (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573)
_H6_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
_H6_A = np.array([
    [10, 3, 17, 3.5, 1.7, 8],
    [0.05, 10, 17, 0.1, 8, 14],
    [3, 3.5, 1.7, 10, 17, 8],
    [17, 8, 0.05, 10, 0.1, 14],
], dtype=float)
_H6_P = np.array([
    [1312, 1696, 5569, 124, 8283, 5886],
    [2329, 4135, 8307, 3736, 1004, 9991],
    [2348, 1451, 3522, 2883, 3047, 6650],
    [4047, 8828, 8732, 5743, 1091, 381],
], dtype=float)


def mf_hartmann6(xs: tuple[float, ...], z: int, *, z_min: int = 1, z_max: int = 100, bias: float = 0.5,
                 noise: float = 0.1, seed: int = 1337) -> float:
    """MF-Hartmann 6-D at fidelity ``z``, as mf-prior-bench's ``MFHartmann6.__call__``.

    ``alpha' = alpha - bias * (1 - s)`` and ``noise * |N(0, 1)| * (1 - s)``, with
    ``s = (log z - log z_min) / (log z_max - log z_min)``; the noise is seeded by
    ``seed * z * hash(xs)`` (float tuples hash the same in every process). At
    ``z = z_max`` both terms vanish: the plain Hartmann 6-D function. Both terms only
    raise the value, so a low fidelity never looks better than the true function.
    """
    xs = tuple(float(v) for v in xs)
    s = (math.log(z) - math.log(z_min)) / (math.log(z_max) - math.log(z_min))
    x = np.array(xs).reshape(1, -1)
    alpha_prime = _H6_ALPHA - bias * (1 - s)
    inner = np.sum(_H6_A * (x[:, np.newaxis, :] - 0.0001 * _H6_P) ** 2, axis=-1)
    h = -(np.sum(alpha_prime * np.exp(-inner), axis=-1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the seed overflows, as in mf-prior-bench
        rng = np.random.default_rng(seed=abs(seed * z * hash(xs)))
    eps = np.abs(rng.normal(size=h.size)) * noise * (1 - s)
    return float((h + eps)[0])


def lc_toy(step: int, width: float, height: float) -> float:
    """Ray Tune's ``evaluation_fn`` (tune_basic_example.py), without its sleep."""
    return (0.1 + width * step / 100) ** (-1) + height * 0.1


COUNTING_ONES_SAMPLES_PER_STEP = 9  # budgets 9, 18, ..., 729 samples (BOHB paper: 9..729)


def _config_seed(values: tuple[float, ...], seed: int) -> int:
    return zlib.crc32(struct.pack(f"{len(values)}d", *values)) ^ (seed * 0x9E3779B1 & 0xFFFFFFFF)


class Objective:
    """One analytic benchmark objective.

    Attributes:
        name: Short name used on the command line.
        title: Name in tables and plots.
        max_t: The highest fidelity, in steps (one report per step).
        optimum: The minimum of the full-fidelity, noiseless function.
        param_space: The tuner spec's ``param_space``.
    """

    name: str
    title: str
    max_t: int
    optimum: float
    param_space: dict

    def values(self, config: dict, seed: int) -> StepValues:
        """A callable step -> reported value for this config (1 <= step <= max_t)."""
        raise NotImplementedError

    def true_value(self, config: dict) -> float:
        """The full-fidelity, noiseless value: what regret is measured on."""
        raise NotImplementedError


class StepValues:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, step: int) -> float:
        return self.fn(step)


class MFHartmann6(Objective):
    name, title, max_t = "mfh6", "MF-Hartmann 6-D", 100
    optimum = -3.32237
    param_space = {f"X_{i}": {"type": "uniform", "low": 0.0, "high": 1.0} for i in range(6)}

    def _xs(self, config: dict) -> tuple[float, ...]:
        return tuple(float(config[f"X_{i}"]) for i in range(6))

    def values(self, config, seed):
        xs = self._xs(config)
        return StepValues(lambda t: mf_hartmann6(xs, t, z_max=self.max_t))

    def true_value(self, config):
        return mf_hartmann6(self._xs(config), self.max_t, z_max=self.max_t)


class CountingOnes(Objective):
    name, title, max_t = "counting_ones", "Counting ones (8+8)", 81
    optimum = -16.0
    n_cat = n_cont = 8
    param_space = {
        **{f"c_{i}": {"type": "choice", "values": [0, 1]} for i in range(8)},
        **{f"x_{i}": {"type": "uniform", "low": 0.0, "high": 1.0} for i in range(8)},
    }

    def _split(self, config):
        cats = [int(config[f"c_{i}"]) for i in range(self.n_cat)]
        conts = [float(config[f"x_{i}"]) for i in range(self.n_cont)]
        return cats, conts

    def values(self, config, seed):
        cats, conts = self._split(config)
        # The same samples for a config every time it is (re)started: a resumed trial
        # goes on with the estimate it had.
        rng = np.random.default_rng(_config_seed(tuple(cats) + tuple(conts), seed))
        n = COUNTING_ONES_SAMPLES_PER_STEP * self.max_t
        draws = rng.random((self.n_cont, n)) < np.array(conts)[:, None]
        running = np.cumsum(draws, axis=1)
        cat_sum = float(sum(cats))

        def value(t: int) -> float:
            b = COUNTING_ONES_SAMPLES_PER_STEP * t
            return -(cat_sum + float(np.sum(running[:, b - 1])) / b)

        return StepValues(value)

    def true_value(self, config):
        cats, conts = self._split(config)
        return -(float(sum(cats)) + float(sum(conts)))


class LCToy(Objective):
    name, title, max_t = "lc_toy", "Ray Tune learning-curve toy", 100
    optimum = lc_toy(99, 20.0, -100.0)
    param_space = {"width": {"type": "uniform", "low": 0.0, "high": 20.0},
                   "height": {"type": "uniform", "low": -100.0, "high": 100.0}}

    def values(self, config, seed):
        w, h = float(config["width"]), float(config["height"])
        return StepValues(lambda t: lc_toy(t - 1, w, h))  # step t reports evaluation_fn(t - 1)

    def true_value(self, config):
        return lc_toy(self.max_t - 1, float(config["width"]), float(config["height"]))


OBJECTIVES: dict[str, Objective] = {o.name: o for o in (MFHartmann6(), CountingOnes(), LCToy())}

RECORD_BYTES = 96  # one fixed-size line per step in the budget file


class BudgetExhausted(RuntimeError):
    """The experiment's iteration budget is spent: this trial's step was not run.

    With ``failure.fail_fast: true`` the first one ends the experiment.
    """


def _charge(path: str, budget: int, trial_id: str, step: int, *values: float, record_bytes: int = RECORD_BYTES) -> int:
    """Append one step's record to the experiment's budget file; return its rank (1-based).

    The record is ``trial_id step value...`` (the reported value and the true value, or
    more), padded to ``record_bytes``. ``O_APPEND`` writes of one short record are atomic,
    so the file is the global, ordered log of every step any trial ran. Raises
    BudgetExhausted past ``budget``.
    """
    line = " ".join([trial_id, str(step), *(repr(float(v)) for v in values)]).encode()
    if len(line) >= record_bytes:
        raise ValueError(f"a budget record of {len(line)} bytes does not fit in {record_bytes}")
    line = line.ljust(record_bytes - 1) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        rank = os.lseek(fd, 0, os.SEEK_CUR) // record_bytes
    finally:
        os.close(fd)
    if rank > budget:
        raise BudgetExhausted(f"the budget of {budget} steps is spent")
    return rank


def search_objective(config: dict) -> None:
    """One trial of an analytic objective: one report of ``loss`` per fidelity step.

    ``config`` holds the objective's parameters plus ``objective`` (a name in
    :data:`OBJECTIVES`), ``budget_file`` and ``budget`` (the experiment's total steps),
    ``seed``, and ``checkpoint_at``: the steps at which a scheduler may pause the trial
    (Hyperband's and BOHB's milestones), where it reports a checkpoint holding its step.
    """
    obj = OBJECTIVES[config["objective"]]
    values = obj.values(config, int(config.get("seed", 0)))
    true_value = obj.true_value(config)
    _charged_steps(config, values, true_value, obj.max_t)


def _charged_steps(config: dict, value_at, true_value: float, max_t: int, record_bytes: int = RECORD_BYTES) -> None:
    """The step loop of a budgeted multi-fidelity trial (:func:`search_objective`, :func:`conditional_objective`).

    From the step after the one in the trial's checkpoint (``step.json``; 1 without one) to
    ``max_t``: report ``loss`` = ``value_at(t)``, with ``budget_used`` (the step's rank in the
    experiment's budget file, :func:`_charge`, which raises past ``config["budget"]``) and
    ``step``; at the steps in ``config["checkpoint_at"]`` before the last, with a checkpoint
    holding the step (where Hyperband or BOHB may pause the trial).
    """
    from ray import tune

    trial_id = tune.get_context().get_trial_id()
    start = 1
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as folder:
            with open(os.path.join(folder, "step.json"), encoding="utf-8") as f:
                start = json.load(f)["step"] + 1
    pause_at = set(config.get("checkpoint_at") or ())
    for t in range(start, max_t + 1):
        value = value_at(t)
        rank = _charge(config["budget_file"], int(config["budget"]), trial_id, t, value, true_value,
                       record_bytes=record_bytes)
        metrics = {"loss": value, "budget_used": rank, "step": t}
        if t in pause_at and t < max_t:
            import tempfile

            with tempfile.TemporaryDirectory() as folder:
                with open(os.path.join(folder, "step.json"), "w", encoding="utf-8") as f:
                    json.dump({"step": t}, f)
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))
        else:
            tune.report(metrics)


#: The learning-rate schedule toy (:func:`schedule_objective`): Ray Tune's PBT toy
#: (``ray/tune/examples/pbt_function.py``, ``pbt_function``), made deterministic.
SCHEDULE_MIDPOINT = 50.0
SCHEDULE_LR_BOUNDS = (1e-4, 2e-2)


def schedule_optimal_lr(accuracy: float) -> float:
    """The best learning rate at this accuracy: a triangle that rises from 0.001 to 0.01 at the
    midpoint and falls back to 0.001 at twice the midpoint (Ray's ``pbt_function``)."""
    m = SCHEDULE_MIDPOINT
    lr = 0.01 * accuracy / m if accuracy < m else 0.01 - 0.01 * (accuracy - m) / m
    return min(0.01, max(0.001, lr))


def schedule_step(accuracy: float, lr: float, u: float) -> float:
    """One training step of the toy: the accuracy grows by ``u / q`` while the learning rate is
    within a factor ``q < 3`` of the best one, stalls when it is lower than that, and falls by
    ``(q - 3) u / 2`` when it is higher (Ray's ``pbt_function``, without its Gaussian noise).
    ``u`` in [0.5, 1.5) is the step's noise."""
    best = schedule_optimal_lr(accuracy)
    q = max(lr, best) / min(lr, best)
    if q < 3:
        accuracy += u / q
    elif lr > best:
        accuracy -= (q - 3) * u / 2
    return max(0.0, accuracy)


def schedule_objective(config: dict) -> None:
    """A trial whose best learning rate changes as it trains (PBT's case): one report of
    ``accuracy`` per step, ``config["max_t"]`` steps, a checkpoint (accuracy, step) at every
    step, each step charged against the experiment's budget (``budget_file``, ``budget``).

    No fixed learning rate follows the schedule, so a trial with one stalls; a schedule that
    tracks :func:`schedule_optimal_lr` gains about 1 a step. The noise of step t is a pure
    function of (seed, t, accuracy), so a clone continues as its parent would have.
    """
    import random
    import tempfile

    from ray import tune

    trial_id = tune.get_context().get_trial_id()
    lr, seed, max_t = float(config["lr"]), int(config.get("seed", 0)), int(config["max_t"])
    accuracy, start = 0.0, 1
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as folder:
            with open(os.path.join(folder, "state.json"), encoding="utf-8") as f:
                state = json.load(f)
        accuracy, start = state["accuracy"], state["step"] + 1
    for t in range(start, max_t + 1):
        u = 0.5 + random.Random(f"{seed} {t} {accuracy:.9f}").random()
        accuracy = schedule_step(accuracy, lr, u)
        rank = _charge(config["budget_file"], int(config["budget"]), trial_id, t, -accuracy, accuracy)
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w", encoding="utf-8") as f:
                json.dump({"accuracy": accuracy, "step": t}, f)
            tune.report({"accuracy": accuracy, "lr": lr, "budget_used": rank, "step": t},
                        checkpoint=tune.Checkpoint.from_directory(folder))


def read_budget_file(path: str) -> list[tuple[str, int, float, float]]:
    """The steps of an experiment in the order they ran: ``(trial_id, step, value, true_value)``."""
    out = []
    for trial_id, step, values in read_budget_records(path, RECORD_BYTES):
        value, true_value = values
        out.append((trial_id, step, value, true_value))
    return out


# --------------------------------------------------------------------------- ZDT1, two objectives

#: ZDT1's decision variables (Zitzler, Deb & Thiele 2000 use 30; 6 keep the benchmark short).
ZDT1_N = 6
#: Fidelity steps of a ZDT1 trial (epochs); at ZDT1_MAX_T it reports the true ZDT1.
ZDT1_MAX_T = 9
#: The low-fidelity error of g at step 1: ``ZDT1_BIAS * (g - 1) + ZDT1_NOISE * |N(0, 1)|``.
ZDT1_BIAS = 1.0
ZDT1_NOISE = 1.0
#: The hypervolume reference point (f1, f2): the worst values of ZDT1's objective space
#: (f1 = x1 <= 1, f2 <= g <= 10) moved 10 % of their range further out, the margin of
#: ``tuner.search.pareto.reference_point``; every configuration lies inside it.
ZDT1_REFERENCE = (1.1, 11.0)
#: The hypervolume of ZDT1's true front (f2 = 1 - sqrt(f1), f1 in [0, 1]) up to ZDT1_REFERENCE:
#: the box 1.1 x 11 less the area under the front, 1/3.
ZDT1_MAX_HYPERVOLUME = 1.1 * 11.0 - 1.0 / 3.0
ZDT1_RECORD_BYTES = 160  # trial_id step f1 f2 true_f1 true_f2


def zdt1(xs) -> tuple[float, float]:
    """ZDT1 (Zitzler, Deb & Thiele, "Comparison of Multiobjective Evolutionary Algorithms:
    Empirical Results", Evolutionary Computation 8(2), 2000), both objectives minimised.

    ``f1 = x1``, ``g = 1 + 9 / (n - 1) * sum(x2..xn)``, ``f2 = g * (1 - sqrt(f1 / g))``,
    each x in [0, 1]. The Pareto front is g = 1 (x2..xn = 0): ``f2 = 1 - sqrt(f1)``.

    Args:
        xs: The n >= 2 decision variables, each in [0, 1].

    Returns:
        ``(f1, f2)``.
    """
    xs = [float(v) for v in xs]
    g = 1.0 + 9.0 / (len(xs) - 1) * sum(xs[1:])
    return xs[0], _zdt1_f2(xs[0], g)


def _zdt1_f2(f1: float, g: float) -> float:
    return g * (1.0 - math.sqrt(f1 / g))


def zdt1_fidelity(xs, t: int, *, max_t: int = ZDT1_MAX_T, bias: float = ZDT1_BIAS, noise: float = ZDT1_NOISE,
                  seed: int = 0) -> tuple[float, float]:
    """ZDT1 at fidelity step ``t`` (1..max_t): a learning curve that ends at the true ZDT1.

    ``f1 = x1`` at every step (a cost known before training, like a model's size); ``f2`` is
    ZDT1's with ``g`` replaced by ``g_t = g + (1 - s) * (bias * (g - 1) + noise * |z|)``, where
    ``s = log t / log max_t`` (0 at step 1, 1 at max_t, as mf-prior-bench's MF-Hartmann) and ``z``
    is one standard normal draw per configuration and seed. So ``f2`` falls with every step, a
    low fidelity never looks better than the truth (``g_t >= g``, and ``f2`` grows with ``g``),
    and the noise reorders configurations at low fidelity: the first steps predict the last, but
    not exactly.

    Args:
        xs: The decision variables, each in [0, 1].
        t: The step, 1..max_t.
        max_t: The last step, where the values are the true ZDT1.
        bias: The relative error of ``g - 1`` at step 1.
        noise: The scale of the per-configuration error at step 1.
        seed: Seeds ``z`` together with the configuration.

    Returns:
        ``(f1, f2)`` at step ``t``.
    """
    xs = tuple(float(v) for v in xs)
    f1, _ = zdt1(xs)
    g = 1.0 + 9.0 / (len(xs) - 1) * sum(xs[1:])
    s = math.log(t) / math.log(max_t) if max_t > 1 else 1.0
    z = abs(float(np.random.default_rng(_config_seed(xs, seed)).normal()))
    g_t = g + (1.0 - s) * (bias * (g - 1.0) + noise * z)
    return f1, _zdt1_f2(f1, g_t)


def zdt1_objective(config: dict) -> None:
    """One trial of multi-fidelity ZDT1 (:func:`zdt1_fidelity`): one report of ``f1`` and ``f2``
    per step, ``config["max_t"]`` steps, each charged against the experiment's budget.

    ``config`` holds ``x1`` .. ``xn``, ``max_t``, ``seed``, ``budget_file`` and ``budget`` (the
    experiment's iterations). Each step's record holds the reported values and the true ZDT1 of
    the configuration, so the benchmark can re-evaluate a front at full fidelity from the log.
    """
    from ray import tune

    n = sum(1 for k in config if k[:1] == "x" and k[1:].isdigit())
    xs = [float(config[f"x{i}"]) for i in range(1, n + 1)]
    max_t, seed = int(config.get("max_t", ZDT1_MAX_T)), int(config.get("seed", 0))
    true_f1, true_f2 = zdt1(xs)
    trial_id = tune.get_context().get_trial_id()
    for t in range(1, max_t + 1):
        f1, f2 = zdt1_fidelity(xs, t, max_t=max_t, seed=seed)
        rank = _charge(config["budget_file"], int(config["budget"]), trial_id, t, f1, f2, true_f1, true_f2,
                       record_bytes=ZDT1_RECORD_BYTES)
        tune.report({"f1": f1, "f2": f2, "budget_used": rank, "step": t})


def read_budget_records(path: str, record_bytes: int) -> list[tuple[str, int, list[float]]]:
    """The steps of an experiment in the order they ran: ``(trial_id, step, [values...])``."""
    out = []
    try:
        data = open(path, "rb").read()
    except OSError:
        return out
    for i in range(len(data) // record_bytes):
        trial_id, step, *values = data[i * record_bytes:(i + 1) * record_bytes].decode().split()
        out.append((trial_id, int(step), [float(v) for v in values]))
    return out


# --------------------------------------------------------------------------- MNIST


def mnist_logged(config: dict) -> None:
    """``examples/mnist.py:train`` unchanged, with the wall clock of each report appended
    to ``config["report_log"]`` (one line: time, trial id, epoch, val_accuracy), so that
    the epochs and seconds an experiment spent before a given accuracy can be counted
    across its trials in the order the results arrived."""
    from ray import tune

    from examples import mnist
    from tuner import trial

    log = config.get("report_log")
    trial_id = tune.get_context().get_trial_id() if trial.in_tune() else "local"
    original = trial.report

    def report(metrics, checkpoint_dir=None):
        # Logged before handing the result to Ray: a trial stopped at this result (ASHA,
        # the stop criteria) never returns from the call.
        if log:
            line = f"{time.time()!r} {trial_id} {metrics.get('epoch')} {float(metrics.get('val_accuracy'))!r}\n"
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        original(metrics, checkpoint_dir)

    trial.report = report
    try:
        mnist.train({k: v for k, v in config.items() if k != "report_log"})
    finally:
        trial.report = original


# --------------------------------------------------------------------------- a conditional space

#: Fidelity steps of a trial of the conditional toy (:func:`conditional_objective`); at the last the
#: reported value is the true one.
COND_MAX_T = 9
#: The low-fidelity error at step 1: ``COND_BIAS * loss + COND_NOISE * |N(0, 1)|``, shrinking to 0 at COND_MAX_T.
COND_BIAS = 1.0
COND_NOISE = 0.2
COND_RECORD_BYTES = 96  # trial_id step value true_value, as RECORD_BYTES

#: The toy's branches: ``model.name`` -> (floor, {parameter: (distribution, target)}). A branch's
#: loss is its floor plus the squared distance of its active parameters to their targets, each
#: parameter scaled to [0, 1] over its range (log ranges in log space, integers over their
#: integers, a choice's values by position). The optimum (0) sits in ``mlp``, the branch with the
#: most parameters (5 active), so at a random configuration it is no better than ``linear`` (2
#: parameters, floor 0.3) on average: the best branch must be found, then tuned. ``mlp``'s
#: ``optimizer`` brings ``momentum`` (sgd) or ``beta2`` (adam), each under a ``when`` condition;
#: sgd costs :data:`COND_SGD_PENALTY` more. ``lr`` is one parameter shared by ``cnn`` and ``mlp``
#: (the same distribution in both branches), and ``warmup`` exists only for those two (a ``when``
#: on the sub-space choice).
COND_BRANCHES: dict[str, tuple[float, dict[str, tuple[dict, Any]]]] = {
    "linear": (0.30, {
        "alpha": ({"type": "loguniform", "low": 1e-4, "high": 1.0}, 1e-2),
        "l1_ratio": ({"type": "uniform", "low": 0.0, "high": 1.0}, 0.2),
    }),
    "forest": (0.20, {
        "trees": ({"type": "lograndint", "low": 10, "high": 1001}, 300),
        "depth": ({"type": "randint", "low": 2, "high": 17}, 12),
        "max_features": ({"type": "uniform", "low": 0.1, "high": 1.0}, 0.3),
    }),
    "cnn": (0.10, {
        "channels": ({"type": "lograndint", "low": 8, "high": 257}, 64),
        "kernel": ({"type": "choice", "values": [3, 5, 7]}, 5),
        "lr": ({"type": "loguniform", "low": 1e-5, "high": 1e-1}, 3e-3),
    }),
    "mlp": (0.0, {
        "width": ({"type": "lograndint", "low": 16, "high": 1025}, 256),
        "dropout": ({"type": "uniform", "low": 0.0, "high": 0.8}, 0.2),
        "lr": ({"type": "loguniform", "low": 1e-5, "high": 1e-1}, 3e-3),
        "optimizer": ({"type": "choice", "values": ["sgd", "adam"]}, None),
        "momentum": ({"type": "uniform", "low": 0.0, "high": 0.99, "when": {"optimizer": "sgd"}}, 0.9),
        "beta2": ({"type": "uniform", "low": 0.9, "high": 0.9999, "when": {"optimizer": "adam"}}, 0.99),
    }),
}
#: How much worse sgd is than adam in ``mlp`` (each at its best momentum / beta2).
COND_SGD_PENALTY = 0.04
#: ``warmup`` (cnn and mlp only): its distribution and target.
COND_WARMUP = ({"type": "uniform", "low": 0.0, "high": 0.3, "when": {"model": {"in": ["cnn", "mlp"]}}}, 0.1)
#: The optimum: ``mlp`` with adam, every parameter at its target; its true value.
COND_OPTIMUM_CONFIG = {"model": {"name": "mlp", "width": 256, "dropout": 0.2, "lr": 3e-3, "optimizer": "adam",
                                 "beta2": 0.99}, "warmup": 0.1}
COND_OPTIMUM = 0.0


def conditional_space(flat: bool = False) -> dict:
    """The toy's ``param_space``: conditional (a sub-space choice ``model`` among the branches of
    :data:`COND_BRANCHES`, ``when`` conditions on ``momentum``, ``beta2`` and ``warmup``), or
    ``flat``: the same parameters under the same keys, every one always sampled (``model.name`` a
    plain choice, no ``when``), so a trial's config holds the other branches' parameters too.

    Returns:
        The ``param_space`` as a dict (the form ``tune_model`` takes).
    """
    def dist(d: dict) -> dict:
        return {k: v for k, v in d.items() if not (flat and k == "when")}

    warmup = dist(COND_WARMUP[0])
    if flat:
        model: dict[str, Any] = {"name": {"type": "choice", "values": list(COND_BRANCHES)}}
        for _, params in COND_BRANCHES.values():
            model.update({k: dist(d) for k, (d, _) in params.items()})
        return {"model": model, "warmup": warmup}
    branches = [{"name": b, **{k: dist(d) for k, (d, _) in params.items()}} for b, (_, params) in
                COND_BRANCHES.items()]
    return {"model": {"type": "choice", "values": branches}, "warmup": warmup}


def _unit(d: dict, value: Any) -> float:
    """``value`` scaled to [0, 1] over the distribution's range (log space for log ranges; a choice by position)."""
    if d["type"] == "choice":
        return d["values"].index(value) / (len(d["values"]) - 1)
    low, high = float(d["low"]), float(d["high"]) - (1 if d["type"].endswith("randint") else 0)
    v = float(value)
    if d["type"].startswith("log"):
        low, high, v = math.log(low), math.log(high), math.log(v)
    return (v - low) / (high - low)


def conditional_active_keys(config: dict) -> set[str]:
    """The keys (``/``-joined) a config of the conditional space must hold, given its branch and
    optimizer: ``model/name``, the branch's parameters, ``momentum`` or ``beta2`` by the optimizer,
    ``warmup`` for cnn and mlp. Written from :data:`COND_BRANCHES`, independently of tuner's conditions."""
    branch = config["model"]["name"]
    keys = {"model/name"}
    for k, (d, _) in COND_BRANCHES[branch][1].items():
        when = d.get("when")
        if when is None or all(config["model"].get(p) == v for p, v in when.items()):
            keys.add(f"model/{k}")
    if branch in COND_WARMUP[0]["when"]["model"]["in"]:
        keys.add("warmup")
    return keys


def conditional_true_value(config: dict) -> float:
    """The toy's full-fidelity, noiseless loss of a config (nested, as a trial gets it); it reads only
    the parameters of the branch taken (the flat space's others are ignored).

    Returns:
        ``floor + sum((unit(x) - unit(target))^2)`` over the branch's active parameters
        (and ``warmup`` for cnn and mlp), plus :data:`COND_SGD_PENALTY` for mlp with sgd; the
        minimum, :data:`COND_OPTIMUM`, at :data:`COND_OPTIMUM_CONFIG`.
    """
    model = config["model"]
    floor, params = COND_BRANCHES[model["name"]]
    distance = 0.0
    for key in sorted(conditional_active_keys(config)):
        if key == "model/name" or key == "model/optimizer":
            continue
        d, target = COND_WARMUP if key == "warmup" else params[key.split("/", 1)[1]]
        value = config["warmup"] if key == "warmup" else model[key.split("/", 1)[1]]
        distance += (_unit(d, value) - _unit(d, target)) ** 2
    penalty = COND_SGD_PENALTY if model.get("optimizer") == "sgd" and model["name"] == "mlp" else 0.0
    return floor + penalty + distance


def conditional_fidelity(true_value: float, t: int, z: float, *, max_t: int = COND_MAX_T, bias: float = COND_BIAS,
                         noise: float = COND_NOISE) -> float:
    """The loss reported at step ``t`` (1..max_t): ``true + (1 - s)(bias * true + noise * |z|)``,
    ``s = log t / log max_t`` (as :func:`zdt1_fidelity`): too high early, by an error that shrinks
    with every step and reorders configurations, the true value at ``max_t``."""
    s = math.log(t) / math.log(max_t) if max_t > 1 else 1.0
    return true_value + (1.0 - s) * (bias * true_value + noise * abs(z))


def _config_z(config: dict, seed: int) -> float:
    """One standard normal draw per configuration (its toy parameters) and seed."""
    from tuner.core.params import flatten

    flat = flatten({"model": config["model"], **({"warmup": config["warmup"]} if "warmup" in config else {})})
    key = json.dumps(flat, sort_keys=True).encode()
    return float(np.random.default_rng([zlib.crc32(key), seed]).normal())


def conditional_objective(config: dict) -> None:
    """One trial of the conditional toy: one report of ``loss`` per step (:func:`conditional_fidelity`),
    ``config["max_t"]`` steps, each charged against the experiment's budget (``budget_file``,
    ``budget``; the record holds the reported and the true value), a checkpoint at the steps in
    ``checkpoint_at`` (where BOHB's Hyperband may pause it). At its start the trial appends its id and
    its config's toy parameters (``model``, ``warmup``), as the train function got them, to
    ``config_log`` (one JSON line), so the benchmark can check which keys each config held.
    """
    from ray import tune

    trial_id = tune.get_context().get_trial_id()
    toy = {k: config[k] for k in ("model", "warmup") if k in config}
    if config.get("config_log"):
        # A value json cannot write (a numpy scalar) is logged as {"__numpy__": repr}: the benchmark counts it.
        line = (json.dumps({"trial_id": trial_id, "config": toy},
                           default=lambda v: {"__numpy__": repr(v)}) + "\n").encode()
        fd = os.open(config["config_log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    max_t, seed = int(config.get("max_t", COND_MAX_T)), int(config.get("seed", 0))
    true_value = conditional_true_value(config)
    z = _config_z(config, seed)
    _charged_steps(config, lambda t: conditional_fidelity(true_value, t, z, max_t=max_t), true_value, max_t,
                   record_bytes=COND_RECORD_BYTES)


def mfh6_objective(config: dict) -> None:
    """MF-Hartmann 6-D (:func:`mf_hartmann6`) with ``config["max_t"]`` fidelity steps, one report of ``loss`` a
    step, charged to the experiment's budget file (:func:`_charged_steps`): the warm-start benchmark's
    trial (``benchmarks/warm_start.py``), shorter than :func:`search_objective`'s 100 steps."""
    xs = tuple(float(config[f"X_{i}"]) for i in range(6))
    max_t = int(config["max_t"])
    _charged_steps(config, lambda t: mf_hartmann6(xs, t, z_max=max_t), mf_hartmann6(xs, max_t, z_max=max_t), max_t)


# --------------------------------------------------------------------------- the dashboard's delay


def clock_reports(config: dict) -> None:
    """``config["reports"]`` reports, one every ``config["interval_s"]`` seconds, each of ``reported_at``: the
    wall-clock time it was made (``time.time()``, seconds), so a reader of the results sees how old a report is
    (``benchmarks/dashboard.py``)."""
    from ray import tune

    for _ in range(int(config["reports"])):
        time.sleep(float(config["interval_s"]))
        tune.report({"reported_at": time.time()})
