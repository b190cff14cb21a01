"""Fourier activation (paper 001 Sec 3.3, Thm 3.13, Cor 3.14, Eq. 24): a learnable cosine series.

    >>> from visionbench import activations
    >>> act = activations.create("fourier", degree=6)                # Cor 3.14 init
    >>> act = activations.create("fourier", degree=6, init="gelu")   # Hermite interpolation of GELU

The fused kernel evaluates one harmonic at a time; its backward recomputes cos and sin of each
argument (one sincos per harmonic and element), which makes this the costliest family per element.
"""

from __future__ import annotations

import math

import torch

from .base import LearnableActivation, check_count, solve_least_squares
from .fused import Elementwise, reduce_to
from .registry import register

SQRT2 = math.sqrt(2.0)


def bessel_i0_2() -> float:
    """I_0(2) = sum_k 1/(k!)^2 (Cor 3.14), summed to double precision."""
    return sum(1.0 / math.factorial(k) ** 2 for k in range(30))


def fourier_gain(degree: int) -> float:
    """E[F(x)^2] = E[F'(x)^2] for x ~ U(-pi, pi) under the Cor 3.14 init: (sum_{k<n} 1/(k!)^2) / I_0(2) (Eq. 14)."""
    return sum(1.0 / math.factorial(k) ** 2 for k in range(degree)) / bessel_i0_2()


def _scales(degree: int) -> list[float]:
    """sqrt(2) / k!, the fixed factor of term k (the factorial makes the series exponential, Remark 3.15)."""
    return [SQRT2 / math.factorial(k) for k in range(degree + 1)]


def _fused_forward(x, w, f, phi, *, degree: int):
    scale = _scales(degree)
    out = w[..., 0]
    for k in range(1, degree + 1):
        arg = f[..., k - 1] * x - phi[..., k - 1]
        out = out + (scale[k] * w[..., k]) * torch.cos(arg)
    return (out,)


def _fused_backward(x, g, w, f, phi, *, degree: int):
    """With A_k = s_k a_k: dF/dx = -sum_k A_k f_k sin(arg_k), dF/da_k = s_k cos(arg_k),
    dF/df_k = -A_k x sin(arg_k), dF/dphi_k = A_k sin(arg_k)."""
    scale = _scales(degree)
    like = w[..., 0]
    grad_w, grad_f, grad_phi, slope = [reduce_to(g, like)], [], [], None
    for k in range(1, degree + 1):
        arg = f[..., k - 1] * x - phi[..., k - 1]
        amp = scale[k] * w[..., k]
        gs = g * torch.sin(arg)
        grad_w.append(scale[k] * reduce_to(g * torch.cos(arg), like))
        grad_f.append(-amp * reduce_to(gs * x, like))  # amp is constant over the summed dims
        grad_phi.append(amp * reduce_to(gs, like))
        term = (amp * f[..., k - 1]) * gs
        slope = term if slope is None else slope + term
    return -slope, torch.stack(grad_w, -1), torch.stack(grad_f, -1), torch.stack(grad_phi, -1)


KERNEL = Elementwise("fourier", _fused_forward, _fused_backward, triton="visionbench.activations.triton_basis")


@register("fourier")
class Fourier(LearnableActivation):
    """F(x) = a_0 + sqrt(2) sum_{k=1..n} (a_k / k!) cos(f_k x - phi_k), with a, f, phi learnable (Eq. 24).

    With f_k = k and phi_k = pi/4, sqrt(2) cos(kx - pi/4) = cos(kx) + sin(kx): the sine-cosine
    series of Def 3.12 with b_k = a_k, for which Thm 3.13 holds. Note the theorem's input
    distribution is U(-pi, pi) (Assumption 3.11), not N(0, 1). (torchortho's code drops the
    sqrt(2) of Eq. 24 and Algorithm 5; without it the harmonics' share of both second moments
    halves and the init no longer equalises the forward and backward gains.)

    Args:
        degree: n, the number of harmonics (default 6, the paper's ConvNeXt setting).
        init: `default` (= `variance_preserving`, Cor 3.14 with f_k = k, phi_k = pi/4 as in
            Sec 3.5), or a fit target name (see `fit`).
        **kwargs: `per_channel`, `num_channels`, `channel_dim`, `learnable`, `inplace`
            (see `LearnableActivation`).

    Parameters: `weight` (..., n + 1) holds a_0..a_n, `frequency` (..., n) f_1..f_n and
    `phase` (..., n) phi_1..phi_n.
    """

    kernel = KERNEL

    family = "orthogonal"  # `visionbench list` group (registry.family)

    has_variance_preserving_init = True
    # Sup-norm errors of `fit(target)` on [-3, 3] with derivative matching, degree 6: measured
    # 2.2e-5 / 5.0e-4 (gelu) and 0.067 / 0.498 (relu; its derivative jump bounds that below by 0.5).
    fit_tolerance = {"gelu": (1e-4, 2e-3), "relu": (0.1, 0.55)}
    # A short refinement: the linear start (`fit_start`) is already close on smooth targets (GELU to
    # 2e-5), and 20 L-BFGS steps keep the fit well under 0.1 s. The start always matches derivatives
    # too (it is only a start); `derivative` governs the refinement and the reported errors.
    refine_steps = 20

    def __init__(self, degree: int = 6, init: str = "default", **kwargs):
        super().__init__(**kwargs)
        self.degree = check_count("fourier", "degree", degree)
        n = self.degree
        self.weight = self.coefficient(torch.zeros(n + 1))
        self.frequency = self.coefficient(torch.arange(1, n + 1))
        self.phase = self.coefficient(torch.full((n,), math.pi / 4))
        self._scale = _scales(n)
        self.reset_parameters(init)

    # ---- initialisation --------------------------------------------------------------
    def init_default(self) -> None:
        self.init_variance_preserving()

    def _reset_frequencies(self) -> None:
        n = self.degree
        self.set_coefficients(
            frequency=torch.arange(1, n + 1, dtype=torch.float64),
            phase=torch.full((n,), math.pi / 4, dtype=torch.float64),
        )

    def init_variance_preserving(self) -> None:
        # Thm 3.13: a_k = 1, a_0 = sqrt(1 - 1/(n!)^2) equalise the gains; Cor 3.14 divides all by
        # sqrt(I_0(2)) so that both tend to 1 with n (for finite n: `fourier_gain(n)`).
        n = self.degree
        a = torch.ones(n + 1, dtype=torch.float64)
        a[0] = math.sqrt(1.0 - 1.0 / math.factorial(n) ** 2)
        self.set_coefficients(weight=a / math.sqrt(bessel_i0_2()))
        self._reset_frequencies()

    # ---- forward -----------------------------------------------------------------------
    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run_elementwise(KERNEL, x, self.weight, self.frequency, self.phase, degree=self.degree)

    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        # One harmonic at a time: memory stays at a few tensors of x's size instead of n of them.
        out = self.coef(self.weight, 0, x)
        for k in range(1, self.degree + 1):
            arg = self.coef(self.frequency, k - 1, x) * x - self.coef(self.phase, k - 1, x)
            out = out + (self._scale[k] * self.coef(self.weight, k, x)) * torch.cos(arg)
        return out

    # ---- fitting: linear start, then the base class's L-BFGS over a, f and phi ----------
    def _terms(self, x: torch.Tensor, w: torch.Tensor, f: torch.Tensor, phi: torch.Tensor):
        """F and F' on 1-D x for coefficient rows w (R, n+1), f, phi (R, n): both (len(x), R)."""
        scale = x.new_tensor(self._scale[1:])
        arg = x[:, None, None] * f - phi  # (N, R, n)
        amp = w[:, 1:] * scale  # (R, n)
        value = w[:, 0] + (amp * torch.cos(arg)).sum(-1)
        deriv = -(amp * f * torch.sin(arg)).sum(-1)
        return value, deriv

    def fit_start(self, x: torch.Tensor, y: torch.Tensor, dy: torch.Tensor) -> None:
        # With the frequencies fixed at f_k = k w the model is linear in the sine-cosine
        # coefficients of Def 3.12, a_0 + sum_k (c_k cos kwx + s_k sin kwx) / k!: solve the Hermite
        # interpolation (value and derivative rows, paper 001 Sec 3.5) for them in closed form and
        # convert to amplitude-phase (c cos + s sin = R cos(kwx - atan2(s, c))); `_refine` then moves
        # a, f and phi together. The fundamental w = pi / (2 h) (Remark D.8's rescaling, h the
        # half-width of the interval) makes the interval half a period: with w = 1 the periodic
        # extension jumps at the ends of [-3, 3] and Gibbs ringing leaves errors ~1 for GELU.
        n = self.degree
        w = math.pi / float(x.max() - x.min())
        k = torch.arange(1, n + 1, dtype=x.dtype, device=x.device) * w
        inv_fact = x.new_tensor([1.0 / math.factorial(i) for i in range(1, n + 1)])
        kx = x[:, None] * k
        cos, sin = torch.cos(kx) * inv_fact, torch.sin(kx) * inv_fact
        ones = torch.ones_like(x)[:, None]
        value_rows = torch.cat([ones, cos, sin], dim=1)
        deriv_rows = torch.cat([torch.zeros_like(ones), -k * sin, k * cos], dim=1)
        theta = solve_least_squares(torch.cat([value_rows, deriv_rows]), torch.cat([y, dy]))
        c, s = theta[1 : n + 1], theta[n + 1 :]
        weight = torch.cat([theta[:1], torch.hypot(c, s) / SQRT2])  # Eq. 24: sqrt(2) a_k / k! = R_k / k!
        self.set_coefficients(weight=weight, frequency=k, phase=torch.atan2(s, c))

    def _objective(self, x, y, dy, derivative: bool) -> torch.Tensor:
        # Same objective as the base class, with F' in closed form instead of a double backward
        # through `forward`: one (N, C, n) evaluation per L-BFGS step keeps the fit fast.
        n = self.degree
        value, deriv = self._terms(
            x, self.weight.reshape(-1, n + 1), self.frequency.reshape(-1, n), self.phase.reshape(-1, n)
        )
        value, deriv = value.mean(dim=1), deriv.mean(dim=1)  # channel mean, as in `fit_forward`
        loss = (value - y).pow(2).mean()
        if derivative:
            loss = loss + (deriv - dy).pow(2).mean()
        return loss

    def extra_repr(self) -> str:
        return ", ".join(filter(None, [f"degree={self.degree}", super().extra_repr()]))
