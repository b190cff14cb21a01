"""Fixed (coefficient-free) activations. Each takes `inplace`, as timm calls `act_layer(inplace=True)`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .registry import register


def _fixed(name: str, base: type[nn.Module], doc: str | None = None, aliases=(), passes_inplace: bool = True):
    """torch's `base`, registered as `name`, whose constructor takes only `inplace`: passed on where `base` takes it,
    accepted and ignored where it does not (tanh, sigmoid, identity)."""

    def __init__(self, inplace: bool = False):
        base.__init__(self, **({"inplace": inplace} if passes_inplace else {}))

    namespace = {"__init__": __init__, "__doc__": doc, "__module__": __name__, "__qualname__": base.__name__}
    return register(name, aliases=aliases)(type(base.__name__, (base,), namespace))


ReLU = _fixed("relu", nn.ReLU)


@register("leaky_relu")
class LeakyReLU(nn.LeakyReLU):
    def __init__(self, inplace: bool = False, negative_slope: float = 0.01):
        super().__init__(negative_slope=negative_slope, inplace=inplace)


@register("gelu")
class GELU(nn.GELU):
    """GELU, erf form (`approximate="tanh"` available)."""

    def __init__(self, inplace: bool = False, approximate: str = "none"):
        super().__init__(approximate=approximate)


SiLU = _fixed("silu", nn.SiLU, aliases=("swish",))
Mish = _fixed("mish", nn.Mish)
Tanh = _fixed("tanh", nn.Tanh, passes_inplace=False)
Sigmoid = _fixed("sigmoid", nn.Sigmoid, passes_inplace=False)
Identity = _fixed("identity", nn.Identity, passes_inplace=False)


@register("elu")
class ELU(nn.ELU):
    """ELU, x if x > 0 else alpha (e^x - 1), alpha = 1 (Clevert et al. 2016, ICLR, "... learning by ELUs")."""

    def __init__(self, inplace: bool = False, alpha: float = 1.0):
        super().__init__(alpha=alpha, inplace=inplace)


SELU = _fixed(
    "selu",
    nn.SELU,
    'SELU, lambda ELU_alpha(x), self-normalising constants (Klambauer et al. 2017, "Self-normalizing NNs").',
)


@register("softplus")
class Softplus(nn.Softplus):
    """Softplus, log(1 + e^(beta x)) / beta, linear above `threshold` as torch (Dugas et al. 2001, NeurIPS)."""

    def __init__(self, inplace: bool = False, beta: float = 1.0, threshold: float = 20.0):
        super().__init__(beta=beta, threshold=threshold)


Hardswish = _fixed(
    "hardswish",
    nn.Hardswish,
    'Hard-swish, x relu6(x + 3) / 6 (Howard et al. 2019, "Searching for MobileNetV3", Sec 5.2).',
)
ReLU6 = _fixed(
    "relu6", nn.ReLU6, "ReLU6, min(max(0, x), 6) (Krizhevsky 2010, CIFAR-10 convolutional DBNs; used by MobileNets)."
)


@register("relu2")
class ReLU2(nn.Module):
    """Squared ReLU, relu(x)^2 (So et al. 2021, "Primer: searching for efficient transformers", Sec 3).
    Never in place: relu(x)^2 needs relu(x) for its backward."""

    def __init__(self, inplace: bool = False):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x).square()
