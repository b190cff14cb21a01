"""The CIFAR models: VGG4/VGG8 (paper 004) and ResNet-32 (He et al.), their norms and timm registration."""

import pytest
import timm
import torch
from torch import nn

from visionbench import activations, models


def test_registered_in_timm():
    assert set(timm.list_models("vb_*")) >= {"vb_vgg4", "vb_vgg8", "vb_resnet32"}
    model = timm.create_model("vb_vgg8", num_classes=7, drop_rate=0.3, drop_path_rate=None)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 7)
    assert model.head_drop.p == 0.3
    assert model.pretrained_cfg["classifier"] == "head"
    with pytest.raises(ValueError, match="pretrained"):
        timm.create_model("vb_vgg4", pretrained=True)


@pytest.mark.parametrize(
    "name,convs",
    [
        ("vgg4", [64, 128, 256, 256]),
        ("vgg8", [64, 64, 128, 128, 256, 256, 512, 512]),
    ],
)
def test_vgg_layout(name, convs):
    model = models.create(name, num_classes=10)
    got = [m.out_channels for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert got == convs
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            assert m.kernel_size == (3, 3) and m.padding == (1, 1) and m.bias is not None
    assert sum(isinstance(m, nn.MaxPool2d) for m in model.modules()) == len(model.stages)
    assert sum(isinstance(m, nn.ReLU) for m in model.modules()) == len(convs)
    assert not any(isinstance(m, (nn.GroupNorm, nn.BatchNorm2d)) for m in model.modules())  # plain VGG


def test_vgg4_on_8px_digits_one_channel():
    model = models.create("vgg4", act="rational", num_classes=10, in_chans=1, img_size=8)
    assert model(torch.randn(5, 1, 8, 8)).shape == (5, 10)  # three pools: 8 -> 1


def test_vgg_any_size_and_too_small():
    model = models.create("vgg8", num_classes=10)
    for size in (16, 32, 40, 64):
        assert model(torch.randn(2, 3, size, size)).shape == (2, 10)
    with pytest.raises(ValueError, match="too small"):
        model(torch.randn(1, 3, 8, 8))  # four pools need 16 px
    with pytest.raises(ValueError, match="too small"):
        models.create("vgg8", img_size=8)


def test_vgg_flatten_head():
    model = models.create("vgg8", num_classes=10, img_size=32, global_pool="flatten")
    assert model.head.in_features == 512 * 2 * 2
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_group_norm_rule():
    assert [models.num_groups(c) for c in (64, 128, 48, 24, 40, 12, 17, 3)] == [16, 16, 16, 12, 10, 12, 1, 3]


def test_gn_vgg8_groupnorm_right_before_every_activation():
    model = models.create("vgg8", act="rational", norm="group", num_classes=10)
    acts = 0
    for stage in model.stages:
        layers = list(stage)
        for i, layer in enumerate(layers):
            if isinstance(layer, activations.LearnableActivation):
                acts += 1
                norm, conv = layers[i - 1], layers[i - 2]
                assert isinstance(norm, nn.GroupNorm) and isinstance(conv, nn.Conv2d)
                assert norm.num_channels == conv.out_channels and norm.num_groups == 16
    assert acts == 8 == len(model.swap_report)
    model(torch.randn(2, 3, 32, 32)).sum().backward()


def test_resnet32_architecture():
    model = models.create("resnet32", num_classes=10)
    params = sum(p.numel() for p in model.parameters())
    assert 0.455e6 < params < 0.47e6  # He et al. Table 6 / paper 003 Table 5: 0.46M
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 1 + 3 * 5 * 2  # option A: shortcuts have no conv
    assert sum(isinstance(m, nn.ReLU) for m in model.modules()) == 31
    feats = model.forward_features(torch.randn(2, 3, 32, 32))
    assert feats.shape == (2, 64, 8, 8)


def test_resnet32_option_b_group_norm_drop_path():
    model = models.create("resnet32", num_classes=10, norm="group", shortcut="B", drop_path_rate=0.1, drop_rate=0.2)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    assert sum(isinstance(m, nn.Conv2d) for m in model.modules()) == 31 + 2  # two projection shortcuts
    assert all(m.num_groups == 16 for m in model.modules() if isinstance(m, nn.GroupNorm))
    model.train()
    model(torch.randn(2, 3, 32, 32)).sum().backward()


def test_resnet50_group_norm_is_timm_variant():
    model = models.create("resnet50", norm="group", num_classes=10)
    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert len(norms) == 53 and not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    assert type(norms[0]).__module__.startswith("timm") and norms[0].num_groups == 32


def test_vgg_rejects_drop_path():
    with pytest.raises(ValueError, match="drop_path_rate"):
        models.create("vgg4", drop_path_rate=0.1)
    models.create("vgg4", drop_path_rate=0.0)  # what a recipe with drop_path 0 passes


@pytest.mark.parametrize("name,channels", [("vb_vgg4", [64, 128, 256]), ("vb_resnet32", [16, 32, 64])])
def test_built_by_timms_builder(name, channels):
    """`build_model_with_cfg` builds them as timm's own models: a pretrained cfg without weights
    (nothing to download), timm's features_only wrapper (one map per stage), device/dtype."""
    assert timm.get_pretrained_cfg(name).url == "" and not timm.list_models(name, pretrained=True)
    features = timm.create_model(name, features_only=True)
    assert [f.shape[1] for f in features(torch.randn(1, 3, 32, 32))] == channels
    assert next(timm.create_model(name, dtype=torch.float64).parameters()).dtype == torch.float64
