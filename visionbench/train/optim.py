"""Optimizer of a run from the recipe's `optim` block: SGD (Nesterov) or AdamW over the model's
parameter groups (weights decayed as `optim.decay_rule` says; biases, norms and activation
coefficients not; coefficients with their own lr multiplier, paper 004 Table 6 and 10)."""

from __future__ import annotations

import torch
from torch import nn

from ..config.schema import OptimConfig
from ..models import param_groups


def scaled_lr(optim: OptimConfig, batch_size: int) -> float:
    """The recipe's lr, scaled by batch_size / lr_base_batch when set (004 Table 10: 2e-3 x bs/512)."""
    return optim.lr * batch_size / optim.lr_base_batch if optim.lr_base_batch else optim.lr


def build_optimizer(
    model: nn.Module, optim: OptimConfig, batch_size: int, act_lr_mult: float = 1.0
) -> torch.optim.Optimizer:
    """The optimizer over the model's trainable parameters, grouped by `models.param_groups`. `optim`
    is a whole, checked, typed block (a run's `typed` config, or `config.block("optim", {...})`):
    `optim.name` is one of config.OPTIMIZERS there."""
    lr = scaled_lr(optim, batch_size)
    groups = param_groups(
        model,
        lr=lr,
        weight_decay=optim.weight_decay,
        act_lr_mult=act_lr_mult,
        act_weight_decay=optim.act_weight_decay,
        decay_rule=optim.decay_rule,
    )
    if optim.name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=optim.momentum, nesterov=optim.nesterov)
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(optim.betas), eps=optim.eps)
