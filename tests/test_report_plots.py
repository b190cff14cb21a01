"""Report plots exist and are not blank: curves, learned shapes, toy decision boundaries."""
from __future__ import annotations

import matplotlib.image as mpimg
import numpy as np
import pytest
import torch
from .helpers import write_recipe, write_run

from visionbench.report import load_runs, plot_main
from visionbench.experiments.boundaries import plot_decision_boundaries, toy_data
from visionbench.report.plots import curve_column, make_plots, plot_act_shapes


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


def test_decision_boundaries_plot_and_entry_point(tmp_path, capsys):
    state = torch.random.get_rng_state()
    threads = torch.get_num_threads()
    out = plot_decision_boundaries(["relu", "gelu", "polyrelu", "tanh"], tmp_path / "b.png", seed=0, steps=150)
    assert_not_blank(out, 20_000)
    assert torch.equal(torch.random.get_rng_state(), state) and torch.get_num_threads() == threads
    assert plot_main(["boundaries", "--acts", "relu,silu", "--datasets", "circles,spirals", "--steps", "50",
                      "--out", str(tmp_path / "sub" / "b2.png")]) == 0
    assert_not_blank(tmp_path / "sub" / "b2.png")
    assert plot_main(["boundaries", "--acts", "relu,nope", "--out", str(tmp_path / "x.png")]) == 2
    assert "unknown activation 'nope'" in capsys.readouterr().err
    assert plot_main(["boundaries", "--datasets", "xor", "--out", str(tmp_path / "x.png")]) == 2
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("name", ["moons", "circles", "spirals", "classification"])
def test_toy_data_is_standardised_and_balanced(name):
    x, y = toy_data(name, seed=1)
    assert x.shape[1] == 2 and np.allclose(x.mean(0), 0, atol=1e-5) and set(np.unique(y)) == {0, 1}
