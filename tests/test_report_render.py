"""The one table renderer (report/render.py): Markdown escapes `|`, LaTeX escapes its specials, the
marks and alignments come out as every table of the project writes them, and every table goes through it."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from visionbench.report import render

from .helpers import write_recipe


def small(**kwargs) -> render.Table:
    rows = [
        ["relu", render.Cell("98.70 ± 0.42", "bold")],
        ["a|b", render.Cell("97.31", "underline", " (x=1)")],
        ["50%_{#}", "—"],
    ]
    return render.Table(["Act.", "max |Δ| & mean"], rows, **kwargs)


def test_markdown_escapes_pipes_in_header_and_cells_and_marks_only_the_text():
    text = render.markdown(small(title="t", intro=["caption | stays prose"], outro=["after"], notes=["n1", "n2"]))
    assert text == (
        "### t\n\ncaption | stays prose\n\n"
        "| Act. | max \\|Δ\\| & mean |\n|:---|---:|\n| relu | **98.70 ± 0.42** |\n"
        "| a\\|b | <ins>97.31</ins> (x=1) |\n| 50%_{#} | — |\n\nafter\n\nNotes:\n- n1\n- n2\n"
    )


def test_alignment_letters_and_the_default_rule():
    assert render.pipe_table(small(align="--")).splitlines()[1] == "| --- | --- |"  # the benchmarks' rule
    assert render.pipe_table(small(align="c")).splitlines()[1] == "|:---:| --- |"  # a missing letter: default
    assert render.pipe_table(render.Table(["a", "b", "c"], [], align="llr")).splitlines()[1] == "|:---|:---|---:|"


def test_latex_escapes_specials_and_marks_with_booktabs():
    text = render.latex(small(caption="p < 0.05 & 5% of $x_1$", label="digits-vgg4"))
    assert r"\caption{p $<$ 0.05 \& 5\% of \$x\_1\$}" in text and r"\label{tab:digits-vgg4}" in text
    assert r"\begin{tabular}{lr}" in text and r"Act. & max |$\Delta$| \& mean \\" in text
    assert r"relu & \textbf{98.70 $\pm$ 0.42} \\" in text
    assert r"a|b & \underline{97.31} (x=1) \\" in text
    assert r"50\%\_\{\#\} & -- \\" in text
    assert text.startswith("\\begin{table}[t]\n\\centering\n") and text.endswith("\\end{table}\n")
    assert render.tex_escape("\\~^") == r"\textbackslash{}\~{}\^{}"  # one pass: inserted backslashes stay


def test_csv_is_the_data_frame_when_given_else_the_plain_cells(tmp_path):
    assert pd.read_csv(io.StringIO(render.csv_text(small()))).to_dict("list") == {
        "Act.": ["relu", "a|b", "50%_{#}"],
        "max |Δ| & mean": ["98.70 ± 0.42", "97.31 (x=1)", "—"],
    }
    data = pd.DataFrame({"act": ["relu"], "mean": [98.7012345678]})
    paths = render.write(small(data=data), tmp_path / "table", ("csv", "md"))
    assert [p.name for p in paths] == ["table.csv", "table.md"]
    assert paths[0].read_text() == "act,mean\nrelu,98.7012345678\n"
    with pytest.raises(ValueError, match="unknown table format.*pdf"):
        render.write(small(), tmp_path / "x", ("md", "pdf"))
    assert not (tmp_path / "x.md").exists()
    with pytest.raises(ValueError, match="unknown mark"):
        render.Cell("1", "italic")


def test_every_table_of_the_project_goes_through_the_renderer(tmp_path, monkeypatch):
    """A pipe in any cell comes out escaped: per recipe, suite, papers and benchmark tables."""
    from visionbench.bench import timing
    from visionbench.report import main, papers, published, suite

    assert (
        timing.markdown(["act", "max |Δ| vs ref"], [["a|b", 1.5e-6], ["c", None]])
        == "| act | max \\|Δ\\| vs ref |\n| --- | --- |\n| a\\|b | 1.5e-06 |\n| c | — |"
    )
    pi = pd.DataFrame([{"act": "x|y", "block": "all", "p_improve": 0.5, "ci_low": 0.1, "ci_high": 0.9, "n_blocks": 2}])
    assert "| x\\|y | 0.50 [0.10, 0.90] (2) |" in suite.improvement_markdown(pi, "relu")
    rows = published.recompute(papers.select("001", "1"))
    rows.loc[0, "note"] = "a | b"
    assert "a \\| b |" in papers.markdown(rows, "student")
    write_recipe(tmp_path, "r", {"relu": [90.0, 91.0], "gelu": [92.0, 93.0]})
    assert main([str(tmp_path / "r"), "--no-plots"]) == 0
    assert "| gelu | 2 | **92.50 ± 0.71** |" in (tmp_path / "r" / "table.md").read_text()
