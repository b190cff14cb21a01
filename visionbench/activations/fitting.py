"""Fitting a learnable activation to a target function ("Hermite interpolation", paper 001 Sec 3.5): F ≈ g, and
F' ≈ g' with `derivative`, on an interval.

    >>> act = activations.create("rational", version="A")
    >>> act.fit("gelu", interval=(-3, 3), derivative=True)      # LearnableActivation.fit delegates to `fit` here
    FitResult(target='gelu', max_abs_error=..., max_abs_deriv_error=..., seconds=...)

Families linear in their coefficients (a `basis`) get an exact least-squares solve (`fit_linear`); the others a
linearised start (their `fit_start`) followed by a short float64 L-BFGS refinement of the same objective (`refine`,
on the module's `_objective`: both hooks a family may override). Fits always use the plain formulas (their
objective needs F' differentiated), in float64, on one thread, every channel alike. `SurrogateFit` is the mixin of
the families whose layer depends on input statistics. Nothing here knows a family, nor base.py: the functions take
any module with base.py's hooks (a `LearnableActivation`: `basis`, `theta_to_coefficients`, `fit_start`,
`fit_forward`, `_objective`, `_refine`, `refine_steps`, `set_coefficients`, `per_channel`, `_param_device`), which
calls in.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from . import fused
from .targets import get_target, value_and_derivative

FIT_POINTS = 1001  # grid on the fit interval; dense enough that max-error on it is the sup-norm to ~1e-4


@contextlib.contextmanager
def one_thread():
    """One intra-op thread inside the block, the caller's count restored after. Tiny tensors (a fit's
    1001-point grid, a toy MLP) run fastest on one thread; on a loaded machine a multi-threaded pool
    made fits 10-100x slower (0.5 s instead of 5 ms, measured on 2 busy cores)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def solve_least_squares(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """min ||a theta - b|| for a (M, K), b (M,), by SVD (rank-safe: duplicate or dropped columns
    happen). Solved on the CPU, where the `gelsd` driver exists (CUDA only has `gels`, which needs
    full rank); the systems are tiny."""
    theta = torch.linalg.lstsq(a.cpu(), b.cpu().unsqueeze(1), driver="gelsd").solution.squeeze(1)
    return theta.to(a.device)


@dataclass
class FitResult:
    """How well a fit matched its target on the interval (errors are sup-norms on a dense grid)."""

    target: str
    max_abs_error: float
    max_abs_deriv_error: float
    seconds: float


@torch.enable_grad()  # autograd is the fit's tool (target derivatives, L-BFGS), even under a caller's no_grad()
def fit(
    module: nn.Module,
    target: str | Callable[[torch.Tensor], torch.Tensor],
    interval: tuple[float, float] = (-3.0, 3.0),
    derivative: bool = True,
    refine_steps: int | None = None,
) -> FitResult:
    """`module.fit` (`LearnableActivation.fit`): choose its coefficients so that F ≈ g (and F' ≈ g' if
    `derivative`) on `interval`. Linear families: one least-squares solve. Others: `fit_start`, then
    `refine_steps` (default: the family's `refine_steps`) L-BFGS iterations in float64 on
    mean (F-g)^2 + mean (F'-g')^2. Every channel gets the same coefficients."""
    t0 = time.perf_counter()
    name = target if isinstance(target, str) else getattr(target, "__name__", "callable")
    get_target(target)  # validates names early
    lo, hi = float(interval[0]), float(interval[1])
    if not hi > lo:
        raise ValueError(f"fit interval must have lo < hi, got {interval!r}")
    if module._param_device().type == "meta":  # built under torch.device("meta"): shapes, no values to fit;
        return FitResult(str(name), math.nan, math.nan, 0.0)  # to_empty() + reset_parameters() fits later
    x = torch.linspace(lo, hi, FIT_POINTS, dtype=torch.float64, device=module._param_device())
    y, dy = value_and_derivative(target, x)
    was_training, dtype = module.training, module._param_dtype()
    module.eval()
    module.to(torch.float64)
    if module.per_channel:  # start every channel from channel 0, so all stay identical
        with torch.no_grad():
            for p in module.parameters():
                p.copy_(p[0:1].expand_as(p))
    try:
        with one_thread(), fused.reference_path():
            features = module.basis(x)
            if features is not None:
                fit_linear(module, x, features, y, dy, derivative)
            else:
                module.fit_start(x, y, dy)
                module._refine(x, y, dy, derivative, module.refine_steps if refine_steps is None else refine_steps)
            err, derr = fit_errors(module, x, y, dy)
    finally:
        module.to(dtype)
        module.train(was_training)
    return FitResult(str(name), err, derr, time.perf_counter() - t0)


def fit_linear(module: nn.Module, x, features, y, dy, derivative: bool) -> None:
    """A family linear in its coefficients: F = features @ theta (and F' = d features/dx @ theta), one
    least-squares solve, theta set through the family's `theta_to_coefficients`."""
    rows, rhs = [features], [y]
    if derivative:
        xg = x.clone().requires_grad_(True)
        f = module.basis(xg)
        dfeat = torch.stack(
            [torch.autograd.grad(f[:, k].sum(), xg, retain_graph=True)[0] for k in range(f.shape[1])], dim=1
        )
        rows.append(dfeat)
        rhs.append(dy)
    a, b = torch.cat(rows), torch.cat(rhs)
    theta = solve_least_squares(a, b)
    module.set_coefficients(**module.theta_to_coefficients(theta))


def objective(module: nn.Module, x, y, dy, derivative: bool) -> torch.Tensor:
    """mean (F-g)^2 (+ mean (F'-g')^2 with `derivative`) of the module's `fit_forward` on the grid x."""
    xg = x.clone().requires_grad_(derivative)
    f = module.fit_forward(xg)
    loss = (f - y).pow(2).mean()
    if derivative:
        (df,) = torch.autograd.grad(f.sum(), xg, create_graph=True)
        loss = loss + (df - dy).pow(2).mean()
    return loss


def refine(module: nn.Module, x, y, dy, derivative: bool, steps: int) -> None:
    """`steps` L-BFGS iterations on the module's `_objective`; the start is kept when they end worse. The
    parameters' requires_grad flags are restored and their gradients cleared."""
    params = list(module.parameters())
    if steps <= 0 or not params:
        return
    flags = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.LBFGS(
        params,
        lr=1.0,
        max_iter=steps,
        tolerance_grad=1e-12,
        tolerance_change=1e-15,
        history_size=50,
        line_search_fn="strong_wolfe",
    )

    def closure():
        opt.zero_grad()
        loss = module._objective(x, y, dy, derivative)
        loss.backward()
        return loss

    best = {k: v.detach().clone() for k, v in module.state_dict().items()}
    best_loss = float(module._objective(x, y, dy, derivative).detach())
    opt.step(closure)
    final = float(module._objective(x, y, dy, derivative).detach())
    if not (final <= best_loss):  # a diverged refinement must never make the start worse
        module.load_state_dict(best)
    for p, f in zip(params, flags):
        p.grad = None  # the fit's gradients must not reach a training step's first update
        p.requires_grad_(f)


def fit_errors(module: nn.Module, x, y, dy) -> tuple[float, float]:
    """The sup-norm errors of F and F' to the target on the grid x."""
    xg = x.clone().requires_grad_(True)
    f = module.fit_forward(xg)
    (df,) = torch.autograd.grad(f.sum(), xg)
    return float((f - y).abs().max().detach()), float((df - dy).abs().max().detach())


class SurrogateFit:
    """Fitting for families whose layer depends on input statistics (PolyNorm, paper 000 Eq. 3;
    SLAF, paper 003 Eq. 4-5): what is fitted is the function the layer computes for x ~ N(0, 1),
    F(x) = basis(x) @ weight, with `basis` (the family's) folding in the N(0, 1) statistics and
    `weight` (..., K) the only coefficients. Mix in before `LearnableActivation`."""

    def theta_to_coefficients(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"weight": theta}

    def fit_forward(self, x: torch.Tensor) -> torch.Tensor:
        # The surrogate, not self(x): on a 1-D grid the layer would use the grid's own statistics.
        # Channels hold identical coefficients after `fit`, so the channel mean is any channel's.
        return self.basis(x) @ self.weight.reshape(-1, self.weight.shape[-1]).mean(dim=0)
