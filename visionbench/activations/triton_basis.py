"""Triton bodies (`triton_template.py`) of the basis-expansion families: KAF (`kaf.py`), the KAN
B-spline (`spline.py`) and the Fourier series (`fourier.py`).

All three take one pass, forward and backward; none needs a table built before the kernel:

- kaf: the D kernel values of an element come from the ratio walk of `kaf._kernel_values` (exp of
  the middle atom and of the first ratio, then two multiplies per atom; q = exp(-2a) once per
  program, in fp64 rounded once to fp32 as kaf's Python float is: the walk multiplies an error of q
  into the far atoms up to D^2 / 8 times), with the same clamp of v;
- bspline: only the k + 1 B-splines whose support holds x are evaluated: the element's knot interval j and local
  coordinate u, then the k + 1 local values b_m(u) (slot m is B_(j-k+m)) by the uniform Cox-de Boor recursion that
  `spline._local_basis` writes, and their u-derivatives from the order k - 1 values; the forward gathers the k + 1
  coefficients of the interval, the backward hands each coefficient its slot's value (`_local_splines`);
- fourier: one shared range reduction and one polynomial sin/cos pair per harmonic and element (`sincos`: Cody-Waite
  reduction by pi/2 and Cephes' minimax polynomials, a few fp32 ulp for |f x - phi| < 1e5), not two accurate
  library calls with their slow path for huge arguments; the fixed factors sqrt(2) / k! from a running k! (exact in
  fp32 up to k = 10), built from the degree. (The angle-addition recurrence would need f_k = k f_1 and phi_k = k
  phi_1; the family learns every f_k and phi_k apart, so each harmonic takes its own reduction.)

Each pair evaluates the same expressions as the family's fused kernel in fp32; the backward writes
dF/dx and g dF/dc_k per coefficient, with the fused kernels' derivative conventions.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from .kaf import CLAMP_SPACINGS
from .spline import RESIDUALS
from .triton_polynomial import full, sigmoid
from .triton_template import Body, coef, emit

SQRT2 = tl.constexpr(math.sqrt(2.0))
TWO_OVER_PI = tl.constexpr(2.0 / math.pi)
# pi / 2 in three parts (Cephes' DP1..DP3 doubled): k * PIO2_1 is exact for |k| < 2^16
PIO2_1 = tl.constexpr(1.5703125)
PIO2_2 = tl.constexpr(4.837512969970703125e-4)
PIO2_3 = tl.constexpr(7.54978995489188216e-8)
KAF_CLAMP = tl.constexpr(CLAMP_SPACINGS)


# ---- KAF: sum_i alpha_i exp(-a v_i^2), v_i = (x - d_i) / spacing; coefficients alpha_0..alpha_(D-1) ------
@triton.jit
def _kaf_start(x, START: tl.constexpr, SPACING: tl.constexpr, SIZE: tl.constexpr, A: tl.constexpr):
    """v (clamped, in spacings from the middle atom m), E_m, E_(m+1) / E_m, E_(m-1) / E_m, q = exp(-2a), and v
    unclamped (the derivative's factor: 0 * inf = NaN at an infinite x, as the plain formula's)."""
    m: tl.constexpr = SIZE // 2
    raw = (x - (START + m * SPACING)) * (1.0 / SPACING)
    v = tl.minimum(
        tl.maximum(raw, -SIZE - KAF_CLAMP, propagate_nan=tl.PropagateNan.ALL),
        SIZE + KAF_CLAMP,
        propagate_nan=tl.PropagateNan.ALL,
    )
    q = tl.exp(tl.full((), -2.0 * A, tl.float64)).to(tl.float32)  # rounded once, as kaf's Python float is
    e_mid = tl.exp(-A * v * v)
    up = tl.exp(A * (2.0 * v - 1.0))
    down = q / up
    return v, e_mid, up, down, q, raw


@triton.jit
def kaf_forward(x, C, cb, START: tl.constexpr, SPACING: tl.constexpr, SIZE: tl.constexpr, A: tl.constexpr):
    m: tl.constexpr = SIZE // 2
    v, e_mid, up, down, q, raw = _kaf_start(x, START, SPACING, SIZE, A)
    out = coef(C, cb, m) * e_mid
    e = e_mid
    r = up
    for i in tl.static_range(m + 1, SIZE):
        e = e * r
        r = r * q
        out = out + coef(C, cb, i) * e
    e = e_mid
    r = down
    for t in tl.static_range(m):
        e = e * r
        r = r * q
        out = out + coef(C, cb, m - 1 - t) * e
    return out


@triton.jit
def kaf_backward(
    x,
    g,
    C,
    cb,
    acc,
    MODE: tl.constexpr,
    START: tl.constexpr,
    SPACING: tl.constexpr,
    SIZE: tl.constexpr,
    A: tl.constexpr,
):
    """dF/dx = -(2 a / spacing) sum_i alpha_i E_i (v - (i - m)), dF/dalpha_i = E_i; the clamp of v (in the E_i
    only) acts where every E_i is 0 in fp32, so its zero derivative there is exact."""
    m: tl.constexpr = SIZE // 2
    v, e_mid, up, down, q, raw = _kaf_start(x, START, SPACING, SIZE, A)
    slope = (coef(C, cb, m) * e_mid) * raw
    acc = emit(acc, MODE, m, g * e_mid)
    e = e_mid
    r = up
    for i in tl.static_range(m + 1, SIZE):
        e = e * r
        r = r * q
        slope = slope + (coef(C, cb, i) * e) * (raw - (i - m))
        acc = emit(acc, MODE, i, g * e)
    e = e_mid
    r = down
    for t in tl.static_range(m):
        e = e * r
        r = r * q
        slope = slope + (coef(C, cb, m - 1 - t) * e) * (raw + (t + 1))
        acc = emit(acc, MODE, m - 1 - t, g * e)
    return g * slope * (-2.0 * A / SPACING), acc


# ---- B-spline: w_b b(x) + sum_i c_i B_i(x); coefficients c_0..c_(G+k-1), then w_b (no w_b with "none") ----
@triton.jit
def _local_splines(x, START: tl.constexpr, STEP: tl.constexpr, INTERVALS: tl.constexpr, K: tl.constexpr):
    """The element's knot interval j (int32, clamped to the extended grid), whether x lies inside that grid, and the
    k + 1 B-splines that can be non-zero there, as tuples over the slot m (B_(j-k+m)): their values b_m(u) and their
    u-derivatives, u = z - j in [0, 1), z = (x - start) / h. The values by the uniform Cox-de Boor recursion
    b^d_m = ((u + d - m) b^(d-1)_(m-1) + (m + 1 - u) b^(d-1)_m) / d (`spline._local_basis`), the derivatives from
    the order k - 1 values: db^k_m/du = b^(k-1)_(m-1) - b^(k-1)_m."""
    z = (x - START) * (1.0 / STEP)
    inside = (z >= 0.0) & (z < INTERVALS)
    jf = tl.minimum(tl.maximum(tl.floor(z), 0.0), INTERVALS - 1.0)
    u = z - jf
    cur = (full(x, 1.0),)
    prev = cur
    for d in tl.static_range(1, K + 1):
        prev = cur
        nxt = ()
        for m in tl.static_range(d + 1):
            if m == 0:
                t = ((m + 1.0) - u) * prev[m]
            elif m == d:
                t = (u + (d - m)) * prev[m - 1]
            else:
                t = (u + (d - m)) * prev[m - 1] + ((m + 1.0) - u) * prev[m]
            nxt = nxt + (t * (1.0 / d),)
        cur = nxt
    slopes = ()
    for m in tl.static_range(K + 1):
        if m == 0:
            s = -prev[m]
        elif m == K:
            s = prev[m - 1]
        else:
            s = prev[m - 1] - prev[m]
        slopes = slopes + (s,)
    return jf.to(tl.int32), inside, cur, slopes


@triton.jit
def _spline_sum(C, cb, j, inside, splines, INTERVALS: tl.constexpr, K: tl.constexpr):
    """sum_m c_(j-k+m) s_m over the k + 1 slots: the coefficients of the element's interval (gathered from the spline's
    first tensor; 0 for a B-spline that does not exist) times the slots' values or slopes `splines`."""
    out = tl.zeros_like(splines[0])
    for m in tl.static_range(K + 1):
        i = j + (m - K)
        ok = inside & (i >= 0) & (i < INTERVALS - K)
        out = out + tl.load(C[0] + cb * C[4] + i, mask=ok, other=0.0) * splines[m]
    return out


@triton.jit
def _nonfinite_to_nan(x, y):
    """The plain formula's NaN where x is NaN or infinite (its Cox-de Boor recursion multiplies inf by 0)."""
    return tl.where(tl.abs(x) < float("inf"), y, float("nan"))


@triton.jit
def bspline_forward(x, C, cb, START: tl.constexpr, STEP: tl.constexpr, INTERVALS: tl.constexpr, KRES: tl.constexpr):
    K: tl.constexpr = KRES // 4
    RES: tl.constexpr = KRES % 4
    j, inside, values, slopes = _local_splines(x, START, STEP, INTERVALS, K)
    out = tl.where(inside, _spline_sum(C, cb, j, inside, values, INTERVALS, K), 0.0)
    if RES == 0:
        out = out + coef(C, cb, INTERVALS - K) * (x * sigmoid(x))
    elif RES == 1:
        out = out + coef(C, cb, INTERVALS - K) * x
    return _nonfinite_to_nan(x, out)


@triton.jit
def bspline_backward(
    x,
    g,
    C,
    cb,
    acc,
    MODE: tl.constexpr,
    START: tl.constexpr,
    STEP: tl.constexpr,
    INTERVALS: tl.constexpr,
    KRES: tl.constexpr,
):
    """dphi/dx = sum_m c_(j-k+m) b_m'(u) / h + w_b b'(x), dphi/dc_i = B_i(x) (the slot i - j + k's value, 0 outside
    the k + 1 slots), dphi/dw_b = b(x)."""
    K: tl.constexpr = KRES // 4
    RES: tl.constexpr = KRES % 4
    j, inside, values, slopes = _local_splines(x, START, STEP, INTERVALS, K)
    ds = _spline_sum(C, cb, j, inside, slopes, INTERVALS, K)
    gin = tl.where(inside, g, 0.0)
    for i in tl.static_range(INTERVALS - K):
        slot = i + K - j
        b = tl.zeros_like(x)
        for m in tl.static_range(K + 1):
            b = tl.where(slot == m, values[m], b)
        acc = emit(acc, MODE, i, _nonfinite_to_nan(x, gin * b))
    grad_x = gin * (ds * (1.0 / STEP))
    if RES == 0:
        s = sigmoid(x)
        acc = emit(acc, MODE, INTERVALS - K, g * (x * s))
        grad_x = grad_x + g * (coef(C, cb, INTERVALS - K) * (s * (1.0 + x * (1.0 - s))))
    elif RES == 1:
        acc = emit(acc, MODE, INTERVALS - K, g * x)
        grad_x = grad_x + g * coef(C, cb, INTERVALS - K)
    return _nonfinite_to_nan(x, grad_x), acc


# ---- Fourier: a_0 + sum_k (sqrt(2) / k!) a_k cos(f_k x - phi_k); coefficients a_0..a_n, f_1..f_n, phi_1..phi_n --
@triton.jit
def sincos(a):
    """(sin a, cos a) from one reduction: a = k pi/2 + r, |r| <= pi/4 (Cody-Waite, three parts of pi/2), Cephes'
    sinf/cosf minimax polynomials on r, the pair rotated by the quadrant k mod 4. NaN and +-inf give NaN."""
    k = tl.floor(a * TWO_OVER_PI + 0.5)
    r = ((a - k * PIO2_1) - k * PIO2_2) - k * PIO2_3
    r2 = r * r
    s = r + r * r2 * ((-1.9515295891e-4 * r2 + 8.3321608736e-3) * r2 - 1.6666654611e-1)
    c = 1.0 - 0.5 * r2 + r2 * r2 * ((2.443315711809948e-5 * r2 - 1.388731625493765e-3) * r2 + 4.166664568298827e-2)
    q = k - 4.0 * tl.floor(k * 0.25)  # k mod 4, exact (0, 1, 2 or 3; NaN stays NaN through s and c)
    sin = tl.where(q == 0.0, s, tl.where(q == 1.0, c, tl.where(q == 2.0, -s, -c)))
    cos = tl.where(q == 0.0, c, tl.where(q == 1.0, -s, tl.where(q == 2.0, -c, s)))
    return sin, cos


@triton.jit
def fourier_forward(x, C, cb, N: tl.constexpr):
    out = full(x, coef(C, cb, 0))
    fact = 1.0  # k!, exact in fp32 up to k = 10: s_k = sqrt(2) / k! takes one rounding
    for k in tl.static_range(1, N + 1):
        fact = fact * k
        s = SQRT2 / fact
        sn, cs = sincos(coef(C, cb, N + k) * x - coef(C, cb, 2 * N + k))
        out = out + (s * coef(C, cb, k)) * cs
    return out


@triton.jit
def fourier_backward(x, g, C, cb, acc, MODE: tl.constexpr, N: tl.constexpr):
    """With A_k = s_k a_k: dF/dx = -sum_k A_k f_k sin(arg_k), dF/da_k = s_k cos(arg_k),
    dF/df_k = -A_k x sin(arg_k), dF/dphi_k = A_k sin(arg_k)."""
    acc = emit(acc, MODE, 0, g)
    slope = tl.zeros_like(x)
    fact = 1.0
    for k in tl.static_range(1, N + 1):
        fact = fact * k
        s = SQRT2 / fact
        f = coef(C, cb, N + k)
        sn, cs = sincos(f * x - coef(C, cb, 2 * N + k))
        amp = s * coef(C, cb, k)
        gs = g * sn
        acc = emit(acc, MODE, k, s * (g * cs))
        acc = emit(acc, MODE, N + k, -amp * (gs * x))
        acc = emit(acc, MODE, 2 * N + k, amp * gs)
        slope = slope + (amp * f) * gs
    return -slope, acc


def kaf_params(start: float, spacing: float, size: int, a: float) -> tuple:
    return float(start), float(spacing), int(size), float(a)


def bspline_params(start: float, step: float, intervals: int, order: int, residual: str, poly: tuple = ()) -> tuple:
    """(start, step, intervals, 4 order + residual code): silu 0, linear 1, none 2; `poly` (the fused
    kernel's local polynomials) is not needed (see the module docstring)."""
    return float(start), float(step), int(intervals), 4 * int(order) + RESIDUALS.index(residual)


def fourier_params(degree: int) -> tuple:
    return (int(degree),)


BODIES = {
    "kaf": Body(kaf_forward, kaf_backward, kaf_params),
    "bspline": Body(bspline_forward, bspline_backward, bspline_params),
    "fourier": Body(fourier_forward, fourier_backward, fourier_params),
}
