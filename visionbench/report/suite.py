"""The suite view: every activation over every recipe at once (docs/report.md, "Across recipes").

    visionbench report runs          # several recipes: + ranks.md/csv, cd_diagram.png, improvement.*

    >>> from visionbench.report import suite
    >>> scores = suite.scores_frame(tasks)            # long: task, act, seed, value, metric, higher_better
    >>> text, paths = suite.write(scores, "results")

A *task* is one table of the report: a recipe, or one setting of a factor sweep (each setting is its
own task: it has its own table, its own seeds and its own ranking). Each task is scored on its own
metric (the recipe's `report.metric`, or `--metric`), in that metric's direction.

This module assembles the scores from the runs and writes the files; the statistics are
`visionbench.stats.ranking` (mean ranks, Friedman with Iman–Davenport's F; Demšar 2006) and its post-hoc
`visionbench.stats.posthoc` (pairwise Wilcoxon–Holm by default, Benavoli et al. 2016; Nemenyi's CD as an option)
and `visionbench.stats.improvement` (P(X > baseline): per recipe the normal-model value with its exact
interval, over recipes their mean, whose interval is not estimable at a suite's seed counts), the
figures `figures.py`, the tables `render.py`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..results.io import atomic_write_bytes
from ..stats import improvement, posthoc, ranking
from ..stats.improvement import LEVEL
from . import figures, render

SCORE_COLUMNS = ["task", "act", "seed", "value", "metric", "higher_better", "baseline"]
TITLE = "Suite view: mean ranks across recipes"


def task(label: str, runs: pd.DataFrame, metric: str, higher_better: bool, baseline: str | None) -> dict:
    """One task of `scores_frame` from the runs of one table: the completed runs' finite values per act."""
    done = runs[runs["status"] == "completed"]
    values = {
        act: pd.to_numeric(g[metric], errors="coerce").dropna().to_numpy(float)
        for act, g in done.groupby("act", sort=True)
    }
    return {"task": label, "metric": metric, "higher_better": higher_better, "baseline": baseline, "values": values}


def scores_frame(tasks: list[dict]) -> pd.DataFrame:
    """Long frame of per-seed scores from `tasks` = [{"task", "metric", "higher_better", "baseline",
    "values": {act: per-seed values}}]; non-finite values (diverged, failed) are left out."""
    rows = [
        {
            "task": t["task"],
            "act": act,
            "seed": i,
            "value": float(v),
            "metric": t["metric"],
            "higher_better": bool(t["higher_better"]),
            "baseline": t.get("baseline"),
        }
        for t in tasks
        for act, vals in t["values"].items()
        for i, v in enumerate(vals)
        if np.isfinite(v)
    ]
    return pd.DataFrame(rows, columns=SCORE_COLUMNS)


def improvement_table(scores: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """(P(X > baseline) per task and aggregated, baseline) when every task names the same baseline;
    (empty frame, None) otherwise."""
    names = set(ranking.task_metrics(scores)["baseline"].dropna())
    if len(names) != 1:
        return pd.DataFrame(), None
    baseline = names.pop()
    blocks = {}
    for label, group in scores.groupby("task", sort=True):
        blocks[label] = {
            "values": {a: g["value"].to_numpy() for a, g in group.groupby("act")},
            "higher_better": bool(group["higher_better"].iloc[0]),
        }
    return improvement.table(blocks, baseline), baseline


def improvement_markdown(frame: pd.DataFrame, baseline: str, level: float = LEVEL) -> str:
    """Acts down, blocks across, `P [low, high]` in each cell; the aggregate column first."""
    title = f"Probability of improvement over {baseline}"
    if frame.empty:
        return f"### {title}\n\nNo activation ran beside {baseline}.\n"
    blocks = ["all"] + sorted(set(frame["block"]) - {"all"})

    def cell(r) -> str:
        if not math.isfinite(r["p_improve"]):
            return "n/e"
        ci = f" [{r['ci_low']:.2f}, {r['ci_high']:.2f}]" if math.isfinite(r["ci_low"]) else ""
        return f"{r['p_improve']:.2f}{ci}"

    cells = {(r["act"], r["block"]): cell(r) for _, r in frame.iterrows()}
    n = frame[frame["block"] == "all"].set_index("act")["n_blocks"].to_dict()
    rows = [
        [act] + [cells.get((act, b), "") + (f" ({n[act]})" if b == "all" and act in n else "") for b in blocks]
        for act in sorted(set(frame["act"]))
    ]
    intro = (
        f"P(X > {baseline}): the probability that a run of X beats a run of {baseline} on the recipe's own "
        "metric under the normal model, Φ(d/√2) with d = Cohen's d (McGraw & Wong 1992), per recipe with its "
        f"exact {100 * level:g} % interval (noncentral t; Steiger & Fouladi 1997), and its mean over the "
        "recipes where it is estimable (`all`, n recipes in brackets) without an interval: no interval for "
        "the mean held its coverage at these seed counts (docs/report.md). `n/e`: not estimable (fewer "
        "than 2 runs in a group, or no spread). 0.5 = indistinguishable; `improvement.csv` also has the "
        "empirical pair count of Agarwal et al. 2021 (`p_improve_empirical`)."
    )
    header = ["Act."] + ["all (n recipes)" if b == "all" else b for b in blocks]
    return render.markdown(render.Table(header, rows, title=title, intro=[intro], data=frame))


def _friedman_lines(test: dict) -> list[str]:
    if test["note"]:
        return [test["note"] + "."]
    df1, df2 = test["f_df"]
    groups = test["groups"]
    lines = [
        f"- Friedman χ² = {test['statistic']:.3f}, p = {test['p_value']:.4g} "
        f"(N = {test['n']} recipes, k = {test['k']} activations: {', '.join(test['acts'])})",
        f"- Iman–Davenport F = {test['f_stat']:.3f} on ({df1}, {df2}) df, p = {test['f_p_value']:.4g} "
        "(Demšar 2006 recommends it beside χ², which is conservative)",
        *_posthoc_lines(test),
        "- not significantly different (bars of the diagram): "
        + ("; ".join("{" + ", ".join(g) + "}" for g in groups) or "none: every pair differs"),
    ]
    if test["p_value"] >= test["alpha"] and test["f_p_value"] >= test["alpha"]:
        lines.append(
            f"- neither Friedman's χ² nor Iman–Davenport's F rejects equal ranks at α = {test['alpha']:g}: "
            "the post-hoc is descriptive only"
        )
    elif test["p_value"] >= test["alpha"]:
        lines.append(
            f"- Iman–Davenport's F rejects equal ranks at α = {test['alpha']:g}, Friedman's conservative χ² does not"
        )
    return lines


def _posthoc_lines(test: dict) -> list[str]:
    """The post-hoc's lines: Wilcoxon–Holm's pairs that differ (and what N tasks allow), or Nemenyi's CD."""
    if test["posthoc"] == "nemenyi":
        return [
            f"- Nemenyi critical difference CD = {test['cd']:.3f} at α = {test['alpha']:g}: two acts whose mean ranks "
            "differ by more are significantly different (cd_diagram.png); a mean-rank test, whose verdict on a pair "
            "depends on the other activations in the pool (Benavoli et al. 2016): the default is pairwise Wilcoxon"
        ]
    pairs = test["pairs"]
    differ = pairs[pairs["differ"]]
    floor = posthoc.smallest_p(test["n"])
    lines = [
        f"- pairwise Wilcoxon signed-rank tests over the {test['n']} recipes' means, Holm over the {len(pairs)} "
        f"pairs at α = {test['alpha']:g} (Benavoli, Corani & Mangili 2016; `--posthoc nemenyi` for Demšar's "
        "mean-rank test): "
        + (
            "; ".join(f"{r.a} vs {r.b} (p = {r.p:.4g}, Holm {r.p_holm:.4g})" for r in differ.itertuples())
            if len(differ)
            else "no pair differs"
        )
    ]
    if floor >= test["alpha"]:
        lines.append(
            f"- over {test['n']} recipes the smallest p a Wilcoxon test can give is 2/2^{test['n']} = {floor:.3g}: no "
            f"pair can differ at α = {test['alpha']:g} before Holm; more recipes are needed (6 at least)"
        )
    return lines


def markdown(
    table: pd.DataFrame, test: dict, metrics: pd.DataFrame, pi: pd.DataFrame, baseline: str | None, digits: int = 2
) -> str:
    """ranks.md: the mean-rank table, the Friedman/Nemenyi result, the tasks and their metrics, and
    the probability-of-improvement table when a common baseline exists."""
    block = test["mean_ranks"]
    rows = [
        [
            r["act"],
            f"{r['mean_rank']:.{digits}f}",
            str(r["n_recipes"]),
            f"{r['n_acts_mean']:.1f}",
            str(r["n_best"]),
            f"{block[r['act']]:.{digits}f}" if r["act"] in block else "—",
        ]
        for _, r in table.iterrows()
    ]
    ranks = render.Table(
        ["Act.", "mean rank", "n recipes", "acts per recipe", "n best", "rank (Friedman block)"],
        rows,
        title=TITLE,
        intro=[
            "Per recipe the activations are ranked on their mean over seeds of the recipe's own metric "
            "(1 = best, ties = average ranks); `mean_rank` averages over the recipes the act ran in "
            "(`n_recipes`; a rank over few recipes, or over recipes with few acts, says less), "
            "`rank_friedman` over the recipes of the Friedman test only."
        ],
    )
    used = set() if test["note"] else set(test["tasks"])  # no test run: no recipe is in one
    tasks = render.Table(
        ["recipe", "metric", "direction", "baseline", "in Friedman test"],
        [
            [
                r["task"],
                r["metric"],
                f"{'higher' if r['higher_better'] else 'lower'} is better",
                r["baseline"] or "—",
                "yes" if r["task"] in used else "no",
            ]
            for _, r in metrics.iterrows()
        ],
        align="lllll",
        title="Recipes and the metric each was ranked on",
        level=4,
    )
    heading = (
        "#### Friedman test and Nemenyi post-hoc (Demšar 2006)"
        if test.get("posthoc") == "nemenyi"
        else "#### Friedman test and pairwise Wilcoxon–Holm post-hoc (Demšar 2006; Benavoli et al. 2016)"
    )
    friedman = "\n".join([heading, "", *_friedman_lines(test)]) + "\n"
    pi_text = (
        "No probability of improvement: the recipes do not share one baseline.\n"
        if baseline is None
        else improvement_markdown(pi, baseline) + "\n"
    )  # ranks.md has always ended on a blank line here
    return "\n".join([render.markdown(ranks), friedman, render.markdown(tasks), pi_text])


def write(
    scores: pd.DataFrame, out_dir, *, alpha: float = ranking.ALPHA, digits: int = 2, posthoc_test: str = "wilcoxon"
) -> tuple[str, list[Path]]:
    """Write ranks.csv, ranks.md, improvement.csv and improvement.png (with a common baseline) and
    cd_diagram.png (with a Friedman test) into `out_dir`; returns (the Markdown, the paths written)."""
    out_dir = Path(out_dir)
    if scores.empty:  # every run of every recipe diverged or failed: nothing to rank
        text = f"### {TITLE}\n\nNo recipe has a scored run: nothing to rank.\n"
        return text, [atomic_write_bytes(out_dir / "ranks.md", text)]
    table, test = ranking.rank_table(scores), ranking.friedman(scores, alpha, posthoc_test)
    table["rank_friedman"] = table["act"].map(test["mean_ranks"])
    pi, baseline = improvement_table(scores)
    text = markdown(table, test, ranking.task_metrics(scores), pi, baseline, digits)
    written = [
        atomic_write_bytes(out_dir / "ranks.csv", table.to_csv(index=False)),
        atomic_write_bytes(out_dir / "ranks.md", text),
    ]
    if baseline is not None:
        written.append(atomic_write_bytes(out_dir / "improvement.csv", pi.to_csv(index=False)))
        pi_path = figures.plot_improvement(pi, baseline, out_dir / "improvement.png")
        if pi_path is not None:
            written.append(pi_path)
    cd_path = figures.plot_cd(test, out_dir / "cd_diagram.png")
    if cd_path is not None:
        written.append(cd_path)
    return text, written
