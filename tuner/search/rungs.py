"""The rungs of the spec's scheduler, computed from the spec's values as Ray's schedulers do.

``tuner validate`` prints them per bracket (:func:`tuner.search.algorithms.describe_search`)
and ``tuner report`` draws them (:func:`tuner.report.scheduler_rungs`); both call
:func:`bracket_rungs`. tests/test_algorithms.py checks them against Ray's schedulers.

No Ray here.
"""

from __future__ import annotations

import math

from tuner.spec import Spec

__all__ = ["bracket_rungs", "merged_rungs"]


def bracket_rungs(spec: Spec) -> list[list[float]]:
    """Milestones (in ``time_attr`` units) at which the scheduler compares trials.

    ASHA: one list of rungs per bracket ``s``, ``grace_period * rf**(k + s)`` below
    ``max_t``, as Ray's ``AsyncHyperBandScheduler`` builds them. Hyperband and BOHB:
    one list per bracket, from ``max_t * rf**-s`` up to ``max_t``, as Ray's
    ``HyperBandScheduler``. Other schedulers have no rungs (empty list).

    Args:
        spec: The validated :class:`tuner.spec.Spec`.

    Returns:
        ``[[r0, r1, ...], ...]``, one list per bracket, ascending.
    """
    s = spec.scheduler
    max_t = spec.scheduler_max_t
    if s.type == "asha":
        out = []
        for b in range(s.brackets):
            n = int(math.log(max_t / s.grace_period) / math.log(s.reduction_factor) - b + 1)
            out.append([s.grace_period * s.reduction_factor ** (k + b) for k in range(n)])
        return out
    if s.type in ("hyperband", "bohb"):
        s_max_1 = int(round(math.log(max_t) / math.log(s.reduction_factor))) + 1
        out = []
        for b in reversed(range(s_max_1)):
            r0 = int(max_t * s.reduction_factor ** (-b))
            out.append([min(r0 * s.reduction_factor ** k, max_t) for k in range(b + 1)])
        return out
    return []


def merged_rungs(spec: Spec) -> list[float]:
    """The rungs of every bracket below ``max_t``, sorted and distinct (where trials may stop early).

    Args:
        spec: The validated :class:`tuner.spec.Spec`.
    """
    return sorted({r for rungs in bracket_rungs(spec) for r in rungs if r < spec.scheduler_max_t})
