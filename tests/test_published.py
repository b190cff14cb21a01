"""The papers' published tables shipped as data (docs/report.md, "Published numbers"): every number reads back from the
paper's text, `visionbench papers` recomputes p from mean ± std (n), and `visionbench report
--published` puts the paper's number beside ours."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import ttest_ind_from_stats

from visionbench.config import recipe_names
from visionbench.report import main as report_main
from visionbench.report import published
from visionbench.report.papers import main as papers_main
from visionbench.results.settings import parse_setting_label, setting_label
from visionbench.sweep.acts import parse_acts
from visionbench.sweep.preflight import load_config

from .helpers import write_run

PAPERS = Path(__file__).resolve().parents[1].parent / "shared" / "papers"
needs_papers = pytest.mark.skipif(
    not PAPERS.is_dir(), reason=f"paper texts not found at {PAPERS} (../shared/papers beside the repository)"
)


def raw_rows() -> list[dict]:
    """The shipped CSV as text, untouched by pandas (the numbers exactly as transcribed)."""
    return list(csv.DictReader(io.StringIO(published._raw_text())))


# --- the data: every number is in its paper ---------------------------------------------------------


def _paper_lines(paper: str) -> list[str]:
    (path,) = PAPERS.glob(f"{paper}_*.txt")
    return path.read_text(encoding="utf-8").splitlines()


def _table_window(lines: list[str], paper: str, table: str) -> list[str]:
    """The lines of one table: from its caption to the next caption (003 prints captions below)."""
    if table.startswith("App "):
        start = next(i for i, s in enumerate(lines) if s.startswith(f"Appendix {table[4:]} "))
        end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("Appendix "))
        return lines[start:end]
    captions = [i for i, s in enumerate(lines) if re.match(r"Table \d+:", s)]
    here = next(i for i in captions if lines[i].startswith(f"{table}:"))
    if paper == "003":
        before = max([i for i in captions if i < here], default=here - 20)
        return lines[max(before + 1, here - 20) : here]
    after = min([i for i in captions if i > here], default=here + 30)
    return lines[here : min(after, here + 30)]


def _has_number(line: str, text: str) -> bool:
    line = re.sub(r"\\cellcolor[a-z]+!22", " ", line)  # 004's highlight macro, glued to the number: !2280.16
    return re.search(rf"(?<![\d.]){re.escape(text)}(?![\d])", line) is not None


@needs_papers
@pytest.mark.parametrize(
    "row", raw_rows(), ids=lambda r: f"{r['paper']}-{r['table']}-{r['group']}-{r['label']}-{r['metric']}"
)
def test_every_shipped_number_is_printed_in_its_table(row):
    window = _table_window(_paper_lines(row["paper"]), row["paper"], row["table"])
    word = row["label"].split()[0]
    if row["derived_from"]:  # 000 App H prints PolyNorm's value and the gain over ReLU
        a, b = (s.strip() for s in row["derived_from"].split(" - "))
        assert round(float(a) - float(b), 6) == float(row["mean"])
        needed = [a, b.lstrip("+")]
    else:
        needed = [row["mean"]] + ([row["std"]] if row["std"] else [])
    hits = [s for s in window if word in s and all(_has_number(s, t) for t in needed)]
    assert hits, f"no line of {row['paper']} {row['table']} has {word!r} with {needed}"


# tables whose `label` is the printed row's leading cells (tab-separated in the paper text, joined by a space):
# each number is then checked in its own cell, on its own row, under the header the row's printed_column names
CELL_EXACT = {
    ("001", "Table 3"),
    ("001", "Table 4"),
    ("001", "Table 5"),
    ("001", "Table 6"),
    ("003", "Table 4"),
    ("003", "Table 6"),
}


@needs_papers
@pytest.mark.parametrize(
    "row",
    [r for r in raw_rows() if (r["paper"], r["table"]) in CELL_EXACT],
    ids=lambda r: f"{r['paper']}-{r['table']}-{r['label']}-{r['metric']}",
)
def test_each_number_sits_in_its_printed_cell(row):
    """001 Tables 3-6 and 003 Tables 4, 6 print one number per cell (no std, no n): the row whose
    leading cells are the label holds the mean, as printed, in the column `printed_column` names."""
    window = _table_window(_paper_lines(row["paper"]), row["paper"], row["table"])
    cells = [[c.strip() for c in line.split("\t")] for line in window]
    header = next(c for c in cells if row["printed_column"] in c)
    col = header.index(row["printed_column"])
    printed = [
        c
        for c in cells
        if len(c) == len(header) and c is not header and any(" ".join(c[:k]) == row["label"] for k in range(1, col + 1))
    ]
    assert [c[col] for c in printed] == [row["mean"]], (row["label"], printed)
    assert row["std"] == "" and row["n"] == "", "these tables print one number per cell: no std, no n"


def test_the_required_tables_are_all_shipped_in_full():
    counts = published.load().groupby(["paper", "table"]).size().to_dict()
    assert counts == {
        ("000", "App H"): 6,
        ("001", "Table 1"): 12,
        ("001", "Table 2"): 20,
        ("001", "Table 7"): 10,
        ("001", "Table 3"): 30,
        ("001", "Table 4"): 12,
        ("001", "Table 5"): 18,
        ("001", "Table 6"): 6,
        ("003", "Table 4"): 2,
        ("003", "Table 5"): 4,
        ("003", "Table 6"): 3,
        ("004", "Table 1"): 10,
        ("004", "Table 2"): 24,
        ("004", "Table 5"): 12,
    }


# typed again from the papers, independently of the CSV: (paper, table, model, act, setting, metric) -> mean, std, n
DOUBLE_ENTRY = {
    ("004", "Table 1", "vgg4", "rational", "", "val_top1_best"): (81.96, 0.33, 5),
    ("004", "Table 1", "vgg8", "silu", "", "val_top1_best"): (78.71, 0.72, 5),
    ("004", "Table 2", "vgg4", "rational[init=leaky_relu]", "model.norm=null", "val_top1_best"): (90.62, 0.13, 5),
    ("004", "Table 2", "vgg8", "rational[init=gelu]", "model.norm=group", "val_top1_best"): (92.13, 0.31, 5),
    ("004", "Table 2", "vgg8", "gelu", "model.norm=group", "val_top1_best"): (92.21, 0.24, 5),
    ("004", "Table 5", "swin_t", "gelu", "", "ema_val_top1_best"): (60.76, math.nan, 1),
    ("004", "Table 5", "vit_s8_nonorm", "rational", "", "ema_val_top1_best"): (61.24, math.nan, 1),
    ("004", "Table 5", "vit_s8_nonorm", "gelu", "", "ema_val_top1_best"): (math.nan, math.nan, 1),
    ("001", "Table 1", "convnext_t", "hermite", "", "val_top1_final"): (82.22, 0.064, 5),
    ("001", "Table 1", "convnext_t", "fourier", "", "val_top1_final"): (81.64, 0.153, 5),
    ("001", "Table 2", "gpt2_124m", "hermite", "", "val_loss_final"): (2.932, 0.0175, 5),
    ("001", "Table 7", "resnet50", "relu", "", "val_top1_final"): (88.9, 0.04, 3),
    ("001", "Table 7", "convnext_t", "gelu", "", "val_top1_final"): (90.47, 0.20, 10),
    ("000", "App H", "resnet50", "relu", "", "val_top1_final"): (75.117 - 0.204, math.nan, 1),
    ("000", "App H", "resnet50", "polynorm", "", "val_top5_final"): (92.099, math.nan, 1),
    ("003", "Table 5", "resnet32", "slaf", "", "test_error"): (8.50, math.nan, math.nan),
    ("003", "Table 4", "mnist_cnn", "slaf", "", "test_top1_at_best_val"): (99.55, math.nan, math.nan),
    ("003", "Table 6", "fmnist_resnet", "slaf[swap_layers=last]", "", "test_top1_at_best_val"): (
        93.71,
        math.nan,
        math.nan,
    ),
    ("001", "Table 3", "convnext_t", "tropical[degree=1]", "", "val_top1_final"): (81.60, math.nan, math.nan),
    ("001", "Table 3", "convnext_t", "fourier[degree=5]", "", "val_top5_final"): (95.41, math.nan, math.nan),
    ("001", "Table 3", "convnext_t", "hermite[degree=2]", "", "train_loss_final"): (2.833, math.nan, math.nan),
    ("001", "Table 4", "convnext_t", "fourier[init=gelu]", "", "val_top1_final"): (81.91, math.nan, math.nan),
    ("001", "Table 4", "convnext_t", "hermite[init=gelu]", "", "val_top1_final"): (82.04, math.nan, math.nan),
    ("001", "Table 5", "convnext_t", "tropical[learnable=false]", "", "train_loss_final"): (3.560, math.nan, math.nan),
    ("001", "Table 5", "convnext_t", "hermite[learnable=false]", "", "val_top1_final"): (78.48, math.nan, math.nan),
    ("001", "Table 6", "convnext_t", "hermite[clamp=true]", "", "val_top1_final"): (81.98, math.nan, math.nan),
    ("001", "Table 6", "convnext_t", "hermite", "", "val_top5_final"): (96.03, math.nan, math.nan),
}


def test_double_entry_of_key_rows():
    rows = published.load()
    for (paper, table, model, act, setting, metric), expected in DOUBLE_ENTRY.items():
        hit = rows[
            (rows.paper == paper)
            & (rows.table == table)
            & (rows.model == model)
            & (rows.activation == act)
            & (rows.setting == setting)
            & (rows.metric == metric)
        ]
        assert len(hit) == 1, (paper, table, model, act, metric)
        got = tuple(hit.iloc[0][["mean", "std", "n"]])
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9, err_msg=str((paper, table, model, act)))


def _runs_variant(recipe: str, act: str, cfg) -> bool:
    """`act` is a variant of one of the recipe's acts that `visionbench run recipe=R act=ACT` accepts
    (001 Tables 3-6: `hermite[clamp=true]` over imagenet_convnext_t's hermite)."""
    spec = parse_acts(act)[0]
    if spec.family not in [s.label for s in parse_acts(cfg.act)]:
        return False
    load_config([f"recipe={recipe}", f"act={act}"])  # ConfigError (the test fails) if the recipe cannot run it
    return True


def test_rows_use_the_recipes_labels_settings_metrics_and_baselines():
    """A row names a recipe only if that recipe runs its act (one of its acts, or a variant of one
    that `visionbench run recipe=R act=...` accepts), its setting is a non-best_of factor setting
    of the recipe, its top-1 metric is what the recipe reports, and its group's baseline is the
    recipe's report.baseline — or, in an ablation of one activation (001 Tables 3-6), the recipe's
    own configuration of it."""
    rows = published.load()
    assert set(rows["recipe"]) - {""} <= set(recipe_names())
    configs = {r: load_config([f"recipe={r}"]) for r in set(rows["recipe"]) - {""}}
    for _, row in rows[rows["recipe"] != ""].iterrows():
        cfg = configs[row["recipe"]]
        assert row["activation"] in [spec.label for spec in parse_acts(cfg.act)] or _runs_variant(
            row["recipe"], row["activation"], cfg
        ), (row["recipe"], row["activation"])
        setting = parse_setting_label(row["setting"])
        kept = {k: list(v) for k, v in cfg.factors.items() if k not in cfg.report.best_of}
        assert set(setting) == set(kept) and all(v in kept[k] for k, v in setting.items()), row["setting"]
        if "top1" in row["metric"]:
            assert row["metric"] == cfg.report.metric, (row["recipe"], row["metric"])
    for key, group in rows.groupby(["paper", "table", "group", "metric"]):
        assert group["is_baseline"].sum() == 1, key
        base = group[group["is_baseline"]].iloc[0]
        if base["recipe"]:
            families = {parse_acts(a)[0].family for a in group["activation"]}
            ablation = families == {base["activation"]}  # one act's variants against the recipe's own
            assert ablation or base["activation"] == configs[base["recipe"]].report.baseline, key


# --- visionbench papers: p recomputed from the printed statistics -----------------------------------


def test_recomputed_p_equals_scipy_from_stats_and_degenerate_rows_are_marked():
    rows = published.recompute(published.load(paper="001", table="Table 7"))
    four = rows[(rows.activation == "fourier") & (rows.metric == "val_top1_final")].iloc[0]
    assert four["p_value"] == pytest.approx(ttest_ind_from_stats(91.23, 0.65, 10, 90.47, 0.20, 10).pvalue, rel=1e-12)
    resnet = rows[(rows.activation == "relu") & (rows.metric == "val_top1_final")].iloc[0]  # 3 vs 10 seeds
    assert resnet["p_value"] == pytest.approx(ttest_ind_from_stats(88.9, 0.04, 3, 90.47, 0.20, 10).pvalue, rel=1e-12)
    welch = published.recompute(published.load(paper="001", table="Table 7"), "welch")
    four_w = welch[(welch.activation == "fourier") & (welch.metric == "val_top1_final")].iloc[0]
    assert four_w["p_value"] == pytest.approx(
        ttest_ind_from_stats(91.23, 0.65, 10, 90.47, 0.20, 10, equal_var=False).pvalue, rel=1e-12
    )

    marks = published.recompute(published.load()).set_index(["paper", "table", "group", "activation", "metric"])["mark"]
    assert marks[("004", "Table 5", "vit_s8", "rational", "ema_val_top1_best")] == "n=1"
    assert marks[("004", "Table 5", "vit_s8 no norm", "relu", "ema_val_top1_best")] == "diverged (NaN)"
    assert marks[("004", "Table 5", "vit_s8 no norm", "rational", "ema_val_top1_best")] == "n=1"
    assert marks[("000", "App H", "resnet50", "polynorm", "val_top1_final")] == "n=1"
    assert marks[("003", "Table 5", "resnet", "slaf", "test_error")] == "n not stated"
    assert marks[("001", "Table 7", "cifar10", "gelu", "val_top1_final")] == "baseline"
    # 001's ablations: each activation's variants against the recipe's own configuration of it, n not stated
    assert (
        marks[("001", "Table 3", "convnext_t tropical degree", "tropical[degree=1]", "val_top1_final")]
        == "n not stated"
    )
    assert marks[("001", "Table 6", "convnext_t hermite clamp", "hermite", "val_top1_final")] == "baseline"
    assert marks[("003", "Table 4", "mnist_cnn", "slaf", "test_top1_at_best_val")] == "n not stated"


def test_printed_significance_checks_student_holds_welch_does_not_for_two_rows():
    """001 prints Student p-values; they all hold from the printed numbers, but Fourier's ImageNet top-1
    (std 2x GELU's) and Hermite's GPT-2 val loss (std 4.5x) lose a star without the equal-variance assumption."""
    student = published.recompute(published.load(paper="001"))
    assert set(student.loc[student.printed_p != "", "check"]) == {published.HOLDS}
    welch = published.recompute(published.load(paper="001"), "welch")
    failing = welch[welch.check == published.FAILS]
    assert sorted(zip(failing.table, failing.activation)) == [("Table 1", "fourier"), ("Table 2", "hermite")]


@pytest.mark.parametrize(
    "printed, p, low, high, expected",
    [
        ("0.0345 (*)", 0.0331, 0.022, 0.049, published.HOLDS),
        ("0.0345 (*)", 0.06, 0.04, 0.07, published.HOLDS_ROUNDED),
        ("0.0345 (*)", 0.06, 0.055, 0.07, published.FAILS),
        ("< 0.0001 (****)", 3e-7, 1e-7, 5e-7, published.HOLDS),
        ("", 0.01, 0.005, 0.02, ""),
    ],
)
def test_check_compares_stars_then_the_rounding_range(printed, p, low, high, expected):
    assert published.check(printed, p, low, high) == expected


def test_papers_cli_md_and_csv(capsys):
    assert papers_main(["--paper", "4", "--table", "5"]) == 0
    out = capsys.readouterr().out
    assert "### 004 Table 5 — cait_s24" in out and "| n=1 |" in out and "diverged (NaN)" in out
    assert papers_main(["--paper", "001", "--table", "Table 1", "--format", "csv"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out), dtype={"paper": str, "mean": str, "std": str})
    trop = table[(table.activation == "tropical") & (table.metric == "val_top1_final")].iloc[0]
    assert (trop["mean"], trop["std"], trop["printed_p"]) == ("82.17", "0.063", "0.0345 (*)")  # as printed
    assert trop["p_value"] == pytest.approx(ttest_ind_from_stats(82.17, 0.063, 5, 82.06, 0.072, 5).pvalue)
    assert papers_main(["--test", "welch"]) == 0
    assert "Printed significance that does not hold" in capsys.readouterr().out


# --- visionbench report --published -------------------------------------------------------------------


def values_with(mean: float, std: float, n: int) -> list[float]:
    """n values whose mean and sample std (ddof = 1) are exactly `mean` and `std`."""
    z = np.arange(n) - (n - 1) / 2
    return list(mean + std * z / z.std(ddof=1))


def write_runs(
    root,
    recipe: str,
    act: str,
    values,
    metric: str = "val_top1_best",
    setting: dict | None = None,
    report: dict | None = None,
    val_split: float | None = None,
):
    folder = f"{recipe}/{setting_label(setting)}" if setting else recipe
    for seed, v in enumerate(values):
        run = write_run(root, folder, act, seed, metrics={metric: v, "best_epoch": 3})
        s = json.loads((run / "summary.json").read_text())
        s.update(recipe=recipe, setting=setting or {}, baseline=None)
        if report is not None:
            s["report"] = report
        if val_split is not None:
            s["val_split"] = val_split
        (run / "summary.json").write_text(json.dumps(s))


def test_published_columns_give_p_1_for_the_papers_own_numbers(tmp_path, capsys):
    write_runs(tmp_path, "cifar10_vgg4", "rational", values_with(81.96, 0.33, 5))  # 004 Table 1
    write_runs(tmp_path, "cifar10_vgg4", "leaky_relu", values_with(80.0, 0.5, 4))
    write_runs(tmp_path, "cifar10_vgg4", "mish", values_with(80.5, 0.4, 3))  # no published counterpart
    assert report_main([str(tmp_path / "cifar10_vgg4"), "--published", "--no-plots"]) == 0
    table = pd.read_csv(tmp_path / "cifar10_vgg4" / "table.csv").set_index("act")
    rational = table.loc["rational"]
    assert (rational["published_mean"], rational["published_std"], rational["published_n"]) == (81.96, 0.33, 5)
    assert rational["published_p"] == pytest.approx(1.0, abs=1e-9)
    assert rational["published_diff"] == pytest.approx(0.0, abs=1e-9)
    assert rational["published_ref"] == "004 Table 1"
    leaky = table.loc["leaky_relu"]  # Welch from summary statistics, ours vs the paper's 79.19 ± 0.44 (5)
    assert leaky["published_p"] == pytest.approx(
        ttest_ind_from_stats(80.0, 0.5, 4, 79.19, 0.44, 5, equal_var=False).pvalue, rel=1e-9
    )
    assert table.loc["mish", ["published_mean", "published_std", "published_n", "published_p"]].isna().all()
    md = (tmp_path / "cifar10_vgg4" / "table.md").read_text()
    assert "published (004 Table 1)" in md and "81.96 ± 0.33 (n=5); Δ +0.00; p 1.0000 (ns)" in md
    assert "published (004 Table 1)" in capsys.readouterr().out


def test_without_the_flag_no_published_columns(tmp_path):
    write_runs(tmp_path, "cifar10_vgg4", "rational", values_with(81.96, 0.33, 5))
    assert report_main([str(tmp_path / "cifar10_vgg4"), "--no-plots"]) == 0
    assert "published_mean" not in pd.read_csv(tmp_path / "cifar10_vgg4" / "table.csv")


def test_table2_is_matched_in_the_recipe_level_table_best_of_inits(tmp_path, capsys):
    """004 Table 2 prints per GN setting the better of two inits: the recipe-level (layout) table."""
    report = {"metric": "val_top1_best", "best_of": ["model.lsuv"], "baseline": "leaky_relu"}
    for lsuv, shift in ((False, -0.5), (True, 0.0)):  # LSUV wins for rational[init=gelu]
        setting = {"model.norm": None, "model.lsuv": lsuv}
        write_runs(
            tmp_path,
            "cifar10_vgg4_aug",
            "rational[init=gelu]",
            values_with(90.67 + shift, 0.17, 5),
            setting=setting,
            report=report,
        )
        write_runs(
            tmp_path, "cifar10_vgg4_aug", "leaky_relu", values_with(88.5, 0.2, 5), setting=setting, report=report
        )
    root = tmp_path / "cifar10_vgg4_aug"
    assert report_main([str(root), "--published", "--no-plots"]) == 0
    layout = pd.read_csv(root / "table.csv").set_index("act")
    row = layout.loc["rational[init=gelu]"]
    assert (row["column"], row["chosen"]) == ("model.norm=null", "model.lsuv=true")
    assert (row["published_mean"], row["published_std"], row["published_n"]) == (90.67, 0.17, 5)
    assert row["published_p"] == pytest.approx(1.0, abs=1e-9)
    assert "paper model.norm=null" in (root / "table.md").read_text()
    per_setting = root / "model.norm=null,model.lsuv=true"
    assert pd.read_csv(per_setting / "table.csv")["published_mean"].isna().all()
    assert "compared in the recipe-level table" in (per_setting / "table.md").read_text()


def test_n1_published_rows_are_marked_and_other_metrics_or_splits_are_not_compared(tmp_path, capsys):
    ema = {"metric": "ema_val_top1_best", "baseline": "gelu"}
    write_runs(
        tmp_path / "a",
        "tinyimagenet_vit_s8",
        "rational",
        values_with(58.0, 0.3, 3),
        metric="ema_val_top1_best",
        report=ema,
    )
    assert report_main([str(tmp_path / "a"), "--published", "--no-plots"]) == 0
    row = pd.read_csv(tmp_path / "a" / "tinyimagenet_vit_s8" / "table.csv").iloc[0]
    assert (row["published_mean"], row["published_n"], row["published_mark"]) == (58.35, 1, "published n=1")
    assert math.isnan(row["published_p"])
    assert "58.35 (n=1); Δ -0.35; published n=1" in (tmp_path / "a" / "tinyimagenet_vit_s8" / "table.md").read_text()

    # no EMA in these runs: the report scores val_top1_best, which the paper does not report
    write_runs(tmp_path / "b", "tinyimagenet_vit_s8", "rational", values_with(58.0, 0.3, 3), report=ema)
    assert report_main([str(tmp_path / "b"), "--published", "--no-plots"]) == 0
    assert pd.read_csv(tmp_path / "b" / "tinyimagenet_vit_s8" / "table.csv")["published_mean"].isna().all()
    assert (
        "are ema_val_top1_best; this table scores val_top1_best: not compared"
        in (tmp_path / "b" / "tinyimagenet_vit_s8" / "table.md").read_text()
    )

    # a held-out val split is not the paper's test set
    write_runs(
        tmp_path / "c",
        "cifar10_vgg4",
        "rational",
        values_with(81.96, 0.33, 5),
        val_split=0.1,
        report={"metric": "val_top1_best"},
    )
    assert report_main([str(tmp_path / "c"), "--published", "--no-plots"]) == 0
    assert pd.read_csv(tmp_path / "c" / "cifar10_vgg4" / "table.csv")["published_mean"].isna().all()
    assert "data.val_split=0.1): not compared" in (tmp_path / "c" / "cifar10_vgg4" / "table.md").read_text()


def test_a_held_out_split_compares_test_metrics_and_refuses_val_metrics_in_one_line(tmp_path):
    """With data.val_split > 0 the test_* metrics are read on the official test split (at the epoch
    the held-out split selects, or the last): compared with the paper's test numbers. val_* is then
    the held-out part of the training images: not compared, one note saying why."""
    held_out = {"metric": "test_top1_at_best_val", "baseline": "relu"}  # fashion_mnist_slaf's own protocol
    for act, mean in (("relu", 93.3), ("slaf", 92.97)):
        write_runs(
            tmp_path / "a",
            "fashion_mnist_slaf",
            act,
            values_with(mean, 0.2, 3),
            metric="test_top1_at_best_val",
            report=held_out,
            val_split=0.1,
        )
    assert report_main([str(tmp_path / "a"), "--published", "--no-plots"]) == 0
    root = tmp_path / "a" / "fashion_mnist_slaf"
    table = pd.read_csv(root / "table.csv").set_index("act")
    assert list(table.loc[["relu", "slaf"], "published_mean"]) == [93.56, 92.97]  # 003 Table 6
    assert set(table["published_ref"]) == {"003 Table 6"}
    assert set(table["published_mark"]) == {"published n not stated"} and table["published_p"].isna().all()
    assert "not compared" not in (root / "table.md").read_text()

    # test_top1_final on the official split is the paper's val_top1_final (001 Table 1: the ImageNet val set)
    final = {"metric": "test_top1_final", "baseline": "gelu"}
    write_runs(
        tmp_path / "b",
        "imagenet_convnext_t",
        "hermite",
        values_with(82.22, 0.064, 5),
        metric="test_top1_final",
        report=final,
        val_split=0.01,
    )
    assert report_main([str(tmp_path / "b"), "--published", "--no-plots"]) == 0
    row = pd.read_csv(tmp_path / "b" / "imagenet_convnext_t" / "table.csv").iloc[0]
    assert (row["published_mean"], row["published_n"], row["published_ref"]) == (82.22, 5, "001 Table 1")
    assert row["published_p"] == pytest.approx(1.0, abs=1e-9)

    # the same runs scored on their held-out split: not the paper's split
    write_runs(
        tmp_path / "c",
        "imagenet_convnext_t",
        "hermite",
        values_with(82.22, 0.064, 5),
        metric="val_top1_final",
        report={"metric": "val_top1_final", "baseline": "gelu"},
        val_split=0.01,
    )
    assert report_main([str(tmp_path / "c"), "--published", "--no-plots"]) == 0
    assert pd.read_csv(tmp_path / "c" / "imagenet_convnext_t" / "table.csv")["published_mean"].isna().all()
    md = (tmp_path / "c" / "imagenet_convnext_t" / "table.md").read_text()
    assert md.count("not compared") == 1
    assert "val_top1_final here on a held-out part of the training images (data.val_split=0.01): not compared" in md


def test_ablation_variants_match_their_table_and_the_recipes_act_its_seeded_table(tmp_path):
    """001 prints the recipe's Hermite in Table 1 (5 seeds) and again in Tables 3-6 (n not stated):
    `hermite` is compared with Table 1; `hermite[clamp=true]` with Table 6, `tropical[degree=1]` with Table 3."""
    final = {"metric": "val_top1_final", "baseline": "gelu"}
    for act, mean in (("hermite", 82.22), ("hermite[clamp=true]", 81.98), ("tropical[degree=1]", 81.0)):
        write_runs(
            tmp_path, "imagenet_convnext_t", act, values_with(mean, 0.1, 3), metric="val_top1_final", report=final
        )
    assert report_main([str(tmp_path / "imagenet_convnext_t"), "--published", "--no-plots"]) == 0
    table = pd.read_csv(tmp_path / "imagenet_convnext_t" / "table.csv").set_index("act")
    assert tuple(table.loc["hermite", ["published_mean", "published_n", "published_ref"]]) == (82.22, 5, "001 Table 1")
    clamp = table.loc["hermite[clamp=true]"]
    assert (clamp["published_mean"], clamp["published_ref"], clamp["published_mark"]) == (
        81.98,
        "001 Table 6",
        "published n not stated",
    )
    assert tuple(table.loc["tropical[degree=1]", ["published_mean", "published_ref"]]) == (81.60, "001 Table 3")
    assert clamp["published_diff"] == pytest.approx(0.0, abs=1e-9)


def test_runs_that_depart_from_the_packaged_recipe_say_where_beside_the_published_numbers(tmp_path):
    """A shortened run (epochs, milestones overridden) is compared with the paper's numbers, and the
    table says which keys differ from the recipe whose protocol those numbers follow; runs with the
    recipe's own config get no such note."""
    import yaml

    from visionbench.config import recipe_config, run_config

    held_out = {"metric": "test_top1_at_best_val", "baseline": "relu"}
    for folder, change in (("short", {"epochs": 2, "milestones": [1]}), ("as_recipe", {})):
        for act, mean in (("relu", 91.7), ("slaf", 90.8)):
            write_runs(
                tmp_path / folder,
                "fashion_mnist_slaf",
                act,
                values_with(mean, 0.3, 3),
                metric="test_top1_at_best_val",
                report=held_out,
                val_split=0.1,
            )
            for seed in range(3):
                config = run_config(recipe_config("fashion_mnist_slaf"), act, seed)
                config["epochs"] = change.get("epochs", config["epochs"])
                config["sched"]["milestones"] = change.get("milestones", config["sched"]["milestones"])
                run = tmp_path / folder / "fashion_mnist_slaf" / act / f"seed_{seed}"
                (run / "config.yaml").write_text(yaml.safe_dump(config))
        assert report_main([str(tmp_path / folder), "--published", "--no-plots"]) == 0
    short = (tmp_path / "short" / "fashion_mnist_slaf" / "table.md").read_text()
    assert (
        "fashion_mnist_slaf: these runs depart from the packaged recipe, whose protocol the published numbers "
        "follow — epochs: these runs 2, the recipe 24; sched.milestones: these runs [1], the recipe [12, 18]" in short
    )
    assert "depart" not in (tmp_path / "as_recipe" / "fashion_mnist_slaf" / "table.md").read_text()
    assert report_main([str(tmp_path / "short"), "--no-plots"]) == 0  # without --published: no comparison, no note
    assert "depart" not in (tmp_path / "short" / "fashion_mnist_slaf" / "table.md").read_text()
