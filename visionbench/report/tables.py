"""Render one recipe's `summarize` rows as Markdown, CSV and LaTeX (booktabs).

    >>> from visionbench.report import tables
    >>> print(tables.markdown(summary))
    >>> tables.write(summary, "results/cifar10_vgg8", formats=("md", "csv", "tex"))

Markdown and LaTeX are built from the same display cells, so they always show the same
numbers; the CSV holds every column of `summarize` at full precision. As in the papers'
tables (004 Table 2), the best mean is bold and the second-best underlined
(`<ins>` in Markdown, which GitHub renders underlined; `\\underline` in LaTeX).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from ..stats.significance import MARK_BASELINE, stars

FORMATS = ("md", "csv", "tex")
TEST_NAMES = {
    "student": "two-tailed Student t-test (equal variances)",
    "welch": "two-tailed Welch t-test (unequal variances)",
    "paired": "two-tailed paired t-test over the seeds both acts share",
}
# one pass, so that the backslashes and dollars a substitution inserts are not escaped again
_TEX = {"\\": r"\textbackslash{}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$", "{": r"\{",
        "}": r"\}", "~": r"\~{}", "^": r"\^{}", "±": r"$\pm$", "<": "$<$", ">": "$>$", "—": "--", "Δ": r"$\Delta$"}
_TEX_RE = re.compile("|".join(re.escape(k) for k in _TEX))


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


def format_p(p: float, star: str) -> str:
    """`0.0345 (*)`, `< 0.0001 (****)`, as in paper 001 Tables 1 and 7."""
    text = "< 0.0001" if p < 1e-4 else f"{p:.4f}"
    return f"{text} ({star})"


def mean_cell(row, digits: int) -> str:
    """`mean ± std`; mean alone for n = 1; `NaN (3/5 diverged)` when no run completed."""
    if row["n"] == 0:
        why = [f"{row[k]}/{row['n_runs']} {label}" for k, label in
               (("n_diverged", "diverged"), ("n_failed", "failed"), ("n_missing", "without metric")) if row[k]]
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


def cells(summary: pd.DataFrame, digits: int = 2, extras: bool = False) -> tuple[list[str], list[list[str]], list[str]]:
    """Headers, display rows and per-row emphasis (`best`, `second` or "") for one recipe."""
    metric, base = summary["metric"].iloc[0], baseline_of(summary)
    headers = ["Act.", "n", f"{metric} (mean ± std)", f"Δ vs {base}" if base else "Δ", "p-value"]
    if extras:
        headers += ["p (Holm)", "Cohen's d", "95% CI of Δ"]
    headers += ["diverged", "failed", "train time (s)", "img/s", "act params"]
    show_verdict = "verdict" in summary
    if "stopped" in summary:  # seeds=auto (report/stopping.py)
        headers.append("stopped (seeds=auto)")
    if extras and show_verdict:
        headers.append(f"P(> {base}) [95% CI]" if base else "P(> baseline)")
    if show_verdict:
        headers.append("verdict")
    show_published = has_published(summary)
    if show_published:
        headers.append(published_header(summary))
    rows, emphasis = [], []
    for _, r in summary.iterrows():
        row = [r["act"], str(r["n"]), mean_cell(r, digits),
               "—" if r["is_baseline"] else number(r["diff"], digits, sign=True), p_cell(r)]
        if extras:
            ci = "" if not math.isfinite(r["ci_low"]) else \
                f"[{number(r['ci_low'], digits, True)}, {number(r['ci_high'], digits, True)}]"
            row += [p_cell(r, "p_holm", "stars_holm"), number(r["cohen_d"], 2, sign=True), ci]
        row += [str(r["n_diverged"]), str(r["n_failed"]), number(r["train_time_s"], 1),
                number(r["throughput_img_s"], 0), _int(r["act_params"])]
        if "stopped" in summary:
            row.append(r["stopped"])
        if extras and show_verdict:
            row.append(improvement_cell(r))
        if show_verdict:
            row.append(verdict_cell(r, digits))
        if show_published:
            row.append(published_cell(r, digits))
        rows.append(row)
        emphasis.append("best" if r["best"] else "second" if r["second"] else "")
    return headers, rows, emphasis


def verdict_cell(row, digits: int = 2) -> str:
    """The compact verdict (verdict.py): `better`, `worse`, `equivalent (±0.50)`,
    `inconclusive (needs 12/group)`; `—` for the baseline, "" without a test (the p cell says why)."""
    if row["is_baseline"]:
        return "—"
    word = row.get("verdict") or ""
    if word == "equivalent":
        return f"equivalent (±{number(row['margin'], digits)})"
    if word == "inconclusive":
        n = row.get("seeds_needed", math.nan)
        if isinstance(n, float) and math.isfinite(n):
            return f"inconclusive (needs {int(n)}/group)"
    return word if isinstance(word, str) else ""


def improvement_cell(row) -> str:
    """`0.92 [0.76, 1.00]`: P(act beats the baseline) with its bootstrap CI (improvement.py)."""
    p, lo, hi = (row.get(k, math.nan) for k in ("p_improve", "p_improve_low", "p_improve_high"))
    if not isinstance(p, float) or not math.isfinite(p):
        return ""
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


def caption(summary: pd.DataFrame) -> str:
    """One sentence saying what the table is: recipe, metric, aggregation, test, baseline."""
    recipe, base, test = summary["recipe"].iloc[0], baseline_of(summary), summary["test"].iloc[0]
    against = f"vs {base}" if base else "(no baseline: no tests)"
    metric = f" Metric {summary['metric_text'].iloc[0]}." if "metric_text" in summary else ""
    return (f"{recipe}: mean ± sample std over completed seeds; {TEST_NAMES[test]} {against}.{metric} "
            "* p < 0.05, ** < 0.01, *** < 0.001, **** < 0.0001, ns otherwise.")


def markdown(summary: pd.DataFrame, notes=(), digits: int = 2, extras: bool = False) -> str:
    """A Markdown section: title, caption, pipe table, legend of the marks, notes."""
    headers, rows, emphasis = cells(summary, digits, extras)
    wrap = {"best": "**{}**", "second": "<ins>{}</ins>", "": "{}"}
    lines = [f"### {summary['recipe'].iloc[0]} — {summary['metric'].iloc[0]}", "",
             caption(summary) + " Best mean **bold**, second <ins>underlined</ins>.", "",
             "| " + " | ".join(headers) + " |",
             "|" + "|".join(":---" if i == 0 else "---:" for i in range(len(headers))) + "|"]
    for row, emph in zip(rows, emphasis):
        row = list(row)
        if row[2] and not row[2].startswith("NaN"):
            row[2] = wrap[emph].format(row[2])
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    marks = sorted(set(summary["mark"]) - {"", MARK_BASELINE})
    if marks:
        lines += ["", "Marks in the p-value column: " + "; ".join(f"`{m}`: {MARK_HELP.get(m, m)}" for m in marks)
                  + "."]
    verdicts = verdict_lines(summary)
    if verdicts:
        lines += [""] + verdicts
    if notes:
        lines += ["", "Notes:"] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


MARK_HELP = {
    "n<2": "fewer than two completed runs, no std and no test",
    "baseline n<2": "the baseline has fewer than two completed runs",
    "zero variance": "all values identical in both groups (or all paired differences equal), t undefined",
    "no completed run": "every run diverged or failed",
    "no baseline": "the recipe has no run of the baseline act",
    "<2 shared seeds": "fewer than two seeds completed by both this act and the baseline",
}


def tex_escape(text: str) -> str:
    """Escape LaTeX specials and turn the table's Unicode symbols into math."""
    return _TEX_RE.sub(lambda m: _TEX[m.group(0)], text)


def latex(summary: pd.DataFrame, digits: int = 2, extras: bool = False) -> str:
    """A booktabs `table` float (needs `\\usepackage{booktabs}`) with the same cells as `markdown`."""
    headers, rows, emphasis = cells(summary, digits, extras)
    wrap = {"best": r"\textbf{%s}", "second": r"\underline{%s}", "": "%s"}
    recipe = summary["recipe"].iloc[0]
    lines = [r"\begin{table}[t]", r"\centering",
             r"\caption{" + tex_escape(caption(summary)) + "}",
             r"\label{tab:" + recipe.replace("_", "-") + "}",
             r"\begin{tabular}{l" + "r" * (len(headers) - 1) + "}", r"\toprule",
             " & ".join(tex_escape(h) for h in headers) + r" \\", r"\midrule"]
    for row, emph in zip(rows, emphasis):
        row = [tex_escape(c) for c in row]
        if row[2] and not row[2].startswith("NaN"):
            row[2] = wrap[emph] % row[2]
        lines.append(" & ".join(row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def write(summary: pd.DataFrame, out_dir, formats=FORMATS, notes=(), digits: int = 2,
          extras: bool = False) -> list[Path]:
    """Write `table.md`, `table.csv`, `table.tex` (those in `formats`) into `out_dir`."""
    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise ValueError(f"unknown table format(s) {', '.join(sorted(unknown))}; choose from {', '.join(FORMATS)}")
    out_dir = Path(out_dir)
    written = []
    for fmt in formats:
        path = out_dir / f"table.{fmt}"
        if fmt == "md":
            path.write_text(markdown(summary, notes, digits, extras))
        elif fmt == "tex":
            path.write_text(latex(summary, digits, extras))
        else:
            summary.drop(columns=["recipe_dir"], errors="ignore").to_csv(path, index=False)
        written.append(path)
    return written
