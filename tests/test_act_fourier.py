"""Fourier activation (paper 001 Sec 3.3, Eq. 24): definition, gradients, variance-preserving init, fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from visionbench import activations
from visionbench.activations.fourier import Fourier, bessel_i0_2, fourier_gain

from .fixtures import derivative, gradcheck_module


def reference(x: np.ndarray, a: np.ndarray, f: np.ndarray, phi: np.ndarray) -> np.ndarray:
    """a_0 + sqrt(2) sum_k a_k cos(f_k x - phi_k) / k!, plain float64 (paper 001 Eq. 24)."""
    out = np.full_like(x, a[0], dtype=np.float64)
    for k in range(1, len(a)):
        out += math.sqrt(2) * a[k] / math.factorial(k) * np.cos(f[k - 1] * x - phi[k - 1])
    return out


def params(act: Fourier, row: int | None = None) -> tuple[np.ndarray, ...]:
    pick = (lambda p: p[row]) if row is not None else (lambda p: p)
    return tuple(pick(p).detach().numpy() for p in (act.weight, act.frequency, act.phase))


def test_registered_and_defaults():
    act = activations.create("fourier")
    assert isinstance(act, Fourier) and act.degree == 6
    assert bessel_i0_2() == pytest.approx(2.2795853023360673, rel=1e-14)  # I_0(2)
    a = torch.ones(7) / math.sqrt(bessel_i0_2())  # Cor 3.14, Eq. 15
    a[0] *= math.sqrt(1 - 1 / math.factorial(6) ** 2)
    torch.testing.assert_close(act.weight.detach(), a)
    torch.testing.assert_close(act.frequency.detach(), torch.arange(1.0, 7.0))  # Sec 3.5: f_k = k
    torch.testing.assert_close(act.phase.detach(), torch.full((6,), math.pi / 4))  # phi_k = pi/4
    assert all(p.requires_grad for p in act.parameters())
    vp = activations.create("fourier", init="variance_preserving")
    torch.testing.assert_close(vp.weight.detach(), act.weight.detach())


@pytest.mark.parametrize("degree", [1, 3, 6])
def test_forward_matches_definition(degree):
    torch.manual_seed(degree)
    act = activations.create("fourier", degree=degree).double()
    act.set_coefficients(
        weight=torch.randn(degree + 1, dtype=torch.float64),
        frequency=torch.rand(degree, dtype=torch.float64) * 5,
        phase=torch.randn(degree, dtype=torch.float64),
    )
    x = torch.linspace(-5, 5, 201, dtype=torch.float64)
    np.testing.assert_allclose(act(x).detach().numpy(), reference(x.numpy(), *params(act)), rtol=1e-12, atol=1e-12)


def test_init_is_the_sine_cosine_series_of_thm_3_13():
    # sqrt(2) cos(kx - pi/4) = cos kx + sin kx: the init is Def 3.12 with a_k = b_k (Eq. 68), over sqrt(I_0(2)).
    act = activations.create("fourier").double()
    act.reset_parameters("default")
    x = np.linspace(-4, 4, 101)
    a0 = math.sqrt(1 - 1 / math.factorial(6) ** 2)
    want = a0 + sum((np.cos(k * x) + np.sin(k * x)) / math.factorial(k) for k in range(1, 7))
    np.testing.assert_allclose(
        act(torch.from_numpy(x)).detach().numpy(), want / math.sqrt(bessel_i0_2()), rtol=1e-12, atol=1e-12
    )


@pytest.mark.parametrize("kwargs", [{}, {"per_channel": True, "num_channels": 3}])
def test_gradcheck_input_and_coefficients(kwargs):
    torch.manual_seed(0)
    act = activations.create("fourier", degree=4, **kwargs).double()
    names = [n for n, _ in act.named_parameters()]
    assert names == ["weight", "frequency", "phase"]
    assert gradcheck_module(act, torch.randn(2, 3, 2, 2, dtype=torch.float64))


def test_per_channel_shapes_and_layout():
    torch.manual_seed(1)
    act = activations.create("fourier", degree=3, per_channel=True, num_channels=4).double()
    assert act.weight.shape == (4, 4) and act.frequency.shape == (4, 3) and act.phase.shape == (4, 3)
    with torch.no_grad():
        for p in act.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(2, 4, 3, 3, dtype=torch.float64)
    y = act(x)
    for c in range(4):
        np.testing.assert_allclose(y[:, c].detach().numpy(), reference(x[:, c].numpy(), *params(act, c)), rtol=1e-10)
    nhwc = activations.create("fourier", degree=3, per_channel=True, num_channels=4, channel_dim=-1).double()
    nhwc.load_state_dict(act.state_dict())
    torch.testing.assert_close(nhwc(x.permute(0, 2, 3, 1)), y.permute(0, 2, 3, 1))


def test_variance_preserving_monte_carlo():
    # Thm 3.13 / Cor 3.14 assume x ~ U(-pi, pi) (Assumption 3.11), not N(0, 1):
    # E[F^2] = E[F'^2] = (sum_{k<n} 1/(k!)^2) / I_0(2).
    act = activations.create("fourier", init="variance_preserving").double()
    x = (torch.rand(10**6, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 2 - 1) * math.pi
    y, dy = derivative(act, x)
    forward, backward = float(y.square().mean()), float(dy.square().mean())
    closed = fourier_gain(6)
    assert forward == pytest.approx(backward, rel=0.01)
    assert forward == pytest.approx(closed, rel=0.01) and backward == pytest.approx(closed, rel=0.01)


@pytest.mark.parametrize("degree", [1, 2, 6, 9])
def test_variance_preserving_exact_on_a_periodic_grid(degree):
    # The rectangle rule on a full period is exact for trigonometric polynomials of low enough degree.
    act = activations.create("fourier", degree=degree).double()
    act.reset_parameters("variance_preserving")
    x = torch.arange(64, dtype=torch.float64) * (2 * math.pi / 64) - math.pi
    y, dy = derivative(act, x)
    assert float(y.square().mean()) == pytest.approx(fourier_gain(degree), rel=1e-12)
    assert float(dy.square().mean()) == pytest.approx(fourier_gain(degree), rel=1e-12)


def test_fit_moves_frequencies_and_forward_matches():
    act = activations.create("fourier", init="gelu").double()
    assert not torch.allclose(act.frequency.detach(), torch.arange(1.0, 7.0, dtype=torch.float64))
    x = torch.linspace(-3, 3, 301, dtype=torch.float64)
    y, dy = derivative(act, x)
    assert (y - torch.nn.functional.gelu(x)).abs().max() < 1e-3
    pc = activations.create("fourier", init="silu", per_channel=True, num_channels=3)
    for p in pc.parameters():
        assert torch.equal(p[0], p[2])
    frozen = activations.create("fourier", init="gelu", learnable=False)
    assert not any(p.requires_grad for p in frozen.parameters())
    assert frozen.fit("gelu").max_abs_error < 1e-4


def test_options_and_errors():
    act = activations.get_act_layer("fourier", degree=2)(inplace=True)
    x = torch.randn(3, 5)
    assert act(x).shape == x.shape and act(x).dtype == torch.float32
    for bad in (0, 1.5, None):
        with pytest.raises(ValueError, match="integer >= 1"):
            activations.create("fourier", degree=bad)
