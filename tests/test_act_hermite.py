"""Hermite activation (paper 001 Sec 3.2): definition, gradients, variance-preserving init, fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from visionbench import activations
from visionbench.activations.hermite import Hermite, hermite_gain

from .families import assert_matches_formula
from .fixtures import derivative, gradcheck_module


def reference(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    """F = sum_k a_k He_k(x) / k! with He_k / k! from the explicit sum (paper 001 Eq. 22), float64."""
    out = np.zeros_like(x, dtype=np.float64)
    for n, a_n in enumerate(a):
        term = sum(
            (-1) ** m * x ** (n - 2 * m) / (math.factorial(m) * math.factorial(n - 2 * m) * 2**m)
            for m in range(n // 2 + 1)
        )
        out += a_n * term
    return out


def test_registered_and_defaults():
    act = activations.create("hermite")
    assert isinstance(act, Hermite) and act.degree == 3 and not act.clamp
    a = torch.tensor([math.sqrt(1 - 1 / 6), 1, 1, 1]) / math.sqrt(math.e)  # Cor 3.9, Eq. 11
    torch.testing.assert_close(act.weight.detach(), a)
    vp = activations.create("hermite", init="variance_preserving")
    torch.testing.assert_close(vp.weight.detach(), act.weight.detach())


@pytest.mark.parametrize("degree", [1, 2, 3, 4, 7])
def test_forward_matches_explicit_formula(degree):
    assert_matches_formula("hermite", degree, reference, (-4, 4), 201, 1e-10)


def test_clamp_matches_sigmoid_clamp_then_hermite():
    act = activations.create("hermite", clamp=True).double()
    act.set_coefficients(clamp_limit=torch.tensor([1.3], dtype=torch.float64))
    x = torch.linspace(-6, 6, 101, dtype=torch.float64)
    z = (1 / (1 + np.exp(-x.numpy())) - 0.5) * 2 * 1.3  # torchortho's LearnableClamp form
    want = reference(z, act.weight.detach().numpy())
    np.testing.assert_allclose(act(x).detach().numpy(), want, rtol=1e-12, atol=1e-12)
    assert act.clamp_limit.requires_grad


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"clamp": True},
        {"per_channel": True, "num_channels": 3},
        {"per_channel": True, "num_channels": 3, "clamp": True},
    ],
)
def test_gradcheck_input_and_coefficients(kwargs):
    torch.manual_seed(0)
    act = activations.create("hermite", degree=4, **kwargs).double()
    assert gradcheck_module(act, torch.randn(2, 3, 2, 2, dtype=torch.float64))


def test_per_channel_shapes_and_layout():
    torch.manual_seed(1)
    act = activations.create("hermite", per_channel=True, num_channels=4).double()
    assert act.weight.shape == (4, 4)
    with torch.no_grad():
        act.weight.copy_(torch.randn(4, 4))
    x = torch.randn(2, 4, 3, 3, dtype=torch.float64)
    y = act(x)
    for c in range(4):  # NCHW: channel c uses coefficient row c
        want = reference(x[:, c].numpy(), act.weight[c].detach().numpy())
        np.testing.assert_allclose(y[:, c].detach().numpy(), want, rtol=1e-10, atol=1e-12)
    tokens = torch.randn(5, 7, 4, dtype=torch.float64)  # tokens: channels last
    yt = act(tokens)
    np.testing.assert_allclose(
        yt[..., 2].detach().numpy(), reference(tokens[..., 2].numpy(), act.weight[2].detach().numpy()), rtol=1e-10
    )


def test_variance_preserving_monte_carlo():
    # Thm 3.8 / Cor 3.9: E[F^2] = E[F'^2] = (sum_{k<n} 1/k!) / e for x ~ N(0, 1) (Assumption 3.4).
    act = activations.create("hermite", init="variance_preserving").double()
    x = torch.randn(10**6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y, dy = derivative(act, x)
    forward, backward = float(y.square().mean()), float(dy.square().mean())
    closed = hermite_gain(3)
    assert closed == pytest.approx((1 + 1 + 0.5) / math.e)
    assert forward == pytest.approx(backward, rel=0.01)
    assert forward == pytest.approx(closed, rel=0.01) and backward == pytest.approx(closed, rel=0.01)


@pytest.mark.parametrize("degree", [1, 2, 3, 5, 10])
def test_variance_preserving_exact_by_quadrature(degree):
    # Gauss-Hermite(e) quadrature is exact for these polynomials: the closed form holds to rounding.
    nodes, weights = np.polynomial.hermite_e.hermegauss(degree + 2)
    weights = weights / math.sqrt(2 * math.pi)
    act = activations.create("hermite", degree=degree).double()
    act.reset_parameters("variance_preserving")  # coefficients in float64, not rounded float32 ones
    y, dy = derivative(act, torch.from_numpy(nodes))
    assert float((weights * y.numpy() ** 2).sum()) == pytest.approx(hermite_gain(degree), rel=1e-10)
    assert float((weights * dy.numpy() ** 2).sum()) == pytest.approx(hermite_gain(degree), rel=1e-10)


def test_fit_matches_target_through_forward():
    act = activations.create("hermite", degree=8, init="gelu").double()
    x = torch.linspace(-3, 3, 301, dtype=torch.float64)
    assert (act(x) - torch.nn.functional.gelu(x)).abs().max() < 5e-3
    pc = activations.create("hermite", degree=8, init="gelu", per_channel=True, num_channels=3)
    assert torch.equal(pc.weight[0], pc.weight[2])


def test_options_and_errors():
    frozen = activations.create("hermite", learnable=False)
    assert not any(p.requires_grad for p in frozen.parameters())
    timm_style = activations.get_act_layer("hermite")(inplace=True)
    x = torch.randn(3, 5)
    assert timm_style(x).shape == x.shape and x.dtype == timm_style(x).dtype
    for bad in (0, -1, 2.5, "3", True):
        with pytest.raises(ValueError, match="integer >= 1"):
            activations.create("hermite", degree=bad)
    with pytest.raises(ValueError, match="num_channels"):
        activations.create("hermite", per_channel=True)
