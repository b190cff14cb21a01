"""Two-sample statistics of one metric: the test against a baseline, its confidence interval of Δ,
Holm, Cohen's d, stars.

    >>> compare(pd.Series([93.1, 93.4, 92.9]), pd.Series([92.5, 92.8, 92.6]), "student")
    >>> difference_ci([93.1, 93.4, 92.9], [92.5, 92.8, 92.6], "student")   # (low, high) of Δ

The papers' test is the two-tailed Student t-test with equal variances (paper 001 Tables 1, 2,
7); Welch and a paired test over shared seeds are options. Beyond the papers: Holm–Bonferroni
adjusted p-values over the activations compared with the baseline of one recipe (statsmodels'
`multipletests`), Cohen's d with the pooled sd, and the 95 % confidence interval of the difference
of means that belongs to the table's test: the t interval of that same test (Student pooled, Welch,
or paired over the shared seeds; scipy's `TtestResult.confidence_interval`). It has nominal
coverage from two seeds per group on under the test's own assumptions — a percentile bootstrap
does not: at 3 vs 3 seeds its "95 %" interval covers Δ in about 80 % of normal samples
(tests/test_intervals.py measures both; docs/report.md lists the numbers).

Degenerate cases never raise; the `mark` column says why a number is missing:
`baseline` (the baseline's own row), `n<2`, `baseline n<2`, `zero variance` (t undefined: both
groups, or all paired differences, are constant), `no completed run` (all diverged/failed),
`no baseline` (the recipe has no run of the baseline act), `<2 shared seeds` (paired test),
`not comparable` (the runs of the table differ in more than act and seed: no test across them).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import stats as sps

TESTS = ("student", "welch", "paired")
STAR_LEVELS = ((1e-4, "****"), (1e-3, "***"), (1e-2, "**"), (5e-2, "*"))

MARK_BASELINE = "baseline"
MARK_N = "n<2"
MARK_BASELINE_N = "baseline n<2"
MARK_ZERO_VAR = "zero variance"
MARK_NO_RUN = "no completed run"
MARK_NO_BASELINE = "no baseline"
MARK_PAIRS = "<2 shared seeds"
MARK_MIXED = "not comparable"
LEVEL = 0.95


def stars(p: float) -> str:
    """Significance stars: * < .05, ** < .01, *** < .001, **** < .0001; `ns` otherwise, "" for NaN."""
    if p is None or not np.isfinite(p):
        return ""
    for level, mark in STAR_LEVELS:
        if p < level:
            return mark
    return "ns"


def holm(pvalues) -> np.ndarray:
    """Holm–Bonferroni step-down adjusted p-values: sorted ascending, the i-th (from 0) times m − i, made
    non-decreasing, capped at 1 — statsmodels' `multipletests(method="holm")` to the bit (tests/test_report_stats.py),
    without the `gc.collect()` it runs on every call (0.2 s in a process holding torch: a simulation of many
    compares spent its time there).

    NaNs (untested rows: the baseline, n < 2, ...) stay NaN and do not count as tests, so m is the
    number of finite p-values.
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full_like(p, np.nan)
    valid = np.flatnonzero(np.isfinite(p))
    if valid.size:
        order = np.argsort(p[valid])
        adjusted = np.minimum(np.maximum.accumulate(p[valid][order] * np.arange(valid.size, 0, -1)), 1.0)
        out[valid[order]] = adjusted
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


def difference_ci(a, b, test: str = "student", *, level: float = LEVEL):
    """Confidence interval (low, high) of mean(a) − mean(b): the t interval of the table's `test`.

    `student`: pooled variance, df = n_a + n_b − 2; `welch`: unequal variances, Welch–Satterthwaite
    df; `paired`: the one-sample t interval of the differences `a − b` (`a`, `b` aligned by seed).
    Computed by scipy (`ttest_ind` / `ttest_rel(...).confidence_interval(level)`), vectorised over
    leading axes: `a` of shape (..., n_a) and `b` (..., n_b) give arrays of shape (...).
    NaN where a group (or the pair list) has fewer than two values or the standard error is 0
    (every value equal: the interval would have zero width).

    Raises:
        ValueError: an unknown test, or a level outside (0, 1).
    """
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; choose one of {', '.join(TESTS)}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    a, b = np.asarray(a, float), np.asarray(b, float)
    shape = np.broadcast_shapes(a.shape[:-1], b.shape[:-1])
    nan = np.full(shape, np.nan)
    if test == "paired":
        if a.shape[-1] != b.shape[-1]:
            raise ValueError(f"paired values must be aligned by seed, got {a.shape[-1]} and {b.shape[-1]} values")
        if a.shape[-1] < 2:
            return _out(nan, nan)
        res = _quiet(sps.ttest_rel, a, b, axis=-1)
        flat = _all_equal(a - b)
    else:
        if a.shape[-1] < 2 or b.shape[-1] < 2:
            return _out(nan, nan)
        res = _quiet(sps.ttest_ind, a, b, axis=-1, equal_var=test == "student")
        flat = _all_equal(a) & _all_equal(b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ci = res.confidence_interval(level)
    low, high = (np.where(flat, np.nan, np.asarray(v, float)) for v in (ci.low, ci.high))
    return _out(low, high)


def divergence_p(diverged: int, runs: int, base_diverged: int, base_runs: int) -> float:
    """Two-sided Fisher exact p (scipy's `fisher_exact`) that the act diverges as often as the baseline.

    `runs` counts the runs that either completed or diverged (failed runs are no evidence about the
    activation and are left out); the 2×2 table is [[diverged, runs − diverged], [base_diverged,
    base_runs − base_diverged]]. NaN when either arm has no such run.

    Raises:
        ValueError: a count below 0 or above its runs.
    """
    for k, n, who in ((diverged, runs, "act"), (base_diverged, base_runs, "baseline")):
        if not 0 <= k <= n:
            raise ValueError(f"{who}: diverged runs must lie in 0..runs, got {k} of {n}")
    if runs == 0 or base_runs == 0:
        return float("nan")
    table = [[diverged, runs - diverged], [base_diverged, base_runs - base_diverged]]
    return float(sps.fisher_exact(table, alternative="two-sided").pvalue)


def _all_equal(x: np.ndarray) -> np.ndarray:
    """Per row of the last axis: every value equal to the first (exact equality, as `_constant`)."""
    return np.all(x == x[..., :1], axis=-1)


def _out(low: np.ndarray, high: np.ndarray):
    """Floats for one comparison, arrays for a batch."""
    if np.ndim(low) == 0:
        return float(low), float(high)
    return low, high


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
