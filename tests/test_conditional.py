"""Conditional search spaces (``when:`` and choices among sub-spaces), written as YAML.

Property tests: a few hundred configs from every searcher (random's draws, grid's enumeration,
Optuna's define-by-run TPE and BOHB's ConfigSpace, both fed results so their models take over)
each meet every condition of a space with chains, AND-ed conditions, ``in`` sets, a parameter
shared by two branches and a sub-space choice inside a branch; no inactive parameter appears.
The oracle is written out by hand from the YAML, not from tuner's own activity rule. Then
end-to-end runs through the real Ray for each searcher, a resume that adds samples, and PBT.
"""

from __future__ import annotations

import itertools
import re
import random

import pandas as pd
import pytest
import yaml

from tests.fixtures.specs import one_trial_at_a_time
from tuner.experiment.layout import RESULTS_CSV
from tuner.core.params import flatten
from tuner.spec import SpecError, load_spec

SPACE = """
optimizer: {type: choice, values: [sgd, adam, rmsprop]}
momentum:  {type: uniform, low: 0.5, high: 0.99, when: {optimizer: {in: [sgd, rmsprop]}}}
nesterov:  {type: choice, values: [true, false], when: {optimizer: sgd}}
beta2:     {type: loguniform, low: 0.9, high: 0.999, when: {optimizer: adam}}
layers:    {type: randint, low: 1, high: 4}
width2:    {type: choice, values: [32, 64], when: {layers: {in: [2, 3]}}}
width3:    {type: choice, values: [64, 128], when: {layers: 3}}
act3:      {type: choice, values: [relu, gelu], when: {width3: 128, optimizer: adam}}
epochs: 2
model:
  type: choice
  values:
    - name: cnn
      channels: {type: randint, low: 8, high: 65}
      kernel: {type: choice, values: [3, 5]}
      dilation: {type: choice, values: [1, 2], when: {kernel: 5}}
      dropout: {type: uniform, low: 0.0, high: 0.5}
    - name: mlp
      hidden: {type: lograndint, low: 32, high: 1025}
      dropout: {type: uniform, low: 0.0, high: 0.5}
      block:
        type: choice
        values:
          - {name: plain}
          - {name: residual, depth: {type: randint, low: 1, high: 4}}
    - {name: linear, bias: true}
"""

# The same space, every parameter enumerable, for grid search.
GRID = {"momentum": {"grid_points": 2}, "beta2": {"grid_points": 2}, "layers": {"grid_points": 3}}
GRID_BRANCH = {0: {"channels": {"grid_points": 2}, "dropout": {"grid_points": 2}},
               1: {"hidden": {"grid_points": 2}, "dropout": {"grid_points": 2}}}


def expected_keys(flat: dict) -> set[str]:
    """The parameters a config must have, given its parents' values: the YAML's conditions, by hand."""
    want = {"optimizer", "layers", "epochs", "model/name"}
    o = flat.get("optimizer")
    if o in ("sgd", "rmsprop"):
        want.add("momentum")
    if o == "sgd":
        want.add("nesterov")
    if o == "adam":
        want.add("beta2")
    if flat.get("layers") in (2, 3):
        want.add("width2")
    if flat.get("layers") == 3:
        want.add("width3")
    if flat.get("width3") == 128 and o == "adam":
        want.add("act3")
    m = flat.get("model/name")
    if m == "cnn":
        want |= {"model/channels", "model/kernel", "model/dropout"}
        if flat.get("model/kernel") == 5:
            want.add("model/dilation")
    elif m == "mlp":
        want |= {"model/hidden", "model/dropout", "model/block/name"}
        if flat.get("model/block/name") == "residual":
            want.add("model/block/depth")
    elif m == "linear":
        want.add("model/bias")
    return want


def problems(config: dict) -> list[str]:
    """What is wrong with a trial's config: missing or extra parameters, values out of their domain."""
    flat = flatten(config)
    out = []
    want = expected_keys(flat)
    if set(flat) != want:
        out.append(f"keys {sorted(set(flat) ^ want)} wrong in {flat}")
    ranges = {"momentum": (0.5, 0.99), "beta2": (0.9, 0.999), "model/dropout": (0.0, 0.5),
              "layers": (1, 3), "model/channels": (8, 64), "model/hidden": (32, 1024), "model/block/depth": (1, 3)}
    for name, (low, high) in ranges.items():
        if name in flat and not low <= flat[name] <= high:
            out.append(f"{name}={flat[name]} outside [{low}, {high}]")
    if flat.get("model/name") == "linear" and flat.get("model/bias") is not True:
        out.append("the linear branch's constant bias is missing")
    if any(type(v).__module__ == "numpy" for v in flat.values()):
        out.append(f"numpy values in {flat}")
    return out


def _spec(tmp_path, algorithm: str, num_samples: int, grid: bool = False, **extra):
    space = yaml.safe_load(SPACE)
    if grid:
        for name, more in GRID.items():
            space[name].update(more)
        for i, params in GRID_BRANCH.items():
            for name, more in params.items():
                space["model"]["values"][i][name].update(more)
        space["model"]["values"][1]["block"]["values"][1]["depth"]["grid_points"] = 3
    data = {"name": f"cond-{algorithm}", "trainable": "tests.trainables:branchy", "metric": "loss", "mode": "min",
            "num_samples": num_samples, "seed": 7, "param_space": space, "search": {"algorithm": algorithm}, **extra}
    if algorithm == "bohb":
        data["scheduler"] = {"type": "bohb", "max_t": 3}
    path = tmp_path / f"{algorithm}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_spec(path)


def test_random_draws_meet_every_condition(tmp_path):
    from tuner.search.space import presets

    spec = _spec(tmp_path, "random", 400)
    configs = presets(spec)
    assert len(configs) == 400
    bad = [p for c in configs for p in problems({**c, "epochs": 2})]
    assert not bad, bad[:3]
    seen = set().union(*(flatten(c) for c in configs))
    assert {"act3", "model/dilation", "model/block/depth", "model/bias", "nesterov"} <= seen, "every branch is drawn"
    assert presets(spec) == configs, "the same seed draws the same configs"


def test_grid_enumerates_each_valid_combination_once(tmp_path):
    """The grid's configs are exactly the distinct active projections of the full cross product."""
    from tuner.search.space import grid_size, grid_values, presets, ray_num_samples

    spec = _spec(tmp_path, "grid", 2, grid=True)
    configs = [flatten(c) for c in presets(spec)]
    assert len(configs) == 2 * len(configs[: len(configs) // 2]) and configs[: len(configs) // 2] == configs[len(configs) // 2:]
    once = configs[: len(configs) // 2]
    assert all(not problems({**c, "epochs": 2}) for c in once)
    # Brute force: every parameter takes every value (inactive ones too), then drop what the oracle says is inactive.
    values = {p.name: (grid_values(p.dist) if p.dist is not None else [p.value]) for p in spec.space.params}
    names = list(values)
    distinct = set()
    for combo in itertools.product(*values.values()):
        flat = dict(zip(names, combo))
        keep = expected_keys({**flat, "epochs": 2}) - {"epochs"}
        # a child of an inactive parent: recompute on the kept keys until nothing changes
        while True:
            again = expected_keys({k: flat[k] for k in keep}) - {"epochs"}
            if again == keep:
                break
            keep = again & keep
        distinct.add(tuple(sorted((k, repr(flat[k])) for k in keep)))
    assert len(once) == len(distinct)
    assert {tuple(sorted((k, repr(v)) for k, v in c.items())) for c in once} == distinct, "no duplicates, none missing"
    assert grid_size(spec) == len(distinct) and ray_num_samples(spec) == 2 * len(distinct)


def _feed(searcher, n: int, seed: int = 0) -> list[dict]:
    """Ask a searcher for ``n`` configs, telling it a result for each (so its model takes over)."""
    rng = random.Random(seed)
    configs = []
    for i in range(n):
        config = searcher.suggest(f"t{i}")
        assert isinstance(config, dict), config
        configs.append(config)
        result = {"loss": rng.random() + (0.5 if config.get("optimizer") != "adam" else 0.0),
                  "training_iteration": 1, "hyperband_info": {"budget": 1}}
        searcher.on_trial_result(f"t{i}", result)
        searcher.on_trial_complete(f"t{i}", result)
    return configs


@pytest.mark.parametrize("algorithm", ["optuna", "bohb"])
def test_model_based_searchers_suggest_only_valid_configs(tmp_path, algorithm):
    """TPE (define-by-run) and BOHB (ConfigSpace conditions), past their random start-up; no warning reaches
    the console (BOHB's sampler made numpy warn of a division by zero on the conditional space)."""
    import warnings

    from tuner.search.algorithms import build_searcher
    from tuner.search.space import to_ray_space

    spec = _spec(tmp_path, algorithm, 200)
    searcher = build_searcher(spec)
    assert to_ray_space(spec) == {"epochs": 2}, "Ray gets the constants only"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        configs = _feed(searcher, 200)
    assert not [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)], caught[:3]
    bad = [p for c in configs for p in problems({**c, "epochs": 2})]
    assert not bad, bad[:3]
    late = configs[100:]
    assert sum(c["optimizer"] == "adam" for c in late) > len(late) / 3 + 5, "the model learnt adam is better"


def test_validate_prints_the_tree_and_the_exact_grid_count(tmp_path, run_cli):
    _spec(tmp_path, "grid", 1, grid=True)
    out = run_cli("validate", str(tmp_path / "grid.yaml"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("trials:     ") and "valid grid points x 1 repeat" in line for line in lines)
    start = next(i for i, line in enumerate(lines) if line.startswith("space:"))
    tree = [line[12:] for line in lines[start:start + 20]]
    assert tree[0] == "optimizer  choice [sgd, adam, rmsprop]"
    assert "  momentum  uniform [0.5, 0.99)  when optimizer in [sgd, rmsprop]" in tree
    assert "    act3  choice [relu, gelu]  when width3 = 128 and optimizer = adam" in tree
    assert "    model/block/depth  randint [1, 4)  when model/name = mlp and model/block/name = residual" in tree


def test_the_readme_tree_is_what_validate_prints_for_the_readme_space(tmp_path, run_cli):
    """docs/guides/search-spaces.md's "Conditional search spaces": the tree under "prints the space as a tree" is
    the plan's ``space:`` lines for the YAML block above it, line for line (so the page cannot drift)."""
    import re

    from tests.fixtures.paths import doc_text

    section = doc_text("guides/search-spaces.md").split("\n## Conditional search spaces\n", 1)[1].split("\n## ", 1)[0]
    space = re.search(r"```yaml\n(param_space:\n.*?)```", section, re.S)
    shown = re.search(r"prints the space as a tree:\n\n```\n(.*?)```", section, re.S)
    assert space and shown, "the page's conditional-space example or its tree moved"
    spec = {"name": "tree", "trainable": "tests.trainables:quadratic", **yaml.safe_load(space.group(1))}
    (tmp_path / "tree.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    out = run_cli("validate", tmp_path / "tree.yaml")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("space:"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" " * 12))
    assert lines[start:end] == shown.group(1).splitlines()


def test_a_shared_branch_parameter_is_one_parameter(tmp_path):
    spec = _spec(tmp_path, "random", 1)
    dropout = spec.space.get("model/dropout")
    assert [c.describe() for c in dropout.conditions] == ["model/name in [cnn, mlp]"]
    assert [p.name for p in spec.space.params].count("model/dropout") == 1


def test_the_spec_round_trips_through_spec_yaml(tmp_path):
    """A resume reads the experiment's spec.yaml: the conditions and branches come back the same."""
    spec = _spec(tmp_path, "random", 3)
    again = load_spec(yaml.safe_load(yaml.safe_dump(spec.model_dump(mode="json", exclude_unset=True), sort_keys=False)))
    assert again.space == spec.space


def test_when_names_a_parameter_by_dotted_path_or_a_subspace_choice_by_its_key(make_spec):
    """README "Conditional search spaces": a `when` key that names no sibling names a parameter by its dotted path
    (`opt.name`: the parent `opt/name`), and naming a choice among sub-spaces means its branch name (`model`: the
    parent `model/name`)."""
    spec = load_spec(make_spec("""
trainable: tests.trainables:quadratic
param_space:
  opt:
    name: {type: choice, values: [sgd, adam]}
  momentum: {type: uniform, low: 0.5, high: 0.99, when: {opt.name: sgd}}
  model:
    type: choice
    values:
      - {name: cnn, kernel: {type: choice, values: [3, 5]}}
      - {name: mlp}
  width: {type: choice, values: [64, 128], when: {model: mlp}}
"""))
    parents = {p.name: [(c.parent, c.values) for c in p.conditions] for p in spec.space.params if p.conditions}
    assert parents["momentum"] == [("opt/name", ("sgd",))]
    assert parents["width"] == [("model/name", ("mlp",))]
    tree = spec.space.tree()
    assert "  momentum  uniform [0.5, 0.99)  when opt/name = sgd" in tree
    assert "  width  choice [64, 128]  when model/name = mlp" in tree


@pytest.mark.parametrize("parent,good,bad", [
    ("{type: lograndint, low: 1, high: 8}", 7, 8),  # high exclusive
    ("{type: qrandint, low: 2, high: 10, q: 2}", 10, 5),  # high inclusive; only multiples of q
    ("{type: qlograndint, low: 2, high: 16, q: 2}", 16, 18),
])
def test_quantized_and_log_integers_may_be_parents(make_spec, parent, good, bad):
    """README "Conditional search spaces": parents may be `qrandint`, `lograndint` and `qlograndint` too; a value
    the parent takes loads, and one it never takes is refused."""
    text = "trainable: tests.trainables:quadratic\nparam_space:\n  h: {parent}\n" \
           "  w: {{type: choice, values: [1, 2], when: {{h: {value}}}}}\n"
    spec = load_spec(make_spec(text.format(parent=parent, value=good)))
    assert [(c.parent, c.values) for c in spec.space.get("w").conditions] == [("h", (good,))]
    with pytest.raises(SpecError, match=rf"param_space\.w\.when\.h: h is .*, so it can never be {bad};"):
        load_spec(make_spec(text.format(parent=parent, value=bad)))


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["random", "grid", "optuna", "bohb"])
def test_each_searcher_runs_a_conditional_space_end_to_end(ray_local, tmp_path, algorithm):
    """The train function sees only active parameters; results.csv leaves the others blank."""
    from tuner import tune_model

    if algorithm != "grid":
        _spec(tmp_path, algorithm, 6)
    else:  # a small grid, to keep the run short: 2 x 2 optimizers x (2 mlp + 1 linear) = 12
        (tmp_path / "grid.yaml").write_text(yaml.safe_dump({
            "name": "cond-grid", "trainable": "tests.trainables:branchy", "metric": "loss", "mode": "min",
            "search": {"algorithm": "grid"}, "param_space": {
                "optimizer": {"type": "choice", "values": ["sgd", "adam"]},
                "momentum": {"type": "uniform", "low": 0.5, "high": 0.9, "grid_points": 2,
                             "when": {"optimizer": "sgd"}},
                "beta2": {"type": "choice", "values": [0.9, 0.99], "when": {"optimizer": "adam"}},
                "model": {"type": "choice", "values": [
                    {"name": "mlp", "hidden": {"type": "choice", "values": [32, 64]}},
                    {"name": "linear", "bias": True}]}}}, sort_keys=False))
    result = tune_model(tmp_path / f"{algorithm}.yaml", storage=str(tmp_path / "runs"),
                        **one_trial_at_a_time(algorithm))
    rows = pd.read_csv(tmp_path / "runs" / f"cond-{algorithm}" / RESULTS_CSV, keep_default_na=False)
    assert result.num_errors == 0 and len(rows) == (12 if algorithm == "grid" else 6)
    for row in rows.to_dict("records"):
        seen = set(row["keys"].split(","))  # the train function's own config keys
        present = {k[len("config/"):] for k, v in row.items() if k.startswith("config/") and v != ""}
        assert seen == present, (seen, present)
        if algorithm != "grid":
            assert seen == expected_keys({k: _parse(row[f"config/{k}"]) for k in seen})
    if algorithm == "grid":
        configs = [tuple(sorted((k, v) for k, v in r.items() if k.startswith("config/"))) for r in rows.to_dict("records")]
        assert len(set(configs)) == len(configs), "no duplicate configs"
    assert result.best_config and not problems(result.best_config) or algorithm == "grid"


def _parse(text):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)


@pytest.mark.slow
def test_a_resume_with_more_samples_draws_them_from_the_conditional_space(ray_local, tmp_path):
    from tests.test_resume import resume_in_process, run_in_process

    _spec(tmp_path, "random", 3)
    path = tmp_path / "random.yaml"
    run_in_process(path, tmp_path / "runs")
    data = yaml.safe_load(path.read_text())
    data["num_samples"] = 6
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    exp = tmp_path / "runs" / "cond-random"
    result = resume_in_process(exp)
    rows = pd.read_csv(exp / RESULTS_CSV, keep_default_na=False).to_dict("records")
    assert result.num_errors == 0 and len(rows) == 6
    for row in rows:
        seen = set(row["keys"].split(","))
        assert seen == expected_keys({k: _parse(row[f"config/{k}"]) for k in seen}), row


@pytest.mark.slow
def test_pbt_leaves_conditional_parameters_alone(ray_local, tmp_path):
    """PBT's default mutations are the unconditional parameters; a clone takes the top trial's whole config,
    its branch's parameters and all, with only ``lr`` perturbed, and goes on from the top trial's checkpoint
    (tests.trainables:branchy_pbt checkpoints every iteration). Synchronous, 4 trials, quantile 0.25: at
    iteration 2 the worst trial clones the best one."""
    from tuner import tune_model

    data = {"name": "cond-pbt", "trainable": "tests.trainables:branchy_pbt", "metric": "loss", "mode": "min",
            "num_samples": 4, "seed": 3, "stop": {"training_iteration": 4},
            "param_space": {**{k: v for k, v in yaml.safe_load(SPACE).items() if k in ("optimizer", "momentum",
                                                                                   "beta2")},
                            "epochs": 4, "lr": {"type": "loguniform", "low": 1e-3, "high": 1e-1}},
            "scheduler": {"type": "pbt", "perturbation_interval": 2, "synch": True, "resample_probability": 0}}
    spec = load_spec(data)
    assert list(spec.population_mutations) == ["lr"]
    result = tune_model(data, storage=str(tmp_path / "runs"))
    assert result.num_errors == 0
    exp = tmp_path / "runs" / "cond-pbt"
    assert result.perturbations, "the worst trial cloned the best one at iteration 2"
    for p in result.perturbations:
        cloned, new = flatten(p["cloned_config"]), flatten(p["new_config"])
        assert {k for k in set(cloned) | set(new) if cloned.get(k) != new.get(k)} == {"lr"}, p
        assert new["lr"] in (pytest.approx(cloned["lr"] * 0.8), pytest.approx(cloned["lr"] * 1.2)), p
        folder = next(f for f in exp.iterdir() if f.name.endswith(p["trial_id"]))
        after = [r for r in pd.read_csv(folder / "progress.csv", keep_default_na=False).to_dict("records")
                 if r["training_iteration"] > p["cloned_iteration"]]
        # it went on from the cloned trial's checkpoint, with the cloned trial's parameters (and no other)
        assert after and {(r["keys"], r["restored_keys"]) for r in after} == \
            {(",".join(sorted(new)), ",".join(sorted(cloned)))}, (after, p)
    rows = pd.read_csv(exp / RESULTS_CSV, keep_default_na=False).to_dict("records")
    for row in rows:
        seen = set(row["keys"].split(","))
        assert ("momentum" in seen) == (row["config/optimizer"] in ("sgd", "rmsprop")), row
        assert ("beta2" in seen) == (row["config/optimizer"] == "adam"), row


def test_a_branch_own_version_of_a_key_is_named_key_at_branch(tmp_path, run_cli):
    """A key that a branch gives its own distribution is its own parameter, ``optimizer/lr@adam`` in the plan's
    tree; the config (and the plan's list of parameters, as results.csv's columns) has one key."""
    (tmp_path / "own.yaml").write_text(yaml.safe_dump({
        "name": "own", "trainable": "tests.trainables:quadratic", "param_space": {"optimizer": {"type": "choice", "values": [
            {"name": "sgd", "lr": {"type": "loguniform", "low": 5e-3, "high": 8e-2}},
            {"name": "adam", "lr": {"type": "loguniform", "low": 3e-4, "high": 1e-2}}]}}}, sort_keys=False))
    out = run_cli("validate", tmp_path / "own.yaml", "--storage", tmp_path / "runs")
    assert out.returncode == 0, out.stderr
    assert "parameters: optimizer/name, optimizer/lr\n" in out.stdout
    assert ("  optimizer/lr  loguniform [0.005, 0.08)  when optimizer/name = sgd\n"
            "              optimizer/lr@adam  loguniform [0.0003, 0.01)  when optimizer/name = adam\n") in out.stdout


#: Random search over a conditional space, two points to evaluate: the first names only the optimizer (momentum,
#: active under sgd, is drawn), the second sets adam's beta2.
CONSOLE_SPEC = """\
name: cond-console
trainable: tests.trainables:branchy
metric: loss
mode: min
num_samples: 4
seed: 7
param_space:
  optimizer: {type: choice, values: [sgd, adam]}
  momentum: {type: uniform, low: 0.5, high: 0.99, when: {optimizer: sgd}}
  beta2: {type: uniform, low: 0.9, high: 0.999, when: {optimizer: adam}}
  epochs: 2
search: {algorithm: random, points_to_evaluate: [{optimizer: sgd}, {optimizer: adam, beta2: 0.99}]}
reporting: {cli: {max_report_frequency: 1}, tensorboard: false}
"""


@pytest.mark.slow
def test_random_search_completes_a_point_and_the_console_leaves_inactive_parameters_out(tmp_path, run_cli,
                                                                                       on_session_ray):
    """`tuner run` under random search: a point to evaluate is completed from the conditional space (sgd gets a
    momentum, no beta2); the console's table leaves an inactive parameter's cell blank, and the best-trial lines
    (the table's and the closing one) list only the parameters the best trial has."""
    import ast

    from tests.fixtures.console import console_reports

    (tmp_path / "cond.yaml").write_text(CONSOLE_SPEC)
    proc = run_cli("run", tmp_path / "cond.yaml", "--storage", tmp_path / "runs", env=on_session_ray)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = pd.read_csv(tmp_path / "runs" / "cond-console" / RESULTS_CSV, dtype={"trial_id": str})
    by_index = {int(t.rsplit("_", 1)[1]): r for t, r in zip(rows["trial_id"], rows.to_dict("records"))}
    first, second = by_index[0], by_index[1]  # the points, in order
    assert first["config/optimizer"] == "sgd" and 0.5 <= first["config/momentum"] < 0.99
    assert pd.isna(first["config/beta2"]) and first["keys"] == "epochs,momentum,optimizer"
    assert second["config/optimizer"] == "adam" and second["config/beta2"] == 0.99
    assert pd.isna(second["config/momentum"]) and second["keys"] == "beta2,epochs,optimizer"
    active = {"sgd": {"optimizer", "momentum"}, "adam": {"optimizer", "beta2"}}
    table = console_reports(proc.stdout)[-1]
    assert len(table["rows"]) == 4
    for trial_id, cells in table["rows"].items():
        inactive = {"momentum", "beta2"} - active[cells["optimizer"]]
        assert [cells[name] for name in sorted(inactive)] == [""], (trial_id, cells)
        assert all(cells[name] != "" for name in active[cells["optimizer"]]), (trial_id, cells)
    best_row = rows.iloc[0]
    best = active[best_row["config/optimizer"]]
    current = re.findall(r"^Current best trial: (\S+) with last loss=\S+ and parameters=(\{.*\})$", proc.stdout,
                         re.M)
    assert current and current[-1][0] == best_row["trial_id"], "the last table's best trial"
    assert set(ast.literal_eval(current[-1][1])) == best
    closing = re.search(r"^Best trial (\S+): loss=\S+ config=(\{.*\})$", proc.stdout, re.M)
    assert closing and closing.group(1) == best_row["trial_id"]
    assert set(ast.literal_eval(closing.group(2))) == best | {"epochs"}
