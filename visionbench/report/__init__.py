"""Aggregate runs into significance tables and plots; reads only the results files (DESIGN.md §6, §7).

    visionbench report results/cifar10_vgg8 [--metric val_top1_best] [--baseline relu] [--test student]

    >>> from visionbench.report import load_runs, summarize
    >>> runs = load_runs("results")                       # one row per run
    >>> summarize(runs, "val_top1_best", baseline="relu")  # one row per (recipe, act)

Files: `collect` (find and read summaries), `stats` (tests, Holm, effect size, bootstrap),
`tables` (md/csv/tex), `plots` (curves, learned shapes), `boundaries` (toy decision
boundaries), `cli` (`main`, `plot_main`).
"""
from .main import main, plot_main
from .collect import load_runs, metric_names
from ..stats.significance import bootstrap_ci, cohen_d, holm, stars
from .summary import summarize

__all__ = ["main", "plot_main", "load_runs", "metric_names", "summarize", "stars", "holm", "cohen_d", "bootstrap_ci"]
