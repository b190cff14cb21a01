"""The one table renderer: a table is built once as cells, then written as Markdown, CSV or LaTeX.

    >>> from visionbench.report import render
    >>> t = render.Table(["Act.", "mean"], [["relu", render.Cell("98.70", "bold")], ["a|b", "97.31"]],
    ...                  align="lr", title="digits_vgg4", notes=["one seed diverged"])
    >>> print(render.markdown(t))        # "| a\\|b | 97.31 |": pipes in cells are escaped
    >>> render.write(t, "results/x/table", ("md", "csv", "tex"))

Every table of the project goes through here: the per-recipe significance tables (`tables.py`), the
recipe-level table of a factor sweep (`best_of.py`), the suite view (`suite.py`), the published
tables (`papers.py`) and the benchmarks' tables (`visionbench.bench.timing`). So a `|` inside a cell
is always escaped in Markdown (a raw one would split the cell), and every LaTeX special is escaped
in LaTeX.

Markdown: `### title`, the `intro` paragraphs, the pipe table, the `outro` paragraphs, then
`Notes:` with one bullet per note, then the `footer` line; a blank line between blocks. LaTeX: a booktabs
`table` float with `caption` and `label` (needs `\\usepackage{booktabs}`), the `footer` in small type under
the tabular. CSV: the table's `data` frame when it carries one (the numbers at full precision, every
column), else the display cells; no footer.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..results.io import atomic_write_bytes

FORMATS = ("md", "csv", "tex")
MARKS = {"": ("{}", "{}"), "bold": ("**{}**", r"\textbf{{{}}}"), "underline": ("<ins>{}</ins>", r"\underline{{{}}}")}
# Markdown column rules: left, right, centred, and the renderer's default (no colon, padded)
_RULES = {"l": ":---", "r": "---:", "c": ":---:", "-": " --- "}
_TEX_ALIGN = {"l": "l", "r": "r", "c": "c", "-": "l"}
# one pass, so that the backslashes and dollars a substitution inserts are not escaped again
_TEX = {
    "\\": r"\textbackslash{}",
    "_": r"\_",
    "%": r"\%",
    "&": r"\&",
    "#": r"\#",
    "$": r"\$",
    "{": r"\{",
    "}": r"\}",
    "~": r"\~{}",
    "^": r"\^{}",
    "±": r"$\pm$",
    "<": "$<$",
    ">": "$>$",
    "—": "--",
    "Δ": r"$\Delta$",
    "·": r"$\cdot$",
}
_TEX_RE = re.compile("|".join(re.escape(k) for k in _TEX))


@dataclass(frozen=True)
class Cell:
    """A cell with emphasis: `text` marked (`bold`, `underline` or "" for none), then `suffix` unmarked
    (the best-of table bolds the mean but not the setting it names after it)."""

    text: str
    mark: str = ""
    suffix: str = ""

    def __post_init__(self):
        if self.mark not in MARKS:
            raise ValueError(f"unknown mark {self.mark!r}; choose from {', '.join(repr(m) for m in MARKS)}")


@dataclass
class Table:
    """One table: the cells and what is written around them.

    Attributes:
        header: column names.
        rows: one list per row, of `str` (plain text) or `Cell` (with emphasis).
        align: one letter per column, `l`, `r`, `c` or `-` (Markdown's default, rule ` --- `); a missing
            letter counts as `-`. The default: the first column left, the others right.
        title: the Markdown heading (`level` hashes); not in the LaTeX float.
        level: heading level of `title`.
        intro: Markdown paragraphs between the title and the table (already Markdown: not escaped).
        outro: Markdown paragraphs after the table (a paragraph may hold several lines).
        notes: bullets under `Notes:`.
        footer: one line under everything, in Markdown and LaTeX (the environment of the runs: report/environment.py).
        caption: the LaTeX caption (escaped).
        label: the LaTeX label (`tab:<label>`).
        data: the frame the CSV holds (None: the display cells).
    """

    header: Sequence[str]
    rows: Sequence[Sequence[str | Cell]]
    align: str | None = None
    title: str = ""
    level: int = 3
    intro: Sequence[str] = ()
    outro: Sequence[str] = ()
    notes: Sequence[str] = ()
    footer: str = ""
    caption: str = ""
    label: str = ""
    data: pd.DataFrame | None = field(default=None, repr=False)

    def alignment(self) -> str:
        """One letter per column (`align`, padded with `-`)."""
        align = "l" + "r" * (len(self.header) - 1) if self.align is None else self.align
        return (align + "-" * len(self.header))[: len(self.header)]


def md_escape(text: str) -> str:
    """A cell's text for a pipe table: `|` becomes `\\|` (it would end the cell)."""
    return str(text).replace("|", "\\|")


def tex_escape(text: str) -> str:
    """Escape LaTeX specials and turn the tables' Unicode symbols (±, Δ, —, <, >) into LaTeX."""
    return _TEX_RE.sub(lambda m: _TEX[m.group(0)], str(text))


def _cell(cell: str | Cell, escape, fmt: int) -> str:
    if not isinstance(cell, Cell):
        return escape(cell)
    return MARKS[cell.mark][fmt].format(escape(cell.text)) + escape(cell.suffix)


def plain(cell: str | Cell) -> str:
    """The cell's text without emphasis (what the CSV of display cells holds)."""
    return cell.text + cell.suffix if isinstance(cell, Cell) else str(cell)


def pipe_table(table: Table) -> str:
    """The header, rule and rows of a Markdown pipe table (no newline at the end)."""
    lines = [
        "| " + " | ".join(md_escape(h) for h in table.header) + " |",
        "|" + "|".join(_RULES[a] for a in table.alignment()) + "|",
    ]
    lines += ["| " + " | ".join(_cell(c, md_escape, 0) for c in row) + " |" for row in table.rows]
    return "\n".join(lines)


def markdown(table: Table) -> str:
    """The table as a Markdown section: title, intro, pipe table, outro, notes; ends with a newline."""
    blocks = ["#" * table.level + " " + table.title] if table.title else []
    blocks += [*table.intro, pipe_table(table), *table.outro]
    if table.notes:
        blocks.append("\n".join(["Notes:"] + [f"- {n}" for n in table.notes]))
    if table.footer:
        blocks.append(table.footer)
    return "\n\n".join(blocks) + "\n"


def latex(table: Table) -> str:
    """A booktabs `table` float with the same cells as `markdown`; ends with a newline."""
    lines = [r"\begin{table}[t]", r"\centering"]
    if table.caption:
        lines.append(r"\caption{" + tex_escape(table.caption) + "}")
    if table.label:
        lines.append(r"\label{tab:" + table.label + "}")
    lines += [
        r"\begin{tabular}{" + "".join(_TEX_ALIGN[a] for a in table.alignment()) + "}",
        r"\toprule",
        " & ".join(tex_escape(h) for h in table.header) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(_cell(c, tex_escape, 1) for c in row) + r" \\" for row in table.rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    if table.footer:
        lines.append(r"\par\smallskip{\footnotesize " + tex_escape(table.footer) + "}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def csv_text(table: Table) -> str:
    """The CSV: `data` at full precision when the table has it, else the header and the plain cells."""
    if table.data is not None:
        return table.data.to_csv(index=False)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.header)
    writer.writerows([plain(c) for c in row] for row in table.rows)
    return out.getvalue()


RENDERERS = {"md": markdown, "csv": csv_text, "tex": latex}


def write(table: Table, stem, formats: Sequence[str] = FORMATS) -> list[Path]:
    """Write `<stem>.md`, `<stem>.csv`, `<stem>.tex` (those in `formats`); returns the paths in that order.
    Each file is written atomically (`results.io.atomic_write_bytes`): a symlink planted at its name in a tree from
    someone else is replaced, never written through.

    Raises:
        ValueError: a format that is none of md, csv, tex (before anything is written).
    """
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise ValueError(f"unknown table format(s) {', '.join(unknown)}; choose from {', '.join(FORMATS)}")
    stem = Path(stem)
    written = []
    for fmt in formats:
        path = stem.with_name(f"{stem.name}.{fmt}")
        written.append(atomic_write_bytes(path, RENDERERS[fmt](table)))
    return written
