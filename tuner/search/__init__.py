"""Choosing trials and stopping them: the search space, searchers, schedulers, the forecast.

* :mod:`tuner.search.space`: the spec's ``param_space`` as Ray Tune sampling objects;
* :mod:`tuner.search.algorithms`: the searcher and scheduler factory; :mod:`tuner.search.bohb`,
  :mod:`tuner.search.population` (PBT, PB2), :mod:`tuner.search.warm_start`;
* :mod:`tuner.search.scheduler_state`: a scheduler's state across ``tuner resume``;
* :mod:`tuner.search.schedule`: PBT's perturbations and a trial's schedule;
* :mod:`tuner.search.pareto`: several objectives, the Pareto front, the hypervolume;
* :mod:`tuner.search.rungs` and :mod:`tuner.search.forecast`: the scheduler's rungs and the
  budget forecast;
* :mod:`tuner.search.seeds`: each trial's own seed.
"""
