"""Aggregate runs into significance tables and figures; reads only the results files.

    visionbench report runs/cifar10_vgg8 [--metric val_top1_best] [--baseline relu] [--test student]

    >>> from visionbench.report import load_runs, summarize
    >>> runs = load_runs("results")                       # one row per run
    >>> summarize(runs, "val_top1_best", baseline="relu")  # one row per (recipe, act)

The report stands on `visionbench.results` (the files' layout) and `visionbench.stats` (every
statistic); it imports no torch and trains nothing. Modules:

* `command`: the `visionbench report` command line; `sections`: the report of a tree, its sections as lists;
  `comparable`: is a table one comparison (runs configured alike, one version of each plugin).
* `collect`: find and read summary.json, metrics.csv and activation snapshots.
* `summary`: one row per (recipe, act): counts, mean ± std, the test against the baseline.
* `verdict`, `stopping`, `published`, `curves`, `protocol`: what is added to a table — verdicts and
  power, where `seeds=auto` stopped, the papers' numbers, convergence metrics, what the recipe scores.
* `convergence`: did the runs learn (the stall note), had the comparison converged (tail slopes, the pairs whose
  order reversed between half the epochs and the last and whether beyond noise, the verdicts' clause while it did).
* `tables` (per recipe), `best_of` (a factor sweep in its paper's layout), `suite` (across
  recipes), `papers` (`visionbench papers`): the tables, all written by `render` (md, csv, tex).
* `figures`: curves, learned activation shapes, the improvement interval plot, the CD diagram.
* `compare`: the `visionbench compare A B` command line: did B reproduce A (two trees or records)?
* `per_example`: the per-example section (per_example.md/csv) from the runs' predictions.npz: two-level
  intervals, variance share, churn, seed ensemble, calibration (docs/per_example.md).
* `noise`: a noise design's section (noise.md/csv in the recipe folder): where each activation's seed-to-seed
  variance comes from — init, data order, augmentation, the test set (docs/report.md, "Where the noise comes from").
"""

from ..stats.significance import cohen_d, difference_ci, holm, stars
from .collect import load_runs, metric_names
from .command import main
from .summary import summarize

__all__ = ["main", "load_runs", "metric_names", "summarize", "stars", "holm", "cohen_d", "difference_ci"]
