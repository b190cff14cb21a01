"""Tropical activations (paper 001 Sec 3.4, Thm 3.19, App H): definition, init, gradients, fit."""

from __future__ import annotations

import math

import pytest
import torch

from visionbench import activations
from visionbench.activations import base as base_mod
from visionbench.activations.tropical import Tropical, TropicalRational

from .fixtures import check_fit


def tropical_reference(x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """(sqrt(2) / n) max_k (a_k + k x), all n + 1 lines stacked, float64 (paper 001 Eq. 21, Alg. 6)."""
    n = len(a) - 1
    k = torch.arange(n + 1, dtype=torch.float64)
    return math.sqrt(2) / n * (a.double() + k * x.double()[..., None]).max(-1).values


def max_plus(x: torch.Tensor, c: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return (c.double() + s.double() * x.double()[..., None]).max(-1).values


def rational_reference(x, c1, s1, c2, s2) -> torch.Tensor:
    """max_k (c_k + p_k x) - max_k (d_k + q_k x) (paper 001 App H, Eq. 76)."""
    return max_plus(x, c1, s1) - max_plus(x, c2, s2)


def top_gap(x: torch.Tensor, c: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    lines = (c + s * x[..., None]).sort(-1).values
    return lines[..., -1] - lines[..., -2]


def away_from_ties(pairs, n: int, lo: float = -3, hi: float = 3, seed: int = 0, gap: float = 1e-3) -> torch.Tensor:
    """n points in [lo, hi] where every (intercepts, slopes) pair has a unique maximal line."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(20 * n, generator=g, dtype=torch.float64) * (hi - lo) + lo
    ok = torch.ones_like(x, dtype=torch.bool)
    for c, s in pairs:
        ok &= top_gap(x, c, s) > gap
    assert ok.sum() >= n
    return x[ok][:n]


# ---- tropical ------------------------------------------------------------------------------
def test_tropical_default_is_thm_3_19_and_variance_preserving():
    act = activations.create("tropical")
    assert isinstance(act, Tropical) and act.degree == 6
    torch.testing.assert_close(act.weight.detach(), torch.ones(7))
    vp = activations.create("tropical", init="variance_preserving")
    torch.testing.assert_close(vp.weight.detach(), act.weight.detach())
    x = torch.linspace(-3, 3, 61, dtype=torch.float64)
    # Eq. 71: sqrt(2) x + sqrt(2) / n for x > 0, sqrt(2) / n otherwise
    want = math.sqrt(2) * x.clamp_min(0) + math.sqrt(2) / 6
    torch.testing.assert_close(act.double()(x), want)


@pytest.mark.parametrize("degree", [6, 200])
def test_tropical_gains_tend_to_one(degree):
    """Thm 3.19: E[F^2] and E[F'^2] under N(0, 1) both tend to 1 as n grows (quadrature)."""
    act = activations.create("tropical", degree=degree).double()
    x = torch.linspace(-10, 10, 20001, dtype=torch.float64).requires_grad_(True)
    w = torch.exp(-(x.detach() ** 2) / 2) / math.sqrt(2 * math.pi) * (x[1] - x[0]).detach()
    y = act(x)
    (dy,) = torch.autograd.grad(y.sum(), x)
    forward, backward = float((w * y.detach() ** 2).sum()), float((w * dy**2).sum())
    assert backward == pytest.approx(1.0, abs=1e-3)
    excess = 4 / degree / math.sqrt(2 * math.pi) + 2 / degree**2  # the sqrt(2)/n offset, exactly
    assert forward == pytest.approx(1.0 + excess, abs=1e-3)


@pytest.mark.parametrize("degree", [1, 2, 6, 9])
def test_tropical_matches_reference(degree):
    a = torch.randn(degree + 1, dtype=torch.float64)
    act = activations.create("tropical", degree=degree).double()
    act.set_coefficients(weight=a)
    x = torch.cat([torch.linspace(-50, 50, 1001, dtype=torch.float64), torch.randn(100, dtype=torch.float64)])
    torch.testing.assert_close(act(x), tropical_reference(x, a), rtol=1e-12, atol=1e-12)
    y32 = activations.create("tropical", degree=degree)
    y32.set_coefficients(weight=a)
    torch.testing.assert_close(y32(x.float()).double(), tropical_reference(x, a), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("per_channel", [False, True])
def test_tropical_gradcheck_input_and_coefficients(per_channel):
    c = 3
    kwargs = dict(per_channel=True, num_channels=c) if per_channel else {}
    act = activations.create("tropical", **kwargs).double()
    a = torch.randn(c if per_channel else 1, 7, dtype=torch.float64)
    ks = torch.arange(7, dtype=torch.float64)
    x = away_from_ties([(row, ks) for row in a], 2 * c * 4).reshape(2, c, 2, 2)
    if not per_channel:
        a = a[0]
    x.requires_grad_(True)
    w = a.clone().requires_grad_(True)

    def f(x, w):
        return torch.func.functional_call(act, {"weight": w}, (x,))

    assert torch.autograd.gradcheck(f, (x, w), eps=1e-6, atol=1e-7)


def test_tropical_coefficient_gradient_counts_the_active_line():
    act = activations.create("tropical", degree=2).double()  # a = 1: line 0 for x < 0, line 2 for x > 0
    x = torch.tensor([-1.0, -0.5, 0.5, 1.0, 2.0], dtype=torch.float64)
    act(x).sum().backward()
    torch.testing.assert_close(act.weight.grad, math.sqrt(2) / 2 * torch.tensor([2.0, 0.0, 3.0], dtype=torch.float64))


BAD_DEGREES = [("tropical", d) for d in (0, -1, 2.5, "6", True, None)]
BAD_DEGREES += [("tropical_rational", d) for d in (0, -1, 2.5, "6", (6, 0), (0, 6))]


@pytest.mark.parametrize("name,degree", BAD_DEGREES)
def test_bad_degree(name, degree):
    with pytest.raises(ValueError, match="degree must be an integer >= 1"):
        activations.create(name, degree=degree)


@pytest.mark.parametrize("name,accepted", [("tropical", "variance_preserving"), ("tropical_rational", "gelu")])
def test_bad_init_lists_accepted(name, accepted):
    with pytest.raises(ValueError, match=f"accepted.*{accepted}"):
        activations.create(name, init="bogus")


@pytest.mark.parametrize("target", ["gelu", "relu"])
def test_tropical_fit_within_tolerance(target):
    check_fit(activations.create("tropical"), target, Tropical.fit_tolerance[target])
    assert activations.create("tropical").fit(target).max_abs_error < 0.7 * _start_error(target)


def _start_error(target: str) -> float:
    """Sup error of the paper's init (a_k = 1) against the target: a fit must beat it."""
    x = torch.linspace(-3, 3, 1001, dtype=torch.float64)
    return float((tropical_reference(x, torch.ones(7)) - activations.get_target(target)(x)).abs().max())


def test_tropical_fit_of_a_convex_tropical_function_is_exact():
    """A target inside the family (any a, same degree) is recovered by the Legendre start."""
    a = torch.tensor([0.3, 0.5, 0.4, -0.2, -1.0, -2.0, -3.5], dtype=torch.float64)
    act = activations.create("tropical")
    res = act.fit(lambda x: tropical_reference(x, a).to(x.dtype))
    assert res.max_abs_error < 1e-9


def test_tropical_per_channel_shapes_and_values():
    c = 4
    act = activations.create("tropical", per_channel=True, num_channels=c).double()
    a = torch.randn(c, 7, dtype=torch.float64)
    with torch.no_grad():
        act.weight.copy_(a)
    x = torch.randn(2, c, 3, 3, dtype=torch.float64)
    y = y_nchw = act(x)
    assert y.shape == x.shape
    for k in range(c):
        torch.testing.assert_close(y[:, k], tropical_reference(x[:, k], a[k]))
    t = torch.randn(2, 5, c, dtype=torch.float64)
    y = act(t)
    for k in range(c):
        torch.testing.assert_close(y[..., k], tropical_reference(t[..., k], a[k]))
    nhwc = activations.create("tropical", per_channel=True, num_channels=c, channel_dim=-1).double()
    nhwc.load_state_dict(act.state_dict())
    torch.testing.assert_close(nhwc(x.permute(0, 2, 3, 1)), y_nchw.permute(0, 2, 3, 1))


# ---- tropical_rational -----------------------------------------------------------------------
def random_rational(m: int, n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(k + 1, generator=g, dtype=torch.float64) for k in (m, m, n, n)]


def set_rational(act: TropicalRational, c1, s1, c2, s2) -> None:
    act.set_coefficients(num_intercepts=c1, num_slopes=s1, den_intercepts=c2, den_slopes=s2)


def test_tropical_rational_default_is_the_gelu_fit():
    act = activations.create("tropical_rational")
    assert isinstance(act, TropicalRational) and act.degrees == (6, 6)
    assert all(p.shape == (7,) for p in act.parameters())
    gelu = activations.create("tropical_rational", init="gelu")
    torch.testing.assert_close(act.state_dict(), gelu.state_dict())
    x = torch.linspace(-3, 3, 101)
    assert (act(x) - torch.nn.functional.gelu(x)).abs().max() <= TropicalRational.fit_tolerance["gelu"][0]


def test_tropical_rational_variance_preserving_is_thm_3_19_over_zero():
    act = activations.create("tropical_rational", init="variance_preserving").double()
    trop = activations.create("tropical").double()
    x = torch.linspace(-5, 5, 101, dtype=torch.float64)
    torch.testing.assert_close(act(x), trop(x))


@pytest.mark.parametrize("degree", [6, 1, (3, 5), (5, 2)])
def test_tropical_rational_matches_reference(degree):
    act = activations.create("tropical_rational", degree=degree).double()
    m, n = act.degrees
    coefs = random_rational(m, n, seed=m + 10 * n)
    set_rational(act, *coefs)
    x = torch.cat([torch.linspace(-50, 50, 1001, dtype=torch.float64), torch.randn(100, dtype=torch.float64)])
    torch.testing.assert_close(act(x), rational_reference(x, *coefs), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("per_channel", [False, True])
def test_tropical_rational_gradcheck_input_and_coefficients(per_channel):
    c = 2
    kwargs = dict(per_channel=True, num_channels=c) if per_channel else {}
    act = activations.create("tropical_rational", degree=(4, 3), **kwargs).double()
    per = [random_rational(4, 3, seed=s) for s in range(c if per_channel else 1)]
    pairs = [pair for co in per for pair in ((co[0], co[1]), (co[2], co[3]))]
    x = away_from_ties(pairs, 2 * c * 3).reshape(2, c, 3)
    x = x.transpose(1, 2).contiguous().requires_grad_(True) if per_channel else x.requires_grad_(True)
    names = ["num_intercepts", "num_slopes", "den_intercepts", "den_slopes"]
    params = [torch.stack([co[i] for co in per]) if per_channel else per[0][i] for i in range(4)]
    params = [p.clone().requires_grad_(True) for p in params]

    def f(x, *ps):
        return torch.func.functional_call(act, dict(zip(names, ps)), (x,))

    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("target", ["silu", "tanh", "sigmoid", "leaky_relu", "identity"])
def test_tropical_rational_fits_nonconvex_targets(target):
    res = activations.create("tropical_rational").fit(target)
    assert res.max_abs_error < 0.03 and res.max_abs_deriv_error < 0.15, res


def test_tropical_rational_init_fit_is_cached(monkeypatch):
    monkeypatch.setattr(base_mod, "_FIT_CACHE", {})  # the init-fit cache lives in base
    calls = []
    real_fit = TropicalRational.fit
    monkeypatch.setattr(TropicalRational, "fit", lambda self, *a, **k: calls.append(a) or real_fit(self, *a, **k))
    acts = [activations.create("tropical_rational") for _ in range(18)]  # a ConvNeXt-T's worth
    assert len(calls) == 1
    assert all(torch.equal(acts[0].num_slopes, b.num_slopes) for b in acts[1:])
    acts[3].fit("relu")
    assert len(calls) == 2 and not torch.equal(acts[3].num_slopes, acts[0].num_slopes)


def test_tropical_rational_per_channel_shapes_and_values():
    c = 3
    act = activations.create("tropical_rational", per_channel=True, num_channels=c).double()
    per = [random_rational(6, 6, seed=s) for s in range(c)]
    set_rational(act, *per[0])  # every channel alike ...
    with torch.no_grad():  # ... then make them differ
        for name, i in (("num_intercepts", 0), ("num_slopes", 1), ("den_intercepts", 2), ("den_slopes", 3)):
            act.get_parameter(name).copy_(torch.stack([co[i] for co in per]))
    x = torch.randn(2, c, 4, 4, dtype=torch.float64)
    y = act(x)
    for k in range(c):
        torch.testing.assert_close(y[:, k], rational_reference(x[:, k], *per[k]))
    t = torch.randn(2, 5, c, dtype=torch.float64)
    y = act(t)
    for k in range(c):
        torch.testing.assert_close(y[..., k], rational_reference(t[..., k], *per[k]))


# ---- both ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tropical", "tropical_rational"])
def test_learnable_false_inplace_and_fit(name):
    act = activations.create(name, learnable=False, inplace=True)
    assert list(act.parameters()) and not any(p.requires_grad for p in act.parameters())
    assert not act(torch.randn(3, 4)).requires_grad
    act.fit("silu")
    assert not any(p.requires_grad for p in act.parameters())


@pytest.mark.parametrize("name", ["tropical", "tropical_rational"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_runs_on_meta_device(name, per_channel):
    kwargs = dict(per_channel=True, num_channels=3) if per_channel else {}
    act = activations.create(name, **kwargs).to("meta")
    y = act(torch.empty(2, 3, 4, 4, device="meta"))
    assert y.device.type == "meta" and y.shape == (2, 3, 4, 4)


@pytest.mark.parametrize("name", ["tropical", "tropical_rational"])
def test_backward_memory_does_not_grow_with_degree(name):
    """Autograd saves the active line per element, never n + 1 stacked copies of the input."""

    def saved_bytes(degree: int) -> int:
        act = activations.create(name, degree=degree, init="variance_preserving")
        x = torch.randn(64, 256, requires_grad=True)
        storages = {}

        def pack(t):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            act(x).sum().backward()
        return sum(storages.values()) / (x.numel() * x.element_size())

    # in units of the input's size; the fused path also saves the (n + 1)-sized coefficients
    assert saved_bytes(32) == pytest.approx(saved_bytes(3), abs=0.01) and saved_bytes(32) <= 8
