"""BOHB's searchers: Ray's ``TuneBOHB`` (Falkner et al., "BOHB: Robust and Efficient Hyperparameter
Optimization at Scale", ICML 2018) told the earlier trials of a warm start, and over a conditional space.

Imported only when ``search.algorithm`` is ``bohb`` (:func:`tuner.search.algorithms.build_searcher`): hpbandster
brings statsmodels and scipy.stats, about 1.3 CPU-s of imports that a run of another searcher never needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ray.tune.search.bohb import TuneBOHB as TuneBOHBBase

from tuner.adapters import ray_internals
from tuner.spec import Spec

if TYPE_CHECKING:
    from tuner.search.warm_start import EarlierTrial

__all__ = ["WarmBOHB", "ConditionalBOHB", "config_space"]


def config_space(spec: Spec) -> Any:
    """A conditional space as a ``ConfigSpace.ConfigurationSpace`` with conditions, for ``TuneBOHB(space=...)``.

    The hyperparameters are the ones Ray's ``TuneBOHB.convert_search_space`` makes of each
    parameter's Ray sampling object (named ``/``-joined, as Ray names them); each condition is
    an ``EqualsCondition`` (one value) or an ``InCondition`` (several), several of them an
    ``AndConjunction``. A branch's constants are not hyperparameters (:class:`ConditionalBOHB`
    adds them).

    Args:
        spec: The validated spec, with a conditional space.

    Returns:
        The configuration space; hpbandster's BOHB models inactive parameters as missing
        (Falkner et al., ICML 2018).
    """
    from ConfigSpace import AndConjunction, EqualsCondition, InCondition

    from tuner.core.params import nest
    from tuner.search.space import ray_domain

    space = spec.space
    sampled = {p.name: ray_domain(p.dist) for p in space.params if p.dist is not None}
    cs = TuneBOHBBase.convert_search_space(nest(sampled))
    for p in space.params:
        if p.dist is None or not p.conditions:
            continue
        parts = [EqualsCondition(cs[p.name], cs[c.parent], c.values[0]) if len(c.values) == 1
                 else InCondition(cs[p.name], cs[c.parent], list(c.values)) for c in p.conditions]
        cs.add(parts[0] if len(parts) == 1 else AndConjunction(*parts))
    return cs


class _EarlierRun:
    """An earlier trial as hpbandster's ``BOHB.new_result`` reads a finished job (the shape of Ray's own
    wrapper in ``TuneBOHB.on_trial_result``): its loss, budget and config."""

    def __init__(self, loss: float, budget: float, config: dict[str, Any]):
        self.result = {"loss": loss}
        self.kwargs = {"budget": budget, "config": dict(config)}
        self.exception = None


class WarmBOHB(TuneBOHBBase):
    """Ray's ``TuneBOHB`` that tells its model the earlier trials of ``search.warm_start`` first.

    Each earlier trial becomes a finished run of hpbandster's ``BOHB`` config generator at the
    budget it reached (its ``time_attr``, the unit of Ray's ``HyperBandForBOHB`` budgets), with the
    loss BOHB minimises (the metric, negated under ``mode: max``): ``BOHB.new_result``, which
    ``TuneBOHB.on_trial_result`` calls for a live trial (Falkner et al., ICML 2018: one kernel
    density model per budget, sampled from the largest budget with enough points). The runs go in
    by budget, smallest first (hpbandster skips a result below a budget it has a model of), the
    model fitted once per budget.

    Args:
        warm: The earlier trials (:class:`tuner.search.warm_start.EarlierTrial`), or None.
        **kwargs: ``TuneBOHB``'s.
    """

    def __init__(self, *args: Any, warm: list[EarlierTrial] | None = None, **kwargs: Any):
        self.tuner_warm = list(warm or [])
        self.tuner_warm_told = False
        super().__init__(*args, **kwargs)
        self.tell_earlier_trials()

    def suggest(self, trial_id: str) -> dict | None:
        """``TuneBOHB.suggest``, without numpy's RuntimeWarnings on the console.

        hpbandster's sampler divides by a categorical's levels less one (statsmodels'
        ``aitchison_aitken`` kernel, zero for a parameter of one level, as an inactive branch
        of a conditional space leaves it) and by densities of zero; numpy warns ("divide by
        zero", "invalid value") and hpbandster floors the ratio at 1e-32, so the sample is
        drawn all the same.
        """
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return super().suggest(trial_id)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        done = super().set_search_properties(metric, mode, config, **spec)
        if done:
            self.tell_earlier_trials()
        return done

    def tell_earlier_trials(self) -> None:
        """Tell BOHB's model the earlier trials, once, as soon as it exists."""
        model = ray_internals.bohb_config_generator(self)
        if not self.tuner_warm or self.tuner_warm_told or model is None:
            return
        sign = -1.0 if self.mode == "max" else 1.0
        runs = sorted(self.tuner_warm, key=lambda t: t.budget)
        for i, t in enumerate(runs):
            last_of_budget = i + 1 == len(runs) or runs[i + 1].budget != t.budget
            model.new_result(_EarlierRun(sign * t.values[0], t.budget, t.config), update_model=last_of_budget)
        self.tuner_warm_told = True


class ConditionalBOHB(WarmBOHB):
    """Ray's ``TuneBOHB`` over a conditional space (:func:`config_space`), whose suggestions carry the
    constants of the branches they take, as plain Python values.

    Args:
        spec: The validated spec, with a conditional space.
        **kwargs: ``TuneBOHB``'s (``bohb_config``, ``seed``, ``points_to_evaluate``), and ``warm``.
    """

    def __init__(self, spec: Spec, **kwargs: Any):
        objective = spec.objectives[0] if spec.objectives else None
        super().__init__(space=config_space(spec), metric=objective.metric if objective else None,
                         mode=objective.mode if objective else None, **kwargs)
        self.tuner_space = spec.space

    def suggest(self, trial_id: str) -> dict | None:
        from tuner.core.params import flatten, nest
        from tuner.search.space import plain

        config = super().suggest(trial_id)
        if not isinstance(config, dict):
            return config
        flat = plain(flatten(config))
        for p in self.tuner_space.order:
            if p.dist is None and self.tuner_space.is_active(p, flat):
                flat[p.name] = p.value
        return nest(self.tuner_space.keyed(flat))
