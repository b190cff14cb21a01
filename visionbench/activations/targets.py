"""Classical activations as float64 target functions for fitting (`LearnableActivation.fit`)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

TARGETS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.01),
    "gelu": F.gelu,  # erf form
    "silu": F.silu,
    "swish": F.silu,
    "mish": F.mish,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "identity": lambda x: x,
    "elu": F.elu,  # alpha 1
    "selu": F.selu,
    "softplus": F.softplus,  # beta 1, threshold 20
    "hardswish": F.hardswish,
    "relu6": F.relu6,
    "relu2": lambda x: F.relu(x).square(),
}


def target_names() -> list[str]:
    return sorted(TARGETS)


def get_target(target: str | Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """A target by name, or any callable mapping a float64 tensor elementwise."""
    if callable(target):
        return target
    key = str(target).lower()
    if key not in TARGETS:
        raise ValueError(f"unknown fit target {target!r}; known: {', '.join(target_names())}")
    return TARGETS[key]


def value_and_derivative(target, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """g(x) and g'(x) for an elementwise target, in float64 (derivative by autograd)."""
    g = get_target(target)
    x = x.detach().to(torch.float64).requires_grad_(True)
    y = g(x)
    (dy,) = torch.autograd.grad(y.sum(), x)
    return y.detach(), dy.detach()
