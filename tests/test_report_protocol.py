"""The recipe decides what a table scores (docs/report.md, "What is scored"): EMA top-1 at the best epoch
for 004's Tiny ImageNet, the final epoch for 001, best-over-training for 004 CIFAR; the caption
names it, and --metric still overrides."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from visionbench.report import main
from visionbench.report.protocol import describe_metric, packaged_report

from .helpers import write_run

METRICS = {
    "val_top1_best": 60.0,
    "val_top1_final": 55.0,
    "ema_val_top1_best": 70.0,
    "ema_val_top1_final": 69.0,
    "best_epoch": 90,
}


def fabricate(root, recipe, acts=("gelu", "rational"), report=None):
    for i, act in enumerate(acts):
        for seed in range(3):
            metrics = {k: v + i + 0.1 * seed for k, v in METRICS.items()}
            run = write_run(root, recipe, act, seed, metrics=metrics, baseline="gelu")
            if report is not None:
                s = json.loads((run / "summary.json").read_text())
                s.update(report=report, val_split=0.0)
                (run / "summary.json").write_text(json.dumps(s))
    return root / recipe


@pytest.mark.parametrize(
    "recipe, metric",
    [
        ("tinyimagenet_vit_s8", "ema_val_top1_best"),  # 004 Sec 5.3
        ("tinyimagenet_vit_s8_nonorm", "ema_val_top1_best"),
        ("cifar10_convnext_t", "val_top1_final"),  # 001 Sec 4.3: a fixed (final) epoch
        ("imagenet_resnet50", "val_top1_final"),
        ("cifar10_vgg8", "val_top1_best"),  # 004 Table 6: best test accuracy over training
    ],
)
def test_report_scores_the_metric_the_recipe_declares(tmp_path, capsys, recipe, metric):
    assert packaged_report(recipe)["metric"] == metric
    recipe_dir = fabricate(tmp_path, recipe)  # summaries without a report block: the packaged recipe decides
    assert main([str(recipe_dir), "--no-plots"]) == 0
    out = capsys.readouterr().out
    table = pd.read_csv(recipe_dir / "table.csv")
    assert set(table["metric"]) == {metric}
    assert table.set_index("act").loc["gelu", "mean"] == pytest.approx(METRICS[metric] + 0.1)
    assert f"Metric `{metric}`" in out and f"### {recipe} — {metric}" in out


def test_the_runs_recorded_report_block_wins_and_metric_overrides_it(tmp_path, capsys):
    recipe_dir = fabricate(tmp_path, "tinyimagenet_vit_s8", report={"metric": "val_top1_final", "baseline": "gelu"})
    assert main([str(recipe_dir), "--no-plots"]) == 0
    assert set(pd.read_csv(recipe_dir / "table.csv")["metric"]) == {"val_top1_final"}
    assert "official test/val split" in capsys.readouterr().out  # the runs recorded val_split 0
    assert main([str(recipe_dir), "--no-plots", "--metric", "ema_val_top1_final"]) == 0
    assert set(pd.read_csv(recipe_dir / "table.csv")["metric"]) == {"ema_val_top1_final"}


def test_a_declared_metric_the_runs_lack_falls_back_with_a_note(tmp_path, capsys):
    for seed in range(2):  # EMA off: no ema_* metrics
        write_run(tmp_path, "tinyimagenet_vit_s8", "gelu", seed, 50.0 + seed, baseline="gelu")
    assert main([str(tmp_path / "tinyimagenet_vit_s8"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "report.metric is 'ema_val_top1_best', which no run has; scored val_top1_best instead" in out


def test_each_recipe_of_a_tree_gets_its_own_metric(tmp_path, capsys):
    fabricate(tmp_path, "tinyimagenet_vit_s8")
    fabricate(tmp_path, "cifar10_convnext_t")
    assert main([str(tmp_path), "--no-plots"]) == 0
    assert set(pd.read_csv(tmp_path / "tinyimagenet_vit_s8" / "table.csv")["metric"]) == {"ema_val_top1_best"}
    assert set(pd.read_csv(tmp_path / "cifar10_convnext_t" / "table.csv")["metric"]) == {"val_top1_final"}


@pytest.mark.parametrize(
    "metric, val_split, words",
    [
        ("val_top1_best", 0.0, ["best over training epochs", "official test/val split", "optimistic"]),
        ("ema_val_top1_best", 0.0, ["of the EMA weights", "best over training epochs"]),
        ("val_top1_final", 0.0, ["at the final epoch"]),
        ("test_top1_at_best_val", 0.2, ["at the epoch of best validation top-1", "official test split"]),
        ("val_top1_best", 0.2, ["held-out validation split"]),
        ("throughput_img_s", None, ["`throughput_img_s`"]),
    ],
)
def test_metric_descriptions_name_aggregate_and_split(metric, val_split, words):
    text = describe_metric(metric, val_split)
    assert all(w in text for w in words), text
    if val_split:
        assert "optimistic" not in text
