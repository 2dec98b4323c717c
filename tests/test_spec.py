"""Spec loading and validation: the valid forms, and golden error messages for bad specs."""

from pathlib import Path

import pytest
from pydantic import ValidationError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures.paths import ROOT
from tuner.spec import (DISTRIBUTION_TYPES, MAX_NESTING, MAX_YAML_NODES, Spec, SpecError, load_spec, parse_set,
                        parse_yaml)

BAD = sorted((ROOT / "tests" / "bad_specs").glob("*.yaml"))
BASE = "trainable: tests.trainables:quadratic\n"


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_spec_golden_message(path, monkeypatch):
    """Each malformed spec gives exactly the message in its .err file (file:line:col, path, allowed values)."""
    monkeypatch.chdir(ROOT)
    rel = path.relative_to(ROOT).as_posix()
    with pytest.raises(SpecError) as info:
        load_spec(rel)
    assert str(info.value) + "\n" == path.with_suffix(".err").read_text()


def test_corpus_is_large():
    assert len(BAD) >= 110


def test_example_spec_from_the_issue(make_spec):
    spec = load_spec(make_spec("""
name: mnist-asha
trainable: examples.mnist:train
metric: val_accuracy
mode: max
num_samples: 16
max_concurrent_trials: 2
time_budget_s: 900
stop: {training_iteration: 10}
seed: 0
param_space:
  lr:         {type: loguniform, low: 1e-4, high: 1e-1}
  momentum:   {type: uniform, low: 0.5, high: 0.99}
  batch_size: {type: choice, values: [32, 64, 128]}
  channels:   {type: randint, low: 8, high: 65}
  dropout:    {type: quniform, low: 0.0, high: 0.5, q: 0.05}
  epochs: 10
search:    {algorithm: random}
scheduler: {type: asha, time_attr: training_iteration, max_t: 10, grace_period: 1, reduction_factor: 3}
resources: {cpu: 1, gpu: 0}
reporting: {cli: {metric_columns: [val_accuracy, val_loss]}, tensorboard: true}
storage: runs
"""))
    assert spec.param_space["lr"].low == pytest.approx(1e-4)
    assert isinstance(spec.param_space["lr"].low, float)
    assert spec.param_space["epochs"] == 10
    assert spec.scheduler.type == "asha" and spec.scheduler.reduction_factor == 3
    assert spec.reporting.cli.metric_columns == ["val_accuracy", "val_loss"]
    assert spec.mark("param_space.lr") == (12, 15)


@pytest.mark.parametrize("text,value", [("1e-4", 1e-4), ("1E+3", 1e3), ("-2.5e-3", -2.5e-3), (".5", 0.5),
                                        ("3", 3), ("0x10", 16), ("'1e-4'", "1e-4")])
def test_yaml_numbers(text, value):
    data, _ = parse_yaml(f"a: {text}\n")
    assert data["a"] == value and type(data["a"]) is type(value)


@pytest.mark.parametrize("kind,extra", [
    ("uniform", "low: 0, high: 1"), ("quniform", "low: 0, high: 1, q: 0.25"),
    ("loguniform", "low: 1e-4, high: 1e-1"), ("qloguniform", "low: 1, high: 100, q: 1"),
    ("randn", "mean: 0, sd: 2"), ("qrandn", "mean: 0, sd: 2, q: 0.5"),
    ("randint", "low: 1, high: 10"), ("qrandint", "low: 2, high: 10, q: 2"),
    ("lograndint", "low: 1, high: 100"), ("qlograndint", "low: 2, high: 100, q: 2"),
    ("choice", "values: [a, b]"), ("grid", "values: [1, 2, 3]"),
])
def test_every_distribution_type_loads(make_spec, kind, extra):
    spec = load_spec(make_spec(BASE + f"param_space:\n  p: {{type: {kind}, {extra}}}\n"))
    assert spec.param_space["p"].type == kind


@pytest.mark.parametrize("kind,extra,bound", [("quniform", "low: 0, high: 0.33, q: 0.1", "high"),
                                              ("qrandint", "low: 2, high: 9, q: 2", "high"),
                                              ("qlograndint", "low: 3, high: 64, q: 4", "low")])
def test_quantized_bounds_must_be_multiples_of_q(make_spec, kind, extra, bound):
    """README "Distributions": each distribution checks that its bounds are multiples of `q`, `high` as `low`."""
    with pytest.raises(SpecError, match=rf"param_space\.p\.{bound}: {bound} must be a multiple of q"):
        load_spec(make_spec(BASE + f"param_space:\n  p: {{type: {kind}, {extra}}}\n"))


def test_distribution_types_match_ray_names():
    from ray import tune

    for kind in DISTRIBUTION_TYPES:
        assert kind == "grid" or hasattr(tune, kind)


def test_defaults_and_scheduler_chosen_for_bohb(make_spec):
    spec = load_spec(make_spec(BASE + "metric: loss\nmode: min\nsearch: {algorithm: bohb}\n"))
    assert spec.scheduler.type == "bohb"
    spec = load_spec(make_spec(BASE))
    assert (spec.search.algorithm, spec.scheduler.type, spec.num_samples, spec.storage) == ("random", "fifo", 1, "runs")
    assert spec.resources.cpu == 1 and spec.resources.gpu == 0


def test_max_t_defaults_to_stop(make_spec):
    spec = load_spec(make_spec(BASE + "metric: loss\nmode: min\nstop: {training_iteration: 7}\n"
                                      "scheduler: {type: asha}\n"))
    assert spec.scheduler_max_t == 7


def test_spec_is_frozen(make_spec):
    spec = load_spec(make_spec(BASE))
    with pytest.raises(ValidationError):
        spec.num_samples = 5


def test_overrides_merge_and_validate(make_spec):
    path = make_spec(BASE + "metric: loss\nmode: min\nscheduler: {type: asha, max_t: 9}\n")
    spec = load_spec(path, num_samples=4, scheduler={"grace_period": 3}, name=None)
    assert spec.num_samples == 4 and spec.scheduler.max_t == 9 and spec.scheduler.grace_period == 3
    with pytest.raises(SpecError, match="num_samples: must be greater than or equal to 1"):
        load_spec(path, num_samples=0)


def test_mapping_input_errors_name_the_path():
    with pytest.raises(SpecError) as info:
        load_spec({"trainable": "a.b:c", "param_space": {"lr": {"type": "uniform", "low": 2, "high": 1}}})
    assert str(info.value) == "<spec>: param_space.lr.low: `low < high` must hold, but got (low=2.0, high=1.0)."


def test_missing_file(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "nope.yaml")
    assert str(info.value).endswith("nope.yaml: spec file not found; give the path of a YAML spec, "
                                    "e.g. search_spaces/mnist_asha.yaml.")


@pytest.mark.parametrize("name", [".", ".."])
def test_experiment_name_dot_and_dot_dot_are_refused(make_spec, name):
    """README "The spec": an experiment name holds [A-Za-z0-9._-] only, and is never '.' or '..' (the storage folder
    itself, or its parent); a name with dots and more loads."""
    with pytest.raises(SpecError, match=rf"name: name may hold only .*, but got '{name}'\.$"):
        load_spec(make_spec(name=name))
    assert load_spec(make_spec(name=f"v{name}1")).name == f"v{name}1"


def test_min_batch_size_defaults_to_1(make_spec):
    """README "The spec": `min_batch_size`, the floor of `oom_backoff`'s halving, defaults to 1."""
    assert load_spec(make_spec(BASE)).min_batch_size == 1
    with_backoff = BASE + "oom_backoff: batch_size\nparam_space: {batch_size: {type: choice, values: [32, 64]}}\n"
    assert load_spec(make_spec(with_backoff)).min_batch_size == 1


def test_shipped_specs_are_valid():
    for path in sorted((ROOT / "search_spaces").glob("*.yaml")):
        assert isinstance(load_spec(path), Spec), path


_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=8))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(
        ["type", "low", "high", "q", "values", "algorithm", "max_t", "cpu", "x", "metric"]), inner, max_size=4)),
    max_leaves=8)
_keys = st.sampled_from(["name", "trainable", "metric", "mode", "num_samples", "param_space", "search",
                         "scheduler", "resources", "reporting", "stop", "seed", "storage", "bogus"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_keys, _values, max_size=6))
def test_random_field_values_raise_only_spec_errors(data):
    try:
        load_spec(data)
    except SpecError as err:
        assert str(err)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_random_yaml_text_raises_only_spec_errors(text):
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False, encoding="utf-8") as f:
        f.write(text)
    try:
        load_spec(f.name)
    except SpecError as err:
        assert str(err)


# --------------------------------------------------------------------------- hostile and sloppy YAML


def test_anchors_aliases_and_merge_keys_work(make_spec):
    spec = load_spec(make_spec(BASE + """metric: loss
mode: min
param_space:
  encoder: &encoder
    lr: &lr {type: loguniform, low: 1e-4, high: 1e-1}
    dropout: {type: uniform, low: 0.0, high: 0.5}
  decoder:
    <<: *encoder
    dropout: 0.1
  head_lr: *lr
  sizes: &sizes [32, 64, 128]
  width: {type: choice, values: *sizes}
"""))
    space = spec.param_space
    assert space["decoder"]["lr"] == space["encoder"]["lr"] == space["head_lr"]
    assert space["decoder"]["dropout"] == 0.1 and space["encoder"]["dropout"].high == 0.5
    assert space["width"].values == [32, 64, 128]
    assert spec.mark("param_space.decoder.lr") == (6, 9), "a merged key is located where its block gives it"


def _laughs(fan: int, levels: int) -> str:
    """``levels`` anchors, each a list of ``fan`` aliases of the one before: fan**levels strings in all."""
    lines = [BASE + "param_space:", f"  l0: &l0 [{', '.join(['lol'] * fan)}]"]
    lines += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fan)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_alias_expansion_is_bounded():
    data, _ = parse_yaml(_laughs(9, 4))  # 9 + 81 + 729 + 6561 strings: fine
    assert len(data["param_space"]["l3"]) == 9
    with pytest.raises(SpecError) as info:
        parse_yaml(_laughs(9, 9), "laughs.yaml")  # 9**9 strings: refused at the alias that crosses the bound
    (issue,) = info.value.issues
    assert issue.path == "param_space.l5.0" and (issue.line, issue.col) == (8, 12)
    assert f"the alias *l4 expands the spec to more than {MAX_YAML_NODES:,} YAML nodes" in issue.message


def test_nesting_is_bounded(make_spec):
    # The top-level mapping and param_space are levels 1 and 2.
    ok = BASE + "param_space:\n  x: " + "[" * (MAX_NESTING - 2) + "1" + "]" * (MAX_NESTING - 2) + "\n"
    assert load_spec(make_spec(ok)).param_space["x"]
    for opener, closer in (("[", "]"), ("{a: ", "}")):
        deep = BASE + "param_space:\n  x: " + opener * 200 + "1" + closer * 200 + "\n"
        with pytest.raises(SpecError) as info:
            load_spec(make_spec(deep))
        (issue,) = info.value.issues
        assert issue.line == 3 and issue.message.startswith(f"the spec would nest lists and mappings more than "
                                                            f"{MAX_NESTING} levels deep here")
    nested: dict = {"a": 1}
    for _ in range(MAX_NESTING):
        nested = {"a": nested}
    with pytest.raises(SpecError, match="more than 32 levels deep"):  # a mapping from Python alike
        load_spec({"trainable": "a.b:c", "param_space": {"x": nested}})


def test_alias_inside_its_own_anchor_is_refused(make_spec):
    with pytest.raises(SpecError, match=r":3:13: param_space.x.1: the alias \*x lies inside the sequence it names"):
        load_spec(make_spec(BASE + "param_space:\n  x: &x [1, *x]\n"))


def test_syntax_error_names_where_the_construct_began(make_spec):
    text = BASE + "name: x\nmetric: loss\nmode: min\nnum_samples: 2\nparam_space:\n  lr: {type: uniform, low: 0\nseed: 1\n"
    with pytest.raises(SpecError) as info:
        load_spec(make_spec(text))
    assert str(info.value).endswith(
        "spec.yaml:7:7: YAML syntax error: the flow mapping that starts here (line 7, column 7) is not closed: "
        "expected ',' or '}', but found ':' at line 8, column 5.")


@pytest.mark.parametrize("field,yaml_text,expected", [
    ("num_samples", "num_samples: yes", "num_samples: must be a valid integer, but got True (bool); YAML reads yes,"),
    ("cpu", "resources: {cpu: on}", "resources.cpu: must be a valid number, but got True (bool)"),
    ("low", "param_space: {x: {type: uniform, low: true, high: 2}}", "param_space.x.low: must be a valid number"),
    ("budget", "time_budget_s: .inf", "time_budget_s: must be a finite number, but got inf (float)."),
    ("timeout", "trial_timeout_s: .nan", "trial_timeout_s: must be a finite number, but got nan (float)."),
    ("sd", "param_space: {x: {type: randn, sd: .inf}}", "param_space.x.sd: must be a finite number"),
    ("stop", "stop: {training_iteration: .inf}", "stop.training_iteration: must be a finite number"),
    ("bohb", "metric: l\nmode: min\nsearch: {algorithm: bohb, random_fraction: .nan}",
     "search.random_fraction: must be a finite number"),
    ("metric", "metric: ''\nmode: min", "metric: must not be empty or blank, but got ''."),
    ("time_attr", "scheduler: {type: fifo, time_attr: ' '}", "scheduler.time_attr: must not be empty or blank"),
    ("oom_backoff", "oom_backoff: ''", "oom_backoff: must not be empty or blank"),
    ("columns", "reporting: {cli: {metric_columns: ['']}}", "reporting.cli.metric_columns.0: must not be empty"),
    ("stop_key", "stop: {' ': 1}", "stop: a key must not be empty or blank, but got ' '."),
    ("mlflow", "reporting: {mlflow: {experiment_name: ''}}", "reporting.mlflow.experiment_name: must not be empty"),
    ("trainable", "trainable: ' '", "trainable: trainable must be 'package.module:function'"),
])
def test_strict_scalars(make_spec, field, yaml_text, expected):
    text = yaml_text + "\n" if yaml_text.startswith("trainable") else BASE + yaml_text + "\n"
    with pytest.raises(SpecError) as info:
        load_spec(make_spec(text))
    assert expected in str(info.value)


def test_numbers_that_stay_valid(make_spec):
    spec = load_spec(make_spec(BASE + "time_budget_s: 60\nresources: {cpu: 0.5}\nstop: {loss: -1}\n"
                                      "param_space: {x: {type: uniform, low: -1, high: 1e3}, flag: yes}\n"))
    assert spec.time_budget_s == 60.0 and spec.resources.cpu == 0.5 and spec.stop == {"loss": -1.0}
    assert spec.param_space["x"].high == 1000.0 and spec.param_space["flag"] is True  # a constant stays as is


SPEC_WITH_LR = BASE + "metric: loss\nmode: min\nparam_space:\n  lr: {type: uniform, low: 0, high: 1}\n  epochs: 3\n"


def _with_sets(make_spec, *items, text=SPEC_WITH_LR):
    return load_spec(make_spec(text), sets=[parse_set(item) for item in items])


def test_set_through_a_missing_key_is_refused_with_a_hint(make_spec):
    with pytest.raises(SpecError) as info:
        _with_sets(make_spec, "param_space.lrr.low=1e-3")
    assert str(info.value) == (
        "--set param_space.lrr.low=1e-3: param_space.lrr: param_space has no key 'lrr'; did you mean 'lr'? A --set "
        "path may end in a new key, but not create a mapping on the way; the keys in param_space: epochs, lr.")
    with pytest.raises(SpecError, match=r"^--set schedular.max_t=5: schedular: the spec has no key 'schedular'; "
                                        r"did you mean 'scheduler'\?"):
        _with_sets(make_spec, "schedular.max_t=5")
    with pytest.raises(SpecError, match=r"^--set param_space.epochs.low=1: param_space.epochs: param_space.epochs is 3 "
                                        r"\(int\), not a mapping"):
        _with_sets(make_spec, "param_space.epochs.low=1")


def test_set_new_leaves_and_absent_sections(make_spec):
    spec = _with_sets(make_spec, "param_space.data_dir=/data", "num_samples=4", "resources.gpu=0.5",
                      "reporting.cli.progress=false", "param_space.lr.high=0.5", "scheduler={type: asha}",
                      "scheduler.max_t=5")
    assert spec.param_space["data_dir"] == "/data" and spec.num_samples == 4 and spec.resources.gpu == 0.5
    assert spec.reporting.cli.progress is False and spec.param_space["lr"].high == 0.5
    assert spec.scheduler.type == "asha" and spec.scheduler.max_t == 5
    bohb = _with_sets(make_spec, "search.algorithm=bohb", "scheduler.max_t=5", text=BASE + "metric: l\nmode: max\n")
    assert (bohb.scheduler.type, bohb.scheduler.max_t) == ("bohb", 5)  # the section's default type, as when omitted
    with pytest.raises(SpecError, match=r"^--set scheduler.max_t=5: scheduler.type: missing 'type'; allowed: fifo,"):
        _with_sets(make_spec, "scheduler.max_t=5")  # a known section: the path is fine, the value says what is missing


@pytest.mark.parametrize("item,expected", [
    ("scheduler.max_t=0", "--set scheduler.max_t=0: scheduler.max_t: must be greater than or equal to 1, but got 0"),
    ("param_space.lr.low=2", "--set param_space.lr.low=2: param_space.lr.low: `low < high` must hold"),
    ("param_space.lr={high: -1}", "--set param_space.lr={high: -1}: param_space.lr.low: `low < high` must hold"),
    ("num_samples=yes", "--set num_samples=yes: num_samples: must be a valid integer, but got True (bool)"),
    ("metric=", "--set metric=: metric: must not be empty or blank, but got ''."),
    ("scheduler.max_tt=3", "--set scheduler.max_tt=3: scheduler.max_tt: unknown key 'max_tt'; did you mean 'max_t'?"),
    ("param_space.x=[1, 2", "--set param_space.x=[1, 2: param_space.x: the value cannot be read as YAML: YAML syntax "
                            "error: the flow sequence that starts at line 1, column 1 is not closed"),
    ("lr", "--set lr: --set takes KEY=VALUE with a dotted KEY such as scheduler.max_t=5, but this one has no '='."),
    ("a..b=1", "--set a..b=1: --set takes KEY=VALUE with a dotted KEY such as scheduler.max_t=5, but its KEY"),
])
def test_set_errors_name_the_set(make_spec, item, expected):
    text = SPEC_WITH_LR + "scheduler: {type: asha, max_t: 3}\n"
    with pytest.raises(SpecError) as info:
        _with_sets(make_spec, item, text=text)
    assert str(info.value).startswith(expected), str(info.value)
    assert "spec.yaml" not in str(info.value)


def test_spec_errors_after_loading_name_the_set(make_spec):
    spec = _with_sets(make_spec, "param_space.lr.low=0.5", "name=mine")
    assert str(spec.error("param_space.lr.low", "too big.")) == "--set param_space.lr.low=0.5: param_space.lr.low: too big."
    assert str(spec.error("name", "taken.")) == "--set name=mine: name: taken."
    assert str(spec.error("param_space.lr.high", "x.")).endswith("spec.yaml:5:37: param_space.lr.high: x.")


def test_stop_operator_follows_mode(make_spec):
    spec = load_spec(make_spec(BASE + "metric: val_loss\nmode: min\nstop: {val_loss: 0.05, training_iteration: 9}\n"))
    assert spec.stop_criteria == [("val_loss", "<=", 0.05), ("training_iteration", ">=", 9.0)]
    spec = load_spec(make_spec(BASE + "metric: acc\nmode: max\nstop: {acc: 0.9, val_loss: 0.1}\n"))
    assert spec.stop_criteria == [("acc", ">=", 0.9), ("val_loss", ">=", 0.1)]


def test_stop_operator_follows_each_objectives_mode(make_spec):
    """README "stop": `<=` for the spec's own metric under mode min, any objective of several, `>=` for the others."""
    spec = load_spec(make_spec(BASE + "metric: [acc, loss]\nmode: [max, min]\nstop: {loss: 0.1, acc: 0.9}\n"))
    assert spec.stop_criteria == [("loss", "<=", 0.1), ("acc", ">=", 0.9)]


@pytest.mark.parametrize("algo,dist", [
    ("optuna", "{type: qloguniform, low: 1, high: 100, q: 1}"),
    ("optuna", "{type: qlograndint, low: 2, high: 100, q: 2}"),
    ("optuna", "{type: qrandn, mean: 0, sd: 1, q: 0.5}"),
    ("bohb", "{type: qloguniform, low: 1, high: 100, q: 1}"),
    ("bohb", "{type: randn, mean: 0, sd: 1}"),
    ("bohb", "{type: qrandn, mean: 0, sd: 1, q: 0.5}"),
    ("bohb", "{type: qrandint, low: 2, high: 10, q: 2}"),
    ("bohb", "{type: qlograndint, low: 2, high: 100, q: 2}"),
])
def test_searchers_refuse_distributions_they_cannot_represent(make_spec, algo, dist):
    """README "Searchers": BOHB refuses quantized and normal distributions, Optuna qloguniform, qlograndint
    with q > 1 and normal ones."""
    kind = dist.split(",")[0].split()[-1]
    path = make_spec(BASE + f"metric: loss\nmode: min\nsearch: {{algorithm: {algo}}}\nparam_space:\n  p: {dist}\n")
    with pytest.raises(SpecError, match=rf"param_space\.p\.type: search {algo} cannot sample {kind} parameters"
                                        r"( with q > 1 \(got q=2\))?; use an unquantized range or choice instead") as info:
        load_spec(path)
    if "with q > 1" in str(info.value):  # such a type is among the supported ones, with q: 1 only
        assert f"({kind} with q: 1 only)" in str(info.value)


@pytest.mark.parametrize("algo,dist", [
    ("optuna", "{type: qrandint, low: 2, high: 10, q: 2}"),
    ("optuna", "{type: qlograndint, low: 1, high: 100, q: 1}"),
    ("bohb", "{type: qrandint, low: 1, high: 10, q: 1}"),
    ("bohb", "{type: qlograndint, low: 1, high: 100, q: 1}"),
])
def test_searchers_accept_the_quantized_integers_they_represent(make_spec, algo, dist):
    """README "Searchers": only Optuna's qlograndint with q > 1 is refused, so its qrandint takes any q, and q: 1
    is no quantization for either searcher."""
    path = make_spec(BASE + f"metric: loss\nmode: min\nsearch: {{algorithm: {algo}}}\nparam_space:\n  p: {dist}\n")
    spec = load_spec(path)
    assert spec.param_space["p"].type == dist.split(",")[0].split()[-1]
    if algo == "optuna":  # Optuna's IntDistribution keeps the step
        from tuner.search.algorithms import optuna_distributions

        assert optuna_distributions(spec)["p"].step == spec.param_space["p"].q


def test_stop_on_the_metric_under_min_stops_once_it_is_low_enough(ray_local, tmp_path):
    """quadratic reports loss = 1/(i+1) at x=0.3: 1, 0.5, 0.33, 0.25, ...; `stop: {loss: 0.3}` ends it at the 4th."""
    from tuner import tune_model
    from tuner.run.prepare import plan, prepare

    spec = {"name": "stop-min", "trainable": "tests.trainables:quadratic", "metric": "loss", "mode": "min",
            "param_space": {"x": 0.3, "epochs": 10}, "stop": {"loss": 0.3, "training_iteration": 8},
            "resources": {"cpu": 1}, "reporting": {"cli": False, "tensorboard": False}, "storage": str(tmp_path)}
    assert "budget:     stop loss <= 0.3, training_iteration >= 8" in plan(prepare(spec)).splitlines()
    result = tune_model(spec)
    assert result.dataframe["training_iteration"].tolist() == [4]
    assert result.best_metrics["loss"] == pytest.approx(0.25)
    score = tune_model({**spec, "name": "stop-max", "metric": "score", "mode": "max", "stop": {"score": -0.4}})
    assert score.dataframe["training_iteration"].tolist() == [3]  # score = -loss: -1, -0.5, -0.33 >= -0.4


_ANCHOR_VALUES = st.sampled_from(["1", "0.5", "lol", "yes", ".inf", "''", "[]", "{}", "{type: uniform, low: 0, high: 1}"])


@st.composite
def _yaml_with_aliases(draw):
    """A spec whose param_space holds anchored blocks of aliases (cycles, forward references, merges)."""
    n = draw(st.sampled_from([1, 3, 6, 9, 12]))
    laughs = draw(st.booleans())  # every anchor nine aliases of the one before: 9**n values
    lines = [BASE.rstrip("\n"), "param_space:"]
    for i in range(n):
        items = []
        for _ in range(9 if laughs else draw(st.sampled_from([1, 2, 5, 9]))):
            if not i or (not laughs and draw(st.integers(0, 3)) == 0):
                items.append(draw(_ANCHOR_VALUES))
            else:
                items.append(f"*a{i - 1 if laughs else draw(st.integers(0, i - 1))}")
        if draw(st.booleans()):
            body = "{" + ", ".join(f"k{j}: {item}" for j, item in enumerate(items)) + "}"
        else:
            body = "[" + ", ".join(items) + "]"
        lines.append(f"  p{i}: &a{i} {body}")
    if draw(st.booleans()):
        lines.append(f"  merged: {{<<: *a{draw(st.integers(0, n - 1))}, z: 1}}")
    broken = draw(st.sampled_from(["", "", "", "cycle", "undefined"]))
    if broken:  # an alias inside its own anchor, or of an anchor that comes later
        lines.insert(2, "  early: *a0" if broken == "undefined" else "  loop: &loop [1, {k: *loop}]")
    if draw(st.booleans()):
        lines.append(f"  tail: [{', '.join(f'*a{draw(st.integers(0, n - 1))}' for _ in range(draw(st.integers(1, 9))))}]")
    return "\n".join(lines) + "\n"


@st.composite
def _deeply_nested_yaml(draw):
    """A spec with lists and mappings nested up to 2000 deep (PyYAML's composer recurses per
    level), flow or block, closed or not."""
    depth = draw(st.integers(0, 40) | st.sampled_from([64, 500, 2000]))
    kinds = draw(st.lists(st.sampled_from(["[", "{k: ", "block"]), min_size=depth, max_size=depth))
    text, indent = "param_space:\n  x:", "  "
    closers = []
    for kind in kinds:
        if kind == "block" and not closers:
            indent += "  "
            text += f"\n{indent}k:"
        elif kind == "block":
            kind = "["
        if kind != "block":
            text += " " + kind
            closers.append("]" if kind == "[" else "}")
    text += " 1" + "".join(reversed(closers[: len(closers) - draw(st.integers(0, min(2, len(closers))))]))
    return BASE + text + "\n"


def _load_text(text):
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False, encoding="utf-8") as f:
        f.write(text)
    try:
        load_spec(f.name)
    except SpecError as err:
        for line in str(err).splitlines():  # file:line:col on every line
            assert line.startswith(f.name + ":") and line[len(f.name) + 1:].split(":")[0].isdigit(), line
    finally:
        Path(f.name).unlink()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_yaml_with_aliases())
def test_yaml_with_anchors_and_aliases_raises_only_spec_errors(text):
    _load_text(text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_deeply_nested_yaml())
def test_deeply_nested_yaml_raises_only_spec_errors(text):
    _load_text(text)


def test_oversized_file_is_refused_unread(make_spec):
    from tuner.spec import MAX_SPEC_BYTES

    path = make_spec(BASE + "# padding\n" * (MAX_SPEC_BYTES // 10))
    with pytest.raises(SpecError, match=r"spec.yaml: the file holds 1,048,\d+ bytes; a spec may hold at most 1,048,576"):
        load_spec(path)
