"""Optimizer parameter groups and parameter counts.

    >>> torch.optim.AdamW(param_groups(model, lr=2e-3, weight_decay=0.05, act_lr_mult=4.0))

Which parameters decay is the `decay_rule`:
- `conv_linear` (default): conv / linear weights only (paper 004 App E: "decays convolution and
  linear weights while setting weight decay to zero for biases and normalization parameters");
  biases, norm parameters, embeddings, position / class tokens and whatever the model's
  `no_weight_decay()` names get none.
- `ndim`: the 004 Tiny ImageNet code's rule: everything decays except 1-D parameters, names ending
  in `.bias` and names containing "norm" or "bn"; so ViT/CaiT's pos_embed and cls_token and Swin's
  relative_position_bias_table decay, and `no_weight_decay()` is not consulted.
Activation coefficients (no weight decay: 001 Sec 3.5) get their own group with lr x `act_lr_mult`
and `act_weight_decay` (0 in every paper) under either rule.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from ..activations import learnable_parameters

DECAY_TYPES = (nn.modules.conv._ConvNd, nn.Linear)
DECAY_RULES = ("conv_linear", "ndim")


def _no_weight_decay_names(model: nn.Module) -> set[str]:
    fn = getattr(model, "no_weight_decay", None)
    return set(fn()) if callable(fn) else set()


def _conv_linear_rule(model: nn.Module) -> Callable[[str, nn.Parameter], bool]:
    """Conv / linear weights, minus the names `no_weight_decay()` lists (004 App E)."""
    weights = {
        id(m.weight)
        for m in model.modules()
        if isinstance(m, DECAY_TYPES) and isinstance(getattr(m, "weight", None), nn.Parameter)
    }
    skip = _no_weight_decay_names(model)
    return lambda name, p: id(p) in weights and name not in skip


def _ndim_rule(model: nn.Module) -> Callable[[str, nn.Parameter], bool]:
    """The 004 Tiny ImageNet code's test, by shape and name only (pos_embed, cls_token decay)."""

    def decays(name: str, p: nn.Parameter) -> bool:
        lowered = name.lower()
        return not (p.ndim == 1 or name.endswith(".bias") or "norm" in lowered or "bn" in lowered)

    return decays


def decay_test(model: nn.Module, rule: str) -> Callable[[str, nn.Parameter], bool]:
    """(name, parameter) -> whether it gets weight decay, under `rule` (one of DECAY_RULES)."""
    rules = {"conv_linear": _conv_linear_rule, "ndim": _ndim_rule}
    if rule not in rules:
        raise ValueError(f"unknown optim.decay_rule {rule!r}; accepted: {', '.join(DECAY_RULES)}")
    return rules[rule](model)


def param_groups(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    act_lr_mult: float = 1.0,
    act_weight_decay: float = 0.0,
    decay_rule: str = "conv_linear",
) -> list[dict]:
    """Split the trainable parameters of `model` into "decay", "no_decay" and "act" groups.

    Every group carries `name`, `lr` and `weight_decay`; the activation multiplier lives in the
    "act" group's `lr` itself, which the schedule (train/module.py `lr_lambda`) scales per step like
    every group's base lr (no `lr_scale` key: nothing here runs timm's schedulers, the only readers of one).
    Parameters with `requires_grad=False` are left out; empty groups are dropped. `decay_rule`
    picks what decays (module docstring); activation coefficients go to "act" whatever the rule.
    """
    act_ids = {id(p) for p in learnable_parameters(model)}
    decays = decay_test(model, decay_rule)
    groups: dict[str, list[nn.Parameter]] = {"decay": [], "no_decay": [], "act": []}
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        if id(p) in act_ids:
            groups["act"].append(p)
        elif decays(name, p):
            groups["decay"].append(p)
        else:
            groups["no_decay"].append(p)
    settings = {
        "decay": dict(lr=lr, weight_decay=weight_decay),
        "no_decay": dict(lr=lr, weight_decay=0.0),
        "act": dict(lr=lr * act_lr_mult, weight_decay=act_weight_decay),
    }
    return [dict(name=k, params=v, **settings[k]) for k, v in groups.items() if v]


def count_parameters(model: nn.Module) -> dict[str, int]:
    """{"params": every parameter element, "act_params": those of learnable activations} (shared counted once)."""
    total = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    act = sum(p.numel() for p in learnable_parameters(model))
    return {"params": total, "act_params": act}
