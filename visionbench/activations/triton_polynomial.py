"""Triton bodies (`triton_template.py`) of the polynomial and rational families: rational A-D, the
Horner polynomial of PolyReLU and of SLAF's eval mode, Hermite (with or without its clamp).

Each pair evaluates the same expressions as the family's fused kernel in fp32: Horner's rule and
the three-term recurrence, no powers; the backward writes dF/dx and g dF/dc_k per coefficient.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_ops import Body
from .triton_template import coef, emit

RATIONAL_FORMS = {"A": 0, "B": 1, "C": 2}  # D is B with noisy numerator coefficients, drawn before the kernel
C_FLOOR = 0.1  # rational version C: Q >= 0.1 (rational.C_FLOOR)


@triton.jit
def sign(t):
    """torch.sign: -1, 0 or 1."""
    return tl.where(t > 0, 1.0, tl.where(t < 0, -1.0, 0.0))


@triton.jit
def tanh(x):
    """tanh from tl.exp (the interpreter runs no libdevice): sign(x) (1 - e) / (1 + e), e = exp(-2|x|)."""
    e = tl.exp(-2.0 * tl.abs(x))
    return sign(x) * (1.0 - e) / (1.0 + e)


@triton.jit
def sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


# ---- rational P / Q: coefficients a_0..a_m, then b (b_1..b_n; b_0..b_(n-1) for C) ----------------
@triton.jit
def _rational_parts(x, C, cb, KT: tl.constexpr, FORM: tl.constexpr, M: tl.constexpr, N: tl.constexpr):
    """P, P', Q, dQ/dx, and the pieces of dQ/db_j = first * base^j (j from the lowest b)."""
    p = coef(C, cb, M, KT) + 0.0 * x
    dp = 0.0 * x
    for i in tl.static_range(M):
        dp = dp * x + p
        p = p * x + coef(C, cb, M - 1 - i, KT)
    if FORM == 0:  # A: Q = 1 + u H(u), u = |x|, H from |b_j|
        u = tl.abs(x)
        h = tl.abs(coef(C, cb, M + N, KT)) + 0.0 * x
        dh = 0.0 * x
        for j in tl.static_range(N - 1):
            dh = dh * u + h
            h = h * u + tl.abs(coef(C, cb, M + N - 1 - j, KT))
        q = 1.0 + h * u
        dq = sign(x) * (h + u * dh)
        base = u
        first = u
    elif FORM == 1:  # B, D: Q = 1 + |T|, T = x H(x)
        h = coef(C, cb, M + N, KT) + 0.0 * x
        dh = 0.0 * x
        for j in tl.static_range(N - 1):
            dh = dh * x + h
            h = h * x + coef(C, cb, M + N - 1 - j, KT)
        t = h * x
        s = sign(t)
        q = 1.0 + tl.abs(t)
        dq = s * (h + x * dh)
        base = x
        first = s * x
    else:  # C: Q = 0.1 + |T|, T = sum_{j<n} b_j x^j
        t = coef(C, cb, M + N, KT) + 0.0 * x
        dt = 0.0 * x
        for j in tl.static_range(N - 1):
            dt = dt * x + t
            t = t * x + coef(C, cb, M + N - 1 - j, KT)
        s = sign(t)
        q = 0.1 + tl.abs(t)
        dq = s * dt
        base = x
        first = s
    return p, dp, q, dq, base, first


@triton.jit
def rational_forward(
    x, C, cb, KT: tl.constexpr, FORM: tl.constexpr, M: tl.constexpr, N: tl.constexpr, P3: tl.constexpr
):
    p, dp, q, dq, base, first = _rational_parts(x, C, cb, KT, FORM, M, N)
    return p / q


@triton.jit
def rational_backward(
    x,
    g,
    C,
    cb,
    PART,
    pofs,
    pmask,
    KT: tl.constexpr,
    MODE: tl.constexpr,
    FORM: tl.constexpr,
    M: tl.constexpr,
    N: tl.constexpr,
    P3: tl.constexpr,
):
    """dL/dx = g (P' - F Q') / Q, dL/da_i = g x^i / Q, dL/db_j = -g (F / Q) dQ/db_j."""
    p, dp, q, dq, base, first = _rational_parts(x, C, cb, KT, FORM, M, N)
    w = g / q
    f = p / q
    term = w
    for i in tl.static_range(M + 1):
        emit(PART, i, term, pofs, pmask, KT, MODE)
        term = term * x
    term = -(w * f) * first
    for j in tl.static_range(N):
        if FORM == 0:  # d|b_j|/db_j
            emit(PART, M + 1 + j, term * sign(coef(C, cb, M + 1 + j, KT)), pofs, pmask, KT, MODE)
        else:
            emit(PART, M + 1 + j, term, pofs, pmask, KT, MODE)
        term = term * base
    return w * (dp - f * dq)


# ---- sum_i c_i r^i, r = ReLU(x) (PolyReLU) or x (SLAF in eval) ----------------------------------
@triton.jit
def poly_forward(
    x, C, cb, KT: tl.constexpr, DEGREE: tl.constexpr, RELU: tl.constexpr, P2: tl.constexpr, P3: tl.constexpr
):
    r = tl.maximum(x, 0.0) if RELU else x
    out = coef(C, cb, DEGREE, KT) + 0.0 * x
    for i in tl.static_range(DEGREE):
        out = out * r + coef(C, cb, DEGREE - 1 - i, KT)
    return out


@triton.jit
def poly_backward(
    x,
    g,
    C,
    cb,
    PART,
    pofs,
    pmask,
    KT: tl.constexpr,
    MODE: tl.constexpr,
    DEGREE: tl.constexpr,
    RELU: tl.constexpr,
    P2: tl.constexpr,
    P3: tl.constexpr,
):
    r = tl.maximum(x, 0.0) if RELU else x
    value = coef(C, cb, DEGREE, KT) + 0.0 * x
    deriv = 0.0 * x
    for i in tl.static_range(DEGREE):
        deriv = deriv * r + value
        value = value * r + coef(C, cb, DEGREE - 1 - i, KT)
    term = g
    for i in tl.static_range(DEGREE + 1):
        emit(PART, i, term, pofs, pmask, KT, MODE)
        term = term * r
    grad_x = g * deriv
    if RELU:  # ReLU'(0) = 0, as autograd has it
        grad_x = tl.where(x > 0, grad_x, 0.0)
    return grad_x


# ---- Hermite: sum_k a_k P_k(z), P_k = He_k / k!, z = x or L tanh(x / 2) -------------------------
@triton.jit
def _hermite_input(x, C, cb, KT: tl.constexpr, DEGREE: tl.constexpr, CLAMP: tl.constexpr):
    if CLAMP:
        t = tanh(0.5 * x)
        z = coef(C, cb, DEGREE + 1, KT) * t
    else:
        t = x
        z = x
    return z, t


@triton.jit
def hermite_forward(
    x, C, cb, KT: tl.constexpr, DEGREE: tl.constexpr, CLAMP: tl.constexpr, P2: tl.constexpr, P3: tl.constexpr
):
    z, t = _hermite_input(x, C, cb, KT, DEGREE, CLAMP)
    out = coef(C, cb, 0, KT) + coef(C, cb, 1, KT) * z
    p_prev = 1.0 + 0.0 * z
    p = z
    for k in tl.static_range(1, DEGREE):
        p_next = (z * p - p_prev) / (k + 1)
        p_prev = p
        p = p_next
        out = out + coef(C, cb, k + 1, KT) * p
    return out


@triton.jit
def hermite_backward(
    x,
    g,
    C,
    cb,
    PART,
    pofs,
    pmask,
    KT: tl.constexpr,
    MODE: tl.constexpr,
    DEGREE: tl.constexpr,
    CLAMP: tl.constexpr,
    P2: tl.constexpr,
    P3: tl.constexpr,
):
    """F'(z) = sum_{k>=1} a_k P_(k-1)(z); dF/da_k = P_k(z); the clamp adds dz/dx = L (1 - t^2) / 2, dz/dL = t."""
    z, t = _hermite_input(x, C, cb, KT, DEGREE, CLAMP)
    emit(PART, 0, g, pofs, pmask, KT, MODE)
    emit(PART, 1, g * z, pofs, pmask, KT, MODE)
    deriv = coef(C, cb, 1, KT) + 0.0 * z
    p_prev = 1.0 + 0.0 * z
    p = z
    for k in tl.static_range(1, DEGREE):
        deriv = deriv + coef(C, cb, k + 1, KT) * p
        p_next = (z * p - p_prev) / (k + 1)
        p_prev = p
        p = p_next
        emit(PART, k + 1, g * p, pofs, pmask, KT, MODE)
    grad_z = g * deriv
    if CLAMP:
        lim = coef(C, cb, DEGREE + 1, KT)
        emit(PART, DEGREE + 1, grad_z * t, pofs, pmask, KT, MODE)
        grad_z = grad_z * (lim * 0.5) * (1.0 - t * t)
    return grad_z


def rational_params(form: str, m: int, n: int) -> tuple:
    return RATIONAL_FORMS[form], m, n, 0


def poly_params(degree: int, relu: bool) -> tuple:
    return degree, int(relu), 0, 0


def hermite_params(degree: int, clamp: bool) -> tuple:
    return degree, int(clamp), 0, 0


BODIES = {
    "rational": Body(rational_forward, rational_backward, rational_params),
    "poly": Body(poly_forward, poly_backward, poly_params),
    "hermite": Body(hermite_forward, hermite_backward, hermite_params),
}
