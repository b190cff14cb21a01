"""LSUV init, optimizer parameter groups and parameter counts."""

import pytest
import torch
from torch import nn

from visionbench import activations, models


def _assert_lsuv(records, layers, tol=0.1):
    assert [r.name for r in records] == layers
    bad = [(r.name, r.variance) for r in records if not abs(r.variance - 1.0) < tol]
    assert not bad and all(r.converged for r in records)


@pytest.mark.parametrize("act", ["relu", "rational", "slaf"])
def test_lsuv_vgg8_every_layer_within_tolerance(act):
    model = models.create("vgg8", act=act, num_classes=10, norm="group" if act == "slaf" else None)
    batch = torch.randn(16, 3, 32, 32)
    records = models.lsuv_init(model, batch)
    layers = [f"stages.{s}.conv{c}" for s in range(4) for c in (1, 2)] + ["head"]
    _assert_lsuv(records, layers)
    # the records are true: measure again, independently of lsuv's own hooks
    seen = {}

    def record(name):
        def hook(module, inputs, output):
            seen[name] = float(output.var())

        return hook

    hooks = [model.get_submodule(n).register_forward_hook(record(n)) for n in layers]
    model.train()
    with torch.no_grad():
        model(batch)
    for h in hooks:
        h.remove()
    assert all(abs(seen[n] - 1.0) < 0.1 for n in layers)


def test_lsuv_resnet32_restores_buffers_and_modes():
    model = models.create("resnet32", act="slaf", num_classes=10, drop_rate=0.5)
    model.eval()
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    records = models.lsuv_init(model, torch.randn(4, 3, 32, 32))
    assert len(records) == 31 + 1  # every conv + the classifier, execution order
    assert records[0].name == "stem.conv" and records[-1].name == "head"
    assert all(abs(r.variance - 1.0) < 0.1 for r in records)
    assert not any(m.training for m in model.modules())  # eval mode restored
    assert all(torch.equal(v, buffers[k]) for k, v in model.named_buffers())  # running stats untouched


def test_lsuv_orthonormal_preinit():
    layer = nn.Linear(8, 8)
    models.orthonormal_init(layer)
    assert torch.allclose(layer.weight @ layer.weight.T, torch.eye(8), atol=1e-5)


@pytest.mark.slow
def test_lsuv_vit_with_learnable_acts():
    model = models.create("vit_s8", act="rational", num_classes=200, img_size=64)
    records = models.lsuv_init(model, torch.randn(4, 3, 64, 64))
    assert len(records) == 1 + 12 * 4 + 1  # patch embed, (qkv, proj, fc1, fc2) x 12, head
    assert all(abs(r.variance - 1.0) < 0.1 for r in records)


def _ids(params):
    return {id(p) for p in params}


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("vgg8", dict(act="rational", norm="group", num_classes=10)),
        ("vit_tiny_patch16_224", dict(act="hermite", img_size=32, num_classes=10)),  # cls/pos tokens, LayerNorm
        ("convnext_atto", dict(act="slaf", num_classes=10)),
    ],
)
def test_param_groups_partition(name, kwargs):
    model = models.create(name, **kwargs)
    groups = models.param_groups(model, lr=0.02, weight_decay=5e-4, act_lr_mult=0.5)
    by_name = {g["name"]: g for g in groups}
    assert set(by_name) == {"decay", "no_decay", "act"}
    all_ids = [id(p) for g in groups for p in g["params"]]
    assert len(all_ids) == len(set(all_ids)) and set(all_ids) == _ids(model.parameters())  # exact partition
    assert _ids(by_name["act"]["params"]) == _ids(activations.learnable_parameters(model))
    assert by_name["act"]["lr"] == pytest.approx(0.01) and by_name["act"]["weight_decay"] == 0.0
    assert by_name["decay"]["weight_decay"] == 5e-4 and by_name["no_decay"]["weight_decay"] == 0.0
    decayed = {n for n, p in model.named_parameters() if id(p) in _ids(by_name["decay"]["params"])}
    modules = dict(model.named_modules())
    for n in decayed:  # only conv / linear weights
        owner, _, leaf = n.rpartition(".")
        assert leaf == "weight" and isinstance(modules[owner], (nn.Conv2d, nn.Linear))
    for n, _ in model.named_parameters():
        if n.endswith(".bias") or n in ("cls_token", "pos_embed") or ".norm" in n:
            assert n not in decayed
    torch.optim.SGD(groups, lr=0.02, momentum=0.9).step()  # torch accepts them as they are


def test_param_groups_skip_frozen_and_drop_empty():
    model = models.create("vgg4", act="relu", num_classes=10)
    for p in model.stages.parameters():
        p.requires_grad_(False)
    groups = models.param_groups(model, lr=0.1, weight_decay=0.0, act_lr_mult=3.0)
    assert [g["name"] for g in groups] == ["decay", "no_decay"]  # no learnable act: no "act" group
    assert _ids(p for g in groups for p in g["params"]) == _ids(model.head.parameters())


def test_count_parameters():
    model = models.create("vgg8", act="rational", num_classes=10)
    counts = models.count_parameters(model)
    assert counts["params"] == sum(p.numel() for p in model.parameters())
    assert counts["act_params"] == 8 * 10  # 8 rationals x (6 numerator + 4 denominator) coefficients
    assert models.count_parameters(models.create("vgg8", num_classes=10))["act_params"] == 0
