"""Ray internals that tuner touches, each behind one function and checked against Ray 2.60.

Ray Tune offers no public hook for these; each entry says why tuner needs it. A Ray
upgrade that moves one fails ``tests/test_ray_internals.py`` instead of a user's run.
"""

from __future__ import annotations

from typing import Any

__all__ = ["tune_session", "trial_id_in_config"]


def tune_session() -> Any:
    """The Ray session of the function trainable running in this process, or None.

    ``ray.train._internal.session.get_session`` (Ray 2.60): ``ray.tune.report``, and a
    function trainable's returned dict, go through this object's ``report``, which
    :func:`tuner.trainable._guard_reports` wraps to refuse a NaN metric before it leaves
    the trial.
    """
    from ray.train._internal.session import get_session

    return get_session()


def trial_id_in_config(config: Any) -> str | None:
    """The trial id Ray Tune passes a class trainable inside its config, or None.

    Ray 2.60's ``Trainable.__init__``/``reset`` pop ``ray.tune.result.TRIAL_INFO``
    (``"__trial_info__"``, a ``TrialInfo`` with ``.id``) from the config; tuner reads it
    first, to name the trial's folder while ``setup`` runs.
    """
    from ray.tune.result import TRIAL_INFO

    info = config.get(TRIAL_INFO) if isinstance(config, dict) else None
    return getattr(info, "id", None)
