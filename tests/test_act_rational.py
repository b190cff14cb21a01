"""Safe rational activation (paper 004 Sec 3, App D): versions A-D, gradients, fit, caching, noise."""

from __future__ import annotations

import pytest
import torch

from visionbench import activations
from visionbench.activations import base as base_mod
from visionbench.activations.rational import Rational

from .fixtures import check_fit

VERSIONS = ["A", "B", "C", "D"]


def parts(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, version: str) -> tuple[torch.Tensor, torch.Tensor]:
    """P and Q written out with explicit powers in float64 (rational-activations' definitions)."""
    x, a, b = x.double(), a.double(), b.double()
    p = sum(a[i] * x**i for i in range(len(a)))
    if version == "A":
        q = 1 + sum((b[j - 1] * x**j).abs() for j in range(1, len(b) + 1))
    elif version == "C":
        q = 0.1 + sum(b[j] * x**j for j in range(len(b))).abs()
    else:
        q = 1 + sum(b[j - 1] * x**j for j in range(1, len(b) + 1)).abs()
    return p, q


def reference(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, version: str) -> torch.Tensor:
    p, q = parts(x, a, b, version)
    return p / q


def magnitude(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, version: str) -> torch.Tensor:
    """Condition scale of F at x, (sum |a_i x^i| + |F| sum |b_j x^j|) / Q: the size that rounding
    errors of P and Q can legitimately give an error in F."""
    ax, lo = x.double().abs(), 0 if version == "C" else 1
    pa = sum(a[i].abs() * ax**i for i in range(len(a)))
    qa = sum(b[j].abs() * ax ** (j + lo) for j in range(len(b)))
    p, q = parts(x, a, b, version)
    return (pa + (p / q).abs() * qa) / q


def random_coefficients(m: int, n: int, version: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m + 1, generator=g, dtype=torch.float64)
    b = torch.randn(n, generator=g, dtype=torch.float64)
    if version == "A":  # keep |b_j| clear of its kink at 0, where finite differences are meaningless
        b = b.sign() * (b.abs() + 0.1)
    return a, b


def test_registered_with_paper_defaults():
    act = activations.create("rational")
    assert isinstance(act, Rational)
    assert act.degrees == (5, 4) and act.version == "A"
    assert act.numerator.shape == (6,) and act.denominator.shape == (4,)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("degrees", [(5, 4), (3, 2), (2, 5), (1, 1)])
def test_forward_matches_reference_float64(version, degrees):
    act = activations.create("rational", version=version, degrees=degrees).double().eval()
    a, b = random_coefficients(*degrees, version, seed=sum(degrees))
    act.set_coefficients(numerator=a, denominator=b)
    x = torch.cat([torch.linspace(-3, 3, 301, dtype=torch.float64), torch.rand(300, dtype=torch.float64) * 100 - 50])
    got, want = act(x), reference(x, a, b, version)
    torch.testing.assert_close(got, want, rtol=1e-11, atol=1e-11 * float(magnitude(x, a, b, version).max()))


@pytest.mark.parametrize("version", VERSIONS)
def test_float32_up_to_50_is_finite_and_accurate(version):
    act = activations.create("rational", version=version).eval()
    a, b = random_coefficients(5, 4, version, seed=7)
    act.set_coefficients(numerator=a, denominator=b)
    x = torch.cat([torch.linspace(-50, 50, 2001), torch.tensor([-50.0, 50.0])]).requires_grad_(True)
    y = act(x)
    y.sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in act.parameters())
    want = reference(x.detach(), a, b, version)
    err = (y.detach().double() - want).abs()
    assert (err <= 1e-5 * magnitude(x.detach(), a, b, version) + 1e-6).all(), float(err.max())


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("init", ["gelu", "leaky_relu", "relu", "silu", "tanh", "sigmoid", "identity"])
def test_every_target_init_is_finite_to_50(version, init):
    act = activations.create("rational", version=version, init=init).eval()
    x = torch.linspace(-50, 50, 1001).requires_grad_(True)
    y = act(x)
    y.sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()
    near = torch.linspace(-3, 3, 61)
    want = activations.get_target(init)(near.double())
    assert (act(near).double() - want).abs().max() < 0.1  # it is a fit of the target


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("per_channel", [False, True])
def test_gradcheck_input_and_coefficients(version, per_channel):
    kwargs = dict(per_channel=True, num_channels=3) if per_channel else {}
    act = activations.create("rational", version=version, **kwargs).double().eval()  # D: eval = no noise
    a, b = random_coefficients(5, 4, version, seed=3)
    act.set_coefficients(numerator=a, denominator=b)
    if per_channel:  # make channels differ so that the channel indexing is tested too
        with torch.no_grad():
            act.numerator.mul_(torch.tensor([[1.0], [0.5], [-0.8]], dtype=torch.float64))
    x = (torch.rand(2, 3, 2, 2, dtype=torch.float64) * 6 - 3).requires_grad_(True)
    num = act.numerator.detach().clone().requires_grad_(True)
    den = act.denominator.detach().clone().requires_grad_(True)

    def f(x, num, den):
        return torch.func.functional_call(act, {"numerator": num, "denominator": den}, (x,))

    assert torch.autograd.gradcheck(f, (x, num, den), eps=1e-6, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("version", VERSIONS)
def test_fitted_default_passes_gradcheck(version):
    """A fitted version A has every |b_j| >= 1e-5: trainable, and clear of the kink of |.| at 0."""
    act = activations.create("rational", version=version).double().eval()
    if version == "A":
        assert (act.denominator.abs() >= 0.99e-5).all()  # 1e-5 rounded to float32
    x = (torch.rand(8, dtype=torch.float64) * 6 - 3).requires_grad_(True)
    params = tuple(p.detach().clone().requires_grad_(True) for p in (act.numerator, act.denominator))

    def f(x, num, den):
        return torch.func.functional_call(act, {"numerator": num, "denominator": den}, (x,))

    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-7, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("degrees", [(0, 4), (5, 0), (5,), 5, "54", (2.5, 1), (True, 1), None, (5, 4, 3), (-1, 2)])
def test_bad_degrees_raise_value_error(degrees):
    with pytest.raises(ValueError, match=r"\(m, n\)"):
        activations.create("rational", degrees=degrees)


@pytest.mark.parametrize("version", ["E", "", None, 1, "AB"])
def test_bad_version_names_accepted(version):
    with pytest.raises(ValueError, match="A, B, C, D"):
        activations.create("rational", version=version)


@pytest.mark.parametrize("init", ["bogus", "variance_preserving"])
def test_bad_init_names_accepted(init):
    with pytest.raises(ValueError, match="accepted.*gelu"):
        activations.create("rational", init=init)


def test_lower_case_version_and_default_init_is_gelu():
    a = activations.create("rational", version="b", init="default")
    b = activations.create("rational", version="B", init="gelu")
    assert a.version == "B"
    torch.testing.assert_close(a.state_dict(), b.state_dict())


@pytest.mark.parametrize("version", VERSIONS)
def test_fit_gelu_is_accurate(version):
    check_fit(activations.create("rational", version=version), "gelu", Rational.fit_tolerance["gelu"])


@pytest.mark.parametrize("version", VERSIONS)
def test_fit_without_derivative_and_other_interval(version):
    act = activations.create("rational", version=version)
    res = act.fit("tanh", interval=(-5, 5), derivative=False)
    assert res.max_abs_error < 1e-2
    x = torch.linspace(-5, 5, 51)
    assert (act.eval()(x) - torch.tanh(x)).abs().max() < 1e-2


def test_init_fit_is_cached_but_explicit_fit_refits(monkeypatch):
    monkeypatch.setattr(base_mod, "_FIT_CACHE", {})  # the init-fit cache lives in base
    calls = []
    real_fit = Rational.fit

    def counting_fit(self, *args, **kwargs):
        calls.append(args)
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(Rational, "fit", counting_fit)
    acts = [activations.create("rational") for _ in range(49)]  # a ResNet50's worth
    assert len(calls) == 1
    assert all(torch.equal(acts[0].numerator, b.numerator) for b in acts[1:])
    acts[1].numerator.data.add_(1.0)  # instances share values, not tensors
    assert not torch.equal(acts[0].numerator, acts[1].numerator)
    res = acts[1].fit("gelu")
    assert len(calls) == 2 and res.max_abs_error < Rational.fit_tolerance["gelu"][0]
    torch.testing.assert_close(acts[1].numerator, acts[0].numerator)
    activations.create("rational", version="B")
    activations.create("rational", degrees=(4, 4))
    assert len(calls) == 4  # other versions and degrees are other cache entries


@pytest.mark.parametrize("version", VERSIONS)
def test_per_channel_nchw_and_tokens(version):
    c = 4
    act = activations.create("rational", version=version, per_channel=True, num_channels=c).double().eval()
    assert act.numerator.shape == (c, 6) and act.denominator.shape == (c, 4)
    coefs = [random_coefficients(5, 4, version, seed=10 + k) for k in range(c)]
    with torch.no_grad():
        act.numerator.copy_(torch.stack([a for a, _ in coefs]))
        act.denominator.copy_(torch.stack([b for _, b in coefs]))
    x = torch.randn(2, c, 3, 5, dtype=torch.float64) * 2
    y = act(x)
    for k, (a, b) in enumerate(coefs):
        torch.testing.assert_close(y[:, k], reference(x[:, k], a, b, version))
    tokens = torch.randn(2, 7, c, dtype=torch.float64) * 2  # channels last
    y = act(tokens)
    for k, (a, b) in enumerate(coefs):
        torch.testing.assert_close(y[..., k], reference(tokens[..., k], a, b, version))
    nhwc = activations.create("rational", version=version, per_channel=True, num_channels=c, channel_dim=-1).double()
    nhwc.load_state_dict(act.state_dict())
    x = x.permute(0, 2, 3, 1)
    torch.testing.assert_close(nhwc.eval()(x)[..., 2], reference(x[..., 2], *coefs[2], version))


def test_per_channel_init_is_the_fit_in_every_channel():
    act = activations.create("rational", per_channel=True, num_channels=5, init="leaky_relu")
    single = activations.create("rational", init="leaky_relu")
    torch.testing.assert_close(act.numerator, single.numerator.expand(5, -1))
    res = act.fit("gelu")
    assert res.max_abs_error < Rational.fit_tolerance["gelu"][0]
    assert (act.numerator == act.numerator[0]).all()


def test_learnable_false_and_inplace():
    act = activations.create("rational", learnable=False, inplace=True)
    assert not any(p.requires_grad for p in act.parameters())
    x = torch.randn(3, 4)
    assert not act(x).requires_grad
    act.fit("relu")
    assert not any(p.requires_grad for p in act.parameters())


@pytest.mark.parametrize("version", VERSIONS)
def test_runs_on_meta_device(version):
    act = activations.create("rational", version=version).to("meta").train()
    y = act(torch.empty(2, 3, 4, 4, device="meta"))
    assert y.device.type == "meta" and y.shape == (2, 3, 4, 4)


def test_version_d_noise_only_in_training():
    d = activations.create("rational", version="D").double()
    b = activations.create("rational", version="B").double().eval()
    d.set_coefficients(numerator=torch.randn(6, dtype=torch.float64), denominator=torch.randn(4, dtype=torch.float64))
    b.load_state_dict(d.state_dict())
    x = torch.linspace(-3, 3, 11, dtype=torch.float64)
    # eval: deterministic, and exactly version B
    d.eval()
    torch.testing.assert_close(d(x), d(x), rtol=0, atol=0)
    torch.testing.assert_close(d(x), b(x), rtol=0, atol=0)
    # training: a fresh draw each call, reproducible under a seed
    d.train()
    y1, y2 = d(x), d(x)
    assert not torch.allclose(y1, y2)
    torch.manual_seed(5)
    y3 = d(x)
    torch.manual_seed(5)
    torch.testing.assert_close(d(x), y3, rtol=0, atol=0)
    # the noise is one U(0.9, 1.1) factor per numerator coefficient, shared by all elements:
    # y * Q is a polynomial whose coefficients are a_i u_i
    q = 1 + (sum(d.denominator[j - 1] * x**j for j in range(1, 5))).abs()
    vander = torch.stack([x**i for i in range(6)], 1)
    noisy = torch.linalg.lstsq(vander, (y3.detach() * q.detach())[:, None]).solution[:, 0]
    ratio = noisy / d.numerator.detach()
    assert ((ratio > 0.9 - 1e-9) & (ratio < 1.1 + 1e-9)).all() and not torch.allclose(ratio, torch.ones_like(ratio))
    # gradients still reach the numerator in training
    d.zero_grad()
    d(x).sum().backward()
    assert d.numerator.grad.abs().sum() > 0


@pytest.mark.parametrize("version", ["A", "B", "C"])
def test_other_versions_ignore_training_mode(version):
    act = activations.create("rational", version=version)
    x = torch.randn(10)
    torch.testing.assert_close(act.train()(x), act.eval()(x), rtol=0, atol=0)
