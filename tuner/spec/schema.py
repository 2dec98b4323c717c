"""The spec's JSON Schema, for editor completion and checks while a spec is typed (``tuner schema``).

:func:`spec_schema` is pydantic's own JSON Schema of :class:`~tuner.spec.model.Spec`
(``Spec.model_json_schema``), post-processed only where pydantic's output is not what an
editor needs:

* **JSON Schema draft-07**, on purpose: it is the draft that yaml-language-server (the engine
  of the VS Code YAML extension, also used by Neovim, Emacs and JetBrains' LSP clients)
  supports best. Pydantic writes draft 2020-12, so ``$defs`` becomes ``definitions``, and a
  ``$ref`` with sibling keywords (which draft-07 ignores) is wrapped in ``allOf``.
* **One schema per discriminator value.** Pydantic writes a tagged union (``search``,
  ``scheduler``, the distributions) as ``oneOf`` plus OpenAPI's ``discriminator``, which
  draft-07 does not know. Each becomes ``if {type: X} then <X's schema>``, so an editor
  completes the keys of the ``type`` written (``low``/``high``/``q``, ``values``), flags a key
  that type does not take, and lists the allowed types.
* **A ``param_space`` value** is told apart the way the loader does it
  (:func:`tuner.spec.distributions._param_kind`): a mapping with ``type`` is a distribution, a
  ``choice`` whose values are all named mappings is a choice among sub-spaces (each branch a
  space of its own), another mapping is a group, anything else a constant. Pydantic's own
  ``oneOf`` of these would match a distribution three times (as itself, a group and a
  constant) and refuse every valid one.
* **What the loader accepts besides the models' fields**, so that no valid spec gets a false
  error: ``metric``/``mode`` lists (several objectives), ``reporting.cli: true|false``,
  ``scheduler`` null or without ``type`` under ``search: bohb``, ``checkpoint`` null under
  ``pbt``/``pb2``, the YAML 1.1 spellings that PyYAML reads and a YAML 1.2 editor reads as text
  (``yes``/``no``/``on``/``off``, numbers with ``_`` digit separators), and the booleans pydantic
  reads besides (a bool field is not strict: ``y``/``n``, ``t``/``f`` in any case, ``0``/``1``).
* **Checks a schema can state** that the models make in validators: parameter and experiment
  names, ``trainable``'s ``module:function`` form, ``ray.address``, non-empty ``values``, the
  form of a ``when`` condition, ``low > 0`` on a log scale, two or more objectives, a metric with
  its mode. (The other rules across fields, ``low < high`` among them, are the loader's alone:
  ``tuner validate`` says them.)

The committed file :data:`SCHEMA_FILE` is :func:`schema_text` (``tests/test_schema.py`` checks);
a shipped spec names it on its first line, ``# yaml-language-server: $schema=<relative path>``.
Nothing here needs ``jsonschema`` (only the tests validate against the schema).
"""

from __future__ import annotations

import inspect
import json
import re
from typing import Any

from tuner.spec.distributions import DISTRIBUTION_TYPES, PARAM_NAME
from tuner.spec.fields import _Model
from tuner.spec.model import _NAME, Spec
from tuner.spec.sections import _ADDRESS, POPULATION_SCHEDULERS, SCHEDULER_TYPES, SEARCH_ALGORITHMS

__all__ = ["SCHEMA_FILE", "DRAFT_07", "spec_schema", "schema_text"]

#: The committed schema's path in the repository (``python -m tuner schema --output`` writes it).
SCHEMA_FILE = "schema/tuner-spec.schema.json"
#: The JSON Schema dialect written (see the module docstring for why draft-07).
DRAFT_07 = "http://json-schema.org/draft-07/schema#"

_REF = "#/definitions/"

# What the loader reads as a boolean or a number besides YAML 1.2's true/false and numbers (which a YAML 1.2
# editor reads as text or a number): PyYAML's YAML 1.1 words yes/no/on/off, and pydantic's (a bool field is
# not strict) y/n, t/f, any case, and 0/1; numbers with `_` digit separators (3_600). (patternErrorMessage
# is yaml-language-server's.)
_LAX = {
    "LaxBoolean": {
        "description": "A boolean as tuner also reads it: yes/no, on/off, y/n, t/f, true/false in any case, 0/1.",
        "anyOf": [{"type": "string", "pattern": "^(?:[oO][nN]|[oO][fF][fF]|[yY](?:[eE][sS])?|[nN][oO]?"
                                                 "|[tT](?:[rR][uU][eE])?|[fF](?:[aA][lL][sS][eE])?|[01])$",
                   "patternErrorMessage": "Expected a boolean (true or false)."},
                  {"type": "integer", "minimum": 0, "maximum": 1}]},
    "LaxNumber": {"type": "string", "pattern": r"^(?=[^_]*_)[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?$",
                  "description": "A number with _ digit separators (YAML 1.1), which tuner reads as a number.",
                  "patternErrorMessage": "Expected a number."},
}
_NON_BLANK = {"type": "string", "pattern": r"\S"}
# Pydantic leaves a constraint on an optional number (`Int | None = Field(ge=1)`) under its own name.
_BOUNDS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}
# The name of each tagged union's definition, by the values of its discriminator.
_UNIONS = {frozenset(tags): (name, tags) for name, tags in (
    ("Distribution", DISTRIBUTION_TYPES), ("Scheduler", SCHEDULER_TYPES), ("Search", SEARCH_ALGORITHMS))}


def spec_schema() -> dict[str, Any]:
    """The JSON Schema (draft-07) of a tuner spec, generated from the pydantic models.

    Every spec that :func:`tuner.spec.load_spec` accepts validates against it as an editor
    reads the file (YAML 1.2); most single-field mistakes (a wrong type, an unknown key or
    ``type``, a value outside an enum) fail it. See the module docstring for what is added
    to pydantic's ``Spec.model_json_schema()`` and why.

    Returns:
        The schema as a JSON-ready dict, with ``$schema`` set to :data:`DRAFT_07`.
    """
    raw = Spec.model_json_schema(ref_template=_REF + "{model}")
    defs: dict[str, Any] = raw.pop("$defs")
    schema = {"$schema": DRAFT_07, "title": "tuner spec", **raw}
    schema["description"] = ("A tuner spec: `python -m tuner run SPEC`. Generated by `python -m tuner schema` from "
                             "tuner's pydantic models; docs/reference/spec.md describes every field.")
    _field_docs(raw, defs)
    unions: dict[str, Any] = {}
    schema, defs = _walk(schema, unions), {name: _walk(node, unions) for name, node in defs.items()}
    defs.update(unions, **_LAX)
    _param_space(schema, defs)
    _leniencies(schema, defs)
    _checks(schema, defs)
    schema["definitions"] = _referenced(schema, defs)
    return schema


def schema_text() -> str:
    """:func:`spec_schema` as stable JSON text: keys sorted, two-space indents, a newline at the end.

    Returns:
        The text of :data:`SCHEMA_FILE`.
    """
    return json.dumps(spec_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _field_docs(schema: dict, defs: dict[str, Any]) -> None:
    """Each section's description is its class docstring before ``Attributes:``; each field's, the line
    the Google-style ``Attributes:`` section (of the class or a base) gives it: what an editor shows on hover."""
    models: dict[str, type] = {"Spec": Spec}
    todo: list[type] = [_Model]
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("tuner.spec."):
            models[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    for name, node in [("Spec", schema), *defs.items()]:
        model = models.get(name)
        if model is None or "properties" not in node:
            continue
        docs: dict[str, str] = {}
        for cls in reversed(model.__mro__):
            intro, _, attributes = inspect.cleandoc(cls.__doc__ or "").partition("\nAttributes:\n")
            for field, text in re.findall(r"^    (\w+): (.*(?:\n {8}.*)*)", attributes, re.M):
                docs[field] = " ".join(text.split())
        if model.__doc__:  # intro: the model's own (the MRO's last)
            node["description"] = intro.strip()
        for field, text in docs.items():
            if field in node["properties"]:
                node["properties"][field]["description"] = text


def _walk(node: Any, unions: dict[str, Any]) -> Any:
    """Pydantic's 2020-12 output as draft-07: tagged unions as if/then definitions, bounds named,
    a ``$ref`` alone, booleans and numbers that also take their YAML 1.1 spellings."""
    if isinstance(node, list):
        return [_walk(item, unions) for item in node]
    if not isinstance(node, dict):
        return node
    if "discriminator" in node:  # the union's definition, and what the field says of it
        node = {"$ref": _REF + _union(node, unions), **{k: node[k] for k in ("title", "description") if k in node}}
    out = {key: _walk(value, unions) if key not in ("default", "const", "enum") else value
           for key, value in node.items()}
    if out.get("type") in ("integer", "number"):
        for key, keyword in _BOUNDS.items():
            if key in out:
                out[keyword] = out.pop(key)
    if list(out.get("patternProperties", ())) == [_NON_BLANK["pattern"]] and "additionalProperties" not in out:
        # dict[NonBlank, X]: every key is non-blank (patternProperties would leave a blank key unchecked)
        out["propertyNames"] = {"pattern": _NON_BLANK["pattern"]}
        out["additionalProperties"] = out.pop("patternProperties")[_NON_BLANK["pattern"]]
    if "$ref" in out and len(out) > 1:
        out = {"allOf": [{"$ref": out.pop("$ref")}], **out}
    if out.get("type") in ("boolean", "integer", "number"):
        kind = {k: out.pop(k) for k in ("type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
                if k in out}
        out["anyOf"] = [kind, {"$ref": _REF + ("LaxBoolean" if kind["type"] == "boolean" else "LaxNumber")}]
    if "anyOf" in out:  # {anyOf: [{anyOf: [a, b]}, c]} is {anyOf: [a, b, c]}
        out["anyOf"] = [x for item in out["anyOf"] for x in (item["anyOf"] if list(item) == ["anyOf"] else [item])]
    return out


def _union(node: dict, unions: dict[str, Any]) -> str:
    """Define a tagged union (pydantic's ``oneOf`` + ``discriminator``) in ``unions`` as one if/then per
    tag; its definition's name."""
    prop, mapping = node["discriminator"]["propertyName"], node["discriminator"]["mapping"]
    name, tags = _UNIONS[frozenset(mapping)]  # a new union: name it here
    if name not in unions:
        unions[name] = _dispatch(prop, {tag: mapping[tag][len(_REF):] for tag in tags})
    return name


def _dispatch(prop: str, targets: dict[str, str]) -> dict[str, Any]:
    """``{prop: X, ...}`` validated by the definition ``targets[X]``; ``prop`` required, one of ``targets``."""
    return {
        "type": "object",
        "required": [prop],
        "properties": {prop: {"enum": list(targets)}},
        "allOf": [{"if": {"type": "object", "required": [prop], "properties": {prop: {"const": tag}}},
                   "then": {"$ref": _REF + target}} for tag, target in targets.items()],
    }


def _param_space(schema: dict, defs: dict[str, Any]) -> None:
    """``param_space``'s values: a distribution, a choice among sub-spaces, a group or a constant."""
    name_pattern = {"pattern": PARAM_NAME.pattern, "patternErrorMessage": (
        "A parameter's name starts with a letter or '_' and holds only letters, digits, '_', '.' and '-'.")}
    targets = {case["if"]["properties"]["type"]["const"]: case["then"]["$ref"][len(_REF):]
               for case in defs["Distribution"]["allOf"]}
    defs["ParamDistribution"] = _dispatch("type", {**targets, "choice": "ParamChoice"})
    defs["ParamChoice"] = {
        "description": "A choice: of plain values, or among sub-spaces when every value is a mapping with a `name`.",
        "allOf": [{"$ref": _REF + "Choice"}],
        "if": {"type": "object", "properties": {"values": {"type": "array",
                                                           "items": {"type": "object", "required": ["name"]}}}},
        "then": {"properties": {"values": {"items": {"$ref": _REF + "Branch"}}}},
    }
    defs["Branch"] = {
        "description": "One branch of a choice among sub-spaces: its `name`, and its own parameters.",
        "type": "object",
        "required": ["name"],
        "properties": {"name": {**_NON_BLANK, "description": "The branch's name: the value of the config's `name`."}},
        "propertyNames": name_pattern,
        "additionalProperties": {"$ref": _REF + "ParamValue"},
    }
    group = {"propertyNames": name_pattern, "additionalProperties": {"$ref": _REF + "ParamValue"}}
    defs["ParamValue"] = {
        "description": "A parameter: a distribution (a mapping with `type`), a group of parameters (a mapping "
                       "without `type`), or a constant (anything else).",
        "if": {"type": "object", "required": ["type"]},
        "then": {"$ref": _REF + "ParamDistribution"},
        "else": {"$ref": _REF + "ParamGroup"},
    }
    # A group never has `type` (that makes it a distribution): the property is what an editor offers
    # in a parameter's empty mapping.
    defs["ParamGroup"] = {**group, "properties": {"type": {
        "enum": list(DISTRIBUTION_TYPES), "description": "The distribution of a parameter (Ray Tune's names); a "
                                                         "mapping without `type` is a group of parameters."}}}
    schema["properties"]["param_space"] = {**schema["properties"]["param_space"], "type": "object", **group}
    condition_value = {"type": ["string", "number", "boolean"]}
    defs["Condition"] = {
        "description": "When the parameter exists: `{parent: value}` or `{parent: {in: [values]}}`, AND-ed.",
        "type": "object",
        "minProperties": 1,
        "additionalProperties": {"anyOf": [condition_value, {
            "type": "object", "required": ["in"], "additionalProperties": False,
            "properties": {"in": {"type": "array", "minItems": 1, "items": condition_value}}}]},
    }
    for target in {*targets.values(), "Choice"}:
        when = defs[target]["properties"].get("when", {})  # keeps the description the docstring gave it
        defs[target]["properties"]["when"] = {**{k: v for k, v in when.items() if k == "description"},
                                             "anyOf": [{"$ref": _REF + "Condition"}, {"type": "null"}],
                                             "default": None, "title": "When"}


def _leniencies(schema: dict, defs: dict[str, Any]) -> None:
    """The forms the loader accepts besides the models' fields (its ``mode="before"`` validators)."""
    props = schema["properties"]
    # Spec._objective_lists: metric: [a, b] with mode: [max, min].
    metrics = {"type": "array", "minItems": 2, "uniqueItems": True, "items": _NON_BLANK,
               "description": "Several objectives: two or more metrics, with as many modes in `mode`."}
    modes = {"type": "array", "minItems": 2, "items": {"enum": ["min", "max"]}}
    props["metric"]["anyOf"].append(metrics)
    props["mode"]["anyOf"].append(modes)
    # Spec._default_scheduler: no scheduler (null) is fifo, or bohb under search bohb, where a
    # scheduler without `type` is bohb; a null checkpoint under pbt/pb2 keeps 4 checkpoints.
    props["scheduler"] = {**props["scheduler"], "anyOf": [{"$ref": _REF + "Scheduler"}, {"type": "null"}]}
    del props["scheduler"]["allOf"]
    del defs["Scheduler"]["required"]
    props["checkpoint"] = {**props["checkpoint"], "anyOf": [{"$ref": _REF + "Checkpointing"}, {"type": "null"}]}
    props["checkpoint"].pop("allOf", None)
    props["checkpoint"].pop("$ref", None)
    schema["allOf"] = [
        {"if": {"required": ["search"], "properties": {"search": {"type": "object", "required": ["algorithm"],
                                                                  "properties": {"algorithm": {"const": "bohb"}}}}},
         "else": {"properties": {"scheduler": {"required": ["type"]}}}},
        {"if": {"required": ["scheduler"], "properties": {"scheduler": {
            "type": "object", "required": ["type"], "properties": {"type": {"enum": list(POPULATION_SCHEDULERS)}}}}},
         "else": {"properties": {"checkpoint": {"type": "object"}}}},
    ]
    # Reporting._cli_flag: cli: true|false is {enabled: true|false}.
    cli = defs["Reporting"]["properties"]["cli"]
    ref = cli.pop("$ref", None) or cli.pop("allOf")[0]["$ref"]
    cli["anyOf"] = [{"$ref": ref}, {"type": "boolean"}, {"$ref": _REF + "LaxBoolean"}]


def _checks(schema: dict, defs: dict[str, Any]) -> None:
    """What the models check in validators and a schema can state too."""
    props = schema["properties"]
    props["name"].update(pattern=r"^(?!\.+$)" + _NAME.pattern.lstrip("^"),
                         patternErrorMessage="Only letters, digits, '.', '_' and '-' (no '/', not '..').")
    # Looser than the loader's pattern (whose \w is any Unicode letter, an editor's only ASCII): one ':'.
    forms = props["trainable"]["anyOf"][0]  # a reference (a string) or a command trial (a mapping)
    reference = next(form for form in forms.get("oneOf", [forms]) if form.get("type") == "string")
    reference.update(pattern=r"^[^:]+:[^:\s./]+$", patternErrorMessage=(
        "'package.module:function' or 'path/to/file.py:function'."))
    props["objectives"]["anyOf"][0]["minItems"] = 2
    props["constraints"]["anyOf"][0]["minItems"] = 1
    defs["RayConfig"]["properties"]["address"]["anyOf"][0].update(
        pattern=_ADDRESS.pattern, patternErrorMessage="'auto', 'host:port' or 'ray://host:port'.")
    for name in ("Choice", "Grid"):
        defs[name]["properties"]["values"]["minItems"] = 1
    for name in ("LogUniform", "QLogUniform"):
        defs[name]["properties"]["low"]["anyOf"][0]["exclusiveMinimum"] = 0
    for name in ("LogRandInt", "QLogRandInt"):
        defs[name]["properties"]["low"]["anyOf"][0]["minimum"] = 1
    mutations = defs["PBTScheduler"]["properties"]["mutations"]["anyOf"][0]
    mutations["minProperties"] = 1
    bounds = defs["PB2Scheduler"]["properties"]["bounds"]["anyOf"][0]
    bounds.update(minProperties=1)
    bounds["additionalProperties"].update(minItems=2, maxItems=2)
    for name in ("ASHAScheduler", "HyperBandScheduler", "BOHBScheduler"):
        defs[name]["properties"]["reduction_factor"]["anyOf"][0]["exclusiveMinimum"] = 1
    # Spec._objective_lists and _cross_checks: a metric needs a mode and a mode a metric (one each, or two
    # lists); objectives replace both.
    given = {"metric": {"required": ["metric"], "properties": {"metric": {"not": {"type": "null"}}}},
             "mode": {"required": ["mode"], "properties": {"mode": {"not": {"type": "null"}}}}}
    listed = {key: {"required": [key], "properties": {key: {"type": "array"}}} for key in ("metric", "mode")}
    schema["allOf"] += [
        {"if": given["metric"], "then": given["mode"]},
        {"if": given["mode"], "then": given["metric"]},
        {"if": listed["metric"], "then": {"properties": {"mode": {"type": "array"}}}},
        {"if": listed["mode"], "then": {"properties": {"metric": {"type": "array"}}}},
        {"if": {"required": ["objectives"], "properties": {"objectives": {"type": "array"}}},
         "then": {"properties": {"metric": {"type": "null"}, "mode": {"type": "null"}}}},
    ]


def _referenced(schema: dict, defs: dict[str, Any]) -> dict[str, Any]:
    """The definitions that the schema reaches (pydantic's tagged unions' members stay; its
    ``SubspaceChoice``, which :func:`_param_space` replaces, goes)."""
    reached: set[str] = set()
    todo = [schema]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(_REF) and ref[len(_REF):] not in reached:
                reached.add(ref[len(_REF):])
                todo.append(defs[ref[len(_REF):]])
            todo.extend(v for k, v in node.items() if k != "definitions")
        elif isinstance(node, list):
            todo.extend(node)
    return {name: defs[name] for name in sorted(reached)}
