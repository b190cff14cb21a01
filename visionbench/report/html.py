"""One self-contained page per recipe: `visionbench report TREE --html` (docs/report.md, "One page: --html").

    visionbench report runs/digits_vgg4 --html     # + runs/digits_vgg4/report.html
    visionbench report runs --html                 # + <recipe>/report.html each, and runs/index.html (the suite view)

    >>> from visionbench.report import html
    >>> html.markdown_to_html("| a | b |\\n|:---|---:|\\n| **1** | 2 |")   # the table as HTML
    >>> html.write_pages(written, "runs", {"runs/digits_vgg4": "digits_vgg4"})

A page is rendered from the Markdown files this report run wrote (table.md, tuning.md, noise.md, per_example.md,
ranks.md, and any other), by markdown-it-py (CommonMark and GFM pipe tables; in requirements.lock), so its text and
numbers are the Markdown's, character for character; a recipe with many settings (a tune= design's trials) shows
them folded under one index, in numeric order. The PNG figures the run drew are
embedded as base64 `data:` URIs; the page's style and the few lines that sort a table when a header is clicked are
inline. Nothing is loaded from anywhere (no CDN, no font, no server: a Content-Security-Policy in the page forbids it),
so the file works offline, mailed or opened from disk.

Where matplotlib cannot draw, the page is written without figures and says why in one line (`drawing_problem`).
"""

from __future__ import annotations

import base64
import html
import io
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

from ..results.io import atomic_write_bytes
from .errors import UsageError

PAGE = "report.html"
INDEX = "index.html"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# the Markdown files of a recipe folder, in page order, with the heading of their section
SECTIONS = (
    ("table.md", "Significance table"),
    ("tuning.md", "Tuning: the equal-budget comparison"),
    ("noise.md", "Where the noise comes from"),
    ("per_example.md", "Per-example evidence"),
)  # and any other Markdown file the report wrote there, after these, by name
FOLD_FROM = 6  # a recipe with this many setting folders (a tune= design's trials) shows them folded, under one index
SUITE = (("ranks.md", "Suite view"),)
# raw HTML the report's Markdown may hold (tables.py underlines the second-best mean with <ins>): markdown-it escapes
# all raw HTML (html=False), and these few tags, escaped, are put back; any other tag stays text
_TAGS = re.compile(r"&lt;(/?)(ins|sub|sup|b|i|em|strong|code|kbd)&gt;|&lt;br\s*/?&gt;")
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//")


# ---- Markdown -> HTML (markdown-it-py: CommonMark and GFM tables) -----------------------------------------------------
def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    rules = md.renderer.rules
    rules["table_open"] = lambda *a: '<div class="scroll"><table class="sortable">\n'
    rules["table_close"] = lambda *a: "</table></div>\n"
    return md


_MD = _markdown()


def markdown_to_html(text: str) -> str:
    """The Markdown the report writes as HTML, by markdown-it-py (CommonMark with GFM pipe tables: each cell aligned
    as its column's rule says). Tables get class `sortable` in a horizontally scrolling box; headings an id; the raw
    `<ins>`, `<sub>`, `<sup>` tags are kept, any other HTML is escaped text. A page loads nothing and links nowhere
    outside: an image is its alt text, a link to another site its text with the address after it; links to local
    files and anchors stay links."""
    tokens = _MD.parse(text.replace("\r\n", "\n"))
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            token.attrSet("id", slug(tokens[i + 1].content))
        elif token.type == "th_open":
            token.attrSet("scope", "col")
        if token.type == "inline" and token.children:
            token.children = _offline(token.children)
    return _TAGS.sub(
        lambda m: "<br>" if m.group(2) is None else f"<{m.group(1)}{m.group(2)}>",
        _MD.renderer.render(tokens, _MD.options, {}),
    ).rstrip("\n")


def _offline(children: list[Token]) -> list[Token]:
    """An inline run with its images as their alt text and its links to other sites as text (address after it)."""
    out: list[Token] = []
    outside: str | None = None
    for token in children:
        if token.type == "image":
            alt = Token("html_inline", "", 0, content=f'<span class="alt">[{html.escape(token.content)}]</span>')
            out.append(alt)
        elif token.type == "link_open" and _EXTERNAL.match(str(token.attrGet("href") or "")):
            outside = str(token.attrGet("href"))
        elif token.type == "link_close" and outside is not None:
            out.append(Token("text", "", 0, content=f" ({outside})"))
            outside = None
        else:
            out.append(token)
    return out


def natural(text: str) -> list:
    """A sort key that orders numbers inside names by value: trial=2 before trial=10."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text) if t]


def slug(text: str) -> str:
    """An id for a heading: lower case, runs of other characters as one hyphen."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


# ---- figures --------------------------------------------------------------------------------------------------------
def drawing_problem() -> str | None:
    """None when matplotlib can draw a PNG here (a tiny figure, drawn in memory as figures.py draws); else one line
    saying why not (a backend error, a missing font cache, ...)."""
    try:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(1, 1))
        fig.add_subplot().plot([0, 1], [0, 1])
        fig.savefig(io.BytesIO(), format="png", dpi=10)
    except Exception as exc:  # noqa: BLE001 - whatever matplotlib raises, the page is written without figures
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return None


def figure_html(path: Path) -> str:
    """A PNG as an embedded `<figure>` (its bytes as a base64 data: URI); one line instead when it cannot be read
    or is not a PNG."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return f'<p class="problem">{html.escape(path.name)} could not be read ({html.escape(exc.strerror or str(exc))}).</p>'
    if not data.startswith(PNG_SIGNATURE):
        return f'<p class="problem">{html.escape(path.name)} is not a PNG; not shown.</p>'
    name = html.escape(path.name)
    alt = html.escape(path.stem.replace("_", " "))
    return (
        f'<figure><img alt="{alt}" src="data:image/png;base64,{base64.b64encode(data).decode("ascii")}">'
        f"<figcaption>{name}</figcaption></figure>"
    )


# ---- pages ----------------------------------------------------------------------------------------------------------
_STYLE = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:#1f2328;
max-width:1500px;margin:0 auto;padding:1.5em 2em;background:#fff}
h1{font-size:1.7em;border-bottom:1px solid #d0d7de;padding-bottom:.3em}
h2{font-size:1.35em;border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:2em}
h3{font-size:1.15em}h4{font-size:1em}
.scroll{overflow-x:auto;max-width:100%}
.scroll td:first-child,.scroll th:first-child{position:sticky;left:0;background:#fff;z-index:1}
.scroll thead th:first-child{background:#f6f8fa}
.scroll tbody tr:nth-child(2n) td:first-child{background:#f6f8fa}
details{margin:.4em 0}summary{cursor:pointer;font-weight:600}
ol.settings{columns:2;font-size:.9em}
table{border-collapse:collapse;margin:1em 0;font-variant-numeric:tabular-nums;font-size:.93em}
th,td{border:1px solid #d0d7de;padding:.3em .45em}
td{white-space:normal}td:first-child{white-space:nowrap}
thead th{background:#f6f8fa;cursor:pointer;user-select:none;vertical-align:bottom}
thead th:hover{background:#eaeef2}
thead th[aria-sort=ascending]::after{content:" \\25B2";font-size:.75em}
thead th[aria-sort=descending]::after{content:" \\25BC";font-size:.75em}
tbody tr:nth-child(2n){background:#f6f8fa}
code{font:.9em ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#eff1f3;padding:.1em .3em;
border-radius:4px}
pre{background:#f6f8fa;padding:.8em;overflow-x:auto}pre code{background:none;padding:0}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #d0d7de}
figcaption{font-size:.85em;color:#59636e}
.problem{color:#9a6700;background:#fff8c5;padding:.4em .6em;border-left:3px solid #d4a72c}
nav ul{display:flex;flex-wrap:wrap;gap:0 1.5em;list-style:none;padding-left:0}
.hint{font-size:.85em;color:#59636e}
"""
# sorts a table by the clicked (or Enter-pressed) header: numbers by value ("< 0.0001" as 0.0001, "−" as a minus),
# then text, empty and "—" cells last in either direction; a second click reverses
_SCRIPT = """
(function () {
  function key(cell) {
    var t = cell.textContent.trim().replace(/\\u2212/g, "-");
    var m = t.match(/^[<>\\u2248~]?\\s*([+-]?\\d+(?:\\.\\d+)?(?:e[+-]?\\d+)?)/i);
    if (m) return [0, parseFloat(m[1]), t];
    return [t === "" || t === "\\u2014" ? 2 : 1, 0, t.toLowerCase()];
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.querySelectorAll("thead th"), body = table.tBodies[0];
    heads.forEach(function (th, col) {
      th.tabIndex = 0;
      function sort() {
        var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
        heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (r, s) {
          var a = key(r.cells[col] || r), b = key(s.cells[col] || s);
          if (a[0] !== b[0]) return a[0] - b[0];
          if (a[1] !== b[1]) return dir * (a[1] - b[1]);
          return dir * (a[2] < b[2] ? -1 : a[2] > b[2] ? 1 : 0);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sort(); }
      });
    });
  });
})();
"""
# nothing may be fetched: images only from data: URIs, style and script only inline
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"


def document(title: str, body: str) -> str:
    """A complete HTML page: `body` with the inline style and sorting script."""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n{body}\n"
        f"<script>{_SCRIPT}</script>\n</body>\n</html>\n"
    )


def _md_section(path: Path, heading: str, anchor: str) -> str:
    text = path.read_text(encoding="utf-8")
    return f'<section id="{anchor}">\n<h2>{html.escape(heading)}</h2>\n{markdown_to_html(text)}\n</section>'


def _folder_sections(
    folder: Path, files: list[Path], label: str, problem: str | None, plotted: bool, toc: list[tuple[str, str]]
) -> list[str]:
    """The sections of one folder's files: its Markdown files in SECTIONS order, then its figures."""
    out = []
    prefix = f"{label}: " if label else ""
    by_name = {p.name: p for p in files if p.parent == folder}
    known = dict(SECTIONS)
    others = sorted(n for n in by_name if n.endswith(".md") and n not in known)
    for name, heading in [*SECTIONS, *((n, n[: -len(".md")].replace("_", " ").capitalize()) for n in others)]:
        if name in by_name:
            anchor = slug(prefix + heading)
            toc.append((anchor, prefix + heading))
            out.append(_md_section(by_name[name], prefix + heading, anchor))
    pngs = [p for p in files if p.parent == folder and p.suffix == ".png"]
    if pngs or (problem and plotted):
        anchor = slug(prefix + "Figures")
        toc.append((anchor, prefix + "Figures"))
        shown = [figure_html(p) for p in pngs]
        if problem and not pngs:
            shown = [_problem_line(problem)]
        out.append(
            f'<section id="{anchor}">\n<h2>{html.escape(prefix)}Figures</h2>\n' + "\n".join(shown) + "\n</section>"
        )
    return out


def _problem_line(problem: str) -> str:
    return f'<p class="problem">Figures not drawn: matplotlib cannot draw here ({html.escape(problem)}).</p>'


def recipe_page(
    recipe: str,
    root: Path,
    files: list[Path],
    problem: str | None = None,
    plotted: bool = True,
    index: str | None = None,
) -> str:
    """The page of one recipe folder `root` from the files this report wrote under it: the recipe's tables, then
    each setting's (a factor sweep), with figures; `index`: the relative address of the index page, if any."""
    folders = sorted({p.parent for p in files}, key=lambda f: (f != root, natural(f.relative_to(root).as_posix())))
    toc: list[tuple[str, str]] = []
    sections = []
    settings = [f for f in folders if f != root]
    fold = len(settings) >= FOLD_FROM
    for folder in folders if not fold else [f for f in folders if f == root]:
        label = "" if folder == root else folder.relative_to(root).as_posix()
        sections += _folder_sections(folder, files, label, problem, plotted, toc)
    if fold:  # one entry in the contents; each setting's tables behind its own fold, in numeric order
        folded, links = [], []
        for folder in settings:
            label = folder.relative_to(root).as_posix()
            inner: list[tuple[str, str]] = []
            body = "\n".join(_folder_sections(folder, files, label, problem, plotted, inner))
            anchor = slug("setting " + label)
            links.append(f'<li><a href="#{anchor}">{html.escape(label)}</a></li>')
            folded.append(f'<details id="{anchor}"><summary>{html.escape(label)}</summary>\n{body}\n</details>')
        toc.append(("settings", f"Settings ({len(settings)})"))
        sections.append(
            f'<section id="settings">\n<h2>Settings ({len(settings)}): one table each</h2>\n'
            f'<ol class="settings">{"".join(links)}</ol>\n' + "\n".join(folded) + "\n</section>"
        )
    if problem and plotted and not any(p.suffix == ".png" for p in files) and root not in folders:
        sections.append(_problem_line(problem))
    back = f'<p><a href="{html.escape(index, quote=True)}">All recipes and the suite view</a></p>\n' if index else ""
    return document(f"{recipe} — visionbench report", _page_body(recipe, toc, sections, back))


def _page_body(title: str, toc: list[tuple[str, str]], sections: list[str], before: str = "") -> str:
    nav = "".join(f'<li><a href="#{a}">{html.escape(t)}</a></li>' for a, t in toc)
    hint = (
        '<p class="hint">Written by <code>visionbench report --html</code> from the Markdown files beside it; '
        "click a table's header to sort by that column.</p>"
    )
    return (
        f"<h1>{html.escape(title)}</h1>\n{hint}\n{before}"
        + (f"<nav><ul>{nav}</ul></nav>\n" if len(toc) > 1 else "")
        + "\n".join(sections)
    )


def index_page(root: Path, pages: list[tuple[str, Path]], files: list[Path], problem: str | None = None) -> str:
    """index.html at the reported root: a link to every recipe's page, then the suite view (ranks.md and its
    figures) when the report wrote one."""
    links = "".join(
        f'<li><a href="{html.escape(page.relative_to(root).as_posix(), quote=True)}">'
        f'{html.escape(recipe)}</a> <span class="hint">{html.escape(page.relative_to(root).as_posix())}'
        "</span></li>"
        for recipe, page in pages
    )
    toc: list[tuple[str, str]] = [("recipes", "Recipes")]
    sections = [f'<section id="recipes">\n<h2>Recipes</h2>\n<ul>{links}</ul>\n</section>']
    by_name = {p.name: p for p in files if p.parent == root}
    for name, heading in SUITE:
        if name in by_name:
            toc.append((slug(heading), heading))
            sections.append(_md_section(by_name[name], heading, slug(heading)))
    # the critical-difference diagram first
    pngs = sorted(
        (p for p in files if p.parent == root and p.suffix == ".png"), key=lambda p: p.name != "cd_diagram.png"
    )
    if pngs or (problem and "ranks.md" in by_name):
        toc.append(("suite-figures", "Suite figures"))
        shown = [figure_html(p) for p in pngs] if pngs else [_problem_line(problem)]
        sections.append('<section id="suite-figures">\n<h2>Suite figures</h2>\n' + "\n".join(shown) + "\n</section>")
    return document(
        "visionbench report",
        _page_body(f"visionbench report: {len(pages)} recipe{'' if len(pages) == 1 else 's'}", toc, sections),
    )


def check(formats: Iterable[str], suite: bool) -> str | None:
    """Before anything is written: the reason matplotlib cannot draw here (None when it can). Raises the report's
    UsageError when the page cannot be made: no `md` in --format (a page is rendered from the Markdown), or a suite
    view (whose critical-difference diagram is always drawn) where matplotlib cannot draw."""
    if "md" not in formats:
        raise UsageError("--html renders the Markdown the report writes: keep md in --format (e.g. --format md,csv)")
    problem = drawing_problem()
    if problem and suite:
        raise UsageError(
            f"--html: matplotlib cannot draw here ({problem}), and the suite view draws its "
            "critical-difference diagram; fix matplotlib, or pass --no-suite"
        )
    if problem:
        print(f"note: matplotlib cannot draw here ({problem}); the pages are written without figures", file=sys.stderr)
    return problem


def write_pages(
    written: Iterable, results_dir, recipes: dict, problem: str | None = None, plotted: bool = True
) -> list[Path]:
    """Write `report.html` into every recipe folder (`recipes`: {recipe folder: recipe name}) from the files of
    `written` below it, and `index.html` into `results_dir` when it is not itself the one recipe's folder (with the
    suite view the report wrote there). `problem`: why no figure was drawn (`check`). Returns the paths written."""
    written = [Path(p) for p in written]
    root = Path(results_dir)
    folders = sorted({Path(r): name for r, name in recipes.items()}.items(), key=lambda kv: kv[0].as_posix())
    out, pages = [], []
    indexed = len(folders) > 1 or (folders and folders[0][0] != root)
    for folder, name in folders:
        files = [p for p in written if folder in p.parents and p.suffix in (".md", ".png")]
        if not any(p.suffix == ".md" for p in files):  # a recipe the report skipped (no scored metric): no page
            continue
        index = Path(os.path.relpath(root / INDEX, folder)).as_posix() if indexed else None
        page = atomic_write_bytes(folder / PAGE, recipe_page(name, folder, files, problem, plotted, index))
        out.append(page)
        pages.append((name, page))
    if indexed:
        rest = [p for p in written if not any(f in p.parents for f, _ in folders)]
        out.append(atomic_write_bytes(root / INDEX, index_page(root, pages, rest, problem)))
    return out
