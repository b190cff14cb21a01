"""The recipe-level table of a factor sweep (report/best_of.py) picks the best setting in the metric's
direction: with a lower-is-better metric (`--metric epochs_to_90`) the fastest setting, not the slowest."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from visionbench.report import curves, load_runs, main, summarize
from visionbench.report.best_of import best_of_table
from visionbench.results.settings import setting_label

from .helpers import write_run

RECIPE = "digits_vgg4"
REPORT = {"metric": "val_top1_best", "best_of": ["model.lsuv"], "baseline": "relu"}
# per setting: the epoch at which each seed's val_top1 first reaches 90 % of its own best
REACH = {False: (2, 2, 3), True: (5, 6, 5)}


def _curve(reach: int, epochs: int = 8) -> str:
    """metrics.csv whose val_top1 is 50 before epoch `reach`, 95 from it on (best 95: 90 % is 85.5)."""
    rows = [f"{e},{50.0 if e < reach else 95.0}" for e in range(1, epochs + 1)]
    return "\n".join(["epoch,val_top1"] + rows) + "\n"


def write_sweep(root) -> None:
    """Two settings of model.lsuv (one GN column), relu and rational, three seeds each: lsuv=false converges
    in 2-3 epochs, lsuv=true in 5-6, with the same final accuracy."""
    for lsuv, reach in REACH.items():
        setting = {"model.norm": None, "model.lsuv": lsuv}
        for act in ("relu", "rational"):
            for seed, epoch in enumerate(reach):
                run = write_run(root, f"{RECIPE}/{setting_label(setting)}", act, seed, 95.0)
                (run / "metrics.csv").write_text(_curve(epoch + (act == "rational")))
                summary = json.loads((run / "summary.json").read_text())
                summary.update(recipe=RECIPE, setting=setting, report=REPORT)
                (run / "summary.json").write_text(json.dumps(summary))


def test_best_of_table_picks_the_fewest_epochs_for_epochs_to(tmp_path):
    write_sweep(tmp_path)
    runs = curves.add_metric(load_runs(tmp_path / RECIPE), "epochs_to_90")
    summaries = pd.concat(
        [summarize(g, "epochs_to_90").assign(setting=setting) for setting, g in runs.groupby("setting")],
        ignore_index=True,
    )
    table = best_of_table(summaries, ["model.lsuv"]).set_index("act")
    assert table.loc["relu", "chosen"] == "model.lsuv=false" and table.loc["relu", "mean"] == pytest.approx(7 / 3)
    assert table.loc["rational", "chosen"] == "model.lsuv=false"
    assert bool(table.loc["relu", "best"]) and bool(table.loc["rational", "second"])  # relu is the faster act


def test_report_best_of_with_a_lower_is_better_metric_chooses_the_fastest_setting(tmp_path, capsys):
    write_sweep(tmp_path)
    root = tmp_path / RECIPE
    assert main([str(root), "--metric", "epochs_to_90", "--best-of", "model.lsuv", "--no-plots"]) == 0
    table = pd.read_csv(root / "table.csv").set_index("act")
    assert table.loc["relu", "chosen"] == "model.lsuv=false" and table.loc["relu", "mean"] == pytest.approx(7 / 3)
    md = (root / "table.md").read_text()
    assert "| relu | **2.33 ± 0.58** (model.lsuv=false) |" in md
    assert "| rational | <ins>3.33 ± 0.58</ins> (model.lsuv=false) |" in md
    # the per-setting tables keep both settings, each with its own test
    for lsuv in ("false", "true"):
        assert (root / f"model.norm=null,model.lsuv={lsuv}" / "table.md").is_file()
