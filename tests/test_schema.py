"""The spec's JSON Schema (``tuner schema``, tuner/spec/schema.py): the committed file is current, every
shipped spec validates as an editor reads it, no spec the loader accepts is refused, and the mistakes a
schema can see (types, enums, unknown keys) are refused."""

from __future__ import annotations

import json
import re
import types
import typing
from typing import Annotated, Any, Literal

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tests.fixtures.paths import ROOT
from tuner.spec import Spec, SpecError, load_spec
from tuner.spec.distributions import _DISTRIBUTIONS
from tuner.spec.schema import DRAFT_07, SCHEMA_FILE, schema_text, spec_schema

SHIPPED = sorted((ROOT / "search_spaces").rglob("*.yaml"))
HEADER = re.compile(r"^# yaml-language-server: \$schema=(\S+)$")


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(spec_schema())


class _Yaml12Loader(yaml.SafeLoader):
    """PyYAML with YAML 1.2's core schema, as yaml-language-server reads a file: ``yes``/``on`` and
    ``3_600`` are text, ``1e-4`` a number (PyYAML, YAML 1.1, reads the first two as a boolean and a
    number, the last as text)."""


_Yaml12Loader.yaml_implicit_resolvers = {}
for _tag, _pattern, _first in [
    ("null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
    ("bool", r"true|True|TRUE|false|False|FALSE", list("tTfF")),
    ("int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", list("-+0123456789")),
    ("float", r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
     list("-+.0123456789")),
    ("merge", r"<<", ["<"]),
]:
    _Yaml12Loader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", re.compile(f"^(?:{_pattern})$"), _first)


def as_editor_reads(text: str) -> Any:
    """The document as an editor validates it: YAML 1.2, and JSON's data model (every key is text)."""
    def json_keys(value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): json_keys(v) for k, v in value.items()}
        return [json_keys(v) for v in value] if isinstance(value, list) else value

    return json_keys(yaml.load(text, _Yaml12Loader))


def errors(validator, data) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(data)]


def test_the_committed_schema_is_current():
    assert (ROOT / SCHEMA_FILE).read_text() == schema_text(), (
        f"{SCHEMA_FILE} is out of date; run `python -m tuner schema --output {SCHEMA_FILE}`")


def test_the_schema_is_draft07_that_editors_read():
    """Valid draft-07, with none of pydantic's draft 2020-12 or OpenAPI keywords, and no $ref with
    siblings (draft-07 ignores them)."""
    schema = spec_schema()
    assert schema["$schema"] == DRAFT_07
    jsonschema.Draft7Validator.check_schema(schema)
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            found.update(k for k in node if k in {"$defs", "discriminator", "prefixItems", "unevaluatedProperties",
                                                  "dependentRequired", "dependentSchemas", "$anchor"})
            assert "$ref" not in node or len(node) == 1, node
            for key, value in node.items():
                if key not in ("default", "const", "enum", "properties", "definitions"):
                    walk(value)
                elif key in ("properties", "definitions"):
                    for sub in value.values():
                        walk(sub)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(schema)
    assert not found


@pytest.mark.parametrize("path", SHIPPED, ids=[p.relative_to(ROOT / "search_spaces").as_posix() for p in SHIPPED])
def test_each_shipped_spec_names_the_schema_and_validates(path, validator):
    """The first line names the committed schema by its path from the spec's folder; the spec validates as
    an editor reads it, and loads."""
    text = path.read_text()
    header = HEADER.match(text.splitlines()[0])
    assert header, f"{path.name}: the first line must be `# yaml-language-server: $schema=<path of {SCHEMA_FILE}>`"
    assert (path.parent / header[1]).resolve() == ROOT / SCHEMA_FILE
    assert errors(validator, as_editor_reads(text)) == []
    assert isinstance(load_spec(path), Spec)


# Golden bad specs the schema refuses too, by what a schema can tell: (path of the error, why).
REFUSED = {
    "unknown_key": ("", "unknown top-level key"),
    "unknown_key_nested": ("scheduler", "unknown key of asha"),
    "unknown_key_deep": ("reporting.cli", "unknown key"),
    "distribution_unknown_key": ("param_space.lr", "unknown key of uniform"),
    "distribution_missing_high": ("param_space.lr", "required key"),
    "unknown_distribution": ("param_space.lr.type", "distribution type enum"),
    "unknown_scheduler": ("scheduler.type", "scheduler type enum"),
    "unknown_search": ("search.algorithm", "searcher enum"),
    "mode_invalid": ("mode", "min|max enum"),
    "ddp_bad_strategy": ("resources.placement_strategy", "placement strategy enum"),
    "optuna_sampler_unknown": ("search.sampler", "sampler enum"),
    "num_samples_text": ("num_samples", "a number, not text"),
    "num_samples_yes": ("num_samples", "a number, not a boolean word"),
    "num_samples_fraction": ("num_samples", "an integer"),
    "randint_float": ("param_space.n.low", "an integer bound"),
    "uniform_low_bool": ("param_space.momentum.low", "a number, not a boolean"),
    "resources_cpu_text": ("resources.cpu", "a number"),
    "search_string": ("search", "a mapping"),
    "param_space_list": ("param_space", "a mapping"),
    "choice_not_list": ("param_space.bs.values", "a list"),
    "empty_choice": ("param_space.bs.values", "at least one value"),
    "num_samples_zero": ("num_samples", "minimum 1"),
    "quniform_q_zero": ("param_space.d.q", "q > 0"),
    "loguniform_zero": ("param_space.lr.low", "low > 0 on a log scale"),
    "reduction_factor_one": ("scheduler.reduction_factor", "> 1"),
    "pbt_quantile_above_half": ("scheduler.quantile_fraction", "at most 0.5"),
    "metric_blank": ("metric", "a name that is not blank"),
    "name_slash": ("name", "name pattern"),
    "trainable_without_colon": ("trainable", "module:function"),
    "ray_address_http": ("ray.address", "address pattern"),
    "bad_param_name": ("param_space", "parameter name pattern"),
    "param_name_number": ("param_space", "parameter name pattern"),
    "subspace_branch_bad_name": ("param_space.model.values.0.block", "parameter name pattern in a branch"),
    "cond_bare_list": ("param_space.width3.when.layers", "a condition is a value or {in: [...]}"),
    "mo_mode_value": ("mode.1", "min|max enum in a list"),
    "mo_no_mode_list": ("mode", "a list of modes for a list of metrics"),
    "metric_without_mode": ("", "metric needs mode"),
    "top_level_list": ("", "a mapping"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_golden_bad_spec_is_refused_by_the_schema(name, validator):
    path, _why = REFUSED[name]
    spec = ROOT / "tests" / "bad_specs" / f"{name}.yaml"
    assert spec.with_suffix(".err").exists()
    error = jsonschema.exceptions.best_match(validator.iter_errors(as_editor_reads(spec.read_text())))
    assert error is not None, f"{name}: the schema accepts it"
    assert ".".join(map(str, error.absolute_path)) == path, error.message


BASE = "trainable: tests.trainables:quadratic\nmetric: loss\nmode: min\n"

# Specs the loader accepts that a plain schema of the models would refuse (tuner/spec/schema.py's leniencies).
ACCEPTED = {
    "yaml 1.1 booleans": "amp: yes\nreporting: {tensorboard: off, cli: {progress: No}}\nfailure: {fail_fast: ON}\n",
    "pydantic's booleans": "amp: y\nreporting: {tensorboard: 0, cli: {enabled: 'True'}}\nfailure: {fail_fast: F}\n",
    "the README's other booleans": "amp: n\nreporting: {tensorboard: 1, cli: {progress: no}}\nfailure: {fail_fast: on}\n",
    "yaml 1.1 numbers": "time_budget_s: 3_600\nnum_samples: 1_0\n",
    "whole floats as integers": "num_samples: 4.0\nscheduler: {type: asha, max_t: 1e1}\n",
    "cli flag": "reporting: {cli: false}\n",
    "null scheduler": "scheduler: null\n",
    "scheduler without type under bohb": "search: {algorithm: bohb}\nscheduler: {max_t: 9}\n",
    "null checkpoint under pbt": "scheduler: {type: pbt}\ncheckpoint: null\nparam_space: {x: {type: uniform, low: 0, high: 1}}\n",
    "sub-space choice": "param_space:\n  layers: {type: randint, low: 1, high: 4}\n  opt:\n    type: choice\n    values:\n      - {name: sgd, lr: {type: "
                        "loguniform, low: 1e-3, high: 1e-1}, momentum: 0.9}\n      - {name: adam, beta: {type: "
                        "uniform, low: 0.9, high: 0.99, when: {layers: {in: [2, 3]}}}}\n",
    "choice of plain mappings": "param_space: {arch: {type: choice, values: [{a: 1}, {b: [2]}]}}\n",
    "groups and constants": "param_space: {net: {width: {type: randint, low: 1, high: 9}, act: relu}, tags: [a]}\n",
}
ACCEPTED_WITHOUT_BASE = {
    "metric lists": "trainable: a.b:c\nmetric: [acc, size]\nmode: [max, min]\n",
    "objectives": "trainable: a.b:c\nobjectives: [{metric: acc, mode: max}, {metric: size, mode: min}]\n",
    "no trainable (tune_model passes one)": "metric: loss\nmode: min\n",
}

# Specs both refuse: the leniencies stop where the loader's do, and a branch's parameters are checked.
REFUSED_BY_BOTH = {
    "scheduler without type, search random": ("search: {algorithm: random}\nscheduler: {max_t: 9}\n", "scheduler"),
    "null checkpoint under asha": ("scheduler: {type: asha}\ncheckpoint: null\n", "checkpoint"),
    "cli text": ("reporting: {cli: maybe}\n", "reporting.cli"),
    "a boolean of 2": ("amp: 2\n", "amp"),
    "unknown key in a branch's distribution": (
        "param_space: {m: {type: choice, values: [{name: a, k: {type: randint, low: 1, hgh: 3}}]}}\n",
        "param_space.m.values.0.k"),
    "a key of another distribution": ("param_space: {x: {type: uniform, low: 0, high: 1, values: [1]}}\n",
                                      "param_space.x"),
}


@pytest.mark.parametrize("text", [BASE + t for t in ACCEPTED.values()] + list(ACCEPTED_WITHOUT_BASE.values()),
                         ids=[*ACCEPTED, *ACCEPTED_WITHOUT_BASE])
def test_what_the_loader_accepts_the_schema_accepts(text, validator, make_spec):
    load_spec(make_spec(text, file="spec.yaml"), require_trainable=False)
    assert errors(validator, as_editor_reads(text)) == []


@pytest.mark.parametrize("name", sorted(REFUSED_BY_BOTH))
def test_what_both_refuse(name, validator, make_spec):
    text, path = REFUSED_BY_BOTH[name]
    with pytest.raises(SpecError):
        load_spec(make_spec(BASE + text, file="spec.yaml"))
    error = jsonschema.exceptions.best_match(validator.iter_errors(as_editor_reads(BASE + text)))
    assert error is not None and ".".join(map(str, error.absolute_path)) == path, error and error.message


def test_tuner_schema_prints_and_writes_the_committed_schema(run_cli, tmp_path, capsys):
    """`python -m tuner schema` prints the committed file; --output writes it (in this process: the same
    command, without a second interpreter's start-up)."""
    from tuner.cli import main

    printed = run_cli("schema")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout)["$schema"] == DRAFT_07
    assert printed.stdout == (ROOT / SCHEMA_FILE).read_text()
    main(["schema", "--output", str(tmp_path / "s.json")])
    assert capsys.readouterr().out == f"Schema: {tmp_path / 's.json'}\n"
    assert (tmp_path / "s.json").read_text() == printed.stdout


#: `tuner schema` through tuner's entry point in a fresh interpreter; then which heavy packages it imported.
SCHEMA_ONLY = """
import contextlib, io, json, sys
from tuner.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
    main(["schema"])
print(json.dumps({"schema": out.getvalue(), "loaded": sorted(m for m in ("ray", "torch", "optuna", "pandas")
                                                            if m in sys.modules)}))
"""


def test_tuner_schema_imports_no_ray_or_torch():
    """The command needs nothing beyond tuner: it prints the schema without importing Ray, torch, Optuna or pandas."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", SCHEMA_ONLY], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["schema"] == (ROOT / SCHEMA_FILE).read_text()
    assert found["loaded"] == []


# Random specs from the models' own fields, with the forms the before-validators take: whatever the
# loader accepts, the schema must accept (a false error in the editor is worse than a missing one).

_names = st.sampled_from(["lr", "x", "opt", "layers", "batch_size", "loss", "acc", "training_iteration"])
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 12), st.floats(-2, 12, allow_nan=False),
                     st.sampled_from(["a", "sgd", "", " ", "loss", "training_iteration", "a.b:c", "auto", "runs"]))


def _for(annotation: Any, depth: int = 0) -> st.SearchStrategy:
    """Values of a model field's annotation, and values near it (the loader sorts them out)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return _scalars
    if annotation is type(None):
        return st.none()
    if origin is Annotated:
        return _for(args[0], depth)
    if origin in (typing.Union, types.UnionType):
        return st.one_of([_for(a, depth) for a in args])
    if origin is Literal:
        return st.sampled_from(args)
    if annotation is bool:  # and what pydantic reads as one (a bool field is not strict), or not
        return st.one_of(st.booleans(), st.sampled_from([0, 1, 2, "y", "N", "off", "True", "t", "maybe"]))
    if annotation is int:
        return st.one_of(st.integers(0, 12), st.integers(1, 12).map(float))
    if annotation is float:
        return st.one_of(st.integers(0, 12), st.floats(0, 12, allow_nan=False))
    if annotation is str:
        return st.one_of(_names, _scalars.filter(lambda v: isinstance(v, str)))
    if origin is list:
        return st.lists(_for(args[0], depth + 1), max_size=3)
    if origin is dict:
        return st.dictionaries(_names, _for(args[1], depth + 1), max_size=3)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model(annotation, depth)
    if getattr(annotation, "__name__", "") == "ParamValue":
        return _param(depth)
    raise AssertionError(f"no strategy for {annotation!r}")


def _model(model: type[BaseModel], depth: int) -> st.SearchStrategy:
    fields = model.model_fields
    required = {n: _field(f, depth) for n, f in fields.items() if f.is_required()}
    optional = {n: _field(f, depth) for n, f in fields.items() if not f.is_required()}
    return st.fixed_dictionaries(required, optional=optional)


def _field(field: Any, depth: int) -> st.SearchStrategy:
    if field.discriminator:  # a tagged union
        return st.one_of([_model(m, depth + 1) for m in typing.get_args(field.annotation)])
    return _for(field.annotation, depth)


def _in_range(dist: dict) -> dict:
    """A drawn distribution with bounds the loader takes more often: low < high, multiples of q, > 0 on a log scale."""
    dist = dict(dist)
    if "low" in dist and "high" in dist:
        dist["q"] = 1 if "q" in dist else None
        low = int(abs(dist["low"])) + 1 if "log" in dist["type"] or "q" in dist else abs(dist["low"])
        dist.update(low=low, high=low + 2)
    if "sd" in dist:
        dist["sd"] = abs(dist["sd"]) + 1
    return {k: v for k, v in dist.items() if v is not None or k not in ("q", "when")}


_distribution = st.one_of([_model(d, 2) for d in _DISTRIBUTIONS]).map(_in_range)


def _param(depth: int) -> st.SearchStrategy:
    leaves = st.one_of(_distribution, _scalars, st.lists(_scalars, max_size=2))
    if depth > 2:
        return leaves
    sub = st.deferred(lambda: _param(depth + 1))
    branch = st.builds(lambda name, rest: {"name": name, **rest}, st.sampled_from(["a", "b", "c"]),
                       st.dictionaries(_names, sub, max_size=2))
    return st.one_of(leaves, st.dictionaries(_names, sub, max_size=2),
                     st.builds(lambda values: {"type": "choice", "values": values},
                               st.lists(branch, min_size=1, max_size=2, unique_by=lambda b: b["name"])))


_conditional = {"layers": {"type": "randint", "low": 1, "high": 4},
                "w": {"type": "choice", "values": [8, 16], "when": {"layers": {"in": [2, 3]}}}}
# A spec draws one or two of its other fields at a time: with all of them, nearly every draw has one wrong.
_OTHER_FIELDS = sorted(set(Spec.model_fields) - {"param_space", "metric", "mode", "objectives"})
_specs = st.builds(
    lambda others, space, objectives, cli: {**others, "param_space": space, **objectives,
                                            **({"reporting": {"cli": cli}} if cli is not None else {})},
    st.lists(st.sampled_from(_OTHER_FIELDS), max_size=2, unique=True).flatmap(
        lambda names: st.fixed_dictionaries({n: _field(Spec.model_fields[n], 0) for n in names})),
    st.one_of(st.dictionaries(_names, _param(0), max_size=3),
              st.dictionaries(_names, _param(0), max_size=2).map(lambda space: {**space, **_conditional})),
    st.sampled_from([{"metric": ["acc", "size"], "mode": ["max", "min"]}, {"metric": "loss", "mode": "min"},
                     {"objectives": [{"metric": "acc", "mode": "max"}, {"metric": "size", "mode": "min"}]}]),
    st.sampled_from([None, True, False]),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(_specs)
def test_random_specs_the_loader_accepts_validate(validator, data):
    try:
        load_spec(data, require_trainable=False)
    except SpecError:
        return
    assert errors(validator, json.loads(json.dumps(data))) == [], data
