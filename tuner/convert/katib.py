"""A Katib ``Experiment`` manifest (``kubeflow.org/v1beta1``) as a tuner spec.

What maps where (docs/guides/convert.md has the table): ``objective`` -> ``metric``/``mode``
(``goal`` -> ``stop``, ``additionalMetricNames`` -> the console's columns, ``metricStrategies``
-> ``best.scope``), ``algorithm`` -> ``search`` (``tpe`` -> Optuna's TPE), ``parameters`` ->
``param_space``, the trial template's container ``command``/``args`` -> a command trial
(``${trialParameters.x}`` -> ``{x}``), ``metricsCollectorSpec`` -> its ``metrics``,
``maxTrialCount``/``parallelTrialCount`` -> ``num_samples``/``max_concurrent_trials``,
``earlyStopping`` medianstop -> ``scheduler: median``. Whatever does not map exactly is noted on
the :class:`~tuner.convert.source.Source`.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any
from collections.abc import Iterator, Mapping

from tuner.convert.common import DEFAULT_NUM_SAMPLES, literal, spec_name, trainable_section
from tuner.convert.source import Source, clean_float

API_VERSION = "kubeflow.org/v1beta1"
SPEC_KEYS = ("objective", "algorithm", "parameters", "trialTemplate", "maxTrialCount", "parallelTrialCount",
             "maxFailedTrialCount", "earlyStopping", "metricsCollectorSpec", "resumePolicy", "nasConfig")
#: Katib's algorithms that tuner converts: name -> the spec's ``search``.
ALGORITHMS: dict[str, dict[str, Any]] = {
    "random": {"algorithm": "random"},
    "grid": {"algorithm": "grid"},
    "tpe": {"algorithm": "optuna", "sampler": "tpe"},
    "multivariate-tpe": {"algorithm": "optuna", "sampler": "tpe", "multivariate": True},
    "bayesianoptimization": {"algorithm": "optuna", "sampler": "tpe"},
    "cmaes": {"algorithm": "optuna", "sampler": "tpe"},
    "sobol": {"algorithm": "random"},
    "hyperband": {"algorithm": "random"},
}
#: Why an algorithm is not exactly its ``search`` (None: it is).
_APPROXIMATE = {
    "bayesianoptimization": "Katib's Gaussian-process Bayesian optimisation (scikit-optimize) becomes search optuna "
                            "with its TPE sampler, tuner's model-based searcher.",
    "cmaes": "Katib's CMA-ES becomes search optuna with its TPE sampler (tuner's optuna samplers are tpe, nsga2 and "
             "nsga3).",
    "sobol": "Katib's Sobol quasi-random sequence becomes search random (pseudo-random draws).",
    "hyperband": "Katib's hyperband runs each rung's trials anew with a larger resource parameter; tuner's asha "
                 "scheduler stops the poor trials of a random search at the rungs instead.",
}
PARAMETER_TYPES = ("double", "int", "discrete", "categorical")
DISTRIBUTIONS = ("uniform", "logUniform", "normal")
COLLECTORS = ("StdOut", "File")
#: The regular expression Katib's StdOut and TEXT File collectors read ``name=value`` with.
DEFAULT_METRICS_FORMAT = r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)"
#: The largest grid a double or int range with ``step`` is spelled out as.
MAX_GRID_VALUES = 10_000
_TRIAL_PARAMETER = re.compile(r"\$\{trialParameters\.([^}]*)\}")
_TRIAL_SPEC = re.compile(r"\$\{trialSpec\.([^}]*)\}")
_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def is_experiment(data: Mapping) -> bool:
    """Whether ``data`` is a Katib ``Experiment`` manifest (any ``kubeflow.org`` version)."""
    return data.get("kind") == "Experiment" and str(data.get("apiVersion", "")).startswith("kubeflow.org/")


def convert_experiment(source: Source, trainable: str | None = None) -> dict:
    """Convert the Experiment ``source.data`` into a spec mapping.

    Args:
        source: The parsed manifest; notes are added to it.
        trainable: ``--trainable module:function``: replaces the trial template's container as the trial.

    Returns:
        The spec mapping, in the order it is written.

    Raises:
        ConvertError: For another apiVersion, a missing ``spec``/``objective``/``parameters``/
            ``trialTemplate``, an algorithm, parameter type, distribution, early stopping or
            metrics collector tuner lacks, or a ``${trialParameters.x}`` that names no trial parameter.
    """
    data = source.data
    if data.get("apiVersion") != API_VERSION:
        raise source.error(("apiVersion",), f"{data.get('apiVersion')!r} is not a version tuner converts; it "
                           f"converts {API_VERSION} Experiments.")
    spec_in = source.mapping(source.required(data, (), "spec", "the Experiment's spec"), ("spec",))
    for key in spec_in:
        if key not in SPEC_KEYS:
            raise source.error(("spec", key), "is not a key of an Experiment's spec; its keys: "
                               f"{', '.join(SPEC_KEYS)}.")
    if spec_in.get("nasConfig") is not None:
        raise source.error(("spec", "nasConfig"), "neural architecture search (ENAS, DARTS) has no tuner equivalent.")
    metadata = data.get("metadata") or {}
    source.mapping(metadata, ("metadata",))
    spec: dict[str, Any] = {"name": spec_name(source, metadata.get("name"), ("metadata", "name"))}
    if metadata.get("namespace") is not None:
        source.note(("name",), ("metadata", "namespace"), "dropped: the experiment runs on this machine or a Ray "
                    "cluster (ray.address), not in a Kubernetes namespace.")
    objective = _objective(source, spec_in)
    algorithm, search, seed, scheduler = _algorithm(source, spec_in)
    names = _parameter_names(source, spec_in)
    space = _parameters(source, spec_in, names, algorithm)
    spec["trainable"] = _trainable(source, spec_in, names, trainable)
    spec["metric"], spec["mode"] = objective["metric"], objective["mode"]
    spec["num_samples"] = _num_samples(source, spec_in, algorithm)
    spec["max_concurrent_trials"] = _count(source, spec_in, "parallelTrialCount", 3)
    if objective.get("stop"):
        spec["stop"] = objective["stop"]
    if seed is not None:
        spec["seed"] = seed
    spec["param_space"] = space
    spec["search"] = search
    if spec_in.get("earlyStopping") is not None:
        if scheduler:
            source.note(("scheduler",), ("spec", "algorithm", "algorithmName"), "hyperband's rungs are dropped: "
                        "earlyStopping's scheduler is used instead (a spec has one scheduler).")
        scheduler = _early_stopping(source, spec_in["earlyStopping"])
    if scheduler:
        spec["scheduler"] = scheduler
    failure = _max_failed(source, spec_in)
    if failure:
        spec["failure"] = failure
    spec["best"] = {"scope": objective["scope"]}
    if objective.get("columns"):
        spec["reporting"] = {"cli": {"metric_columns": objective["columns"]}}
    if spec_in.get("resumePolicy") is not None:
        source.note((), ("spec", "resumePolicy"), "dropped: `tuner resume EXPERIMENT_DIR` resumes any experiment.")
    return spec


# -- objective, algorithm, counts ----------------------------------------------------------------------------------

def _objective(source: Source, spec_in: Mapping) -> dict:
    path = ("spec", "objective")
    objective = source.mapping(source.required(spec_in, ("spec",), "objective", "the metric to optimise"), path)
    kind = source.choice(source.required(objective, path, "type", "minimize or maximize"), (*path, "type"),
                         ("minimize", "maximize"), "objective type")
    metric = source.text(source.required(objective, path, "objectiveMetricName", "the metric to optimise"),
                         (*path, "objectiveMetricName"))
    out: dict[str, Any] = {"metric": metric, "mode": "min" if kind == "minimize" else "max"}
    if objective.get("goal") is not None:
        goal = source.number(objective["goal"], (*path, "goal"), parse=True)
        out["stop"] = {metric: goal}
        word = "at or below" if kind == "minimize" else "at or above"
        source.note(("stop",), (*path, "goal"), f"becomes stop: {{{metric}: {goal}}}, which ends each trial whose "
                    f"{metric} is {word} {goal}; Katib instead ends the whole experiment once one trial reaches it "
                    "(tuner goes on with the other trials).")
    extra = objective.get("additionalMetricNames") or []
    if not isinstance(extra, list) or not all(isinstance(m, str) for m in extra):
        raise source.error((*path, "additionalMetricNames"), "must be a list of metric names.")
    if extra:
        out["columns"] = [metric, *extra]
    out["scope"] = _scope(source, objective, metric, kind)
    return out


def _scope(source: Source, objective: Mapping, metric: str, kind: str) -> str:
    """``best.scope`` from the objective's metric strategy (Katib's default: its best value, min or max by type)."""
    path = ("spec", "objective", "metricStrategies")
    strategies = objective.get("metricStrategies") or []
    if not isinstance(strategies, list):
        raise source.error(path, "must be a list of {name, value} strategies.")
    strategy = "min" if kind == "minimize" else "max"
    for i, item in enumerate(strategies):
        item = source.mapping(item, (*path, i))
        if item.get("name") == metric:
            strategy = source.choice(item.get("value"), (*path, i, "value"), ("min", "max", "latest"),
                                     "metric strategy")
            if strategy != "latest" and strategy != ("min" if kind == "minimize" else "max"):
                source.note(("best",), (*path, i), f"strategy {strategy} for a {kind} objective becomes best "
                            "scope all (each trial's best value by the mode).")
    return "last" if strategy == "latest" else "all"


def _settings(source: Source, config: Mapping, path: tuple) -> dict[str, tuple[Any, tuple]]:
    """An ``algorithmSettings`` list as ``{name: (value, path)}``."""
    items = config.get("algorithmSettings") or []
    if not isinstance(items, list):
        raise source.error((*path, "algorithmSettings"), "must be a list of {name, value} settings.")
    out = {}
    for i, item in enumerate(items):
        item = source.mapping(item, (*path, "algorithmSettings", i))
        name = source.text(item.get("name"), (*path, "algorithmSettings", i, "name"))
        out[name] = (item.get("value"), (*path, "algorithmSettings", i, "value"))
    return out


def _algorithm(source: Source, spec_in: Mapping) -> tuple[str, dict, int | None, dict | None]:
    """``(name, search, seed, scheduler)`` from ``spec.algorithm``."""
    path = ("spec", "algorithm")
    config = source.mapping(source.required(spec_in, ("spec",), "algorithm", "the search algorithm"), path)
    name = source.choice(source.required(config, path, "algorithmName", "the search algorithm"),
                         (*path, "algorithmName"), ALGORITHMS, "algorithm")
    search = dict(ALGORITHMS[name])
    source.origins[("search",)] = (*path, "algorithmName")
    if _APPROXIMATE.get(name):
        source.note(("search",), (*path, "algorithmName"), _APPROXIMATE[name])
    seed, scheduler = None, None
    for key, (value, where) in _settings(source, config, path).items():
        if key == "random_state":
            seed = source.integer(value, where, parse=True)
        elif key in ("n_startup_trials", "n_initial_points") and search["algorithm"] == "optuna":
            search["n_startup_trials"] = source.integer(value, where, parse=True)
        elif name == "hyperband" and key in ("eta", "r_l", "resource_name"):
            continue
        else:
            source.note(("search",), where[:-1], f"setting {key} is dropped: tuner's search {search['algorithm']} "
                        "has no such option.")
    if name == "hyperband":
        scheduler = _hyperband(source, config, path)
    return name, search, seed, scheduler


def _hyperband(source: Source, config: Mapping, path: tuple) -> dict:
    settings = _settings(source, config, path)
    scheduler: dict[str, Any] = {"type": "asha"}
    if "eta" in settings:
        scheduler["reduction_factor"] = source.number(settings["eta"][0], settings["eta"][1], parse=True)
    if "r_l" in settings:
        scheduler["max_t"] = source.integer(settings["r_l"][0], settings["r_l"][1], parse=True)
    if "resource_name" in settings:
        source.note(("scheduler",), settings["resource_name"][1], f"Katib sets the resource parameter "
                    f"{settings['resource_name'][0]} of each rung's trials; tuner's asha stops trials at rungs of "
                    "reports (training_iteration) instead, so give that parameter the largest budget.")
    return scheduler


def _count(source: Source, spec_in: Mapping, key: str, default: int) -> int:
    if spec_in.get(key) is None:
        return default
    value = source.integer(spec_in[key], ("spec", key), parse=True)
    if value < 1:
        raise source.error(("spec", key), f"must be at least 1, but got {value}.")
    return value


def _num_samples(source: Source, spec_in: Mapping, algorithm: str) -> int:
    if algorithm == "grid":
        if spec_in.get("maxTrialCount") is not None:
            source.note(("num_samples",), ("spec", "maxTrialCount"), "dropped: a grid runs every point once "
                        "(num_samples: 1); Katib stops at maxTrialCount even when points are left.")
        return 1
    if spec_in.get("maxTrialCount") is None:
        source.note(("num_samples",), ("spec",), f"the Experiment has no maxTrialCount; num_samples: "
                    f"{DEFAULT_NUM_SAMPLES} is a guess, set yours.")
        return DEFAULT_NUM_SAMPLES
    return _count(source, spec_in, "maxTrialCount", DEFAULT_NUM_SAMPLES)


def _max_failed(source: Source, spec_in: Mapping) -> dict | None:
    if spec_in.get("maxFailedTrialCount") is None:
        return None
    path = ("spec", "maxFailedTrialCount")
    value = source.integer(spec_in["maxFailedTrialCount"], path, parse=True)
    if value <= 1:
        source.note(("failure",), path, f"maxFailedTrialCount: {value} becomes failure.fail_fast: true (the "
                    "experiment stops at the first failed trial).")
        return {"fail_fast": True}
    source.note(("failure",), path, f"dropped: tuner has no count of failed trials that ends the experiment; it "
                f"runs every trial (fail_fast: true would stop at the first failure, not after {value}).")
    return None


def _early_stopping(source: Source, config: Any) -> dict:
    path = ("spec", "earlyStopping")
    config = source.mapping(config, path)
    source.choice(config.get("algorithmName"), (*path, "algorithmName"), ("medianstop",), "early stopping algorithm")
    scheduler: dict[str, Any] = {"type": "median", "grace_period": 4, "min_samples_required": 3}
    for key, (value, where) in _settings(source, config, path).items():
        if key == "min_trials_required":
            scheduler["min_samples_required"] = source.integer(value, where, parse=True)
        elif key == "start_step":
            scheduler["grace_period"] = source.integer(value, where, parse=True)
        else:
            raise source.error(where[:-1], f"setting {key!r} is not one of medianstop's: min_trials_required, "
                               "start_step.")
    source.note(("scheduler",), (*path, "algorithmName"), "medianstop becomes scheduler median (the median "
                "stopping rule): start_step is its grace_period, min_trials_required its min_samples_required; "
                "Katib compares a trial with the completed trials, Ray's rule with every other trial's running "
                "mean at the same step.")
    return scheduler


# -- parameters ----------------------------------------------------------------------------------------------------

def _parameter_names(source: Source, spec_in: Mapping) -> dict[str, str]:
    """Katib parameter name -> its ``param_space`` name (a leading ``--`` or other characters tuner's names
    lack taken out)."""
    path = ("spec", "parameters")
    params = source.required(spec_in, ("spec",), "parameters", "the parameters to search")
    if not isinstance(params, list) or not params:
        raise source.error(path, "must be a non-empty list of parameters.")
    names: dict[str, str] = {}
    for i, param in enumerate(params):
        param = source.mapping(param, (*path, i))
        name = source.text(source.required(param, (*path, i), "name", "the parameter's name"), (*path, i, "name"))
        clean = re.sub(r"[^A-Za-z0-9_.\-]", "_", name.lstrip("-"))
        if not _PARAM_NAME.match(clean):
            clean = f"_{clean}"
        if clean in names.values():
            raise source.error((*path, i, "name"), f"{name!r} is {clean!r} in tuner, as another parameter is.")
        if clean != name:
            source.note(("param_space", clean), (*path, i, "name"), f"{name!r} is named {clean!r}: a tuner "
                        "parameter's name starts with a letter or '_' and holds letters, digits, '_', '.', '-'.")
        names[name] = clean
    return names


def _parameters(source: Source, spec_in: Mapping, names: dict[str, str], algorithm: str) -> dict:
    space = {}
    for i, param in enumerate(spec_in["parameters"]):
        path = ("spec", "parameters", i)
        name = names[param["name"]]
        source.origins[("param_space", name)] = path
        space[name] = _parameter(source, path, ("param_space", name), param, algorithm == "grid")
    return space


def _number_list(source: Source, values: Any, path: tuple) -> list:
    if not isinstance(values, list) or not values:
        raise source.error(path, "must be a non-empty list of values.")
    return [source.number(v, (*path, j), parse=True) for j, v in enumerate(values)]


def _parameter(source: Source, path: tuple, where: tuple, param: Mapping, grid: bool) -> Any:
    kind = source.choice(source.required(param, path, "parameterType", "one of " + ", ".join(PARAMETER_TYPES)),
                         (*path, "parameterType"), PARAMETER_TYPES, "parameterType")
    space_path = (*path, "feasibleSpace")
    space = source.mapping(source.required(param, path, "feasibleSpace", "the parameter's values or range"),
                           space_path)
    if kind == "categorical":
        values = source.required(space, space_path, "list", "the values")
        if not isinstance(values, list) or not values:
            raise source.error((*space_path, "list"), "must be a non-empty list of values.")
        return {"type": "choice", "values": [str(v) for v in values]}
    if kind == "discrete":
        values = _number_list(source, source.required(space, space_path, "list", "the values"), (*space_path, "list"))
        return {"type": "choice", "values": values}
    integer = kind == "int"
    low = source.number(source.required(space, space_path, "min", "the lower bound"), (*space_path, "min"),
                        integer=integer, parse=True)
    high = source.number(source.required(space, space_path, "max", "the upper bound"), (*space_path, "max"),
                         integer=integer, parse=True)
    if not low < high:
        raise source.error((*space_path, "max"), f"must be greater than min, but got min={low}, max={high}.")
    step = None
    if space.get("step") not in (None, ""):
        step = source.number(space["step"], (*space_path, "step"), integer=integer, parse=True)
        if step <= 0:
            raise source.error((*space_path, "step"), f"must be > 0, but got {step}.")
    dist = space.get("distribution") or "uniform"
    dist = source.choice(dist, (*space_path, "distribution"), DISTRIBUTIONS, "distribution") \
        if dist != "logNormal" else dist
    if dist == "logNormal":
        raise source.error((*space_path, "distribution"), "logNormal has no tuner equivalent (tuner draws from "
                           f"uniform, log-uniform and normal ranges); use one of {', '.join(DISTRIBUTIONS)}.")
    if grid:
        return _grid(source, space_path, where, low, high, step, integer)
    if dist == "normal":
        if integer:
            raise source.error((*space_path, "distribution"), "an int parameter cannot be normal in tuner (its "
                               "normal draws are floats); use uniform or logUniform.")
        mean, sd = clean_float((low + high) / 2), clean_float((high - low) / 6)
        source.note(where, (*space_path, "distribution"), f"normal over [{low}, {high}] becomes randn with mean "
                    f"{mean} and sd {sd} ((max-min)/6); tuner's randn is unbounded, so a draw may fall outside "
                    "[min, max].")
        return {"type": "randn", "mean": mean, "sd": sd}
    log = dist == "logUniform"
    if log and low <= 0:
        raise source.error((*space_path, "min"), f"must be > 0 for logUniform, but got {low}.")
    if step is not None and not (integer and step == 1):
        return _stepped(source, space_path, where, low, high, step, integer, log)
    if integer:
        return {"type": "lograndint" if log else "randint", "low": low, "high": high + 1}
    return {"type": "loguniform" if log else "uniform", "low": low, "high": high}


def _steps(low: float, high: float, step: float, integer: bool) -> Iterator[float]:
    count = int((high - low) / step + 1e-9) + 1
    for k in range(count):
        yield low + k * step if integer else clean_float(low + k * step)


def _stepped(source: Source, path: tuple, where: tuple, low, high, step, integer: bool, log: bool) -> dict:
    """A range with ``step``: a q-distribution where the bounds are multiples of it, else its values."""
    multiple = all(abs(v / step - round(v / step)) < 1e-9 for v in (low, high))
    if multiple:
        if integer:
            return {"type": "qlograndint" if log else "qrandint", "low": low, "high": high, "q": step}
        return {"type": "qloguniform" if log else "quniform", "low": low, "high": high, "q": step}
    values = list(_steps(low, high, step, integer))
    if len(values) > MAX_GRID_VALUES:
        raise source.error((*path, "step"), f"spells out {len(values):,} values; at most {MAX_GRID_VALUES:,}.")
    source.note(where, (*path, "step"), f"min {low} is no multiple of step {step}, so the range becomes a choice of "
                "its values min + k*step (tuner's q-distributions round to multiples of q).")
    return {"type": "choice", "values": values}


def _grid(source: Source, path: tuple, where: tuple, low, high, step, integer: bool) -> dict:
    """A range under Katib's grid: its values ``min, min + step, ... <= max`` (step 1 for an int)."""
    if step is None:
        if not integer:
            raise source.error(path, "has no step; Katib's grid needs one for a double parameter.")
        step = 1
    values = list(_steps(low, high, step, integer))
    if len(values) > MAX_GRID_VALUES:
        raise source.error((*path, "step"), f"spells out {len(values):,} grid values; at most {MAX_GRID_VALUES:,}.")
    return {"type": "choice", "values": values}


# -- the trial template --------------------------------------------------------------------------------------------

def _containers(node: Any, path: tuple) -> Iterator[tuple[Mapping, tuple]]:
    """Every container of a trial spec (a Job's, a PyTorchJob's replicas', ...), with its path."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "containers" and isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, Mapping):
                        yield item, (*path, key, i)
            else:
                yield from _containers(value, (*path, key))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _containers(item, (*path, i))


def _trial_parameters(source: Source, template: Mapping, names: dict[str, str]) -> dict[str, str]:
    """Trial parameter name -> its placeholder's name (a parameter's, or ``tuner.trial_id``), or the
    ``${trialSpec.X}`` reference itself for other Kubernetes metadata (left as text)."""
    path = ("spec", "trialTemplate", "trialParameters")
    items = template.get("trialParameters") or []
    if not isinstance(items, list):
        raise source.error(path, "must be a list of {name, reference} trial parameters.")
    out = {}
    for i, item in enumerate(items):
        item = source.mapping(item, (*path, i))
        name = source.text(item.get("name"), (*path, i, "name"))
        reference = source.text(item.get("reference"), (*path, i, "reference"))
        if reference in names:
            out[name] = names[reference]
        elif reference == "${trialSpec.Name}":
            out[name] = "tuner.trial_id"
        elif _TRIAL_SPEC.fullmatch(reference):
            out[name] = reference  # Kubernetes metadata: its own text stays
            source.note(("trainable", "command"), (*path, i, "reference"), f"{reference} (Kubernetes metadata of "
                        "the trial) has no tuner value; the text stays as it is.")
        else:
            raise source.error((*path, i, "reference"), f"{reference!r} names no parameter of spec.parameters; "
                               f"they are: {', '.join(names)}.")
    return out


def _substitute(source: Source, text: str, path: tuple, trial_params: dict[str, str]) -> str:
    """One argument with ``${trialParameters.x}`` as ``{x}`` and the rest literal."""
    out, last = [], 0
    for match in _TRIAL_PARAMETER.finditer(text):
        name = match.group(1)
        if name not in trial_params:
            raise source.error(path, f"${{trialParameters.{name}}} names no trial parameter of "
                               f"trialTemplate.trialParameters; they are: {', '.join(trial_params) or '(none)'}.")
        out.append(literal(text[last:match.start()]))
        target = trial_params[name]
        out.append(literal(target) if target.startswith("${") else f"{{{target}}}")
        if target == "tuner.trial_id":
            source.note(("trainable", "command"), path, "${trialSpec.Name} (the trial's name) becomes "
                        "{tuner.trial_id}, the trial's id.")
        last = match.end()
    out.append(literal(text[last:]))
    return "".join(out)


def _trainable(source: Source, spec_in: Mapping, names: dict[str, str], trainable: str | None) -> str | dict:
    path = ("spec", "trialTemplate")
    template = spec_in.get("trialTemplate")
    if trainable:
        if template is not None:
            source.note(("trainable",), path, f"dropped: --trainable {trainable} is the trial instead.")
        return trainable
    template = source.mapping(source.required(spec_in, ("spec",), "trialTemplate", "the trial to run"), path)
    if template.get("trialSpec") is None:
        raise source.error(path, "has no trialSpec (the trial's Kubernetes spec inline), so there is no command to "
                           "run; inline it, or give tuner convert --trainable module:function.")
    trial_params = _trial_parameters(source, template, names)
    container, cpath = _container(source, template)
    command, args = container.get("command") or [], container.get("args") or []
    for key, value in (("command", command), ("args", args)):
        if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
            raise source.error((*cpath, key), "must be a list of text items.")
    items = [(str(v), (*cpath, "command", i)) for i, v in enumerate(command)] + \
        [(str(v), (*cpath, "args", i)) for i, v in enumerate(args)]
    if not items:
        raise source.error(cpath, "has no command or args (the image's entrypoint runs, which tuner cannot see); "
                           "give it a command, or tuner convert --trainable module:function.")
    if not command:
        source.note(("trainable", "command"), (*cpath, "args"), "the container has args only (its image's "
                    "entrypoint comes first in Katib); the spec runs the args as the command.")
    metrics, metrics_path = _metrics(source, spec_in)
    items = _local_script(source, items, container.get("image", "(none)"))
    argv = []
    for text, where in items:
        if metrics_path and metrics_path in text:
            before, _, after = text.partition(metrics_path)
            argv.append(_substitute(source, before, where, trial_params) + "{tuner.metrics_file}" +
                        _substitute(source, after, where, trial_params))
        else:
            argv.append(_substitute(source, text, where, trial_params))
    if metrics_path and not any(metrics_path in text for text, _ in items):
        source.note(("trainable", "metrics"), ("spec", "metricsCollectorSpec", "source", "fileSystemPath", "path"),
                    f"the script must append its metrics lines to $TUNER_METRICS_FILE ({metrics} in the trial's "
                    f"folder) instead of {metrics_path}.")
    env = _env(source, container, cpath)
    for key in ("resources", "workingDir"):
        if container.get(key) is not None:
            field = "resources" if key == "resources" else "trainable.cwd"
            source.note(("trainable",), (*cpath, key), f"dropped: set the spec's {field} for this machine.")
    return trainable_section(argv, metrics, None, env or None)


def _local_script(source: Source, items: list[tuple[str, tuple]], image: str) -> list[tuple[str, tuple]]:
    """The command with the image's Python script (``python3 /opt/app/train.py``) as a script beside the spec
    (``train.py``): the command runs on this machine, not in the image."""
    out = list(items)
    if len(out) >= 2 and posixpath.basename(out[0][0]) in ("python", "python3") and out[1][0].endswith(".py") \
            and out[1][0].startswith("/"):
        script, where = out[1]
        out[1] = (posixpath.basename(script), where)
        source.note(("trainable", "command"), where, f"the image's {script} becomes {out[1][0]} beside the spec "
                    f"(trainable.cwd): the command runs on this machine or the Ray cluster, not in {image}; copy "
                    "the script out of the image, and check the other paths it is given.")
    else:
        source.note(("trainable", "command"), items[0][1], f"the command runs on this machine or the Ray cluster, "
                    f"not in the image {image}: check the paths it is given.")
    return out


def _container(source: Source, template: Mapping) -> tuple[Mapping, tuple]:
    path = ("spec", "trialTemplate")
    containers = list(_containers(template["trialSpec"], (*path, "trialSpec")))
    if not containers:
        raise source.error((*path, "trialSpec"), "holds no container (a `containers:` list), so there is no "
                           "command to run.")
    primary = template.get("primaryContainerName")
    for container, cpath in containers:
        if primary is None or container.get("name") == primary:
            return container, cpath
    raise source.error((*path, "primaryContainerName"), f"{primary!r} names none of the trial's containers: "
                       f"{', '.join(str(c.get('name')) for c, _ in containers)}.")


def _env(source: Source, container: Mapping, cpath: tuple) -> dict[str, str]:
    env = {}
    for i, item in enumerate(container.get("env") or []):
        item = source.mapping(item, (*cpath, "env", i))
        name = source.text(item.get("name"), (*cpath, "env", i, "name"))
        if "value" in item:
            env[name] = str(item["value"])
            if "${trialParameters." in env[name]:
                source.note(("trainable", "env"), (*cpath, "env", i, "value"), f"{name}'s "
                            "${trialParameters...} stays as it is: tuner fills placeholders in the command only "
                            "(the script finds the whole config in $TUNER_CONFIG).")
        else:
            source.note(("trainable", "env"), (*cpath, "env", i), f"{name}'s valueFrom (a Kubernetes secret or "
                        "field) is dropped: set it in the environment tuner runs in.")
    return env


def _metrics(source: Source, spec_in: Mapping) -> tuple[str, str | None]:
    """``(metrics, path)``: the command's ``metrics``, and the File collector's path in the container, if any."""
    path = ("spec", "metricsCollectorSpec")
    config = spec_in.get("metricsCollectorSpec")
    if config is None:
        return "kv", None
    config = source.mapping(config, path)
    collector = source.mapping(config.get("collector") or {"kind": "StdOut"}, (*path, "collector"))
    kind = source.choice(collector.get("kind", "StdOut"), (*path, "collector", "kind"), COLLECTORS,
                         "metrics collector")
    src = source.mapping(config.get("source") or {}, (*path, "source"))
    regex = (src.get("filter") or {}).get("metricsFormat")
    if regex and regex != [DEFAULT_METRICS_FORMAT]:
        source.note(("trainable", "metrics"), (*path, "source", "filter", "metricsFormat"), "dropped: tuner reads "
                    "name=value pairs (kv) or JSON objects, not a custom regular expression.")
    if kind == "StdOut":
        return "kv", None
    fs = source.mapping(source.required(src, (*path, "source"), "fileSystemPath", "the metrics file"),
                        (*path, "source", "fileSystemPath"))
    file = source.text(source.required(fs, (*path, "source", "fileSystemPath"), "path", "the metrics file's path"),
                       (*path, "source", "fileSystemPath", "path"))
    fmt = fs.get("format", "TEXT")
    source.choice(fmt, (*path, "source", "fileSystemPath", "format"), ("TEXT", "JSON"), "file format")
    name = posixpath.basename(file.rstrip("/")) or "metrics.log"
    source.note(("trainable", "metrics"), (*path, "source", "fileSystemPath", "path"), f"Katib's {file} "
                f"({'JSON lines' if fmt == 'JSON' else 'name=value lines'}) becomes {name} in each trial's folder "
                "({tuner.metrics_file}, $TUNER_METRICS_FILE), so that trials do not share one file.")
    return name, file
