"""Two-sample statistics of one metric: the test against a baseline, Holm, Cohen's d, a CI, stars.

    >>> compare(pd.Series([93.1, 93.4, 92.9]), pd.Series([92.5, 92.8, 92.6]), "student")

The papers' test is the two-tailed Student t-test with equal variances (paper 001 Tables 1, 2,
7); Welch and a paired test over shared seeds are options. Beyond the papers: Holm–Bonferroni
adjusted p-values over the activations compared with the baseline of one recipe (statsmodels'
`multipletests`), Cohen's d with the pooled sd, and a seeded percentile-bootstrap 95 % CI of the
difference of means (the interval `scipy.stats.bootstrap(method="percentile")` gives on the same
resamples; kept here because scipy's vectorised mean can differ from it in the last bit, and the
committed tables hold these numbers at full precision).

Degenerate cases never raise; the `mark` column says why a number is missing:
`baseline` (the baseline's own row), `n<2`, `baseline n<2`, `zero variance` (t undefined: both
groups, or all paired differences, are constant), `no completed run` (all diverged/failed),
`no baseline` (the recipe has no run of the baseline act), `<2 shared seeds` (paired test).
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

TESTS = ("student", "welch", "paired")
STAR_LEVELS = ((1e-4, "****"), (1e-3, "***"), (1e-2, "**"), (5e-2, "*"))

MARK_BASELINE = "baseline"
MARK_N = "n<2"
MARK_BASELINE_N = "baseline n<2"
MARK_ZERO_VAR = "zero variance"
MARK_NO_RUN = "no completed run"
MARK_NO_BASELINE = "no baseline"
MARK_PAIRS = "<2 shared seeds"


def stars(p: float) -> str:
    """Significance stars: * < .05, ** < .01, *** < .001, **** < .0001; `ns` otherwise, "" for NaN."""
    if p is None or not np.isfinite(p):
        return ""
    for level, mark in STAR_LEVELS:
        if p < level:
            return mark
    return "ns"


def holm(pvalues) -> np.ndarray:
    """Holm–Bonferroni step-down adjusted p-values (statsmodels' `multipletests(method="holm")`).

    NaNs (untested rows: the baseline, n < 2, ...) stay NaN and do not count as tests, so m is the
    number of finite p-values.
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full_like(p, np.nan)
    valid = np.isfinite(p)
    if valid.any():
        out[valid] = multipletests(p[valid], method="holm")[1]
    return out


def cohen_d(a, b) -> float:
    """(mean a − mean b) / pooled sd (ddof = 1); NaN when a group has n < 2 or the pooled sd is 0."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or b.size < 2:
        return float("nan")
    pooled = ((a.size - 1) * a.var(ddof=1) + (b.size - 1) * b.var(ddof=1)) / (a.size + b.size - 2)
    if _constant(a) and _constant(b) or pooled <= 0:
        return float("nan")
    return float((a.mean() - b.mean()) / np.sqrt(pooled))


def bootstrap_ci(a, b, *, paired: bool = False, n_boot: int = 10_000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of mean(a) − mean(b).

    Independent resampling of each group, or of the paired differences `a − b` when `paired`
    (then `a` and `b` must be aligned by seed). Seeded, so tables are reproducible.
    NaNs when a group (or the pair list) has fewer than two values.
    """
    a, b = np.asarray(a, float), np.asarray(b, float)
    rng = np.random.default_rng(seed)
    if paired:
        d = a - b
        if d.size < 2:
            return float("nan"), float("nan")
        boot = d[rng.integers(0, d.size, (n_boot, d.size))].mean(axis=1)
    else:
        if a.size < 2 or b.size < 2:
            return float("nan"), float("nan")
        boot = (a[rng.integers(0, a.size, (n_boot, a.size))].mean(axis=1)
                - b[rng.integers(0, b.size, (n_boot, b.size))].mean(axis=1))
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    return float(lo), float(hi)


def _constant(x: np.ndarray) -> bool:
    # exact equality, not var == 0: the variance of identical floats can come out as 1e-30
    return x.size > 0 and bool(np.all(x == x[0]))


def compare(a: pd.Series, b: pd.Series, test: str = "student") -> dict:
    """Two-tailed test of act values `a` against baseline values `b` (both indexed by seed).

    Returns:
        dict with `t_stat`, `p_value` (NaN when untestable), `mark` ("" when tested) and
        `n_pairs` (the shared seeds, for the paired test; NaN otherwise).
    """
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; choose one of {', '.join(TESTS)}")
    out = {"t_stat": np.nan, "p_value": np.nan, "mark": "", "n_pairs": np.nan}
    if len(a) == 0:
        out["mark"] = MARK_NO_RUN
        return out
    if test == "paired":
        shared = a.index.intersection(b.index)
        out["n_pairs"] = len(shared)
        if len(shared) < 2:
            out["mark"] = MARK_PAIRS
            return out
        x, y = a.loc[shared].to_numpy(float), b.loc[shared].to_numpy(float)
        if _constant(x - y):
            out["mark"] = MARK_ZERO_VAR
            return out
        res = _quiet(sps.ttest_rel, x, y)
    else:
        x, y = a.to_numpy(float), b.to_numpy(float)
        if x.size < 2:
            out["mark"] = MARK_N
            return out
        if y.size < 2:
            out["mark"] = MARK_BASELINE_N
            return out
        if _constant(x) and _constant(y):
            out["mark"] = MARK_ZERO_VAR
            return out
        res = _quiet(sps.ttest_ind, x, y, equal_var=(test == "student"))
    out["t_stat"], out["p_value"] = float(res.statistic), float(res.pvalue)
    return out


def _quiet(fn, *args, **kwargs):
    # scipy warns about "catastrophic cancellation" for nearly equal values; the result still
    # stands and the constant case is handled before the call
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args, **kwargs)

