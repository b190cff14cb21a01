"""Tropical (max-plus) activations (paper 001 Sec 3.4, Thm 3.19, App H).

    >>> from visionbench import activations
    >>> act = activations.create("tropical", degree=6)              # a_k = 1: Thm 3.19's init
    >>> act = activations.create("tropical_rational", degree=6)     # fitted to GELU (App H, Fig. 5)

`tropical`: F(x) = (sqrt(2) / n) max_{k=0..n} (a_k + k x), integer slopes, learnable a_k.
`tropical_rational`: F(x) = max_{k=0..m} (c_k + p_k x) - max_{k=0..n} (d_k + q_k x), the tropical
quotient (App H, Eq. 76) "with real powers": intercepts and slopes both learnable, no scale.

Both are piecewise linear: the plain forward finds the active line of every element (no graph),
then evaluates that line differentiably, so autograd keeps only the line index per element instead
of n + 1 stacked copies of the input. The fused kernel keeps nothing but x: its backward finds the
active lines again. Gradients are exact away from ties between lines (ties go to the lowest k).
"""

from __future__ import annotations

import math

import torch

from .base import LearnableActivation, check_count
from .fused import Elementwise, reduce_to
from .registry import register

TRITON = "visionbench.activations.triton_piecewise"  # the module of these families' Triton bodies


def _active_line(
    module: LearnableActivation, x: torch.Tensor, intercepts: torch.Tensor, slopes: torch.Tensor | None
) -> torch.Tensor:
    """Index (long, shaped like x) of the line c_k + s_k x that attains the max, the lowest k on
    ties; `slopes=None` means s_k = k. Runs without a graph: the caller evaluates the chosen line."""

    def line(k: int) -> torch.Tensor:
        s = float(k) if slopes is None else module.coef(slopes, k, x)
        return module.coef(intercepts, k, x) + s * x

    with torch.no_grad():
        best = line(0)
        idx = torch.zeros(best.shape, dtype=torch.long, device=x.device)
        for k in range(1, intercepts.shape[-1]):
            cand = line(k)
            higher = cand > best
            best = torch.maximum(best, cand)
            idx = torch.where(higher, k, idx)  # out of place: vmap batches `higher`, not idx
    return idx


def _take(module: LearnableActivation, p: torch.Tensor, idx: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """p[..., idx] per element (the element's channel row with per_channel), differentiable in p."""
    if not module.per_channel:
        return p[idx]
    rows = torch.arange(p.shape[0], device=idx.device).reshape(
        [-1 if d == module.channel_axis(x) else 1 for d in range(x.dim())]
    )
    return p[rows, idx]  # advanced indexing, which vmap batches (torch.take it runs per sample)


def _select(x, intercepts, slopes, count: int):
    """Per element: index (as x's dtype), intercept and slope of the line c_k + s_k x that attains
    the max, lowest k on ties (as `_active_line`); `slopes=None` means s_k = k."""
    best = intercepts[..., 0] + (0.0 * x if slopes is None else slopes[..., 0] * x)
    idx, icp, slp = torch.zeros_like(x), intercepts[..., 0], (0.0 if slopes is None else slopes[..., 0])
    for k in range(1, count):
        s = float(k) if slopes is None else slopes[..., k]
        cand = intercepts[..., k] + s * x
        higher = cand > best
        best = torch.maximum(best, cand)
        idx = torch.where(higher, float(k), idx)
        icp = torch.where(higher, intercepts[..., k], icp)
        if slopes is not None:
            slp = torch.where(higher, s, slp)
    return idx, icp, (idx if slopes is None else slp)


def _per_line(weight, idx, like, count: int):
    """[sum weight over the elements whose active line is k, for k < count]."""
    return [reduce_to(torch.where(idx == k, weight, 0.0), like) for k in range(count)]


def _tropical_forward(x, a, *, degree: int):
    _, icp, slp = _select(x, a, None, degree + 1)
    return ((math.sqrt(2.0) / degree) * torch.addcmul(icp, slp, x),)


def _tropical_backward(x, g, a, *, degree: int):
    idx, _, _ = _select(x, a, None, degree + 1)
    gs = g * (math.sqrt(2.0) / degree)
    return gs * idx, torch.stack(_per_line(gs, idx, a[..., 0], degree + 1), -1)


def _rational_forward(x, c, p, d, q, *, m: int, n: int):
    _, c_sel, p_sel = _select(x, c, p, m + 1)
    _, d_sel, q_sel = _select(x, d, q, n + 1)
    return (torch.addcmul(c_sel, p_sel, x) - torch.addcmul(d_sel, q_sel, x),)


def _rational_backward(x, g, c, p, d, q, *, m: int, n: int):
    i, _, p_sel = _select(x, c, p, m + 1)
    j, _, q_sel = _select(x, d, q, n + 1)
    gx = g * x
    grads = [
        _per_line(g, i, c[..., 0], m + 1),
        _per_line(gx, i, c[..., 0], m + 1),
        _per_line(-g, j, c[..., 0], n + 1),
        _per_line(-gx, j, c[..., 0], n + 1),
    ]
    return (g * (p_sel - q_sel), *[torch.stack(gr, -1) for gr in grads])


TROPICAL = Elementwise("tropical", _tropical_forward, _tropical_backward, triton=TRITON)


@register("tropical")
class Tropical(LearnableActivation):
    """F(x) = (sqrt(2) / n) max_{k=0..n} (a_k + k x) (paper 001 Eq. 21).

    Args:
        degree: n >= 1 (paper 001 Table 1 uses 6).
        init: "default" = "variance_preserving" = a_k = 1 (Thm 3.19: the paper's init is the
            variance-preserving one, F ~ sqrt(2) ReLU for large n), or a fit target name.
        **kwargs: per_channel, num_channels, channel_dim, learnable, inplace.

    Tropical polynomials are convex with slopes in {sqrt(2) k / n}, so non-convex targets (GELU's
    dip) and slopes between those values (ReLU's 1) can only be approximated (paper 001 Sec 3.5).
    """

    kernel = TROPICAL

    family = "tropical"  # `visionbench list` group (registry.family)

    has_variance_preserving_init = True
    # sup-norm errors (value, derivative) of fit() on [-3, 3], degree 6, with headroom. Measured:
    # gelu 0.106 / 0.242, relu 0.065 / 0.179 (convex with slopes k sqrt(2) / 6: see above).
    fit_tolerance = {"gelu": (0.12, 0.27), "relu": (0.08, 0.2)}
    # A short refinement: the start is already close to the best convex fit, and longer L-BFGS runs
    # only trade sup-norm for mean-square error.
    refine_steps = 10

    def __init__(self, degree: int = 6, init: str = "default", **kwargs):
        super().__init__(**kwargs)
        self.degree = check_count("tropical", "degree", degree)
        self.weight = self.coefficient(torch.ones(self.degree + 1))  # weight[k] = a_k
        self.reset_parameters(init)

    def init_default(self) -> None:
        self.set_coefficients(weight=torch.ones(self.degree + 1))  # Eq. 20

    def init_variance_preserving(self) -> None:
        self.init_default()  # Thm 3.19 is about exactly this init

    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run_elementwise(TROPICAL, x, self.weight, degree=self.degree)

    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        k = _active_line(self, x, self.weight, None)
        return (math.sqrt(2.0) / self.degree) * torch.addcmul(_take(self, self.weight, k, x), k.to(x.dtype), x)

    def fit_start(self, x: torch.Tensor, y: torch.Tensor, dy: torch.Tensor) -> None:
        """Discrete Legendre transform (the paper's convex-conjugate view, Sec 3.4): line k becomes
        the support line of slope sqrt(2) k / n under g on the grid, then all lines are lifted by
        half the largest gap so the error is centred."""
        h = y * (self.degree / math.sqrt(2.0))
        ks = torch.arange(self.degree + 1, dtype=x.dtype, device=x.device)
        a = (h[None, :] - ks[:, None] * x[None, :]).min(dim=1).values
        env = (a[:, None] + ks[:, None] * x[None, :]).max(dim=0).values
        self.set_coefficients(weight=a + 0.5 * float((h - env).max()))

    def extra_repr(self) -> str:
        return ", ".join(filter(None, [f"degree={self.degree}", super().extra_repr()]))


def _hinge_knots(t: torch.Tensor, mass: torch.Tensor, count: int) -> tuple[torch.Tensor, float]:
    """`count` knots at the midpoint quantiles of a non-negative curvature mass on points t, and the
    equal slope jump each carries; a staircase with these jumps is within total / (2 count) of the
    cumulative mass everywhere."""
    total = float(mass.sum())
    if count == 0 or total <= 0.0:
        return t.new_zeros(count), 0.0
    levels = (torch.arange(count, dtype=t.dtype, device=t.device) + 0.5) * (total / count)
    where = torch.searchsorted(torch.cumsum(mass, 0), levels).clamp(max=len(t) - 1)
    return t[where], total / count


def _lines(knots: torch.Tensor, jump: float, slope0: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Intercepts and slopes of max_k lines = slope0 x + sum_i jump relu(x - knot_i) (knots sorted)."""
    ks = torch.arange(len(knots) + 1, dtype=knots.dtype, device=knots.device)
    slopes = slope0 + jump * ks
    intercepts = -jump * torch.cat([knots.new_zeros(1), torch.cumsum(knots, 0)])
    return intercepts, slopes


TROPICAL_RATIONAL = Elementwise("tropical_rational", _rational_forward, _rational_backward, triton=TRITON)


@register("tropical_rational")
class TropicalRational(LearnableActivation):
    """F(x) = max_{k=0..m} (c_k + p_k x) - max_{k=0..n} (d_k + q_k x) (paper 001 App H, Eq. 76).

    Args:
        degree: n, or (m, n) for different numerator and denominator degrees (App H, Fig. 5: 6).
        init: a fit target name, fitted with its derivative on [-3, 3] (cached per process);
            "default" = "gelu", App H's example. "variance_preserving" = Thm 3.19's tropical
            polynomial over a zero denominator (p_k = sqrt(2) k / m, c_k = sqrt(2) / m, d = q = 0).
        **kwargs: per_channel, num_channels, channel_dim, learnable, inplace.

    A difference of convex piecewise-linear functions can be any continuous piecewise-linear one,
    so unlike `tropical` it fits non-convex targets such as GELU (to ~0.015), and ReLU almost exactly.
    """

    kernel = TROPICAL_RATIONAL

    family = "tropical"  # `visionbench list` group (registry.family)

    has_variance_preserving_init = True
    # sup-norm errors (value, derivative) of fit() on [-3, 3], degree 6, with headroom. Measured:
    # gelu 0.015 / 0.110 (12 slopes for a g' that varies by 1.5), relu 1.1e-3 / 8.2e-4 (the kink
    # is placed between grid points).
    fit_tolerance = {"gelu": (0.02, 0.125), "relu": (2e-3, 2e-3)}
    # A short refinement that keeps a fit < 0.1 s: the start is already within
    # (total curvature) / (2 degree) of g' everywhere.
    refine_steps = 10
    cache_fits = True

    def __init__(self, degree: int | tuple[int, int] = 6, init: str = "default", **kwargs):
        super().__init__(**kwargs)
        m, n = degree if isinstance(degree, (tuple, list)) else (degree, degree)
        self.degrees = (check_count("tropical_rational", "degree", m), check_count("tropical_rational", "degree", n))
        m, n = self.degrees
        self.num_intercepts = self.coefficient(torch.zeros(m + 1))
        self.num_slopes = self.coefficient(torch.zeros(m + 1))
        self.den_intercepts = self.coefficient(torch.zeros(n + 1))
        self.den_slopes = self.coefficient(torch.zeros(n + 1))
        self.reset_parameters(init)

    def fast_forward(self, x: torch.Tensor) -> torch.Tensor:
        m, n = self.degrees
        return self.run_elementwise(
            TROPICAL_RATIONAL,
            x,
            self.num_intercepts,
            self.num_slopes,
            self.den_intercepts,
            self.den_slopes,
            m=m,
            n=n,
        )

    def reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._tropical(x, self.num_intercepts, self.num_slopes) - self._tropical(
            x, self.den_intercepts, self.den_slopes
        )

    def _tropical(self, x: torch.Tensor, intercepts: torch.Tensor, slopes: torch.Tensor) -> torch.Tensor:
        k = _active_line(self, x, intercepts, slopes)
        return torch.addcmul(_take(self, intercepts, k, x), _take(self, slopes, k, x), x)

    # ---- initialisation and fitting ----------------------------------------------------
    def reset_parameters(self, init: str = "default") -> None:
        key = str(init).lower()
        super().reset_parameters("gelu" if key == "default" else key)  # ValueError names the accepted inits

    def fit_cache_key(self) -> tuple:
        return ("tropical_rational", self.degrees)

    def init_default(self) -> None:
        self.reset_parameters("gelu")

    def init_variance_preserving(self) -> None:
        m, n = self.degrees
        scale = math.sqrt(2.0) / m
        self.set_coefficients(
            num_intercepts=torch.full((m + 1,), scale),
            num_slopes=scale * torch.arange(m + 1.0),
            den_intercepts=torch.zeros(n + 1),
            den_slopes=torch.zeros(n + 1),
        )

    def fit_start(self, x: torch.Tensor, y: torch.Tensor, dy: torch.Tensor) -> None:
        """Split g'' into its positive part (numerator hinges) and negative part (denominator
        hinges), put equal slope jumps at the quantiles of each, then fix the constant by least
        squares: g' is matched by a staircase to within the mass per step."""
        m, n = self.degrees
        t, jumps = 0.5 * (x[1:] + x[:-1]), dy[1:] - dy[:-1]
        c1, p1 = _lines(*_hinge_knots(t, jumps.clamp_min(0.0), m), slope0=float(dy[0]))
        c2, p2 = _lines(*_hinge_knots(t, (-jumps).clamp_min(0.0), n), slope0=0.0)
        f = (c1[:, None] + p1[:, None] * x).max(0).values - (c2[:, None] + p2[:, None] * x).max(0).values
        c1 = c1 + (y - f).mean()
        self.set_coefficients(num_intercepts=c1, num_slopes=p1, den_intercepts=c2, den_slopes=p2)

    def extra_repr(self) -> str:
        m, n = self.degrees
        return ", ".join(filter(None, [f"degree={m if m == n else self.degrees}", super().extra_repr()]))
