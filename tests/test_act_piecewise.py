"""APL, KAF and the KAN B-spline (docs/activations.md, "The zoo"): forward against independent float64 references
(plain NumPy formulas; scipy's BSpline for the spline basis), fast path == plain formula, saved
tensors, inits, option checks."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from scipy.interpolate import BSpline as ScipyBSpline
from scipy.special import erfinv, expit

from visionbench import activations as A
from visionbench.activations import fused
from visionbench.activations.spline import knots

SEED = 7


def perturbed(name: str, scale: float = 0.3, **kwargs):
    """A float64 module whose coefficients are moved off their init (channels differ)."""
    act = A.create(name, **kwargs).double()
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for p in act.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return act


def channel_rows(p: torch.Tensor, channels: int) -> np.ndarray:
    return p.detach().reshape(-1, p.shape[-1]).expand(channels, -1).numpy()


# ---- independent references (NumPy / scipy, float64, scalar coefficients per channel) --------
def apl_ref(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """max(0, x) + sum_s a_s max(0, -x + b_s) (Agostinelli et al. Eq. 1)."""
    return np.maximum(0, x) + sum(a[s] * np.maximum(0, -x + b[s]) for s in range(len(a)))


def kaf_ref(x: np.ndarray, alpha: np.ndarray, size: int, boundary: float) -> np.ndarray:
    """sum_i alpha_i exp(-gamma (x - d_i)^2), d = linspace(-boundary, boundary, D), gamma = 1 / (6 spacing^2)."""
    d = np.linspace(-boundary, boundary, size)
    gamma = 1.0 / (6.0 * (d[1] - d[0]) ** 2)
    return np.exp(-gamma * (x[..., None] - d) ** 2) @ alpha


def bspline_ref(
    x: np.ndarray, c: np.ndarray, wb: float | None, grid_size: int, order: int, grid_range, residual: str
) -> np.ndarray:
    """w_b b(x) + sum_i c_i B_i(x) with scipy's B-spline on KAN's extended knots. scipy evaluates
    on its base interval [t_k, t_(n)] only, so k more knots with zero coefficients are added on each
    side: the base interval becomes the whole extended grid, where sum_i c_i B_i is the same."""
    lo, hi = grid_range
    h = (hi - lo) / grid_size
    t = lo + h * np.arange(-2 * order, grid_size + 2 * order + 1)
    spline = ScipyBSpline(t, np.concatenate([np.zeros(order), c, np.zeros(order)]), order, extrapolate=False)
    out = np.nan_to_num(spline(x), nan=0.0)
    if residual == "silu":
        out = out + wb * x * expit(x)
    elif residual == "linear":
        out = out + wb * x
    return out


def reference(name: str, act, x: np.ndarray, channels: int, channel_axis: int) -> np.ndarray:
    """The family's reference applied per channel (channel c uses coefficient row c)."""
    out = np.empty_like(x)
    xm, om = np.moveaxis(x, channel_axis, 0), np.moveaxis(out, channel_axis, 0)
    for ch in range(channels):
        if name == "apl":
            om[ch] = apl_ref(xm[ch], channel_rows(act.slope, channels)[ch], channel_rows(act.hinge, channels)[ch])
        elif name == "kaf":
            om[ch] = kaf_ref(xm[ch], channel_rows(act.weight, channels)[ch], act.dictionary_size, act.boundary)
        else:
            wb = None if act.base_weight is None else channel_rows(act.base_weight, channels)[ch][0]
            om[ch] = bspline_ref(
                xm[ch],
                channel_rows(act.weight, channels)[ch],
                wb,
                act.grid_size,
                act.order,
                act.grid_range,
                act.residual,
            )
    return out


def inputs(shape, spread: float = 2.5) -> torch.Tensor:
    """Random x reaching well outside every grid, plus points exactly on the default knots,
    hinges and atoms (-3.6, -3, ..., 3.6 and -3, ..., 3 in steps of 6/19)."""
    gen = torch.Generator().manual_seed(SEED)
    x = spread * torch.randn(shape, generator=gen, dtype=torch.float64)
    special = torch.cat(
        [
            knots(5, 3, (-3.0, 3.0)),
            torch.linspace(-3, 3, 20, dtype=torch.float64),
            torch.tensor([0.0, -7.0, 9.0, -40.0, 55.0], dtype=torch.float64),
        ]
    )
    flat = x.view(-1)
    flat[: len(special)] = special
    return x


CONFIGS = [
    ("apl", {}),
    ("apl", {"hinges": 2}),
    ("kaf", {}),
    ("kaf", {"dictionary_size": 7, "boundary": 1.5}),
    ("bspline", {}),
    ("bspline", {"residual": "linear", "order": 2, "grid_size": 8}),
    ("bspline", {"residual": "none", "order": 1, "grid_range": (-1.0, 2.0)}),
    ("bspline", {"order": 4, "grid_size": 3, "grid_range": (-1.0, 1.0)}),
]
IDS = [n + "".join(f"-{k}={v}" for k, v in kw.items()) for n, kw in CONFIGS]


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "plain"])
@pytest.mark.parametrize("layout", ["shared", "nchw", "channels_last_tokens"])
@pytest.mark.parametrize("name,kwargs", CONFIGS, ids=IDS)
def test_forward_matches_independent_reference(monkeypatch, name, kwargs, layout, fast):
    monkeypatch.setattr(fused, "BACKEND", "eager")
    shape = (3, 4, 5, 6) if layout != "channels_last_tokens" else (6, 7, 4)
    extra = {} if layout == "shared" else {"per_channel": True, "num_channels": 4}
    act = perturbed(name, **kwargs, **extra)
    act.fast = fast
    x = inputs(shape)
    axis = 1 if len(shape) == 4 else len(shape) - 1
    want = reference(name, act, x.numpy(), 4 if extra else shape[axis], axis)
    with torch.no_grad():
        got = act(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("name,kwargs", CONFIGS, ids=IDS)
def test_fast_path_equals_plain_formula(monkeypatch, name, kwargs, dtype, per_channel):
    """Values, input and coefficient gradients of the fused kernels == autograd through the formula,
    on x that includes knots, atoms and far-out points (order-1 splines and APL are kinked at the
    knots / hinges, and both paths take the right derivative there)."""
    monkeypatch.setattr(fused, "BACKEND", "eager")
    extra = {"per_channel": True, "num_channels": 4} if per_channel else {}
    act = perturbed(name, **kwargs, **extra).to(dtype)
    ref = copy.deepcopy(act)
    ref.fast = False
    x = inputs((3, 4, 5, 6)).to(dtype)
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
    tol = {"rtol": 2e-4, "atol": 2e-5} if dtype == torch.float32 else {"rtol": 1e-9, "atol": 1e-10}
    outs = []
    for module in (act, ref):
        xg = x.clone().requires_grad_(True)
        y = module(xg)
        outs.append([y.detach(), *torch.autograd.grad(y, [xg, *module.parameters()], g)])
    for i, (a, b) in enumerate(zip(*outs)):
        torch.testing.assert_close(a, b, **tol, msg=lambda m: f"output {i} (y, dx, coefficients...): {m}")


@pytest.mark.parametrize("name,kwargs", CONFIGS, ids=IDS)
def test_gradcheck_fast_path_per_channel(monkeypatch, name, kwargs):
    monkeypatch.setattr(fused, "BACKEND", "eager")
    act = perturbed(name, **kwargs, per_channel=True, num_channels=3)
    x = torch.rand(2, 3, 3, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 8 - 4
    names = [n for n, _ in act.named_parameters()]
    coefficients = [p.detach().clone().requires_grad_(True) for p in act.parameters()]

    def f(x, *cs):
        return torch.func.functional_call(act, dict(zip(names, cs)), (x,))

    assert torch.autograd.gradcheck(f, (x.requires_grad_(True), *coefficients), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("name", ["apl", "kaf", "bspline"])
def test_fast_path_saves_only_the_input(name):
    """The fused function keeps x (and the few coefficients): <= 1.1 x the input, as the issue asks."""
    act = A.create(name)
    x = torch.randn(8, 16, 8, 8, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        act(x).sum().backward()
    assert max(saved) == x.numel() and sum(saved) <= 1.1 * x.numel()


# ---- inits -----------------------------------------------------------------------------------
def test_apl_default_is_relu_with_hinges_at_normal_quantiles():
    act = A.create("apl").double()
    x = torch.linspace(-4, 4, 81, dtype=torch.float64)
    torch.testing.assert_close(act(x), torch.relu(x))
    b = act.hinge.detach().numpy()
    want = 0.5 * math.sqrt(2) * erfinv(2 * np.arange(1, 6) / 6 - 1)  # N(0, 0.5^2) quantiles s / (S + 1)
    np.testing.assert_allclose(b, want, atol=1e-6)
    assert act.slope.detach().abs().max() == 0


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")  # training_step outside a Trainer
def test_apl_penalty_is_the_papers_l2_on_slopes_and_hinges_and_enters_the_training_loss():
    from visionbench.config import block
    from visionbench.train.module import ClassificationModule

    act = A.create("apl", hinges=3, init="gelu")  # a != 0 and b != 0
    want = act.slope.square().sum() + act.hinge.square().sum()
    assert act.penalty().item() == pytest.approx(want.item()) and want.item() > 0.1
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), act)
    batch = (torch.randn(8, 4), torch.randint(0, 3, (8,)))

    def loss(act_l2: float) -> float:
        blocks = block("optim"), block("sched"), block("loss", {"act_l2": act_l2})
        return ClassificationModule(model, 3, *blocks).training_step(batch, 0).item()

    assert loss(0.5) - loss(0.0) == pytest.approx(0.5 * want.item(), rel=1e-5)


def test_kaf_default_is_kernel_ridge_regression_of_elu():
    act = A.create("kaf").double()
    d = np.linspace(-3, 3, 20)
    torch.testing.assert_close(
        act(torch.from_numpy(d)), torch.nn.functional.elu(torch.from_numpy(d)), atol=2e-3, rtol=0
    )  # (K + 1e-4 I) alpha = ELU(d): near-interpolation


@pytest.mark.parametrize("residual", ["silu", "linear", "none"])
def test_bspline_default_is_silu(residual):
    act = A.create("bspline", residual=residual).double()
    x = torch.linspace(-3, 3, 61, dtype=torch.float64)
    tol = 0.0 if residual == "silu" else 0.01  # exact (c = 0, w_b = 1) or the least-squares fit
    assert (act(x) - torch.nn.functional.silu(x)).abs().max() <= tol
    if residual == "silu":
        assert act.weight.detach().abs().max() == 0 and float(act.base_weight.detach()) == 1.0


@pytest.mark.parametrize("name", ["apl", "kaf", "bspline"])
def test_family_label(name):
    assert A.get_class(name).family == "piecewise"


def test_bspline_is_zero_spline_outside_extended_grid():
    act = perturbed("bspline", residual="none")
    x = torch.tensor([-6.61, -100.0, 6.6, 6.61, 1e3], dtype=torch.float64)  # extended grid: [-6.6, 6.6)
    assert act(x).abs().max() == 0


# ---- options -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,kwargs,match",
    [
        ("apl", {"hinges": 0}, "apl: hinges must be an integer >= 1"),
        ("apl", {"hinges": 2.5}, "apl: hinges must be an integer >= 1"),
        ("kaf", {"dictionary_size": 1}, "kaf: dictionary_size must be an integer >= 2"),
        ("kaf", {"dictionary_size": True}, "kaf: dictionary_size must be an integer >= 2"),
        ("kaf", {"boundary": 0}, "kaf: boundary must be a finite number > 0"),
        ("kaf", {"boundary": float("inf")}, "kaf: boundary must be a finite number > 0"),
        ("bspline", {"grid_size": 0}, "bspline: grid_size must be an integer >= 1"),
        ("bspline", {"order": 0}, "bspline: order must be an integer >= 1"),
        ("bspline", {"order": "3"}, "bspline: order must be an integer >= 1"),
        ("bspline", {"grid_range": (1, -1)}, r"bspline: grid_range must be two finite numbers lo < hi"),
        ("bspline", {"grid_range": 3}, r"bspline: grid_range must be two finite numbers lo < hi"),
        ("bspline", {"residual": "relu"}, "bspline: residual must be one of silu, linear, none"),
    ],
)
def test_bad_options_name_the_option(name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        A.create(name, **kwargs)


def test_fit_of_apl_moves_hinges_and_stays_within_tolerance():
    act = A.create("apl", hinges=5)
    before = act.hinge.detach().clone()
    result = act.fit("gelu")
    assert not torch.equal(before, act.hinge.detach())
    assert result.max_abs_error <= A.get_class("apl").fit_tolerance["gelu"][0]
