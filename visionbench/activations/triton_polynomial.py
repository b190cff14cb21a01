"""Triton bodies (`triton_template.py`) of the polynomial and rational families: rational A-D, the
Horner polynomial of PolyReLU and of SLAF's eval mode, Hermite (with or without its clamp).

Each pair evaluates the same expressions as the family's fused kernel in fp32: Horner's rule and
the three-term recurrence, no powers; the backward writes dF/dx and g dF/dc_k per coefficient.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_template import Body, coef, emit

RATIONAL_FORMS = {"A": 0, "B": 1, "C": 2}  # D is B with noisy numerator coefficients, drawn before the kernel
C_FLOOR = 0.1  # rational version C: Q >= 0.1 (rational.C_FLOOR)


@triton.jit
def sign(t):
    """torch.sign: -1, 0 or 1 (NaN stays NaN)."""
    return tl.where(t > 0, 1.0, tl.where(t < 0, -1.0, tl.where(t == 0, 0.0, t)))


@triton.jit
def tanh(x):
    """tanh from tl.exp (the interpreter runs no libdevice): sign(x) (1 - e) / (1 + e), e = exp(-2|x|)."""
    e = tl.exp(-2.0 * tl.abs(x))
    return sign(x) * (1.0 - e) / (1.0 + e)


@triton.jit
def sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def relu(x):
    """max(x, 0), NaN kept (torch.relu's)."""
    return tl.maximum(x, 0.0, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def horner_step(deriv, x, value, i: tl.constexpr):
    """The derivative's Horner step, deriv x + value, the first one (i = 0) just value: no 0 * x, which is NaN at an
    infinite x where the polynomial's derivative is infinite."""
    if i == 0:
        out = value
    else:
        out = deriv * x + value
    return out


@triton.jit
def full(x, c):
    """c broadcast to x's tile, with no arithmetic on x (0 * x would make NaN of an infinite x)."""
    return tl.zeros_like(x) + c


# ---- rational P / Q: coefficients a_0..a_m, then b (b_1..b_n; b_0..b_(n-1) for C) ----------------
@triton.jit
def _rational_parts(x, C, cb, FORM: tl.constexpr, M: tl.constexpr, N: tl.constexpr):
    """P, P', Q, dQ/dx, and the pieces of dQ/db_j = first * base^j (j from the lowest b)."""
    p = full(x, coef(C, cb, M))
    dp = tl.zeros_like(x)
    for i in tl.static_range(M):
        dp = horner_step(dp, x, p, i)
        p = p * x + coef(C, cb, M - 1 - i)
    if FORM == 0:  # A: Q = 1 + u H(u), u = |x|, H from |b_j|
        u = tl.abs(x)
        h = full(x, tl.abs(coef(C, cb, M + N)))
        dh = tl.zeros_like(x)
        for j in tl.static_range(N - 1):
            dh = horner_step(dh, u, h, j)
            h = h * u + tl.abs(coef(C, cb, M + N - 1 - j))
        q = 1.0 + h * u
        dq = sign(x) * (h + u * dh)
        base = u
        first = u
    elif FORM == 1:  # B, D: Q = 1 + |T|, T = x H(x)
        h = full(x, coef(C, cb, M + N))
        dh = tl.zeros_like(x)
        for j in tl.static_range(N - 1):
            dh = horner_step(dh, x, h, j)
            h = h * x + coef(C, cb, M + N - 1 - j)
        t = h * x
        s = sign(t)
        q = 1.0 + tl.abs(t)
        dq = s * (h + x * dh)
        base = x
        first = s * x
    else:  # C: Q = 0.1 + |T|, T = sum_{j<n} b_j x^j
        t = full(x, coef(C, cb, M + N))
        dt = tl.zeros_like(x)
        for j in tl.static_range(N - 1):
            dt = horner_step(dt, x, t, j)
            t = t * x + coef(C, cb, M + N - 1 - j)
        s = sign(t)
        q = 0.1 + tl.abs(t)
        dq = s * dt
        base = x
        first = s
    return p, dp, q, dq, base, first


@triton.jit
def rational_forward(x, C, cb, FORM: tl.constexpr, M: tl.constexpr, N: tl.constexpr):
    p, dp, q, dq, base, first = _rational_parts(x, C, cb, FORM, M, N)
    return p / q


@triton.jit
def rational_backward(x, g, C, cb, acc, MODE: tl.constexpr, FORM: tl.constexpr, M: tl.constexpr, N: tl.constexpr):
    """dL/dx = g (P' - F Q') / Q, dL/da_i = g x^i / Q, dL/db_j = -g (F / Q) dQ/db_j."""
    p, dp, q, dq, base, first = _rational_parts(x, C, cb, FORM, M, N)
    w = g / q
    f = p / q
    term = w
    for i in tl.static_range(M + 1):
        acc = emit(acc, MODE, i, term)
        term = term * x
    term = -(w * f) * first
    for j in tl.static_range(N):
        if FORM == 0:  # d|b_j|/db_j
            acc = emit(acc, MODE, M + 1 + j, term * sign(coef(C, cb, M + 1 + j)))
        else:
            acc = emit(acc, MODE, M + 1 + j, term)
        term = term * base
    return w * (dp - f * dq), acc


# ---- sum_i c_i r^i, r = ReLU(x) (PolyReLU) or x (SLAF in eval) ----------------------------------
@triton.jit
def _poly_input(x, RELU: tl.constexpr):
    if RELU:
        r = relu(x)
    else:
        r = x
    return r


@triton.jit
def poly_forward(x, C, cb, DEGREE: tl.constexpr, RELU: tl.constexpr):
    r = _poly_input(x, RELU)
    out = full(x, coef(C, cb, DEGREE))
    for i in tl.static_range(DEGREE):
        out = out * r + coef(C, cb, DEGREE - 1 - i)
    return out


@triton.jit
def poly_backward(x, g, C, cb, acc, MODE: tl.constexpr, DEGREE: tl.constexpr, RELU: tl.constexpr):
    r = _poly_input(x, RELU)
    value = full(x, coef(C, cb, DEGREE))
    deriv = tl.zeros_like(x)
    for i in tl.static_range(DEGREE):
        deriv = horner_step(deriv, r, value, i)
        value = value * r + coef(C, cb, DEGREE - 1 - i)
    term = g
    for i in tl.static_range(DEGREE + 1):
        acc = emit(acc, MODE, i, term)
        term = term * r
    grad_x = g * deriv
    if RELU:  # ReLU'(0) = 0, as autograd has it; a NaN x keeps its NaN
        grad_x = tl.where(x > 0, grad_x, tl.where(x != x, x, 0.0))
    return grad_x, acc


# ---- Hermite: sum_k a_k P_k(z), P_k = He_k / k!, z = x or L tanh(x / 2) -------------------------
@triton.jit
def _hermite_input(x, C, cb, DEGREE: tl.constexpr, CLAMP: tl.constexpr):
    if CLAMP:
        t = tanh(0.5 * x)
        z = coef(C, cb, DEGREE + 1) * t
    else:
        t = x
        z = x
    return z, t


@triton.jit
def _hermite_derivative(z, C, cb, powers, DEGREE: tl.constexpr):
    """F'(z) by the adjoint of the recurrence P_(k+1) = (z P_k - P_(k-1)) / (k + 1), the terms autograd forms through
    the plain formula (`hermite._derivative`): from b_n = a_n down, c_(k+1) = b_(k+1) / (k + 1) and
    b_k = a_k + c_(k+1) z - c_(k+2); F'(z) = b_1 + sum_{k=1..n-1} c_(k+1) P_k. Nested like Horner's rule, an infinite
    z gets the infinite derivative the plain formula's autograd gives (the sum sum_k a_k P_(k-1) adds infinities of
    both signs there)."""
    b = full(z, coef(C, cb, DEGREE))
    total = tl.zeros_like(z)
    c_next = tl.zeros_like(z)
    for j in tl.static_range(DEGREE - 1):  # k = DEGREE - 1 - j, from n - 1 down to 1
        c = b / (DEGREE - j)
        total = total + c * powers[DEGREE - 2 - j]
        b = coef(C, cb, DEGREE - 1 - j) + c * z - c_next
        c_next = c
    return b + total


@triton.jit
def _hermite_next(z, p_prev, p, k: tl.constexpr):
    """(P_k, P_(k+1)) from (P_(k-1), P_k): the recurrence P_(k+1) = (z P_k - P_(k-1)) / (k + 1)."""
    return p, (z * p - p_prev) / (k + 1)


@triton.jit
def hermite_forward(x, C, cb, DEGREE: tl.constexpr, CLAMP: tl.constexpr):
    z, t = _hermite_input(x, C, cb, DEGREE, CLAMP)
    out = coef(C, cb, 0) + coef(C, cb, 1) * z
    p_prev = full(z, 1.0)
    p = z
    for k in tl.static_range(1, DEGREE):
        p_prev, p = _hermite_next(z, p_prev, p, k)
        out = out + coef(C, cb, k + 1) * p
    return out


@triton.jit
def hermite_backward(x, g, C, cb, acc, MODE: tl.constexpr, DEGREE: tl.constexpr, CLAMP: tl.constexpr):
    """F'(z) = sum_{k>=1} a_k P_(k-1)(z); dF/da_k = P_k(z); the clamp adds dz/dx = L (1 - t^2) / 2, dz/dL = t."""
    z, t = _hermite_input(x, C, cb, DEGREE, CLAMP)
    acc = emit(acc, MODE, 0, g)
    acc = emit(acc, MODE, 1, g * z)
    powers = (z,)  # P_1..P_(n-1), for the adjoint recurrence
    p_prev = full(z, 1.0)
    p = z
    for k in tl.static_range(1, DEGREE):
        p_prev, p = _hermite_next(z, p_prev, p, k)
        acc = emit(acc, MODE, k + 1, g * p)
        if k < DEGREE - 1:
            powers = powers + (p,)
    grad_z = g * _hermite_derivative(z, C, cb, powers, DEGREE)
    if CLAMP:
        lim = coef(C, cb, DEGREE + 1)
        acc = emit(acc, MODE, DEGREE + 1, grad_z * t)
        grad_z = grad_z * (lim * 0.5) * (1.0 - t * t)
    return grad_z, acc


def rational_params(form: str, m: int, n: int) -> tuple:
    return RATIONAL_FORMS[form], m, n


def poly_params(degree: int, relu: bool) -> tuple:
    return degree, int(relu)


def hermite_params(degree: int, clamp: bool) -> tuple:
    return degree, int(clamp)


BODIES = {
    "rational": Body(rational_forward, rational_backward, rational_params),
    "poly": Body(poly_forward, poly_backward, poly_params),
    "hermite": Body(hermite_forward, hermite_backward, hermite_params),
}
