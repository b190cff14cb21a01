"""Tiny ImageNet augmentation and weight decay as the 004 authors' code ran them (docs/recipes.md, note 8):
ColorJitter before torchvision's RandAugment, a plain-resize eval transform, and the `ndim`
weight-decay rule (pos_embed / cls_token / Swin's relative_position_bias_table decay)."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms import InterpolationMode

from visionbench import activations, models
from visionbench.config import block
from visionbench.data.transforms import build_eval_transform, build_train_transform, is_random, jitter_of
from visionbench.sweep.preflight import load_config
from visionbench.train.optim import build_optimizer

TINY_RECIPES = ["tinyimagenet_vit_s8", "tinyimagenet_cait_s24", "tinyimagenet_swin_t", "tinyimagenet_vit_s8_nonorm"]
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def image() -> Image.Image:
    pixels = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def _augment(**keys):
    return block("data", {"name": "tiny_imagenet", "augment": keys}).augment


def _recipe_train_transform(recipe: str = "tinyimagenet_vit_s8") -> T.Compose:
    cfg = block("data", load_config([f"recipe={recipe}"]).data)
    return build_train_transform(cfg.augment, 64, cfg.mean, cfg.std, native_size=64)


def _seeded(transform, img, seed: int) -> torch.Tensor:
    random.seed(seed)  # timm's crop and erasing draw from `random`, torchvision's ops from torch
    torch.manual_seed(seed)
    return transform(img)


# ---- data.augment ---------------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", TINY_RECIPES)
def test_recipes_set_the_004_code_values(recipe):
    cfg = load_config([f"recipe={recipe}"])
    aug = block("data", cfg.data).augment
    assert jitter_of(aug) == (0.4, 0.4, 0.4, 0.1)
    assert (aug.auto_augment, aug.auto_augment_impl) == ("rand-n2-m9", "torchvision")
    assert cfg.optim.decay_rule == "ndim" and cfg.optim.weight_decay == 0.05


def test_recipe_train_transform_is_the_004_pipeline_in_order():
    tfl = _recipe_train_transform().transforms
    kinds = [type(t).__name__ for t in tfl]
    assert kinds == [
        "RandomResizedCropAndInterpolation",
        "RandomHorizontalFlip",
        "ColorJitter",
        "RandAugment",
        "MaybeToTensor",
        "Normalize",
        "RandomErasing",
    ]
    crop, flip, jitter, rand_aug, _, norm, erase = tfl
    assert crop.scale == (0.6, 1.0) and crop.ratio == pytest.approx((0.75, 1.3333), abs=1e-4)
    assert crop.interpolation == InterpolationMode.BICUBIC and flip.p == 0.5
    assert (jitter.brightness, jitter.contrast, jitter.saturation) == ((0.6, 1.4),) * 3
    assert jitter.hue == pytest.approx((-0.1, 0.1))
    assert isinstance(rand_aug, T.RandAugment)  # torchvision's, not timm's RandAugment
    assert (rand_aug.num_ops, rand_aug.magnitude, rand_aug.num_magnitude_bins) == (2, 9, 31)
    assert rand_aug.fill is None and rand_aug.interpolation == InterpolationMode.NEAREST  # the 004 call's defaults
    assert norm.mean.tolist() == pytest.approx(MEAN) and norm.std.tolist() == pytest.approx(STD)
    assert erase.probability == 0.25 and erase.per_pixel  # = torchvision value="random"


def test_recipe_train_transform_output_and_determinism(image):
    tf = _recipe_train_transform()
    out = _seeded(tf, image, 0)
    assert out.shape == (3, 64, 64) and out.dtype == torch.float32
    assert out.min() < 0 < out.max() and out.abs().max() < 10  # normalised, not [0, 1]
    assert torch.equal(out, _seeded(tf, image, 0))
    assert not torch.equal(out, _seeded(tf, image, 1))


def test_torchvision_rand_augment_matches_the_004_call(image):
    ours = _augment(auto_augment="rand-n2-m9", auto_augment_impl="torchvision")
    (rand_aug,) = build_train_transform(ours, 64, MEAN, STD, native_size=64).transforms[:1]
    reference = T.RandAugment(num_ops=2, magnitude=9)
    for seed in range(8):
        torch.manual_seed(seed)
        a = np.asarray(rand_aug(image))
        torch.manual_seed(seed)
        assert np.array_equal(a, np.asarray(reference(image)))


def test_color_jitter_forms_and_order_with_timm_rand_augment():
    assert jitter_of(_augment(color_jitter=0.4)) == (0.4, 0.4, 0.4, 0.0)  # timm's scalar: no hue
    assert jitter_of(_augment(color_jitter=[0.1, 0.2, 0.3])) == (0.1, 0.2, 0.3, 0.0)
    aug = _augment(crop_pad=4, color_jitter=0.4, auto_augment="rand-m9-mstd0.5-inc1")  # CIFAR style too
    kinds = [type(t).__name__ for t in build_train_transform(aug, 32, MEAN, STD, native_size=32).transforms]
    assert kinds.index("ColorJitter") + 1 == kinds.index("RandAugment")  # timm's, right after the jitter
    assert is_random(_augment(color_jitter=0.4)) and not is_random(_augment(color_jitter=None))


@pytest.mark.parametrize(
    "keys, message",
    [
        (dict(auto_augment_impl="albumentations"), "auto_augment_impl"),
        (dict(auto_augment="rand-m9-mstd0.5-inc1", auto_augment_impl="torchvision"), "auto_augment"),
        (dict(auto_augment="augmix-m5", auto_augment_impl="torchvision"), "auto_augment"),
        (dict(auto_augment="rand-n2-m31", auto_augment_impl="torchvision"), "auto_augment"),
        (dict(color_jitter=[0.4, 0.4]), "color_jitter"),
        (dict(color_jitter="strong"), "color_jitter"),
        (dict(color_jitter=[0.4, 0.4, 0.4, 0.6]), "color_jitter"),
    ],
)
def test_bad_augment_keys_name_the_key(keys, message):
    with pytest.raises(ValueError, match=f"data.augment.{message}"):
        _augment(**keys)


def test_eval_transform_is_a_plain_resize(image):
    """004 code: Resize((64, 64), bicubic) -> ToTensor -> Normalize (no centre crop)."""
    for size in (64, 32):
        ours = build_eval_transform(size, MEAN, STD, native_size=64)
        reference = T.Compose(
            [T.Resize((size, size), interpolation=InterpolationMode.BICUBIC), T.ToTensor(), T.Normalize(MEAN, STD)]
        )
        assert torch.equal(ours(image), reference(image))


# ---- optim.decay_rule -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def transformers() -> dict[str, torch.nn.Module]:
    return {
        "vit_s8": models.create("vit_s8", act="rational", num_classes=200, img_size=64),
        "swin_t": models.create("swin_t", act="rational", num_classes=200, img_size=64, window_size=7),
    }


def _groups(model, rule: str) -> dict[str, dict]:
    groups = models.param_groups(
        model, lr=1e-3, weight_decay=0.05, act_lr_mult=4.0, act_weight_decay=0.0, decay_rule=rule
    )
    return {
        g["name"]: {**g, "names": {n for n, p in model.named_parameters() if any(p is q for q in g["params"])}}
        for g in groups
    }


@pytest.mark.parametrize("name", ["vit_s8", "swin_t"])
def test_ndim_rule_is_the_004_code_rule(transformers, name):
    model = transformers[name]
    by_name = _groups(model, "ndim")
    decay, no_decay, act = by_name["decay"]["names"], by_name["no_decay"]["names"], by_name["act"]
    tokens = (
        {"cls_token", "pos_embed"}
        if name == "vit_s8"
        else {n for n, _ in model.named_parameters() if n.endswith("relative_position_bias_table")}
    )
    assert len(tokens) in (2, 12) and tokens <= decay
    for n, p in model.named_parameters():
        if n in act["names"]:
            continue
        expect_no_decay = p.ndim == 1 or n.endswith(".bias") or "norm" in n.lower()
        assert (n in no_decay) == expect_no_decay, n
    assert any(".norm1.weight" in n for n in no_decay) and any(n.endswith(".bias") for n in no_decay)
    assert {id(p) for p in act["params"]} == {id(p) for p in activations.learnable_parameters(model)}
    assert act["weight_decay"] == 0.0 and act["lr"] == pytest.approx(4e-3)
    assert by_name["decay"]["weight_decay"] == 0.05 and by_name["no_decay"]["weight_decay"] == 0.0


@pytest.mark.parametrize("name", ["vit_s8", "swin_t"])
def test_default_rule_unchanged(transformers, name):
    model = transformers[name]
    default = _groups(model, "conv_linear")
    assert {k: g["names"] for k, g in default.items()} == {
        g["name"]: {n for n, p in model.named_parameters() if any(p is q for q in g["params"])}
        for g in models.param_groups(model, lr=1e-3, weight_decay=0.05, act_lr_mult=4.0)
    }
    skipped = (
        {"cls_token", "pos_embed"}
        if name == "vit_s8"
        else {n for n, _ in model.named_parameters() if n.endswith("relative_position_bias_table")}
    )
    assert skipped <= default["no_decay"]["names"]  # no_weight_decay(): no decay under conv_linear
    assert default["act"]["names"] == _groups(model, "ndim")["act"]["names"]


def test_build_optimizer_reads_decay_rule(transformers):
    model = transformers["vit_s8"]
    optim = block(
        "optim", {"name": "adamw", "lr": 2e-3, "lr_base_batch": 512, "weight_decay": 0.05, "decay_rule": "ndim"}
    )
    opt = build_optimizer(model, optim, batch_size=128, act_lr_mult=4.0)
    decay = {id(p) for g in opt.param_groups if g["name"] == "decay" for p in g["params"]}
    assert id(model.pos_embed) in decay and id(model.cls_token) in decay
    with pytest.raises(ValueError, match="optim.decay_rule"):
        build_optimizer(model, dataclasses.replace(optim, decay_rule="everything"), batch_size=128)
