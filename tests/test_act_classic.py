"""The classic baselines (docs/activations.md): PReLU, Swish-beta, ACON-C, StarReLU (learnable) and ELU, SELU,
softplus, hard-swish, ReLU6, squared ReLU (fixed): formulas against independent float64 references,
paper inits, fused path, memory, fit targets, `visionbench list` groups, swaps into the CIFAR models.
The registry-wide contracts (gradcheck, save/load, fit tolerance, ...) are in test_activations.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from visionbench import activations as A
from visionbench import models
from visionbench.activations import classic, fused
from visionbench.activations.targets import value_and_derivative
from visionbench.cli import main

CLASSIC = ("prelu", "swish_beta", "acon_c", "star_relu")
FIXED_NEW = ("elu", "selu", "softplus", "hardswish", "relu6", "relu2")
COEFS = {"prelu": ("weight",), "swish_beta": ("beta",), "acon_c": ("p1", "p2", "beta"), "star_relu": ("scale", "bias")}


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # no overflow warnings for large |z|


# The papers' formulas in numpy, float64; c maps coefficient name -> array broadcasting against x.
REFERENCE = {
    "prelu": lambda x, c: np.maximum(x, 0.0) + c["weight"] * np.minimum(x, 0.0),  # He et al. 2015 Eq. 2
    "swish_beta": lambda x, c: x * _sigmoid(c["beta"] * x),  # Ramachandran et al. 2017
    "acon_c": lambda x, c: (
        (c["p1"] - c["p2"]) * x * _sigmoid(c["beta"] * (c["p1"] - c["p2"]) * x) + c["p2"] * x
    ),  # Ma et al. 2021 Table 1
    "star_relu": lambda x, c: c["scale"] * np.maximum(x, 0.0) ** 2 + c["bias"],  # Yu et al. 2022 Sec 3.1
}


def _perturbed(name: str, channels: int | None = None, **kwargs):
    """A float64 module with random coefficients (different per channel) and the same as numpy arrays."""
    extra = {"per_channel": True, "num_channels": channels} if channels else {}
    act = A.create(name, **extra, **kwargs).double()
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in act.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
    return act, {n: act.get_parameter(n).detach().numpy()[..., 0] for n in COEFS[name]}


@pytest.mark.parametrize("fast", [True, False], ids=["fused", "plain"])
@pytest.mark.parametrize("name", CLASSIC)
def test_shared_coefficients_match_paper_formula(name, fast):
    act, c = _perturbed(name)
    act.fast = fast
    x = 3 * torch.randn(4, 5, 6, 7, dtype=torch.float64)
    want = REFERENCE[name](x.numpy(), c)
    np.testing.assert_allclose(act(x).detach().numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["nchw", "tokens"])
@pytest.mark.parametrize("name", CLASSIC)
def test_per_channel_matches_paper_formula(name, layout):
    """Channels on dim 1 (conv maps) and last (tokens); each channel its own coefficients."""
    act, c = _perturbed(name, channels=5)
    x = 3 * torch.randn((4, 5, 6, 7) if layout == "nchw" else (4, 6, 5), dtype=torch.float64)
    shape = (1, 5, 1, 1) if layout == "nchw" else (1, 1, 5)
    want = REFERENCE[name](x.numpy(), {k: v.reshape(shape) for k, v in c.items()})
    for fast in (True, False):
        act.fast = fast
        np.testing.assert_allclose(act(x).detach().numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("name", CLASSIC)
def test_fused_values_and_gradients_equal_plain(name, per_channel, monkeypatch):
    """The hand-written backward against autograd through the plain formula (eager kernels)."""
    monkeypatch.setattr(fused, "BACKEND", "eager")
    act, _ = _perturbed(name, channels=4 if per_channel else None)
    gen = torch.Generator().manual_seed(3)
    x = 2 * torch.randn(3, 4, 5, 6, generator=gen, dtype=torch.float64)
    g = torch.randn(3, 4, 5, 6, generator=gen, dtype=torch.float64)
    outs = []
    for fast in (True, False):
        act.fast = fast
        xg = x.clone().requires_grad_(True)
        y = act(xg)
        outs.append([y.detach(), *torch.autograd.grad(y, [xg, *act.parameters()], g)])
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("name", CLASSIC)
def test_fused_path_saves_at_most_1_1_times_the_input(name, per_channel):
    """Saved-for-backward <= 1.1 x input (the fused path keeps x and the coefficients)."""
    act = A.create(name, **({"per_channel": True, "num_channels": 16} if per_channel else {}))
    x = torch.randn(8, 16, 8, 8, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: saved.append(t.numel() * t.element_size()) or t, lambda t: t
    ):
        act(x).sum().backward()
    assert sum(saved) <= 1.1 * x.numel() * x.element_size()


def test_paper_inits():
    torch.testing.assert_close(A.create("prelu").weight.detach(), torch.tensor([0.25]))  # He et al. Sec 2.1
    torch.testing.assert_close(A.create("swish_beta").beta.detach(), torch.tensor([1.0]))
    code = A.create("star_relu")  # sail-sg/metaformer StarReLU(scale_value=1.0, bias_value=0.0)
    assert (code.scale.item(), code.bias.item()) == (1.0, 0.0)
    star = A.create("star_relu", init="variance_preserving")  # Yu et al. Sec 3.1: 1 / sqrt(1.25), -0.5 / sqrt(1.25)
    assert star.scale.item() == pytest.approx(1 / math.sqrt(1.25), abs=1e-4)
    assert star.bias.item() == pytest.approx(-0.5 / math.sqrt(1.25), abs=1e-4)
    per = A.create("prelu", per_channel=True, num_channels=3)
    assert per.weight.shape == (3, 1) and bool((per.weight == 0.25).all())


def test_star_relu_init_normalises_a_standard_normal_input():
    """Why the paper picks s, b: F(x) has mean 0 and variance 1 for x ~ N(0, 1) (quadrature)."""
    x = torch.linspace(-12, 12, 240001, dtype=torch.float64)
    w = torch.exp(-(x**2) / 2) / math.sqrt(2 * math.pi) * (x[1] - x[0])
    y = A.create("star_relu", init="variance_preserving").double()(x).detach()
    mean = float((w * y).sum())
    assert mean == pytest.approx(0.0, abs=1e-4)
    assert float((w * (y - mean) ** 2).sum()) == pytest.approx(1.0, abs=1e-4)


def test_acon_c_default_is_the_authors_random_init_and_seeded():
    """nmaac/acon: p1, p2 ~ N(0, 1) per channel, beta = 1; torch's global RNG, so a seed fixes them."""
    torch.manual_seed(0)
    a = A.create("acon_c", per_channel=True, num_channels=64)
    torch.manual_seed(0)
    b = A.create("acon_c", per_channel=True, num_channels=64)
    torch.testing.assert_close(a.state_dict(), b.state_dict())
    assert bool((a.beta == 1).all()) and len(set(a.p1.flatten().tolist())) == 64
    assert 0.6 < a.p1.std().item() < 1.5 and abs(a.p2.mean().item()) < 0.5


@pytest.mark.parametrize("name", ["swish_beta", "acon_c"])
def test_silu_init_is_swish_exactly(name):
    act = A.create(name, init="silu").double()
    x = torch.linspace(-6, 6, 101, dtype=torch.float64)
    torch.testing.assert_close(act(x), F.silu(x), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["swish_beta", "acon_c"])
@pytest.mark.parametrize("target", ["relu", "leaky_relu"])
def test_fit_to_a_kink_keeps_beta_bounded(name, target):
    """The least-squares beta of a ReLU-like target is infinite; fits stop at BETA_MAX (16)."""
    act = A.create(name)
    r = act.fit(target)
    assert act.beta.abs().max().item() == pytest.approx(classic.BETA_MAX)
    # max_{x<0} |x| sigmoid(16 x) = 0.278 / 16; Swish-beta also misses leaky_relu's 0.01 slope (0.03 at -3)
    slack = 0.03 if (name, target) == ("swish_beta", "leaky_relu") else 0.0
    assert r.max_abs_error < 0.3 / classic.BETA_MAX + slack


def test_prelu_fit_is_exact_for_piecewise_linear_targets():
    for target, slope in (("relu", 0.0), ("leaky_relu", 0.01), ("identity", 1.0)):
        act = A.create("prelu")
        r = act.fit(target)
        assert act.weight.item() == pytest.approx(slope, abs=1e-9) and r.max_abs_error < 1e-9


def test_star_relu_fit_to_relu2_is_exact():
    act = A.create("star_relu", init="relu2")
    assert act.scale.item() == pytest.approx(1.0, abs=1e-9) and act.bias.item() == pytest.approx(0.0, abs=1e-9)


# ---- fixed ----------------------------------------------------------------------------------------
TORCH_FORMS = {
    "elu": lambda x: F.elu(x, alpha=1.0),
    "selu": F.selu,
    "softplus": lambda x: F.softplus(x, beta=1, threshold=20),
    "hardswish": F.hardswish,
    "relu6": F.relu6,
    "relu2": lambda x: torch.clamp(x, min=0) * torch.clamp(x, min=0),
}


@pytest.mark.parametrize("name", FIXED_NEW)
def test_fixed_equal_torch_functional_forms(name):
    x = torch.cat([30 * torch.randn(1000, dtype=torch.float64), torch.linspace(-8, 8, 161, dtype=torch.float64)])
    act = A.create(name)
    assert not A.is_learnable(name) and A.family(name) == "fixed" and not list(act.parameters())
    torch.testing.assert_close(act(x.clone()), TORCH_FORMS[name](x), rtol=0, atol=0)
    torch.testing.assert_close(A.create(name, inplace=True)(x.clone()), TORCH_FORMS[name](x), rtol=0, atol=0)
    y, _ = value_and_derivative(name, x)  # the fit target of the same name is the same function
    torch.testing.assert_close(y, TORCH_FORMS[name](x), rtol=0, atol=0)
    assert (type(act).__doc__ or "").strip()  # the citation


@pytest.mark.parametrize("name", [n for n in A.names() if A.is_learnable(n)])
def test_every_learnable_family_inits_from_a_new_target(name):
    """A new fit target (ELU) is an `init=` of every learnable family, fitted like the old ones."""
    act = A.create(name, init="elu")
    ref = A.create(name)
    ref.fit("elu")
    act.eval(), ref.eval()
    x = torch.linspace(-3, 3, 61).view(1, -1)
    torch.testing.assert_close(act(x), ref(x), atol=1e-5, rtol=1e-5)


# ---- registry families and `visionbench list` -----------------------------------------------------
def test_family_labels():
    for name in CLASSIC:
        assert A.family(name) == "gated" and A.get_class(name).family == "gated"
    assert A.family("rational") == "rational" and A.family("slaf") == "polynomial"
    assert A.family("fourier") == "orthogonal" and A.family("tropical_rational") == "tropical"
    assert A.family("gelu") == "fixed" and A.family("swish") == "fixed"  # aliases resolve
    # every registered activation, learnable or not, names a known family (no "other")
    assert {A.family(n) for n in A.names()} <= set(A.FAMILIES) - {"other"}


def test_list_groups_activations_by_family(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    lines = {
        line.split(":")[0].strip(): line.split(":", 1)[1]
        for line in out.splitlines()
        if line.startswith("  ") and ":" in line
    }
    gated = lines["scaled / gated (few parameters)"]
    assert [w.strip() for w in gated.split(",")] == ["acon_c", "prelu", "star_relu", "swish_beta"]
    assert "relu2" in lines["fixed"] and "prelu" not in lines["fixed"]
    assert "hermite" in lines["orthogonal series"] and "rational" in lines["rational"]
    headings = [h for h in lines if h in {A.FAMILIES[f] for f in A.FAMILIES}]
    assert headings == [A.FAMILIES[f] for f in A.FAMILIES if A.FAMILIES[f] in headings]  # registry order


# ---- swaps ----------------------------------------------------------------------------------------
# Post-activation ResNet-32 adds each block's output to an identity path with no norm after the
# sum: a function growing like x^2 squares the residual stream every block, and 15 blocks overflow
# float32 at init (measured: NaN logits). The swap itself works; the finiteness check is skipped.
QUADRATIC_IN_RESNET32 = {"star_relu", "relu2"}


@pytest.mark.parametrize("model_name", ["vgg4", "resnet32"])
@pytest.mark.parametrize("name", CLASSIC + FIXED_NEW)
def test_swap_into_cifar_models(name, model_name):
    torch.manual_seed(0)
    model = models.create(model_name, act=name, num_classes=10, img_size=32)
    expected = {"vgg4": 4, "resnet32": 31}[model_name]
    assert len(model.swap_report) == expected
    assert sum(type(m) is A.get_class(name) for m in model.modules()) == expected
    model.train()
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10)
    if model_name == "resnet32" and name in QUADRATIC_IN_RESNET32:
        return
    assert torch.isfinite(out).all()
    out.pow(2).mean().backward()
    coefs = list(A.learnable_parameters(model))
    assert len(coefs) == (expected * len(COEFS[name]) if name in CLASSIC else 0)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in coefs)


@pytest.mark.parametrize("name", CLASSIC)
def test_per_channel_swap_into_vgg4(name):
    model = models.create("vgg4", act=name, num_classes=10, img_size=32, act_kwargs={"per_channel": True})
    assert [e.num_channels for e in model.swap_report] == [64, 128, 256, 256]
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    assert all(p.grad is not None and p.shape[0] in (64, 128, 256) for p in A.learnable_parameters(model))
