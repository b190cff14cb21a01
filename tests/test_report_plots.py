"""Report figures exist and are not blank: curves and learned shapes (report/figures.py)."""

from __future__ import annotations

import matplotlib.image as mpimg
import pytest

from visionbench.report import load_runs
from visionbench.report.figures import curve_column, make_plots, plot_act_shapes

from .helpers import write_recipe, write_run

pytestmark = pytest.mark.plots


def assert_not_blank(path, min_bytes: int = 5000):
    assert path.is_file() and path.stat().st_size > min_bytes
    img = mpimg.imread(path)
    assert img.ndim == 3 and img[..., :3].std() > 0.05  # a white canvas has std 0


def test_curves_and_act_shapes(tmp_path):
    write_recipe(tmp_path, "r", {"relu": [90.0, 91.0, 90.5], "gelu": [92.0, 91.0, "diverged"]}, epochs=6)
    write_run(tmp_path, "r", "rational", 3, 93.0, epochs=6, snapshot_epochs=(0, 2, 5))
    write_run(tmp_path, "r", "rational", 1, 93.5, epochs=6, snapshot_epochs=(0, 5))
    runs = load_runs(tmp_path / "r")
    written = make_plots(runs, "val_top1_best", baseline="relu")
    names = sorted(p.name for p in written)
    assert names == ["act_shapes_rational_seed1.png", "curves_val_top1.png"]  # lowest completed seed
    for path in written:
        assert_not_blank(path)
    out = plot_act_shapes(tmp_path / "r" / "rational" / "seed_3", tmp_path / "shapes.png")
    assert_not_blank(out)
    assert plot_act_shapes(tmp_path / "r" / "relu" / "seed_0", tmp_path / "none.png") is None  # no snapshots


def test_curve_column_maps_summary_metrics_to_epoch_columns():
    cols = ["epoch", "val_top1", "ema_val_top1", "test_top1"]
    assert curve_column("val_top1_best", cols) == "val_top1"
    assert curve_column("ema_val_top1_best", cols) == "ema_val_top1"
    assert curve_column("test_top1_at_best_val", cols) == "test_top1"
    assert curve_column("train_time_s", cols) == "val_top1"  # no curve of its own: the accuracy
    assert curve_column("val_top1_best", ["epoch"]) is None
