"""A W&B sweep configuration (``wandb sweep sweep.yaml``'s file) as a tuner spec.

What maps where (docs/guides/convert.md has the table): ``program``/``command`` -> a command
trial (``${args}`` -> one ``--name={name}`` argument per parameter), ``method`` -> ``search``
(``bayes`` -> Optuna's TPE), ``metric`` -> ``metric``/``mode`` (``target`` -> ``stop``),
``parameters`` -> ``param_space`` (each distribution by its meaning: ``log_uniform``'s bounds
are natural-log exponents), ``early_terminate`` hyperband -> ``scheduler: asha``, ``run_cap``
-> ``num_samples``. Whatever does not map exactly is noted on the :class:`~tuner.convert.source.Source`.
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Mapping

from tuner.convert.common import DEFAULT_NUM_SAMPLES, literal, spec_name, trainable_section
from tuner.convert.source import Source, clean_float
from tuner.spec.distributions import PARAM_NAME

#: The top-level keys of a sweep configuration (W&B's schema allows no others).
KEYS = ("program", "command", "method", "metric", "parameters", "early_terminate", "run_cap", "name",
        "description", "entity", "project", "kind", "apiVersion", "controller", "job", "image_uri")
METHODS = ("grid", "random", "bayes")
#: W&B's distributions that tuner converts, and those it has no equivalent for.
DISTRIBUTIONS = ("constant", "categorical", "categorical_w_probabilities", "int_uniform", "uniform", "q_uniform",
                 "log_uniform", "log_uniform_values", "q_log_uniform", "q_log_uniform_values", "inv_log_uniform",
                 "inv_log_uniform_values", "normal", "q_normal")
NO_EQUIVALENT = ("log_normal", "q_log_normal", "beta", "q_beta")
#: The distributions W&B's grid method enumerates.
GRID_DISTRIBUTIONS = ("constant", "categorical", "int_uniform", "q_uniform")
#: The command macros: what each becomes (see :func:`_command`).
MACROS = ("${env}", "${interpreter}", "${program}", "${args}", "${args_no_hyphens}", "${args_no_boolean_flags}",
          "${args_json}", "${args_json_file}")
DEFAULT_COMMAND = ["${env}", "${interpreter}", "${program}", "${args}"]
_GOALS = {"minimize": "min", "maximize": "max"}


def is_sweep(data: Mapping) -> bool:
    """Whether ``data`` looks like a W&B sweep configuration: ``parameters`` and ``method``, no Kubernetes kind."""
    return isinstance(data.get("parameters"), Mapping) and data.get("kind") in (None, "sweep") and \
        any(key in data for key in ("method", "program", "command"))


def convert_sweep(source: Source, trainable: str | None = None) -> dict:
    """Convert the sweep configuration ``source.data`` into a spec mapping.

    Args:
        source: The parsed sweep configuration; notes are added to it.
        trainable: ``--trainable module:function``: replaces the program as the trial.

    Returns:
        The spec mapping, in the order it is written.

    Raises:
        ConvertError: For an unknown key, a method or distribution tuner lacks, a missing
            ``parameters``/``min``/``max``/``values``, a ``metric`` missing where ``bayes`` or
            ``early_terminate`` need one, or no ``program``/``command`` without ``trainable``.
    """
    data = source.data
    for key in data:
        if key not in KEYS:
            raise source.error((key,), f"is not a key of a W&B sweep configuration; its keys: {', '.join(KEYS)}.")
    method = source.choice(source.required(data, (), "method", "grid, random or bayes"), ("method",), METHODS,
                           "method")
    metric, mode, stop = _metric(source, data.get("metric"), method, data)
    spec: dict[str, Any] = {"name": spec_name(source, data.get("name"), ("name",))}
    params = source.mapping(source.required(data, (), "parameters", "the parameters to sweep"), ("parameters",))
    if not params:
        raise source.error(("parameters",), "is empty; a sweep has at least one parameter.")
    space = {name: _parameter(source, ("parameters", name), value, method) for name, value in params.items()}
    spec["trainable"] = _trainable(source, data, space, trainable)
    if metric:
        spec["metric"], spec["mode"] = metric, mode
    spec["num_samples"] = _num_samples(source, data.get("run_cap"), method)
    if stop:
        spec["stop"] = stop
    spec["param_space"] = space
    source.origins[("search",)] = ("method",)
    spec["search"] = {"grid": {"algorithm": "grid"}, "random": {"algorithm": "random"},
                      "bayes": {"algorithm": "optuna", "sampler": "tpe"}}[method]
    if method == "bayes":
        source.note(("search",), ("method",), "bayes (W&B's Gaussian-process Bayesian optimisation) becomes "
                    "search optuna with its TPE sampler, tuner's model-based searcher.")
    if data.get("early_terminate") is not None:
        spec["scheduler"] = _early_terminate(source, data["early_terminate"])
        source.origins[("scheduler",)] = ("early_terminate",)
    for key in ("description", "controller", "job", "image_uri"):
        if data.get(key) is not None:
            source.note((), (key,), "dropped: a tuner spec has no equivalent.")
    return spec


def _metric(source: Source, metric: Any, method: str, data: Mapping) -> tuple[str | None, str | None, dict | None]:
    """``(metric, mode, stop)`` from the sweep's ``metric``."""
    if metric is None:
        for key, why in (("bayes", "method: bayes"), ("early_terminate", "early_terminate")):
            if (method == key) if key == "bayes" else data.get(key) is not None:
                raise source.error(("metric",), f"is missing; {why} needs one (metric: {{name: NAME, goal: "
                                   "minimize}).")
        return None, None, None
    metric = source.mapping(metric, ("metric",))
    for key in metric:
        if key not in ("name", "goal", "target", "impute", "impute_while_running"):
            raise source.error(("metric", key), "is not a key of a sweep's metric; its keys: name, goal, target, "
                               "impute, impute_while_running.")
    name = source.text(source.required(metric, ("metric",), "name", "the metric to optimise"), ("metric", "name"))
    goal = source.choice(metric.get("goal", "minimize"), ("metric", "goal"), _GOALS, "goal")
    stop = None
    if metric.get("target") is not None:
        target = source.number(metric["target"], ("metric", "target"))
        stop = {name: target}
        word = "at or below" if goal == "minimize" else "at or above"
        source.note(("stop",), ("metric", "target"), f"becomes stop: {{{name}: {target}}}, which ends each trial "
                    f"whose {name} is {word} {target}; W&B instead stops starting new runs once one run reaches it "
                    "(tuner goes on with the other trials).")
    for key in ("impute", "impute_while_running"):
        if metric.get(key) is not None:
            source.note(("metric",), ("metric", key), "dropped: tuner's searchers skip a failed trial's missing "
                        "metric rather than impute it.")
    return name, _GOALS[goal], stop


def _num_samples(source: Source, run_cap: Any, method: str) -> int:
    if method == "grid":
        if run_cap is not None:
            source.integer(run_cap, ("run_cap",))
            source.note(("num_samples",), ("run_cap",), f"dropped: a grid runs every point once (num_samples: 1 "
                        f"repeats each once); W&B stops after {run_cap} runs even when points are left.")
        return 1
    if run_cap is None:
        source.note(("num_samples",), ("method",), f"the sweep has no run_cap (W&B runs until it is stopped); "
                    f"num_samples: {DEFAULT_NUM_SAMPLES} is a guess, set yours.")
        return DEFAULT_NUM_SAMPLES
    value = source.integer(run_cap, ("run_cap",))
    if value < 1:
        raise source.error(("run_cap",), f"must be at least 1, but got {value}.")
    return value


# -- parameters ----------------------------------------------------------------------------------------------------

def _kind(source: Source, path: tuple, config: Mapping) -> str:
    """The parameter's distribution, inferred as W&B infers it when ``distribution`` is left out."""
    dist = config.get("distribution")
    if dist is not None:
        if dist in NO_EQUIVALENT:
            raise source.error((*path, "distribution"), f"{dist} has no tuner equivalent (tuner's param_space "
                               "draws from uniform, quniform, loguniform, qloguniform, randn, qrandn, randint, "
                               "qrandint, lograndint, qlograndint, choice and grid); use one of the W&B "
                               f"distributions tuner converts: {', '.join(DISTRIBUTIONS)}.")
        return source.choice(dist, (*path, "distribution"), DISTRIBUTIONS, "distribution")
    if "values" in config:
        return "categorical_w_probabilities" if "probabilities" in config else "categorical"
    if "value" in config:
        return "constant"
    if "min" in config and "max" in config:
        ints = all(isinstance(config[k], int) and not isinstance(config[k], bool) for k in ("min", "max"))
        return "int_uniform" if ints else "uniform"
    raise source.error(path, "has no `values`, `value`, `min`/`max`, `distribution` or `parameters`; a W&B "
                       "parameter needs one of them.")


def _parameter(source: Source, path: tuple, config: Any, method: str) -> Any:
    """One entry of ``parameters`` as a ``param_space`` entry (a distribution, a constant or a group)."""
    if not PARAM_NAME.match(str(path[-1])):
        raise source.error(path, f"{path[-1]!r} is not a parameter name: it starts with a letter or '_' and holds "
                           "only letters, digits, '_', '.' and '-' (W&B's rule and tuner's).")
    config = source.mapping(config, path, "a mapping (values, value, distribution, min/max or parameters)")
    if "parameters" in config:
        extra = [k for k in config if k != "parameters"]
        if extra:
            raise source.error((*path, extra[0]), "a parameter with nested `parameters` holds nothing else.")
        nested = source.mapping(config["parameters"], (*path, "parameters"))
        if not nested:
            raise source.error((*path, "parameters"), "is empty; nested parameters hold at least one.")
        return {name: _parameter(source, (*path, "parameters", name), value, method) for name, value in nested.items()}
    kind = _kind(source, path, config)
    where = ("param_space", *[p for p in path[1:] if p != "parameters"])
    if method == "grid" and kind not in GRID_DISTRIBUTIONS:
        raise source.error((*path, "distribution") if "distribution" in config else path,
                           f"method grid enumerates only values (without probabilities), value, int_uniform and "
                           f"q_uniform (as W&B's grid does), but this parameter is {kind}.")
    source.origins[where] = path
    return _DISTRIBUTION[kind](source, path, where, config, method == "grid")


def _bounds(source: Source, path: tuple, config: Mapping, *, positive: bool = False) -> tuple[float, float]:
    low = source.number(source.required(config, path, "min", "the lower bound"), (*path, "min"))
    high = source.number(source.required(config, path, "max", "the upper bound"), (*path, "max"))
    if positive and low <= 0:
        raise source.error((*path, "min"), f"must be > 0 for a log scale, but got {low}.")
    if not low < high:
        raise source.error((*path, "max"), f"must be greater than min, but got min={low}, max={high}.")
    return low, high


def _q(source: Source, path: tuple, config: Mapping) -> float | int:
    q = source.number(config.get("q", 1.0), (*path, "q"))
    if q <= 0:
        raise source.error((*path, "q"), f"must be > 0, but got {q}.")
    return q


def _constant(source, path, where, config, grid):
    return config["value"]


def _categorical(source, path, where, config, grid):
    values = config["values"]
    if not isinstance(values, list) or not values:
        raise source.error((*path, "values"), "must be a non-empty list of values.")
    if "probabilities" in config:
        source.note(where, (*path, "probabilities"), f"dropped: tuner's choice draws each value with the same "
                    f"probability (the sweep weighs them {config['probabilities']}).")
    return {"type": "choice", "values": values}


def _int_uniform(source, path, where, config, grid):
    low, high = _bounds(source, path, config)
    low, high = (source.integer(v, (*path, k)) for k, v in (("min", low), ("max", high)))
    dist: dict[str, Any] = {"type": "randint", "low": low, "high": high + 1}
    if grid:
        dist["grid_points"] = high - low + 1
    return dist


def _uniform(source, path, where, config, grid):
    low, high = _bounds(source, path, config)
    return {"type": "uniform", "low": low, "high": high}


def _multiples(low: float, high: float, q: float) -> tuple[float, float]:
    """The smallest and largest multiples of ``q`` that rounding values of ``[low, high]`` to ``q`` reaches
    with a positive probability (a bound halfway between two multiples reaches only the inner one)."""
    return (clean_float(math.floor(low / q + 0.5 + 1e-9) * q),
            clean_float(math.ceil(high / q - 0.5 - 1e-9) * q))


def _q_uniform(source, path, where, config, grid):
    low, high = _bounds(source, path, config)
    q = _q(source, path, config)
    if grid:  # W&B's grid runs numpy.arange(min, max, q): from min, max left out
        count = math.ceil((high - low) / q - 1e-9)
        return {"type": "choice", "values": [clean_float(low + k * q) if not isinstance(q, int) or not
                                             isinstance(low, int) else low + k * q for k in range(count)]}
    qlow, qhigh = _multiples(low, high, q)
    if qlow >= qhigh:
        raise source.error((*path, "q"), f"leaves one value only between min={low} and max={high}; use value.")
    if (qlow, qhigh) != (low, high):
        source.note(where, path, f"[{low}, {high}] becomes [{qlow}, {qhigh}], the multiples of q={q} that W&B's "
                    "rounding reaches (tuner's bounds are multiples of q).")
    return _stepped(qlow, qhigh, q, ("randint", "qrandint", "quniform"))


def _stepped(low, high, q, kinds: tuple[str, str, str]) -> dict:
    """A quantized range whose bounds are multiples of ``q``: with a whole ``q`` and whole bounds the integer
    kind (``kinds[0]`` for q 1, whose ``high`` is exclusive; ``kinds[1]`` else), otherwise ``kinds[2]``."""
    whole, stepped, real = kinds
    if isinstance(q, int) and float(low).is_integer() and float(high).is_integer():
        if q == 1:
            return {"type": whole, "low": int(low), "high": int(high) + 1}
        return {"type": stepped, "low": int(low), "high": int(high), "q": q}
    return {"type": real, "low": low, "high": high, "q": q}


def _log_range(source, path, where, config, kind) -> tuple[float, float]:
    """The values' bounds of a log-uniform kind: W&B's ``log_uniform`` bounds are natural-log exponents."""
    if kind in ("log_uniform", "q_log_uniform"):
        low, high = _bounds(source, path, config)
        values = clean_float(math.exp(low)), clean_float(math.exp(high))
        source.note(where, path, f"{kind}'s min/max are natural-log exponents: [e^{low}, e^{high}] is "
                    f"[{values[0]}, {values[1]}].")
        return values
    if kind == "inv_log_uniform":
        low, high = _bounds(source, path, config)
        values = clean_float(math.exp(-high)), clean_float(math.exp(-low))
        source.note(where, path, f"inv_log_uniform draws X with 1/X log-uniform over [e^{low}, e^{high}], so X is "
                    f"log-uniform over [e^-{high}, e^-{low}] = [{values[0]}, {values[1]}].")
        return values
    low, high = _bounds(source, path, config, positive=True)
    if kind == "inv_log_uniform_values":
        source.note(where, path, "inv_log_uniform_values: 1/X log-uniform over [1/max, 1/min] is X log-uniform "
                    f"over [min, max] = [{low}, {high}].")
    return low, high


def _log_uniform(source, path, where, config, grid):
    low, high = _log_range(source, path, where, config, _kind(source, path, config))
    return {"type": "loguniform", "low": low, "high": high}


def _q_log_uniform(source, path, where, config, grid):
    low, high = _log_range(source, path, where, config, _kind(source, path, config))
    q = _q(source, path, config)
    qlow, qhigh = _multiples(low, high, q)
    if qlow <= 0:
        qlow = clean_float(q)
    if qlow >= qhigh:
        raise source.error((*path, "q"), f"leaves one value only between {low} and {high}; use value.")
    if (qlow, qhigh) != (low, high):
        source.note(where, path, f"[{low}, {high}] becomes [{qlow}, {qhigh}], the multiples of q={q} there "
                    "(tuner's bounds are positive multiples of q).")
    return _stepped(qlow, qhigh, q, ("lograndint", "qlograndint", "qloguniform"))


def _normal_args(source, path, config) -> tuple[float, float]:
    mu = source.number(config.get("mu", 0.0), (*path, "mu"))
    sigma = source.number(config.get("sigma", 1.0), (*path, "sigma"))
    if sigma <= 0:
        raise source.error((*path, "sigma"), f"must be > 0, but got {sigma}.")
    return mu, sigma


def _normal(source, path, where, config, grid):
    mu, sigma = _normal_args(source, path, config)
    return {"type": "randn", "mean": mu, "sd": sigma}


def _q_normal(source, path, where, config, grid):
    mu, sigma = _normal_args(source, path, config)
    return {"type": "qrandn", "mean": mu, "sd": sigma, "q": _q(source, path, config)}


_DISTRIBUTION = {
    "constant": _constant, "categorical": _categorical, "categorical_w_probabilities": _categorical,
    "int_uniform": _int_uniform, "uniform": _uniform, "q_uniform": _q_uniform,
    "log_uniform": _log_uniform, "log_uniform_values": _log_uniform, "inv_log_uniform": _log_uniform,
    "inv_log_uniform_values": _log_uniform, "q_log_uniform": _q_log_uniform, "q_log_uniform_values": _q_log_uniform,
    "normal": _normal, "q_normal": _q_normal,
}


# -- the command ---------------------------------------------------------------------------------------------------

def _leaves(space: Mapping, prefix: str = "") -> list[str]:
    """The parameters' placeholder names, dotted for nested ones, sorted by name as W&B orders ``${args}``."""
    names = []
    for key in sorted(space):
        value = space[key]
        if isinstance(value, Mapping) and "type" not in value:
            names += _leaves(value, f"{prefix}{key}.")
        else:
            names.append(f"{prefix}{key}")
    return names


def _trainable(source: Source, data: Mapping, space: Mapping, trainable: str | None) -> str | dict:
    command = data.get("command")
    program = data.get("program")
    if trainable:
        for key in ("program", "command"):
            if data.get(key) is not None:
                source.note(("trainable",), (key,), f"dropped: --trainable {trainable} is the trial instead.")
        for key in ("project", "entity"):
            if data.get(key) is not None:
                source.note(("trainable",), (key,), "dropped: a train function logs to W&B through the spec's "
                            f"reporting.wandb ({key}: {data[key]}), which needs pip install tuner[wandb].")
        return trainable
    if program is None and command is None:
        raise source.error((), "has neither `program` nor `command`, so there is no script to run; add one, or "
                           "give tuner convert --trainable module:function.")
    if program is not None:
        source.text(program, ("program",))
    default = command is None
    if default:
        command = DEFAULT_COMMAND
    elif not isinstance(command, list) or not command:
        raise source.error(("command",), "must be a non-empty list of the command's items.")
    env = {}
    for key, var in (("project", "WANDB_PROJECT"), ("entity", "WANDB_ENTITY")):
        if data.get(key) is not None:
            env[var] = str(data[key])
    nested = any("." in name for name in _leaves(space))
    argv = _command(source, command, program, space, nested, default)
    return trainable_section(argv, "json", None, env or None)


def _command(source: Source, command: list, program: Any, space: Mapping, nested: bool,
             default: bool = False) -> list[str]:
    """The sweep's command with its macros replaced (a macro is a whole item, as the W&B agent reads it);
    ``default``: the sweep gives none, and this is W&B's default command for its ``program``."""
    names = _leaves(space)
    out: list[str] = []
    where = ("trainable", "command")
    if default:
        source.note(where, ("program",), "W&B's default command ${env} ${interpreter} ${program} ${args} becomes "
                    "python PROGRAM --name={name}...: ${env} (/usr/bin/env) is dropped, and `python` first is the "
                    "Python that runs tuner.")
    for i, item in enumerate(command):
        path = ("program",) if default else ("command", i)
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise source.error(path, f"each item of the command is text, but got {item!r}.")
        item = str(item)
        if item == "${env}":
            if default:
                continue
            source.note(where, path, "${env} (/usr/bin/env) is dropped: tuner runs the program itself, and "
                        "`python` first is the Python that runs tuner.")
        elif item == "${interpreter}":
            out.append("python")
        elif item == "${program}":
            if program is None:
                raise source.error(path, "names ${program}, but the sweep has no `program`.")
            out.append(literal(str(program)))
        elif item in ("${args}", "${args_no_hyphens}"):
            dash = "--" if item == "${args}" else ""
            out += [f"{dash}{name}={{{name}}}" for name in names]
            if nested:
                source.note(where, path, f"{item} passes a nested parameter as one argument holding its mapping; "
                            "the spec passes each of its leaves on its own, as --group.name=VALUE.")
        elif item in ("${args_no_boolean_flags}", "${args_json}"):
            out += [f"--{name}={{{name}}}" for name in names]
            what = ("writes a true boolean as a bare --flag and leaves out a false one" if item.endswith("flags}")
                    else "passes one JSON object of every parameter")
            source.note(where, path, f"{item} {what}; tuner's placeholders cannot, so the spec passes "
                        "--name=VALUE arguments as ${args} does: the script must read those.")
        elif item == "${args_json_file}":
            out.append("{tuner.config_file}")
            source.note(where, path, "${args_json_file} becomes {tuner.config_file}: the trial's config as a YAML "
                        "file (not JSON; yaml.safe_load reads both).")
        elif item.startswith("${") and item.endswith("}"):
            raise source.error(path, f"{item} is not a macro tuner can convert; the W&B macros it knows: "
                               f"{', '.join(MACROS)}.")
        else:
            out.append(literal(item))
    if not out:
        raise source.error(("command",), "leaves no program to run once its macros are replaced.")
    return out


# -- early termination ---------------------------------------------------------------------------------------------

def _early_terminate(source: Source, config: Any) -> dict:
    path = ("early_terminate",)
    config = source.mapping(config, path)
    source.choice(config.get("type"), (*path, "type"), ("hyperband",), "early_terminate type")
    for key in config:
        if key not in ("type", "min_iter", "max_iter", "s", "eta", "strict"):
            raise source.error((*path, key), "is not a key of W&B's hyperband; its keys: type, min_iter, max_iter, "
                               "s, eta, strict.")
    eta = source.number(config.get("eta", 3), (*path, "eta"))
    if eta <= 1:
        raise source.error((*path, "eta"), f"must be > 1, but got {eta}.")
    scheduler: dict[str, Any] = {"type": "asha"}
    if config.get("min_iter") is not None:
        min_iter = source.integer(config["min_iter"], (*path, "min_iter"))
        if min_iter < 1:
            raise source.error((*path, "min_iter"), f"must be at least 1, but got {min_iter}.")
        scheduler["grace_period"] = min_iter
        scheduler["reduction_factor"] = eta
        if config.get("max_iter") is not None:
            scheduler["max_t"] = source.integer(config["max_iter"], (*path, "max_iter"))
        else:
            scheduler["stop_last_trials"] = False
            source.note(("scheduler",), path, "W&B stops runs at min_iter*eta^k iterations without end; asha's "
                        "rungs end below its max_t (100 iterations by default: set scheduler.max_t to the "
                        "script's epochs), and stop_last_trials: false lets trials run on to their own end.")
    elif config.get("max_iter") is not None and config.get("s") is not None:
        max_iter = source.integer(config["max_iter"], (*path, "max_iter"))
        s = source.integer(config["s"], (*path, "s"))
        grace = max(1, round(max_iter / eta ** s))
        scheduler.update(grace_period=grace, reduction_factor=eta, max_t=max_iter)
        source.note(("scheduler",), (*path, "s"), f"W&B's s={s} stopping points below max_iter={max_iter} become "
                    f"asha's rungs from grace_period {grace} (max_iter/eta^s, rounded) up by eta.")
    else:
        raise source.error(path, "needs min_iter, or max_iter with s (W&B's hyperband).")
    source.note(("scheduler",), (*path, "type"), "W&B's hyperband stops poor runs at fixed iterations without "
                "pausing any, as asha (asynchronous successive halving) does; an iteration is one report (one "
                "metrics line).")
    if config.get("strict") is not None:
        source.note(("scheduler",), (*path, "strict"), "dropped: asha keeps the top 1/reduction_factor of each "
                    "rung; it has no stricter variant.")
    return scheduler
