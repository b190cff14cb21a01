"""One recipe's `summarize` rows as a table: display cells, caption and notes, written as Markdown,
CSV and LaTeX (booktabs) by the one renderer, `render`.

    >>> from visionbench.report import tables
    >>> print(tables.markdown(summary))
    >>> tables.write(summary, "runs/cifar10_vgg8", formats=("md", "csv", "tex"))

Markdown and LaTeX are built from the same display cells (`table`), so they always show the same
numbers; the CSV holds every column of `summarize` at full precision. As in the papers'
tables (004 Table 2), the best mean is bold and the second-best underlined
(`<ins>` in Markdown, which GitHub renders underlined; `\\underline` in LaTeX).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..stats.significance import MARK_BASELINE, stars
from . import render
from .render import FORMATS

TEST_NAMES = {
    "student": "two-tailed Student t-test (equal variances)",
    "welch": "two-tailed Welch t-test (unequal variances)",
    "paired": "two-tailed paired t-test over the seeds both acts share",
}


def number(x, digits: int, sign: bool = False) -> str:
    """x to `digits` decimals ("+" too with `sign`); "" when missing; never "-0.00" (a float32 ulp
    below an equal mean reads "+0.00")."""
    if x is None or x is pd.NA or (isinstance(x, float) and not math.isfinite(x)):
        return ""
    x = round(float(x), digits) + 0.0  # -0.0 + 0.0 is +0.0
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def _int(x) -> str:
    return "" if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)) else str(int(x))


def baseline_of(summary: pd.DataFrame) -> str | None:
    """The recipe's baseline act, None when it has none (pandas may hold that as NaN)."""
    base = summary["baseline"].iloc[0]
    return base if isinstance(base, str) else None


def p_text(p) -> str:
    """`0.0345`, `< 0.0001` (4 decimals, as paper 001 prints p); "" for a missing p (None, NaN)."""
    if p is None or not isinstance(p, float) or not math.isfinite(p):
        return ""
    return "< 0.0001" if p < 1e-4 else f"{p:.4f}"


def p_relation(p) -> str:
    """What follows "p " in a sentence: `= 0.0345`, `< 0.0001`; "" for a missing p."""
    text = p_text(p)
    return f"= {text}" if text and not text.startswith("<") else text


def format_p(p: float, star: str) -> str:
    """`0.0345 (*)`, `< 0.0001 (****)`, as in paper 001 Tables 1 and 7."""
    return f"{p_text(p)} ({star})"


def mean_cell(row, digits: int) -> str:
    """`mean ± std`; mean alone for n = 1; `NaN (3/5 diverged)`, `NaN (2/2 stalled)` when no run completed."""
    if row["n"] == 0:
        why = [
            f"{row[k]}/{row['n_runs']} {label}"
            for k, label in (
                ("n_diverged", "diverged"),
                ("n_stalled", "stalled"),
                ("n_failed", "failed"),
                ("n_missing", "without metric"),
            )
            if row.get(k, 0)
        ]
        return f"NaN ({', '.join(why) or 'no runs'})"
    if row["n"] == 1:
        return number(row["mean"], digits)
    return f"{number(row['mean'], digits)} ± {number(row['std'], digits)}"


def p_cell(row, col: str = "p_value", star_col: str = "stars") -> str:
    if row["mark"] == MARK_BASELINE:
        return "—"
    if math.isfinite(row[col]):
        return format_p(row[col], row[star_col])
    return row["mark"]


def cells(summary: pd.DataFrame, digits: int = 2, extras: bool = False) -> tuple[list[str], list[list]]:
    """Headers and display rows for one recipe: strings, and the mean as a `render.Cell`, bold for the
    best mean and underlined for the second (a NaN mean is never marked)."""
    metric, base = summary["metric"].iloc[0], baseline_of(summary)
    headers = ["Act.", "n", f"{metric} (mean ± std)", f"Δ vs {base}" if base else "Δ", "p-value"]
    if extras:
        headers += ["p (Holm)", "Cohen's d", "95% CI of Δ"]
    show_stalled = has_stalled(summary)
    headers += ["diverged"] + (["stalled"] if show_stalled else [])
    headers += ["failed", "train time (s)", "img/s", "act params"]
    show_verdict = "verdict" in summary
    if "stopped" in summary:  # seeds=auto (report/stopping.py)
        headers.append("stopped (seeds=auto)")
    if extras and show_verdict:
        headers.append(f"P(> {base}) [95% CI]" if base else "P(> baseline)")
    if show_verdict:
        headers.append("verdict")
    show_published = has_published(summary)
    if show_published:
        headers += [published_header(summary), PI_HEADER]
    rows = []
    for _, r in summary.iterrows():
        mean = mean_cell(r, digits)
        mark = "bold" if r["best"] else "underline" if r["second"] else ""
        row = [
            r["act"],
            str(r["n"]),
            render.Cell(mean, mark) if mean and not mean.startswith("NaN") else mean,
            "—" if r["is_baseline"] else number(r["diff"], digits, sign=True),
            p_cell(r),
        ]
        if extras:
            ci = (
                ""
                if not math.isfinite(r["ci_low"])
                else f"[{number(r['ci_low'], digits, True)}, {number(r['ci_high'], digits, True)}]"
            )
            row += [p_cell(r, "p_holm", "stars_holm"), number(r["cohen_d"], 2, sign=True), ci]
        row += (
            [str(r["n_diverged"])]
            + ([str(r["n_stalled"])] if show_stalled else [])
            + [
                str(r["n_failed"]),
                number(r["train_time_s"], 1),
                number(r["throughput_img_s"], 0),
                _int(r["act_params"]),
            ]
        )
        if "stopped" in summary:
            row.append(r["stopped"])
        if extras and show_verdict:
            row.append(improvement_cell(r))
        if show_verdict:
            row.append(verdict_cell(r, digits))
        if show_published:
            row += [published_cell(r, digits), pi_cell(r, digits)]
        rows.append(row)
    return headers, rows


def has_stalled(summary: pd.DataFrame) -> bool:
    """Whether a run of the table stalled: only then has it a `stalled` column (the CSV's `n_stalled` always)."""
    return "n_stalled" in summary and bool((summary["n_stalled"] > 0).any())


def verdict_cell(row, digits: int = 2) -> str:
    """The compact verdict (verdict.py): `better`, `worse`, `equivalent (±0.50)`, `inconclusive (needs
    12/group)`, `unstable (2/5 diverged)`; divergence or a stall in either arm is added (`worse (2/5 diverged)`,
    `unstable (1/5 stalled)`, `better (relu 1/5 diverged)`); `—` for the baseline, "" without a test (the p cell
    says why)."""
    if row["is_baseline"]:
        return "—"
    word = row.get("verdict") or ""
    if not isinstance(word, str) or not word:
        return ""
    details = []
    if word == "equivalent":
        details.append(f"±{number(row['margin'], digits)}")
    if word == "inconclusive":
        n = row.get("seeds_needed", math.nan)
        if isinstance(n, float) and math.isfinite(n):
            details.append(f"needs {int(n)}/group")
    details += divergence_counts(row)
    return f"{word} ({'; '.join(details)})" if details else word


def divergence_counts(row) -> list[str]:
    """`2/5 diverged`, `1/5 stalled` for the act and `relu 1/5 diverged`, `relu 2/5 stalled` for the baseline,
    each only when non-zero (runs that completed, stalled or diverged; failed runs are not counted)."""
    out = []
    for what in ("diverged", "stalled"):
        if row.get(f"n_{what}", 0):
            out.append(f"{int(row[f'n_{what}'])}/{int(row['n_runs'] - row['n_failed'])} {what}")
    m = row.get("base_runs")
    for what in ("diverged", "stalled"):
        j = row.get(f"base_{what}")
        if j is not None and j is not pd.NA and not (isinstance(j, float) and math.isnan(j)) and int(j):
            out.append(f"{row['baseline']} {int(j)}/{int(m)} {what}")
    return out


def improvement_cell(row) -> str:
    """`0.92 [0.76, 1.00]`: P(act beats the baseline) under the normal model with its exact interval
    (stats/improvement.py); `n/e` (not estimable) for a tested row without one (Welch, no spread); ""
    for a row without a test."""
    p, lo, hi = (row.get(k, math.nan) for k in ("p_improve", "p_improve_low", "p_improve_high"))
    if not isinstance(p, float) or not math.isfinite(p):
        return "n/e" if not row["is_baseline"] and not row["mark"] else ""
    return f"{p:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if math.isfinite(lo) else "")


def verdict_lines(summary: pd.DataFrame) -> list[str]:
    """The verdict sentences under the table, one per non-baseline act that has one."""
    if "verdict_text" not in summary:
        return []
    texts = [t for t in summary["verdict_text"] if isinstance(t, str) and t]
    if not texts:
        return []
    r = summary.iloc[0]
    how = f"α = {r['alpha']:g}" + (", Holm-adjusted" if r["verdict_holm"] else "")
    if math.isfinite(r["margin"]):
        how += f", equivalence margin ±{r['margin']:g} (TOST)"
    return [f"Verdicts ({how}):"] + [f"- {t}" for t in texts]


def has_published(table: pd.DataFrame) -> bool:
    """True when `published.attach` found a counterpart for at least one row (`--published`)."""
    return "published_ref" in table and bool((table["published_ref"] != "").any())


def published_header(table: pd.DataFrame) -> str:
    """`published (004 Table 1): mean ± std (n); Δ ours - paper; Welch p`."""
    refs = ", ".join(sorted(set(table["published_ref"]) - {""}))
    return f"published ({refs}): mean ± std (n); Δ ours - paper; Welch p"


def published_cell(row, digits: int = 2) -> str:
    """`81.96 ± 0.33 (n=5); Δ -0.12; p 0.7134 (ns)`; the mark (`published n=1`) when p is untestable;
    "" for a row without a published counterpart."""
    if not row.get("published_ref"):
        return ""
    mean, std, n = (float(row[k]) for k in ("published_mean", "published_std", "published_n"))
    if not math.isfinite(mean):
        return "NaN (diverged in the paper)"
    text = number(mean, digits) + (f" ± {number(std, digits)}" if math.isfinite(std) else "")
    text += f" (n={int(n)})" if math.isfinite(n) else " (n not stated)"
    diff = float(row["published_diff"])
    if math.isfinite(diff):
        text += f"; Δ {number(diff, digits, sign=True)}"
    p = float(row["published_p"])
    return text + "; " + (f"p {format_p(p, stars(p))}" if math.isfinite(p) else str(row["published_mark"]))


PI_HEADER = "one-run 95 % PI"


def pi_cell(row, digits: int = 2) -> str:
    """`[80.95, 82.97] paper inside` (or `outside`): the 95 % prediction interval of one run of ours and whether
    the paper's number lies in it (published.py); `n<2: none`; "" for a row without a published counterpart."""
    if not row.get("published_ref"):
        return ""
    low, high = float(row["pi_low"]), float(row["pi_high"])
    if not math.isfinite(low):
        return "n<2: none"
    inside = {"yes": " paper inside", "no": " paper outside"}.get(row.get("published_in_pi"), "")
    return f"[{number(low, digits)}, {number(high, digits)}]{inside}"


def caption(summary: pd.DataFrame) -> str:
    """One sentence saying what the table is: recipe, metric, aggregation, test, baseline."""
    recipe, base, test = summary["recipe"].iloc[0], baseline_of(summary), summary["test"].iloc[0]
    against = f"vs {base}" if base else "(no baseline: no tests)"
    metric = f" Metric {summary['metric_text'].iloc[0]}." if "metric_text" in summary else ""
    return (
        f"{recipe}: mean ± sample std over completed seeds; {TEST_NAMES[test]} {against}.{metric} "
        "* p < 0.05, ** < 0.01, *** < 0.001, **** < 0.0001, ns otherwise."
    )


MARK_HELP = {
    "n<2": "fewer than two completed runs, no std and no test",
    "baseline n<2": "the baseline has fewer than two completed runs",
    "zero variance": "all values identical in both groups (or all paired differences equal), t undefined",
    "no completed run": "every run diverged, stalled or failed",
    "no baseline": "the recipe has no run of the baseline act",
    "<2 shared seeds": "fewer than two seeds completed by both this act and the baseline",
    "not comparable": "the runs of this table differ in more than act and seed (the first note names how): "
    "no test, interval or verdict across configurations that differ",
}
IMPROVEMENT_HELP = (
    "P(> baseline): the normal-model probability that a run of the act beats a run of the "
    "baseline, Φ(d/√2) (paired: Φ(mean/sd of the differences)), with its exact 95 % interval "
    "(noncentral t); `n/e`: not estimable (Welch's test, or no spread)."
)


def table(summary: pd.DataFrame, notes=(), digits: int = 2, extras: bool = False, footer: str = "") -> render.Table:
    """The recipe's table: its cells; in Markdown the title, the caption with the legend of the
    emphasis, then the marks, the verdicts and the notes; in LaTeX the caption and `tab:<recipe>`;
    in both the `footer` last (the environment of the runs: report/environment.py)."""
    headers, rows = cells(summary, digits, extras)
    outro = []
    marks = sorted(set(summary["mark"]) - {"", MARK_BASELINE})
    if marks:
        outro.append("Marks in the p-value column: " + "; ".join(f"`{m}`: {MARK_HELP.get(m, m)}" for m in marks) + ".")
    if extras and "p_improve" in summary:
        outro.append(IMPROVEMENT_HELP)
    verdicts = verdict_lines(summary)
    if verdicts:
        outro.append("\n".join(verdicts))
    recipe, text = summary["recipe"].iloc[0], caption(summary)
    return render.Table(
        headers,
        rows,
        title=f"{recipe} — {summary['metric'].iloc[0]}",
        intro=[text + " Best mean **bold**, second <ins>underlined</ins>."],
        outro=outro,
        notes=list(notes),
        footer=footer,
        caption=text,
        label=recipe.replace("_", "-"),
        data=summary.drop(columns=["recipe_dir"], errors="ignore"),
    )


def markdown(summary: pd.DataFrame, notes=(), digits: int = 2, extras: bool = False, footer: str = "") -> str:
    """A Markdown section: title, caption, pipe table, legend of the marks, verdicts, notes, footer."""
    return render.markdown(table(summary, notes, digits, extras, footer))


def latex(summary: pd.DataFrame, digits: int = 2, extras: bool = False, footer: str = "") -> str:
    """A booktabs `table` float (needs `\\usepackage{booktabs}`) with the same cells as `markdown`."""
    return render.latex(table(summary, digits=digits, extras=extras, footer=footer))


def write(
    summary: pd.DataFrame, out_dir, formats=FORMATS, notes=(), digits: int = 2, extras: bool = False, footer: str = ""
) -> list[Path]:
    """Write `table.md`, `table.csv`, `table.tex` (those in `formats`) into `out_dir`.

    Raises:
        ValueError: an unknown format (before anything is written).
    """
    return render.write(table(summary, notes, digits, extras, footer), Path(out_dir) / "table", formats)


# ---- the per-example share of the seed variance (report/per_example.py) ----


def share_cell(share: float) -> str:
    """The table's share: a percentage up to 100 %; above it, no share (no part exceeds its whole) but the ratio,
    marked: the test set alone predicts more seed variance than the seeds showed."""
    if not math.isfinite(share):
        return ""
    return f"{share * 100:.0f} %" if share <= 1 else f"all (×{share:.1f})"


def share_words(share: float) -> str:
    """The per-example sentence's clause on the share (docs/per_example.md, "Share of the seed variance")."""
    if not math.isfinite(share):
        return ""
    if share <= 1:
        return f" (share of seed variance {share * 100:.0f} %)"
    return (
        f" (the test set alone would give {share:.1f}× the seed variance measured: not a share — the runs' "
        "accuracies agree more closely than independent image flips would, as a noisy s² at few seeds or flips "
        "that offset one another make them; all of the seed spread is within what the test set explains)"
    )
