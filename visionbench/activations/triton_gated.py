"""Triton bodies (`triton_template.py`) of the classic gated / scaled families (`classic.py`): PReLU,
Swish-beta, ACON-C and StarReLU.

Each pair evaluates the same expressions as the family's fused kernel in fp32, with the same
derivative conventions at the kinks (PReLU's x <= 0 side takes a, ReLU'(0) = 0); the backward
writes dF/dx and g dF/dc_k per coefficient.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_polynomial import relu, sigmoid
from .triton_template import Body, coef, emit


# ---- PReLU: max(0, x) + a min(0, x); coefficient a -------------------------------------------------
@triton.jit
def prelu_forward(x, C, cb):
    return tl.where(x > 0, x, coef(C, cb, 0) * x)


@triton.jit
def prelu_backward(x, g, C, cb, acc, MODE: tl.constexpr):
    """dF/dx = a where x <= 0, else 1; dF/da = x where x <= 0, else 0. At a NaN x as the plain formula's autograd:
    relu(x) passes g (not x <= 0), min(0, x) is NaN: dF/dx = 1, dF/da NaN."""
    w = coef(C, cb, 0)
    acc = emit(acc, MODE, 0, tl.where(x > 0, 0.0, g * x))
    return tl.where(x <= 0, g * w, g), acc


# ---- Swish-beta: x sigmoid(beta x); coefficient beta -----------------------------------------------
@triton.jit
def swish_forward(x, C, cb):
    return x * sigmoid(coef(C, cb, 0) * x)


@triton.jit
def swish_backward(x, g, C, cb, acc, MODE: tl.constexpr):
    """dF/dx = s + beta x s (1 - s), dF/dbeta = x^2 s (1 - s), s = sigmoid(beta x)."""
    bx = coef(C, cb, 0) * x
    s = sigmoid(bx)
    ds = s * (1.0 - s)
    acc = emit(acc, MODE, 0, g * (x * x) * ds)
    return g * (s + bx * ds), acc


# ---- ACON-C: (p1 - p2) x sigmoid(beta (p1 - p2) x) + p2 x; coefficients p1, p2, beta --------------
@triton.jit
def acon_forward(x, C, cb):
    lo = coef(C, cb, 1)
    u = (coef(C, cb, 0) - lo) * x
    return u * sigmoid(coef(C, cb, 2) * u) + lo * x


@triton.jit
def acon_backward(x, g, C, cb, acc, MODE: tl.constexpr):
    """u = (p1 - p2) x, s = sigmoid(beta u), h = s + beta u s (1 - s): dF/dx = (p1 - p2) h + p2,
    dF/dp1 = x h, dF/dp2 = x (1 - h), dF/dbeta = u^2 s (1 - s)."""
    hi = coef(C, cb, 0)
    lo = coef(C, cb, 1)
    beta = coef(C, cb, 2)
    d = hi - lo
    u = d * x
    s = sigmoid(beta * u)
    ds = s * (1.0 - s)
    h = s + (beta * u) * ds
    gx = g * x
    gxh = gx * h
    acc = emit(acc, MODE, 0, gxh)
    acc = emit(acc, MODE, 1, gx - gxh)
    acc = emit(acc, MODE, 2, g * (u * u) * ds)
    return g * (d * h + lo), acc


# ---- StarReLU: s relu(x)^2 + b; coefficients s, b ---------------------------------------------------
@triton.jit
def star_forward(x, C, cb):
    r = relu(x)
    return coef(C, cb, 0) * (r * r) + coef(C, cb, 1)


@triton.jit
def star_backward(x, g, C, cb, acc, MODE: tl.constexpr):
    """dF/dx = 2 s relu(x) (0 at x = 0), dF/ds = relu(x)^2, dF/db = 1."""
    r = relu(x)
    acc = emit(acc, MODE, 0, g * (r * r))
    acc = emit(acc, MODE, 1, g)
    return g * (2.0 * coef(C, cb, 0)) * r, acc


def no_params() -> tuple:
    return ()


BODIES = {
    "prelu": Body(prelu_forward, prelu_backward, no_params),
    "swish_beta": Body(swish_forward, swish_backward, no_params),
    "acon_c": Body(acon_forward, acon_backward, no_params),
    "star_relu": Body(star_forward, star_backward, no_params),
}
