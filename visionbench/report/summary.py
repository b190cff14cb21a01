"""One row per (recipe, act): counts, mean ± std and the test against the baseline.

    >>> from visionbench.report import load_runs, summarize
    >>> table = summarize(load_runs("runs/cifar10_vgg8"), "val_top1_best", baseline="relu")

The numbers come from `visionbench.stats`; this module only groups the runs of a results tree.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..results.layout import STALLED
from ..stats.metrics import higher_is_better
from ..stats.significance import (
    MARK_BASELINE,
    MARK_MIXED,
    MARK_NO_BASELINE,
    MARK_NO_RUN,
    TESTS,
    cohen_d,
    compare,
    difference_ci,
    holm,
    stars,
)
from .collect import metric_names

FALLBACK_BASELINES = ("relu", "gelu")  # the baselines of the papers' CNN and transformer tables


def default_baseline(runs: pd.DataFrame) -> str | None:
    """The recipe's baseline: the summaries' `baseline` field if that act was run, else relu, else gelu."""
    acts = set(runs["act"])
    declared = runs["baseline"].dropna() if "baseline" in runs else pd.Series(dtype=object)
    for name in list(declared.value_counts().index) + list(FALLBACK_BASELINES):
        if name in acts:
            return name
    return None


def summarize(
    runs: pd.DataFrame,
    metric: str,
    baseline: str | None = None,
    test: str = "student",
    *,
    higher_better: bool | None = None,
    require_baseline: bool = True,
) -> pd.DataFrame:
    """One row per (recipe, act): counts, mean ± std, difference and test against the baseline.

    Args:
        runs: the output of `load_runs`.
        metric: a column of `runs`, e.g. `val_top1_best`.
        baseline: act to compare with; None = `default_baseline` per recipe. A recipe without
            runs of it gets no tests (mark `no baseline`).
        test: `student` (equal variances, the papers'), `welch`, or `paired` (over shared seeds).
        higher_better: which direction is best; None guesses from the metric name.
        require_baseline: an explicit baseline must be an act of `runs` (False: recipes without it
            are marked `no baseline`, as those of a larger tree are).

    Raises:
        ValueError: unknown metric or test, or a baseline that is no act of any recipe
            (the message lists the valid choices).
    """
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; choose one of {', '.join(TESTS)}")
    if metric not in runs.columns or metric not in metric_names(runs):
        raise ValueError(f"unknown metric {metric!r}; available: {', '.join(metric_names(runs)) or '(none)'}")
    if require_baseline and baseline is not None and baseline not in set(runs["act"]):
        raise ValueError(f"unknown baseline {baseline!r}; acts: {', '.join(sorted(set(runs['act'])))}")
    if higher_better is None:
        higher_better = higher_is_better(metric)
    key = "recipe_dir" if "recipe_dir" in runs.columns and runs["recipe_dir"].notna().all() else "recipe"
    parts = [
        _summarize_recipe(group, metric, baseline, test, higher_better) for _, group in runs.groupby(key, sort=True)
    ]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def scored_values(group: pd.DataFrame, metric: str, statuses: tuple[str, ...] = ("completed",)) -> pd.Series:
    """The finite values of `metric` of the runs with one of `statuses` (the completed ones), indexed by seed: what a
    group's statistics are made of."""
    ok = group[group["status"].isin(statuses) & group[metric].notna()]
    return pd.Series(ok[metric].to_numpy(float), index=ok["seed"].to_numpy(), dtype=float)


def _summarize_recipe(runs, metric, baseline, test, higher_better) -> pd.DataFrame:
    if baseline is None:
        base = default_baseline(runs)
    else:  # explicit but never run in this recipe: no tests here rather than a guessed baseline
        base = baseline if baseline in set(runs["act"]) else None
    values = {act: scored_values(group, metric) for act, group in runs.groupby("act", sort=True)}
    b = values.get(base)
    rows = []
    for act, group in runs.groupby("act", sort=True):
        a, status = values[act], group["status"]
        done = group[status == "completed"]
        row = {
            "recipe": group["recipe"].iloc[0],
            "act": act,
            "is_baseline": act == base,
            "baseline": base,
            "metric": metric,
            "test": test,
            "n_runs": len(group),
            "n": len(a),
            "n_diverged": int((status == "diverged").sum()),
            "n_stalled": int((status == STALLED).sum()),
            "n_failed": int((status == "failed").sum()),
            "n_missing": int(len(done) - len(a)),  # completed but without a finite value of the metric
            "mean": a.mean() if len(a) else np.nan,
            "std": a.std(ddof=1) if len(a) > 1 else np.nan,
        }
        if base is None or b is None:
            row.update(
                t_stat=np.nan, p_value=np.nan, mark=MARK_NO_RUN if not len(a) else MARK_NO_BASELINE, n_pairs=np.nan
            )
        elif act == base:
            row.update(t_stat=np.nan, p_value=np.nan, mark=MARK_BASELINE, n_pairs=np.nan)
        else:
            row.update(compare(a, b, test))
        row["diff"] = row["mean"] - b.mean() if b is not None and len(b) and len(a) else np.nan
        row["stars"] = stars(row["p_value"])
        row["cohen_d"] = cohen_d(a, b) if b is not None and act != base else np.nan
        row["ci_low"] = row["ci_high"] = np.nan
        if not row["mark"]:  # the t interval of the row's own test, over the test's own data
            shared = a.index.intersection(b.index)
            pair = (a.loc[shared], b.loc[shared]) if test == "paired" else (a, b)
            row["ci_low"], row["ci_high"] = difference_ci(pair[0].to_numpy(float), pair[1].to_numpy(float), test)
        # cost columns over completed runs only: a diverged run stops early and looks cheap
        for col in ("train_time_s", "throughput_img_s"):
            row[col] = _mean(done[col]) if col in done else np.nan
        for col in ("act_params", "params"):
            row[col] = _count(group, col)
        rows.append(row)
    out = pd.DataFrame(rows)
    out["p_holm"] = holm(out["p_value"])
    out["stars_holm"] = [stars(p) for p in out["p_holm"]]
    ranked = out["mean"].rank(method="dense", ascending=not higher_better)
    out["rank"] = ranked.astype("Int64")
    out["best"], out["second"] = ranked.eq(1), ranked.eq(2)
    out["recipe_dir"] = runs["recipe_dir"].iloc[0] if "recipe_dir" in runs else None
    out = out.sort_values(["is_baseline", "act"], ascending=[False, True], kind="stable")
    return out[COLUMNS].reset_index(drop=True)


TEST_COLUMNS = ("t_stat", "p_value", "p_holm", "cohen_d", "ci_low", "ci_high")


def withhold_tests(summary: pd.DataFrame) -> pd.DataFrame:
    """One recipe's rows with every test removed (mark `not comparable`): for a table whose runs differ in
    more than act and seed (sections.py's NOT COMPARABLE note), where no test across configurations is valid.
    The counts, means and stds stay; p, its stars, Holm, Cohen's d and the CI become empty."""
    out = summary.copy()
    out.loc[~out["is_baseline"] & (out["mark"] == ""), "mark"] = MARK_MIXED
    out.loc[~out["is_baseline"], list(TEST_COLUMNS)] = np.nan
    out.loc[~out["is_baseline"], ["stars", "stars_holm"]] = ""
    return out


def _mean(col: pd.Series) -> float:
    col = pd.to_numeric(col, errors="coerce").dropna()
    return float(col.mean()) if len(col) else np.nan


def _count(group: pd.DataFrame, col: str):
    if col not in group:
        return pd.NA
    col = pd.to_numeric(group[col], errors="coerce").dropna()
    return int(col.max()) if len(col) else pd.NA  # constant across seeds; max ignores a missing one


COLUMNS = [
    "recipe",
    "act",
    "is_baseline",
    "baseline",
    "metric",
    "test",
    "n_runs",
    "n",
    "n_diverged",
    "n_stalled",
    "n_failed",
    "n_missing",
    "mean",
    "std",
    "diff",
    "t_stat",
    "p_value",
    "stars",
    "mark",
    "n_pairs",
    "p_holm",
    "stars_holm",
    "cohen_d",
    "ci_low",
    "ci_high",
    "rank",
    "best",
    "second",
    "train_time_s",
    "throughput_img_s",
    "act_params",
    "params",
    "recipe_dir",
]
