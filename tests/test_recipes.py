"""Every recipe composes and builds its model, data (tiny fixtures in the real on-disk formats),
optimizer and schedule with the recipe's own values; one-epoch runs on each dataset layout."""
from __future__ import annotations

import json

import pytest
import torch

from visionbench import data
from visionbench.runner.config import ConfigError, load_config, recipe_names, run_config, sweep_acts
from visionbench.runner.sweep import run_sweep
from visionbench.train.fit import build_model
from visionbench.train.optim import build_optimizer, scaled_lr
from visionbench.train.schedules import lr_lambda

PAPER_RECIPES = {
    "cifar10_vgg4", "cifar10_vgg8", "cifar10_vgg4_aug", "cifar10_vgg8_aug", "cifar10_convnext_t",
    "cifar10_resnet50", "imagenet_convnext_t", "imagenet_resnet50", "tinyimagenet_vit_s8",
    "tinyimagenet_cait_s24", "tinyimagenet_swin_t", "tinyimagenet_vit_s8_nonorm", "finetune_cifar10_convnext_t",
    "digits_vgg4",
}


def test_every_published_recipe_exists():
    assert PAPER_RECIPES <= set(recipe_names())


@pytest.fixture(scope="module")
def roots(cifar_root, tiny_root, imagenet_root):
    return {"cifar10": cifar_root, "tiny_imagenet": tiny_root, "imagenet": imagenet_root}


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
    run = run_config(cfg, act, seed=0)
    model = build_model(run, dm.num_classes, dm.in_chans, dm.img_size)
    assert len(model.swap_report) > 0
    mult = float(run["act_lr_mult"].get(run["act"], 1.0))
    opt = build_optimizer(model, run["optim"], int(run["batch_size"]), mult)
    lr = scaled_lr(run["optim"], int(run["batch_size"]))
    kinds = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}
    assert isinstance(opt, kinds[run["optim"]["name"]])
    by_name = {g["name"]: g for g in opt.param_groups}
    assert by_name["decay"]["lr"] == pytest.approx(lr)
    assert by_name["decay"]["weight_decay"] == pytest.approx(run["optim"]["weight_decay"])
    if "act" in by_name:
        assert by_name["act"]["lr"] == pytest.approx(lr * mult) and by_name["act"]["weight_decay"] == 0.0
    if run["optim"]["name"] == "sgd":
        assert opt.defaults["momentum"] == run["optim"]["momentum"] and opt.defaults["nesterov"] == run["optim"]["nesterov"]
    f = lr_lambda(run["sched"], lr, steps_per_epoch=10, epochs=int(run["epochs"]))
    warmup_steps = int(round(float(run["sched"]["warmup_epochs"]) * 10))
    assert f(warmup_steps) == pytest.approx(1.0)  # the recipe's lr is reached after warmup
    assert all(0 <= f(s) <= 1.0 + 1e-9 for s in range(0, 10 * int(run["epochs"]), 37))


@pytest.mark.parametrize("recipe, extra", [
    ("cifar10_vgg4", []),                                                   # CIFAR-10 pickle batches
    ("tinyimagenet_vit_s8", ["data.num_workers=0", "data.augment.repeated_aug=1"]),  # JPEG tree + val_annotations
    ("imagenet_resnet50", ["data.img_size=32", "batch_size=4"]),            # ImageFolder train/ val/
])
def test_one_epoch_on_each_dataset_layout(recipe, extra, roots, tmp_path):
    probe = load_config([f"recipe={recipe}"])
    cfg = load_config([f"recipe={recipe}", f"data.root={roots[probe.data.name]}", f"results_dir={tmp_path}",
                       "epochs=1", "seeds=1", f"act={probe.report.baseline}", "data.num_workers=0", *extra])
    (o,) = run_sweep(cfg, progress=False)
    assert o.status == "completed", o.summary.get("error")
    s = json.loads((o.run_dir / "summary.json").read_text())
    assert s["metrics"]["val_top1_best"] is not None


def test_unknown_optimizer_or_schedule_fails_before_training():
    with pytest.raises(ConfigError, match="accepted: sgd, adamw"):
        load_config(["optim.name=lamb"])
    with pytest.raises(ConfigError, match="accepted: constant, step, cosine"):
        load_config(["sched.name=poly"])
