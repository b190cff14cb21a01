"""The equal-budget verdicts of a tuning design (docs/tuning.md, "What the verdicts mean"): does X beat the baseline
when both are tuned alike, and did tuning change the comparison.

    about = procedures(x_means, base_means)                  # R >= 2 procedures each: a verdict about the activations
    change = interaction(x_tuned, base_tuned, x_recipe, base_recipe, procedures=True)

**About the activations** (`procedures`): the unit of replication is a whole tuning procedure (its B trials, its
selection, its retrained seeds). Procedure j of X and of the baseline share the draw of the B configurations, so the
test is paired: d_j = X_j − base_j (each the mean test score of procedure j's retrained seeds), a one-sample t-test of
the R differences (scipy.stats.ttest_1samp, df R − 1). Its null is that both activations' procedures yield the same
distribution of outcomes; no assumption that they select the same configuration.

**About two selected configurations** (`seeds`): with R = 1 there is one procedure per activation and no spread of
procedures to test against; Welch's t-test over the retrained seeds is then a verdict about the two configurations
the one search selected, conditional on that selection.

**Interaction** (`interaction`): Δ_tuned − Δ_recipe, X − baseline at the tuned configurations minus X − baseline at
the recipe's values, with Welch-Satterthwaite degrees of freedom. Its null: tuning does not change the comparison
(e.g. X has a constant edge on the whole response surface). With procedures the tuned side's variance is the spread
of the R paired differences d_j / R; with R = 1 it is the seeds' (conditional on the selected configurations).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from .power import ALPHA


@dataclass(frozen=True)
class Comparison:
    """A difference (`estimate`, X − baseline, or the interaction) with its (1 − α) interval, two-sided p, the
    degrees of freedom and the decision: `better` / `worse` (p < α, in the metric's direction), `inconclusive`, or ''
    (no test: fewer than 2 values on a side, or no spread)."""

    estimate: float
    low: float
    high: float
    p: float
    df: float
    verdict: str


NO_TEST = Comparison(math.nan, math.nan, math.nan, math.nan, math.nan, "")


def _decide(estimate: float, se: float, df: float, alpha: float, higher: bool) -> Comparison:
    if not (math.isfinite(se) and se > 0 and math.isfinite(df) and df > 0):
        return NO_TEST
    t = estimate / se
    p = float(2 * stats.t.sf(abs(t), df))
    half = float(stats.t.ppf(1 - alpha / 2, df)) * se
    if p < alpha:
        verdict = "better" if (estimate > 0) == higher else "worse"
    else:
        verdict = "inconclusive"
    return Comparison(float(estimate), float(estimate - half), float(estimate + half), p, float(df), verdict)


def _parts(values) -> tuple[float, float, int]:
    """(mean, variance of the mean, n) of the finite `values`."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) < 2:
        return math.nan, math.nan, len(v)
    return float(v.mean()), float(v.var(ddof=1) / len(v)), len(v)


def welch_df(parts: list[tuple[float, int]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of independent variances of means: [(var of mean, n), ...]."""
    total = sum(v for v, _ in parts)
    denom = sum(v * v / (n - 1) for v, n in parts)
    return total * total / denom if denom > 0 else math.nan


def procedures(x_means, base_means, alpha: float = ALPHA, higher: bool = True) -> Comparison:
    """X vs the baseline over R paired procedures (module docstring): `x_means[j]`, `base_means[j]` the mean test
    score of procedure j's retrained seeds; a procedure missing on either side (NaN) is dropped with its pair."""
    x, b = np.asarray(x_means, dtype=float), np.asarray(base_means, dtype=float)
    keep = np.isfinite(x) & np.isfinite(b)
    mean, var, n = _parts(x[keep] - b[keep])
    return _decide(mean, math.sqrt(var), n - 1, alpha, higher) if n >= 2 else NO_TEST


def seeds(x_scores, base_scores, alpha: float = ALPHA, higher: bool = True) -> Comparison:
    """X vs the baseline over the retrained seeds of one procedure each (Welch): about the selected configurations."""
    (mx, vx, nx), (mb, vb, nb) = _parts(x_scores), _parts(base_scores)
    if min(nx, nb) < 2:
        return NO_TEST
    return _decide(mx - mb, math.sqrt(vx + vb), welch_df([(vx, nx), (vb, nb)]), alpha, higher)


def interaction(
    x_tuned, base_tuned, x_recipe, base_recipe, paired_procedures: bool, alpha: float = ALPHA, higher: bool = True
) -> Comparison:
    """Δ_tuned − Δ_recipe (module docstring). `paired_procedures`: `x_tuned`, `base_tuned` are the R procedures' mean
    test scores (paired by procedure); else the retrained seeds' scores of the one selected configuration each.
    `x_recipe`, `base_recipe`: the recipe's values' seeds. The verdict reads `better` when tuning moved the
    comparison in X's favour, `worse` against it."""
    (mxr, vxr, nxr), (mbr, vbr, nbr) = _parts(x_recipe), _parts(base_recipe)
    if paired_procedures:
        x, b = np.asarray(x_tuned, dtype=float), np.asarray(base_tuned, dtype=float)
        keep = np.isfinite(x) & np.isfinite(b)
        md, vd, nd = _parts(x[keep] - b[keep])
        tuned, tuned_parts = md, [(vd, nd)]
    else:
        (mxt, vxt, nxt), (mbt, vbt, nbt) = _parts(x_tuned), _parts(base_tuned)
        tuned, tuned_parts = mxt - mbt, [(vxt, nxt), (vbt, nbt)]
    parts = tuned_parts + [(vxr, nxr), (vbr, nbr)]
    if any(n < 2 for _, n in parts):
        return NO_TEST
    se = math.sqrt(sum(v for v, _ in parts))
    return _decide(tuned - (mxr - mbr), se, welch_df(parts), alpha, higher)
