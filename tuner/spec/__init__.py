"""Spec loading and validation: YAML text -> a frozen, validated :class:`Spec`.

The spec is the contract of the project: everything a run needs is in it, and every
mistake in it is refused here, before Ray starts and before anything is written.

Loading is YAML 1.1 ``safe_load`` semantics with two fixes that users of PyYAML trip
over: ``1e-4`` is a float (YAML 1.2 reading), and a key given twice is an error instead
of a silent overwrite. What a hostile document can cost is bounded while it is read:
aliases expand to at most :data:`MAX_YAML_NODES` nodes, lists and mappings nest at most
:data:`MAX_NESTING` deep, a file holds at most :data:`MAX_SPEC_BYTES`. Values are strict
(a YAML boolean is no number, numbers are finite, names are not blank). Every error
carries ``file:line:col`` (or the ``--set`` that gave the value) and the field path, e.g.::

    space.yaml:7:21: param_space.lr.low: `low < high` must hold, but got (low=0.1, high=0.001).

Validation is pydantic v2. Distributions validate themselves when they are built (the
model of ``optuna/distributions.py``), and cross-field rules (searcher/scheduler pairs,
rung bounds) are checked by the :class:`Spec` itself.

The package's modules, each with one job (import from ``tuner.spec`` itself; the names
below are re-exported here):

* :mod:`~tuner.spec.errors`: :class:`SpecIssue`, :class:`SpecError` and the message helpers.
* :mod:`~tuner.spec.fields`: the strict field types and ``_Model``, the base of every section.
* :mod:`~tuner.spec.distributions`: the ``param_space`` distributions (``uniform``, ``choice``...).
* :mod:`~tuner.spec.sections`: the searcher, scheduler, resources, failure, checkpoint,
  reporting and ray sections.
* :mod:`~tuner.spec.model`: the :class:`Spec` and its cross-field checks, :func:`stop_operator`.
* :mod:`~tuner.spec.yaml_positions`: YAML reading with ``line:col`` positions, bounded.
* :mod:`~tuner.spec.messages`: pydantic's errors translated into :class:`SpecIssue` s.
* :mod:`~tuner.spec.loading`: :func:`load_spec`, ``--set`` overrides (:func:`parse_set`).
* :mod:`~tuner.spec.trainable`: finding, importing and checking the trainable.
* :mod:`~tuner.spec.extras`: the optional packages of the enabled integrations.
* :mod:`~tuner.spec.schema`: the spec's JSON Schema for editors (``tuner schema``).
"""

from __future__ import annotations

from tuner.spec.distributions import DISTRIBUTION_TYPES
from tuner.spec.distributions import BaseDistribution as BaseDistribution  # tuner.search.space reads them by it
from tuner.spec.errors import SpecError, SpecIssue
from tuner.spec.extras import check_extras
from tuner.spec.loading import MAX_SPEC_BYTES, Override, load_spec, parse_set
from tuner.spec.model import Spec, stop_operator
from tuner.spec.schema import SCHEMA_FILE, schema_text, spec_schema
from tuner.spec.sections import SCHEDULER_TYPES, SEARCH_ALGORITHMS, SYNCHRONOUS_HYPERBAND
from tuner.spec.command import CommandTrainable
from tuner.spec.trainable import (check_command, check_trainable, command_cwd, implements, import_roots,
                                  is_class_trainable, resolve_trainable, trainable_dirs, trainable_reference,
                                  user_packages)
from tuner.spec.yaml_positions import MAX_NESTING, MAX_YAML_NODES, parse_yaml

__all__ = [
    "Spec",
    "SpecError",
    "SpecIssue",
    "Override",
    "load_spec",
    "parse_set",
    "parse_yaml",
    "stop_operator",
    "MAX_YAML_NODES",
    "MAX_NESTING",
    "MAX_SPEC_BYTES",
    "resolve_trainable",
    "check_trainable",
    "check_command",
    "command_cwd",
    "CommandTrainable",
    "is_class_trainable",
    "trainable_dirs",
    "trainable_reference",
    "import_roots",
    "user_packages",
    "implements",
    "check_extras",
    "DISTRIBUTION_TYPES",
    "SEARCH_ALGORITHMS",
    "SCHEDULER_TYPES",
    "SYNCHRONOUS_HYPERBAND",
    "spec_schema",
    "schema_text",
    "SCHEMA_FILE",
]
