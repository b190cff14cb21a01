"""Classic learnable activations with one to three coefficients: the baselines a reviewer asks for.

    >>> from visionbench import activations
    >>> act = activations.create("prelu", per_channel=True, num_channels=64)   # He et al. 2015
    >>> act = activations.create("swish_beta")                                 # x sigmoid(beta x), beta = 1
    >>> act = activations.create("acon_c", init="silu")                        # ACON-C started as Swish
    >>> act = activations.create("star_relu")                                  # relu(x)^2, s and b learnable
    >>> act = activations.create("star_relu", init="variance_preserving")      # 0.8944 relu(x)^2 - 0.4472

    prelu       max(0, x) + a min(0, x)                          a = 0.25          He et al. 2015
    swish_beta  x sigmoid(beta x)                                beta = 1          Ramachandran et al. 2017
    acon_c      (p1 - p2) x sigmoid(beta (p1 - p2) x) + p2 x     p1, p2 ~ N(0, 1), beta = 1   Ma et al. 2021
    star_relu   s relu(x)^2 + b                                  s = 1, b = 0 (code)         Yu et al. 2022

Each fused kernel (`fused.elementwise`) computes F and writes dF/dx and dF/dcoefficients out in
closed form, so autograd keeps only x. StarReLU is linear in (s, b) and gets the exact
least-squares fit (`basis`); the others start from a closed-form or grid-searched point
(`fit_start`) that the base class's L-BFGS refines.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import LearnableActivation, solve_least_squares
from .fused import Elementwise, reduce_to
from .registry import register

TRITON = "visionbench.activations.triton_gated"  # the module of these families' Triton bodies

FAMILY = "gated"  # `visionbench list`: "scaled / gated (few parameters)"
# Swish-beta / ACON-C fits: candidate values of beta (of beta (p1 - p2) for ACON-C) tried before
# L-BFGS. 1.702 is GELU's sigmoid approximation x sigmoid(1.702 x); the large ones reach ReLU-like shapes.
BETA_GRID = (0.25, 0.5, 1.0, 1.702, 2.5, 4.0, 8.0, 16.0)
BETA_MAX = BETA_GRID[-1]  # fits keep |beta| <= 16: see `_BoundedBeta`
REFINE_STEPS = 50  # L-BFGS iterations of a fit: 1-3 coefficients converge in far fewer (measured)


def _objective(f: torch.Tensor, df: torch.Tensor, y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """The fit objective of `LearnableActivation._objective` (value + derivative squared errors) for
    candidate columns f, df (len(x), R): one number per candidate."""
    return (f - y[:, None]).pow(2).mean(0) + (df - dy[:, None]).pow(2).mean(0)


class _Classic(LearnableActivation):
    """Shared plumbing: family label, fit cache, a short refinement, and the coefficients, one value each (..., 1):
    created from `COEFFICIENTS` (name -> value, in order) and reset to those values by the default init."""

    family = FAMILY
    cache_fits = True  # a ResNet-50 builds 49 modules; an `init=<target>` is fitted once per process
    # The starts are near the optimum already. Measured against 200 iterations: sup-norm errors within
    # 1e-6 for gelu, relu, silu, leaky_relu, elu, mish, tanh and softplus; ACON-C on hardswish 0.0047
    # instead of 0.0027 (derivative 0.48 instead of 0.49).
    refine_steps = REFINE_STEPS
    COEFFICIENTS: dict[str, float] = {}

    def __init__(self, init: str = "default", **kwargs):
        super().__init__(**kwargs)
        for name, value in self.COEFFICIENTS.items():
            setattr(self, name, self.coefficient([value]))
        self.reset_parameters(init)

    def init_default(self) -> None:
        self.set_coefficients(**{name: torch.tensor([value]) for name, value in self.COEFFICIENTS.items()})


class _BoundedBeta(_Classic):
    """Fits clamp beta to [-BETA_MAX, BETA_MAX] after the refinement.

    ReLU-like targets (relu, leaky_relu, softplus) have their least-squares optimum at beta -> inf
    (value error ~0.28 / beta; the derivative error at 0 stays 1/2). Unclamped, L-BFGS stops
    wherever its budget ends (beta ~ 280 after 50 steps, measured), where the sigmoid saturates
    and dF/dbeta = x^2 s (1 - s) vanishes on almost every input: training could not move beta
    again. At beta = 16 the value error to ReLU is 0.017.
    """

    def _refine(self, x, y, dy, derivative: bool, steps: int) -> None:
        super()._refine(x, y, dy, derivative, steps)
        with torch.no_grad():
            self.beta.clamp_(-BETA_MAX, BETA_MAX)


# ---- PReLU ------------------------------------------------------------------------------------
def _prelu_forward(x, a):
    return (torch.where(x > 0, x, a[..., 0] * x),)


def _prelu_backward(x, g, a):
    w = a[..., 0]
    neg = x <= 0
    grad_x = torch.where(neg, g * w, g)
    # dF/da = min(0, x): NaN at a NaN x, as the plain formula's clamp has it (x > 0 is False there, as x <= 0 is)
    grad_a = reduce_to(torch.where(x > 0, torch.zeros_like(x), g * x), w)
    return grad_x, grad_a.unsqueeze(-1)


PRELU = Elementwise("prelu", _prelu_forward, _prelu_backward, triton=TRITON)


@register("prelu")
class PReLU(_Classic):
    """F(x) = max(0, x) + a min(0, x): PReLU (He et al. 2015, "Delving deep into rectifiers", Eq. 1-2).

    Args:
        init: `default` (a = 0.25, the initialisation He et al. use throughout, Sec 2.1), or a fit
            target name (see `fit`).
        **kwargs: `per_channel` (He et al.'s channel-wise variant; the shared variant is their
            "channel-shared"), `num_channels`, `channel_dim`, `learnable`, `inplace`
            (see `LearnableActivation`).

    Parameter `weight` (..., 1) holds a. F is affine, not linear, in a (the ReLU term has no
    coefficient), so `fit` starts from the closed-form least-squares a (`fit_start`).
    """

    kernel = PRELU

    # Sup-norm errors of fit(target) on [-3, 3] with derivative matching: measured 0.170 / 0.495
    # (gelu, a = 0.022: a piecewise-linear F cannot follow GELU's dip below 0) and 0 / 0 (relu, a = 0).
    fit_tolerance = {"gelu": (0.2, 0.55), "relu": (1e-6, 1e-6)}
    COEFFICIENTS = {"weight": 0.25}

    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x) + self.coef(self.weight, 0, x) * torch.clamp(x, max=0.0)

    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run_elementwise(PRELU, x, self.weight)

    def fit_start(self, x: torch.Tensor, y: torch.Tensor, dy: torch.Tensor) -> None:
        """The least-squares a of the value and derivative rows: F - relu = a min(0, x), one unknown."""
        neg = (x <= 0).to(x.dtype)
        col = torch.cat([x * neg, neg])[:, None]
        rhs = torch.cat([y - F.relu(x), dy - (x > 0).to(x.dtype)])
        self.set_coefficients(weight=solve_least_squares(col, rhs))


# ---- Swish-beta ---------------------------------------------------------------------------------
def _swish_forward(x, b):
    return (x * torch.sigmoid(b[..., 0] * x),)


def _swish_backward(x, g, b):
    beta = b[..., 0]
    bx = beta * x
    s = torch.sigmoid(bx)
    ds = s * (1.0 - s)
    grad_x = g * (s + bx * ds)  # d/dx x s(bx) = s + bx s (1 - s)
    grad_b = reduce_to(g * (x * x) * ds, beta)  # d/dbeta = x^2 s (1 - s)
    return grad_x, grad_b.unsqueeze(-1)


SWISH_BETA = Elementwise("swish_beta", _swish_forward, _swish_backward, triton=TRITON)


@register("swish_beta")
class SwishBeta(_BoundedBeta):
    """F(x) = x sigmoid(beta x) with beta learnable: Swish-beta (Ramachandran et al. 2017, "Searching
    for activation functions", Sec 4). beta = 1 is SiLU; beta -> infinity tends to ReLU.

    Args:
        init: `default` (beta = 1, i.e. SiLU; the paper trains beta but gives no init, and 1 is the
            Swish it reports as found), or a fit target name (`gelu` gives beta ~ 1.70).
        **kwargs: `per_channel`, `num_channels`, `channel_dim`, `learnable` (False: Swish with a
            constant beta, the paper's other variant), `inplace` (see `LearnableActivation`).

    Parameter `beta` (..., 1).
    """

    kernel = SWISH_BETA

    # Sup-norm errors of fit(target) on [-3, 3] with derivative matching: measured gelu 0.0174 / 0.0294
    # (beta 1.73); relu 0.0174 / 0.500 (beta at BETA_MAX; the derivative error at x = 0 is exactly 1/2:
    # sigmoid(0) against relu'(0) = 0).
    fit_tolerance = {"gelu": (0.02, 0.035), "relu": (0.02, 0.55)}
    COEFFICIENTS = {"beta": 1.0}

    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.coef(self.beta, 0, x) * x)

    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run_elementwise(SWISH_BETA, x, self.beta)

    def fit_start(self, x: torch.Tensor, y: torch.Tensor, dy: torch.Tensor) -> None:
        """The best beta of `BETA_GRID` (all candidates in one batched evaluation)."""
        beta = x.new_tensor(BETA_GRID)
        s = torch.sigmoid(beta * x[:, None])
        f, df = x[:, None] * s, s + beta * x[:, None] * s * (1.0 - s)
        self.set_coefficients(beta=beta[_objective(f, df, y, dy).argmin()].reshape(1))


# ---- ACON-C -------------------------------------------------------------------------------------
def _acon_forward(x, p1, p2, b):
    lo = p2[..., 0]
    u = (p1[..., 0] - lo) * x
    return (u * torch.sigmoid(b[..., 0] * u) + lo * x,)


def _acon_backward(x, g, p1, p2, b):
    """u = (p1 - p2) x, s = sigmoid(beta u), h = d(u s)/du = s + beta u s (1 - s):
    dF/dx = (p1 - p2) h + p2, dF/dp1 = x h, dF/dp2 = x (1 - h), dF/dbeta = u^2 s (1 - s)."""
    hi, lo, beta = p1[..., 0], p2[..., 0], b[..., 0]
    d = hi - lo
    u = d * x
    s = torch.sigmoid(beta * u)
    ds = s * (1.0 - s)
    h = s + (beta * u) * ds
    gx = g * x
    gxh = gx * h
    return (
        g * (d * h + lo),
        reduce_to(gxh, hi).unsqueeze(-1),
        reduce_to(gx - gxh, lo).unsqueeze(-1),
        reduce_to(g * (u * u) * ds, beta).unsqueeze(-1),
    )


ACON_C = Elementwise("acon_c", _acon_forward, _acon_backward, triton=TRITON)


@register("acon_c")
class AconC(_BoundedBeta):
    """F(x) = (p1 - p2) x sigmoid(beta (p1 - p2) x) + p2 x: ACON-C (Ma et al., CVPR 2021, "Activate or
    not: learning customized activation", Table 1). p1 = 1, p2 = 0 is Swish-beta; beta -> 0
    gives the mean of the two slopes, beta -> infinity max(p1 x, p2 x) (for p1 > p2).

    Args:
        init: `default` as the authors' code (nmaac/acon `AconC`): p1, p2 ~ N(0, 1), drawn per channel
            from torch's global RNG (so a run's seed fixes them), beta = 1. The paper states no init.
            `silu` gives Swish exactly (p1 = 1, p2 = 0, beta = 1); any fit target name works.
        **kwargs: `per_channel` (the authors' code is per channel), `num_channels`, `channel_dim`,
            `learnable`, `inplace` (see `LearnableActivation`).

    Parameters `p1`, `p2`, `beta`, each (..., 1).
    """

    kernel = ACON_C

    # Sup-norm errors of fit(target) on [-3, 3] with derivative matching: measured gelu 0.0079 / 0.0218
    # (p1 1.008, p2 -0.008, beta 1.66); relu 0.0174 / 0.500 (p1 1, p2 0, beta at BETA_MAX, as Swish-beta).
    fit_tolerance = {"gelu": (0.01, 0.025), "relu": (0.02, 0.55)}
    COEFFICIENTS = {"p1": 1.0, "p2": 0.0, "beta": 1.0}  # Swish; the default init draws p1, p2

    def init_default(self) -> None:
        with torch.no_grad():
            self.p1.normal_()
            self.p2.normal_()
            self.beta.fill_(1.0)

    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        p1, p2, beta = (self.coef(p, 0, x) for p in (self.p1, self.p2, self.beta))
        u = (p1 - p2) * x
        return u * torch.sigmoid(beta * u) + p2 * x

    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run_elementwise(ACON_C, x, self.p1, self.p2, self.beta)

    def fit_start(self, x: torch.Tensor, y: torch.Tensor, dy: torch.Tensor) -> None:
        """For a = beta (p1 - p2) fixed, F = d x sigmoid(a x) + p2 x is linear in (d, p2): solve it for
        every a of `BETA_GRID` and keep the best. Then p1 = d + p2, beta = a / d (beta = 1 if d ~ 0:
        F is then p2 x whatever beta)."""
        best, best_loss = None, float("inf")
        for a in BETA_GRID:
            s = torch.sigmoid(a * x)
            cols = torch.stack([x * s, x], 1)
            dcols = torch.stack([s + a * x * s * (1.0 - s), torch.ones_like(x)], 1)
            d, lo = solve_least_squares(torch.cat([cols, dcols]), torch.cat([y, dy])).tolist()
            loss = float(
                _objective(cols @ x.new_tensor([d, lo])[:, None], dcols @ x.new_tensor([d, lo])[:, None], y, dy)
            )
            if loss < best_loss:
                best, best_loss = (d, lo, a), loss
        d, lo, a = best
        beta = a / d if abs(d) > 1e-6 else 1.0
        self.set_coefficients(p1=torch.tensor([d + lo]), p2=torch.tensor([lo]), beta=torch.tensor([beta]))


# ---- StarReLU -----------------------------------------------------------------------------------
STAR_SCALE = 0.8944  # 1 / sqrt(Var relu(x)^2) = 1 / sqrt(1.25) for x ~ N(0, 1) (Yu et al. Sec 3.1)
STAR_BIAS = -0.4472  # -E[relu(x)^2] * scale = -0.5 / sqrt(1.25)


def _star_forward(x, s, b):
    r = torch.relu(x)
    return (s[..., 0] * (r * r) + b[..., 0],)


def _star_backward(x, g, s, b):
    scale = s[..., 0]
    r = torch.relu(x)
    return (g * (2.0 * scale) * r, reduce_to(g * (r * r), scale).unsqueeze(-1), reduce_to(g, b[..., 0]).unsqueeze(-1))


STAR_RELU = Elementwise("star_relu", _star_forward, _star_backward, triton=TRITON)


@register("star_relu")
class StarReLU(_Classic):
    """F(x) = s relu(x)^2 + b with s, b learnable: StarReLU (Yu et al. 2022, "MetaFormer baselines for
    vision", Sec 3.1). The paper derives s = 0.8944, b = -0.4472 (F(x) zero mean and unit variance
    for x ~ N(0, 1)): `init="variance_preserving"`. The default is s = 1, b = 0, what the authors'
    code (sail-sg/metaformer `StarReLU(scale_value=1.0, bias_value=0.0)`, also timm's) builds its
    models with, so what produced the published numbers.

    Args:
        init: `default` (s = 1, b = 0, the authors' code), `variance_preserving` (the paper's
            s, b) or a fit target name (see `fit`).
        **kwargs: `per_channel` (the paper shares s, b over channels), `num_channels`,
            `channel_dim`, `learnable` (False: the paper's fixed StarReLU), `inplace`
            (see `LearnableActivation`).

    Parameters `scale` and `bias`, each (..., 1). F is linear in (s, b): `fit` is one solve.
    """

    kernel = STAR_RELU

    # Sup-norm errors of fit(target) on [-3, 3] with derivative matching: measured gelu 0.501 / 0.958
    # (s 0.33, b 0.17), relu 0.515 / 0.996: a parabola on x > 0 and a constant on x < 0 cannot follow
    # linear growth over [-3, 3].
    fit_tolerance = {"gelu": (0.55, 1.05), "relu": (0.6, 1.05)}
    has_variance_preserving_init = True
    COEFFICIENTS = {"scale": 1.0, "bias": 0.0}  # the default init, the authors' code

    def init_variance_preserving(self) -> None:
        self.set_coefficients(scale=torch.tensor([STAR_SCALE]), bias=torch.tensor([STAR_BIAS]))

    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.coef(self.scale, 0, x) * F.relu(x).square() + self.coef(self.bias, 0, x)

    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run_elementwise(STAR_RELU, x, self.scale, self.bias)

    def basis(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([F.relu(x).square(), torch.ones_like(x)], 1)

    def theta_to_coefficients(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"scale": theta[0:1], "bias": theta[1:2]}
