"""Search-space translation: every distribution's Ray sampler keeps the documented bounds."""

import numpy as np
import pytest
from ray.tune.search.sample import Categorical, Domain

from tuner.spec.conditions import sampled_params
from tuner.search.space import grid_size, grid_values, plain, to_ray_space
from tuner.spec import load_spec

BASE = {"trainable": "tests.trainables:quadratic"}


def space(params, **extra):
    return load_spec({**BASE, "param_space": params, **extra})


def samples(dist, n=3000):
    domain = to_ray_space(space({"p": dist}))["p"]
    assert isinstance(domain, Domain)
    return np.asarray(domain.sample(size=n, random_state=np.random.default_rng(0)))


@pytest.mark.parametrize("dist,lo,hi,kind", [
    ({"type": "uniform", "low": -1, "high": 2}, -1, 2, float),
    ({"type": "loguniform", "low": 1e-4, "high": 1e-1}, 1e-4, 1e-1, float),
    ({"type": "quniform", "low": 0, "high": 0.5, "q": 0.05}, 0, 0.5, float),
    ({"type": "qloguniform", "low": 1, "high": 100, "q": 1}, 1, 100, float),
])
def test_float_bounds(dist, lo, hi, kind):
    xs = samples(dist)
    assert xs.min() >= lo - 1e-12 and xs.max() <= hi + 1e-12
    if "q" in dist:
        assert np.allclose(xs / dist["q"], np.round(xs / dist["q"]))


def test_randint_high_is_exclusive():
    xs = samples({"type": "randint", "low": 8, "high": 12})
    assert set(xs.tolist()) == {8, 9, 10, 11}


def test_qrandint_high_is_inclusive():
    xs = samples({"type": "qrandint", "low": 2, "high": 10, "q": 2})
    assert set(xs.tolist()) == {2, 4, 6, 8, 10}


def test_lograndint_high_is_exclusive():
    xs = samples({"type": "lograndint", "low": 1, "high": 4})
    assert set(xs.tolist()) == {1, 2, 3}


def test_qlograndint_multiples_of_q_inclusive():
    xs = samples({"type": "qlograndint", "low": 4, "high": 64, "q": 4})
    assert xs.min() >= 4 and xs.max() <= 64 and all(x % 4 == 0 for x in xs.tolist())


def test_randn_moments():
    xs = samples({"type": "randn", "mean": 3, "sd": 0.5}, n=20000)
    assert abs(xs.mean() - 3) < 0.02 and abs(xs.std() - 0.5) < 0.02
    qs = samples({"type": "qrandn", "mean": 0, "sd": 1, "q": 0.5})
    assert np.allclose(qs * 2, np.round(qs * 2))


@pytest.mark.parametrize("dist", [{"type": "uniform", "low": -1, "high": 2},
                                  {"type": "loguniform", "low": 1e-4, "high": 1e-1}])
def test_uniform_and_loguniform_never_reach_high(dist):
    """README distributions table: uniform and loguniform sample `[low, high)`: Ray gets the bounds unchanged and
    an unquantized sampler, and no sample is high."""
    domain = to_ray_space(space({"p": dist}))["p"]
    assert (domain.lower, domain.upper) == (dist["low"], dist["high"])
    assert type(domain.sampler).__name__ in ("_Uniform", "_LogUniform"), domain.sampler  # not Quantized
    xs = samples(dist, n=2000)
    assert xs.min() >= dist["low"] and xs.max() < dist["high"]


def test_randn_defaults_to_mean_0_and_sd_1():
    """README distributions table: `randn`'s `mean` defaults to 0 and `sd` to 1."""
    spec = space({"p": {"type": "randn"}})
    assert (spec.param_space["p"].mean, spec.param_space["p"].sd) == (0, 1)
    sampler = to_ray_space(spec)["p"].sampler
    assert (sampler.mean, sampler.sd) == (0, 1)


def test_qrandint_q_defaults_to_1_with_high_exclusive():
    """README distributions table: `qrandint`'s `q` defaults to 1, and with `q: 1` high is exclusive."""
    assert space({"p": {"type": "qrandint", "low": 8, "high": 12}}).param_space["p"].q == 1
    xs = samples({"type": "qrandint", "low": 8, "high": 12})
    assert set(xs.tolist()) == {8, 9, 10, 11}


def test_qlograndint_with_q_1_excludes_high():
    """README distributions table: `qlograndint` samples `[low, high]`, but with `q: 1` high is exclusive (Ray's
    sampler): seeded, high never appears, while with `q: 2` it does."""
    xs = samples({"type": "qlograndint", "low": 1, "high": 4, "q": 1})
    assert set(xs.tolist()) == {1, 2, 3}
    xs = samples({"type": "qlograndint", "low": 2, "high": 8, "q": 2})
    assert set(xs.tolist()) == {2, 4, 6, 8}


def test_a_choice_of_unnamed_constant_mappings_stays_rays_choice_of_dicts():
    """README "Conditional search spaces": a choice of unnamed constant mappings stays what it was, Ray's
    `tune.choice` of dicts, not a choice among sub-spaces."""
    values = [{"depth": 2, "width": 64}, {"depth": 3, "width": 32}]
    spec = space({"arch": {"type": "choice", "values": values}})
    assert not spec.space.conditional and spec.space.get("arch/name") is None
    domain = to_ray_space(spec)["arch"]
    assert isinstance(domain, Categorical) and domain.categories == values


@pytest.mark.parametrize("dist", [
    {"type": "loguniform", "low": 1e-4, "high": 1e-1},
    {"type": "qloguniform", "low": 1, "high": 100, "q": 1},
    {"type": "lograndint", "low": 1, "high": 100},
    {"type": "qlograndint", "low": 4, "high": 64, "q": 4},
])
def test_base_is_accepted_and_changes_nothing(dist):
    """README distributions table: `base` is accepted and changes nothing (a log-uniform distribution is the same
    in every base)."""
    plain_domain = to_ray_space(space({"p": dist}))["p"]
    based = to_ray_space(space({"p": {**dist, "base": 2}}))["p"]
    assert (based.lower, based.upper, type(based.sampler)) == (plain_domain.lower, plain_domain.upper,
                                                                type(plain_domain.sampler))
    assert getattr(based.sampler, "q", None) == getattr(plain_domain.sampler, "q", None)
    assert samples({**dist, "base": 2}).tolist() == pytest.approx(samples(dist).tolist())


def test_choice_and_grid():
    xs = samples({"type": "choice", "values": ["a", "b", "c"]})
    assert set(xs.tolist()) == {"a", "b", "c"}
    ray_space = to_ray_space(space({"g": {"type": "grid", "values": [1, 2]}}))
    assert ray_space["g"] == {"grid_search": [1, 2]}


def test_constants_and_nesting_pass_through():
    ray_space = to_ray_space(space({"epochs": 5, "opt": {"name": "sgd", "lr": {"type": "uniform", "low": 0, "high": 1}}}))
    assert ray_space["epochs"] == 5 and ray_space["opt"]["name"] == "sgd"
    assert isinstance(ray_space["opt"]["lr"], Domain)
    assert sampled_params(space({"epochs": 5, "opt": {"lr": {"type": "uniform", "low": 0, "high": 1}}})) == ["opt/lr"]


def test_grid_search_enumerates_choice_and_ranges():
    spec = space({
        "opt": {"type": "choice", "values": ["adam", "sgd"]},
        "lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2, "grid_points": 3},
        "n": {"type": "randint", "low": 1, "high": 5, "grid_points": 4},
        "g": {"type": "grid", "values": [0, 1]},
    }, search={"algorithm": "grid"}, num_samples=2)
    ray_space = to_ray_space(spec)
    assert ray_space["opt"] == {"grid_search": ["adam", "sgd"]}
    assert ray_space["lr"]["grid_search"] == pytest.approx([1e-4, 1e-3, 1e-2])
    assert ray_space["n"] == {"grid_search": [1, 2, 3, 4]}
    assert grid_size(spec) == 2 * 3 * 4 * 2


@pytest.mark.parametrize("dist,expected", [
    ({"type": "uniform", "low": 0, "high": 1, "grid_points": 5}, [0, 0.25, 0.5, 0.75, 1]),
    ({"type": "quniform", "low": 0, "high": 1, "q": 0.5, "grid_points": 5}, [0, 0.5, 1]),
    ({"type": "qrandint", "low": 0, "high": 10, "q": 5, "grid_points": 3}, [0, 5, 10]),
    ({"type": "lograndint", "low": 1, "high": 101, "grid_points": 3}, [1, 10, 100]),
])
def test_grid_values(dist, expected):
    spec = space({"p": dist}, search={"algorithm": "grid"})
    assert grid_values(spec.param_space["p"]) == pytest.approx(expected)


def test_random_search_keeps_grid_params_as_grid():
    spec = space({"g": {"type": "grid", "values": [1, 2, 3]}, "x": {"type": "uniform", "low": 0, "high": 1}},
                 num_samples=2)
    assert grid_size(spec) == 3
    assert isinstance(to_ray_space(spec)["x"], Domain)


def test_plain_turns_numpy_into_python():
    out = plain({"a": np.str_("adam"), "b": np.float64(0.5), "c": [np.int64(3)], "d": {"e": np.bool_(True)}})
    assert out == {"a": "adam", "b": 0.5, "c": [3], "d": {"e": True}}
    assert type(out["a"]) is str and type(out["b"]) is float and type(out["c"][0]) is int
    assert type(out["d"]["e"]) is bool
