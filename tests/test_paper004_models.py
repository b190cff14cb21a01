"""Paper 004's CIFAR VGGs as 004 code builds them (flattened head) and 004 code's LSUV variant."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from visionbench import data, models
from visionbench.config import ConfigError, run_config
from visionbench.models.lsuv import PAPER004, lsuv_images, lsuv_init, swappable_types
from visionbench.sweep.preflight import load_config
from visionbench.sweep.sweep import run_sweep
from visionbench.train import run as one_run

VGG_RECIPES = ("cifar10_vgg4", "cifar10_vgg8", "cifar10_vgg4_aug", "cifar10_vgg8_aug")
# 004 code (VGGCIFARSmall): VGG4 4x4x256 -> Linear(4096, 10), VGG8 2x2x512 -> Linear(2048, 10)
HEAD_IN = {"vgg4": 4096, "vgg8": 2048}
PARAMS_RELU = {"vgg4": 1_001_866, "vgg8": 4_705_866}
CONVS = {
    "vgg4": ["stages.0.conv1", "stages.1.conv1", "stages.2.conv1", "stages.2.conv2"],
    "vgg8": [f"stages.{s}.conv{c}" for s in range(4) for c in (1, 2)],
}


def _recipe_model(recipe: str, cifar_root, act: str = "relu", *extra: str) -> tuple[dict, nn.Module]:
    """The run config and model of `recipe`, composed and built as tests/test_recipes.py (the sweep) does."""
    cfg = load_config([f"recipe={recipe}", f"data.root={cifar_root}", *extra])
    dm = data.create_datamodule(cfg.data, batch_size=int(cfg.batch_size), seed=0)
    run = run_config(cfg, act, seed=0)
    return run, one_run.build_model(run, dm.num_classes, dm.in_chans, dm.img_size)


@pytest.mark.parametrize("recipe", VGG_RECIPES)
def test_recipe_builds_004_codes_vgg(recipe, cifar_root):
    run, model = _recipe_model(recipe, cifar_root)
    name = run["model"]["name"]
    assert run["model"]["global_pool"] == "flatten" and run["model"]["lsuv_variant"] == "paper004"
    assert isinstance(model.head, nn.Linear) and (model.head.in_features, model.head.out_features) == (
        HEAD_IN[name],
        10,
    )
    assert sum(p.numel() for p in model.parameters()) == PARAMS_RELU[name]
    assert [n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)] == CONVS[name]
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_other_inputs_keep_the_average_pooled_head():
    cfg = load_config(["recipe=digits_vgg4"])
    assert cfg.model.global_pool is None and cfg.model.lsuv_variant == "mishkin"  # _base defaults
    model = one_run.build_model(run_config(cfg, "relu", seed=0), 10, 1, 8)
    assert isinstance(model.global_pool, nn.AdaptiveAvgPool2d) and model.head.in_features == 256


def _pre_mean_and_post_var(model: nn.Module, x: torch.Tensor) -> dict[str, tuple[float, float]]:
    """Per conv / linear, independently of lsuv.py: (mean of its output, population variance of the
    activation right after it, or of its own output for the classifier), model in eval mode."""
    outs: dict[str, torch.Tensor] = {}
    hooks = [
        m.register_forward_hook(lambda mod, i, o, n=n: outs.setdefault(n, o))
        for n, m in model.named_modules()
        if isinstance(m, (nn.Conv2d, nn.Linear, swappable_types()))
    ]
    model.eval()
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    stats = {}
    for n, o in outs.items():
        if "conv" in n or n == "head":
            post = outs[n.replace("conv", "act")] if "conv" in n else o
            stats[n] = (float(o.mean()), float(post.var(correction=0)))
    return stats


@pytest.mark.parametrize("name", ["vgg4", "vgg8"])
@pytest.mark.parametrize("act", ["relu", "rational"])
def test_paper004_lsuv_sets_post_activation_variance(name, act):
    torch.manual_seed(0)
    model = models.create(
        name,
        act=act,
        act_kwargs={"init": "leaky_relu"} if act == "rational" else {},
        num_classes=10,
        img_size=32,
        global_pool="flatten",
    )
    before = {n: m.weight.detach().clone() for n, m in model.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))}
    model.train()
    batch = torch.randn(128, 3, 32, 32)
    records = lsuv_init(model, batch, variant="paper004")
    layers = CONVS[name] + ["head"]
    assert [r.name for r in records] == layers
    assert [r.measured for r in records] == [n.replace("conv", "act") for n in CONVS[name]] + ["head"]
    # 004 code: accepted when the variance after the activation is within 10 % (relative) of 0.125
    assert all(r.converged and abs(r.variance - 0.125) / 0.125 <= 0.10 for r in records), records
    assert model.training  # flags restored
    for n, w in before.items():  # no orthonormal pre-init: each weight is only rescaled
        now = model.get_submodule(n).weight.detach()
        scale = float((now * w).sum() / (w * w).sum())
        assert torch.allclose(now, scale * w, rtol=1e-4, atol=1e-6), n
    stats = _pre_mean_and_post_var(model, batch[:64])
    for n in layers:
        mean, var = stats[n]
        # bias shifted by -mean (004 code shifts only when |mean| > 1e-3) ...
        assert abs(mean) <= 1e-3 + 1e-5, (n, mean)
        # ... after the variance was measured (004 code's order): the final variance moves a little
        assert abs(var - 0.125) / 0.125 <= 0.25, (n, var)


def test_paper004_lsuv_uses_only_the_first_64_images():
    torch.manual_seed(0)
    a = models.create("vgg4", num_classes=10, img_size=32, global_pool="flatten")
    b = models.create("vgg4", num_classes=10, img_size=32, global_pool="flatten")
    b.load_state_dict(a.state_dict())
    x = torch.randn(64, 3, 32, 32)
    lsuv_init(a, x, variant="paper004")
    lsuv_init(b, torch.cat([x, 100 * torch.randn(64, 3, 32, 32)]), variant="paper004")
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


def _reference_004_lsuv(model: nn.Module, x: torch.Tensor) -> None:
    """004 code's loop written out plainly for the VGG (whole forward each time, conv -> its act)."""
    model.eval()
    for name in [n for n, m in model.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))]:
        layer = model.get_submodule(name)
        target = model.get_submodule(name.replace("conv", "act")) if "conv" in name else layer
        for _ in range(10):
            out = {}
            h1 = layer.register_forward_hook(lambda m, i, o: out.setdefault("w", o))
            h2 = target.register_forward_hook(lambda m, i, o: out.setdefault("t", o))
            with torch.no_grad():
                model(x)
            h1.remove(), h2.remove()
            var, mean = float(out["t"].var(correction=0)), float(out["w"].mean())
            with torch.no_grad():
                if abs(mean) > 1e-3:
                    layer.bias -= mean
                if abs(var - 0.125) / 0.125 <= 0.1:
                    break
                layer.weight *= (0.125 / (var + 1e-6)) ** 0.5


@pytest.mark.parametrize("norm", [None, "group"])
def test_paper004_lsuv_matches_a_plain_transcription_of_the_loop(norm):
    torch.manual_seed(0)
    a = models.create("vgg4", num_classes=10, img_size=16, global_pool="flatten", norm=norm)
    b = models.create("vgg4", num_classes=10, img_size=16, global_pool="flatten", norm=norm)
    b.load_state_dict(a.state_dict())
    x = torch.randn(64, 3, 16, 16)
    lsuv_init(a, x, variant="paper004")
    _reference_004_lsuv(b, x)
    for (k, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-7), k


@pytest.mark.parametrize("act", ["relu", "rational"])
def test_paper004_lsuv_with_group_norm_shrinks_every_conv(act):
    """GroupNorm makes the post-activation variance independent of the conv's scale, so 004 code's
    loop rescales each conv its 10 times without converging; only the classifier converges."""
    torch.manual_seed(0)
    model = models.create("vgg4", act=act, num_classes=10, img_size=16, global_pool="flatten", norm="group")
    norms = {n: float(model.get_submodule(n).weight.detach().norm()) for n in CONVS["vgg4"]}
    records = lsuv_init(model, torch.randn(64, 3, 16, 16), variant="paper004")
    convs, head = records[:-1], records[-1]
    assert all(r.iterations == PAPER004["max_iters"] and not r.converged for r in convs)
    assert all(float(model.get_submodule(r.name).weight.detach().norm()) < 0.05 * norms[r.name] for r in convs)
    assert head.converged and abs(head.variance - 0.125) / 0.125 <= 0.10
    assert torch.isfinite(model(torch.randn(2, 3, 16, 16))).all()


def test_lsuv_images_and_variants():
    loader = [(torch.full((16, 1, 2, 2), float(i)), torch.zeros(16)) for i in range(6)]
    x = lsuv_images(loader, "paper004")  # 004 code: 64 images; small batches are joined
    assert x.shape[0] == 64 and torch.equal(x[:, 0, 0, 0], torch.arange(4).repeat_interleave(16).float())
    assert lsuv_images(loader, "mishkin").shape[0] == 16  # one batch, as before
    assert lsuv_images([(torch.zeros(128, 1), None)], "paper004").shape[0] == 64
    with pytest.raises(KeyError):  # not a registered variant (a run's is checked once, by the preflight)
        lsuv_init(nn.Linear(2, 2), torch.zeros(1, 2), variant="lsuv2")
    with pytest.raises(ConfigError, match="model.lsuv_variant must be one of mishkin, paper004"):
        load_config(["model.lsuv_variant=orthogonal"])


def test_run_uses_the_recipes_lsuv_variant_on_64_images(tmp_path, monkeypatch):
    seen = []
    real = one_run.models.lsuv_init

    def spy(model, batch, variant="mishkin", **kw):
        seen.append((variant, batch.shape[0]))
        return real(model, batch, variant=variant, **kw)

    monkeypatch.setattr(one_run.models, "lsuv_init", spy)
    cfg = load_config(
        [
            "recipe=digits_vgg4",
            f"results_dir={tmp_path}",
            "act=relu",
            "seeds=1",
            "epochs=1",
            "batch_size=32",
            "data.limit_train=128",
            "data.limit_val=64",
            "snapshot_epochs=[]",
            "model.lsuv=true",
            "model.lsuv_variant=paper004",
            "trainer.portable=false",
        ]
    )
    (o,) = run_sweep(cfg, progress=False)
    assert o.status == "completed", o.summary.get("error")
    assert seen == [("paper004", 64)]  # two batches of 32 joined
