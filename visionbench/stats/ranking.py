"""Ranking activations across tasks: mean ranks, the Friedman test, and its post-hoc — pairwise Wilcoxon
signed-rank tests with Holm by default (stats/posthoc.py; Benavoli, Corani & Mangili 2016, JMLR 17(5)), or the
Nemenyi critical difference and the groups it cannot separate — Demšar (2006), "Statistical comparisons of
classifiers over multiple data sets", JMLR 7.

    >>> from visionbench.stats import ranking
    >>> ranking.rank_table(scores)            # act, mean_rank, n_recipes, n_acts_mean, n_best
    >>> test = ranking.friedman(scores)       # Friedman + pairwise Wilcoxon/Holm over the complete block
    >>> ranking.friedman(scores, posthoc_test="nemenyi")   # + Nemenyi CD
    >>> ranking.cliques(test["mean_ranks"], test["cd"])

`scores` is a long frame, one row per (task, act, seed): columns `task, act, seed, value, metric,
higher_better, baseline` (the report's `suite.scores_frame` builds it from the runs). A *task* is a
recipe, or one setting of a factor sweep; each is ranked in its own metric's direction.

Per task the acts are ranked on their mean over seeds (1 = best, ties get the average rank), the
Friedman test runs over the tasks where every compared act has a score (scipy's
`friedmanchisquare`), reported beside the Iman–Davenport F that Demšar recommends for it (Friedman's
χ² is undesirably conservative; F = (N−1)χ² / (N(k−1) − χ²) on k−1 and (k−1)(N−1) df, Demšar 2006
Sec 3.2.2), and the Nemenyi critical difference is CD = q_α · sqrt(k(k+1) / (6N)), with q_α the
studentized range quantile over √2.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from . import posthoc

ALPHA = 0.05


def task_metrics(scores: pd.DataFrame) -> pd.DataFrame:
    """task, metric, higher_better, baseline: which metric (and direction) each task was ranked on."""
    return scores.groupby("task", sort=True)[["metric", "higher_better", "baseline"]].first().reset_index()


def means(scores: pd.DataFrame) -> pd.DataFrame:
    """Tasks down, acts across: the mean over seeds (NaN where the act has no score in the task)."""
    return scores.pivot_table(index="task", columns="act", values="value", aggfunc="mean").sort_index()


def _rank_rows(table: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    higher = task_metrics(scores).set_index("task")["higher_better"]
    return table.apply(lambda row: row.rank(method="average", ascending=not higher[row.name]), axis=1)


def ranks(scores: pd.DataFrame) -> pd.DataFrame:
    """Tasks down, acts across: the rank of each act's mean in the task (1 = best in the task's
    direction, ties = average ranks, Demšar 2006 Sec 3.2.2); NaN where the act has no score."""
    return _rank_rows(means(scores), scores)


def rank_table(scores: pd.DataFrame) -> pd.DataFrame:
    """act, mean_rank (over the tasks it ran in), n_recipes, n_acts_mean (acts per such task, on
    average: a rank out of 2 is not one out of 6), n_best (tasks where it ranked 1), sorted best first."""
    r = ranks(scores)
    n_acts = r.notna().sum(axis=1)
    out = pd.DataFrame(
        {
            "act": r.columns,
            "mean_rank": r.mean(axis=0).to_numpy(),
            "n_recipes": r.notna().sum(axis=0).to_numpy(),
            "n_acts_mean": [float(n_acts[r[a].notna()].mean()) for a in r.columns],
            "n_best": (r == 1).sum(axis=0).to_numpy(),
        }
    )
    return out.sort_values(["mean_rank", "act"], kind="stable").reset_index(drop=True)


def complete_block(scores: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(acts, tasks) of the Friedman test: the tasks where every compared act has a score.

    The compared acts start as all acts; while that leaves fewer than 2 complete tasks, the act with
    scores in the fewest tasks is dropped (ties: the last by name). Of the blocks met on the way, the
    one with the most cells (k · N) that has k >= 3 and N >= 2 wins; else the largest one seen."""
    present = means(scores).notna()
    acts = sorted(present.columns)
    best = None
    while acts:
        tasks = list(present.index[present[acts].all(axis=1)])
        size = (len(acts) >= 3 and len(tasks) >= 2, len(acts) * len(tasks))
        if best is None or size > best[0]:
            best = (size, list(acts), tasks)
        counts = present[acts].sum(axis=0)
        acts.remove(sorted(acts, key=lambda a: (counts[a], [-ord(c) for c in a]))[0])
    return (best[1], best[2]) if best else ([], [])


def critical_difference(k: int, n: int, alpha: float = ALPHA) -> float:
    """Nemenyi CD = q_α · sqrt(k(k+1)/(6N)), q_α = studentized range quantile(1-α, k, ∞) / √2
    (Demšar 2006 Sec 3.2.2)."""
    q = stats.studentized_range.ppf(1 - alpha, k, np.inf) / math.sqrt(2)
    return float(q * math.sqrt(k * (k + 1) / (6 * n)))


def iman_davenport(chi2: float, n: int, k: int) -> tuple[float, float, int, int]:
    """(F, p, df1, df2): the Iman–Davenport statistic F = (N−1)χ² / (N(k−1) − χ²) of a Friedman χ² over
    N tasks and k acts, F-distributed with k−1 and (k−1)(N−1) df (Demšar 2006 Sec 3.2.2; p from scipy's
    `f.sf`). When every task ranks the acts alike (χ² = N(k−1)) F is infinite and p = 0.

    Raises:
        ValueError: N < 2, k < 2, or χ² outside [0, N(k−1)].
    """
    if n < 2 or k < 2:
        raise ValueError(f"Iman–Davenport needs N >= 2 tasks and k >= 2 acts, got N = {n}, k = {k}")
    if not 0 <= chi2 <= n * (k - 1) + 1e-9:
        raise ValueError(f"Friedman χ² must lie in [0, N(k-1)] = [0, {n * (k - 1)}], got {chi2!r}")
    df1, df2 = k - 1, (k - 1) * (n - 1)
    room = n * (k - 1) - chi2
    f = math.inf if room <= 1e-12 else (n - 1) * chi2 / room
    return f, float(stats.f.sf(f, df1, df2)) if math.isfinite(f) else 0.0, df1, df2


def friedman(scores: pd.DataFrame, alpha: float = ALPHA, posthoc_test: str = "wilcoxon") -> dict:
    """Friedman test and its post-hoc over the complete block (`complete_block`): pairwise Wilcoxon signed-rank
    tests with Holm (`wilcoxon`, the default) or Nemenyi's critical difference (`nemenyi`), stats/posthoc.py.

    Returns {acts, tasks, k, n, statistic, p_value (Friedman's χ² and its p), f_stat, f_p_value, f_df
    (Iman–Davenport's F, its p and (df1, df2)), cd (Nemenyi's, computed under either post-hoc), mean_ranks (act ->
    mean rank over the block), posthoc, pairs (stats/posthoc.py's frame), groups (the diagram's bars), note};
    the numbers are NaN and `note` says why when k < 3 or N < 2 (no test is run; `acts`, `tasks` are then the
    largest complete block, which no test used)."""
    acts, tasks = complete_block(scores)
    out = {
        "acts": acts,
        "tasks": tasks,
        "k": len(acts),
        "n": len(tasks),
        "statistic": math.nan,
        "p_value": math.nan,
        "f_stat": math.nan,
        "f_p_value": math.nan,
        "f_df": (math.nan, math.nan),
        "cd": math.nan,
        "alpha": alpha,
        "mean_ranks": {},
        "posthoc": posthoc_test,
        "pairs": pd.DataFrame(columns=posthoc.PAIR_COLUMNS),
        "groups": [],
        "note": "",
    }
    if posthoc_test not in posthoc.POSTHOCS:
        raise ValueError(f"unknown post-hoc {posthoc_test!r}; choose one of {', '.join(posthoc.POSTHOCS)}")
    if len(acts) < 3 or len(tasks) < 2:
        out["note"] = (
            f"no Friedman test: it needs >= 3 activations scored in >= 2 common recipes; the largest "
            f"complete block has {len(acts)} activation(s) x {len(tasks)} recipe(s)"
        )
        return out
    table = means(scores).loc[tasks, acts]
    # the statistic is the same for ranks in either direction: the means go in as they are
    res = stats.friedmanchisquare(*[table[a].to_numpy() for a in acts])
    block_ranks = _rank_rows(table, scores)
    f_stat, f_p, df1, df2 = iman_davenport(float(res.statistic), len(tasks), len(acts))
    out.update(
        statistic=float(res.statistic),
        p_value=float(res.pvalue),
        f_stat=f_stat,
        f_p_value=f_p,
        f_df=(df1, df2),
        cd=critical_difference(len(acts), len(tasks), alpha),
        mean_ranks=block_ranks.mean(axis=0).sort_values().to_dict(),
    )
    if posthoc_test == "wilcoxon":
        higher = task_metrics(scores).set_index("task")["higher_better"]
        out["pairs"] = posthoc.wilcoxon_holm(table, higher, alpha)
    else:
        out["pairs"] = posthoc.nemenyi_pairs(out["mean_ranks"], out["cd"])
    out["groups"] = posthoc.groups(list(out["mean_ranks"]), out["pairs"])
    return out


def cliques(mean_ranks: dict, cd: float) -> list[list[str]]:
    """Maximal runs of acts (sorted by mean rank) whose ranks differ by less than CD: the bars of a
    CD diagram (no pair inside a bar is significantly different by Nemenyi)."""
    order = sorted(mean_ranks, key=mean_ranks.get)
    groups = []
    for i, a in enumerate(order):
        j = i
        while j + 1 < len(order) and mean_ranks[order[j + 1]] - mean_ranks[a] < cd:
            j += 1
        group = order[i : j + 1]
        if len(group) > 1 and not any(set(group) <= set(g) for g in groups):
            groups.append(group)
    return groups
