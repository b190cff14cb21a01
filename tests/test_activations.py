"""Contracts every registered activation keeps, parametrized over the whole registry."""

import copy
import functools
import io

import pytest
import torch
from torch import nn

from visionbench import activations as A

from .fixtures import check_fit, gradcheck_module

ALL = A.names()
LEARNABLE = [n for n in ALL if A.is_learnable(n)]
FIXED = [n for n in ALL if not A.is_learnable(n)]
EXPECTED_LEARNABLE = {"rational", "polyrelu", "polynorm", "hermite", "fourier", "tropical", "tropical_rational", "slaf"}
EXPECTED_FIXED = {"relu", "leaky_relu", "gelu", "silu", "mish", "tanh", "identity"}
EXPECTED_LEARNABLE |= {"prelu", "swish_beta", "acon_c", "star_relu"}  # the zoo: scaled / gated
EXPECTED_FIXED |= {"elu", "selu", "softplus", "hardswish", "relu6", "relu2"}  # the zoo: more fixed functions
EXPECTED_LEARNABLE |= {"apl", "kaf", "bspline"}  # the zoo: piecewise / spline / kernel


def test_registry_has_every_family():
    assert EXPECTED_LEARNABLE <= set(LEARNABLE)
    assert EXPECTED_FIXED <= set(FIXED)
    assert A.resolve("swish") == "silu"


def test_unknown_name_lists_known():
    with pytest.raises(ValueError, match="did you mean relu.*visionbench list"):
        A.create("relux")


def test_unknown_option_lists_accepted():
    with pytest.raises(ValueError, match="accepted"):
        A.create("gelu", degree=3)


@pytest.mark.parametrize("name", [n for n in LEARNABLE if "degree" in A.accepted_kwargs(n)])
@pytest.mark.parametrize("degree", [0, -1, 2.5])
def test_bad_degree_is_value_error(name, degree):
    with pytest.raises(ValueError):
        A.create(name, degree=degree)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(4, 8, 5, 5), (3, 7, 8)])
def test_forward_keeps_shape_and_dtype(name, dtype, shape):
    act = A.create(name).to(dtype)
    x = torch.randn(*shape, dtype=dtype)
    y = act(x.clone())
    assert y.shape == x.shape and y.dtype == dtype and torch.isfinite(y).all()


@pytest.mark.parametrize("name", ALL)
def test_takes_inplace_like_timm(name):
    act = A.create(name, inplace=True)
    x = torch.randn(2, 3, 4, 4)
    assert act(x.clone()).shape == x.shape
    layer = A.get_act_layer(name)
    assert isinstance(layer(inplace=True), nn.Module)


@pytest.mark.parametrize("name", ALL)
def test_deepcopy_and_save_load_of_a_model(name):
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), A.create(name), nn.Flatten(), nn.Linear(4 * 16, 2))
    x = torch.randn(2, 3, 4, 4)
    model.eval()
    y = model(x)
    torch.testing.assert_close(copy.deepcopy(model)(x), y)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    torch.testing.assert_close(loaded(x), y)
    fresh = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), A.create(name), nn.Flatten(), nn.Linear(4 * 16, 2)).eval()
    fresh.load_state_dict(model.state_dict())
    torch.testing.assert_close(fresh(x), y)


@pytest.mark.parametrize("name", LEARNABLE)
def test_gradcheck_input_and_coefficients(name):
    act = A.create(name).double().eval()
    x = (torch.rand(2, 3, 2, 2, dtype=torch.float64) * 4 - 2).requires_grad_(True)
    assert gradcheck_module(act, x, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("name", LEARNABLE)
def test_coefficient_gradients_exist(name):
    act = A.create(name)
    act(torch.randn(4, 8, 3, 3)).square().sum().backward()
    grads = [p.grad for p in act.parameters() if p.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("name", LEARNABLE)
def test_learnable_false_freezes(name):
    act = A.create(name, learnable=False)
    assert list(act.parameters()) and not any(p.requires_grad for p in act.parameters())


@pytest.mark.parametrize("name", LEARNABLE)
def test_per_channel(name):
    act = A.create(name, per_channel=True, num_channels=8)
    single = A.create(name)
    assert sum(p.numel() for p in act.parameters()) == 8 * sum(p.numel() for p in single.parameters())
    act.train(False), single.train(False)
    x = torch.randn(2, 8, 3, 3)
    assert act(x).shape == x.shape
    assert act(torch.randn(2, 5, 8)).shape == (2, 5, 8)  # tokens: channels last
    with pytest.raises(ValueError):
        A.create(name, per_channel=True)


def test_learnable_parameters_yields_exactly_activation_coefficients():
    model = nn.Sequential(nn.Linear(4, 4), A.create("polyrelu"), nn.Linear(4, 4), A.create(LEARNABLE[-1]), nn.ReLU())
    got = {id(p) for p in A.learnable_parameters(model)}
    want = {id(p) for m in (model[1], model[3]) for p in m.parameters()}
    assert got == want


@pytest.mark.parametrize("name", LEARNABLE)
@pytest.mark.parametrize("target", ["gelu", "relu"])
def test_fit_within_documented_tolerance(name, target):
    check_fit(A.create(name), target, A.get_class(name).fit_tolerance[target])


@pytest.mark.parametrize("name", LEARNABLE)
def test_fit_target_init_matches_fit(name):
    a = A.create(name, init="gelu")
    b = A.create(name)
    b.fit("gelu")
    a.eval(), b.eval()
    x = torch.linspace(-3, 3, 101)
    torch.testing.assert_close(a(x.view(1, -1)), b(x.view(1, -1)), atol=1e-5, rtol=1e-5)


def test_get_act_layer_builds_fresh_instances_and_passes_classes():
    layer = A.get_act_layer("hermite", degree=4)
    a, b = layer(inplace=True), layer()
    assert a is not b and a.degree == 4
    assert A.get_act_layer(nn.ReLU) is nn.ReLU
    p = functools.partial(nn.LeakyReLU, 0.2)
    assert A.get_act_layer(p) is p
    with pytest.raises(ValueError):
        A.get_act_layer("hermite", degree=0)
