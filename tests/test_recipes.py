"""Every recipe composes and builds its model, data (tiny fixtures in the real on-disk formats),
optimizer and schedule with the recipe's own values; one-epoch runs on each dataset layout."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from visionbench import data
from visionbench.config import RECIPES_DIR, ConfigError, recipe_names, run_config, typed
from visionbench.sweep.acts import sweep_acts
from visionbench.sweep.preflight import load_config
from visionbench.sweep.sweep import run_sweep
from visionbench.train.module import lr_lambda
from visionbench.train.optim import build_optimizer, scaled_lr
from visionbench.train.run import build_model

from .fixtures_fashion_mnist import write_fmnist

PAPER_RECIPES = {
    "cifar10_vgg4",
    "cifar10_vgg8",
    "cifar10_vgg4_aug",
    "cifar10_vgg8_aug",
    "cifar10_convnext_t",
    "cifar10_resnet50",
    "imagenet_convnext_t",
    "imagenet_resnet50",
    "tinyimagenet_vit_s8",
    "tinyimagenet_cait_s24",
    "tinyimagenet_swin_t",
    "tinyimagenet_vit_s8_nonorm",
    "finetune_cifar10_convnext_t",
    "digits_vgg4",
}


# Activation modules a swap replaces, from architecture arithmetic (as tests/test_models_swap.py EXPECTED):
SWAPS = {
    "vgg4": 1 + 1 + 2,  # one act per conv: (1x64, 1x128, 2x256)
    "vgg8": 2 + 2 + 2 + 2,  # (2x64, 2x128, 2x256, 2x512)
    "resnet32": 1 + 3 * 5 * 2,  # stem + 2 per basic block, 3 stages x 5 blocks = 31 (paper 003)
    "resnet50": 1 + 3 * (3 + 4 + 6 + 3),  # stem ReLU + act1..act3 in each of 16 bottlenecks = 49
    "convnext_t": 3 + 3 + 9 + 3,  # one GELU per block MLP, depths (3, 3, 9, 3) = 18
    "vit_s8": 12,  # depth 12, one GELU per block MLP (norm_free bypasses norms, not acts)
    "cait_s24": 24 + 2,  # 24 self-attention + 2 class-attention blocks
    "swin_t": 2 + 2 + 6 + 2,  # depths (2, 2, 6, 2)
    "fmnist_resnet": 1 + 2 * 2 + 2,  # stem, 2 per residual block (after the sum too), 2 hidden Fc (paper 003 Table 6)
}
# The model each recipe trains (a new recipe must be added here, with its model's swap count above)
RECIPE_MODEL = {
    "cifar10_vgg4": "vgg4",
    "cifar10_vgg4_aug": "vgg4",
    "cifar10_vgg8": "vgg8",
    "cifar10_vgg8_aug": "vgg8",
    "cifar10_convnext_t": "convnext_t",
    "cifar10_resnet50": "resnet50",
    "finetune_cifar10_convnext_t": "convnext_t",
    "imagenet_convnext_t": "convnext_t",
    "imagenet_resnet50": "resnet50",
    "digits_vgg4": "vgg4",
    "digits_vgg8": "vgg8",
    "digits_vgg4_aug": "vgg4",
    "digits_resnet32": "resnet32",
    "synthetic_vgg4": "vgg4",
    "tinyimagenet_vit_s8": "vit_s8",
    "tinyimagenet_vit_s8_nonorm": "vit_s8",
    "tinyimagenet_cait_s24": "cait_s24",
    "tinyimagenet_swin_t": "swin_t",
    "fashion_mnist_slaf": "fmnist_resnet",
    "fashion_mnist_vgg4": "vgg4",
}
# Recipes that inherit (`defaults: [PARENT, _self_]`): the composed keys in which each differs from its
# composed parent, with their values (flattened, dotted; empty dicts left out). Anything else a child
# composes to is its parent's, so this pins every child's whole config relative to its parent.
INHERITS = {
    "tinyimagenet_cait_s24": (
        "tinyimagenet_vit_s8",
        {"recipe": "tinyimagenet_cait_s24", "act_lr_mult.rational": 2.0, "model.name": "cait_s24"},
    ),
    "tinyimagenet_swin_t": (
        "tinyimagenet_vit_s8",
        {
            "recipe": "tinyimagenet_swin_t",
            "act_lr_mult.rational": 8.0,
            "model.name": "swin_t",
            "model.kwargs.window_size": 7,
        },
    ),
    "tinyimagenet_vit_s8_nonorm": (
        "tinyimagenet_vit_s8",
        {"recipe": "tinyimagenet_vit_s8_nonorm", "model.norm_free": True},
    ),
    "cifar10_vgg8": ("cifar10_vgg4", {"recipe": "cifar10_vgg8", "model.name": "vgg8"}),
    "digits_vgg8": ("digits_vgg4", {"recipe": "digits_vgg8", "model.name": "vgg8", "data.img_size": 16}),
    "digits_vgg4_aug": ("digits_vgg4", {"recipe": "digits_vgg4_aug", "data.augment.crop_pad": 1}),
    "cifar10_vgg8_aug": ("cifar10_vgg4_aug", {"recipe": "cifar10_vgg8_aug", "model.name": "vgg8"}),
    "cifar10_vgg4_aug": (
        "cifar10_vgg4",
        {
            "recipe": "cifar10_vgg4_aug",
            "act": "relu,leaky_relu,gelu,silu,rational[init=leaky_relu],rational[init=gelu]",
            "act_lr_mult.rational": 0.5,
            "factors.model.norm": [None, "group"],
            "factors.model.lsuv": [False, True],
            "report.best_of": ["model.lsuv"],
            "data.augment.crop_pad": 4,
            "data.augment.hflip": 0.5,
            "model.dropout": 0.3,
            "optim.weight_decay": 5.0e-4,
            "sched.name": "step",
            "sched.milestones": [30, 45],
            "loss.label_smoothing": 0.1,
            "loss.mixup": 0.2,
        },
    ),
    "cifar10_resnet50": (
        "cifar10_convnext_t",
        {"recipe": "cifar10_resnet50", "act": "relu", "seeds": 3, "report.baseline": "relu", "model.name": "resnet50"},
    ),
}
# What the shared parents themselves pin (the values their children inherit)
PARENT_KEYS = {
    "tinyimagenet_vit_s8": {
        "model.name": "vit_s8",
        "act": "relu,gelu,rational",
        "act_lr_mult.rational": 4.0,
        "report.baseline": "gelu",
        "report.metric": "ema_val_top1_best",
        "data.name": "tiny_imagenet",
        "optim.name": "adamw",
        "sched.name": "cosine",
        "ema.decay": 0.999,
        "model.norm_free": False,
    },
    "cifar10_vgg4": {
        "model.name": "vgg4",
        "report.baseline": "leaky_relu",
        "act_options.rational.init": "leaky_relu",
        "optim.name": "sgd",
        "sched.name": "constant",
        "data.augment.crop_pad": 0,
        "model.dropout": 0.0,
    },
    "cifar10_convnext_t": {
        "model.name": "convnext_t",
        "act": "gelu,tropical,fourier,hermite",
        "seeds": 10,
        "report.baseline": "gelu",
        "act_options.hermite.degree": 3,
    },
}
_MISSING = "<missing>"


def _flat(d: dict, prefix: str = "") -> dict:
    """Dotted keys of the leaves of a nested dict (an empty dict has none)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _composed(recipe: str) -> dict:
    return _flat(OmegaConf.to_container(load_config([f"recipe={recipe}"]), resolve=True))


def test_every_published_recipe_exists():
    assert PAPER_RECIPES <= set(recipe_names())


def test_every_recipe_records_its_model():
    assert set(RECIPE_MODEL) == set(recipe_names())
    for recipe, model in RECIPE_MODEL.items():
        assert load_config([f"recipe={recipe}"]).model.name == model, recipe


@pytest.mark.parametrize("child", sorted(INHERITS))
def test_child_recipe_differs_from_its_parent_only_in_recorded_keys(child):
    parent, expected = INHERITS[child]
    assert yaml.safe_load((RECIPES_DIR / f"{child}.yaml").read_text())["defaults"] == [parent, "_self_"]
    mine, theirs = _composed(child), _composed(parent)
    diff = {
        k: mine.get(k, _MISSING)
        for k in mine.keys() | theirs.keys()
        if mine.get(k, _MISSING) != theirs.get(k, _MISSING)
    }
    assert diff == expected


def _stated(recipe: str) -> dict:
    """The keys a recipe file and its parent recipe files set (not `_base`'s defaults), nearest wins."""
    own = yaml.safe_load((RECIPES_DIR / f"{recipe}.yaml").read_text())
    parents = [p for p in own.pop("defaults") if p not in ("_base", "_self_")]
    inherited = {k: v for p in parents for k, v in _stated(p).items()}
    return {**inherited, **_flat(own)}


@pytest.mark.parametrize("child", sorted(INHERITS))
def test_child_recipe_file_states_only_what_differs(child):
    """No key of a child file repeats a value its parent recipe states, and each value cites its source.
    (A paper value equal to `_base`'s default may be stated, as in every recipe: 004 Table 6's gamma 0.1.)"""
    parent = _stated(INHERITS[child][0])
    text = (RECIPES_DIR / f"{child}.yaml").read_text()
    own = _flat({k: v for k, v in yaml.safe_load(text).items() if k != "defaults"})
    assert [k for k, v in own.items() if parent.get(k, _MISSING) == v] == []
    assert text.startswith("# ")  # recipe_description() reads the first comment line
    values = [
        ln
        for ln in text.splitlines()
        if ":" in ln
        and not ln.lstrip().startswith("#")
        and not ln.rstrip().endswith(":")
        and not ln.startswith(("defaults:", "recipe:"))
    ]
    assert all("#" in ln for ln in values), [ln for ln in values if "#" not in ln]


@pytest.mark.parametrize("parent", sorted(PARENT_KEYS))
def test_parent_recipe_values(parent):
    cfg = _composed(parent)
    assert {k: cfg.get(k, _MISSING) for k in PARENT_KEYS[parent]} == PARENT_KEYS[parent]


def test_tinyimagenet_children_are_short():
    """Each tinyimagenet_* recipe other than the parent fits in ~25 lines."""
    for name in recipe_names():
        if name.startswith("tinyimagenet_") and name != "tinyimagenet_vit_s8":
            assert len((RECIPES_DIR / f"{name}.yaml").read_text().splitlines()) <= 25, name


@pytest.fixture(scope="module")
def roots(cifar_root, tiny_root, imagenet_root, tmp_path_factory):
    fmnist_root = tmp_path_factory.mktemp("fmnist")
    write_fmnist(fmnist_root / "fashion-mnist")
    return {"cifar10": cifar_root, "tiny_imagenet": tiny_root, "imagenet": imagenet_root, "fashion_mnist": fmnist_root}


@pytest.mark.parametrize("recipe", recipe_names())
def test_recipe_builds_model_data_optimizer_schedule(recipe, roots):
    overrides = [f"recipe={recipe}", "finetune.checkpoint=null"]
    probe = load_config([f"recipe={recipe}", "finetune.checkpoint=null"])
    if probe.data.name in roots:
        overrides.append(f"data.root={roots[probe.data.name]}")
    cfg = load_config(overrides)
    dm = data.create_datamodule(cfg.data, batch_size=int(cfg.batch_size), seed=0)
    assert dm.num_classes >= 2
    act = sweep_acts(cfg)[-1]  # the last of the sweep: usually the learnable one
    run = typed(run_config(cfg, act, seed=0))
    with torch.device("meta"):  # the structure, the swap and the parameter groups need no values (ResNet-50, CaiT ...)
        model = build_model(run, dm.num_classes, dm.in_chans, dm.img_size)
    assert all(p.is_meta for p in model.parameters())
    assert cfg.model.name == RECIPE_MODEL[recipe]
    assert len(model.swap_report) == SWAPS[RECIPE_MODEL[recipe]]  # every activation module, none left out
    assert model.swap_report.act == act.family
    mult = run.lr_mult
    opt = build_optimizer(model, run.optim, run.batch_size, mult)
    lr = scaled_lr(run.optim, run.batch_size)
    kinds = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}
    assert isinstance(opt, kinds[run.optim.name])
    by_name = {g["name"]: g for g in opt.param_groups}
    assert by_name["decay"]["lr"] == pytest.approx(lr)
    assert by_name["decay"]["weight_decay"] == pytest.approx(run.optim.weight_decay)
    if "act" in by_name:
        assert by_name["act"]["lr"] == pytest.approx(lr * mult) and by_name["act"]["weight_decay"] == 0.0
    if run.optim.name == "sgd":
        assert opt.defaults["momentum"] == run.optim.momentum and opt.defaults["nesterov"] == run.optim.nesterov
    f = lr_lambda(run.sched, lr, steps_per_epoch=10, epochs=run.epochs)
    warmup_steps = round(run.sched.warmup_epochs * 10)
    assert f(warmup_steps) == pytest.approx(1.0)  # the recipe's lr is reached after warmup
    assert all(0 <= f(s) <= 1.0 + 1e-9 for s in range(0, 10 * run.epochs, 37))


@pytest.mark.parametrize(
    "recipe, extra",
    [
        ("cifar10_vgg4", []),  # CIFAR-10 pickle batches
        pytest.param(  # JPEG tree + val_annotations; a ViT-S/8 epoch (7 s): make test-slow
            "tinyimagenet_vit_s8", ["data.num_workers=0", "data.augment.repeated_aug=1"], marks=pytest.mark.slow
        ),
        ("imagenet_resnet50", ["data.img_size=32", "batch_size=4"]),  # ImageFolder train/ val/
    ],
)
def test_one_epoch_on_each_dataset_layout(recipe, extra, roots, tmp_path):
    probe = load_config([f"recipe={recipe}"])
    cfg = load_config(
        [
            f"recipe={recipe}",
            f"data.root={roots[probe.data.name]}",
            f"results_dir={tmp_path}",
            "epochs=1",
            "seeds=1",
            f"act={probe.report.baseline}",
            "data.num_workers=0",
            *extra,
        ]
    )
    (o,) = run_sweep(cfg, progress=False)
    assert o.status == "completed", o.summary.get("error")
    s = json.loads((o.run_dir / "summary.json").read_text())
    assert s["metrics"]["val_top1_best"] is not None


def test_unknown_schedule_fails_before_training():
    """(An unknown optimizer: tests/test_schema.py, test_the_optimizer_name_is_checked_in_one_place.)"""
    with pytest.raises(ConfigError, match="sched.name must be one of constant, step, cosine, got 'poly'"):
        load_config(["sched.name=poly"])
