"""`visionbench papers`: the seed papers' published tables, with p-values recomputed from the
printed mean ± std (n) beside the p the paper printed (data and statistics: `published.py`).

    visionbench papers                         # every shipped table, Markdown
    visionbench papers --paper 001 --table 1   # 001 Table 1 only
    visionbench papers --paper 004 --table 2 --format csv
    visionbench papers --test welch            # unequal variances: which printed claims survive

Returns an exit code: 0, or 2 on a bad argument (the message lists the valid choices).
"""

from __future__ import annotations

import argparse
import math
import sys

import pandas as pd

from . import arguments, published, render
from .tables import format_p

TEST_NAMES = {
    "student": "two-tailed Student t-test (equal variances, as 001 states)",
    "welch": "two-tailed Welch t-test (unequal variances)",
}
CSV_COLUMNS = [
    "paper",
    "table",
    "group",
    "recipe",
    "setting",
    "model",
    "dataset",
    "activation",
    "label",
    "metric",
    "printed_column",
    "mean",
    "std",
    "n",
    "baseline",
    "diff",
    "p_value",
    "stars",
    "mark",
    "p_low",
    "p_high",
    "printed_p",
    "check",
    "derived_from",
    "note",
]


def parser() -> argparse.ArgumentParser:
    p = arguments.parser(
        "papers",
        "The papers' published tables with p-values recomputed from their own "
        "mean ± std (n) against each table's baseline.",
    )
    p.add_argument("--paper", default=None, help="000, 001, 003 or 004 (default: all)")
    p.add_argument("--table", default=None, help="a table number (2), or App H (default: all)")
    p.add_argument("--format", choices=("md", "csv"), default="md", help="md (default) or csv, to stdout")
    p.add_argument(
        "--test",
        choices=published.TESTS,
        default="student",
        help="student: equal variances, the papers' test (default); welch",
    )
    return p


def _pick(value: str | None, choices: list[str], what: str, normalise) -> str | None:
    if value is None:
        return None
    for choice in choices:
        if normalise(choice) == normalise(value):
            return choice
    raise ValueError(f"unknown --{what} {value!r}; choose from {', '.join(choices)}")


def _paper_key(text: str) -> str:
    return text.zfill(3) if text.isdigit() else text


def _table_key(text: str) -> str:
    text = text.strip().lower()
    return text.removeprefix("table ").removeprefix("app ").strip()


def select(paper: str | None, table: str | None) -> pd.DataFrame:
    """The published rows of `paper` and `table` (`"4"` = `"004"`, `"2"` = `"Table 2"`, `"H"` = `"App H"`).

    Raises:
        ValueError: an unknown paper, or a table the (selected) paper does not have.
    """
    rows = published.load()
    paper = _pick(paper, sorted(set(rows["paper"])), "paper", _paper_key)
    if paper is not None:
        rows = rows[rows["paper"] == paper]
    table = _pick(table, list(dict.fromkeys(rows["table"])), "table", _table_key)
    if table is not None:
        rows = rows[rows["table"] == table]
    return rows.reset_index(drop=True)


def _mean_cell(row) -> str:
    if not math.isfinite(row["mean"]):
        return row["mean_text"] or "—"
    return f"{row['mean_text']} ± {row['std_text']}" if row["std_text"] else row["mean_text"]


def _p_cell(row) -> str:
    if row["mark"] == published.MARK_BASELINE:
        return "—"
    return format_p(row["p_value"], row["stars"]) if math.isfinite(row["p_value"]) else row["mark"]


def _n_cell(n: float) -> str:
    return "?" if not math.isfinite(n) else str(int(n))


def _diff_cell(row) -> str:
    if row["mark"] == published.MARK_BASELINE or not math.isfinite(row["diff"]):
        return "—" if row["mark"] == published.MARK_BASELINE else ""
    text = row["mean_text"]
    decimals = max(len(text.split(".")[1]) if "." in text else 0, 2)
    return f"{row['diff']:+.{decimals}f}"


def group_table(g: pd.DataFrame) -> render.Table:
    """One (paper, table, group, metric) section: the printed rows, Δ, recomputed and printed p."""
    first = g.iloc[0]
    recipes = [f"`{r}`" for r in dict.fromkeys(g["recipe"]) if r]
    where = f"{', '.join(dict.fromkeys(g['model']))} on {first['dataset']}; " + (
        f"recipe {', '.join(recipes)}" if recipes else "no visionbench recipe"
    )
    rows = [
        [
            r["label"],
            f"`{r['activation']}`",
            r["setting"],
            _n_cell(r["n"]),
            _mean_cell(r),
            _diff_cell(r),
            _p_cell(r),
            r["printed_p"],
            r["check"],
            r["note"],
        ]
        for _, r in g.iterrows()
    ]
    header = [
        "Act. (paper)",
        "act",
        "setting",
        "n",
        "mean ± std",
        "Δ vs baseline",
        "p (recomputed)",
        "printed p",
        "check",
        "note",
    ]
    return render.Table(
        header,
        [[str(c) for c in row] for row in rows],
        align="lllrrrrrll",
        title=f"{first['paper']} {first['table']} — {first['group']} — {first['printed_column']} (`{first['metric']}`)",
        intro=[f"{where}."],
        data=g,
    )


def markdown(rows: pd.DataFrame, test: str) -> str:
    """One section per (paper, table, group, metric), then the printed claims that do not hold."""
    blocks = [
        f"Published results. p: {TEST_NAMES[test]} from the printed mean ± std (n) against the group's "
        "baseline; `check`: does the paper's printed significance hold (`holds within rounding`: some "
        "mean/std within the printed rounding gives the printed stars). n = seeds the paper states "
        "(`?`: none stated).\n"
    ]
    groups = rows.groupby(["paper", "table", "group", "metric"], sort=False)
    blocks += [render.markdown(group_table(g)) for _, g in groups]
    failing = rows[rows["check"] == published.FAILS]
    if (rows["check"] != "").any() and failing.empty:
        blocks.append("Every printed p-value shown holds under this test.")
    if len(failing):
        blocks.append(
            "\n".join(
                ["Printed significance that does not hold under this test:"]
                + [
                    f"- {published.ref(r)} {r['label']} ({r['metric']}): printed {r['printed_p']}, recomputed "
                    f"{format_p(r['p_value'], r['stars'])} (rounding allows {r['p_low']:.2g}–{r['p_high']:.2g})"
                    for _, r in failing.iterrows()
                ]
            )
        )
    return "\n".join(blocks).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """`visionbench papers [--paper P] [--table T] [--format md|csv] [--test student|welch]`."""
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # --help, or argparse's own usage error
        return exc.code if isinstance(exc.code, int) else 2
    try:
        rows = select(args.paper, args.table)
    except ValueError as exc:
        print(f"visionbench papers: error: {exc}", file=sys.stderr)
        return 2
    rows = published.recompute(rows, args.test)
    if args.format == "csv":
        # the numbers as printed (their rounding is part of the data); n as an integer, empty when not stated
        rows[CSV_COLUMNS].assign(mean=rows["mean_text"], std=rows["std_text"], n=rows["n"].astype("Int64")).to_csv(
            sys.stdout, index=False
        )
    else:
        sys.stdout.write(markdown(rows, args.test))
    return 0
