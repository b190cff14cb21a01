"""models.create: names, pass-through, toggles (norm-free transformers, Swin at 64 px), errors."""

import pytest
import timm
import torch
from torch import nn

from visionbench import models


def test_unknown_model_lists_accepted():
    with pytest.raises(ValueError, match=r"unknown model 'vgg5'.*vgg4, vgg8, resnet32.*timm"):
        models.create("vgg5")


def test_unknown_act_lists_accepted_before_building():
    with pytest.raises(ValueError, match=r"unknown activation 'relux' \(did you mean relu.*visionbench list"):
        models.create("cait_s24", act="relux")  # fails before building the 47M-parameter model
    with pytest.raises(ValueError, match=r"does not take degre.*accepted"):
        models.create("vgg4", act="hermite", act_kwargs={"degre": 3})


@pytest.mark.parametrize(
    "name,kwargs,supported",
    [
        ("vit_s8", dict(norm="group"), "resnet50, vgg4, vgg8, resnet32"),
        ("convnext_t", dict(norm="group"), "resnet50, vgg4, vgg8, resnet32"),
        ("vgg8", dict(norm_free=True), "vit_s8, cait_s24, swin_t"),
        ("resnet50", dict(norm_free=True), "vit_s8, cait_s24, swin_t"),
    ],
)
def test_unsupported_toggle_names_supported_models(name, kwargs, supported):
    with pytest.raises(ValueError, match=f"not supported by '{name}'; supported models: {supported}"):
        models.create(name, **kwargs)


def test_bad_toggle_values():
    with pytest.raises(ValueError, match="unknown norm 'batch'; accepted: group"):
        models.create("vgg4", norm="batch")
    with pytest.raises(ValueError, match="needs an act"):
        models.create("vgg4", fit_to_replaced=True)


def test_timm_passthrough_and_kwargs():
    model = models.create("resnet18", act="rational", num_classes=3, in_chans=1)
    assert len(model.swap_report) == 1 + 2 * (2 + 2 + 2 + 2)  # stem + 2 per basic block
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, 3)
    assert models.create("vgg4").swap_report is None  # no act: the model's own activations
    assert models.create("resnet18", num_classes=3, img_size=32)(torch.randn(2, 3, 32, 32)).shape == (2, 3)


def test_timm_id_of_a_short_name_gets_its_toggles():
    model = models.create("vb_vgg4", norm="group", num_classes=10)
    assert sum(isinstance(m, nn.GroupNorm) for m in model.modules()) == 4


def test_swin_window_rule():
    assert models.swin_window_size(224) == 7  # timm's own
    assert models.swin_window_size(64) == 4  # maps 16, 8, 4, 2
    assert models.swin_window_size(32) == 4  # maps 8, 4, 2, 1


def test_swin_64px_tiles_without_padding():
    model = models.create("swin_t", act="rational", num_classes=200, img_size=64)
    blocks = [b for layer in model.layers for b in layer.blocks]
    res = [b.input_resolution[0] for b in blocks]
    assert sorted(set(res)) == [2, 4, 8, 16]
    for b in blocks:
        assert b.input_resolution[0] % b.window_size[0] == 0  # no padded windows
    assert blocks[1].shift_size == (2, 2)  # shifted windows still alternate in the first stage
    assert model(torch.randn(2, 3, 64, 64)).shape == (2, 200)
    override = models.create("swin_t", num_classes=10, img_size=64, window_size=8)
    assert override.layers[0].blocks[0].window_size == (8, 8)


def test_norm_free_vit_s8_trains():
    model = models.create("vit_s8", act="rational", num_classes=200, img_size=64, norm_free=True, drop_path_rate=0.1)
    for block in model.blocks:
        assert not any(isinstance(m, nn.LayerNorm) for m in block.modules())
        assert isinstance(block.norm1, nn.Identity) and isinstance(block.norm2, nn.Identity)
    assert isinstance(model.norm, nn.LayerNorm)  # the final norm is not a block norm (paper 004 App G)
    opt = torch.optim.AdamW(models.param_groups(model, lr=1e-3, weight_decay=0.05, act_lr_mult=4.0))
    x, y = torch.randn(2, 3, 64, 64), torch.tensor([3, 150])
    before = [p.detach().clone() for p in model.blocks[0].mlp.act.parameters()]
    model.train()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    assert torch.isfinite(loss)
    after = list(model.blocks[0].mlp.act.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before))


def test_make_norm_free_covers_cait_class_attention_and_swin():
    cait = timm.create_model("cait_xxs24_224", img_size=32, num_classes=10)  # same block layout as cait_s24
    assert len(models.make_norm_free(cait)) == 2 * (24 + 2)
    swin = models.create("swin_t", img_size=64, num_classes=10, norm_free=True)
    for layer in swin.layers:
        for block in layer.blocks:
            assert isinstance(block.norm1, nn.Identity) and isinstance(block.norm2, nn.Identity)
    assert swin(torch.randn(1, 3, 64, 64)).shape == (1, 10)
    with pytest.raises(ValueError, match="norm1/norm2"):
        models.make_norm_free(nn.Sequential(nn.Linear(2, 2)))


@pytest.mark.slow
def test_norm_free_cait_s24_forward():
    model = models.create("cait_s24", act="rational", num_classes=200, img_size=64, norm_free=True)
    blocks = list(model.blocks) + list(model.blocks_token_only)
    assert len(blocks) == 26 and all(isinstance(b.norm1, nn.Identity) for b in blocks)
    assert model(torch.randn(1, 3, 64, 64)).shape == (1, 200)
