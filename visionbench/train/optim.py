"""Optimizer of a run from the recipe's `optim` block: SGD (Nesterov) or AdamW over the model's
parameter groups (weights decayed as `optim.decay_rule` says; biases, norms and activation
coefficients not; coefficients with their own lr multiplier, paper 004 Table 6 and 10)."""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from ..models import param_groups
from ..schema import defaults

OPTIMIZERS = ("sgd", "adamw")


def check_name(name: str, where: str = "") -> str:
    """The optimizer name, lower-cased; ValueError naming optim.name (the one check: runner/config.py
    calls it before any training, `build_optimizer` for direct callers)."""
    if str(name).lower() not in OPTIMIZERS:
        raise ValueError(f"unknown optim.name {name!r}{where}; accepted: {', '.join(OPTIMIZERS)}")
    return str(name).lower()


def _complete(optim: Mapping[str, Any]) -> dict[str, Any]:
    """`optim` over the schema's defaults (visionbench/schema.py): a partial dict means what a recipe means."""
    return {**defaults()["optim"], **optim}


def scaled_lr(optim: Mapping[str, Any], batch_size: int) -> float:
    """The recipe's lr, scaled by batch_size / lr_base_batch when set (004 Table 10: 2e-3 x bs/512)."""
    lr = float(optim["lr"])
    ref = _complete(optim)["lr_base_batch"]
    return lr * batch_size / float(ref) if ref else lr


def build_optimizer(model: nn.Module, optim: Mapping[str, Any], batch_size: int,
                    act_lr_mult: float = 1.0) -> torch.optim.Optimizer:
    """The optimizer over the model's trainable parameters, grouped by `models.param_groups`."""
    optim = _complete(optim)
    name = check_name(optim["name"])
    lr = scaled_lr(optim, batch_size)
    groups = param_groups(model, lr=lr, weight_decay=float(optim["weight_decay"]), act_lr_mult=act_lr_mult,
                          act_weight_decay=float(optim["act_weight_decay"]), decay_rule=str(optim["decay_rule"]).lower())
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=float(optim["momentum"]), nesterov=bool(optim["nesterov"]))
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(optim["betas"]), eps=float(optim["eps"]))
