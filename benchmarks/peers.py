"""Peers for the search-efficiency benchmark: Optuna's OWN loop, no Ray and no tuner.

``optuna.create_study`` + ``study.optimize`` with Optuna's TPE (``TPESampler(seed=...)``) and a
pruner, on the same multi-fidelity analytic objectives as tuner's methods
(``benchmarks/workloads.py``): each trial reports its value at every fidelity step with
``trial.report`` and asks ``trial.should_prune``, as Optuna's documentation writes a pruned
objective. Two pruners:

* ``peer-optuna+hyperband``: ``optuna.pruners.HyperbandPruner`` (min resource 1, max resource the
  objective's ``max_t``, reduction factor 3; Li et al., JMLR 2018, as Optuna implements it over
  successive halving);
* ``peer-optuna+median``: Optuna's default pruner, ``MedianPruner()`` (5 start-up trials, no warm-up
  steps).

The budget is the same as tuner's methods': every step any trial runs is counted, pruned or not,
and the study stops at the step past the budget: the trial that would run it is cut there
(``study.stop()``, the trial marked pruned), as tuner's last trials are cut by the budget file.
Trials run one at a time (``n_jobs=1``, Optuna's default loop), where tuner's methods run two at a
time on two CPUs.

The step log has the shape of tuner's: ``(trial, reported value, true value)`` in the order the
steps ran, plus the rank of the step at which each trial completed (ran its ``max_t`` steps), so
that the regret can be read by Optuna's own rule (``study.best_trial``: the best COMPLETED trial)
or by tuner's (the trial with the best latest reported value).
"""

from __future__ import annotations

import time

PEERS = ("peer-optuna+hyperband", "peer-optuna+median")


def _suggest(trial, name: str, dist: dict):
    """Optuna's suggestion for one tuner ``param_space`` entry (the types the analytic objectives use).

    Raises:
        ValueError: A distribution type the objectives do not use.
    """
    kind = dist["type"]
    if kind == "uniform":
        return trial.suggest_float(name, float(dist["low"]), float(dist["high"]))
    if kind == "loguniform":
        return trial.suggest_float(name, float(dist["low"]), float(dist["high"]), log=True)
    if kind == "choice":
        return trial.suggest_categorical(name, list(dist["values"]))
    if kind == "randint":
        return trial.suggest_int(name, int(dist["low"]), int(dist["high"]) - 1)
    raise ValueError(f"no Optuna suggestion for a {kind!r} distribution")


def pruner_for(peer: str, max_t: int):
    """The Optuna pruner of a peer.

    Args:
        peer: One of :data:`PEERS`.
        max_t: The objective's highest fidelity, in steps (Hyperband's max resource).

    Raises:
        KeyError: An unknown peer.
    """
    import optuna

    if peer == "peer-optuna+hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max_t, reduction_factor=3)
    if peer == "peer-optuna+median":
        return optuna.pruners.MedianPruner()
    raise KeyError(peer)


def run_peer(objective: str, peer: str, seed: int, budget_steps: int) -> dict:
    """One Optuna study on an analytic objective, at a budget of ``budget_steps`` iterations.

    Args:
        objective: A name in ``benchmarks.workloads.OBJECTIVES``.
        peer: One of :data:`PEERS`.
        seed: ``TPESampler(seed=seed)``, and the objective's own noise seed (as tuner's runs).
        budget_steps: Steps (reports) the whole study may run.

    Returns:
        The run as tuner's methods' (``benchmarks/search_efficiency.run_one``): ``objective``,
        ``method``, ``seed``, ``seconds`` (the study's wall time), ``trials`` (trials that ran a step),
        ``steps`` (``[trial, reported value, true value]`` in order), plus ``completed``: ``[rank,
        trial]`` for each trial that ran all ``max_t`` steps, the 1-based rank of its last step.
    """
    import optuna

    from benchmarks.workloads import OBJECTIVES

    obj = OBJECTIVES[objective]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    steps: list[tuple[str, float, float]] = []
    completed: list[tuple[int, str]] = []

    def train(trial) -> float:
        config = {name: _suggest(trial, name, dist) for name, dist in obj.param_space.items()}
        values = obj.values(config, seed)
        true_value = obj.true_value(config)
        trial_id = str(trial.number)
        value = float("nan")
        for t in range(1, obj.max_t + 1):
            if len(steps) >= budget_steps:
                # The budget is spent: this trial is cut before the step (Optuna records it as
                # pruned, so it is never the best completed trial) and the study ends after it.
                trial.study.stop()
                raise optuna.TrialPruned()
            value = values(t)
            steps.append((trial_id, value, true_value))
            if t == obj.max_t:
                break
            trial.report(value, t)
            if trial.should_prune():
                raise optuna.TrialPruned()
        completed.append((len(steps), trial_id))
        return value

    # A fixed study name: HyperbandPruner puts a trial in a bracket by a hash of the study's name and the
    # trial's number, so a generated name would make the same seed give other brackets, another run.
    study = optuna.create_study(study_name=f"{objective}-{peer}-{seed}", direction="minimize",
                                sampler=optuna.samplers.TPESampler(seed=seed), pruner=pruner_for(peer, obj.max_t))
    start = time.perf_counter()
    # More trials than the budget can ever use (each runs a step at least): the budget ends it.
    study.optimize(train, n_trials=budget_steps + 1)
    seconds = time.perf_counter() - start
    return {"objective": objective, "method": peer, "seed": seed, "seconds": seconds,
            "trials": len({s[0] for s in steps}), "steps": steps, "completed": completed, "ray_error": None}
