"""Warm start: the finished trials of earlier experiments, checked against this spec and fed to its searcher.

``search: {warm_start: [runs/mnist-asha, s3://bucket/runs/old]}`` reads each earlier experiment's
spec as run (:data:`tuner.experiment.layout.SPEC_SNAPSHOT`) and its ``results.csv``
(:data:`tuner.experiment.layout.RESULTS_CSV`:
every trial's config, status and last reported metrics), compares the earlier search space with this
one (:func:`compare_spaces`), and turns each usable trial into an :class:`EarlierTrial`: its config in
this space's parameter names, its value of each objective and the budget it reached. The searcher
then learns from them before it suggests anything (:mod:`tuner.search.algorithms`):

* ``optuna``: each earlier trial is added to the study as a completed trial (Optuna's
  ``Study.add_trial`` of ``optuna.trial.create_trial``, the API that Ray's
  ``OptunaSearch(evaluated_rewards=...)`` wraps, here also for a define-by-run space and several
  objectives), so TPE and NSGA-II/III count it as history (TPE's ``n_startup_trials`` included);
* ``bohb``: each is told to hpbandster's config generator as a finished run at the budget it
  reached (``BOHB.new_result``, which Ray's ``TuneBOHB.on_trial_result`` calls for a live trial),
  so its kernel density model starts from them;
* ``random``: the best ``search.warm_start_top_k`` (default 3) earlier trials run again first,
  as points to evaluate; random search has no model, so the other earlier trials are not used.

The models are W&B sweeps' ``prior_runs`` and Optuna's ``enqueue_trial``/``add_trials``.

Rules of the comparison (parameters by name, ``opt/lr`` for a nested one):

* same metric: every objective of this spec must be an objective of the earlier one (its mode may
  differ: the values are raw metric values); else refused, since the rewards would mean nothing;
* a parameter removed (or now a constant): dropped from the earlier configs, with a note;
* a parameter added: accepted with a note under optuna (Optuna models a parameter from the
  trials that have it) and random (the re-run earlier configs get it sampled); refused under bohb
  (hpbandster needs every active parameter) unless the earlier experiment had it as a constant;
* a constant before, sampled now: the earlier trials are fed with that constant, with a note;
* a domain changed within its kind (a range's bounds, a choice's values, uniform to loguniform,
  an integer range to a float one): the earlier trials whose value lies outside the new domain are
  left out, with a note; a kind changed (a choice to a numeric range, or back) is refused;
* a likely rename (one removed and one added with the same distribution) is named in the note;
* only trials that ended TERMINATED (not errored, not unfinished), with a finite value of every
  objective and feasible under this spec's constraints, are used; an entry none of whose trials
  is usable is refused.

A refusal is a :class:`~tuner.spec.SpecError` at the ``warm_start`` entry (``file:line:col``),
raised before Ray starts. No Ray here (``tuner validate`` uses this module).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

from tuner.core.best import is_finite_number, metric_value, ranked
from tuner.experiment.layout import RESULTS_CSV, SPEC_SNAPSHOT
from tuner.core.params import flatten
from tuner.spec import Spec, SpecError
from tuner.spec.conditions import Param, Space
from tuner.spec.distributions import SubspaceChoice, BaseDistribution, param_label

__all__ = ["EarlierTrial", "Source", "WarmStart", "Comparison", "compare_spaces", "load_warm_start", "final_value",
           "contains", "space_params"]

#: Ray Tune's status of a trial that ended without error.
_FINISHED = "TERMINATED"
#: The kinds of distribution: a kind change is refused, a change within a kind filters the earlier values.
_CATEGORICAL = ("choice", "grid")


@dataclass(frozen=True)
class EarlierTrial:
    """One finished trial of an earlier experiment, in this spec's terms.

    Attributes:
        source: The ``warm_start`` entry it came from, as written.
        trial_id: Its id in the earlier experiment.
        config: Its values of this space's sampled parameters that are active for it, flat, by
            parameter name (:attr:`tuner.spec.conditions.Param.name`); a parameter it lacks (one
            added since) is absent.
        values: Its final value of each of this spec's objectives, in order.
        budget: The ``scheduler.time_attr`` it reached (iterations by default): its fidelity.
    """

    source: str
    trial_id: str
    config: dict[str, Any]
    values: tuple[float, ...]
    budget: float


@dataclass
class Source:
    """One ``warm_start`` entry as read: where it is and what came of its trials.

    Attributes:
        entry: The entry as written in the spec.
        where: The folder or URI it was read from.
        trials: Trials in its ``results.csv``.
        fed: Trials fed to the searcher.
        notes: What the comparison and the filter said (one sentence each).
    """

    entry: str
    where: str
    trials: int
    fed: int
    notes: list[str] = field(default_factory=list)


@dataclass
class WarmStart:
    """Every earlier trial a spec's ``warm_start`` feeds, and where they came from.

    Attributes:
        trials: The usable earlier trials, all sources together, in source order.
        sources: One per ``warm_start`` entry.
    """

    trials: list[EarlierTrial]
    sources: list[Source]

    def best(self, k: int, mode: str | None) -> list[EarlierTrial]:
        """The ``k`` best earlier trials by the first objective (:func:`tuner.core.best.ranked`), one per config."""
        order = ranked(self.trials, mode, value=lambda t: t.values[0], status=lambda t: _FINISHED,
                       trial_id=lambda t: f"{t.source}\0{t.trial_id}")
        out: list[EarlierTrial] = []
        seen: list[dict] = []
        for t in order if k > 0 else []:
            if t.config not in seen:
                seen.append(t.config)
                out.append(t)
            if len(out) == k:
                break
        return out

    @staticmethod
    def top_k(spec: Spec) -> int:
        """How many earlier trials random search runs again first: ``search.warm_start_top_k`` (3 by default),
        within the trials that ``num_samples`` leaves after ``points_to_evaluate``."""
        points = getattr(spec.search, "points_to_evaluate", None) or []
        return min(getattr(spec.search, "top_k", 0), max(spec.num_samples - len(points), 0))

    def describe(self, spec: Spec) -> list[str]:
        """Plan lines: how many earlier trials are fed, from where, how, and the notes."""
        algo = spec.search.algorithm
        how = {"optuna": "added to the Optuna study as completed trials",
               "bohb": "told to BOHB's model at the budget each reached",
               "random": ""}[algo]
        if algo == "random":
            k = min(self.top_k(spec), len(self.trials))
            how = f"the best {k} run again first (random search has no model; the others are not used)"
        lines = [f"warm start: {len(self.trials)} earlier trial{'s' if len(self.trials) != 1 else ''}, {how}"]
        for s in self.sources:
            lines.append(f"            {s.fed} of {s.trials} from {s.where}")
            lines += [f"            note: {n}" for n in s.notes]
        return lines


def final_value(row: Mapping[str, Any], metric: str) -> Any:
    """An earlier trial's final value of ``metric``: its last reported value (``results.csv``'s).

    The one place that says which value of an earlier trial counts. It is the last value, whatever
    ``best.scope`` says, because that is what a searcher gets from a trial of its own: Ray passes a
    trial's last result to ``Searcher.on_trial_complete``.
    """
    return metric_value(row, metric)


# --------------------------------------------------------------------------- the comparison


def space_params(spec: Spec) -> dict[str, Param]:
    """Every parameter of a spec by name: the expanded space's (sampled ones, and a branch's
    constants), and the plain constants of ``param_space`` (``epochs: 10``) as constant params."""
    out = {p.name: p for p in spec.space.params}
    for name, value in flatten(spec.param_space).items():
        if name not in out and not isinstance(value, (BaseDistribution, SubspaceChoice)) and \
                not any(p.key == name for p in out.values()):
            out[name] = Param(name=name, path=f"param_space.{name.replace('/', '.')}", dist=None, value=value)
    return out


def _kind(dist: BaseDistribution) -> str:
    return "a categorical" if dist.type in _CATEGORICAL else "a numeric"


def _same_dist(a: BaseDistribution, b: BaseDistribution) -> bool:
    return a.model_dump(exclude={"when", "grid_points"}) == b.model_dump(exclude={"when", "grid_points"})


def contains(dist: BaseDistribution, value: Any) -> tuple[bool, Any]:
    """Whether a distribution can take an earlier value, and the value as this distribution gives it.

    A ``results.csv`` value may come back as ``32.0`` for the integer ``32`` (a column with blanks):
    an integral float is an integer for an integer range, and a choice gives its own value.

    Returns:
        ``(True, value)`` inside the domain (a range's bounds, ``q`` multiples, a choice's values),
        ``(False, None)`` outside.
    """
    from tuner.spec.conditions import same_value

    if dist.type in _CATEGORICAL:
        for v in dist.values:
            if same_value(value, v) or (isinstance(v, str) and not isinstance(value, str) and str(value) == v):
                return True, v
        return False, None
    if isinstance(value, bool) or not is_finite_number(value):
        return False, None
    value = float(value)
    if dist.type in ("randn", "qrandn"):
        return True, value
    low, high, q = float(dist.low), float(dist.high), getattr(dist, "q", None)
    integer = dist.type.endswith("randint")
    if integer:
        if value != int(value):
            return False, None
        inside = low <= value < high if (q or 1) == 1 else low <= value <= high
        if q and q > 1 and value % q:
            return False, None
        return inside, int(value) if inside else None
    if not low <= value <= high:
        return False, None
    if q and abs(value / q - round(value / q)) > 1e-6:
        return False, None
    return True, value


@dataclass
class Comparison:
    """What :func:`compare_spaces` found between an earlier space and this one.

    Attributes:
        refusals: Reasons the earlier trials cannot be used (one sentence each); empty when they can.
        notes: What is accepted, and how (one sentence each).
        fill: Parameters that were constants and are sampled now: name -> the earlier constant.
        added: Sampled parameters of this space that the earlier one lacked.
    """

    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fill: dict[str, Any] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)


def _show(p: Param) -> str:
    return param_label(p.dist) if p.dist is not None else f"the constant {p.value!r}"


def compare_spaces(old: Mapping[str, Param], new: Mapping[str, Param], algorithm: str) -> Comparison:
    """Compare an earlier experiment's parameters with this spec's (the rules in the module docstring).

    Args:
        old: The earlier spec's :func:`space_params`.
        new: This spec's :func:`space_params`.
        algorithm: This spec's ``search.algorithm`` (``random``, ``optuna`` or ``bohb``).

    Returns:
        The :class:`Comparison`: refusals, notes, constants to fill in, parameters added.
    """
    out = Comparison()
    removed = [n for n, p in old.items() if p.dist is not None and (n not in new or new[n].dist is None)]
    added = [n for n, p in new.items() if p.dist is not None and n not in old]
    renames = {a: r for a in added for r in removed if _same_dist(old[r].dist, new[a].dist)}
    for name in removed:
        now = new.get(name)
        what = f"is the constant {now.value!r} now" if now is not None else "is no longer in param_space"
        out.notes.append(f"{name} ({_show(old[name])}) {what}: dropped from the earlier configs.")
    for name in added:
        p = new[name]
        rename = f" (a rename of {renames[name]}, which has the same distribution? The earlier values of "\
                 f"{renames[name]} are not used for {name})" if name in renames else ""
        if algorithm == "bohb":
            out.refusals.append(f"{name} ({_show(p)}) is new{rename}, and BOHB's model needs a value of every "
                                f"active parameter in each earlier trial (give {name} a constant value, or use "
                                "search optuna, which models a new parameter from this run's trials alone)")
            continue
        how = "Optuna models it from this run's trials" if algorithm == "optuna" else \
            "the earlier configs run again get it sampled"
        out.notes.append(f"{name} ({_show(p)}) is new{rename}: the earlier trials lack it; {how}.")
        out.added.append(name)
    for name, p in new.items():
        q = old.get(name)
        if p.dist is None or q is None:
            continue
        if q.dist is None:
            ok, value = contains(p.dist, q.value)
            if ok:
                out.fill[name] = value
                out.notes.append(f"{name} was the constant {q.value!r} and is {_show(p)} now: the earlier trials "
                                 f"are fed with {name}={q.value!r}.")
            else:
                out.refusals.append(f"{name} was the constant {q.value!r}, outside its distribution now ({_show(p)}), "
                                    "so no earlier trial lies in this space (widen its distribution to hold "
                                    f"{q.value!r})")
            continue
        if _kind(q.dist) != _kind(p.dist):
            out.refusals.append(f"{name} was {_show(q)} and is {_show(p)} now, a change of type ({_kind(q.dist)[2:]} "
                                f"to {_kind(p.dist)[2:]}) that makes its earlier values mean something else (keep "
                                f"its type, or give the changed parameter a new name)")
        elif not _same_dist(q.dist, p.dist):
            out.notes.append(f"{name} was {_show(q)} and is {_show(p)} now: earlier trials whose value lies outside "
                             "it are left out.")
    return out


# --------------------------------------------------------------------------- reading the earlier experiments


def _locate(entry: str, spec: Spec) -> list[str]:
    """Where a ``warm_start`` entry may be: a URI as is; a path as given (from the working directory),
    then under the spec's ``storage`` (a bare experiment name)."""
    from tuner.experiment.storage import is_remote

    if is_remote(entry) or entry.lower().startswith("file://"):
        if entry.lower().startswith("file://"):
            from urllib.parse import unquote, urlparse

            return [unquote(urlparse(entry).path)]
        return [entry]
    path = Path(entry).expanduser()
    found = [str(path.resolve())]
    if not path.is_absolute() and not spec.remote_storage:
        found.append(str((spec.storage_dir / path).resolve()))
    return list(dict.fromkeys(found))


def _read(entry: str, spec: Spec, field_path: str) -> tuple[str, Spec, list[dict[str, Any]]]:
    """The earlier experiment's location, spec as run, and ``results.csv`` rows (NaN as absent).

    Messages name the entry as the spec writes it (not the resolved folder), so they read the same
    on every machine."""
    import pandas as pd

    from tuner.spec import load_spec, parse_yaml
    from tuner.experiment.storage import display, is_remote, join, read_text

    shown = display(entry)  # a URI's query (endpoint, options) left out
    for where in _locate(entry, spec):
        text = read_text(join(where, SPEC_SNAPSHOT))
        if text is None:
            continue
        try:
            data, _ = parse_yaml(text, join(where, SPEC_SNAPSHOT))
            earlier = load_spec(data, require_trainable=False)
        except SpecError as err:
            raise spec.error(field_path, f"the earlier experiment {shown} has a {SPEC_SNAPSHOT} that this tuner cannot "
                             f"read ({str(err).splitlines()[0]}); warm-start from another one.") from None
        csv = read_text(join(where, RESULTS_CSV))
        if csv is None:
            raise spec.error(field_path, f"the earlier experiment {shown} has no {RESULTS_CSV}: it has not finished "
                             f"(or stopped before writing it); finish it with `tuner resume {shown}`, or drop this "
                             "entry.")
        frame = pd.read_csv(io.StringIO(csv), dtype={"trial_id": str})
        rows = [{k: _plain(v) for k, v in r.items() if not (isinstance(v, float) and math.isnan(v))}
                for r in frame.to_dict("records")]
        return display(where), earlier, rows
    local = not is_remote(entry) and not entry.lower().startswith("file://")
    under = f" (from the working directory, nor under the storage folder {spec.storage})" \
        if local and not Path(entry).is_absolute() and not spec.remote_storage else ""
    raise spec.error(field_path, f"warm_start names {display(entry)}, which holds no tuner experiment{under}: no "
                     f"{SPEC_SNAPSHOT} there. Give the folder of a finished `tuner run`, e.g. runs/mnist-asha (`tuner "
                     "list STORAGE` shows them), or a cloud URI of one.")


def _plain(value: Any) -> Any:
    """A numpy scalar from pandas as the plain Python value (``np.int64(32)`` -> ``32``)."""
    return value.item() if hasattr(value, "item") and type(value).__module__ == "numpy" else value


def _convert(row: Mapping[str, Any], spec: Spec, comparison: Comparison) -> tuple[dict[str, Any] | None, str | None]:
    """An earlier ``results.csv`` row -> its config in this space (flat, by name), or None with the reason."""
    space: Space = spec.space
    config: dict[str, Any] = {}
    active: dict[str, Any] = {}  # every active parameter, constants too (conditions name parents)
    for p in space.order:
        if not space.is_active(p, active):
            continue
        if p.dist is None:
            active[p.name] = p.value
            continue
        if p.name in comparison.fill:
            value: Any = comparison.fill[p.name]
        elif f"config/{p.key}" in row:
            value = row[f"config/{p.key}"]
        else:
            if spec.search.algorithm == "bohb":
                return None, f"no value of {p.name}"
            continue  # new, or inactive in the earlier run: the searcher samples it
        ok, value = contains(p.dist, value)
        if not ok:
            return None, f"{p.name} outside {param_label(p.dist)}"
        config[p.name] = active[p.name] = value
    return config, None


def load_warm_start(spec: Spec) -> WarmStart | None:
    """Read, check and convert every earlier experiment that ``search.warm_start`` names.

    Args:
        spec: The validated spec.

    Returns:
        The :class:`WarmStart`, or None when the spec has no ``warm_start``.

    Raises:
        SpecError: At the ``search.warm_start.<i>`` entry (``file:line:col``): a folder or URI that
            holds no experiment, one without ``results.csv``, another metric, an incompatible
            space (a change of type, a parameter BOHB cannot fill), or no usable trial.
    """
    entries = getattr(spec.search, "warm_start", None)
    if not entries:
        return None
    from tuner.search.pareto import feasible
    from tuner.experiment.storage import display

    objectives = spec.objectives or []
    time_attr = spec.scheduler.time_attr
    new = space_params(spec)
    trials: list[EarlierTrial] = []
    sources: list[Source] = []
    for i, entry in enumerate(entries):
        field_path = f"search.warm_start.{i}"
        where, earlier, rows = _read(entry, spec, field_path)
        shown = display(entry)  # a URI's query (endpoint, options) left out
        had = {o.metric for o in earlier.objectives or []}
        missing = [o.metric for o in objectives if o.metric not in had]
        if missing:
            was = ", ".join(sorted(had)) or "no metric"
            raise spec.error(field_path, f"the earlier experiment {shown} was tuned on {was}, not on "
                             f"{', '.join(missing)}: its trials' rewards would mean nothing here. Warm-start from an "
                             "experiment with the same metric.")
        comparison = compare_spaces(space_params(earlier), new, spec.search.algorithm)
        if comparison.refusals:
            raise spec.error(field_path, f"the earlier experiment {shown} cannot warm-start this one: "
                             f"{'; '.join(comparison.refusals)}. Or drop this entry.")
        left_out: dict[str, int] = {}
        fed: list[EarlierTrial] = []
        for row in rows:
            status = str(row.get("status"))
            values = [final_value(row, o.metric) for o in objectives]
            if status != _FINISHED:
                why = f"status {status}"
            elif not all(is_finite_number(v) for v in values):
                why = "no finite value of " + ", ".join(o.metric for o in objectives)
            elif spec.constraints and not feasible(row, spec.constraints):
                why = "infeasible under this spec's constraints"
            else:
                config, why_not = _convert(row, spec, comparison)
                if config is not None:
                    budget = row.get(time_attr, row.get("training_iteration", 1))
                    fed.append(EarlierTrial(entry, str(row.get("trial_id")), config,
                                            tuple(float(v) for v in values),
                                            float(budget) if is_finite_number(budget) else 1.0))
                    continue
                why = why_not or ""
            left_out[why] = left_out.get(why, 0) + 1
        notes = list(comparison.notes)
        notes += [f"{n} trial{'s' if n != 1 else ''} left out: {why}." for why, n in left_out.items()]
        if not fed:
            why = ", ".join(f"{why} ({n})" for why, n in left_out.items()) or "its results.csv lists none"
            raise spec.error(field_path, f"the earlier experiment {shown} has no trial to warm-start from: none of its "
                             f"{len(rows)} trials is usable here ({why}). Drop this entry, or warm-start from another "
                             "experiment.")
        trials += fed
        sources.append(Source(entry, where, len(rows), len(fed), notes))
    return WarmStart(trials, sources)


def nested_configs(trials: Sequence[EarlierTrial], spec: Spec) -> list[dict[str, Any]]:
    """Earlier trials' configs as points to evaluate: nested by config key, as ``param_space``."""
    from tuner.core.params import nest

    return [nest(spec.space.keyed(t.config)) for t in trials]
