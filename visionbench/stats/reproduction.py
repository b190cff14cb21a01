"""Did a rerun reproduce a result? The statistics of `visionbench compare A B` and of a paper's single number.

    >>> from visionbench.stats import reproduction
    >>> res = reproduction.compare_runs(a_values, b_values)             # Δ = B − A, Welch CI and p, equivalence p
    >>> res = reproduction.compare_runs(a_values, b_values, margin=0.5)  # equivalence within ±0.5 (metric units)
    >>> holm_p, verdicts = reproduction.family_verdicts([res, ...], identical=[False, ...])  # Holm over the acts
    >>> reproduction.seeds_for_equivalence(1.0)                         # 18 seeds per tree for ±1 seed sd
    >>> reproduction.prediction_interval(98.7, 0.42, 3)                 # where ONE more run would land (95 %)

A and B are the runs of one (recipe, setting, activation) in two results trees: the reference and the rerun.
The verdict, at α (default 0.05):

1. **identical**: every run of A is in B and B's in A, with the same numbers (the caller decides this: metric
   values and predicted classes, run by run);
2. **reproduced**: the equivalence test rejects "|μ_B − μ_A| ≥ margin" at α;
3. **differs**: else Welch's p, Holm-adjusted over every activation the comparison tests, < α (a compare of
   four activations at α = 0.05 otherwise says `differs` somewhere in ≈ 1 of 5 reruns that changed nothing);
4. **undecided**: neither; `seeds_needed` says how many seeds per tree would make `reproduced` likely (80 %) if
   the two did not differ at all.

**The margin** is the effect of interest: a shift smaller than it is a reproduction. Given in the metric's units
(`margin=0.5`), the test is the TOST of two one-sided Welch tests (statsmodels `ttost_ind(usevar="unequal")`).
By default it is `DEFAULT_MARGIN_SD` = 1 seed standard deviation, σ the sd of one run over seeds (common to both
trees), and the test is the exact t-test for equivalence in σ units (Wellek 2010, *Testing Statistical
Hypotheses of Equivalence and Noninferiority*, Sec. 6.1): with T = Δ̂ / (s_p·√(1/n_A + 1/n_B)), s_p the pooled sd,
T is noncentral t with ν = n_A + n_B − 2 df and noncentrality θ/√(1/n_A + 1/n_B) at |Δ| = θσ; the test rejects
when |T| < C, C chosen so that P(|T| < C) = α at θ = k (k the margin in sd). Its p-value is P_{θ=k}(|T| ≤ |t|).
It holds its level exactly at every n (the plug-in TOST with a margin k·s_p does not: s_p is noisy), so
"reproduced" at 2 seed sd off happens at most α of the time, and its power at Δ = 0 is the central t's
P(|t_ν| < C): `seeds_for_equivalence(k)` is the smallest n per tree with power ≥ 80 % (k = 1: 18 seeds).
Why one sd: a shift of a whole seed sd moves every comparison the table makes (a t-test between activations
at 3–5 seeds detects 2–3 sd); a margin in test-set terms (one run's binomial sd) is no effect of interest, and
both trees score the same images, so that noise is not in the difference at all. Operating characteristics
by simulation: docs/reproducing.md.

`supported_bound` is what the data do support, margin or none: the largest |limit| of the 90 % Welch interval of
Δ (TOST at α = 0.05 would call the two equivalent for any margin above it).

`prediction_interval` is the other question: a paper printed ONE run per cell — does that number lie where
one run of ours would? mean ± t(0.975, n − 1)·s·√(1 + 1/n) over our n runs (normal model; NaN for n < 2).
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import pandas as pd
from scipy import optimize
from scipy import stats as sps

from . import power
from .significance import LEVEL, compare, difference_ci, holm

IDENTICAL, REPRODUCED, DIFFERS, UNDECIDED = "identical", "reproduced", "differs", "undecided"
VERDICTS = (IDENTICAL, REPRODUCED, DIFFERS, UNDECIDED)
DEFAULT_MARGIN_SD = 1.0  # the default equivalence margin: one seed standard deviation (module docstring)
MAX_SEEDS = 10_000  # seeds per tree beyond which equivalence is "not in reach"


def prediction_interval(mean: float, sd: float, n: int, level: float = LEVEL) -> tuple[float, float]:
    """(low, high) of the `level` prediction interval of one new run: mean ± t(½ + level/2, n − 1)·sd·√(1 + 1/n);
    NaNs when n < 2 or the mean or sd is not finite."""
    if not (n >= 2 and math.isfinite(mean) and math.isfinite(sd)):
        return math.nan, math.nan
    half = float(sps.t.ppf(0.5 + level / 2, n - 1)) * sd * math.sqrt(1 + 1 / n)
    return mean - half, mean + half


# ---- the exact equivalence test in seed-sd units (Wellek 2010, Sec. 6.1) ---------------------------------


def _within(c: float, df: float, ncp: float) -> float:
    """P(|T| < c) for T ~ noncentral t(df, ncp); the left tail through the symmetry P(T < −c; ncp) = P(T > c; −ncp)
    (scipy's noncentral t cdf is NaN far in the left tail)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(sps.nct.cdf(c, df, ncp) - sps.nct.sf(c, df, -ncp))


def _scale(n_a: int, n_b: int) -> float:
    return math.sqrt(1 / n_a + 1 / n_b)


def equivalence_bound(k: float, n_a: int, n_b: int, alpha: float = power.ALPHA) -> float:
    """C: the test rejects "|Δ| ≥ kσ" when |T| < C, with P(|T| < C) = α at |Δ| = kσ (P(|T| < 0) = 0 < α: a root
    lies above 0)."""
    df, ncp = n_a + n_b - 2, k / _scale(n_a, n_b)
    hi = max(1.0, ncp)
    while _within(hi, df, ncp) < alpha:
        hi *= 2
    return float(optimize.brentq(lambda c: _within(c, df, ncp) - alpha, 0.0, hi, xtol=1e-12))


def equivalence_sd_p(a, b, k: float = DEFAULT_MARGIN_SD) -> float:
    """p-value of the exact test that |mean(b) − mean(a)| < k·σ (module docstring): P_{θ=k}(|T| ≤ |t|). NaN when a
    group has fewer than 2 values or both are constant (no σ to measure in)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    sd = power.pooled_sd(a, b)
    if not (math.isfinite(sd) and sd > 0 and k > 0):
        return math.nan
    scale = _scale(a.size, b.size)
    t = (b.mean() - a.mean()) / (sd * scale)
    return min(1.0, max(0.0, _within(abs(t), a.size + b.size - 2, k / scale)))


def equivalence_power(k: float, n: int, alpha: float = power.ALPHA) -> float:
    """The probability that the exact test calls two trees of `n` runs each, with no difference at all,
    equivalent within k·σ: P(|t_{2n−2}| < C)."""
    c = equivalence_bound(k, n, n, alpha)
    return float(2 * sps.t.cdf(c, 2 * n - 2) - 1)


@functools.lru_cache(maxsize=256)
def seeds_for_equivalence(k: float, *, alpha: float = power.ALPHA, target: float = power.POWER) -> float:
    """The fewest seeds per tree at which two trees that do not differ are called equivalent within k·σ with
    probability ≥ `target` (80 %); `inf` beyond `MAX_SEEDS`, NaN for k not finite and > 0."""
    if not (isinstance(k, (int, float)) and math.isfinite(k) and k > 0):
        return math.nan
    if equivalence_power(k, MAX_SEEDS, alpha) < target:
        return math.inf
    lo, hi = 2, 2
    while equivalence_power(k, hi, alpha) < target:
        lo, hi = hi, hi * 2
    if lo == hi:
        return float(hi)
    while hi - lo > 1:  # the power rises with n: the first n that reaches the target
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if equivalence_power(k, mid, alpha) < target else (lo, mid)
    return float(hi)


# ---- one activation, and the family ---------------------------------------------------------------------


def supported_bound(a, b, level: float = 0.90) -> float:
    """The largest |limit| of the `level` (90 %) Welch interval of mean(b) − mean(a): the smallest margin
    within which a Welch TOST at α = (1 − level)/2 (0.05) would call them equivalent; NaN without an interval."""
    low, high = difference_ci(np.asarray(b, float), np.asarray(a, float), "welch", level=level)
    return max(abs(float(low)), abs(float(high))) if math.isfinite(low) else math.nan


def compare_runs(
    a, b, margin: float | None = None, *, margin_sd: float = DEFAULT_MARGIN_SD, alpha: float = power.ALPHA
) -> dict:
    """A's and B's values of one metric (one per run): `n_a`, `mean_a`, `sd_a`, the same for B, `diff` = mean B −
    mean A, its Welch interval `ci_low`, `ci_high` (95 %), `welch_p` (unadjusted), `bound` (`supported_bound`),
    the equivalence margin in the metric's units (`margin`) and in pooled seed sd (`margin_sd`), the test
    (`equivalence_test`: `sd`, the exact sd-unit test, or `tost`, Welch's TOST in the metric's units), its p-value
    `equivalence_p`, and `seeds_needed` (per tree, for 80 % power of that test when the trees do not differ).

    `margin` (metric units) given: the Welch TOST at ±margin; else the exact sd-unit test at ±`margin_sd`·σ
    (module docstring). NaN where a number is undefined (fewer than two runs a side, no spread)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    out = {"n_a": a.size, "mean_a": _mean(a), "sd_a": _sd(a), "n_b": b.size, "mean_b": _mean(b), "sd_b": _sd(b)}
    out["diff"] = out["mean_b"] - out["mean_a"]
    out["ci_low"], out["ci_high"] = difference_ci(b, a, "welch")
    out["welch_p"] = compare(pd.Series(b), pd.Series(a), "welch")["p_value"]
    out["bound"] = supported_bound(a, b)
    sd = power.pooled_sd(a, b)
    sd = sd if math.isfinite(sd) and sd > 0 else math.nan
    for given in (margin, margin_sd):
        if given is not None and not given > 0:
            raise ValueError(f"a margin must be > 0, got {given!r}")
    if margin is None:
        out["equivalence_test"], out["margin_sd"], out["margin"] = "sd", float(margin_sd), margin_sd * sd
        out["equivalence_p"] = equivalence_sd_p(a, b, margin_sd)
    else:
        out["equivalence_test"], out["margin"], out["margin_sd"] = "tost", float(margin), margin / sd
        out["equivalence_p"] = power.tost_p(b, a, margin, test="welch")
    out["seeds_needed"] = seeds_for_equivalence(out["margin_sd"], alpha=alpha)
    return out


def family_verdicts(
    rows: list[dict], identical: list[bool], alpha: float = power.ALPHA
) -> tuple[np.ndarray, list[str]]:
    """(the Holm-adjusted Welch p of each row, its verdict) for the activations of one comparison: `rows` are
    `compare_runs` results, `identical` whether each row's runs are the same run by run. The family is the rows
    whose verdict rests on a test (the identical ones are decided by their bits)."""
    welch = np.array([r["welch_p"] for r in rows], float)
    welch[np.asarray(identical, bool)] = np.nan
    adjusted = holm(welch)
    return adjusted, [decide(same, p, r["equivalence_p"], alpha) for r, same, p in zip(rows, identical, adjusted)]


def decide(identical: bool, welch_p_holm: float, equivalence_p: float, alpha: float = power.ALPHA) -> str:
    """The verdict: `identical`, else `reproduced` (equivalence p < α), else `differs` (Holm-adjusted Welch p < α),
    else `undecided`."""
    if identical:
        return IDENTICAL
    if math.isfinite(equivalence_p) and equivalence_p < alpha:
        return REPRODUCED
    if math.isfinite(welch_p_holm) and welch_p_holm < alpha:
        return DIFFERS
    return UNDECIDED


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else math.nan


def _sd(x: np.ndarray) -> float:
    return float(x.std(ddof=1)) if x.size > 1 else math.nan
