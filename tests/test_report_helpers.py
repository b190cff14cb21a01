"""The results-tree helpers of tests/helpers.py (`write_run`, `write_recipe`, `write_snapshot`)
read back through the report's loader as the results layout says (visionbench/results/layout.py)."""

from __future__ import annotations

from visionbench.report import load_runs

from .helpers import write_recipe, write_run


def test_helper_tree_reads_back(tmp_path):
    write_recipe(tmp_path, "toy", {"relu": [90.0, 91.0, "diverged"], "gelu": [92.0, "running"]})
    write_run(tmp_path, "toy", "gelu", 5, summary=False)  # crashed before writing a summary
    runs = load_runs(tmp_path / "toy")
    assert sorted(zip(runs.act, runs.seed.astype(int), runs.status)) == [
        ("gelu", 0, "completed"),
        ("relu", 0, "completed"),
        ("relu", 1, "completed"),
        ("relu", 2, "diverged"),
    ]
    notes = " ".join(runs.attrs["notes"])
    assert "gelu/seed_1: still running" in notes and "gelu/seed_5: no summary.json" in notes
    assert runs.loc[runs.status == "completed", "val_top1_best"].tolist() == [92.0, 90.0, 91.0]
    assert {"train_time_s", "throughput_img_s", "params", "act_params", "recipe"} <= set(runs.columns)
