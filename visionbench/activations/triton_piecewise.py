"""Triton bodies (`triton_template.py`) of the piecewise-linear families: APL (`piecewise.py`), the
tropical polynomial and the tropical rational function (`tropical.py`).

Each pair evaluates the same expressions as the family's fused kernel in fp32. APL's derivatives
at the kinks are torch.relu's (0); the tropical bodies pick the active line of every element with
the strict comparison of `tropical._select` (ties go to the lowest k), in the forward and again in
the backward, which writes dF/dx and g dF/dc_k per coefficient.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from .triton_polynomial import full, relu
from .triton_template import Body, coef, emit

SQRT2 = tl.constexpr(math.sqrt(2.0))


# ---- APL: relu(x) + sum_s a_s relu(b_s - x); coefficients a_0..a_(S-1), then b_0..b_(S-1) ----------
@triton.jit
def apl_forward(x, C, cb, S: tl.constexpr):
    out = relu(x)
    for s in tl.static_range(S):
        out = out + coef(C, cb, s) * relu(coef(C, cb, S + s) - x)
    return out


@triton.jit
def apl_backward(x, g, C, cb, acc, MODE: tl.constexpr, S: tl.constexpr):
    """dF/dx = [x > 0] - sum_s a_s [x < b_s], dF/da_s = max(0, b_s - x), dF/db_s = a_s [x < b_s]; the indicators are
    autograd's relu backward, not [argument <= 0] (1 at a NaN)."""
    slope = tl.where(x <= 0, 0.0, 1.0)  # relu's derivative as autograd has it: 0 where x <= 0, else 1 (NaN too)
    for s in tl.static_range(S):
        a = coef(C, cb, s)
        t = coef(C, cb, S + s) - x
        active = tl.where(t <= 0, 0.0, 1.0)
        slope = slope - a * active
        acc = emit(acc, MODE, s, g * relu(t))
        acc = emit(acc, MODE, S + s, a * (g * active))
    return g * slope, acc


# ---- the active line of max_k (c_k + s_k x) ------------------------------------------------------
@triton.jit
def _select(x, C, cb, I0: tl.constexpr, S0: tl.constexpr, COUNT: tl.constexpr, SLOPES: tl.constexpr):
    """Index (fp32), intercept and slope of the line c_k + s_k x (c_k = C[I0 + k]; s_k = C[S0 + k], or k
    when not SLOPES) that attains the max, the lowest k on ties (`tropical._select`)."""
    icp = full(x, coef(C, cb, I0))
    if SLOPES:
        slp = full(x, coef(C, cb, S0))
        best = icp + slp * x
    else:  # line 0 is c_0 + 0 x, as the plain formula writes it: NaN at an infinite x, where no line beats it
        slp = tl.zeros_like(x)
        best = icp + 0.0 * x
    idx = tl.zeros_like(x)
    for k in tl.static_range(1, COUNT):
        c = coef(C, cb, I0 + k)
        if SLOPES:
            s = coef(C, cb, S0 + k)
            cand = c + s * x
        else:
            cand = c + k * x
        higher = cand > best
        best = tl.where(higher, cand, best)
        idx = tl.where(higher, k, idx)
        icp = tl.where(higher, c, icp)
        if SLOPES:
            slp = tl.where(higher, s, slp)
    if not SLOPES:
        slp = idx
    return idx, icp, slp


# ---- tropical: (sqrt(2) / n) max_{k=0..n} (a_k + k x); coefficients a_0..a_n ---------------------
@triton.jit
def tropical_forward(x, C, cb, DEGREE: tl.constexpr):
    idx, icp, slp = _select(x, C, cb, 0, 0, DEGREE + 1, False)
    return (SQRT2 / DEGREE) * (icp + slp * x)


@triton.jit
def tropical_backward(x, g, C, cb, acc, MODE: tl.constexpr, DEGREE: tl.constexpr):
    """dF/dx = (sqrt(2) / n) k*, dF/da_k = (sqrt(2) / n) [k = k*] (k* the active line)."""
    idx, icp, slp = _select(x, C, cb, 0, 0, DEGREE + 1, False)
    gs = g * (SQRT2 / DEGREE)
    for k in tl.static_range(DEGREE + 1):
        acc = emit(acc, MODE, k, tl.where(idx == k, gs, 0.0))
    return gs * idx, acc


# ---- tropical rational: max_k (c_k + p_k x) - max_k (d_k + q_k x); coefficients c, p (m + 1 each),
# then d, q (n + 1 each) --------------------------------------------------------------------------------
@triton.jit
def tropical_rational_forward(x, C, cb, M: tl.constexpr, N: tl.constexpr):
    i, c_sel, p_sel = _select(x, C, cb, 0, M + 1, M + 1, True)
    j, d_sel, q_sel = _select(x, C, cb, 2 * (M + 1), 2 * (M + 1) + N + 1, N + 1, True)
    return (c_sel + p_sel * x) - (d_sel + q_sel * x)


@triton.jit
def tropical_rational_backward(x, g, C, cb, acc, MODE: tl.constexpr, M: tl.constexpr, N: tl.constexpr):
    """dF/dx = p_i - q_j; dF/dc_k = [k = i], dF/dp_k = x [k = i], dF/dd_k = -[k = j], dF/dq_k = -x [k = j]."""
    i, c_sel, p_sel = _select(x, C, cb, 0, M + 1, M + 1, True)
    j, d_sel, q_sel = _select(x, C, cb, 2 * (M + 1), 2 * (M + 1) + N + 1, N + 1, True)
    gx = g * x
    for k in tl.static_range(M + 1):
        on = i == k
        acc = emit(acc, MODE, k, tl.where(on, g, 0.0))
        acc = emit(acc, MODE, M + 1 + k, tl.where(on, gx, 0.0))
    for k in tl.static_range(N + 1):
        on = j == k
        acc = emit(acc, MODE, 2 * (M + 1) + k, tl.where(on, -g, 0.0))
        acc = emit(acc, MODE, 2 * (M + 1) + N + 1 + k, tl.where(on, -gx, 0.0))
    return g * (p_sel - q_sel), acc


def apl_params(hinges: int) -> tuple:
    return (hinges,)


def tropical_params(degree: int) -> tuple:
    return (degree,)


def tropical_rational_params(m: int, n: int) -> tuple:
    return m, n


BODIES = {
    "apl": Body(apl_forward, apl_backward, apl_params),
    "tropical": Body(tropical_forward, tropical_backward, tropical_params),
    "tropical_rational": Body(tropical_rational_forward, tropical_rational_backward, tropical_rational_params),
}
