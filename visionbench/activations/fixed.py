"""Fixed (coefficient-free) activations. Each takes `inplace`, as timm calls `act_layer(inplace=True)`."""
from __future__ import annotations

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
