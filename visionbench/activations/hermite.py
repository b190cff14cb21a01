"""Hermite activation (paper 001 Sec 3.2, Def 3.7, Thm 3.8, Cor 3.9): a learnable Hermite series.

    >>> from visionbench import activations
    >>> act = activations.create("hermite", degree=3)                 # Cor 3.9 init
    >>> act = activations.create("hermite", degree=3, init="gelu")    # Hermite interpolation of GELU

The fused kernel runs the same recurrence; its backward runs it forwards for the coefficient gradients
g P_k, then backwards for F'(z): the adjoint recurrence that autograd runs through the plain formula
(`_derivative`), whose terms give the same NaN and inf where the input is +-inf (the sum
F'(z) = sum_{k>=1} a_k P_(k-1)(z) of P_k' = P_(k-1), the same number, adds infinities of both signs there).
"""

from __future__ import annotations

import math

import torch

from .base import LearnableActivation, check_count
from .fused import Elementwise, reduce_to
from .registry import register

# torchortho's LearnableClamp starts its limit at sqrt(3) (the half-width of the unit-variance
# uniform distribution); the paper (Table 6) names the clamp but does not define it.
CLAMP_LIMIT_INIT = math.sqrt(3.0)


def hermite_gain(degree: int) -> float:
    """E[F(x)^2] = E[F'(x)^2] for x ~ N(0, 1) under the Cor 3.9 init: (sum_{k<n} 1/k!) / e (Thm 3.8, Eq. 10)."""
    return sum(1.0 / math.factorial(k) for k in range(degree)) / math.e


def _hermite_series(z, a, degree: int):
    """F = sum_k a_k P_k(z), P_k = He_k / k!, by the recurrence of `Hermite.reference_forward`."""
    out = a[..., 0] + a[..., 1] * z
    p_prev, p = 1.0, z
    for k in range(1, degree):
        p_prev, p = p, (z * p - p_prev) / (k + 1)
        out = out + a[..., k + 1] * p
    return out


def _fused_forward(x, a, *limit, degree: int, clamp: bool):
    z = limit[0][..., 0] * torch.tanh(0.5 * x) if clamp else x
    return (_hermite_series(z, a, degree),)


def _derivative(z, a, powers, degree: int):
    """F'(z) by the adjoint of the recurrence P_(k+1) = (z P_k - P_(k-1)) / (k + 1), the terms autograd forms through
    `Hermite.reference_forward` (there each times g): from b_n = a_n down, c_(k+1) = b_(k+1) / (k + 1) and
    b_k = a_k + c_(k+1) z - c_(k+2); F'(z) = b_1 + sum_{k=1..n-1} c_(k+1) P_k (`powers` holds P_1..P_(n-1)).
    Nested like Horner's rule, the highest power decides the sign of an infinite z's derivative, where the sum
    sum_{k>=1} a_k P_(k-1)(z) would add infinities of both signs (NaN)."""
    b = a[..., degree]
    c_next = None  # c_(k+2)
    total = None
    for k in range(degree - 1, 0, -1):
        c = b / (k + 1)
        total = c * powers[k - 1] if total is None else torch.addcmul(total, c, powers[k - 1])
        b = torch.addcmul(a[..., k], c, z)
        if c_next is not None:
            b = b - c_next
        c_next = c
    return b if total is None else b + total


def _fused_backward(x, g, a, *limit, degree: int, clamp: bool):
    if clamp:
        t = torch.tanh(0.5 * x)
        z = limit[0][..., 0] * t
    else:
        z = x
    like = a[..., 0]
    grads = [reduce_to(g, like), reduce_to(g * z, like)]
    powers = [z]  # P_1..P_(n-1), for the adjoint recurrence
    p_prev, p = 1.0, z
    for k in range(1, degree):
        p_prev, p = p, (z * p - p_prev) / (k + 1)
        grads.append(reduce_to(g * p, like))
        if k < degree - 1:
            powers.append(p)
    grad_z = g * _derivative(z, a, powers, degree)
    if not clamp:
        return grad_z, torch.stack(grads, -1)
    lim = limit[0][..., 0]
    grad_limit = reduce_to(grad_z * t, lim).unsqueeze(-1)
    return grad_z * (lim * 0.5) * (1.0 - t * t), torch.stack(grads, -1), grad_limit


KERNEL = Elementwise("hermite", _fused_forward, _fused_backward, triton="visionbench.activations.triton_polynomial")


@register("hermite")
class Hermite(LearnableActivation):
    """F(x) = sum_{k=0..n} (a_k / k!) He_k(x), He the probabilists' Hermite polynomials (paper 001 Eq. 8).

    Args:
        degree: n, the highest polynomial degree (default 3, the paper's ConvNeXt setting).
        init: `default` (= `variance_preserving`, Cor 3.9), or a fit target name (see `fit`).
        clamp: squash the input first with the learnable soft clamp c(x) = L tanh(x / 2),
            L initialised to sqrt(3) (paper 001 Table 6 ablation; definition from torchortho's
            `LearnableClamp`, L (2 sigmoid(x) - 1) written as a tanh). Off by default, as in the
            paper's main runs; the variance theorems assume it is off.
        **kwargs: `per_channel`, `num_channels`, `channel_dim`, `learnable`, `inplace`
            (see `LearnableActivation`).

    Parameters: `weight` (..., n + 1) holds a_0..a_n; `clamp_limit` (..., 1) holds L when clamped.
    F is linear in a, so `fit` is one least-squares solve (with L held at its current value).
    """

    kernel = KERNEL

    family = "orthogonal"  # `visionbench list` group (registry.family)

    has_variance_preserving_init = True
    # Sup-norm errors of `fit(target)` on [-3, 3] with derivative matching, degree 3: measured
    # 0.213 / 0.397 (gelu) and 0.340 / 0.500 (relu); a cubic cannot do better on this interval
    # (degree 8 reaches 0.003 / 0.024 on gelu). ReLU's derivative jump bounds its error below by 0.5.
    fit_tolerance = {"gelu": (0.25, 0.45), "relu": (0.4, 0.55)}

    def __init__(self, degree: int = 3, init: str = "default", clamp: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.degree = check_count("hermite", "degree", degree)
        self.clamp = bool(clamp)
        self.weight = self.coefficient(torch.zeros(self.degree + 1))
        if self.clamp:
            self.clamp_limit = self.coefficient([CLAMP_LIMIT_INIT])
        else:
            self.register_parameter("clamp_limit", None)
        self.reset_parameters(init)

    # ---- initialisation --------------------------------------------------------------
    def init_default(self) -> None:
        self.init_variance_preserving()

    def init_variance_preserving(self) -> None:
        # Thm 3.8 (a_k = 1, a_0 = sqrt(1 - 1/n!)) equalises the forward and backward gains;
        # Cor 3.9 divides every coefficient by sqrt(e) so both second moments tend to 1 with n
        # (for finite n they equal `hermite_gain(n)`, 0.92 at n = 3).
        a = torch.ones(self.degree + 1, dtype=torch.float64)
        a[0] = math.sqrt(1.0 - 1.0 / math.factorial(self.degree))
        self.set_coefficients(weight=a / math.sqrt(math.e))
        if self.clamp:
            self.set_coefficients(clamp_limit=torch.tensor([CLAMP_LIMIT_INIT], dtype=torch.float64))

    # ---- forward -----------------------------------------------------------------------
    def _clamped(self, x: torch.Tensor) -> torch.Tensor:
        if not self.clamp:
            return x
        return self.coef(self.clamp_limit, 0, x) * torch.tanh(0.5 * x)

    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        coefs = [self.weight] + ([self.clamp_limit] if self.clamp else [])
        return self.run_elementwise(KERNEL, x, *coefs, degree=self.degree, clamp=self.clamp)

    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self._clamped(x)
        # Three-term recurrence (Eq. 23) on P_k = He_k / k!, i.e. He_{k+1} = z He_k - k He_{k-1}
        # divided by (k+1)!: P_{k+1} = (z P_k - P_{k-1}) / (k+1). No powers are formed and the
        # factorials never overflow, whatever the degree.
        out = self.coef(self.weight, 0, x) + self.coef(self.weight, 1, x) * z
        p_prev, p = torch.ones_like(z), z
        for k in range(1, self.degree):
            p_prev, p = p, (z * p - p_prev) / (k + 1)
            out = out + self.coef(self.weight, k + 1, x) * p
        return out

    # ---- fitting (linear in a) ---------------------------------------------------------
    def basis(self, x: torch.Tensor) -> torch.Tensor:
        # `fit` makes every channel equal to channel 0 first, so its clamp limit stands for all.
        z = self.clamp_limit.reshape(-1)[0] * torch.tanh(0.5 * x) if self.clamp else x
        cols = [torch.ones_like(z), z]
        for k in range(1, self.degree):
            cols.append((z * cols[-1] - cols[-2]) / (k + 1))
        return torch.stack(cols, dim=1)

    def theta_to_coefficients(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"weight": theta}

    def extra_repr(self) -> str:
        return ", ".join(
            filter(None, [f"degree={self.degree}", "clamp=True" if self.clamp else "", super().extra_repr()])
        )
