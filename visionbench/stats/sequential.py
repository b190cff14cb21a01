"""Sequential seeds: decide an activation against the baseline in rounds of seeds
(docs/report.md, "Sequential seeds").

A group-sequential two-sample Student t-test, two-tailed, with the Lan–DeMets O'Brien–Fleming-type
α-spending function

    α*(t) = 2 − 2·Φ(z_{1−α/2} / √t),   t = n_k / n_max   (information fraction at look k).

    >>> from visionbench.stats import sequential
    >>> sequential.nominal_alphas((3, 5, 7, 10), alpha=0.05)   # the level each look is tested at
    >>> sequential.decide(acc_x, acc_relu, looks=(3, 5, 7, 10), margin=0.5)   # 'better', 'continue', ...

Boundaries: Bonferroni on the increments of spent α. Look k is tested at the nominal level
α_k = α*(t_k) − α*(t_{k−1}), so by the union bound the probability of any false "better"/"worse" over
all looks is ≤ Σ α_k = α*(1) = α, exactly, whatever the correlation between looks and for any degrees of
freedom. Why not the usual independent-increments recursion (solve z_k so that the cumulative crossing
probability of a correlated normal matches α*(t_k)): it is exact only for z-statistics with known
variance, and the first looks here have 3 seeds per group (4 df), where plugging a z-boundary into a
t-test is anti-conservative; with t-tests it is also an approximation. The price of Bonferroni is a
little power: with looks 3, 5, 7, 10 the last look is tested at α_4 ≈ 0.031 instead of ≈ 0.043
(tests/test_sequential.py measures the type-I error and the seeds used; docs/report.md lists them).

The rule at look k (n_k seeds per group, both groups the same size):
1. t-test p < α_k: **better** or **worse** (in the metric's direction) — stop;
2. else, with a margin M, TOST p against ±M < α_k: **equivalent** — stop (stopping to accept
   equivalence never adds a false "better"/"worse", so it costs the superiority test no α);
3. else **continue**, or **inconclusive** at the last look.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

ALPHA = 0.05
LOOKS = (3, 5, 7, 10)
DECISIONS = ("better", "worse", "equivalent", "continue", "inconclusive")


def spent_alpha(t, alpha: float = ALPHA) -> np.ndarray:
    """Lan–DeMets O'Brien–Fleming-type spending α*(t) = 2 − 2Φ(z_{1−α/2}/√t); α*(1) = α."""
    t = np.asarray(t, dtype=float)
    return 2.0 * stats.norm.sf(stats.norm.isf(alpha / 2.0) / np.sqrt(t))


def _check_looks(looks) -> tuple[int, ...]:
    looks = tuple(int(n) for n in looks)
    if not looks or looks[0] < 2 or any(b <= a for a, b in zip(looks, looks[1:])):
        raise ValueError(f"looks must be increasing seed counts >= 2, got {looks}")
    return looks


def nominal_alphas(looks=LOOKS, alpha: float = ALPHA) -> np.ndarray:
    """The level each look's test is run at: the increment of spent α (Bonferroni on increments)."""
    looks = _check_looks(looks)
    spent = spent_alpha(np.asarray(looks) / looks[-1], alpha)
    return np.diff(np.concatenate([[0.0], spent]))


def _student(a: np.ndarray, b: np.ndarray):
    """Δ = mean(a) − mean(b), its pooled standard error and df, over the last axis (vectorised)."""
    n1, n2 = a.shape[-1], b.shape[-1]
    diff = a.mean(-1) - b.mean(-1)
    df = n1 + n2 - 2
    pooled = ((n1 - 1) * a.var(-1, ddof=1) + (n2 - 1) * b.var(-1, ddof=1)) / df
    se = np.sqrt(pooled * (1.0 / n1 + 1.0 / n2))
    return diff, se, df


def _tests(a: np.ndarray, b: np.ndarray, margin: float | None):
    """(Δ, two-tailed Student p, TOST p against ±margin or None); no evidence (p = 1) where the
    variance is zero and Δ = 0."""
    diff, se, df = _student(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.nan_to_num(2.0 * stats.t.sf(np.abs(diff / se), df), nan=1.0)
        p_tost = (
            None
            if margin is None
            else np.nan_to_num(
                np.maximum(stats.t.sf((diff + margin) / se, df), stats.t.cdf((diff - margin) / se, df)), nan=1.0
            )
        )
    return diff, p, p_tost


def _look(a, b, looks, alpha: float, margin: float | None, higher_is_better: bool):
    """(decisions, Δ, p, TOST p or None, the look's level) of groups `a`, `b` of shape (..., n_k)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    looks = _check_looks(looks)
    n = a.shape[-1]
    if b.shape[-1] != n or n not in looks:
        raise ValueError(
            f"both groups need the same number of seeds, one of the looks {looks}; got {a.shape[-1]} and {b.shape[-1]}"
        )
    k = looks.index(n)
    level = nominal_alphas(looks, alpha)[k]
    diff, p, p_tost = _tests(a, b, margin)
    up = diff > 0 if higher_is_better else diff < 0
    out = np.full(diff.shape, "inconclusive" if k == len(looks) - 1 else "continue", dtype=object)
    if margin is not None:
        out[p_tost < level] = "equivalent"
    significant = p < level
    out[significant & up] = "better"
    out[significant & ~up] = "worse"
    return out, diff, p, p_tost, level


def decide_batch(
    a, b, *, looks=LOOKS, alpha: float = ALPHA, margin: float | None = None, higher_is_better: bool = True
) -> np.ndarray:
    """Decisions for many sweeps at once: `a` (candidate) and `b` (baseline) have shape (..., n_k)
    with n_k one of `looks`; returns an array of DECISIONS of shape (...)."""
    return _look(a, b, looks, alpha, margin, higher_is_better)[0]


def decide(
    a, b, *, looks=LOOKS, alpha: float = ALPHA, margin: float | None = None, higher_is_better: bool = True
) -> str:
    """One decision: `a` the candidate's metric over its seeds, `b` the baseline's (same length,
    one of `looks`). Returns 'better' / 'worse' / 'equivalent' (stop), 'continue', or 'inconclusive'
    at the last look."""
    return str(decide_batch(a, b, looks=looks, alpha=alpha, margin=margin, higher_is_better=higher_is_better))


def evidence(
    a, b, *, looks=LOOKS, alpha: float = ALPHA, margin: float | None = None, higher_is_better: bool = True
) -> dict:
    """`decide` with the numbers behind it, for the sweep's record (visionbench/sweep/rounds.py): the
    seeds, the difference of means, the t-test's p, TOST's p (with a margin), the look's level, the decision."""
    decision, diff, p, p_tost, level = _look(a, b, looks, alpha, margin, higher_is_better)
    return {
        "seeds": int(np.shape(a)[-1]),
        "diff": float(diff),
        "p": float(p),
        "p_tost": None if p_tost is None else float(p_tost),
        "level": float(level),
        "decision": str(decision),
    }


def evidence_text(step: dict) -> str:
    """One look of `evidence` in words: "p = 0.0031 vs level 0.0052" (with a margin also the TOST p,
    which is what decides equivalence), or the reason the look had no test."""
    if step.get("why"):
        return step["why"]
    tost = f", TOST p = {step['p_tost']:.3g}" if step.get("p_tost") is not None else ""
    return f"p = {step['p']:.3g}{tost} vs level {step['level']:.3g}"


def simulate(
    d: float, *, n_sweeps: int = 10_000, looks=LOOKS, alpha: float = ALPHA, margin: float | None = None, seed: int = 0
) -> dict:
    """Run `n_sweeps` sequential sweeps with true effect d (in sd units) and return the rejection
    rate (`p_reject`: better or worse), `p_better`, `p_equivalent` and the mean seeds per group used."""
    looks = _check_looks(looks)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n_sweeps, looks[-1])) + d
    b = rng.standard_normal((n_sweeps, looks[-1]))
    final = np.full(n_sweeps, "inconclusive", dtype=object)
    used = np.full(n_sweeps, looks[-1], dtype=float)
    open_ = np.ones(n_sweeps, dtype=bool)
    for n in looks:
        dec = decide_batch(a[:, :n], b[:, :n], looks=looks, alpha=alpha, margin=margin)
        stop = open_ & np.isin(dec, ("better", "worse", "equivalent"))
        final[stop], used[stop] = dec[stop], n
        open_ &= ~stop
    return {
        "d": d,
        "p_reject": float(np.isin(final, ("better", "worse")).mean()),
        "p_better": float((final == "better").mean()),
        "p_equivalent": float((final == "equivalent").mean()),
        "mean_seeds": float(used.mean()),
        "seeds_max": looks[-1],
    }
