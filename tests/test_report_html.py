"""`visionbench report … --html` (docs/report.md, "One page: --html"): one self-contained report.html per recipe
folder, rendered from the Markdown the report writes, and index.html at the reported root.

Checked on synthetic trees (tests/helpers.py, no training): the page's table cells and sentences are table.md's,
character for character; its tables are sortable; it loads nothing from anywhere (every src is a data: URI that
decodes as a PNG, no script, style or font from outside); the index links every recipe and carries the suite view
(ranks and the critical-difference diagram); a matplotlib that cannot draw gives a page without figures and one line,
never a traceback; and in a real browser (chromium headless, skipped without it) the page logs no console error, has
no broken image, sorts on a click, and is screenshotted. The committed default's page is checked in
tests/test_committed_results.py (the one test file that reads the repository's results/)."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from visionbench.report import html as page
from visionbench.report.command import main as report

from .helpers import write_recipe, write_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (make browser installs Debian's)")
ACTS = {"relu": [97.1, 97.5, 96.9], "gelu": [97.6, 97.9, 97.2], "rational": [95.0, 95.4, 94.9]}


class Page(HTMLParser):
    """What a test reads from a page: its tables (rows of cell texts, header first), the text of its headings,
    paragraphs and list items, every tag's src / href, and the tags."""

    BLOCKS = {"p", "li", "h1", "h2", "h3", "h4", "h5", "h6", "figcaption", "pre"}

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self.blocks: list[str] = []
        self.links: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.tags: list[tuple[str, dict]] = []
        self.classes: list[str] = []
        self._cell: list[str] | None = None
        self._block: list[list[str]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        self.links += [(tag, k, v) for k, v in attrs.items() if k in ("src", "href", "srcset", "data", "action")]
        if tag == "table":
            self.tables.append([])
            self.classes.append(attrs.get("class", ""))
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag in self.BLOCKS:
            self._block.append([])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag in self.BLOCKS and self._block:
            self.blocks.append(" ".join("".join(self._block.pop()).split()))

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        for block in self._block:
            block.append(data)


def md_tables(text: str) -> list[list[list[str]]]:
    """The pipe tables of a Markdown file as rows of plain cell texts (the rule row dropped; `\\|` a pipe; the
    report's emphasis, `**…**` and `<ins>…</ins>`, taken off), read without the page's converter."""
    tables, rows = [], None
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
            if all(re.fullmatch(r":?-+:?", c) for c in cells):
                continue
            cells = [re.sub(r"(?<!\*)\*\*([^\s*](?:.*?[^\s*])?)\*\*(?!\*)", r"\1", c) for c in cells]
            cells = [c.replace("<ins>", "").replace("</ins>", "") for c in cells]
            rows = rows if rows is not None else []
            rows.append([c.replace("`", "") for c in cells])
        elif rows is not None:
            tables.append(rows)
            rows = None
    return tables


def md_sentences(text: str) -> list[str]:
    """Every line of a Markdown file that is not a table row, as plain text (list marks, heading hashes, code ticks
    and the legend's emphasis taken off)."""
    out = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("|"):
            continue
        line = re.sub(r"^(#+|-) ", "", line).replace("`", "").replace("**bold**", "bold")
        out.append(" ".join(line.replace("<ins>", "").replace("</ins>", "").split()))
    return out


def same_text(page_file: Path, md_files: list[Path]) -> None:
    """Every table of the md files is a table of the page, cell by cell, in order; every sentence is a page block."""
    html = Page(page_file.read_text(encoding="utf-8"))
    expected = [t for f in md_files for t in md_tables(f.read_text(encoding="utf-8"))]
    assert expected, "no table in the Markdown"
    assert html.tables[: len(expected)] == expected
    blocks = set(html.blocks)
    for f in md_files:
        for sentence in md_sentences(f.read_text(encoding="utf-8")):
            assert sentence in blocks, f"{f.name}: {sentence!r} is not a paragraph, item or heading of the page"


def assert_offline(text: str, n_images: int | None = None) -> None:
    """Nothing in the page loads from anywhere: every src a data: URI of a PNG that decodes, no <link>, no external
    script or style or font, links only to anchors and files beside it; a CSP forbids anything else."""
    from PIL import Image

    html = Page(text)
    for tag, attr, value in html.links:
        if tag == "img" and attr == "src":
            assert value.startswith("data:image/png;base64,"), value[:80]
            data = base64.b64decode(value.split(",", 1)[1], validate=True)
            assert data.startswith(page.PNG_SIGNATURE)
            with Image.open(io.BytesIO(data)) as image:
                image.verify()
        elif tag == "a" and attr == "href":
            assert not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//", value), value
        else:
            raise AssertionError(f"<{tag} {attr}={value[:80]!r}> loads a resource")
    assert not [t for t, _ in html.tags if t in ("link", "iframe", "object", "embed", "base", "video", "audio")]
    assert not re.search(r"url\(|@import|https?://", text.split("<body>")[0]), "the style loads something"
    assert "default-src 'none'; img-src data:" in text
    if n_images is not None:
        assert sum(1 for t, _ in html.tags if t == "img") == n_images


# ---- the Markdown converter -------------------------------------------------------------------------------------------
def test_the_converter_renders_what_the_report_writes():
    md = (
        "### a — b\n\nA caption: * p < 0.05, ** < 0.01, *** < 0.001, **** < 0.0001. Best mean **bold**, "
        "second <ins>underlined</ins>, `code_x` and *italic*.\n\n"
        "| Act. | p | note |\n|:---|---:|:---:|\n| **re\\|lu** | < 0.0001 (****) | <ins>x</ins> |\n| a | 0.0043 (**) |\n\n"
        "Verdicts (α = 0.05):\n- one & <two>\n- three\n  continued\n\n    indented code <x>\n\n```\nfenced | code\n```\n"
        "[per_example.md](per_example.md) and [site](https://example.com) ![fig](https://example.com/x.png)\n"
    )
    out = page.markdown_to_html(md)
    assert '<h3 id="a-b">a — b</h3>' in out
    assert (
        "* p &lt; 0.05, ** &lt; 0.01, *** &lt; 0.001, **** &lt; 0.0001. Best mean <strong>bold</strong>, second "
        "<ins>underlined</ins>, <code>code_x</code> and <em>italic</em>."
    ) in out
    assert '<td style="text-align:left"><strong>re|lu</strong></td>' in out
    assert (
        '<td style="text-align:right">&lt; 0.0001 (****)</td>\n<td style="text-align:center"><ins>x</ins></td>' in out
    )
    assert '<td style="text-align:right">0.0043 (**)</td>\n<td style="text-align:center"></td>' in out  # padded row
    assert '<div class="scroll"><table class="sortable">' in out and '<th style="text-align:left" scope="col">' in out
    assert "<p>Verdicts (α = 0.05):</p>" in out and "one &amp; &lt;two&gt;" in out and "three\ncontinued" in out
    assert "indented code &lt;x&gt;" in out and "<pre><code>fenced | code\n</code></pre>" in out
    assert '<a href="per_example.md">per_example.md</a>' in out and "site (https://example.com)" in out
    assert '<span class="alt">[fig]</span>' in out and "<img" not in out and 'href="https' not in out
    # raw HTML other than the few tags the report writes stays text
    assert (
        page.markdown_to_html("<script>x</script> <ins>y</ins>") == "<p>&lt;script&gt;x&lt;/script&gt; <ins>y</ins></p>"
    )


# ---- pages of a report ----------------------------------------------------------------------------------------------
@pytest.fixture
def tree(tmp_path):
    return write_recipe(tmp_path / "runs", "digits_vgg4", ACTS).parent


def test_the_page_shows_table_md_cell_by_cell_and_sorts(tree, capsys):
    assert report([str(tree / "digits_vgg4"), "--html"]) == 0
    folder = tree / "digits_vgg4"
    html_file = folder / page.PAGE
    assert f"wrote {html_file}" in capsys.readouterr().err
    same_text(html_file, [folder / "table.md"])
    text = html_file.read_text(encoding="utf-8")
    assert Page(text).classes == ["sortable"] and 'addEventListener("click", sort)' in text
    assert "<title>digits_vgg4 — visionbench report</title>" in text
    assert_offline(text, n_images=0)
    assert not (folder / page.INDEX).exists()  # the reported root is the recipe's folder: its page is the page


@pytest.mark.plots
def test_figures_are_embedded_and_decode(tmp_path):
    for act, values in ACTS.items():
        for seed, value in enumerate(values):
            write_run(
                tmp_path / "runs",
                "digits_vgg4",
                act,
                seed,
                value,
                epochs=4,
                snapshot_epochs=(0, 3) if act == "rational" else (),
            )
    folder = tmp_path / "runs" / "digits_vgg4"
    assert report([str(folder), "--html"]) == 0
    pngs = sorted(p.name for p in folder.glob("*.png"))
    # the shapes of one run per act, and with --html how the runs trained (losses, validation) beside what they scored
    assert pngs == ["act_shapes_rational_seed0.png", "curves_training.png", "curves_val_top1.png"]
    text = (folder / page.PAGE).read_text(encoding="utf-8")
    assert_offline(text, n_images=len(pngs))
    captions = [b for b in Page(text).blocks if b.endswith(".png")]
    assert sorted(captions) == pngs


@pytest.mark.plots
def test_the_index_links_every_recipe_and_shows_the_suite(tmp_path, capsys):
    root = tmp_path / "runs"
    for i, recipe in enumerate(["digits_vgg4", "digits_vgg8", "digits_resnet32"]):
        write_recipe(
            root, recipe, {act: [v - i * (k == 2) for v in vals] for k, (act, vals) in enumerate(ACTS.items())}
        )
    assert report([str(root), "--html"]) == 0
    index = (root / page.INDEX).read_text(encoding="utf-8")
    hrefs = [v for t, a, v in Page(index).links if t == "a" and not v.startswith("#")]
    assert sorted(hrefs) == [f"{r}/report.html" for r in ("digits_resnet32", "digits_vgg4", "digits_vgg8")]
    for href in hrefs:
        same_text(root / href, [root / Path(href).parent / "table.md"])
        assert_offline((root / href).read_text(encoding="utf-8"))
    same_text(root / page.INDEX, [root / "ranks.md"])
    assert {"Suite view", "Suite view: mean ranks across recipes"} <= set(Page(index).blocks)
    assert "<figcaption>cd_diagram.png</figcaption>" in index
    assert_offline(index, n_images=len(list(root.glob("*.png"))))
    assert (root / "cd_diagram.png").is_file()


def test_a_factor_sweep_is_one_page_with_each_setting(tmp_path):
    from visionbench.results.settings import setting_label

    root = tmp_path / "runs"
    labels = []
    for lsuv in (False, True):
        setting = {"model.lsuv": lsuv}
        labels.append(setting_label(setting))
        for act, values in ACTS.items():
            for seed, value in enumerate(values):  # <recipe>/<setting>/<act>/seed_<k>, as a factor sweep writes
                run = write_run(root, f"digits_vgg4/{labels[-1]}", act, seed, value - lsuv)
                summary = json.loads((run / "summary.json").read_text())
                summary.update(recipe="digits_vgg4", setting=setting)
                (run / "summary.json").write_text(json.dumps(summary))
    folder = root / "digits_vgg4"
    assert report([str(folder), "--html", "--best-of", "model.lsuv"]) == 0
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*.html")) == ["digits_vgg4/report.html"]
    same_text(folder / page.PAGE, [folder / "table.md"] + [folder / label / "table.md" for label in labels])
    assert f"{labels[1]}: Significance table" in Page((folder / page.PAGE).read_text()).blocks


def test_where_matplotlib_cannot_draw_the_page_says_so_in_one_line(tree, monkeypatch, capsys):
    from matplotlib.figure import Figure

    def broken(*args, **kwargs):
        raise RuntimeError("backend 'nonesuch' cannot draw\nsecond line")

    monkeypatch.setattr(Figure, "savefig", broken)
    folder = tree / "digits_vgg4"
    write_run(tree, "digits_vgg4", "relu", 3, 97.0, epochs=3)  # a metrics.csv: plots on by default
    assert report([str(folder), "--html"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert (
        "note: matplotlib cannot draw here (RuntimeError: backend 'nonesuch' cannot draw); the pages are written "
        "without figures" in err
    )
    text = (folder / page.PAGE).read_text(encoding="utf-8")
    assert (
        "Figures not drawn: matplotlib cannot draw here (RuntimeError: backend 'nonesuch' cannot draw)."
        in Page(text).blocks
    )
    assert "<img" not in text and not list(folder.glob("*.png"))
    same_text(folder / page.PAGE, [folder / "table.md"])

    write_recipe(tree, "digits_vgg8", ACTS)  # a suite always draws its diagram: refused before anything is written
    assert report([str(tree), "--html"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert err.startswith("visionbench report: error: --html: matplotlib cannot draw here (RuntimeError: backend")
    assert not (tree / "digits_vgg8" / "table.md").exists() and not (tree / page.INDEX).exists()


def test_html_without_markdown_is_refused_in_one_line(tree, capsys):
    assert report([str(tree / "digits_vgg4"), "--html", "--format", "csv"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "visionbench report: error: --html renders the Markdown the report writes: keep md in --format "
        "(e.g. --format md,csv)"
    )
    assert not list((tree / "digits_vgg4").glob("table.*"))


# ---- in a browser -----------------------------------------------------------------------------------------------------
HARNESS = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body><pre id="result">pending</pre>
<iframe id="page" src="{src}" width="1280" height="2000"></iframe>
<script>
document.getElementById("page").addEventListener("load", function () {{
  var out = document.getElementById("result");
  try {{
    var doc = this.contentDocument, images = Array.prototype.slice.call(doc.images);
    var table = doc.querySelector("table.sortable"), th = table.querySelectorAll("thead th")[0];
    function column() {{ return Array.prototype.map.call(table.tBodies[0].rows, function (r) {{
      return r.cells[0].textContent; }}); }}
    var before = column(); th.click(); var up = column(); th.click(); var down = column();
    var wide = Array.prototype.map.call(doc.querySelectorAll("div.scroll"), function (d) {{
      var t = d.querySelector("table"), first = t.querySelector("th");
      return {{fits: t.scrollWidth <= d.clientWidth + 1,
              sticky: doc.defaultView.getComputedStyle(first).position === "sticky"}}; }});
    out.textContent = JSON.stringify({{images: images.length, tables: doc.querySelectorAll("table.sortable").length,
      first_fits: wide.length ? wide[0].fits : true,
      cut: wide.filter(function (w) {{ return !w.fits && !w.sticky; }}).length,
      broken: images.filter(function (i) {{ return !i.complete || i.naturalWidth === 0; }}).length,
      before: before, up: up, down: down, sort: th.getAttribute("aria-sort")}});
  }} catch (e) {{ out.textContent = "error: " + e; }}
}});
</script></body></html>
"""
BROWSER = [
    CHROMIUM or "chromium",
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--enable-logging=stderr",
    "--v=0",
    "--no-first-run",
    "--disable-extensions",
]


def in_browser(html_file: Path, tmp_path: Path) -> tuple[dict, list[str]]:
    """Load `html_file` in headless chromium inside an iframe of a harness page: (what the harness read from its DOM —
    the number of images and broken ones, the first column before and after two clicks on its header — and the
    console messages chromium logged), and a screenshot of the page alone at tmp_path/screenshot.png."""
    harness = tmp_path / "harness.html"
    harness.write_text(HARNESS.format(src=html_file.resolve().as_uri()), encoding="utf-8")
    profile = tmp_path / "profile"
    run = subprocess.run(
        [*BROWSER, f"--user-data-dir={profile}", "--allow-file-access-from-files", "--dump-dom", harness.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r'<pre id="result">(.*?)</pre>', run.stdout, re.S)
    assert found, f"chromium dumped no result (exit {run.returncode}): {run.stderr[-2000:]}"
    assert not found.group(1).startswith(("pending", "error")), found.group(1)
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    shot = tmp_path / "screenshot.png"
    subprocess.run(
        [
            *BROWSER,
            f"--user-data-dir={profile}",
            f"--screenshot={shot}",
            "--window-size=1280,2400",
            html_file.resolve().as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.is_file() and shot.read_bytes().startswith(page.PNG_SIGNATURE)
    return json.loads(found.group(1)), console


def check_in_browser(html_file: Path, tmp_path: Path, n_images: int) -> dict:
    """The page in chromium: no console message (an error, a blocked load), every image drawn, the first table sorts
    on a click and reverses on a second."""
    seen, console = in_browser(html_file, tmp_path)
    assert console == [], console
    assert seen["images"] == n_images and seen["broken"] == 0
    assert seen["up"] == sorted(seen["before"], key=str.lower) and seen["down"] == seen["up"][::-1]
    assert seen["sort"] == "descending"
    # at 1280 px the significance table fits whole, and a wider table keeps its first column in view as it scrolls
    assert seen["first_fits"] and seen["cut"] == 0, seen
    return seen


@needs_chromium
@pytest.mark.plots
def test_the_page_in_a_browser(tmp_path):
    for act, values in ACTS.items():
        for seed, value in enumerate(values):
            write_run(
                tmp_path / "runs",
                "digits_vgg4",
                act,
                seed,
                value,
                epochs=4,
                snapshot_epochs=(0, 3) if act == "rational" and seed == 0 else (),
            )
    folder = tmp_path / "runs" / "digits_vgg4"
    assert report([str(folder), "--html"]) == 0
    seen = check_in_browser(folder / page.PAGE, tmp_path, n_images=3)
    assert seen["tables"] == 1 and sorted(seen["before"]) == sorted(ACTS)


def test_visionbench_run_writes_the_page_after_its_sweep(tmp_path, monkeypatch):
    """`visionbench run` reports its recipe with --html (make run leaves runs/digits_vgg4/report.html); training
    replaced by a stand-in, as in tests/test_ddp_rank0.py."""
    from visionbench.cli import main as cli
    from visionbench.train import run as one_run

    from .helpers import shrunk

    def fake(cfg, run_dir, progress=True):
        value = 50.0 + cfg["seed"] + (cfg["act"] == "gelu")
        return one_run.RunResult(rows=[{"epoch": 1, "val_top1": value, "train_loss": 1.0}], params=10)

    monkeypatch.setattr(one_run, "train_run", fake)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert cli(["run", *shrunk("act=relu,gelu", "seeds=2", "epochs=1"), f"results_dir={tmp_path}"]) == 0
    folder = tmp_path / "digits_vgg4"
    same_text(folder / page.PAGE, [folder / "table.md"])
