"""The decision-boundary experiment (visionbench/experiments/boundaries.py) and its command line,
`visionbench plot boundaries`: it trains tiny MLPs, so it lives outside the report."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from visionbench.cli import main as cli_main
from visionbench.experiments.boundaries import main as boundaries_main
from visionbench.experiments.boundaries import plot_decision_boundaries, toy_data

from .test_report_plots import assert_not_blank


def test_decision_boundaries_plot_and_entry_point(tmp_path):
    state = torch.random.get_rng_state()
    threads = torch.get_num_threads()
    out = plot_decision_boundaries(
        ["relu", "gelu", "polyrelu", "tanh"], tmp_path / "b.png", seed=0, steps=30
    )  # the figure, not the fit
    assert_not_blank(out, 20_000)
    assert torch.equal(torch.random.get_rng_state(), state) and torch.get_num_threads() == threads
    assert (
        boundaries_main(
            [
                "boundaries",
                "--acts",
                "relu,silu",
                "--datasets",
                "circles,spirals",
                "--steps",
                "10",
                "--out",
                str(tmp_path / "sub" / "b2.png"),
            ]
        )
        == 0
    )
    assert_not_blank(tmp_path / "sub" / "b2.png")


@pytest.mark.parametrize("name", ["moons", "circles", "spirals", "classification"])
def test_toy_data_is_standardised_and_balanced(name):
    x, y = toy_data(name, seed=1)
    assert x.shape[1] == 2 and np.allclose(x.mean(0), 0, atol=1e-5) and set(np.unique(y)) == {0, 1}


def test_the_top_level_plot_command_reaches_the_experiment(tmp_path, capsys):
    assert cli_main(["plot", "boundaries", "--acts", "relu", "--steps", "5", "--out", str(tmp_path / "b.png")]) == 0
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG" and "wrote" in capsys.readouterr().err
