"""``tuner convert``: a W&B sweep configuration or a Katib ``Experiment`` manifest as a tuner spec.

:func:`convert` reads the source (:mod:`~tuner.convert.source`), tells which format it is,
converts it (:mod:`~tuner.convert.wandb`, :mod:`~tuner.convert.katib`; the pieces both build:
:mod:`~tuner.convert.common`), and writes the spec's text with a ``# ...`` comment for every
:class:`~tuner.convert.source.Note` (:mod:`~tuner.convert.emit`). A source that names a program
becomes a command trial; ``trainable=`` (``--trainable module:function``) puts a train function
in its place. docs/guides/convert.md maps every source key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from tuner.convert.emit import render
from tuner.convert.katib import convert_experiment, is_experiment
from tuner.convert.source import ConvertError, Note, Source, read_source
from tuner.convert.wandb import convert_sweep, is_sweep

__all__ = ["convert", "Converted", "ConvertError", "Note", "FORMATS"]

#: The formats :func:`convert` reads: name -> how its messages describe it.
FORMATS = {"wandb": "a W&B sweep configuration", "katib": "a Katib Experiment, kubeflow.org/v1beta1"}


@dataclass(frozen=True)
class Converted:
    """A converted spec.

    Attributes:
        spec: The spec as a mapping (what ``text`` reads back as).
        text: The spec's YAML text, with a ``# ...`` comment for each note.
        notes: What did not map exactly, and the equivalent used, in source order.
        format: ``wandb`` or ``katib`` (:data:`FORMATS`).
    """

    spec: dict
    text: str
    notes: list[Note]
    format: str


def detect(source: Source) -> str:
    """The source's format: ``wandb`` or ``katib``.

    Raises:
        ConvertError: It is neither (naming what each format needs).
    """
    data = source.data
    if is_experiment(data):
        return "katib"
    if is_sweep(data):
        return "wandb"
    if data.get("kind") == "Experiment" or "apiVersion" in data:
        raise source.error(("apiVersion",) if "apiVersion" in data else ("kind",),
                           "a Katib Experiment needs `apiVersion: kubeflow.org/v1beta1` and `kind: Experiment`.")
    raise source.error((), "the file is neither a W&B sweep configuration (a mapping with `method:` and `parameters:`) "
                       "nor a Katib Experiment (`apiVersion: kubeflow.org/v1beta1`, `kind: Experiment`); "
                       "tuner convert reads those two.")


def convert(path_or_text: str | os.PathLike, trainable: str | None = None, *, name: str | None = None,
            out_dir: str | os.PathLike | None = None, validate: bool = True) -> Converted:
    """Convert a W&B sweep configuration or a Katib Experiment into a tuner spec.

    Args:
        path_or_text: The source file's path, or its YAML text.
        trainable: ``module:function`` (or ``path/file.py:function``): the train function that
            replaces the source's program or container command as the trial; None: a command trial.
        name: How messages and the spec's header name the source; default the path (or ``<text>``).
        out_dir: The folder the spec will be written to, for a source file: where it is not the
            source's folder, the command trial's ``cwd`` is the source's folder (relative to it),
            so that the program's relative paths still hold. None: beside the source.
        validate: Whether the spec is validated (:func:`tuner.spec.load_spec`) before it is returned.

    Returns:
        The :class:`Converted` spec, its text and its notes.

    Raises:
        ConvertError: The source is not YAML-readable as a mapping, is neither format, misses a
            required key, or uses something tuner has no equivalent for; ``file:line:col``,
            the key's path and the allowed values are in the message (exit code 2).
        tuner.spec.SpecError: Its YAML is invalid, or the converted spec does not validate
            (for example a ``--trainable`` that is no ``module:function``).
    """
    source = read_source(path_or_text, name)
    fmt = detect(source)
    spec = convert_experiment(source, trainable) if fmt == "katib" else convert_sweep(source, trainable)
    if out_dir is not None and isinstance(spec.get("trainable"), dict) and os.path.isfile(source.name):
        folder = os.path.dirname(os.path.abspath(source.name))
        cwd = os.path.relpath(folder, os.path.abspath(out_dir))
        if cwd.split(os.sep)[:3] == [os.pardir] * 3:  # far away: its absolute path reads better
            cwd = folder
        if cwd != os.curdir:
            spec["trainable"]["cwd"] = cwd.replace(os.sep, "/")
    shown = os.path.basename(source.name) if source.name != "<text>" else source.name
    header = [f"Converted by `tuner convert` from {shown} ({FORMATS[fmt]}). Each comment below names what does "
              "not map exactly, and what the spec does instead."]
    text = render(spec, source.notes, header)
    if validate:
        _validate(text, source, trainable)
    return Converted(spec, text, list(source.notes), fmt)


def _validate(text: str, source: Source, trainable: str | None) -> None:
    """Validate the spec's text as ``tuner validate`` would (without importing a trainable)."""
    from tuner.spec import SpecError, load_spec, parse_yaml

    try:
        load_spec(parse_yaml(text, "<converted>")[0])
    except SpecError as err:
        issue = err.issues[0]
        if trainable and issue.path == "trainable":
            raise ConvertError(issue.message, f"--trainable {trainable}") from None
        parts = tuple(issue.path.split(".")) if issue.path else ()
        origin = next((source.origins[parts[:i]] for i in range(len(parts), 0, -1) if parts[:i] in source.origins),
                      ())
        raise source.error(origin, f"converts to {issue.path or 'a spec'} that tuner refuses: {issue.message}") \
            from None
