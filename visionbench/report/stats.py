"""Per-(recipe, act) statistics against a baseline activation (DESIGN.md §7).

    >>> from visionbench.report import load_runs, summarize
    >>> table = summarize(load_runs("results/cifar10_vgg8"), "val_top1_best", baseline="relu")

The papers' test is the two-tailed Student t-test with equal variances (paper 001 Tables 1, 2,
7); Welch and a paired test over shared seeds are options. Beyond the papers: Holm–Bonferroni
adjusted p-values over the activations compared with the baseline of one recipe, Cohen's d with
the pooled sd, and a seeded percentile-bootstrap 95 % CI of the difference of means.

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

from .collect import metric_names

TESTS = ("student", "welch", "paired")
STAR_LEVELS = ((1e-4, "****"), (1e-3, "***"), (1e-2, "**"), (5e-2, "*"))
FALLBACK_BASELINES = ("relu", "gelu")  # the baselines of the papers' CNN and transformer tables
LOWER_IS_BETTER = ("loss", "err", "ppl", "time", "mem")  # metric names where smaller wins

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
    """Holm–Bonferroni step-down adjusted p-values; NaNs stay NaN and do not count as tests."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full_like(p, np.nan)
    valid = np.flatnonzero(np.isfinite(p))
    m = valid.size
    if m == 0:
        return out
    order = valid[np.argsort(p[valid], kind="stable")]
    scaled = p[order] * (m - np.arange(m))
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))  # monotone in the sorted order
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


def default_baseline(runs: pd.DataFrame) -> str | None:
    """The recipe's baseline: the summaries' `baseline` field if that act was run, else relu, else gelu."""
    acts = set(runs["act"])
    declared = runs["baseline"].dropna() if "baseline" in runs else pd.Series(dtype=object)
    for name in list(declared.value_counts().index) + list(FALLBACK_BASELINES):
        if name in acts:
            return name
    return None


def higher_is_better(metric: str) -> bool:
    """Accuracies go up, losses/errors/times go down (decides which mean is marked best)."""
    return not any(key in metric.lower() for key in LOWER_IS_BETTER)


def summarize(runs: pd.DataFrame, metric: str, baseline: str | None = None, test: str = "student", *,
              higher_better: bool | None = None, n_boot: int = 10_000, seed: int = 0,
              require_baseline: bool = True) -> pd.DataFrame:
    """One row per (recipe, act): counts, mean ± std, difference and test against the baseline.

    Args:
        runs: the output of `load_runs`.
        metric: a column of `runs`, e.g. `val_top1_best`.
        baseline: act to compare with; None = `default_baseline` per recipe. A recipe without
            runs of it gets no tests (mark `no baseline`).
        test: `student` (equal variances, the papers'), `welch`, or `paired` (over shared seeds).
        higher_better: which direction is best; None guesses from the metric name.
        n_boot: bootstrap resamples for the CI.
        seed: bootstrap seed.
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
    parts = [_summarize_recipe(group, metric, baseline, test, higher_better, n_boot, seed)
             for _, group in runs.groupby(key, sort=True)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _values(group: pd.DataFrame, metric: str) -> pd.Series:
    ok = group[(group["status"] == "completed") & group[metric].notna()]
    return pd.Series(ok[metric].to_numpy(float), index=ok["seed"].to_numpy(), dtype=float)


def _summarize_recipe(runs, metric, baseline, test, higher_better, n_boot, seed) -> pd.DataFrame:
    if baseline is None:
        base = default_baseline(runs)
    else:  # explicit but never run in this recipe: no tests here rather than a guessed baseline
        base = baseline if baseline in set(runs["act"]) else None
    values = {act: _values(group, metric) for act, group in runs.groupby("act", sort=True)}
    b = values.get(base)
    rows = []
    for act, group in runs.groupby("act", sort=True):
        a, status = values[act], group["status"]
        done = group[status == "completed"]
        row = {
            "recipe": group["recipe"].iloc[0], "act": act, "is_baseline": act == base, "baseline": base,
            "metric": metric, "test": test, "n_runs": len(group), "n": len(a),
            "n_diverged": int((status == "diverged").sum()), "n_failed": int((status == "failed").sum()),
            "n_missing": int(len(done) - len(a)),  # completed but without a finite value of the metric
            "mean": a.mean() if len(a) else np.nan, "std": a.std(ddof=1) if len(a) > 1 else np.nan,
        }
        if base is None or b is None:
            row.update(t_stat=np.nan, p_value=np.nan, mark=MARK_NO_RUN if not len(a) else MARK_NO_BASELINE,
                       n_pairs=np.nan)
        elif act == base:
            row.update(t_stat=np.nan, p_value=np.nan, mark=MARK_BASELINE, n_pairs=np.nan)
        else:
            row.update(compare(a, b, test))
        row["diff"] = row["mean"] - b.mean() if b is not None and len(b) and len(a) else np.nan
        row["stars"] = stars(row["p_value"])
        row["cohen_d"] = cohen_d(a, b) if b is not None and act != base else np.nan
        if b is not None and act != base:
            shared = a.index.intersection(b.index)
            pair = (a.loc[shared], b.loc[shared]) if test == "paired" else (a, b)
            row["ci_low"], row["ci_high"] = bootstrap_ci(*pair, paired=test == "paired", n_boot=n_boot, seed=seed)
        else:
            row["ci_low"] = row["ci_high"] = np.nan
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


def _mean(col: pd.Series) -> float:
    col = pd.to_numeric(col, errors="coerce").dropna()
    return float(col.mean()) if len(col) else np.nan


def _count(group: pd.DataFrame, col: str):
    if col not in group:
        return pd.NA
    col = pd.to_numeric(group[col], errors="coerce").dropna()
    return int(col.max()) if len(col) else pd.NA  # constant across seeds; max ignores a missing one


COLUMNS = [
    "recipe", "act", "is_baseline", "baseline", "metric", "test", "n_runs", "n", "n_diverged", "n_failed",
    "n_missing", "mean", "std", "diff", "t_stat", "p_value", "stars", "mark", "n_pairs", "p_holm", "stars_holm",
    "cohen_d", "ci_low", "ci_high", "rank", "best", "second", "train_time_s", "throughput_img_s",
    "act_params", "params", "recipe_dir",
]
