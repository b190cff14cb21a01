"""APL, adaptive piecewise linear units (Agostinelli et al., ICLR 2015 workshop, "Learning activation
functions to improve deep neural networks", Eq. 1): ReLU plus S learnable hinges.

    >>> from visionbench import activations
    >>> act = activations.create("apl")                       # S = 5, starts as ReLU
    >>> act = activations.create("apl", hinges=2, init="gelu")

The fused kernel evaluates the S hinges one at a time; its backward finds which hinges are active
again from x, so autograd keeps only x (the plain formula keeps one mask per hinge).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import torch
import torch.nn.functional as F

from .base import LearnableActivation, check_count, solve_least_squares
from .fused import Elementwise, reduce_to
from .registry import register

# The authors' Caffe code draws b ~ N(0, 0.5^2) (README and examples/cifar10/CNN/apl of
# forestagostinelli/Learned-Activation-Functions-Source); the default init puts the hinges at the
# S quantiles s / (S + 1) of that distribution instead: the same spread, deterministic.
HINGE_INIT_STD = 0.5
FIT_WIDTHS = (0.25, 0.4, 0.55, 0.7, 0.85)  # hinge layouts `fit_start` tries, as fractions of the interval
REFINE_STEPS = 40  # L-BFGS iterations of a fit (the least-squares start is close; fits stay < 0.1 s)


def _apl_forward(x, a, b, *, hinges: int):
    out = F.relu(x)
    for s in range(hinges):
        out = out + a[..., s] * F.relu(b[..., s] - x)
    return (out,)


def _apl_backward(x, g, a, b, *, hinges: int):
    """dh/dx = [x > 0] - sum_s a_s [x < b_s], dh/da_s = max(0, b_s - x), dh/db_s = a_s [x < b_s]
    (derivatives at the kinks as torch.relu's: 0). The indicators are written as not [relu's argument <= 0],
    as autograd's relu backward has them: 1 where the argument is NaN, so a NaN x gets the plain formula's
    finite dh/dx and dh/db_s."""
    slope = (~(x <= 0)).to(x.dtype)
    like = a[..., 0]
    grad_a, grad_b = [], []
    for s in range(hinges):
        active = (~(b[..., s] - x <= 0)).to(x.dtype)
        slope = slope - a[..., s] * active
        grad_a.append(reduce_to(g * F.relu(b[..., s] - x), like))
        grad_b.append(a[..., s] * reduce_to(g * active, like))
    return g * slope, torch.stack(grad_a, -1), torch.stack(grad_b, -1)


KERNEL = Elementwise("apl", _apl_forward, _apl_backward, triton="visionbench.activations.triton_piecewise")


@register("apl")
class APL(LearnableActivation):
    """h(x) = max(0, x) + sum_{s=1..S} a_s max(0, -x + b_s): adaptive piecewise linear unit
    (Agostinelli et al. 2015, Eq. 1), learnable slopes a_s and hinge positions b_s.

    Args:
        hinges: S (default 5: the paper's CIFAR-10 networks; its CIFAR-100 ones use S = 2, and the
            authors' Network-in-Network configurations S = 1).
        init: `default`: a_s = 0 (APL starts as ReLU; the authors draw a_s ~ U(-0.5, 0.5), mean 0)
            and b_s the s / (S + 1) quantiles of N(0, 0.5^2) (the authors draw b_s ~ N(0, 0.5^2));
            or a fit target name (see `fit`).
        **kwargs: `per_channel` (the paper learns one APL per neuron, i.e. per channel in a conv
            net), `num_channels`, `channel_dim`, `learnable`, `inplace` (see `LearnableActivation`).

    Parameters: `slope` (..., S) holds a, `hinge` (..., S) holds b. The paper adds an L2 penalty on
    a and b (weight decay multiplier 10 in its configurations): `penalty()`, which the trainer adds
    to the loss times `loss.act_l2` (0 by default: activation coefficients get no weight decay, as
    in every learnable family).
    """

    kernel = KERNEL

    family = "piecewise"
    cache_fits = True  # fits refine b with L-BFGS: once per process and configuration
    refine_steps = REFINE_STEPS
    # Sup-norm errors of fit(target) on [-3, 3] with derivative matching, S = 5: measured
    # gelu 0.076 / 0.324 and relu 0 / 0 (a = 0 is exact). F is piecewise linear: F' jumps at 0
    # (by 1 + the slope of any hinge there) and at every hinge, against GELU's smooth derivative.
    fit_tolerance = {"gelu": (0.1, 0.4), "relu": (1e-6, 1e-6)}

    def __init__(self, hinges: int = 5, init: str = "default", **kwargs):
        super().__init__(**kwargs)
        self.hinges = check_count("apl", "hinges", hinges, 1)
        self.slope = self.coefficient(torch.zeros(self.hinges))
        self.hinge = self.coefficient(torch.zeros(self.hinges))
        self.reset_parameters(init)

    def fit_cache_key(self) -> tuple:
        return (type(self).__name__, self.hinges)

    # ---- initialisation --------------------------------------------------------------
    def init_default(self) -> None:
        s = self.hinges
        b = [HINGE_INIT_STD * NormalDist().inv_cdf((i + 1) / (s + 1)) for i in range(s)]
        self.set_coefficients(slope=torch.zeros(s), hinge=torch.tensor(b, dtype=torch.float64))

    # ---- regularisation (the paper's L2 on a and b) ---------------------------------------
    def penalty(self) -> torch.Tensor:
        """sum_s a_s^2 + b_s^2 over every coefficient set; the trainer adds `loss.act_l2 * penalty()`."""
        return self.slope.square().sum() + self.hinge.square().sum()

    # ---- forward -----------------------------------------------------------------------
    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(x)
        for s in range(self.hinges):
            out = out + self.coef(self.slope, s, x) * F.relu(self.coef(self.hinge, s, x) - x)
        return out

    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run_elementwise(KERNEL, x, self.slope, self.hinge, hinges=self.hinges)

    # ---- fitting: hinges on a grid, slopes by least squares, then L-BFGS over both -------
    def fit_start(self, x: torch.Tensor, y: torch.Tensor, dy: torch.Tensor) -> None:
        """The best of a few hinge layouts, each with its least-squares slopes (h - relu is linear in
        a once b is fixed; value and derivative rows). Layouts: S hinges evenly spread over
        [-w, w] for several widths w up to the interval's, and over the whole interval. The
        derivative term gives L-BFGS no gradient in b (F' is a step function of x - b), so the
        start has to place the hinges well."""
        lo, hi = float(x.min()), float(x.max())
        cells = (torch.arange(self.hinges, dtype=x.dtype, device=x.device) + 0.5) / self.hinges
        layouts = [lo + (hi - lo) * cells]
        half = max(abs(lo), abs(hi))
        for frac in FIT_WIDTHS:
            w = frac * half
            layouts.append((-w + 2 * w * cells).clamp(lo, hi))
        rhs = torch.cat([y - F.relu(x), dy - (x > 0).to(x.dtype)])
        best, best_loss = None, math.inf
        for b in layouts:
            rows = torch.cat([F.relu(b - x[:, None]), -(b > x[:, None]).to(x.dtype)])
            a = solve_least_squares(rows, rhs)
            loss = float((rows @ a - rhs).pow(2).mean())
            if loss < best_loss:
                best, best_loss = (a, b), loss
        self.set_coefficients(slope=best[0], hinge=best[1])

    def _objective(self, x, y, dy, derivative: bool) -> torch.Tensor:
        # The base class's objective with F' in closed form (no double backward through forward):
        # channels hold equal coefficients during a fit, so channel 0 stands for all.
        a, b = self.slope.reshape(-1, self.hinges)[0], self.hinge.reshape(-1, self.hinges)[0]
        f = F.relu(x) + F.relu(b - x[:, None]) @ a
        loss = (f - y).pow(2).mean()
        if derivative:
            df = (x > 0).to(x.dtype) - (b > x[:, None]).to(x.dtype) @ a
            loss = loss + (df - dy).pow(2).mean()
        return loss

    def extra_repr(self) -> str:
        return ", ".join(filter(None, [f"hinges={self.hinges}", super().extra_repr()]))
