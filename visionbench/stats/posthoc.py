"""Which activations differ across tasks, pair by pair: the post-hoc of the suite view (stats/ranking.py runs the
Friedman test; docs/report.md, "Across recipes").

    >>> from visionbench.stats import posthoc
    >>> pairs = posthoc.wilcoxon_holm(table, higher)   # a, b, n, statistic, p, p_holm, differ
    >>> posthoc.groups(order, pairs)                   # the bars of the diagram: runs no test separates

**Pairwise Wilcoxon signed-rank tests with Holm's correction** (the default): for each pair of activations the
differences of their means task by task (in each task's metric direction), scipy's `wilcoxon` (exact at these
sizes; zero differences dropped, as Wilcoxon's original test does), Holm over the k(k−1)/2 pairs. Benavoli, Corani
& Mangili (2016), "Should we really use post-hoc tests based on mean-ranks?", JMLR 17(5): a mean-rank test (Nemenyi)
decides a pair on ranks that depend on which other methods are in the pool, so adding or removing a third
activation can turn a pair's verdict; a pairwise test looks at the pair's own scores only. Its price is discreteness
at few tasks: over N tasks the smallest two-sided p is 2/2^N, so with N ≤ 5 no pair can differ at α = 0.05.
**Nemenyi** (Demšar 2006, JMLR 7) stays available (`--posthoc nemenyi`): the critical difference of mean ranks.
Both hold their family-wise error at α when all activations are equal (tests/test_posthoc.py, by simulation).
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pandas as pd
from scipy import stats

from .significance import holm

POSTHOCS = ("wilcoxon", "nemenyi")
PAIR_COLUMNS = ["a", "b", "n", "statistic", "p", "p_holm", "differ"]


def wilcoxon_holm(table: pd.DataFrame, higher: pd.Series, alpha: float = 0.05) -> pd.DataFrame:
    """`table`: tasks down, activations across (each task's mean over seeds, no NaN); `higher`: per task, whether
    higher is better. One row per pair: the tasks `n` with a non-zero difference, Wilcoxon's statistic, its
    two-sided p, the Holm-adjusted p over the pairs, and whether the pair differs at `alpha`."""
    sign = np.where(higher.reindex(table.index).astype(bool).to_numpy(), 1.0, -1.0)
    rows = []
    for a, b in itertools.combinations(list(table.columns), 2):
        diff = sign * (table[a].to_numpy(float) - table[b].to_numpy(float))
        nonzero = diff[diff != 0]
        if nonzero.size == 0:
            rows.append({"a": a, "b": b, "n": 0, "statistic": math.nan, "p": 1.0})
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = stats.wilcoxon(nonzero, zero_method="wilcox", alternative="two-sided")
        rows.append({"a": a, "b": b, "n": int(nonzero.size), "statistic": float(res.statistic), "p": float(res.pvalue)})
    out = pd.DataFrame(rows, columns=PAIR_COLUMNS[:5])
    out["p_holm"] = holm(out["p"].to_numpy(float)) if len(out) else []
    out["differ"] = out["p_holm"] < alpha
    return out


def nemenyi_pairs(mean_ranks: dict, cd: float) -> pd.DataFrame:
    """Nemenyi's verdict as pairs: two activations differ when their mean ranks are at least CD apart."""
    rows = [
        {"a": a, "b": b, "n": math.nan, "statistic": abs(mean_ranks[a] - mean_ranks[b]), "p": math.nan}
        for a, b in itertools.combinations(list(mean_ranks), 2)
    ]
    out = pd.DataFrame(rows, columns=PAIR_COLUMNS[:5])
    out["p_holm"] = math.nan
    out["differ"] = out["statistic"] >= cd
    return out


def groups(order: list[str], pairs: pd.DataFrame) -> list[list[str]]:
    """Maximal runs of consecutive activations (in `order`, best mean rank first) of which no two differ: the bars
    of a critical-difference-style diagram."""
    differ = {frozenset((r.a, r.b)) for r in pairs.itertuples() if r.differ}
    out: list[list[str]] = []
    for i in range(len(order)):
        j = i
        while j + 1 < len(order) and not any(frozenset((order[j + 1], x)) in differ for x in order[i : j + 1]):
            j += 1
        run = order[i : j + 1]
        if len(run) > 1 and not any(set(run) <= set(g) for g in out):
            out.append(run)
    return out


def smallest_p(n_tasks: int) -> float:
    """The smallest two-sided p a Wilcoxon signed-rank test over `n_tasks` non-zero differences can give: 2/2^N."""
    return min(1.0, 2.0 / 2**n_tasks) if n_tasks > 0 else 1.0
