"""SLAF (paper 003 Sec 2.1): normalised Taylor basis with BatchNorm-style statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate

from visionbench import activations
from visionbench.activations.slaf import SLAF, normal_power_stats

from .fixtures import check_fit, gradcheck_module

EPS = 1e-5


def ref_train(x: np.ndarray, a: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Output, batch means and biased variances (rows = powers 1..k, columns = channels)."""
    others = tuple(d for d in range(x.ndim) if d != axis)
    out, means, variances = np.full_like(x, a[0]), [], []
    for i in range(1, len(a)):
        p = x**i
        m, v = p.mean(axis=others, keepdims=True), p.var(axis=others, keepdims=True)
        out = out + a[i] * (p - m) / np.sqrt(v + EPS)
        means.append(m.reshape(-1))
        variances.append(v.reshape(-1))
    return out, np.array(means), np.array(variances)


def ref_eval(x: np.ndarray, a: np.ndarray, axis: int, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """mean, var: (C, k) running statistics."""
    shape = [1] * x.ndim
    shape[axis] = -1
    out = np.full_like(x, a[0])
    for i in range(1, len(a)):
        out = out + a[i] * (x**i - mean[:, i - 1].reshape(shape)) / np.sqrt(var[:, i - 1].reshape(shape) + EPS)
    return out


def test_defaults_and_relu_like_init():
    act = activations.create("slaf")
    assert isinstance(act, SLAF) and act.degree == 2 and act.momentum == 0.01  # 003 code: taylor(decay=0.99)
    assert act.running_mean.shape == (1, 2)  # lazy until the first training batch
    torch.testing.assert_close(act.running_mean, torch.tensor([[0.0, 1.0]]))  # E[x], E[x^2] for N(0, 1)
    torch.testing.assert_close(act.running_var, torch.tensor([[1.0, 2.0]]))
    # a is the L2(N(0, 1)) projection of ReLU: the residual is orthogonal to every basis function
    act = act.double()
    act.reset_parameters("default")
    a = act.weight.detach().numpy()
    np.testing.assert_allclose(a, [1 / math.sqrt(2 * math.pi), 0.5, 1 / (2 * math.sqrt(math.pi))], rtol=1e-5)
    mean, var = (t.numpy() for t in normal_power_stats(2))
    basis = [lambda x: 1.0] + [lambda x, i=i: (x**i - mean[i - 1]) / math.sqrt(var[i - 1] + EPS) for i in (1, 2)]

    def f(x):
        return a[0] + a[1] * basis[1](x) + a[2] * basis[2](x)

    for phi in basis:
        residual = integrate.quad(
            lambda x: (f(x) - max(x, 0.0)) * phi(x) * math.exp(-x * x / 2), -12, 12, points=[0.0]
        )[0]
        assert abs(residual) < 1e-8
    a3 = activations.create("slaf", degree=3).weight.detach()  # higher k solves the same normal equations
    assert a3.shape == (4,) and a3[1] == pytest.approx(0.5, rel=1e-5)


@pytest.mark.parametrize("degree", [1, 2, 3])
@pytest.mark.parametrize(
    "shape, axis, kwargs",
    [
        ((8, 3, 4, 4), 1, {}),
        ((4, 6, 3), 2, {}),
        ((16, 3), 1, {}),
        ((4, 3, 3, 5), 3, {"channel_dim": -1}),
    ],
)
def test_train_forward_and_running_stats(degree, shape, axis, kwargs):
    torch.manual_seed(degree)
    act = activations.create("slaf", degree=degree, momentum=0.25, **kwargs).double()
    a = torch.randn(degree + 1, dtype=torch.float64)
    act.set_coefficients(weight=a)
    x = torch.randn(*shape, dtype=torch.float64) * 1.5 + 0.7
    init_mean, init_var = (t.numpy() for t in normal_power_stats(degree))
    y = act(x)
    want, bm, bv = ref_train(x.numpy(), a.numpy(), axis)
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-10, atol=1e-10)
    n = x.numel() // shape[axis]
    c = shape[axis]
    assert act.running_mean.shape == (c, degree)
    np.testing.assert_allclose(act.running_mean.numpy(), 0.75 * init_mean + 0.25 * bm.T, rtol=1e-12)
    np.testing.assert_allclose(act.running_var.numpy(), 0.75 * init_var + 0.25 * bv.T * n / (n - 1), rtol=1e-12)


def test_eval_uses_running_stats_deterministically():
    torch.manual_seed(0)
    act = activations.create("slaf", num_channels=3).double()
    x = torch.randn(8, 3, 4, 4, dtype=torch.float64) * 2 + 1
    for _ in range(5):
        y_train = act(x)
    act.eval()
    before = {k: v.clone() for k, v in act.state_dict().items()}
    y1, y2 = act(x), act(x)
    assert torch.equal(y1, y2)
    for k, v in act.state_dict().items():
        assert torch.equal(v, before[k])  # eval never updates the statistics
    rm, rv = act.running_mean.numpy(), act.running_var.numpy()
    np.testing.assert_allclose(
        y1.detach().numpy(), ref_eval(x.numpy(), act.weight.detach().numpy(), 1, rm, rv), rtol=1e-10, atol=1e-12
    )
    assert not torch.allclose(y1, y_train)  # running averages are not this batch's statistics
    assert "training" not in vars(SLAF) and act.training is False
    act.train()
    torch.testing.assert_close(act(x), y_train)  # training output depends only on the batch


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("kwargs", [{}, {"per_channel": True, "num_channels": 3}])
def test_gradcheck_input_and_coefficients(mode, kwargs):
    torch.manual_seed(0)
    act = activations.create("slaf", degree=3, **kwargs).double()
    act(torch.randn(6, 3, 2, 2, dtype=torch.float64) + 0.5)  # non-trivial running statistics for eval
    act.train(mode == "train")
    assert gradcheck_module(act, torch.randn(3, 3, 2, 2, dtype=torch.float64))
    assert gradcheck_module(act, torch.randn(5, 3, dtype=torch.float64))


def test_state_dict_round_trip():
    torch.manual_seed(0)
    x = torch.randn(8, 5, 3, 3) * 3 - 1
    lazy = activations.create("slaf")
    lazy(x)
    lazy(x * 0.5)
    sd = lazy.state_dict()
    assert set(sd) == {"weight", "running_mean", "running_var"} and sd["running_mean"].shape == (5, 2)
    lazy.eval()
    for fresh in (activations.create("slaf"), activations.create("slaf", num_channels=5)):
        fresh.load_state_dict(sd)
        fresh.eval()
        assert fresh.running_mean.shape == (5, 2)
        torch.testing.assert_close(fresh(x), lazy(x), rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="size mismatch"):
        activations.create("slaf", num_channels=4).load_state_dict(sd)


def test_lazy_statistics_and_channel_errors():
    act = activations.create("slaf").eval()
    x = torch.randn(4, 7, 2, 2)
    ref = ref_eval(
        x.double().numpy(),
        act.weight.detach().double().numpy(),
        1,
        *(np.repeat(t.numpy()[None], 7, 0) for t in normal_power_stats(2)),
    )
    np.testing.assert_allclose(act(x).detach().numpy(), ref, rtol=1e-5, atol=1e-5)  # broadcast before training
    assert act.running_mean.shape == (1, 2)
    act.train()
    act(x)
    assert act.running_mean.shape == (7, 2)
    with pytest.raises(ValueError, match="statistics are for 7 channels"):
        act(torch.randn(4, 6, 2, 2))
    with pytest.raises(ValueError, match="more than one value per channel"):
        activations.create("slaf")(torch.randn(1, 3))


def test_per_channel_shapes_and_layout():
    torch.manual_seed(3)
    act = activations.create("slaf", per_channel=True, num_channels=4).double()
    assert act.weight.shape == (4, 3) and act.running_mean.shape == (4, 2)
    with torch.no_grad():
        act.weight.copy_(torch.randn(4, 3))
    x = torch.randn(6, 4, 3, 3, dtype=torch.float64)
    y = act(x).detach().numpy()
    for c in range(4):
        want, _, _ = ref_train(x[:, c : c + 1].numpy(), act.weight[c].detach().numpy(), 1)
        np.testing.assert_allclose(y[:, c : c + 1], want, rtol=1e-10, atol=1e-12)


def test_penalty_is_l2_of_the_non_constant_coefficients():
    act = activations.create("slaf", per_channel=True, num_channels=2).double()
    with torch.no_grad():
        act.weight.copy_(torch.tensor([[5.0, 1.0, 2.0], [-5.0, 3.0, -1.0]]))
    pen = act.penalty()
    assert float(pen.detach()) == pytest.approx(1 + 4 + 9 + 1)
    pen.backward()
    torch.testing.assert_close(act.weight.grad, torch.tensor([[0.0, 2.0, 4.0], [0.0, 6.0, -2.0]], dtype=torch.float64))


@pytest.mark.parametrize("target", ["gelu", "relu"])
def test_fit_tolerance_and_meaning(target):
    act = activations.create("slaf", num_channels=3)
    act(torch.randn(8, 3, 2, 2) * 4)  # statistics far from N(0, 1): fit must reset them
    check_fit(act, target, SLAF.fit_tolerance[target])  # also: fit restores the training mode
    # the fitted function is the eval-mode layer with N(0, 1) statistics
    act = act.double().eval()
    x = torch.linspace(-3, 3, 61, dtype=torch.float64)
    torch.testing.assert_close(act(x[:, None].expand(-1, 3)), act.fit_forward(x)[:, None].expand(-1, 3))


def test_options_and_errors():
    frozen = activations.create("slaf", learnable=False, inplace=True)
    assert not any(p.requires_grad for p in frozen.parameters())
    act = activations.get_act_layer("slaf")(inplace=True)
    x = torch.randn(4, 3, 5, 5)
    assert act(x).shape == x.shape and act(x).dtype == torch.float32
    for bad in (0, 1.5, "2"):
        with pytest.raises(ValueError, match="integer >= 1"):
            activations.create("slaf", degree=bad)
    with pytest.raises(ValueError, match="momentum"):
        activations.create("slaf", momentum=1.5)
    seq = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 1), activations.create("slaf")).eval()
    assert not seq[1].training
