"""Probability of improvement P(X > baseline), per recipe and aggregated over recipes, with
stratified bootstrap confidence intervals — the definitions of Agarwal et al., NeurIPS 2021,
"Deep RL at the edge of the statistical precipice" (Sec 4.3, App A.4; rliable's
`probability_of_improvement` and `StratifiedBootstrap`).

    >>> from visionbench.stats import improvement
    >>> improvement.probability_of_improvement([91, 92], [90, 93])   # 0.5: two of four pairs won
    >>> improvement.interval({"r1": (x1, y1), "r2": (x2, y2)}, n_boot=10_000)  # (P, low, high)

Per task m (a recipe, or a setting of a factor sweep): P(X_m > Y_m) = 1/(N·K) Σ_i Σ_j S(x_i, y_j)
over the N runs of X and K runs of Y, S = 1 if x wins, ½ on a tie, 0 otherwise (the Mann–Whitney U
statistic over N·K). Aggregated: the mean over tasks. Its CI resamples runs with replacement
within each task, independently for X and Y (the stratified bootstrap: the tasks stay fixed),
and takes the percentile interval of the aggregate. "Wins" follows the metric's direction:
lower is better for losses, errors, times and epochs_to_X.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

LEVEL = 0.95
CHUNK = 2_000_000  # (x, y) pairs scored at once in the bootstrap, bounds its memory


def _score(x: np.ndarray, y: np.ndarray, higher_better: bool) -> np.ndarray:
    """Mean of S(x_i, y_j) over the last two axes; x (..., N), y (..., K)."""
    dx = x[..., :, None] - y[..., None, :]
    if not higher_better:
        dx = -dx
    return ((dx > 0) + 0.5 * (dx == 0)).mean(axis=(-2, -1))


def probability_of_improvement(x, y, *, higher_better: bool = True) -> float:
    """P(X > Y) on one task: the fraction of (x, y) pairs X wins, ties counting ½; NaN if a group is empty."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if not x.size or not y.size:
        return math.nan
    return float(_score(x, y, higher_better))


def interval(tasks: dict, *, higher_better=True, n_boot: int = 10_000, seed: int = 0,
             level: float = LEVEL) -> tuple[float, float, float]:
    """(aggregate P(X > Y), CI low, CI high) over `tasks` = {name: (x values, y values)}.

    `higher_better` is one bool or {name: bool} (each recipe ranked on its own metric). Tasks where
    a group is empty are left out; NaNs when none is left. The CI is NaN when every task has one
    value in each group (nothing to resample).
    """
    used = {k: (np.asarray(x, float), np.asarray(y, float)) for k, (x, y) in tasks.items()
            if len(x) and len(y)}
    if not used:
        return math.nan, math.nan, math.nan
    direction = {k: higher_better[k] if isinstance(higher_better, dict) else higher_better for k in used}
    point = float(np.mean([_score(x, y, direction[k]) for k, (x, y) in used.items()]))
    if all(x.size < 2 and y.size < 2 for x, y in used.values()):
        return point, math.nan, math.nan
    rng = np.random.default_rng(seed)
    boot = np.zeros(n_boot)
    for k, (x, y) in used.items():  # stratified: resample within each task
        bx = x[rng.integers(0, x.size, (n_boot, x.size))]
        by = y[rng.integers(0, y.size, (n_boot, y.size))]
        step = max(1, CHUNK // (x.size * y.size))  # n_boot × N × K pairs at once would not fit for many seeds
        for start in range(0, n_boot, step):
            boot[start:start + step] += _score(bx[start:start + step], by[start:start + step], direction[k])
    boot /= len(used)
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    return point, float(lo), float(hi)


def recipe_interval(x, y, *, higher_better: bool = True, n_boot: int = 10_000, seed: int = 0,
                    level: float = LEVEL) -> tuple[float, float, float]:
    """`interval` on one task: (P(X > Y), CI low, CI high); CI NaN when a group has fewer than 2 values."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.size < 2 or y.size < 2:
        return probability_of_improvement(x, y, higher_better=higher_better), math.nan, math.nan
    return interval({"task": (x, y)}, higher_better=higher_better, n_boot=n_boot, seed=seed, level=level)


def table(blocks: dict, baseline: str, *, n_boot: int = 10_000, seed: int = 0) -> pd.DataFrame:
    """P(act > baseline) per block and aggregated, for every act but the baseline.

    Args:
        blocks: {block label: {"values": {act: array of per-seed values}, "higher_better": bool}}.
        baseline: the act every other one is compared with; blocks without it are left out.

    Returns:
        DataFrame with columns `act, block, p_improve, ci_low, ci_high, n_blocks`; `block` = "all"
        for the aggregate over the blocks where both ran (`n_blocks` of them).
    """
    acts = sorted({a for blk in blocks.values() for a in blk["values"]} - {baseline})
    rows = []
    for act in acts:
        tasks, direction = {}, {}
        for label, blk in blocks.items():
            vals = blk["values"]
            if act in vals and baseline in vals and len(vals[act]) and len(vals[baseline]):
                tasks[label] = (vals[act], vals[baseline])
                direction[label] = blk["higher_better"]
        for label, (x, y) in tasks.items():
            p, lo, hi = recipe_interval(x, y, higher_better=direction[label], n_boot=n_boot, seed=seed)
            rows.append({"act": act, "block": label, "p_improve": p, "ci_low": lo, "ci_high": hi, "n_blocks": 1})
        if tasks:
            p, lo, hi = interval(tasks, higher_better=direction, n_boot=n_boot, seed=seed)
            rows.append({"act": act, "block": "all", "p_improve": p, "ci_low": lo, "ci_high": hi,
                         "n_blocks": len(tasks)})
    return pd.DataFrame(rows, columns=["act", "block", "p_improve", "ci_low", "ci_high", "n_blocks"])

