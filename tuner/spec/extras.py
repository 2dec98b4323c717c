"""Checking, before Ray starts, that the optional packages of the integrations a spec enables
(``reporting.wandb``, ``reporting.mlflow``) are installed.
"""

from __future__ import annotations

import importlib.util

from tuner.spec.model import Spec


_EXTRAS = {"wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow")}  # spec key -> (module, extra)


def check_extras(spec: Spec) -> None:
    """Check that the packages of the integrations the spec enables are installed.

    ``reporting.wandb`` needs ``wandb`` (``pip install tuner[wandb]``), ``reporting.mlflow``
    needs ``mlflow`` (``pip install tuner[mlflow]``). Nothing is imported: a missing
    package is found before Ray starts.

    Args:
        spec: The validated spec.

    Raises:
        SpecError: Naming the first missing package and the command that installs it.
    """
    for key, (module, extra) in _EXTRAS.items():
        if getattr(spec.reporting, key) is None:
            continue
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken or blocked package
            found = False
        if not found:
            raise spec.error(f"reporting.{key}", f"reporting.{key} needs the {module} package, which is not "
                             f"installed; install it with `pip install tuner[{extra}]` (or `pip install -e "
                             f"\".[{extra}]\"` in a checkout), or remove reporting.{key} from the spec.")
