"""The suite view: every activation over every recipe at once (issue 11, "Across recipes").

    >>> from visionbench.report import suite
    >>> scores = suite.scores_frame(tasks)            # long: task, act, seed, value, metric, higher_better
    >>> ranks = suite.rank_table(scores)              # act, mean_rank, n_recipes, ...
    >>> test = suite.friedman(scores)                 # Friedman + Nemenyi CD over the complete block
    >>> suite.write(scores, "results", n_boot=10_000)  # ranks.csv, ranks.md, cd_diagram.png

A *task* is one table of the report: a recipe, or one setting of a factor sweep (each setting is its
own task, as in improvement.py: it has its own table, its own seeds and its own ranking). Each task is
scored on its own metric (the recipe's `report.metric`, or `--metric`), in that metric's direction.

Statistics follow Demšar (2006), "Statistical comparisons of classifiers over multiple data sets",
JMLR 7: per task the acts are ranked on their mean over seeds (1 = best, ties get the average rank),
the Friedman test runs over the tasks where every compared act has a score (scipy's
`friedmanchisquare`), and the Nemenyi critical difference CD = q_α · sqrt(k(k+1) / (6N)), with q_α the
studentized range quantile over √2, is drawn as a critical-difference diagram. The probability of
improvement over a common baseline is improvement.py's (Agarwal et al. 2021).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

from ..stats import improvement
from . import improvement_plot

ALPHA = 0.05
SCORE_COLUMNS = ["task", "act", "seed", "value", "metric", "higher_better", "baseline"]


def task(label: str, runs: pd.DataFrame, metric: str, higher_better: bool, baseline: str | None) -> dict:
    """One task of `scores_frame` from the runs of one table: the completed runs' finite values per act."""
    done = runs[runs["status"] == "completed"]
    values = {act: pd.to_numeric(g[metric], errors="coerce").dropna().to_numpy(float)
              for act, g in done.groupby("act", sort=True)}
    return {"task": label, "metric": metric, "higher_better": higher_better, "baseline": baseline, "values": values}


def scores_frame(tasks: list[dict]) -> pd.DataFrame:
    """Long frame of per-seed scores from `tasks` = [{"task", "metric", "higher_better", "baseline",
    "values": {act: per-seed values}}]; non-finite values (diverged, failed) are left out."""
    rows = [{"task": t["task"], "act": act, "seed": i, "value": float(v), "metric": t["metric"],
             "higher_better": bool(t["higher_better"]), "baseline": t.get("baseline")}
            for t in tasks for act, vals in t["values"].items() for i, v in enumerate(vals) if np.isfinite(v)]
    return pd.DataFrame(rows, columns=SCORE_COLUMNS)


def task_metrics(scores: pd.DataFrame) -> pd.DataFrame:
    """task, metric, higher_better, baseline: which metric (and direction) each task was ranked on."""
    return scores.groupby("task", sort=True)[["metric", "higher_better", "baseline"]].first().reset_index()


def means(scores: pd.DataFrame) -> pd.DataFrame:
    """Tasks down, acts across: the mean over seeds (NaN where the act has no score in the task)."""
    return scores.pivot_table(index="task", columns="act", values="value", aggfunc="mean").sort_index()


def ranks(scores: pd.DataFrame) -> pd.DataFrame:
    """Tasks down, acts across: the rank of each act's mean in the task (1 = best in the task's
    direction, ties = average ranks, Demšar 2006 Sec 3.2.2); NaN where the act has no score."""
    table = means(scores)
    higher = task_metrics(scores).set_index("task")["higher_better"]
    return table.apply(lambda row: row.rank(method="average", ascending=not higher[row.name]), axis=1)


def rank_table(scores: pd.DataFrame) -> pd.DataFrame:
    """act, mean_rank (over the tasks it ran in), n_recipes, n_acts_mean (acts per such task, on
    average: a rank out of 2 is not one out of 6), n_best (tasks where it ranked 1), sorted best first."""
    r = ranks(scores)
    n_acts = r.notna().sum(axis=1)
    out = pd.DataFrame({
        "act": r.columns,
        "mean_rank": r.mean(axis=0).to_numpy(),
        "n_recipes": r.notna().sum(axis=0).to_numpy(),
        "n_acts_mean": [float(n_acts[r[a].notna()].mean()) for a in r.columns],
        "n_best": (r == 1).sum(axis=0).to_numpy(),
    })
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
    """Nemenyi CD = q_α · sqrt(k(k+1)/(6N)), q_α = studentized range quantile(1-α, k, ∞) / √2 (Demšar 2006 Sec 3.2.2)."""
    q = stats.studentized_range.ppf(1 - alpha, k, np.inf) / math.sqrt(2)
    return float(q * math.sqrt(k * (k + 1) / (6 * n)))


def friedman(scores: pd.DataFrame, alpha: float = ALPHA) -> dict:
    """Friedman test and Nemenyi CD over the complete block (`complete_block`).

    Returns {acts, tasks, k, n, statistic, p_value, cd, mean_ranks (act -> mean rank over the block),
    note}; statistic/p/cd are NaN and `note` says why when k < 3 or N < 2."""
    acts, tasks = complete_block(scores)
    out = {"acts": acts, "tasks": tasks, "k": len(acts), "n": len(tasks), "statistic": math.nan,
           "p_value": math.nan, "cd": math.nan, "alpha": alpha, "mean_ranks": {}, "note": ""}
    if len(acts) < 3 or len(tasks) < 2:
        out["note"] = (f"no Friedman test: it needs >= 3 activations scored in >= 2 common recipes; the largest "
                       f"complete block has {len(acts)} activation(s) x {len(tasks)} recipe(s)")
        return out
    table = means(scores).loc[tasks, acts]
    higher = task_metrics(scores).set_index("task")["higher_better"]
    # the statistic is the same for ranks in either direction: the means go in as they are
    res = stats.friedmanchisquare(*[table[a].to_numpy() for a in acts])
    block_ranks = table.apply(lambda row: row.rank(method="average", ascending=not higher[row.name]), axis=1)
    out.update(statistic=float(res.statistic), p_value=float(res.pvalue), cd=critical_difference(len(acts), len(tasks), alpha),
               mean_ranks=block_ranks.mean(axis=0).sort_values().to_dict())
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
        group = order[i:j + 1]
        if len(group) > 1 and not any(set(group) <= set(g) for g in groups):
            groups.append(group)
    return groups


def improvement_table(scores: pd.DataFrame, n_boot: int = 10_000, seed: int = 0) -> tuple[pd.DataFrame, str | None]:
    """(P(X > baseline) per task and aggregated, baseline) when every task names the same baseline;
    (empty frame, None) otherwise."""
    names = set(task_metrics(scores)["baseline"].dropna())
    if len(names) != 1:
        return pd.DataFrame(), None
    baseline = names.pop()
    blocks = {}
    for task, group in scores.groupby("task", sort=True):
        blocks[task] = {"values": {a: g["value"].to_numpy() for a, g in group.groupby("act")},
                        "higher_better": bool(group["higher_better"].iloc[0])}
    return improvement.table(blocks, baseline, n_boot=n_boot, seed=seed), baseline


def plot_cd(test: dict, out_path) -> Path | None:
    """Critical-difference diagram (Demšar 2006 Fig 1): an axis of mean ranks (1 at the left), each act
    a labelled tick, the CD as a scale bar, thick bars joining acts not significantly different."""
    ranks_ = test["mean_ranks"]
    if not ranks_ or not math.isfinite(test["cd"]):
        return None
    k, cd = test["k"], test["cd"]
    order = sorted(ranks_, key=ranks_.get)
    half = math.ceil(len(order) / 2)
    groups = cliques(ranks_, cd)
    height = 1.6 + 0.3 * max(half, len(order) - half) + 0.15 * len(groups)
    fig = Figure(figsize=(7, height))
    ax = fig.add_axes([0.02, 0.02, 0.96, 0.96])
    ax.set_xlim(0.5 - 1.2, k + 0.5 + 1.2)
    ax.set_ylim(-0.35 - 0.3 * (max(half, len(order) - half) - 1) - 0.15 * len(groups) - 0.2, 0.6)
    ax.axis("off")
    ax.hlines(0, 1, k, color="black", lw=1)
    for r in range(1, k + 1):
        ax.vlines(r, 0, 0.08, color="black", lw=1)
        ax.text(r, 0.12, str(r), ha="center", va="bottom", fontsize=9)
    ax.hlines(0.45, 1, 1 + cd, color="black", lw=1.5)
    ax.text(1 + cd / 2, 0.5, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=9)
    for i, act in enumerate(order):
        left = i < half
        level = -0.35 - 0.3 * (i if left else len(order) - 1 - i) - 0.15 * len(groups)
        x_text = 0.5 - 0.1 if left else k + 0.5 + 0.1
        ax.plot([ranks_[act], ranks_[act], x_text], [0, level, level], color="black", lw=0.8)
        ax.text(x_text, level, f"{act} ({ranks_[act]:.2f})" if left else f"({ranks_[act]:.2f}) {act}",
                ha="right" if left else "left", va="center", fontsize=9)
    for j, g in enumerate(groups):
        y = -0.12 - 0.15 * j
        ax.hlines(y, ranks_[g[0]] - 0.04, ranks_[g[-1]] + 0.04, color="black", lw=3)
    ax.set_title(f"Friedman p = {test['p_value']:.3g}, Nemenyi α = {test['alpha']:g} "
                 f"({test['k']} acts × {test['n']} recipes)", fontsize=9)
    out_path = Path(out_path)
    fig.savefig(out_path, dpi=120, bbox_inches="tight")
    return out_path


def markdown(table: pd.DataFrame, test: dict, metrics: pd.DataFrame, pi: pd.DataFrame, baseline: str | None,
             digits: int = 2) -> str:
    """ranks.md: the mean-rank table, the Friedman/Nemenyi result, the tasks and their metrics, and
    the probability-of-improvement table when a common baseline exists."""
    block = test["mean_ranks"]
    lines = ["### Suite view: mean ranks across recipes", "",
             "Per recipe the activations are ranked on their mean over seeds of the recipe's own metric "
             "(1 = best, ties = average ranks); `mean_rank` averages over the recipes the act ran in "
             "(`n_recipes`; a rank over few recipes, or over recipes with few acts, says less), "
             "`rank_friedman` over the recipes of the Friedman test only.", "",
             "| Act. | mean rank | n recipes | acts per recipe | n best | rank (Friedman block) |",
             "|:---|---:|---:|---:|---:|---:|"]
    for _, r in table.iterrows():
        fr = f"{block[r['act']]:.{digits}f}" if r["act"] in block else "—"
        lines.append(f"| {r['act']} | {r['mean_rank']:.{digits}f} | {r['n_recipes']} | {r['n_acts_mean']:.1f} "
                     f"| {r['n_best']} | {fr} |")
    lines += ["", "#### Friedman test and Nemenyi post-hoc (Demšar 2006)", ""]
    if test["note"]:
        lines.append(test["note"] + ".")
    else:
        groups = cliques(block, test["cd"])
        lines += [f"- Friedman χ² = {test['statistic']:.3f}, p = {test['p_value']:.4g} "
                  f"(N = {test['n']} recipes, k = {test['k']} activations: {', '.join(test['acts'])})",
                  f"- Nemenyi critical difference CD = {test['cd']:.3f} at α = {test['alpha']:g}: two acts whose "
                  "mean ranks differ by more are significantly different (cd_diagram.png)",
                  "- not significantly different (bars of the diagram): "
                  + ("; ".join("{" + ", ".join(g) + "}" for g in groups) or "none: every pair differs")]
        if test["p_value"] >= test["alpha"]:
            lines.append(f"- the Friedman test does not reject equal ranks at α = {test['alpha']:g}: "
                         "the post-hoc is descriptive only")
    used = set(test["tasks"])
    lines += ["", "#### Recipes and the metric each was ranked on", "",
              "| recipe | metric | direction | baseline | in Friedman test |", "|:---|:---|:---|:---|:---|"]
    for _, r in metrics.iterrows():
        lines.append(f"| {r['task']} | {r['metric']} | {'higher' if r['higher_better'] else 'lower'} is better | "
                     f"{r['baseline'] or '—'} | {'yes' if r['task'] in used else 'no'} |")
    lines.append("")
    if baseline is None:
        lines.append("No probability of improvement: the recipes do not share one baseline.")
    else:
        lines.append(improvement.markdown(pi, baseline))
    return "\n".join(lines) + "\n"


def write(scores: pd.DataFrame, out_dir, *, alpha: float = ALPHA, n_boot: int = 10_000, seed: int = 0,
          digits: int = 2) -> tuple[str, list[Path]]:
    """Write ranks.csv, ranks.md, improvement.csv and improvement.png (with a common baseline) and
    cd_diagram.png (with a Friedman test) into `out_dir`; returns (the Markdown, the paths written)."""
    out_dir = Path(out_dir)
    if scores.empty:  # every run of every recipe diverged or failed: nothing to rank
        text = "### Suite view: mean ranks across recipes\n\nNo recipe has a scored run: nothing to rank.\n"
        (out_dir / "ranks.md").write_text(text)
        return text, [out_dir / "ranks.md"]
    table, test = rank_table(scores), friedman(scores, alpha)
    table["rank_friedman"] = table["act"].map(test["mean_ranks"])
    pi, baseline = improvement_table(scores, n_boot, seed)
    text = markdown(table, test, task_metrics(scores), pi, baseline, digits)
    written = [out_dir / "ranks.csv", out_dir / "ranks.md"]
    table.to_csv(written[0], index=False)
    written[1].write_text(text)
    if baseline is not None:
        written.append(out_dir / "improvement.csv")
        pi.to_csv(written[-1], index=False)
        pi_path = improvement_plot.plot(pi, baseline, out_dir / "improvement.png")
        if pi_path is not None:
            written.append(pi_path)
    cd_path = plot_cd(test, out_dir / "cd_diagram.png")
    if cd_path is not None:
        written.append(cd_path)
    return text, written
