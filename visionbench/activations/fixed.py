"""Fixed (coefficient-free) activations. Each takes `inplace`, as timm calls `act_layer(inplace=True)`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .registry import register


@register("relu")
class ReLU(nn.ReLU):
    def __init__(self, inplace: bool = False):
        super().__init__(inplace=inplace)


@register("leaky_relu")
class LeakyReLU(nn.LeakyReLU):
    def __init__(self, inplace: bool = False, negative_slope: float = 0.01):
        super().__init__(negative_slope=negative_slope, inplace=inplace)


@register("gelu")
class GELU(nn.GELU):
    """GELU, erf form (`approximate="tanh"` available)."""

    def __init__(self, inplace: bool = False, approximate: str = "none"):
        super().__init__(approximate=approximate)


@register("silu", aliases=("swish",))
class SiLU(nn.SiLU):
    def __init__(self, inplace: bool = False):
        super().__init__(inplace=inplace)


@register("mish")
class Mish(nn.Mish):
    def __init__(self, inplace: bool = False):
        super().__init__(inplace=inplace)


@register("tanh")
class Tanh(nn.Tanh):
    def __init__(self, inplace: bool = False):
        super().__init__()


@register("sigmoid")
class Sigmoid(nn.Sigmoid):
    def __init__(self, inplace: bool = False):
        super().__init__()


@register("identity")
class Identity(nn.Identity):
    def __init__(self, inplace: bool = False):
        super().__init__()


@register("elu")
class ELU(nn.ELU):
    """ELU, x if x > 0 else alpha (e^x - 1), alpha = 1 (Clevert et al. 2016, ICLR, "... learning by ELUs")."""

    def __init__(self, inplace: bool = False, alpha: float = 1.0):
        super().__init__(alpha=alpha, inplace=inplace)


@register("selu")
class SELU(nn.SELU):
    """SELU, lambda ELU_alpha(x), self-normalising constants (Klambauer et al. 2017, "Self-normalizing NNs")."""

    def __init__(self, inplace: bool = False):
        super().__init__(inplace=inplace)


@register("softplus")
class Softplus(nn.Softplus):
    """Softplus, log(1 + e^(beta x)) / beta, linear above `threshold` as torch (Dugas et al. 2001, NeurIPS)."""

    def __init__(self, inplace: bool = False, beta: float = 1.0, threshold: float = 20.0):
        super().__init__(beta=beta, threshold=threshold)


@register("hardswish")
class Hardswish(nn.Hardswish):
    """Hard-swish, x relu6(x + 3) / 6 (Howard et al. 2019, "Searching for MobileNetV3", Sec 5.2)."""

    def __init__(self, inplace: bool = False):
        super().__init__(inplace=inplace)


@register("relu6")
class ReLU6(nn.ReLU6):
    """ReLU6, min(max(0, x), 6) (Krizhevsky 2010, CIFAR-10 convolutional DBNs; used by MobileNets)."""

    def __init__(self, inplace: bool = False):
        super().__init__(inplace=inplace)


@register("relu2")
class ReLU2(nn.Module):
    """Squared ReLU, relu(x)^2 (So et al. 2021, "Primer: searching for efficient transformers", Sec 3).
    Never in place: relu(x)^2 needs relu(x) for its backward."""

    def __init__(self, inplace: bool = False):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x).square()
