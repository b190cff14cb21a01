"""Every model x {baseline, rational, hermite, polynorm, slaf, tropical}: swap count, no original act
left, coefficient count, forward + backward. Big backbones are built once and swapped on copies;
the cheap CIFAR models go through `models.create(act=...)`. Default run: every combination of the
CIFAR models, and baseline + one learnable family per big backbone; the rest is `slow`.
"""

import copy
import functools

import pytest
import torch
from timm.layers import activations as timm_acts
from torch import nn

from visionbench import activations, models

# Expected swap counts from architecture arithmetic (not from the code under test):
EXPECTED = {
    "resnet50": 1 + 3 * (3 + 4 + 6 + 3),  # stem ReLU + act1..act3 in each of 16 bottlenecks = 49
    "convnext_t": 3 + 3 + 9 + 3,  # one GELU per block MLP, depths (3, 3, 9, 3) = 18
    "vit_s8": 12,  # depth 12, one GELU per block MLP
    "cait_s24": 24 + 2,  # 24 self-attention + 2 class-attention blocks = 26
    "swin_t": 2 + 2 + 6 + 2,  # depths (2, 2, 6, 2) = 12
    "vgg4": 1 + 1 + 2,  # one act per conv: (1x64, 1x128, 2x256) = 4
    "vgg8": 2 + 2 + 2 + 2,  # (2x64, 2x128, 2x256, 2x512) = 8
    "resnet32": 1 + 3 * 5 * 2,  # stem + 2 per basic block, 3 stages x 5 blocks = 31 (paper 003)
}
BASELINE = {
    "resnet50": "relu",
    "vgg4": "relu",
    "vgg8": "relu",
    "resnet32": "relu",
    "convnext_t": "gelu",
    "vit_s8": "gelu",
    "cait_s24": "gelu",
    "swin_t": "gelu",
}
ORIGINAL = {"relu": (nn.ReLU,), "gelu": (nn.GELU, timm_acts.GELU)}  # what each model was built with
SIZE = {
    "resnet50": (32, 10),
    "convnext_t": (32, 10),
    "vit_s8": (64, 200),
    "cait_s24": (64, 200),
    "swin_t": (64, 200),
    "vgg4": (32, 10),
    "vgg8": (32, 10),
    "resnet32": (32, 10),
}
CHEAP = ("vgg4", "vgg8", "resnet32")
LEARNABLE = ("rational", "hermite", "polynorm", "slaf", "tropical")
# the learnable family each big backbone runs by default (chosen to cover NHWC ConvNeXt with a
# channel-wise family, and every family at least once)
# Options as the papers use them: rational starts from LeakyReLU in the CNNs (paper 004 Table 6) and
# from GELU (its default) in the transformers. Post-activation ResNet-32 (act after every residual
# sum, no norm after it) overflows at init with growing activations: a GELU-fitted rational grows
# like 45 x for |x| >> 3, the cubic Hermite like x^3 / 6 -- hence Hermite's soft clamp there.
ACT_KWARGS = {("rational", "relu"): {"init": "leaky_relu"}}
MODEL_ACT_KWARGS = {("resnet32", "hermite"): {"clamp": True}}
DEFAULT_LEARNABLE = {
    "resnet50": "slaf",
    "convnext_t": "polynorm",
    "vit_s8": "rational",
    "cait_s24": "hermite",
    "swin_t": "tropical",
}


def _cases():
    for name in EXPECTED:
        for act in (BASELINE[name],) + LEARNABLE:
            fast = name in CHEAP or act in (BASELINE[name], DEFAULT_LEARNABLE[name])
            yield pytest.param(name, act, id=f"{name}-{act}", marks=() if fast else pytest.mark.slow)


@functools.cache
def _base(name):
    img, classes = SIZE[name]
    return models.create(name, num_classes=classes, img_size=img)


def _build(name, act):
    img, classes = SIZE[name]
    kwargs = MODEL_ACT_KWARGS.get((name, act), ACT_KWARGS.get((act, BASELINE[name])))
    if name in CHEAP:
        model = models.create(name, act=act, num_classes=classes, img_size=img, act_kwargs=kwargs)
        return model, model.swap_report, kwargs
    model = copy.deepcopy(_base(name))
    return model, models.swap_activations(model, act, kwargs), kwargs


@pytest.mark.parametrize("name,act", list(_cases()))
def test_swap_forward_backward(name, act):
    model, report, kwargs = _build(name, act)
    assert len(report) == EXPECTED[name]
    assert report.functional == []
    new_cls = activations.get_class(act)
    swapped = [model.get_submodule(p) for p in report.paths]
    assert all(type(m) is new_cls for m in swapped)
    assert len({id(m) for m in swapped}) == len(swapped)  # fresh, independent instances
    originals = tuple(t for t in ORIGINAL[BASELINE[name]] if t is not new_cls and not issubclass(new_cls, t))
    assert not [p for p, m in model.named_modules() if isinstance(m, originals)]
    per_module = sum(p.numel() for p in activations.create(act, **(kwargs or {})).parameters())
    assert models.count_parameters(model)["act_params"] == EXPECTED[name] * per_module

    img, classes = SIZE[name]
    model.train()
    out = model(torch.randn(2, 3, img, img))
    assert out.shape == (2, classes)
    assert torch.isfinite(out).all()
    out.float().pow(2).mean().backward()
    coefs = list(activations.learnable_parameters(model))
    assert len(coefs) == (len(list(swapped[0].parameters())) * EXPECTED[name])
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in coefs)
    if coefs:
        assert any(p.grad.abs().sum() > 0 for p in coefs)


def test_convnext_nhwc_mlp_gets_channels_last():
    """ConvNeXt's block MLP runs on NHWC maps: channel-wise families must normalise the last dim."""
    model = copy.deepcopy(_base("convnext_t"))
    report = models.swap_activations(model, "polynorm", {"per_channel": True})
    dims = (96, 192, 384, 768)
    expected_channels = [4 * d for d, n in zip(dims, (3, 3, 9, 3)) for _ in range(n)]
    assert [e.num_channels for e in report] == expected_channels
    assert {e.channel_dim for e in report} == {-1}
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_cnn_sites_get_conv_channels():
    model = models.create("resnet32", act="slaf", num_classes=10)
    expected = [16] + [w for w in (16, 32, 64) for _ in range(10)]
    assert [e.num_channels for e in model.swap_report] == expected
    assert {e.channel_dim for e in model.swap_report} == {None}
    model(torch.randn(4, 3, 32, 32)).sum().backward()


def test_swap_again_replaces_swapped_model():
    model = models.create("vgg8", act="rational", num_classes=10)
    report = models.swap_activations(model, "hermite")
    assert len(report) == 8 and set(report.counts()) == {"visionbench.activations.rational.Rational"}


def test_head_activation_is_not_swapped():
    import timm

    model = timm.create_model("convnext_atto", head_hidden_size=32, num_classes=5)  # head.pre_logits.act = GELU
    report = models.swap_activations(model, "rational")
    assert len(report) == 2 + 2 + 6 + 2
    assert isinstance(model.head.pre_logits.act, timm_acts.GELU)
    assert not any(p.startswith("head") for p in report.paths)


def test_fit_to_replaced_fits_once_and_copies():
    model = models.create("vgg8", act="rational", num_classes=10, fit_to_replaced=True)
    fits = {id(e.fit) for e in model.swap_report}
    assert len(fits) == 1  # one distinct target (ReLU), fitted once
    first = model.swap_report.entries[0].fit
    assert first.target == "relu" and first.max_abs_error < 0.1
    states = [model.get_submodule(p).state_dict() for p in model.swap_report.paths]
    for s in states[1:]:
        assert all(torch.equal(s[k], states[0][k]) for k in s)
    x = torch.linspace(-3, 3, 101)
    act = model.get_submodule(model.swap_report.paths[3])
    assert (act(x) - torch.relu(x)).abs().max() < 0.1


def test_fit_to_replaced_gelu_in_transformer():
    model = copy.deepcopy(_base("swin_t"))
    report = models.swap_activations(model, "hermite", {"degree": 6}, fit_to_replaced=True)
    assert {e.fit.target for e in report} == {"gelu"} and len({id(e.fit) for e in report}) == 1


def test_fit_targets_of_classical_modules():
    assert models.fit_target(nn.GELU())[0] == "gelu"
    assert models.fit_target(timm_acts.GELU())[0] == "gelu"
    assert models.fit_target(nn.GELU(approximate="tanh"))[0] == "gelu_tanh"
    assert models.fit_target(nn.ReLU(inplace=True))[0] == "relu"
    assert models.fit_target(nn.LeakyReLU(0.2))[0] == "leaky_relu(0.2)"
    assert models.fit_target(nn.SiLU())[0] == "silu"
    key, target = models.fit_target(activations.create("polyrelu"))  # a learnable one: fitted as a function
    assert callable(target) and key[0].endswith("PolyReLU")


def test_functional_activation_is_reported():
    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.act = nn.ReLU()

        def forward(self, x):
            return torch.nn.functional.gelu(self.act(self.fc(x)))

    with pytest.warns(UserWarning, match="functional activation"):
        report = models.swap_activations(Functional(), "rational")
    assert len(report) == 1 and len(report.functional) == 1 and "gelu" in report.functional[0]


def test_swap_errors():
    with pytest.raises(ValueError, match="matched no activation"):
        models.swap_activations(nn.Sequential(nn.Linear(3, 3), nn.Softmax(-1)), "rational")
    with pytest.raises(ValueError, match="unknown activation.*rational"):
        models.swap_activations(models.create("vgg4"), "ratonal")
    with pytest.raises(ValueError, match="does not take.*accepted"):
        models.swap_activations(models.create("vgg4"), "rational", {"degre": 3})
    model = models.create("vgg4")
    with pytest.raises(ValueError):  # bad option value: the model is left untouched
        models.swap_activations(model, "rational", {"init": "nope"})
    assert all(isinstance(model.get_submodule(f"stages.{i}.act1"), nn.ReLU) for i in range(3))


def test_swapped_baseline_keeps_inplace_and_learnable_never():
    model = copy.deepcopy(_base("resnet50"))
    models.swap_activations(model, "relu")
    assert model.act1.inplace  # timm's ReLU(inplace=True) stays in place
    models.swap_activations(model, "tropical")
    assert not getattr(model.act1, "inplace", False)
