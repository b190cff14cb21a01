"""The tests `visionbench compare` decides with, each holding its level whatever B's spread (stats/reproduction.py
has the verdict; docs/reproducing.md the measured rates).

    >>> from visionbench.stats import equivalence as eq
    >>> eq.reference_p(a, b, k=1.0)          # p of "|μ_B − μ_A| ≥ k·σ_A", σ_A the reference's seed sd
    >>> eq.reference_bound(a, b)             # the smallest k (in σ_A) at which that test rejects at α
    >>> eq.reference_rate(0.0, 1.0, 3, 3)    # P(reproduced) of the design when nothing changed
    >>> eq.hsu_welch(a, b)                   # Welch's t with Hsu's df = min(n) − 1: (Δ, low, high, p)

**The equivalence test in the reference's sd.** The margin is k seed standard deviations *of A*, the reference:
a noisier rerun cannot widen it (with the pooled sd of both trees, B twice as noisy read a 1-sd shift as
`reproduced` 7.7–10.5 % of the time). With D = Δ̂ / s_A and σ_B = r·σ_A, exactly,

    D / √(1/n_A + r²/n_B)  ~  noncentral t(ν = n_A − 1, ncp = (Δ/σ_A) / √(1/n_A + r²/n_B)),

(Δ̂ is normal and independent of s_A). The test rejects "|Δ| ≥ kσ_A" when |D| < c, c chosen so that the largest
P(|D| < c) over r in [0, `SPREAD_RATIO`] at |Δ| = kσ_A is α; its p-value is that largest P(|D| ≤ |d|). Beyond
the ratio, the spread check (`spread_grew`: a one-sided F test that σ_B > σ_A, at α) stops `reproduced` where B's
runs are significantly noisier than A's. Where the metric is a count of images (accuracy = 100·k/N), Δ̂ lies on
a lattice of step 100/(N·lcm(n_A, n_B)) and a tie (Δ̂ = 0) stands for |Δ| ≤ half a step: the test uses |d| + half
the step (`lattice_step`), so a rounded Δ̂ never rejects more often than the continuous one it rounds.

**Welch's test with Hsu's df.** t = Δ̂ / √(s_A²/n_A + s_B²/n_B) against Student's t with min(n_A, n_B) − 1 df
(Hsu 1938; Scheffé 1970): its level is at most α for every variance ratio, where Welch–Satterthwaite's df
reached 6.1 % at 5 vs 3 seeds with B twice as noisy. The TOST at a margin in the metric's units uses the same df.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
from scipy import integrate, optimize
from scipy import stats as sps

ALPHA = 0.05
SPREAD_RATIO = 2.0  # the test holds α for σ_B up to this many σ_A; beyond it the spread check takes over
_RATIOS = np.linspace(0.0, SPREAD_RATIO, 41)


def _within(c, df: float, ncp):
    """P(|T| < c), T ~ noncentral t(df, ncp), vectorised (the left tail through P(T < −c; ncp) = P(T > c; −ncp):
    scipy's noncentral t cdf is NaN far in the left tail)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(sps.nct.cdf(c, df, ncp) - sps.nct.sf(c, df, -np.asarray(ncp)), float)


def _scales(n_a: int, n_b: int, ratios=_RATIOS) -> np.ndarray:
    return np.sqrt(1 / n_a + np.asarray(ratios, float) ** 2 / n_b)


def _largest(d: float, k: float, n_a: int, n_b: int) -> float:
    """The largest P(|D| ≤ d) at |Δ| = kσ_A over σ_B/σ_A in [0, SPREAD_RATIO]: the grid's best, refined around it."""
    s = _scales(n_a, n_b)
    values = _within(d / s, n_a - 1, k / s)
    i = int(np.nanargmax(values))
    lo, hi = _RATIOS[max(i - 1, 0)], _RATIOS[min(i + 1, len(_RATIOS) - 1)]
    res = optimize.minimize_scalar(
        lambda r: -float(_within(d / _scales(n_a, n_b, r), n_a - 1, k / _scales(n_a, n_b, r))),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-6},
    )
    return float(min(1.0, max(values[i], -res.fun, 0.0)))


def reference_p(a, b, k: float = 1.0, step: float = 0.0) -> float:
    """p-value of the test that |mean(b) − mean(a)| < k·σ_A (module docstring); `step`: the lattice step of Δ̂
    (0: a continuous metric). NaN when A has fewer than 2 values, B none, or A no spread."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or b.size < 1 or not k > 0:
        return math.nan
    sd = float(a.std(ddof=1))
    if not (math.isfinite(sd) and sd > 0):
        return math.nan
    d = (abs(float(b.mean() - a.mean())) + step / 2) / sd
    return _largest(d, k, a.size, b.size)


@functools.lru_cache(maxsize=512)
def critical(k: float, n_a: int, n_b: int, alpha: float = ALPHA) -> float:
    """c: the test rejects when |D| < c, with the largest P(|D| < c) over the spread ratios = α at |Δ| = kσ_A."""
    hi = max(1.0, 2 * k)
    while _largest(hi, k, n_a, n_b) < alpha:
        hi *= 2
    return float(optimize.brentq(lambda c: _largest(c, k, n_a, n_b) - alpha, 1e-12, hi, xtol=1e-10))


def reference_bound(a, b, alpha: float = ALPHA, step: float = 0.0) -> float:
    """The smallest margin k (in σ_A) at which `reference_p` < α: what these runs support, by the verdict's own
    test. NaN where the test is undefined."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if math.isnan(reference_p(a, b, 1.0, step)):
        return math.nan
    hi = 1.0
    while reference_p(a, b, hi, step) >= alpha:
        hi *= 2
        if hi > 1e6:
            return math.inf
    lo = 1e-9
    if reference_p(a, b, lo, step) < alpha:  # an exact tie of a continuous metric: any margin at all
        return 0.0
    return float(optimize.brentq(lambda k: reference_p(a, b, k, step) - alpha, lo, hi, xtol=1e-6))


def spread_grew(a, b, alpha: float = ALPHA) -> float:
    """p of the one-sided F test that σ_B > σ_A (s_B²/s_A² against F(n_B − 1, n_A − 1)); NaN without two values a
    side or without A's spread."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or b.size < 2:
        return math.nan
    va, vb = float(a.var(ddof=1)), float(b.var(ddof=1))
    if not va > 0:
        return math.nan
    return float(sps.f.sf(vb / va, b.size - 1, a.size - 1))


@functools.lru_cache(maxsize=512)
def reference_rate(
    shift_sd: float, ratio: float, n_a: int, n_b: int, k: float = 1.0, alpha: float = ALPHA, check: bool = True
) -> float:
    """P(`reproduced`) of the design, exactly: |Δ| = shift_sd·σ_A, σ_B = ratio·σ_A, n_A and n_B runs, margin kσ_A;
    `check`: with the spread check (B significantly noisier: no `reproduced`). One integral over A's sd."""
    c, nu_a, nu_b = critical(k, n_a, n_b, alpha), n_a - 1, n_b - 1
    se = math.sqrt(1 / n_a + ratio**2 / n_b)  # sd of Δ̂ in σ_A units
    f_crit = float(sps.f.isf(alpha, nu_b, nu_a)) if check and n_b >= 2 else math.inf

    def given(v: float) -> float:  # v = ν_A s_A² / σ_A², chi-square(ν_A)
        s_a = math.sqrt(v / nu_a)
        near = sps.norm.cdf((c * s_a - shift_sd) / se) - sps.norm.cdf((-c * s_a - shift_sd) / se)
        quiet = 1.0 if math.isinf(f_crit) or not ratio else sps.chi2.cdf(f_crit * s_a**2 * nu_b / ratio**2, nu_b)
        return near * quiet * sps.chi2.pdf(v, nu_a)

    lo, hi = sps.chi2.ppf(1e-13, nu_a), sps.chi2.isf(1e-13, nu_a)  # where the chi-square has its mass, at any ν
    return float(integrate.quad(given, lo, hi, limit=200, points=[nu_a])[0])


def lattice_step(a, b, images: int) -> float:
    """The step of Δ̂'s lattice when every value is 100·k/`images` (accuracy in percent over a test set of that
    many images): 100 / (images · lcm(n_A, n_B)); 0 when the values are not such counts or `images` is unknown."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if not images or images <= 0 or not a.size or not b.size:
        return 0.0
    counts = np.concatenate([a, b]) * images / 100
    if not np.allclose(counts, np.round(counts), rtol=0, atol=1e-6):
        return 0.0
    return 100 / (images * math.lcm(a.size, b.size))


# ---- Welch with Hsu's df: a level that holds for every variance ratio ------------------------------------


def hsu_welch(a, b, level: float = 0.95) -> tuple[float, float, float, float]:
    """(Δ̂ = mean(b) − mean(a), the `level` interval, the two-tailed p) of Welch's statistic with Hsu's df
    min(n_A, n_B) − 1; NaNs below two values a side or without spread."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or b.size < 2:
        return math.nan, math.nan, math.nan, math.nan
    diff = float(b.mean() - a.mean())
    se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    if not se > 0:
        return diff, math.nan, math.nan, math.nan
    df = min(a.size, b.size) - 1
    half = float(sps.t.ppf(0.5 + level / 2, df)) * se
    return diff, diff - half, diff + half, float(2 * sps.t.sf(abs(diff) / se, df))


def hsu_tost_p(a, b, margin: float) -> float:
    """p of the TOST that |mean(b) − mean(a)| < `margin` (metric units), Welch's se with Hsu's df; NaN as
    `hsu_welch`."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    diff, low, _, _ = hsu_welch(a, b)
    if math.isnan(low):
        return math.nan
    se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    df = min(a.size, b.size) - 1
    return float(max(sps.t.sf((diff + margin) / se, df), sps.t.sf((margin - diff) / se, df)))


def hsu_tost_bound(a, b, alpha: float = ALPHA) -> float:
    """The smallest margin (metric units) at which `hsu_tost_p` < α: the largest |limit| of the 1 − 2α interval."""
    _, low, high, _ = hsu_welch(a, b, level=1 - 2 * alpha)
    return max(abs(low), abs(high)) if math.isfinite(low) else math.nan


def tost_rate(shift: float, sd: float, n_a: int, n_b: int, margin: float, alpha: float = ALPHA) -> float:
    """P(the Hsu TOST calls the trees equivalent within ±`margin`) at a true shift `shift`, both trees' seed sd
    `sd`: a fixed-seed Monte Carlo of 20,000 designs (the statistic has no closed form at unequal n), reproducible
    to the byte."""
    if not (n_a >= 2 and n_b >= 2 and sd > 0):
        return math.nan
    rng = np.random.default_rng(20_000)
    a, b = rng.normal(0, sd, (20_000, n_a)), rng.normal(shift, sd, (20_000, n_b))
    diff = b.mean(1) - a.mean(1)
    se = np.sqrt(a.var(1, ddof=1) / n_a + b.var(1, ddof=1) / n_b)
    t = float(sps.t.isf(alpha, min(n_a, n_b) - 1))
    return float(np.mean(((diff + margin) / se > t) & ((margin - diff) / se > t)))
