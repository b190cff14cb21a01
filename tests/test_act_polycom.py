"""PolyReLU and PolyNorm (paper 000 Sec 2, App D): definitions, normalisation dim, gradients, fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from visionbench import activations

from .families import assert_matches_formula
from .fixtures import gradcheck_module


def ref_polyrelu(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    r = np.maximum(x, 0.0)
    return a[0] + sum(a[i] * r**i for i in range(1, len(a)))


def ref_polynorm(x: np.ndarray, a: np.ndarray, axis: int, eps: float = 1e-6) -> np.ndarray:
    """App D's `_poly_norm`, with the mean taken over `axis` instead of the last dim."""
    out = np.full_like(x, a[0], dtype=np.float64)
    for i in range(1, len(a)):
        p = x**i
        out += a[i] * p / np.sqrt((p**2).mean(axis=axis, keepdims=True) + eps)
    return out


@pytest.mark.parametrize("name", ["polyrelu", "polynorm"])
def test_defaults_match_paper(name):
    act = activations.create(name)
    assert act.degree == 3
    torch.testing.assert_close(act.weight.detach(), torch.tensor([0.0, 1 / 3, 1 / 3, 1 / 3]))  # Sec 2
    act4 = activations.create(name, degree=4)
    torch.testing.assert_close(act4.weight.detach(), torch.tensor([0.0, 0.25, 0.25, 0.25, 0.25]))


@pytest.mark.parametrize("degree", [1, 3, 5])
def test_polyrelu_matches_definition(degree):
    assert_matches_formula("polyrelu", degree, ref_polyrelu, (-3, 3), 121, 1e-12)


@pytest.mark.parametrize(
    "shape, axis, kwargs",
    [
        ((2, 6, 3, 4), 1, {}),  # NCHW conv map: channels (dim 1), not width
        ((2, 5, 6), 2, {}),  # tokens: last dim
        ((7, 6), 1, {}),  # plain features
        ((2, 3, 4, 6), 3, {"channel_dim": -1}),  # NHWC (ConvNeXt MLP) passes channel_dim=-1
    ],
)
def test_polynorm_matches_definition_over_channel_dim(shape, axis, kwargs):
    torch.manual_seed(0)
    act = activations.create("polynorm", **kwargs).double()
    a = torch.randn(4, dtype=torch.float64)
    act.set_coefficients(weight=a)
    x = torch.randn(*shape, dtype=torch.float64)
    np.testing.assert_allclose(act(x).detach().numpy(), ref_polynorm(x.numpy(), a.numpy(), axis), rtol=1e-10)


def test_polynorm_layouts_agree():
    torch.manual_seed(0)
    x = torch.randn(2, 8, 5, 5, dtype=torch.float64)
    nchw = activations.create("polynorm").double()
    nhwc = activations.create("polynorm", channel_dim=-1).double()
    torch.testing.assert_close(nhwc(x.permute(0, 2, 3, 1)), nchw(x).permute(0, 2, 3, 1))
    # each term is normalised: unit mean square over channels at every position
    act = activations.create("polynorm", degree=2).double()
    act.set_coefficients(weight=torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))
    ms, m4 = act(x).square().mean(dim=1), x.pow(4).mean(dim=1)
    torch.testing.assert_close(ms, m4 / (m4 + 1e-6))


@pytest.mark.parametrize("name", ["polyrelu", "polynorm"])
@pytest.mark.parametrize("kwargs", [{}, {"per_channel": True, "num_channels": 3}])
def test_gradcheck_input_and_coefficients(name, kwargs):
    torch.manual_seed(0)
    act = activations.create(name, **kwargs).double()
    x = torch.randn(2, 3, 2, 2, dtype=torch.float64)
    x = x + 0.1 * torch.sign(x)  # keep ReLU's kink away from the finite-difference steps
    assert gradcheck_module(act, x)
    assert gradcheck_module(act, torch.randn(4, 3, dtype=torch.float64) + 0.5)


@pytest.mark.parametrize("name, ref", [("polyrelu", None), ("polynorm", 1)])
def test_per_channel_shapes_and_layout(name, ref):
    torch.manual_seed(2)
    act = activations.create(name, per_channel=True, num_channels=4).double()
    assert act.weight.shape == (4, 4)
    with torch.no_grad():
        act.weight.copy_(torch.randn(4, 4))
    x = torch.randn(2, 4, 3, 3, dtype=torch.float64)
    y = act(x).detach().numpy()
    for c in range(4):
        a = act.weight[c].detach().numpy()
        if name == "polyrelu":
            want = ref_polyrelu(x[:, c].numpy(), a)
        else:  # normalisation still couples the channels; the coefficients are per channel
            want = ref_polynorm(x.numpy(), np.broadcast_to(a, (4,)), axis=1)[:, c]
        np.testing.assert_allclose(y[:, c], want, rtol=1e-10, atol=1e-12)


def test_polynorm_fit_is_the_standard_normal_surrogate():
    # Documented meaning of the fit: for x ~ N(0, 1) over a wide feature dim, mean(x^2i) -> (2i-1)!!.
    act = activations.create("polynorm", init="gelu").double()
    a = act.weight.detach().numpy()
    x = np.linspace(-3, 3, 61)
    surrogate = (
        a[0] + a[1] * x / math.sqrt(1 + 1e-6) + a[2] * x**2 / math.sqrt(3 + 1e-6) + a[3] * x**3 / math.sqrt(15 + 1e-6)
    )
    np.testing.assert_allclose(act.fit_forward(torch.from_numpy(x)).detach().numpy(), surrogate, rtol=1e-12)
    assert np.abs(surrogate - torch.nn.functional.gelu(torch.from_numpy(x)).numpy()).max() <= 0.25
    # the layer itself, on tokens whose features are N(0, 1), computes (nearly) the surrogate
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(1, 400_000, dtype=torch.float64, generator=g)
    feats[0, :61] = torch.from_numpy(x)
    out = act(feats)[0, :61].detach().numpy()
    assert np.abs(out - surrogate).max() < 0.05


def test_polyrelu_fit_relu_is_exact():
    act = activations.create("polyrelu", init="relu").double()
    torch.testing.assert_close(
        act.weight.detach(), torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64), atol=1e-6, rtol=0
    )


@pytest.mark.parametrize("name", ["polyrelu", "polynorm"])
def test_options_and_errors(name):
    frozen = activations.create(name, learnable=False)
    assert not any(p.requires_grad for p in frozen.parameters())
    act = activations.get_act_layer(name)(inplace=True)
    x = torch.randn(2, 3, 4, 4)
    assert act(x).shape == x.shape and act(x).dtype == torch.float32
    for bad in (0, -2, 1.5, "x"):
        with pytest.raises(ValueError, match="integer >= 1"):
            activations.create(name, degree=bad)
    with pytest.raises(ValueError, match="variance-preserving"):
        activations.create(name, init="variance_preserving")
