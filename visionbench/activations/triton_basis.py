"""Triton bodies (`triton_template.py`) of the basis-expansion families: KAF (`kaf.py`), the KAN
B-spline (`spline.py`) and the Fourier series (`fourier.py`).

All three take one pass, forward and backward; none needs a table built before the kernel:

- kaf: the D kernel values of an element come from the ratio walk of `kaf._kernel_values` (exp of
  the middle atom and of the first ratio, then two multiplies per atom; q = exp(-2a) once per
  program, in fp64 rounded once to fp32 as kaf's Python float is: the walk multiplies an error of q
  into the far atoms up to D^2 / 8 times), with the same clamp of v;
- bspline: the fused kernel's per-interval power-basis table (`local_polynomials`, floats that are
  no constexpr) is not used: every B_i(x) is evaluated in closed form by the cardinal
  truncated-power form `spline._cardinal` that the fused backward already uses, N((x - t_i) / h)
  with N's argument clamped to its support, in the forward and the backward alike (dphi/dx from
  N', the same sum one power lower); see `_cardinal`;
- fourier: one sin and one cos per harmonic and element; the fixed factors sqrt(2) / k! from a
  running k! (exact in fp32 up to k = 10), built from the degree.

Each pair evaluates the same expressions as the family's fused kernel in fp32; the backward writes
dF/dx and g dF/dc_k per coefficient, with the fused kernels' derivative conventions.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from .kaf import CLAMP_SPACINGS
from .spline import RESIDUALS
from .triton_ops import Body
from .triton_polynomial import sigmoid
from .triton_template import coef, emit

SQRT2 = tl.constexpr(math.sqrt(2.0))
KAF_CLAMP = tl.constexpr(CLAMP_SPACINGS)


# ---- KAF: sum_i alpha_i exp(-a v_i^2), v_i = (x - d_i) / spacing; coefficients alpha_0..alpha_(D-1) ------
@triton.jit
def _kaf_start(x, START: tl.constexpr, SPACING: tl.constexpr, SIZE: tl.constexpr, A: tl.constexpr):
    """v (clamped, in spacings from the middle atom m), E_m, E_(m+1) / E_m, E_(m-1) / E_m and q = exp(-2a)."""
    m: tl.constexpr = SIZE // 2
    v = (x - (START + m * SPACING)) * (1.0 / SPACING)
    v = tl.minimum(tl.maximum(v, -SIZE - KAF_CLAMP), SIZE + KAF_CLAMP)
    q = tl.exp(tl.full((), -2.0 * A, tl.float64)).to(tl.float32)  # once per program, rounded once as kaf's
    e_mid = tl.exp(-A * v * v)
    up = tl.exp(A * (2.0 * v - 1.0))
    down = q / up
    return v, e_mid, up, down, q


@triton.jit
def kaf_forward(
    x, C, cb, KT: tl.constexpr, START: tl.constexpr, SPACING: tl.constexpr, SIZE: tl.constexpr, A: tl.constexpr
):
    m: tl.constexpr = SIZE // 2
    v, e_mid, up, down, q = _kaf_start(x, START, SPACING, SIZE, A)
    out = coef(C, cb, m, KT) * e_mid
    e = e_mid
    r = up
    for i in tl.static_range(m + 1, SIZE):
        e = e * r
        r = r * q
        out = out + coef(C, cb, i, KT) * e
    e = e_mid
    r = down
    for t in tl.static_range(m):
        e = e * r
        r = r * q
        out = out + coef(C, cb, m - 1 - t, KT) * e
    return out


@triton.jit
def kaf_backward(
    x,
    g,
    C,
    cb,
    PART,
    pofs,
    pmask,
    KT: tl.constexpr,
    MODE: tl.constexpr,
    START: tl.constexpr,
    SPACING: tl.constexpr,
    SIZE: tl.constexpr,
    A: tl.constexpr,
):
    """dF/dx = -(2 a / spacing) sum_i alpha_i E_i (v - (i - m)), dF/dalpha_i = E_i; the clamp of v acts
    only where every E_i is 0 in fp32, so its zero derivative there is exact."""
    m: tl.constexpr = SIZE // 2
    v, e_mid, up, down, q = _kaf_start(x, START, SPACING, SIZE, A)
    slope = (coef(C, cb, m, KT) * e_mid) * v
    emit(PART, m, g * e_mid, pofs, pmask, KT, MODE)
    e = e_mid
    r = up
    for i in tl.static_range(m + 1, SIZE):
        e = e * r
        r = r * q
        slope = slope + (coef(C, cb, i, KT) * e) * (v - (i - m))
        emit(PART, i, g * e, pofs, pmask, KT, MODE)
    e = e_mid
    r = down
    for t in tl.static_range(m):
        e = e * r
        r = r * q
        slope = slope + (coef(C, cb, m - 1 - t, KT) * e) * (v + (t + 1))
        emit(PART, m - 1 - t, g * e, pofs, pmask, KT, MODE)
    return g * slope * (-2.0 * A / SPACING)


# ---- B-spline: w_b b(x) + sum_i c_i B_i(x); coefficients c_0..c_(G+k-1), then w_b (no w_b with "none") ----
@triton.jit
def _cardinal(w, K: tl.constexpr):
    """The uniform B-spline N of order K on knots 0..K+1 at w (any float) and its right derivative dN/dw:
    N(w) = (1/K!) sum_r (-1)^r C(K+1, r) (w - r)_+^K, w clamped to [0, K+1] as in `spline._cardinal`,
    dN/dw = 0 outside [0, K+1). Both are evaluated on the half of the support where w <= (K+1)/2, by
    N's symmetry N(w) = N(K+1-w), N'(w) = -N'(K+1-w): only the terms r <= K//2 remain and the largest
    stays below ((K+1)/2)^K / K! (1.3 for K = 3, against (K+1)^K / K! = 10.7 on the whole support), so the
    cancellation costs fewer fp32 ulps. For K = 1, (w - r)_+^0 is 1 from w = r on: the right derivative,
    as the fused kernel's interval polynomials give it at a knot."""
    wc = tl.minimum(tl.maximum(w, 0.0), K + 1.0)
    flip = wc >= (K + 1) * 0.5
    wr = tl.where(flip, (K + 1.0) - wc, wc)
    value = 0.0 * w
    slope = 0.0 * w
    fact = 1.0  # K! and C(K+1, r): integer products, exact in fp32 up to K = 10; one rounding for their ratio
    for i in tl.static_range(2, K + 1):
        fact = fact * i
    binom = 1.0
    sgn = 1.0
    for r in tl.static_range(K // 2 + 1):
        t = tl.maximum(wr - r, 0.0)
        if K == 1:
            p = tl.where(wr >= r, 1.0, 0.0)
        else:
            p = t
            for _ in tl.static_range(K - 2):
                p = p * t
        a = sgn * binom / fact
        value = value + (a * p) * t
        slope = slope + (a * K) * p
        binom = binom * (K + 1 - r) / (r + 1)
        sgn = -sgn
    slope = tl.where(flip, -slope, slope)
    slope = tl.where((w >= 0.0) & (w < K + 1.0), slope, 0.0)
    return value, slope


@triton.jit
def bspline_forward(
    x, C, cb, KT: tl.constexpr, START: tl.constexpr, STEP: tl.constexpr, INTERVALS: tl.constexpr, KRES: tl.constexpr
):
    K: tl.constexpr = KRES // 4
    RES: tl.constexpr = KRES % 4
    z = (x - START) * (1.0 / STEP)
    out = 0.0 * x
    for i in tl.static_range(INTERVALS - K):
        value, slope = _cardinal(z - i, K)
        out = out + coef(C, cb, i, KT) * value
    if RES == 0:
        out = out + coef(C, cb, INTERVALS - K, KT) * (x * sigmoid(x))
    elif RES == 1:
        out = out + coef(C, cb, INTERVALS - K, KT) * x
    return out


@triton.jit
def bspline_backward(
    x,
    g,
    C,
    cb,
    PART,
    pofs,
    pmask,
    KT: tl.constexpr,
    MODE: tl.constexpr,
    START: tl.constexpr,
    STEP: tl.constexpr,
    INTERVALS: tl.constexpr,
    KRES: tl.constexpr,
):
    """dphi/dx = sum_i c_i N'((x - t_i) / h) / h + w_b b'(x), dphi/dc_i = B_i(x), dphi/dw_b = b(x)."""
    K: tl.constexpr = KRES // 4
    RES: tl.constexpr = KRES % 4
    z = (x - START) * (1.0 / STEP)
    ds = 0.0 * x
    for i in tl.static_range(INTERVALS - K):
        value, slope = _cardinal(z - i, K)
        ds = ds + coef(C, cb, i, KT) * slope
        emit(PART, i, g * value, pofs, pmask, KT, MODE)
    grad_x = g * (ds * (1.0 / STEP))
    if RES == 0:
        s = sigmoid(x)
        emit(PART, INTERVALS - K, g * (x * s), pofs, pmask, KT, MODE)
        grad_x = grad_x + g * (coef(C, cb, INTERVALS - K, KT) * (s * (1.0 + x * (1.0 - s))))
    elif RES == 1:
        emit(PART, INTERVALS - K, g * x, pofs, pmask, KT, MODE)
        grad_x = grad_x + g * coef(C, cb, INTERVALS - K, KT)
    return grad_x


# ---- Fourier: a_0 + sum_k (sqrt(2) / k!) a_k cos(f_k x - phi_k); coefficients a_0..a_n, f_1..f_n, phi_1..phi_n --
@triton.jit
def fourier_forward(x, C, cb, KT: tl.constexpr, N: tl.constexpr, P1: tl.constexpr, P2: tl.constexpr, P3: tl.constexpr):
    out = coef(C, cb, 0, KT) + 0.0 * x
    fact = 1.0  # k!, exact in fp32 up to k = 10: s_k = sqrt(2) / k! takes one rounding
    for k in tl.static_range(1, N + 1):
        fact = fact * k
        s = SQRT2 / fact
        arg = coef(C, cb, N + k, KT) * x - coef(C, cb, 2 * N + k, KT)
        out = out + (s * coef(C, cb, k, KT)) * tl.cos(arg)
    return out


@triton.jit
def fourier_backward(
    x,
    g,
    C,
    cb,
    PART,
    pofs,
    pmask,
    KT: tl.constexpr,
    MODE: tl.constexpr,
    N: tl.constexpr,
    P1: tl.constexpr,
    P2: tl.constexpr,
    P3: tl.constexpr,
):
    """With A_k = s_k a_k: dF/dx = -sum_k A_k f_k sin(arg_k), dF/da_k = s_k cos(arg_k),
    dF/df_k = -A_k x sin(arg_k), dF/dphi_k = A_k sin(arg_k)."""
    emit(PART, 0, g, pofs, pmask, KT, MODE)
    slope = 0.0 * x
    fact = 1.0
    for k in tl.static_range(1, N + 1):
        fact = fact * k
        s = SQRT2 / fact
        f = coef(C, cb, N + k, KT)
        arg = f * x - coef(C, cb, 2 * N + k, KT)
        amp = s * coef(C, cb, k, KT)
        gs = g * tl.sin(arg)
        emit(PART, k, s * (g * tl.cos(arg)), pofs, pmask, KT, MODE)
        emit(PART, N + k, -amp * (gs * x), pofs, pmask, KT, MODE)
        emit(PART, 2 * N + k, amp * gs, pofs, pmask, KT, MODE)
        slope = slope + (amp * f) * gs
    return -slope


def kaf_params(start: float, spacing: float, size: int, a: float) -> tuple:
    return float(start), float(spacing), int(size), float(a)


def bspline_params(start: float, step: float, intervals: int, order: int, residual: str, poly: tuple = ()) -> tuple:
    """(start, step, intervals, 4 order + residual code): silu 0, linear 1, none 2; `poly` (the fused
    kernel's local polynomials) is not needed (see the module docstring)."""
    return float(start), float(step), int(intervals), 4 * int(order) + RESIDUALS.index(residual)


def fourier_params(degree: int) -> tuple:
    return int(degree), 0, 0, 0


BODIES = {
    "kaf": Body(kaf_forward, kaf_backward, kaf_params),
    "bspline": Body(bspline_forward, bspline_backward, bspline_params),
    "fourier": Body(fourier_forward, fourier_backward, fourier_params),
}
