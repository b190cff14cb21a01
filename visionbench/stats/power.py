"""Power and equivalence of one comparison with the baseline: minimal detectable effect, seeds
needed, and the TOST p-value (docs/report.md, "Verdicts, power and equivalence").

    >>> from visionbench.stats import power
    >>> power.mde(a, b)                       # smallest |Δ| detectable with 80 % power at α = 0.05
    >>> power.seeds_needed(0.35)              # seeds per group for 80 % power at Cohen's d = 0.35
    >>> power.tost_p(a, b, margin=0.5)        # p < α: the means are equivalent within ±0.5

The power solutions are statsmodels' (`TTestIndPower`: two-sample Student t with the noncentral t
distribution, two-tailed; `TTestPower` on the paired differences for the paired test). statsmodels
has no power for Welch's test: with `welch` the Student power with the pooled sd is used (the two
agree when the groups are of similar size and spread). The TOST is statsmodels' `ttost_ind`
(pooled or unequal variances, as the table's test) or `ttost_paired`.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy.optimize import brentq
from statsmodels.stats.power import TTestIndPower, TTestPower
from statsmodels.stats.weightstats import ttost_ind, ttost_paired

ALPHA = 0.05  # the papers' significance level (001 Tables 1, 2, 7: stars from p < 0.05)
POWER = 0.8  # the conventional target power (Cohen 1988)
MAX_SEEDS = 1_000_000  # beyond this the answer is "no realistic number of seeds"


def _solver(paired: bool):
    return TTestPower() if paired else TTestIndPower()


def _quiet(fn, **kwargs) -> float:
    # statsmodels warns (ConvergenceWarning, RuntimeWarning) and returns NaN where its root finder
    # gives up; callers check the result
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = fn(**kwargs)
        except (ValueError, RuntimeError, ZeroDivisionError):
            return math.nan
    out = float(np.squeeze(out))
    return out if math.isfinite(out) else math.nan


def pooled_sd(a, b) -> float:
    """The pooled standard deviation (ddof = 1 in each group); NaN when a group has fewer than 2 values."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or b.size < 2:
        return math.nan
    return math.sqrt(((a.size - 1) * a.var(ddof=1) + (b.size - 1) * b.var(ddof=1)) / (a.size + b.size - 2))


def mde_d(n1: int, n2: int | None = None, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest Cohen's d a two-tailed test detects with `power` at `alpha`.

    Two-sample Student t with n1 and n2 per group (`n2=None`: a one-sample/paired t over n1
    differences). NaN when a group has fewer than 2 values.
    """
    if n1 < 2 or (n2 is not None and n2 < 2):
        return math.nan
    if n2 is None:
        return _quiet(
            TTestPower().solve_power, effect_size=None, nobs=n1, alpha=alpha, power=power, alternative="two-sided"
        )
    return _quiet(
        TTestIndPower().solve_power,
        effect_size=None,
        nobs1=n1,
        ratio=n2 / n1,
        alpha=alpha,
        power=power,
        alternative="two-sided",
    )


def mde(a, b, *, paired: bool = False, alpha: float = ALPHA, power: float = POWER) -> float:
    """The minimal detectable |difference of means|, in the metric's units, for the groups at hand:
    `mde_d` × the pooled sd (× the sd of the differences when `paired`; `a`, `b` aligned by seed)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if paired:
        diff = a - b
        if diff.size < 2:
            return math.nan
        return mde_d(diff.size, alpha=alpha, power=power) * float(diff.std(ddof=1))
    return mde_d(a.size, b.size, alpha=alpha, power=power) * pooled_sd(a, b)


def seeds_needed(d: float, *, paired: bool = False, alpha: float = ALPHA, power: float = POWER) -> float:
    """Seeds per group (pairs when `paired`) for `power` at Cohen's d = `d`, two-tailed, rounded up.

    At least 2 (a t-test needs two values per group); `inf` when d is 0 or needs more than
    `MAX_SEEDS`; NaN when d is NaN. The solution is statsmodels' `solve_power`; where its root
    finder gives up (very large d) the same power function is solved by bracketing.
    """
    if d is None or not math.isfinite(d):
        return math.nan
    d = abs(d)
    solver = _solver(paired)
    n_key = "nobs" if paired else "nobs1"
    extra = {} if paired else {"ratio": 1.0}

    def power_at(n: float) -> float:
        # scipy's noncentral t returns NaN for the far lower tail (e.g. d = 50 at 2 seeds), and statsmodels
        # passes it on; that tail is then below 1e-15, so the upper tail at α/2 is the two-tailed power
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = float(solver.power(effect_size=d, alpha=alpha, alternative="two-sided", **{n_key: n}, **extra))
            if math.isnan(out):
                out = float(solver.power(effect_size=d, alpha=alpha / 2, alternative="larger", **{n_key: n}, **extra))
        return out

    if d == 0 or power_at(MAX_SEEDS) < power:
        return math.inf
    if power_at(2) >= power:
        return 2.0
    n = _quiet(
        solver.solve_power, effect_size=d, alpha=alpha, power=power, alternative="two-sided", **{n_key: None}, **extra
    )
    if not math.isfinite(n) or not 2 <= n <= MAX_SEEDS:
        n = brentq(lambda x: power_at(x) - power, 2, MAX_SEEDS)
    return float(math.ceil(n - 1e-9))  # 5.0000000001 from the root finder is 5 seeds


def tost_p(a, b, margin: float, *, test: str = "student") -> float:
    """p-value of the two one-sided tests that mean(a) − mean(b) lies within ±`margin`.

    `test`: `student` (pooled variance), `welch` (unequal) or `paired` (`a`, `b` aligned by seed).
    NaN when a group has fewer than 2 values or both are constant (t undefined).
    """
    if not margin > 0:
        raise ValueError(f"margin must be > 0, got {margin!r}")
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or b.size < 2:
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if test == "paired":
            if np.all(a - b == (a - b)[0]):
                return math.nan
            p = ttost_paired(a, b, -margin, margin)[0]
        else:
            if np.all(a == a[0]) and np.all(b == b[0]):
                return math.nan
            p = ttost_ind(a, b, -margin, margin, usevar="unequal" if test == "welch" else "pooled")[0]
    p = float(p)
    return p if math.isfinite(p) else math.nan
