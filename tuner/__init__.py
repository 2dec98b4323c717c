"""tuner: hyperparameter tuning of PyTorch train functions from a YAML spec, on Ray Tune.

The Python API is :func:`tune_model`; train functions talk to it through
:mod:`tuner.trial`. Importing ``tuner`` is cheap: Ray is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tuner import moved

moved.install()  # tuner 0.1's module paths (tuner.engine, ...) still import: tuner/moved.py

__version__ = "0.1.0"
__all__ = ["tune_model", "load_spec", "Spec", "SpecError", "TuneResult", "__version__"]

if TYPE_CHECKING:
    from tuner.run.engine import tune_model
    from tuner.run.results import TuneResult
    from tuner.spec import Spec, SpecError, load_spec


def __getattr__(name: str) -> Any:
    if name == "tune_model":
        from tuner.run.engine import tune_model

        return tune_model
    if name == "TuneResult":
        from tuner.run.results import TuneResult

        return TuneResult
    if name in ("Spec", "SpecError", "load_spec"):
        from tuner import spec

        return getattr(spec, name)
    raise AttributeError(f"module 'tuner' has no attribute {name!r}")
