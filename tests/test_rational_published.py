"""Rational's `init_source="rational_activations"`: the coefficients rational-activations 0.2.0 ships
(paper 004's starting point, 004 App G / 004 code), evaluated as the package evaluates them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from visionbench import activations
from visionbench.activations import fused
from visionbench.activations.rational import Rational
from visionbench.config import ConfigError, act_options, run_config
from visionbench.sweep.preflight import load_config

# Copied by hand from rational/rationals_config.json of the rational_activations-0.2.0 wheel,
# "Rational_version_A5/4" -> approx_func -> (init_w_numerator, init_w_denominator): a second copy,
# so that a slip in visionbench/activations/rational_published.py fails here.
PACKAGE = {
    "leaky_relu": (
        [
            0.029792778657264946,
            0.6183735264987601,
            2.323309062531321,
            3.051936237265109,
            1.4854203263828845,
            0.2510244961111299,
        ],
        [-1.1419548357285474, 4.393159974992486, 0.8714712309957245, 0.34719662339598834],
    ),
    "gelu": (
        [
            -0.0012423594497499122,
            0.5080497063245629,
            0.41586363182937475,
            0.13022718688035761,
            0.024355900098993424,
            0.00290283948155535,
        ],
        [-0.06675015696494944, 0.17927646217001553, 0.03746682605496631, 1.6561610853276082e-10],
    ),
}


def package_version_a(x: np.ndarray, num: list[float], den: list[float]) -> np.ndarray:
    """The package's version A (`Rational_PYTORCH_A_F`) in numpy float64: powers x^0..x^5 times
    (a_0..a_5) for P, and |(1, b_1..b_4, 0) * (x^0..x^5)| summed for Q."""
    powers = np.vander(x, len(num), increasing=True)
    p = powers @ np.asarray(num)
    weights = np.concatenate([[1.0], den, np.zeros(len(num) - len(den) - 1)])
    q = np.abs(powers * weights).sum(axis=1)
    return p / q


def condition_scale(x: np.ndarray, num: list[float], den: list[float]) -> np.ndarray:
    """(sum |a_i x^i| + |F| sum |b_j x^j|) / Q: the size rounding in P and Q can give an error in F
    (Horner here, explicit powers there), so near F's zeros the comparison is not purely relative."""
    ax = np.abs(x)
    pa = np.vander(ax, len(num), increasing=True) @ np.abs(num)
    qa = np.vander(ax, len(den) + 1, increasing=True)[:, 1:] @ np.abs(den)
    return (pa + np.abs(package_version_a(x, num, den)) * qa) / (1.0 + qa)


def grid() -> np.ndarray:
    """Dense on [-10, 10] plus the points where a layout slip would show first (0, +-1, +-3, +-10)."""
    special = [0.0, 1e-6, -1e-6, 1.0, -1.0, 3.0, -3.0, 7.5, -7.5, 10.0, -10.0]
    return np.concatenate([np.linspace(-10.0, 10.0, 4001), special])


def published(init: str, **kwargs) -> Rational:
    return activations.create("rational", init=init, init_source="rational_activations", **kwargs)


def published64(init: str) -> Rational:
    """Built with float64 parameters, so they hold the published numbers unrounded."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return published(init)
    finally:
        torch.set_default_dtype(old)


@pytest.mark.parametrize("init", ["leaky_relu", "gelu"])
@pytest.mark.parametrize("path", ["reference", "fast"])
def test_published_init_reproduces_the_package_formula_in_float64(init, path):
    act = published64(init).eval()
    x = grid()
    expected = package_version_a(x, *PACKAGE[init])
    with torch.no_grad():
        if path == "reference":
            with fused.reference_path():
                got = act(torch.from_numpy(x)).numpy()
        else:
            got = act(torch.from_numpy(x)).numpy()
    assert np.all(np.abs(got - expected) <= 1e-13 * condition_scale(x, *PACKAGE[init]))
    assert np.abs(got - expected).max() < 1e-12  # |x| up to 10, F up to ~10


@pytest.mark.parametrize("init", ["leaky_relu", "gelu"])
def test_published_coefficients_are_stored_exactly(init):
    act = published(init).double()
    num, den = PACKAGE[init]
    # float32 parameters round the numbers; .double() after construction keeps that rounding
    np.testing.assert_allclose(act.numerator.detach().numpy(), np.float32(num), rtol=0, atol=0)
    np.testing.assert_allclose(act.denominator.detach().numpy(), np.float32(den), rtol=0, atol=0)
    exact = published64(init)
    assert exact.numerator.tolist() == num and exact.denominator.tolist() == den


def test_float32_module_matches_the_float64_package_formula():
    x = grid()
    for init in ("leaky_relu", "gelu"):
        got = published(init).eval()(torch.from_numpy(x).float()).detach().double().numpy()
        expected = package_version_a(x, *PACKAGE[init])
        np.testing.assert_allclose(got, expected, rtol=2e-6, atol=2e-6)


def test_published_leaky_relu_is_the_slope_001_fit():
    """The package's "leaky_relu" fit is to slope 0.01 (not 0.1): within 0.03 of it on [-3, 3]."""
    x = np.linspace(-3.0, 3.0, 601)
    f = package_version_a(x, *PACKAGE["leaky_relu"])
    assert np.abs(f - np.where(x > 0, x, 0.01 * x)).max() < 0.031
    assert np.abs(f - np.where(x > 0, x, 0.1 * x)).max() > 0.25


@pytest.mark.parametrize("init, near, far_at_least", [("leaky_relu", 0.011, 0.9), ("gelu", 0.005, 2.0)])
def test_published_and_fresh_fit_agree_on_the_fit_interval_only(init, near, far_at_least):
    """Measured: max |published - fresh fit| is 0.0101 / 0.0039 on [-3, 3] (leaky_relu / gelu) and
    1.04 (at x = 10) / 2.23 (at x = -10) on [-10, 10]: the two inits are different activations
    where plain VGG and the norm-free ViT put many inputs."""
    x = torch.linspace(-10.0, 10.0, 2001, dtype=torch.float64)
    fresh_act = activations.create("rational", init=init).double().eval()  # fits: not under no_grad
    with torch.no_grad():
        fresh = fresh_act(x)
        pub = published64(init).eval()(x)
    diff = (fresh - pub).abs()
    inside = x.abs() <= 3.0
    assert float(diff[inside].max()) < near
    assert float(diff.max()) > far_at_least


def test_fit_source_is_still_the_default_and_explicit_fit_refits():
    act = activations.create("rational", init="gelu")
    assert act.init_source == "fit"
    assert act.numerator.tolist() != pytest.approx(PACKAGE["gelu"][0])
    pub = published("gelu")
    pub.reset_parameters("leaky_relu")  # reset follows the source
    assert pub.numerator.tolist() == pytest.approx(PACKAGE["leaky_relu"][0], rel=1e-6)
    result = pub.fit("gelu")  # an explicit fit (a swap's fit_to_replaced) always fits
    assert result.max_abs_error < 2.5e-3
    assert pub.numerator.tolist() != pytest.approx(PACKAGE["gelu"][0], rel=1e-3)


def test_published_init_per_channel_and_default_init():
    act = published("default", per_channel=True, num_channels=3)
    assert torch.allclose(act.numerator, torch.tensor(PACKAGE["gelu"][0]).float().expand(3, -1))
    assert "init_source='rational_activations'" in repr(act)


@pytest.mark.parametrize(
    "kwargs, names",
    [
        ({"init": "relu"}, "init 'relu'"),
        ({"init": "gelu", "version": "B"}, "version B"),
        ({"init": "gelu", "degrees": (3, 2)}, "degrees (3, 2)"),
        ({"init": "variance_preserving"}, "init 'variance_preserving'"),
    ],
)
def test_unpublished_combinations_raise_a_clear_error(kwargs, names):
    with pytest.raises(ValueError, match="no published coefficients") as info:
        activations.create("rational", init_source="rational_activations", **kwargs)
    message = str(info.value)
    assert names in message
    assert "version A, degrees (5, 4), init gelu" in message and "init leaky_relu" in message


def test_unknown_init_source_is_refused():
    with pytest.raises(ValueError, match="init_source 'pau'; accepted: fit, rational_activations"):
        activations.create("rational", init_source="pau")


@pytest.mark.parametrize(
    "recipe, label, init",
    [
        ("cifar10_vgg4", "rational", "leaky_relu"),
        ("tinyimagenet_vit_s8", "rational", "gelu"),
        ("cifar10_vgg4_aug", "rational[init=gelu]", "gelu"),  # Rational 2: the bracket keeps the source
        ("cifar10_vgg4_aug", "rational[init=leaky_relu]", "leaky_relu"),
    ],
)
def test_recipes_start_the_rational_from_the_published_coefficients(recipe, label, init):
    cfg = load_config([f"recipe={recipe}", f"act={label}"])
    family, options = act_options(cfg, label)
    assert family == "rational" and options["init_source"] == "rational_activations"
    run = run_config(cfg, label, seed=0)
    act = activations.create(family, **run["act_options"][family])
    assert (act.version, act.degrees) == ("A", (5, 4))
    assert act.numerator.tolist() == pytest.approx(PACKAGE[init][0], rel=1e-6)
    assert act.denominator.tolist() == pytest.approx(PACKAGE[init][1], rel=1e-6)


def test_recipe_with_an_unpublished_init_fails_before_training():
    with pytest.raises(ConfigError, match="no published coefficients"):
        load_config(["recipe=cifar10_vgg4", "act=rational[init=relu]"])
