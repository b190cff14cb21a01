"""PolyCom activations (paper 000 Sec 2, App D): PolyReLU and PolyNorm of order r (`degree`).

    >>> from visionbench import activations
    >>> act = activations.create("polynorm")                     # r = 3, a_i = 1/r, a_0 = 0
    >>> act = activations.create("polynorm", channel_dim=-1)     # NHWC maps (ConvNeXt's MLP)

Fused kernels (`fused.py`): PolyReLU is a Horner polynomial in ReLU(x) (`_poly_*`, shared with
SLAF's eval mode); PolyNorm keeps its normalisers, one per power and per position (1/C of the
input each), for the backward, where the chain rule through the mean over channels gives
dL/dx = sum_i i x^(i-1) n_i (a_i g - n_i^2 x^i mean_c(g a_i x^i)).
"""

from __future__ import annotations

import math

import torch

from . import fused
from .base import LearnableActivation, SurrogateFit, check_count
from .fused import Elementwise, horner_and_derivative, reduce_to, slices
from .registry import register


def _default_coefficients(degree: int) -> torch.Tensor:
    # Paper 000 Sec 2 and App D: a_i = 1/r for i = 1..r, a_0 = 0.
    a = torch.full((degree + 1,), 1.0 / degree, dtype=torch.float64)
    a[0] = 0.0
    return a


def _poly_forward(x, c, *, degree: int, relu: bool):
    """sum_i c_i r^i by Horner's rule, r = ReLU(x) or x; the same expression as the plain forwards."""
    r = torch.relu(x) if relu else x
    out = c[..., degree]
    for i in range(degree - 1, 0, -1):
        out = out * r + c[..., i]
    return (out * r + c[..., 0],)


def _poly_backward(x, g, c, *, degree: int, relu: bool):
    r = torch.relu(x) if relu else x
    _, deriv = horner_and_derivative(slices(c, degree + 1), r)
    grad_x = g * deriv
    if relu:  # ReLU'(0) = 0, as autograd has it; a NaN x keeps its NaN (autograd passes g where relu(x) is NaN)
        grad_x = torch.where(x <= 0, 0.0, grad_x)
    like, grads, term = c[..., 0], [], g
    for _ in range(degree + 1):  # sum g r^i, one power at a time
        grads.append(reduce_to(term, like))
        term = term * r
    return grad_x, torch.stack(grads, -1)


POLY = Elementwise("poly", _poly_forward, _poly_backward, triton="visionbench.activations.triton_polynomial")


def run_poly(module: LearnableActivation, x: torch.Tensor, c: torch.Tensor, relu: bool) -> torch.Tensor:
    """The fused polynomial sum_i c_i r^i, r = ReLU(x) if `relu` else x; c (K,) or (C, K)."""
    return module.run_elementwise(POLY, x, c, degree=c.shape[-1] - 1, relu=relu)


def _polynorm_forward(x, a, *, degree: int, eps: float, dim: int):
    out = a[..., 0]
    p, norms = x, []
    for i in range(1, degree + 1):
        if i > 1:
            p = p * x
        norm = torch.rsqrt(p.square().mean(dim=dim, keepdim=True) + eps)
        out = out + a[..., i] * (p * norm)
        norms.append(norm)
    return (out, *norms)


def _polynorm_backward(x, g, a, *norms, degree: int, eps: float, dim: int):
    like = a[..., 0]
    grads, grad_x, prev, p = [reduce_to(g, like)], None, None, x
    for i in range(1, degree + 1):
        if i > 1:
            prev, p = p, p * x  # x^(i-1), x^i
        n, ai = norms[i - 1], a[..., i]
        gp = g * p
        grads.append(reduce_to(gp * n, like))
        # d n_i / d x_c = -(i / C) n_i^3 x_c^(2i-1): the mean over channels couples them
        t = (gp * ai).mean(dim=dim, keepdim=True)
        term = (ai * g - (n * n) * p * t) * (n * i)
        term = term if prev is None else term * prev
        grad_x = term if grad_x is None else grad_x + term
    return grad_x, torch.stack(grads, -1)


@register("polyrelu")
class PolyReLU(LearnableActivation):
    """F(x) = sum_{i=1..r} a_i ReLU(x)^i + a_0 (paper 000 Eq. 2); init a_i = 1/r, a_0 = 0 (Sec 2, App D).

    Args:
        degree: r, the order (default 3, the paper's setting).
        init: `default` or a fit target name (see `fit`).
        **kwargs: `per_channel`, `num_channels`, `channel_dim`, `learnable`, `inplace`
            (see `LearnableActivation`).

    Parameters: `weight` (..., r + 1) holds a_0..a_r (App D's `bias` is a_0 here).
    """

    kernel = POLY

    family = "polynomial"  # `visionbench list` group (registry.family)

    # Sup-norm errors of `fit(target)` on [-3, 3] with derivative matching, r = 3: measured
    # 0.107 / 0.500 (gelu: F is constant for x < 0 and F'(0-) = 0, while GELU'(0) = 1/2) and
    # ~1e-15 (relu: a_1 = 1 is exact).
    fit_tolerance = {"gelu": (0.13, 0.55), "relu": (1e-6, 1e-6)}

    def __init__(self, degree: int = 3, init: str = "default", **kwargs):
        super().__init__(**kwargs)
        self.degree = check_count("polyrelu", "degree", degree)
        self.weight = self.coefficient(torch.zeros(self.degree + 1))  # weight[i] = a_i, i = 0..r
        self.reset_parameters(init)

    def init_default(self) -> None:
        self.set_coefficients(weight=_default_coefficients(self.degree))

    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        return run_poly(self, x, self.weight, relu=True)

    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        r = torch.relu(x)
        out = self.coef(self.weight, self.degree, x)  # Horner in ReLU(x)
        for i in range(self.degree - 1, 0, -1):
            out = out * r + self.coef(self.weight, i, x)
        return out * r + self.coef(self.weight, 0, x)

    def basis(self, x: torch.Tensor) -> torch.Tensor:
        r = torch.relu(x)
        return torch.stack([r**i for i in range(self.degree + 1)], dim=1)

    def theta_to_coefficients(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"weight": theta}

    def extra_repr(self) -> str:
        return ", ".join(filter(None, [f"degree={self.degree}", super().extra_repr()]))


@register("polynorm")
class PolyNorm(SurrogateFit, LearnableActivation):
    """F(x) = sum_{i=1..r} a_i N(x^i) + a_0, N(z) = z / sqrt(mean(z^2) + eps) (paper 000 Eq. 3, App D).

    The mean runs over the feature dimension, which here is the channel dimension
    (`channel_axis(x)`: dim 1 of NCHW maps, the last dim of tokens, or `channel_dim`).
    The paper's code normalises over the last dim, which on NCHW maps would be the width.

    Args:
        degree: r, the order (default 3, the paper's setting).
        init: `default` (a_i = 1/r, a_0 = 0, Sec 2) or a fit target name (see `fit`).
        eps: added to the mean square (1e-6 in App D).
        **kwargs: `per_channel`, `num_channels`, `channel_dim`, `learnable`, `inplace`
            (see `LearnableActivation`).

    Parameters: `weight` (..., r + 1) holds a_0..a_r.

    `fit` cannot fit the layer itself, whose output depends on the statistics of its input.
    It fits the function the layer computes for x ~ N(0, 1) i.i.d. over a wide feature
    dimension, where mean(x^{2i}) -> E[x^{2i}] = (2i - 1)!!, so that
    N(x^i) = x^i / sqrt((2i - 1)!! + eps): the fitted coefficients make F ≈ g on standardised inputs.
    """

    own_triton_kernels = True  # triton_normalized.py

    family = "polynomial"  # `visionbench list` group (registry.family)

    # Sup-norm errors of `fit(target)` (of the N(0, 1) surrogate above) on [-3, 3] with derivative
    # matching, r = 3: measured 0.213 / 0.397 (gelu) and 0.340 / 0.500 (relu) — the span is the
    # cubics, as for `hermite` of degree 3.
    fit_tolerance = {"gelu": (0.25, 0.45), "relu": (0.4, 0.55)}

    def __init__(self, degree: int = 3, init: str = "default", eps: float = 1e-6, **kwargs):
        super().__init__(**kwargs)
        self.degree = check_count("polynorm", "degree", degree)
        self.eps = float(eps)
        self.weight = self.coefficient(torch.zeros(self.degree + 1))  # weight[i] = a_i, i = 0..r
        self.reset_parameters(init)

    def init_default(self) -> None:
        self.set_coefficients(weight=_default_coefficients(self.degree))

    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        if fused.backend_for(x) == "triton":
            from . import triton_normalized

            return triton_normalized.polynorm(x, self.channel_axis(x), self.weight, self.eps)
        kernel = fused.Kernel(
            "polynorm",
            _polynorm_forward,
            _polynorm_backward,
            degree=self.degree,
            eps=self.eps,
            dim=self.channel_axis(x) - x.dim(),
        )  # negative: any rank alike
        return fused.apply(kernel, x, self.coef_view(self.weight, x))[0]

    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        dim = self.channel_axis(x)
        out = self.coef(self.weight, 0, x)
        p = x
        for i in range(1, self.degree + 1):
            if i > 1:
                p = p * x  # x^i by repeated products, no pow kernels
            norm = torch.rsqrt(p.square().mean(dim=dim, keepdim=True) + self.eps)
            out = out + self.coef(self.weight, i, x) * (p * norm)
        return out

    # ---- fitting the N(0, 1) surrogate (see the class docstring) ----------------------
    def _gaussian_scales(self) -> list[float]:
        double_fact = [math.prod(range(2 * i - 1, 0, -2)) for i in range(self.degree + 1)]  # (2i-1)!!
        return [1.0] + [1.0 / math.sqrt(double_fact[i] + self.eps) for i in range(1, self.degree + 1)]

    def basis(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([x**i * s for i, s in enumerate(self._gaussian_scales())], dim=1)

    def extra_repr(self) -> str:
        return ", ".join(filter(None, [f"degree={self.degree}", super().extra_repr()]))
