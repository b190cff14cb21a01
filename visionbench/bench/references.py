"""Reference implementations that `visionbench bench activations` compares against, each loaded
with the coefficients of the visionbench module it stands for (so outputs can be compared too).

- torchortho (`pip install 'visionbench[reference]'`; GPL-3.0: imported and called when
  installed, never copied): Hermite (with its LearnableClamp), Fourier, Tropical, TropicalRational.
- rational-activations (same extra; its Python path): version A.
- PolyReLU and PolyNorm: the formulas of paper 000 App D, written below (the paper's listing has
  no package), with activation checkpointing as listed and the normalised dimension explicit.

`reference_for` returns None where there is no reference (SLAF, per-channel coefficients, other
rational versions) or the package is not installed.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


def _poly(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, order: int = 3) -> torch.Tensor:
    # paper 000 App D, Algorithm 1
    return sum(weight[i] * (x ** (i + 1)) for i in range(order)) + bias


def _norm(x: torch.Tensor, dim: int, eps: float = 1e-6) -> torch.Tensor:
    # paper 000 App D, Algorithm 2, over `dim` (the listing's -1 is the feature dim of tokens)
    return x * torch.rsqrt(x.pow(2).mean(dim, keepdim=True) + eps)


def _poly_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, dim: int, order: int = 3) -> torch.Tensor:
    return sum(weight[i] * _norm(x ** (i + 1), dim) for i in range(order)) + bias


class PaperPolyReLU(nn.Module):
    """PolyReLU as listed in paper 000 App D (Algorithm 1): ReLU, then a checkpointed power sum."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor):
        super().__init__()
        self.weight, self.bias = nn.Parameter(weight.clone()), nn.Parameter(bias.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(x)
        return checkpoint(_poly, x, self.weight, self.bias, len(self.weight), use_reentrant=False)


class PaperPolyNorm(nn.Module):
    """PolyNorm as listed in paper 000 App D (Algorithm 2), normalising over `dim`."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, dim: int):
        super().__init__()
        self.weight, self.bias, self.dim = nn.Parameter(weight.clone()), nn.Parameter(bias.clone()), dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(_poly_norm, x, self.weight, self.bias, self.dim, len(self.weight), use_reentrant=False)


def _set(module: nn.Module, **values: torch.Tensor) -> nn.Module:
    with torch.no_grad():
        for name, v in values.items():
            getattr(module, name).copy_(v.detach().reshape(getattr(module, name).shape))
    return module


def reference_for(act: nn.Module, channel_dim: int, device: str = "cpu") -> tuple[nn.Module, str] | None:
    """(reference module with `act`'s coefficients, on the CPU, and its name), or None when there is none.

    Args:
        act: a shared-coefficient visionbench activation (float32; the references assume it).
        channel_dim: the input's channel dim (PolyNorm normalises over it).
        device: where it will run; rational-activations' Python path is CPU-only (its CUDA
            kernels are a compiled extension the wheel does not ship).
    """
    name = getattr(act, "registry_name", "")
    if getattr(act, "per_channel", False):
        return None
    if name == "polyrelu":
        w = act.weight.detach()
        return PaperPolyReLU(w[1:], w[:1]), "paper 000 App D"
    if name == "polynorm":
        w = act.weight.detach()
        return PaperPolyNorm(w[1:], w[:1], channel_dim), "paper 000 App D"
    if name == "rational":
        return _rational_activations(act) if torch.device(device).type == "cpu" else None
    if name in ("hermite", "fourier", "tropical", "tropical_rational"):
        return _torchortho(act)
    return None


def _rational_activations(act) -> tuple[nn.Module, str] | None:
    if act.version != "A":
        return None
    try:
        from rational.torch import Rational as PackageRational
    except ImportError:
        return None
    ref = PackageRational(approx_func="leaky_relu", degrees=act.degrees, cuda=False, version="A")
    return _set(ref, numerator=act.numerator, denominator=act.denominator), "rational-activations 0.2 (A)"


def _torchortho(act) -> tuple[nn.Module, str] | None:
    try:
        import torchortho
    except ImportError:
        return None
    name = act.registry_name
    if name == "hermite":
        ref = torchortho.HermiteActivation(act.degree, clamp=act.clamp)
        _set(ref, coefficients=act.weight)
        if act.clamp:  # torchortho's L (2 sigmoid(x) - 1) = visionbench's L tanh(x / 2)
            _set(ref.clamp, lim_val=act.clamp_limit)
        return ref, "torchortho Hermite"
    if name == "fourier":
        ref = torchortho.FourierActivation(act.degree)
        w = act.weight.detach()  # torchortho has no sqrt(2) (see visionbench.activations.fourier)
        return _set(
            ref, fundamental=w[:1], coefficients=math.sqrt(2.0) * w[1:], grid=act.frequency, phases=act.phase
        ), "torchortho Fourier"
    if name == "tropical":
        return _set(torchortho.TropicalActivation(act.degree), coefficients=act.weight), "torchortho Tropical"
    m, n = act.degrees
    if m != n:
        return None
    ref = torchortho.TropicalRationalActivation(m)
    return _set(
        ref,
        coefficients_num=act.num_intercepts,
        powers_num=act.num_slopes,
        coefficients_denom=act.den_intercepts,
        powers_denom=act.den_slopes,
    ), "torchortho TropicalRational"
