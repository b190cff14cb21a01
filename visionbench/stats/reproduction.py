"""Did a rerun reproduce a result? The statistics of `visionbench compare A B` and of a paper's single number.

    >>> from visionbench.stats import reproduction
    >>> res = reproduction.compare_runs(a_values, b_values, margin=0.7)   # Δ = B − A, Welch CI and p, TOST p
    >>> reproduction.decide(identical=False, welch_p=res["welch_p"], tost_p=res["tost_p"])   # "reproduced", ...
    >>> reproduction.prediction_interval(98.7, 0.42, 3)                  # where ONE more run would land (95 %)
    >>> reproduction.one_run_margin(98.7, 360)                            # the default margin: ±0.60 points

A and B are the runs of one (recipe, setting, activation) in two results trees: the reference and the
rerun. The verdict, at α (default 0.05):

1. **identical**: every run of A is in B and B's in A, with the same numbers (the caller decides this:
   metric values and predicted classes, run by run);
2. **reproduced**: the TOST p < α — the difference of means lies within ±margin (statsmodels
   `ttost_ind(usevar="unequal")`, as `power.tost_p(test="welch")`);
3. **differs**: else Welch's p < α — a difference, and not one shown to be within the margin;
4. **undecided**: neither; `seeds_needed` says how many seeds per tree would detect a difference of one
   margin with 80 % power (the power of the two-sample t-test at d = margin / pooled sd, `power.seeds_needed`).

The default margin, for accuracies in percent, is the binomial standard deviation of ONE run's accuracy
over random test sets of N images, 100·√(p(1 − p)/N) (`per_example.binomial_sd`, p the pooled
accuracy): a difference smaller than what re-scoring one model on another test set of that size changes is
no failure to reproduce. Without N (no predictions) there is no default: the caller must ask for one.

`prediction_interval` is the other question: a paper printed ONE run per cell — does that number lie where
one run of ours would? mean ± t(0.975, n − 1)·s·√(1 + 1/n) over our n runs (normal model; NaN for n < 2).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from . import power
from .per_example import binomial_sd
from .significance import LEVEL, compare, difference_ci

IDENTICAL, REPRODUCED, DIFFERS, UNDECIDED = "identical", "reproduced", "differs", "undecided"
VERDICTS = (IDENTICAL, REPRODUCED, DIFFERS, UNDECIDED)


def prediction_interval(mean: float, sd: float, n: int, level: float = LEVEL) -> tuple[float, float]:
    """(low, high) of the `level` prediction interval of one new run: mean ± t(½ + level/2, n − 1)·sd·√(1 + 1/n);
    NaNs when n < 2 or the mean or sd is not finite."""
    if not (n >= 2 and math.isfinite(mean) and math.isfinite(sd)):
        return math.nan, math.nan
    half = float(sps.t.ppf(0.5 + level / 2, n - 1)) * sd * math.sqrt(1 + 1 / n)
    return mean - half, mean + half


def one_run_margin(accuracy: float, n_images: int) -> float:
    """The default equivalence margin of an accuracy in percent over `n_images` test images: the binomial sd
    of one run's accuracy, 100·√(p(1 − p)/N) with p = accuracy / 100; NaN when either is unknown."""
    if not (n_images and n_images > 0 and math.isfinite(accuracy) and 0 <= accuracy <= 100):
        return math.nan
    return 100 * binomial_sd(accuracy / 100, int(n_images))


def compare_runs(a, b, margin: float | None = None, *, alpha: float = power.ALPHA) -> dict:
    """A's and B's values of one metric (one per run): `n_a`, `mean_a`, `sd_a`, the same for B, `diff` = mean B −
    mean A, its Welch interval `ci_low`, `ci_high` (95 %), `welch_p`, `tost_p` (within ±`margin`; NaN without
    one), and `seeds_needed` (per tree, to detect a difference of one margin with 80 % power at `alpha`).
    NaN where a number is undefined (fewer than two runs a side, no spread)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    out = {"n_a": a.size, "mean_a": _mean(a), "sd_a": _sd(a), "n_b": b.size, "mean_b": _mean(b), "sd_b": _sd(b)}
    out["diff"] = out["mean_b"] - out["mean_a"]
    out["ci_low"], out["ci_high"] = difference_ci(b, a, "welch")
    out["welch_p"] = compare(pd.Series(b), pd.Series(a), "welch")["p_value"]
    has_margin = margin is not None and math.isfinite(margin) and margin > 0
    out["tost_p"] = power.tost_p(b, a, margin, test="welch") if has_margin else math.nan
    sd = power.pooled_sd(a, b)
    d = margin / sd if has_margin and sd > 0 else math.nan
    out["seeds_needed"] = power.seeds_needed(d, alpha=alpha)
    return out


def decide(identical: bool, welch_p: float, tost_p: float, alpha: float = power.ALPHA) -> str:
    """The verdict: `identical`, else `reproduced` (TOST p < α), else `differs` (Welch p < α), else `undecided`."""
    if identical:
        return IDENTICAL
    if math.isfinite(tost_p) and tost_p < alpha:
        return REPRODUCED
    if math.isfinite(welch_p) and welch_p < alpha:
        return DIFFERS
    return UNDECIDED


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else math.nan


def _sd(x: np.ndarray) -> float:
    return float(x.std(ddof=1)) if x.size > 1 else math.nan
