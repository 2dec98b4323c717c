"""Spec loading and validation: the valid forms, and golden error messages for bad specs."""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner.spec import DISTRIBUTION_TYPES, Spec, SpecError, load_spec, parse_yaml

ROOT = Path(__file__).resolve().parents[1]
BAD = sorted((ROOT / "tests" / "bad_specs").glob("*.yaml"))
BASE = "trainable: tests.trainables:quadratic\n"


def write(tmp_path, text, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_spec_golden_message(path, monkeypatch):
    """Each malformed spec gives exactly the message in its .err file (file:line:col, path, allowed values)."""
    monkeypatch.chdir(ROOT)
    rel = path.relative_to(ROOT).as_posix()
    with pytest.raises(SpecError) as info:
        load_spec(rel)
    assert str(info.value) + "\n" == path.with_suffix(".err").read_text()


def test_corpus_is_large():
    assert len(BAD) >= 40


def test_example_spec_from_the_issue(tmp_path):
    spec = load_spec(write(tmp_path, """
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
def test_every_distribution_type_loads(tmp_path, kind, extra):
    spec = load_spec(write(tmp_path, BASE + f"param_space:\n  p: {{type: {kind}, {extra}}}\n"))
    assert spec.param_space["p"].type == kind


def test_distribution_types_match_ray_names():
    from ray import tune

    for kind in DISTRIBUTION_TYPES:
        assert kind == "grid" or hasattr(tune, kind)


def test_defaults_and_scheduler_chosen_for_bohb(tmp_path):
    spec = load_spec(write(tmp_path, BASE + "metric: loss\nmode: min\nsearch: {algorithm: bohb}\n"))
    assert spec.scheduler.type == "bohb"
    spec = load_spec(write(tmp_path, BASE))
    assert (spec.search.algorithm, spec.scheduler.type, spec.num_samples, spec.storage) == ("random", "fifo", 1, "runs")
    assert spec.resources.cpu == 1 and spec.resources.gpu == 0


def test_max_t_defaults_to_stop(tmp_path):
    spec = load_spec(write(tmp_path, BASE + "metric: loss\nmode: min\nstop: {training_iteration: 7}\n"
                                            "scheduler: {type: asha}\n"))
    assert spec.scheduler_max_t == 7


def test_spec_is_frozen(tmp_path):
    spec = load_spec(write(tmp_path, BASE))
    with pytest.raises(Exception):
        spec.num_samples = 5


def test_overrides_merge_and_validate(tmp_path):
    path = write(tmp_path, BASE + "metric: loss\nmode: min\nscheduler: {type: asha, max_t: 9}\n")
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
