"""`visionbench report` end to end on a written results tree: tables agree. Its errors on a bad
flag or results dir: test_bad_inputs.py."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from visionbench.report import load_runs, main, summarize, tables

from .helpers import write_recipe, write_run

VALUES = {
    "relu": [90.0, 90.4, 89.8, 90.1, 90.3],
    "gelu": [90.9, 91.2, 90.7, 91.0, 91.4],
    "silu": [90.2, 90.6, 89.9, 90.5, "diverged"],
    "rational": ["diverged", "diverged", "failed"],
    "mish": [91.0],
}


@pytest.fixture
def tree(tmp_path):
    write_recipe(tmp_path, "cifar10_vgg8", VALUES, epochs=4)
    write_run(tmp_path, "cifar10_vgg8", "hermite", 0, 91.6, epochs=4, snapshot_epochs=(0, 3), act_params=8)
    write_run(tmp_path, "cifar10_vgg8", "hermite", 1, 91.9, epochs=4, snapshot_epochs=(0, 3), act_params=8)
    write_run(tmp_path, "cifar10_vgg8", "hermite", 2, 99.0, status="running")
    write_recipe(tmp_path, "digits_vgg4", {"gelu": [97.0, 97.5, 98.0], "tanh": [96.0, 96.2, 95.9]}, baseline="gelu")
    return tmp_path


def parse_md(text: str) -> dict[str, list[str]]:
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| Act.")]
    out = {}
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        cells = [re.sub(r"\*\*(.*)\*\*|<ins>(.*)</ins>", lambda m: m.group(1) or m.group(2), c) for c in cells]
        out[cells[0]] = cells
    return out


def parse_tex(text: str) -> dict[str, list[str]]:
    body = text.split("\\midrule\n")[1].split("\\bottomrule")[0]
    out = {}
    for line in body.strip().splitlines():
        cells = [c.strip() for c in line.removesuffix(r"\\").split(" & ")]
        cells = [re.sub(r"\\(textbf|underline)\{(.*)\}", r"\2", c) for c in cells]
        cells = [c.replace(r"$\pm$", "±").replace("$<$", "<").replace(r"\_", "_").replace("--", "—") for c in cells]
        out[cells[0].strip()] = cells
    return out


def fmt(x, digits=2, sign=False):
    return "" if pd.isna(x) else (f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}")


@pytest.mark.plots
def test_report_end_to_end_md_csv_tex_carry_the_same_numbers(tree, capsys):
    assert main([str(tree), "--extras"]) == 0
    out, err = capsys.readouterr()
    recipe = tree / "cifar10_vgg8"
    md, tex = (recipe / "table.md").read_text(), (recipe / "table.tex").read_text()
    csv = pd.read_csv(recipe / "table.csv", keep_default_na=False, na_values=[""]).set_index("act")
    assert md in out and "### digits_vgg4" in out  # both recipes printed
    assert "hermite/seed_2: still running; ignored" in err and "hermite/seed_2" in md
    assert {
        "act",
        "n",
        "mean",
        "std",
        "diff",
        "p_value",
        "stars",
        "n_diverged",
        "n_failed",
        "p_holm",
        "cohen_d",
        "ci_low",
        "ci_high",
    } <= set(csv.columns) | {"act"}
    md_rows, tex_rows = parse_md(md), parse_tex(tex)
    assert md_rows == tex_rows  # same cells, only the markup differs
    assert set(md_rows) == set(csv.index) == {"relu", "gelu", "silu", "rational", "mish", "hermite"}
    for act, r in csv.iterrows():
        cells = md_rows[act]
        assert cells[1] == str(r["n"])
        if r["n"] >= 2:
            assert cells[2] == f"{fmt(r['mean'])} ± {fmt(r['std'])}"
        if not r["is_baseline"]:
            assert cells[3] == fmt(r["diff"], sign=True)
        if np.isfinite(r["p_value"]):
            p = float(re.match(r"([\d.]+)", cells[4].removeprefix("< ")).group(1))
            assert p == pytest.approx(r["p_value"], abs=5e-5) and cells[4].endswith(f"({r['stars']})")
            assert cells[5].endswith(f"({r['stars_holm']})") and cells[6] == fmt(r["cohen_d"], sign=True)
            assert cells[7] == f"[{fmt(r['ci_low'], sign=True)}, {fmt(r['ci_high'], sign=True)}]"
        assert (cells[8], cells[9]) == (str(r["n_diverged"]), str(r["n_failed"]))
    # the numbers are the statistics of the values written
    assert csv.loc["gelu", "mean"] == pytest.approx(np.mean(VALUES["gelu"]))
    assert csv.loc["silu", "n"] == 4 and csv.loc["silu", "n_diverged"] == 1
    assert md_rows["rational"][2] == "NaN (2/3 diverged, 1/3 failed)" and md_rows["rational"][4] == "no completed run"
    assert md_rows["mish"][2] == "91.00" and md_rows["mish"][4] == "n<2"
    assert md_rows["relu"][4] == "—" and csv.loc["relu", "mark"] == "baseline"
    assert "**91.75 ± 0.21**" in md and r"\textbf{91.75 $\pm$ 0.21}" in tex  # hermite best
    assert "<ins>91.04 ± 0.27</ins>" in md and r"\underline{91.04 $\pm$ 0.27}" in tex  # gelu second
    assert csv.loc["hermite", "act_params"] == 8
    digits = pd.read_csv(tree / "digits_vgg4" / "table.csv").set_index("act")
    assert digits["baseline"].unique().tolist() == ["gelu"] and "tanh" in digits.index
    for png in ("curves_val_top1.png", "act_shapes_hermite_seed0.png"):
        assert (recipe / png).stat().st_size > 5000


def test_report_without_extras_and_subset_of_formats(tree, capsys):
    recipe = tree / "cifar10_vgg8"
    assert main([str(recipe), "--format", "csv", "--no-plots", "--test", "welch", "--baseline", "gelu"]) == 0
    out = capsys.readouterr().out
    assert "Welch" in out and "Cohen" not in out and "Δ vs gelu" in out
    assert sorted(p.name for p in recipe.iterdir() if p.is_file()) == ["table.csv"]
    csv = pd.read_csv(recipe / "table.csv").set_index("act")
    assert csv.loc["gelu", "is_baseline"] and set(csv["test"]) == {"welch"}
    assert "cohen_d" in csv.columns  # extras are always in the CSV


def test_a_run_without_a_summary_is_named_in_a_note_before_the_error(tmp_path, capsys):
    write_run(tmp_path, "cifar10_vgg8", "relu", 0, 90.0, summary=False)
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no finished run (summary.json)" in err and "relu/seed_0: no summary.json" in err


def test_explicit_baseline_absent_from_one_recipe_marks_that_recipe(tree, capsys):
    assert main([str(tree), "--baseline", "relu", "--no-plots"]) == 0
    digits = (tree / "digits_vgg4" / "table.md").read_text()
    assert "no baseline" in digits and "baseline 'relu' has no run here" in digits
    assert "(no baseline: no tests)" in digits


def test_all_diverged_recipe_and_nan_metrics_do_not_crash(tmp_path, capsys):
    write_recipe(tmp_path, "r", {"relu": ["diverged", "diverged"], "gelu": ["failed", "diverged"]})
    write_run(tmp_path, "r", "silu", 0, metrics={"val_top1_best": float("nan")})
    assert main([str(tmp_path / "r"), "--extras"]) == 0
    md = (tmp_path / "r" / "table.md").read_text()
    assert "NaN (2/2 diverged)" in md and "NaN (1/2 diverged, 1/2 failed)" in md
    assert "NaN (1/1 without metric)" in md and "silu: 1 completed run(s) without a finite val_top1_best" in md


def test_load_runs_and_summarize_api(tree):
    runs = load_runs(tree)
    assert set(runs.recipe) == {"cifar10_vgg8", "digits_vgg4"} and len(runs) == 21 + 6  # running run left out
    table = summarize(runs, "val_top1_best")
    assert table.groupby("recipe").baseline.first().to_dict() == {"cifar10_vgg8": "relu", "digits_vgg4": "gelu"}
    assert math.isnan(table.set_index(["recipe", "act"]).loc[("cifar10_vgg8", "rational"), "mean"])
    assert tables.format_p(0.00001, "****") == "< 0.0001 (****)" and tables.format_p(0.0345, "*") == "0.0345 (*)"


def test_declared_baseline_without_runs_falls_back_with_a_note(tmp_path, capsys):
    write_recipe(tmp_path, "r", {"gelu": [90.0, 90.5], "silu": [91.0, 91.2]}, baseline="leaky_relu")
    assert main([str(tmp_path / "r"), "--no-plots"]) == 0
    md = (tmp_path / "r" / "table.md").read_text()
    assert "Δ vs gelu" in md and "the summaries name baseline leaky_relu, which has no run here; using gelu" in md


def test_help_prints_every_option_including_the_curve_metrics(capsys):
    assert main(["--help"]) == 0  # argparse %-formats help: a bare "X % of" in it raised TypeError
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps to the terminal's width
    assert "epochs_to_<X> (X % of the run's own best val_top1)" in out and "--best-of" in out


def test_runs_of_different_configurations_get_no_test_interval_or_verdict(tmp_path):
    """relu pooled from two configurations; the table keeps the means, drops every comparison."""
    import json

    root = write_recipe(tmp_path, "toy", {"relu": [90.0, 90.4, 89.8, 90.1], "gelu": [91.5, 91.9, 91.4, 91.8]})
    from visionbench.results import layout
    from visionbench.results.identity import config_hash

    for summary in root.glob("*/seed_*/summary.json"):
        data = json.loads(summary.read_text())
        config = {
            **layout.read_config(summary.parent),
            "epochs": 2 if data["act"] == "relu" and data["seed"] % 2 else 3,
        }
        layout.write_config(summary.parent, config)  # the config and its hash in the summary, as a sweep writes them
        data["config_hash"] = config_hash(config)
        summary.write_text(json.dumps(data))
    assert main([str(root), "--no-plots", "--extras"]) == 0
    md = (root / "table.md").read_text()
    csv = pd.read_csv(root / "table.csv").set_index("act")
    gelu = csv.loc["gelu"]
    assert gelu["mark"] == "not comparable" and gelu["mean"] == pytest.approx(np.mean([91.5, 91.9, 91.4, 91.8]))
    assert all(pd.isna(gelu[c]) for c in ("p_value", "ci_low", "ci_high", "p_improve", "verdict", "cohen_d"))
    assert gelu["verdict_text"] == "gelu: no verdict against relu (not comparable: no test)."
    row = parse_md(md)["gelu"]
    assert row[4] == "not comparable" and row[7] == "" and "better" not in md
    assert "NOT COMPARABLE: the runs differ in more than act and seed" in md
    assert "`not comparable`: the runs of this table differ in more than act and seed" in md
