"""The recipe-level table of a factor sweep, in the paper's layout: one row per act, one column
per setting of the factors not selected over, and in each cell the best of the settings of the
`best_of` factors — paper 004 Table 2 (per act and GN setting, the better of the default and the
LSUV init; Sec 5.1).

    >>> table = best_of_table(per_setting_summaries, best_of=["model.lsuv"])
    >>> print(markdown(table, "cifar10_vgg4_aug", ["model.lsuv"], metric_text, settings_dirs))

Selecting the maximum of several means is optimistic (a max of noisy estimates is biased up):
the caption says it is a selection, and each cell names the setting chosen; the per-setting
tables, with their t-tests, sit in the settings' folders. "Best" follows the metric's direction
(`stats.metrics.higher_is_better`): with `--metric epochs_to_90` the fastest setting is chosen.
"""

from __future__ import annotations

import math

import pandas as pd

from ..results.settings import format_value, parse_setting_label
from ..stats.metrics import higher_is_better
from . import render
from .tables import PI_HEADER, has_published, pi_cell, published_cell, published_header

COLUMNS = [
    "recipe",
    "act",
    "column",
    "chosen",
    "mean",
    "std",
    "n",
    "p_value",
    "stars",
    "n_candidates",
    "metric",
    "best",
    "second",
]


def _column_and_choice(setting: dict, best_of: list[str]) -> tuple[str, str]:
    column = ",".join(f"{k}={format_value(v)}" for k, v in setting.items() if k not in best_of)
    chosen = ",".join(f"{k}={format_value(v)}" for k, v in setting.items() if k in best_of)
    return column, chosen


def best_of_table(summaries: pd.DataFrame, best_of: list[str]) -> pd.DataFrame:
    """Reduce per-setting `summarize` rows (with a `setting` column: the setting's folder name)
    to one row per (act, column): the candidate with the best mean; ties keep the first setting.

    Returns:
        DataFrame with `COLUMNS`: `column` = the non-selected factor values (the table column),
        `chosen` = the selected factor values of the winning setting, `n_candidates` = the
        settings with a finite mean that were compared, `best`/`second` = rank within the column.
    """
    if summaries.empty:
        return pd.DataFrame(columns=COLUMNS)
    metric = summaries["metric"].iloc[0]
    sign = 1 if higher_is_better(metric) else -1
    rows = []
    pairs = [_column_and_choice(parse_setting_label(s), best_of) for s in summaries["setting"]]
    frame = summaries.assign(column=[c for c, _ in pairs], chosen=[c for _, c in pairs])
    for (act, column), group in frame.groupby(["act", "column"], sort=False):
        finite = group[group["mean"].map(lambda m: isinstance(m, float) and math.isfinite(m))]
        pick = group.iloc[0] if finite.empty else finite.loc[(sign * finite["mean"]).idxmax()]
        rows.append(
            {
                "recipe": pick["recipe"],
                "act": act,
                "column": column,
                "chosen": pick["chosen"] if not finite.empty else "",
                "mean": pick["mean"],
                "std": pick["std"],
                "n": pick["n"],
                "p_value": pick["p_value"],
                "stars": pick["stars"],
                "n_candidates": len(finite),
                "metric": metric,
            }
        )
    out = pd.DataFrame(rows)
    ranked = out.groupby("column")["mean"].rank(method="dense", ascending=sign < 0)
    out["best"], out["second"] = ranked.eq(1), ranked.eq(2)
    return out[COLUMNS]


def _cell(row, digits: int) -> render.Cell | str:
    """`mean ± std (chosen setting)`, the number bold for the best in its column, underlined for the second."""
    if not (isinstance(row["mean"], float) and math.isfinite(row["mean"])):
        return "NaN"
    text = f"{row['mean']:.{digits}f}" + (f" ± {row['std']:.{digits}f}" if math.isfinite(row["std"]) else "")
    mark = "bold" if row["best"] else "underline" if row["second"] else ""
    return render.Cell(text, mark, f" ({row['chosen']})" if row["chosen"] else "")


def layout(
    table: pd.DataFrame,
    recipe: str,
    best_of: list[str],
    metric_text: str,
    settings_dirs: list[str],
    digits: int = 2,
    notes=(),
) -> render.Table:
    """The paper-shaped table: acts down, columns across, the chosen setting in each cell; with
    `--published` (004 Table 2's numbers are per GN setting, best of the inits) a paper column per column."""
    # columns in a stable order, "off" values first: null / false before the others (004 Table 2: no GN, GN)
    columns = sorted(
        dict.fromkeys(table["column"]),
        key=lambda c: [(v not in (None, False), format_value(v)) for v in parse_setting_label(c).values()],
    )
    acts = list(dict.fromkeys(table["act"]))
    cells = {(r["act"], r["column"]): _cell(r, digits) for _, r in table.iterrows()}
    selection = (
        f"Each cell is the best of the settings of {', '.join(best_of)} (the one chosen in brackets) — "
        "a selection over settings, as 004 Table 2 reports it; a max of noisy means is optimistic. "
        if best_of
        else ""
    )
    what = f"{recipe}: mean ± sample std over completed seeds; metric {metric_text}. {selection}"
    intro = [
        what
        + "Best mean per column **bold**, second <ins>underlined</ins>. Per-setting tables with t-tests: "
        + ", ".join(f"`{d}/table.md`" for d in settings_dirs)
        + "."
    ]
    header = ["Act."] + [c or "(all)" for c in columns]
    if has_published(table):
        cells |= {(r["act"], "published " + r["column"]): published_cell(r, digits) for _, r in table.iterrows()}
        cells |= {(r["act"], "pi " + r["column"]): pi_cell(r, digits) for _, r in table.iterrows()}
        header += [f"paper {c or '(all)'}" for c in columns] + [f"{PI_HEADER} {c or '(all)'}" for c in columns]
        intro.append(f"Paper columns: {published_header(table)}.")
        columns = columns + ["published " + c for c in columns] + ["pi " + c for c in columns]
    rows = [[act] + [cells.get((act, c), "") for c in columns] for act in acts]
    return render.Table(
        header,
        rows,
        title=f"{recipe} — by setting",
        intro=intro,
        notes=list(notes),
        caption=what + "Best mean per column bold, second underlined.",
        label=recipe.replace("_", "-") + "-by-setting",
        data=table,
    )
